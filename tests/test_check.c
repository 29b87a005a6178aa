/* test_check.c - the verification engine's dtype machinery, without needing
 * a kernel that takes a dtype: the tolerance formula per dtype (check.c's
 * derivation), inputs stored typed (bf16/fp16 rounded, int8 quantised with
 * scales) and the oracle reading them, and typed outputs checked element by
 * element with sentinels and guard zones. A "kernel" emulated from an fp32
 * kernel on the stored values, rounding its output, must pass; one off by
 * more than the bound, one that leaves an element unwritten, and one that
 * writes into a guard must fail. Typed kernels in the list (once a branch adds
 * them) are checked by test_kernels; here they are listed or skipped visibly. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "check.h"

/* cmocka 1.1.5 has no assert_double_equal */
#define assert_near(a, b, eps) assert_true(fabs((double)(a) - (double)(b)) <= (eps))

static const struct {
    mha_dtype dt, kv;
} combos[] = {{MHA_BF16, MHA_BF16}, {MHA_F16, MHA_F16},  {MHA_F32, MHA_I8},  {MHA_BF16, MHA_I8},
              {MHA_F16, MHA_I8},    {MHA_F32, MHA_BF16}, {MHA_F32, MHA_F16}, {MHA_BF16, MHA_F16}};
enum { NCOMBO = sizeof combos / sizeof combos[0] };

static double tol_of(mha_dtype dt, mha_dtype kv, double mag, double smax, int64_t d, double *rel) {
    mha_problem p = {.batch = 1, .heads = 1, .kv_heads = 1, .seq_q = 4, .seq_kv = 4, .head_dim = d};
    check_case c = {.p = p};
    check_case_set_dtypes(&c, dt, kv);
    double abs;
    check_tolerance(&c.p, mag, smax, &abs, rel);
    return abs;
}

/* The formula, term by term, as check.c derives it. */
static void test_tolerance_formula(void **state) {
    (void)state;
    const double mag = 0.75, smax = 2.5, eps = 1.1920929e-7, u = 0x1p-9 + 7.5e-5;
    const double ub = 0x1p-9; /* u: P's rounding plus the degree-3 exp2's error */
    const double base = 2e-5 + 4 * eps * sqrt(64.0) * smax;
    double rel;
    assert_near(tol_of(MHA_F32, MHA_F32, mag, smax, 64, &rel), mag * base, 1e-15);
    assert_true(rel == 0.0);
    /* int8 caches are exact for the oracle: the fp32 tolerance */
    assert_near(tol_of(MHA_F32, MHA_I8, mag, smax, 64, &rel), mag * base, 1e-15);
    assert_true(rel == 0.0);
    /* bf16: P rounded (2 u_p), output rounded 2^-9 */
    assert_near(tol_of(MHA_BF16, MHA_BF16, mag, smax, 64, &rel), mag * (base + 2 * u), 1e-15);
    assert_true(rel == 0x1p-9);
    assert_near(tol_of(MHA_BF16, MHA_I8, mag, smax, 64, &rel), mag * (base + 2 * u), 1e-15);
    assert_true(rel == 0x1p-9);
    /* fp16: P rounded, Q and K converted to bf16 (logits move by 2 u smax),
     * V converted; output rounded 2^-11 */
    const double f16 = base + 2 * u + expm1(2 * 2 * ub * smax) + ub;
    assert_near(tol_of(MHA_F16, MHA_F16, mag, smax, 64, &rel), mag * f16, 1e-15);
    assert_true(rel == 0x1p-11);
    /* fp16 queries over an int8 cache: only Q is converted, V is exact */
    assert_near(tol_of(MHA_F16, MHA_I8, mag, smax, 64, &rel),
                mag * (base + 2 * u + expm1(2 * ub * smax)), 1e-15);
    /* fp32 queries over an fp16 cache: K and V converted, output fp32 */
    assert_near(tol_of(MHA_F32, MHA_F16, mag, smax, 64, &rel),
                mag * (base + 2 * u + expm1(2 * ub * smax) + ub), 1e-15);
    assert_true(rel == 0.0);
    /* ordering: fp32 < bf16 < fp16 for the same data */
    assert_true(tol_of(MHA_F32, MHA_F32, mag, smax, 64, &rel) <
                tol_of(MHA_BF16, MHA_BF16, mag, smax, 64, &rel));
    assert_true(tol_of(MHA_BF16, MHA_BF16, mag, smax, 64, &rel) <
                tol_of(MHA_F16, MHA_F16, mag, smax, 64, &rel));
}

static check_case a_case(mha_dtype dt, mha_dtype kv, int layout) {
    check_case c = {.p = {.batch = 2,
                          .heads = 4,
                          .kv_heads = 2,
                          .seq_q = 9,
                          .seq_kv = 37,
                          .head_dim = 24,
                          .causal = 1},
                    .input = INPUT_UNIFORM,
                    .layout = layout,
                    .tag = "test"};
    check_case_set_dtypes(&c, dt, kv);
    return c;
}

static float widen(mha_dtype t, float x) {
    uint16_t h;
    float y;
    mha_convert_from_f32(t, &x, &h, 1);
    mha_convert_to_f32(t, &h, &y, 1);
    return y;
}

/* Inputs are stored in their dtype; the fp32 shadow holds the stored values,
 * and the reference is the oracle on them. */
static void test_inputs_stored_typed(void **state) {
    (void)state;
    for (int ci = 0; ci < NCOMBO; ci++)
        for (int layout = 0; layout < LAYOUT_COUNT; layout++) {
            const check_case c = a_case(combos[ci].dt, combos[ci].kv, layout);
            check_data d;
            assert_int_equal(check_prepare(&c, 99, &d), MHA_OK);
            const mha_problem *p = &d.c.p;
            assert_int_equal(d.qv.dtype, p->dtype);
            assert_int_equal(d.kv.dtype, mha_problem_kv_dtype(p));
            assert_int_equal(d.vv.dtype, mha_problem_kv_dtype(p));
            /* Q of a 2-byte dtype: the shadow values round-trip exactly */
            if (p->dtype != MHA_F32)
                for (int64_t i = 0; i < p->seq_q * p->head_dim; i++)
                    assert_true(isnan(d.q[i]) || d.q[i] == widen(p->dtype, d.q[i]));
            if (mha_problem_kv_dtype(p) == MHA_I8) {
                assert_non_null(d.kv.scale);
                assert_non_null(d.vv.scale);
                const int8_t *k8 = d.kv.data;
                for (int64_t n = 0; n < p->seq_kv; n++)
                    for (int64_t c2 = 0; c2 < p->head_dim; c2++) {
                        const int64_t at = n * d.kv.stride_n + c2;
                        assert_true(d.k[at] == (float)k8[at] * d.kv.scale[n]);
                    }
            }
            /* the reference is the oracle on the widened values as fp32 */
            mha_problem fp = *p;
            fp.dtype = fp.kv_dtype = MHA_F32;
            mha_tensor q = d.qv, k = d.kv, v = d.vv;
            q.data = d.q, k.data = d.k, v.data = d.v;
            q.dtype = k.dtype = v.dtype = MHA_F32;
            k.scale = v.scale = NULL;
            const size_t n = (size_t)(p->batch * p->heads * p->seq_q * p->head_dim);
            double *ref = malloc(n * sizeof *ref);
            assert_int_equal(mha_reference(&fp, &q, &k, &v, ref), MHA_OK);
            /* int8: the shadow is int8 * scale rounded to fp32, the oracle
             * applies the scale in double */
            const double close = mha_problem_kv_dtype(p) == MHA_I8 ? 1e-6 : 1e-12;
            for (size_t i = 0; i < n; i++)
                assert_true(fabs(ref[i] - d.ref[i]) <= close * (1 + fabs(ref[i])));
            free(ref);
            check_release(&d);
        }
}

/* A "kernel" for a typed case: the fp32 kernel k on the stored values,
 * output perturbed by bump(i) and rounded to the output dtype. */
static int emulate(const mha_kernel *k, const check_data *d,
                   double (*bump)(const check_data *, int64_t, double), int skip_elem,
                   int guard_write, check_report *r) {
    const mha_problem *p = &d->c.p;
    mha_problem fp = *p;
    fp.dtype = fp.kv_dtype = MHA_F32;
    mha_tensor q = d->qv, kk = d->kv, v = d->vv;
    q.data = d->q, kk.data = d->k, v.data = d->v;
    q.dtype = kk.dtype = v.dtype = MHA_F32;
    kk.scale = v.scale = NULL;
    const int64_t H = p->heads, N = p->seq_q, D = p->head_dim;
    float *o32 = mha_alloc((size_t)(p->batch * H * N * D) * sizeof(float));
    const mha_tensor_mut ov = mha_view_bhnd_mut(o32, H, N, D);
    size_t ws_bytes = 0;
    assert_int_equal(mha_workspace_size(k, &fp, &(mha_options){.threads = 1}, &ws_bytes), MHA_OK);
    void *ws = mha_alloc(ws_bytes);
    assert_int_equal(
        mha_attend(k, &fp, &(mha_options){.threads = 1}, &q, &kk, &v, &ov, ws, ws_bytes), MHA_OK);
    check_out out;
    assert_true(check_out_alloc(d, &out));
    const size_t es = mha_dtype_size(out.dtype);
    int64_t idx = 0;
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < N; i++)
                for (int64_t c = 0; c < D; c++, idx++) {
                    if (idx == skip_elem) continue;
                    const float x = (float)((double)o32[idx] + bump(d, idx, d->ref[idx]));
                    char *dst =
                        (char *)out.view.data + (b * out.view.stride_b + h * out.view.stride_h +
                                                 i * out.view.stride_n + c) *
                                                    (int64_t)es;
                    mha_convert_from_f32(out.dtype, &x, dst, 1);
                }
    if (guard_write) memset((char *)out.view.data - es, 0, es); /* the element before the view */
    const int res = check_out_compare(d, &out, r);
    check_out_free(&out);
    mha_free(ws);
    mha_free(o32);
    return res;
}

static double no_bump(const check_data *d, int64_t i, double ref) {
    (void)d, (void)i, (void)ref;
    return 0;
}
static double within(const check_data *d, int64_t i, double ref) {
    (void)ref;
    return (i % 2 ? 0.5 : -0.5) * d->tol; /* inside the bound, both signs */
}
static double beyond(const check_data *d, int64_t i, double ref) {
    /* one element past the allowed error by 4x: still out after rounding */
    return i == 5 ? 4 * ((1 + d->tol_rel) * d->tol + d->tol_rel * fabs(ref)) : 0;
}

static void test_typed_output_checked(void **state) {
    (void)state;
    const mha_kernel *k = mha_kernel_find("naive");
    for (int ci = 0; ci < NCOMBO; ci++)
        for (int layout = 0; layout < LAYOUT_COUNT; layout++) {
            const check_case c = a_case(combos[ci].dt, combos[ci].kv, layout);
            check_data d;
            assert_int_equal(check_prepare(&c, 7 + ci, &d), MHA_OK);
            check_report r;
            char desc[192];
            check_describe(&d.c, desc, sizeof desc);
            int res = emulate(k, &d, no_bump, -1, 0, &r);
            if (res != CHECK_PASS) print_error("%s: %s\n", desc, r.detail);
            assert_int_equal(res, CHECK_PASS);
            assert_int_equal(emulate(k, &d, within, -1, 0, &r), CHECK_PASS);
            assert_int_equal(emulate(k, &d, beyond, -1, 0, &r), CHECK_FAIL);
            assert_non_null(strstr(r.detail, "first bad element"));
            assert_non_null(strstr(r.detail, "1 bad elements"));
            assert_int_equal(emulate(k, &d, no_bump, 3, 0, &r), CHECK_FAIL);
            assert_non_null(strstr(r.detail, "never written"));
            assert_int_equal(emulate(k, &d, no_bump, -1, 1, &r), CHECK_FAIL);
            assert_non_null(strstr(r.detail, "guard zone"));
            assert_non_null(strstr(r.detail, mha_dtype_name(d.c.p.dtype)));
            check_release(&d);
        }
}

/* The bf16 tolerance is tight enough to matter: a P.V done with P rounded to
 * bf16 passes, one that drops the last visible key of each row (a lost tail)
 * does not. */
static double lose_tail(const check_data *d, int64_t i, double ref) {
    (void)ref;
    return (i % 3 == 0 ? 1 : -1) * 0.05 * d->mag; /* ~mag/Nkv * 2 at Nkv = 37 */
}

static void test_bf16_bound_not_vacuous(void **state) {
    (void)state;
    const check_case c = a_case(MHA_BF16, MHA_BF16, LAYOUT_BHND);
    check_data d;
    assert_int_equal(check_prepare(&c, 3, &d), MHA_OK);
    assert_true(d.tol < 0.01 * d.mag);
    check_report r;
    assert_int_equal(emulate(mha_kernel_find("naive"), &d, lose_tail, -1, 0, &r), CHECK_FAIL);
    check_release(&d);
}

/* Input kinds that mean nothing in a dtype are not run there. */
static void test_input_fits(void **state) {
    (void)state;
    assert_true(check_input_fits(INPUT_NINF_K, MHA_F32, MHA_F32));
    assert_false(check_input_fits(INPUT_NINF_K, MHA_F32, MHA_I8));
    assert_false(check_input_fits(INPUT_NINF_ALL, MHA_BF16, MHA_I8));
    assert_true(check_input_fits(INPUT_NAN_K, MHA_F32, MHA_I8));
    assert_false(check_input_fits(INPUT_HUGE, MHA_F16, MHA_F16));
    assert_false(check_input_fits(INPUT_HUGE, MHA_F32, MHA_F16));
    assert_true(check_input_fits(INPUT_HUGE, MHA_BF16, MHA_BF16));
    assert_true(check_input_fits(INPUT_HUGE, MHA_F32, MHA_I8));
}

/* A NaN in an int8 cache row reaches the oracle (the row's scale is NaN). */
static void test_int8_nan_row(void **state) {
    (void)state;
    check_case c = {.p = {.batch = 1,
                          .heads = 4,
                          .kv_heads = 2,
                          .seq_q = 33,
                          .seq_kv = 33,
                          .head_dim = 63,
                          .causal = 1},
                    .input = INPUT_NAN_K,
                    .layout = LAYOUT_PADDED,
                    .tag = "nan-k"};
    check_case_set_dtypes(&c, MHA_F32, MHA_I8);
    check_data d;
    assert_int_equal(check_prepare(&c, 5, &d), MHA_OK);
    assert_true(isnan(d.kv.scale[33 / 2]));
    assert_true(isnan(d.ref[(33 - 1) * 63])); /* the last row sees key 16 */
    assert_false(isnan(d.ref[0]));            /* the first does not (causal) */
    check_release(&d);
}

/* Which typed kernels this build has: those test_kernels checks per dtype. */
static void test_typed_kernels(void **state) {
    (void)state;
    int n = 0;
    for (int i = 0; i < mha_kernel_count(); i++) {
        const mha_kernel *k = mha_kernel_at(i);
        if ((mha_kernel_dtypes(k) | mha_kernel_kv_dtypes(k)) & ~MHA_DTYPE_BIT(MHA_F32)) {
            print_message("typed kernel: %s\n", mha_kernel_name(k));
            n++;
        }
    }
    if (n == 0) {
        print_message("skipping: no kernel in this build takes bf16, fp16 or int8\n");
        skip();
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tolerance_formula),    cmocka_unit_test(test_inputs_stored_typed),
        cmocka_unit_test(test_typed_output_checked), cmocka_unit_test(test_bf16_bound_not_vacuous),
        cmocka_unit_test(test_input_fits),           cmocka_unit_test(test_int8_nan_row),
        cmocka_unit_test(test_typed_kernels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
