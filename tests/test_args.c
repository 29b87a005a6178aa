/* test_args.c - argument edge cases of the measuring and checking commands
 * (verify, profile), run as a child process: every bad value ends in exit 2
 * with a message naming it, never a silent pass, and an allocation failure
 * releases what was allocated (the ASan build's LeakSanitizer sees it). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static const char *g_bench;
static char g_tmp[256], g_out[8192], g_err[8192];

static int setup(void **state) {
    (void)state;
    g_bench = getenv("MHABENCH");
    if (g_bench && !*g_bench) g_bench = NULL;
    return tu_mkdtemp(g_tmp, sizeof g_tmp, "test_args");
}

static int teardown(void **state) {
    (void)state;
    tu_rm_tree(g_tmp);
    return 0;
}

static int run_bench(const char *first, ...) {
    if (!g_bench) {
        print_message("MHABENCH is not set: skipping (run through meson test)\n");
        skip();
    }
    va_list ap;
    va_start(ap, first);
    const int rc = tu_run_va(g_bench, first, ap, g_tmp, g_out, sizeof g_out, g_err, sizeof g_err);
    va_end(ap);
    if (rc < 0) fail_msg("%s %s did not run to an exit status; stderr: %s", g_bench, first, g_err);
    return rc;
}

/* Exit 2 and a "mhabench: " line on stderr containing want (the sanitizer
 * runtime may print a warning line of its own before it). */
static void expect_usage(int rc, const char *want) {
    print_message("  exit %d: %s", rc, g_err);
    assert_int_equal(rc, 2);
    const char *line =
        strncmp(g_err, "mhabench: ", 10) == 0 ? g_err : strstr(g_err, "\nmhabench: ");
    if (!line) fail_msg("no \"mhabench: \" message on stderr: %s", g_err);
    if (!strstr(line, want)) fail_msg("the message does not name \"%s\": %s", want, line);
}

/* verify --kernels: an empty list or name is an error, not "0 passed". */
static void test_verify_kernel_list(void **state) {
    (void)state;
    expect_usage(run_bench("verify", "--quick", "--kernels", "", NULL), "empty kernel list");
    expect_usage(run_bench("verify", "--quick", "--kernels", ",", NULL), "empty name");
    expect_usage(run_bench("verify", "--quick", "--kernels", "naive,,naive", NULL), "position 2");
    expect_usage(run_bench("verify", "--quick", "--kernels", "naive,nope", NULL), "nope");
    /* a repeat is measured once, and a real list still runs */
    assert_int_equal(run_bench("verify", "--quick", "--case", "0", "--threads", "1", "--kernels",
                               "naive,naive", NULL),
                     0);
    assert_non_null(strstr(g_out, "1 passed, 0 failed"));
}

static void test_profile_seconds(void **state) {
    (void)state;
    const char *bad[] = {"0", "-1", "nan", "1e9", "x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_usage(run_bench("profile", "--kernel", "naive", "--seq", "8", "--head-dim", "8",
                               "--seconds", bad[i], NULL),
                     "--seconds");
}

/* A workspace that cannot be allocated (naive: Nq x Nkv floats, 4 TiB here)
 * is exit 2 with a message; under ASan, LeakSanitizer fails the run if the
 * inputs allocated before it are not released. */
static void test_profile_alloc_failure(void **state) {
    (void)state;
    const char *old = getenv("ASAN_OPTIONS");
    char opts[512];
    snprintf(opts, sizeof opts, "%s%sallocator_may_return_null=1", old ? old : "",
             old && *old ? ":" : "");
    setenv("ASAN_OPTIONS", opts, 1);
    const int rc = run_bench("profile", "--kernel", "naive", "--heads", "1", "--seq", "1048576",
                             "--head-dim", "4", "--seconds", "0.01", NULL);
    if (old)
        setenv("ASAN_OPTIONS", old, 1);
    else
        unsetenv("ASAN_OPTIONS");
    expect_usage(rc, "cannot allocate");
    assert_null(strstr(g_err, "LeakSanitizer"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_verify_kernel_list),
        cmocka_unit_test(test_profile_seconds),
        cmocka_unit_test(test_profile_alloc_failure),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
