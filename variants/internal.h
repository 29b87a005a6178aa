/* internal.h - what the library's own files share and users do not see: the
 * kernel signature, the registry entry, the per-ISA entry points (declared
 * from kernels.inc) and the error-message plumbing. */
#ifndef MHA_VARIANTS_INTERNAL_H
#define MHA_VARIANTS_INTERNAL_H

#include "sizes.h"
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "mha.h"
#include "dtype.h"
#include "ops.h"
#include "overlap.h"

/* The one kernel signature. Arguments are validated by mha_attend before the
 * call; workspace is aligned and large enough; threads is resolved (>= 1). */
typedef mha_status (*mha_attend_fn)(const mha_problem *p, const mha_options *o, int threads,
                                    const mha_tensor *q, const mha_tensor *k, const mha_tensor *v,
                                    const mha_tensor_mut *out, void *workspace);
/* Workspace bytes for (p, o, threads); SIZE_MAX when the count overflows. */
typedef size_t (*mha_workspace_fn)(const mha_problem *p, const mha_options *o, int threads);

struct mha_kernel {
    const char *name;
    const char *algorithm;
    mha_isa isa;
    unsigned traits; /* MHA_KT_* */
    int rank;
    unsigned dtypes, kv_dtypes; /* MHA_DTYPE_BIT masks */
    const char *summary;
    mha_attend_fn run;
    mha_workspace_fn workspace;
};

#define MHA_KERNEL(name, alg, isa, sym, traits, rank, dtypes, kv_dtypes, summary)                  \
    mha_status sym##_run(const mha_problem *, const mha_options *, int, const mha_tensor *,        \
                         const mha_tensor *, const mha_tensor *, const mha_tensor_mut *, void *);  \
    size_t sym##_workspace(const mha_problem *, const mha_options *, int);
#include "kernels.inc"
#undef MHA_KERNEL

/* Checks the views of a call against p: present, of the problem's dtypes
 * (k, v: its kv dtype), int8 scales present, strides sane (out may be NULL). */
mha_status mha_check_views(const mha_problem *p, const mha_tensor *q, const mha_tensor *kt,
                           const mha_tensor *v, const mha_tensor_mut *out);

/* MHA_OK if a and b share no byte, else MHA_EINVAL naming them ("a is
 * written while b is still read"). */
mha_status mha_check_disjoint(const char *a_name, const mha_span *a, const char *b_name,
                              const mha_span *b);

/* Checks options (threads 0..4096, blocks 0..4096, split): the one rule of
 * mha_attend, mha_workspace_size, mha_resolve_options and mha_select. */
mha_status mha_check_options(const mha_options *o);

/* Sets this thread's detailed error message and returns st. */
mha_status mha_set_error(mha_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void mha_clear_error(void);

/* size helpers (mha_mul_sz, mha_add_sz, mha_align64): kernels/sizes.h */

/* Visible key range for query row i (global index): keys [0, end) where
 * end = min(seq_kv, i + seq_kv - seq_q + 1) when causal, clamped at 0. */
static inline int64_t mha_kv_end(const mha_problem *p, int64_t i) {
    if (!p->causal) return p->seq_kv;
    int64_t e = i + p->seq_kv - p->seq_q + 1;
    return e < 0 ? 0 : (e > p->seq_kv ? p->seq_kv : e);
}

/* How many of the query rows [i0, i0 + n) see no key at all: the first ones
 * of a causal problem with seq_q > seq_kv (row i sees none iff
 * i < seq_q - seq_kv). Their output is zeros by convention; every other row
 * sees a key, and an all -inf (or NaN) row of scores there gives NaN. */
static inline int64_t mha_rows_blind(const mha_problem *p, int64_t i0, int64_t n) {
    if (!p->causal) return 0;
    const int64_t b = p->seq_q - p->seq_kv - i0;
    return b < 0 ? 0 : (b > n ? n : b);
}

/* ---- split-KV decode: what decode.c and decode_bf16.c share ----------------
 * KV chunks per (batch, KV head) pair: with at most max_rows query rows per
 * pair and fewer pairs than twice the threads, enough chunks that every
 * thread has about two, none under 256 keys; else one. */
static inline int64_t mha_decode_nsplit(const mha_problem *p, int64_t rows, int64_t max_rows,
                                        int threads) {
    const int64_t pairs = p->batch * p->kv_heads;
    if (rows > max_rows || pairs >= 2 * (int64_t)threads) return 1;
    const int64_t want = (2 * (int64_t)threads + pairs - 1) / pairs;
    const int64_t most = p->seq_kv / 256 > 1 ? p->seq_kv / 256 : 1;
    return want < most ? want : most;
}

/* The log-sum-exp merge of one query row's nsplit partial results, each d
 * values of o then m then l, `stride` floats apart: acc[0, d) = sum over the
 * chunks of o_s 2^(m_s - m) with m = max m_s; returns l = sum l_s 2^(m_s - m).
 * A chunk that saw no key (or only -inf scores: l == 0) adds nothing; l is
 * NaN, not 0, when a score was NaN, and stays NaN. */
static inline float mha_decode_merge(const float *part, int64_t nsplit, int64_t stride, int64_t d,
                                     float *acc) {
    float mmax = -INFINITY, lsum = 0.0f;
    for (int64_t sp = 0; sp < nsplit; sp++) {
        const float ms = part[sp * stride + d];
        mmax = ms > mmax ? ms : mmax;
    }
    for (int64_t c = 0; c < d; c++) acc[c] = 0.0f;
    for (int64_t sp = 0; sp < nsplit; sp++) {
        const float *src = part + sp * stride;
        if (src[d + 1] == 0.0f) continue;
        const float w = exp2f(src[d] - mmax);
        lsum += src[d + 1] * w;
        for (int64_t c = 0; c < d; c++) acc[c] += w * src[c];
    }
    return lsum;
}

#endif
