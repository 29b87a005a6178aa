/* util.h - small helpers shared by the mhabench subcommands: error printing,
 * number and list parsing, kernel lookup with a clear message. */
#ifndef MHA_HARNESS_UTIL_H
#define MHA_HARNESS_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include "mha.h"

#define EXIT_CHECK_FAILED 1
#define EXIT_USAGE 2
/* A comparison or bisection that could not judge enough to decide (never success). */
#define EXIT_INCONCLUSIVE 3

/* n items of size bytes (realloc of p), or "mhabench: <who>: out of memory"
 * and exit 2: the one place below a cmd_* function that ends the process
 * (an exhausted heap leaves nothing to recover; outputs are unnamed files
 * until their commit, so nothing half-written is left behind). */
void *xrealloc_or_exit(void *p, size_t n, size_t size, const char *who);
_Noreturn void exit_out_of_memory(const char *who);
char *xstrdup_or_exit(const char *s, const char *who);

/* Prints "mhabench: <msg>\n" to stderr. */
void errorf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* errorf for messages that quote file content (benchmark names, units,
 * context values, which JSON escapes can fill with newlines or terminal
 * controls): the whole line is escaped (mha_escape). */
/* 1 when s can be (part of) a file name we make from file content (a CPU
 * key, an ISA name): only [A-Za-z0-9._+-], not empty, not starting with '.'. */
int file_name_part_ok(const char *s);
void errorf_esc(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Parses a whole decimal integer in [lo, hi]; on failure prints a message
 * naming the option and value and returns 0. */
int parse_i64(const char *opt, const char *s, int64_t lo, int64_t hi, int64_t *out);
int parse_float(const char *opt, const char *s, float *out);
/* A finite double in [lo, hi] ((lo, hi] when open_lo); else a message naming
 * opt and the value, and 0. */
int parse_double(const char *opt, const char *s, double lo, double hi, int open_lo, double *out);
/* Comma list of integers in [lo, hi], at most max entries; an empty list or
 * item is an error (every comma list follows the rules of parse_kernel_list's
 * splitter). Returns the count, or -1 after a message. */
int parse_i64_list(const char *opt, const char *s, int64_t lo, int64_t hi, int64_t *out, int max);
/* The same where the item "all" stands for the value all (e.g. every core). */
int parse_i64_list_all(const char *opt, const char *s, int64_t lo, int64_t hi, int64_t all,
                       int64_t *out, int max);
/* A comma list of finite doubles in [lo, hi] (parse_double's rule, closed),
 * by the splitter's rules. Returns the count, or -1 after a message. */
int parse_double_list(const char *opt, const char *s, double lo, double hi, double *out, int max);

/* A sliding window (mha_problem.window and its edges): on 0 = none. */
typedef struct {
    int on;
    int64_t left, right; /* keys before/after the diagonal; -1 = unbounded */
} window_spec;
/* "L<sep>R" (profile: L,R; a sweep list item: L:R), each -1 (unbounded) or
 * a key count: 1, or 0 after "OPT 'TEXT': expected L<sep>R (...)" or "...: L
 * = -2 is below -1 ...". */
int parse_window(const char *opt, const char *s, char sep, window_spec *out);
/* A comma list of windows L:R, or "none" (no window): the count, or -1
 * after a message naming the bad item. */
int parse_window_list(const char *opt, const char *s, window_spec *out, int max);

/* The attention variants of a one-shape command (profile, recommend), as
 * the rows OPTS_VARIANT_ROWS (opts.h: ids 'W', 'C', 'Z', 'V'): --window
 * L,R, --softcap C, --sinks, --head-dim-v D (docs/attention-variants.md). */
typedef struct {
    window_spec window;
    double softcap; /* 0: none */
    int sinks;
    int64_t dv; /* 0: --head-dim */
} variant_args;
/* Takes option id (its value arg) into v: 1 taken, 0 after a message naming
 * the bad value ("CMD: --window '...': ..."), -1 when id is not one of them. */
int variant_arg(const char *cmd, int id, const char *arg, variant_args *v);
/* Whether v asks for any variant. */
int variant_any(const variant_args *v);
/* Sets p's window, softcap, sinks and head_dim_v from v. */
void variant_apply(const variant_args *v, mha_problem *p);

/* Every unknown name the harness reports goes through these: "OPT: unknown
 * WHAT 'NAME' (did you mean X?)" when a candidate is close (suggest.h), else
 * "(OTHERWISE)", OTHERWISE NULL listing the candidates ("expected a, b or c");
 * escaped (errorf_esc), as the name may hold anything.
 * name_index_or_say returns NAME's index in cands, or -1 after that message. */
void say_unknown(const char *opt, const char *what, const char *name, const char *const *cands,
                 int n, const char *otherwise);
int name_index_or_say(const char *opt, const char *what, const char *name, const char *const *cands,
                      int n, const char *otherwise);
/* The kernel NAME (mha_kernel_find), or NULL after a message: for an
 * algorithm's name ("flash") the kernels it has, from the registry; else
 * say_unknown over the kernel names ("auto" among them when with_auto, the
 * callers having taken "auto" itself already). */
const mha_kernel *find_kernel_or_say(const char *opt, const char *name, int with_auto);
/* One dtype name (mha_dtype_parse; int8 only with allow_i8) into *out: 1, or
 * 0 after a message naming OPT and the value. */
int dtype_named(const char *opt, const char *s, int allow_i8, mha_dtype *out);

/* Parses a comma list of kernel names (option opt) into out, at most max:
 * each name must exist; with KL_AUTO "auto" is accepted and stored as NULL;
 * with KL_SUPPORTED each must also run on this CPU (else it is kept, for the
 * caller to report as skipped). Repeats are dropped. An empty list, an empty
 * name or more than max kernels is an error. Returns the count (>= 1), or
 * -1 after a message naming the bad value. */
/* With KL_TIMED (sweep, tune) an emulated kernel (MHA_KT_EMULATED) is refused. */
enum { KL_AUTO = 1, KL_SUPPORTED = 2, KL_TIMED = 4 };
int parse_kernel_list(const char *opt, const char *s, int flags, const mha_kernel **out, int max);

/* Parses a comma list of dtype names (mha_dtype_parse; int8 only with
 * allow_i8, i.e. for K/V) into a MHA_DTYPE_BIT mask, by the splitter's rules.
 * Returns the mask, or 0 after a message naming the bad value. */
unsigned parse_dtype_list(const char *opt, const char *s, int allow_i8);

/* Finds a kernel by name for --kernel ("auto" is not handled here, but is
 * suggested for a near miss: every --kernel takes it), checks it runs on
 * this CPU; prints a message and returns NULL otherwise. */
const mha_kernel *lookup_kernel(const char *name);

/* The kernel for --kernel NAME on problem p: "auto" is mha_select's choice
 * (its knobs copied into *o), anything else lookup_kernel(NAME). Either way
 * block_q / block_kv left at 0 in *o are resolved to the values that will
 * run, so reports can name them. Prints a message and returns NULL on error. */
const mha_kernel *resolve_kernel(const char *name, const mha_problem *p, mha_options *o);
/* On the first call in a process, when this CPU (under the MHA_ISA cap) has
 * no tuning table where mha_select looks, prints to f "note: no tuning table
 * for <cpu-key> (<path>): auto uses the cache model; `mhabench tune` makes one
 * in about N minutes" and returns 1; else 0. */
int note_no_tuning_table(FILE *f);

/* The arguments before a bare "--" (the count returned: what getopt sees)
 * and those after it (*rest, *nrest: passed on untouched, e.g. to sweeps);
 * *rest NULL and *nrest 0 without one. */
int split_at_dashes(int argc, char **argv, char ***rest, int *nrest);

/* Checks MHA_ISA; prints a message and returns 0 if it is malformed. */
int check_isa_env(void);

#endif
