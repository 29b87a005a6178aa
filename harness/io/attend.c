/* attend.c - `mhabench attend`: the attention core on q, k, v read from .npy
 * files (fp32, bf16, fp16; int8 K/V with row scales; window, softcap,
 * sinks), its output written as .npy (harness/io/io.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "io.h"
#include "mha_private.h"
#include "util.h"

enum { A_Q = O_OWN, A_K, A_V, A_KV_DTYPE, A_K_SCALE, A_V_SCALE, A_WINDOW, A_SOFTCAP, A_SINKS };
static const opt_row ATTEND_ROWS[] = {
    IO_KERNEL("a kernel from `mhabench list`, or auto (mha_select's choice)"),
    {"q", required_argument, A_Q, 0, "Q.npy", OPT_REQUIRED, "queries [B,H,Nq,d]"},
    {"k", required_argument, A_K, 0, "K.npy", OPT_REQUIRED, "keys [B,G,Nkv,d]"},
    {"v", required_argument, A_V, 0, "V.npy", OPT_REQUIRED, "values [B,G,Nkv,d_v]"},
    IO_OUT("O.npy", "the output [B,H,Nq,d_v]"),
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
    OPTS_HELP,
};

static void attend_usage(FILE *f) {
    opts_usage(f, "attend", NULL, ATTEND_ROWS, sizeof ATTEND_ROWS / sizeof *ATTEND_ROWS, NULL);
    fputs("  Runs the attention core softmax(scale * q k^T + mask) v with kernel K.\n"
          "  q: [B,H,Nq,d]; k: [B,G,Nkv,d], v: [B,G,Nkv,d_v] with G dividing H\n"
          "  (grouped-query; d_v is v's, may differ from d where the kernel takes it);\n"
          "  out: [B,H,Nq,d_v]. C-order .npy files: '<f4' float32, or a typed file\n"
          "  ('<f2' fp16, '<u2' holding bf16 bits, '|i1' int8) of the dtype asked for.\n",
          f);
    opts_print(f, ATTEND_ROWS, sizeof ATTEND_ROWS / sizeof *ATTEND_ROWS);
}

/* attend's tensors: q, k and v, in the order they are read. */
static const char *const ATTEND_NAME[3] = {"q", "k", "v"};

typedef struct {
    const char *path[3];       /* --q, --k, --v */
    const char *scale_path[2]; /* --k-scale, --v-scale */
    const char *kv_dtype_s;    /* --kv-dtype */
    const char *window_s;      /* --window L,R */
    const char *softcap_s;     /* --softcap C */
    const char *sinks_path;    /* --sinks S.npy */
    int window;                /* parsed: a window given, its edges */
    int64_t window_lr[2];
    float softcap;
    npy_array sinks;  /* '<f4' [H] */
    mha_dtype dt, kv; /* the problem's dtype and K/V storage */
    npy_array a[3];   /* as read */
    npy_array sc[2];  /* int8 scales as read */
    void *conv[3];    /* data converted on load, else NULL */
    float *qsc[2];    /* int8 scales made on load, else NULL */
} attend_inputs;

static void free_attend_inputs(attend_inputs *in) {
    npy_free(&in->sinks);
    for (int i = 0; i < 3; i++) {
        npy_free(&in->a[i]);
        mha_free(in->conv[i]);
    }
    for (int i = 0; i < 2; i++) {
        npy_free(&in->sc[i]);
        mha_free(in->qsc[i]);
    }
}

/* The data of tensor i as the kernel reads it, and its int8 scales. */
static const void *attend_data(const attend_inputs *in, int i) {
    return in->conv[i] ? in->conv[i] : in->a[i].raw;
}
static const float *attend_scales(const attend_inputs *in, int i) {
    if (i == 0 || in->kv != MHA_I8) return NULL;
    return in->qsc[i - 1] ? in->qsc[i - 1] : in->sc[i - 1].data;
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
        const int64_t rows = a->shape[0] * a->shape[1] * a->shape[2], d = a->shape[3];
        in->conv[i] = mha_alloc(a->count);
        in->qsc[i - 1] = mha_alloc((size_t)rows * sizeof(float));
        if (!in->conv[i] || !in->qsc[i - 1]) exit_out_of_memory("quantising to int8");
        mha_quantize_rows_i8(a->data, rows, d, d, in->conv[i], d, in->qsc[i - 1]);
        return 0;
    }
    if (want == MHA_I8) { /* an int8 file: its scales */
        char s1[160], s2[160], err[512];
        if (!spath) {
            errorf("%s: %s is int8 ('|i1'): give its row scales with %s S.npy ('<f4', [%lld, %lld, "
                   "%lld])",
                   in->path[i], ATTEND_NAME[i], sopt, (long long)a->shape[0],
                   (long long)a->shape[1], (long long)a->shape[2]);
            return -1;
        }
        npy_array *sc = &in->sc[i - 1];
        if (npy_read_typed(spath, MHA_DTYPE_BIT(MHA_F32), sc, err, sizeof err) != MHA_OK) {
            errorf("%s: %s", sopt, err);
            return -1;
        }
        if (sc->ndim != 3 || memcmp(sc->shape, a->shape, 3 * sizeof a->shape[0]) != 0) {
            errorf("%s: %s scales have shape %s, expected [%lld, %lld, %lld] (one per row of %s "
                   "%s)",
                   spath, ATTEND_NAME[i], shape_str(sc, s1, sizeof s1), (long long)a->shape[0],
                   (long long)a->shape[1], (long long)a->shape[2], in->path[i],
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
    if (parse_variants(in) != 0) return -1;
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
    if (check_attend_shapes(in) != 0) return -1;
    if (load_sinks(in, in->a[0].shape[1]) != 0) return -1;
    for (int i = 0; i < 3; i++)
        if (store_as(in, i, i == 0 ? in->dt : in->kv) != 0) return -1;
    return 0;
}

/* Runs the attention core on the checked inputs, writes --out and prints the
 * summary line: 0, or -1 after a message. */
static int run_attend(const io_opts *o, const attend_inputs *in, io_run *r) {
    const npy_array *q = &in->a[0], *k = &in->a[1], *v = &in->a[2];
    const int64_t dv = v->shape[3];
    const mha_problem p = {
        .batch = q->shape[0],
        .heads = q->shape[1],
        .kv_heads = k->shape[1],
        .seq_q = q->shape[2],
        .seq_kv = k->shape[2],
        .head_dim = q->shape[3],
        .causal = o->causal,
        .scale = o->scale,
        .dtype = in->dt,
        .kv_dtype = in->kv == in->dt ? MHA_F32 : in->kv,
        .window = in->window,
        .window_left = in->window_lr[0],
        .window_right = in->window_lr[1],
        .softcap = in->softcap,
        .sinks = in->sinks_path != NULL,
        .head_dim_v = dv != q->shape[3] ? dv : 0,
    };
    if (mha_problem_validate(&p) != MHA_OK) {
        errorf("%s", mha_last_error());
        return -1;
    }
    if (choose_kernel(o, &p, r) != 0) return -1;
    const mha_tensor tq =
        mha_view_typed(attend_data(in, 0), in->dt, NULL, p.heads, p.seq_q, p.head_dim);
    const mha_tensor tk = mha_view_typed(attend_data(in, 1), in->kv, attend_scales(in, 1),
                                         p.kv_heads, p.seq_kv, p.head_dim);
    const mha_tensor tv =
        mha_view_typed(attend_data(in, 2), in->kv, attend_scales(in, 2), p.kv_heads, p.seq_kv, dv);
    /* the output has q's shape with v's head dim */
    const int64_t oshape[4] = {q->shape[0], q->shape[1], q->shape[2], dv};
    const size_t ocount = (size_t)(oshape[0] * oshape[1] * oshape[2] * dv);
    if (alloc_buffers(r, mha_workspace_size(r->kern, &p, &r->opt, &r->wbytes), ocount) != 0)
        return -1;
    mha_tensor_mut to = mha_view_typed_mut(r->out, in->dt, p.heads, p.seq_q, dv);
    meas_call call = meas_call_attend(r->kern, &p, &r->opt, &tq, &tk, &tv, &to, r->ws, r->wbytes);
    call.x.sinks = p.sinks ? in->sinks.data : NULL;
    double dt;
    if (run_and_write(r, &call, o->out, oshape, 4, ocount, in->dt, o->out_dtype, &dt) != 0)
        return -1;
    char dts[80] = "";
    if (in->dt != MHA_F32 || in->kv != MHA_F32 || o->out_dtype != MHA_F32)
        snprintf(dts, sizeof dts, " dtype=%s kv_dtype=%s out_dtype=%s", mha_dtype_name(in->dt),
                 mha_dtype_name(in->kv), mha_dtype_name(o->out_dtype));
    char var[128] = "";
    size_t vl = 0;
    if (p.window)
        vl += (size_t)snprintf(var, sizeof var, " window=%lld,%lld", (long long)p.window_left,
                               (long long)p.window_right);
    if (p.softcap > 0 && vl < sizeof var)
        vl += (size_t)snprintf(var + vl, sizeof var - vl, " softcap=%g", (double)p.softcap);
    if (p.sinks && vl < sizeof var) vl += (size_t)snprintf(var + vl, sizeof var - vl, " sinks");
    if (p.head_dim_v && vl < sizeof var)
        snprintf(var + vl, sizeof var - vl, " d_v=%lld", (long long)dv);
    printf("kernel %s block_q=%d block_kv=%d split=%d: attend B=%lld H=%lld kv_heads=%lld "
           "Nq=%lld Nkv=%lld d=%lld causal=%d%s%s threads=%d: %.3f ms, %.2f GFLOP/s -> %s\n",
           mha_kernel_name(r->kern), r->opt.block_q, r->opt.block_kv, r->opt.split,
           (long long)p.batch, (long long)p.heads, (long long)p.kv_heads, (long long)p.seq_q,
           (long long)p.seq_kv, (long long)p.head_dim, o->causal, var, dts,
           mha_resolve_threads(&r->opt), dt * 1e3, dt > 0 ? mha_problem_flops(&p) / dt * 1e-9 : 0.0,
           o->out);
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
                         &in.scale_path[1], &in.window_s, &in.softcap_s, &in.sinks_path}};
    int parsed = parse_io_opts(&cmd, argc, argv, &o);
    if (parsed != 0) return parsed > 0 ? 0 : EXIT_USAGE;
    if (check_before_inputs(&o) != 0) return EXIT_USAGE;

    io_run r = {0};
    int failed = load_attend_inputs(&o, &in) != 0 || run_attend(&o, &in, &r) != 0;
    free_run(&r);
    free_attend_inputs(&in);
    return failed ? EXIT_USAGE : 0;
}
