/* test_compare.c - `mhabench compare` on synthetic Google Benchmark result files
 * written at run time: verdicts and exit codes, fingerprints, malformed input,
 * U-test p-values against known values, baselines, and --ab with fake binaries. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>

#include "testutil.h"

static const char *g_bench; /* $MHABENCH */
static char g_tmp[256];     /* mkdtemp scratch */
static char g_out[1 << 16]; /* captured stdout of the last run */
static char g_err[1 << 14]; /* captured stderr of the last run */

/* ---- plumbing ------------------------------------------------------------------------ */

static int setup(void **state) {
    (void)state;
    g_bench = getenv("MHABENCH");
    if (g_bench && !*g_bench) g_bench = NULL;
    return tu_mkdtemp(g_tmp, sizeof g_tmp, "test_compare");
}

static int teardown(void **state) {
    (void)state;
    tu_rm_tree(g_tmp);
    return 0;
}

#define NEED_BENCH()                                                                               \
    do {                                                                                           \
        if (!g_bench) {                                                                            \
            print_message("MHABENCH is not set: skipping (run through meson test)\n");             \
            skip();                                                                                \
        }                                                                                          \
    } while (0)

static const char *tmp_path(const char *name) {
    static char paths[8][512];
    static int next;
    char *p = paths[next++ % 8];
    snprintf(p, sizeof paths[0], "%s/%s", g_tmp, name);
    return p;
}

/* Runs mhabench with the NULL-terminated argument list (after argv[0]); captures
 * stdout/stderr into g_out/g_err. Returns the exit status; a signal fails the test. */
static int run_bench(const char *first, ...) {
    va_list ap;
    va_start(ap, first);
    const int rc = tu_run_va(g_bench, first, ap, g_tmp, g_out, sizeof g_out, g_err, sizeof g_err);
    va_end(ap);
    if (rc < 0) fail_msg("%s %s did not run to an exit status; stderr: %s", g_bench, first, g_err);
    return rc;
}

#define EXPECT_EXIT(want, rc)                                                                      \
    do {                                                                                           \
        const int rc_ = (rc);                                                                      \
        if (rc_ != (want)) {                                                                       \
            print_message("stdout:\n%s\nstderr:\n%s\n", g_out, g_err);                             \
            fail_msg("exit status %d, expected %d", rc_, (want));                                  \
        }                                                                                          \
    } while (0)

#define EXPECT_IN(text, needle)                                                                    \
    do {                                                                                           \
        if (!strstr((text), (needle))) {                                                           \
            print_message("stdout:\n%s\nstderr:\n%s\n", g_out, g_err);                             \
            fail_msg("'%s' not in the output", (needle));                                          \
        }                                                                                          \
    } while (0)

/* ---- synthetic result files --------------------------------------------------------- */

typedef struct {
    const char *cpu_key; /* NULL: a plain Google Benchmark context without mha_* keys */
    const char *isa;
    const char *cores;
} fingerprint;

static const fingerprint FP_HERE = {"amd-test-cpu-f25m1", "avx2", "2"};

typedef struct {
    FILE *f;
    int rows;
} result_writer;

static result_writer begin_results(const char *path, fingerprint fp) {
    result_writer w = {fopen(path, "w"), 0};
    assert_non_null(w.f);
    fprintf(w.f, "{\n  \"context\": {\n    \"date\": \"2026-01-01T00:00:00+00:00\",\n"
                 "    \"host_name\": \"test\",\n    \"num_cpus\": 2,\n"
                 "    \"library_build_type\": \"release\"");
    if (fp.cpu_key)
        fprintf(w.f,
                ",\n    \"mha_cpu_key\": \"%s\",\n    \"mha_isa_active\": \"%s\",\n"
                "    \"mha_cores\": \"%s\"",
                fp.cpu_key, fp.isa, fp.cores);
    fprintf(w.f, "\n  },\n  \"benchmarks\": [");
    return w;
}

/* One benchmark: n iteration rows with times t (in unit), then the aggregates
 * Google Benchmark adds (with absurd values: compare must ignore them). */
static void add_aggregates(result_writer *w, const char *name, int n, const char *unit);
static void add_bench_x(result_writer *w, const char *name, int n, const double *t,
                        const char *unit, const char *extra) {
    const char *th = strstr(name, "/threads:"); /* the row's thread count, as the sweep writes it */
    const int threads = th ? atoi(th + 9) : 1;
    for (int i = 0; i < n; i++)
        fprintf(w->f,
                "%s\n    {\"name\": \"%s\", \"family_index\": 0, \"per_family_instance_index\": 0,"
                " \"run_name\": \"%s\", \"run_type\": \"iteration\", \"repetitions\": %d,"
                " \"repetition_index\": %d, \"threads\": %d, \"iterations\": 100,"
                " \"real_time\": %.17g, \"cpu_time\": %.17g, \"time_unit\": \"%s\","
                " \"GFLOPS\": 1.5e+01, \"pct_peak\": 12.5%s}",
                w->rows++ ? "," : "", name, name, n, i, threads, t[i], t[i], unit, extra);
    add_aggregates(w, name, n, unit);
}

static void add_bench(result_writer *w, const char *name, int n, const double *t,
                      const char *unit) {
    add_bench_x(w, name, n, t, unit, "");
}

static void add_aggregates(result_writer *w, const char *name, int n, const char *unit) {
    static const char *const aggs[] = {"mean", "median", "stddev", "cv"};
    for (int a = 0; a < 4; a++)
        fprintf(w->f,
                "%s\n    {\"name\": \"%s_%s\", \"run_name\": \"%s\", \"run_type\": \"aggregate\","
                " \"repetitions\": %d, \"threads\": 1, \"aggregate_name\": \"%s\","
                " \"iterations\": %d, \"real_time\": 1e+30, \"cpu_time\": 1e+30,"
                " \"time_unit\": \"%s\"}",
                w->rows++ ? "," : "", name, aggs[a], name, n, aggs[a], n, unit);
}

static void end_results(result_writer *w) {
    fprintf(w->f, "\n  ]\n}\n");
    assert_int_equal(fclose(w->f), 0);
}

/* n times around center, spread evenly over center*(1 +- spread), shuffled by a
 * fixed permutation (order must not matter). */
static void sample(double *t, int n, double center, double spread) {
    for (int i = 0; i < n; i++) {
        const int j = (i * 7 + 3) % n; /* a permutation when gcd(7, n) == 1 */
        t[j] = center * (1 + spread * (n > 1 ? -1 + 2.0 * i / (n - 1) : 0));
    }
}

/* A file with benchmarks "flash.avx2/...:<k>" k = 0..nb-1, n reps each around
 * center*factor[k], relative spread spread[k]. */
static void write_simple(const char *path, fingerprint fp, int nb, int n, const double *factor,
                         const double *spread, const char *unit) {
    result_writer w = begin_results(path, fp);
    for (int k = 0; k < nb; k++) {
        char name[128];
        double t[64];
        snprintf(name, sizeof name, "flash.avx2/B:1/H:8/KV:8/Nq:%d/Nkv:%d/d:64/causal:0/threads:1",
                 128 << k, 128 << k);
        sample(t, n, 1000.0 * (1 << k) * factor[k], spread[k]);
        add_bench(&w, name, n, t, unit);
    }
    end_results(&w);
}

/* ---- reading the --json report --------------------------------------------------------- */

static json_object *parse_report(void) {
    json_object *o = json_tokener_parse(g_out);
    if (!o) {
        print_message("stdout:\n%s\nstderr:\n%s\n", g_out, g_err);
        fail_msg("--json output does not parse");
    }
    return o;
}

static json_object *get(json_object *o, const char *key) {
    json_object *v;
    if (!json_object_object_get_ex(o, key, &v)) fail_msg("no \"%s\" in the report", key);
    return v;
}

static json_object *bench_at(json_object *report, int i) {
    json_object *arr = get(report, "benchmarks");
    assert_true(i < (int)json_object_array_length(arr));
    return json_object_array_get_idx(arr, i);
}

static const char *verdict_at(json_object *report, int i) {
    return json_object_get_string(get(bench_at(report, i), "verdict"));
}

/* ---- the tests --------------------------------------------------------------------------- */

static const double ONES[4] = {1, 1, 1, 1};
static const double TIGHT[4] = {0.01, 0.01, 0.01, 0.01};

static void test_identical_same(void **state) {
    (void)state;
    NEED_BENCH();
    const char *a = tmp_path("ident.json");
    write_simple(a, FP_HERE, 3, 12, ONES, TIGHT, "ns");
    EXPECT_EXIT(0, run_bench("compare", a, a, NULL));
    EXPECT_IN(g_out, "3 compared: 0 slower, 0 faster, 3 same, 0 noisy");
    EXPECT_IN(g_out, "no regression");
    EXPECT_EXIT(0, run_bench("compare", a, a, "--json", NULL));
    json_object *r = parse_report();
    for (int i = 0; i < 3; i++) {
        assert_string_equal(verdict_at(r, i), "same");
        assert_true(json_object_get_double(get(bench_at(r, i), "p_value")) == 1.0);
        assert_true(json_object_get_double(get(bench_at(r, i), "change_pct")) == 0.0);
        assert_int_equal(json_object_get_int(get(bench_at(r, i), "base_repetitions")), 12);
    }
    assert_false(json_object_get_boolean(get(get(r, "summary"), "regression")));
    json_object_put(r);
}

/* Holm's step-down over the compared rows (issue 29: A/A pairs clean in 8 of
 * 10 with every row at 0.01): among 20 rows, one moved 5% with p near 0.002
 * is noisy (its p is above its Holm level 0.01 / 20), not a regression; a row
 * moved 20% with no overlap is still slower beside it. Fails with per-row
 * alpha: the weak row read slower and the gate failed. */
static void write_family(const char *path, double weak, double strong) {
    result_writer w = begin_results(path, FP_HERE);
    for (int k = 0; k < 20; k++) {
        char name[128];
        double t[64];
        snprintf(name, sizeof name, "flash.avx2/B:1/H:8/KV:8/Nq:%d/Nkv:%d/d:64/causal:0/threads:1",
                 64 + k, 64 + k);
        sample(t, 12, 1000.0 * (k == 0 ? weak : k == 1 ? strong : 1), k == 1 ? 0.01 : 0.05);
        add_bench(&w, name, 12, t, "ns");
    }
    end_results(&w);
}

static void test_holm(void **state) {
    (void)state;
    NEED_BENCH();
    const char *a = tmp_path("holm_a.json"), *b = tmp_path("holm_b.json"),
               *c = tmp_path("holm_c.json");
    write_family(a, 1, 1);
    write_family(b, 1.05, 1);
    write_family(c, 1.05, 1.2);
    EXPECT_EXIT(0, run_bench("compare", a, b, "--threshold", "3", "--json", NULL));
    json_object *r = parse_report();
    json_object *weak = bench_at(r, 0);
    const double p = json_object_get_double(get(weak, "p_value")),
                 level = json_object_get_double(get(weak, "alpha"));
    print_message("weak row: p %.3g, its Holm level %.3g\n", p, level);
    assert_true(p < 0.01);   /* significant on its own ... */
    assert_true(p >= level); /* ... not as one of 20 */
    assert_true(level <= 0.01 / 20 + 1e-12);
    assert_string_equal(verdict_at(r, 0), "noisy");
    json_object_put(r);
    EXPECT_EXIT(0, run_bench("compare", a, b, "--threshold", "3", NULL));
    EXPECT_IN(g_out, "p above its Holm level");
    EXPECT_EXIT(1, run_bench("compare", a, c, "--threshold", "3", "--json", NULL));
    r = parse_report();
    assert_string_equal(verdict_at(r, 1), "slower");
    assert_string_equal(verdict_at(r, 0), "noisy");
    json_object_put(r);
}

static void test_slower_tight(void **state) {
    (void)state;
    NEED_BENCH();
    const char *a = tmp_path("tight_a.json"), *b = tmp_path("tight_b.json");
    const double slow[3] = {1, 1.2, 1};
    write_simple(a, FP_HERE, 3, 12, ONES, TIGHT, "ns");
    write_simple(b, FP_HERE, 3, 12, slow, TIGHT, "ns");
    EXPECT_EXIT(1, run_bench("compare", a, b, NULL));
    EXPECT_IN(g_out, "slower");
    EXPECT_IN(g_out, "REGRESSION");
    EXPECT_EXIT(1, run_bench("compare", a, b, "--json", NULL));
    json_object *r = parse_report();
    assert_string_equal(verdict_at(r, 0), "same");
    assert_string_equal(verdict_at(r, 1), "slower");
    assert_string_equal(verdict_at(r, 2), "same");
    const double ch = json_object_get_double(get(bench_at(r, 1), "change_pct"));
    assert_true(fabs(ch - 20) < 1e-9);
    /* Fully separated 12 vs 12: exact p = 2 / C(24, 12). */
    const double p = json_object_get_double(get(bench_at(r, 1), "p_value"));
    assert_true(fabs(p / (2.0 / 2704156) - 1) < 1e-9);
    assert_true(json_object_get_boolean(get(get(r, "summary"), "regression")));
    json_object_put(r);
    /* The other way round it is faster, which is no failure. */
    EXPECT_EXIT(0, run_bench("compare", b, a, "--json", NULL));
    r = parse_report();
    assert_string_equal(verdict_at(r, 1), "faster");
    json_object_put(r);
    /* A threshold above the change makes it "same" (significant but small). */
    EXPECT_EXIT(0, run_bench("compare", a, b, "--threshold", "25", NULL));
}

/* Variant rows of one shape (sweep --window/--sinks: the name says the
 * variant) are benchmarks of their own: only the slower one is slower. */
static void test_variant_rows_apart(void **state) {
    (void)state;
    NEED_BENCH();
    static const char *const names[3] = {
        "flash.avx2/B:1/H:8/KV:8/Nq:4096/Nkv:4096/d:64/causal:1/threads:1",
        "flash.avx2/B:1/H:8/KV:8/Nq:4096/Nkv:4096/d:64/causal:1/w128:0/threads:1",
        "flash.avx2/B:1/H:8/KV:8/Nq:4096/Nkv:4096/d:64/causal:1/w128:0/sinks/threads:1"};
    const char *path[2] = {tmp_path("var_a.json"), tmp_path("var_b.json")};
    for (int f = 0; f < 2; f++) {
        result_writer w = begin_results(path[f], FP_HERE);
        for (int k = 0; k < 3; k++) {
            double t[12];
            sample(t, 12, 1000.0 * (k + 1) * (f == 1 && k == 1 ? 1.2 : 1), 0.01);
            add_bench(&w, names[k], 12, t, "ns");
        }
        end_results(&w);
    }
    EXPECT_EXIT(1, run_bench("compare", path[0], path[1], "--json", NULL));
    json_object *r = parse_report();
    assert_int_equal(json_object_array_length(get(r, "benchmarks")), 3);
    for (int i = 0; i < 3; i++) {
        const char *n = json_object_get_string(get(bench_at(r, i), "name"));
        assert_string_equal(verdict_at(r, i), strcmp(n, names[1]) == 0 ? "slower" : "same");
    }
    json_object_put(r);
}
/* Host drift: every benchmark of the new file 6% slower, one of them 10%
 * more. The drift is divided out (one regression, the others same) and the
 * threshold derived from the residual spread; --no-normalize keeps the drift
 * (everything slower), --threshold overrides the derivation. */
static void test_drift_removed(void **state) {
    (void)state;
    NEED_BENCH();
    enum { NB = 12 };
    const char *a = tmp_path("drift_a.json"), *b = tmp_path("drift_b.json");
    double one[NB], drift[NB], spread[NB];
    for (int k = 0; k < NB; k++) {
        one[k] = 1;
        drift[k] = k == 5 ? 1.06 * 1.10 : 1.06;
        spread[k] = 0.02;
    }
    write_simple(a, FP_HERE, NB, 12, one, spread, "ns");
    write_simple(b, FP_HERE, NB, 12, drift, spread, "ns");
    EXPECT_EXIT(1, run_bench("compare", a, b, "--json", NULL));
    json_object *r = parse_report();
    assert_true(json_object_get_boolean(get(r, "drift_removed")));
    assert_true(fabs(json_object_get_double(get(r, "drift_pct")) - 6) < 1e-6);
    assert_string_equal(json_object_get_string(get(r, "threshold_source")), "derived");
    assert_true(json_object_get_double(get(r, "threshold_pct")) == 2); /* no residual spread */
    for (int k = 0; k < NB; k++) assert_string_equal(verdict_at(r, k), k == 5 ? "slower" : "same");
    assert_true(fabs(json_object_get_double(get(bench_at(r, 5), "change_pct")) - 10) < 1e-6);
    assert_true(fabs(json_object_get_double(get(bench_at(r, 5), "change_raw_pct")) - 16.6) < 1e-6);
    json_object_put(r);
    EXPECT_EXIT(1, run_bench("compare", a, b, NULL));
    EXPECT_IN(g_out, "compute-bound at 1 thread: +6.0% (12 benchmarks)");
    EXPECT_IN(g_out, "threshold: 2.0% derived");
    /* kept: all twelve are slower */
    EXPECT_EXIT(1, run_bench("compare", a, b, "--json", "--no-normalize", NULL));
    r = parse_report();
    assert_false(json_object_get_boolean(get(r, "drift_removed")));
    for (int k = 0; k < NB; k++) assert_string_equal(verdict_at(r, k), "slower");
    json_object_put(r);
    /* a given threshold is used as is */
    EXPECT_EXIT(0, run_bench("compare", a, b, "--json", "--threshold", "12", NULL));
    r = parse_report();
    assert_string_equal(json_object_get_string(get(r, "threshold_source")), "given");
    assert_string_equal(verdict_at(r, 5), "same");
    json_object_put(r);
}

/* Memory-bound rows (a bw_level field) drift with the host's memory
 * traffic, not with the cores: eight compute rows unchanged, three
 * memory-bound rows 12% slower (the host's traffic) and one of them 10% more
 * (a real change): only that one is slower. */
static void test_memory_drift(void **state) {
    (void)state;
    NEED_BENCH();
    const char *a = tmp_path("mem_a.json"), *b = tmp_path("mem_b.json");
    for (int side = 0; side < 2; side++) {
        result_writer w = begin_results(side ? b : a, FP_HERE);
        for (int k = 0; k < 11; k++) {
            char name[160];
            double t[12];
            const int mem = k >= 8;
            snprintf(name, sizeof name, "%s/B:1/H:%d/KV:8/Nq:%d/Nkv:4096/d:64/causal:0/threads:1",
                     mem ? "decode.avx2" : "flash.avx2", 8 + k, mem ? 1 : 512);
            const double f = side && mem ? (k == 10 ? 1.12 * 1.10 : 1.12) : 1.0;
            sample(t, 12, 1000.0 * (k + 1) * f, 0.01);
            add_bench_x(&w, name, 12, t, "ns", mem ? ", \"bw_level\": 4" : "");
        }
        end_results(&w);
    }
    EXPECT_EXIT(1, run_bench("compare", a, b, "--json", NULL));
    json_object *r = parse_report();
    for (int k = 0; k < 11; k++) assert_string_equal(verdict_at(r, k), k == 10 ? "slower" : "same");
    json_object_put(r);
    EXPECT_EXIT(1, run_bench("compare", a, b, NULL));
    EXPECT_IN(g_out, "memory-bound at 1 thread: +12.0% (3 benchmarks)");
    EXPECT_IN(g_out, "compute-bound at 1 thread: +0.0% (8 benchmarks)");
}

/* A noisier drift group widens its own threshold, never the quiet one's:
 * eight 1-thread rows move under 0.5% but one 8% (a regression), eight
 * 2-thread rows move -9% .. +9% (a busy second vCPU, no change): the pooled
 * threshold (about 6%) would flag the 2-thread rows at +8% and +9%. */
static void test_noisy_group(void **state) {
    (void)state;
    NEED_BENCH();
    static const double one_t[8] = {0, 0.5, -0.5, 0.3, -0.3, 0.2, -0.2, 8};
    static const double two_t[8] = {-9, -8, -6, -1, 1, 6, 8, 9};
    const char *a = tmp_path("group_a.json"), *b = tmp_path("group_b.json");
    for (int side = 0; side < 2; side++) {
        result_writer w = begin_results(side ? b : a, FP_HERE);
        for (int k = 0; k < 16; k++) {
            char name[160];
            double t[12];
            const int th = k < 8 ? 1 : 2;
            snprintf(name, sizeof name,
                     "flash.avx2/B:1/H:%d/KV:%d/Nq:512/Nkv:512/d:64/causal:0/threads:%d", 8 + k,
                     8 + k, th);
            const double f = side ? 1 + (k < 8 ? one_t[k] : two_t[k - 8]) / 100 : 1.0;
            sample(t, 12, 1000.0 * (k + 1) * f, 0.002);
            add_bench(&w, name, 12, t, "ns");
        }
        end_results(&w);
    }
    EXPECT_EXIT(1, run_bench("compare", a, b, "--json", NULL));
    json_object *r = parse_report();
    for (int k = 0; k < 16; k++) assert_string_equal(verdict_at(r, k), k == 7 ? "slower" : "same");
    const double pooled = json_object_get_double(get(r, "threshold_pct"));
    assert_true(pooled >= 2 && pooled < 8); /* the 2-thread +8%, +9% rows would be slower */
    assert_true(json_object_get_double(get(bench_at(r, 7), "threshold_pct")) == pooled);
    assert_true(json_object_get_double(get(bench_at(r, 15), "threshold_pct")) > 9.5);
    json_object_put(r);
    EXPECT_EXIT(1, run_bench("compare", a, b, NULL));
    EXPECT_IN(g_out, "compute-bound at 2 threads");
    EXPECT_IN(g_out, "x its own spread");
}

/* One kernel's 4 rows all slowed 6% while the other 16 scatter +-3% between
 * the runs (a derived threshold at its 10% cap): no row is slower, but the
 * kernel's rows together are evidence, so the gate is inconclusive, never
 * "no regression"; a given threshold means what it says; the scatter alone
 * (the same files without the slowdown) is no regression. */
static void test_small_kernel(void **state) {
    (void)state;
    NEED_BENCH();
    static const double other[16] = {-3,  -2.5, -2,  -1.5, -1,  -0.7, -0.4, -0.2,
                                     0.2, 0.4,  0.7, 1,    1.5, 2,    2.5,  3};
    const char *a = tmp_path("small_a.json"), *b = tmp_path("small_b.json"),
               *b0 = tmp_path("small_b0.json");
    for (int side = 0; side < 3; side++) {
        result_writer w = begin_results(side == 0 ? a : side == 1 ? b : b0, FP_HERE);
        for (int k = 0; k < 20; k++) {
            char name[160];
            double t[12];
            const int slowed = k >= 16;
            snprintf(name, sizeof name, "%s/B:1/H:%d/KV:%d/Nq:512/Nkv:512/d:64/causal:0/threads:1",
                     slowed  ? "flash.avx512"
                     : k % 2 ? "tiled.avx2"
                             : "flash.avx2",
                     8 + k, 8 + k);
            const double f =
                side == 0 ? 1.0 : 1 + (slowed ? (side == 1 ? 6.0 : 0.0) : other[k]) / 100;
            sample(t, 12, 1000.0 * (k + 1) * f, 0.002);
            add_bench(&w, name, 12, t, "ns");
        }
        end_results(&w);
    }
    EXPECT_EXIT(3, run_bench("compare", a, b, "--json", NULL));
    json_object *r = parse_report();
    for (int k = 0; k < 20; k++) assert_string_equal(verdict_at(r, k), k >= 16 ? "small" : "same");
    assert_int_equal(json_object_get_int(get(get(r, "summary"), "small")), 4);
    json_object_put(r);
    EXPECT_EXIT(3, run_bench("compare", a, b, NULL));
    EXPECT_IN(g_out, "INCONCLUSIVE");
    EXPECT_IN(g_out, "the rows of flash.avx512 slowed together");
    EXPECT_EXIT(0, run_bench("compare", a, b, "--threshold", "10", NULL));
    EXPECT_EXIT(0, run_bench("compare", a, b0, NULL));
    EXPECT_IN(g_out, "no regression");
}

static void test_noisy_overlap(void **state) {
    (void)state;
    NEED_BENCH();
    const char *a = tmp_path("wide_a.json"), *b = tmp_path("wide_b.json");
    const double slow[1] = {1.2}, wide[1] = {0.5};
    write_simple(a, FP_HERE, 1, 12, ONES, wide, "ns");
    write_simple(b, FP_HERE, 1, 12, slow, wide, "ns");
    EXPECT_EXIT(0, run_bench("compare", a, b, "--json", NULL));
    json_object *r = parse_report();
    assert_string_equal(verdict_at(r, 0), "noisy");
    assert_true(json_object_get_double(get(bench_at(r, 0), "p_value")) >= 0.01);
    assert_true(fabs(json_object_get_double(get(bench_at(r, 0), "change_pct")) - 20) < 1e-9);
    json_object_put(r);
    EXPECT_EXIT(0, run_bench("compare", a, b, NULL));
    EXPECT_IN(g_out, "noisy");
}

static void test_too_few(void **state) {
    (void)state;
    NEED_BENCH();
    const char *a = tmp_path("few_a.json"), *b = tmp_path("few_b.json");
    write_simple(a, FP_HERE, 2, 3, ONES, TIGHT, "ns");
    write_simple(b, FP_HERE, 2, 3, ONES, TIGHT, "ns");
    /* Nothing could be tested: not "no regression" but inconclusive (3). */
    EXPECT_EXIT(3, run_bench("compare", a, b, NULL));
    EXPECT_IN(g_out, "too few repetitions (n<9)");
    EXPECT_IN(g_out, "0 of 2 benchmarks of the base judged");
    EXPECT_IN(g_out, "verdict: INCONCLUSIVE");
    EXPECT_IN(g_out, "0 of the base's 2 benchmarks judged");
    EXPECT_EXIT(3, run_bench("compare", a, b, "--json", NULL));
    json_object *r = parse_report();
    assert_true(json_object_get_boolean(get(bench_at(r, 0), "too_few_repetitions")));
    assert_int_equal(json_object_get_int(get(get(r, "summary"), "too_few_repetitions")), 2);
    assert_string_equal(json_object_get_string(get(get(r, "summary"), "verdict")), "inconclusive");
    assert_int_equal(json_object_get_int(get(get(r, "summary"), "judged")), 0);
    assert_string_equal(verdict_at(r, 0), "same");
    json_object_put(r);
    /* 9 on one side is not enough when the other has 3. */
    const char *c = tmp_path("few_c.json");
    write_simple(c, FP_HERE, 2, 9, ONES, TIGHT, "ns");
    EXPECT_EXIT(3, run_bench("compare", c, b, NULL));
    EXPECT_IN(g_out, "too few repetitions");
    EXPECT_EXIT(0, run_bench("compare", c, c, NULL));
    assert_null(strstr(g_out, "too few"));
    EXPECT_IN(g_out, "2 of 2 benchmarks of the base judged");
    /* With too few repetitions the U test means nothing: a clean 20%
     * slowdown is only 'noisy', and the gate says it could not tell. */
    const double slow[2] = {1.2, 1.2}, wide[2] = {0.01, 0.5};
    write_simple(b, FP_HERE, 2, 3, slow, wide, "ns");
    write_simple(c, FP_HERE, 2, 3, ONES, wide, "ns");
    EXPECT_EXIT(3, run_bench("compare", c, b, "--json", NULL));
    r = parse_report();
    assert_string_equal(verdict_at(r, 0), "noisy");
    assert_string_equal(verdict_at(r, 1), "noisy");
    assert_true(json_object_get_double(get(bench_at(r, 0), "p_value")) > 0.01);
    json_object_put(r);
    EXPECT_EXIT(3, run_bench("compare", c, b, NULL));
    EXPECT_IN(g_out, "2 benchmarks slowed past the threshold with too few repetitions to test");
}

static void test_fingerprint_mismatch(void **state) {
    (void)state;
    NEED_BENCH();
    const char *a = tmp_path("fp_a.json"), *b = tmp_path("fp_b.json"), *c = tmp_path("fp_c.json");
    const fingerprint other_cpu = {"intel-other-f6m85", "avx2", "2"};
    const fingerprint other_isa = {"amd-test-cpu-f25m1", "scalar", "2"};
    write_simple(a, FP_HERE, 2, 9, ONES, TIGHT, "ns");
    write_simple(b, other_cpu, 2, 9, ONES, TIGHT, "ns");
    write_simple(c, other_isa, 2, 9, ONES, TIGHT, "ns");
    EXPECT_EXIT(2, run_bench("compare", a, b, NULL));
    EXPECT_IN(g_err, "mha_cpu_key");
    EXPECT_IN(g_err, "intel-other-f6m85");
    EXPECT_IN(g_err, "--force");
    assert_string_equal(g_out, "");
    /* The same CPU with another setup is compared, and the setup judged: a
     * new run with less of the machine (a lower ISA level, fewer cores) is
     * a regression even when its rows read the same; the other way round
     * (the base was the capped one), inconclusive. */
    EXPECT_EXIT(1, run_bench("compare", a, c, NULL));
    EXPECT_IN(g_out, "had less of this machine");
    EXPECT_IN(g_out, "mha_isa_active 'avx2' -> 'scalar'");
    EXPECT_EXIT(3, run_bench("compare", c, a, NULL));
    EXPECT_IN(g_out, "setups on this CPU differ");
    const fingerprint one_core = {"amd-test-cpu-f25m1", "avx2", "1"};
    write_simple(c, one_core, 2, 9, ONES, TIGHT, "ns");
    EXPECT_EXIT(1, run_bench("compare", a, c, NULL));
    EXPECT_IN(g_out, "mha_cores '2' -> '1'");
    EXPECT_EXIT(0, run_bench("compare", a, b, "--force", NULL));
    EXPECT_IN(g_out, "2 same");
    EXPECT_IN(g_err, "comparing anyway");
}

static void test_plain_gbench_unknown_machine(void **state) {
    (void)state;
    NEED_BENCH();
    const char *a = tmp_path("plain.json"), *b = tmp_path("here.json");
    const fingerprint plain = {NULL, NULL, NULL};
    write_simple(a, plain, 1, 9, ONES, TIGHT, "ns");
    write_simple(b, FP_HERE, 1, 9, ONES, TIGHT, "ns");
    EXPECT_EXIT(2, run_bench("compare", a, b, NULL));
    EXPECT_IN(g_err, "plain.json");
    EXPECT_IN(g_err, "no \"mha_cpu_key\"");
    EXPECT_EXIT(2, run_bench("compare", a, a, NULL));
    EXPECT_EXIT(0, run_bench("compare", a, a, "--force", NULL));
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

static void test_malformed(void **state) {
    (void)state;
    NEED_BENCH();
    const char *good = tmp_path("good.json"), *bad = tmp_path("bad.json");
    write_simple(good, FP_HERE, 1, 9, ONES, TIGHT, "ns");
    static const struct {
        const char *text, *msg;
    } cases[] = {
        {"{\"context\": {}, \"benchmarks\": [ {\"name\": \"x\",, } ]}", "not valid JSON"},
        {"{\"context\": {}, \"benchmarks\": [", "unexpected end of file"},
        {"", "unexpected end of file"},
        {"{\"benchmarks\": []} trailing", "unexpected data"},
        {"[1, 2]", "not a JSON object"},
        {"{\"context\": {}}", "no \"benchmarks\" array"},
        {"{\"context\": {}, \"benchmarks\": []}", "no benchmark results"},
        {"{\"benchmarks\": [{\"name\": \"a_mean\", \"run_type\": \"aggregate\", "
         "\"real_time\": 1}]}",
         "no benchmark results"},
        {"{\"benchmarks\": [{\"name\": \"a\", \"run_type\": \"iteration\"}]}",
         "no numeric \"real_time\""},
        {"{\"benchmarks\": [{\"name\": \"a\", \"run_type\": \"iteration\", \"real_time\": 1, "
         "\"time_unit\": \"fortnights\"}]}",
         "fortnights"},
        {"{\"benchmarks\": [{\"name\": \"a\", \"run_type\": \"iteration\", \"real_time\": -1}]}",
         "positive"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_text(bad, cases[i].text);
        EXPECT_EXIT(2, run_bench("compare", good, bad, NULL));
        EXPECT_IN(g_err, "bad.json");
        EXPECT_IN(g_err, cases[i].msg);
        EXPECT_EXIT(2, run_bench("compare", bad, good, "--force", NULL));
        EXPECT_IN(g_err, "bad.json");
    }
    EXPECT_EXIT(2, run_bench("compare", good, tmp_path("missing.json"), NULL));
    EXPECT_IN(g_err, "missing.json");
    EXPECT_IN(g_err, "No such file");
    /* Usage errors. */
    EXPECT_EXIT(2, run_bench("compare", good, NULL));
    EXPECT_EXIT(2, run_bench("compare", good, good, "--alpha", "0", NULL));
    EXPECT_EXIT(2, run_bench("compare", good, good, "--threshold", "x", NULL));
    EXPECT_EXIT(2, run_bench("compare", good, good, "--", "--kernels", "naive", NULL));
    EXPECT_EXIT(0, run_bench("compare", "--help", NULL));
}

static void test_only_in_one(void **state) {
    (void)state;
    NEED_BENCH();
    const char *a = tmp_path("one_a.json"), *b = tmp_path("one_b.json");
    write_simple(a, FP_HERE, 3, 9, ONES, TIGHT, "ns");
    write_simple(b, FP_HERE, 2, 9, ONES, TIGHT, "ns");
    /* b lacks the third shape; add one only b has. */
    result_writer w = begin_results(b, FP_HERE);
    double t[9];
    sample(t, 9, 1000, 0.01);
    add_bench(&w, "flash.avx2/B:1/H:8/KV:8/Nq:128/Nkv:128/d:64/causal:0/threads:1", 9, t, "ns");
    add_bench(&w, "naive/B:1/H:1/KV:1/Nq:7/Nkv:7/d:3/causal:1/threads:1", 9, t, "ns");
    end_results(&w);
    /* A benchmark that vanished is a regression (the largest there is); a
     * new one is not. */
    EXPECT_EXIT(1, run_bench("compare", a, b, NULL));
    EXPECT_IN(g_out, "MISSING from new (only in base): flash.avx2/B:1/H:8/KV:8/Nq:256/");
    EXPECT_IN(g_out, "only in new: naive/B:1/H:1/KV:1/Nq:7/Nkv:7/d:3/causal:1/threads:1");
    EXPECT_IN(g_out, "verdict: REGRESSION");
    EXPECT_IN(g_out, "2 benchmarks of the base missing from the new file");
    const char *a1 = tmp_path("one_a1.json"); /* b's flash row alone: b only adds a row */
    write_simple(a1, FP_HERE, 1, 9, ONES, TIGHT, "ns");
    EXPECT_EXIT(0, run_bench("compare", a1, b, NULL));
    EXPECT_IN(g_out, "only in new: naive/");
    EXPECT_EXIT(1, run_bench("compare", a, b, "--json", NULL));
    json_object *r = parse_report();
    assert_int_equal(json_object_array_length(get(r, "benchmarks")), 1);
    assert_int_equal(json_object_array_length(get(r, "only_in_base")), 2);
    json_object *on = get(r, "only_in_new");
    assert_int_equal(json_object_array_length(on), 1);
    assert_string_equal(json_object_get_string(json_object_array_get_idx(on, 0)),
                        "naive/B:1/H:1/KV:1/Nq:7/Nkv:7/d:3/causal:1/threads:1");
    json_object_put(r);
}

/* A benchmark whose every repetition the sweep marked disturbed is named as
 * not judged (never "only in base", never a verdict), even when its
 * disturbed times are far slower; the others are compared as usual. */
static void test_all_disturbed(void **state) {
    (void)state;
    NEED_BENCH();
    const char *a = tmp_path("dist_a.json"), *b = tmp_path("dist_b.json");
    const char *n0 = "flash.avx2/B:1/H:8/KV:8/Nq:128/Nkv:128/d:64/causal:0/threads:1",
               *n1 = "flash.avx2/B:1/H:8/KV:8/Nq:256/Nkv:256/d:64/causal:0/threads:2";
    double t[9], slow[9];
    sample(t, 9, 1000, 0.01);
    sample(slow, 9, 5000, 0.01);
    result_writer w = begin_results(a, FP_HERE);
    add_bench(&w, n0, 9, t, "ns");
    add_bench(&w, n1, 9, t, "ns");
    end_results(&w);
    w = begin_results(b, FP_HERE);
    add_bench(&w, n0, 9, t, "ns");
    add_bench_x(&w, n1, 9, slow, "ns", ", \"disturbed\": 1, \"probe\": 0.4");
    end_results(&w);
    /* Half the base judged: inconclusive, never "no regression". */
    EXPECT_EXIT(3, run_bench("compare", a, b, NULL));
    EXPECT_IN(g_out, "not judged: flash.avx2/B:1/H:8/KV:8/Nq:256/Nkv:256/d:64/causal:0/threads:2 "
                     "(every repetition disturbed in new)");
    EXPECT_IN(g_out, "1 not judged");
    EXPECT_IN(g_out, "1 of 2 benchmarks of the base judged");
    EXPECT_IN(g_out, "verdict: INCONCLUSIVE");
    assert_null(strstr(g_out, "only in base"));
    EXPECT_EXIT(3, run_bench("compare", a, b, "--json", NULL));
    json_object *r = parse_report();
    assert_int_equal(json_object_array_length(get(r, "benchmarks")), 1);
    assert_int_equal(json_object_array_length(get(r, "only_in_base")), 0);
    json_object *nj = get(r, "not_judged_disturbed");
    assert_int_equal(json_object_array_length(nj), 1);
    assert_string_equal(json_object_get_string(json_object_array_get_idx(nj, 0)), n1);
    assert_int_equal(json_object_get_int(get(get(r, "summary"), "not_judged_disturbed")), 1);
    json_object_put(r);
}

/* The gate never says "no regression" without evidence (issue: a busy
 * runner's sweep with every repetition disturbed, a build slowing every row
 * alike, a 2-thread group 2.5x slower divided out as drift). */
static void test_gate_evidence(void **state) {
    (void)state;
    NEED_BENCH();
    enum { NB = 10, REPS = 9 };
    const char *a = tmp_path("gate_a.json"), *b = tmp_path("gate_b.json");
    double one[NB], slow[NB], spread[NB];
    for (int k = 0; k < NB; k++) one[k] = 1, slow[k] = 1.2, spread[k] = 0.02;
    write_simple(a, FP_HERE, NB, REPS, one, spread, "ns");
    /* every row 20% slower, every repetition disturbed: nothing judged */
    result_writer w = begin_results(b, FP_HERE);
    for (int k = 0; k < NB; k++) {
        char name[128];
        double t[REPS];
        snprintf(name, sizeof name, "flash.avx2/B:1/H:8/KV:8/Nq:%d/Nkv:%d/d:64/causal:0/threads:1",
                 128 << k, 128 << k);
        sample(t, REPS, 1200.0 * (1 << k), 0.02);
        add_bench_x(&w, name, REPS, t, "ns", ", \"disturbed\": 1, \"probe\": 0.4");
    }
    end_results(&w);
    EXPECT_EXIT(3, run_bench("compare", a, b, NULL));
    EXPECT_IN(g_out, "0 compared");
    EXPECT_IN(g_out, "verdict: INCONCLUSIVE");
    EXPECT_IN(g_out, "10 with every repetition on a side disturbed");
    /* every row 20% slower, undisturbed: the common drift is divided out, so
     * the rows read "same" -- and the gate says the drift was too large to
     * call that a verdict */
    write_simple(b, FP_HERE, NB, REPS, slow, spread, "ns");
    EXPECT_EXIT(3, run_bench("compare", a, b, NULL));
    EXPECT_IN(g_out, "10 same");
    EXPECT_IN(g_out, "the slowdown divided out as drift (+20.0% overall");
    EXPECT_EXIT(3, run_bench("compare", a, b, "--json", NULL));
    json_object *r = parse_report();
    assert_string_equal(json_object_get_string(get(get(r, "summary"), "verdict")), "inconclusive");
    assert_true(json_object_array_length(get(get(r, "summary"), "reasons")) >= 1);
    json_object_put(r);
    EXPECT_EXIT(1, run_bench("compare", a, b, "--no-normalize", NULL));
    EXPECT_IN(g_out, "10 slower");
    EXPECT_EXIT(0, run_bench("compare", a, b, "--max-drift", "25", NULL));
    /* every row 20% faster: dividing that out hides no slowdown */
    EXPECT_EXIT(0, run_bench("compare", b, a, NULL));
    /* --no-normalize with too few repetitions: the common change is a finding */
    write_simple(a, FP_HERE, NB, 3, one, spread, "ns");
    write_simple(b, FP_HERE, NB, 3, slow, spread, "ns");
    EXPECT_EXIT(3, run_bench("compare", a, b, "--no-normalize", NULL));
    EXPECT_IN(g_out, "moved +20.0% together");
    /* a 2-thread group 2.5x slower while the 1-thread rows hold: its drift
     * is divided out, and beyond the bound that is inconclusive */
    for (int f = 0; f < 2; f++) {
        w = begin_results(f ? b : a, FP_HERE);
        for (int k = 0; k < 12; k++) {
            char name[128];
            double t[REPS];
            const int threads = k < 6 ? 1 : 2;
            snprintf(name, sizeof name,
                     "flash.avx2/B:1/H:8/KV:8/Nq:%d/Nkv:%d/d:64/causal:0/threads:%d",
                     128 << (k % 6), 128 << (k % 6), threads);
            sample(t, REPS, 1000.0 * (1 << (k % 6)) * (f && threads == 2 ? 2.486 : 1), 0.02);
            add_bench(&w, name, REPS, t, "ns");
        }
        end_results(&w);
    }
    EXPECT_EXIT(3, run_bench("compare", a, b, NULL));
    EXPECT_IN(g_out, "compute-bound at 2 threads: +148.6%");
    EXPECT_IN(g_out, "1 group beyond");
    EXPECT_EXIT(1, run_bench("compare", a, b, "--no-normalize", NULL));
}

static void test_json_report(void **state) {
    (void)state;
    NEED_BENCH();
    const char *a = tmp_path("js_a.json"), *b = tmp_path("js_b.json");
    const double slow[2] = {1.3, 1};
    write_simple(a, FP_HERE, 2, 10, ONES, TIGHT, "ns");
    write_simple(b, FP_HERE, 2, 10, slow, TIGHT, "ns");
    EXPECT_EXIT(1,
                run_bench("compare", a, b, "--json", "--alpha", "0.05", "--threshold", "10", NULL));
    json_object *r = parse_report();
    assert_string_equal(json_object_get_string(get(r, "base")), a);
    assert_string_equal(json_object_get_string(get(r, "new")), b);
    assert_true(json_object_get_double(get(r, "alpha")) == 0.05);
    assert_true(json_object_get_double(get(r, "threshold_pct")) == 10);
    json_object *e = bench_at(r, 0);
    assert_string_equal(json_object_get_string(get(e, "p_method")), "exact");
    assert_true(fabs(json_object_get_double(get(e, "base_median_ns")) - 1000) < 1e-6);
    assert_true(fabs(json_object_get_double(get(e, "new_median_ns")) - 1300) < 1e-6);
    assert_true(json_object_get_double(get(e, "u")) == 100); /* every new rep slower */
    json_object *sum = get(r, "summary");
    assert_int_equal(json_object_get_int(get(sum, "slower")), 1);
    assert_int_equal(json_object_get_int(get(sum, "same")), 1);
    assert_string_equal(
        json_object_get_string(get(get(get(r, "fingerprint"), "new"), "mha_cpu_key")),
        FP_HERE.cpu_key);
    json_object_put(r);
}

/* Times in different units are normalised: 1 us in one file is 1000 ns in the other. */
static void test_time_units(void **state) {
    (void)state;
    NEED_BENCH();
    const char *a = tmp_path("us.json"), *b = tmp_path("ns.json");
    result_writer w = begin_results(a, FP_HERE);
    double t[9];
    sample(t, 9, 1.0, 0.01);
    add_bench(&w, "x", 9, t, "us");
    end_results(&w);
    w = begin_results(b, FP_HERE);
    for (int i = 0; i < 9; i++) t[i] *= 1000;
    add_bench(&w, "x", 9, t, "ns");
    end_results(&w);
    EXPECT_EXIT(0, run_bench("compare", a, b, "--json", NULL));
    json_object *r = parse_report();
    assert_true(fabs(json_object_get_double(get(bench_at(r, 0), "change_pct"))) < 1e-9);
    assert_string_equal(verdict_at(r, 0), "same");
    json_object_put(r);
}

/* Two explicit samples, one benchmark; returns the --json report. */
static json_object *compare_samples(const double *x, int m, const double *y, int n) {
    const char *a = tmp_path("u_a.json"), *b = tmp_path("u_b.json");
    result_writer w = begin_results(a, FP_HERE);
    add_bench(&w, "u", m, x, "ns");
    end_results(&w);
    w = begin_results(b, FP_HERE);
    add_bench(&w, "u", n, y, "ns");
    end_results(&w);
    const int rc = run_bench("compare", a, b, "--json", NULL);
    assert_true(rc == 0 || rc == 1);
    return parse_report();
}

static double p_of(json_object *r) {
    return json_object_get_double(get(bench_at(r, 0), "p_value"));
}

/* p-values against values computed independently (brute-force enumeration of all
 * C(N, n) rank assignments for the exact ones; the tie-free normal formula). */
static void test_u_pvalues(void **state) {
    (void)state;
    NEED_BENCH();
    double x[30], y[30];
    /* Fully separated, n = m = 9: exact two-sided p = 2 / C(18, 9). */
    for (int i = 0; i < 9; i++) x[i] = 100 + i, y[i] = 200 + i;
    json_object *r = compare_samples(x, 9, y, 9);
    assert_true(fabs(p_of(r) / (2.0 / 48620) - 1) < 1e-12);
    assert_string_equal(json_object_get_string(get(bench_at(r, 0), "p_method")), "exact");
    assert_string_equal(verdict_at(r, 0), "slower");
    json_object_put(r);
    /* Identical samples: p = 1. */
    r = compare_samples(x, 9, x, 9);
    assert_true(p_of(r) == 1.0);
    json_object_put(r);
    /* Ties between and within the samples, exact over midranks (enumerated). */
    const double tb[9] = {10, 10, 11, 11, 12, 12, 13, 13, 14};
    const double tn[9] = {12, 12, 13, 13, 14, 14, 15, 15, 16};
    r = compare_samples(tb, 9, tn, 9);
    assert_true(fabs(p_of(r) / 0.014561908679555738 - 1) < 1e-9);
    assert_string_equal(verdict_at(r, 0), "noisy"); /* +18% median, p > 0.01 */
    json_object_put(r);
    /* 25 vs 25 fully separated: normal approximation with continuity correction,
     * p = erfc((312.5 - 0.5) / sqrt(25*25*51/12) / sqrt(2)). */
    for (int i = 0; i < 25; i++) x[i] = 100 + i, y[i] = 200 + i;
    r = compare_samples(x, 25, y, 25);
    assert_string_equal(json_object_get_string(get(bench_at(r, 0), "p_method")), "normal");
    assert_true(fabs(p_of(r) / 1.4156562248495634e-09 - 1) < 1e-6);
    json_object_put(r);
    /* All values equal on both sides: no evidence at all. */
    for (int i = 0; i < 25; i++) x[i] = 5;
    r = compare_samples(x, 25, x, 25);
    assert_true(p_of(r) == 1.0);
    json_object_put(r);
}

static void test_baselines(void **state) {
    (void)state;
    NEED_BENCH();
    const char *dir = tmp_path("baselines");
    const char *a = tmp_path("bl_a.json"), *b = tmp_path("bl_b.json"), *c = tmp_path("bl_c.json");
    const double slow[2] = {1.2, 1.2};
    write_simple(a, FP_HERE, 2, 9, ONES, TIGHT, "ns");
    write_simple(b, FP_HERE, 2, 9, slow, TIGHT, "ns");
    /* No baseline yet. */
    EXPECT_EXIT(2, run_bench("compare", "--baseline", a, "--baseline-dir", dir, NULL));
    EXPECT_IN(g_err, "no baseline");
    EXPECT_IN(g_err, FP_HERE.cpu_key);
    /* First save: <key>.json. */
    EXPECT_EXIT(0, run_bench("compare", "--save-baseline", a, "--baseline-dir", dir, NULL));
    char first[512], text_a[1 << 14], text_f[1 << 14];
    snprintf(first, sizeof first, "%s/%s.json", dir, FP_HERE.cpu_key);
    EXPECT_IN(g_out, first);
    tu_slurp(a, text_a, sizeof text_a);
    tu_slurp(first, text_f, sizeof text_f);
    assert_string_equal(text_a, text_f);
    EXPECT_EXIT(0, run_bench("compare", "--baseline", a, "--baseline-dir", dir, NULL));
    EXPECT_IN(g_out, "2 same");
    EXPECT_EXIT(1, run_bench("compare", "--baseline", b, "--baseline-dir", dir, NULL));
    /* Second save never overwrites: a time-stamped name, and the newest is used. */
    EXPECT_EXIT(0, run_bench("compare", "--save-baseline", b, "--baseline-dir", dir, NULL));
    assert_int_equal(tu_count_entries(dir), 2);
    tu_slurp(first, text_f, sizeof text_f);
    assert_string_equal(text_a, text_f);
    EXPECT_EXIT(0, run_bench("compare", "--baseline", b, "--baseline-dir", dir, NULL));
    EXPECT_IN(g_err, "-20"); /* the time-stamped file was chosen */
    EXPECT_EXIT(0, run_bench("compare", "--save-baseline", b, "--baseline-dir", dir, NULL));
    assert_int_equal(tu_count_entries(dir), 3);
    /* A run of the same CPU under a lower ISA cap matches no baseline's
     * setup: the newest of its CPU is used, and the lost level is the
     * regression. */
    const fingerprint scalar = {FP_HERE.cpu_key, "scalar", "2"};
    write_simple(c, scalar, 2, 9, ONES, TIGHT, "ns");
    EXPECT_EXIT(1, run_bench("compare", "--baseline", c, "--baseline-dir", dir, NULL));
    EXPECT_IN(g_out, "mha_isa_active 'avx2' -> 'scalar'");
    /* A file without a CPU key cannot be a baseline. */
    const fingerprint plain = {NULL, NULL, NULL};
    write_simple(c, plain, 2, 9, ONES, TIGHT, "ns");
    EXPECT_EXIT(2, run_bench("compare", "--save-baseline", c, "--baseline-dir", dir, NULL));
    EXPECT_IN(g_err, "mha_cpu_key");
    assert_int_equal(tu_count_entries(dir), 3);
}

/* A baseline of this CPU under its older key (the key names the detected
 * ISA level: avx512 became avx512bf16 when that level was added) is found
 * when its fingerprint matches, and named when it does not. */
static void test_baseline_older_key(void **state) {
    (void)state;
    NEED_BENCH();
    const char *dir = tmp_path("baselines_old");
    const char *old = tmp_path("bk_old.json"), *capped = tmp_path("bk_capped.json"),
               *full = tmp_path("bk_full.json");
    const fingerprint fp_old = {"amd-test-f26m2-avx512", "avx512", "2"};
    const fingerprint fp_capped = {"amd-test-f26m2-avx512bf16", "avx512", "2"};
    const fingerprint fp_full = {"amd-test-f26m2-avx512bf16", "avx512bf16", "2"};
    write_simple(old, fp_old, 2, 9, ONES, TIGHT, "ns");
    write_simple(capped, fp_capped, 2, 9, ONES, TIGHT, "ns");
    write_simple(full, fp_full, 2, 9, ONES, TIGHT, "ns");
    EXPECT_EXIT(0, run_bench("compare", "--save-baseline", old, "--baseline-dir", dir, NULL));
    /* the new build under MHA_ISA=avx512: same CPU, same active level */
    EXPECT_EXIT(0, run_bench("compare", "--baseline", capped, "--baseline-dir", dir, NULL));
    EXPECT_IN(g_err, "older key 'amd-test-f26m2-avx512'");
    EXPECT_IN(g_out, "2 same");
    /* at its full level the old baseline measured other code: named, refused */
    EXPECT_EXIT(2, run_bench("compare", "--baseline", full, "--baseline-dir", dir, NULL));
    EXPECT_IN(g_err, "1 under this CPU's older key 'amd-test-f26m2-avx512'");
    EXPECT_IN(g_err, "mha_isa_active");
    /* once this build has its own baseline, that one is used */
    EXPECT_EXIT(0, run_bench("compare", "--save-baseline", full, "--baseline-dir", dir, NULL));
    EXPECT_EXIT(0, run_bench("compare", "--baseline", full, "--baseline-dir", dir, NULL));
    assert_null(strstr(g_err, "older key"));
}

/* The gate's own noise: A/A pairs give each row's false-positive rate and
 * minimum detectable effect, saved beside the baselines (never overwritten);
 * compare --baseline then prints them and calls a row that cannot see its
 * threshold "blind", not "same". */
static void test_calibrate(void **state) {
    (void)state;
    NEED_BENCH();
    enum { NB = 10, REPS = 9 };
    const char *dir = tmp_path("cal_dir");
    char files[6][512];
    double one[NB], spread[NB];
    for (int k = 0; k < NB; k++) one[k] = 1, spread[k] = k == NB - 1 ? 0.6 : 0.02;
    for (int i = 0; i < 6; i++) {
        snprintf(files[i], sizeof files[i], "%s/cal%d.json", g_tmp, i);
        write_simple(files[i], FP_HERE, NB, REPS, one, spread, "ns");
    }
    EXPECT_EXIT(0, run_bench("compare", "--calibrate", files[0], files[1], files[2], files[3],
                             files[4], files[5], "--baseline-dir", dir, NULL));
    EXPECT_IN(g_out, "from 3 A/A pairs: 10 benchmarks");
    char noise[600];
    snprintf(noise, sizeof noise, "%s/%s.noise.json", dir, FP_HERE.cpu_key);
    json_object *n = json_object_from_file(noise);
    assert_non_null(n);
    assert_int_equal(json_object_get_int(get(n, "pairs")), 3);
    json_object *rows = get(n, "benchmarks");
    assert_int_equal(json_object_array_length(rows), NB);
    const double mde0 = json_object_get_double(get(json_object_array_get_idx(rows, 0), "mde_pct"));
    assert_true(mde0 > 0 && mde0 < 5); /* a tight row sees a few percent */
    json_object *wide = get(json_object_array_get_idx(rows, NB - 1), "mde_pct");
    assert_true(!wide || json_object_get_double(wide) > 10); /* the wide one does not */
    assert_int_equal(
        json_object_get_int(get(json_object_array_get_idx(rows, 0), "false_positives")), 0);
    json_object_put(n);
    /* a second calibration is added, not written over */
    EXPECT_EXIT(
        0, run_bench("compare", "--calibrate", files[0], files[1], "--baseline-dir", dir, NULL));
    assert_int_equal(tu_count_entries(dir), 2);
    EXPECT_EXIT(2, run_bench("compare", "--calibrate", files[0], "--baseline-dir", dir, NULL));
    EXPECT_IN(g_err, "an even number of result files");
    /* a baseline beside it: the newest calibration (1 pair) is used */
    EXPECT_EXIT(0, run_bench("compare", "--save-baseline", files[0], "--baseline-dir", dir, NULL));
    EXPECT_EXIT(
        0, run_bench("compare", "--baseline", files[1], "--baseline-dir", dir, "--json", NULL));
    EXPECT_IN(g_err, ".noise-");
    json_object *r = parse_report();
    assert_string_equal(verdict_at(r, NB - 1), "blind");
    assert_string_equal(verdict_at(r, 0), "same");
    assert_true(json_object_get_double(get(bench_at(r, 0), "calibrated_mde_pct")) > 0);
    assert_int_equal(json_object_get_int(get(get(r, "summary"), "judged")), NB - 1);
    json_object_put(r);
    /* the explicit calibration, and a slowdown the tight rows see */
    double slow[NB];
    for (int k = 0; k < NB; k++) slow[k] = k == 0 ? 1.2 : 1;
    const char *s = tmp_path("cal_slow.json");
    write_simple(s, FP_HERE, NB, REPS, slow, spread, "ns");
    EXPECT_EXIT(1, run_bench("compare", files[0], s, "--noise", noise, NULL));
    EXPECT_IN(g_out, "calibrated: detects >= ");
    EXPECT_IN(g_out, "blind");
    EXPECT_EXIT(2, run_bench("compare", files[0], s, "--noise", files[0], NULL));
    EXPECT_IN(g_err, "not a calibration");
}

/* A fake mhabench for --ab: logs its arguments, then copies a prepared result
 * file to its --out argument: srcs[0] when n is 1, and with n > 1 its k-th
 * sweep srcs[(k - 1) % n] (a build whose speed is not the same in every
 * round); with n 0 it fails with status 3. A tag in lower case sleeps 0.3 s
 * first (a sweep that takes time). */
static void write_fake_srcs(const char *script, const char *tag, const char *const *srcs, int n) {
    FILE *f = fopen(script, "w");
    assert_non_null(f);
    fprintf(f, "#!/bin/sh\n%secho \"%s $*\" >> '%s/calls.log'\n",
            tag[0] >= 'a' && tag[0] <= 'z' ? "sleep 0.3\n" : "", tag, g_tmp);
    if (n > 1)
        fprintf(f,
                "k=$(cat '%s.count' 2>/dev/null || echo 0)\n"
                "k=$((k + 1))\n"
                "echo $k > '%s.count'\n",
                script, script);
    fprintf(f, "out=\n"
               "while [ $# -gt 0 ]; do\n"
               "  case \"$1\" in --out) out=\"$2\"; shift;; esac\n"
               "  shift\n"
               "done\n");
    if (n == 0) {
        fprintf(f, "echo 'fake sweep: something broke' >&2\nexit 3\n");
    } else if (n == 1) {
        fprintf(f, "cp '%s' \"$out\"\n", srcs[0]);
    } else {
        fprintf(f, "case $(( (k - 1) %% %d )) in\n", n);
        for (int i = 0; i < n; i++) fprintf(f, "  %d) cp '%s' \"$out\";;\n", i, srcs[i]);
        fprintf(f, "esac\n");
    }
    assert_int_equal(fclose(f), 0);
    assert_int_equal(chmod(script, 0755), 0);
}
/* write_fake_srcs with one file, or none (src NULL: the sweep fails). */
static void write_fake(const char *script, const char *tag, const char *src) {
    write_fake_srcs(script, tag, &src, src ? 1 : 0);
}

/* The fake sweeps' calls in calls.log ran in this order of their tags. */
static void expect_call_order(const char *calls, const char *order) {
    char log[8192];
    tu_slurp(calls, log, sizeof log);
    const char *line = log;
    for (const char *o = order; *o; o++) {
        assert_int_equal(line[0], *o);
        const char *nl = strchr(line, '\n');
        assert_non_null(nl);
        line = nl + 1;
    }
    assert_int_equal(*line, '\0');
}

static void test_ab(void **state) {
    (void)state;
    NEED_BENCH();
    const char *ra = tmp_path("ab_a.json"), *rb = tmp_path("ab_b.json");
    const char *sa = tmp_path("old.sh"), *sb = tmp_path("new.sh"), *sf = tmp_path("fail.sh");
    const double slow[2] = {1, 1.2};
    write_simple(ra, FP_HERE, 2, 9, ONES, TIGHT, "ns");
    write_simple(rb, FP_HERE, 2, 9, slow, TIGHT, "ns");
    write_fake(sa, "A", ra);
    write_fake(sb, "B", rb);
    write_fake(sf, "F", NULL);
    char tmpdir[512], calls[4096];
    snprintf(tmpdir, sizeof tmpdir, "%s/abtmp", g_tmp);
    assert_int_equal(mkdir(tmpdir, 0755), 0);
    const char *old_tmp = getenv("TMPDIR");
    char *saved = old_tmp ? strdup(old_tmp) : NULL;
    setenv("TMPDIR", tmpdir, 1);

    const int rc = run_bench("compare", "--ab", sa, sb, "--rounds", "3", "--json", "--",
                             "--kernels", "flash.avx2", NULL);
    EXPECT_EXIT(1, rc);
    json_object *r = parse_report();
    assert_string_equal(verdict_at(r, 0), "same");
    assert_string_equal(verdict_at(r, 1), "slower");
    /* The three rounds' repetitions are pooled per side; each round moved alike. */
    assert_int_equal(json_object_get_int(get(bench_at(r, 1), "base_repetitions")), 27);
    assert_int_equal(json_object_get_int(get(bench_at(r, 1), "new_repetitions")), 27);
    assert_int_equal(json_object_get_int(get(bench_at(r, 1), "rounds")), 3);
    assert_int_equal(json_object_get_int(get(bench_at(r, 1), "rounds_agreeing")), 3);
    assert_false(json_object_get_boolean(get(bench_at(r, 1), "rounds_disagree")));
    json_object_put(r);
    /* The Thue-Morse order: A B, B A, B A (a round runs B first when its
     * number has odd parity), each a ci sweep with the extra arguments and
     * the preset's own repetitions. */
    snprintf(calls, sizeof calls, "%s/calls.log", g_tmp);
    char log[8192];
    tu_slurp(calls, log, sizeof log);
    const char *line = log;
    static const char order[] = "ABBABA";
    for (int i = 0; i < 6; i++) {
        assert_int_equal(line[0], order[i]);
        assert_true(strncmp(line + 1, " sweep --preset ci --out ", 25) == 0);
        const char *nl = strchr(line, '\n');
        assert_non_null(nl);
        assert_non_null(strstr(line, "--kernels flash.avx2"));
        assert_true(strstr(line, "--kernels") < nl);
        const char *reps = strstr(line, "--repetitions");
        assert_true(reps == NULL || reps > nl);
        line = nl + 1;
    }
    assert_int_equal(*line, '\0');
    assert_int_equal(tu_count_entries(tmpdir), 0); /* temporary files cleaned up */

    /* Under the budget: at least 2 rounds (here each sweep takes 0.3 s, so
     * a 1.1 s budget stops there); --rounds 4 runs ABBA BAAB. */
    const char *ta = tmp_path("old_t.sh"), *tb = tmp_path("new_t.sh");
    write_fake(ta, "a", ra);
    write_fake(tb, "b", rb);
    unlink(calls);
    EXPECT_EXIT(1, run_bench("compare", "--ab", ta, tb, "--budget", "1.1", NULL));
    EXPECT_IN(g_err, "at least 2 rounds)");
    expect_call_order(calls, "abba");
    unlink(calls);
    EXPECT_EXIT(1, run_bench("compare", "--ab", ta, tb, "--rounds", "4", NULL));
    expect_call_order(calls, "abbabaab");
    assert_int_equal(tu_count_entries(tmpdir), 0);

    /* The same build on both sides: no regression (table output). */
    EXPECT_EXIT(0, run_bench("compare", "--ab", sa, sa, "--rounds", "2", NULL));
    EXPECT_IN(g_out, "2 same");

    /* A move only some rounds show (the host's speed changed between the
     * sweeps): new ran 20% slower in rounds 1 and 3 and alike in round 2.
     * Pooled, 18 of its 27 repetitions are slower than every base one (U
     * test: slower); per round, one of three did not move: noisy, and the
     * gate inconclusive (exit 3), neither a regression nor a pass. */
    const char *sc = tmp_path("cycle.sh");
    const char *const srcs[3] = {rb, ra, rb};
    write_fake_srcs(sc, "C", srcs, 3);
    EXPECT_EXIT(3, run_bench("compare", "--ab", sa, sc, "--rounds", "3", "--json", NULL));
    r = parse_report();
    assert_string_equal(verdict_at(r, 0), "same");
    assert_string_equal(verdict_at(r, 1), "noisy");
    assert_true(json_object_get_double(get(bench_at(r, 1), "change_pct")) > 15);
    assert_true(json_object_get_double(get(bench_at(r, 1), "p_value")) < 1e-4);
    assert_int_equal(json_object_get_int(get(bench_at(r, 1), "rounds")), 3);
    assert_int_equal(json_object_get_int(get(bench_at(r, 1), "rounds_agreeing")), 2);
    assert_true(json_object_get_boolean(get(bench_at(r, 1), "rounds_disagree")));
    json_object *range = get(bench_at(r, 1), "round_change_range_pct");
    assert_true(fabs(json_object_get_double(json_object_array_get_idx(range, 0))) < 2);
    assert_true(json_object_get_double(json_object_array_get_idx(range, 1)) > 15);
    assert_non_null(strstr(json_object_to_json_string(get(r, "summary")),
                           "not past half the threshold in every round"));
    json_object_put(r);
    EXPECT_EXIT(3, run_bench("compare", "--ab", sa, sc, "--rounds", "3", NULL));
    EXPECT_IN(g_out, "rounds disagree: 2 of 3 past half the threshold");
    EXPECT_IN(g_out, "INCONCLUSIVE");

    /* A sweep that fails is an input error with its output shown. */
    EXPECT_EXIT(2, run_bench("compare", "--ab", sa, sf, "--rounds", "2", NULL));
    EXPECT_IN(g_err, "exited with status 3");
    EXPECT_IN(g_err, "fake sweep: something broke");
    assert_int_equal(tu_count_entries(tmpdir), 0);
    EXPECT_EXIT(2, run_bench("compare", "--ab", sa, tmp_path("no-such-binary"), NULL));
    EXPECT_IN(g_err, "no-such-binary");
    EXPECT_EXIT(2, run_bench("compare", "--ab", sa, sb, "--", "--out", "x.json", NULL));

    if (saved) {
        setenv("TMPDIR", saved, 1);
        free(saved);
    } else {
        unsetenv("TMPDIR");
    }
}

/* --json is JSON: a change that overflows (base median 1e-320 ns) is null,
 * not Infinity; result files with Google Benchmark's bare NaN (old sweeps)
 * or null (new ones) in the _cv rows are read alike. */
static void test_nonfinite_json(void **state) {
    (void)state;
    NEED_BENCH();
    const char *a = tmp_path("nf_a.json"), *b = tmp_path("nf_b.json");
    double ta[9], tb[9];
    for (int i = 0; i < 9; i++) {
        ta[i] = 1e-320 * (1 + i);
        tb[i] = 1000 + i;
    }
    result_writer w = begin_results(a, FP_HERE);
    add_bench(&w, "flash.avx2/x", 9, ta, "ns");
    fprintf(w.f, ",\n    {\"name\": \"flash.avx2/x_cv\", \"run_type\": \"aggregate\", "
                 "\"aggregate_name\": \"cv\", \"real_time\": NaN, \"time_unit\": \"ns\", "
                 "\"GFLOPS\": -Infinity}");
    end_results(&w);
    w = begin_results(b, FP_HERE);
    add_bench(&w, "flash.avx2/x", 9, tb, "ns");
    fprintf(w.f, ",\n    {\"name\": \"flash.avx2/x_cv\", \"run_type\": \"aggregate\", "
                 "\"aggregate_name\": \"cv\", \"real_time\": null, \"time_unit\": \"ns\"}");
    end_results(&w);
    EXPECT_EXIT(1, run_bench("compare", a, b, "--json", NULL));
    if (strstr(g_out, "Infinity") || strstr(g_out, "NaN")) fail_msg("not JSON:\n%s", g_out);
    json_object *r = parse_report();
    json_object *e = bench_at(r, 0);
    assert_true(json_object_is_type(get(e, "change_pct"), json_type_null));
    json_object_put(r);
}

/* The newest baseline is chosen by stamp, then numeric suffix: <k>-S-10
 * after <k>-S-2 after <k>-S after <k>; an empty folder is "no baseline". */
static void test_baseline_order(void **state) {
    (void)state;
    NEED_BENCH();
    char dir[512], p[1024];
    snprintf(dir, sizeof dir, "%s", tmp_path("bl_order"));
    assert_int_equal(mkdir(dir, 0755), 0);
    const char *n = tmp_path("bl_order_new.json");
    write_simple(n, FP_HERE, 1, 9, ONES, TIGHT, "ns");
    EXPECT_EXIT(2, run_bench("compare", "--baseline", n, "--baseline-dir", dir, NULL));
    EXPECT_IN(g_err, "no baseline");
    static const char *const suffix[] = {"", "-20260101T000000Z", "-20260101T000000Z-2",
                                         "-20260101T000000Z-10", "-20251231T235959Z-99"};
    for (int i = 0; i < 5; i++) {
        snprintf(p, sizeof p, "%s/%s%s.json", dir, FP_HERE.cpu_key, suffix[i]);
        write_simple(p, FP_HERE, 1, 9, ONES, TIGHT, "ns");
    }
    EXPECT_EXIT(0, run_bench("compare", "--baseline", n, "--baseline-dir", dir, NULL));
    EXPECT_IN(g_err, "-20260101T000000Z-10.json");
    snprintf(p, sizeof p, "%s/%s-20260101T000000Z-10.json", dir, FP_HERE.cpu_key);
    unlink(p);
    EXPECT_EXIT(0, run_bench("compare", "--baseline", n, "--baseline-dir", dir, NULL));
    EXPECT_IN(g_err, "-20260101T000000Z-2.json");
    snprintf(p, sizeof p, "%s/%s-20260101T000000Z-2.json", dir, FP_HERE.cpu_key);
    unlink(p);
    EXPECT_EXIT(0, run_bench("compare", "--baseline", n, "--baseline-dir", dir, NULL));
    EXPECT_IN(g_err, "-20260101T000000Z.json");
}

/* A FIFO as an input is refused at once (it blocked in open forever), and
 * file text in messages is escaped (no raw control bytes on stderr). */
static void test_special_inputs(void **state) {
    (void)state;
    NEED_BENCH();
    const char *fifo = tmp_path("in.fifo"), *b = tmp_path("sp_b.json");
    assert_int_equal(mkfifo(fifo, 0644), 0);
    write_simple(b, FP_HERE, 1, 9, ONES, TIGHT, "ns");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "timeout 20 '%s' compare '%s' '%s'", g_bench, fifo, b);
    const char *args[] = {"-c", cmd, NULL};
    const int rc = tu_run("/bin/sh", args, g_tmp, g_out, sizeof g_out, g_err, sizeof g_err);
    EXPECT_EXIT(2, rc);
    EXPECT_IN(g_err, "FIFO");
    const char *bad = tmp_path("sp_esc.json");
    FILE *f = fopen(bad, "w");
    assert_non_null(f);
    fprintf(f, "{\"context\": {}, \"benchmarks\": [{\"name\": \"x\\u001b]0;pwned\\u0007\", "
               "\"run_type\": \"iteration\", \"real_time\": 1, \"time_unit\": "
               "\"\\u001b[2J\\n\"}]}");
    assert_int_equal(fclose(f), 0);
    EXPECT_EXIT(2, run_bench("compare", bad, b, NULL));
    EXPECT_IN(g_err, "\\x1b]0;pwned");
    for (const char *c = g_err; *c; c++)
        if ((unsigned char)*c < 0x20 && *c != '\n') fail_msg("raw control byte in: %s", g_err);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_identical_same),
        cmocka_unit_test(test_slower_tight),
        cmocka_unit_test(test_holm),
        cmocka_unit_test(test_variant_rows_apart),
        cmocka_unit_test(test_drift_removed),
        cmocka_unit_test(test_memory_drift),
        cmocka_unit_test(test_noisy_group),
        cmocka_unit_test(test_small_kernel),
        cmocka_unit_test(test_noisy_overlap),
        cmocka_unit_test(test_too_few),
        cmocka_unit_test(test_fingerprint_mismatch),
        cmocka_unit_test(test_plain_gbench_unknown_machine),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_only_in_one),
        cmocka_unit_test(test_all_disturbed),
        cmocka_unit_test(test_gate_evidence),
        cmocka_unit_test(test_json_report),
        cmocka_unit_test(test_time_units),
        cmocka_unit_test(test_u_pvalues),
        cmocka_unit_test(test_baselines),
        cmocka_unit_test(test_baseline_older_key),
        cmocka_unit_test(test_calibrate),
        cmocka_unit_test(test_ab),
        cmocka_unit_test(test_nonfinite_json),
        cmocka_unit_test(test_baseline_order),
        cmocka_unit_test(test_special_inputs),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
