/* flash_amx.c - kernels flash.amx and flash.amxemu: flash.avx512bf16's
 * problems (bf16/fp16 Q/O and K/V, any pair; fp16 rounded to bf16 while
 * packing) with both products on AMX tiles (kernels/tile.h). One source,
 * built twice: with the instructions (level amx, mha_flash__amx) and against
 * the emulation (MHA_TILE_EMU, mha_flash__amxemu: a verification kernel for
 * any avx512bf16 machine, never swept, tuned or selected).
 *
 * Per (batch, head, query block): Q rows as bf16 with head_dim padded to 32
 * (the A operand of S = Q K^T). Per KV block: K^T as pairs along head_dim
 * with the keys along a row (the VNNI B operand) and V as pairs of keys (B of
 * O = P V), keys padded to 32 with zeros (P = 0 and V = 0 there). Every tile
 * is 16 x 64 bytes and the products are 2x2 (four accumulators, two A and
 * two B tiles), so queries, keys and head_dim are all padded to 32. S is
 * stored as fp32; the online softmax runs per query row on AVX-512 fp32
 * (flash.c's lazy reference max, exp2 in log2 units) and writes P rounded to
 * bf16 straight into P.V's A layout (a row of keys is a row of pairs). O
 * stays in fp32 memory: rescaled by alpha per row, then loaded into the
 * accumulators, added to and stored per KV block. Causal: KV blocks past the
 * last visible key are never visited and 32 x 32 products with every score
 * masked are skipped. K/V of a GQA group are read in place through the
 * group's head (no copies). Each OpenMP thread loads the tile configuration
 * inside the parallel region and releases the tiles at its end.
 * The variants (mha.h): head_dim_v sizes V's pack and O; a window streams only the KV blocks a
 * query block's rows see and each row's softmax takes its visible keys
 * [lo, hi) of the block; a softcap caps the scaled scores (natural units)
 * before the mask; a sink starts each row at m = sink, l = 1. */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "bf16_pack.h"
#include "internal.h"
#include "ukernels.h"
#include "flash_var.h"

#include "tile.h"

#ifndef __AVX512BF16__
#error "flash_amx.c needs AVX512_BF16 (its softmax and packs)"
#endif

#define LOG2E 1.44269504088896341f
#define AMX_BQ 64 /* defaults when the options leave blocks at 0 */
#define AMX_BK 64

static int64_t up32(int64_t x) {
    return (x + 31) / 32 * 32;
}

typedef struct {
    int64_t bq, bqp, bk, bkp, dp, dv;
    size_t qa, kt, vp, s, pa, ob, vec, per_thread; /* byte sizes, each 64-aligned */
} amx_layout;

/* The one plan of the workspace. Per thread: Qa (bqp x dp bf16), Kt (dp/2 x
 * bkp pair words), Vp (bkp/2 x dv pair words), S (bqp x bkp fp32), Pa (bqp
 * x bkp bf16), O (bqp x dv fp32) and the per-query m, l. */
static amx_layout amx_plan(const mha_problem *p, const mha_options *o) {
    amx_layout L;
    L.bq = o->block_q > 0 ? o->block_q : AMX_BQ;
    if (L.bq > p->seq_q) L.bq = p->seq_q;
    L.bqp = up32(L.bq);
    L.bk = o->block_kv > 0 ? o->block_kv : AMX_BK;
    if (L.bk > p->seq_kv) L.bk = p->seq_kv;
    L.bkp = up32(L.bk);
    L.dp = up32(p->head_dim);
    L.dv = up32(mha_dv(p)); /* V's and O's head dim, padded as head_dim is */
    const size_t bqp = (size_t)L.bqp, bkp = (size_t)L.bkp, dp = (size_t)L.dp;
    L.qa = mha_align64(mha_mul_sz(mha_mul_sz(bqp, dp), 2));
    L.kt = mha_align64(mha_mul_sz(mha_mul_sz(dp / 2, bkp), 4));
    L.vp = mha_align64(mha_mul_sz(mha_mul_sz(bkp / 2, (size_t)L.dv), 4));
    L.s = mha_align64(mha_mul_sz(mha_mul_sz(bqp, bkp), 4));
    L.pa = mha_align64(mha_mul_sz(mha_mul_sz(bqp, bkp), 2));
    L.ob = mha_align64(mha_mul_sz(mha_mul_sz(bqp, (size_t)L.dv), 4));
    L.vec = mha_align64(bqp * 4);
    L.per_thread = mha_add_sz(mha_add_sz(mha_add_sz(L.qa, L.kt), mha_add_sz(L.vp, L.s)),
                              mha_add_sz(mha_add_sz(L.pa, L.ob), mha_mul_sz(2, L.vec)));
    return L;
}

size_t MHA_CAT(MHA_SYM(flash), _workspace)(const mha_problem *p, const mha_options *o,
                                           int threads) {
    return mha_mul_sz(amx_plan(p, o).per_thread, (size_t)threads);
}

/* ---- the tile products (tiles 0-3 accumulate, 4-5 hold A, 6-7 B) --------- */

static void configure_tiles(void) {
    mha_tile_config cfg;
    mha_tile_config_init(&cfg);
    for (int t = 0; t < MHA_TILE_COUNT; t++) mha_tile_config_set(&cfg, t, 16, 64);
    MHA_TILE_CONFIGURE(&cfg);
}

/* S[32 queries][32 keys] = Qa rows . Kt columns over nchunks chunks of 32
 * head-dim elements: qa at (q0, 0) with ldq bf16 per row, kt at (0, k0) with
 * ldk words per pair row, s at (q0, k0) with lds floats per row. */
static void qk_2x2(const uint16_t *qa, int64_t ldq, const uint32_t *kt, int64_t ldk, float *s,
                   int64_t lds, int64_t nchunks) {
    MHA_TILE_ZERO(0);
    MHA_TILE_ZERO(1);
    MHA_TILE_ZERO(2);
    MHA_TILE_ZERO(3);
    for (int64_t c = 0; c < nchunks; c++) {
        MHA_TILE_LOAD(4, qa + c * 32, ldq * 2);
        MHA_TILE_LOAD(5, qa + 16 * ldq + c * 32, ldq * 2);
        MHA_TILE_LOAD(6, kt + c * 16 * ldk, ldk * 4);
        MHA_TILE_LOAD(7, kt + c * 16 * ldk + 16, ldk * 4);
        MHA_TILE_DPBF16PS(0, 4, 6);
        MHA_TILE_DPBF16PS(1, 4, 7);
        MHA_TILE_DPBF16PS(2, 5, 6);
        MHA_TILE_DPBF16PS(3, 5, 7);
    }
    MHA_TILE_STORE(0, s, lds * 4);
    MHA_TILE_STORE(1, s + 16, lds * 4);
    MHA_TILE_STORE(2, s + 16 * lds, lds * 4);
    MHA_TILE_STORE(3, s + 16 * lds + 16, lds * 4);
}

/* O[32 queries][32 columns] (+)= Pa rows . Vp over nchunks chunks of 32 keys:
 * pa at (q0, 0) with ldp bf16 per row, vp at (0, c0) with ldv words per pair
 * row, o at (q0, c0) with ldo floats per row; zero: start from 0. */
static void pv_2x2(const uint16_t *pa, int64_t ldp, const uint32_t *vp, int64_t ldv, float *o,
                   int64_t ldo, int64_t nchunks, int zero) {
    if (zero) {
        MHA_TILE_ZERO(0);
        MHA_TILE_ZERO(1);
        MHA_TILE_ZERO(2);
        MHA_TILE_ZERO(3);
    } else {
        MHA_TILE_LOAD(0, o, ldo * 4);
        MHA_TILE_LOAD(1, o + 16, ldo * 4);
        MHA_TILE_LOAD(2, o + 16 * ldo, ldo * 4);
        MHA_TILE_LOAD(3, o + 16 * ldo + 16, ldo * 4);
    }
    for (int64_t c = 0; c < nchunks; c++) {
        MHA_TILE_LOAD(4, pa + c * 32, ldp * 2);
        MHA_TILE_LOAD(5, pa + 16 * ldp + c * 32, ldp * 2);
        MHA_TILE_LOAD(6, vp + c * 16 * ldv, ldv * 4);
        MHA_TILE_LOAD(7, vp + c * 16 * ldv + 16, ldv * 4);
        MHA_TILE_DPBF16PS(0, 4, 6);
        MHA_TILE_DPBF16PS(1, 4, 7);
        MHA_TILE_DPBF16PS(2, 5, 6);
        MHA_TILE_DPBF16PS(3, 5, 7);
    }
    MHA_TILE_STORE(0, o, ldo * 4);
    MHA_TILE_STORE(1, o + 16, ldo * 4);
    MHA_TILE_STORE(2, o + 16 * ldo, ldo * 4);
    MHA_TILE_STORE(3, o + 16 * ldo + 16, ldo * 4);
}

/* ---- the softmax of one query row of one KV block ---------------------- */

/* Lanes l of the VW at key j with lo <= j + l < hi. */
static inline __mmask16 lanes_in(int64_t j, int64_t lo, int64_t hi) {
    const int64_t a = lo - j < 0 ? 0 : (lo - j > VW ? VW : lo - j);
    const int64_t e = hi - j < 0 ? 0 : (hi - j > VW ? VW : hi - j);
    return e <= a ? 0 : (__mmask16)(((1u << e) - 1u) & ~((1u << a) - 1u));
}

/* One query row of the score block: s has bkp floats, the keys [lo, hi) of
 * them visible (the rest masked or padding). The scaled score (capped when
 * cap > 0: qscale is then the natural scale) in log2 units; updates m
 * (lazily, by more than MHA_LAZY_LOG2) and l, writes P = 2^(score - m)
 * rounded to bf16 into prow (0 where not visible) and returns alpha, the
 * factor the row's earlier O must take. */
static float softmax_row(const float *s, int64_t lo, int64_t hi, int64_t bkp, float qscale,
                         float cap, float *m, float *l, uint16_t *prow) {
    const vf sc = vset1(qscale), ninf = vset1(-INFINITY);
    vf mx = ninf;
    for (int64_t j = lo / VW * VW; j < hi; j += VW) {
        const __mmask16 k = lanes_in(j, lo, hi);
        vf x = vmul(_mm512_maskz_loadu_ps(k, s + j), sc);
        if (cap > 0) x = flash_softcap_log2(x, cap);
        mx = _mm512_mask_max_ps(mx, k, mx, x);
    }
    const float tm = vhmax(mx), mo = *m;
    float mn = mo, alpha = 1.0f;
    if (tm > mo + MHA_LAZY_LOG2) { /* NaN compares false: its P is NaN, so is the row */
        mn = tm;
        alpha = mo == -INFINITY ? 0.0f : exp2f(mo - mn);
        *m = mn;
    }
    const vf mref = vset1(mn == -INFINITY ? 0.0f : mn);
    vf sum = vzero();
    for (int64_t j = 0; j < bkp; j += 2 * VW) {
        vf p[2];
        for (int h = 0; h < 2; h++) {
            const int64_t jj = j + h * VW;
            const __mmask16 k = lanes_in(jj, lo, hi);
            vf x = vmul(_mm512_maskz_loadu_ps(k, s + jj), sc);
            if (cap > 0) x = flash_softcap_log2(x, cap);
            p[h] = _mm512_maskz_mov_ps(k, vexp2_nonpos(vsub(x, mref)));
            sum = vadd(sum, p[h]);
        }
        _mm512_storeu_si512(prow + j, vbf_from2(p[0], p[1]));
    }
    *l = *l * alpha + vhsum(sum);
    return alpha;
}

/* ---- the algorithm ------------------------------------------------------- */

typedef struct {
    const mha_problem *p;
    amx_layout L;
    int64_t group, off;
    float qscale; /* scale * log2(e), or scale alone under a softcap */
    mha_dtype qt, kvt;
    const mha_tensor *q, *k, *v;
    const mha_tensor_mut *out;
    const float *sinks;
} amx_ctx;

static void amx_block(const amx_ctx *x, int64_t b, int64_t h, int64_t qb, char *ws) {
    const mha_problem *p = x->p;
    const amx_layout *L = &x->L;
    const int64_t d = p->head_dim, dvr = mha_dv(p), g = h / x->group;
    const int64_t bkp = L->bkp, dp = L->dp, dv = L->dv;
    char *w = ws;
    uint16_t *Qa = (uint16_t *)w;
    uint32_t *Kt = (uint32_t *)(w += L->qa);
    uint32_t *Vp = (uint32_t *)(w += L->kt);
    float *S = (float *)(w += L->vp);
    uint16_t *Pa = (uint16_t *)(w += L->s);
    float *Ob = (float *)(w += L->pa);
    float *m = (float *)(w += L->ob), *l = m + L->vec / 4;
    const uint16_t *qh = (const uint16_t *)x->q->data + b * x->q->stride_b + h * x->q->stride_h;
    const uint16_t *kh = (const uint16_t *)x->k->data + b * x->k->stride_b + g * x->k->stride_h;
    const uint16_t *vh = (const uint16_t *)x->v->data + b * x->v->stride_b + g * x->v->stride_h;
    const int64_t skn = x->k->stride_n, svn = x->v->stride_n, son = x->out->stride_n;
    uint16_t *oh = (uint16_t *)x->out->data + b * x->out->stride_b + h * x->out->stride_h;

    const int64_t i0 = qb * L->bq, n = p->seq_q - i0 < L->bq ? p->seq_q - i0 : L->bq;
    const int64_t nq = up32(n); /* query rows the tiles cover */
    /* the keys of the block's rows: [kv_lo, kv_end) (both ends never decrease with the row) */
    const int64_t kv_lo = mha_kv_begin(p, i0), kv_end = mha_kv_end(p, i0 + n - 1);
    if (kv_end <= kv_lo) { /* every row masked: zeros by convention */
        for (int64_t i = 0; i < n; i++) memset(oh + (i0 + i) * son, 0, (size_t)dvr * 2);
        return;
    }
    const float sink = p->sinks ? x->sinks[h] * LOG2E : -INFINITY;
    for (int64_t i = 0; i < nq; i++) { /* a sink: m = sink, its term 2^0 = 1 */
        m[i] = sink;
        l[i] = sink > -INFINITY || isnan(sink) ? 1.0f : 0.0f;
    }
    pack_k(n, d, qh + i0 * x->q->stride_n, x->q->stride_n, x->qt, Qa, dp);
    memset(Qa + n * dp, 0, (size_t)((nq - n) * dp) * 2);
    memset(Pa + n * bkp, 0, (size_t)((nq - n) * bkp) * 2); /* padding queries: P = 0 */
    const int64_t dh = (d + 1) / 2;
    for (int64_t j0 = kv_lo; j0 < kv_end; j0 += L->bk) {
        const int64_t bkk = kv_end - j0 < L->bk ? kv_end - j0 : L->bk, nk = up32(bkk);
        pack_q(bkk, d, kh + j0 * skn, skn, x->kvt, Kt, bkp);
        memset(Kt + dh * bkp, 0, (size_t)((dp / 2 - dh) * bkp) * 4);
        pack_v(bkk, dvr, dv, vh + j0 * svn, svn, x->kvt, (uint16_t *)Vp);
        const int64_t vpairs = (bkk + 1) / 2;
        memset(Vp + vpairs * dv, 0, (size_t)((nk / 2 - vpairs) * dv) * 4);
        /* the keys row i sees in this block: [VLO(i), VIS(i)) */
#define CLAMPK(t) ((t) < 0 ? 0 : ((t) > bkk ? bkk : (t)))
#define VIS(i) CLAMPK(mha_kv_end(p, i0 + (i)) - j0)
#define VLO(i) CLAMPK(mha_kv_begin(p, i0 + (i)) - j0)
        for (int64_t q0 = 0; q0 < nq; q0 += 32) {
            const int64_t kvis = VIS(q0 + 31 < n ? q0 + 31 : n - 1); /* the pair's last row */
            for (int64_t k0 = 0; k0 < nk && k0 < kvis; k0 += 32)
                qk_2x2(Qa + q0 * dp, dp, Kt + k0, bkp, S + q0 * bkp + k0, bkp, dp / 32);
        }
        for (int64_t i = 0; i < n; i++) {
            const float a = softmax_row(S + i * bkp, VLO(i), VIS(i), nk, x->qscale, p->softcap,
                                        &m[i], &l[i], Pa + i * bkp);
            if (j0 > kv_lo && a != 1.0f) {
                const vf av = vset1(a);
                for (int64_t c = 0; c < dv; c += VW)
                    vstore(Ob + i * dv + c, vmul(vload(Ob + i * dv + c), av));
            }
        }
        for (int64_t q0 = 0; q0 < nq; q0 += 32) {
            const int64_t kvis = VIS(q0 + 31 < n ? q0 + 31 : n - 1);
            for (int64_t c0 = 0; c0 < dv; c0 += 32)
                pv_2x2(Pa + q0 * bkp, bkp, Vp + c0, dv, Ob + q0 * dv + c0, dv, up32(kvis) / 32,
                       j0 == kv_lo);
        }
#undef VIS
#undef VLO
#undef CLAMPK
    }
    if (!p->window) {
        store_out(n, dvr, Ob, dv, l, mha_rows_blind(p, i0, n), oh + i0 * son, son, p->dtype);
    } else { /* a row that sees no key is zeros, sink or not */
        for (int64_t i = 0; i < n; i++)
            store_out(1, dvr, Ob + i * dv, dv, l + i, mha_kv_count(p, i0 + i) == 0,
                      oh + (i0 + i) * son, son, p->dtype);
    }
}

mha_status MHA_CAT(MHA_SYM(flash), _run)(const mha_problem *p, const mha_options *o, int threads,
                                         const mha_tensor *q, const mha_tensor *k,
                                         const mha_tensor *v, const mha_extras *ex,
                                         const mha_tensor_mut *out, void *workspace) {
    const amx_ctx x = {p, amx_plan(p, o), p->heads / p->kv_heads, p->seq_kv - p->seq_q,
                       /* scores in log2 units -> exp2; a softcap takes them natural */
                       mha_problem_scale(p) * (p->softcap > 0 ? 1.0f : LOG2E), p->dtype,
                       mha_problem_kv_dtype(p), q, k, v, out, ex->sinks};
    const int64_t H = p->heads, nqb = (p->seq_q + x.L.bq - 1) / x.L.bq, pairs = p->batch * H;
    const int per_head = o->split == MHA_SPLIT_HEADS;
    const int64_t tasks = per_head ? pairs : pairs * nqb;
#pragma omp parallel num_threads(threads)
    {
        /* per thread, before its first tile instruction; never a config
         * left by other code */
        configure_tiles();
        char *ws = (char *)workspace + (size_t)omp_get_thread_num() * x.L.per_thread;
#pragma omp for schedule(dynamic, 1)
        for (int64_t it = 0; it < tasks; it++) {
            if (per_head) {
                for (int64_t qb = 0; qb < nqb; qb++) amx_block(&x, it / H, it % H, qb, ws);
            } else { /* (batch, head, query block) tasks, the costly last blocks first */
                const int64_t bh = it / nqb;
                amx_block(&x, bh / H, bh % H, nqb - 1 - it % nqb, ws);
            }
        }
        MHA_TILE_RELEASE();
    }
    return MHA_OK;
}
