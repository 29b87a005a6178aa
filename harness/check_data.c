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

mha_status check_prepare(const check_case *c, uint64_t case_seed, check_data *d) {
    memset(d, 0, sizeof *d);
    d->c = *c;
    const mha_problem *p = &c->p;
    uint64_t rng = case_seed;
    mha_status st;
    if ((st = mha_problem_validate(p)) != MHA_OK) return st;
    const float qgain = c->input == INPUT_LARGE_LOGITS ? 30.0f
                        : c->input == INPUT_HUGE       ? 1e30f
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
    d->sinks = NULL;
    d->q = d->k = d->v = NULL;
    d->tq = d->tk = d->tv = NULL;
    d->sq = d->sk = d->sv = NULL;
    d->ref = NULL;
}
