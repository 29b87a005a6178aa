/* test_bisect.c - `mhabench bisect` on a throw-away git repository
 * (tests/bisect/make_repo.sh): ten commits, a 10% slowdown planted in c7, a
 * commit that does not build (c5) at the first midpoint; fake sweeps with
 * random noise (tests/bisect/fake_mhabench.sh). The planted commit is found
 * every time, a range without a slowdown is inconclusive (exit 3), and bad
 * ranges are usage errors; the scratch folder never outlives the run.
 * Skips visibly without git. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "testutil.h"

static char g_tmp[512], g_repo[600], g_scratch[600], g_out[1 << 16], g_err[1 << 16];
static const char *g_bench;

static int setup(void **state) {
    (void)state;
    g_bench = getenv("MHABENCH");
    if (tu_mkdtemp(g_tmp, sizeof g_tmp, "test_bisect") != 0) return -1;
    snprintf(g_repo, sizeof g_repo, "%s/repo", g_tmp);
    snprintf(g_scratch, sizeof g_scratch, "%s/scratch", g_tmp);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    tu_rm_tree(g_tmp);
    return 0;
}

/* The repository, made once (the tests share it). 0 when there. */
static int need_repo(void) {
    if (!g_bench || !getenv("MHA_TEST_DATA")) {
        print_message("MHABENCH / MHA_TEST_DATA not set: skipping (run through meson test)\n");
        return -1;
    }
    const char *probe[] = {"-c", "command -v git >/dev/null", NULL};
    if (tu_run("/bin/sh", probe, g_tmp, NULL, 0, NULL, 0) != 0) {
        print_message("git is not installed: skipping the bisect tests\n");
        return -1;
    }
    char script[1024];
    snprintf(script, sizeof script, "%s/../bisect/make_repo.sh", getenv("MHA_TEST_DATA"));
    const char *made[] = {"-c", "test -d \"$0/.git\"", g_repo, NULL};
    if (tu_run("/bin/sh", made, g_tmp, NULL, 0, NULL, 0) == 0) return 0;
    const char *args[] = {script, g_repo, NULL};
    const int rc = tu_run("/bin/sh", args, g_tmp, g_out, sizeof g_out, g_err, sizeof g_err);
    if (rc != 0) fail_msg("make_repo.sh failed (%d): %s", rc, g_err);
    return 0;
}

/* mhabench bisect GOOD BAD on the repository, TMPDIR the scratch folder. */
static int bisect(const char *good, const char *bad) {
    setenv("TMPDIR", g_scratch, 1);
    mkdir(g_scratch, 0700); /* EEXIST after the first run */
    const char *args[] = {"bisect",  good,          bad,        "--repo",         g_repo,
                          "--build", "sh build.sh", "--binary", "build/mhabench", NULL};
    const int rc = tu_run(g_bench, args, g_tmp, g_out, sizeof g_out, g_err, sizeof g_err);
    unsetenv("TMPDIR");
    assert_int_equal(tu_count_entries(g_scratch), 0); /* builds and reports removed */
    return rc;
}

static void sha_of(const char *tag, char *out, size_t len) {
    const char *args[] = {"-c", "git -C \"$0\" rev-parse \"$1\"", g_repo, tag, NULL};
    assert_int_equal(tu_run("/bin/sh", args, g_tmp, out, len, NULL, 0), 0);
    out[strcspn(out, "\n")] = '\0';
    assert_int_equal(strlen(out), 40);
}

static void test_finds_planted(void **state) {
    (void)state;
    if (need_repo()) skip();
    char c7[64], want[128];
    sha_of("c7", c7, sizeof c7);
    snprintf(want, sizeof want, "first bad commit: %s", c7);
    for (int run = 0; run < 3; run++) { /* new noise every run */
        const int rc = bisect("c0", "c10");
        if (rc != 0 || !strstr(g_out, want))
            fail_msg("run %d: exit %d, wanted '%s'\nstdout:\n%s\nstderr:\n%s", run, rc, want, g_out,
                     g_err);
        assert_non_null(strstr(g_err, "does not build")); /* c5, skipped */
        assert_non_null(strstr(g_out, "95% interval"));
    }
}

static void test_nothing_to_bisect(void **state) {
    (void)state;
    if (need_repo()) skip();
    assert_int_equal(bisect("c0", "c4"), 3);
    assert_non_null(strstr(g_out, "INCONCLUSIVE"));
    assert_non_null(strstr(g_out, "nothing to bisect"));
    /* with the figures of the last A/B: both rows, each with its interval */
    assert_non_null(strstr(g_out, "the last A/B:"));
    assert_non_null(strstr(g_out, "Nq:128/Nkv:128/d:64/causal:0/threads:1: "));
    assert_non_null(strstr(g_out, "Nq:256/Nkv:256/d:64/causal:0/threads:1: "));
    assert_null(strstr(g_out, "first bad commit"));
}

static void test_bad_ranges(void **state) {
    (void)state;
    if (need_repo()) skip();
    assert_int_equal(bisect("c10", "c0"), 2);
    assert_non_null(strstr(g_err, "not an ancestor"));
    assert_int_equal(bisect("c5", "c10"), 2); /* GOOD does not build */
    assert_non_null(strstr(g_err, "must both build"));
    assert_int_equal(bisect("c0", "no-such-tag"), 2);
    assert_non_null(strstr(g_err, "'no-such-tag' is not a commit"));
    const char *one[] = {"bisect", "c0", NULL};
    assert_int_equal(tu_run(g_bench, one, g_tmp, g_out, sizeof g_out, g_err, sizeof g_err), 2);
    assert_non_null(strstr(g_err, "expected GOOD BAD"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_finds_planted),
        cmocka_unit_test(test_nothing_to_bisect),
        cmocka_unit_test(test_bad_ranges),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
