/* vec_scalar.h - the vector layer for the baseline ISA: one float lane.
 * Same names as vec_avx2.h / vec_avx512.h, so the algorithms compile
 * unchanged; exp and exp2 use the same polynomials as the SIMD layers. */
#ifndef MHA_VEC_SCALAR_H
#define MHA_VEC_SCALAR_H
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "dtype.h"

#define VW 1
#define MHA_MR 4 /* 4x4 scalar accumulators fit the 16 xmm registers */
#define MHA_NV 4
typedef float vf;

static inline vf vzero(void) {
    return 0.0f;
}
static inline vf vset1(float x) {
    return x;
}
static inline vf vload(const float *p) {
    return *p;
}
static inline vf vloadu(const float *p) {
    return *p;
}
static inline void vstore(float *p, vf v) {
    *p = v;
}
static inline void vstoreu(float *p, vf v) {
    *p = v;
}
static inline vf vloadu_n(const float *p, int n) {
    return n > 0 ? *p : 0.0f;
}
static inline void vstoreu_n(float *p, vf v, int n) {
    if (n > 0) *p = v;
}
/* Widening loads (one element), the conversions of kernels/dtype.h; int8
 * unscaled (the caller applies the row's scale). _n: 0 when n == 0. */
static inline vf vload_bf16(const uint16_t *p) {
    return mha_bf16_to_f32(*p);
}
static inline vf vload_bf16_n(const uint16_t *p, int n) {
    return n > 0 ? mha_bf16_to_f32(*p) : 0.0f;
}
static inline vf vload_f16(const uint16_t *p) {
    return mha_f16_to_f32(*p);
}
static inline vf vload_f16_n(const uint16_t *p, int n) {
    return n > 0 ? mha_f16_to_f32(*p) : 0.0f;
}
/* Narrowing stores (one element): dtype.h's conversions. */
static inline void vstore_bf16(uint16_t *p, vf v) {
    *p = mha_f32_to_bf16(v);
}
static inline void vstore_bf16_n(uint16_t *p, vf v, int n) {
    if (n > 0) *p = mha_f32_to_bf16(v);
}
static inline void vstore_f16(uint16_t *p, vf v) {
    *p = mha_f32_to_f16(v);
}
static inline void vstore_f16_n(uint16_t *p, vf v, int n) {
    if (n > 0) *p = mha_f32_to_f16(v);
}
static inline vf vload_i8(const int8_t *p) {
    return (float)*p;
}
static inline vf vload_i8_n(const int8_t *p, int n) {
    return n > 0 ? (float)*p : 0.0f;
}
static inline vf vfma(vf a, vf b, vf c) {
    return a * b + c;
}
/* a b - c (one rounding where the ISA has FMA). */
static inline vf vfms(vf a, vf b, vf c) {
    return a * b - c;
}
static inline vf vmul(vf a, vf b) {
    return a * b;
}
static inline vf vdiv(vf a, vf b) {
    return a / b;
}
static inline vf vadd(vf a, vf b) {
    return a + b;
}
static inline vf vsub(vf a, vf b) {
    return a - b;
}
static inline vf vmax(vf a, vf b) {
    return a > b ? a : b;
}
static inline vf vmin(vf a, vf b) { /* b when either is NaN, as x86's minps */
    return a < b ? a : b;
}
static inline vf vrcp(vf x) {
    return 1.0f / x;
}
static inline float vhsum(vf a) {
    return a;
}
static inline float vhmax(vf a) {
    return a;
}
/* out[r] = a[r], r < 4 (one lane each). */
static inline void vhsum4(const vf a[4], float out[4]) {
    for (int r = 0; r < 4; r++) out[r] = a[r];
}
static inline vf vselect_eq(vf a, vf b, vf x, vf y) {
    return a == b ? x : y;
}
static inline int vany_ne(vf a, vf b) {
    return a != b;
}
/* Transpose of the 1 x 1 block: nothing to do. */
static inline void vtranspose(vf r[1]) {
    (void)r;
}
/* Lane indices 0, 1, ..., VW-1 as floats. */
static inline vf viota(void) {
    return 0.0f;
}
/* Lanes where a > b take x, others y (NaN compares false). */
static inline vf vselect_gt(vf a, vf b, vf x, vf y) {
    return a > b ? x : y;
}
/* Nonzero if a > b in any lane. */
static inline int vany_gt(vf a, vf b) {
    return a > b;
}

/* Round to nearest integer (|x| < 2^22) without SSE4.1: the 1.5*2^23 trick. */
static inline float vround_(float x) {
    return (x + 12582912.0f) - 12582912.0f;
}
static inline float vpow2i_(float n) { /* n integer in [-127, 127]; -127 -> +0 */
    if (n != n) return n;              /* NaN propagates (and never meets an int conversion) */
    const uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
    float r;
    memcpy(&r, &bits, sizeof r);
    return r;
}
static inline vf vexp2_nonpos(vf x) { /* x <= 127: no upper clamp */
    x = x < -127.0f ? -127.0f : x;
    const float n = vround_(x), f = x - n;
    float p = 1.535336188319500e-4f;
    p = p * f + 1.339887440266574e-3f;
    p = p * f + 9.618437357674640e-3f;
    p = p * f + 5.550332471162809e-2f;
    p = p * f + 2.402264791363012e-1f;
    p = p * f + 6.931472028550421e-1f;
    p = p * f + 1.0f;
    return p * vpow2i_(n);
}
static inline vf vexp2(vf x) {
    return vexp2_nonpos(x > 127.0f ? 127.0f : x);
}
static inline vf vexp(vf x) {
    x = x < -88.5f ? -88.5f : (x > 88.0f ? 88.0f : x);
    float n = vround_(x * 1.44269504088896341f);
    float r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    n = n < -127.0f ? -127.0f : n;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + (r + 1.0f);
    return p * vpow2i_(n);
}
#endif
