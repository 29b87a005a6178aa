/* decode.c - kernels decode.<isa>: attention for few query rows over a long
 * KV cache (autoregressive decode, Nq = 1), where the limit is memory
 * bandwidth, not FLOPs. Per (batch, KV head) the query rows of every head in
 * the group share one pass over K and V (GQA reads the cache once, not
 * heads/kv_heads times). Scores are dot products vectorised over head_dim;
 * the online softmax runs with keys along the lanes. When there are fewer
 * (batch, KV head) pairs than threads, the KV sequence is split across threads
 * and the partial results merged with their log-sum-exp (Flash-Decoding).
 * Any problem is accepted (long Nq just makes many row chunks). */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "internal.h"
#include "ukernels.h"

#define LOG2E 1.44269504088896341f
enum { DEC_RB = 4, DEC_BK = 64 }; /* rows per pass over K/V, keys per softmax block */
enum { DEC_PF_BYTES = 8192 };     /* how far ahead K / V are prefetched (measured best here) */

static inline void prefetch_row(const float *p, int64_t d) {
    for (int64_t c = 0; c < d; c += 16) __builtin_prefetch(p + c, 0, 0);
}

typedef struct {
    int64_t rows;   /* query rows per (batch, KV head): group * seq_q */
    int64_t nsplit; /* KV chunks per (batch, KV head) */
    int64_t chunk;  /* keys per chunk */
    size_t part;    /* bytes of the partial results (0 when nsplit == 1) */
    size_t scratch; /* bytes per thread */
} dec_plan;

static dec_plan plan(const mha_problem *p, int threads) {
    dec_plan P;
    const int64_t group = p->heads / p->kv_heads, pairs = p->batch * p->kv_heads;
    P.rows = group * p->seq_q;
    P.nsplit = 1;
    if (P.rows <= 4 * DEC_RB && pairs < 2 * (int64_t)threads) {
        /* enough chunks that every thread has about two, none under 256 keys */
        int64_t want = (2 * (int64_t)threads + pairs - 1) / pairs;
        const int64_t most = p->seq_kv / 256 > 1 ? p->seq_kv / 256 : 1;
        P.nsplit = want < most ? want : most;
    }
    P.chunk = (p->seq_kv + P.nsplit - 1) / P.nsplit;
    const size_t f = sizeof(float), d = (size_t)p->head_dim;
    P.part =
        P.nsplit > 1
            ? mha_align64(mha_mul_sz(mha_mul_sz((size_t)(pairs * P.rows * P.nsplit), d + 2), f))
            : 0;
    /* s[RB][BK] scores, o[RB][dp] accumulators, m/l per row */
    const size_t dp = (d + 15) / 16 * 16;
    P.scratch = mha_align64((DEC_RB * DEC_BK + DEC_RB * dp + 2 * DEC_RB) * f);
    return P;
}

size_t MHA_CAT(MHA_SYM(decode), _workspace)(const mha_problem *p, const mha_options *o,
                                            int threads) {
    (void)o;
    const dec_plan P = plan(p, threads);
    return mha_add_sz(P.part, mha_mul_sz(P.scratch, (size_t)threads));
}

/* out[r] = q[r] . krow for r < R (R <= DEC_RB, a constant where inlined):
 * each K vector is loaded once for all rows, two accumulators per row, and
 * the row sums are reduced together. */
static inline __attribute__((always_inline)) void
dots_n(const int R, const float *const *q, const float *krow, int64_t d, float out[DEC_RB]) {
    vf acc[DEC_RB] = {vzero(), vzero(), vzero(), vzero()}, acc2[DEC_RB];
    for (int r = 0; r < R; r++) acc2[r] = vzero();
    int64_t c = 0;
    for (; c + 2 * VW <= d; c += 2 * VW) {
        const vf k0 = vloadu(krow + c), k1 = vloadu(krow + c + VW);
        for (int r = 0; r < R; r++) {
            acc[r] = vfma(vloadu(q[r] + c), k0, acc[r]);
            acc2[r] = vfma(vloadu(q[r] + c + VW), k1, acc2[r]);
        }
    }
    for (; c < d; c += VW) {
        const int t = d - c < VW ? (int)(d - c) : VW;
        const vf kv = vloadu_n(krow + c, t);
        for (int r = 0; r < R; r++) acc[r] = vfma(vloadu_n(q[r] + c, t), kv, acc[r]);
    }
    for (int r = 0; r < R; r++) acc[r] = vadd(acc[r], acc2[r]);
    vhsum4(acc, out);
}

static inline float dot(const float *a, const float *b, int64_t d) {
    vf acc0 = vzero(), acc1 = vzero();
    int64_t c = 0;
    for (; c + 2 * VW <= d; c += 2 * VW) {
        acc0 = vfma(vloadu(a + c), vloadu(b + c), acc0);
        acc1 = vfma(vloadu(a + c + VW), vloadu(b + c + VW), acc1);
    }
    for (; c + VW <= d; c += VW) acc0 = vfma(vloadu(a + c), vloadu(b + c), acc0);
    if (c < d) acc1 = vfma(vloadu_n(a + c, (int)(d - c)), vloadu_n(b + c, (int)(d - c)), acc1);
    return vhsum(vadd(acc0, acc1));
}

/* Scores of keys [j0, j0 + bk) (log2 units, -inf past a row's end) into
 * s[r][j]. The stream is memory-bound with little work per byte, so the K
 * rows pf ahead are prefetched; with several rows, so are the V rows of this
 * block, which the register-blocked P.V reads next. Kept out of line per row
 * count: one loop nest per case lets each keep its registers (one row ran
 * 10% slower sharing a loop with the multi-row case). */
static __attribute__((noinline)) void scores_block(int R, const float *const *qrow,
                                                   const int64_t *end, const float *kh, int64_t skn,
                                                   const float *vh, int64_t svn, int64_t j0,
                                                   int64_t bk, int64_t kend, int64_t pf, int64_t d,
                                                   float qscale, float *s) {
    for (int64_t j = 0; j < bk; j++) {
        const float *krow = kh + (j0 + j) * skn;
        if (j0 + j + pf < kend) {
            prefetch_row(krow + pf * skn, d);
            prefetch_row(vh + (j0 + j) * svn, d);
        }
        float dj[DEC_RB];
        switch (R) {
        case 2:
            dots_n(2, qrow, krow, d, dj);
            break;
        case 3:
            dots_n(3, qrow, krow, d, dj);
            break;
        default:
            dots_n(4, qrow, krow, d, dj);
            break;
        }
        for (int r = 0; r < R; r++)
            s[r * DEC_BK + j] = j0 + j < end[r] ? dj[r] * qscale : -INFINITY;
    }
}

static __attribute__((noinline)) void scores_block1(const float *qrow, int64_t end, const float *kh,
                                                    int64_t skn, int64_t j0, int64_t bk,
                                                    int64_t kend, int64_t pf, int64_t d,
                                                    float qscale, float *s) {
    for (int64_t j = 0; j < bk; j++) {
        const float *krow = kh + (j0 + j) * skn;
        if (j0 + j + pf < kend) prefetch_row(krow + pf * skn, d);
        s[j] = j0 + j < end ? dot(qrow, krow, d) * qscale : -INFINITY;
    }
}

typedef struct {
    const mha_problem *p;
    const mha_tensor *q, *k, *v;
    int64_t group;
    float qscale;
} dec_ctx;

/* One row: o = alpha o + sum_j p[j] V[j0 + j] as a plain stream, V row by
 * row with its own prefetch ahead and o in L1 (out of line, as above). */
static __attribute__((noinline)) void pv_block1(int init, float alpha, const float *p,
                                                const float *vh, int64_t svn, int64_t j0,
                                                int64_t bk, int64_t kend, int64_t pf, int64_t d,
                                                int64_t dp, float *o) {
    if (init == MHA_INIT_ZERO) memset(o, 0, (size_t)dp * sizeof(float));
    if (init == MHA_INIT_ROWSCALE)
        for (int64_t c = 0; c < dp; c += VW) vstoreu(o + c, vmul(vloadu(o + c), vset1(alpha)));
    for (int64_t j = 0; j < bk; j++) {
        const float *vrow = vh + (j0 + j) * svn;
        if (j0 + j + pf < kend) prefetch_row(vrow + pf * svn, d);
        const vf pj = vset1(p[j]);
        int64_t c = 0;
        for (; c + VW <= d; c += VW) vstoreu(o + c, vfma(pj, vloadu(vrow + c), vloadu(o + c)));
        if (c < d) vstoreu(o + c, vfma(pj, vloadu_n(vrow + c, (int)(d - c)), vloadu(o + c)));
    }
}

/* Rows [r0, r0+R) of KV head (b, g) over keys [k0, k1): leaves the unnormalised
 * o, the max m (log2 units) and the sum l per row in the scratch arrays. */
static void dec_rows(const dec_ctx *x, int64_t b, int64_t g, int64_t r0, int R, int64_t k0,
                     int64_t k1, float *s, float *o, int64_t dp, float *m, float *l) {
    const mha_problem *p = x->p;
    const int64_t d = p->head_dim, Nq = p->seq_q;
    const float *qrow[DEC_RB];
    int64_t end[DEC_RB];
    for (int r = 0; r < R; r++) {
        const int64_t rr = r0 + r, h = g * x->group + rr / Nq, i = rr % Nq;
        qrow[r] = (const float *)x->q->data + b * x->q->stride_b + h * x->q->stride_h +
                  i * x->q->stride_n;
        end[r] = mha_kv_end(p, i);
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }
    const float *kh = (const float *)x->k->data + b * x->k->stride_b + g * x->k->stride_h;
    const float *vh = (const float *)x->v->data + b * x->v->stride_b + g * x->v->stride_h;
    const int64_t pf = DEC_PF_BYTES / (d * (int64_t)sizeof(float)) > 4
                           ? DEC_PF_BYTES / (d * (int64_t)sizeof(float))
                           : 4;
    int64_t kend = k0; /* keys any row sees */
    for (int r = 0; r < R; r++) kend = end[r] > kend ? end[r] : kend;
    if (kend > k1) kend = k1;
    if (kend <= k0) /* no row sees a key of this chunk: o = 0, m = -inf, l = 0 */
        for (int r = 0; r < R; r++) memset(o + r * dp, 0, (size_t)d * sizeof(float));
    for (int64_t j0 = k0; j0 < kend; j0 += DEC_BK) {
        const int64_t bk = kend - j0 < DEC_BK ? kend - j0 : DEC_BK;
        /* scores: one pass over the K block serves every row */
        if (R == 1)
            scores_block1(qrow[0], end[0], kh, x->k->stride_n, j0, bk, kend, pf, d, x->qscale, s);
        else
            scores_block(R, qrow, end, kh, x->k->stride_n, vh, x->v->stride_n, j0, bk, kend, pf, d,
                         x->qscale, s);
        float arow[DEC_RB];
        int rescale = 0;
        for (int r = 0; r < R; r++) {
            float *sr = s + r * DEC_BK;
            vf mx = vset1(-INFINITY);
            int64_t j = 0;
            for (; j + VW <= bk; j += VW) mx = vmax(mx, vloadu(sr + j));
            float bmax = vhmax(mx);
            for (; j < bk; j++) bmax = sr[j] > bmax ? sr[j] : bmax;
            const float m_new = bmax > m[r] ? bmax : m[r];
            const float m_use = m_new == -INFINITY ? 0.0f : m_new;
            const float alpha = m[r] == -INFINITY ? 0.0f : exp2f(m[r] - m_use);
            vf sum = vzero();
            const vf mu = vset1(m_use);
            for (j = 0; j + VW <= bk; j += VW) {
                const vf e = vexp2_nonpos(vsub(vloadu(sr + j), mu));
                vstoreu(sr + j, e);
                sum = vadd(sum, e);
            }
            if (j < bk) {
                const int t = (int)(bk - j);
                const vf e = vexp2_nonpos(vsub(vloadu_n(sr + j, t), mu));
                vstoreu_n(sr + j, e, t);
                sum = vadd(sum, vloadu_n(sr + j, t));
            }
            l[r] = l[r] * alpha + vhsum(sum);
            m[r] = m_new;
            arow[r] = alpha;
            rescale |= alpha != 1.0f;
        }
        /* o[r] = alpha[r] o[r] + sum_j p[r][j] V[j0+j]. Several rows (GQA
         * groups, Nq > 1): the register-blocked micro-kernel, V read in place
         * (its rows were prefetched during the scores). One row is a pure
         * stream: V row by row with its own prefetch ahead, o in L1. */
        const int init = j0 == k0 ? MHA_INIT_ZERO : (rescale ? MHA_INIT_ROWSCALE : MHA_INIT_ACC);
        if (R > 1) {
            k_gemm(R, d, bk, s, DEC_BK, 1, vh + j0 * x->v->stride_n, x->v->stride_n, o, dp,
                   init | MHA_B_EXACT, arow);
            continue;
        }
        pv_block1(init, arow[0], s, vh, x->v->stride_n, j0, bk, kend, pf, d, dp, o);
    }
}

mha_status MHA_CAT(MHA_SYM(decode), _run)(const mha_problem *p, const mha_options *o, int threads,
                                          const mha_tensor *q, const mha_tensor *k,
                                          const mha_tensor *v, const mha_tensor_mut *out,
                                          void *workspace) {
    (void)o;
    const dec_plan P = plan(p, threads);
    const dec_ctx x = {p, q, k, v, p->heads / p->kv_heads, mha_problem_scale(p) * LOG2E};
    const int64_t d = p->head_dim, dp = (d + 15) / 16 * 16, Nq = p->seq_q, G = p->kv_heads;
    const int64_t nrc = (P.rows + DEC_RB - 1) / DEC_RB, items = p->batch * G * nrc * P.nsplit;
    float *part = (float *)workspace; /* [pair][split][row][d + 2]: o, m, l */
    char *scratch0 = (char *)workspace + P.part;

#pragma omp parallel num_threads(threads)
    {
        char *sc = scratch0 + (size_t)omp_get_thread_num() * P.scratch;
        float *s = (float *)sc, *ob = s + DEC_RB * DEC_BK, *m = ob + DEC_RB * dp, *l = m + DEC_RB;
#pragma omp for schedule(dynamic, 1)
        for (int64_t it = 0; it < items; it++) {
            const int64_t split = it % P.nsplit, rc = (it / P.nsplit) % nrc,
                          pair = it / (P.nsplit * nrc);
            const int64_t b = pair / G, g = pair % G, r0 = rc * DEC_RB;
            const int R = (int)(P.rows - r0 < DEC_RB ? P.rows - r0 : DEC_RB);
            const int64_t k0 = split * P.chunk,
                          k1 = k0 + P.chunk < p->seq_kv ? k0 + P.chunk : p->seq_kv;
            dec_rows(&x, b, g, r0, R, k0, k1, s, ob, dp, m, l);
            for (int r = 0; r < R; r++) {
                const int64_t rr = r0 + r;
                if (P.nsplit > 1) {
                    float *dst = part + ((pair * P.nsplit + split) * P.rows + rr) * (d + 2);
                    memcpy(dst, ob + r * dp, (size_t)d * sizeof(float));
                    dst[d] = m[r];
                    dst[d + 1] = l[r];
                } else {
                    const int64_t h = g * x.group + rr / Nq, i = rr % Nq;
                    float *orow = (float *)out->data + b * out->stride_b + h * out->stride_h +
                                  i * out->stride_n;
                    k_store_normalized(1, d, ob + r * dp, dp, &l[r], mha_rows_blind(p, i, 1), orow,
                                       out->stride_n);
                }
            }
        }
        if (P.nsplit > 1) {
            /* Merge the chunks: m = max m_s, l = sum l_s 2^(m_s - m), o likewise. */
#pragma omp for schedule(static)
            for (int64_t pr = 0; pr < p->batch * G * P.rows; pr++) {
                const int64_t pair = pr / P.rows, rr = pr % P.rows, b = pair / G, g = pair % G;
                float mmax = -INFINITY, lsum = 0.0f;
                for (int64_t sp = 0; sp < P.nsplit; sp++) {
                    const float ms = part[((pair * P.nsplit + sp) * P.rows + rr) * (d + 2) + d];
                    mmax = ms > mmax ? ms : mmax;
                }
                float *acc = ob; /* this thread's scratch row */
                memset(acc, 0, (size_t)dp * sizeof(float));
                for (int64_t sp = 0; sp < P.nsplit; sp++) {
                    const float *src = part + ((pair * P.nsplit + sp) * P.rows + rr) * (d + 2);
                    /* A chunk that saw no key (or only -inf scores) adds
                     * nothing; l is NaN, not 0, when a score was NaN. */
                    if (src[d + 1] == 0.0f) continue;
                    const float w = exp2f(src[d] - mmax);
                    lsum += src[d + 1] * w;
                    for (int64_t c = 0; c < d; c++) acc[c] += w * src[c];
                }
                const int64_t h = g * x.group + rr / Nq, i = rr % Nq;
                float *orow =
                    (float *)out->data + b * out->stride_b + h * out->stride_h + i * out->stride_n;
                k_store_normalized(1, d, acc, dp, &lsum, mha_rows_blind(p, i, 1), orow,
                                   out->stride_n);
            }
        }
    }
    return MHA_OK;
}
