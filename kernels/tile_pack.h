/* tile_pack.h - what the AMX code shares (variants/flash_amx.c,
 * kernels/gemm_amx.c; compiled with AVX512_BF16, after vec.h and tile.h):
 * rows of a bf16 or fp16 matrix as 32 bf16 (fp16 rounded, RNE), a 16 x 32
 * block of such rows turned into a VNNI B tile (16 rows of 16 dwords where
 * dword (j, n) holds elements (2j, 2j + 1) of row n, i.e. the block's pairs
 * transposed 16 x 16), the tile configuration and the 2 x 2 tile step.
 * Every tile is 1 KiB, rows 64 bytes apart. */
#ifndef MHA_KERNELS_TILE_PACK_H
#define MHA_KERNELS_TILE_PACK_H
#include <stdint.h>

#include "mha.h"
#include "tile.h"

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

/* tile_pack_b_rows where all 16 rows are bf16 and hold columns [col, col +
 * 32): the transpose's first two steps done by the loads. Register a[s] of
 * dword group c takes, in its 128-bit lane L, dwords [4c, 4c + 4) of row
 * 4L + s (a broadcast and three merging broadcasts, each a load); a 4 x 4
 * transpose within the lanes of a[0..3] then gives B rows 4c .. 4c + 3.
 * 32 shuffles and 48 merges per tile against the register transpose's 64
 * shuffles (vtranspose), all of them on the one shuffle port there. */
static inline void tile_pack_b_rows_bf16(const uint16_t *const rows[16], int64_t col,
                                         uint32_t *dst) {
    for (int c = 0; c < 4; c++) {
        __m512i a[4];
        for (int s = 0; s < 4; s++) {
            const uint16_t *at = rows[s] + col + 8 * c;
            __m512i t = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)at));
            for (int lane = 1; lane < 4; lane++)
                t = _mm512_mask_broadcast_i32x4(
                    t, (__mmask16)(0xf << (4 * lane)),
                    _mm_loadu_si128((const __m128i *)(rows[4 * lane + s] + col + 8 * c)));
            a[s] = t;
        }
        const __m512i u0 = _mm512_unpacklo_epi32(a[0], a[1]),
                      u1 = _mm512_unpackhi_epi32(a[0], a[1]),
                      u2 = _mm512_unpacklo_epi32(a[2], a[3]),
                      u3 = _mm512_unpackhi_epi32(a[2], a[3]);
        _mm512_store_si512(dst + 16 * (4 * c), _mm512_unpacklo_epi64(u0, u2));
        _mm512_store_si512(dst + 16 * (4 * c + 1), _mm512_unpackhi_epi64(u0, u2));
        _mm512_store_si512(dst + 16 * (4 * c + 2), _mm512_unpacklo_epi64(u1, u3));
        _mm512_store_si512(dst + 16 * (4 * c + 3), _mm512_unpackhi_epi64(u1, u3));
    }
}

/* The B tile of 16 rows given by pointer (a NULL row reads as zeros; a
 * paged KV cache's keys lie wherever its table puts them) and columns
 * [32 c, 32 c + 32) (past d zeros): dst gets 256 dwords, 64-byte aligned.
 * Whole bf16 rows take tile_pack_b_rows_bf16 (flash_amx.c's pack_kv_chunk
 * has what it saved); the rest (fp16, a tail of d, a missing row) converts
 * and masks row by row. */
static inline void tile_pack_b_rows(const uint16_t *const rows[16], mha_dtype t, int64_t d,
                                    int64_t c, uint32_t *dst) {
    int whole = t == MHA_BF16 && 32 * c + 32 <= d;
    for (int n = 0; n < 16 && whole; n++) whole = rows[n] != NULL;
    if (whole) {
        tile_pack_b_rows_bf16(rows, 32 * c, dst);
        return;
    }
    vf r[16];
    for (int n = 0; n < 16; n++)
        r[n] = rows[n] ? _mm512_castsi512_ps(tile_row32_bf16(rows[n], t, 32 * c, d)) : vzero();
    vtranspose(r); /* row n: row n's 16 pairs -> row j: pair j of the 16 rows */
    for (int j = 0; j < 16; j++) _mm512_store_si512(dst + 16 * j, _mm512_castps_si512(r[j]));
}

/* tile_pack_b_rows of rows [0, 16) of m (row stride ld elements; rows at or
 * past nrows read as zeros). */
static inline void tile_pack_b(const uint16_t *m, int64_t ld, int64_t nrows, mha_dtype t, int64_t d,
                               int64_t c, uint32_t *dst) {
    const uint16_t *rows[16];
    for (int n = 0; n < 16; n++) rows[n] = n < nrows ? m + n * ld : NULL;
    tile_pack_b_rows(rows, t, d, c, dst);
}

/* Loads the configuration every kernel here uses: all 8 tiles 16 rows of
 * 64 bytes. Per thread, before its first tile instruction (and never a
 * configuration other code left). */
static inline void tile_configure_all(void) {
    mha_tile_config cfg;
    mha_tile_config_init(&cfg);
    for (int t = 0; t < MHA_TILE_COUNT; t++) mha_tile_config_set(&cfg, t, 16, 64);
    MHA_TILE_CONFIGURE(&cfg);
}

/* Four 16 x 16 fp32 tiles c0..c3 = (zero ? 0 : c) + A_0 . B_0, A_0 . B_1,
 * A_1 . B_0, A_1 . B_1 over n chunks of 32 (tiles 0-3 accumulate, 4-5 hold
 * A, 6-7 B): A_r's chunk i at a_r + 512 i (bf16), B_c's at b_c + bstep i
 * (words). Four independent accumulators keep the unit busy (a product's
 * latency is about three of its issue intervals: ../shared/AMX.md). */
static inline void tile_mul_2x2(const uint16_t *a0, const uint16_t *a1, const uint32_t *b0,
                                const uint32_t *b1, int64_t bstep, int64_t n, float *c0, float *c1,
                                float *c2, float *c3, int zero) {
    if (zero) {
        MHA_TILE_ZERO(0);
        MHA_TILE_ZERO(1);
        MHA_TILE_ZERO(2);
        MHA_TILE_ZERO(3);
    } else {
        MHA_TILE_LOAD(0, c0, 64);
        MHA_TILE_LOAD(1, c1, 64);
        MHA_TILE_LOAD(2, c2, 64);
        MHA_TILE_LOAD(3, c3, 64);
    }
    for (int64_t i = 0; i < n; i++) {
        MHA_TILE_LOAD(4, a0 + 512 * i, 64);
        MHA_TILE_LOAD(6, b0 + bstep * i, 64);
        MHA_TILE_DPBF16PS(0, 4, 6);
        MHA_TILE_LOAD(7, b1 + bstep * i, 64);
        MHA_TILE_DPBF16PS(1, 4, 7);
        MHA_TILE_LOAD(5, a1 + 512 * i, 64);
        MHA_TILE_DPBF16PS(2, 5, 6);
        MHA_TILE_DPBF16PS(3, 5, 7);
    }
    MHA_TILE_STORE(0, c0, 64);
    MHA_TILE_STORE(1, c1, 64);
    MHA_TILE_STORE(2, c2, 64);
    MHA_TILE_STORE(3, c3, 64);
}

#endif
