/* test_blocks.c - the block-size property: whatever block_q / block_kv /
 * split the options accept (1..4096, any split), every kernel runs correctly
 * with it. Every registered kernel x a grid of block sizes that includes
 * non-multiples of every vector width, larger-than-sequence blocks and 1,
 * against the float64 oracle, causal and cross shapes, 1 and 2 threads.
 * scripts/test.sh also runs it under ASan + UBSan (misaligned loads, overruns). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "check.h"

static const int block_q[] = {1, 3, 7, 16, 24, 33, 64, 100, 4096};
static const int block_kv[] = {1, 5, 16, 24, 37, 64, 4096};
/* Shapes where blocks cut the sequences unevenly: a tail in every dimension. */
static const check_case shapes[] = {
    {.p = {1, 2, 2, 70, 70, 17, 1, 0.0f}, .input = INPUT_UNIFORM, .layout = LAYOUT_PADDED},
    {.p = {1, 2, 1, 33, 130, 33, 0, 0.0f}, .input = INPUT_UNIFORM, .layout = LAYOUT_BNHD},
    {.p = {2, 2, 1, 41, 9, 8, 1, 0.0f}, .input = INPUT_UNIFORM, .layout = LAYOUT_BHND},
};

static void test_kernel_blocks(void **state) {
    const mha_kernel *k = *state;
    if (mha_kernel_supported(k) != MHA_OK) {
        print_message("skipping %s: %s\n", mha_kernel_name(k), mha_last_error());
        skip();
    }
    if (!(mha_kernel_dtypes(k) & MHA_DTYPE_BIT(MHA_F32))) { /* check's cases are fp32 */
        print_message("skipping %s: it does not take fp32 (tests/test_bf16.c runs odd blocks)\n",
                      mha_kernel_name(k));
        skip();
    }
    const int nq = sizeof block_q / sizeof block_q[0], nk = sizeof block_kv / sizeof block_kv[0];
    int failures = 0, runs = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        check_case c = shapes[si];
        c.tag = "blocks";
        check_data d;
        assert_int_equal(check_prepare(&c, check_case_seed(777, (int)si), &d), MHA_OK);
        for (int a = 0; a < nq; a++)
            for (int b = 0; b < nk; b++) {
                /* threads 1 and 2, cycling the split mode so all three occur */
                for (int threads = 1; threads <= 2; threads++) {
                    const mha_options o = {.threads = threads,
                                           .block_q = block_q[a],
                                           .block_kv = block_kv[b],
                                           .split = (a + b + threads) % 3};
                    check_report r;
                    runs++;
                    if (check_kernel_opts(k, &d, &o, &r) != CHECK_PASS) {
                        char desc[160];
                        check_describe(&c, desc, sizeof desc);
                        print_error("%s %s block_q=%d block_kv=%d split=%d threads=%d: %s\n",
                                    mha_kernel_name(k), desc, o.block_q, o.block_kv, o.split,
                                    threads, r.detail);
                        failures++;
                    }
                }
            }
        check_release(&d);
    }
    print_message("%s: %d block configurations checked\n", mha_kernel_name(k), runs);
    assert_int_equal(failures, 0);
}

int main(void) {
    const int n = mha_kernel_count();
    struct CMUnitTest *tests = calloc((size_t)n, sizeof *tests);
    if (!tests) return 1;
    for (int i = 0; i < n; i++)
        tests[i] = (struct CMUnitTest){mha_kernel_name(mha_kernel_at(i)), test_kernel_blocks, NULL,
                                       NULL, (void *)mha_kernel_at(i)};
    const int rc = _cmocka_run_group_tests("blocks", tests, (size_t)n, NULL, NULL);
    free(tests);
    return rc;
}
