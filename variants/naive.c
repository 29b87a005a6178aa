/* naive.c - kernel `naive`: the seed's math taken literally in float32. Per
 * (batch, head) the whole Nq x Nkv score matrix is materialised, masked,
 * softmaxed row by row with expf, and multiplied by V. The slow yardstick;
 * it takes every variant of the problem (window, softcap, sinks, d_v). */
#include <math.h>
#include <omp.h>

#include "internal.h"

size_t mha_naive_workspace(const mha_problem *p, const mha_options *o, int threads) {
    (void)o;
    const size_t per_thread =
        mha_align64(mha_mul_sz(mha_mul_sz((size_t)p->seq_q, (size_t)p->seq_kv), sizeof(float)));
    return mha_mul_sz(per_thread, (size_t)threads);
}

mha_status mha_naive_run(const mha_problem *p, const mha_options *o, int threads,
                         const mha_tensor *q, const mha_tensor *k, const mha_tensor *v,
                         const mha_extras *ex, const mha_tensor_mut *out, void *workspace) {
    (void)o;
    const int64_t H = p->heads, group = p->heads / p->kv_heads;
    const int64_t Nq = p->seq_q, Nkv = p->seq_kv, d = p->head_dim, dv = mha_dv(p);
    const float scale = mha_problem_scale(p), cap = p->softcap;
    const size_t per_thread = mha_align64((size_t)Nq * (size_t)Nkv * sizeof(float));
    const int64_t pairs = p->batch * H;

#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
    for (int64_t bh = 0; bh < pairs; bh++) {
        const int64_t b = bh / H, h = bh % H, g = h / group;
        float *S = (float *)((char *)workspace + (size_t)omp_get_thread_num() * per_thread);
        const float *qh = (const float *)q->data + b * q->stride_b + h * q->stride_h;
        const float *kh = (const float *)k->data + b * k->stride_b + g * k->stride_h;
        const float *vh = (const float *)v->data + b * v->stride_b + g * v->stride_h;
        float *oh = (float *)out->data + b * out->stride_b + h * out->stride_h;
        const float sink = p->sinks ? ex->sinks[h] : -INFINITY;

        /* S = scale * Q K^T (softcapped), entries outside [begin, end) -inf. */
        for (int64_t i = 0; i < Nq; i++) {
            const int64_t begin = mha_kv_begin(p, i), end = mha_kv_end(p, i);
            for (int64_t j = 0; j < Nkv; j++) {
                float dot = 0.0f;
                for (int64_t c = 0; c < d; c++)
                    dot += qh[i * q->stride_n + c] * kh[j * k->stride_n + c];
                float sc = dot * scale;
                if (cap > 0) sc = cap * tanhf(sc / cap);
                S[i * Nkv + j] = j >= begin && j < end ? sc : -INFINITY;
            }
        }
        /* Row softmax, the sink a column with no value; a row with no
         * visible key becomes all zeros (sink or not). A row that sees keys
         * whose scores are all -inf or NaN keeps mx = -inf (or the sink)
         * and comes out NaN (exp(-inf - -inf)), as in the oracle. */
        for (int64_t i = 0; i < Nq; i++) {
            float *row = S + i * Nkv, mx = sink, sum = 0.0f;
            if (mha_kv_count(p, i) == 0) {
                for (int64_t j = 0; j < Nkv; j++) row[j] = 0.0f;
                continue;
            }
            const int64_t begin = mha_kv_begin(p, i), end = mha_kv_end(p, i);
            for (int64_t j = begin; j < end; j++) mx = row[j] > mx ? row[j] : mx;
            if (p->sinks) sum = expf(sink - mx);
            for (int64_t j = 0; j < Nkv; j++) {
                row[j] = j >= begin && j < end ? expf(row[j] - mx) : 0.0f;
                sum += row[j];
            }
            for (int64_t j = 0; j < Nkv; j++) row[j] /= sum;
        }
        /* O = P V. */
        for (int64_t i = 0; i < Nq; i++) {
            float *orow = oh + i * out->stride_n;
            for (int64_t c = 0; c < dv; c++) orow[c] = 0.0f;
            for (int64_t j = 0; j < Nkv; j++) {
                const float w = S[i * Nkv + j];
                const float *vrow = vh + j * v->stride_n;
                for (int64_t c = 0; c < dv; c++) orow[c] += w * vrow[c];
            }
        }
    }
    return MHA_OK;
}
