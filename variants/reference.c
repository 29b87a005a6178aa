/* reference.c - the float64 oracle: softmax(scale * q k^T + mask) v computed
 * row by row in double, exactly as the definition reads. Every kernel is
 * checked against this, on its inputs exactly as stored: bf16/fp16 elements
 * widen exactly, an int8 row is its integers times the row's scale (applied
 * in double to the dot product and to the probability). The variants
 * (window, softcap, sinks, head_dim_v) are their definitions in mha.h,
 * term by term; the packed and paged layouts are sequence by sequence, the
 * keys gathered through cu_seqlens or the block table first. Keep it
 * obvious; never optimise it. */
#include <math.h>
#include <stdlib.h>

#include "internal.h"

mha_status mha_reference(const mha_problem *p, const mha_tensor *q, const mha_tensor *k,
                         const mha_tensor *v, double *out) {
    return mha_reference_ex(p, q, k, v, NULL, out);
}

/* The visibility rule of mha.h for one sequence of nq queries and nkv keys,
 * written out as it reads (no shared helper): bottom-right, off = nkv - nq. */
static int visible(const mha_problem *p, int64_t nq, int64_t nkv, int64_t i, int64_t j) {
    const int64_t off = nkv - nq;
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
    const int64_t Nkv_max = p->seq_kv, d = p->head_dim, dv = mha_dv(p);
    const int dense = p->layout == MHA_LAYOUT_DENSE, packed = p->layout == MHA_LAYOUT_PACKED,
              paged = p->layout == MHA_LAYOUT_PAGED;
    const double scale = (double)mha_problem_scale(p), cap = (double)p->softcap;
#define Q(i) mha_load_elem(q->data, q->dtype, i)
#define K(i) mha_load_elem(k->data, k->dtype, i)
#define V(i) mha_load_elem(v->data, v->dtype, i)
    /* per key of a sequence: its score, whether it is visible, and where
     * it is in k and v (the view's batch/block index and seq/slot index) */
    double *s = malloc((size_t)Nkv_max * sizeof *s);
    char *vis = malloc((size_t)Nkv_max);
    int64_t *kb = malloc((size_t)Nkv_max * sizeof *kb), *kn = malloc((size_t)Nkv_max * sizeof *kn);
    if (!s || !vis || !kb || !kn) {
        free(s);
        free(vis);
        free(kb);
        free(kn);
        return mha_set_error(MHA_ENOMEM, "reference: cannot allocate %lld scores",
                             (long long)Nkv_max);
    }

    for (int64_t b = 0; b < B; b++) {
        /* sequence b: queries q0.. of q's rows (dense: its own seq_q rows),
         * nkv keys (the checks bound them by seq_kv) */
        int64_t q0 = 0, nq = p->seq_q, kv0 = 0, nkv = p->seq_kv;
        if (!dense) {
            q0 = x->cu_seqlens_q[b];
            nq = (int64_t)x->cu_seqlens_q[b + 1] - q0;
        }
        if (packed) {
            kv0 = x->cu_seqlens_kv[b];
            nkv = (int64_t)x->cu_seqlens_kv[b + 1] - kv0;
        }
        if (paged) nkv = x->seq_lens_kv[b];
        /* gather the keys: dense (b, j), packed (0, kv0 + j), paged slot
         * j % BS of block block_table[b][j / BS] */
        for (int64_t j = 0; j < nkv; j++) {
            kb[j] = dense ? b : 0;
            kn[j] = kv0 + j;
            if (paged) {
                kb[j] = x->block_table[b * p->max_blocks + j / p->block_size];
                kn[j] = j % p->block_size;
            }
        }
        for (int64_t h = 0; h < H; h++) {
            const int64_t g = h / group; /* the KV head this query head reads */
            for (int64_t i = 0; i < nq; i++) {
                /* dense out [B,H,Nq,dv]; packed and paged [Tq,H,dv] */
                double *o =
                    dense ? out + ((b * H + h) * nq + i) * dv : out + ((q0 + i) * H + h) * dv;
                const int64_t qrow =
                    (dense ? b * q->stride_b + i * q->stride_n : (q0 + i) * q->stride_n) +
                    h * q->stride_h;
                for (int64_t c = 0; c < dv; c++) o[c] = 0.0;
                int64_t seen = 0;
                for (int64_t j = 0; j < nkv; j++) seen += vis[j] = (char)visible(p, nq, nkv, i, j);
                if (seen == 0) continue; /* nothing visible: zeros by convention, sink or not */
                /* m = max(max_j s_j, sink); a NaN score never raises m and
                 * comes out NaN through its exp */
                double mx = p->sinks ? (double)x->sinks[h] : -INFINITY;
                for (int64_t j = 0; j < nkv; j++) {
                    if (!vis[j]) continue;
                    const int64_t krow =
                        kb[j] * k->stride_b + g * k->stride_h + kn[j] * k->stride_n;
                    double dot = 0.0;
                    for (int64_t c = 0; c < d; c++)
                        dot += (double)Q(qrow + c) * (double)K(krow + c);
                    s[j] = dot * scale * (double)mha_row_scale(k, kb[j], g, kn[j]);
                    if (cap > 0)
                        s[j] = cap * tanh(s[j] / cap); /* before the mask: the
                                                          masked keys are gone */
                    if (s[j] > mx) mx = s[j];
                }
                /* the sink takes mass and gives no value */
                double sum = p->sinks ? exp((double)x->sinks[h] - mx) : 0.0;
                for (int64_t j = 0; j < nkv; j++) {
                    if (!vis[j]) continue;
                    s[j] = exp(s[j] - mx);
                    sum += s[j];
                }
                for (int64_t j = 0; j < nkv; j++) {
                    if (!vis[j]) continue;
                    const int64_t vrow =
                        kb[j] * v->stride_b + g * v->stride_h + kn[j] * v->stride_n;
                    const double w = s[j] / sum * (double)mha_row_scale(v, kb[j], g, kn[j]);
                    for (int64_t c = 0; c < dv; c++) o[c] += w * (double)V(vrow + c);
                }
            }
        }
    }
#undef Q
#undef K
#undef V
    free(s);
    free(vis);
    free(kb);
    free(kn);
    return MHA_OK;
}
