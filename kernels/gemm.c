/* gemm.c - the register-blocked GEMM micro-kernel (MHA_MR rows x MHA_NV
 * vectors held in registers, accumulating over k), its driver, the packing
 * helper, and the layer's linear projection built on them. Compiled per ISA. */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "ukernels.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* GCC 12 cannot see that every init mode writes acc[0..R)[0..NV) before use
 * in the row-scale branch of some constant-propagated clones. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
/* acc[r][v] += sum_k A(r, k) B(k, v-th vector): the register-blocked inner
 * loop every tile shares (the last B vector masked to tail lanes if BT). */
ALWAYS_INLINE void accumulate(const int R, const int NV, const int BT, vf acc[6][4], int tail,
                              int64_t kc, const float *a, int64_t a_rs, int64_t a_ks,
                              const float *b, int64_t ldb) {
    for (int64_t k = 0; k < kc; k++) {
        vf bv[4];
        for (int v = 0; v < NV; v++)
            bv[v] = (BT && v == NV - 1) ? vloadu_n(b + k * ldb + v * VW, tail)
                                        : vloadu(b + k * ldb + v * VW);
        for (int r = 0; r < R; r++) {
            const vf ar = vset1(a[r * a_rs + k * a_ks]);
            for (int v = 0; v < NV; v++) acc[r][v] = vfma(ar, bv[v], acc[r][v]);
        }
    }
}

/* One R x NV tile; R, NV and BT (mask the last B vector) are compile-time
 * constants at every call site, so the accumulators live in registers. */
ALWAYS_INLINE void tile(const int R, const int NV, const int BT, int64_t ncols, int64_t kc,
                        const float *a, int64_t a_rs, int64_t a_ks, const float *b, int64_t ldb,
                        float *c, int64_t ldc, int init, const float *vec) {
    vf acc[6][4];
    const int tail = (int)(ncols - (int64_t)(NV - 1) * VW); /* lanes in the last vector */
    for (int r = 0; r < R;
         r++) /* dead for the modes that load C; keeps -Wmaybe-uninitialized quiet */
        for (int v = 0; v < NV; v++) acc[r][v] = vzero();
    if (init == MHA_INIT_ZERO) {
        /* already zero */
    } else if (init == MHA_INIT_BIAS) {
        for (int v = 0; v < NV; v++) {
            const vf bv = v < NV - 1 ? vloadu(vec + v * VW) : vloadu_n(vec + v * VW, tail);
            for (int r = 0; r < R; r++) acc[r][v] = bv;
        }
    } else {
        for (int r = 0; r < R; r++)
            for (int v = 0; v < NV; v++)
                acc[r][v] = v < NV - 1 ? vloadu(c + r * ldc + v * VW)
                                       : vloadu_n(c + r * ldc + v * VW, tail);
        if (init == MHA_INIT_SCALE) {
            for (int v = 0; v < NV; v++) {
                const vf s = v < NV - 1 ? vloadu(vec + v * VW) : vloadu_n(vec + v * VW, tail);
                for (int r = 0; r < R; r++) acc[r][v] = vmul(acc[r][v], s);
            }
        } else if (init == MHA_INIT_ROWSCALE) {
            for (int r = 0; r < R; r++) {
                const vf s = vset1(vec[r]);
                for (int v = 0; v < NV; v++) acc[r][v] = vmul(acc[r][v], s);
            }
        }
    }
    accumulate(R, NV, BT, acc, tail, kc, a, a_rs, a_ks, b, ldb);
    for (int r = 0; r < R; r++) {
        for (int v = 0; v < NV - 1; v++) vstoreu(c + r * ldc + v * VW, acc[r][v]);
        if (tail == VW)
            vstoreu(c + r * ldc + (NV - 1) * VW, acc[r][NV - 1]);
        else
            vstoreu_n(c + r * ldc + (NV - 1) * VW, acc[r][NV - 1], tail);
    }
}

/* One R x NV tile of S^T = K Q^T turned into P^T = 2^(S^T - m) in the
 * epilogue. m (per query lane) is a reference, not the exact maximum: it only
 * moves when a score exceeds it by more than MHA_LAZY_LOG2, so every p stays
 * <= 2^MHA_LAZY_LOG2 and the output rescale is rare. When it moves, the rows
 * [0, r0) of this block already written for that vector (c - r0*ldc ...),
 * the block's partial sums and the block's rescale factor alpha follow. */
ALWAYS_INLINE void tile_exp(const int R, const int NV, const int MASKED, const int CAP, int64_t kc,
                            const float *a, int64_t a_rs, const float *b, int64_t ldb, float *c,
                            int64_t ldc, int64_t r0, float *m, float *bsum, float *alpha, int64_t t,
                            int64_t u, float cap) {
    vf acc[6][4];
    for (int r = 0; r < R; r++)
        for (int v = 0; v < NV; v++) acc[r][v] = vzero();
    accumulate(R, NV, 0, acc, VW, kc, a, a_rs, 1, b, ldb);
    if (CAP) /* natural units -> capped, log2 units (before the mask) */
        for (int r = 0; r < R; r++)
            for (int v = 0; v < NV; v++) acc[r][v] = vsoftcap_log2(acc[r][v], cap);
    const vf lazy = vset1(MHA_LAZY_LOG2), ninf = vset1(-INFINITY);
    if (MASKED) /* column i of row r is visible iff t + r <= i <= u + r: others -> -inf */
        for (int v = 0; v < NV; v++) {
            const vf col = vadd(viota(), vset1((float)(v * VW)));
            for (int r = 0; r < R; r++) {
                acc[r][v] = vselect_gt(col, vset1((float)(t + r - 1)), acc[r][v], ninf);
                acc[r][v] = vselect_gt(vset1((float)(u + r + 1)), col, acc[r][v], ninf);
            }
        }
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++) {
        /* Unrolled, and the cap a compile-time flag, so that acc stays in
         * registers (as flash_bf16.c's score_tile): with a loop over v and
         * the cap's pass a run-time branch, gcc stored the 24 accumulators
         * to the stack after the products and loaded them back per column */
        vf tm = acc[0][v];
        for (int r = 1; r < R; r++) tm = vmax(tm, acc[r][v]);
        vf mv = vload(m + v * VW);
        const vf limit = vadd(mv, lazy); /* -inf while nothing is seen yet */
        if (vany_gt(tm, limit)) {
            const vf mn = vselect_gt(tm, limit, tm, mv);
            /* 0 where m was -inf and moves; 1 where m stays (also at -inf:
             * -inf - -inf would be NaN, and a lane that has seen nothing
             * must keep bsum = 0). m itself is never NaN (NaN > limit is
             * false), so equal lanes are exactly the unmoved ones. */
            const vf f = vexp2_nonpos(vselect_eq(mv, mn, vzero(), vsub(mv, mn)));
            for (int64_t rr = 0; rr < r0; rr++) {
                float *row = c + (rr - r0) * ldc + v * VW;
                vstore(row, vmul(vload(row), f));
            }
            vstore(bsum + v * VW, vmul(vload(bsum + v * VW), f));
            vstore(alpha + v * VW, vmul(vload(alpha + v * VW), f));
            vstore(m + v * VW, mn);
            mv = mn;
        }
        /* A lane that has seen nothing keeps m = -inf: subtract 0 there so
         * its masked scores give 2^-inf = 0, not NaN. */
        if (MASKED) mv = vselect_eq(mv, ninf, vzero(), mv);
        vf sum = vzero();
        for (int r = 0; r < R; r++) {
            const vf p = vexp2_nonpos(vsub(acc[r][v], mv));
            vstore(c + r * ldc + v * VW, p);
            sum = vadd(sum, p);
        }
        vstore(bsum + v * VW, vadd(vload(bsum + v * VW), sum));
    }
}

#pragma GCC diagnostic pop

/* One switch over (rows, vectors) for both tile kinds, so every call runs a
 * tile with compile-time R and NV (FLAG picks the variant of the last
 * template argument: masked B tail for tile, causal mask for tile_exp). */
#define TILE_CASE(FN, R, N, FLAG, ...)                                                             \
    case (R)*8 + (N):                                                                              \
        if (FLAG)                                                                                  \
            FN(R, N, 1, __VA_ARGS__);                                                              \
        else                                                                                       \
            FN(R, N, 0, __VA_ARGS__);                                                              \
        return;
#define TILE_ROW(FN, R, FLAG, ...)                                                                 \
    TILE_CASE(FN, R, 1, FLAG, __VA_ARGS__)                                                         \
    TILE_CASE(FN, R, 2, FLAG, __VA_ARGS__)                                                         \
    TILE_CASE(FN, R, 3, FLAG, __VA_ARGS__)                                                         \
    TILE_CASE(FN, R, 4, FLAG, __VA_ARGS__)
_Static_assert(MHA_MR == 4 || MHA_MR == 6, "TILE_SWITCH has the cases for 4 or 6 tile rows");
#if MHA_MR == 6
#define TILE_ROWS_5_6(FN, FLAG, ...)                                                               \
    TILE_ROW(FN, 5, FLAG, __VA_ARGS__) TILE_ROW(FN, 6, FLAG, __VA_ARGS__)
#else
#define TILE_ROWS_5_6(FN, FLAG, ...)
#endif
#define TILE_SWITCH(rows, nv, FN, FLAG, ...)                                                       \
    switch ((rows)*8 + (nv)) {                                                                     \
        TILE_ROW(FN, 1, FLAG, __VA_ARGS__)                                                         \
        TILE_ROW(FN, 2, FLAG, __VA_ARGS__)                                                         \
        TILE_ROW(FN, 3, FLAG, __VA_ARGS__)                                                         \
        TILE_ROW(FN, 4, FLAG, __VA_ARGS__)                                                         \
        TILE_ROWS_5_6(FN, FLAG, __VA_ARGS__)                                                       \
    default:                                                                                       \
        break;                                                                                     \
    }

static void tile_dispatch(int rows, int nv, int bt, int64_t ncols, int64_t kc, const float *a,
                          int64_t a_rs, int64_t a_ks, const float *b, int64_t ldb, float *c,
                          int64_t ldc, int init, const float *vec) {
    TILE_SWITCH(rows, nv, tile, bt, ncols, kc, a, a_rs, a_ks, b, ldb, c, ldc, init, vec)
}

void MHA_SYM(gemm)(int64_t rows, int64_t ncols, int64_t kc, const float *a, int64_t a_rs,
                   int64_t a_ks, const float *b, int64_t ldb, float *c, int64_t ldc, int flags,
                   const float *vec) {
    const int init = flags & MHA_INIT_MASK;
    for (int64_t j0 = 0; j0 < ncols; j0 += MHA_NR) {
        const int64_t nc = ncols - j0 < MHA_NR ? ncols - j0 : MHA_NR;
        const int nv = (int)((nc + VW - 1) / VW);
        const int bt = (flags & MHA_B_EXACT) && nc % VW != 0;
        const float *cv = vec && init != MHA_INIT_ROWSCALE ? vec + j0 : vec;
        for (int64_t r0 = 0; r0 < rows; r0 += MHA_MR) {
            const int r = (int)(rows - r0 < MHA_MR ? rows - r0 : MHA_MR);
            tile_dispatch(r, nv, bt, nc, kc, a + r0 * a_rs, a_rs, a_ks, b + j0, ldb,
                          c + r0 * ldc + j0, ldc, init, init == MHA_INIT_ROWSCALE ? cv + r0 : cv);
        }
    }
}

#define TILE_EXP_PLAIN(R, N, M, ...) tile_exp(R, N, M, 0, __VA_ARGS__)
#define TILE_EXP_CAP(R, N, M, ...) tile_exp(R, N, M, 1, __VA_ARGS__)
static void tile_exp_dispatch(int rows, int nv, int masked, int64_t kc, const float *a,
                              int64_t a_rs, const float *b, int64_t ldb, float *c, int64_t ldc,
                              int64_t r0, float *m, float *bsum, float *alpha, int64_t t, int64_t u,
                              float cap) {
    if (cap > 0) {
        TILE_SWITCH(rows, nv, TILE_EXP_CAP, masked, kc, a, a_rs, b, ldb, c, ldc, r0, m, bsum, alpha,
                    t, u, cap)
    } else {
        TILE_SWITCH(rows, nv, TILE_EXP_PLAIN, masked, kc, a, a_rs, b, ldb, c, ldc, r0, m, bsum,
                    alpha, t, u, cap)
    }
}

void MHA_SYM(scores_exp)(int64_t rows, int64_t ncols, int64_t kc, const float *a, int64_t a_rs,
                         const float *b, int64_t ldb, float *c, int64_t ldc, float *m, float *bsum,
                         float *alpha, int masked, int64_t t0, int64_t t1, float cap) {
    mha_band_clamp(&t0, &t1);
    if (masked) mha_band_zero_outside(rows, ncols, t0, t1, c, ldc);
    for (int64_t j0 = 0; j0 < ncols; j0 += MHA_NR) {
        const int64_t nc = ncols - j0 < MHA_NR ? ncols - j0 : MHA_NR;
        for (int64_t r0 = 0; r0 < rows; r0 += MHA_MR) {
            const int r = (int)(rows - r0 < MHA_MR ? rows - r0 : MHA_MR);
            int64_t s, e; /* rows below start (and end) later */
            mha_band_cols(masked, t0, t1, r0, r, ncols, &s, &e);
            s = s < j0 ? j0 : s;
            e = e > j0 + nc ? j0 + nc : e;
            if (s >= e) continue;
            tile_exp_dispatch(r, (int)((e - s) / VW),
                              masked && !mha_band_inside(t0, t1, r0, r, s, e), kc, a + r0 * a_rs,
                              a_rs, b + s, ldb, c + r0 * ldc + s, ldc, r0, m + s, bsum + s,
                              alpha + s, t0 + r0 - s, t1 + r0 - s, cap);
        }
    }
}

void MHA_SYM(pack_transpose)(int64_t n, int64_t d, const float *src, int64_t ld, float scale,
                             float *dst, int64_t ldd) {
    /* VW x VW blocks: rows of src loaded (scaled), transposed in registers. */
    const vf s = vset1(scale);
    for (int64_t i0 = 0; i0 < ldd; i0 += VW) {
        for (int64_t c0 = 0; c0 < d; c0 += VW) {
            const int nc = (int)(d - c0 < VW ? d - c0 : VW);
            vf r[VW];
            for (int i = 0; i < VW; i++) {
                r[i] = vzero();
                if (i0 + i >= n) continue; /* padding columns of dst are zero */
                const float *row = src + (i0 + i) * ld + c0;
                r[i] = vmul(nc == VW ? vloadu(row) : vloadu_n(row, nc), s);
            }
            vtranspose(r);
            for (int c = 0; c < nc; c++) vstoreu(dst + (c0 + c) * ldd + i0, r[c]);
        }
    }
}

/* The linear layer packs W^T in panels of MHA_NR output features: panel p is
 * [K][MHA_NR] contiguous, zero padded past N. */
size_t MHA_SYM(linear_pack_floats)(int64_t N, int64_t K) {
    const int64_t panels = (N + MHA_NR - 1) / MHA_NR;
    return (size_t)panels * (size_t)K * MHA_NR;
}

enum { LINEAR_ROWS = 8 * MHA_MR }; /* rows of X per task: B panel reused from L1/L2 */

void MHA_SYM(linear)(int64_t M, int64_t N, int64_t K, const float *x, int64_t ldx, const float *w,
                     int64_t ldw, const float *bias, float *y, int64_t ldy, float *pack,
                     int threads) {
    const int64_t panels = (N + MHA_NR - 1) / MHA_NR;
    const int64_t row_tasks = (M + LINEAR_ROWS - 1) / LINEAR_ROWS;
#pragma omp parallel num_threads(threads)
    {
#pragma omp for schedule(static)
        for (int64_t p = 0; p < panels; p++) {
            /* panel p = W[n0 .. n0 + nn)^T: [K][MHA_NR], zero past nn */
            const int64_t n0 = p * MHA_NR, nn = N - n0 < MHA_NR ? N - n0 : MHA_NR;
            MHA_SYM(pack_transpose)(nn, K, w + n0 * ldw, ldw, 1.0f, pack + p * K * MHA_NR, MHA_NR);
        }
#pragma omp for collapse(2) schedule(static)
        for (int64_t rt = 0; rt < row_tasks; rt++) {
            for (int64_t p = 0; p < panels; p++) {
                const int64_t m0 = rt * LINEAR_ROWS;
                const int64_t mm = M - m0 < LINEAR_ROWS ? M - m0 : LINEAR_ROWS;
                const int64_t n0 = p * MHA_NR, nn = N - n0 < MHA_NR ? N - n0 : MHA_NR;
                MHA_SYM(gemm)
                (mm, nn, K, x + m0 * ldx, ldx, 1, pack + p * K * MHA_NR, MHA_NR, y + m0 * ldy + n0,
                 ldy, bias ? MHA_INIT_BIAS : MHA_INIT_ZERO, bias ? bias + n0 : NULL);
            }
        }
    }
}
