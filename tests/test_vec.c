/* test_vec.c - accuracy of the vector exp, exp2 and softcap of each ISA against libm,
 * measured in ulp over the softmax range and pinned at the edges:
 * exp(-inf) = 0, exp(large negative) = 0, exp(0) = 1. The measured maxima are
 * printed; the bounds asserted are the documented ones. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "mha.h"
#include "mha_private.h"

/* Every ISA level through its ops table: state is the level. */
#define OPS(i) mha_ops_for((mha_isa)(i))

/* Distance in units of the last place of the true (double) value, in float. */
static double ulp_err(float got, double want) {
    if (want == 0) return got == 0 ? 0 : INFINITY;
    int e;
    frexp(want, &e);
    double ulp = ldexp(1.0, e - 24);
    if (ulp < ldexp(1.0, -149)) ulp = ldexp(1.0, -149);
    return fabs((double)got - want) / ulp;
}

/* Max ulp over [lo, 0] where the result is a normal float, both functions. */
static void measure(int i, double *exp_ulp, double *exp2_ulp) {
    enum { N = 200003 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    for (int j = 0; j < N; j++) x[j] = (float)(-87.0 * j / (N - 1)); /* exp normal range */
    OPS(i)->vexp_array(x, y, N);
    *exp_ulp = 0;
    for (int j = 0; j < N; j++) *exp_ulp = fmax(*exp_ulp, ulp_err(y[j], exp((double)x[j])));
    for (int j = 0; j < N; j++) x[j] = (float)(-126.0 * j / (N - 1));
    OPS(i)->vexp2_array(x, y, N);
    *exp2_ulp = 0;
    for (int j = 0; j < N; j++) *exp2_ulp = fmax(*exp2_ulp, ulp_err(y[j], exp2((double)x[j])));
    free(x);
    free(y);
}

static void test_accuracy(void **state) {
    const int i = (int)(intptr_t)*state;
    if ((mha_isa)i > mha_isa_active()) {
        print_message("skipping %s: not available here (or capped by MHA_ISA)\n",
                      mha_isa_name((mha_isa)i));
        skip();
    }
    double e, e2;
    measure(i, &e, &e2);
    print_message("%s: exp max %.2f ulp over [-87, 0], exp2 max %.2f ulp over [-126, 0]\n",
                  mha_isa_name((mha_isa)i), e, e2);
    /* Documented bounds (measured ~1-2 ulp; polynomial error 1.7e-7 relative). */
    assert_true(e <= 4.0);
    assert_true(e2 <= 4.0);
}

/* Below FLT_MIN the exps give exactly 0, never a subnormal, on the AVX-512
 * levels: on Intel a subnormal result (or an underflowing scalef) costs a
 * microcode assist of ~300 cycles per vector (kernels/vec_avx512.h,
 * vexp2_nonpos). The AVX2 and scalar exps build 2^n from its exponent bits,
 * which gives +0 for a clamped -inf with no assist; they may return a
 * subnormal in a band of `band` below flush (exp2: x in [-126.5, -126)), 0
 * below it. Over [lo, hi] in 2,560 equal steps (and an odd tail): below
 * flush - band 0; below flush 0 or a value under FLT_MIN (0 or normal on
 * the strict levels, band 0); from flush on a normal float, within
 * max_ulp of libm from flush + 1. */
static void no_subnormal(void (*f)(const float *, float *, int64_t), int is_exp2, double lo,
                         double hi, double flush, double band, double max_ulp) {
    enum { N = 2561 };
    float x[N], y[N];
    for (int j = 0; j < N; j++) x[j] = (float)(lo + (hi - lo) * j / (N - 1));
    f(x, y, N);
    for (int j = 0; j < N; j++) {
        const double want = is_exp2 ? exp2((double)x[j]) : exp((double)x[j]);
        if (x[j] < flush - band && y[j] != 0.0f)
            fail_msg("x = %.9g gave %.9g, not 0", x[j], y[j]);
        else if (x[j] < flush && !(y[j] == 0.0f || (band > 0 && y[j] > 0 && y[j] < 0x1p-126f)))
            fail_msg("x = %.9g gave %.9g, below FLT_MIN expected", x[j], y[j]);
        else if (x[j] >= flush && !(y[j] >= 0x1p-126f))
            fail_msg("x = %.9g gave %.9g, not a normal float", x[j], y[j]);
        if (x[j] >= flush + 1 && ulp_err(y[j], want) > max_ulp)
            fail_msg("x = %.9g gave %.9g, want %.9g", x[j], y[j], want);
    }
}

/* The degree-3 exp2 of the bf16 kernels' P (kernels/vec_avx512bf16.h, which
 * harness/check.c's tolerance cites): relative error within the stated
 * 7.5e-5 over [-125, 0], -inf and below -125 give exactly 0 (never a
 * subnormal), NaN stays NaN. Built
 * for AVX512_BF16 here, run where the CPU has it. */
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512vl,avx512dq,avx512bw,avx512bf16")
#include "../kernels/vec_avx512bf16.h"
static void exp2_bf16_array(const float *x, float *y, int64_t n) {
    for (int64_t j = 0; j < n; j += 16) {
        const __mmask16 k = (__mmask16)(n - j >= 16 ? 0xffff : (1u << (n - j)) - 1u);
        _mm512_mask_storeu_ps(y + j, k, vexp2_nonpos_bf16(_mm512_maskz_loadu_ps(k, x + j)));
    }
}
/* y = vsoftcap_log2_bf16(x, sc, c) over an array (the bf16 kernels' softcap). */
static void softcap_bf16_array(const float *x, float *y, int64_t n, float sc, float c) {
    for (int64_t j = 0; j < n; j += 16) {
        const __mmask16 k = (__mmask16)(n - j >= 16 ? 0xffff : (1u << (n - j)) - 1u);
        _mm512_mask_storeu_ps(y + j, k, vsoftcap_log2_bf16(_mm512_maskz_loadu_ps(k, x + j), sc, c));
    }
}
/* out[j] = vbf_pairs_scale(pairs[j], f) for 16 pairs at a time. */
static void pairs_scale_array(const uint32_t *x, const float *f, uint32_t *y, int64_t n) {
    for (int64_t j = 0; j < n; j += 16)
        _mm512_storeu_si512(y + j,
                            vbf_pairs_scale(_mm512_loadu_si512(x + j), _mm512_loadu_ps(f + j)));
}
#pragma GCC pop_options

/* The bf16 kernels' helpers run where the CPU has AVX512_BF16 (and the
 * cap allows it); elsewhere the test is skipped, not failed. */
static void skip_without_avx512bf16(void) {
    if (mha_isa_active() < MHA_ISA_AVX512BF16) {
        print_message("skipping: avx512bf16 not available here (or capped by MHA_ISA)\n");
        skip();
    }
}

/* vbf_pairs_scale (flash.avx512bf16's rescale of P pairs already written):
 * both bf16 halves of each pair times the lane's power of 2, exactly, the
 * halves not swapped; 0 stays 0 and a factor of 0 gives zeros. */
static void test_pairs_scale(void **state) {
    (void)state;
    skip_without_avx512bf16();
    enum { N = 4096 };
    uint32_t x[N], y[N];
    float f[N];
    uint64_t r = 12345;
    for (int j = 0; j < N; j++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        /* positive bf16 weights in [2^-40, 2^8): exponents 87..134, any mantissa */
        const uint32_t lo = (uint32_t)(((87 + (r >> 33) % 48) << 7) | ((r >> 20) & 0x7f));
        const uint32_t hi = (uint32_t)(((87 + (r >> 45) % 48) << 7) | ((r >> 8) & 0x7f));
        x[j] = j % 97 == 0 ? hi << 16 : (hi << 16) | lo; /* some pairs with a zero half */
        f[j] = j % 61 == 0 ? 0.0f : ldexpf(1.0f, -(int)((r >> 56) % 40));
    }
    pairs_scale_array(x, f, y, N);
    for (int j = 0; j < N; j++) {
        float a, b, ga, gb;
        const uint32_t xa = x[j] << 16, xb = x[j] & 0xffff0000u, ya = y[j] << 16,
                       yb = y[j] & 0xffff0000u;
        memcpy(&a, &xa, 4);
        memcpy(&b, &xb, 4);
        memcpy(&ga, &ya, 4);
        memcpy(&gb, &yb, 4);
        if (ga != a * f[j] || gb != b * f[j])
            fail_msg("pair %d: (%g, %g) x %g gave (%g, %g)", j, (double)a, (double)b, (double)f[j],
                     (double)ga, (double)gb);
    }
}

static void test_exp2_bf16(void **state) {
    (void)state;
    skip_without_avx512bf16();
    enum { N = 400003 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    assert_non_null(x);
    assert_non_null(y);
    for (int j = 0; j < N; j++) x[j] = (float)(MHA_EXP2_BF16_FLUSH * j / (N - 1));
    exp2_bf16_array(x, y, N);
    double worst = 0;
    for (int j = 0; j < N; j++) {
        const double want = exp2((double)x[j]);
        worst = fmax(worst, fabs((double)y[j] - want) / want);
    }
    print_message("vexp2_nonpos_bf16: max relative error %.5g over [%g, 0]\n", worst,
                  (double)MHA_EXP2_BF16_FLUSH);
    assert_true(worst <= MHA_EXP2_BF16_REL);
    assert_true(worst > 1e-5); /* it is the short polynomial, not the full one */
    const float e[] = {-INFINITY, -1000.0f, -125.25f, NAN, 0.0f};
    float r[5];
    exp2_bf16_array(e, r, 5);
    assert_true(r[0] == 0.0f && r[1] == 0.0f && r[2] == 0.0f);
    /* 0 below -125, normal above (a relative error of REL is REL x 2^24 ulp at most) */
    no_subnormal(exp2_bf16_array, 1, -128.0, -120.0, MHA_EXP2_BF16_FLUSH, 0.0,
                 MHA_EXP2_BF16_REL * 0x1p24);
    assert_true(isnan(r[3]));
    assert_true(fabs(r[4] - 1.0) <= MHA_EXP2_BF16_REL);
    free(x);
    free(y);
}

static void test_edges(void **state) {
    const int i = (int)(intptr_t)*state;
    if ((mha_isa)i > mha_isa_active()) skip();
    const float x[] = {-INFINITY, -1000.0f, -150.0f, -104.0f, 0.0f, -0.0f, -1e-30f, 1.0f, -88.0f};
    float y[9], y2[9];
    OPS(i)->vexp_array(x, y, 9); /* odd length: the masked tail path too */
    OPS(i)->vexp2_array(x, y2, 9);
    assert_true(y[0] == 0.0f && y2[0] == 0.0f);
    assert_true(y[1] == 0.0f && y2[1] == 0.0f);
    assert_true(y[2] == 0.0f && y2[2] == 0.0f);
    assert_true(y[3] == 0.0f);
    assert_true(y[4] == 1.0f && y2[4] == 1.0f);
    assert_true(y[5] == 1.0f && y2[5] == 1.0f);
    assert_true(y[6] == 1.0f && y2[6] == 1.0f);
    assert_true(ulp_err(y[7], exp(1.0)) <= 4 && ulp_err(y2[7], 2.0) <= 4);
    /* exp(-88) = 6e-39 is below FLT_MIN: exactly 0 on every level. */
    assert_true(y[8] == 0.0f);
    /* ln FLT_MIN = -87.3365; the AVX2 and scalar exp give 2^-127 = +0 below -87.69 */
    const int strict = (mha_isa)i >= MHA_ISA_AVX512;
    no_subnormal(OPS(i)->vexp_array, 0, -90.0, -85.0, strict ? -87.33 : -87.3365,
                 strict ? 0.0 : 0.36, 4);
    no_subnormal(OPS(i)->vexp2_array, 1, -130.0, -120.0, -126.0, strict ? 0.0 : 0.5, 4);
}

/* The softcap (ukernels.h's vsoftcap_log2: c tanh(x / c) log2 e) against
 * libm's tanh in double, over |x / c| in [1e-6, 12] (past the clamp at 9)
 * for caps of 0.75, 30 and 50: relative error within 8 ulp, odd to the
 * bit, +-inf gives +-c log2 e, NaN stays NaN, 0 stays 0. */
static void test_softcap(void **state) {
    const int i = (int)(intptr_t)*state;
    if ((mha_isa)i > mha_isa_active()) {
        print_message("skipping %s: not available here (or capped by MHA_ISA)\n",
                      mha_isa_name((mha_isa)i));
        skip();
    }
    enum { N = 100003 };
    float *x = malloc(2 * N * sizeof *x), *y = malloc(2 * N * sizeof *y);
    const float caps[] = {0.75f, 30.0f, 50.0f};
    double worst = 0;
    for (int ci = 0; ci < 3; ci++) {
        const float c = caps[ci];
        for (int j = 0; j < N; j++) { /* log-spaced |y| from 1e-6 to 12, both signs */
            x[j] = (float)(c * 1e-6 * pow(12e6, (double)j / (N - 1)));
            x[N + j] = -x[j];
        }
        OPS(i)->vsoftcap_array(x, y, 2 * N, c);
        for (int j = 0; j < N; j++) {
            const double want = (double)c * tanh((double)x[j] / c) * 1.4426950408889634;
            const double u = ulp_err(y[j], want);
            if (u > worst) worst = u;
            assert_true(u <= 8.0);
            assert_true(y[N + j] == -y[j]); /* odd */
        }
        const float edge[5] = {INFINITY, -INFINITY, NAN, 0.0f, 1e30f};
        float out[5];
        OPS(i)->vsoftcap_array(edge, out, 5, c); /* also the masked tail */
        const double k = (double)c * 1.4426950408889634;
        assert_true(fabs(out[0] - k) <= 4e-7 * k && fabs(out[1] + k) <= 4e-7 * k);
        assert_true(isnan(out[2]));
        assert_true(out[3] == 0.0f);
        assert_true(fabs(out[4] - k) <= 4e-7 * k);
    }
    print_message("%s: softcap max %.2f ulp\n", mha_isa_name((mha_isa)i), worst);
    free(x);
    free(y);
}

/* The bf16 kernels' softcap (vec_avx512bf16.h's vsoftcap_log2_bf16: c tanh(x
 * sc / c) log2 e with a degree-3 rational, which harness/check.c's
 * TOL_CAP_BF16 cites) against libm's tanh in double, over |x sc / c| in
 * [1e-6, 12] (past the clamp at 7.2) for caps of 0.75, 30 and 50 and
 * prescales of 1 and 0.125: relative error within MHA_SOFTCAP_BF16_REL and
 * above the fp32 form's (it is the short one), odd to the bit, +-inf and
 * 1e30 give +-c log2 e within it, NaN stays NaN, 0 gives 0. */
static void test_softcap_bf16(void **state) {
    (void)state;
    skip_without_avx512bf16();
    enum { N = 100003 };
    float *x = malloc(2 * N * sizeof *x), *y = malloc(2 * N * sizeof *y);
    assert_non_null(x);
    assert_non_null(y);
    const float caps[] = {0.75f, 30.0f, 50.0f}, scs[] = {1.0f, 0.125f};
    double worst = 0;
    for (int ci = 0; ci < 3; ci++)
        for (int si = 0; si < 2; si++) {
            const float c = caps[ci], sc = scs[si];
            for (int j = 0; j < N; j++) { /* log-spaced |x sc / c| from 1e-6 to 12, both signs */
                x[j] = (float)(c / sc * 1e-6 * pow(12e6, (double)j / (N - 1)));
                x[N + j] = -x[j];
            }
            softcap_bf16_array(x, y, 2 * N, sc, c);
            const double k = (double)c * 1.4426950408889634;
            for (int j = 0; j < N; j++) {
                const double want = k * tanh((double)x[j] * sc / c);
                const double rel = fabs((double)y[j] - want) / fabs(want);
                if (rel > worst) worst = rel;
                if (!(rel <= MHA_SOFTCAP_BF16_REL))
                    fail_msg("c %g sc %g x %.9g: %.9g, want %.9g (relative %.3g)", (double)c,
                             (double)sc, (double)x[j], (double)y[j], want, rel);
                assert_true(y[N + j] == -y[j]); /* odd */
            }
            const float edge[5] = {INFINITY, -INFINITY, NAN, 0.0f, 1e30f};
            float out[5];
            softcap_bf16_array(edge, out, 5, sc, c); /* also the masked tail */
            assert_true(fabs(out[0] - k) <= MHA_SOFTCAP_BF16_REL * k);
            assert_true(fabs(out[1] + k) <= MHA_SOFTCAP_BF16_REL * k);
            assert_true(isnan(out[2]));
            assert_true(out[3] == 0.0f);
            assert_true(fabs(out[4] - k) <= MHA_SOFTCAP_BF16_REL * k);
        }
    print_message("vsoftcap_log2_bf16: max relative error %.3g\n", worst);
    assert_true(worst > 2e-7); /* the short rational, not the fp32 kernels' one */
    free(x);
    free(y);
}

/* The ops table: one row per level, in enum order, every entry filled. */
static void test_ops_table(void **state) {
    (void)state;
    for (int i = 0; i < MHA_ISA_COUNT; i++) {
        const mha_isa_ops *o = OPS(i);
        assert_non_null(o);
        assert_int_equal(o->isa, i);
        assert_true(o->lanes >= 1 && o->tile_rows >= 1 && o->tile_width % o->lanes == 0);
        assert_true(o->linear && o->linear_pack_floats && o->softmax_columns && o->pack_transpose &&
                    o->scores_exp && o->vexp_array && o->vexp2_array && o->vsoftcap_array &&
                    o->narrow_array && mha_ops_unit(o, MHA_F32) && o->probe_loop && o->read_sum);
        if (i > 0) assert_true(o->lanes >= OPS(i - 1)->lanes);
    }
    assert_null(mha_ops_for((mha_isa)MHA_ISA_COUNT));
    assert_null(mha_ops_for((mha_isa)-1));
}

/* The narrowing stores (vstore_bf16 / vstore_f16, through each level's
 * narrow_array) against the library's scalar conversions, bit for bit:
 * signed zeros, fp32 subnormals, fp16's subnormal and overflow edges, bf16's
 * ties, Inf, quiet and signalling NaNs with payloads, random bit patterns,
 * and a count that leaves a tail. (Every one of the 2^32 inputs agreed on
 * the avx512 and avx2 forms in a throwaway loop, stop 55.) */
static void test_narrow(void **state) {
    (void)state;
    enum { N = 40003 };
    static const uint32_t edge[] = {
        0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x00800000u, 0x7f7fffffu,
        0xff7fffffu, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u, 0x7f800001u,
        0x7fbfffffu, 0xff812345u, 0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x3f7f8000u,
        0x477fe000u, 0x477ff000u, 0x477fefffu, 0x47800000u, 0x33800000u, 0x33000000u,
        0x33000001u, 0x33c00000u, 0x38800000u, 0x387fffffu, 0x38000000u, 0xb8801000u};
    const int ne = (int)(sizeof edge / sizeof edge[0]);
    float *x = malloc(N * sizeof *x);
    uint16_t *y = malloc(N * sizeof *y), *want = malloc(N * sizeof *want);
    uint64_t r = 0x9e3779b97f4a7c15ull;
    for (int j = 0; j < N; j++) {
        uint32_t u;
        if (j < ne) {
            u = edge[j];
        } else {
            r ^= r << 13;
            r ^= r >> 7;
            r ^= r << 17;
            u = (uint32_t)(r >> 32);
        }
        memcpy(&x[j], &u, 4);
    }
    int checked = 0;
    for (int i = 0; i < MHA_ISA_COUNT; i++) {
        if ((mha_isa)i > mha_isa_active()) continue;
        for (int bf = 0; bf < 2; bf++) {
            const mha_dtype t = bf ? MHA_BF16 : MHA_F16;
            assert_int_equal(mha_convert_from_f32(t, x, want, N), MHA_OK);
            memset(y, 0xab, N * sizeof *y);
            OPS(i)->narrow_array(x, y, N - 1, bf); /* the last element stays unwritten */
            for (int j = 0; j < N - 1; j++) {
                if (y[j] == want[j]) continue;
                uint32_t u;
                memcpy(&u, &x[j], 4);
                fail_msg("%s %s: input 0x%08x gave 0x%04x, want 0x%04x", mha_isa_name((mha_isa)i),
                         bf ? "bf16" : "fp16", (unsigned)u, y[j], want[j]);
            }
            assert_int_equal(y[N - 1], 0xabab);
        }
        checked++;
    }
    assert_true(checked >= 1);
    free(x);
    free(y);
    free(want);
}

int main(void) {
    enum { N = 3 * MHA_ISA_COUNT + 5 };
    struct CMUnitTest tests[N];
    static char names[N][32];
    for (int i = 0; i < MHA_ISA_COUNT; i++) {
        snprintf(names[i], sizeof names[i], "accuracy_%s", mha_isa_name((mha_isa)i));
        snprintf(names[MHA_ISA_COUNT + i], sizeof names[0], "edges_%s", mha_isa_name((mha_isa)i));
        tests[i] = (struct CMUnitTest){names[i], test_accuracy, NULL, NULL, (void *)(intptr_t)i};
        tests[MHA_ISA_COUNT + i] = (struct CMUnitTest){names[MHA_ISA_COUNT + i], test_edges, NULL,
                                                       NULL, (void *)(intptr_t)i};
        snprintf(names[2 * MHA_ISA_COUNT + i], sizeof names[0], "softcap_%s",
                 mha_isa_name((mha_isa)i));
        tests[2 * MHA_ISA_COUNT + i] = (struct CMUnitTest){
            names[2 * MHA_ISA_COUNT + i], test_softcap, NULL, NULL, (void *)(intptr_t)i};
    }
    tests[N - 5] = (struct CMUnitTest){"narrow", test_narrow, NULL, NULL, NULL};
    tests[N - 4] = (struct CMUnitTest){"pairs_scale", test_pairs_scale, NULL, NULL, NULL};
    tests[N - 3] = (struct CMUnitTest){"ops_table", test_ops_table, NULL, NULL, NULL};
    tests[N - 2] = (struct CMUnitTest){"exp2_bf16", test_exp2_bf16, NULL, NULL, NULL};
    tests[N - 1] = (struct CMUnitTest){"softcap_bf16", test_softcap_bf16, NULL, NULL, NULL};
    return _cmocka_run_group_tests("vec", tests, N, NULL, NULL);
}
