/* flash_var.h - what the streaming kernels share for the attention variants
 * (window, softcap; mha.h): the softcap in vector lanes and the unfused
 * online-softmax step of a score block whose scores are already computed.
 * Included by the per-ISA instantiations of flash.c and flash_bf16.c after
 * ukernels.h (vec.h of their ISA). */
#ifndef MHA_VARIANTS_FLASH_VAR_H
#define MHA_VARIANTS_FLASH_VAR_H

#include <math.h>
#include <stdint.h>

#include "ukernels.h"

#define FLASH_VAR_LOG2E 1.44269504088896341f

/* c tanh(s / c) * log2(e) lane-wise, s in natural units: an odd polynomial
 * for |y| = |s / c| < 1/8 (Taylor to y^9, truncation < 2e-12), else
 * sign(y) (1 - e^-2|y|) / (1 + e^-2|y|) (relative error a few ulp; e^-2|y|
 * underflows to 0 for large |y|, giving +-1 exactly). NaN stays NaN. */
static inline vf flash_softcap_log2(vf s, float c) {
    const vf zero = vzero(), one = vset1(1.0f), y = vmul(s, vset1(1.0f / c));
    const vf ay = vselect_gt(zero, y, vsub(zero, y), y);
    const vf e = vexp(vmul(ay, vset1(-2.0f)));
    vf t = vdiv(vsub(one, e), vadd(one, e));
    const vf y2 = vmul(ay, ay);
    vf q = vset1(62.0f / 2835.0f);
    q = vfma(q, y2, vset1(-17.0f / 315.0f));
    q = vfma(q, y2, vset1(2.0f / 15.0f));
    q = vfma(q, y2, vset1(-1.0f / 3.0f));
    q = vfma(q, y2, one);
    t = vselect_gt(vset1(0.125f), ay, vmul(q, ay), t);
    t = vselect_gt(zero, y, vsub(zero, t), t);
    t = vselect_eq(y, y, t, y); /* a NaN score: every compare above is false for it */
    return vmul(t, vset1(c * FLASH_VAR_LOG2E));
}

/* One score block St[r][i] (bkk keys j0 + r, ncols query lanes, row stride
 * ld) holding raw scores (natural units when cap > 0, then capped; else
 * log2 units): scores outside each column's key range [kb[i], ke[i]) become
 * -inf; m is raised to each column's block max; St becomes P = 2^(S - m),
 * bsum its column sums and alpha the factor the earlier terms take (1 where
 * m did not move; a column that has seen nothing keeps m = -inf and P = 0).
 * The same contract as k_scores_exp's, so blocks of both kinds mix. */
static inline void flash_var_softmax(int64_t bkk, int64_t ncols, int64_t j0, float cap, float *St,
                                     int64_t ld, float *m, float *bsum, float *alpha,
                                     const int64_t *kb, const int64_t *ke) {
    const vf ninf = vset1(-INFINITY), zero = vzero(), one = vset1(1.0f);
    for (int64_t r = 0; r < bkk; r++) {
        float *row = St + r * ld;
        if (cap > 0)
            for (int64_t i = 0; i < ncols; i += VW)
                vstore(row + i, flash_softcap_log2(vload(row + i), cap));
        const int64_t j = j0 + r;
        for (int64_t i = 0; i < ncols; i++)
            if (j < kb[i] || j >= ke[i]) row[i] = -INFINITY;
    }
    for (int64_t i = 0; i < ncols; i += VW) {
        vf bm = ninf;
        for (int64_t r = 0; r < bkk; r++) bm = vmax(bm, vload(St + r * ld + i));
        const vf mo = vload(m + i), mn = vmax(mo, bm);
        const vf mu = vselect_eq(mn, ninf, zero, mn); /* nothing seen: subtract 0, P = 0 */
        vstore(alpha + i, vselect_eq(mo, mn, one, vexp2_nonpos(vsub(mo, mu))));
        vf sum = zero;
        for (int64_t r = 0; r < bkk; r++) {
            const vf pr = vexp2_nonpos(vsub(vload(St + r * ld + i), mu));
            vstore(St + r * ld + i, pr);
            sum = vadd(sum, pr);
        }
        vstore(m + i, mn);
        vstore(bsum + i, sum);
    }
}

#endif
