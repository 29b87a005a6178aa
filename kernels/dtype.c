/* dtype.c - element types: names, sizes, and the bulk conversions and int8
 * quantisation the file readers, the CLI and the tests use (kernels convert
 * in their own loops, through kernels/dtype.h or their vector twins). */
#include <math.h>
#include <strings.h>

#include "dtype.h"
#include "error.h"

static const struct {
    const char *name, *alias1, *alias2;
    size_t size;
} dtypes[MHA_DTYPE_COUNT] = {
    [MHA_F32] = {"fp32", "f32", "float32", 4},
    [MHA_BF16] = {"bf16", "bfloat16", "bf16", 2},
    [MHA_F16] = {"fp16", "f16", "float16", 2},
    [MHA_I8] = {"int8", "i8", "int8", 1},
};

const char *mha_dtype_name(mha_dtype t) {
    return (unsigned)t < MHA_DTYPE_COUNT ? dtypes[t].name : "unknown";
}

size_t mha_dtype_size(mha_dtype t) {
    return (unsigned)t < MHA_DTYPE_COUNT ? dtypes[t].size : 0;
}

mha_status mha_dtype_parse(const char *s, mha_dtype *out) {
    if (s)
        for (int i = 0; i < MHA_DTYPE_COUNT; i++)
            if (!strcasecmp(s, dtypes[i].name) || !strcasecmp(s, dtypes[i].alias1) ||
                !strcasecmp(s, dtypes[i].alias2)) {
                *out = (mha_dtype)i;
                return MHA_OK;
            }
    return mha_set_error(MHA_EINVAL, "unknown dtype '%s' (fp32, bf16, fp16, int8)",
                         s ? s : "(null)");
}

/* An unknown dtype or a NULL buffer converts nothing: writing 4-byte
 * elements into a buffer sized for another type would overrun it. */
static mha_status check_convert(const char *fn, mha_dtype t, const void *src, const void *dst,
                                size_t n) {
    if ((unsigned)t >= MHA_DTYPE_COUNT)
        return mha_set_error(MHA_EINVAL, "%s: dtype %d is not fp32, bf16, fp16 or int8", fn,
                             (int)t);
    if (n > 0 && (!src || !dst)) return mha_set_error(MHA_EINVAL, "%s: src or dst is NULL", fn);
    return MHA_OK;
}

mha_status mha_convert_to_f32(mha_dtype t, const void *src, float *dst, size_t n) {
    const mha_status st = check_convert("mha_convert_to_f32", t, src, dst, n);
    if (st != MHA_OK) return st;
    for (size_t i = 0; i < n; i++) dst[i] = mha_load_elem(src, t, (int64_t)i);
    return MHA_OK;
}

mha_status mha_convert_from_f32(mha_dtype t, const float *src, void *dst, size_t n) {
    const mha_status st = check_convert("mha_convert_from_f32", t, src, dst, n);
    if (st != MHA_OK) return st;
    if (t == MHA_I8) { /* clamp and round; callers wanting a scale quantise rows */
        for (size_t i = 0; i < n; i++) {
            const float v = src[i] != src[i] ? 0.0f : fminf(fmaxf(src[i], -127.0f), 127.0f);
            ((int8_t *)dst)[i] = (int8_t)lrintf(v);
        }
        return MHA_OK;
    }
    for (size_t i = 0; i < n; i++) mha_store_elem(dst, t, (int64_t)i, src[i]);
    return MHA_OK;
}

mha_status mha_quantize_rows_i8(const float *src, int64_t rows, int64_t n, int64_t ld_src,
                                int8_t *dst, int64_t ld_dst, float *scales) {
    if (rows < 0 || n < 0 || (rows > 1 && (ld_src < n || ld_dst < n)))
        return mha_set_error(MHA_EINVAL,
                             "mha_quantize_rows_i8: rows %lld, n %lld, ld_src %lld, ld_dst %lld: "
                             "need rows, n >= 0 and strides >= n",
                             (long long)rows, (long long)n, (long long)ld_src, (long long)ld_dst);
    if (rows > 0 && (!scales || (n > 0 && (!src || !dst))))
        return mha_set_error(MHA_EINVAL, "mha_quantize_rows_i8: src, dst or scales is NULL");
    for (int64_t r = 0; r < rows; r++) {
        const float *x = src + r * ld_src;
        int8_t *q = dst + r * ld_dst;
        float mx = 0.0f;
        int finite = 1;
        for (int64_t i = 0; i < n; i++) {
            if (!isfinite(x[i]))
                finite = 0;
            else if (fabsf(x[i]) > mx)
                mx = fabsf(x[i]);
        }
        const float s = !finite ? NAN : mx > 0.0f ? mx / 127.0f : 1.0f;
        scales[r] = s;
        for (int64_t i = 0; i < n; i++) {
            float v = finite ? x[i] / s : 0.0f;
            v = fminf(fmaxf(v, -127.0f), 127.0f);
            q[i] = (int8_t)lrintf(v);
        }
    }
    return MHA_OK;
}
