/* attend.c - `mhabench attend`: the attention core on q, k, v read from .npy
 * files (fp32, bf16, fp16; int8 K/V with row scales; window, softcap,
 * sinks; dense, packed ragged or paged KV layouts with int32 index files),
 * its output written as .npy (harness/io/io.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "attend.h"
#include "io.h"
#include "mha_private.h"
#include "util.h"

enum {
    A_Q = O_OWN,
    A_K,
    A_V,
    A_KV_DTYPE,
    A_K_SCALE,
    A_V_SCALE,
    A_WINDOW,
    A_SOFTCAP,
    A_SINKS,
    A_CU_Q,
    A_CU_KV,
    A_K_CACHE,
    A_V_CACHE,
    A_BLOCK_TABLE,
    A_SEQ_LENS_KV
};
static const opt_row ATTEND_ROWS[] = {
    IO_KERNEL("a kernel from `mhabench list`, or auto (mha_select's choice)"),
    {"q", required_argument, A_Q, 0, "Q.npy", OPT_REQUIRED,
     "queries [B,H,Nq,d]; [Tq,H,d] with --cu-seqlens-q"},
    {"k", required_argument, A_K, 0, "K.npy", 0,
     "keys [B,G,Nkv,d]; [Tkv,G,d] with --cu-seqlens-kv (required unless --k-cache)"},
    {"v", required_argument, A_V, 0, "V.npy", 0,
     "values [B,G,Nkv,d_v]; [Tkv,G,d_v] with --cu-seqlens-kv (required unless --v-cache)"},
    IO_OUT("O.npy", "the output [B,H,Nq,d_v]; [Tq,H,d_v] with --cu-seqlens-q"),
    IO_CAUSAL("bottom-right aligned mask: query i sees key j iff j <= i + Nkv - Nq"),
    IO_SCALE("softmax scale (default 1/sqrt(d))"),
    IO_THREADS,
    IO_DTYPE("Q/O dtype: fp32 (default), bf16, fp16; float32 files are rounded to it on load "
             "(nearest even)"),
    {"kv-dtype", required_argument, A_KV_DTYPE, 0, "D", 0,
     "K/V storage: bf16, fp16 or int8 (default: --dtype); int8 quantises float32 files per (b, "
     "head, token) row on load"},
    IO_OUT_DTYPE,
    {"k-scale", required_argument, A_K_SCALE, 0, "KS.npy", 0,
     "the '<f4' [B,G,Nkv] row scales of an int8 K file"},
    {"v-scale", required_argument, A_V_SCALE, 0, "VS.npy", 0,
     "the '<f4' [B,G,Nkv] row scales of an int8 V file"},
    {"window", required_argument, A_WINDOW, 0, "L,R", 0,
     "sliding window: query i sees keys i+Nkv-Nq-L .. i+Nkv-Nq+R (-1 = unbounded on that side; "
     "with --causal R is 0 in effect)"},
    {"softcap", required_argument, A_SOFTCAP, 0, "C", 0,
     "logit softcap C > 0: s = C tanh(s / C) on the scaled score"},
    {"sinks", required_argument, A_SINKS, 0, "S.npy", 0,
     "attention sinks: '<f4' [H], one logit per query head that takes softmax mass and gives "
     "no value"},
    {"cu-seqlens-q", required_argument, A_CU_Q, 0, "CQ.npy", 0,
     "a packed ragged batch: '<i4' [B+1] row offsets of the B sequences into q and out "
     "(0 first, non-decreasing, Tq last)"},
    {"cu-seqlens-kv", required_argument, A_CU_KV, 0, "CK.npy", 0,
     "packed keys: '<i4' [B+1] row offsets into k and v (0 first, Tkv last)"},
    {"k-cache", required_argument, A_K_CACHE, 0, "KC.npy", 0,
     "a paged KV cache instead of --k: the key pool, NB blocks of BS tokens [NB,BS,G,d]"},
    {"v-cache", required_argument, A_V_CACHE, 0, "VC.npy", 0,
     "the value pool [NB,BS,G,d_v] (with --k-cache)"},
    {"block-table", required_argument, A_BLOCK_TABLE, 0, "BT.npy", 0,
     "'<i4' [B,MB]: key t of sequence b is slot t % BS of block BT[b][t / BS]"},
    {"seq-lens-kv", required_argument, A_SEQ_LENS_KV, 0, "SL.npy", 0,
     "'<i4' [B]: the keys of each sequence in the paged cache"},
    OPTS_HELP,
};

static void attend_usage(FILE *f) {
    opts_usage(f, "attend", NULL, ATTEND_ROWS, sizeof ATTEND_ROWS / sizeof *ATTEND_ROWS, NULL);
    fputs("  Runs the attention core softmax(scale * q k^T + mask) v with kernel K.\n"
          "  q: [B,H,Nq,d]; k: [B,G,Nkv,d], v: [B,G,Nkv,d_v] with G dividing H\n"
          "  (grouped-query; d_v is v's, may differ from d where the kernel takes it);\n"
          "  out: [B,H,Nq,d_v]. C-order .npy files: '<f4' float32, or a typed file\n"
          "  ('<f2' fp16, '<u2' holding bf16 bits, '|i1' int8) of the dtype asked for.\n"
          "  A packed ragged batch (--cu-seqlens-q, --cu-seqlens-kv) or a paged KV\n"
          "  cache (--cu-seqlens-q, --k-cache, --v-cache, --block-table, --seq-lens-kv;\n"
          "  index files '<i4' int32) runs on the kernels that take the layout\n"
          "  (`mhabench list`); causal and --window align per sequence.\n",
          f);
    opts_print(f, ATTEND_ROWS, sizeof ATTEND_ROWS / sizeof *ATTEND_ROWS);
}

static void free_attend_inputs(attend_inputs *in) {
    npy_free(&in->sinks);
    for (int i = 0; i < 4; i++) npy_free(&in->ix[i]);
    for (int i = 0; i < 3; i++) {
        npy_free(&in->a[i]);
        mha_free(in->conv[i]);
    }
    for (int i = 0; i < 2; i++) {
        npy_free(&in->sc[i]);
        mha_free(in->qsc[i]);
    }
}

/* Checks q, k and v against each other: rank 4, no empty dimension, k and v
 * alike, the same batch and head_dim as q, kv heads dividing query heads.
 * 0, or -1 after a message naming the tensors and their shapes. */
static int check_attend_shapes(const attend_inputs *in) {
    const npy_array *q = &in->a[0], *k = &in->a[1], *v = &in->a[2];
    char s1[160], s2[160];
    for (int i = 0; i < 3; i++)
        if (in->a[i].ndim != 4) {
            errorf("%s: %s has rank %d, shape %s: expected a rank-4 [B,H,N,d] tensor", in->path[i],
                   ATTEND_NAME[i], in->a[i].ndim, shape_str(&in->a[i], s1, sizeof s1));
            return -1;
        }
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++)
            if (in->a[i].shape[j] == 0) {
                errorf("%s: %s has an empty dimension, shape %s", in->path[i], ATTEND_NAME[i],
                       shape_str(&in->a[i], s1, sizeof s1));
                return -1;
            }
    if (memcmp(k->shape, v->shape, 3 * sizeof k->shape[0]) != 0) { /* d_v may differ */
        errorf("k and v shapes differ in [B,G,Nkv]: k %s, v %s", shape_str(k, s1, sizeof s1),
               shape_str(v, s2, sizeof s2));
        return -1;
    }
    if (q->shape[0] != k->shape[0]) {
        errorf("batch mismatch: q %s has B=%lld, k %s has B=%lld", shape_str(q, s1, sizeof s1),
               (long long)q->shape[0], shape_str(k, s2, sizeof s2), (long long)k->shape[0]);
        return -1;
    }
    if (q->shape[3] != k->shape[3]) {
        errorf("head_dim mismatch: q %s has d=%lld, k %s has d=%lld", shape_str(q, s1, sizeof s1),
               (long long)q->shape[3], shape_str(k, s2, sizeof s2), (long long)k->shape[3]);
        return -1;
    }
    if (q->shape[1] % k->shape[1] != 0) {
        errorf("kv heads %lld (k %s) do not divide query heads %lld (q %s)", (long long)k->shape[1],
               shape_str(k, s2, sizeof s2), (long long)q->shape[1], shape_str(q, s1, sizeof s1));
        return -1;
    }
    return 0;
}

/* Reads tensor i: a float32 file, or a typed one of the dtype it is to be
 * stored in (want); any other dtype is an error naming the file, what it
 * holds and the option that would read it. 0, or -1 after a message. */
static int load_typed(attend_inputs *in, int i, mha_dtype want) {
    npy_array *a = &in->a[i];
    if (load_any(in->path[i], a) != 0) return -1;
    if (i == 0 && a->dtype == MHA_I8) {
        errorf("%s: q holds int8 ('%s'): int8 is a K/V dtype only (q and out are fp32, bf16 or "
               "fp16)",
               in->path[i], npy_descr(a->dtype));
        return -1;
    }
    return typed_fits(a, in->path[i], ATTEND_NAME[i], want, i == 0 ? "Q/O" : "K/V",
                      i == 0 ? "--dtype" : "--kv-dtype");
}

/* Brings tensor i (checked shape) to its storage dtype want: a float32 file
 * is rounded (bf16/fp16) or quantised per row with its own scales (int8); an
 * int8 file takes its scales from --k-scale / --v-scale ('<f4', [B,G,Nkv]).
 * 0, or -1 after a message naming the file. */
static int store_as(attend_inputs *in, int i, mha_dtype want) {
    const npy_array *a = &in->a[i];
    const char *sopt = i == 1 ? "--k-scale" : "--v-scale";
    const char *spath = i > 0 ? in->scale_path[i - 1] : NULL;
    if (spath && want != MHA_I8) {
        errorf("%s %s: scales go with an int8 %s (--kv-dtype int8), but the K/V dtype is %s", sopt,
               spath, ATTEND_NAME[i], mha_dtype_name(want));
        return -1;
    }
    if (want == MHA_F32) return 0;
    if (want == MHA_I8 && a->dtype == MHA_F32) {
        if (spath) {
            errorf("%s %s: %s is float32 and is quantised on load with its own scales; give an "
                   "int8 ('|i1') file with its scales, or no %s",
                   sopt, spath, in->path[i], sopt);
            return -1;
        }
        int64_t rows = 1; /* one scale per row: the dims before the last */
        for (int j = 0; j < a->ndim - 1; j++) rows *= a->shape[j];
        const int64_t d = a->shape[a->ndim - 1];
        in->conv[i] = mha_alloc(a->count);
        in->qsc[i - 1] = mha_alloc((size_t)rows * sizeof(float));
        if (!in->conv[i] || !in->qsc[i - 1]) exit_out_of_memory("quantising to int8");
        mha_quantize_rows_i8(a->data, rows, d, d, in->conv[i], d, in->qsc[i - 1]);
        return 0;
    }
    if (want == MHA_I8) { /* an int8 file: its scales */
        char s1[160], s2[160], s3[160], err[512];
        npy_array rows = *a; /* the shape of its scales: a's but the last dim */
        rows.ndim = a->ndim - 1;
        shape_str(&rows, s3, sizeof s3);
        if (!spath) {
            errorf("%s: %s is int8 ('|i1'): give its row scales with %s S.npy ('<f4', %s)",
                   in->path[i], ATTEND_NAME[i], sopt, s3);
            return -1;
        }
        npy_array *sc = &in->sc[i - 1];
        if (npy_read_typed(spath, MHA_DTYPE_BIT(MHA_F32), sc, err, sizeof err) != MHA_OK) {
            errorf("%s: %s", sopt, err);
            return -1;
        }
        if (sc->ndim != rows.ndim ||
            memcmp(sc->shape, a->shape, (size_t)rows.ndim * sizeof a->shape[0]) != 0) {
            errorf("%s: %s scales have shape %s, expected %s (one per row of %s %s)", spath,
                   ATTEND_NAME[i], shape_str(sc, s1, sizeof s1), s3, in->path[i],
                   shape_str(a, s2, sizeof s2));
            return -1;
        }
        return 0;
    }
    round_on_load(a, want, &in->conv[i]); /* float32 rounded to bf16/fp16 */
    return 0;
}

/* --window, --softcap and --sinks (the sinks file is read after q, whose
 * heads it must match): 0, or -1 after a message naming the value. */
static int parse_variants(attend_inputs *in) {
    if (in->window_s) {
        /* 2^40 keys: past any sequence, so an edge that large is unbounded */
        const int64_t big = (int64_t)1 << 40;
        const int n = parse_i64_list("--window", in->window_s, -big, big, in->window_lr, 2);
        if (n < 0) return -1;
        if (n != 2) {
            errorf("--window '%s': expected L,R (keys left and right of the diagonal, -1 = "
                   "unbounded)",
                   in->window_s);
            return -1;
        }
        for (int i = 0; i < 2; i++)
            if (in->window_lr[i] < -1) {
                errorf("--window '%s': %s = %lld is below -1 (-1 = unbounded, else keys)",
                       in->window_s, i ? "R" : "L", (long long)in->window_lr[i]);
                return -1;
            }
        in->window = 1;
    }
    if (in->softcap_s) {
        double c;
        if (!parse_double("--softcap", in->softcap_s, 0.0, 1e30, 1, &c)) return -1;
        in->softcap = (float)c;
    }
    return 0;
}

static int load_sinks(attend_inputs *in, int64_t heads) {
    if (!in->sinks_path) return 0;
    char err[512], s1[160];
    if (npy_read_typed(in->sinks_path, MHA_DTYPE_BIT(MHA_F32), &in->sinks, err, sizeof err) !=
        MHA_OK) {
        errorf("--sinks: %s", err);
        return -1;
    }
    if (in->sinks.ndim != 1 || in->sinks.shape[0] != heads) {
        errorf("--sinks %s: shape %s, expected [%lld] (one '<f4' logit per query head of q)",
               in->sinks_path, shape_str(&in->sinks, s1, sizeof s1), (long long)heads);
        return -1;
    }
    return 0;
}

/* Reads q, k and v, checks them and stores them in their dtypes: 0, or -1
 * after a message. */
static int load_attend_inputs(const io_opts *o, attend_inputs *in) {
    if (parse_variants(in) != 0 || attend_load_index_files(in) != 0) return -1;
    in->dt = o->dtype;
    in->kv = o->dtype;
    if (in->kv_dtype_s) {
        if (!dtype_named("--kv-dtype", in->kv_dtype_s, 1, &in->kv)) return -1;
        if (in->dt != MHA_F32 && in->kv == MHA_F32) {
            errorf("--kv-dtype fp32 with --dtype %s: an fp32 cache under %s queries is not "
                   "offered (use --kv-dtype %s, or --dtype fp32)",
                   mha_dtype_name(in->dt), mha_dtype_name(in->dt), mha_dtype_name(in->dt));
            return -1;
        }
    }
    for (int i = 0; i < 3; i++)
        if (load_typed(in, i, i == 0 ? in->dt : in->kv) != 0) return -1;
    if ((in->layout == MHA_LAYOUT_DENSE ? check_attend_shapes(in)
                                        : attend_check_layout_shapes(in)) != 0)
        return -1;
    if (load_sinks(in, in->a[0].shape[1]) != 0) return -1;
    for (int i = 0; i < 3; i++)
        if (store_as(in, i, i == 0 ? in->dt : in->kv) != 0) return -1;
    return 0;
}

/* The problem of the checked inputs in their layout, and the data of the
 * call beyond q, k and v (the sinks, the index arrays). */
static mha_problem attend_problem(const io_opts *o, const attend_inputs *in, mha_extras *x) {
    const npy_array *q = &in->a[0], *k = &in->a[1], *v = &in->a[2];
    /* dense q [B,H,Nq,d], k [B,G,Nkv,d]; packed [Tq,H,d], [Tkv,G,d]; paged
     * [Tq,H,d], [NB,BS,G,d] */
    const int qr = q->ndim, kr = k->ndim;
    const int64_t d = q->shape[qr - 1], dv = v->shape[kr - 1];
    mha_problem p = {
        .batch = q->shape[0],
        .heads = q->shape[1],
        .kv_heads = in->layout == MHA_LAYOUT_DENSE ? k->shape[1] : k->shape[kr - 2],
        .seq_q = qr == 4 ? q->shape[2] : 0,
        .seq_kv = kr == 4 && in->layout == MHA_LAYOUT_DENSE ? k->shape[2] : 0,
        .head_dim = d,
        .causal = o->causal,
        .scale = o->scale,
        .dtype = in->dt,
        .kv_dtype = in->kv == in->dt ? MHA_F32 : in->kv,
        .window = in->window,
        .window_left = in->window_lr[0],
        .window_right = in->window_lr[1],
        .softcap = in->softcap,
        .sinks = in->sinks_path != NULL,
        .head_dim_v = dv != d ? dv : 0,
    };
    *x = (mha_extras){.sinks = p.sinks ? in->sinks.data : NULL};
    if (in->layout != MHA_LAYOUT_DENSE) attend_layout_problem(in, &p, x);
    return p;
}

/* q, k, v and out as views of p's layout: dense [B,H,N,d]; packed and paged
 * token rows [T,H,d] (k and v packed [Tkv,G,d] or pools [NB,BS,G,d], int8
 * scales [Tkv,G] or [NB,BS,G]). */
static void attend_views(const attend_inputs *in, const mha_problem *p, void *out, mha_tensor t[3],
                         mha_tensor_mut *to) {
    const int64_t H = p->heads, G = p->kv_heads, d = p->head_dim, dv = mha_problem_head_dim_v(p);
    if (p->layout == MHA_LAYOUT_DENSE) {
        t[0] = mha_view_typed(attend_data(in, 0), in->dt, NULL, H, p->seq_q, d);
        t[1] = mha_view_typed(attend_data(in, 1), in->kv, attend_scales(in, 1), G, p->seq_kv, d);
        t[2] = mha_view_typed(attend_data(in, 2), in->kv, attend_scales(in, 2), G, p->seq_kv, dv);
        *to = mha_view_typed_mut(out, in->dt, H, p->seq_q, dv);
        return;
    }
    attend_layout_views(in, p, out, t, to);
}

/* " window=.. softcap=.. sinks d_v=.. packed Tq=.. Tkv=.." for the summary line. */
static void describe_variants(const mha_problem *p, char *var, size_t len) {
    size_t vl = 0;
    var[0] = '\0';
    if (p->window)
        vl += (size_t)snprintf(var, len, " window=%lld,%lld", (long long)p->window_left,
                               (long long)p->window_right);
    if (p->softcap > 0 && vl < len)
        vl += (size_t)snprintf(var + vl, len - vl, " softcap=%g", (double)p->softcap);
    if (p->sinks && vl < len) vl += (size_t)snprintf(var + vl, len - vl, " sinks");
    if (p->head_dim_v && vl < len)
        vl += (size_t)snprintf(var + vl, len - vl, " d_v=%lld", (long long)p->head_dim_v);
    if (p->layout == MHA_LAYOUT_PACKED && vl < len)
        snprintf(var + vl, len - vl, " packed Tq=%lld Tkv=%lld", (long long)p->total_q,
                 (long long)p->total_kv);
    if (p->layout == MHA_LAYOUT_PAGED && vl < len)
        snprintf(var + vl, len - vl, " paged Tq=%lld blocks=%lldx%lld max_blocks=%lld",
                 (long long)p->total_q, (long long)p->num_blocks, (long long)p->block_size,
                 (long long)p->max_blocks);
}

/* Runs the attention core on the checked inputs, writes --out and prints the
 * summary line: 0, or -1 after a message. */
static int run_attend(const io_opts *o, const attend_inputs *in, io_run *r) {
    mha_extras x;
    const mha_problem p = attend_problem(o, in, &x);
    if (mha_problem_validate(&p) != MHA_OK) {
        errorf("%s", mha_last_error());
        return -1;
    }
    if (attend_check_index_values(in, &p, &x) != 0) return -1;
    if (choose_kernel(o, &p, r) != 0) return -1;
    /* the output has q's shape with v's head dim */
    const int64_t dv = mha_problem_head_dim_v(&p);
    const int dense = p.layout == MHA_LAYOUT_DENSE;
    const int64_t oshape[4] = {dense ? p.batch : p.total_q, p.heads, dense ? p.seq_q : dv, dv};
    const int ondim = dense ? 4 : 3;
    const size_t ocount = (size_t)(oshape[0] * oshape[1] * oshape[2] * (dense ? dv : 1));
    if (alloc_buffers(r, mha_workspace_size(r->kern, &p, &r->opt, &r->wbytes), ocount) != 0)
        return -1;
    mha_tensor t[3];
    mha_tensor_mut to;
    attend_views(in, &p, r->out, t, &to);
    meas_call call =
        meas_call_attend(r->kern, &p, &r->opt, &t[0], &t[1], &t[2], &to, r->ws, r->wbytes);
    call.x = x;
    double dt;
    if (run_and_write(r, &call, o->out, oshape, ondim, ocount, in->dt, o->out_dtype, &dt) != 0)
        return -1;
    char dts[80] = "";
    if (in->dt != MHA_F32 || in->kv != MHA_F32 || o->out_dtype != MHA_F32)
        snprintf(dts, sizeof dts, " dtype=%s kv_dtype=%s out_dtype=%s", mha_dtype_name(in->dt),
                 mha_dtype_name(in->kv), mha_dtype_name(o->out_dtype));
    char var[192];
    describe_variants(&p, var, sizeof var);
    printf("kernel %s block_q=%d block_kv=%d split=%d: attend B=%lld H=%lld kv_heads=%lld "
           "Nq=%lld Nkv=%lld d=%lld causal=%d%s%s threads=%d: %.3f ms, %.2f GFLOP/s -> %s\n",
           mha_kernel_name(r->kern), r->opt.block_q, r->opt.block_kv, r->opt.split,
           (long long)p.batch, (long long)p.heads, (long long)p.kv_heads, (long long)p.seq_q,
           (long long)p.seq_kv, (long long)p.head_dim, o->causal, var, dts,
           mha_resolve_threads(&r->opt), dt * 1e3,
           dt > 0 ? mha_problem_flops_ex(&p, &x) / dt * 1e-9 : 0.0, o->out);
    return 0;
}

int cmd_attend(int argc, char **argv) {
    io_opts o;
    attend_inputs in = {0};
    const io_cmd cmd = {"attend",
                        attend_usage,
                        ATTEND_ROWS,
                        sizeof ATTEND_ROWS / sizeof *ATTEND_ROWS,
                        {&in.path[0], &in.path[1], &in.path[2], &in.kv_dtype_s, &in.scale_path[0],
                         &in.scale_path[1], &in.window_s, &in.softcap_s, &in.sinks_path,
                         &in.ix_path[IX_CU_Q], &in.ix_path[IX_CU_KV], &in.cache_path[0],
                         &in.cache_path[1], &in.ix_path[IX_TABLE], &in.ix_path[IX_LENS]}};
    int parsed = parse_io_opts(&cmd, argc, argv, &o);
    if (parsed != 0) return parsed > 0 ? 0 : EXIT_USAGE;
    if (attend_choose_layout(&in) != 0 || check_before_inputs(&o) != 0) return EXIT_USAGE;

    io_run r = {0};
    int failed = load_attend_inputs(&o, &in) != 0 || run_attend(&o, &in, &r) != 0;
    free_run(&r);
    free_attend_inputs(&in);
    return failed ? EXIT_USAGE : 0;
}
