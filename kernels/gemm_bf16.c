/* gemm_bf16.c - the layer's typed projection Y = X W^T + b on the bf16 dot
 * product (vdpbf16ps), built for the levels with AVX512_BF16 and reached as
 * ops->linear_half. gemm.c's design with bf16 pairs along k: W (nn.Linear
 * [N][K]) is packed once per call into panels of MHA_NR output features,
 * Wp[k pair][column] as 32-bit words (W[n][2p], W[n][2p+1]), so a micro-tile
 * loads MHA_NV vectors of 16 pairs and broadcasts one pair of X per row; the
 * MHA_MR x MHA_NV accumulators are fp32 and start at the bias; the epilogue
 * rounds them (RNE) to the layer dtype. fp16 X and W are rounded to bf16
 * while packing (a second rounding, see harness/check.c); bf16 X with an
 * even K is read in place. */
#include <omp.h>
#include <string.h>

#include "dtype.h"
#include "sizes.h"
#include "ukernels.h"

#ifndef __AVX512BF16__
#error "gemm_bf16.c needs AVX512_BF16 (meson builds it only for such levels)"
#endif

#define ALWAYS_INLINE static inline __attribute__((always_inline))

_Static_assert(MHA_MR == 6 && MHA_NV == 4 && VW == 16, "the bf16 tiles are AVX-512's 6 x 4");

enum { LINEAR_ROWS = 8 * MHA_MR }; /* rows of X per task, as gemm.c's linear */

/* The pack: panels of [kp][MHA_NR] words, then the bias of every panel as
 * fp32 (MHA_NR each, zero past N), then per thread a bf16 copy of a row
 * block of X (LINEAR_ROWS x 2 kp) and 16 rows of kp words for packing W. */
typedef struct {
    int64_t kp, panels;
    size_t wp, bias, xb, rows, per_thread, total;
} half_plan;

static half_plan plan(int64_t N, int64_t K, int threads) {
    half_plan h;
    h.kp = (K + 1) / 2;
    h.panels = (N + MHA_NR - 1) / MHA_NR;
    h.wp = mha_align64((size_t)(h.panels * h.kp * MHA_NR) * 4);
    h.bias = mha_align64((size_t)(h.panels * MHA_NR) * 4);
    h.xb = mha_align64((size_t)(LINEAR_ROWS * 2 * h.kp) * 2);
    h.rows = mha_align64((size_t)(16 * h.kp) * 4);
    h.per_thread = h.xb + h.rows;
    h.total = h.wp + h.bias + (size_t)(threads > 0 ? threads : 1) * h.per_thread;
    return h;
}

size_t MHA_SYM(linear_half_pack_bytes)(int64_t M, int64_t N, int64_t K, int threads) {
    (void)M; /* X is copied a row block per thread */
    return plan(N, K, threads).total;
}

/* Row r of a [rows][K] matrix of dtype t as 2 kp bf16 (fp16 rounded through
 * fp32, an odd K's last pair padded with 0). */
static void row_bf16(const uint16_t *src, int64_t K, int64_t kp, mha_dtype t, uint16_t *dst) {
    for (int64_t c = 0; c < 2 * kp; c += 16) {
        const int n = (int)(K - c < 16 ? K - c : 16), ns = (int)(2 * kp - c < 16 ? 2 * kp - c : 16);
        __m256i h;
        if (t == MHA_BF16)
            h = _mm256_maskz_loadu_epi16((__mmask16)((1u << n) - 1u), src + c);
        else
            h = vf_to_bf16(vf16_load_n(src + c, n));
        _mm256_mask_storeu_epi16(dst + c, (__mmask16)((1u << ns) - 1u), h);
    }
}

/* Panel of rows [n0, n0 + nn) of W: dst[p][j] = pair p of row n0 + j, zero
 * for j >= nn. 16 rows at a time (as words; converted first unless bf16 with
 * an even K) transposed 16 x 16 in registers. */
static void pack_panel(int64_t nn, int64_t K, int64_t kp, mha_dtype t, const uint16_t *w,
                       int64_t ldw, uint32_t *dst, uint32_t *tmp) {
    const int direct = t == MHA_BF16 && K % 2 == 0;
    for (int64_t j0 = 0; j0 < MHA_NR; j0 += 16) {
        const void *rows[16];
        for (int i = 0; i < 16; i++) {
            const int64_t n = j0 + i;
            if (n >= nn) {
                rows[i] = NULL;
            } else if (direct) {
                rows[i] = w + n * ldw;
            } else {
                row_bf16(w + n * ldw, K, kp, t, (uint16_t *)(tmp + i * kp));
                rows[i] = tmp + i * kp;
            }
        }
        for (int64_t p0 = 0; p0 < kp; p0 += 16) {
            const int np = (int)(kp - p0 < 16 ? kp - p0 : 16);
            const __mmask16 m = (__mmask16)((1u << np) - 1u);
            vf r[16];
            for (int i = 0; i < 16; i++)
                r[i] = rows[i] ? _mm512_castsi512_ps(
                                     _mm512_maskz_loadu_epi32(m, (const uint32_t *)rows[i] + p0))
                               : vzero();
            vtranspose(r);
            for (int c = 0; c < np; c++)
                _mm512_storeu_si512(dst + (p0 + c) * MHA_NR + j0, _mm512_castps_si512(r[c]));
        }
    }
}

/* One R x NV tile: Y[r][0, ncols) = bias + sum_p X pair (r, p) . Wp[p],
 * rounded to t. a: bf16 rows of stride lda (pairs broadcast), b: the panel. */
ALWAYS_INLINE void tile(const int R, const int NV, int64_t kp, const uint16_t *a, int64_t lda,
                        const uint32_t *b, const float *bias, uint16_t *y, int64_t ldy, int ncols,
                        mha_dtype t) {
    vf acc[6][4];
    for (int v = 0; v < NV; v++) {
        const vf bv = vload(bias + v * VW);
        for (int r = 0; r < R; r++) acc[r][v] = bv;
    }
    for (int64_t p = 0; p < kp; p++) {
        vbf bv[4];
        for (int v = 0; v < NV; v++) bv[v] = _mm512_load_si512(b + p * MHA_NR + v * VW);
        for (int r = 0; r < R; r++) {
            const vbf av = vbf_pair_bcast(a + r * lda + 2 * p);
            for (int v = 0; v < NV; v++) acc[r][v] = vdot_bf16(acc[r][v], av, bv[v]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int v = 0; v < NV; v++) {
            const int n = ncols - v * VW;
            if (n <= 0) break;
            const __m256i h = t == MHA_BF16 ? vf_to_bf16(acc[r][v]) : vf_to_f16(acc[r][v]);
            _mm256_mask_storeu_epi16(y + r * ldy + v * VW,
                                     (__mmask16)(n >= 16 ? 0xffffu : (1u << n) - 1u), h);
        }
}

#define HT_CASE(R, N)                                                                              \
    case (R)*8 + (N):                                                                              \
        tile(R, N, kp, a, lda, b, bias, y, ldy, ncols, t);                                         \
        return;
#define HT_ROW(R) HT_CASE(R, 1) HT_CASE(R, 2) HT_CASE(R, 3) HT_CASE(R, 4)

static void tile_dispatch(int rows, int nv, int64_t kp, const uint16_t *a, int64_t lda,
                          const uint32_t *b, const float *bias, uint16_t *y, int64_t ldy, int ncols,
                          mha_dtype t) {
    switch (rows * 8 + nv) {
        HT_ROW(1) HT_ROW(2) HT_ROW(3) HT_ROW(4) HT_ROW(5) HT_ROW(6) default : break;
    }
}

void MHA_SYM(linear_half)(int64_t M, int64_t N, int64_t K, mha_dtype t, const void *x, int64_t ldx,
                          const void *w, int64_t ldw, const void *bias, void *y, int64_t ldy,
                          void *pack, int threads) {
    const half_plan h = plan(N, K, threads);
    const int64_t kp = h.kp, panels = h.panels;
    const int64_t row_tasks = (M + LINEAR_ROWS - 1) / LINEAR_ROWS;
    const int direct = t == MHA_BF16 && K % 2 == 0;
    const uint16_t *xs = x, *ws = w, *bs = bias;
    uint16_t *ys = y;
    char *pk = pack;
    uint32_t *wp = (uint32_t *)pk;
    float *bp = (float *)(pk + h.wp);
#pragma omp parallel num_threads(threads)
    {
        char *mine = pk + h.wp + h.bias + (size_t)omp_get_thread_num() * h.per_thread;
        uint16_t *xb = (uint16_t *)mine;
        uint32_t *tmp = (uint32_t *)(mine + h.xb);
#pragma omp for schedule(static)
        for (int64_t p = 0; p < panels; p++) {
            const int64_t n0 = p * MHA_NR, nn = N - n0 < MHA_NR ? N - n0 : MHA_NR;
            pack_panel(nn, K, kp, t, ws + n0 * ldw, ldw, wp + p * kp * MHA_NR, tmp);
            for (int64_t j = 0; j < MHA_NR; j++)
                bp[p * MHA_NR + j] = bs && j < nn ? mha_load_elem(bs, t, n0 + j) : 0.0f;
        }
        int64_t have = -1; /* the row task whose rows xb holds */
#pragma omp for collapse(2) schedule(static)
        for (int64_t rt = 0; rt < row_tasks; rt++) {
            for (int64_t p = 0; p < panels; p++) {
                const int64_t m0 = rt * LINEAR_ROWS;
                const int64_t mm = M - m0 < LINEAR_ROWS ? M - m0 : LINEAR_ROWS;
                const int64_t n0 = p * MHA_NR, nn = N - n0 < MHA_NR ? N - n0 : MHA_NR;
                const uint16_t *a = xs + m0 * ldx;
                int64_t lda = ldx;
                if (!direct) {
                    if (have != rt)
                        for (int64_t r = 0; r < mm; r++)
                            row_bf16(xs + (m0 + r) * ldx, K, kp, t, xb + r * 2 * kp);
                    have = rt;
                    a = xb;
                    lda = 2 * kp;
                }
                const int nv = (int)((nn + VW - 1) / VW);
                for (int64_t r0 = 0; r0 < mm; r0 += MHA_MR) {
                    const int r = (int)(mm - r0 < MHA_MR ? mm - r0 : MHA_MR);
                    tile_dispatch(r, nv, kp, a + r0 * lda, lda, wp + p * kp * MHA_NR,
                                  bp + p * MHA_NR, ys + (m0 + r0) * ldy + n0, ldy, (int)nn, t);
                }
            }
        }
    }
}
