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
 * blocks skip the key/query tiles the mask removes entirely.
 *
 * The variants (mha.h): head_dim_v only widens O and P.V. A window, a
 * softcap or sinks take flash_block_var: each query block streams only the
 * KV range its rows can see ([begin of its first row, end of its last)), so
 * a window of W costs ~(W + block_q) keys per row, not seq_kv; the keys every
 * row sees go through the fused score tile as above (a softcap applied to
 * the tile's scores in registers), the window's two edges through the same
 * tile with its band mask (k_scores_exp: key r visible to lane i iff
 * t0 + r <= i <= t1 + r, tiles outside skipped), and their P.V per row tile
 * over the keys its rows see. On the Zen 4 VM (H8 d64 N 8192 causal, 1
 * thread, flash.avx512) this took a window of 128 from 46 to 66 GFLOP/s per
 * visible pair and one of 1024 from 90 to 97 (causal alone 102), against
 * the unfused edges (S^T, then cap, mask, max and exp lane by lane) it
 * replaced. Under a window bounded on the left the blocks run in order and
 * each prefetches the next one's new rows (mha_window_local): 66 -> 75 there.
 * A sink starts each row's softmax at m = sink, l = 1: the column with no
 * value.
 *
 * bf16 and fp16 storage (Q/O and K/V, any pair) are widened to fp32 as they
 * are read: Q's rows once per query block, each K and V block once per
 * query block into per-thread scratch (exact: every bf16/fp16 value is an
 * fp32), so the arithmetic is the fp32 kernel's, P is never rounded, and
 * the output is rounded once to its dtype (nearest even). This is the 16-bit
 * path on levels without a bf16 dot product, and on CPUs where vdpbf16ps
 * runs at half the FMA rate (Intel Xeon without AMX: `mhabench info`) it
 * can beat flash.avx512bf16; tune measures which. */
#include <math.h>
#include <omp.h>
#include <string.h>

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
    int64_t bq, bqp, bk, dp; /* dp: head_dim_v padded to VW */
    /* byte sizes, each 64-aligned; qw, kw, vw: the widened Q rows, K and V
     * blocks of 16-bit storage (0 for fp32) */
    size_t qt, st, ob, vec, idx, qw, kw, vw;
    /* seqkv: a packed problem's copy of one (sequence, KV head)'s K and
     * V rows, contiguous (packed_run; 0: read in place); per_thread: the
     * thread's share, the copy last */
    size_t seqkv, per_thread;
} flash_layout;

static flash_layout flash_plan(const mha_problem *p, const mha_options *o) {
    flash_layout L;
    L.bq = o->block_q > 0 ? o->block_q : FLASH_BQ;
    if (L.bq > p->seq_q) L.bq = p->seq_q;
    L.bqp = (L.bq + VW - 1) / VW * VW;
    L.bk = o->block_kv > 0 ? o->block_kv : FLASH_BK;
    if (L.bk > p->seq_kv) L.bk = p->seq_kv;
    L.dp = (mha_dv(p) + VW - 1) / VW * VW;
    const size_t d = (size_t)p->head_dim, bqp = (size_t)L.bqp, f = sizeof(float);
    L.qt = mha_align64(mha_mul_sz(mha_mul_sz(d, bqp), f));
    L.st = mha_align64(mha_mul_sz(mha_mul_sz((size_t)L.bk, bqp), f));
    L.ob = mha_align64(mha_mul_sz(mha_mul_sz((size_t)L.dp, bqp), f));
    L.vec = mha_align64(bqp * f);
    L.idx = mha_align64(mha_mul_sz(2 * bqp, sizeof(int64_t))); /* per-row key ranges */
    const int wide_q = p->dtype != MHA_F32, wide_kv = mha_problem_kv_dtype(p) != MHA_F32;
    L.qw = wide_q ? mha_align64(mha_mul_sz(mha_mul_sz(d, (size_t)L.bq), f)) : 0;
    L.kw = wide_kv ? mha_align64(mha_mul_sz(mha_mul_sz(d, (size_t)L.bk), f)) : 0;
    L.vw = wide_kv ? mha_align64(mha_mul_sz(mha_mul_sz((size_t)L.dp, (size_t)L.bk), f)) : 0;
    L.per_thread = mha_add_sz(
        mha_add_sz(mha_add_sz(L.qt, L.st), mha_add_sz(mha_add_sz(L.ob, 4 * L.vec), L.idx)),
        mha_add_sz(mha_add_sz(L.qw, L.kw), L.vw));
    /* a packed batch: the thread's (sequence, KV head) copy (internal.h); not
     * of int8 rows, whose scales stay where they are */
    const mha_dtype kvt = mha_problem_kv_dtype(p);
    L.seqkv = kvt == MHA_I8 ? 0 : mha_seq_kv_copy_bytes(p, mha_dtype_size(kvt));
    L.per_thread = mha_add_sz(L.per_thread, L.seqkv);
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
    float qscale; /* Q's prescale: scale * log2(e), or scale alone under a softcap */
    const mha_tensor *q, *k, *v;
    const mha_tensor_mut *out;
    const float *sinks;    /* p->sinks: [heads], natural-log units */
    const int32_t *blocks; /* paged: the sequence's row of the block table; else NULL */
    int64_t bs;            /* paged: keys per block */
    int pf_next; /* blocks run in order: prefetch the next one's rows (mha_window_local) */
} flash_ctx;

/* ---- 16-bit storage ---------------------------------------------------------------------
 * Head (b, h) of a tensor or of the output (the fields of either): its first
 * element. */
#define HEAD_OF(t, b, h)                                                                           \
    ((char *)(t)->data +                                                                           \
     ((b) * (t)->stride_b + (h) * (t)->stride_h) * (int64_t)mha_dtype_size((t)->dtype))
static const char *head_of(const mha_tensor *t, int64_t b, int64_t h) {
    return HEAD_OF(t, b, h);
}

/* Rows [r0, r0 + rows) of head (cols elements each) as fp32 rows: in place
 * for fp32 (*ld = the tensor's row stride), else widened into scratch with
 * row stride sld (exact). */
static const float *rows_f32(const mha_tensor *t, const char *head, int64_t r0, int64_t rows,
                             int64_t cols, float *scratch, int64_t sld, int64_t *ld) {
    if (t->dtype == MHA_F32) {
        *ld = t->stride_n;
        return (const float *)head + r0 * t->stride_n;
    }
    const uint16_t *src = (const uint16_t *)head + r0 * t->stride_n;
    const int bf = t->dtype == MHA_BF16;
    for (int64_t r = 0; r < rows; r++) {
        const uint16_t *s = src + r * t->stride_n;
        float *d = scratch + r * sld;
        int64_t c = 0;
        for (; c + VW <= cols; c += VW) vstoreu(d + c, bf ? vload_bf16(s + c) : vload_f16(s + c));
        if (c < cols)
            vstoreu_n(d + c,
                      bf ? vload_bf16_n(s + c, (int)(cols - c))
                         : vload_f16_n(s + c, (int)(cols - c)),
                      (int)(cols - c));
    }
    *ld = sld;
    return scratch;
}

/* Output rows [i0, i0 + n) (dv elements each), normalised from rows [0, n)
 * of Ob: fp32 straight through store_normalized; 16-bit normalised in place,
 * then rounded to the output's dtype. zero_row: output row i is zeros (it
 * sees no key). */
static void store_rows(const mha_tensor_mut *out, char *ohead, int64_t i0, int64_t n, int64_t dv,
                       float *Ob, int64_t ldo, const float *l, int64_t blind) {
    const int64_t son = out->stride_n;
    if (out->dtype == MHA_F32) {
        k_store_normalized(n, dv, Ob, ldo, l, blind, (float *)ohead + i0 * son, son);
        return;
    }
    k_store_normalized(n, dv, Ob, ldo, l, blind, Ob, ldo);
    /* rounded VW at a time (narrow_array: vstore_bf16/_f16, bitwise dtype.h's conversions,
     * all 2^32 inputs checked); element by element through mha_store_elem
     * this took a fifth of flash.avx512's time under a window of 128 (bf16,
     * d 64, the Emerald Rapids VM, stop 55) */
    for (int64_t i = 0; i < n; i++)
        k_narrow_array(Ob + i * ldo, (uint16_t *)ohead + (i0 + i) * son, dv,
                       out->dtype == MHA_BF16);
}
/* ---- the paged KV cache ----------------------------------------------------------------
 * A KV block never crosses the end of a cache block (page_cap), so its keys
 * are rows of one cache block, read in place like a dense block: the stream
 * goes block by block through the table with no gather copy. */
static inline int64_t page_cap(const flash_ctx *x, int64_t j0, int64_t n) {
    return mha_page_cap(x->blocks, x->bs, j0, n);
}
/* Where key j0's row of t is: from head (the (batch, KV head)'s first row)
 * row j0, or, paged (head: the pool's KV head), slot j0 % bs of the block
 * the table names for j0. Returns the base; *row its row. */
static const char *kv_at(const flash_ctx *x, const mha_tensor *t, const char *head, int64_t j0,
                         int64_t *row) {
    if (!x->blocks) {
        *row = j0;
        return head;
    }
    *row = j0 % x->bs;
    return head + (int64_t)x->blocks[j0 / x->bs] * t->stride_b * (int64_t)mha_dtype_size(t->dtype);
}
/* Rows [j0, j0 + n) of K and V as fp32 rows (rows_f32), n within one cache block when paged. */
static void kv_rows_f32(const flash_ctx *x, const char *kh, const char *vh, int64_t j0, int64_t n,
                        float *Kw, float *Vw, const float **kr, int64_t *ldk, const float **vr,
                        int64_t *ldv) {
    int64_t row;
    const char *kb = kv_at(x, x->k, kh, j0, &row);
    *kr = rows_f32(x->k, kb, row, n, x->p->head_dim, Kw, x->p->head_dim, ldk);
    const char *vb = kv_at(x, x->v, vh, j0, &row);
    *vr = rows_f32(x->v, vb, row, n, mha_dv(x->p), Vw, x->L.dp, ldv);
}

static void zero_row(const mha_tensor_mut *out, char *ohead, int64_t i, int64_t dv) {
    const size_t es = mha_dtype_size(out->dtype);
    memset(ohead + (size_t)(i * out->stride_n) * es, 0, (size_t)dv * es);
}

/* One (batch, head, query block) work item on this thread's workspace. */
static void flash_block(const flash_ctx *x, int64_t b, int64_t h, int64_t qb, char *ws) {
    const mha_problem *p = x->p;
    const flash_layout *L = &x->L;
    const int64_t d = p->head_dim, dv = mha_dv(p), g = h / x->group, off = x->off, ld = L->bqp;
    PHASE_START();
    float *Qt = (float *)ws, *St = (float *)(ws + L->qt), *Ob = (float *)(ws + L->qt + L->st);
    float *m = (float *)(ws + L->qt + L->st + L->ob), *l = m + L->vec / sizeof(float),
          *alpha = l + L->vec / sizeof(float), *bsum = alpha + L->vec / sizeof(float);
    float *Qw = (float *)(ws + L->per_thread - L->seqkv - L->vw - L->kw - L->qw),
          *Kw = Qw + L->qw / 4, *Vw = Kw + L->kw / 4; /* the widened rows of 16-bit storage */
    const char *qh = head_of(x->q, b, h), *kh = head_of(x->k, b, g), *vh = head_of(x->v, b, g);
    char *oh = HEAD_OF(x->out, b, h);

    const int64_t i0 = qb * L->bq, n = p->seq_q - i0 < L->bq ? p->seq_q - i0 : L->bq;
    const int64_t ncols = (n + VW - 1) / VW * VW;
    const int64_t kv_end = mha_kv_end(p, i0 + n - 1); /* keys any row here sees */
    if (kv_end == 0) {                                /* every row masked: zeros by convention */
        for (int64_t i = 0; i < n; i++) zero_row(x->out, oh, i0 + i, dv);
        return;
    }
    for (int64_t i = 0; i < ncols; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
    }
    int64_t ldq, ldk, ldv;
    const float *qr = rows_f32(x->q, qh, i0, n, d, Qw, d, &ldq);
    k_pack_transpose(n, d, qr, ldq, x->qscale, Qt, ld);
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
        bkk = page_cap(x, j0, bkk < (diag ? L->bk : even) ? bkk : (diag ? L->bk : even));
        /* P^T = 2^(K Q^T - m) in one pass, m a lazily raised reference (see
         * k_scores_exp); on the triangle, key j0 + j is visible to columns
         * i >= j0 + j - off - i0 and tiles left of that are skipped. Then
         * l = alpha l + block sum. */
        for (int64_t i = 0; i < ncols; i++) {
            bsum[i] = 0.0f;
            alpha[i] = 1.0f;
        }
        const float *kr, *vr;
        kv_rows_f32(x, kh, vh, j0, bkk, Kw, Vw, &kr, &ldk, &vr, &ldv);
        k_scores_exp(bkk, ncols, d, kr, ldk, Qt, ld, St, ld, m, bsum, alpha, diag, j0 - off - i0,
                     MHA_BAND_OPEN, 0.0f);
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
            k_gemm(n, dv, bkk, St, 1, ld, vr, ldv, Ob, L->dp, init | MHA_B_EXACT, alpha);
        } else {
            for (int64_t r0 = 0; r0 < n; r0 += MHA_MR) {
                const int64_t rows = n - r0 < MHA_MR ? n - r0 : MHA_MR;
                int64_t kc = i0 + r0 + rows - 1 + off + 1 - j0; /* keys the last row sees */
                kc = kc < 0 ? 0 : (kc > bkk ? bkk : kc);
                k_gemm(rows, dv, kc, St + r0, 1, ld, vr, ldv, Ob + r0 * L->dp, L->dp,
                       init | MHA_B_EXACT, alpha + r0);
            }
        }
        PHASE(PHASE_PV);
    }
    store_rows(x->out, oh, i0, n, dv, Ob, L->dp, l, mha_rows_blind(p, i0, n));
    PHASE(PHASE_PACK);
}

/* One (batch, head, query block) of a problem with a window, a softcap or
 * sinks (see the file comment). */
static void flash_block_var(const flash_ctx *x, int64_t b, int64_t h, int64_t qb, char *ws) {
    const mha_problem *p = x->p;
    const flash_layout *L = &x->L;
    const int64_t d = p->head_dim, dv = mha_dv(p), g = h / x->group, ld = L->bqp;
    PHASE_START();
    float *Qt = (float *)ws, *St = (float *)(ws + L->qt), *Ob = (float *)(ws + L->qt + L->st);
    float *m = (float *)(ws + L->qt + L->st + L->ob), *l = m + L->vec / sizeof(float),
          *alpha = l + L->vec / sizeof(float), *bsum = alpha + L->vec / sizeof(float);
    int64_t *kb = (int64_t *)(ws + L->qt + L->st + L->ob + 4 * L->vec), *ke = kb + L->bqp;
    float *Qw = (float *)(ws + L->per_thread - L->seqkv - L->vw - L->kw - L->qw),
          *Kw = Qw + L->qw / 4, *Vw = Kw + L->kw / 4; /* the widened rows of 16-bit storage */
    const char *qh = head_of(x->q, b, h), *kh = head_of(x->k, b, g), *vh = head_of(x->v, b, g);
    char *oh = HEAD_OF(x->out, b, h);

    const int64_t i0 = qb * L->bq, n = p->seq_q - i0 < L->bq ? p->seq_q - i0 : L->bq;
    const int64_t ncols = (n + VW - 1) / VW * VW;
    /* each row's visible keys [kb, ke); both ends never decrease with the
     * row, so the block sees [kb[0], ke[n-1]) and every row [kb[n-1], ke[0]) */
    for (int64_t i = 0; i < ncols; i++) {
        const int64_t gi = i0 + (i < n ? i : n - 1); /* padding lanes: the last row's */
        kb[i] = mha_kv_begin(p, gi);
        ke[i] = mha_kv_end(p, gi);
    }
    const int64_t lo = kb[0], hi = ke[n - 1];
    const float sink = p->sinks ? x->sinks[h] * LOG2E : -INFINITY;
    for (int64_t i = 0; i < ncols; i++) { /* the sink: m = sink, its term 2^0 = 1 */
        m[i] = sink;
        l[i] = sink > -INFINITY || isnan(sink) ? 1.0f : 0.0f;
    }
    int64_t ldq, ldk, ldv;
    const float *qr = rows_f32(x->q, qh, i0, n, d, Qw, d, &ldq);
    k_pack_transpose(n, d, qr, ldq, x->qscale, Qt, ld);
    PHASE(PHASE_PACK);
    /* the keys every row sees go fused (a softcap capping the tile's
     * scores in registers) in equal blocks of at most bk; the edges
     * [lo, f0) and [f1, hi) masked by the band in blocks of at most bk */
    int64_t f0 = kb[n - 1], f1 = ke[0];
    if (f1 <= f0) f0 = f1 = hi;
    /* A short window's whole band within one block (bk keys: window 128
     * under 96-query blocks): one masked block instead of two edges and
     * the run between them, each with its own pass over St, rescale and
     * P.V call per row tile. Measured on the Zen 4 VM, flash.avx512 H8
     * N8192 d64 causal window 128: 1.047x / 1.042x at 1 / 2 threads (3
     * alternated rounds). */
    if (p->window && f0 > lo && hi - lo <= L->bk) f0 = f1 = hi;
    const int64_t nfull = (f1 - f0 + L->bk - 1) / L->bk;
    int64_t even = nfull > 0 ? (f1 - f0 + nfull - 1) / nfull : L->bk;
    even = (even + MHA_MR - 1) / MHA_MR * MHA_MR;
    even = even > L->bk ? L->bk : even;
    int64_t left, right; /* the band: the edges' blocks take it in the tile's mask */
    mha_kv_band(p, &left, &right);
    mha_span_pf pfs, *pf = NULL; /* the next block's Q rows and new K and V rows */
    if (x->pf_next && i0 + n < p->seq_q) {
        const int64_t nn = p->seq_q - i0 - n < L->bq ? p->seq_q - i0 - n : L->bq,
                      kn = p->seq_kv - hi < nn ? p->seq_kv - hi : nn,
                      nedge = (f0 - lo + L->bk - 1) / L->bk + (hi - f1 + L->bk - 1) / L->bk;
        int64_t lines = 0;
        pfs.nrun = 0;
        mha_span_pf_rows(&pfs, qh, x->q->stride_n, mha_dtype_size(x->q->dtype), d, i0 + n, nn,
                         &lines);
        mha_span_pf_rows(&pfs, kh, x->k->stride_n, mha_dtype_size(x->k->dtype), d, hi, kn, &lines);
        mha_span_pf_rows(&pfs, vh, x->v->stride_n, mha_dtype_size(x->v->dtype), dv, hi, kn, &lines);
        pf = mha_span_pf_begin(&pfs, lines, nfull + nedge * (1 + (n + MHA_MR - 1) / MHA_MR));
    }
    int first = 1;
    for (int64_t j0 = lo, bkk; j0 < hi; j0 += bkk) {
        mha_span_pf_step(pf);
        const int full = j0 >= f0 && j0 < f1;
        const int64_t stop = j0 < f0 ? f0 : (full ? f1 : hi), most = full ? even : L->bk;
        bkk = page_cap(x, j0, stop - j0 < most ? stop - j0 : most);
        const float *kr, *vr;
        kv_rows_f32(x, kh, vh, j0, bkk, Kw, Vw, &kr, &ldk, &vr, &ldv);
        for (int64_t i = 0; i < ncols; i++) {
            bsum[i] = 0.0f;
            alpha[i] = 1.0f;
        }
        k_scores_exp(bkk, ncols, d, kr, ldk, Qt, ld, St, ld, m, bsum, alpha, !full,
                     j0 - i0 - x->off - right, j0 - i0 - x->off + left, p->softcap);
        PHASE(PHASE_QK);
        int changed = 0;
        for (int64_t i = 0; i < ncols; i += VW) {
            const vf a = vload(alpha + i);
            vstore(l + i, vfma(vload(l + i), a, vload(bsum + i)));
            changed |= vany_ne(a, vset1(1.0f));
        }
        PHASE(PHASE_SOFTMAX);
        const int init = first ? MHA_INIT_ZERO : (changed ? MHA_INIT_ROWSCALE : MHA_INIT_ACC);
        if (full) {
            k_gemm(n, dv, bkk, St, 1, ld, vr, ldv, Ob, L->dp, init | MHA_B_EXACT, alpha);
        } else { /* an edge: each row tile over the keys [its first row's begin, its last's end) */
            for (int64_t r0 = 0; r0 < n; r0 += MHA_MR) {
                mha_span_pf_step(pf);
                const int64_t rows = n - r0 < MHA_MR ? n - r0 : MHA_MR;
                int64_t k0 = kb[r0] - j0, k1 = ke[r0 + rows - 1] - j0;
                k0 = k0 < 0 ? 0 : (k0 > bkk ? bkk : k0);
                k1 = k1 < k0 ? k0 : (k1 > bkk ? bkk : k1);
                k_gemm(rows, dv, k1 - k0, St + k0 * ld + r0, 1, ld, vr + k0 * ldv, ldv,
                       Ob + r0 * L->dp, L->dp, init | MHA_B_EXACT, alpha + r0);
            }
        }
        first = 0;
        PHASE(PHASE_PV);
    }
    /* a row that sees no key is zeros, sink or not (also when the block sees none) */
    for (int64_t i = 0; i < n; i++)
        if (first || ke[i] <= kb[i])
            zero_row(x->out, oh, i0 + i, dv);
        else
            store_rows(x->out, oh, i0 + i, 1, dv, Ob + i * L->dp, L->dp, l + i, 0);
    PHASE(PHASE_PACK);
}

/* ---- the packed ragged batch and the paged cache ---------------------------------------
 * Sequence b of a packed or paged problem as a dense problem of its own
 * (mha_seq_view: batch 1, its lengths, so the mask helpers align it
 * bottom-right; q, k, v and out views from its first row, no copy); paged,
 * k and v stay the pools and the context carries the sequence's row of the
 * block table (kv_at). The workspace plan stays the one of the bounds
 * (seq_q, seq_kv), which covers every sequence. */
typedef struct {
    mha_seq_view v;
    flash_ctx x;
} flash_seq;

static void seq_view(const flash_ctx *x, const mha_extras *ex, int64_t b, flash_seq *s) {
    mha_seq_view_of(x->p, ex, b, x->q, x->k, x->v, x->out, &s->v);
    s->x = *x;
    MHA_CTX_AT_SEQ(s->x, s->v);
    s->x.off = s->v.p.seq_kv - s->v.p.seq_q;
    s->x.out = &s->v.out;
}

/* The tasks: (query block, sequence, head) in mha_seq_task's order; with
 * split = heads, one (sequence, head) per task, its blocks in order. With
 * L.seqkv, each thread reads K and V from its copy of the task's (sequence,
 * KV head), made when the task's pair differs from the thread's last. */
static void packed_run(const flash_ctx *x, const mha_extras *ex,
                       void (*block)(const flash_ctx *, int64_t, int64_t, int64_t, char *),
                       int by_heads, int threads, void *workspace) {
    const mha_problem *p = x->p;
    const int64_t H = p->heads, bq = x->L.bq, pairs = p->batch * H;
    const int64_t n = by_heads ? pairs : (p->seq_q + bq - 1) / bq * pairs;
#pragma omp parallel num_threads(threads)
    {
        char *ws = (char *)workspace + (size_t)omp_get_thread_num() * x->L.per_thread;
        mha_seq_kv_cache cache = {ws + x->L.per_thread - x->L.seqkv, -1, -1};
#pragma omp for schedule(dynamic, 1)
        for (int64_t it = 0; it < n; it++) {
            int64_t b = it / H, h = it % H, qb = 0;
            if (!by_heads && !mha_seq_task(p, ex, bq, it, &b, &h, &qb)) continue;
            flash_seq s;
            seq_view(x, ex, b, &s);
            mha_tensor kc, vc;
            if (x->L.seqkv)
                mha_seq_kv_use(&cache, &s.v, p->seq_kv, b, h / x->group, &kc, &vc, &s.x.k, &s.x.v);
            for (; qb * bq < s.v.p.seq_q; qb++) {
                block(&s.x, 0, h, qb, ws);
                if (!by_heads) break;
            }
        }
    }
}

mha_status MHA_CAT(MHA_SYM(flash), _run)(const mha_problem *p, const mha_options *o, int threads,
                                         const mha_tensor *q, const mha_tensor *k,
                                         const mha_tensor *v, const mha_extras *ex,
                                         const mha_tensor_mut *out, void *workspace) {
    const flash_ctx x = {p, flash_plan(p, o), p->heads / p->kv_heads, p->seq_kv - p->seq_q,
                         /* scores in log2 units -> exp2; a softcap takes them natural */
                         mha_problem_scale(p) * (p->softcap > 0 ? 1.0f : LOG2E), q, k, v, out,
                         ex->sinks, NULL, 0, p->layout == MHA_LAYOUT_DENSE && mha_window_local(p)};
    void (*block)(const flash_ctx *, int64_t, int64_t, int64_t, char *) =
        p->window || p->softcap > 0 || p->sinks ? flash_block_var : flash_block;
    const int64_t H = p->heads, nqb = (p->seq_q + x.L.bq - 1) / x.L.bq, pairs = p->batch * H;
    if (p->layout != MHA_LAYOUT_DENSE) {
        packed_run(&x, ex, block, o->split == MHA_SPLIT_HEADS, threads, workspace);
        return MHA_OK;
    }
    if (o->split == MHA_SPLIT_HEADS) {
        /* Per-head parallel: one (batch, head) per task, its query blocks in order. */
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
        for (int64_t bh = 0; bh < pairs; bh++) {
            char *ws = (char *)workspace + (size_t)omp_get_thread_num() * x.L.per_thread;
            for (int64_t qb = 0; qb < nqb; qb++) block(&x, bh / H, bh % H, qb, ws);
        }
    } else {
        /* (batch, head, query block) tasks, last query blocks first: under a
         * causal mask they cost the most, so the dynamic schedule balances;
         * under a window bounded on the left in order, in chunks
         * (mha_window_chunk), each block prefetching the next one's rows */
        const int64_t chunk = mha_window_chunk(p, pairs * nqb, threads, 1);
#pragma omp parallel for num_threads(threads) schedule(dynamic, chunk)
        for (int64_t it = 0; it < pairs * nqb; it++) {
            char *ws = (char *)workspace + (size_t)omp_get_thread_num() * x.L.per_thread;
            const int64_t bh = it / nqb, qb = it % nqb;
            block(&x, bh / H, bh % H, x.pf_next ? qb : nqb - 1 - qb, ws);
        }
    }
    return MHA_OK;
}
