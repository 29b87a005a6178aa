/* blas.c - kernel blas.cblas: what most frameworks do, as a baseline. Per
 * (batch, head) S^T = K Q^T and O = P V through cblas_sgemm (single-threaded
 * BLAS), the project's vectorised softmax in between, OpenMP over heads.
 * Built only when meson finds a CBLAS (OpenBLAS; it honours OPENBLAS_CORETYPE). */
#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <omp.h>

#include "internal.h"

#define LOG2E 1.44269504088896341f

/* Columns padded to 16 floats so every ISA's vector softmax reads whole vectors. */
static int64_t padded_q(const mha_problem *p) {
    return (p->seq_q + 15) / 16 * 16;
}

static size_t per_thread(const mha_problem *p) {
    const size_t nqp = (size_t)padded_q(p), f = sizeof(float);
    return mha_add_sz(mha_align64(mha_mul_sz(mha_mul_sz((size_t)p->seq_kv, nqp), f)),
                      2 * mha_align64(nqp * f));
}

static int64_t blas_int_extent(const mha_problem *p, const mha_tensor *q, const mha_tensor *k,
                               const mha_tensor *v, const mha_tensor_mut *out) {
    const int64_t xs[] = {p->seq_kv,   padded_q(p), p->head_dim,  q->stride_n,
                          k->stride_n, v->stride_n, out->stride_n};
    int64_t m = 0;
    for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++) m = xs[i] > m ? xs[i] : m;
    return m;
}

size_t mha_blas_workspace(const mha_problem *p, const mha_options *o, int threads) {
    (void)o;
    return mha_mul_sz(per_thread(p), (size_t)threads);
}

mha_status mha_blas_run(const mha_problem *p, const mha_options *o, int threads,
                        const mha_tensor *q, const mha_tensor *k, const mha_tensor *v,
                        const mha_extras *ex, const mha_tensor_mut *out, void *workspace) {
    (void)ex;
    (void)o;
    /* CBLAS takes int dims and leading dimensions. */
    const int64_t big = blas_int_extent(p, q, k, v, out);
    if (big > INT_MAX)
        return mha_set_error(MHA_EUNSUPPORTED,
                             "blas.cblas: a dimension or stride (%lld) exceeds INT_MAX",
                             (long long)big);
    openblas_set_num_threads(1); /* parallelism is ours: OpenMP over heads */
    /* the softmax micro-kernel of the active ISA (kernels/softmax.c) */
    void (*const softmax)(int64_t, int64_t, float *, int64_t, float *, float *) =
        mha_ops_for(mha_isa_active())->softmax_columns;
    const int64_t H = p->heads, group = p->heads / p->kv_heads, Nq = p->seq_q, Nkv = p->seq_kv;
    const int64_t d = p->head_dim, nqp = padded_q(p), off = Nkv - Nq, pairs = p->batch * H;
    const size_t pt = per_thread(p),
                 s_bytes = mha_align64((size_t)Nkv * (size_t)nqp * sizeof(float));
    const float qscale = mha_problem_scale(p) * LOG2E;

#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
    for (int64_t bh = 0; bh < pairs; bh++) {
        const int64_t b = bh / H, h = bh % H, g = h / group;
        char *ws = (char *)workspace + (size_t)omp_get_thread_num() * pt;
        float *St = (float *)ws, *m = (float *)(ws + s_bytes), *l = m + nqp;
        const float *qh = (const float *)q->data + b * q->stride_b + h * q->stride_h;
        const float *kh = (const float *)k->data + b * k->stride_b + g * k->stride_h;
        const float *vh = (const float *)v->data + b * v->stride_b + g * v->stride_h;
        float *oh = (float *)out->data + b * out->stride_b + h * out->stride_h;

        /* S^T [Nkv][nqp] = K Q^T, in log2 units; padding columns are zero. */
        for (int64_t j = 0; j < Nkv; j++)
            for (int64_t i = Nq; i < nqp; i++) St[j * nqp + i] = 0.0f;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)Nkv, (int)Nq, (int)d, qscale, kh,
                    (int)k->stride_n, qh, (int)q->stride_n, 0.0f, St, (int)nqp);
        if (p->causal) {
            for (int64_t j = 0; j < Nkv; j++) {
                int64_t t = j - off; /* queries i < t cannot see key j */
                if (t > Nq) t = Nq;
                for (int64_t i = 0; i < t; i++) St[j * nqp + i] = -INFINITY;
            }
        }
        softmax(Nkv, nqp, St, nqp, m, l);
        /* O [Nq][d] = P V with P = (S^T)^T, written straight into the output view. */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)Nq, (int)d, (int)Nkv, 1.0f, St,
                    (int)nqp, vh, (int)v->stride_n, 0.0f, oh, (int)out->stride_n);
        for (int64_t i = 0; i < Nq; i++) {
            /* no visible key: zeros; keys whose scores were all -inf: 0 * inf = NaN */
            const float inv = mha_kv_end(p, i) > 0 ? 1.0f / l[i] : 0.0f;
            for (int64_t c = 0; c < d; c++) oh[i * out->stride_n + c] *= inv;
        }
    }
    return MHA_OK;
}
