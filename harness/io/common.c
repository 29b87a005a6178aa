/* common.c - what `attend` and `forward` share: the options both take and
 * their parser, the checks made before any input is read, reading a tensor
 * and rounding it to its storage dtype, and the one kernel run that writes
 * the output (harness/io/io.h). */
#include "io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "mha_private.h"
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
const char *shape_str(const npy_array *a, char *buf, size_t len) {
    size_t n = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < a->ndim && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, "%s%lld", i ? ", " : "", (long long)a->shape[i]);
    if (n < len) snprintf(buf + n, len - n, "]");
    return buf;
}

/* Reports a library failure as "WHAT: <the library's message>"; returns -1. */
int report_mha(mha_status st, const char *what) {
    const char *m = mha_last_error();
    if (!m || !*m) m = mha_status_str(st);
    errorf("%s: %s", what, m);
    return -1;
}

/* Reads PATH into *a: a float32 file or a typed one ('<f2', '<u2' bf16 bits,
 * '|i1'); whether its dtype fits is typed_fits'. 0, or -1 after a message. */
int load_any(const char *path, npy_array *a) {
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
int typed_fits(const npy_array *a, const char *path, const char *name, mha_dtype want,
               const char *what, const char *opt) {
    if (a->dtype == MHA_F32 || a->dtype == want) return 0;
    errorf("%s: %s holds %s ('%s'), but the %s dtype is %s: pass %s %s to read it as it is", path,
           name, mha_dtype_name(a->dtype), npy_descr(a->dtype), what, mha_dtype_name(want), opt,
           mha_dtype_name(a->dtype));
    return -1;
}

/* A float32 tensor read for bf16/fp16 storage, rounded (RNE) into *conv
 * (mha_alloc'ed); nothing when it is already stored as want. */
void round_on_load(const npy_array *a, mha_dtype want, void **conv) {
    if (a->dtype != MHA_F32 || want == MHA_F32 || a->count == 0) return;
    *conv = mha_alloc(a->count * mha_dtype_size(want));
    if (!*conv) exit_out_of_memory("converting an input");
    mha_convert_from_f32(want, a->data, *conv, a->count);
}

/* Parses argv into *o and cmd's own options. Returns 0 to go on, 1 when --help
 * has been printed, -1 after a message (and the usage where the command line
 * is malformed). A missing option is named in the table's order. */
int parse_io_opts(const io_cmd *cmd, int argc, char **argv, io_opts *o) {
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
int check_before_inputs(const io_opts *o) {
    if (!check_isa_env() || check_out(o->out) != 0) return -1;
    if (strcmp(o->kernel, "auto") != 0 && !lookup_kernel(o->kernel)) return -1;
    return 0;
}

/* Resolves o->kernel for problem p into r->kern and r->opt: 0, or -1 after a message. */
int choose_kernel(const io_opts *o, const mha_problem *p, io_run *r) {
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
int alloc_buffers(io_run *r, mha_status sized, size_t count) {
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
int run_and_write(const io_run *r, const meas_call *call, const char *path, const int64_t *shape,
                  int ndim, size_t count, mha_dtype from, mha_dtype to, double *seconds) {
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

void free_run(io_run *r) {
    mha_free(r->ws);
    mha_free(r->out);
}
