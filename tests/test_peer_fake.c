/* test_peer_fake.c - the Python peers' plumbing (harness/peers/peer_py.c, peer_py_helper.c) held
 * to a helper that lies, on tests/fake_peer.c (built here, no Python: runs
 * everywhere): an honest fake's output passes the oracle through the shared
 * memfd; one that shrinks the memfd before its output reply, claims a time
 * faster than the machine or longer than the round trip, claims tiny times
 * for ever, never answers, or fills its text with terminal controls gets a
 * failure naming the helper and the claim (never a crash, a hang or raw
 * controls); and a sweep with a lying peer ends and writes its result file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "peers/peer.h"
#include "peers/peer_reply.h"
#include "testutil.h"

#define SEED 20261201ull

static const char *g_fake;

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The torch peer's helper is now the fake in mode (a fresh one), probed. */
static void use_fake(const char *mode) {
    peer_torch.shutdown();
    setenv("MHA_PEERS_PYTHON", g_fake, 1);
    setenv("MHA_PEERS_SCRIPT", g_fake, 1); /* any readable file: the fake ignores it */
    setenv("MHA_FAKE_PEER_MODE", mode, 1);
    char why[1024] = "";
    if (!peer_torch.probe(why, sizeof why)) fail_msg("the fake helper did not start: %s", why);
}

typedef struct {
    check_case c;
    check_data d;
    check_out o;
} small;

/* A small fp32 case prepared on the fake. */
static peer_inst *prepare_small(small *s, int index) {
    s->c = (check_case){.p = {.batch = 1,
                              .heads = 2,
                              .kv_heads = 1,
                              .seq_q = 7,
                              .seq_kv = 9,
                              .head_dim = 16,
                              .causal = 1,
                              .dtype = MHA_F32},
                        .input = INPUT_UNIFORM,
                        .layout = LAYOUT_BHND,
                        .tag = "fake"};
    assert_int_equal(check_prepare(&s->c, check_case_seed(SEED, index), &s->d), MHA_OK);
    assert_true(check_out_alloc(&s->d, &s->o));
    char why[1024] = "";
    peer_inst *pi = peer_torch.prepare(&s->c.p, 1, s->d.qv.data, s->d.kv.data, s->d.vv.data, NULL,
                                       why, sizeof why);
    if (!pi) fail_msg("prepare on the fake: %s", why);
    return pi;
}

static void small_free(small *s) {
    check_out_free(&s->o);
    check_release(&s->d);
}

/* Honest: times within the bounds, the output read back through the memfd
 * matches the oracle. */
static void test_honest(void **state) {
    (void)state;
    use_fake("");
    assert_string_equal(peer_torch.version(), "fake 1.0");
    small s;
    peer_inst *pi = prepare_small(&s, 0);
    char why[1024] = "";
    double secs = 0;
    for (int i = 0; i < 5; i++)
        if (peer_torch.run(pi, &secs, why, sizeof why) != 0) fail_msg("run: %s", why);
    assert_true(secs > 0);
    if (peer_torch.output(pi, s.o.view.data, why, sizeof why) != 0) fail_msg("output: %s", why);
    check_report r;
    assert_int_equal(check_out_compare(&s.d, &s.o, &r), CHECK_PASS);
    peer_torch.release(pi);
    small_free(&s);
}

/* A helper that shrinks the memfd before its output reply (to nothing: a
 * copy from a mapping would be a SIGBUS; to part of a page: zeros read as its
 * output): an error naming the helper and the sizes; the next prepare has a
 * fresh helper. */
static void test_shrunk_output(void **state) {
    (void)state;
    static const struct {
        const char *mode, *want;
    } cases[] = {
        {"shrink", "left the shared region at 0 bytes, short of the output's 896"},
        {"shrink=100", "left the shared region at 100 bytes, short of the output's 896"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        use_fake(cases[i].mode);
        small s;
        peer_inst *pi = prepare_small(&s, 1);
        char why[1024] = "";
        double secs;
        assert_int_equal(peer_torch.run(pi, &secs, why, sizeof why), 0);
        assert_int_equal(peer_torch.output(pi, s.o.view.data, why, sizeof why), -1);
        printf("[ shrunk   ] %s\n", why);
        assert_non_null(strstr(why, "the torch helper"));
        assert_non_null(strstr(why, cases[i].want));
        peer_torch.release(pi);
        small_free(&s);
        pi = prepare_small(&s, 1); /* a fresh helper */
        peer_torch.release(pi);
        small_free(&s);
    }
}

/* Faster than 10x the machine's peak, or longer than the whole round trip:
 * the run fails naming the claim, and so does every later run of the row. */
static void test_impossible_times(void **state) {
    (void)state;
    static const struct {
        const char *mode, *want;
    } cases[] = {
        {"seconds=1e-12", "claimed 1e-12 s for one call, faster than possible"},
        {"seconds=0", "claimed 0 s"},
        {"seconds=-1", "claimed -1 s"},
        {"seconds=10", "claimed 10 s for one call, longer than the"},
        {"garbage", "not one JSON object"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        use_fake(cases[i].mode);
        small s;
        peer_inst *pi = prepare_small(&s, 2);
        char why[1024] = "";
        double secs = 0;
        assert_int_equal(peer_torch.run(pi, &secs, why, sizeof why), -1);
        printf("[ claim    ] %s: %s\n", cases[i].mode, why);
        assert_non_null(strstr(why, "torch helper"));
        assert_non_null(strstr(why, cases[i].want));
        assert_true(secs < 0);
        why[0] = 0;
        assert_int_equal(peer_torch.run(pi, &secs, why, sizeof why), -1);
        assert_true(why[0] != 0);
        peer_torch.release(pi);
        small_free(&s);
    }
    /* the bound: the problem's FLOPs at 10x the peak, x threads */
    peer_set_peak(MHA_F32, 100);
    assert_true(peer_max_rate(MHA_F32, 2) == 2e12);
    assert_true(peer_max_rate(MHA_BF16, 1) == 16e12); /* an AMX unit is not measured */
    char why[256];
    assert_int_equal(peer_claim_check(1e-6, 1e6, 1e12, 1e-3, why, sizeof why), 0);
    assert_int_equal(peer_claim_check(0.9e-6, 1e6, 1e12, 1e-3, why, sizeof why), -1);
    assert_int_equal(peer_claim_check(2e-3, 1e6, 1e12, 1e-3, why, sizeof why), -1);
    peer_set_peak(MHA_F32, 0);
}

/* Claims that pass each bound but are tiny against the round trip keep a
 * min-time loop asking for ever: the row's deadline (MHA_PEERS_ROW_S lowers
 * it to 1 s) ends it, naming the calls and both clocks. */
static void test_row_deadline(void **state) {
    (void)state;
    use_fake("seconds=1e-8"); /* > this case's floor, 5376 FLOPs at 1e13/s */
    setenv("MHA_PEERS_ROW_S", "1", 1);
    small s;
    peer_inst *pi = prepare_small(&s, 3);
    char why[1024] = "";
    double secs;
    const double t0 = now_s();
    long calls = 0;
    while (now_s() - t0 < 20 && peer_torch.run(pi, &secs, why, sizeof why) == 0) calls++;
    const double took = now_s() - t0;
    unsetenv("MHA_PEERS_ROW_S");
    printf("[ deadline ] after %ld calls, %.2f s: %s\n", calls, took, why);
    assert_true(took < 10);
    assert_non_null(strstr(why, "torch helper"));
    assert_non_null(strstr(why, "past the row's deadline"));
    peer_torch.release(pi);
    small_free(&s);
}

/* A helper that never answers is stopped at the deadline (1 s here); one
 * that has missed two is not started again, so later rows fail at once. */
static void test_hang(void **state) {
    (void)state;
    use_fake("hang=run");
    setenv("MHA_PEERS_WAIT_S", "1", 1);
    small s;
    char why[1024] = "";
    double secs;
    for (int strike = 0; strike < 2; strike++) {
        peer_inst *pi = prepare_small(&s, 4);
        const double t0 = now_s();
        assert_int_equal(peer_torch.run(pi, &secs, why, sizeof why), -1);
        printf("[ hang     ] %s\n", why);
        assert_true(now_s() - t0 < 5);
        assert_non_null(strstr(why, "no answer within 1 s"));
        peer_torch.release(pi);
        small_free(&s);
    }
    assert_int_equal(check_prepare(&s.c, check_case_seed(SEED, 4), &s.d), MHA_OK);
    const double t0 = now_s();
    assert_null(peer_torch.prepare(&s.c.p, 1, s.d.qv.data, s.d.kv.data, s.d.vv.data, NULL, why,
                                   sizeof why));
    printf("[ hang     ] then: %s\n", why);
    assert_true(now_s() - t0 < 1);
    assert_non_null(strstr(why, "not restarted"));
    check_release(&s.d);
    unsetenv("MHA_PEERS_WAIT_S");
}

static void assert_no_controls(const char *s) {
    for (const char *p = s; *p; p++)
        if ((unsigned char)*p < 0x20 || (unsigned char)*p == 0x7f)
            fail_msg("raw control byte 0x%02x in '%s'", (unsigned char)*p, s);
}

/* A helper's version, settings and errors come back escaped, as .npy header
 * text is (mha_escape): no ESC, BEL or CR reaches a terminal. */
static void test_control_text(void **state) {
    (void)state;
    use_fake("ctrl");
    const char *v = peer_torch.version();
    printf("[ text     ] version: %s\n", v);
    assert_no_controls(v);
    assert_string_equal(v, "fake 1.0\\x1b[31m red\\x1b[0m\\x1b]0;title\\x07\\r overwritten");
    small s;
    peer_inst *pi = prepare_small(&s, 5);
    printf("[ text     ] settings: %s\n", peer_torch.settings(pi));
    assert_no_controls(peer_torch.settings(pi));
    assert_non_null(strstr(peer_torch.settings(pi), "\\x1b[2J"));
    peer_torch.release(pi);
    use_fake("refuse");
    char why[1024] = "";
    assert_null(peer_torch.prepare(&s.c.p, 1, s.d.qv.data, s.d.kv.data, s.d.vv.data, NULL, why,
                                   sizeof why));
    printf("[ text     ] error: %s\n", why);
    assert_no_controls(why);
    assert_non_null(strstr(why, "\\x1b]0;pwned\\x07\\rsorry"));
    small_free(&s);
}

/* A sweep with a lying peer: its row fails with the claim named, the
 * kernels' rows run, the result file is written; an honest one gets its row.
 * `timeout 60` turns a sweep that never ends into exit 124. */
static void test_sweep_with_fake(void **state) {
    (void)state;
    peer_torch.shutdown();
    const char *bench = getenv("MHABENCH");
    if (!bench) {
        printf("[ SKIPPED  ] MHABENCH is not set (meson test sets it)\n");
        skip();
    }
    char dir[512];
    assert_int_equal(tu_mkdtemp(dir, sizeof dir, "mha-peer-fake"), 0);
    static const struct {
        const char *env; /* the fake's mode, and more */
        int exit;
        const char *want; /* in stdout; NULL: the peer's row is in the file */
    } cases[] = {
        /* fails its oracle check's run: skipped, not timed */
        {"MHA_FAKE_PEER_MODE=seconds=1e-12", 0, "claimed 1e-12 s for one call, faster than"},
        /* passes the check, then tiny claims (above the 1024 FLOPs' floor at any
         * peak under 5 TFLOP/s, far below the round trip): the row's deadline
         * (1 s here) fails it */
        {"MHA_FAKE_PEER_MODE=lie_after=1,seconds=1e-8 MHA_PEERS_ROW_S=1", 1,
         "past the row's deadline"},
        {"MHA_FAKE_PEER_MODE=", 0, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        static char out[1 << 16], err[1 << 14], file[1 << 16];
        char cmd[4096], path[600];
        snprintf(path, sizeof path, "%s/sweep-%zu.json", dir, i);
        snprintf(cmd, sizeof cmd,
                 "MHA_PEERS_PYTHON='%s' MHA_PEERS_SCRIPT='%s' %s timeout 60 '%s' sweep --kernels "
                 "naive --peers torch --seq 4 --heads 1 --head-dim 16 --causal 0 --threads 1 "
                 "--min-time 0.01 --passes 1 --bind none --out '%s'",
                 g_fake, g_fake, cases[i].env, bench, path);
        const char *args[] = {"-c", cmd, NULL};
        const int rc = tu_run("/bin/sh", args, dir, out, sizeof out, err, sizeof err);
        printf("[ sweep    ] %s: exit %d\n", cases[i].env, rc);
        if (rc != cases[i].exit)
            fail_msg("sweep with %s: exit %d, not %d: %s", cases[i].env, rc, cases[i].exit, err);
        tu_slurp(path, file, sizeof file);
        assert_non_null(strstr(file, "\"naive/B:1/H:1/KV:1/Nq:4/Nkv:4/d:16/causal:0/threads:1"));
        const char *row = "\"peer.torch/B:1/H:1/KV:1/Nq:4/Nkv:4/d:16/causal:0/threads:1";
        if (cases[i].want) {
            assert_non_null(strstr(out, cases[i].want));
            assert_non_null(strstr(out, "torch helper"));
        } else {
            assert_non_null(strstr(file, row));
        }
    }
    tu_rm_tree(dir);
}

static int teardown(void **state) {
    (void)state;
    peer_torch.shutdown();
    return 0;
}

int main(void) {
    g_fake = getenv("MHA_FAKE_PEER");
    if (!g_fake || access(g_fake, X_OK) != 0) {
        fprintf(stderr, "MHA_FAKE_PEER must name tests/fake_peer (meson test sets it)\n");
        return 1;
    }
    printf("[ seed     ] %llu\n", (unsigned long long)SEED);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_honest),
        cmocka_unit_test(test_shrunk_output),
        cmocka_unit_test(test_impossible_times),
        cmocka_unit_test(test_row_deadline),
        cmocka_unit_test(test_hang),
        cmocka_unit_test(test_control_text),
        cmocka_unit_test(test_sweep_with_fake),
    };
    return cmocka_run_group_tests(tests, NULL, teardown);
}
