/* flash_var.h - what the streaming kernels share for the attention variants
 * (window, softcap; mha.h): the unfused online-softmax step of a score
 * block whose scores are already computed (the softcap is ukernels.h's
 * vsoftcap_log2).
 * Included by the per-ISA instantiations of flash.c and flash_bf16.c after
 * ukernels.h (vec.h of their ISA). */
#ifndef MHA_VARIANTS_FLASH_VAR_H
#define MHA_VARIANTS_FLASH_VAR_H

#include <math.h>
#include <stdint.h>

#include "ukernels.h"

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
    int64_t all_lo = 0, all_hi = INT64_MAX; /* the keys every column sees */
    for (int64_t i = 0; i < ncols; i++) {
        all_lo = kb[i] > all_lo ? kb[i] : all_lo;
        all_hi = ke[i] < all_hi ? ke[i] : all_hi;
    }
    for (int64_t r = 0; r < bkk; r++) {
        float *row = St + r * ld;
        if (cap > 0)
            for (int64_t i = 0; i < ncols; i += VW)
                vstore(row + i, vsoftcap_log2(vload(row + i), cap));
        const int64_t j = j0 + r;
        if (j >= all_lo && j < all_hi) continue;
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
