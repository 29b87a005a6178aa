/* tiled.c - kernels tiled.<isa>: the unfused, materialising algorithm done
 * well. Per (batch, head) the whole score matrix S^T [Nkv][Nq] is written,
 * computed in cache-sized blocks (query block x KV block, d in the micro-tile),
 * then an exact two-pass softmax per query, then O = P V blocked over KV.
 * Causal blocks above the diagonal are never computed. Compiled per ISA. */
#include <math.h>
#include <omp.h>

#include "internal.h"
#include "phase.h"
#include "ukernels.h"

#define LOG2E 1.44269504088896341f
#define TILED_BQ (4 * MHA_NR > 64 ? 4 * MHA_NR : 64)
#define TILED_BK 64

typedef struct {
    int64_t bq, bqp, bk, nqp, dp;
    size_t s, qt, ob, vec, per_thread;
} tiled_layout;

static tiled_layout tiled_plan(const mha_problem *p, const mha_options *o) {
    tiled_layout L;
    L.bq = o->block_q > 0 ? o->block_q : TILED_BQ;
    /* Query blocks start on a vector boundary: each block's columns of S^T
     * are loaded aligned and padded to VW, so a block that is not a multiple
     * of VW would overlap the next one. Any block_q is accepted and rounded
     * up; one block covers a shorter sequence. */
    L.bq = (L.bq + VW - 1) / VW * VW;
    if (L.bq > p->seq_q) L.bq = p->seq_q;
    L.bqp = (L.bq + VW - 1) / VW * VW;
    L.bk = o->block_kv > 0 ? o->block_kv : TILED_BK;
    if (L.bk > p->seq_kv) L.bk = p->seq_kv;
    L.nqp = (p->seq_q + VW - 1) / VW * VW;
    L.dp = (p->head_dim + VW - 1) / VW * VW;
    const size_t f = sizeof(float), d = (size_t)p->head_dim;
    L.s = mha_align64(mha_mul_sz(mha_mul_sz((size_t)p->seq_kv, (size_t)L.nqp), f));
    L.qt = mha_align64(mha_mul_sz(mha_mul_sz(d, (size_t)L.bqp), f));
    L.ob = mha_align64(mha_mul_sz(mha_mul_sz((size_t)L.dp, (size_t)L.bqp), f));
    L.vec = mha_align64(mha_mul_sz((size_t)L.nqp, f));
    L.per_thread = mha_add_sz(mha_add_sz(L.s, L.qt), mha_add_sz(L.ob, 2 * L.vec));
    return L;
}

size_t MHA_CAT(MHA_SYM(tiled), _workspace)(const mha_problem *p, const mha_options *o,
                                           int threads) {
    return mha_mul_sz(tiled_plan(p, o).per_thread, (size_t)threads);
}

mha_status MHA_CAT(MHA_SYM(tiled), _run)(const mha_problem *p, const mha_options *o, int threads,
                                         const mha_tensor *q, const mha_tensor *k,
                                         const mha_tensor *v, const mha_extras *ex,
                                         const mha_tensor_mut *out, void *workspace) {
    (void)ex;
    const tiled_layout L = tiled_plan(p, o);
    const int64_t H = p->heads, group = p->heads / p->kv_heads;
    const int64_t Nq = p->seq_q, d = p->head_dim, off = p->seq_kv - Nq;
    const float qscale = mha_problem_scale(p) * LOG2E;
    const int64_t nqb = (Nq + L.bq - 1) / L.bq, pairs = p->batch * H;

#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
    for (int64_t bh = 0; bh < pairs; bh++) {
        const int64_t b = bh / H, h = bh % H, g = h / group;
        char *ws = (char *)workspace + (size_t)omp_get_thread_num() * L.per_thread;
        float *S = (float *)ws, *Qt = (float *)(ws + L.s), *Ob = (float *)(ws + L.s + L.qt);
        float *m = (float *)(ws + L.s + L.qt + L.ob), *l = m + L.vec / sizeof(float);
        PHASE_START();
        const float *qh = (const float *)q->data + b * q->stride_b + h * q->stride_h;
        const float *kh = (const float *)k->data + b * k->stride_b + g * k->stride_h;
        const float *vh = (const float *)v->data + b * v->stride_b + g * v->stride_h;
        float *oh = (float *)out->data + b * out->stride_b + h * out->stride_h;

        /* Phase 1: S^T = K Q^T in (KV block x query block) tiles; blocks past
         * the causal diagonal are skipped, the diagonal ones masked. */
        for (int64_t qb = 0; qb < nqb; qb++) {
            const int64_t i0 = qb * L.bq, n = Nq - i0 < L.bq ? Nq - i0 : L.bq;
            const int64_t ncols = (n + VW - 1) / VW * VW, kv_end = mha_kv_end(p, i0 + n - 1);
            if (kv_end == 0) continue;
            k_pack_transpose(n, d, qh + i0 * q->stride_n, q->stride_n, qscale, Qt, L.bqp);
            PHASE(PHASE_PACK);
            for (int64_t j0 = 0; j0 < kv_end; j0 += L.bk) {
                const int64_t bkk = kv_end - j0 < L.bk ? kv_end - j0 : L.bk;
                float *sblk = S + j0 * L.nqp + i0;
                k_gemm(bkk, ncols, d, kh + j0 * k->stride_n, k->stride_n, 1, Qt, L.bqp, sblk, L.nqp,
                       MHA_INIT_ZERO, NULL);
                if (p->causal && j0 + bkk - 1 > i0 + off) {
                    for (int64_t j = 0; j < bkk; j++) {
                        int64_t t = j0 + j - off - i0;
                        if (t > ncols) t = ncols;
                        for (int64_t i = 0; i < t; i++) sblk[j * L.nqp + i] = -INFINITY;
                    }
                }
            }
            PHASE(PHASE_QK);
        }
        /* Phase 2: exact softmax numerators per query column (max, then exp2 + sum). */
        for (int64_t qb = 0; qb < nqb; qb++) {
            const int64_t i0 = qb * L.bq, n = Nq - i0 < L.bq ? Nq - i0 : L.bq;
            const int64_t ncols = (n + VW - 1) / VW * VW, kv_end = mha_kv_end(p, i0 + n - 1);
            if (kv_end > 0) k_softmax_columns(kv_end, ncols, S + i0, L.nqp, m + i0, l + i0);
        }
        PHASE(PHASE_SOFTMAX);
        /* Phase 3: O = P V with queries as rows and V read in place, blocked
         * over KV so the P^T block stays in L1. */
        for (int64_t qb = 0; qb < nqb; qb++) {
            const int64_t i0 = qb * L.bq, n = Nq - i0 < L.bq ? Nq - i0 : L.bq;
            const int64_t kv_end = mha_kv_end(p, i0 + n - 1);
            if (kv_end == 0) {
                for (int64_t i = 0; i < n; i++)
                    for (int64_t c = 0; c < d; c++) oh[(i0 + i) * out->stride_n + c] = 0.0f;
                continue;
            }
            for (int64_t j0 = 0; j0 < kv_end; j0 += L.bk) {
                const int64_t bkk = kv_end - j0 < L.bk ? kv_end - j0 : L.bk;
                k_gemm(n, d, bkk, S + j0 * L.nqp + i0, 1, L.nqp, vh + j0 * v->stride_n, v->stride_n,
                       Ob, L.dp, (j0 == 0 ? MHA_INIT_ZERO : MHA_INIT_ACC) | MHA_B_EXACT, NULL);
            }
            PHASE(PHASE_PV);
            k_store_normalized(n, d, Ob, L.dp, l + i0, mha_rows_blind(p, i0, n),
                               oh + i0 * out->stride_n, out->stride_n);
            PHASE(PHASE_PACK);
        }
    }
    return MHA_OK;
}
