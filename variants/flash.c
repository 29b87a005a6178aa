/* flash.c - kernels flash.<isa>: FlashAttention-2 style streaming softmax.
 * For each (batch, head, query block) the KV sequence is streamed in blocks;
 * the running max m and sum l live per query, the unnormalised output O is
 * rescaled (fused into the P.V accumulator load) only when some max changed,
 * and normalised once at the end. No Nq x Nkv matrix ever exists: workspace is
 * threads x (Q^T + S^T + O blocks). Written once, compiled per ISA.
 *
 * Scores are computed transposed, S^T = K Q^T (queries along the vector
 * lanes), so the softmax is lane-wise; O = P V is computed with queries as
 * rows and head_dim along the lanes, reading V in place. Causal diagonal
 * blocks skip the key/query tiles the mask removes entirely. */
#include <math.h>
#include <omp.h>

#include "internal.h"
#include "phase.h"
#include "ukernels.h"

#define LOG2E 1.44269504088896341f

/* Default blocks: one micro-tile width of queries per block keeps Q^T, S^T and
 * O L1/L2 resident; 64 keys per KV block amortises the softmax pass. */
#if VW >= 16
#define FLASH_BQ 64
#elif VW >= 8
#define FLASH_BQ 48
#else
#define FLASH_BQ 32
#endif
#define FLASH_BK 64

typedef struct {
    int64_t bq, bqp, bk, dp;
    size_t qt, st, ob, vec, per_thread; /* byte sizes, each 64-aligned */
} flash_layout;

static flash_layout flash_plan(const mha_problem *p, const mha_options *o) {
    flash_layout L;
    L.bq = o->block_q > 0 ? o->block_q : FLASH_BQ;
    if (L.bq > p->seq_q) L.bq = p->seq_q;
    L.bqp = (L.bq + VW - 1) / VW * VW;
    L.bk = o->block_kv > 0 ? o->block_kv : FLASH_BK;
    if (L.bk > p->seq_kv) L.bk = p->seq_kv;
    L.dp = (p->head_dim + VW - 1) / VW * VW;
    const size_t d = (size_t)p->head_dim, bqp = (size_t)L.bqp, f = sizeof(float);
    L.qt = mha_align64(mha_mul_sz(mha_mul_sz(d, bqp), f));
    L.st = mha_align64(mha_mul_sz(mha_mul_sz((size_t)L.bk, bqp), f));
    L.ob = mha_align64(mha_mul_sz(mha_mul_sz((size_t)L.dp, bqp), f));
    L.vec = mha_align64(bqp * f);
    L.per_thread = mha_add_sz(mha_add_sz(L.qt, L.st), mha_add_sz(L.ob, 4 * L.vec));
    return L;
}

size_t MHA_CAT(MHA_SYM(flash), _workspace)(const mha_problem *p, const mha_options *o,
                                           int threads) {
    return mha_mul_sz(flash_plan(p, o).per_thread, (size_t)threads);
}

typedef struct {
    const mha_problem *p;
    flash_layout L;
    int64_t group, off;
    float qscale;
    const mha_tensor *q, *k, *v;
    const mha_tensor_mut *out;
} flash_ctx;

/* One (batch, head, query block) work item on this thread's workspace. */
static void flash_block(const flash_ctx *x, int64_t b, int64_t h, int64_t qb, char *ws) {
    const mha_problem *p = x->p;
    const flash_layout *L = &x->L;
    const int64_t d = p->head_dim, g = h / x->group, off = x->off, ld = L->bqp;
    PHASE_START();
    float *Qt = (float *)ws, *St = (float *)(ws + L->qt), *Ob = (float *)(ws + L->qt + L->st);
    float *m = (float *)(ws + L->qt + L->st + L->ob), *l = m + L->vec / sizeof(float),
          *alpha = l + L->vec / sizeof(float), *bsum = alpha + L->vec / sizeof(float);
    const float *qh = (const float *)x->q->data + b * x->q->stride_b + h * x->q->stride_h;
    const float *kh = (const float *)x->k->data + b * x->k->stride_b + g * x->k->stride_h;
    const float *vh = (const float *)x->v->data + b * x->v->stride_b + g * x->v->stride_h;
    const int64_t skn = x->k->stride_n, svn = x->v->stride_n;
    float *oh = (float *)x->out->data + b * x->out->stride_b + h * x->out->stride_h;

    const int64_t i0 = qb * L->bq, n = p->seq_q - i0 < L->bq ? p->seq_q - i0 : L->bq;
    const int64_t ncols = (n + VW - 1) / VW * VW;
    const int64_t kv_end = mha_kv_end(p, i0 + n - 1); /* keys any row here sees */
    if (kv_end == 0) {                                /* every row masked: zeros by convention */
        for (int64_t i = 0; i < n; i++)
            for (int64_t c = 0; c < d; c++) oh[(i0 + i) * x->out->stride_n + c] = 0.0f;
        return;
    }
    for (int64_t i = 0; i < ncols; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
    }
    k_pack_transpose(n, d, qh + i0 * x->q->stride_n, x->q->stride_n, x->qscale, Qt, ld);
    PHASE(PHASE_PACK);
    /* Keys [0, full) are visible to every row of the block: they go in equal
     * blocks of at most bk (rounded to the tile height) on the fast path. The
     * causal triangle [full, kv_end) (at most n - 1 keys) follows in blocks
     * of at most bk on the masked path, so no block mixes the two. */
    int64_t full = p->causal ? i0 + off + 1 : kv_end;
    full = full < 0 ? 0 : (full > kv_end ? kv_end : full);
    const int64_t nfull = (full + L->bk - 1) / L->bk;
    int64_t even = nfull > 0 ? (full + nfull - 1) / nfull : L->bk;
    even = (even + MHA_MR - 1) / MHA_MR * MHA_MR;
    even = even > L->bk ? L->bk : even;
    for (int64_t j0 = 0, bkk; j0 < kv_end; j0 += bkk) {
        const int diag = j0 >= full; /* some pair here is masked */
        bkk = diag ? kv_end - j0 : full - j0;
        bkk = bkk < (diag ? L->bk : even) ? bkk : (diag ? L->bk : even);
        /* P^T = 2^(K Q^T - m) in one pass, m a lazily raised reference (see
         * k_scores_exp); on the triangle, key j0 + j is visible to columns
         * i >= j0 + j - off - i0 and tiles left of that are skipped. Then
         * l = alpha l + block sum. */
        for (int64_t i = 0; i < ncols; i++) {
            bsum[i] = 0.0f;
            alpha[i] = 1.0f;
        }
        k_scores_exp(bkk, ncols, d, kh + j0 * skn, skn, Qt, ld, St, ld, m, bsum, alpha, diag,
                     j0 - off - i0);
        PHASE(PHASE_QK);
        int changed = 0;
        for (int64_t i = 0; i < ncols; i += VW) {
            const vf a = vload(alpha + i);
            vstore(l + i, vfma(vload(l + i), a, vload(bsum + i)));
            changed |= vany_ne(a, vset1(1.0f));
        }
        PHASE(PHASE_SOFTMAX);
        /* O[i][:] = alpha[i] O[i][:] + sum_j P^T[j][i] V[j0+j][:] */
        const int init = j0 == 0 ? MHA_INIT_ZERO : (changed ? MHA_INIT_ROWSCALE : MHA_INIT_ACC);
        if (!diag) {
            k_gemm(n, d, bkk, St, 1, ld, vh + j0 * svn, svn, Ob, L->dp, init | MHA_B_EXACT, alpha);
        } else {
            for (int64_t r0 = 0; r0 < n; r0 += MHA_MR) {
                const int64_t rows = n - r0 < MHA_MR ? n - r0 : MHA_MR;
                int64_t kc = i0 + r0 + rows - 1 + off + 1 - j0; /* keys the last row sees */
                kc = kc < 0 ? 0 : (kc > bkk ? bkk : kc);
                k_gemm(rows, d, kc, St + r0, 1, ld, vh + j0 * svn, svn, Ob + r0 * L->dp, L->dp,
                       init | MHA_B_EXACT, alpha + r0);
            }
        }
        PHASE(PHASE_PV);
    }
    k_store_normalized(n, d, Ob, L->dp, l, mha_rows_blind(p, i0, n), oh + i0 * x->out->stride_n,
                       x->out->stride_n);
    PHASE(PHASE_PACK);
}

mha_status MHA_CAT(MHA_SYM(flash), _run)(const mha_problem *p, const mha_options *o, int threads,
                                         const mha_tensor *q, const mha_tensor *k,
                                         const mha_tensor *v, const mha_extras *ex,
                                         const mha_tensor_mut *out, void *workspace) {
    (void)ex;
    const flash_ctx x = {p,
                         flash_plan(p, o),
                         p->heads / p->kv_heads,
                         p->seq_kv - p->seq_q,
                         mha_problem_scale(p) * LOG2E, /* scores in log2 units -> exp2 */
                         q,
                         k,
                         v,
                         out};
    const int64_t H = p->heads, nqb = (p->seq_q + x.L.bq - 1) / x.L.bq, pairs = p->batch * H;
    if (o->split == MHA_SPLIT_HEADS) {
        /* Per-head parallel: one (batch, head) per task, its query blocks in order. */
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
        for (int64_t bh = 0; bh < pairs; bh++) {
            char *ws = (char *)workspace + (size_t)omp_get_thread_num() * x.L.per_thread;
            for (int64_t qb = 0; qb < nqb; qb++) flash_block(&x, bh / H, bh % H, qb, ws);
        }
    } else {
        /* (batch, head, query block) tasks, last query blocks first: under a
         * causal mask they cost the most, so the dynamic schedule balances. */
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
        for (int64_t it = 0; it < pairs * nqb; it++) {
            char *ws = (char *)workspace + (size_t)omp_get_thread_num() * x.L.per_thread;
            const int64_t bh = it / nqb;
            flash_block(&x, bh / H, bh % H, nqb - 1 - it % nqb, ws);
        }
    }
    return MHA_OK;
}
