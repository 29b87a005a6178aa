/* check_data.c - a case's data: deterministic inputs re-seeded per case in
 * every memory layout (NaN in the gaps), the adversarial corruptions, the
 * inputs stored in the case's dtypes, and the float64 oracle with its
 * magnitudes for the tolerance. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "check_int.h"
#include "stats.h"

/* ---- data ---------------------------------------------------------------------- */
strides layout_strides(int layout, int64_t B, int64_t H, int64_t N, int64_t d) {
    strides s;
    switch (layout) {
    case LAYOUT_BNHD:
    case LAYOUT_PACKED: /* token-major: sequence b's token i is row b N + i */
    case LAYOUT_PAGED:  /* q and out as packed; K and V as packed before the pool */
        s = (strides){N * H * d, d, H * d, 0};
        break;
    case LAYOUT_PADDED: /* gaps after every row, head and batch: stray reads see NaN */
        s.sn = d + 3;
        s.sh = N * s.sn + 5;
        s.sb = H * s.sh + 7;
        break;
    default:
        s = (strides){H * N * d, N * d, d, 0};
        break;
    }
    s.span = (B - 1) * s.sb + (H - 1) * s.sh + (N - 1) * s.sn + d;
    return s;
}

static float *alloc_nan(int64_t n) {
    float *p = mha_alloc((size_t)n * sizeof(float));
    if (p) {
        for (int64_t i = 0; i < n; i++) memcpy(&p[i], &SENTINEL, sizeof(float));
    }
    return p;
}

static mha_status make_input(const check_case *c, int64_t H, int64_t N, int64_t d, float **buf,
                             mha_tensor *view, uint64_t *rng, float gain, int equal_rows) {
    const int64_t B = c->p.batch;
    const strides s = layout_strides(c->layout, B, H, N, d);
    float *p = alloc_nan(s.span);
    if (!p) return MHA_ENOMEM;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < N; i++)
                for (int64_t k = 0; k < d; k++) {
                    float *e = p + b * s.sb + h * s.sh + i * s.sn + k;
                    *e = (equal_rows && i > 0) ? p[b * s.sb + h * s.sh + k]
                                               : gain * uniform_pm1(rng);
                }
    *buf = p;
    *view = (mha_tensor){.data = p, .stride_b = s.sb, .stride_h = s.sh, .stride_n = s.sn};
    return MHA_OK;
}

/* Over the finite elements only: the tolerance of the rows a NaN/Inf does
 * not reach must not become NaN/Inf itself. */
static double max_row_norm(const mha_tensor *t, int64_t B, int64_t H, int64_t N, int64_t d) {
    double best = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < N; i++) {
                double s = 0;
                const float *r =
                    (const float *)t->data + b * t->stride_b + h * t->stride_h + i * t->stride_n;
                for (int64_t k = 0; k < d; k++)
                    if (isfinite(r[k])) s += (double)r[k] * r[k];
                best = s > best ? s : best;
            }
    return sqrt(best);
}

static float *elem(const mha_tensor *t, int64_t b, int64_t h, int64_t i, int64_t c) {
    return (float *)t->data + b * t->stride_b + h * t->stride_h + i * t->stride_n + c;
}

/* Stores the fp32 input t (span elements, NaN in layout gaps) as dtype dt:
 * bf16/fp16 rounded to nearest even, int8 quantised per (b, h, n) row with
 * its scale in a contiguous [B,H,N] array (gaps hold -128, a value no row
 * has). The fp32 buffer is then overwritten with the stored values widened,
 * so the magnitudes the tolerance is computed from are the oracle's. */
static mha_status store_typed(mha_dtype dt, int64_t B, int64_t H, int64_t N, int64_t d,
                              int64_t span, float *f, mha_tensor *view, void **typed,
                              float **scales) {
    *typed = NULL;
    *scales = NULL;
    view->dtype = dt;
    if (dt == MHA_F32) return MHA_OK;
    void *t = mha_alloc((size_t)span * mha_dtype_size(dt));
    if (!t) return MHA_ENOMEM;
    if (dt != MHA_I8) {
        mha_convert_from_f32(dt, f, t, (size_t)span);
        mha_convert_to_f32(dt, t, f, (size_t)span);
    } else {
        float *sc = malloc((size_t)(B * H * N) * sizeof(float));
        if (!sc) {
            mha_free(t);
            return MHA_ENOMEM;
        }
        memset(t, 0x80, (size_t)span);
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < H; h++) {
                const int64_t off = b * view->stride_b + h * view->stride_h;
                float *rs = sc + (b * H + h) * N;
                mha_quantize_rows_i8(f + off, N, d, view->stride_n, (int8_t *)t + off,
                                     view->stride_n, rs);
                for (int64_t i = 0; i < N; i++)
                    for (int64_t c = 0; c < d; c++)
                        f[off + i * view->stride_n + c] =
                            (float)((int8_t *)t)[off + i * view->stride_n + c] * rs[i];
            }
        *scales = sc;
        view->scale = sc;
        view->scale_stride_b = H * N;
        view->scale_stride_h = N;
        view->scale_stride_n = 1;
    }
    view->data = t;
    *typed = t;
    return MHA_OK;
}

/* Plants the corruption of the case's input kind (positions are fixed, so a
 * failure repeats with the printed seed). */
static void corrupt(const check_case *c, check_data *d) {
    const mha_problem *p = &c->p;
    const int64_t Nq = p->seq_q, Nkv = p->seq_kv, dd = p->head_dim;
    switch (c->input) {
    case INPUT_NAN_K: /* one key of KV head 0 vanishes into NaN for the rows that see it */
        *elem(&d->kv, 0, 0, Nkv / 2, dd / 2) = NAN;
        break;
    case INPUT_NAN_Q: /* one element of the last query row of the last head */
        *elem(&d->qv, p->batch - 1, p->heads - 1, Nq - 1, dd - 1) = NAN;
        break;
    case INPUT_INF_Q: /* scores +-inf for that row: inf - inf in the softmax */
        *elem(&d->qv, 0, p->heads - 1, Nq / 2, dd / 3) = INFINITY;
        break;
    case INPUT_NINF_K: /* key Nkv/3 scores -inf for rows with q > 0 there, +inf for q < 0 */
        *elem(&d->kv, 0, 0, Nkv / 3, dd - 1) = -INFINITY;
        break;
    case INPUT_NINF_ALL: /* every score of KV group 0 is -inf (head 0) or +inf (the rest) */
        for (int64_t j = 0; j < Nkv; j++) *elem(&d->kv, 0, 0, j, 0) = -INFINITY;
        for (int64_t h = 0; h < p->heads / p->kv_heads; h++)
            for (int64_t i = 0; i < Nq; i++) {
                float *e = elem(&d->qv, 0, h, i, 0);
                *e = (h == 0 ? 1.0f : -1.0f) * (0.5f + fabsf(*e));
            }
        break;
    default:
        break;
    }
}

/* ---- packed and paged ------------------------------------------------------------
 * The keys per cache block of a paged case: 5 where Nkv is odd (no block
 * ends where a sequence does, and a KV block of the kernels is cut at every
 * fifth key), else 16 (vLLM's default). */
int64_t check_page_size(const mha_problem *p) {
    return p->seq_kv % 2 ? 5 : 16;
}

/* The problem of case c's layout: c.p itself, or its B sequences packed /
 * paged (equal lengths, the bounds their lengths). */
mha_problem check_layout_problem(const check_case *c) {
    mha_problem p = c->p;
    if (c->layout == LAYOUT_PACKED) {
        p.layout = MHA_LAYOUT_PACKED;
        p.total_q = p.batch * p.seq_q;
        p.total_kv = p.batch * p.seq_kv;
    } else if (c->layout == LAYOUT_PAGED) {
        const int64_t bs = check_page_size(&c->p);
        p.layout = MHA_LAYOUT_PAGED;
        p.total_q = p.batch * p.seq_q;
        p.block_size = bs;
        p.max_blocks = (p.seq_kv + bs - 1) / bs;
        if (p.max_blocks < 1) p.max_blocks = 1;
        p.num_blocks = p.batch * p.max_blocks + 2; /* two blocks nobody owns: NaN */
    }
    return p;
}

mha_extras check_layout_extras(const check_data *d) {
    const int packed = d->kp.layout == MHA_LAYOUT_PACKED, paged = d->kp.layout == MHA_LAYOUT_PAGED;
    return (mha_extras){.sinks = d->sinks,
                        .cu_seqlens_q = packed || paged ? d->cu_q : NULL,
                        .cu_seqlens_kv = packed ? d->cu_kv : NULL,
                        .seq_lens_kv = paged ? d->lens : NULL,
                        .block_table = paged ? d->table : NULL};
}

/* Int8 row scales [B,G,N] (store_typed) as the packed layout's [B N, G]. */
static float *scales_packed(const float *sc, int64_t B, int64_t G, int64_t N) {
    float *out = malloc((size_t)(B * N * G) * sizeof(float) + 1);
    if (!out) return NULL;
    for (int64_t b = 0; b < B; b++)
        for (int64_t g = 0; g < G; g++)
            for (int64_t n = 0; n < N; n++) out[(b * N + n) * G + g] = sc[(b * G + g) * N + n];
    return out;
}

/* The pool [NB, BS, G, dd] of the packed (token-major, typed) tensor t:
 * token n of sequence b in slot n % BS of block table[b][n / BS]; every
 * other slot NaN (int8: its scale NaN). *view gets the pool's view. */
static mha_status make_pool(const mha_problem *kp, const mha_tensor *t, int64_t N, int64_t dd,
                            void **pool, float **scales, mha_tensor *view, const int32_t *table) {
    const int64_t NB = kp->num_blocks, BS = kp->block_size, G = kp->kv_heads, MB = kp->max_blocks;
    const mha_dtype dt = t->dtype;
    const size_t es = mha_dtype_size(dt), slots = (size_t)(NB * BS * G);
    char *pl = mha_alloc(slots * (size_t)dd * es);
    float *sc = dt == MHA_I8 ? malloc(slots * sizeof(float)) : NULL;
    if (!pl || (dt == MHA_I8 && !sc)) {
        mha_free(pl);
        free(sc);
        return MHA_ENOMEM;
    }
    if (dt == MHA_I8) {
        memset(pl, 0x80, slots * (size_t)dd);
        for (size_t i = 0; i < slots; i++) sc[i] = NAN;
    } else {
        const float nan = NAN;
        char one[4];
        mha_convert_from_f32(dt, &nan, one, 1);
        for (size_t i = 0; i < slots * (size_t)dd; i++) memcpy(pl + i * es, one, es);
    }
    for (int64_t b = 0; b < kp->batch; b++)
        for (int64_t n = 0; n < N; n++)
            for (int64_t g = 0; g < G; g++) {
                const int64_t blk = table[b * MB + n / BS], slot = (blk * BS + n % BS) * G + g;
                const int64_t tok = b * N + n;
                memcpy(pl + (size_t)(slot * dd) * es,
                       (const char *)t->data + (size_t)(tok * t->stride_n + g * t->stride_h) * es,
                       (size_t)dd * es);
                if (dt == MHA_I8)
                    sc[slot] = t->scale[tok * t->scale_stride_n + g * t->scale_stride_h];
            }
    *pool = pl;
    *scales = sc;
    *view = (mha_tensor){.data = pl,
                         .stride_b = BS * G * dd,
                         .stride_h = dd,
                         .stride_n = G * dd,
                         .dtype = dt,
                         .scale = sc,
                         .scale_stride_b = BS * G,
                         .scale_stride_h = 1,
                         .scale_stride_n = G};
    return MHA_OK;
}

/* The packed or paged form of a prepared case (its typed views token-major,
 * LAYOUT_PACKED / LAYOUT_PAGED's strides): index arrays, packed int8 scales,
 * the pools with a table shuffled from the case's seed. */
static mha_status make_layout(check_data *d, uint64_t case_seed) {
    const check_case *c = &d->c;
    const mha_problem *p = &c->p;
    d->kp = check_layout_problem(c);
    d->lq = d->qv;
    d->lk = d->kv;
    d->lv = d->vv;
    if (c->layout != LAYOUT_PACKED && c->layout != LAYOUT_PAGED) return MHA_OK;
    const int64_t B = p->batch, G = p->kv_heads, Nkv = p->seq_kv;
    d->cu_q = malloc((size_t)(B + 1) * sizeof(int32_t));
    d->cu_kv = malloc((size_t)(B + 1) * sizeof(int32_t));
    d->lens = malloc((size_t)B * sizeof(int32_t));
    if (!d->cu_q || !d->cu_kv || !d->lens) return MHA_ENOMEM;
    for (int64_t b = 0; b <= B; b++) {
        d->cu_q[b] = (int32_t)(b * p->seq_q);
        d->cu_kv[b] = (int32_t)(b * Nkv);
        if (b < B) d->lens[b] = (int32_t)Nkv;
    }
    mha_tensor pk = d->kv, pv = d->vv; /* packed: int8 scales as [T, G] */
    if (d->kv.dtype == MHA_I8) {
        d->lsk = scales_packed(d->sk, B, G, Nkv);
        d->lsv = scales_packed(d->sv, B, G, Nkv);
        if (!d->lsk || !d->lsv) return MHA_ENOMEM;
        pk.scale = d->lsk;
        pv.scale = d->lsv;
        pk.scale_stride_b = pv.scale_stride_b = Nkv * G;
        pk.scale_stride_h = pv.scale_stride_h = 1;
        pk.scale_stride_n = pv.scale_stride_n = G;
    }
    if (c->layout == LAYOUT_PACKED) {
        d->lk = pk;
        d->lv = pv;
        return MHA_OK;
    }
    const int64_t NB = d->kp.num_blocks, MB = d->kp.max_blocks;
    int32_t *perm = malloc((size_t)NB * sizeof(int32_t));
    d->table = malloc((size_t)(B * MB) * sizeof(int32_t));
    if (!perm || !d->table) {
        free(perm);
        return MHA_ENOMEM;
    }
    uint64_t rng = case_seed ^ 0x9e3779b97f4a7c15ull; /* the inputs' draws stay as they were */
    for (int64_t i = 0; i < NB; i++) perm[i] = (int32_t)i;
    for (int64_t i = NB - 1; i > 0; i--) {
        const int64_t j = (int64_t)(splitmix64(&rng) % (uint64_t)(i + 1));
        const int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    memcpy(d->table, perm, (size_t)(B * MB) * sizeof(int32_t)); /* perm[B MB..] stay unused */
    free(perm);
    float *ksc = NULL, *vsc = NULL;
    mha_status st = make_pool(&d->kp, &pk, Nkv, p->head_dim, &d->pool_k, &ksc, &d->lk, d->table);
    if (st == MHA_OK)
        st = make_pool(&d->kp, &pv, Nkv, mha_problem_head_dim_v(p), &d->pool_v, &vsc, &d->lv,
                       d->table);
    /* the pools' scales replace the packed ones (freed with lsk, lsv) */
    free(d->lsk);
    free(d->lsv);
    d->lsk = ksc;
    d->lsv = vsc;
    return st;
}

mha_status check_prepare(const check_case *c, uint64_t case_seed, check_data *d) {
    memset(d, 0, sizeof *d);
    d->c = *c;
    const mha_problem *p = &c->p;
    uint64_t rng = case_seed;
    mha_status st;
    if ((st = mha_problem_validate(p)) != MHA_OK) return st;
    const float qgain = c->input == INPUT_LARGE_LOGITS  ? 30.0f
                        : c->input == INPUT_WIDE_LOGITS ? 400.0f
                        : c->input == INPUT_HUGE        ? 1e30f
                                                        : 1.0f;
    const float kgain = c->input == INPUT_HUGE ? 1e30f : 1.0f;
    const int64_t dv = mha_problem_head_dim_v(p);
    if ((st = make_input(c, p->heads, p->seq_q, p->head_dim, &d->q, &d->qv, &rng, qgain, 0)) ||
        (st = make_input(c, p->kv_heads, p->seq_kv, p->head_dim, &d->k, &d->kv, &rng, kgain,
                         c->input == INPUT_EQUAL_SCORES)) ||
        (st = make_input(c, p->kv_heads, p->seq_kv, dv, &d->v, &d->vv, &rng, 1.0f, 0))) {
        check_release(d);
        return st;
    }
    if (p->sinks) { /* drawn after the tensors: the same seed gives the same q, k, v */
        d->sinks = malloc((size_t)p->heads * sizeof(float));
        if (!d->sinks) {
            check_release(d);
            return MHA_ENOMEM;
        }
        for (int64_t h = 0; h < p->heads; h++) {
            const int kind = c->sinks == SINKS_MIXED ? (int)(h % 3) : c->sinks;
            const float u = 2.0f * uniform_pm1(&rng);
            d->sinks[h] = kind == SINKS_NINF ? -INFINITY : kind == SINKS_LARGE ? 20.0f : u;
        }
    }
    corrupt(c, d);
    /* the fp32 views stay for the tolerance's magnitudes; the typed ones go
     * to the oracle and the kernels */
    mha_tensor fq = d->qv, fk = d->kv, fv = d->vv;
    const mha_dtype kvt = mha_problem_kv_dtype(p);
    const int64_t qspan = layout_strides(c->layout, p->batch, p->heads, p->seq_q, p->head_dim).span;
    const int64_t kspan =
        layout_strides(c->layout, p->batch, p->kv_heads, p->seq_kv, p->head_dim).span;
    const int64_t vspan = layout_strides(c->layout, p->batch, p->kv_heads, p->seq_kv, dv).span;
    if ((st = store_typed(p->dtype, p->batch, p->heads, p->seq_q, p->head_dim, qspan, d->q, &d->qv,
                          &d->tq, &d->sq)) ||
        (st = store_typed(kvt, p->batch, p->kv_heads, p->seq_kv, p->head_dim, kspan, d->k, &d->kv,
                          &d->tk, &d->sk)) ||
        (st = store_typed(kvt, p->batch, p->kv_heads, p->seq_kv, dv, vspan, d->v, &d->vv, &d->tv,
                          &d->sv))) {
        check_release(d);
        return st;
    }
    const size_t nout = (size_t)(p->batch * p->heads * p->seq_q * dv);
    d->ref = malloc(nout * sizeof(double));
    if (!d->ref) {
        check_release(d);
        return MHA_ENOMEM;
    }
    const mha_extras x = {.sinks = d->sinks};
    if ((st = mha_reference_ex(p, &d->qv, &d->kv, &d->vv, &x, d->ref)) != MHA_OK) {
        check_release(d);
        return st;
    }
    d->out_floats = (size_t)layout_strides(c->layout, p->batch, p->heads, p->seq_q, dv).span;
    d->mag = 0;
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t g = 0; g < p->kv_heads; g++)
            for (int64_t j = 0; j < p->seq_kv; j++)
                for (int64_t k = 0; k < dv; k++) {
                    const double a = fabs(*elem(&fv, b, g, j, k));
                    d->mag = a > d->mag ? a : d->mag;
                }
    d->smax = (double)mha_problem_scale(p) *
              max_row_norm(&fq, p->batch, p->heads, p->seq_q, p->head_dim) *
              max_row_norm(&fk, p->batch, p->kv_heads, p->seq_kv, p->head_dim);
    check_tolerance(p, d->mag, d->smax, &d->tol, &d->tol_rel);
    if ((st = make_layout(d, case_seed)) != MHA_OK) {
        check_release(d);
        return st;
    }
    return MHA_OK;
}

void check_release(check_data *d) {
    mha_free(d->q);
    mha_free(d->k);
    mha_free(d->v);
    mha_free(d->tq);
    mha_free(d->tk);
    mha_free(d->tv);
    free(d->sq);
    free(d->sk);
    free(d->sv);
    free(d->sinks);
    free(d->ref);
    free(d->cu_q);
    free(d->cu_kv);
    free(d->lens);
    free(d->table);
    mha_free(d->pool_k);
    mha_free(d->pool_v);
    free(d->lsk);
    free(d->lsv);
    d->cu_q = d->cu_kv = d->lens = d->table = NULL;
    d->pool_k = d->pool_v = NULL;
    d->lsk = d->lsv = NULL;
    d->sinks = NULL;
    d->q = d->k = d->v = NULL;
    d->tq = d->tk = d->tv = NULL;
    d->sq = d->sk = d->sv = NULL;
    d->ref = NULL;
}
