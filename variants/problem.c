/* problem.c - the attention problem itself: tensor views, the default scale,
 * validation (every bad dimension named) and the FLOP count. The kernels,
 * the oracle and the entry points call in; it calls only error.c and
 * layout.c (the packed and paged layouts' sizes and index arrays). */
#include <math.h>

#include "internal.h"

mha_tensor mha_view_bhnd(const float *data, int64_t heads, int64_t seq, int64_t head_dim) {
    return (mha_tensor){.data = data,
                        .stride_b = heads * seq * head_dim,
                        .stride_h = seq * head_dim,
                        .stride_n = head_dim};
}
mha_tensor mha_view_bnhd(const float *data, int64_t heads, int64_t seq, int64_t head_dim) {
    return (mha_tensor){.data = data,
                        .stride_b = seq * heads * head_dim,
                        .stride_h = head_dim,
                        .stride_n = heads * head_dim};
}
mha_tensor_mut mha_view_bhnd_mut(float *data, int64_t heads, int64_t seq, int64_t head_dim) {
    return (mha_tensor_mut){.data = data,
                            .stride_b = heads * seq * head_dim,
                            .stride_h = seq * head_dim,
                            .stride_n = head_dim};
}
mha_tensor_mut mha_view_bnhd_mut(float *data, int64_t heads, int64_t seq, int64_t head_dim) {
    return (mha_tensor_mut){.data = data,
                            .stride_b = seq * heads * head_dim,
                            .stride_h = head_dim,
                            .stride_n = heads * head_dim};
}
mha_tensor mha_view_typed(const void *data, mha_dtype t, const float *scale, int64_t heads,
                          int64_t seq, int64_t head_dim) {
    return (mha_tensor){.data = data,
                        .stride_b = heads * seq * head_dim,
                        .stride_h = seq * head_dim,
                        .stride_n = head_dim,
                        .dtype = t,
                        .scale = scale,
                        .scale_stride_b = heads * seq,
                        .scale_stride_h = seq,
                        .scale_stride_n = 1};
}
mha_tensor_mut mha_view_typed_mut(void *data, mha_dtype t, int64_t heads, int64_t seq,
                                  int64_t head_dim) {
    return (mha_tensor_mut){.data = data,
                            .stride_b = heads * seq * head_dim,
                            .stride_h = seq * head_dim,
                            .stride_n = head_dim,
                            .dtype = t};
}

mha_dtype mha_problem_kv_dtype(const mha_problem *p) {
    if (!p) {
        mha_set_error(MHA_EINVAL, "mha_problem_kv_dtype: problem is NULL");
        return (mha_dtype)MHA_DTYPE_COUNT;
    }
    return p->kv_dtype != MHA_F32 ? p->kv_dtype : p->dtype;
}

int64_t mha_problem_head_dim_v(const mha_problem *p) {
    if (!p) {
        mha_set_error(MHA_EINVAL, "mha_problem_head_dim_v: problem is NULL");
        return -1;
    }
    return mha_dv(p);
}

float mha_problem_scale(const mha_problem *p) {
    if (!p) {
        mha_set_error(MHA_EINVAL, "mha_problem_scale: problem is NULL");
        return NAN;
    }
    return p->scale != 0.0f ? p->scale : (float)(1.0 / sqrt((double)p->head_dim));
}

/* Elements of an [a,b,c,d] tensor, or -1 if the byte count overflows. */
static int64_t elems4(int64_t a, int64_t b, int64_t c, int64_t d) {
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r) || __builtin_mul_overflow(r, c, &r) ||
        __builtin_mul_overflow(r, d, &r) || r > (int64_t)(SIZE_MAX / 8) || r > INT64_MAX / 8)
        return -1;
    return r;
}

mha_status mha_problem_validate(const mha_problem *p) {
    if (!p) return mha_set_error(MHA_EINVAL, "problem is NULL");
    const struct {
        const char *name;
        int64_t v;
    } dims[] = {{"batch", p->batch}, {"heads", p->heads},   {"kv_heads", p->kv_heads},
                {"seq_q", p->seq_q}, {"seq_kv", p->seq_kv}, {"head_dim", p->head_dim}};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        if (dims[i].v <= 0)
            return mha_set_error(MHA_EINVAL, "problem.%s = %lld: must be >= 1", dims[i].name,
                                 (long long)dims[i].v);
    if (p->kv_heads > p->heads || p->heads % p->kv_heads != 0)
        return mha_set_error(MHA_EINVAL, "problem.kv_heads = %lld does not divide heads = %lld",
                             (long long)p->kv_heads, (long long)p->heads);
    if (p->head_dim_v < 0)
        return mha_set_error(MHA_EINVAL, "problem.head_dim_v = %lld: must be >= 1 (0 = head_dim)",
                             (long long)p->head_dim_v);
    const int64_t dv = mha_dv(p);
    /* int32 indices are never used, but keep every per-head extent sane. */
    if (p->seq_q > (int64_t)1 << 31 || p->seq_kv > (int64_t)1 << 31 || p->head_dim > 1 << 20 ||
        dv > 1 << 20)
        return mha_set_error(
            MHA_EINVAL,
            "problem dims too large (seq_q %lld, seq_kv %lld, head_dim %lld, head_dim_v %lld)",
            (long long)p->seq_q, (long long)p->seq_kv, (long long)p->head_dim, (long long)dv);
    if (elems4(p->batch, p->heads, p->seq_q, p->head_dim) < 0 ||
        elems4(p->batch, p->kv_heads, p->seq_kv, p->head_dim) < 0 ||
        elems4(p->batch, p->heads, p->seq_q, dv) < 0 ||
        elems4(p->batch, p->kv_heads, p->seq_kv, dv) < 0 ||
        elems4(p->batch, p->heads, p->seq_q, p->seq_kv) < 0)
        return mha_set_error(
            MHA_ENOMEM,
            "problem sizes overflow: batch %lld x heads %lld x seq_q %lld x seq_kv "
            "%lld x head_dim %lld bytes do not fit in size_t",
            (long long)p->batch, (long long)p->heads, (long long)p->seq_q, (long long)p->seq_kv,
            (long long)p->head_dim);
    if (p->dtype != MHA_F32 && p->dtype != MHA_BF16 && p->dtype != MHA_F16)
        return mha_set_error(MHA_EINVAL, "problem.dtype = %d (%s): must be fp32, bf16 or fp16",
                             (int)p->dtype, mha_dtype_name(p->dtype));
    if ((unsigned)p->kv_dtype >= MHA_DTYPE_COUNT)
        return mha_set_error(MHA_EINVAL,
                             "problem.kv_dtype = %d: must be 0 (the dtype), bf16, fp16 or int8",
                             (int)p->kv_dtype);
    if (!isfinite(p->scale) || p->scale < 0)
        return mha_set_error(MHA_EINVAL,
                             "problem.scale = %g: must be finite and >= 0 (0 = 1/sqrt(d))",
                             (double)p->scale);
    if (p->window != 0 && p->window != 1)
        return mha_set_error(MHA_EINVAL, "problem.window = %d: must be 0 (none) or 1 (a window)",
                             p->window);
    const struct {
        const char *name;
        int64_t v;
    } edges[] = {{"window_left", p->window_left}, {"window_right", p->window_right}};
    for (size_t i = 0; i < 2; i++) {
        if (p->window && edges[i].v < -1)
            return mha_set_error(MHA_EINVAL,
                                 "problem.%s = %lld: must be -1 (unbounded) or >= 0 keys",
                                 edges[i].name, (long long)edges[i].v);
        if (!p->window && edges[i].v != 0)
            return mha_set_error(MHA_EINVAL,
                                 "problem.%s = %lld without problem.window = 1: set window to "
                                 "use a sliding window (0 = none)",
                                 edges[i].name, (long long)edges[i].v);
    }
    if (!isfinite(p->softcap) || p->softcap < 0)
        return mha_set_error(MHA_EINVAL,
                             "problem.softcap = %g: must be finite and > 0 (0 = no softcap)",
                             (double)p->softcap);
    if (p->sinks != 0 && p->sinks != 1)
        return mha_set_error(
            MHA_EINVAL, "problem.sinks = %d: must be 0 (none) or 1 (one logit per head)", p->sinks);
    mha_status st = mha_validate_layout(p);
    if (st != MHA_OK) return st;
    /* the packed rows and the paged pools (sizes < 2^31 each, so only the
     * products can overflow) */
    const int64_t rows_kv =
        p->layout == MHA_LAYOUT_PAGED ? p->num_blocks * p->block_size : p->total_kv;
    if (elems4(p->total_q, p->heads, p->head_dim, 1) < 0 ||
        elems4(p->total_q, p->heads, dv, 1) < 0 ||
        elems4(rows_kv, p->kv_heads, p->head_dim, 1) < 0 ||
        elems4(rows_kv, p->kv_heads, dv, 1) < 0 || elems4(p->batch, p->max_blocks, 1, 1) < 0)
        return mha_set_error(MHA_ENOMEM,
                             "problem sizes overflow: total_q %lld, total_kv %lld, num_blocks "
                             "%lld x block_size %lld (x heads %lld, kv_heads %lld, head_dim "
                             "%lld) do not fit in size_t",
                             (long long)p->total_q, (long long)p->total_kv,
                             (long long)p->num_blocks, (long long)p->block_size,
                             (long long)p->heads, (long long)p->kv_heads, (long long)p->head_dim);
    return MHA_OK;
}

/* The (query, key) pairs one sequence of nq queries and nkv keys lets
 * through the mask, aligned bottom-right (off = nkv - nq). */
static double visible_pairs(const mha_problem *p, int64_t nq, int64_t nkv) {
    if (!p->causal && !p->window) return (double)nq * (double)nkv;
    mha_problem s = *p;
    s.seq_q = nq;
    s.seq_kv = nkv;
    double pairs = 0;
    for (int64_t i = 0; i < nq; i++) pairs += (double)mha_kv_count(&s, i);
    return pairs;
}

double mha_problem_flops(const mha_problem *p) {
    return mha_problem_flops_ex(p, NULL);
}

double mha_problem_flops_ex(const mha_problem *p, const mha_extras *x) {
    if (mha_problem_validate(p) != MHA_OK) return NAN; /* its message names the value */
    /* 2*d_qk for the score's dot product, 2*d_v for the P.V row: 4*d when equal */
    const double per_pair = 2.0 * (double)(p->head_dim + mha_dv(p));
    if (p->layout == MHA_LAYOUT_DENSE)
        return per_pair * (double)p->batch * (double)p->heads *
               visible_pairs(p, p->seq_q, p->seq_kv);
    if (mha_check_layout(p, x) != MHA_OK) return NAN; /* named there */
    double pairs = 0;
    for (int64_t b = 0; b < p->batch; b++) {
        const mha_seq s = mha_seq_of(p, x, b);
        pairs += visible_pairs(p, s.nq, s.nkv);
    }
    return per_pair * (double)p->heads * pairs;
}
