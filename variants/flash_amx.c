/* flash_amx.c - kernels flash.amx and flash.amxemu: flash.avx512bf16's
 * problems (bf16/fp16 Q/O and K/V, any pair; fp16 rounded to bf16 while
 * packing; every variant: window, softcap, sinks, head_dim_v) with both
 * products on AMX tiles (kernels/tile.h). One source, built twice: with the
 * instructions (level amx, mha_flash__amx) and against the emulation
 * (MHA_TILE_EMU, mha_flash__amxemu: a verification kernel for any
 * avx512bf16 machine, never swept, tuned or selected).
 *
 * K and V of a (batch, KV head) are packed once into the layouts the tiles
 * read: K^T as 16-key panels of head-dim pairs (the VNNI B operand of
 * S = Q K^T; a 16 x 16 dword transpose per panel and 32 head-dim elements)
 * and V as pairs of keys per 16 columns (the B operand of O = P V); every
 * tile is then 1 KiB of contiguous memory (rows 64 bytes apart) and the
 * pack serves every query block and every head of a GQA group. Keys are
 * padded to 32 with zeros, head dims to 32. Where the packs live and who
 * makes them: amx_per_group.
 *
 * Per (batch, head, query block): Q is packed once into A tiles; then for
 * each KV block and each 32-row sub-block: S (2 x 2 tiles of 16 x 16, four
 * accumulators) over the 32-key chunks the rows see, stored as fp32 tiles;
 * the online softmax per row on AVX-512 in fp32 (the scale folded into the
 * exponent's FMA, a lazy reference max, one pass where the max need not
 * move, a degree-3 exp2 since P is rounded to bf16 next) writing P straight
 * into A tiles; O (fp32 tiles in memory) rescaled by alpha per row where the
 * max moved, then O += P V. Causal and window: a sub-block visits only the
 * key chunks its rows see; each row's softmax takes its own keys [lo, hi).
 * Each OpenMP thread loads the tile configuration before its first tile
 * instruction and releases the tiles at the end of the region. The
 * measurements behind these choices: docs/amx.md. */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "bf16_pack.h"
#include "internal.h"
#include "phase.h"
#include "ukernels.h"
#include "flash_var.h"

#include "tile.h"
#include "tile_pack.h"

#ifndef __AVX512BF16__
#error "flash_amx.c needs AVX512_BF16 (its softmax and packs)"
#endif

#define LOG2E 1.44269504088896341f
#define AMX_BQ 64     /* defaults when the options leave blocks at 0 */
#define AMX_BK 256    /* (mha_attend resolves them first: the cache model or a table) */
#define PACK_CHUNKS 8 /* 32-key chunks per packing task */

static int64_t up32(int64_t x) {
    return (x + 31) / 32 * 32;
}

typedef struct {
    int per_group; /* amx_per_group: packs per thread, a task per KV head */
    /* dc: 32-element chunks of d, vc: 16-column groups of dv; ring: the
     * chunks a thread's packs hold under a window (amx_ring), 0 = all */
    int64_t bq, nqp, bk, dp, dvp, nkp, dc, vc, ring;
    size_t kt_head, vp_head, shared;       /* bytes: the packs of one (batch, KV head), all */
    size_t qa, s, pa, ob, vec, per_thread; /* bytes, each 64-aligned */
} amx_layout;

/* The two ways to share the work. Per KV group (split = heads, and auto
 * where there are at least 4 (batch, KV head) pairs per thread): a task is a
 * (batch, KV head) with every query block of its heads, and it packs that
 * head's K and V into the thread's own buffer as its query blocks reach
 * them (amx_group_task), where the L2 then holds them. Per query block
 * (split = query blocks, and auto with fewer pairs): a task is a (batch,
 * head, query block) and every (batch, KV head) is packed once, in
 * parallel, into the shared part of the workspace before any task starts. */
static int amx_per_group(const mha_problem *p, const mha_options *o, int threads) {
    if (o->split != MHA_SPLIT_AUTO) return o->split == MHA_SPLIT_HEADS;
    return p->batch * p->kv_heads >= 4 * (int64_t)threads;
}

/* Under a window bounded on both sides of each row (on the left, and on the
 * right or by causal), a query block reads the chunks of at most
 * (bq + left + right + 31) / 32 + 1 consecutive 32-key chunks, and the
 * per-group task packs chunks just before the first block that reads them
 * (amx_group_task). Its packs then need only that many chunks, as a ring
 * (chunk kc in slot kc % ring): the packs' stores land on lines the thread
 * touched a few blocks before, where the whole head's packs (2 MiB at N 8192,
 * d 64) stored every chunk to lines evicted since the head began. 0 when
 * the ring would not be smaller than the head or the split is per block. */
static int64_t amx_ring(const mha_problem *p, int per_group, int64_t bq, int64_t nkp) {
    if (!per_group || !p->window || p->window_left < 0) return 0;
    const int64_t right = p->causal ? 0 : p->window_right; /* causal: no key past the diagonal */
    if (right < 0) return 0;
    if (p->window_left > nkp || right > nkp) return 0; /* no overflow below; as large as the head */
    const int64_t ring = (bq + p->window_left + right + 31) / 32 + 1;
    return ring * 32 < nkp ? ring : 0;
}

/* The slot of chunk kc in a thread's packs. */
static inline int64_t chunk_slot(const amx_layout *L, int64_t kc) {
    return L->ring ? kc % L->ring : kc;
}

/* The one plan of the workspace. Packs of a (batch, KV head): K^T (nkp x dp
 * bf16) and V (nkp x dvp bf16), one per thread or one per pair (shared).
 * Per thread besides: Qa (nqp x dp bf16), S (32 x bk fp32), Pa (32 x bk
 * bf16), O (nqp x dvp fp32), the per-query m and l (l in 16 lanes a row).
 * The KV block is a multiple of 32 (the pack's chunks): block_kv rounds up. */
static amx_layout amx_plan(const mha_problem *p, const mha_options *o, int threads) {
    amx_layout L;
    L.per_group = amx_per_group(p, o, threads);
    L.bq = o->block_q > 0 ? o->block_q : AMX_BQ;
    if (L.bq > p->seq_q) L.bq = p->seq_q;
    if (L.bq < 1) L.bq = 1;
    L.nqp = up32(L.bq);
    L.nkp = up32(p->seq_kv);
    L.bk = up32(o->block_kv > 0 ? o->block_kv : AMX_BK);
    if (L.bk > L.nkp) L.bk = L.nkp;
    L.dp = up32(p->head_dim);
    L.dvp = up32(mha_dv(p));
    L.dc = L.dp / 32;
    L.vc = L.dvp / 16;
    L.ring = amx_ring(p, L.per_group, L.bq, L.nkp);
    const size_t nkp = (size_t)(L.ring ? 32 * L.ring : L.nkp), nqp = (size_t)L.nqp,
                 bk = (size_t)L.bk;
    L.kt_head = mha_mul_sz(mha_mul_sz(nkp, (size_t)L.dp), 2);
    L.vp_head = mha_mul_sz(mha_mul_sz(nkp, (size_t)L.dvp), 2);
    const size_t packs = mha_add_sz(L.kt_head, L.vp_head);
    L.shared =
        L.per_group
            ? 0
            : mha_align64(mha_mul_sz(packs, mha_mul_sz((size_t)p->batch, (size_t)p->kv_heads)));
    L.qa = mha_align64(mha_mul_sz(mha_mul_sz(nqp, (size_t)L.dp), 2));
    L.s = mha_align64(mha_mul_sz(32 * 4, bk));
    L.pa = mha_align64(mha_mul_sz(32 * 2, bk));
    L.ob = mha_align64(mha_mul_sz(mha_mul_sz(nqp, (size_t)L.dvp), 4));
    L.vec = mha_align64(nqp * 4); /* m; l takes 16 floats a row (l_update) */
    L.per_thread = mha_add_sz(mha_add_sz(mha_add_sz(L.qa, L.s), mha_add_sz(L.pa, L.ob)),
                              mha_add_sz(mha_mul_sz(17, L.vec), L.per_group ? packs : 0));
    return L;
}

size_t MHA_CAT(MHA_SYM(flash), _workspace)(const mha_problem *p, const mha_options *o,
                                           int threads) {
    const amx_layout L = amx_plan(p, o, threads);
    return mha_add_sz(L.shared, mha_mul_sz(L.per_thread, (size_t)threads));
}

/* ---- packing ------------------------------------------------------------- */

typedef struct {
    const mha_problem *p;
    amx_layout L;
    int64_t group;
    float qscale; /* scale * log2(e), or scale alone under a softcap */
    mha_dtype qt, kvt;
    const mha_tensor *q, *k, *v;
    const mha_tensor_mut *out;
    const float *sinks;
    char *shared;
    int64_t seq;           /* packed, paged: the sequence (its packs' index); dense 0 */
    const int32_t *blocks; /* paged: the sequence's row of the block table; else NULL */
    int64_t bs;            /* paged: keys per cache block */
} amx_ctx;

/* The packs of (b, g) in the shared part (per query block), or this thread's
 * (per group: ws is its workspace). */
static uint32_t *packs_of(const amx_ctx *x, int64_t b, int64_t g, char *ws) {
    if (x->L.per_group) return (uint32_t *)(ws + x->L.per_thread - x->L.kt_head - x->L.vp_head);
    const size_t bg = (size_t)((x->seq + b) * x->p->kv_heads + g);
    return (uint32_t *)(x->shared + bg * (x->L.kt_head + x->L.vp_head));
}

/* Key j's row of t (K or V) for (b, g): row j of the (batch, KV head), or,
 * paged, slot j % bs of the cache block the table names for j (read in
 * place: the pack is the one copy, as in the dense layout). */
static inline const uint16_t *kv_row(const amx_ctx *x, const mha_tensor *t, int64_t b, int64_t g,
                                     int64_t j) {
    const uint16_t *head = (const uint16_t *)t->data + g * t->stride_h;
    if (!x->blocks) return head + b * t->stride_b + j * t->stride_n;
    return head + (int64_t)x->blocks[j / x->bs] * t->stride_b + (j % x->bs) * t->stride_n;
}

/* Keys [32 kc, 32 kc + 32) of (b, g): two K^T panels of 16 keys, each
 * [dc chunks][16 pairs][16 keys] words, and the V chunk [vc column groups]
 * [16 key pairs][16 columns] words; keys past seq_kv are zeros. */
static void pack_kv_chunk(const amx_ctx *x, int64_t b, int64_t g, int64_t kc, uint32_t *kt) {
    const mha_problem *p = x->p;
    const amx_layout *L = &x->L;
    const int64_t d = p->head_dim, dvr = mha_dv(p), nkv = p->seq_kv;
    const uint16_t *kr[32], *vr[32];
    for (int64_t i = 0; i < 32; i++) {
        const int64_t j = 32 * kc + i;
        kr[i] = j < nkv ? kv_row(x, x->k, b, g, j) : NULL;
        vr[i] = j < nkv ? kv_row(x, x->v, b, g, j) : NULL;
    }
    uint32_t *vp = (uint32_t *)((char *)kt + L->kt_head);
    const int64_t slot = chunk_slot(L, kc);
    /* every key of the chunk, bf16: whole 32-column groups without tests
     * (K: tile_pack_b_rows_bf16; V: two loads and two word permutes per
     * pair and 32 columns, where the loop below takes four masked loads, an
     * insert and a permute per 16). On the Emerald Rapids VM (d 64, a
     * throwaway loop over one chunk in the L1, best of 300) the chunk went
     * from 23-27 to 11-12 TSC ticks a key; from the L2, 25-26 to 22-23. */
    const int full = x->kvt == MHA_BF16 && 32 * kc + 32 <= nkv;
    const int64_t kwhole = full ? d / 32 : 0, whole = full ? dvr / 32 : 0;
    for (int64_t pnl = 0; pnl < 2; pnl++) {
        uint32_t *kp = kt + (2 * slot + pnl) * L->dc * 256;
        for (int64_t c = 0; c < L->dc; c++)
            if (c < kwhole)
                tile_pack_b_rows_bf16(kr + 16 * pnl, 32 * c, kp + c * 256);
            else
                tile_pack_b_rows(kr + 16 * pnl, x->kvt, d, c, kp + c * 256);
    }
    const __m512i ilo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40,
                                         8, 39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0),
                  ihi = _mm512_add_epi16(ilo, _mm512_set1_epi16(16));
    for (int64_t q = 0; q < 16; q++) {
        const uint16_t *ra = vr[2 * q], *rb = vr[2 * q + 1];
        int64_t cg = 0;
        for (; cg < 2 * whole; cg += 2) {
            const __m512i a = _mm512_loadu_si512(ra + 16 * cg),
                          e = _mm512_loadu_si512(rb + 16 * cg);
            uint32_t *o = vp + (slot * L->vc + cg) * 256 + 16 * q;
            _mm512_store_si512(o, _mm512_permutex2var_epi16(a, ilo, e));
            _mm512_store_si512(o + 256, _mm512_permutex2var_epi16(a, ihi, e));
        }
        for (; cg < L->vc; cg++) {
            const __m256i lo = ra ? row16_bf16(ra, x->kvt, 16 * cg, dvr) : _mm256_setzero_si256();
            const __m256i hi = rb ? row16_bf16(rb, x->kvt, 16 * cg, dvr) : _mm256_setzero_si256();
            const vbf both = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
            _mm512_store_si512(vp + (slot * L->vc + cg) * 256 + 16 * q, vbf_interleave(both));
        }
    }
}

/* Rows [i0, i0 + n) of Q as A tiles: [nqp / 16 row groups][dc chunks][16
 * rows][32 bf16], rows past n zero. */
static void pack_q_tiles(const amx_ctx *x, const uint16_t *qh, int64_t i0, int64_t n,
                         uint16_t *qa) {
    const amx_layout *L = &x->L;
    const int64_t d = x->p->head_dim, sqn = x->q->stride_n;
    if (x->qt == MHA_BF16 && d % 32 == 0) { /* whole bf16 rows: copies (7.3 -> 3.8 ticks a row) */
        for (int64_t i = 0; i < up32(n); i++) {
            uint16_t *at = qa + (i / 16) * L->dc * 512 + (i % 16) * 32;
            for (int64_t c = 0; c < L->dc; c++)
                _mm512_store_si512(at + c * 512,
                                   i < n ? _mm512_loadu_si512(qh + (i0 + i) * sqn + 32 * c)
                                         : _mm512_setzero_si512());
        }
        return;
    }
    for (int64_t i = 0; i < up32(n); i++)
        for (int64_t c = 0; c < L->dc; c++) {
            const __m512i v = i < n ? tile_row32_bf16(qh + (i0 + i) * sqn, x->qt, 32 * c, d)
                                    : _mm512_setzero_si512();
            _mm512_store_si512(qa + ((i / 16) * L->dc + c) * 512 + (i % 16) * 32, v);
        }
}

/* ---- the softmax of one query row of one KV block ---------------------- */

/* Lanes l of the 16 keys from j with lo <= j + l < hi. */
static inline __mmask16 lanes_in(int64_t j, int64_t lo, int64_t hi) {
    const int64_t a = lo - j < 0 ? 0 : (lo - j > VW ? VW : lo - j);
    const int64_t e = hi - j < 0 ? 0 : (hi - j > VW ? VW : hi - j);
    return e <= a ? 0 : (__mmask16)(((1u << e) - 1u) & ~((1u << a) - 1u));
}

/* l = l alpha + sum: a row's running sum kept in 16 lanes (added across
 * them once, at the output), so that no row pays a horizontal add per block. */
static inline void l_update(float *l, float alpha, vf sum) {
    vstore(l, alpha == 1.0f ? vadd(vload(l), sum) : vfma(vload(l), vset1(alpha), sum));
}

/* The row's reference max m moves to tm (a block's max, log2 units) only
 * when tm exceeds it by more than MHA_LAZY_LOG2 (NaN compares false: its P
 * is NaN, so is the row); returns alpha, the factor the row's earlier terms
 * take (1 when m stays, 0 from -inf). */
static inline float move_max(float tm, float *m) {
    const float mo = *m;
    if (!(tm > mo + MHA_LAZY_LOG2)) return 1.0f;
    *m = tm;
    return mo == -INFINITY ? 0.0f : exp2f(mo - tm);
}

/* Whether no lane of mx * sc exceeds m + MHA_LAZY_LOG2: move_max's test,
 * lane by lane (no horizontal max) for the one-pass softmax. */
static inline int max_stays(vf mx, vf vsc, float m) {
    return !_mm512_cmp_ps_mask(vmul(mx, vsc), vset1(m + MHA_LAZY_LOG2), _CMP_GT_OQ);
}

/* A row without a reference max yet (its first block, no sink) takes the
 * max of one group of its scores, x's lanes k, as the reference (in log2
 * units: times sc), so that the one pass below serves its first block too
 * instead of a pass for the max and one for P. The reference is a score of
 * the row, so no P exceeds 2^MHA_LAZY_LOG2 where the pass keeps it
 * (max_stays), and where a score exceeds it by more the row takes the two
 * passes as before. A window of 128 has all its keys in its first block,
 * and its max pass took a fifth of the softmax. Not finite (NaN, or every
 * lane -inf): no reference, the two passes. */
static inline void seed_max(vf x, __mmask16 k, float sc, float *m) {
    if (*m != -INFINITY) return;
    const float e = _mm512_mask_reduce_max_ps(k, x) * sc;
    if (e > -INFINITY && e < INFINITY) *m = e;
}

/* The visible lanes of the 16 keys of group g, [lo, hi): all of an inner
 * group without a test. */
static inline __mmask16 group_lanes(int64_t g, int64_t lo, int64_t hi) {
    return g * VW >= lo && g * VW + VW <= hi ? (__mmask16)0xffff : lanes_in(g * VW, lo, hi);
}

/* P = 2^(s sc - m) (nm = -m) over the chunks [c0, c1) into prow + 512 c, 0
 * outside the keys [lo, hi) (groups [g0, g1) hold them); returns the sum
 * of P; with mx, the max of the visible s alongside. */
static inline __attribute__((always_inline)) vf exp_masked(const float *s, int64_t c0, int64_t c1,
                                                           int64_t lo, int64_t hi, vf vsc, vf nm,
                                                           vf *mx, uint16_t *prow) {
    const int64_t g0 = lo / VW, g1 = (hi + VW - 1) / VW;
    /* only the first and the last group with a visible key are partial, and
     * the chunks [a, e) hold visible keys only: those go without masks */
    const __mmask16 kf = lanes_in(g0 * VW, lo, hi), kl = lanes_in((g1 - 1) * VW, lo, hi);
    const int64_t a = (lo + 31) / 32, e = hi / 32;
    vf sum[2] = {vzero(), vzero()}, m2[2] = {vset1(-INFINITY), vset1(-INFINITY)};
    for (int64_t c = c0; c < c1; c++) {
        vf pr[2];
        if (c >= a && c < e) {
            for (int h = 0; h < 2; h++) {
                const vf x = vload(s + 256 * (2 * c + h));
                if (mx) m2[h] = vmax(m2[h], x);
                pr[h] = vexp2_nonpos_bf16(vfma(x, vsc, nm));
                sum[h] = vadd(sum[h], pr[h]);
            }
        } else {
            for (int h = 0; h < 2; h++) {
                const int64_t g = 2 * c + h;
                pr[h] = vzero();
                if (g < g0 || g >= g1) continue;
                const __mmask16 k = (g == g0 ? kf : 0xffff) & (g == g1 - 1 ? kl : 0xffff);
                const vf x = vload(s + 256 * g);
                if (mx) m2[h] = _mm512_mask_max_ps(m2[h], k, m2[h], x);
                pr[h] = _mm512_maskz_mov_ps(k, vexp2_nonpos_bf16(vfma(x, vsc, nm)));
                sum[h] = vadd(sum[h], pr[h]);
            }
        }
        _mm512_store_si512(prow + 512 * c, vbf_from2(pr[0], pr[1]));
    }
    if (mx) *mx = vmax(*mx, vmax(m2[0], m2[1]));
    return vadd(sum[0], sum[1]);
}

/* exp_masked for every key of the chunks: no masks, two sum (and max)
 * accumulators. */
static inline __attribute__((always_inline)) vf exp_full(const float *s, int64_t c0, int64_t c1,
                                                         vf vsc, vf nm, vf *mx, uint16_t *prow) {
    vf sum[2] = {vzero(), vzero()}, m2[2] = {vset1(-INFINITY), vset1(-INFINITY)};
    for (int64_t c = c0; c < c1; c++) {
        vf pr[2];
        for (int h = 0; h < 2; h++) {
            const vf x = vload(s + 256 * (2 * c + h));
            if (mx) m2[h] = vmax(m2[h], x);
            pr[h] = vexp2_nonpos_bf16(vfma(x, vsc, nm));
            sum[h] = vadd(sum[h], pr[h]);
        }
        _mm512_store_si512(prow + 512 * c, vbf_from2(pr[0], pr[1]));
    }
    if (mx) *mx = vmax(m2[0], m2[1]);
    return vadd(sum[0], sum[1]);
}

/* One query row: its scores s (the 16-key group g at s + 256 g, as the S
 * tiles hold them) over the 32-key chunks [c0, c1) of the block, of which
 * keys [lo, hi) are visible. The score in log2 units is s * sc; m moves (move_max) and l
 * (16 lanes: l_update) takes the row's sum; P = 2^(score - m) rounded to
 * bf16 goes to prow + 512 c (the A tiles' row), 0 where not visible. Once
 * the row has a reference max, one pass: P against it with the block's max
 * taken alongside, and only where a score exceeds m + MHA_LAZY_LOG2 (rare
 * after a row's first blocks) the row again with the max moved. Returns
 * alpha, the factor the row's earlier O must take. */
static inline __attribute__((always_inline)) float softmax_row(float *s, int64_t c0, int64_t c1,
                                                               int64_t lo, int64_t hi, float sc,
                                                               float *m, float *l, uint16_t *prow) {
    if (hi <= lo) {
        for (int64_t c = c0; c < c1; c++)
            _mm512_store_si512(prow + 512 * c, _mm512_setzero_si512());
        return 1.0f;
    }
    const int64_t g0 = lo / VW, g1 = (hi + VW - 1) / VW; /* the groups with a visible key */
    const vf vsc = vset1(sc);
    seed_max(vload(s + 256 * g0), group_lanes(g0, lo, hi), sc, m);
    if (*m > -INFINITY) {
        vf mx = vset1(-INFINITY);
        const vf sum = exp_masked(s, c0, c1, lo, hi, vsc, vset1(-*m), &mx, prow);
        if (max_stays(mx, vsc, *m)) {
            l_update(l, 1.0f, sum);
            return 1.0f;
        }
    }
    vf mx = vset1(-INFINITY);
    for (int64_t g = g0; g < g1; g++)
        mx = _mm512_mask_max_ps(mx, group_lanes(g, lo, hi), mx, vload(s + 256 * g));
    /* sc > 0 (mha_problem_validate: scale >= 0, 0 = 1/sqrt(d)): max(s) sc = max(s sc) */
    const float alpha = move_max(vhmax(mx) * sc, m);
    const vf nm = vset1(*m == -INFINITY ? 0.0f : -*m);
    l_update(l, alpha, exp_masked(s, c0, c1, lo, hi, vsc, nm, NULL, prow));
    return alpha;
}

/* softmax_row for a row that sees every key of the chunks [c0, c1): no masks, and in the two-pass
 * case four max accumulators, so that no chain of dependent max or add sets the pace. */
static inline float softmax_row_full(const float *s, int64_t c0, int64_t c1, float sc, float *m,
                                     float *l, uint16_t *prow) {
    const vf vsc = vset1(sc);
    seed_max(vload(s + 256 * (2 * c0)), (__mmask16)0xffff, sc, m);
    if (*m > -INFINITY) {
        vf mx;
        const vf sum = exp_full(s, c0, c1, vsc, vset1(-*m), &mx, prow);
        if (max_stays(mx, vsc, *m)) {
            l_update(l, 1.0f, sum);
            return 1.0f;
        }
    }
    vf mx[4] = {vset1(-INFINITY), vset1(-INFINITY), vset1(-INFINITY), vset1(-INFINITY)};
    int64_t c = c0;
    for (; c + 1 < c1; c += 2)
        for (int h = 0; h < 4; h++) mx[h] = vmax(mx[h], vload(s + 256 * (2 * c + h)));
    if (c < c1)
        for (int h = 0; h < 2; h++) mx[h] = vmax(mx[h], vload(s + 256 * (2 * c + h)));
    const float alpha = move_max(vhmax(vmax(vmax(mx[0], mx[1]), vmax(mx[2], mx[3]))) * sc, m);
    const vf nm = vset1(*m == -INFINITY ? 0.0f : -*m);
    l_update(l, alpha, exp_full(s, c0, c1, vsc, nm, NULL, prow));
    return alpha;
}

/* ---- prefetching the next task's rows --------------------------------------
 * The per-group split prefetches, while a task computes, what the next one
 * reads from memory first: the K and V rows of the keys the next query
 * block packs, and the Q rows (and the output rows, for writing) of the
 * next (head, query block). Without it a window of 128 spent about a fifth
 * of its time waiting on the pack's and the Q copy's loads (perf: the
 * samples after the loads of K and V rows in pack_kv_chunk), for the same
 * number of keys as causal packs, which it amortises over 64x the work. A
 * few rows per softmax row, so that the prefetches spread over the task. */
typedef struct {
    const amx_ctx *x;
    int64_t b, g, j, je; /* keys [j, je) of (b, g): their K and V rows */
    const uint16_t *q;   /* qn rows of Q from q, and of the output from o */
    uint16_t *o;
    int64_t qn, kstep, qstep; /* keys and query rows per step */
} amx_pf;

static inline void pf_lines(const void *p, int64_t bytes, int write) {
    for (int64_t c = 0; c < bytes; c += 64) {
        if (write)
            __builtin_prefetch((const char *)p + c, 1, 3);
        else
            __builtin_prefetch((const char *)p + c, 0, 3);
    }
}

static inline void pf_step(amx_pf *w) {
    const amx_ctx *x = w->x;
    const int64_t kb = x->p->head_dim * 2, vb = mha_dv(x->p) * 2;
    for (int64_t u = 0; u < w->kstep && w->j < w->je; u++, w->j++) {
        pf_lines(kv_row(x, x->k, w->b, w->g, w->j), kb, 0);
        pf_lines(kv_row(x, x->v, w->b, w->g, w->j), vb, 0);
    }
    for (int64_t u = 0; u < w->qstep && w->qn > 0; u++, w->qn--) {
        pf_lines(w->q, kb, 0);
        pf_lines(w->o, vb, 1);
        w->q += x->q->stride_n;
        w->o += x->out->stride_n;
    }
}

/* ---- the algorithm ------------------------------------------------------- */

/* Rows [r0, r0 + nr) (a 32-row sub-block of the task's query block, global
 * rows i0 + r0 + i) against the keys [j0, je) of one KV block: S over the
 * 32-key chunks the rows see, their softmax into P (O rescaled where a
 * row's max moved), O += P V. No software pipeline: on the AMX machine
 * measured (docs: flash.amx) the tile unit and the AVX-512 units did not
 * overlap (a tile step and independent vector work took the sum of their
 * times), and a second S and P buffer only pushed the working set out of
 * the L1d. */
static void amx_sub_block(const amx_ctx *x, int64_t i0, int64_t r0, int64_t nr, int64_t j0,
                          int64_t je, const uint16_t *qa, const uint32_t *kt, const uint32_t *vp,
                          float *S, uint16_t *Pa, float *Ob, float *m, float *l, amx_pf *pf) {
    const mha_problem *p = x->p;
    const amx_layout *L = &x->L;
    const int64_t slo = mha_kv_begin(p, i0 + r0), shi = mha_kv_end(p, i0 + r0 + nr - 1);
    const int64_t lo = slo > j0 ? slo : j0, hi = shi < je ? shi : je;
    if (hi <= lo) return;
    const int first = slo >= j0; /* the block holding the rows' first key: O starts here */
    const int64_t c0 = (lo - j0) / 32, c1 = (hi - j0 + 31) / 32, kc = j0 / 32;
    const int64_t sg = L->bk / 16, pg = L->bk / 32; /* S and P tiles per row group */
    const uint16_t *q0 = qa + (r0 / 16) * L->dc * 512, *q1 = q0 + L->dc * 512;
    PHASE_START();
    for (int64_t c = c0; c < c1; c++) {
        const uint32_t *b0 = kt + 2 * chunk_slot(L, kc + c) * L->dc * 256, *b1 = b0 + L->dc * 256;
        tile_mul_2x2(q0, q1, b0, b1, 256, L->dc, S + 256 * (2 * c), S + 256 * (2 * c + 1),
                     S + 256 * (sg + 2 * c), S + 256 * (sg + 2 * c + 1), 1);
    }
    PHASE(PHASE_QK);
    float sc = x->qscale; /* to log2 units */
    if (p->softcap > 0) { /* a softcap: both row groups' chunks [c0, c1) capped in place */
        const float cap = p->softcap; /* a local: the stores to S may alias *p */
        for (int64_t t = 0; t < 2; t++) {
            float *s0 = S + 256 * (t * sg + 2 * c0);
            for (int64_t e = 0; e < 512 * (c1 - c0); e += VW)
                vstore(s0 + e, vsoftcap_log2_bf16(vload(s0 + e), sc, cap));
        }
        sc = 1.0f;
    }
    /* every row sees all of [lo, hi), whole chunks: no row needs its own range
     * (the first row's end and the last row's start are the binding ones) */
    const int interior = lo == j0 + 32 * c0 && hi == j0 + 32 * c1 && mha_kv_end(p, i0 + r0) >= hi &&
                         mha_kv_begin(p, i0 + r0 + nr - 1) <= lo;
    for (int64_t i = 0; i < 32; i++) {
        uint16_t *prow = Pa + (i / 16) * pg * 512 + (i % 16) * 32;
        if (i >= nr) { /* padding rows: P = 0 */
            for (int64_t c = c0; c < c1; c++)
                _mm512_store_si512(prow + 512 * c, _mm512_setzero_si512());
            continue;
        }
        float *srow = S + (i / 16) * sg * 256 + (i % 16) * 16, *li = l + (r0 + i) * VW;
        float al;
        if (interior) {
            al = softmax_row_full(srow, c0, c1, sc, &m[r0 + i], li, prow);
        } else {
            const int64_t row = i0 + r0 + i, a = mha_kv_begin(p, row), e = mha_kv_end(p, row);
            const int64_t rlo = (a > lo ? a : lo) - j0, rhi = (e < hi ? e : hi) - j0;
            al = rlo == 32 * c0 && rhi == 32 * c1
                     ? softmax_row_full(srow, c0, c1, sc, &m[r0 + i], li, prow)
                     : softmax_row(srow, c0, c1, rlo, rhi, sc, &m[r0 + i], li, prow);
        }
        if (pf) pf_step(pf);
        if (!first && al != 1.0f) {
            const vf av = vset1(al);
            float *orow = Ob + ((r0 + i) / 16) * L->vc * 256 + ((r0 + i) % 16) * 16;
            for (int64_t cg = 0; cg < L->vc; cg++)
                vstore(orow + 256 * cg, vmul(vload(orow + 256 * cg), av));
        }
    }
    PHASE(PHASE_SOFTMAX);
    float *o0 = Ob + (r0 / 16) * L->vc * 256, *o1 = o0 + L->vc * 256;
    /* the chunks in runs of consecutive slots: two where the ring wraps */
    for (int64_t c = c0, run; c < c1; c += run) {
        const int64_t slot = chunk_slot(L, kc + c);
        run = L->ring && L->ring - slot < c1 - c ? L->ring - slot : c1 - c;
        for (int64_t cg = 0; cg < L->vc; cg += 2) {
            const uint32_t *b0 = vp + (slot * L->vc + cg) * 256;
            tile_mul_2x2(Pa + 512 * c, Pa + (pg + c) * 512, b0, b0 + 256, L->vc * 256, run,
                         o0 + 256 * cg, o0 + 256 * (cg + 1), o1 + 256 * cg, o1 + 256 * (cg + 1),
                         first && c == c0);
        }
    }
    PHASE(PHASE_PV);
}

/* One (batch, head, query block) task: Q packed once, then every KV block
 * against every 32-row sub-block. */
static void amx_block(const amx_ctx *x, int64_t b, int64_t h, int64_t qb, char *ws, amx_pf *pf) {
    const mha_problem *p = x->p;
    const amx_layout *L = &x->L;
    const int64_t dvr = mha_dv(p), g = h / x->group;
    char *w = ws;
    uint16_t *Qa = (uint16_t *)w;
    float *S = (float *)(w += L->qa);
    uint16_t *Pa = (uint16_t *)(w += L->s);
    float *Ob = (float *)(w += L->pa);
    float *m = (float *)(w += L->ob), *l = m + L->vec / 4;
    const uint16_t *qh = (const uint16_t *)x->q->data + b * x->q->stride_b + h * x->q->stride_h;
    const int64_t son = x->out->stride_n;
    uint16_t *oh = (uint16_t *)x->out->data + b * x->out->stride_b + h * x->out->stride_h;

    const int64_t i0 = qb * L->bq, n = p->seq_q - i0 < L->bq ? p->seq_q - i0 : L->bq;
    /* the keys of the block's rows: [kv_lo, kv_end) (both ends never decrease with the row) */
    const int64_t kv_lo = mha_kv_begin(p, i0), kv_end = mha_kv_end(p, i0 + n - 1);
    if (kv_end <= kv_lo) { /* every row masked: zeros by convention */
        for (int64_t i = 0; i < n; i++) memset(oh + (i0 + i) * son, 0, (size_t)dvr * 2);
        return;
    }
    PHASE_START();
    const float sink = p->sinks ? x->sinks[h] * LOG2E : -INFINITY;
    for (int64_t i = 0; i < L->nqp; i++) { /* a sink: m = sink, its term 2^0 = 1 */
        m[i] = sink;
        vstore(l + i * VW, vzero());
        l[i * VW] = sink > -INFINITY || isnan(sink) ? 1.0f : 0.0f;
    }
    pack_q_tiles(x, qh, i0, n, Qa);
    PHASE(PHASE_PACK);
    const uint32_t *kt = packs_of(x, b, g, ws);
    const uint32_t *vp = (const uint32_t *)((const char *)kt + L->kt_head);
    for (int64_t j0 = kv_lo / 32 * 32; j0 < kv_end; j0 += L->bk) {
        const int64_t je = j0 + L->bk < kv_end ? j0 + L->bk : kv_end;
        for (int64_t r0 = 0; r0 < n; r0 += 32)
            amx_sub_block(x, i0, r0, n - r0 < 32 ? n - r0 : 32, j0, je, Qa, kt, vp, S, Pa, Ob, m, l,
                          pf);
    }
    PHASE_RESTART();
    /* out = O / l in the output dtype; a row that sees no key is zeros, sink or not */
    for (int64_t i = 0; i < n; i++) {
        const int blind = mha_kv_count(p, i0 + i) == 0;
        const vf inv = blind ? vzero() : vset1(1.0f / vhsum(vload(l + i * VW)));
        const float *orow = Ob + (i / 16) * L->vc * 256 + (i % 16) * 16;
        uint16_t *dst = oh + (i0 + i) * son;
        for (int64_t c = 0; c < dvr; c += VW) {
            const int nc = (int)(dvr - c < VW ? dvr - c : VW);
            const vf y = blind ? vzero() : vmul(vload(orow + 256 * (c / 16)), inv);
            const __m256i hv = p->dtype == MHA_BF16 ? vf_to_bf16(y) : vf_to_f16(y);
            _mm256_mask_storeu_epi16(dst + c, (__mmask16)((1u << nc) - 1u), hv);
        }
    }
    PHASE(PHASE_PACK);
}

/* One (batch, KV head) task of the per-group split: the query blocks in
 * order, each for every head of the group, with the K and V chunks packed
 * just before the first query block that reads them. Under a window (and
 * causal) the packing then goes along with the blocks, so that the loads
 * of the next block's keys can be prefetched while this block computes
 * (amx_pf), where packing the whole head first did all its loads in one
 * stretch with nothing ahead of them (docs/amx.md, "Windows"). Not causal,
 * the first block packs them all, as before. */
static void amx_group_task(const amx_ctx *x, int64_t b, int64_t g, char *ws) {
    const mha_problem *p = x->p;
    const int64_t bq = x->L.bq, nkc = up32(p->seq_kv) / 32;
    uint32_t *kt = packs_of(x, b, g, ws);
    int64_t packed = 0; /* chunks [0, packed) are in kt */
    for (int64_t i0 = 0, qb = 0; i0 < p->seq_q; i0 += bq, qb++) {
        const int64_t n = i0 + bq < p->seq_q ? bq : p->seq_q - i0;
        const int64_t need = (mha_kv_end(p, i0 + n - 1) + 31) / 32;
        PHASE_START();
        /* chunks before the block's first key are read by no block (the
         * first key never moves back): left out */
        const int64_t first = mha_kv_begin(p, i0) / 32;
        if (packed < first) packed = first;
        for (; packed < need && packed < nkc; packed++) pack_kv_chunk(x, b, g, packed, kt);
        PHASE(PHASE_PACK);
        /* the keys the next query block packs, spread over the group's heads */
        const int64_t n2 = i0 + bq + bq < p->seq_q ? bq : p->seq_q - i0 - bq;
        int64_t kj = 32 * packed,
                kje = n2 > 0 ? 32 * ((mha_kv_end(p, i0 + bq + n2 - 1) + 31) / 32) : 0;
        if (kje > p->seq_kv) kje = p->seq_kv;
        const int64_t per_head = kje > kj ? (kje - kj + x->group - 1) / x->group : 0;
        for (int64_t h = g * x->group; h < (g + 1) * x->group; h++) {
            /* the next task: the next head of the group, or the first head's next block */
            const int last_h = h + 1 == (g + 1) * x->group;
            const int64_t nh = last_h ? g * x->group : h + 1, ni0 = last_h ? i0 + bq : i0;
            const int64_t nn = last_h ? n2 : n, qrow = nn > 0 ? ni0 : 0; /* no row: no prefetch */
            amx_pf pf = {x,
                         b,
                         g,
                         kj,
                         kj + per_head < kje ? kj + per_head : kje,
                         (const uint16_t *)x->q->data + b * x->q->stride_b + nh * x->q->stride_h +
                             qrow * x->q->stride_n,
                         (uint16_t *)x->out->data + b * x->out->stride_b + nh * x->out->stride_h +
                             qrow * x->out->stride_n,
                         nn > 0 ? nn : 0,
                         (per_head + n - 1) / n,
                         1};
            kj = pf.je;
            amx_block(x, b, h, qb, ws, &pf);
        }
    }
}

/* ---- the packed ragged batch and the paged cache -------------------------
 * Sequence b as a dense problem of its own (batch 1, its lengths, so that
 * the masks align bottom-right), with q, k, v and out views from its first
 * row (no copy); paged, k and v stay the pools and the context carries the
 * sequence's row of the block table (kv_row). The plan stays the one of the
 * bounds (seq_q, seq_kv), which covers every sequence; the shared packs (per
 * query block) are one per (sequence, KV head), as per (batch, KV head). */
typedef struct {
    mha_seq_view v;
    amx_ctx x;
} amx_seq;

static void amx_seq_view(const amx_ctx *x, const mha_extras *ex, int64_t b, amx_seq *s) {
    mha_seq_view_of(x->p, ex, b, x->q, x->k, x->v, x->out, &s->v);
    s->x = *x;
    MHA_CTX_AT_SEQ(s->x, s->v);
    s->x.out = &s->v.out;
    s->x.seq = b;
}

/* The two ways to share the work, as for the dense layout, over sequences:
 * per KV group a task is a (sequence, KV head); per query block the packs
 * of every (sequence, KV head) are made first, in parallel, then the tasks
 * (query block, sequence, head) run in mha_seq_task's order. */
static void amx_run_layout(const amx_ctx *x, const mha_extras *ex, int threads, char *priv) {
    const mha_problem *p = x->p;
    const int64_t B = p->batch, H = p->heads, G = p->kv_heads, bq = x->L.bq;
    const int64_t nqb = (p->seq_q + bq - 1) / bq;
    const int64_t per_bg = (x->L.nkp / 32 + PACK_CHUNKS - 1) / PACK_CHUNKS;
#pragma omp parallel num_threads(threads)
    {
        char *ws = priv + (size_t)omp_get_thread_num() * x->L.per_thread;
        amx_seq s;
        if (x->L.per_group) {
            tile_configure_all(); /* per thread, before its first tile instruction */
#pragma omp for schedule(dynamic, 1)
            for (int64_t bg = 0; bg < B * G; bg++) {
                amx_seq_view(x, ex, bg / G, &s);
                amx_group_task(&s.x, 0, bg % G, ws);
            }
        } else {
            {
                PHASE_START();
#pragma omp for schedule(static)
                for (int64_t t = 0; t < B * G * per_bg; t++) {
                    const int64_t bg = t / per_bg, c0 = (t % per_bg) * PACK_CHUNKS;
                    amx_seq_view(x, ex, bg / G, &s);
                    uint32_t *kt = packs_of(&s.x, 0, bg % G, ws);
                    for (int64_t c = c0; c < c0 + PACK_CHUNKS && c < up32(s.v.p.seq_kv) / 32; c++)
                        pack_kv_chunk(&s.x, 0, bg % G, c, kt);
                }
                PHASE(PHASE_PACK);
            } /* the implicit barrier: every pack is written before any task reads it */
            tile_configure_all();
#pragma omp for schedule(dynamic, 1)
            for (int64_t it = 0; it < nqb * B * H; it++) {
                int64_t b, h, qb;
                if (!mha_seq_task(p, ex, bq, it, &b, &h, &qb)) continue;
                amx_seq_view(x, ex, b, &s);
                amx_block(&s.x, 0, h, qb, ws, NULL);
            }
        }
        MHA_TILE_RELEASE();
    }
}

mha_status MHA_CAT(MHA_SYM(flash), _run)(const mha_problem *p, const mha_options *o, int threads,
                                         const mha_tensor *q, const mha_tensor *k,
                                         const mha_tensor *v, const mha_extras *ex,
                                         const mha_tensor_mut *out, void *workspace) {
    const amx_ctx x = {p, amx_plan(p, o, threads), p->heads / p->kv_heads,
                       /* scores in log2 units -> exp2; a softcap takes them natural */
                       mha_problem_scale(p) * (p->softcap > 0 ? 1.0f : LOG2E), p->dtype,
                       mha_problem_kv_dtype(p), q, k, v, out, ex->sinks, (char *)workspace, 0, NULL,
                       0};
    const int64_t H = p->heads, G = p->kv_heads, nqb = (p->seq_q + x.L.bq - 1) / x.L.bq;
    const int64_t nkc = x.L.nkp / 32, per_bg = (nkc + PACK_CHUNKS - 1) / PACK_CHUNKS;
    const int64_t packs = p->batch * G * per_bg, tasks = p->batch * H * nqb;
    char *priv = (char *)workspace + x.L.shared;
    if (p->layout != MHA_LAYOUT_DENSE) {
        amx_run_layout(&x, ex, threads, priv);
        return MHA_OK;
    }
#pragma omp parallel num_threads(threads)
    {
        char *ws = priv + (size_t)omp_get_thread_num() * x.L.per_thread;
        if (x.L.per_group) {
            tile_configure_all(); /* per thread, before its first tile instruction */
#pragma omp for schedule(dynamic, 1)
            for (int64_t bg = 0; bg < p->batch * G; bg++) {
                amx_group_task(&x, bg / G, bg % G, ws);
            }
        } else {
            {
                PHASE_START();
#pragma omp for schedule(static)
                for (int64_t t = 0; t < packs; t++) {
                    const int64_t bg = t / per_bg, c0 = (t % per_bg) * PACK_CHUNKS;
                    uint32_t *kt = packs_of(&x, bg / G, bg % G, ws);
                    for (int64_t c = c0; c < c0 + PACK_CHUNKS && c < nkc; c++)
                        pack_kv_chunk(&x, bg / G, bg % G, c, kt);
                }
                PHASE(PHASE_PACK);
            } /* the implicit barrier: every pack is written before any task reads it */
            tile_configure_all(); /* never a config left by other code */
#pragma omp for schedule(dynamic, 1)
            for (int64_t it = 0; it < tasks; it++) { /* the costly last (causal) blocks first */
                const int64_t bh = it / nqb;
                amx_block(&x, bh / H, bh % H, nqb - 1 - it % nqb, ws, NULL);
            }
        }
        MHA_TILE_RELEASE();
    }
    return MHA_OK;
}
