/* io.h - the parts of `mhabench attend` and `mhabench forward` (harness/io/):
 * the options both take and their parser, reading and converting tensors,
 * and the one kernel run that writes the result (common.c); each command's
 * own options, inputs and run (attend.c, forward.c). Every input problem is
 * reported as one "mhabench: ..." line with exit status 2, before any output.
 * Steps return 0 or -1 and only cmd_* make exit statuses. Internal to the
 * two commands. */
#ifndef MHA_HARNESS_IO_IO_H
#define MHA_HARNESS_IO_IO_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "fmt_npy.h"
#include "meas_core.h"
#include "mha.h"
#include "opts.h"

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
    MAX_OWN = 16
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

/* ---- one kernel run, shared by attend and forward ---- */

/* What a run needs beyond its inputs: the kernel --kernel resolved to, its
 * knobs, and its buffers. */
typedef struct {
    const mha_kernel *kern;
    mha_options opt;
    void *ws; /* wbytes of workspace, NULL for none */
    size_t wbytes;
    void *out; /* the kernel's output, of the problem's dtype */
} io_run;

/* ---- common.c ---- */

/* "[2, 4, 5, 8]" into buf; returns buf. */
const char *shape_str(const npy_array *a, char *buf, size_t len);
/* Reports a library failure as "WHAT: <the library's message>"; returns -1. */
int report_mha(mha_status st, const char *what);
/* Reads PATH into *a: float32 or a typed file (fp16, bf16 bits, int8).
 * 0, or -1 after a message. */
int load_any(const char *path, npy_array *a);
/* 0 when a (read from PATH as tensor NAME) is float32 or of WANT, else -1
 * after a message naming what it holds and OPT, the option that reads it. */
int typed_fits(const npy_array *a, const char *path, const char *name, mha_dtype want,
               const char *what, const char *opt);
/* A float32 tensor read for bf16/fp16 storage, rounded into *conv. */
void round_on_load(const npy_array *a, mha_dtype want, void **conv);
/* Parses argv into *o and cmd's own options: 0 to go on, 1 when --help has
 * been printed, -1 after a message. */
int parse_io_opts(const io_cmd *cmd, int argc, char **argv, io_opts *o);
/* MHA_ISA, --out and a named --kernel, checked before any input is read. */
int check_before_inputs(const io_opts *o);
/* Resolves o->kernel for problem p into r->kern and r->opt. */
int choose_kernel(const io_opts *o, const mha_problem *p, io_run *r);
/* r->wbytes of workspace (SIZED: the status of the size query) and an
 * output of COUNT elements. */
int alloc_buffers(io_run *r, mha_status sized, size_t count);
/* Runs CALL once and writes r->out to PATH as dtype TO; *seconds its time. */
int run_and_write(const io_run *r, const meas_call *call, const char *path, const int64_t *shape,
                  int ndim, size_t count, mha_dtype from, mha_dtype to, double *seconds);
void free_run(io_run *r);

#endif
