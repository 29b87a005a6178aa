/* test_kernels.c - every registered kernel against the float64 oracle on the
 * quick verification grid (odd sizes, GQA/MQA, cross, decode, causal, the
 * adversarial inputs, three memory layouts) with 1 and 2 threads, in every
 * (dtype, kv dtype) its mask columns say it takes. One cmocka test per
 * kernel, generated from the registry; ISAs this CPU (or MHA_ISA) does not
 * allow are skipped visibly. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "check.h"
#include "testutil.h"

enum { MAX_CASES = 512 };
static check_case cases[MAX_CASES];
static int ncases;

static void test_kernel(void **state) {
    const mha_kernel *k = *state;
    if (mha_kernel_supported(k) != MHA_OK) {
        print_message("skipping %s: %s\n", mha_kernel_name(k), mha_last_error());
        skip();
    }
    if (!(mha_kernel_dtypes(k) & MHA_DTYPE_BIT(MHA_F32))) { /* the grid is fp32 */
        print_message("skipping %s: it does not take fp32 (tests/test_bf16.c checks it)\n",
                      mha_kernel_name(k));
        skip();
    }
    int failures = 0;
    /* every (dtype, kv dtype) the kernel takes, by its mask columns */
    for (int dt = MHA_F32; dt <= MHA_F16; dt++)
        for (int kv = MHA_F32; kv < MHA_DTYPE_COUNT; kv++) {
            if ((dt != MHA_F32 && kv == MHA_F32) || !(mha_kernel_dtypes(k) & MHA_DTYPE_BIT(dt)) ||
                !(mha_kernel_kv_dtypes(k) & MHA_DTYPE_BIT(kv)))
                continue;
            for (int ci = 0; ci < ncases; ci++) {
                if (!check_input_fits(cases[ci].input, (mha_dtype)dt, (mha_dtype)kv)) continue;
                if (!tu_take(ci, dt + kv)) continue; /* quick: one in tu_stride(), rotating */
                check_case c = cases[ci];
                check_case_set_dtypes(&c, (mha_dtype)dt, (mha_dtype)kv);
                if (!check_kernel_takes_case(k, &c)) continue; /* a variant it does not take */
                check_data d;
                assert_int_equal(check_prepare(&c, check_case_seed(12345, ci), &d), MHA_OK);
                for (int threads = 1; threads <= 2; threads++) {
                    check_report r;
                    if (check_kernel(k, &d, threads, &r) != CHECK_PASS) {
                        char desc[192];
                        check_describe(&c, desc, sizeof desc);
                        print_error("%s case %d %s threads=%d: %s\n", mha_kernel_name(k), ci, desc,
                                    threads, r.detail);
                        failures++;
                    }
                }
                check_release(&d);
            }
        }
    assert_int_equal(failures, 0);
}

/* The checker itself must catch a wrong answer: corrupt one reference value. */
static void test_checker_catches(void **state) {
    (void)state;
    const mha_kernel *k = mha_kernel_find("naive");
    check_data d;
    assert_int_equal(check_prepare(&cases[3], 7, &d), MHA_OK);
    check_report r;
    assert_int_equal(check_kernel(k, &d, 1, &r), CHECK_PASS);
    d.ref[0] += 50 * d.tol;
    assert_int_equal(check_kernel(k, &d, 1, &r), CHECK_FAIL);
    assert_non_null(strstr(r.detail, "(b=0, h=0, i=0, j=0)"));
    check_release(&d);
}

int main(void) {
    ncases = check_cases(cases, MAX_CASES, 1);
    const int n = mha_kernel_count();
    struct CMUnitTest *tests = calloc((size_t)n + 1, sizeof *tests);
    for (int i = 0; i < n; i++) {
        tests[i] = (struct CMUnitTest){mha_kernel_name(mha_kernel_at(i)), test_kernel, NULL, NULL,
                                       (void *)mha_kernel_at(i)};
    }
    tests[n] = (struct CMUnitTest){"checker_catches", test_checker_catches, NULL, NULL, NULL};
    const int rc = _cmocka_run_group_tests("kernels", tests, (size_t)n + 1, NULL, NULL);
    free(tests);
    return rc;
}
