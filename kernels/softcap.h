/* softcap.h - the logit softcap's one evaluation, c tanh(x sc / c) log2(e),
 * shared by the fp32 form (ukernels.h's vsoftcap_log2_scaled) and the bf16
 * kernels' shorter one (vec_avx512bf16.h's vsoftcap_log2_bf16). Included
 * after a vec_<isa>.h: it uses that level's vf operations. */
#ifndef MHA_KERNELS_SOFTCAP_H
#define MHA_KERNELS_SOFTCAP_H

/* y = x sc / c clamped to [-clamp, clamp] (y second in each clamp, so NaN
 * stays NaN), then y P(y^2) / Q(y^2) with P and Q of degree deg given from
 * the highest coefficient (Q's lowest is 1), c log2(e) folded into P, the
 * quotient by vrcp. Each caller's fit and bound: its own comment. */
static inline __attribute__((always_inline)) vf
vsoftcap_rational(vf x, float sc, float c, float clamp, const float *pc, const float *qc, int deg) {
    const float k = c * 1.44269504088896341f;
    const vf y = vmin(vset1(clamp), vmax(vset1(-clamp), vmul(x, vset1(sc / c))));
    const vf u = vmul(y, y);
    vf p = vset1(k * pc[0]);
    for (int i = 1; i <= deg; i++) p = vfma(p, u, vset1(k * pc[i]));
    vf q = vset1(qc[0]);
    for (int i = 1; i <= deg; i++) q = vfma(q, u, vset1(qc[i]));
    return vmul(vmul(y, p), vrcp(q));
}

#endif
