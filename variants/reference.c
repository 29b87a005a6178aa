/* reference.c - the float64 oracle: softmax(scale * q k^T + mask) v computed
 * row by row in double, exactly as the definition reads. Every kernel is
 * checked against this, on its inputs exactly as stored: bf16/fp16 elements
 * widen exactly, an int8 row is its integers times the row's scale (applied
 * in double to the dot product and to the probability). The variants
 * (window, softcap, sinks, head_dim_v) are their definitions in mha.h,
 * term by term. Keep it obvious; never optimise it. */
#include <math.h>
#include <stdlib.h>

#include "internal.h"

mha_status mha_reference(const mha_problem *p, const mha_tensor *q, const mha_tensor *k,
                         const mha_tensor *v, double *out) {
    return mha_reference_ex(p, q, k, v, NULL, out);
}

/* The visibility rule of mha.h, written out as it reads (no shared helper). */
static int visible(const mha_problem *p, int64_t i, int64_t j) {
    const int64_t off = p->seq_kv - p->seq_q;
    return (!p->causal || j <= i + off) &&
           (!p->window || p->window_left < 0 || j >= i + off - p->window_left) &&
           (!p->window || p->window_right < 0 || j <= i + off + p->window_right);
}

mha_status mha_reference_ex(const mha_problem *p, const mha_tensor *q, const mha_tensor *k,
                            const mha_tensor *v, const mha_extras *x, double *out) {
    mha_status st = mha_problem_validate(p);
    if (st != MHA_OK) return st;
    if (!out) return mha_set_error(MHA_EINVAL, "reference: out is NULL");
    if ((st = mha_check_views(p, q, k, v, NULL)) != MHA_OK) return st;
    if ((st = mha_check_extras(p, x)) != MHA_OK) return st;
    const int64_t B = p->batch, H = p->heads, group = p->heads / p->kv_heads;
    const int64_t Nq = p->seq_q, Nkv = p->seq_kv, d = p->head_dim, dv = mha_dv(p);
    const double scale = (double)mha_problem_scale(p), cap = (double)p->softcap;
#define Q(i) mha_load_elem(q->data, q->dtype, i)
#define K(i) mha_load_elem(k->data, k->dtype, i)
#define V(i) mha_load_elem(v->data, v->dtype, i)
    double *s = malloc((size_t)Nkv * sizeof *s);
    char *vis = malloc((size_t)Nkv);
    if (!s || !vis) {
        free(s);
        free(vis);
        return mha_set_error(MHA_ENOMEM, "reference: cannot allocate %lld scores", (long long)Nkv);
    }

    for (int64_t b = 0; b < B; b++) {
        for (int64_t h = 0; h < H; h++) {
            const int64_t g = h / group; /* the KV head this query head reads */
            const int64_t qh = b * q->stride_b + h * q->stride_h;
            const int64_t kh = b * k->stride_b + g * k->stride_h;
            const int64_t vh = b * v->stride_b + g * v->stride_h;
            for (int64_t i = 0; i < Nq; i++) {
                double *o = out + ((b * H + h) * Nq + i) * dv;
                for (int64_t c = 0; c < dv; c++) o[c] = 0.0;
                int64_t seen = 0;
                for (int64_t j = 0; j < Nkv; j++) seen += vis[j] = (char)visible(p, i, j);
                if (seen == 0) continue; /* nothing visible: zeros by convention, sink or not */
                /* m = max(max_j s_j, sink); a NaN score never raises m and
                 * comes out NaN through its exp */
                double mx = p->sinks ? (double)x->sinks[h] : -INFINITY;
                for (int64_t j = 0; j < Nkv; j++) {
                    if (!vis[j]) continue;
                    double dot = 0.0;
                    for (int64_t c = 0; c < d; c++)
                        dot += (double)Q(qh + i * q->stride_n + c) *
                               (double)K(kh + j * k->stride_n + c);
                    s[j] = dot * scale * (double)mha_row_scale(k, b, g, j);
                    if (cap > 0)
                        s[j] = cap * tanh(s[j] / cap); /* before the mask: the
                                                          masked keys are gone */
                    if (s[j] > mx) mx = s[j];
                }
                /* the sink takes mass and gives no value */
                double sum = p->sinks ? exp((double)x->sinks[h] - mx) : 0.0;
                for (int64_t j = 0; j < Nkv; j++) {
                    if (!vis[j]) continue;
                    s[j] = exp(s[j] - mx);
                    sum += s[j];
                }
                for (int64_t j = 0; j < Nkv; j++) {
                    if (!vis[j]) continue;
                    const double w = s[j] / sum * (double)mha_row_scale(v, b, g, j);
                    for (int64_t c = 0; c < dv; c++)
                        o[c] += w * (double)V(vh + j * v->stride_n + c);
                }
            }
        }
    }
#undef Q
#undef K
#undef V
    free(s);
    free(vis);
    return MHA_OK;
}
