/* flash.c - kernels flash.<isa>: FlashAttention-2 style streaming softmax.
 * For each (batch, head, query block) the KV sequence is streamed in blocks;
 * the running max m and sum l live per query, the unnormalised output O^T is
 * rescaled (fused into the P.V accumulator load) only when some max changed,
 * and normalised once at the end. No Nq x Nkv matrix ever exists: workspace is
 * threads x (Q^T + S^T + O^T blocks). Written once, compiled per ISA. */
#include <math.h>
#include <omp.h>

#include "internal.h"
#include "ukernels.h"

#define LOG2E 1.44269504088896341f

/* Default blocks: one micro-tile width of queries per block keeps Q^T, S^T and
 * O^T L1/L2 resident; 64 keys per KV block amortises the softmax pass. */
#if VW >= 16
#define FLASH_BQ 64
#elif VW >= 8
#define FLASH_BQ 48
#else
#define FLASH_BQ 32
#endif
#define FLASH_BK 64

typedef struct {
    int64_t bq, bqp, bk;
    size_t qt, st, ot, vec, per_thread; /* byte sizes, each 64-aligned */
} flash_layout;

static flash_layout flash_plan(const mha_problem *p, const mha_options *o) {
    flash_layout L;
    L.bq = o->block_q > 0 ? o->block_q : FLASH_BQ;
    if (L.bq > p->seq_q) L.bq = p->seq_q;
    L.bqp = (L.bq + VW - 1) / VW * VW;
    L.bk = o->block_kv > 0 ? o->block_kv : FLASH_BK;
    if (L.bk > p->seq_kv) L.bk = p->seq_kv;
    const size_t d = (size_t)p->head_dim, bqp = (size_t)L.bqp, f = sizeof(float);
    L.qt = mha_align64(mha_mul_sz(mha_mul_sz(d, bqp), f));
    L.st = mha_align64(mha_mul_sz(mha_mul_sz((size_t)L.bk, bqp), f));
    L.ot = L.qt;
    L.vec = mha_align64(bqp * f);
    L.per_thread = mha_add_sz(mha_add_sz(L.qt, L.st), mha_add_sz(L.ot, 3 * L.vec));
    return L;
}

size_t MHA_CAT(MHA_SYM(flash), _workspace)(const mha_problem *p, const mha_options *o,
                                           int threads) {
    return mha_mul_sz(flash_plan(p, o).per_thread, (size_t)threads);
}

/* Keys j with j0 + j > i + off are invisible to query column i: fill those
 * leading columns of each row with -inf (only diagonal blocks get here). */
static void mask_block(int64_t bkk, int64_t ncols, float *s, int64_t ld, int64_t j0, int64_t i0,
                       int64_t off) {
    for (int64_t j = 0; j < bkk; j++) {
        int64_t t = j0 + j - off - i0; /* columns i < t cannot see key j0 + j */
        if (t <= 0) continue;
        if (t > ncols) t = ncols;
        for (int64_t i = 0; i < t; i++) s[j * ld + i] = -INFINITY;
    }
}

mha_status MHA_CAT(MHA_SYM(flash), _run)(const mha_problem *p, const mha_options *o, int threads,
                                         const mha_tensor *q, const mha_tensor *k,
                                         const mha_tensor *v, const mha_tensor_mut *out,
                                         void *workspace) {
    const flash_layout L = flash_plan(p, o);
    const int64_t H = p->heads, group = p->heads / p->kv_heads;
    const int64_t Nq = p->seq_q, Nkv = p->seq_kv, d = p->head_dim, off = Nkv - Nq;
    const float qscale = mha_problem_scale(p) * LOG2E; /* scores in log2 units -> exp2 */
    const int64_t nqb = (Nq + L.bq - 1) / L.bq, items = p->batch * H * nqb;

#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
    for (int64_t it = 0; it < items; it++) {
        /* Last query blocks first: under a causal mask they cost the most. */
        const int64_t bh = it / nqb, qb = nqb - 1 - it % nqb;
        const int64_t b = bh / H, h = bh % H, g = h / group;
        char *ws = (char *)workspace + (size_t)omp_get_thread_num() * L.per_thread;
        float *Qt = (float *)ws, *St = (float *)(ws + L.qt), *Ot = (float *)(ws + L.qt + L.st);
        float *m = (float *)(ws + L.qt + L.st + L.ot), *l = m + L.vec / sizeof(float),
              *alpha = l + L.vec / sizeof(float);
        const float *qh = q->data + b * q->stride_b + h * q->stride_h;
        const float *kh = k->data + b * k->stride_b + g * k->stride_h;
        const float *vh = v->data + b * v->stride_b + g * v->stride_h;
        float *oh = out->data + b * out->stride_b + h * out->stride_h;

        const int64_t i0 = qb * L.bq, n = Nq - i0 < L.bq ? Nq - i0 : L.bq;
        const int64_t ncols = (n + VW - 1) / VW * VW;
        const int64_t kv_end = mha_kv_end(p, i0 + n - 1); /* keys any row here sees */
        for (int64_t i = 0; i < ncols; i++) {
            m[i] = -INFINITY;
            l[i] = 0.0f;
        }
        if (kv_end > 0)
            MHA_SYM(pack_transpose)(n, d, qh + i0 * q->stride_n, q->stride_n, qscale, Qt, L.bqp);
        for (int64_t j0 = 0; j0 < kv_end; j0 += L.bk) {
            const int64_t bkk = kv_end - j0 < L.bk ? kv_end - j0 : L.bk;
            /* S^T[j][i] = K[j0+j] . Q^T[:, i] */
            MHA_SYM(gemm)
            (bkk, ncols, d, kh + j0 * k->stride_n, k->stride_n, 1, Qt, L.bqp, St, L.bqp,
             MHA_INIT_ZERO, NULL);
            if (p->causal && j0 + bkk - 1 > i0 + off)
                mask_block(bkk, ncols, St, L.bqp, j0, i0, off);
            const int changed = MHA_SYM(softmax_online)(bkk, ncols, St, L.bqp, m, l, alpha);
            /* O^T[c][i] = alpha[i] O^T[c][i] + sum_j V[j0+j][c] P^T[j][i] */
            MHA_SYM(gemm)
            (d, ncols, bkk, vh + j0 * v->stride_n, 1, v->stride_n, St, L.bqp, Ot, L.bqp,
             j0 == 0 ? MHA_INIT_ZERO : (changed ? MHA_INIT_SCALE : MHA_INIT_ACC), alpha);
        }
        if (kv_end == 0) {
            for (int64_t i = 0; i < n; i++)
                for (int64_t c = 0; c < d; c++) oh[(i0 + i) * out->stride_n + c] = 0.0f;
        } else {
            MHA_SYM(store_normalized)(n, d, Ot, L.bqp, l, oh + i0 * out->stride_n, out->stride_n);
        }
    }
    return MHA_OK;
}
