/* test_reference.c - the float64 oracle against cases worked by hand:
 * a 2x2 example, one-hot and uniform attention, bottom-right causal with
 * fully masked rows, and the grouped-KV head mapping. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "mha.h"

/* cmocka 1.1.5 compares floats only; doubles need their own check. */
#define assert_close(a, b, eps) assert_true(fabs((double)(a) - (double)(b)) <= (eps))

static void test_two_by_two(void **state) {
    (void)state;
    /* scale 1, d = 1: row 0 scores (0, 0) -> weights 1/2, 1/2 -> (1 + 3) / 2 = 2;
     * row 1 scores (1, 2) -> weights 1/(1+e), e/(1+e) -> (1 + 3e) / (1 + e). */
    const float q[] = {0, 1}, k[] = {1, 2}, v[] = {1, 3};
    double out[2];
    mha_problem p = {.batch = 1,
                     .heads = 1,
                     .kv_heads = 1,
                     .seq_q = 2,
                     .seq_kv = 2,
                     .head_dim = 1,
                     .causal = 0,
                     .scale = 1.0f,
                     .dtype = MHA_F32,
                     .kv_dtype = MHA_F32};
    const mha_tensor qt = mha_view_bhnd(q, 1, 2, 1), kt = mha_view_bhnd(k, 1, 2, 1),
                     vt = mha_view_bhnd(v, 1, 2, 1);
    assert_int_equal(mha_reference(&p, &qt, &kt, &vt, out), MHA_OK);
    const double e = exp(1.0);
    assert_close(out[0], 2.0, 1e-15);
    assert_close(out[1], (1 + 3 * e) / (1 + e), 1e-15);
    p.causal = 1; /* row 0 now sees key 0 only */
    assert_int_equal(mha_reference(&p, &qt, &kt, &vt, out), MHA_OK);
    assert_close(out[0], 1.0, 1e-15);
    assert_close(out[1], (1 + 3 * e) / (1 + e), 1e-15);
}

static void test_one_hot_and_uniform(void **state) {
    (void)state;
    /* One dominant key: the output is its value row. */
    const float q[] = {1, 0}, k[] = {0, 0, 60, 0, 0, 0}, v[] = {1, 2, 3, 4, 5, 6};
    double out[2];
    const mha_problem p = {.batch = 1,
                           .heads = 1,
                           .kv_heads = 1,
                           .seq_q = 1,
                           .seq_kv = 3,
                           .head_dim = 2,
                           .causal = 0,
                           .scale = 1.0f,
                           .dtype = MHA_F32,
                           .kv_dtype = MHA_F32};
    const mha_tensor qt = mha_view_bhnd(q, 1, 1, 2), kt = mha_view_bhnd(k, 1, 3, 2),
                     vt = mha_view_bhnd(v, 1, 3, 2);
    assert_int_equal(mha_reference(&p, &qt, &kt, &vt, out), MHA_OK);
    assert_close(out[0], 3.0, 1e-20);
    assert_close(out[1], 4.0, 1e-20);
    /* All keys equal: the mean of V. */
    const float ke[] = {2, 1, 2, 1, 2, 1};
    const mha_tensor kte = mha_view_bhnd(ke, 1, 3, 2);
    assert_int_equal(mha_reference(&p, &qt, &kte, &vt, out), MHA_OK);
    assert_close(out[0], 3.0, 1e-15);
    assert_close(out[1], 4.0, 1e-15);
}

static void test_masked_rows(void **state) {
    (void)state;
    /* Nq = 3 > Nkv = 1, causal bottom-right: only the last query sees key 0. */
    const float q[] = {1, 2, 3}, k[] = {1}, v[] = {7};
    double out[3] = {-1, -1, -1};
    const mha_problem p = {.batch = 1,
                           .heads = 1,
                           .kv_heads = 1,
                           .seq_q = 3,
                           .seq_kv = 1,
                           .head_dim = 1,
                           .causal = 1,
                           .scale = 0.0f,
                           .dtype = MHA_F32,
                           .kv_dtype = MHA_F32};
    const mha_tensor qt = mha_view_bhnd(q, 1, 3, 1), kt = mha_view_bhnd(k, 1, 1, 1),
                     vt = mha_view_bhnd(v, 1, 1, 1);
    assert_int_equal(mha_reference(&p, &qt, &kt, &vt, out), MHA_OK);
    assert_true(out[0] == 0.0 && out[1] == 0.0); /* zeros, not NaN */
    assert_close(out[2], 7.0, 0);
}

static void test_grouped_heads(void **state) {
    (void)state;
    /* 4 query heads over 2 KV heads: heads 0,1 read KV head 0 (V = 5), heads 2,3 KV head 1 (V = 7).
     */
    float q[4 * 2], k[2 * 2 * 1], v[2 * 2];
    for (int i = 0; i < 8; i++) q[i] = (float)i * 0.1f;
    for (int i = 0; i < 4; i++) k[i] = (float)i;
    v[0] = v[1] = 5;
    v[2] = v[3] = 7;
    double out[8];
    const mha_problem p = {.batch = 1,
                           .heads = 4,
                           .kv_heads = 2,
                           .seq_q = 2,
                           .seq_kv = 2,
                           .head_dim = 1,
                           .causal = 0,
                           .scale = 0.0f,
                           .dtype = MHA_F32,
                           .kv_dtype = MHA_F32};
    const mha_tensor qt = mha_view_bhnd(q, 4, 2, 1), kt = mha_view_bhnd(k, 2, 2, 1),
                     vt = mha_view_bhnd(v, 2, 2, 1);
    assert_int_equal(mha_reference(&p, &qt, &kt, &vt, out), MHA_OK);
    for (int h = 0; h < 4; h++)
        for (int i = 0; i < 2; i++) assert_close(out[h * 2 + i], h < 2 ? 5.0 : 7.0, 1e-12);
}

static void test_flops(void **state) {
    (void)state;
    mha_problem p = {.batch = 2,
                     .heads = 3,
                     .kv_heads = 3,
                     .seq_q = 4,
                     .seq_kv = 4,
                     .head_dim = 8,
                     .causal = 0,
                     .scale = 0.0f,
                     .dtype = MHA_F32,
                     .kv_dtype = MHA_F32};
    assert_close(mha_problem_flops(&p), 4.0 * 2 * 3 * 16 * 8, 0);
    p.causal = 1; /* 1 + 2 + 3 + 4 visible pairs */
    assert_close(mha_problem_flops(&p), 4.0 * 2 * 3 * 10 * 8, 0);
    p.seq_q = 1; /* decode sees the whole cache */
    assert_close(mha_problem_flops(&p), 4.0 * 2 * 3 * 4 * 8, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_by_two),  cmocka_unit_test(test_one_hot_and_uniform),
        cmocka_unit_test(test_masked_rows), cmocka_unit_test(test_grouped_heads),
        cmocka_unit_test(test_flops),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
