/* test_stats.c - the harness's statistics on synthetic samples: the median's
 * distribution-free interval (its order statistics and its coverage, checked
 * by simulation) and the tie rule that decides "faster" only beyond the
 * intervals. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>

#include "meas_core.h"
#include "stats.h"

/* Known order statistics: n = 9 gives [x(2), x(8)] at 96.1%, n = 15
 * [x(4), x(12)] at 96.5% (binomial tables); one sample is its own interval. */
static void test_interval_order_statistics(void **state) {
    (void)state;
    double x[15], lo, hi;
    for (int i = 0; i < 15; i++) x[i] = i + 1;
    double cov = median_interval(x, 9, 0.95, &lo, &hi);
    assert_true(lo == 2 && hi == 8);
    assert_true(fabs(cov - 0.9609375) < 1e-9);
    cov = median_interval(x, 15, 0.95, &lo, &hi);
    assert_true(lo == 4 && hi == 12);
    assert_true(fabs(cov - 0.96484375) < 1e-9);
    cov = median_interval(x, 1, 0.95, &lo, &hi);
    assert_true(lo == 1 && hi == 1 && cov == 0);
    /* too few samples for 95%: the whole range, and the coverage says so */
    cov = median_interval(x, 5, 0.95, &lo, &hi);
    assert_true(lo == 1 && hi == 5 && cov < 0.95 && cov > 0.93);
    /* constant samples: a point */
    for (int i = 0; i < 15; i++) x[i] = 7;
    median_interval(x, 15, 0.95, &lo, &hi);
    assert_true(lo == 7 && hi == 7);
}

/* The interval holds the true median in at least 95% of repeated experiments
 * whatever the distribution: here a bimodal one (70% of samples near 100, 30%
 * near 140, like a host that takes part of the core at times). */
static void test_interval_coverage(void **state) {
    (void)state;
    enum { TRIALS = 4000, N = 15 };
    uint64_t rng = 12345;
    /* the lower mode is uniform [99, 101), the upper [139, 141); P(x < m) = 1/2
     * at m = 99 + 2 * (0.5 / 0.7) */
    const double truth = 99 + 2 * (0.5 / 0.7);
    int hits = 0;
    for (int t = 0; t < TRIALS; t++) {
        double x[N], lo, hi;
        for (int i = 0; i < N; i++) {
            const double u = 0.5 * (uniform_pm1(&rng) + 1), w = 0.5 * (uniform_pm1(&rng) + 1);
            x[i] = (u < 0.7 ? 99 : 139) + 2 * w;
        }
        median_inplace(x, N);
        median_interval(x, N, 0.95, &lo, &hi);
        hits += lo <= truth && truth <= hi;
    }
    const double rate = (double)hits / TRIALS;
    print_message("coverage of the 95%% median interval, n = %d: %.3f\n", N, rate);
    assert_true(rate >= 0.95 && rate <= 0.985); /* exact: 0.965 */
}

/* Faster only beyond the intervals: the roofline samples of one
 * configuration measured twice (flash.avx512 vs auto, identical knobs) tie;
 * clearly separated samples do not. */
static void test_ties(void **state) {
    (void)state;
    double a[] = {142, 130, 96, 99, 100}, b[] = {142, 133, 128, 101, 112};
    double alo, ahi, blo, bhi;
    median_inplace(a, 5);
    median_inplace(b, 5);
    median_interval(a, 5, 0.95, &alo, &ahi);
    median_interval(b, 5, 0.95, &blo, &bhi);
    assert_int_equal(intervals_order(alo, ahi, blo, bhi), STATS_TIE);
    assert_int_equal(intervals_order(10, 11, 12, 13), STATS_B_LARGER);
    assert_int_equal(intervals_order(12, 13, 10, 11), STATS_A_LARGER);
    assert_int_equal(intervals_order(10, 12, 12, 13), STATS_TIE); /* touching is a tie */
}

/* The disturbance rule on given evidence, and a guarded sample on a real
 * call: its probe ratio is a ratio (0, 1] and its timing positive. */
/* The drift common to all benchmarks and the residual spread, on synthetic
 * log changes: a 6% drift with 4 real changes among 20 is found as 6%; the
 * robust sigma of normal noise is its standard deviation; the threshold is
 * 4 sigmas within [2, 10]%, or the fallback with too few benchmarks. */
static void test_drift_and_noise(void **state) {
    (void)state;
    double x[20];
    uint64_t st = 7;
    for (int i = 0; i < 20; i++) x[i] = log(1.06) + (i < 4 ? log(1.3) : 0.001 * uniform_pm1(&st));
    assert_true(fabs(exp(stats_common_drift(x, 20)) - 1.06) < 0.002);
    assert_true(stats_common_drift(x, 4) == 0);
    /* normal noise, sigma 1%: Box-Muller on the generator */
    enum { N = 20000 };
    static double g[N];
    for (int i = 0; i < N; i += 2) {
        const double u1 = (uniform_pm1(&st) + 1.0001) / 2.0001, u2 = uniform_pm1(&st) * M_PI;
        g[i] = 0.01 * sqrt(-2 * log(u1)) * cos(u2);
        g[i + 1] = 0.01 * sqrt(-2 * log(u1)) * sin(u2);
    }
    assert_true(fabs(stats_robust_sigma(g, N) / 0.01 - 1) < 0.03);
    double sig;
    const double t = stats_derived_threshold(g, N, 5, &sig);
    assert_true(fabs(sig - 1.005) < 0.04);
    assert_true(fabs(t - 4 * sig) < 1e-9);
    for (int i = 0; i < N; i++) g[i] *= 10; /* sigma 10%: capped */
    assert_true(stats_derived_threshold(g, N, 5, NULL) == STATS_THRESHOLD_MAX);
    for (int i = 0; i < N; i++) g[i] = 0; /* no spread: the floor */
    assert_true(stats_derived_threshold(g, N, 5, NULL) == STATS_THRESHOLD_MIN);
    assert_true(stats_derived_threshold(g, 3, 5, &sig) == 5 && sig == 0);
}

static void test_evidence(void **state) {
    (void)state;
    /* The FMA probe, the interference probe, preemptions, steal: each alone
     * decides; a shallow interference dip (above MEAS_CORE_PROBE_MIN) does not. */
    const meas_evidence clean = {.probe = 0.97, .probe_core = 0.95, .preempted = 1},
                        slow = {.probe = 0.70, .probe_core = 1.0},
                        core = {.probe = 1.0, .probe_core = 0.55},
                        shallow = {.probe = 1.0, .probe_core = 0.70},
                        preempted = {.probe = 1.0, .probe_core = 1.0, .preempted = 2},
                        stolen = {.probe = 1.0, .probe_core = 1.0, .stolen = 0.01};
    assert_false(meas_disturbed(&clean, MEAS_PROBE_MIN));
    assert_true(meas_disturbed(&slow, MEAS_PROBE_MIN));
    assert_true(meas_disturbed(&core, MEAS_PROBE_MIN));
    assert_false(meas_disturbed(&shallow, MEAS_PROBE_MIN));
    assert_true(meas_disturbed_for(&core, MEAS_PROBE_MIN, 1.0));
    assert_true(meas_disturbed(&preempted, MEAS_PROBE_MIN));
    assert_true(meas_disturbed(&stolen, MEAS_PROBE_MIN));
    meas_pool pool;
    meas_pool_init(&pool, 1);
    const meas_shape s = {.b = 1, .h = 2, .kv = 2, .nq = 16, .nkv = 16, .d = 16};
    const mha_options o = {.threads = 1};
    meas_call c;
    assert_null(meas_prepare(&pool, mha_kernel_find("flash.scalar"), &s, &o, &c));
    double t = 0;
    meas_evidence ev;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(meas_sample_guarded(&c, 1, &t, &ev), MHA_OK);
        assert_true(t > 0 && ev.probe > 0 && ev.probe <= 1.0 && ev.preempted >= 0);
        assert_true(ev.probe_core > 0 && ev.probe_core <= 1.0);
    }
    meas_pool_release(&pool);
}

/* Decode rows count bytes at the storage widths: K/V elements x the K/V
 * dtype's size plus one fp32 scale per row each for int8, Q and O at the
 * problem's dtype. The pool stores typed inputs (views of the dtypes). */
/* A steady background and the bursts above it (issue 29): the run-level
 * rule needs both the load check and most repetitions marked; a burst is a
 * preemption rate above twice the run's median plus the quiet allowance
 * (MEAS_PREEMPT_MAX per 20 ms = 50/s), or any stolen time. */
static void test_background(void **state) {
    (void)state;
    assert_true(meas_background_steady(0.50, 0.90));
    assert_true(meas_background_steady(0.25, 0.50));
    assert_false(meas_background_steady(0.24, 0.90)); /* bursts on a mostly idle host */
    assert_false(meas_background_steady(0.90, 0.49)); /* loaded, yet most samples clean */
    assert_false(meas_background_steady(-1, 1.0));    /* the load unknown: not assumed */
    assert_false(meas_burst(300, 200, 0));            /* the background's own level */
    assert_false(meas_burst(450, 200, 0));            /* 2 x 200 + 50 */
    assert_true(meas_burst(451, 200, 0));
    assert_true(meas_burst(0, 200, 0.5)); /* stolen time is a burst at any rate */
    assert_false(meas_burst(50, 0, 0));   /* a quiet median: the allowance alone */
    assert_true(meas_burst(51, 0, 0));
}

/* Holm's step-down (the gate's family-wise alpha): sorted p held to
 * alpha/n, alpha/(n-1), ...; the first miss and every later p keep its level. */
static void test_holm(void **state) {
    (void)state;
    const double p[5] = {0.04, 0.001, 0.011, 0.03, 0.0024};
    double lv[5];
    stats_holm_levels(p, 5, 0.05, lv);
    assert_true(fabs(lv[1] - (0.05 / 5)) < 1e-15); /* 0.001 < 0.01: rejected */
    assert_true(fabs(lv[4] - (0.05 / 4)) < 1e-15); /* 0.0024 < 0.0125: rejected */
    assert_true(fabs(lv[2] - (0.05 / 3)) < 1e-15); /* 0.011 < 0.0167: rejected */
    assert_true(fabs(lv[3] - (0.05 / 2)) < 1e-15); /* 0.03 >= 0.025: the first miss */
    assert_true(fabs(lv[0] - (0.05 / 2)) < 1e-15); /* later: that level, missed */
    int rejected = 0;
    for (int i = 0; i < 5; i++) rejected += p[i] < lv[i];
    assert_int_equal(rejected, 3);
    stats_holm_levels(p, 0, 0.05, lv); /* nothing to test: no write */
}

static void test_io_bytes(void **state) {
    (void)state;
    const int64_t B = 2, H = 8, G = 2, N = 300, D = 64;
    const double q = (double)(B * H * 1 * D), kv = (double)(B * G * N * D),
                 rows = (double)(B * G * N);
    meas_shape s = {.b = B, .h = H, .kv = G, .nq = 1, .nkv = N, .d = D};
    assert_true(meas_io_bytes(&s) == 4 * (2 * q + 2 * kv));
    s.kv_dtype = MHA_BF16;
    assert_true(meas_io_bytes(&s) == 4 * 2 * q + 2 * 2 * kv);
    s.dtype = MHA_BF16, s.kv_dtype = MHA_F32; /* 0: K/V as the dtype */
    assert_true(meas_io_bytes(&s) == 2 * 2 * q + 2 * 2 * kv);
    s.kv_dtype = MHA_I8;
    assert_true(meas_io_bytes(&s) == 2 * 2 * q + 1 * 2 * kv + 4 * 2 * rows);
    const mha_problem p = meas_problem(&s);
    assert_int_equal(p.dtype, MHA_BF16);
    assert_int_equal(mha_problem_kv_dtype(&p), MHA_I8);
    /* the pool's inputs come typed, with scales for int8 */
    meas_pool pool;
    meas_pool_init(&pool, 1);
    const mha_kernel *any = NULL;
    for (int i = 0; i < mha_kernel_count() && !any; i++)
        if (mha_kernel_supported(mha_kernel_at(i)) == MHA_OK &&
            mha_kernel_takes(mha_kernel_at(i), &p) == MHA_OK)
            any = mha_kernel_at(i);
    if (any) {
        meas_call c;
        assert_null(meas_prepare(&pool, any, &s, &(mha_options){.threads = 1}, &c));
        assert_int_equal(c.q.dtype, MHA_BF16);
        assert_int_equal(c.k.dtype, MHA_I8);
        assert_non_null(c.k.scale);
        assert_int_equal(meas_run(&c), MHA_OK);
    } else {
        print_message("no kernel here takes bf16 with an int8 cache: typed pool run skipped\n");
    }
    meas_pool_release(&pool);
}

/* The shift estimate and its interval: a clean 10% slowdown of 9 against 9
 * reads 10% with an interval around it that excludes 0; the same sample
 * twice reads 0 inside its interval; the interval narrows with more
 * repetitions; with 2 + 2 it is the whole range of the pairwise ratios. */
static void test_shift_interval(void **state) {
    (void)state;
    double a[40], b[40], lo, hi;
    for (int i = 0; i < 40; i++) a[i] = 1000 * (1 + 0.01 * ((i * 7) % 9 - 4) / 4.0);
    for (int i = 0; i < 40; i++) b[i] = a[i] * 1.10;
    double est = stats_shift_interval(a, 9, b, 9, 0.95, &lo, &hi);
    assert_true(fabs(est - 10) < 1e-9);
    assert_true(lo > 5 && lo < 10 && hi > 10 && hi < 15);
    const double w9 = hi - lo;
    est = stats_shift_interval(a, 40, b, 40, 0.95, &lo, &hi);
    assert_true(fabs(est - 10) < 1e-9 && lo < 10 && hi > 10);
    assert_true(hi - lo < w9);
    est = stats_shift_interval(a, 9, a, 9, 0.95, &lo, &hi);
    assert_true(fabs(est) < 1e-9 && lo < 0 && hi > 0);
    est = stats_shift_interval(a, 2, b, 2, 0.95, &lo, &hi);
    const double amin = fmin(a[0], a[1]), amax = fmax(a[0], a[1]);
    assert_true(fabs(lo - 100 * (1.10 * amin / amax - 1)) < 1e-9);
    assert_true(fabs(hi - 100 * (1.10 * amax / amin - 1)) < 1e-9);
    assert_true(isnan(stats_shift_interval(a, 0, b, 3, 0.95, &lo, &hi)) && isnan(lo));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_interval_order_statistics),
        cmocka_unit_test(test_interval_coverage),
        cmocka_unit_test(test_ties),
        cmocka_unit_test(test_evidence),
        cmocka_unit_test(test_background),
        cmocka_unit_test(test_holm),
        cmocka_unit_test(test_drift_and_noise),
        cmocka_unit_test(test_io_bytes),
        cmocka_unit_test(test_shift_interval),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
