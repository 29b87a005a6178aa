/* forward.c - `mhabench forward`: the full multi-head attention layer (as
 * torch.nn.MultiheadAttention) on inputs and weights read from .npy files,
 * its output written as .npy (harness/io/io.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "commands.h"
#include "io.h"
#include "mha_private.h"
#include "util.h"

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
