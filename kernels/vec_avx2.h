/* vec_avx2.h - the vector layer on AVX2 + FMA (8 float lanes, ymm).
 * Same names as vec_avx512.h / vec_scalar.h. Masked tails use vmaskmov with a
 * lane-count mask; no access ever touches memory past lane n. */
#ifndef MHA_VEC_AVX2_H
#define MHA_VEC_AVX2_H
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define VW 8
#define MHA_MR 4 /* 4x3 = 12 accumulators + 3 loads + 1 broadcast = 16 ymm */
#define MHA_NV 3
typedef __m256 vf;

static inline vf vzero(void) {
    return _mm256_setzero_ps();
}
static inline vf vset1(float x) {
    return _mm256_set1_ps(x);
}
static inline vf vload(const float *p) {
    return _mm256_load_ps(p);
}
static inline vf vloadu(const float *p) {
    return _mm256_loadu_ps(p);
}
static inline void vstore(float *p, vf v) {
    _mm256_store_ps(p, v);
}
static inline void vstoreu(float *p, vf v) {
    _mm256_storeu_ps(p, v);
}
static inline __m256i vmask_n(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
static inline vf vloadu_n(const float *p, int n) {
    return _mm256_maskload_ps(p, vmask_n(n));
}
static inline void vstoreu_n(float *p, vf v, int n) {
    _mm256_maskstore_ps(p, vmask_n(n), v);
}
/* Widening loads of VW stored elements into fp32 lanes (exact): bf16 is the
 * top half of an fp32, fp16 through vcvtph2ps (F16C), int8 sign-extended and
 * converted (unscaled: the caller applies the row's scale). AVX2 has no
 * masked 8/16-bit loads, so the _n forms (0 <= n <= VW) copy the first n
 * elements into a zeroed block first: never a byte past them. */
static inline vf vload_bf16(const uint16_t *p) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
static inline vf vload_bf16_n(const uint16_t *p, int n) {
    uint16_t t[VW] = {0};
    memcpy(t, p, (size_t)n * sizeof *p);
    return vload_bf16(t);
}
static inline vf vload_f16(const uint16_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}
static inline vf vload_f16_n(const uint16_t *p, int n) {
    uint16_t t[VW] = {0};
    memcpy(t, p, (size_t)n * sizeof *p);
    return vload_f16(t);
}
/* Narrowing stores of VW fp32 lanes, bitwise kernels/dtype.h's conversions
 * (vec_avx512.h's, in 8 lanes); the _n forms write only the first n. */
static inline __m128i vbf16_bits(vf v) {
    const __m256i u = _mm256_castps_si256(v);
    __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(
            u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff),
                                _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1)))),
        16);
    /* a NaN: |u| > 0x7f800000 (both below 2^31: a signed compare serves) */
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                           _mm256_set1_epi32(0x7f800000));
    r = _mm256_blendv_epi8(r, _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40)),
                           nan);
    /* every lane holds 16 bits: an unsigned saturating pack keeps them */
    return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}
static inline void vstore_bf16(uint16_t *p, vf v) {
    _mm_storeu_si128((__m128i *)p, vbf16_bits(v));
}
static inline void vstore_bf16_n(uint16_t *p, vf v, int n) {
    uint16_t t[VW];
    _mm_storeu_si128((__m128i *)t, vbf16_bits(v));
    memcpy(p, t, (size_t)n * sizeof *p);
}
static inline void vstore_f16(uint16_t *p, vf v) {
    _mm_storeu_si128((__m128i *)p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}
static inline void vstore_f16_n(uint16_t *p, vf v, int n) {
    uint16_t t[VW];
    _mm_storeu_si128((__m128i *)t, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    memcpy(p, t, (size_t)n * sizeof *p);
}
static inline vf vload_i8(const int8_t *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}
static inline vf vload_i8_n(const int8_t *p, int n) {
    int8_t t[VW] = {0};
    memcpy(t, p, (size_t)n);
    return vload_i8(t);
}
static inline vf vfma(vf a, vf b, vf c) {
    return _mm256_fmadd_ps(a, b, c);
}
/* a b - c (one rounding where the ISA has FMA). */
static inline vf vfms(vf a, vf b, vf c) {
    return _mm256_fmsub_ps(a, b, c);
}
static inline vf vmul(vf a, vf b) {
    return _mm256_mul_ps(a, b);
}
static inline vf vdiv(vf a, vf b) {
    return _mm256_div_ps(a, b);
}
static inline vf vadd(vf a, vf b) {
    return _mm256_add_ps(a, b);
}
static inline vf vsub(vf a, vf b) {
    return _mm256_sub_ps(a, b);
}
static inline vf vmax(vf a, vf b) {
    return _mm256_max_ps(a, b);
}
static inline vf vmin(vf a, vf b) {
    return _mm256_min_ps(a, b);
}
/* 1 / x to ~2 ulp: the 12-bit estimate and one Newton step (no divider). */
static inline vf vrcp(vf x) {
    const vf r = _mm256_rcp_ps(x);
    return _mm256_fmadd_ps(r, _mm256_fnmadd_ps(x, r, _mm256_set1_ps(1.0f)), r);
}
static inline float vhsum(vf a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
static inline float vhmax(vf a) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
/* out[r] = sum of the lanes of a[r], r < 4, with shared horizontal adds. */
static inline void vhsum4(const vf a[4], float out[4]) {
    const vf h = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
}
static inline vf vselect_eq(vf a, vf b, vf x, vf y) {
    return _mm256_blendv_ps(y, x, _mm256_cmp_ps(a, b, _CMP_EQ_OQ));
}
static inline int vany_ne(vf a, vf b) {
    return _mm256_movemask_ps(_mm256_cmp_ps(a, b, _CMP_NEQ_UQ)) != 0;
}
/* In-place transpose of the 8 x 8 block r[row][lane]: unpack pairs, then
 * quads, then swap 128-bit halves. */
static inline void vtranspose(vf r[8]) {
    vf t[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    /* r[4g + k], 128-bit half L: column 4L + k of rows 4g .. 4g + 3 */
    for (int g = 0; g < 2; g++) {
        const __m256d a = _mm256_castps_pd(t[4 * g]), b = _mm256_castps_pd(t[4 * g + 1]),
                      c = _mm256_castps_pd(t[4 * g + 2]), d = _mm256_castps_pd(t[4 * g + 3]);
        r[4 * g] = _mm256_castpd_ps(_mm256_unpacklo_pd(a, c));
        r[4 * g + 1] = _mm256_castpd_ps(_mm256_unpackhi_pd(a, c));
        r[4 * g + 2] = _mm256_castpd_ps(_mm256_unpacklo_pd(b, d));
        r[4 * g + 3] = _mm256_castpd_ps(_mm256_unpackhi_pd(b, d));
    }
    for (int k = 0; k < 4; k++) {
        t[k] = _mm256_permute2f128_ps(r[k], r[4 + k], 0x20);
        t[4 + k] = _mm256_permute2f128_ps(r[k], r[4 + k], 0x31);
    }
    for (int i = 0; i < 8; i++) r[i] = t[i];
}
/* Lane indices 0, 1, ..., VW-1 as floats. */
static inline vf viota(void) {
    return _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7);
}
/* Lanes where a > b take x, others y (NaN compares false). */
static inline vf vselect_gt(vf a, vf b, vf x, vf y) {
    return _mm256_blendv_ps(y, x, _mm256_cmp_ps(a, b, _CMP_GT_OQ));
}
/* Nonzero if a > b in any lane. */
static inline int vany_gt(vf a, vf b) {
    return _mm256_movemask_ps(_mm256_cmp_ps(a, b, _CMP_GT_OQ)) != 0;
}

/* 2^n for integer-valued n in [-127, 127] (float); n = -127 gives +0. */
static inline vf vpow2i(vf n) {
    const __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
}

/* 2^x: same polynomial as vec_avx512.h; x clamped to [-127, 127]; results
 * below 2^-126.5 flush to 0 (so -inf gives exactly 0: 2^-127 is built as
 * +0 from its exponent bits, with no subnormal and no assist, unlike
 * vec_avx512.h's scalef). x in [-126.5, -126) gives a subnormal (a
 * microcode assist on Intel, for a score in that half unit only); masked
 * scores never land there, so it is left (clearing it would take a compare
 * and an and per vector; docs/semantics.md "Tiny softmax weights"). */
/* For x <= 127.0 only (the softmax always passes x <= 0): no upper clamp.
 * x is the second operand of every clamp so that NaN propagates (maxps
 * returns the second operand when either is NaN). */
static inline vf vexp2_nonpos(vf x) {
    x = _mm256_max_ps(_mm256_set1_ps(-127.0f), x);
    const vf n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const vf f = _mm256_sub_ps(x, n);
    vf p = _mm256_set1_ps(1.535336188319500e-4f);
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.339887440266574e-3f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.618437357674640e-3f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.550332471162809e-2f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.402264791363012e-1f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(6.931472028550421e-1f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
    return _mm256_mul_ps(p, vpow2i(n));
}
static inline vf vexp2(vf x) {
    return vexp2_nonpos(_mm256_min_ps(_mm256_set1_ps(127.0f), x));
}

/* e^x, Cody-Waite + degree-7 polynomial as in vec_avx512.h; x < -88.5 -> 0. */
static inline vf vexp(vf x) {
    x = _mm256_max_ps(_mm256_set1_ps(-88.5f), x); /* x second: NaN propagates */
    x = _mm256_min_ps(_mm256_set1_ps(88.0f), x);
    vf n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    vf r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    n = _mm256_max_ps(n, _mm256_set1_ps(-127.0f));
    vf p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    return _mm256_mul_ps(p, vpow2i(n));
}
#endif
