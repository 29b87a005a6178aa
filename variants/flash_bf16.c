/* flash_bf16.c - kernel flash.<isa> on the bf16 dot product (built for the
 * levels with AVX512_BF16: flash.avx512bf16). The algorithm of flash.c
 * (FlashAttention-2 streaming softmax, lazy reference max, causal block
 * skipping, the same split and threads) with both products on vdpbf16ps:
 * pairs of bf16 along the reduction dimension, fp32 accumulation.
 *
 * Storage: Q/O bf16 or fp16, K/V bf16 or fp16 (any pair); fp16 is rounded to
 * bf16 (RNE) while packing, so fp16 runs through a bf16 conversion (there is
 * no AVX512-FP16 here). Per query block, Q is packed once as pairs along
 * head_dim with the queries along the lanes (Qp[pair][query]); K is packed
 * row-wise with head_dim padded to even (the pair a tile broadcasts) and V
 * as pairs of keys with head_dim along the lanes (Vp[key pair][col][2]),
 * each whole once per (batch, KV head) and thread where more than one
 * query block reads them (bf_pre: 8.4% of the cycles of (1,32,2048,128)
 * went to packing them per KV block again for every query block), per KV
 * block otherwise. S^T = K Q^T is exact products with fp32 sums,
 * scaled in fp32 (Q is not pre-scaled: that would round it again); the online
 * softmax is fp32 as in flash.c; P is rounded to bf16 (RNE) into the pair
 * layout for O = P V, while the row sums l add the fp32 P. The output is
 * rounded from the fp32 accumulators to the problem's dtype.
 *
 * The variants (mha.h) as in flash.c: head_dim_v widens V's pack and O;
 * sinks start each row at m = sink, l = 1; a window streams only the keys a
 * query block's rows see, the keys all of them see on the fused tile (a
 * softcap capping its scores in registers) and the window's edges and the
 * causal diagonal on the same tile with flash.c's band mask, their P.V per
 * row tile over the key pairs its rows see. On the Zen 4 VM (H8 d64 N 8192
 * causal, 1 thread) that took a window of 128 from 70 to 99 GFLOP/s per
 * visible pair and one of 1024 from 150 to 161 (causal alone 176), against
 * the raw scores through flash_var.h's unfused step before. A bf16 K with
 * an even head_dim stored row after row is read in place (k_in_place). */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "bf16_pack.h"
#include "internal.h"
#include "phase.h"
#include "ukernels.h"

#ifndef __AVX512BF16__
#error "flash_bf16.c needs AVX512_BF16 (meson builds it only for such levels)"
#endif

#define LOG2E 1.44269504088896341f
#define ALWAYS_INLINE static inline __attribute__((always_inline))

#define BF_BQ 64 /* defaults when the options leave blocks at 0 (mha_attend resolves them) */
#define BF_BK 64

typedef struct {
    int64_t bq, bqp, bk, kpairs, dh, dv; /* dv: head_dim_v padded to VW */
    size_t qp, pp, kp, vp, ob, vec, idx; /* byte sizes, each 64-aligned */
    size_t kall, vall; /* K and V of one (batch, KV head) packed whole (bf_pre), or 0 */
    size_t seqkv;      /* a packed batch's (sequence, KV head) copy, last (internal.h) */
    size_t per_thread;
} bf_layout;

/* The one plan of the workspace, for mha_workspace_size and the run. Per
 * thread: Qp (dh pairs x bqp queries, 32-bit words), Pp (kpairs x bqp
 * words), Kp (bk rows of 2 dh bf16), Vp (kpairs x dv words),
 * O (bqp x dv fp32) and the four per-query vectors m, l, alpha, bsum. */
static bf_layout bf_plan(const mha_problem *p, const mha_options *o) {
    bf_layout L;
    L.bq = o->block_q > 0 ? o->block_q : BF_BQ;
    if (L.bq > p->seq_q) L.bq = p->seq_q;
    L.bqp = (L.bq + VW - 1) / VW * VW;
    L.bk = o->block_kv > 0 ? o->block_kv : BF_BK;
    if (L.bk > p->seq_kv) L.bk = p->seq_kv;
    L.kpairs = (L.bk + 1) / 2;
    L.dh = (p->head_dim + 1) / 2;
    L.dv = (mha_dv(p) + VW - 1) / VW * VW;
    const size_t w = 4, bqp = (size_t)L.bqp;
    L.qp = mha_align64(mha_mul_sz(mha_mul_sz((size_t)L.dh, bqp), w));
    L.pp = mha_align64(mha_mul_sz(mha_mul_sz((size_t)L.kpairs, bqp), w));
    L.kp = mha_align64(mha_mul_sz(mha_mul_sz((size_t)L.bk, (size_t)L.dh), w));
    L.vp = mha_align64(mha_mul_sz(mha_mul_sz((size_t)L.kpairs, (size_t)L.dv), w));
    L.ob = mha_align64(mha_mul_sz(mha_mul_sz((size_t)L.dv, bqp), w));
    L.vec = mha_align64(bqp * w);
    L.idx = mha_align64(mha_mul_sz(2 * bqp, sizeof(int64_t))); /* per-row key ranges */
    L.per_thread =
        mha_add_sz(mha_add_sz(L.qp, mha_add_sz(L.pp, L.kp)),
                   mha_add_sz(mha_add_sz(L.vp, L.ob), mha_add_sz(mha_mul_sz(4, L.vec), L.idx)));
    /* K and V packed whole once per (batch or sequence, KV head) and thread
     * where more than one query block reads them (the query blocks of a
     * head, the heads of a group) and they fit MHA_SEQKV_MAX: the blocks then
     * read the packs in place instead of packing each (query block, KV
     * block) pair again (under a window too: a head's query blocks together
     * see more keys than the head has wherever nqb (W + bq) > N). Not for
     * pages of an odd size (a V pair would straddle two). */
    const int64_t nqb = (p->seq_q + L.bq - 1) / L.bq, nkp = (p->seq_kv + 1) / 2;
    L.kall = L.vall = 0;
    if (L.bk >= 2 && nqb * (p->heads / p->kv_heads) > 1 &&
        (p->layout != MHA_LAYOUT_PAGED || p->block_size % 2 == 0)) {
        L.kall = mha_align64(mha_mul_sz(mha_mul_sz((size_t)(2 * nkp), (size_t)L.dh), w));
        L.vall = mha_align64(mha_mul_sz(mha_mul_sz((size_t)nkp, (size_t)L.dv), w));
        if (mha_add_sz(L.kall, L.vall) > MHA_SEQKV_MAX) L.kall = L.vall = 0;
    }
    L.per_thread = mha_add_sz(L.per_thread, mha_add_sz(L.kall, L.vall));
    L.seqkv = L.kall ? 0 : mha_seq_kv_copy_bytes(p, 2); /* the packs are the copy */
    L.per_thread = mha_add_sz(L.per_thread, L.seqkv);
    return L;
}

size_t MHA_CAT(MHA_SYM(flash), _workspace)(const mha_problem *p, const mha_options *o,
                                           int threads) {
    return mha_mul_sz(bf_plan(p, o).per_thread, (size_t)threads);
}

/* ---- packing ---------------------------------------------------------------------------- */

/* ---- micro-kernels ------------------------------------------------------------------------ */

/* One R x NV tile of S^T = K Q^T (keys r, queries in NV vectors), turned into
 * P^T = 2^(S^T - m) in the epilogue exactly as gemm.c's tile_exp does (see
 * there and k_scores_exp in ukernels.h for m, bsum, alpha and the mask):
 * kp rows of ldk bf16 (pairs broadcast), qp [dh][ldq] pair words. */
ALWAYS_INLINE void score_tile(const int R, const int NV, const int MASKED, const int CAP,
                              int64_t dh, const uint16_t *kp, int64_t ldk, const uint32_t *qp,
                              int64_t ldq, float qscale, uint32_t *pp, int64_t ldp, int64_t r0,
                              float *m, float *bsum, float *alpha, int64_t t, int64_t u,
                              float cap) {
    vf acc[6][4];
    for (int r = 0; r < R; r++)
        for (int v = 0; v < NV; v++) acc[r][v] = vzero();
    for (int64_t p = 0; p < dh; p++) {
        vbf bv[4];
        for (int v = 0; v < NV; v++) bv[v] = _mm512_load_si512(qp + p * ldq + v * VW);
        for (int r = 0; r < R; r++) {
            const vbf a = vbf_pair_bcast(kp + r * ldk + 2 * p);
            for (int v = 0; v < NV; v++) acc[r][v] = vdot_bf16(acc[r][v], a, bv[v]);
        }
    }
    /* Unscaled scores stay unscaled: the scale is applied once per column to
     * the rows' max (a positive scale commutes with max and with rounding,
     * so m is as if every score were scaled) and inside P's exponent as one
     * FMA, S sc - m, in place of a multiply and a subtraction. A softcap
     * scales as it caps, and then the scale is 1. */
    const vf sc = vset1(CAP ? 1.0f : qscale), lazy = vset1(MHA_LAZY_LOG2), ninf = vset1(-INFINITY);
    if (CAP) /* log2 units: capped in natural units, to P's bf16 precision */
        for (int r = 0; r < R; r++)
            for (int v = 0; v < NV; v++) acc[r][v] = vsoftcap_log2_bf16(acc[r][v], qscale, cap);
    if (MASKED) /* column i of row r is visible iff t + r <= i <= u + r: others -> -inf */
        for (int v = 0; v < NV; v++) {
            const vf col = vadd(viota(), vset1((float)(v * VW)));
            for (int r = 0; r < R; r++) {
                acc[r][v] = vselect_gt(col, vset1((float)(t + r - 1)), acc[r][v], ninf);
                acc[r][v] = vselect_gt(vset1((float)(u + r + 1)), col, acc[r][v], ninf);
            }
        }
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++) {
        /* Unrolled, so that acc stays in registers: as a loop over v gcc
         * kept all 24 accumulators on the stack (stored after the products,
         * loaded back per column) */
        vf tm = acc[0][v];
        for (int r = 1; r < R; r++) tm = vmax(tm, acc[r][v]);
        tm = vmul(tm, sc);
        vf mv = vload(m + v * VW);
        const vf limit = vadd(mv, lazy);
        if (vany_gt(tm, limit)) {
            /* From -inf m moves to the max (its weight exactly 1, as in
             * gemm.c); from a finite m by a whole k = ceil(tm - m), so that
             * f = 2^-k rescales the pairs already written exactly (from
             * -inf, k = +inf and f = 0). Lanes that stay keep f = 1. */
            const vf k = vceil(vsub(tm, mv));
            const vf mn = vselect_gt(tm, limit, vselect_eq(mv, ninf, tm, vadd(mv, k)), mv);
            const vf f = vselect_gt(tm, limit, vexp2_nonpos(vsub(vzero(), k)), vset1(1.0f));
            for (int64_t q = 0; q < r0 / 2; q++) {
                uint32_t *row = pp + (q - r0 / 2) * ldp + v * VW;
                _mm512_store_si512(row, vbf_pairs_scale(_mm512_load_si512(row), f));
            }
            vstore(bsum + v * VW, vmul(vload(bsum + v * VW), f));
            vstore(alpha + v * VW, vmul(vload(alpha + v * VW), f));
            vstore(m + v * VW, mn);
            mv = mn;
        }
        if (MASKED) mv = vselect_eq(mv, ninf, vzero(), mv);
        vf sum = vzero();
        for (int r = 0; r < R; r += 2) { /* P goes to bf16, as key pairs */
            const vf p0 = vexp2_nonpos_bf16(vfms(acc[r][v], sc, mv));
            const vf p1 = r + 1 < R ? vexp2_nonpos_bf16(vfms(acc[r + 1][v], sc, mv)) : vzero();
            _mm512_store_si512(pp + r / 2 * ldp + v * VW, vbf_interleave(vbf_from2(p0, p1)));
            sum = vadd(sum, vadd(p0, p1));
        }
        vstore(bsum + v * VW, vadd(vload(bsum + v * VW), sum));
    }
}

/* One R x NV tile of O = P V: rows are queries (their P pairs broadcast from
 * pp[q * ldp + r]), columns head_dim in NV vectors of vp [kpairs][ldv words];
 * C = P V, C += P V or C = alpha[r] C + P V (init), over kpairs key pairs. */
ALWAYS_INLINE void pv_tile(const int R, const int NV, int64_t kpairs, const uint32_t *pp,
                           int64_t ldp, const uint16_t *vp, int64_t ldv, float *c, int64_t ldc,
                           int init, const float *alpha) {
    vf acc[6][4];
    for (int r = 0; r < R; r++)
        for (int v = 0; v < NV; v++)
            acc[r][v] = init == MHA_INIT_ZERO ? vzero() : vload(c + r * ldc + v * VW);
    if (init == MHA_INIT_ROWSCALE)
        for (int r = 0; r < R; r++) {
            const vf s = vset1(alpha[r]);
            for (int v = 0; v < NV; v++) acc[r][v] = vmul(acc[r][v], s);
        }
    for (int64_t q = 0; q < kpairs; q++) {
        vbf bv[4];
        for (int v = 0; v < NV; v++) bv[v] = _mm512_loadu_si512(vp + q * 2 * ldv + v * 2 * VW);
        for (int r = 0; r < R; r++) {
            const vbf a = _mm512_set1_epi32((int)pp[q * ldp + r]);
            for (int v = 0; v < NV; v++) acc[r][v] = vdot_bf16(acc[r][v], a, bv[v]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int v = 0; v < NV; v++) vstore(c + r * ldc + v * VW, acc[r][v]);
}

/* Every (R, NV) with R <= 6 and NV <= 4 as a compile-time tile. */
#define BF_CASE(FN, R, N, ...)                                                                     \
    case (R)*8 + (N):                                                                              \
        FN(R, N, __VA_ARGS__);                                                                     \
        return;
#define BF_ROW(FN, R, ...)                                                                         \
    BF_CASE(FN, R, 1, __VA_ARGS__)                                                                 \
    BF_CASE(FN, R, 2, __VA_ARGS__) BF_CASE(FN, R, 3, __VA_ARGS__) BF_CASE(FN, R, 4, __VA_ARGS__)
#define BF_SWITCH(rows, nv, FN, ...)                                                               \
    switch ((rows)*8 + (nv)) {                                                                     \
        BF_ROW(FN, 1, __VA_ARGS__)                                                                 \
        BF_ROW(FN, 2, __VA_ARGS__)                                                                 \
        BF_ROW(FN, 3, __VA_ARGS__)                                                                 \
        BF_ROW(FN, 4, __VA_ARGS__)                                                                 \
        BF_ROW(FN, 5, __VA_ARGS__)                                                                 \
        BF_ROW(FN, 6, __VA_ARGS__)                                                                 \
    default:                                                                                       \
        break;                                                                                     \
    }
_Static_assert(MHA_MR == 6 && MHA_NV == 4, "the bf16 tiles are written for AVX-512's 6 x 4");

/* The mask and the softcap as compile-time flags: with the cap's loop over
 * the whole tile a run-time branch, gcc kept the 24 accumulators on the
 * stack through every tile's epilogue (stored and loaded again per tile). */
#define SCORE_TILE(R, N, ...) score_tile(R, N, __VA_ARGS__)
static void score_dispatch(int rows, int nv, int masked, int64_t dh, const uint16_t *kp,
                           int64_t ldk, const uint32_t *qp, int64_t ldq, float qscale, uint32_t *pp,
                           int64_t ldp, int64_t r0, float *m, float *bsum, float *alpha, int64_t t,
                           int64_t u, float cap) {
#define SCORE_CASES(MASKED, CAP)                                                                   \
    BF_SWITCH(rows, nv, SCORE_TILE, MASKED, CAP, dh, kp, ldk, qp, ldq, qscale, pp, ldp, r0, m,     \
              bsum, alpha, t, u, cap)
    if (cap > 0) {
        if (masked) {
            SCORE_CASES(1, 1)
        } else {
            SCORE_CASES(0, 1)
        }
    } else if (masked) {
        SCORE_CASES(1, 0)
    } else {
        SCORE_CASES(0, 0)
    }
#undef SCORE_CASES
}

static void pv_dispatch(int rows, int nv, int64_t kpairs, const uint32_t *pp, int64_t ldp,
                        const uint16_t *vp, int64_t ldv, float *c, int64_t ldc, int init,
                        const float *alpha) {
    BF_SWITCH(rows, nv, pv_tile, kpairs, pp, ldp, vp, ldv, c, ldc, init, alpha)
}

/* k_scores_exp's contract (ukernels.h: the band t0 + r <= i <= t1 + r when
 * masked) on the packed bf16 operands, written straight to P as key pairs:
 * Pp[q][i] = (P^T[2q][i], P^T[2q + 1][i]) (a pair never straddles two row
 * tiles: MHA_MR is even), with zeros in a row tile's columns outside its
 * visible vectors. Once finite, m moves by whole steps, so a rescale of
 * the pairs already written is exact (a power of 2). Against an fp32 S^T
 * packed to pairs afterwards: 1.013-1.029x (Zen 4 VM, stop 58). */
static void scores_exp(int64_t rows, int64_t ncols, int64_t dh, const uint16_t *kp, int64_t ldk,
                       const uint32_t *qp, int64_t ldq, float qscale, uint32_t *pp, int64_t ldp,
                       float *m, float *bsum, float *alpha, int masked, int64_t t0, int64_t t1,
                       float cap) {
    _Static_assert(MHA_MR % 2 == 0, "a key pair stays in one row tile");
    mha_band_clamp(&t0, &t1);
    for (int64_t j0 = 0; j0 < ncols; j0 += MHA_NR) {
        const int64_t nc = ncols - j0 < MHA_NR ? ncols - j0 : MHA_NR;
        for (int64_t r0 = 0; r0 < rows; r0 += MHA_MR) {
            const int r = (int)(rows - r0 < MHA_MR ? rows - r0 : MHA_MR);
            int64_t s, e;
            mha_band_cols(masked, t0, t1, r0, r, ncols, &s, &e);
            s = s < j0 ? j0 : s;
            e = e > j0 + nc ? j0 + nc : e;
            if (s > e) s = e;
            for (int64_t q = r0 / 2; q < (r0 + r + 1) / 2; q++) { /* the pairs' columns not seen */
                for (int64_t i = j0; i < s; i += VW)
                    _mm512_store_si512(pp + q * ldp + i, _mm512_setzero_si512());
                for (int64_t i = e; i < j0 + nc; i += VW)
                    _mm512_store_si512(pp + q * ldp + i, _mm512_setzero_si512());
            }
            if (s == e) continue;
            score_dispatch(r, (int)((e - s) / VW), masked && !mha_band_inside(t0, t1, r0, r, s, e),
                           dh, kp + r0 * ldk, ldk, qp + s, ldq, qscale, pp + r0 / 2 * ldp + s, ldp,
                           r0, m + s, bsum + s, alpha + s, t0 + r0 - s, t1 + r0 - s, cap);
        }
    }
}

/* The height of P.V's next row tile (queries) with `left` rows to go:
 * MHA_MR (6), but the last 7 or 8 rows as two tiles of 4, not a tile of 6
 * and one of 1 or 2 (whose products reload the 4 V vectors per 1 or 2
 * broadcasts). A 32-query block (the short-window rule of cachemodel.c)
 * ends in such a pair. Measured on the Zen 4 VM, H8 N8192 d64 causal, best
 * of 3, 3 alternated rounds, 1 thread: window 128 1.012x, 256 1.013x, 512
 * 1.012x; (1,12,197,64) level. In the fp32 gemm (kernels/gemm.c) the same
 * split lost 0.5-4% (windows 128 and 256, causal N 1024), so it is not there. */
static inline int64_t pv_row_tile(int64_t left) {
    _Static_assert(MHA_MR == 6, "two tiles of 4 for the last 7 or 8 rows");
    return left == 7 || left == 8 ? 4 : (left < MHA_MR ? left : MHA_MR);
}

/* O[0, rows) += P V over kpairs key pairs (init as pv_tile), all dv columns. */
static void pv(int64_t rows, int64_t kpairs, const uint32_t *pp, int64_t ldp, const uint16_t *vp,
               int64_t dv, float *o, int init, const float *alpha) {
    for (int64_t c0 = 0; c0 < dv; c0 += MHA_NR) {
        const int nv = (int)((dv - c0 < MHA_NR ? dv - c0 : MHA_NR) / VW);
        for (int64_t r0 = 0, r; r0 < rows; r0 += r) {
            r = pv_row_tile(rows - r0);
            pv_dispatch((int)r, nv, kpairs, pp + r0, ldp, vp + 2 * c0, dv, o + r0 * dv + c0, dv,
                        init, alpha + r0);
        }
    }
}

/* ---- the algorithm ------------------------------------------------------------------------ */

typedef struct {
    const mha_problem *p;
    bf_layout L;
    int64_t group, off;
    float qscale; /* scale * log2(e), or scale alone under a softcap */
    mha_dtype qt, kvt;
    const mha_tensor *q, *k, *v;
    const mha_tensor_mut *out;
    const float *sinks;    /* p->sinks: [heads], natural-log units */
    const int32_t *blocks; /* paged: the sequence's row of the block table; else NULL */
    int64_t bs;            /* paged: keys per cache block */
    int pf_next; /* blocks run in order: prefetch the next one's rows (mha_window_local) */
} bf_ctx;

/* The paged KV cache as in flash.c: a KV block never crosses the end of a
 * cache block (page_cap), so its keys are rows of one cache block, packed
 * from where they lie (kv_row): block by block through the table, no gather
 * copy. */
static inline int64_t page_cap(const bf_ctx *x, int64_t j0, int64_t n) {
    return mha_page_cap(x->blocks, x->bs, j0, n);
}
/* Key j0's row of t: row j0 from head (the (batch, KV head)'s first row),
 * or, paged (head: the pool's KV head), slot j0 % bs of the block the table
 * names for j0. */
static inline const uint16_t *kv_row(const bf_ctx *x, const mha_tensor *t, const uint16_t *head,
                                     int64_t j0) {
    if (!x->blocks) return head + j0 * t->stride_n;
    return head + (int64_t)x->blocks[j0 / x->bs] * t->stride_b + (j0 % x->bs) * t->stride_n;
}

/* K's rows are already Kp's (bf16 pairs, 2 dh = d of them) where K is
 * bf16 with an even head_dim and stored row after row (dense, head-major,
 * not paged): the blocks read them in place and only V is packed. */
static int k_in_place(const bf_ctx *x) {
    return x->k->dtype == MHA_BF16 && !(x->p->head_dim & 1) && !x->blocks &&
           x->k->stride_n == x->p->head_dim;
}

/* A thread's whole packs of K (rows of 2 dh bf16, as Kp) and V (key pairs,
 * as Vp) of the (batch or sequence b, KV head g) they hold, -1 before the
 * first; k NULL when the plan has none (L.kall 0). */
typedef struct {
    uint16_t *k, *v;
    int64_t b, g;
} bf_pre;
static bf_pre bf_pre_of(const bf_layout *L, char *ws) {
    char *at = ws + L->per_thread - L->seqkv - L->vall - L->kall;
    return (bf_pre){L->kall ? (uint16_t *)at : NULL, (uint16_t *)(at + L->kall), -1, -1};
}
/* Makes c hold (b, g): packs keys [0, seq_kv) of (b, g) of x (b: x's batch
 * index, 0 in a sequence's view; tag: the sequence's, for the cache) in
 * chunks that stay in one cache block when paged, the last pair padded
 * with zeros by pack_v. */
static void bf_pre_use(const bf_ctx *x, bf_pre *c, int64_t b, int64_t tag, int64_t g) {
    if (!c->k || (c->b == tag && c->g == g)) return;
    PHASE_START();
    const mha_problem *p = x->p;
    const bf_layout *L = &x->L;
    const int64_t d = p->head_dim, dv = mha_dv(p), nkv = p->seq_kv;
    const uint16_t *kh = (const uint16_t *)x->k->data + b * x->k->stride_b + g * x->k->stride_h;
    const uint16_t *vh = (const uint16_t *)x->v->data + b * x->v->stride_b + g * x->v->stride_h;
    const int kin = k_in_place(x);
    for (int64_t j0 = 0, n; j0 < nkv; j0 += n) {
        n = page_cap(x, j0, nkv - j0 < 64 ? nkv - j0 : 64);
        touch_rows(kv_row(x, x->v, vh, j0), n, x->v->stride_n, dv * 2);
        if (!kin) {
            touch_rows(kv_row(x, x->k, kh, j0), n, x->k->stride_n, d * 2);
            pack_k(n, d, kv_row(x, x->k, kh, j0), x->k->stride_n, x->kvt, c->k + j0 * 2 * L->dh,
                   2 * L->dh);
        }
        pack_v(n, dv, L->dv, kv_row(x, x->v, vh, j0), x->v->stride_n, x->kvt,
               c->v + j0 / 2 * 2 * L->dv);
    }
    c->b = tag;
    c->g = g;
    PHASE(PHASE_PACK);
}

/* One (batch, head, query block) on this thread's workspace: flash.c's
 * flash_block with the packs and the bf16 products. pre: the thread's
 * whole packs, holding (b, h's KV head) when pre->k is set (bf_pre_use);
 * a block reads them in place where it starts on a key pair and ends on
 * one or at the last key, and packs its own otherwise. */
static void bf_block(const bf_ctx *x, int64_t b, int64_t h, int64_t qb, char *ws,
                     const bf_pre *pre) {
    const mha_problem *p = x->p;
    const bf_layout *L = &x->L;
    const int64_t d = p->head_dim, dv = mha_dv(p), g = h / x->group, off = x->off, ld = L->bqp;
    PHASE_START();
    char *w = ws;
    uint32_t *Qp = (uint32_t *)w;
    uint32_t *Pp = (uint32_t *)(w += L->qp);
    uint16_t *Kp = (uint16_t *)(w += L->pp);
    uint16_t *Vp = (uint16_t *)(w += L->kp);
    float *Ob = (float *)(w += L->vp);
    float *m = (float *)(w += L->ob), *l = m + L->vec / 4, *alpha = l + L->vec / 4,
          *bsum = alpha + L->vec / 4;
    int64_t *kb = (int64_t *)(w + 4 * L->vec), *ke = kb + L->bqp;
    const uint16_t *qh = (const uint16_t *)x->q->data + b * x->q->stride_b + h * x->q->stride_h;
    const uint16_t *kh = (const uint16_t *)x->k->data + b * x->k->stride_b + g * x->k->stride_h;
    const uint16_t *vh = (const uint16_t *)x->v->data + b * x->v->stride_b + g * x->v->stride_h;
    const int64_t skn = x->k->stride_n, svn = x->v->stride_n, son = x->out->stride_n;
    uint16_t *oh = (uint16_t *)x->out->data + b * x->out->stride_b + h * x->out->stride_h;

    const int64_t i0 = qb * L->bq, n = p->seq_q - i0 < L->bq ? p->seq_q - i0 : L->bq;
    const int64_t ncols = (n + VW - 1) / VW * VW;
    /* each row's visible keys [kb, ke); both ends never decrease with the
     * row, so the block sees [kb[0], ke[n-1]) and every row [kb[n-1], ke[0])
     * (padding lanes take the last row's) */
    for (int64_t i = 0; i < ncols; i++) {
        const int64_t gi = i0 + (i < n ? i : n - 1);
        kb[i] = mha_kv_begin(p, gi);
        ke[i] = mha_kv_end(p, gi);
    }
    const int64_t lo = kb[0], kv_end = ke[n - 1];
    if (kv_end <= lo) { /* every row masked: zeros by convention */
        for (int64_t i = 0; i < n; i++) memset(oh + (i0 + i) * son, 0, (size_t)dv * 2);
        return;
    }
    const float sink = p->sinks ? x->sinks[h] * LOG2E : -INFINITY;
    for (int64_t i = 0; i < ncols; i++) { /* a sink: m = sink, its term 2^0 = 1 */
        m[i] = sink;
        l[i] = sink > -INFINITY || isnan(sink) ? 1.0f : 0.0f;
    }
    pack_q(n, d, qh + i0 * x->q->stride_n, x->q->stride_n, x->qt, Qp, ld);
    PHASE(PHASE_PACK);
    /* flash.c's split of the keys: [f0, full) seen by every row in equal
     * blocks of at most bk on the fast path (a softcap capping the tile's
     * scores in registers); after it the causal triangle, or, with a
     * window or a softcap, the edges [lo, f0) and [full, kv_end), on the
     * tile masked by the band. */
    const int var = p->window || p->softcap > 0;
    int64_t f0 = var ? kb[n - 1] : 0, full = ke[0];
    if (full <= f0) f0 = full = var ? kv_end : f0;
    /* A short window's whole band within one block: one masked block, as
     * flash.c (window 128 under 32 x 256 blocks: 1.025x, Zen 4 VM). */
    if (p->window && f0 > lo && kv_end - lo <= L->bk) f0 = full = kv_end;
    if (!var) full = full < 0 ? 0 : (full > kv_end ? kv_end : full);
    /* With the whole packs, every block but a window's first (from an odd
     * lo) starts on a key pair: the fast region [f0, full) shrinks to even
     * ends (its rows still see all of it) and the blocks around it end on
     * even keys. The keys this moves out of it go to the edges' masked tile
     * or, without a window or a softcap (f0 = 0), to the diagonal's masked
     * tile, which is only a causal one: there full < kv_end. */
    const uint16_t *pk = pre->k;
    if (pk && full > f0) {
        if (var) {
            f0 += f0 & 1;
            full -= full & 1;
            full = full < f0 ? f0 : full;
        } else if (full < kv_end) {
            full -= full & 1;
        }
    }
    const int64_t nfull = (full - f0 + L->bk - 1) / L->bk;
    int64_t even = nfull > 0 ? (full - f0 + nfull - 1) / nfull : L->bk;
    even = (even + MHA_MR - 1) / MHA_MR * MHA_MR;
    even = even > L->bk ? L->bk : even;
    const int kin = k_in_place(x);
    int64_t left, right; /* the band: the edges' and the diagonal's blocks mask by it */
    mha_kv_band(p, &left, &right);
    mha_span_pf pfs, *pf = NULL; /* the next block's Q rows and new K and V rows */
    if (x->pf_next && i0 + n < p->seq_q) {
        const int64_t nn = p->seq_q - i0 - n < L->bq ? p->seq_q - i0 - n : L->bq,
                      kn = p->seq_kv - kv_end < nn ? p->seq_kv - kv_end : nn,
                      nedge = (f0 - lo + L->bk - 1) / L->bk + (kv_end - full + L->bk - 1) / L->bk;
        const int64_t kes = mha_dtype_size(x->kvt);
        int64_t lines = 0;
        pfs.nrun = 0;
        mha_span_pf_rows(&pfs, qh, x->q->stride_n, mha_dtype_size(x->qt), d, i0 + n, nn, &lines);
        mha_span_pf_rows(&pfs, oh, son, 2, dv, i0 + n, nn, &lines); /* 1.02x at W 128 */
        /* K from the thread's pack, else from its rows (in place or packed per block) */
        if (pk && !kin)
            mha_span_pf_add(&pfs, pk + kv_end * 2 * L->dh, kn * 2 * L->dh * 2, &lines);
        else
            mha_span_pf_rows(&pfs, kh, skn, kes, d, kv_end, kn, &lines);
        if (pk && kn > 0)
            mha_span_pf_add(&pfs, pre->v + kv_end / 2 * 2 * L->dv, (kn + 2) * L->dv * 2, &lines);
        else
            mha_span_pf_rows(&pfs, vh, svn, kes, dv, kv_end, kn, &lines);
        pf = mha_span_pf_begin(&pfs, lines, nfull + nedge * (1 + (n + MHA_MR - 1) / MHA_MR));
    }
    for (int64_t j0 = lo, bkk; j0 < kv_end; j0 += bkk) {
        mha_span_pf_step(pf);
        const int fast = j0 >= f0 && j0 < full;
        const int64_t stop = j0 < f0 ? f0 : (fast ? full : kv_end), most = fast ? even : L->bk;
        bkk = stop - j0 < most ? stop - j0 : most;
        if (pk && ((j0 + bkk) & 1) && j0 + bkk < stop && bkk > 1) bkk--;
        const uint16_t *kp = Kp, *vp = Vp;
        if (pk && !(j0 & 1) && (!(bkk & 1) || j0 + bkk == p->seq_kv)) {
            kp = kin ? kh + j0 * skn : pk + j0 * 2 * L->dh;
            vp = pre->v + j0 / 2 * 2 * L->dv;
        } else { /* a pair the whole pack splits, or none: this block's own */
            bkk = page_cap(x, j0, bkk);
            if (kin)
                kp = kh + j0 * skn;
            else
                pack_k(bkk, d, kv_row(x, x->k, kh, j0), skn, x->kvt, Kp, 2 * L->dh);
            pack_v(bkk, dv, L->dv, kv_row(x, x->v, vh, j0), svn, x->kvt, Vp);
        }
        PHASE(PHASE_PACK);
        for (int64_t i = 0; i < ncols; i++) {
            bsum[i] = 0.0f;
            alpha[i] = 1.0f;
        }
        const int64_t t0 = j0 - i0 - off - right, t1 = j0 - i0 - off + left; /* the band */
        scores_exp(bkk, ncols, L->dh, kp, 2 * L->dh, Qp, ld, x->qscale, Pp, ld, m, bsum, alpha,
                   !fast, t0, t1, p->softcap);
        PHASE(PHASE_QK);
        int changed = 0;
        for (int64_t i = 0; i < ncols; i += VW) {
            const vf a = vload(alpha + i);
            vstore(l + i, vfma(vload(l + i), a, vload(bsum + i)));
            changed |= vany_ne(a, vset1(1.0f));
        }
        PHASE(PHASE_SOFTMAX);
        const int init = j0 == lo ? MHA_INIT_ZERO : (changed ? MHA_INIT_ROWSCALE : MHA_INIT_ACC);
        if (fast) {
            pv(n, (bkk + 1) / 2, Pp, ld, vp, L->dv, Ob, init, alpha);
        } else { /* the diagonal or an edge: each row tile over the key pairs its rows see */
            for (int64_t r0 = 0, rows; r0 < n; r0 += rows) {
                mha_span_pf_step(pf);
                rows = pv_row_tile(n - r0);
                int64_t k0 = kb[r0] - j0, k1 = ke[r0 + rows - 1] - j0;
                k0 = k0 < 0 ? 0 : (k0 > bkk ? bkk : k0) / 2 * 2; /* from a pair's first key */
                k1 = k1 < k0 ? k0 : (k1 > bkk ? bkk : k1);
                pv(rows, (k1 - k0 + 1) / 2, Pp + k0 / 2 * ld + r0, ld, vp + k0 * L->dv, L->dv,
                   Ob + r0 * L->dv, init, alpha + r0);
            }
        }
        PHASE(PHASE_PV);
    }
    if (!p->window) {
        store_out(n, dv, Ob, L->dv, l, mha_rows_blind(p, i0, n), oh + i0 * son, son, p->dtype);
    } else { /* a row that sees no key is zeros, sink or not: runs of rows alike together */
        for (int64_t i = 0, e; i < n; i = e) {
            const int blind = ke[i] <= kb[i];
            for (e = i + 1; e < n && (ke[e] <= kb[e]) == blind;) e++;
            store_out(e - i, dv, Ob + i * L->dv, L->dv, l + i, blind ? e - i : 0,
                      oh + (i0 + i) * son, son, p->dtype);
        }
    }
    PHASE(PHASE_PACK);
}

/* The packed ragged batch and the paged cache as in flash.c: sequence b as
 * a dense problem of its own (mha_seq_view), the tasks in mha_seq_task's
 * order, or one (sequence, head) per task with split = heads. */
typedef struct {
    mha_seq_view v;
    bf_ctx x;
} bf_seq;

static void bf_seq_view(const bf_ctx *x, const mha_extras *ex, int64_t b, bf_seq *s) {
    mha_seq_view_of(x->p, ex, b, x->q, x->k, x->v, x->out, &s->v);
    s->x = *x;
    MHA_CTX_AT_SEQ(s->x, s->v);
    s->x.off = s->v.p.seq_kv - s->v.p.seq_q;
    s->x.out = &s->v.out;
}

/* With L.seqkv, each thread reads K and V from its copy of the task's
 * (sequence, KV head) (internal.h: mha_seq_kv_copy), as flash.c; with
 * L.kall from its whole packs of them (bf_pre), made from the cache in
 * place. */
static void bf_layout_run(const bf_ctx *x, const mha_extras *ex, int by_heads, int threads,
                          void *workspace) {
    const mha_problem *p = x->p;
    const int64_t H = p->heads, bq = x->L.bq, pairs = p->batch * H;
    const int64_t n = by_heads ? pairs : (p->seq_q + bq - 1) / bq * pairs;
#pragma omp parallel num_threads(threads)
    {
        char *ws = (char *)workspace + (size_t)omp_get_thread_num() * x->L.per_thread;
        mha_seq_kv_cache cache = {ws + x->L.per_thread - x->L.seqkv, -1, -1};
        bf_pre pre = bf_pre_of(&x->L, ws);
#pragma omp for schedule(dynamic, 1)
        for (int64_t it = 0; it < n; it++) {
            int64_t b = it / H, h = it % H, qb = 0;
            if (!by_heads && !mha_seq_task(p, ex, bq, it, &b, &h, &qb)) continue;
            bf_seq s;
            bf_seq_view(x, ex, b, &s);
            mha_tensor kc, vc;
            if (x->L.seqkv)
                mha_seq_kv_use(&cache, &s.v, p->seq_kv, b, h / x->group, &kc, &vc, &s.x.k, &s.x.v);
            bf_pre_use(&s.x, &pre, 0, b, h / x->group);
            for (; qb * bq < s.v.p.seq_q; qb++) {
                bf_block(&s.x, 0, h, qb, ws, &pre);
                if (!by_heads) break;
            }
        }
    }
}

mha_status MHA_CAT(MHA_SYM(flash), _run)(const mha_problem *p, const mha_options *o, int threads,
                                         const mha_tensor *q, const mha_tensor *k,
                                         const mha_tensor *v, const mha_extras *ex,
                                         const mha_tensor_mut *out, void *workspace) {
    const bf_ctx x = {p, bf_plan(p, o), p->heads / p->kv_heads, p->seq_kv - p->seq_q,
                      /* scores in log2 units -> exp2; a softcap takes them natural */
                      mha_problem_scale(p) * (p->softcap > 0 ? 1.0f : LOG2E), p->dtype,
                      mha_problem_kv_dtype(p), q, k, v, out, ex->sinks, NULL, 0,
                      p->layout == MHA_LAYOUT_DENSE && mha_window_local(p)};
    const int64_t H = p->heads, nqb = (p->seq_q + x.L.bq - 1) / x.L.bq, pairs = p->batch * H;
    if (p->layout != MHA_LAYOUT_DENSE) {
        bf_layout_run(&x, ex, o->split == MHA_SPLIT_HEADS, threads, workspace);
        return MHA_OK;
    }
#pragma omp parallel num_threads(threads)
    {
        char *ws = (char *)workspace + (size_t)omp_get_thread_num() * x.L.per_thread;
        bf_pre pre = bf_pre_of(&x.L, ws);
        if (o->split == MHA_SPLIT_HEADS) {
#pragma omp for schedule(dynamic, 1)
            for (int64_t bh = 0; bh < pairs; bh++) {
                const int64_t b = bh / H, h = bh % H;
                bf_pre_use(&x, &pre, b, b, h / x.group);
                for (int64_t qb = 0; qb < nqb; qb++) bf_block(&x, b, h, qb, ws, &pre);
            }
        } else {
            /* (batch, head, query block) tasks, the costly last (causal) blocks
             * first, or under a window bounded on the left in order and in
             * chunks (flash.c); consecutive tasks share a head, so a thread's
             * packs serve several of them */
            const int64_t chunk =
                mha_window_chunk(p, pairs * nqb, threads, x.L.kall ? x.group * nqb : 1);
#pragma omp for schedule(dynamic, chunk)
            for (int64_t it = 0; it < pairs * nqb; it++) {
                const int64_t b = it / nqb / H, h = it / nqb % H, qb = it % nqb;
                bf_pre_use(&x, &pre, b, b, h / x.group);
                bf_block(&x, b, h, x.pf_next ? qb : nqb - 1 - qb, ws, &pre);
            }
        }
    }
    return MHA_OK;
}
