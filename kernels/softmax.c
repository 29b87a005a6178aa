/* softmax.c - the two-pass softmax of tiled on transposed score blocks
 * S^T[key][query] (every query a lane, so max and exp-and-sum are lane-wise;
 * scores arrive in log2 units, hence exp2), the normalised output store, and
 * the exp arrays the tests measure. flash's online softmax is fused into its
 * score tile (gemm.c, scores_exp). */
#include <math.h>

#include "ukernels.h"

void MHA_SYM(softmax_columns)(int64_t n, int64_t ncols, float *s, int64_t ld, float *m, float *l) {
    const vf ninf = vset1(-INFINITY), zero = vzero();
    for (int64_t i = 0; i < ncols; i += VW) {
        vf mx = ninf;
        for (int64_t j = 0; j < n; j++) mx = vmax(mx, vload(s + j * ld + i));
        const vf m_use = vselect_eq(mx, ninf, zero, mx);
        vf sum = zero;
        for (int64_t j = 0; j < n; j++) {
            const vf p = vexp2_nonpos(vsub(vload(s + j * ld + i), m_use));
            vstore(s + j * ld + i, p);
            sum = vadd(sum, p);
        }
        vstore(m + i, mx);
        vstore(l + i, sum);
    }
}

void MHA_SYM(store_normalized)(int64_t n, int64_t d, const float *o, int64_t ldo, const float *l,
                               int64_t blind, float *out, int64_t out_rs) {
    for (int64_t i = 0; i < n; i++) {
        float *dst = out + i * out_rs;
        int64_t c = 0;
        if (i < blind) { /* no visible key: zeros by convention */
            for (; c + VW <= d; c += VW) vstoreu(dst + c, vzero());
            if (c < d) vstoreu_n(dst + c, vzero(), (int)(d - c));
            continue;
        }
        /* l == 0 here means every visible score was -inf: 0 * (1/0) = NaN. */
        const vf inv = vset1(1.0f / l[i]);
        const float *src = o + i * ldo;
        for (; c + VW <= d; c += VW) vstoreu(dst + c, vmul(vloadu(src + c), inv));
        if (c < d) vstoreu_n(dst + c, vmul(vloadu_n(src + c, (int)(d - c)), inv), (int)(d - c));
    }
}

void MHA_SYM(vexp_array)(const float *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + VW <= n; i += VW) vstoreu(y + i, vexp(vloadu(x + i)));
    if (i < n) vstoreu_n(y + i, vexp(vloadu_n(x + i, (int)(n - i))), (int)(n - i));
}

void MHA_SYM(vexp2_array)(const float *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + VW <= n; i += VW) vstoreu(y + i, vexp2(vloadu(x + i)));
    if (i < n) vstoreu_n(y + i, vexp2(vloadu_n(x + i, (int)(n - i))), (int)(n - i));
}

void MHA_SYM(narrow_array)(const float *x, uint16_t *y, int64_t n, int bf16) {
    int64_t i = 0;
    for (; i + VW <= n; i += VW)
        bf16 ? vstore_bf16(y + i, vloadu(x + i)) : vstore_f16(y + i, vloadu(x + i));
    if (i < n)
        bf16 ? vstore_bf16_n(y + i, vloadu_n(x + i, (int)(n - i)), (int)(n - i))
             : vstore_f16_n(y + i, vloadu_n(x + i, (int)(n - i)), (int)(n - i));
}

void MHA_SYM(vsoftcap_array)(const float *x, float *y, int64_t n, float c) {
    int64_t i = 0;
    for (; i + VW <= n; i += VW) vstoreu(y + i, vsoftcap_log2(vloadu(x + i), c));
    if (i < n) vstoreu_n(y + i, vsoftcap_log2(vloadu_n(x + i, (int)(n - i)), c), (int)(n - i));
}

/* The exp unit's loop (ops.h's "exp" row): the kernels' own exponential,
 * vexp2_nonpos (what softmax_columns and the fused score tiles call), on
 * the inputs a softmax gives it (x - max in log2 units, -16 <= x < 0), and
 * in one vector of 8 every other lane -inf, as a mask's edge leaves it: an
 * exp that took a microcode assist there (an underflowing scalef on Intel,
 * ~37x a plain vector: docs/semantics.md "Tiny softmax weights") would
 * show here as a rate several times lower. Each
 * pass loads x, computes 2^x and stores y, 4 KiB each, so both stay in L1
 * and the rate is the exponential's, not memory's; the empty asm with a
 * memory clobber tells the compiler that x may have changed and y is read,
 * so no pass is hoisted out or dropped. */
#define EXP_PEAK_N 1024
double MHA_SYM(exp_peak_loop)(int64_t iters) {
    if (iters <= 0) return 0.0;
    _Alignas(64) float x[EXP_PEAK_N], y[EXP_PEAK_N];
    for (int i = 0; i < EXP_PEAK_N; i++)
        x[i] = (i / VW) % 8 == 7 && i % 2 ? -INFINITY : -16.0f * ((float)i + 0.5f) / EXP_PEAK_N;
    for (int64_t it = 0; it < iters; it++) {
        for (int i = 0; i < EXP_PEAK_N; i += VW) vstore(y + i, vexp2_nonpos(vload(x + i)));
        /* the stores are consumed and x may have changed: nothing hoisted or dropped */
        __asm__ __volatile__("" : : "r"(x), "r"(y) : "memory");
    }
    return (double)iters * EXP_PEAK_N;
}
