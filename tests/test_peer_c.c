/* test_peer_c.c - the C peers (harness/peers/peer_onednn.c, peer_libxsmm.c:
 * whichever meson built) against the float64 oracle: every output element
 * within check_tolerance of the problem's dtype over shapes that catch tails
 * and layout bugs (N 1, 7, 33, 197; head_dim 64, 80, 37), causal and not,
 * cross and decode (Nq != Nkv, bottom-right causal, rows that see no key),
 * GQA (8 heads on 2 KV heads), batch 2, the half dtypes a peer takes, 2
 * threads, refusals with a message, bad input; and a wrong answer (the mask
 * dropped) shown to fail the same check. */
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
#include "peer.h"

#if defined(MHA_HAVE_DNNL) || defined(MHA_HAVE_XSMM)
typedef struct {
    int64_t B, H, KV, Nq, Nkv, d;
    int causal;
} shape;

/* Self-attention over the tails, with (B, H, KV) cycled through MHA, GQA
 * and batch 2; then cross attention and decode. */
static int shapes(shape *out, int max) {
    static const int64_t Ns[] = {1, 7, 33, 197}, ds[] = {64, 80, 37};
    static const int64_t bhk[][3] = {{1, 1, 1}, {2, 8, 2}, {1, 3, 3}, {2, 2, 1}};
    int n = 0, idx = 0;
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++)
            for (int c = 0; c <= 1; c++, idx++) {
                const int64_t *g = bhk[idx % 4];
                if (n < max) out[n++] = (shape){g[0], g[1], g[2], Ns[i], Ns[i], ds[j], c};
            }
    static const shape cross[] = {
        {1, 8, 2, 1, 197, 64, 0}, {1, 8, 2, 1, 197, 64, 1},  /* decode: sees the whole cache */
        {2, 8, 2, 7, 33, 80, 1},  {2, 4, 4, 33, 197, 37, 1}, /* Nq < Nkv causal */
        {1, 2, 1, 33, 7, 64, 1},  {2, 8, 2, 197, 33, 64, 1}, /* Nq > Nkv: rows see no key */
        {2, 8, 2, 33, 7, 37, 0},  {1, 1, 1, 65, 129, 64, 0}, /* block tails past 64 */
    };
    for (size_t i = 0; i < sizeof cross / sizeof cross[0]; i++)
        if (n < max) out[n++] = cross[i];
    return n;
}

static void describe(const mha_problem *p, char *buf, size_t len) {
    snprintf(buf, len, "B=%lld H=%lld KV=%lld Nq=%lld Nkv=%lld d=%lld%s %s", (long long)p->batch,
             (long long)p->heads, (long long)p->kv_heads, (long long)p->seq_q, (long long)p->seq_kv,
             (long long)p->head_dim, p->causal ? " causal" : "", mha_dtype_name(p->dtype));
}

static const peer_ops *probed(void **state) {
    const peer_ops *ops = *state;
    char why[256] = "";
    if (!ops->probe(why, sizeof why)) fail_msg("%s: probe failed: %s", ops->name, why);
    assert_non_null(ops->version());
    return ops;
}

/* Runs ops on case c (inputs as stored) at threads; the output goes into a
 * sentinel-filled, guarded buffer o. 0, or -1 with why. */
static int run_peer(const peer_ops *ops, const check_data *dd, int threads, check_out *o, char *why,
                    size_t len) {
    peer_inst *pi =
        ops->prepare(&dd->c.p, threads, dd->qv.data, dd->kv.data, dd->vv.data, NULL, why, len);
    if (!pi) return -1;
    double sec = 0;
    int rc = ops->run(pi, &sec, why, len);
    if (rc == 0 && sec != -1) {
        snprintf(why, len, "run set *seconds to %g, not -1", sec);
        rc = -1;
    }
    if (rc == 0) rc = ops->run(pi, &sec, why, len); /* a second call gives the same */
    if (rc == 0 && !check_out_alloc(dd, o)) {
        snprintf(why, len, "out of memory");
        rc = -1;
    }
    if (rc == 0) rc = ops->output(pi, o->view.data, why, len);
    const char *set = ops->settings(pi);
    if (rc == 0 && (!set || !*set)) {
        snprintf(why, len, "empty settings line");
        rc = -1;
    }
    ops->release(pi);
    return rc;
}

/* The case's oracle check; returns CHECK_PASS/FAIL/SKIP (taken or not). */
static int check_one(const peer_ops *ops, const check_case *c, int threads, int verbose) {
    char desc[160], why[512] = "";
    describe(&c->p, desc, sizeof desc);
    if (!ops->takes(&c->p, why, sizeof why)) {
        assert_true(why[0] != 0); /* a refusal says why */
        if (verbose) print_message("skip %s %s: %s\n", ops->name, desc, why);
        return CHECK_SKIP;
    }
    check_data dd;
    assert_int_equal(check_prepare(c, check_case_seed(20261130, (int)c->p.seq_q), &dd), MHA_OK);
    check_out o = {0};
    if (run_peer(ops, &dd, threads, &o, why, sizeof why) != 0) {
        check_out_free(&o);
        check_release(&dd);
        fail_msg("%s %s threads=%d: %s", ops->name, desc, threads, why);
    }
    check_report r;
    const int res = check_out_compare(&dd, &o, &r);
    check_out_free(&o);
    check_release(&dd);
    if (res != CHECK_PASS) fail_msg("%s %s threads=%d: %s", ops->name, desc, threads, r.detail);
    return res;
}

static void grid_of(void **state, mha_dtype dt) {
    const peer_ops *ops = probed(state);
    shape s[64];
    const int n = shapes(s, 64);
    int passed = 0, skipped = 0;
    for (int i = 0; i < n; i++) {
        check_case c = {
            .p = {s[i].B, s[i].H, s[i].KV, s[i].Nq, s[i].Nkv, s[i].d, s[i].causal, 0.0f},
            .input = INPUT_UNIFORM,
            .layout = LAYOUT_BHND,
            .tag = "peer"};
        check_case_set_dtypes(&c, dt, dt);
        const int res = check_one(ops, &c, 1, i == 0);
        passed += res == CHECK_PASS;
        skipped += res == CHECK_SKIP;
    }
    print_message("%s %s: %d passed, %d skipped of %d\n", ops->name, mha_dtype_name(dt), passed,
                  skipped, n);
    if (dt == MHA_F32) assert_int_equal(passed, n); /* every peer takes fp32 */
}

static void test_grid_f32(void **state) {
    grid_of(state, MHA_F32);
}
static void test_grid_bf16(void **state) {
    grid_of(state, MHA_BF16);
}
static void test_grid_f16(void **state) {
    grid_of(state, MHA_F16);
}

/* 2 threads: the same answer within tolerance, on shapes with more tasks
 * than threads and fewer (one head). */
static void test_threads(void **state) {
    const peer_ops *ops = probed(state);
    static const shape s[] = {
        {2, 8, 2, 197, 197, 64, 1}, {1, 1, 1, 197, 197, 80, 0}, {1, 8, 2, 1, 197, 64, 1}};
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) {
        check_case c = {
            .p = {s[i].B, s[i].H, s[i].KV, s[i].Nq, s[i].Nkv, s[i].d, s[i].causal, 0.0f},
            .input = INPUT_UNIFORM,
            .layout = LAYOUT_BHND,
            .tag = "peer"};
        check_data dd;
        assert_int_equal(check_prepare(&c, 7, &dd), MHA_OK);
        check_out o1 = {0}, o2 = {0};
        char why[512] = "";
        if (run_peer(ops, &dd, 1, &o1, why, sizeof why) != 0 ||
            run_peer(ops, &dd, 2, &o2, why, sizeof why) != 0)
            fail_msg("%s: %s", ops->name, why);
        const float *a = o1.view.data, *b = o2.view.data;
        const size_t n = (size_t)(c.p.batch * c.p.heads * c.p.seq_q * c.p.head_dim);
        double worst = 0;
        for (size_t j = 0; j < n; j++) {
            const double e = fabs((double)a[j] - (double)b[j]);
            worst = e > worst || isnan(e) ? e : worst;
        }
        check_report r1, r2;
        const int p1 = check_out_compare(&dd, &o1, &r1), p2 = check_out_compare(&dd, &o2, &r2);
        check_out_free(&o1);
        check_out_free(&o2);
        check_release(&dd);
        if (p1 != CHECK_PASS || p2 != CHECK_PASS)
            fail_msg("%s: 1 thread: %s; 2 threads: %s", ops->name, r1.detail, r2.detail);
        if (!(worst <= dd.tol)) fail_msg("%s: 1 vs 2 threads differ by %g", ops->name, worst);
    }
}

/* The check can fail: the peer run without the mask is compared with the
 * causal oracle, and must be caught. */
static void test_catches_wrong_answer(void **state) {
    const peer_ops *ops = probed(state);
    check_case c = {.p = {1, 2, 1, 33, 33, 64, 1, 0.0f},
                    .input = INPUT_UNIFORM,
                    .layout = LAYOUT_BHND,
                    .tag = "peer"};
    check_data dd;
    assert_int_equal(check_prepare(&c, 11, &dd), MHA_OK);
    dd.c.p.causal = 0; /* the peer sees a non-causal problem ... */
    check_out o = {0};
    char why[512] = "";
    if (run_peer(ops, &dd, 1, &o, why, sizeof why) != 0) fail_msg("%s: %s", ops->name, why);
    dd.c.p.causal = 1; /* ... the check wants the causal answer */
    check_report r;
    const int res = check_out_compare(&dd, &o, &r);
    check_out_free(&o);
    check_release(&dd);
    assert_int_equal(res, CHECK_FAIL);
}

static void test_refusals(void **state) {
    const peer_ops *ops = probed(state);
    char why[256] = "";
    mha_problem p = {.batch = 1,
                     .heads = 2,
                     .kv_heads = 1,
                     .seq_q = 8,
                     .seq_kv = 8,
                     .head_dim = 64,
                     .causal = 0,
                     .scale = 0.0f,
                     .dtype = MHA_F32,
                     .kv_dtype = MHA_I8};
    assert_int_equal(ops->takes(&p, why, sizeof why), 0);
    assert_true(strlen(why) > 10);
    print_message("%s refuses int8 KV: %s\n", ops->name, why);
    why[0] = 0;
    p.kv_dtype = MHA_F32;
    assert_int_equal(ops->takes(&p, why, sizeof why), 1);
    /* bad input: an error with a message, never a crash */
    float buf[2 * 8 * 64] = {0};
    p.seq_q = 0;
    why[0] = 0;
    assert_null(ops->prepare(&p, 1, buf, buf, buf, NULL, why, sizeof why));
    assert_true(why[0] != 0);
    p.seq_q = 8;
    why[0] = 0;
    assert_null(ops->prepare(&p, 1, NULL, buf, buf, NULL, why, sizeof why));
    assert_true(why[0] != 0);
    why[0] = 0;
    assert_int_equal(ops->run(NULL, NULL, why, sizeof why), -1);
    assert_true(why[0] != 0);
    ops->release(NULL);
}

#define PEER_TESTS(ops)                                                                            \
    cmocka_unit_test_prestate(test_refusals, (void *)&ops),                                        \
        cmocka_unit_test_prestate(test_grid_f32, (void *)&ops),                                    \
        cmocka_unit_test_prestate(test_grid_bf16, (void *)&ops),                                   \
        cmocka_unit_test_prestate(test_grid_f16, (void *)&ops),                                    \
        cmocka_unit_test_prestate(test_threads, (void *)&ops),                                     \
        cmocka_unit_test_prestate(test_catches_wrong_answer, (void *)&ops)
#endif /* a C peer built */

#if !defined(MHA_HAVE_DNNL) || !defined(MHA_HAVE_XSMM)
/* A C peer this build lacks: a visible skip saying why, not a silent
 * absence. */
static void test_not_built(void **state) {
    printf("[ SKIPPED  ] %s\n", (const char *)*state);
    skip();
}
#endif

int main(void) {
    const struct CMUnitTest tests[] = {
#ifdef MHA_HAVE_DNNL
        PEER_TESTS(peer_onednn),
#else
        cmocka_unit_test_prestate(test_not_built,
                                  (void *)"onednn: not built (meson did not find libdnnl-dev)"),
#endif
#ifdef MHA_HAVE_XSMM
        PEER_TESTS(peer_libxsmm),
#else
        cmocka_unit_test_prestate(test_not_built,
                                  (void *)"libxsmm: not built (meson did not find libxsmm-dev)"),
#endif
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
