/* test_gbench.c - `mhabench sweep` end to end, run as a child process ($MHABENCH):
 * a tiny sweep's Google Benchmark JSON checked against the schema (exact
 * names, counters, every mha_* context key), interleaved repetitions as rows
 * of one name, Google Benchmark flags passed through, and bad options that
 * must exit 2 with a message. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <json-c/json.h>
#include <regex.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"

/* json_object_array_sort's comparator for an array of strings. */
static int json_strcmp(const void *a, const void *b) {
    return strcmp(json_object_get_string(*(json_object *const *)a),
                  json_object_get_string(*(json_object *const *)b));
}

static const char *g_bench; /* $MHABENCH */
static char g_tmp[256];
static char g_err[8192]; /* stderr of the last run */

/* The context keys every result file carries (DESIGN.md section 4, issue 4). */
static const char *const CONTEXT_KEYS[] = {
    "mha_cpu_model",
    "mha_cpu_vendor",
    "mha_cpu_family",
    "mha_cpu_model_id",
    "mha_cpu_stepping",
    "mha_isa_flags",
    "mha_isa_detected",
    "mha_isa_cap",
    "mha_isa_active",
    "mha_cores",
    "mha_pus",
    "mha_cores_machine",
    "mha_l1d",
    "mha_l2",
    "mha_l3",
    "mha_l1d_raw",
    "mha_l2_raw",
    "mha_l3_raw",
    "mha_read_bw_gbs_1t",
    "mha_read_bw_gbs_all",
    "mha_compiler",
    "mha_cflags",
    "mha_git_revision",
    "mha_threads_max",
    "mha_binding",
    "mha_omp_env",
    "mha_cpu_key",
    "mha_preset",
    "mha_version",
    "mha_repetition_order",
    "mha_peak_gflops_scalar",
};

#define NAME_RE                                                                                    \
    "^[a-z0-9_]+(\\.[a-z0-9_]+)?/B:[0-9]+/H:[0-9]+/KV:[0-9]+/Nq:[0-9]+/Nkv:[0-9]+/d:[0-9]+/"       \
    "causal:[01]/threads:[0-9]+$"

static int setup(void **state) {
    (void)state;
    g_bench = getenv("MHABENCH");
    if (g_bench && !*g_bench) g_bench = NULL;
    return tu_mkdtemp(g_tmp, sizeof g_tmp, "test_gbench");
}

static int teardown(void **state) {
    (void)state;
    tu_rm_tree(g_tmp);
    return 0;
}

/* Runs mhabench with the NULL-terminated arguments; stdout goes to a file,
 * stderr into g_err. Returns the exit status (-1 if it did not exit). */
static int run_bench(const char *const *args) {
    return tu_run(g_bench, args, g_tmp, NULL, 0, g_err, sizeof g_err);
}

#define REQUIRE_BENCH()                                                                            \
    do {                                                                                           \
        if (!g_bench) {                                                                            \
            print_message("MHABENCH is not set: skipping (run through meson test)\n");             \
            skip();                                                                                \
        }                                                                                          \
    } while (0)

static json_object *field(json_object *o, const char *key) {
    json_object *v = NULL;
    if (!json_object_object_get_ex(o, key, &v)) {
        print_error("missing key '%s' in %s\n", key,
                    json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
        fail();
    }
    return v;
}

static double number(json_object *o, const char *key) {
    json_object *v = field(o, key);
    assert_true(json_object_is_type(v, json_type_double) || json_object_is_type(v, json_type_int));
    return json_object_get_double(v);
}

/* The tiny sweep: flash.scalar (runs everywhere), one self-attention shape
 * and one decode shape. */
static void test_schema(void **state) {
    (void)state;
    REQUIRE_BENCH();
    char out[512];
    snprintf(out, sizeof out, "%s/tiny.json", g_tmp);
    const char *args[] = {"sweep",     "--passes",   "1",          "--kernels", "flash.scalar",
                          "--seq-q",   "1,48",       "--seq-kv",   "48",        "--heads",
                          "2",         "--head-dim", "16",         "--causal",  "0",
                          "--threads", "1",          "--min-time", "0.01",      "--out",
                          out,         NULL};
    const int rc = run_bench(args);
    if (rc != 0) print_error("exit %d, stderr:\n%s\n", rc, g_err);
    assert_int_equal(rc, 0);

    json_object *root = json_object_from_file(out);
    assert_non_null(root);
    json_object *ctx = field(root, "context");
    for (size_t i = 0; i < sizeof CONTEXT_KEYS / sizeof CONTEXT_KEYS[0]; i++) {
        json_object *v = field(ctx, CONTEXT_KEYS[i]);
        assert_true(json_object_is_type(v, json_type_string));
        assert_true(json_object_get_string_len(v) > 0);
    }
    assert_string_equal(json_object_get_string(field(ctx, "mha_preset")), "quick");
    /* quick: repetitions interleaved within each shape (issue 13) */
    assert_string_equal(json_object_get_string(field(ctx, "mha_repetition_order")), "interleaved");

    regex_t re;
    assert_int_equal(regcomp(&re, NAME_RE, REG_EXTENDED | REG_NOSUB), 0);
    json_object *benches = field(root, "benchmarks");
    assert_true(json_object_is_type(benches, json_type_array));
    const size_t n = json_object_array_length(benches);
    assert_int_equal(n, 2);
    int seen_decode = 0, seen_self = 0;
    for (size_t i = 0; i < n; i++) {
        json_object *b = json_object_array_get_idx(benches, i);
        const char *name = json_object_get_string(field(b, "name"));
        if (regexec(&re, name, 0, NULL, 0) != 0) {
            print_error("name '%s' does not match %s\n", name, NAME_RE);
            fail();
        }
        assert_string_equal(json_object_get_string(field(b, "run_type")), "iteration");
        assert_string_equal(json_object_get_string(field(b, "time_unit")), "ns");
        assert_true(number(b, "real_time") > 0);
        assert_true(number(b, "iterations") >= 1);
        assert_true(number(b, "GFLOPS") > 0);
        assert_true(number(b, "pct_peak") > 0);
        assert_true(number(b, "threads") == 1);
        number(b, "block_q");
        number(b, "block_kv");
        if (strstr(name, "/Nq:1/")) {
            seen_decode = 1;
            assert_string_equal(name,
                                "flash.scalar/B:1/H:2/KV:2/Nq:1/Nkv:48/d:16/causal:0/threads:1");
            assert_true(number(b, "bytes_per_second") > 0);
            assert_true(number(b, "pct_bw") > 0);
        } else {
            seen_self = 1;
            assert_string_equal(name,
                                "flash.scalar/B:1/H:2/KV:2/Nq:48/Nkv:48/d:16/causal:0/threads:1");
        }
    }
    assert_true(seen_decode && seen_self);
    regfree(&re);
    json_object_put(root);
}

/* ci order: every (benchmark, repetition) is its own run, shuffled, and the
 * file holds the repetitions as rows of one name numbered 0..n-1. */
static void test_interleaved(void **state) {
    (void)state;
    REQUIRE_BENCH();
    char out[512];
    snprintf(out, sizeof out, "%s/ci.json", g_tmp);
    const char *args[] = {"sweep",
                          "--passes",
                          "1",
                          "--preset",
                          "ci",
                          "--kernels",
                          "flash.scalar",
                          "--seq",
                          "16,32",
                          "--heads",
                          "1",
                          "--head-dim",
                          "8",
                          "--causal",
                          "1",
                          "--threads",
                          "1",
                          "--repetitions",
                          "3",
                          "--min-time",
                          "0.005",
                          "--out",
                          out,
                          NULL};
    const int rc = run_bench(args);
    if (rc != 0) print_error("exit %d, stderr:\n%s\n", rc, g_err);
    assert_int_equal(rc, 0);
    json_object *root = json_object_from_file(out);
    assert_non_null(root);
    assert_string_equal(
        json_object_get_string(field(field(root, "context"), "mha_repetition_order")),
        "interleaved");
    json_object *benches = field(root, "benchmarks");
    const size_t n = json_object_array_length(benches);
    assert_int_equal(n, 6);
    const char *names[2] = {"flash.scalar/B:1/H:1/KV:1/Nq:16/Nkv:16/d:8/causal:1/threads:1",
                            "flash.scalar/B:1/H:1/KV:1/Nq:32/Nkv:32/d:8/causal:1/threads:1"};
    for (int k = 0; k < 2; k++) {
        int reps_seen = 0; /* bit mask of repetition_index */
        int64_t family = -1;
        for (size_t i = 0; i < n; i++) {
            json_object *b = json_object_array_get_idx(benches, i);
            if (strcmp(json_object_get_string(field(b, "name")), names[k]) != 0) continue;
            assert_true(number(b, "repetitions") == 3);
            const int r = (int)number(b, "repetition_index");
            assert_true(r >= 0 && r < 3);
            reps_seen |= 1 << r;
            const int64_t f = (int64_t)number(b, "family_index");
            if (family < 0) family = f;
            assert_true(f == family);
        }
        assert_int_equal(reps_seen, 7);
    }
    json_object_put(root);
}

/* Flags after -- go to Google Benchmark. */
static void test_passthrough_filter(void **state) {
    (void)state;
    REQUIRE_BENCH();
    char out[512];
    snprintf(out, sizeof out, "%s/filtered.json", g_tmp);
    const char *args[] = {"sweep",
                          "--passes",
                          "1",
                          "--kernels",
                          "flash.scalar",
                          "--seq",
                          "16,32",
                          "--heads",
                          "1",
                          "--head-dim",
                          "8",
                          "--causal",
                          "0",
                          "--threads",
                          "1",
                          "--min-time",
                          "0.005",
                          "--out",
                          out,
                          "--",
                          "--benchmark_filter=Nq:32/",
                          NULL};
    const int rc = run_bench(args);
    if (rc != 0) print_error("exit %d, stderr:\n%s\n", rc, g_err);
    assert_int_equal(rc, 0);
    json_object *root = json_object_from_file(out);
    assert_non_null(root);
    json_object *benches = field(root, "benchmarks");
    assert_int_equal(json_object_array_length(benches), 1);
    assert_non_null(strstr(
        json_object_get_string(field(json_object_array_get_idx(benches, 0), "name")), "/Nq:32/"));
    json_object_put(root);
}

/* --benchmark_repetitions=N after "--" is honoured as --repetitions N (the
 * interleaved presets used to override it: 9 asked, 3 came out), and
 * refused when it disagrees with --repetitions. */
static void test_passthrough_repetitions(void **state) {
    (void)state;
    REQUIRE_BENCH();
    char out[512];
    snprintf(out, sizeof out, "%s/reps.json", g_tmp);
    const char *args[] = {"sweep",
                          "--passes",
                          "1",
                          "--kernels",
                          "flash.scalar",
                          "--seq",
                          "16",
                          "--heads",
                          "1",
                          "--head-dim",
                          "8",
                          "--causal",
                          "0",
                          "--threads",
                          "1",
                          "--min-time",
                          "0.001",
                          "--out",
                          out,
                          "--",
                          "--benchmark_repetitions=7",
                          NULL};
    const int rc = run_bench(args);
    if (rc != 0) print_error("exit %d, stderr:\n%s\n", rc, g_err);
    assert_int_equal(rc, 0);
    json_object *root = json_object_from_file(out);
    assert_non_null(root);
    json_object *benches = field(root, "benchmarks");
    int iterations = 0;
    for (size_t i = 0; i < json_object_array_length(benches); i++) {
        json_object *rt;
        if (json_object_object_get_ex(json_object_array_get_idx(benches, i), "run_type", &rt) &&
            strcmp(json_object_get_string(rt), "iteration") == 0)
            iterations++;
    }
    assert_int_equal(iterations, 7);
    json_object_put(root);
    const char *clash[] = {
        "sweep", "--repetitions", "4", "--out", out, "--", "--benchmark_repetitions=9", NULL};
    assert_int_equal(run_bench(clash), 2);
    assert_non_null(strstr(g_err, "--repetitions 4 and --benchmark_repetitions=9 disagree"));
}

/* The keys a quick sweep writes, against tests/data/sweep_keys.txt (taken
 * from the tree before the measurement core): the quick preset's grid and
 * its decode and layer shapes, flash.scalar and auto at 1 thread, filtered
 * to the cheap shapes so it takes seconds. Context keys (per-ISA unit rates
 * but scalar's FMA and exp depend on the CPU), benchmark names in file
 * order, and the union of the rows' fields must all be the same. */
static int keep_context_key(const char *k) {
    if (strncmp(k, "mha_peak_gflops_", 16) == 0) return strcmp(k, "mha_peak_gflops_scalar") == 0;
    if (strncmp(k, "mha_peak_gexps_", 15) == 0) return strcmp(k, "mha_peak_gexps_scalar") == 0;
    return 1;
}

static void test_keys_unchanged(void **state) {
    (void)state;
    REQUIRE_BENCH();
    const char *data = getenv("MHA_TEST_DATA");
    if (!data) {
        print_message("MHA_TEST_DATA is not set: skipping (run through meson test)\n");
        skip();
    }
    char out[512], listp[1024];
    snprintf(out, sizeof out, "%s/keys.json", g_tmp);
    snprintf(listp, sizeof listp, "%s/sweep_keys.txt", data);
    const char *args[] = {"sweep",
                          "--passes",
                          "1",
                          "--preset",
                          "quick",
                          "--kernels",
                          "flash.scalar,auto",
                          "--threads",
                          "1",
                          "--min-time",
                          "0.001",
                          "--max-seconds",
                          "1000", /* no estimate-based skips: a loaded machine drops none */
                          "--out",
                          out,
                          "--",
                          "--benchmark_filter=(/Nq:128/|/Nkv:4096/|^layer/.*/N:512/)",
                          NULL};
    const int rc = run_bench(args);
    if (rc != 0) print_error("exit %d, stderr:\n%s\n", rc, g_err);
    assert_int_equal(rc, 0);
    json_object *root = json_object_from_file(out);
    assert_non_null(root);

    /* What the file holds, in the list's form: sorted context keys, names in
     * file order, sorted union of the row fields. */
    json_object *got = json_object_new_array(), *fields = json_object_new_object();
    json_object *ctx = field(root, "context"), *benches = field(root, "benchmarks");
    json_object *ckeys = json_object_new_array();
    json_object_object_foreach(ctx, ck, cv) {
        (void)cv;
        if (keep_context_key(ck)) json_object_array_add(ckeys, json_object_new_string(ck));
    }
    json_object_array_sort(ckeys, json_strcmp);
    for (size_t i = 0; i < json_object_array_length(ckeys); i++) {
        char line[512];
        snprintf(line, sizeof line, "context %s",
                 json_object_get_string(json_object_array_get_idx(ckeys, i)));
        json_object_array_add(got, json_object_new_string(line));
    }
    /* An auto row whose choice equals an explicit row is not measured twice
     * (context mha_auto_rows: "auto/<shape> = <row>; ..."): it counts as a
     * name of the file. Names are compared as a sorted set: the order (and
     * the repetition count) of an interleaved sweep is not part of the schema. */
    const char *aliases = json_object_get_string(field(ctx, "mha_auto_rows"));
    json_object *names = json_object_new_object();
    for (size_t i = 0; i < json_object_array_length(benches); i++) {
        json_object *b = json_object_array_get_idx(benches, i);
        const char *bname = json_object_get_string(field(b, "name"));
        char line[512];
        snprintf(line, sizeof line, "name %s", bname);
        json_object_object_add(names, line, NULL);
        char target[400];
        snprintf(target, sizeof target, " = %s", bname);
        for (const char *a = aliases; a && (a = strstr(a, target)); a += strlen(target)) {
            const char *end = a + strlen(target);
            if (*end != '\0' && *end != ';') continue; /* a longer name */
            const char *start = a;
            while (start > aliases &&
                   !(start[-1] == ' ' && start - 2 >= aliases && start[-2] == ';'))
                start--;
            snprintf(line, sizeof line, "name %.*s", (int)(a - start), start);
            json_object_object_add(names, line, NULL);
        }
        json_object_object_foreach(b, bk, bv) {
            (void)bv;
            json_object_object_add(fields, bk, NULL);
        }
    }
    json_object *nkeys = json_object_new_array();
    json_object_object_foreach(names, nk, nv) {
        (void)nv;
        json_object_array_add(nkeys, json_object_new_string(nk));
    }
    json_object_array_sort(nkeys, json_strcmp);
    for (size_t i = 0; i < json_object_array_length(nkeys); i++)
        json_object_array_add(got, json_object_new_string(json_object_get_string(
                                       json_object_array_get_idx(nkeys, i))));
    json_object_put(nkeys);
    json_object_put(names);
    json_object *fkeys = json_object_new_array();
    json_object_object_foreach(fields, fk, fv) {
        (void)fv;
        json_object_array_add(fkeys, json_object_new_string(fk));
    }
    json_object_array_sort(fkeys, json_strcmp);
    for (size_t i = 0; i < json_object_array_length(fkeys); i++) {
        char line[512];
        snprintf(line, sizeof line, "field %s",
                 json_object_get_string(json_object_array_get_idx(fkeys, i)));
        json_object_array_add(got, json_object_new_string(line));
    }

    FILE *f = fopen(listp, "r");
    assert_non_null(f);
    char line[512];
    size_t n = 0;
    int bad = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        if (line[0] == '#' || line[0] == '\0') continue;
        const char *g = n < json_object_array_length(got)
                            ? json_object_get_string(json_object_array_get_idx(got, n))
                            : "(nothing)";
        if (strcmp(g, line) != 0 && bad++ < 5)
            print_error("entry %zu: the sweep wrote '%s', the list says '%s'\n", n + 1, g, line);
        n++;
    }
    fclose(f);
    if (n != json_object_array_length(got))
        print_error("the sweep wrote %zu entries, the list has %zu\n",
                    json_object_array_length(got), n);
    assert_int_equal(bad, 0);
    assert_int_equal(n, json_object_array_length(got));
    json_object_put(got);
    json_object_put(fields);
    json_object_put(ckeys);
    json_object_put(fkeys);
    json_object_put(root);
}

static void expect_usage_error(const char *const *args, const char *mention) {
    const int rc = run_bench(args);
    if (rc != 2 || !strstr(g_err, mention))
        print_error("args '%s %s': exit %d (want 2), stderr '%s' (want it to mention '%s')\n",
                    args[1], args[2] ? args[2] : "", rc, g_err, mention);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(g_err, mention));
}

static void test_bad_options(void **state) {
    (void)state;
    REQUIRE_BENCH();
    char out[512];
    snprintf(out, sizeof out, "%s/never.json", g_tmp);
    const char *a1[] = {"sweep", "--preset", "bogus", "--out", out, NULL};
    expect_usage_error(a1, "bogus");
    const char *a2[] = {"sweep", "--seq", "0", "--out", out, NULL};
    expect_usage_error(a2, "--seq");
    const char *a3[] = {"sweep", "--threads", "-1", "--out", out, NULL};
    expect_usage_error(a3, "--threads");
    const char *a4[] = {"sweep", "--kernels", "nosuch", "--out", out, NULL};
    expect_usage_error(a4, "nosuch");
    const char *a5[] = {"sweep", "--causal", "2", "--out", out, NULL};
    expect_usage_error(a5, "--causal");
    const char *a6[] = {"sweep", "--bind", "sockets", "--out", out, NULL};
    expect_usage_error(a6, "sockets");
    const char *a7[] = {"sweep", "--max-seconds", "abc", "--out", out, NULL};
    expect_usage_error(a7, "--max-seconds");
    const char *a8[] = {"sweep", "--frobnicate", NULL};
    expect_usage_error(a8, "--frobnicate");
    const char *a9[] = {"sweep", "stray", NULL};
    expect_usage_error(a9, "stray");
    struct stat sb;
    assert_int_not_equal(stat(out, &sb), 0); /* no file from a usage error */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_schema),
        cmocka_unit_test(test_interleaved),
        cmocka_unit_test(test_passthrough_filter),
        cmocka_unit_test(test_passthrough_repetitions),
        cmocka_unit_test(test_keys_unchanged),
        cmocka_unit_test(test_bad_options),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
