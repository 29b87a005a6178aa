/* vec_avx512bf16.h - the vector layer of AVX-512 (vec_avx512.h, unchanged:
 * 16 float lanes, 6x4 tiles) plus the bf16 pieces: pair dot products into
 * fp32 lanes (vdpbf16ps), round-to-nearest-even conversions to bf16
 * (vcvtne2ps2bf16) and fp16 (vcvtps2ph), and the pair interleave the dot
 * products want. Agrees bit for bit with kernels/dtype.h on normal values
 * (vcvtne*bf16 flush fp32 subnormals to zero). */
#ifndef MHA_VEC_AVX512BF16_H
#define MHA_VEC_AVX512BF16_H
#include "vec_avx512.h"

/* 32 bf16 (or 16 bf16 pairs) in a zmm: an integer vector, so that loads,
 * stores and shuffles stay plain and casts happen only at the dot product. */
typedef __m512i vbf;

/* acc[i] += a[2i] b[2i] + a[2i+1] b[2i+1] for the 16 fp32 lanes. */
static inline vf vdot_bf16(vf acc, vbf a, vbf b) {
    return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b);
}
/* One bf16 pair (a 32-bit word) in every lane. */
static inline vbf vbf_pair_bcast(const uint16_t *p) {
    int32_t w;
    __builtin_memcpy(&w, p, 4);
    return _mm512_set1_epi32(w);
}
/* 32 bf16: lo's 16 lanes rounded (RNE) in elements 0..15, hi's in 16..31. */
static inline vbf vbf_from2(vf lo, vf hi) {
    return (vbf)_mm512_cvtne2ps_pbh(hi, lo);
}
/* Elements 0..15 and 16..31 of x interleaved: (x0, x16, x1, x17, ...), i.e.
 * the two rows packed by vbf_from2 turned into 16 pairs, one per lane. */
static inline vbf vbf_interleave(vbf x) {
    const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24,
                                         8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    return _mm512_permutexvar_epi16(idx, x);
}
/* 16 fp32 lanes rounded to 16 bf16 / fp16 (RNE). */
static inline __m256i vf_to_bf16(vf x) {
    return (__m256i)_mm512_cvtneps_pbh(x);
}
static inline __m256i vf_to_f16(vf x) {
    return _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
/* 16 bf16 / fp16 (the first n, others 0) widened to fp32 lanes. */
static inline vf vbf16_load_n(const uint16_t *p, int n) {
    const __m256i h = _mm256_maskz_loadu_epi16((__mmask16)((1u << n) - 1u), p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
static inline vf vf16_load_n(const uint16_t *p, int n) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16((__mmask16)((1u << n) - 1u), p));
}
#endif
