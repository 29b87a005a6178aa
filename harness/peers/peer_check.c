/* peer_check.c - a peer's output against the float64 oracle (peer_check.h). */
#include "peer_check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

/* Below this many oracle FLOPs every row is checked (a second or so of
 * float64 arithmetic); above it, two KV groups. */
#define PEER_CHECK_ALL_FLOPS 2e9

static const void *at(const void *base, mha_dtype t, size_t elems) {
    return (const char *)base + elems * mha_dtype_size(t);
}

/* max over rows of the L2 norm of n rows of d typed values */
static double max_row_norm(const void *x, mha_dtype t, size_t n, int64_t d, float *row) {
    double best = 0;
    for (size_t r = 0; r < n; r++) {
        mha_convert_to_f32(t, at(x, t, r * (size_t)d), row, (size_t)d);
        double s = 0;
        for (int64_t i = 0; i < d; i++) s += (double)row[i] * row[i];
        best = s > best ? s : best;
    }
    return sqrt(best);
}

static double max_abs(const void *x, mha_dtype t, size_t n, int64_t d, float *row) {
    double best = 0;
    for (size_t r = 0; r < n; r++) {
        mha_convert_to_f32(t, at(x, t, r * (size_t)d), row, (size_t)d);
        for (int64_t i = 0; i < d; i++) best = fabs(row[i]) > best ? fabs(row[i]) : best;
    }
    return best;
}

/* A token-major [T, heads, d] (or pool [NB, BS, heads, d]: rows = BS) view. */
static mha_tensor token_view(const void *data, mha_dtype t, int64_t heads, int64_t rows,
                             int64_t d) {
    mha_tensor v = mha_view_bnhd((const float *)data, heads, rows, d);
    v.dtype = t;
    return v;
}

/* Packed and paged: the oracle of every query row, in out's layout. */
static int oracle_layout(const mha_problem *p, const void *q, const void *k, const void *v,
                         const mha_extras *x, peer_oracle *o, float *row) {
    const mha_dtype qt = p->dtype, kt = mha_problem_kv_dtype(p);
    const int64_t d = p->head_dim, dv = mha_problem_head_dim_v(p);
    const int paged = p->layout == MHA_LAYOUT_PAGED;
    const int64_t krows = paged ? p->block_size : p->total_kv;
    const size_t nq = (size_t)(p->total_q * p->heads),
                 nk = (size_t)((paged ? p->num_blocks * p->block_size : p->total_kv) * p->kv_heads);
    o->ngroups = 0;
    o->ref = malloc((nq ? nq : 1) * (size_t)dv * sizeof *o->ref);
    if (!o->ref || !x) return 0;
    const mha_tensor qv = token_view(q, qt, p->heads, p->total_q, d);
    const mha_tensor kv = token_view(k, kt, p->kv_heads, krows, d);
    const mha_tensor vv = token_view(v, kt, p->kv_heads, krows, dv);
    if (mha_reference_ex(p, &qv, &kv, &vv, x, o->ref) != MHA_OK) return 0;
    o->mag = max_abs(v, kt, nk, dv, row);
    o->smax = (double)mha_problem_scale(p) * max_row_norm(q, qt, nq, d, row) *
              max_row_norm(k, kt, nk, d, row);
    return 1;
}

int peer_oracle_make(const mha_problem *p, const void *q, const void *k, const void *v,
                     const mha_extras *x, peer_oracle *o) {
    memset(o, 0, sizeof *o);
    o->p = *p;
    const float *sinks = x ? x->sinks : NULL;
    const mha_dtype qt = p->dtype, kt = mha_problem_kv_dtype(p);
    /* d: Q's and K's head dim; dv: V's and O's (mha.h's head_dim_v) */
    const int64_t G = p->heads / p->kv_heads, d = p->head_dim, dv = mha_problem_head_dim_v(p);
    const size_t qrows = (size_t)p->seq_q, krows = (size_t)p->seq_kv;
    float *row = malloc((size_t)(d > dv ? d : dv) * sizeof *row);
    if (!row) return 0;
    if (p->layout != MHA_LAYOUT_DENSE) {
        if (!oracle_layout(p, q, k, v, x, o, row)) goto fail;
        free(row);
        return 1;
    }
    if (mha_problem_flops(p) * 2.0 <= PEER_CHECK_ALL_FLOPS) {
        o->ngroups = 0;
        o->ref = malloc((size_t)(p->batch * p->heads) * qrows * (size_t)dv * sizeof *o->ref);
        const mha_tensor qv = mha_view_typed(q, qt, NULL, p->heads, p->seq_q, d);
        const mha_tensor kv = mha_view_typed(k, kt, NULL, p->kv_heads, p->seq_kv, d);
        const mha_tensor vv = mha_view_typed(v, kt, NULL, p->kv_heads, p->seq_kv, dv);
        const mha_extras x = {.sinks = sinks};
        if (!o->ref || mha_reference_ex(p, &qv, &kv, &vv, &x, o->ref) != MHA_OK) goto fail;
        const size_t nq = (size_t)(p->batch * p->heads) * qrows,
                     nk = (size_t)(p->batch * p->kv_heads) * krows;
        o->mag = max_abs(v, kt, nk, dv, row);
        o->smax = (double)mha_problem_scale(p) * max_row_norm(q, qt, nq, d, row) *
                  max_row_norm(k, kt, nk, d, row);
        free(row);
        return 1;
    }
    o->ngroups = 2;
    o->batch[0] = 0, o->group[0] = 0;
    o->batch[1] = p->batch - 1, o->group[1] = p->kv_heads - 1;
    if (o->batch[1] == 0 && o->group[1] == 0) o->ngroups = 1;
    const size_t per = (size_t)G * qrows * (size_t)dv;
    o->ref = malloc((size_t)o->ngroups * per * sizeof *o->ref);
    if (!o->ref) goto fail;
    double qn = 0, kn = 0;
    for (int i = 0; i < o->ngroups; i++) {
        mha_problem sp = *p;
        sp.batch = 1, sp.heads = G, sp.kv_heads = 1;
        const size_t qoff = ((size_t)(o->batch[i] * p->heads + o->group[i] * G)) * qrows * d;
        const size_t kvi = (size_t)(o->batch[i] * p->kv_heads + o->group[i]);
        const size_t koff = kvi * krows * d, voff = kvi * krows * dv;
        const mha_tensor qv = mha_view_typed(at(q, qt, qoff), qt, NULL, G, p->seq_q, d);
        const mha_tensor kv = mha_view_typed(at(k, kt, koff), kt, NULL, 1, p->seq_kv, d);
        const mha_tensor vv = mha_view_typed(at(v, kt, voff), kt, NULL, 1, p->seq_kv, dv);
        const mha_extras x = {.sinks =
                                  sinks ? sinks + o->group[i] * G : NULL}; /* the group's heads */
        if (mha_reference_ex(&sp, &qv, &kv, &vv, &x, o->ref + (size_t)i * per) != MHA_OK) goto fail;
        const double m = max_abs(at(v, kt, voff), kt, krows, dv, row);
        const double a = max_row_norm(at(q, qt, qoff), qt, (size_t)G * qrows, d, row);
        const double b = max_row_norm(at(k, kt, koff), kt, krows, d, row);
        o->mag = m > o->mag ? m : o->mag;
        qn = a > qn ? a : qn;
        kn = b > kn ? b : kn;
    }
    o->smax = (double)mha_problem_scale(p) * qn * kn;
    free(row);
    return 1;
fail:
    free(row);
    peer_oracle_free(o);
    return 0;
}

void peer_oracle_free(peer_oracle *o) {
    free(o->ref);
    o->ref = NULL;
}

int peer_check(const peer_ops *peer, peer_inst *pi, const peer_oracle *o, peer_check_result *r) {
    memset(r, 0, sizeof *r);
    const mha_problem *p = &o->p;
    const int64_t d = mha_problem_head_dim_v(p); /* the output's head dim: V's */
    /* packed and paged: [Tq, H, d], indexed below as one batch entry of Tq
     * rows per head (the element named by (t, h) then reads i=t h=h) */
    const int dense = p->layout == MHA_LAYOUT_DENSE;
    const size_t n = (size_t)((dense ? p->batch * p->seq_q : p->total_q) * p->heads * d);
    void *out = malloc(n * mha_dtype_size(p->dtype));
    float *f = malloc(n * sizeof *f);
    double secs;
    if (!out || !f) {
        snprintf(r->detail, sizeof r->detail, "out of memory for the output (%zu elements)", n);
        free(out);
        free(f);
        return -1;
    }
    if (peer->run(pi, &secs, r->detail, sizeof r->detail) != 0 ||
        peer->output(pi, out, r->detail, sizeof r->detail) != 0) {
        free(out);
        free(f);
        return -1;
    }
    mha_convert_to_f32(p->dtype, out, f, n);
    free(out);
    double tol_abs, tol_rel;
    check_tolerance(p, o->mag, o->smax, &tol_abs, &tol_rel);
    const int64_t G = p->heads / p->kv_heads;
    const size_t rows = (size_t)p->seq_q * (size_t)d;
    const int ng = o->ngroups ? o->ngroups : 1;
    int ok = 1;
    for (int i = 0; i < ng; i++) {
        /* where the checked block starts in the output, and how long it is */
        const size_t off =
            o->ngroups ? (size_t)(o->batch[i] * p->heads + o->group[i] * G) * rows : 0;
        const size_t len = o->ngroups ? (size_t)G * rows : n;
        const double *ref = o->ref + (o->ngroups ? (size_t)i * (size_t)G * rows : 0);
        for (size_t e = 0; e < len; e++) {
            const double got = f[off + e], want = ref[e];
            const double err = fabs(got - want);
            const double allow = (1 + tol_rel) * tol_abs + tol_rel * fabs(want);
            const double ratio = isnan(got) != isnan(want) ? INFINITY
                                 : isnan(got)              ? 0
                                                           : err / allow;
            r->checked++;
            if (!(err <= r->max_err)) r->max_err = err; /* NaN-safe: NaN is the worst */
            if (ratio > r->worst) {
                r->worst = ratio;
                r->tol = allow;
                if (!(ratio <= 1) && ok) {
                    const size_t at_e = off + e, hd = (size_t)p->seq_q * (size_t)d;
                    if (dense)
                        snprintf(r->detail, sizeof r->detail,
                                 "element (b=%zu h=%zu i=%zu k=%zu): %.6g, oracle %.6g, error "
                                 "%.3g > tolerance %.3g",
                                 at_e / ((size_t)p->heads * hd), at_e / hd % (size_t)p->heads,
                                 at_e / (size_t)d % (size_t)p->seq_q, at_e % (size_t)d, got, want,
                                 err, allow);
                    else /* [Tq, H, d] */
                        snprintf(r->detail, sizeof r->detail,
                                 "element (t=%zu h=%zu k=%zu): %.6g, oracle %.6g, error %.3g > "
                                 "tolerance %.3g",
                                 at_e / ((size_t)p->heads * (size_t)d),
                                 at_e / (size_t)d % (size_t)p->heads, at_e % (size_t)d, got, want,
                                 err, allow);
                    ok = 0;
                }
            }
        }
    }
    free(f);
    if (ok && r->checked == 0) { /* a packed or paged problem without query rows */
        snprintf(r->detail, sizeof r->detail,
                 "nothing to check: the problem has no query rows, so the peer is not judged");
        return -1;
    }
    if (ok)
        snprintf(r->detail, sizeof r->detail, "%ld elements, max error %.3g (%.2f of tolerance)",
                 r->checked, r->max_err, r->worst);
    return ok;
}
