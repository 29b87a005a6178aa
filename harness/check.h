/* check.h - the verification engine shared by `mhabench verify` and the unit
 * tests: the shape grid and adversarial cases, deterministic per-case inputs
 * in several memory layouts, the float64 reference, sentinel-filled outputs
 * with guard zones, and the written-down tolerance. */
#ifndef MHA_HARNESS_CHECK_H
#define MHA_HARNESS_CHECK_H

#include <stdint.h>

#include "mha.h"

/* Inputs: uniform in [-1, 1); near one-hot rows (Q x 30); all scores equal;
 * rows whose scores span hundreds of binades (Q x 400: an exponential taken
 * against anything but a near-maximal reference overflows, so a kernel's
 * lazy or estimated running max must move where it falls short); then
 * corrupted inputs whose NaN/Inf must reach the output as in the oracle
 * (README "NaN and Inf"): one NaN in K, one NaN in Q, one +Inf in Q, one
 * -Inf in K, every visible score -inf, and Q, K x 1e30 (the scores overflow
 * float32: the oracle in double stays finite, a float32 kernel must not, so
 * rows that see a key must come out non-finite). */
enum {
    INPUT_UNIFORM,
    INPUT_LARGE_LOGITS,
    INPUT_EQUAL_SCORES,
    INPUT_WIDE_LOGITS,
    INPUT_NAN_K,
    INPUT_NAN_Q,
    INPUT_INF_Q,
    INPUT_NINF_K,
    INPUT_NINF_ALL,
    INPUT_HUGE,
    INPUT_COUNT
};
/* The memory layouts of a case's tensors: [B,H,N,d], [B,N,H,d], padded
 * (gaps of NaN), and the two of mha_layout: packed (the B sequences of equal
 * length one after another, token-major: the [B,N,H,d] memory with
 * cu_seqlens) and paged (q and out packed, K and V in a pool of cache
 * blocks shuffled by a seeded table, every unused slot NaN). A packed or
 * paged case holds the dense case's values, so the oracle is the dense one;
 * a kernel that does not take the layout runs them as [B,N,H,d]. Ragged
 * lengths are tests/test_layouts.c's. */
enum { LAYOUT_BHND, LAYOUT_BNHD, LAYOUT_PADDED, LAYOUT_PACKED, LAYOUT_PAGED, LAYOUT_COUNT };

/* A case's p.dtype / p.kv_dtype say how its inputs are stored: generated in
 * fp32 as for an fp32 case (the same seed gives the same values), then
 * rounded to bf16/fp16 (nearest even) or quantised per row to int8 with
 * scales; the oracle reads the stored values and the output is of p.dtype. */
typedef struct {
    mha_problem p;
    int input;       /* INPUT_* */
    int layout;      /* LAYOUT_* */
    const char *tag; /* "grid", "cross", "logits-x30", ... */
    int sinks;       /* SINKS_* when p.sinks: how the per-head logits are drawn */
} check_case;

/* The sink logits of a case with p.sinks: uniform in [-2, 2) (as likely
 * above the scores as below); -inf (no sink: the plain softmax); +20 (the
 * sink takes almost all the mass: outputs ~e^-20 of |V|); mixed (head h:
 * -inf, +20, uniform, ... in turn). */
enum { SINKS_UNIFORM, SINKS_NINF, SINKS_LARGE, SINKS_MIXED, SINKS_COUNT };

/* Fills up to max cases (all fp32); quick selects the fast subset. Returns
 * the count. */
int check_cases(check_case *out, int max, int quick);
/* Sets the case's dtypes (kv_dtype equal to dtype is stored as 0). */
void check_case_set_dtypes(check_case *c, mha_dtype dtype, mha_dtype kv_dtype);
/* 0 when an input kind means nothing in these dtypes: -inf in an int8 cache
 * (its row scale turns the row into NaN, which nan-k covers), 1e30 in fp16. */
int check_input_fits(int input, mha_dtype dtype, mha_dtype kv_dtype);
/* 1 if kernel k takes case c's problem (its dtypes and its variants:
 * window, softcap, sinks, head_dim_v); verify and the tests run a case only
 * on the kernels that take it. */
int check_kernel_takes_case(const mha_kernel *k, const check_case *c);

/* The written-down tolerance (reasoning in check.c) of problem p whose
 * stored inputs have max|V| = mag and logit bound smax = scale max|q| max|k|:
 * an output element passes when |out - ref| <= (1 + tol_rel) tol_abs +
 * tol_rel |ref| (tol_rel: the rounding of the output dtype). */
void check_tolerance(const mha_problem *p, double mag, double smax, double *tol_abs,
                     double *tol_rel);

/* The layer in bf16/fp16 (mha_forward with layer.dtype): the error bounds
 * of its stages, first order, derivation in check.c. */
#define CHECK_SIGMAS 4.0
/* A projected value v = sum_k x_k w_k + b (K terms, v2 = ||x o w||_2,
 * vbar = sum_k |x_k w_k| + |b|) as stored: rounded to t; qkv != 0 for Q, K,
 * V (an fp16 one may be rounded to bf16 again inside the attention kernel). */
double check_layer_proj_err(mha_dtype t, int64_t K, double v, double v2, double vbar, int qkv);
/* The error of one head's output row a[0, dk) = sum_j p[j] v_j: p the
 * softmax weights (0 where masked) over nkv keys; q, eq the query and its
 * bounds; k, ek, v, ev rows of stride ld; scale the softmax scale. e[c] gets
 * the bound on |a_c as the layer stores it - a_c|. */
void check_layer_head_err(mha_dtype t, int64_t nkv, int64_t dk, const double *p, const double *q,
                          const double *eq, const double *k, const double *ek, const double *v,
                          const double *ev, int64_t ld, const double *a, double scale, double *e);
/* The bound on |out - ref| of an output y = sum_c a_c w_c + b of d_model
 * terms, given ea[c] (check_layer_head_err) and w the row of W_o. */
double check_layer_out_err(mha_dtype t, int64_t d_model, const double *ea, const double *w,
                           double y, double y2, double ybar);

/* Inputs, reference output and tolerance for one case. */
typedef struct {
    check_case c;
    float *q, *k, *v;      /* fp32 values as stored (widened), NaN in layout gaps */
    void *tq, *tk, *tv;    /* typed storage when a dtype is not fp32, else NULL */
    float *sq, *sk, *sv;   /* int8 row scales, else NULL */
    float *sinks;          /* [H] sink logits when c.p.sinks, else NULL */
    mha_tensor qv, kv, vv; /* what the kernels and the oracle read (typed) */
    size_t out_floats;     /* span of the output view, in elements */
    double *ref;           /* [B,H,Nq,d_v] */
    double mag;            /* max |v|: |out| can never exceed it */
    double smax;           /* scale * max|q| * max|k| (row norms) */
    double tol;            /* allowed max |out - ref| before output rounding */
    double tol_rel;        /* the output dtype's rounding, relative to |ref| */
    /* LAYOUT_PACKED, LAYOUT_PAGED: the problem, views and index arrays a
     * kernel that takes the layout gets (kp is c.p otherwise); the pools
     * and the packed int8 scales [T,G] (check_data.c make_layout) */
    mha_problem kp;
    mha_tensor lq, lk, lv;
    int32_t *cu_q, *cu_kv, *lens, *table;
    void *pool_k, *pool_v;
    float *lsk, *lsv;
} check_data;

uint64_t check_case_seed(uint64_t seed, int index);
/* A paged case's keys per cache block (5 where Nkv is odd, else 16), and
 * the problem of a case's layout (c.p, or it packed / paged). */
int64_t check_page_size(const mha_problem *p);
mha_problem check_layout_problem(const check_case *c);
/* The extras a call in d's layout problem (d->kp) takes: the sink logits,
 * and cu_seqlens_q with cu_seqlens_kv (packed) or seq_lens_kv and the block
 * table (paged). */
mha_extras check_layout_extras(const check_data *d);
mha_status check_prepare(const check_case *c, uint64_t case_seed, check_data *d);
void check_release(check_data *d);

enum { CHECK_PASS, CHECK_FAIL, CHECK_SKIP };
typedef struct {
    double max_err;   /* max |out - ref| */
    char detail[384]; /* first bad element, or why skipped */
} check_report;

/* An output of the case's dtype in a sentinel-filled allocation with guard
 * zones; check_out_compare checks every element against the reference and
 * every other element for stray writes (then restores the sentinels). */
typedef struct {
    void *buf;
    int64_t total; /* elements, guards included */
    mha_dtype dtype;
    mha_tensor_mut view;
} check_out;
int check_out_alloc(const check_data *d, check_out *o); /* 0: out of memory */
void check_out_free(check_out *o);
int check_out_compare(const check_data *d, const check_out *o, check_report *r);

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
