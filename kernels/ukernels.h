/* ukernels.h - the micro-kernels every algorithm is built from, declared for
 * the ISA of the including translation unit (MHA_SYM adds the suffix).
 * Layout idea: the "B" operand is packed with its columns along the vector
 * lanes ([k][cols], row stride ldb, a multiple of VW, padding readable); the
 * "A" operand is read element by element (broadcast), so any strides work.
 * For attention: S^T = K Q^T with the columns being query rows, which makes
 * the softmax a lane-wise operation with no horizontal reduction; then
 * O = P V with the columns being head_dim, V read in place (MHA_B_EXACT). */
#ifndef MHA_KERNELS_UKERNELS_H
#define MHA_KERNELS_UKERNELS_H
#include <stddef.h>
#include <stdint.h>

#include "mha.h"
#include "vec.h"
#include "softcap.h"

enum {
    MHA_INIT_ZERO = 0,     /* C  = A B */
    MHA_INIT_ACC = 1,      /* C += A B */
    MHA_INIT_SCALE = 2,    /* C  = C * vec[col] + A B  (rescale per column) */
    MHA_INIT_BIAS = 3,     /* C  = vec[col] + A B      (linear layer bias) */
    MHA_INIT_ROWSCALE = 4, /* C  = C * vec[row] + A B  (flash rescale fused into P V) */
    MHA_INIT_MASK = 7,
    /* Flag: B has only ncols readable columns (read the tail with a mask), as
     * when B is V read in place; otherwise ceil(ncols/VW)*VW must be readable. */
    MHA_B_EXACT = 8,
};

/* C[r][0:ncols] for r < rows (row stride ldc), computed over k < kc with
 * A(r,k) = a[r*a_rs + k*a_ks] and B(k, col) = b[k*ldb + col]. flags is an
 * MHA_INIT_* mode, optionally | MHA_B_EXACT; vec is the mode's vector.
 * C is written for exactly ncols columns (masked tail). Any rows/ncols >= 1. */
void MHA_SYM(gemm)(int64_t rows, int64_t ncols, int64_t kc, const float *a, int64_t a_rs,
                   int64_t a_ks, const float *b, int64_t ldb, float *c, int64_t ldc, int flags,
                   const float *vec);

/* How far (log2 units) a score may exceed the running reference max m before
 * m moves (scores_exp): p <= 2^8, so sums and outputs keep 120 binades. */
#define MHA_LAZY_LOG2 8.0f

/* c tanh(s / c) log2(e) lane by lane: the logit softcap (mha.h) of scores s
 * in natural units, returned in log2 units for the softmax's exp2. y = s / c
 * is clamped to [-9, 9] (tanh 9 = 1 - 3e-8: 1 in fp32), then tanh y =
 * y P(y^2) / Q(y^2), P and Q of degree 4 (scripts/fit_tanh.py: relative
 * error 2.1e-8 in exact arithmetic; test_vec bounds it in fp32), the
 * quotient by vrcp (no divider), c log2(e) folded into P. Odd, so no sign
 * handling; NaN stays NaN (each clamp puts y second), +-inf gives +-c.
 * The _scaled form caps x sc (sc > 0: a prescale folded into 1 / c). */
static inline vf vsoftcap_log2_scaled(vf x, float sc, float c) {
    static const float p[5] = {1.3347516141722862e-08f, 2.0604122253435377e-05f,
                               3.4952968179446627e-03f, 1.3380783982212013e-01f,
                               9.9999997997931560e-01f},
                       q[5] = {7.773688299515702e-07f, 3.2851511004406884e-04f,
                               2.587588503868998e-02f, 4.671409970934777e-01f, 1.0f};
    return vsoftcap_rational(x, sc, c, 9.0f, p, q, 4);
}
static inline vf vsoftcap_log2(vf s, float c) {
    return vsoftcap_log2_scaled(s, 1.0f, c);
}

/* The fused score block of flash attention: C = 2^(A B - m) for an unmasked
 * block, with C = S^T[rows = keys][ncols = queries] (ncols a multiple of VW,
 * b = Q^T in log2 units, ldb/ldc multiples of VW), A(r, k) = a[r*a_rs + k].
 * Per query lane: m is the running reference max (raised only by more than
 * MHA_LAZY_LOG2, -inf before any key), bsum += the column sums of C, and
 * alpha *= the factor every earlier term must be scaled by when m moves
 * (start a block with bsum = 0, alpha = 1). With masked != 0, score (r, i)
 * is visible iff t0 + r <= i <= t1 + r (a band: the causal diagonal with
 * t1 = MHA_BAND_OPEN, a sliding window's two edges): the others give P = 0,
 * tiles wholly outside it are skipped (zeros written), and a lane with
 * nothing visible yet keeps m = -inf. With cap > 0, b is in natural units
 * and each score takes the softcap first (vsoftcap_log2, before the mask). */
void MHA_SYM(scores_exp)(int64_t rows, int64_t ncols, int64_t kc, const float *a, int64_t a_rs,
                         const float *b, int64_t ldb, float *c, int64_t ldc, float *m, float *bsum,
                         float *alpha, int masked, int64_t t0, int64_t t1, float cap);
/* scores_exp's t1 (t0) for a band without its right (left) bound. */
#define MHA_BAND_OPEN ((int64_t)1 << 40)

/* The band's bookkeeping, shared by scores_exp's two implementations
 * (gemm.c on fp32, flash_bf16.c on the packed bf16 operands). The edges
 * clamped within +-2^30 (ncols is far below), exact as floats in a tile. */
static inline void mha_band_clamp(int64_t *t0, int64_t *t1) {
    const int64_t lim = (int64_t)1 << 30;
    *t0 = *t0 < -lim ? -lim : (*t0 > lim ? lim : *t0);
    *t1 = *t1 < -lim ? -lim : (*t1 > lim ? lim : *t1);
}
/* The columns [*c0, *c1) (multiples of VW) of row tile r0 (rows r0 ..
 * r0 + r - 1) that hold a visible score: from t0 + r0 (the first row's
 * first) to t1 + r0 + r - 1 (the last row's last); everything unmasked. */
static inline void mha_band_cols(int masked, int64_t t0, int64_t t1, int64_t r0, int r,
                                 int64_t ncols, int64_t *c0, int64_t *c1) {
    *c0 = 0;
    *c1 = ncols;
    if (!masked) return;
    const int64_t first = t0 + r0, end = t1 + r0 + r; /* end: one past the last visible */
    *c0 = first <= 0 ? 0 : (first >= ncols ? ncols : first / VW * VW);
    *c1 = end <= 0 ? 0 : (end >= ncols ? ncols : (end + VW - 1) / VW * VW);
    if (*c1 < *c0) *c1 = *c0;
}
/* Whether rows [r0, r0 + r) x columns [s, e) lie wholly inside the band:
 * such a tile of a masked block takes the unmasked epilogue (its selects
 * and its m = -inf guard change nothing there). Under a window of 128 keys
 * about 60% of the masked block's tiles do (32 queries by 160 keys): 1.019x
 * flash.avx512bf16, 1.010x flash.avx512 (Zen 4 VM, H8 N8192 d64, stop 57). */
static inline int mha_band_inside(int64_t t0, int64_t t1, int64_t r0, int r, int64_t s, int64_t e) {
    return t0 + r0 + r - 1 <= s && e - 1 <= t1 + r0;
}
/* P = 0 written in each row tile's columns outside its visible vectors
 * (the tiles there are skipped). */
static inline void mha_band_zero_outside(int64_t rows, int64_t ncols, int64_t t0, int64_t t1,
                                         float *c, int64_t ldc) {
    for (int64_t r0 = 0; r0 < rows; r0 += MHA_MR) {
        const int r = (int)(rows - r0 < MHA_MR ? rows - r0 : MHA_MR);
        int64_t c0, c1;
        mha_band_cols(1, t0, t1, r0, r, ncols, &c0, &c1);
        for (int64_t rr = r0; rr < r0 + r; rr++) {
            for (int64_t i = 0; i < c0; i += VW) vstore(c + rr * ldc + i, vzero());
            for (int64_t i = c1; i < ncols; i += VW) vstore(c + rr * ldc + i, vzero());
        }
    }
}

/* Y[M,N] = X[M,K] W^T + bias with W in nn.Linear layout [N][K] (row stride
 * ldw); pack holds linear_pack_floats(N,K) floats. OpenMP over tiles. */
void MHA_SYM(linear)(int64_t M, int64_t N, int64_t K, const float *x, int64_t ldx, const float *w,
                     int64_t ldw, const float *bias, float *y, int64_t ldy, float *pack,
                     int threads);
size_t MHA_SYM(linear_pack_floats)(int64_t N, int64_t K);

/* The typed projection (kernels/gemm_bf16.c, levels with AVX512_BF16 only):
 * Y = X W^T + bias with X, W, bias and Y of dtype t (bf16, or fp16 rounded
 * to bf16 while packing), fp32 sums, Y rounded to t (RNE). pack: 64-byte
 * aligned, linear_half_pack_bytes(M, N, K, threads) bytes. */
void MHA_SYM(linear_half)(int64_t M, int64_t N, int64_t K, mha_dtype t, const void *x, int64_t ldx,
                          const void *w, int64_t ldw, const void *bias, void *y, int64_t ldy,
                          void *pack, int threads);
size_t MHA_SYM(linear_half_pack_bytes)(int64_t M, int64_t N, int64_t K, int threads);

/* Packs rows [0,n) of a strided row-major matrix (n x d, row stride ld)
 * transposed and scaled into dst[c][i] (row stride ldd >= n, multiple of VW);
 * columns n..ldd-1 are zeroed. */
void MHA_SYM(pack_transpose)(int64_t n, int64_t d, const float *src, int64_t ld, float scale,
                             float *dst, int64_t ldd);

/* Two-pass softmax numerator on S^T[n][ld] columns [0,ncols): m = column max,
 * S^T = 2^(S^T - m), l = column sums. (Normalisation happens on output.) */
void MHA_SYM(softmax_columns)(int64_t n, int64_t ncols, float *s, int64_t ld, float *m, float *l);

/* out[i][c] = O[i][c] / l[i] for blind <= i < n, c < d, and 0 for the
 * first `blind` rows (those that see no key); O has row stride ldo, out row
 * stride out_rs. A row that sees keys but has l[i] == 0 (every score -inf)
 * or l[i] NaN comes out NaN, as in the oracle: 0 / 0. */
void MHA_SYM(store_normalized)(int64_t n, int64_t d, const float *o, int64_t ldo, const float *l,
                               int64_t blind, float *out, int64_t out_rs);

/* Vector exp / exp2 over arrays (tests measure their accuracy). */
void MHA_SYM(vexp_array)(const float *x, float *y, int64_t n);
void MHA_SYM(vexp2_array)(const float *x, float *y, int64_t n);
/* y = vsoftcap_log2(x, c) over an array (test_vec measures its accuracy). */
void MHA_SYM(vsoftcap_array)(const float *x, float *y, int64_t n, float c);
/* y = x rounded to bf16 (bf16 != 0) or fp16 through the narrowing stores
 * the kernels use (vstore_bf16 / vstore_f16), VW at a time, then the tail. */
void MHA_SYM(narrow_array)(const float *x, uint16_t *y, int64_t n, int bf16);
/* The exp unit's loop (ops.h's mha_unit "exp"): iters passes of the
 * kernels' vexp2_nonpos over an L1-resident buffer of the range a softmax
 * feeds it; returns the exponentials computed (1024 a pass). */
double MHA_SYM(exp_peak_loop)(int64_t iters);
/* Plain names for the calls in variants/ (and readable under clang-format). */
#define k_gemm MHA_SYM(gemm)
#define k_pack_transpose MHA_SYM(pack_transpose)
#define k_scores_exp MHA_SYM(scores_exp)
#define k_softmax_columns MHA_SYM(softmax_columns)
#define k_store_normalized MHA_SYM(store_normalized)
#define k_narrow_array MHA_SYM(narrow_array)
#endif
