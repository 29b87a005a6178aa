/* vec_avx512.h - the vector layer on AVX-512F (16 float lanes, zmm).
 * Same names in vec_avx2.h and vec_scalar.h; the algorithms in variants/ are
 * written once against them. exp2 polynomial accuracy: see tests/test_vec.c. */
#ifndef MHA_VEC_AVX512_H
#define MHA_VEC_AVX512_H
#include <immintrin.h>
#include <stdint.h>

#define VW 16    /* lanes */
#define MHA_MR 6 /* micro-tile rows (broadcast operand) */
#define MHA_NV 4 /* micro-tile vectors (loaded operand): 6x4 = 24 of 32 zmm accumulate */
typedef __m512 vf;

static inline vf vzero(void) {
    return _mm512_setzero_ps();
}
static inline vf vset1(float x) {
    return _mm512_set1_ps(x);
}
static inline vf vload(const float *p) {
    return _mm512_load_ps(p);
}
static inline vf vloadu(const float *p) {
    return _mm512_loadu_ps(p);
}
static inline void vstore(float *p, vf v) {
    _mm512_store_ps(p, v);
}
static inline void vstoreu(float *p, vf v) {
    _mm512_storeu_ps(p, v);
}
/* First n lanes (0 <= n <= VW); the others read as 0 and are never touched. */
static inline vf vloadu_n(const float *p, int n) {
    return _mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1u), p);
}
static inline void vstoreu_n(float *p, vf v, int n) {
    _mm512_mask_storeu_ps(p, (__mmask16)((1u << n) - 1u), v);
}
/* Widening loads of VW stored elements into fp32 lanes (exact): bf16 is the
 * top half of an fp32, fp16 through vcvtph2ps (F16C), int8 sign-extended and
 * converted (unscaled: the caller applies the row's scale). The _n forms read
 * only the first n elements (0 <= n <= VW; masked, never past them) and give
 * 0 in the other lanes. */
static inline vf vload_bf16(const uint16_t *p) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}
static inline vf vload_bf16_n(const uint16_t *p, int n) {
    const __m512i w =
        _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16((__mmask16)((1u << n) - 1u), p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}
static inline vf vload_f16(const uint16_t *p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}
static inline vf vload_f16_n(const uint16_t *p, int n) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16((__mmask16)((1u << n) - 1u), p));
}
/* Narrowing stores of VW fp32 lanes, bitwise kernels/dtype.h's conversions:
 * bf16 rounded to nearest even on the integer bits (a NaN quieted, its top
 * bits kept), fp16 by vcvtps2ph (IEEE nearest even: subnormals, overflow to
 * Inf, a NaN quieted with its top payload bits, as mha_f32_to_f16). The _n
 * forms write only the first n elements. */
static inline __m256i vbf16_bits(vf v) {
    const __m512i u = _mm512_castps_si512(v);
    const __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(
            u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                                _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1)))),
        16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(
        _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    return _mm512_cvtepi32_epi16(
        _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40)));
}
static inline void vstore_bf16(uint16_t *p, vf v) {
    _mm256_storeu_si256((__m256i *)p, vbf16_bits(v));
}
static inline void vstore_bf16_n(uint16_t *p, vf v, int n) {
    _mm256_mask_storeu_epi16(p, (__mmask16)((1u << n) - 1u), vbf16_bits(v));
}
static inline void vstore_f16(uint16_t *p, vf v) {
    _mm256_storeu_si256((__m256i *)p, _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}
static inline void vstore_f16_n(uint16_t *p, vf v, int n) {
    _mm256_mask_storeu_epi16(p, (__mmask16)((1u << n) - 1u),
                             _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}
static inline vf vload_i8(const int8_t *p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)));
}
static inline vf vload_i8_n(const int8_t *p, int n) {
    return _mm512_cvtepi32_ps(
        _mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8((__mmask16)((1u << n) - 1u), p)));
}
static inline vf vfma(vf a, vf b, vf c) {
    return _mm512_fmadd_ps(a, b, c);
}
/* a b - c (one rounding where the ISA has FMA). */
static inline vf vfms(vf a, vf b, vf c) {
    return _mm512_fmsub_ps(a, b, c);
}
static inline vf vmul(vf a, vf b) {
    return _mm512_mul_ps(a, b);
}
static inline vf vdiv(vf a, vf b) {
    return _mm512_div_ps(a, b);
}
static inline vf vadd(vf a, vf b) {
    return _mm512_add_ps(a, b);
}
static inline vf vsub(vf a, vf b) {
    return _mm512_sub_ps(a, b);
}
static inline vf vmax(vf a, vf b) {
    return _mm512_max_ps(a, b);
}
static inline vf vmin(vf a, vf b) {
    return _mm512_min_ps(a, b);
}
/* 1 / x to ~1 ulp: the 14-bit estimate and one Newton step (no divider). */
static inline vf vrcp(vf x) {
    const vf r = _mm512_rcp14_ps(x);
    return _mm512_fmadd_ps(r, _mm512_fnmadd_ps(x, r, _mm512_set1_ps(1.0f)), r);
}
static inline float vhsum(vf a) {
    return _mm512_reduce_add_ps(a);
}
static inline float vhmax(vf a) {
    return _mm512_reduce_max_ps(a);
}
/* out[r] = sum of the lanes of a[r], r < 4, with shared shuffles: 128-bit
 * lanes folded pairwise across the four vectors, then within each lane. */
static inline void vhsum4(const vf a[4], float out[4]) {
    const vf u01 = _mm512_add_ps(_mm512_shuffle_f32x4(a[0], a[1], 0x44),
                                 _mm512_shuffle_f32x4(a[0], a[1], 0xee));
    const vf u23 = _mm512_add_ps(_mm512_shuffle_f32x4(a[2], a[3], 0x44),
                                 _mm512_shuffle_f32x4(a[2], a[3], 0xee));
    /* 128-bit lane r of w: four partial sums of a[r] */
    vf w =
        _mm512_add_ps(_mm512_shuffle_f32x4(u01, u23, 0x88), _mm512_shuffle_f32x4(u01, u23, 0xdd));
    w = _mm512_add_ps(w, _mm512_permute_ps(w, 0x4e));
    w = _mm512_add_ps(w, _mm512_permute_ps(w, 0xb1));
    _mm_storeu_ps(out, _mm512_castps512_ps128(_mm512_maskz_compress_ps(0x1111, w)));
}
/* Lanes where a == b take x, others y. */
static inline vf vselect_eq(vf a, vf b, vf x, vf y) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ), y, x);
}
/* Nonzero if any lane of a differs from b. */
static inline int vany_ne(vf a, vf b) {
    return _mm512_cmp_ps_mask(a, b, _CMP_NEQ_UQ) != 0;
}
/* In-place transpose of the 16 x 16 block r[row][lane]: unpack pairs, then
 * quads, then two rounds of 128-bit lane shuffles (0x88 takes lanes 0 and 2
 * of each source, 0xdd lanes 1 and 3). */
static inline void vtranspose(vf r[16]) {
    vf t[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    /* r[4g + k], 128-bit lane L: column 4L + k of rows 4g .. 4g + 3 */
    for (int g = 0; g < 4; g++) {
        const __m512d a = _mm512_castps_pd(t[4 * g]), b = _mm512_castps_pd(t[4 * g + 1]),
                      c = _mm512_castps_pd(t[4 * g + 2]), d = _mm512_castps_pd(t[4 * g + 3]);
        r[4 * g] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        r[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        r[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        r[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    for (int k = 0; k < 4; k++) {
        const vf x = _mm512_shuffle_f32x4(r[k], r[4 + k], 0x88),
                 y = _mm512_shuffle_f32x4(r[k], r[4 + k], 0xdd),
                 z = _mm512_shuffle_f32x4(r[8 + k], r[12 + k], 0x88),
                 w = _mm512_shuffle_f32x4(r[8 + k], r[12 + k], 0xdd);
        t[k] = _mm512_shuffle_f32x4(x, z, 0x88);
        t[8 + k] = _mm512_shuffle_f32x4(x, z, 0xdd);
        t[4 + k] = _mm512_shuffle_f32x4(y, w, 0x88);
        t[12 + k] = _mm512_shuffle_f32x4(y, w, 0xdd);
    }
    for (int i = 0; i < 16; i++) r[i] = t[i];
}
/* Lane indices 0, 1, ..., VW-1 as floats. */
static inline vf viota(void) {
    return _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}
/* Lanes where a > b take x, others y (NaN compares false). */
static inline vf vselect_gt(vf a, vf b, vf x, vf y) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_GT_OQ), y, x);
}
/* Nonzero if a > b in any lane. */
static inline int vany_gt(vf a, vf b) {
    return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ) != 0;
}

/* 2^x for x <= 128: x = n + f with n = round(x), |f| <= 1/2, 2^f by a degree-6
 * polynomial (Cephes exp2f coefficients, rel. error ~1.7e-7), then scalef by
 * 2^n. Results below 2^-126 (FLT_MIN) are exactly 0, so -inf gives 0: the
 * lanes with x < -126 are zeroed by the scalef's mask, never computed as a
 * subnormal. On Intel an underflowing scalef takes a microcode assist: a loop
 * of these exps on the Emerald Rapids VM ran ~110 ns (~300 cycles) per
 * vector with any such lane, against ~3 ns, and the clamp at -200 this
 * replaces hit it on every masked score (a causal diagonal, a window's
 * edges, a tail's padding; docs/semantics.md "Tiny softmax weights").
 * NaN propagates: the mask keeps unordered lanes (NLT_UQ), and max/min
 * return their second operand when either is NaN, so every clamp puts x
 * second (a NaN score must never become a finite weight; README "NaN and Inf"). */
#define MHA_EXP2_FLUSH (-126.0f)
/* For x <= 128.0 only (the softmax always passes x <= 0): no upper clamp. */
static inline vf vexp2_nonpos(vf x) {
    const __mmask16 k = _mm512_cmp_ps_mask(x, _mm512_set1_ps(MHA_EXP2_FLUSH), _CMP_NLT_UQ);
    const vf f = _mm512_reduce_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const vf n = _mm512_sub_ps(x, f);
    vf p = _mm512_set1_ps(1.535336188319500e-4f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.339887440266574e-3f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.618437357674640e-3f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.550332471162809e-2f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.402264791363012e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.931472028550421e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    return _mm512_maskz_scalef_ps(k, p, n);
}
static inline vf vexp2(vf x) {
    return vexp2_nonpos(_mm512_min_ps(_mm512_set1_ps(128.0f), x));
}

/* e^x with Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2, and a degree-7
 * polynomial for e^r (Cephes expf coefficients); x < -87.33 (e^x below
 * FLT_MIN, ln FLT_MIN = -87.3365) and -inf give exactly 0 through the
 * scalef's mask, as in vexp2_nonpos (no subnormal, no assist). */
static inline vf vexp(vf x) {
    const __mmask16 k = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.33f), _CMP_NLT_UQ);
    x = _mm512_max_ps(_mm512_set1_ps(-87.33f), x); /* x second: NaN propagates */
    x = _mm512_min_ps(_mm512_set1_ps(88.7f), x);
    const vf n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    vf r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    vf p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_maskz_scalef_ps(k, p, n);
}
#endif
