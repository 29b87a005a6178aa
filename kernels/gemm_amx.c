/* gemm_amx.c - the layer's typed projection Y = X W^T + b on AMX tiles: the
 * amx level's ops->linear_half (gemm_bf16.c's contract: X, W, bias and Y of
 * dtype t, bf16 or fp16, fp32 sums, Y rounded RNE to t). One source, built
 * twice like variants/flash_amx.c: on the instructions (mha_linear_half__amx)
 * and on the tile emulation (mha_linear_half__amxemu, the projections of
 * flash.amxemu's layer, so that `forward --kernel flash.amxemu` checks this
 * code on any machine).
 *
 * W (nn.Linear [N][K]) is packed once per call into B tiles (tile_pack.h:
 * per 16 output features and 32 of K, the pairs transposed), the bias into
 * fp32. X is read in place as A tiles (16 rows x 32 of K) when it is bf16
 * with K a multiple of 32 (but for a last block of fewer than 32 rows), else
 * each task rounds its rows into a padded bf16 copy first. A task is 128 rows of X by 32 output
 * features: per 32 x 32 block, 2 x 2 tiles accumulate over all of K (a long reduction: one store of
 * the four accumulators per K / 32 steps), then the fp32 block plus the bias is rounded to t. */
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

enum { AMX_LIN_ROWS = 128 }; /* rows of X per task */

/* The pack: W's B tiles [np / 16][kc][16][16] words, the bias as fp32 [np],
 * then per thread the bf16 copy of a task's rows ([AMX_LIN_ROWS / 16][kc]
 * [16][32]) and the 32 x 32 fp32 result block (four tiles). */
typedef struct {
    int64_t kc, np;
    size_t wp, bias, xa, cb, per_thread, total;
} amx_lin_plan;

static amx_lin_plan lin_plan(int64_t N, int64_t K, int threads) {
    amx_lin_plan h;
    h.kc = (K + 31) / 32;
    h.np = (N + 31) / 32 * 32;
    h.wp = mha_align64(mha_mul_sz(mha_mul_sz((size_t)h.np, (size_t)h.kc), 32 * 2));
    h.bias = mha_align64(mha_mul_sz((size_t)h.np, 4));
    h.xa = mha_align64(mha_mul_sz(mha_mul_sz(AMX_LIN_ROWS, (size_t)h.kc), 32 * 2));
    h.cb = 4 * 1024;
    h.per_thread = mha_add_sz(h.xa, h.cb);
    h.total = mha_add_sz(mha_add_sz(h.wp, h.bias),
                         mha_mul_sz((size_t)(threads > 0 ? threads : 1), h.per_thread));
    return h;
}

size_t MHA_SYM(linear_half_pack_bytes)(int64_t N, int64_t K, int threads) {
    return lin_plan(N, K, threads).total;
}

static void configure_tiles(void) {
    mha_tile_config cfg;
    mha_tile_config_init(&cfg);
    for (int t = 0; t < MHA_TILE_COUNT; t++) mha_tile_config_set(&cfg, t, 16, 64);
    MHA_TILE_CONFIGURE(&cfg);
}

/* c[0..3] (16 x 16 fp32 each: rows 0-15 x cols 0-15, 0-15 x 16-31, 16-31 x
 * 0-15, 16-31 x 16-31) = A rows . B columns over n chunks of 32: A_r's
 * chunk i at a[r] + i * astep (bf16, rows lda elements apart), B_c's at
 * b[c] + 256 i (words, rows 64 bytes apart). */
static void block_2x2(const uint16_t *a0, const uint16_t *a1, int64_t astep, int64_t lda,
                      const uint32_t *b0, const uint32_t *b1, int64_t n, float *c) {
    MHA_TILE_ZERO(0);
    MHA_TILE_ZERO(1);
    MHA_TILE_ZERO(2);
    MHA_TILE_ZERO(3);
    for (int64_t i = 0; i < n; i++) {
        MHA_TILE_LOAD(4, a0 + astep * i, lda * 2);
        MHA_TILE_LOAD(6, b0 + 256 * i, 64);
        MHA_TILE_DPBF16PS(0, 4, 6);
        MHA_TILE_LOAD(7, b1 + 256 * i, 64);
        MHA_TILE_DPBF16PS(1, 4, 7);
        MHA_TILE_LOAD(5, a1 + astep * i, lda * 2);
        MHA_TILE_DPBF16PS(2, 5, 6);
        MHA_TILE_DPBF16PS(3, 5, 7);
    }
    MHA_TILE_STORE(0, c, 64);
    MHA_TILE_STORE(1, c + 256, 64);
    MHA_TILE_STORE(2, c + 512, 64);
    MHA_TILE_STORE(3, c + 768, 64);
}

void MHA_SYM(linear_half)(int64_t M, int64_t N, int64_t K, mha_dtype t, const void *x, int64_t ldx,
                          const void *w, int64_t ldw, const void *bias, void *y, int64_t ldy,
                          void *pack, int threads) {
    const amx_lin_plan h = lin_plan(N, K, threads);
    const int64_t kc = h.kc, np = h.np, n16 = np / 16, n32 = np / 32;
    const int64_t row_tasks = (M + AMX_LIN_ROWS - 1) / AMX_LIN_ROWS;
    const int direct = t == MHA_BF16 && K % 32 == 0;
    const uint16_t *xs = x, *ws = w, *bs = bias;
    uint16_t *ys = y;
    char *pk = pack;
    uint32_t *wp = (uint32_t *)pk;
    float *bp = (float *)(pk + h.wp);
#pragma omp parallel num_threads(threads)
    {
        char *mine = pk + h.wp + h.bias + (size_t)omp_get_thread_num() * h.per_thread;
        uint16_t *xa = (uint16_t *)mine;
        float *cb = (float *)(mine + h.xa);
#pragma omp for schedule(static)
        for (int64_t p = 0; p < n16; p++) {
            for (int64_t c = 0; c < kc; c++)
                tile_pack_b(ws + 16 * p * ldw, ldw, N - 16 * p, t, K, c, wp + (p * kc + c) * 256);
            for (int64_t j = 0; j < 16; j++)
                bp[16 * p + j] = bs && 16 * p + j < N ? mha_load_elem(bs, t, 16 * p + j) : 0.0f;
        } /* the implicit barrier: every panel is packed before any task reads it */
        configure_tiles(); /* per thread, before its first tile instruction */
        int64_t have = -1; /* the row task whose rows xa holds */
#pragma omp for collapse(2) schedule(static)
        for (int64_t rt = 0; rt < row_tasks; rt++) {
            for (int64_t q = 0; q < n32; q++) {
                const int64_t m0 = rt * AMX_LIN_ROWS;
                const int64_t mm = M - m0 < AMX_LIN_ROWS ? M - m0 : AMX_LIN_ROWS;
                /* rows into xa: all of the task's unless X is read in place,
                 * then only a last block of fewer than 32 (a tile load of
                 * in-place rows past M would read past X); rows past mm 0 */
                if (have != rt) {
                    const int64_t from = direct ? mm / 32 * 32 : 0, to = (mm + 31) / 32 * 32;
                    for (int64_t r = from; r < to; r++)
                        for (int64_t c = 0; c < kc; c++)
                            _mm512_store_si512(
                                xa + ((r / 16) * kc + c) * 512 + (r % 16) * 32,
                                r < mm ? tile_row32_bf16(xs + (m0 + r) * ldx, t, 32 * c, K)
                                       : _mm512_setzero_si512());
                    have = rt;
                }
                const uint32_t *b0 = wp + (2 * q) * kc * 256, *b1 = b0 + kc * 256;
                const int64_t n0 = 32 * q, nn = N - n0 < 32 ? N - n0 : 32;
                for (int64_t r0 = 0; r0 < mm; r0 += 32) {
                    const int64_t rows = mm - r0 < 32 ? mm - r0 : 32;
                    if (direct && rows == 32) { /* A tiles: 16 rows of X, ldx apart */
                        const uint16_t *a0 = xs + (m0 + r0) * ldx;
                        block_2x2(a0, a0 + 16 * ldx, 32, ldx, b0, b1, kc, cb);
                    } else {
                        const uint16_t *a0 = xa + (r0 / 16) * kc * 512;
                        block_2x2(a0, a0 + kc * 512, 512, 32, b0, b1, kc, cb);
                    }
                    for (int64_t r = 0; r < rows; r++)
                        for (int64_t g = 0; g < 2 && 16 * g < nn; g++) {
                            const int nc = (int)(nn - 16 * g < 16 ? nn - 16 * g : 16);
                            const vf v = vadd(vload(cb + (r / 16) * 512 + g * 256 + (r % 16) * 16),
                                              vload(bp + n0 + 16 * g));
                            const __m256i hv = t == MHA_BF16 ? vf_to_bf16(v) : vf_to_f16(v);
                            _mm256_mask_storeu_epi16(ys + (m0 + r0 + r) * ldy + n0 + 16 * g,
                                                     (__mmask16)((1u << nc) - 1u), hv);
                        }
                }
            }
        }
        MHA_TILE_RELEASE();
    }
}
