/* tile_pack.h - the packs of the AMX code (variants/flash_amx.c,
 * kernels/gemm_amx.c; compiled with AVX512_BF16, after vec.h): rows of a
 * bf16 or fp16 matrix as 32 bf16 (fp16 rounded, RNE), and a 16 x 32 block
 * of such rows turned into a VNNI B tile: 16 rows of 16 dwords where dword
 * (j, n) holds elements (2j, 2j + 1) of row n, i.e. the block's pairs
 * transposed 16 x 16. Every tile is 1 KiB, rows 64 bytes apart. */
#ifndef MHA_KERNELS_TILE_PACK_H
#define MHA_KERNELS_TILE_PACK_H
#include <stdint.h>

#include "mha.h"

/* Columns [c0, c0 + 32) of one row as 32 bf16 (columns past d read 0). */
static inline __m512i tile_row32_bf16(const uint16_t *row, mha_dtype t, int64_t c0, int64_t d) {
    const int64_t n = d - c0 < 32 ? d - c0 : 32;
    if (n <= 0) return _mm512_setzero_si512();
    if (t == MHA_BF16)
        return _mm512_maskz_loadu_epi16((__mmask32)(((uint64_t)1 << n) - 1), row + c0);
    const __m256i lo = vf_to_bf16(vf16_load_n(row + c0, n < 16 ? (int)n : 16));
    const __m256i hi =
        n > 16 ? vf_to_bf16(vf16_load_n(row + c0 + 16, (int)n - 16)) : _mm256_setzero_si256();
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* The B tile of rows [0, 16) of m (row stride ld elements; rows at or past
 * nrows read as zeros) and columns [32 c, 32 c + 32) (past d zeros): dst
 * gets 256 dwords, 64-byte aligned. */
static inline void tile_pack_b(const uint16_t *m, int64_t ld, int64_t nrows, mha_dtype t, int64_t d,
                               int64_t c, uint32_t *dst) {
    vf r[16];
    for (int n = 0; n < 16; n++)
        r[n] = n < nrows ? _mm512_castsi512_ps(tile_row32_bf16(m + n * ld, t, 32 * c, d)) : vzero();
    vtranspose(r); /* row n: row n's 16 pairs -> row j: pair j of the 16 rows */
    for (int j = 0; j < 16; j++) _mm512_store_si512(dst + 16 * j, _mm512_castps_si512(r[j]));
}

#endif
