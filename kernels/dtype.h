/* dtype.h - scalar element conversions, bit-exact and portable (no SIMD
 * flags needed): bf16 and fp16 to and from fp32 with round-to-nearest-even,
 * and the one element loader the oracle and the scalar kernels use. Vector
 * code converts in its own loops (vec_<isa>.h) and must agree with these. */
#ifndef MHA_KERNELS_DTYPE_H
#define MHA_KERNELS_DTYPE_H
#include <stdint.h>
#include <string.h>

#include "mha.h"

static inline uint32_t mha_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float mha_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* bf16 is the top half of an fp32. */
static inline float mha_bf16_to_f32(uint16_t h) {
    return mha_bits_f32((uint32_t)h << 16);
}
static inline uint16_t mha_f32_to_bf16(float f) {
    uint32_t u = mha_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u); /* nearest even; overflow carries into Inf */
    return (uint16_t)(u >> 16);
}

/* IEEE binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits. */
static inline float mha_f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f) return mha_bits_f32(sign | 0x7f800000u | (man << 13)); /* Inf, NaN */
    if (exp == 0) {
        if (man == 0) return mha_bits_f32(sign);
        /* subnormal: man * 2^-24, exact in fp32 */
        const float v = (float)man * 5.9604644775390625e-08f;
        return sign ? -v : v;
    }
    return mha_bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}
static inline uint16_t mha_f32_to_f16(float f) {
    const uint32_t u = mha_f32_bits(f);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    const uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu)); /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to >= 65536: Inf */
    if (a < 0x38800000u) {
        /* below 2^-14: subnormal (or zero) result, man = round(|f| * 2^24) */
        if (a < 0x33000000u) return sign; /* below half the smallest subnormal: +-0 */
        const uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
        const uint32_t shift = 126u - e; /* 14..24: m * 2^(e-150) * 2^24 = m >> (126-e) */
        uint32_t r = m >> shift;
        const uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (r & 1u))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = a - 0x38000000u; /* rebias 127 -> 15 in place */
    r += 0xfffu + ((r >> 13) & 1u);
    return (uint16_t)(sign | (r >> 13));
}

/* Element i (index in elements) of a buffer of type t as float; int8 is
 * returned unscaled (the caller applies the row's scale). */
static inline float mha_load_elem(const void *base, mha_dtype t, int64_t i) {
    switch (t) {
    case MHA_BF16:
        return mha_bf16_to_f32(((const uint16_t *)base)[i]);
    case MHA_F16:
        return mha_f16_to_f32(((const uint16_t *)base)[i]);
    case MHA_I8:
        return (float)((const int8_t *)base)[i];
    default:
        return ((const float *)base)[i];
    }
}
static inline void mha_store_elem(void *base, mha_dtype t, int64_t i, float v) {
    switch (t) {
    case MHA_BF16:
        ((uint16_t *)base)[i] = mha_f32_to_bf16(v);
        break;
    case MHA_F16:
        ((uint16_t *)base)[i] = mha_f32_to_f16(v);
        break;
    case MHA_I8:
        ((int8_t *)base)[i] = (int8_t)v;
        break;
    default:
        ((float *)base)[i] = v;
        break;
    }
}

/* The scale of row (b, h, n) of an int8 view; 1 for any other dtype. */
static inline float mha_row_scale(const mha_tensor *t, int64_t b, int64_t h, int64_t n) {
    if (t->dtype != MHA_I8) return 1.0f;
    return t->scale[b * t->scale_stride_b + h * t->scale_stride_h + n * t->scale_stride_n];
}

#endif
