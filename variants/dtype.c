/* dtype.c - element types: names, sizes, and the bulk conversions and int8
 * quantisation the file readers, the CLI and the tests use (kernels convert
 * in their own loops, through kernels/dtype.h or their vector twins). */
#include <math.h>
#include <strings.h>

#include "dtype.h"
#include "internal.h"

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

void mha_convert_to_f32(mha_dtype t, const void *src, float *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = mha_load_elem(src, t, (int64_t)i);
}

void mha_convert_from_f32(mha_dtype t, const float *src, void *dst, size_t n) {
    if (t == MHA_I8) { /* clamp and round; callers wanting a scale quantise rows */
        for (size_t i = 0; i < n; i++) {
            const float v = src[i] != src[i] ? 0.0f : fminf(fmaxf(src[i], -127.0f), 127.0f);
            ((int8_t *)dst)[i] = (int8_t)lrintf(v);
        }
        return;
    }
    for (size_t i = 0; i < n; i++) mha_store_elem(dst, t, (int64_t)i, src[i]);
}

void mha_quantize_rows_i8(const float *src, int64_t rows, int64_t n, int64_t ld_src, int8_t *dst,
                          int64_t ld_dst, float *scales) {
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
}
