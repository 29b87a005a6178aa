/* vec_avx512bf16.h - the vector layer of AVX-512 (vec_avx512.h, unchanged:
 * 16 float lanes, 6x4 tiles) plus the bf16 pieces: pair dot products into
 * fp32 lanes (vdpbf16ps), round-to-nearest-even conversions to bf16
 * (vcvtne2ps2bf16) and fp16 (vcvtps2ph), and the pair interleave the dot
 * products want. Agrees bit for bit with kernels/dtype.h on normal values
 * (vcvtne*bf16 flush fp32 subnormals to zero). */
#ifndef MHA_VEC_AVX512BF16_H
#define MHA_VEC_AVX512BF16_H
#include "vec_avx512.h"
#include "softcap.h"

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
/* 16 bf16 pairs (as vbf_interleave gives them) times f, one factor per
 * pair (lane), both halves; exact where f is a power of 2 and no product
 * falls below FLT_MIN (then its low bits are cut, not rounded). */
static inline vbf vbf_pairs_scale(vbf x, vf f) {
    const vf lo = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(x, 16)), f);
    const vf hi = _mm512_mul_ps(
        _mm512_castsi512_ps(_mm512_and_si512(x, _mm512_set1_epi32((int)0xffff0000u))), f);
    return _mm512_mask_blend_epi16((__mmask32)0xaaaaaaaau,
                                   _mm512_srli_epi32(_mm512_castps_si512(lo), 16),
                                   _mm512_castps_si512(hi));
}
/* The least integer >= x in each lane (NaN stays NaN). */
static inline vf vceil(vf x) {
    return _mm512_roundscale_ps(x, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC);
}
/* 16 fp32 lanes rounded to 16 bf16 / fp16 (RNE). */
static inline __m256i vf_to_bf16(vf x) {
    return (__m256i)_mm512_cvtneps_pbh(x);
}
static inline __m256i vf_to_f16(vf x) {
    return _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
/* 2^x for x <= 0 where the result is rounded to bf16 next (P of the bf16
 * kernels): x = n + f with n = floor(x) and 0 <= f < 1 (one vreduceps; the
 * scalef takes floor(x) from x itself, so n is never formed), and a
 * degree-3 polynomial for 2^f instead of vexp2_nonpos's degree 6. Its
 * coefficients are the minimax (relative error) fit for 2^g on [-1/2, 1/2]
 * (Remez, 200,001 points) re-expanded about f = g + 1/2 (p(f) = sqrt(2)
 * q(f - 1/2), the same relative error): largest relative error 7.48e-5 in
 * exact arithmetic, and evaluated in fp32 under the stated bound 7.5e-5
 * (tests/test_vec.c, 400,003 points of [-125, 0]): 0.038 of bf16's unit
 * roundoff 2^-9 = 1.95e-3, so P as stored (bf16, RNE) is off by at most
 * 2^-9 + 7.5e-5 relative instead of 2^-9; harness/check.c's tolerance
 * carries the extra term (TOL_EXP_BF16). Degree 2 would be 1.72e-3, as
 * large as the rounding itself. Three FMAs fewer per 16 exponentials than
 * the fp32 one, and a subtraction fewer than rounding to nearest (n = x - f
 * for the scalef): 1.006x-1.008x flash.avx512bf16 (Zen 4 VM, stop 58). -inf and
 * x < -125 give exactly 0 through the scalef's mask (no subnormal: see
 * vexp2_nonpos; -125, not -126, because this polynomial's 2^0 is 0.99993,
 * so 2^-126 would come out subnormal); NaN stays NaN. */
#define MHA_EXP2_BF16_REL 7.5e-5
#define MHA_EXP2_BF16_FLUSH (-125.0f)
static inline vf vexp2_nonpos_bf16(vf x) {
    const __mmask16 k = _mm512_cmp_ps_mask(x, _mm512_set1_ps(MHA_EXP2_BF16_FLUSH), _CMP_NLT_UQ);
    const vf f = _mm512_reduce_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    vf p = _mm512_set1_ps(7.802452264047922e-2f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.260671554274836e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.958335404947528e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.999252185627155e-1f));
    return _mm512_maskz_scalef_ps(k, p, x);
}

/* c tanh(x sc / c) log2(e): the logit softcap (ukernels.h's
 * vsoftcap_log2_scaled, same contract) for the kernels whose P is rounded
 * to bf16 next (flash.avx512bf16, flash.amx), to the precision that
 * rounding leaves room for. y = x sc / c clamped to [-7.2, 7.2] (y second
 * in each clamp, so NaN stays NaN; vrangeps would save an op but returns
 * the bound for NaN), then tanh y = y P(y^2) / Q(y^2) with P and Q of
 * degree 3 instead of 4 (scripts/fit_tanh.py --deg 3 --clamp 7.2: relative
 * error 1.30e-6 in exact arithmetic, and 1 - tanh 7.2 = 1.1e-6 beyond the
 * clamp; tests/test_vec.c bounds the fp32 result by MHA_SOFTCAP_BF16_REL),
 * the quotient by vrcp, c log2(e) folded into P. A capped score s' off by
 * that relative error moves its P by a factor within e^(2.5e-6 |s'|), |s'|
 * <= c in natural units: harness/check.c's TOL_CAP_BF16. Two FMAs fewer
 * than the fp32 form per 16 scores: on the Emerald Rapids VM, a cap pass
 * plus flash.amx's exp pass over L1-resident scores took 12.1 against
 * 13.3 TSC ticks per 16 scores (plain: 5.1; stop 54). */
#define MHA_SOFTCAP_BF16_REL 2.5e-6
static inline vf vsoftcap_log2_bf16(vf x, float sc, float c) {
    static const float p[4] = {3.8850992552158763e-06f, 2.2699166178274319e-03f,
                               1.2296430246229009e-01f, 9.9999875650127701e-01f},
                       q[4] = {1.4144972184596205e-04f, 2.1044334079841021e-02f,
                               4.5628833388102952e-01f, 1.0f};
    return vsoftcap_rational(x, sc, c, 7.2f, p, q, 3);
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
