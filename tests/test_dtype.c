/* test_dtype.c - element types: the scalar conversions against their
 * definition (every fp16 value, random fp32 values, ties, subnormals,
 * overflow, NaN), int8 row quantisation, the contract around typed views
 * (a view of the wrong dtype, int8 without scales, a kernel that does not take
 * a dtype) and the oracle on stored bf16/fp16/int8 values. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "mha.h"

static inline uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static float to_f32(mha_dtype t, uint16_t h) {
    float f;
    mha_convert_to_f32(t, &h, &f, 1);
    return f;
}
static uint16_t from_f32(mha_dtype t, float f) {
    uint16_t h;
    mha_convert_from_f32(t, &f, &h, 1);
    return h;
}

/* Every non-NaN 16-bit pattern survives the round trip through fp32. */
static void test_roundtrip_all(void **state) {
    (void)state;
    for (int t = MHA_BF16; t <= MHA_F16; t++)
        for (uint32_t h = 0; h < 65536; h++) {
            const float f = to_f32((mha_dtype)t, (uint16_t)h);
            if (isnan(f)) {
                assert_true(isnan(to_f32((mha_dtype)t, from_f32((mha_dtype)t, f))));
                continue;
            }
            if (from_f32((mha_dtype)t, f) != h)
                fail_msg("%s 0x%04x -> %a -> 0x%04x", mha_dtype_name((mha_dtype)t), h, (double)f,
                         from_f32((mha_dtype)t, f));
        }
}

/* fp32 -> 16 bits is the nearest representable value, ties to even: checked
 * against the neighbours of the result for random fp32 bit patterns and for
 * exact midpoints. */
static void check_nearest(mha_dtype t, float x) {
    const uint16_t r = from_f32(t, x);
    const float y = to_f32(t, r);
    if (isnan(x)) {
        assert_true(isnan(y));
        return;
    }
    if (isinf(y) && !isinf(x)) { /* overflow: beyond the largest finite + half an ulp */
        const float big = to_f32(t, t == MHA_F16 ? 0x7bff : 0x7f7f);
        const float next_up = t == MHA_F16 ? 65536.0f : from_bits(0x7f7f8000u);
        assert_true(fabsf(x) >= big);
        assert_true(fabsf(x) >= (big + (next_up - big) / 2) * 0.999999f);
        return;
    }
    const double err = fabs((double)x - (double)y);
    for (int dir = -1; dir <= 1; dir += 2) {
        const uint16_t n = (uint16_t)(r + dir);
        const float z = to_f32(t, n);
        if (isnan(z) || ((n ^ r) & 0x8000)) continue;
        const double e2 = fabs((double)x - (double)z);
        if (e2 < err)
            fail_msg("%s: %a -> %a, but %a is nearer", mha_dtype_name(t), (double)x, (double)y,
                     (double)z);
        if (e2 == err && (r & 1)) fail_msg("%s: tie %a not to even", mha_dtype_name(t), (double)x);
    }
}

static void test_nearest_even(void **state) {
    (void)state;
    for (int i = 0; i < 400000; i++) {
        const float x = from_bits((uint32_t)next());
        check_nearest(MHA_BF16, x);
        /* fp16's range: scale random patterns into [2^-26, 2^17] too */
        check_nearest(MHA_F16, x);
        check_nearest(MHA_F16, ldexpf(from_bits(((uint32_t)next() & 0x807fffffu) | 0x3f800000u),
                                      (int)(next() % 44) - 27));
    }
    /* exact midpoints between neighbours */
    for (uint32_t h = 1; h < 0x7bff; h += 7) {
        const float a = to_f32(MHA_F16, (uint16_t)h), b = to_f32(MHA_F16, (uint16_t)(h + 1));
        check_nearest(MHA_F16, (a + b) / 2);
        const float c = to_f32(MHA_BF16, (uint16_t)h), d = to_f32(MHA_BF16, (uint16_t)(h + 1));
        check_nearest(MHA_BF16, c + (d - c) / 2);
    }
    assert_int_equal(from_f32(MHA_F16, 65519.0f), 0x7bff);
    assert_int_equal(from_f32(MHA_F16, 65520.0f), 0x7c00);
    assert_int_equal(from_f32(MHA_F16, 0x1p-25f), 0);        /* tie to even zero */
    assert_int_equal(from_f32(MHA_F16, 0x1.000002p-25f), 1); /* just above: smallest subnormal */
    assert_int_equal(from_f32(MHA_BF16, 1.0f + 0x1p-8f), 0x3f80); /* tie to even */
    assert_int_equal(from_f32(MHA_BF16, 1.0f + 0x3p-8f), 0x3f82);
    assert_int_equal(from_f32(MHA_BF16, INFINITY), 0x7f80);
    assert_int_equal(from_f32(MHA_F16, -INFINITY), 0xfc00);
    assert_true(isnan(to_f32(MHA_BF16, from_f32(MHA_BF16, NAN))));
}

static void test_names_sizes(void **state) {
    (void)state;
    const char *names[] = {"fp32", "bf16", "fp16", "int8"};
    const size_t sizes[] = {4, 2, 2, 1};
    for (int t = 0; t < MHA_DTYPE_COUNT; t++) {
        mha_dtype back;
        assert_string_equal(mha_dtype_name((mha_dtype)t), names[t]);
        assert_int_equal(mha_dtype_size((mha_dtype)t), sizes[t]);
        assert_int_equal(mha_dtype_parse(names[t], &back), MHA_OK);
        assert_int_equal(back, t);
    }
    mha_dtype t;
    assert_int_equal(mha_dtype_parse("float16", &t), MHA_OK);
    assert_int_equal(t, MHA_F16);
    assert_int_equal(mha_dtype_parse("fp8", &t), MHA_EINVAL);
    assert_non_null(strstr(mha_last_error(), "fp8"));
    assert_int_equal(mha_dtype_size((mha_dtype)9), 0);
}

static void test_quantize(void **state) {
    (void)state;
    float x[3][5] = {{1, -2, 0.5f, 127, -63.5f}, {0, 0, 0, 0, 0}, {1, NAN, 2, 3, 4}};
    int8_t q[3][5];
    float s[3];
    mha_quantize_rows_i8(&x[0][0], 3, 5, 5, &q[0][0], 5, s);
    assert_true(s[0] == 1.0f);
    assert_int_equal(q[0][0], 1);
    assert_int_equal(q[0][1], -2);
    assert_int_equal(q[0][2], 0); /* 0.5 to even */
    assert_int_equal(q[0][3], 127);
    assert_int_equal(q[0][4], -64);
    assert_true(s[1] == 1.0f);
    for (int i = 0; i < 5; i++) assert_int_equal(q[1][i], 0);
    assert_true(isnan(s[2]));
    /* error bound: |x - q*s| <= s/2 on random rows */
    float r[64];
    int8_t rq[64];
    float rs;
    for (int i = 0; i < 64; i++) r[i] = (float)((int64_t)(next() % 20001) - 10000) / 777.0f;
    mha_quantize_rows_i8(r, 1, 64, 64, rq, 64, &rs);
    for (int i = 0; i < 64; i++) assert_true(fabsf(r[i] - (float)rq[i] * rs) <= rs * 0.5f + 1e-6f);
}

static void test_problem_dtypes(void **state) {
    (void)state;
    mha_problem p = {.batch = 1,
                     .heads = 2,
                     .kv_heads = 1,
                     .seq_q = 3,
                     .seq_kv = 5,
                     .head_dim = 4,
                     .causal = 0,
                     .scale = 0.0f,
                     .dtype = MHA_F32,
                     .kv_dtype = MHA_F32};
    assert_int_equal(mha_problem_validate(&p), MHA_OK);
    p.dtype = MHA_I8;
    assert_int_equal(mha_problem_validate(&p), MHA_EINVAL);
    assert_non_null(strstr(mha_last_error(), "problem.dtype = 3 (int8)"));
    p.dtype = (mha_dtype)7;
    assert_int_equal(mha_problem_validate(&p), MHA_EINVAL);
    p.dtype = MHA_BF16;
    assert_int_equal(mha_problem_kv_dtype(&p), MHA_BF16);
    p.kv_dtype = MHA_I8;
    assert_int_equal(mha_problem_validate(&p), MHA_OK);
    assert_int_equal(mha_problem_kv_dtype(&p), MHA_I8);
    p.kv_dtype = (mha_dtype)4;
    assert_int_equal(mha_problem_validate(&p), MHA_EINVAL);
    assert_non_null(strstr(mha_last_error(), "kv_dtype = 4"));
}

/* mha_attend's checks: dtype of each view, int8 scales, kernel's dtypes. */
static void test_attend_dtype_checks(void **state) {
    (void)state;
    const mha_kernel *k = mha_kernel_find("naive");
    assert_non_null(k);
    assert_true(mha_kernel_dtypes(k) & MHA_DTYPE_BIT(MHA_F32));
    mha_problem p = {.batch = 1,
                     .heads = 1,
                     .kv_heads = 1,
                     .seq_q = 2,
                     .seq_kv = 3,
                     .head_dim = 4,
                     .causal = 0,
                     .scale = 0.0f,
                     .dtype = MHA_F32,
                     .kv_dtype = MHA_F32};
    float q[8] = {0}, kv[12] = {0}, o[8];
    uint16_t h[12] = {0};
    mha_tensor qt = mha_view_bhnd(q, 1, 2, 4), kt = mha_view_bhnd(kv, 1, 3, 4),
               vt = mha_view_bhnd(kv, 1, 3, 4);
    mha_tensor_mut ot = mha_view_bhnd_mut(o, 1, 2, 4);
    size_t ws = 0;
    assert_int_equal(mha_workspace_size(k, &p, NULL, &ws), MHA_OK);
    void *w = mha_alloc(ws);
    assert_int_equal(mha_attend(k, &p, NULL, &qt, &kt, &vt, &ot, w, ws), MHA_OK);
    /* a bf16 view under an fp32 problem */
    mha_tensor kb = mha_view_typed(h, MHA_BF16, NULL, 1, 3, 4);
    assert_int_equal(mha_attend(k, &p, NULL, &qt, &kb, &vt, &ot, w, ws), MHA_EINVAL);
    assert_non_null(strstr(mha_last_error(), "k.dtype = bf16, but the problem says fp32"));
    /* a dtype the kernel does not take */
    p.dtype = MHA_BF16;
    const unsigned takes = mha_kernel_dtypes(k);
    if (!(takes & MHA_DTYPE_BIT(MHA_BF16))) {
        assert_int_equal(mha_kernel_takes(k, &p), MHA_EUNSUPPORTED);
        assert_non_null(strstr(mha_last_error(), "not bf16"));
        assert_int_equal(mha_attend(k, &p, NULL, &qt, &kt, &vt, &ot, w, ws), MHA_EUNSUPPORTED);
        size_t n;
        assert_int_equal(mha_workspace_size(k, &p, NULL, &n), MHA_EUNSUPPORTED);
    }
    /* int8 without scales: the view check names it (any kernel, before running) */
    p.dtype = MHA_F32;
    p.kv_dtype = MHA_I8;
    int8_t i8[12] = {0};
    mha_tensor k8 = mha_view_typed(i8, MHA_I8, NULL, 1, 3, 4), v8 = k8;
    assert_int_equal(mha_reference(&p, &qt, &k8, &v8, (double[8]){0}), MHA_EINVAL);
    if (!strstr(mha_last_error(), "k is int8 but k.scale is NULL"))
        fail_msg("%s", mha_last_error());
    mha_free(w);
}

/* The oracle reads stored values: a bf16 (fp16, int8) problem gives exactly
 * the oracle of the fp32 problem holding the widened values. */
static void test_reference_typed(void **state) {
    (void)state;
    enum { H = 2, G = 1, NQ = 3, NK = 5, D = 6 };
    float qf[H * NQ * D], kf[G * NK * D], vf[G * NK * D];
    for (size_t i = 0; i < sizeof qf / 4; i++) qf[i] = (float)((int)(next() % 2001) - 1000) / 300;
    for (size_t i = 0; i < sizeof kf / 4; i++) kf[i] = (float)((int)(next() % 2001) - 1000) / 300;
    for (size_t i = 0; i < sizeof vf / 4; i++) vf[i] = (float)((int)(next() % 2001) - 1000) / 300;
    for (int t = MHA_BF16; t <= MHA_I8; t++) {
        const mha_dtype dt = t == MHA_I8 ? MHA_F32 : (mha_dtype)t, kvt = (mha_dtype)t;
        uint16_t q16[sizeof qf / 4];
        uint8_t kb[sizeof kf], vb[sizeof vf];
        float ks[G * NK], vs[G * NK], qw[sizeof qf / 4], kw[sizeof kf / 4], vw[sizeof vf / 4];
        if (dt != MHA_F32) {
            mha_convert_from_f32(dt, qf, q16, sizeof qf / 4);
            mha_convert_to_f32(dt, q16, qw, sizeof qf / 4);
        } else {
            memcpy(qw, qf, sizeof qf);
        }
        if (kvt == MHA_I8) {
            mha_quantize_rows_i8(kf, G * NK, D, D, (int8_t *)kb, D, ks);
            mha_quantize_rows_i8(vf, G * NK, D, D, (int8_t *)vb, D, vs);
            for (int r = 0; r < G * NK; r++)
                for (int c = 0; c < D; c++) {
                    kw[r * D + c] = (float)((int8_t *)kb)[r * D + c] * ks[r];
                    vw[r * D + c] = (float)((int8_t *)vb)[r * D + c] * vs[r];
                }
        } else {
            mha_convert_from_f32(kvt, kf, kb, sizeof kf / 4);
            mha_convert_from_f32(kvt, vf, vb, sizeof vf / 4);
            mha_convert_to_f32(kvt, kb, kw, sizeof kf / 4);
            mha_convert_to_f32(kvt, vb, vw, sizeof vf / 4);
        }
        const mha_problem pt = {.batch = 1,
                                .heads = H,
                                .kv_heads = G,
                                .seq_q = NQ,
                                .seq_kv = NK,
                                .head_dim = D,
                                .causal = 1,
                                .scale = 0.0f,
                                .dtype = dt,
                                .kv_dtype = kvt};
        const mha_problem pf = {.batch = 1,
                                .heads = H,
                                .kv_heads = G,
                                .seq_q = NQ,
                                .seq_kv = NK,
                                .head_dim = D,
                                .causal = 1,
                                .scale = 0.0f,
                                .dtype = MHA_F32,
                                .kv_dtype = MHA_F32};
        const mha_tensor qt =
            dt == MHA_F32 ? mha_view_bhnd(qf, H, NQ, D) : mha_view_typed(q16, dt, NULL, H, NQ, D);
        const mha_tensor kt = mha_view_typed(kb, kvt, ks, G, NK, D),
                         vt = mha_view_typed(vb, kvt, vs, G, NK, D);
        const mha_tensor qw_t = mha_view_bhnd(qw, H, NQ, D), kw_t = mha_view_bhnd(kw, G, NK, D),
                         vw_t = mha_view_bhnd(vw, G, NK, D);
        double a[H * NQ * D], b[H * NQ * D];
        if (mha_reference(&pt, &qt, &kt, &vt, a) != MHA_OK) fail_msg("%s", mha_last_error());
        assert_int_equal(mha_reference(&pf, &qw_t, &kw_t, &vw_t, b), MHA_OK);
        for (int i = 0; i < H * NQ * D; i++)
            assert_true(fabs(a[i] - b[i]) <= 1e-6 * (1 + fabs(b[i])));
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_all),   cmocka_unit_test(test_nearest_even),
        cmocka_unit_test(test_names_sizes),     cmocka_unit_test(test_quantize),
        cmocka_unit_test(test_problem_dtypes),  cmocka_unit_test(test_attend_dtype_checks),
        cmocka_unit_test(test_reference_typed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
