/* gemm_amx.c - the layer's typed projection Y = X W^T + b on AMX tiles: the
 * amx level's ops->linear_half (gemm_bf16.c's contract: X, W, bias and Y of
 * dtype t, bf16 or fp16, fp32 sums, Y rounded RNE to t). One source, built
 * twice like variants/flash_amx.c: on the instructions (mha_linear_half__amx)
 * and on the tile emulation (mha_linear_half__amxemu, the projections of
 * flash.amxemu's layer, so that `forward --kernel flash.amxemu` checks this
 * code on any machine).
 *
 * W (nn.Linear [N][K]) and X are packed once per call into tiles
 * (tile_pack.h: W per 16 output features and 32 of K with its pairs
 * transposed, the B operand; X's rows rounded to bf16, 16 rows x 32 of K,
 * the A operand), the bias into fp32. Per 32 x 32 block of Y, 2 x 2 tiles
 * accumulate over blocks of K into fp32 memory; at the end the bias is
 * added and the rows rounded to t. */
#include <omp.h>
#include <string.h>

#include "dtype.h"
#include "sizes.h"
#include "ukernels.h"

#include "tile.h"
#include "tile_pack.h"

#ifndef __AVX512BF16__
#error "gemm_amx.c needs AVX512_BF16 (its packs and epilogue)"
#endif

/* The loops keep tile loads in the L1d and every tile in the L2: W and X
 * are packed once (in parallel) into 1 KiB tiles; a task is a group of
 * CG_PAIRS column pairs (W's tiles of the group, 192 KiB at K = 768, stay
 * in the L2 over the task) by a chunk of ROW_BLOCKS 32-row blocks; per
 * row block, QG column pairs at a time (their 32 x 64 fp32 accumulators,
 * 8 KiB) and K in blocks of KB_CHUNKS x 32 (the rows' A tiles of a block,
 * 16 KiB, reused by the pairs' B tiles). Measured on the AMX VM
 * (docs/amx.md), bf16 at 1 thread: a 2x2 step whose tile loads come from
 * the L2 takes about 52 cycles per tdpbf16ps, from the L1 30. In one run,
 * the first version (all of K per step, X read in place, W streamed per 32
 * rows) against this one: (4096 x 768) . (768 x 768) 857-889 -> 969-974
 * GFLOP/s, (512 x 768) . (768 x 768) 790-835 -> 937-967, and (512 x 768) .
 * (768 x 2304), whose packed W (3.4 MiB) the L2 cannot hold, 752-761 ->
 * 979-994. K blocks of 4 to 12 chunks and groups of 1 to 4 pairs came
 * within 10% of each other (5 interleaved rounds); 8 and 2 were the best. */
enum {
    KB_CHUNKS = 8, /* K per block, in chunks of 32 */
    QG = 2,        /* column pairs per accumulator group */
    CG_PAIRS = 6,  /* column pairs per task */
    ROW_BLOCKS = 4 /* 32-row blocks per task */
};

/* The pack: W's B tiles [np / 16][kc][16][16] words, the bias as fp32 [np],
 * X's A tiles [mp / 16][kc][16][32] bf16, then per thread the fp32
 * accumulators of QG column pairs ([QG][4 tiles]). */
typedef struct {
    int64_t kc, np, mp;
    size_t wp, bias, xa, cb, per_thread, total;
} amx_lin_plan;

static amx_lin_plan lin_plan(int64_t M, int64_t N, int64_t K, int threads) {
    amx_lin_plan h;
    h.kc = (K + 31) / 32;
    h.np = (N + 31) / 32 * 32;
    h.mp = (M + 31) / 32 * 32;
    h.wp = mha_align64(mha_mul_sz(mha_mul_sz((size_t)h.np, (size_t)h.kc), 32 * 2));
    h.bias = mha_align64(mha_mul_sz((size_t)h.np, 4));
    h.xa = mha_align64(mha_mul_sz(mha_mul_sz((size_t)h.mp, (size_t)h.kc), 32 * 2));
    h.cb = (size_t)QG * 4096;
    h.per_thread = h.cb;
    h.total = mha_add_sz(mha_add_sz(mha_add_sz(h.wp, h.bias), h.xa),
                         mha_mul_sz((size_t)(threads > 0 ? threads : 1), h.per_thread));
    return h;
}

size_t MHA_SYM(linear_half_pack_bytes)(int64_t M, int64_t N, int64_t K, int threads) {
    return lin_plan(M, N, K, threads).total;
}

void MHA_SYM(linear_half)(int64_t M, int64_t N, int64_t K, mha_dtype t, const void *x, int64_t ldx,
                          const void *w, int64_t ldw, const void *bias, void *y, int64_t ldy,
                          void *pack, int threads) {
    const amx_lin_plan h = lin_plan(M, N, K, threads);
    const int64_t kc = h.kc, np = h.np, n16 = np / 16, n32 = np / 32, blocks = h.mp / 32;
    const int64_t groups = (n32 + CG_PAIRS - 1) / CG_PAIRS,
                  chunks = (blocks + ROW_BLOCKS - 1) / ROW_BLOCKS;
    const uint16_t *xs = x, *ws = w, *bs = bias;
    uint16_t *ys = y;
    char *pk = pack;
    uint32_t *wp = (uint32_t *)pk;
    float *bp = (float *)(pk + h.wp);
    uint16_t *xa = (uint16_t *)(pk + h.wp + h.bias);
#pragma omp parallel num_threads(threads)
    {
        float *cb =
            (float *)(pk + h.wp + h.bias + h.xa + (size_t)omp_get_thread_num() * h.per_thread);
#pragma omp for schedule(static) nowait
        for (int64_t p = 0; p < n16; p++) {
            for (int64_t c = 0; c < kc; c++)
                tile_pack_b(ws + 16 * p * ldw, ldw, N - 16 * p, t, K, c, wp + (p * kc + c) * 256);
            for (int64_t j = 0; j < 16; j++)
                bp[16 * p + j] = bs && 16 * p + j < N ? mha_load_elem(bs, t, 16 * p + j) : 0.0f;
        }
        /* X's rows as A tiles, rounded to bf16, K padded with zeros and rows
         * past M zero (read in place, 16 rows ldx apart, the same products
         * ran 25-40% slower) */
#pragma omp for schedule(static)
        for (int64_t r = 0; r < h.mp; r++)
            for (int64_t c = 0; c < kc; c++)
                _mm512_store_si512(xa + ((r / 16) * kc + c) * 512 + (r % 16) * 32,
                                   r < M ? tile_row32_bf16(xs + r * ldx, t, 32 * c, K)
                                         : _mm512_setzero_si512());
        /* the implicit barrier: every tile is packed before any task reads it */
        tile_configure_all(); /* per thread, before its first tile instruction */
#pragma omp for collapse(2) schedule(static)
        for (int64_t gq = 0; gq < groups; gq++) {
            for (int64_t rc = 0; rc < chunks; rc++) {
                const int64_t qe = (gq + 1) * CG_PAIRS < n32 ? (gq + 1) * CG_PAIRS : n32;
                for (int64_t rb = rc * ROW_BLOCKS; rb < (rc + 1) * ROW_BLOCKS && rb < blocks;
                     rb++) {
                    const int64_t m0 = 32 * rb, rows = M - m0 < 32 ? M - m0 : 32;
                    const uint16_t *a0 = xa + 2 * rb * kc * 512, *a1 = a0 + kc * 512;
                    for (int64_t q0 = gq * CG_PAIRS; q0 < qe; q0 += QG) {
                        const int64_t q1 = q0 + QG < qe ? q0 + QG : qe;
                        for (int64_t k0 = 0; k0 < kc; k0 += KB_CHUNKS) {
                            const int64_t nk = kc - k0 < KB_CHUNKS ? kc - k0 : KB_CHUNKS;
                            for (int64_t q = q0; q < q1; q++) {
                                const uint32_t *b0 = wp + (2 * q * kc + k0) * 256;
                                float *c = cb + 1024 * (q - q0);
                                tile_mul_2x2(a0 + 512 * k0, a1 + 512 * k0, b0, b0 + kc * 256, 256,
                                             nk, c, c + 256, c + 512, c + 768, k0 == 0);
                            }
                        }
                        for (int64_t q = q0; q < q1; q++) { /* + bias, rounded to t */
                            const int64_t n0 = 32 * q, nn = N - n0 < 32 ? N - n0 : 32;
                            const float *c = cb + 1024 * (q - q0);
                            for (int64_t r = 0; r < rows; r++)
                                for (int64_t g = 0; g < 2 && 16 * g < nn; g++) {
                                    const int ncol = (int)(nn - 16 * g < 16 ? nn - 16 * g : 16);
                                    const vf v =
                                        vadd(vload(c + (r / 16) * 512 + g * 256 + (r % 16) * 16),
                                             vload(bp + n0 + 16 * g));
                                    const __m256i hv = t == MHA_BF16 ? vf_to_bf16(v) : vf_to_f16(v);
                                    _mm256_mask_storeu_epi16(ys + (m0 + r) * ldy + n0 + 16 * g,
                                                             (__mmask16)((1u << ncol) - 1u), hv);
                                }
                        }
                    }
                }
            }
        }
        MHA_TILE_RELEASE();
    }
}
