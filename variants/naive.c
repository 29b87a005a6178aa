/* naive.c - kernel `naive`: the seed's math taken literally in float32. Per
 * (sequence, head) the whole Nq x Nkv score matrix is materialised, masked,
 * softmaxed row by row with expf, and multiplied by V. The slow yardstick;
 * it takes every variant of the problem (window, softcap, sinks, d_v) and
 * every layout: a sequence's rows are found by cu_seqlens (packed) and its
 * keys through the block table (paged), each sequence aligned bottom-right. */
#include <math.h>
#include <omp.h>

#include "internal.h"

/* The key (or value) rows one (sequence, KV head) reads: row j at base +
 * j * stride_n, or, paged, slot j % bs of block blocks[j / bs]. */
typedef struct {
    const float *base;
    int64_t stride_n, stride_blk, bs;
    const int32_t *blocks; /* NULL unless paged */
} kv_rows;

static inline const float *kv_row(const kv_rows *r, int64_t j) {
    if (!r->blocks) return r->base + j * r->stride_n;
    return r->base + (int64_t)r->blocks[j / r->bs] * r->stride_blk + (j % r->bs) * r->stride_n;
}

/* Sequence s's rows of t for (view) batch b, KV head g. */
static kv_rows rows_of(const mha_problem *p, const mha_extras *x, const mha_tensor *t,
                       const mha_seq *s, int64_t b, int64_t g) {
    const float *base = (const float *)t->data + g * t->stride_h;
    kv_rows r = {.base = base, .stride_n = t->stride_n};
    if (p->layout == MHA_LAYOUT_DENSE) {
        r.base += b * t->stride_b;
    } else if (p->layout == MHA_LAYOUT_PACKED) {
        r.base += s->kv0 * t->stride_n;
    } else {
        r.stride_blk = t->stride_b;
        r.bs = p->block_size;
        r.blocks = x->block_table + b * p->max_blocks;
    }
    return r;
}

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
    const int64_t d = p->head_dim, dv = mha_dv(p);
    const float scale = mha_problem_scale(p), cap = p->softcap;
    /* seq_q, seq_kv bound every sequence (checked): one bound-sized S each */
    const size_t per_thread = mha_align64((size_t)p->seq_q * (size_t)p->seq_kv * sizeof(float));
    const int64_t pairs = p->batch * H;

#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
    for (int64_t bh = 0; bh < pairs; bh++) {
        const int64_t b = bh / H, h = bh % H, g = h / group;
        float *S = (float *)((char *)workspace + (size_t)omp_get_thread_num() * per_thread);
        /* sequence b alone, as a dense problem of its own lengths: the mask
         * helpers then align it bottom-right (off = nkv - nq) */
        const mha_seq sq = mha_seq_of(p, ex, b);
        mha_problem sp = *p;
        sp.seq_q = sq.nq;
        sp.seq_kv = sq.nkv;
        const int64_t Nq = sq.nq, Nkv = sq.nkv;
        const int64_t qb = p->layout == MHA_LAYOUT_DENSE ? b * q->stride_b : sq.q0 * q->stride_n;
        const int64_t ob =
            p->layout == MHA_LAYOUT_DENSE ? b * out->stride_b : sq.q0 * out->stride_n;
        const float *qh = (const float *)q->data + qb + h * q->stride_h;
        const kv_rows kr = rows_of(p, ex, k, &sq, b, g), vr = rows_of(p, ex, v, &sq, b, g);
        float *oh = (float *)out->data + ob + h * out->stride_h;
        const float sink = p->sinks ? ex->sinks[h] : -INFINITY;

        /* S = scale * Q K^T (softcapped), entries outside [begin, end) -inf. */
        for (int64_t i = 0; i < Nq; i++) {
            const int64_t begin = mha_kv_begin(&sp, i), end = mha_kv_end(&sp, i);
            for (int64_t j = 0; j < Nkv; j++) {
                const float *krow = kv_row(&kr, j);
                float dot = 0.0f;
                for (int64_t c = 0; c < d; c++) dot += qh[i * q->stride_n + c] * krow[c];
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
            if (mha_kv_count(&sp, i) == 0) {
                for (int64_t j = 0; j < Nkv; j++) row[j] = 0.0f;
                continue;
            }
            const int64_t begin = mha_kv_begin(&sp, i), end = mha_kv_end(&sp, i);
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
                const float *vrow = kv_row(&vr, j);
                for (int64_t c = 0; c < dv; c++) orow[c] += w * vrow[c];
            }
        }
    }
    return MHA_OK;
}
