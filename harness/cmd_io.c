/* cmd_io.c - `mhabench attend` and `mhabench forward`: run one kernel on tensors
 * read from .npy files and write the result as .npy. Every input problem is
 * reported as one "mhabench: ..." line with exit status 2, before any output.
 * Each command is a few steps (options, inputs, run and write) sharing the option
 * parser and the run; steps return 0 or -1 and only cmd_* make exit statuses. */
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "commands.h"
#include "mha.h"
#include "mha_private.h"
#include "fmt_npy.h"
#include "meas_core.h"
#include "opts.h"
#include "util.h"

/* --out is checked before any input is read or computed: a folder, FIFO or
 * device there fails at once (npy_write checks again when it writes).
 * 0 when it can be written, else -1 after a message. */
static int check_out(const char *path) {
    mha_out w;
    char why[1024];
    if (mha_out_begin(&w, path, MHA_OUT_REPLACE, why, sizeof why) != MHA_OK) {
        errorf("--out: %s", why);
        return -1;
    }
    mha_out_abort(&w);
    return 0;
}

/* "[2, 4, 5, 8]" */
static const char *shape_str(const npy_array *a, char *buf, size_t len) {
    size_t n = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < a->ndim && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, "%s%lld", i ? ", " : "", (long long)a->shape[i]);
    if (n < len) snprintf(buf + n, len - n, "]");
    return buf;
}

/* Reports a library failure as "WHAT: <the library's message>"; returns -1. */
static int report_mha(mha_status st, const char *what) {
    const char *m = mha_last_error();
    if (!m || !*m) m = mha_status_str(st);
    errorf("%s: %s", what, m);
    return -1;
}

/* Reads PATH into *a: a float32 file or a typed one ('<f2', '<u2' bf16 bits,
 * '|i1'); whether its dtype fits is typed_fits'. 0, or -1 after a message. */
static int load_any(const char *path, npy_array *a) {
    char err[512];
    const unsigned all = MHA_DTYPE_BIT(MHA_F32) | MHA_DTYPE_BIT(MHA_BF16) | MHA_DTYPE_BIT(MHA_F16) |
                         MHA_DTYPE_BIT(MHA_I8);
    if (npy_read_typed(path, all, a, err, sizeof err) != MHA_OK) {
        errorf("%s", err);
        return -1;
    }
    return 0;
}

/* A tensor read for storage dtype WANT may be float32 (rounded on load) or
 * of WANT itself; anything else is an error naming PATH, the tensor NAME,
 * what it holds, and OPT, the option that would read it as it is (WHAT names
 * the dtype asked for: "Q/O", "K/V", "layer"). 0, or -1 after a message. */
static int typed_fits(const npy_array *a, const char *path, const char *name, mha_dtype want,
                      const char *what, const char *opt) {
    if (a->dtype == MHA_F32 || a->dtype == want) return 0;
    errorf("%s: %s holds %s ('%s'), but the %s dtype is %s: pass %s %s to read it as it is", path,
           name, mha_dtype_name(a->dtype), npy_descr(a->dtype), what, mha_dtype_name(want), opt,
           mha_dtype_name(a->dtype));
    return -1;
}

/* A float32 tensor read for bf16/fp16 storage, rounded (RNE) into *conv
 * (mha_alloc'ed); nothing when it is already stored as want. */
static void round_on_load(const npy_array *a, mha_dtype want, void **conv) {
    if (a->dtype != MHA_F32 || want == MHA_F32 || a->count == 0) return;
    *conv = mha_alloc(a->count * mha_dtype_size(want));
    if (!*conv) exit_out_of_memory("converting an input");
    mha_convert_from_f32(want, a->data, *conv, a->count);
}

/* The options attend and forward share. */
typedef struct {
    const char *kernel;  /* --kernel: a name from `mhabench list`, or "auto" */
    const char *out;     /* --out */
    int causal;          /* --causal */
    float scale;         /* --scale, 0 for the default 1/sqrt(d) */
    int64_t threads;     /* --threads, 0 for all cores */
    mha_dtype dtype;     /* --dtype: the problem's (Q/O) dtype, fp32 by default */
    mha_dtype out_dtype; /* --out-dtype: the file written, default dtype */
    int have_out_dtype;
} io_opts;

/* A command: its option table (the common rows below and its own) and
 * where each of its own options' values go. */
enum {
    O_KERNEL = 256,
    O_OUT,
    O_CAUSAL,
    O_SCALE,
    O_THREADS,
    O_DTYPE,
    O_OUT_DTYPE,
    O_OWN = 512, /* O_OWN + i: the command's own option i, a value kept as given */
    MAX_OWN = 12
};
typedef struct {
    const char *name; /* "attend", for messages */
    void (*usage)(FILE *f);
    const opt_row *rows;
    int n;
    const char **own[MAX_OWN]; /* where O_OWN + i's value goes; the caller sets it to NULL */
} io_cmd;

/* The rows attend and forward share (the help texts are the command's). */
#define IO_KERNEL(help)                                                                            \
    { "kernel", required_argument, O_KERNEL, 0, "K", OPT_REQUIRED, help }
#define IO_OUT(arg, help)                                                                          \
    { "out", required_argument, O_OUT, 0, arg, OPT_REQUIRED, help }
#define IO_CAUSAL(help)                                                                            \
    { "causal", no_argument, O_CAUSAL, 0, NULL, 0, help }
#define IO_SCALE(help)                                                                             \
    { "scale", required_argument, O_SCALE, 0, "S", 0, help }
#define IO_THREADS                                                                                 \
    { "threads", required_argument, O_THREADS, 0, "T", 0, "threads (0 = all cores, default 1)" }
#define IO_DTYPE(help)                                                                             \
    { "dtype", required_argument, O_DTYPE, 0, "D", 0, help }
#define IO_OUT_DTYPE                                                                               \
    {                                                                                              \
        "out-dtype", required_argument, O_OUT_DTYPE, 0, "D", 0,                                    \
            "the file written: fp32, bf16 ('<u2'), fp16 (default: --dtype)"                        \
    }

/* Parses argv into *o and cmd's own options. Returns 0 to go on, 1 when --help
 * has been printed, -1 after a message (and the usage where the command line
 * is malformed). A missing option is named in the table's order. */
static int parse_io_opts(const io_cmd *cmd, int argc, char **argv, io_opts *o) {
    *o = (io_opts){.threads = 1};
    opts_parser op;
    opts_init(&op, cmd->name, cmd->rows, cmd->n);
    int c;
    while ((c = opts_next(&op, argc, argv)) != -1) {
        if (c >= O_OWN && c < O_OWN + MAX_OWN) {
            *cmd->own[c - O_OWN] = optarg;
            continue;
        }
        switch (c) {
        case O_KERNEL:
            o->kernel = optarg;
            break;
        case O_OUT:
            o->out = optarg;
            break;
        case O_CAUSAL:
            o->causal = 1;
            break;
        case O_SCALE:
            if (!parse_float("--scale", optarg, &o->scale)) return -1;
            break;
        case O_THREADS:
            if (!parse_i64("--threads", optarg, 0, 65536, &o->threads)) return -1;
            break;
        case O_DTYPE:
            if (!dtype_named("--dtype", optarg, 0, &o->dtype)) return -1;
            break;
        case O_OUT_DTYPE:
            if (!dtype_named("--out-dtype", optarg, 0, &o->out_dtype)) return -1;
            o->have_out_dtype = 1;
            break;
        case 'h':
            cmd->usage(stdout);
            return 1;
        default:
            cmd->usage(stderr);
            return -1;
        }
    }
    if (optind < argc) {
        errorf("%s: unexpected argument '%s'", cmd->name, argv[optind]);
        cmd->usage(stderr);
        return -1;
    }
    const opt_row *missing = opts_missing(&op);
    if (missing) {
        errorf("%s: missing required option --%s", cmd->name, missing->name);
        cmd->usage(stderr);
        return -1;
    }
    if (!o->have_out_dtype) o->out_dtype = o->dtype;
    return 0;
}

/* The checks made before any input is read: MHA_ISA, --out, and a named
 * --kernel ("auto" is resolved by resolve_kernel once the problem is known).
 * 0, or -1 after a message. */
static int check_before_inputs(const io_opts *o) {
    if (!check_isa_env() || check_out(o->out) != 0) return -1;
    if (strcmp(o->kernel, "auto") != 0 && !lookup_kernel(o->kernel)) return -1;
    return 0;
}

/* ---- one kernel run, shared by attend and forward ------------------------------------ */

/* What a run needs beyond its inputs: the kernel --kernel resolved to, its
 * knobs, and its buffers. */
typedef struct {
    const mha_kernel *kern;
    mha_options opt;
    void *ws; /* wbytes of workspace, NULL for none */
    size_t wbytes;
    void *out; /* the kernel's output, of the problem's dtype */
} io_run;

/* Resolves o->kernel for problem p into r->kern and r->opt: 0, or -1 after a message. */
static int choose_kernel(const io_opts *o, const mha_problem *p, io_run *r) {
    r->opt = (mha_options){.threads = (int)o->threads};
    r->kern = resolve_kernel(o->kernel, p, &r->opt);
    if (!r->kern) return -1;
    if (mha_kernel_takes(r->kern, p) != MHA_OK) {
        /* a kernel of other dtypes (flash.avx512bf16 on float32 files): the
         * option that makes it run, since float32 files are rounded on load */
        const unsigned dts = mha_kernel_dtypes(r->kern);
        int t = 0;
        while (t < MHA_DTYPE_COUNT && !(dts & MHA_DTYPE_BIT(t))) t++;
        if (t < MHA_DTYPE_COUNT && p->dtype == MHA_F32 && !(dts & MHA_DTYPE_BIT(MHA_F32)))
            errorf("%s; pass --dtype %s (float32 files are rounded to it on load)",
                   mha_last_error(), mha_dtype_name((mha_dtype)t));
        else
            errorf("%s", mha_last_error());
        return -1;
    }
    return 0;
}

/* Allocates r->wbytes of workspace and an output of COUNT elements (room for
 * fp32, so any dtype fits). SIZED is the
 * status of the kernel's workspace-size query that set r->wbytes, reported here
 * when it failed. 0, or -1 after a message. */
static int alloc_buffers(io_run *r, mha_status sized, size_t count) {
    const char *kname = mha_kernel_name(r->kern);
    if (sized != MHA_OK) return report_mha(sized, kname);
    if (r->wbytes && !(r->ws = mha_alloc(r->wbytes))) {
        errorf("cannot allocate %zu bytes of workspace for kernel %s", r->wbytes, kname);
        return -1;
    }
    if (!(r->out = mha_alloc(count * sizeof(float)))) {
        errorf("cannot allocate %zu bytes for the output of kernel %s", count * sizeof(float),
               kname);
        return -1;
    }
    return 0;
}

/* Runs CALL once through the measurement core and writes r->out (SHAPE, NDIM,
 * COUNT elements of dtype FROM) to PATH as dtype TO (widened, then rounded to
 * nearest even); *seconds is the run's time. 0, or -1 after a message, with
 * PATH left as it was (npy_write replaces it whole or not at all). */
static int run_and_write(const io_run *r, const meas_call *call, const char *path,
                         const int64_t *shape, int ndim, size_t count, mha_dtype from, mha_dtype to,
                         double *seconds) {
    mha_status st = meas_sample(call, seconds);
    if (st != MHA_OK) return report_mha(st, mha_kernel_name(r->kern));
    char err[512];
    void *conv = NULL;
    const void *data = r->out;
    if (from != to && count > 0) {
        float *wide = from == MHA_F32 ? r->out : mha_alloc(count * sizeof(float));
        conv = to == MHA_F32 ? (void *)wide : mha_alloc(count * mha_dtype_size(to));
        if (!wide || !conv) exit_out_of_memory("converting the output");
        if (from != MHA_F32) mha_convert_to_f32(from, r->out, wide, count);
        if (to != MHA_F32) mha_convert_from_f32(to, wide, conv, count);
        if (wide != r->out && wide != conv) mha_free(wide);
        data = conv;
    }
    st = npy_write_typed(path, to, data, shape, ndim, err, sizeof err);
    mha_free(conv);
    if (st != MHA_OK) {
        errorf("%s", err);
        return -1;
    }
    return 0;
}

static void free_run(io_run *r) {
    mha_free(r->ws);
    mha_free(r->out);
}

/* ---- attend -------------------------------------------------------------------------- */

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

/* ---- forward ------------------------------------------------------------------------- */

enum { F_QUERY = O_OWN, F_KEY, F_VALUE, F_HEADS, F_KV_HEADS, F_WEIGHTS };
static const opt_row FORWARD_ROWS[] = {
    IO_KERNEL("the attention kernel, from `mhabench list`, or auto"),
    {"query", required_argument, F_QUERY, 0, "X.npy", OPT_REQUIRED,
     "the query input [B,Nq,d_model]"},
    {"key", required_argument, F_KEY, 0, "X2.npy", 0,
     "the key input [B,Nkv,d_model] (with --value; default: the query)"},
    {"value", required_argument, F_VALUE, 0, "X3.npy", 0,
     "the value input [B,Nkv,d_model] (with --key; default: the query)"},
    {"heads", required_argument, F_HEADS, 0, "H", OPT_REQUIRED, "query heads, dividing d_model"},
    {"kv-heads", required_argument, F_KV_HEADS, 0, "G", 0,
     "key/value heads, dividing H (default H)"},
    {"weights", required_argument, F_WEIGHTS, 0, "DIR", OPT_REQUIRED,
     "the folder of the weights and biases (see above)"},
    IO_OUT("Y.npy", "the output [B,Nq,d_model]"),
    IO_CAUSAL("bottom-right aligned causal mask"),
    IO_SCALE("softmax scale (default 1/sqrt(d_model/H))"),
    IO_THREADS,
    IO_DTYPE("the layer's dtype: fp32 (default), bf16, fp16; weights, biases and inputs are "
             "float32 files rounded on load (RNE) or files of that dtype ('<u2' bf16 bits, "
             "'<f2')"),
    IO_OUT_DTYPE,
    OPTS_HELP,
};

static void forward_usage(FILE *f) {
    opts_usage(f, "forward", NULL, FORWARD_ROWS, sizeof FORWARD_ROWS / sizeof *FORWARD_ROWS, NULL);
    fputs("  The full multi-head attention layer (as torch.nn.MultiheadAttention).\n"
          "  query: [B,Nq,d_model]; key, value: [B,Nkv,d_model] (both or neither;\n"
          "  default self-attention: query is also key and value); out: [B,Nq,d_model].\n"
          "  DIR holds w_q.npy w_k.npy w_v.npy w_o.npy and optional b_q.npy b_k.npy\n"
          "  b_v.npy b_o.npy in nn.Linear layout: w_q, w_o [d_model,d_model];\n"
          "  w_k, w_v [G*d_model/H, d_model]; biases 1-D.\n",
          f);
    opts_print(f, FORWARD_ROWS, sizeof FORWARD_ROWS / sizeof *FORWARD_ROWS);
}

typedef struct {
    const char *name;   /* "w_q" */
    int64_t rows, cols; /* cols 0: a 1-D bias of `rows` */
    int optional;
    npy_array a;
    void *conv; /* a float32 file rounded to the layer dtype, else NULL */
    int present;
} param;

/* Reads DIR/<name>.npy and checks its shape: 0, or -1 after a message naming
 * the file, its shape and the one expected. An optional one is absent only
 * when DIR has no entry of that name (lstat: ENOENT); one that is there but
 * cannot be read (a dangling symlink, a folder, a FIFO, EACCES) is an error,
 * never a run without that bias. */
static int load_param(const char *dir, mha_dtype dt, param *pr) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.npy", dir, pr->name);
    struct stat sb;
    if (pr->optional && lstat(path, &sb) != 0 && errno == ENOENT) return 0;
    if (pr->optional && S_ISLNK(sb.st_mode) && stat(path, &sb) != 0 && errno == ENOENT) {
        char to[4096];
        const ssize_t n = readlink(path, to, sizeof to - 1);
        to[n > 0 ? n : 0] = '\0';
        errorf_esc("%s: a symbolic link to '%s', which leads nowhere (an optional %s is absent "
                   "only when there is no %s.npy at all)",
                   path, to, pr->name, pr->name);
        return -1;
    }
    if (load_any(path, &pr->a) != 0) return -1;
    pr->present = 1;
    if (typed_fits(&pr->a, path, pr->name, dt, "layer", "--dtype") != 0) return -1;
    char s[160];
    int rank = pr->cols ? 2 : 1;
    if (pr->a.ndim != rank || pr->a.shape[0] != pr->rows ||
        (rank == 2 && pr->a.shape[1] != pr->cols)) {
        if (rank == 2)
            errorf("%s: %s has shape %s, expected [%lld, %lld]", path, pr->name,
                   shape_str(&pr->a, s, sizeof s), (long long)pr->rows, (long long)pr->cols);
        else
            errorf("%s: %s has shape %s, expected [%lld]", path, pr->name,
                   shape_str(&pr->a, s, sizeof s), (long long)pr->rows);
        return -1;
    }
    round_on_load(&pr->a, dt, &pr->conv);
    return 0;
}

/* forward's command line once parsed and checked. */
typedef struct {
    io_opts o;
    const char *query, *key, *value; /* key and value: both or neither */
    const char *weights;             /* a directory */
    int64_t heads, kv_heads;         /* kv_heads divides heads */
} forward_args;

/* --weights must name a directory: 0, or -1 after a message. */
static int check_weights_dir(const char *dir) {
    struct stat sb;
    if (stat(dir, &sb) != 0) {
        errorf("--weights %s: %s", dir, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(sb.st_mode)) {
        errorf("--weights %s: not a directory", dir);
        return -1;
    }
    return 0;
}

/* Parses forward's command line into *a and checks --key/--value, --heads,
 * --kv-heads and --weights. Returns 0 to go on, 1 when --help has been
 * printed, -1 after a message. */
static int parse_forward(int argc, char **argv, forward_args *a) {
    const char *heads_s = NULL, *kvheads_s = NULL;
    *a = (forward_args){0};
    const io_cmd cmd = {"forward",
                        forward_usage,
                        FORWARD_ROWS,
                        sizeof FORWARD_ROWS / sizeof *FORWARD_ROWS,
                        {&a->query, &a->key, &a->value, &heads_s, &kvheads_s, &a->weights}};
    int parsed = parse_io_opts(&cmd, argc, argv, &a->o);
    if (parsed != 0) return parsed;
    if (!a->key != !a->value) {
        errorf("forward: --key and --value go together (give both or neither)");
        forward_usage(stderr);
        return -1;
    }
    if (!parse_i64("--heads", heads_s, 1, INT32_MAX, &a->heads)) return -1;
    a->kv_heads = a->heads;
    if (kvheads_s && !parse_i64("--kv-heads", kvheads_s, 1, INT32_MAX, &a->kv_heads)) return -1;
    if (a->heads % a->kv_heads != 0) {
        errorf("--kv-heads %lld does not divide --heads %lld", (long long)a->kv_heads,
               (long long)a->heads);
        return -1;
    }
    return check_weights_dir(a->weights);
}

/* forward's tensors as read. */
typedef struct {
    npy_array x;      /* query [B, Nq, d_model] */
    npy_array xk, xv; /* key and value [B, Nkv, d_model], when given */
    void *conv[3];    /* x, xk, xv rounded to the layer dtype on load, else NULL */
    param prm[8];     /* w_q w_k w_v w_o, then the optional b_q b_k b_v b_o */
} forward_inputs;

/* The data of a tensor as the layer reads it: converted on load, or as read. */
static const void *stored(const npy_array *a, const void *conv) {
    return conv ? conv : a->raw;
}

/* Reads the query: rank 3, no empty dimension, d_model divisible by --heads.
 * 0, or -1 after a message. */
static int load_query(const forward_args *a, npy_array *x) {
    char s[160];
    if (load_any(a->query, x) != 0 ||
        typed_fits(x, a->query, "query", a->o.dtype, "layer", "--dtype") != 0)
        return -1;
    if (x->ndim != 3) {
        errorf("%s: query has rank %d, shape %s: expected a rank-3 [B,N,d_model] tensor", a->query,
               x->ndim, shape_str(x, s, sizeof s));
        return -1;
    }
    if (x->count == 0) {
        errorf("%s: query has an empty dimension, shape %s", a->query, shape_str(x, s, sizeof s));
        return -1;
    }
    if (x->shape[2] % a->heads != 0) {
        errorf("d_model %lld (query %s) is not divisible by --heads %lld", (long long)x->shape[2],
               shape_str(x, s, sizeof s), (long long)a->heads);
        return -1;
    }
    return 0;
}

/* Reads --key and --value, if given, and checks them against the query x:
 * rank 3, the same B and d_model, Nkv > 0, alike. 0, or -1 after a message. */
static int load_key_value(const forward_args *a, const npy_array *x, npy_array *xk, npy_array *xv) {
    if (!a->key) return 0;
    if (load_any(a->key, xk) != 0 ||
        typed_fits(xk, a->key, "key", a->o.dtype, "layer", "--dtype") != 0 ||
        load_any(a->value, xv) != 0 ||
        typed_fits(xv, a->value, "value", a->o.dtype, "layer", "--dtype") != 0)
        return -1;
    const int64_t B = x->shape[0], d_model = x->shape[2];
    const char *name[2] = {"key", "value"}, *path[2] = {a->key, a->value};
    const npy_array *kv[2] = {xk, xv};
    char s1[160], s2[160];
    for (int i = 0; i < 2; i++) {
        if (kv[i]->ndim != 3) {
            errorf("%s: %s has rank %d, shape %s: expected a rank-3 [B,N,d_model] tensor", path[i],
                   name[i], kv[i]->ndim, shape_str(kv[i], s1, sizeof s1));
            return -1;
        }
        if (kv[i]->shape[0] != B || kv[i]->shape[2] != d_model || kv[i]->shape[1] == 0) {
            errorf("%s %s does not match query %s: expected [%lld, Nkv, %lld]", name[i],
                   shape_str(kv[i], s1, sizeof s1), shape_str(x, s2, sizeof s2), (long long)B,
                   (long long)d_model);
            return -1;
        }
    }
    if (memcmp(xk->shape, xv->shape, 3 * sizeof xk->shape[0]) != 0) {
        errorf("key and value shapes differ: key %s, value %s", shape_str(xk, s1, sizeof s1),
               shape_str(xv, s2, sizeof s2));
        return -1;
    }
    return 0;
}

/* Reads the projections from --weights in nn.Linear layout: w_q, w_o
 * [d_model, d_model], w_k, w_v [kv_heads * head_dim, d_model], and the biases
 * that are there. 0, or -1 after a message. */
static int load_weights(const forward_args *a, int64_t d_model, param prm[8]) {
    static const char *const names[8] = {"w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o"};
    const int64_t kv_dim = a->kv_heads * (d_model / a->heads);
    const int64_t rows[8] = {d_model, kv_dim, kv_dim, d_model, d_model, kv_dim, kv_dim, d_model};
    for (int i = 0; i < 8; i++) {
        prm[i] = (param){
            .name = names[i], .rows = rows[i], .cols = i < 4 ? d_model : 0, .optional = i >= 4};
        if (load_param(a->weights, a->o.dtype, &prm[i]) != 0) return -1;
    }
    return 0;
}

/* Reads and checks all of forward's tensors, in the order of the command line's
 * meaning: query, key and value, weights. 0, or -1 after a message. */
static int load_forward_inputs(const forward_args *a, forward_inputs *in) {
    if (load_query(a, &in->x) != 0 || load_key_value(a, &in->x, &in->xk, &in->xv) != 0) return -1;
    if (load_weights(a, in->x.shape[2], in->prm) != 0) return -1;
    const npy_array *t[3] = {&in->x, &in->xk, &in->xv};
    for (int i = 0; i < (a->key ? 3 : 1); i++) round_on_load(t[i], a->o.dtype, &in->conv[i]);
    return 0;
}

static void free_forward_inputs(forward_inputs *in) {
    for (int i = 0; i < 8; i++) {
        npy_free(&in->prm[i].a);
        mha_free(in->prm[i].conv);
    }
    for (int i = 0; i < 3; i++) mha_free(in->conv[i]);
    npy_free(&in->x);
    npy_free(&in->xk);
    npy_free(&in->xv);
}

/* The layer the checked weights describe; an absent bias is NULL. */
static mha_layer forward_layer(const forward_args *a, const forward_inputs *in) {
    const param *prm = in->prm;
    return (mha_layer){
        .d_model = in->x.shape[2],
        .heads = a->heads,
        .kv_heads = a->kv_heads,
        .w_q = stored(&prm[0].a, prm[0].conv),
        .w_k = stored(&prm[1].a, prm[1].conv),
        .w_v = stored(&prm[2].a, prm[2].conv),
        .w_o = stored(&prm[3].a, prm[3].conv),
        .b_q = prm[4].present ? stored(&prm[4].a, prm[4].conv) : NULL,
        .b_k = prm[5].present ? stored(&prm[5].a, prm[5].conv) : NULL,
        .b_v = prm[6].present ? stored(&prm[6].a, prm[6].conv) : NULL,
        .b_o = prm[7].present ? stored(&prm[7].a, prm[7].conv) : NULL,
        .dtype = a->o.dtype,
    };
}

/* Runs the layer on the checked inputs (self-attention when no key/value was
 * given), writes --out and prints the summary line: 0, or -1 after a message. */
static int run_forward(const forward_args *a, const forward_inputs *in, io_run *r) {
    const npy_array *x = &in->x;
    const int self = !a->key;
    const mha_layer L = forward_layer(a, in);
    const mha_layer_shape shp = {.batch = x->shape[0],
                                 .seq_q = x->shape[1],
                                 .seq_kv = self ? x->shape[1] : in->xk.shape[1],
                                 .causal = a->o.causal,
                                 .scale = a->o.scale};
    const mha_problem ap = {.batch = shp.batch,
                            .heads = L.heads,
                            .kv_heads = L.kv_heads,
                            .seq_q = shp.seq_q,
                            .seq_kv = shp.seq_kv,
                            .head_dim = L.d_model / L.heads,
                            .causal = shp.causal,
                            .scale = shp.scale,
                            .dtype = L.dtype};
    if (choose_kernel(&a->o, &ap, r) != 0) return -1;
    /* the output has the query's shape */
    if (alloc_buffers(r, mha_forward_workspace_size(r->kern, &L, &shp, &r->opt, &r->wbytes),
                      x->count) != 0)
        return -1;
    const void *xq = stored(x, in->conv[0]);
    const meas_call call =
        meas_call_forward(r->kern, &L, &shp, &r->opt, xq, self ? xq : stored(&in->xk, in->conv[1]),
                          self ? xq : stored(&in->xv, in->conv[2]), r->out, r->ws, r->wbytes);
    double dt;
    if (run_and_write(r, &call, a->o.out, x->shape, 3, x->count, L.dtype, a->o.out_dtype, &dt) != 0)
        return -1;
    char dts[48] = "";
    if (L.dtype != MHA_F32 || a->o.out_dtype != MHA_F32)
        snprintf(dts, sizeof dts, " dtype=%s out_dtype=%s", mha_dtype_name(L.dtype),
                 mha_dtype_name(a->o.out_dtype));
    printf("kernel %s block_q=%d block_kv=%d split=%d: forward B=%lld Nq=%lld Nkv=%lld "
           "d_model=%lld heads=%lld kv_heads=%lld causal=%d%s threads=%d: %.3f ms, %.2f GFLOP/s "
           "-> %s\n",
           mha_kernel_name(r->kern), r->opt.block_q, r->opt.block_kv, r->opt.split,
           (long long)shp.batch, (long long)shp.seq_q, (long long)shp.seq_kv, (long long)L.d_model,
           (long long)L.heads, (long long)L.kv_heads, a->o.causal, dts,
           mha_resolve_threads(&r->opt), dt * 1e3,
           dt > 0 ? mha_forward_flops(&L, &shp) / dt * 1e-9 : 0.0, a->o.out);
    return 0;
}

int cmd_forward(int argc, char **argv) {
    forward_args a;
    int parsed = parse_forward(argc, argv, &a);
    if (parsed != 0) return parsed > 0 ? 0 : EXIT_USAGE;
    if (check_before_inputs(&a.o) != 0) return EXIT_USAGE;

    forward_inputs in = {0};
    io_run r = {0};
    int failed = load_forward_inputs(&a, &in) != 0 || run_forward(&a, &in, &r) != 0;
    free_run(&r);
    free_forward_inputs(&in);
    return failed ? EXIT_USAGE : 0;
}
