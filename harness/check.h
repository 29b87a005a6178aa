/* check.h - the verification engine shared by `mhabench verify` and the unit
 * tests: the shape grid and adversarial cases, deterministic per-case inputs
 * in several memory layouts, the float64 reference, sentinel-filled outputs
 * with guard zones, and the written-down tolerance. */
#ifndef MHA_HARNESS_CHECK_H
#define MHA_HARNESS_CHECK_H

#include <stdint.h>

#include "mha.h"

/* Inputs: uniform in [-1, 1); near one-hot rows (Q x 30); all scores equal;
 * then corrupted inputs whose NaN/Inf must reach the output as in the
 * oracle (README "NaN and Inf"): one NaN in K, one NaN in Q, one +Inf in Q,
 * one -Inf in K, every visible score -inf, and Q, K x 1e30 (the scores
 * overflow float32: the oracle in double stays finite, a float32 kernel must
 * not, so rows that see a key must come out non-finite). */
enum {
    INPUT_UNIFORM,
    INPUT_LARGE_LOGITS,
    INPUT_EQUAL_SCORES,
    INPUT_NAN_K,
    INPUT_NAN_Q,
    INPUT_INF_Q,
    INPUT_NINF_K,
    INPUT_NINF_ALL,
    INPUT_HUGE,
    INPUT_COUNT
};
enum { LAYOUT_BHND, LAYOUT_BNHD, LAYOUT_PADDED, LAYOUT_COUNT };

typedef struct {
    mha_problem p;
    int input;       /* INPUT_* */
    int layout;      /* LAYOUT_* */
    const char *tag; /* "grid", "cross", "logits-x30", ... */
} check_case;

/* Fills up to max cases; quick selects the fast subset. Returns the count. */
int check_cases(check_case *out, int max, int quick);

/* Inputs, reference output and tolerance for one case. */
typedef struct {
    check_case c;
    float *q, *k, *v; /* whole allocations, NaN in layout gaps */
    mha_tensor qv, kv, vv;
    size_t out_floats; /* span of the output view */
    double *ref;       /* [B,H,Nq,d] */
    double mag;        /* max |v|: |out| can never exceed it */
    double tol;        /* allowed max |out - ref| */
} check_data;

uint64_t check_case_seed(uint64_t seed, int index);
mha_status check_prepare(const check_case *c, uint64_t case_seed, check_data *d);
void check_release(check_data *d);

enum { CHECK_PASS, CHECK_FAIL, CHECK_SKIP };
typedef struct {
    double max_err;   /* max |out - ref| */
    char detail[384]; /* first bad element, or why skipped */
} check_report;

/* Runs kernel k on d with `threads` threads into a sentinel-filled, guarded
 * output; compares with the reference. A crash (SIGSEGV/SIGILL/SIGBUS/SIGFPE
 * on the calling thread) is caught and reported as a failure. */
int check_kernel(const mha_kernel *k, const check_data *d, int threads, check_report *r);
/* The same with every option given (block sizes, split; threads from *o). */
int check_kernel_opts(const mha_kernel *k, const check_data *d, const mha_options *o,
                      check_report *r);

/* "B=2 H=8 KV=2 Nq=33 Nkv=33 d=63 causal layout=bnhd input=uniform" */
void check_describe(const check_case *c, char *buf, size_t len);

#endif
