/* bf16_pack.h - the packs of the bf16 attention kernels (flash_bf16.c,
 * flash_amx.c; compiled with AVX512_BF16): Q/K rows and V pairs from bf16 or
 * fp16 storage (fp16 rounded to bf16 on the way), zero-padded, and the
 * output rounded back to the problem's dtype. */
#ifndef MHA_VARIANTS_BF16_PACK_H
#define MHA_VARIANTS_BF16_PACK_H
#include <stdint.h>
#include <string.h>

#include "internal.h"
#include "ukernels.h"

/* One load from every cache line of n rows of `bytes` bytes, rs elements
 * apart: independent loads the core keeps many of in flight, so the packs
 * that follow read L1. A row-by-row pack of rows strided by the other heads
 * (the packed layout, a [B,N,H,d] view: rows 1 KiB apart at H 8 d 64 bf16)
 * held a few of its rows' misses at a time: on the Zen 4 VM pack_q took
 * 29.5k cycles per 64-row block there against 6.6k on contiguous rows, and
 * flash.avx512bf16 ran 0.94x the [B,H,N,d] layout (8 sequences of 3,000,
 * H 8, d 64, causal). */
static inline void touch_rows(const uint16_t *src, int64_t n, int64_t rs, int64_t bytes) {
    for (int64_t i = 0; i < n; i++) {
        const volatile uint8_t *row = (const volatile uint8_t *)(src + i * rs);
        for (int64_t c = 0; c < bytes; c += 64) (void)row[c];
        (void)row[bytes - 1];
    }
}

/* 16 columns [c, c + 16) of one row as bf16 (columns past d read 0). */
static inline __m256i row16_bf16(const uint16_t *row, mha_dtype t, int64_t c, int64_t d) {
    const int n = (int)(d - c < 16 ? d - c : 16);
    if (n <= 0) return _mm256_setzero_si256();
    if (t == MHA_BF16) return _mm256_maskz_loadu_epi16((__mmask16)((1u << n) - 1u), row + c);
    return vf_to_bf16(vf16_load_n(row + c, n));
}

/* Qp[p * ld + i] = (Q[i][2p], Q[i][2p + 1]) for i < n, zero for the padding
 * queries up to ld and for the missing element of an odd head_dim. Once per
 * query block, after a touch of the rows (touch_rows): 16 x 16 blocks of
 * pairs transposed in registers (the pair as one 32-bit lane: vtranspose
 * only moves bits), bf16 rows loaded as they are, fp16 ones rounded to bf16
 * (RNE, as pack_k and pack_v round them). The plain loop it replaced took
 * about 6.6k cycles per block of 64 queries at d 64 on the Zen 4 VM, 10% of
 * a block's time under a window of 128 keys (stop 45). */
static inline void pack_q(int64_t n, int64_t d, const uint16_t *src, int64_t rs, mha_dtype t,
                          uint32_t *dst, int64_t ld) {
    _Static_assert(VW == 16, "pack_q transposes 16 x 16 blocks of pairs");
    const int64_t dh = (d + 1) / 2;
    touch_rows(src, n, rs, d * 2);
    for (int64_t i0 = 0; i0 < ld; i0 += 16)
        for (int64_t p0 = 0; p0 < dh; p0 += 16) {
            const int64_t e = d - 2 * p0; /* elements of the row from pair p0 */
            const __mmask32 m = (__mmask32)(e >= 32 ? ~0u : (((uint64_t)1 << e) - 1));
            vf r[16];
            for (int i = 0; i < 16; i++) {
                if (i0 + i >= n) { /* a padding query: no row to point at */
                    r[i] = vzero();
                    continue;
                }
                const uint16_t *row = src + (i0 + i) * rs;
                r[i] = t == MHA_BF16
                           ? _mm512_castsi512_ps(_mm512_maskz_loadu_epi16(m, row + 2 * p0))
                           : _mm512_castsi512_ps(_mm512_inserti64x4(
                                 _mm512_castsi256_si512(row16_bf16(row, t, 2 * p0, d)),
                                 row16_bf16(row, t, 2 * p0 + 16, d), 1));
            }
            vtranspose(r);
            for (int64_t c = 0; c < 16 && p0 + c < dh; c++)
                _mm512_storeu_ps((float *)(dst + (p0 + c) * ld + i0), r[c]);
        }
}

/* Kp[r][0, ld) = K row r as bf16, columns d..ld (ld >= d) padded with 0. */
static inline void pack_k(int64_t rows, int64_t d, const uint16_t *src, int64_t rs, mha_dtype t,
                          uint16_t *dst, int64_t ld) {
    for (int64_t r = 0; r < rows; r++) {
        const uint16_t *row = src + r * rs;
        uint16_t *out = dst + r * ld;
        if (t == MHA_BF16) {
            for (int64_t c = 0; c < ld; c += 32) {
                const int nl = (int)(d - c < 32 ? d - c : 32),
                          ns = (int)(ld - c < 32 ? ld - c : 32);
                const __m512i v =
                    nl > 0 ? _mm512_maskz_loadu_epi16((__mmask32)(((uint64_t)1 << nl) - 1), row + c)
                           : _mm512_setzero_si512();
                _mm512_mask_storeu_epi16(out + c, (__mmask32)(((uint64_t)1 << ns) - 1), v);
            }
        } else {
            for (int64_t c = 0; c < ld; c += 16) {
                const int nl = (int)(d - c < 16 ? d - c : 16),
                          ns = (int)(ld - c < 16 ? ld - c : 16);
                const __m256i v =
                    nl > 0 ? vf_to_bf16(vf16_load_n(row + c, nl)) : _mm256_setzero_si256();
                _mm256_mask_storeu_epi16(out + c, (__mmask16)((1u << ns) - 1u), v);
            }
        }
    }
}

/* Vp[q][c][2] = (V[2q][c], V[2q + 1][c]) for q < ceil(rows / 2), c < dv:
 * zero past head_dim and for the missing key of an odd block, so the padded
 * pair meets P = 0 with a finite (zero) value. */
static inline void pack_v(int64_t rows, int64_t d, int64_t dv, const uint16_t *src, int64_t rs,
                          mha_dtype t, uint16_t *dst) {
    for (int64_t q = 0; q < (rows + 1) / 2; q++) {
        const uint16_t *a = src + 2 * q * rs, *b = a + rs;
        const int has_b = 2 * q + 1 < rows;
        uint16_t *out = dst + q * 2 * dv;
        for (int64_t c = 0; c < dv; c += VW) {
            const __m256i lo = row16_bf16(a, t, c, d);
            const __m256i hi = has_b ? row16_bf16(b, t, c, d) : _mm256_setzero_si256();
            const vbf both = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
            _mm512_storeu_si512(out + 2 * c, vbf_interleave(both));
        }
    }
}

/* out[i] = O[i] / l[i] in the output dtype (RNE), zeros for the first
 * `blind` rows; l == 0 (every visible score -inf) or NaN gives NaN rows. */
static inline void store_out(int64_t n, int64_t d, const float *o, int64_t ldo, const float *l,
                             int64_t blind, uint16_t *out, int64_t rs, mha_dtype t) {
    for (int64_t i = 0; i < n; i++) {
        const vf inv = i < blind ? vzero() : vset1(1.0f / l[i]);
        for (int64_t c = 0; c < d; c += VW) {
            const int nc = (int)(d - c < VW ? d - c : VW);
            const vf x = i < blind ? vzero() : vmul(vload(o + i * ldo + c), inv);
            const __m256i h = t == MHA_BF16 ? vf_to_bf16(x) : vf_to_f16(x);
            _mm256_mask_storeu_epi16(out + i * rs + c, (__mmask16)((1u << nc) - 1u), h);
        }
    }
}

#endif
