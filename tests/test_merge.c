/* test_merge.c - fleet mode: `sweep --shard I/N` and `mhabench merge`.
 * Real seconds-long sweeps: the shards of a list are disjoint and their
 * merge has exactly the unsharded sweep's benchmark names and row keys; and
 * on files edited from those: a missing shard, a doubled one, shards of
 * different lists, different builds and two machines are refused or split
 * as documented. The partition itself on synthetic costs. */
#include <setjmp.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <json-c/json.h>

#include "shard.h"
#include "testutil.h"

static const char *g_bench;
static char g_tmp[256];
static char g_out[1 << 16], g_err[1 << 14];

static int setup(void **state) {
    (void)state;
    g_bench = getenv("MHABENCH");
    if (g_bench && !*g_bench) g_bench = NULL;
    return tu_mkdtemp(g_tmp, sizeof g_tmp, "test_merge");
}

static int teardown(void **state) {
    (void)state;
    tu_rm_tree(g_tmp);
    return 0;
}

static const char *tmp_path(const char *name) {
    static char paths[16][512];
    static int next;
    char *p = paths[next++ % 16];
    snprintf(p, sizeof paths[0], "%s/%s", g_tmp, name);
    return p;
}

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

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The sorted distinct iteration-row names of a result file, joined by '\n', and the
 * sorted set of keys its rows carry. */
static void names_and_keys(const char *path, char *names, size_t nlen, char *keys, size_t klen) {
    json_object *root = json_object_from_file(path), *rows;
    if (!root) fail_msg("%s does not parse", path);
    assert_true(json_object_object_get_ex(root, "benchmarks", &rows));
    const size_t n = json_object_array_length(rows);
    char **nm = calloc(n + 1, sizeof *nm), **ks = calloc(64, sizeof *ks);
    size_t cnt = 0, nk = 0;
    for (size_t i = 0; i < n; i++) {
        json_object *r = json_object_array_get_idx(rows, i), *t;
        if (json_object_object_get_ex(r, "run_type", &t) &&
            strcmp(json_object_get_string(t), "iteration") == 0) {
            json_object *nv;
            assert_true(json_object_object_get_ex(r, "name", &nv));
            nm[cnt++] = strdup(json_object_get_string(nv));
        }
        json_object_object_foreach(r, key, val) {
            (void)val;
            int seen = 0;
            for (size_t j = 0; j < nk; j++) seen |= !strcmp(ks[j], key);
            if (!seen && nk < 64) ks[nk++] = strdup(key);
        }
    }
    qsort(nm, cnt, sizeof *nm, cmp_str);
    qsort(ks, nk, sizeof *ks, cmp_str);
    names[0] = keys[0] = '\0';
    for (size_t i = 0; i < cnt; i++) { /* distinct names: retakes repeat a name */
        if (i == 0 || strcmp(nm[i], nm[i - 1]) != 0) {
            strncat(names, nm[i], nlen - strlen(names) - 2);
            strcat(names, "\n");
        }
    }
    for (size_t i = 0; i < cnt; i++) free(nm[i]);
    for (size_t i = 0; i < nk; i++) {
        strncat(keys, ks[i], klen - strlen(keys) - 2);
        strcat(keys, " ");
        free(ks[i]);
    }
    free(nm);
    free(ks);
    json_object_put(root);
}

/* Rewrites one context key of a result file (value NULL: removes it). */
static void set_context(const char *in, const char *out, const char *key, const char *value) {
    json_object *root = json_object_from_file(in), *ctx;
    assert_non_null(root);
    assert_true(json_object_object_get_ex(root, "context", &ctx));
    if (value)
        json_object_object_add(ctx, key, json_object_new_string(value));
    else
        json_object_object_del(ctx, key);
    assert_int_equal(json_object_to_file(out, root), 0);
    json_object_put(root);
}

#define SWEEP_ARGS                                                                                 \
    "--seq", "64,97", "--heads", "2", "--head-dim", "32", "--causal", "0,1", "--threads", "1",     \
        "--min-time", "0.002", "--kernels", "naive,flash.scalar,decode.scalar", "--max-seconds",   \
        "5"

static void test_shards_cover_the_sweep(void **state) {
    (void)state;
    if (!g_bench) skip();
    const char *all = tmp_path("all.json"), *s1 = tmp_path("s1.json"), *s2 = tmp_path("s2.json"),
               *s3 = tmp_path("s3.json"), *m = tmp_path("merged.json");
    EXPECT_EXIT(0, run_bench("sweep", SWEEP_ARGS, "--out", all, NULL));
    EXPECT_EXIT(0, run_bench("sweep", SWEEP_ARGS, "--shard", "1/3", "--out", s1, NULL));
    EXPECT_IN(g_out, "shard 1/3:");
    EXPECT_EXIT(0, run_bench("sweep", SWEEP_ARGS, "--shard", "2/3", "--out", s2, NULL));
    EXPECT_EXIT(0, run_bench("sweep", SWEEP_ARGS, "--shard", "3/3", "--out", s3, NULL));
    /* given in any order */
    EXPECT_EXIT(0, run_bench("merge", s3, s1, s2, "--out", m, NULL));
    EXPECT_IN(g_out, "of 3");
    static char na[1 << 15], ka[2048], nm[1 << 15], km[2048], n1[1 << 15], n2[1 << 15], n3[1 << 15],
        kx[2048];
    names_and_keys(all, na, sizeof na, ka, sizeof ka);
    names_and_keys(m, nm, sizeof nm, km, sizeof km);
    assert_string_equal(na, nm);
    assert_string_equal(ka, km);
    /* disjoint and none empty */
    names_and_keys(s1, n1, sizeof n1, kx, sizeof kx);
    names_and_keys(s2, n2, sizeof n2, kx, sizeof kx);
    names_and_keys(s3, n3, sizeof n3, kx, sizeof kx);
    assert_true(n1[0] && n2[0] && n3[0]);
    assert_int_equal(strlen(n1) + strlen(n2) + strlen(n3), strlen(na));
    for (char *line = strtok(n1, "\n"); line; line = strtok(NULL, "\n")) {
        char pat[512];
        snprintf(pat, sizeof pat, "%s\n", line);
        assert_null(strstr(n2, pat));
        assert_null(strstr(n3, pat));
    }

    /* each shard records the skips of the whole list: counted once */
    const char *k1 = tmp_path("k1.json"), *k2 = tmp_path("k2.json"), *k3 = tmp_path("k3.json");
    set_context(s1, k1, "mha_skipped", "4");
    set_context(s2, k2, "mha_skipped", "4");
    set_context(s3, k3, "mha_skipped", "4");
    EXPECT_EXIT(0, run_bench("merge", k1, k2, k3, "--out", m, NULL));
    json_object *mr = json_object_from_file(m), *mc, *ms;
    assert_non_null(mr);
    assert_true(json_object_object_get_ex(mr, "context", &mc));
    assert_true(json_object_object_get_ex(mc, "mha_skipped", &ms));
    assert_string_equal(json_object_get_string(ms), "4");
    json_object_put(mr);
    /* a missing shard: refused, named by index; written with --allow-partial */
    EXPECT_EXIT(2, run_bench("merge", s1, s3, "--out", m, NULL));
    EXPECT_IN(g_err, "shards missing: 2 of 3");
    EXPECT_EXIT(0, run_bench("merge", s1, s3, "--allow-partial", "--out", m, NULL));
    EXPECT_IN(g_out, "2 of 3 (partial)");
    /* a doubled shard */
    EXPECT_EXIT(2, run_bench("merge", s1, s2, s2, s3, "--out", m, NULL));
    EXPECT_IN(g_err, "shards given more than once: 2 (2 files)");
    /* the unsharded file and a shard hold the same benchmarks */
    EXPECT_EXIT(2, run_bench("merge", all, s1, s2, s3, "--out", m, NULL));
    EXPECT_IN(g_err, "is in both");
    /* a file pooled with itself: the same run, refused (test_same_run_twice) */
    EXPECT_EXIT(2, run_bench("merge", all, all, "--duplicates", "pool", "--out", m, NULL));
    EXPECT_IN(g_err, "the same run");
    /* another build */
    const char *other = tmp_path("other_build.json");
    set_context(s2, other, "mha_git_revision", "0123abc");
    EXPECT_EXIT(2, run_bench("merge", s1, other, s3, "--out", m, NULL));
    EXPECT_IN(g_err, "different builds");
    EXPECT_IN(g_err, "0123abc");
    EXPECT_EXIT(0, run_bench("merge", s1, other, s3, "--force", "--out", m, NULL));
    /* shards of another list */
    const char *list = tmp_path("other_list.json");
    set_context(s2, list, "mha_sweep_list", "ffffffffffffffff");
    EXPECT_EXIT(2, run_bench("merge", s1, list, s3, "--out", m, NULL));
    EXPECT_IN(g_err, "shards missing");
    /* another machine: --out refuses, --out-dir writes one file each */
    const char *cpu = tmp_path("other_cpu.json");
    set_context(all, cpu, "mha_cpu_key", "intel-xeon-f6m207-avx512");
    EXPECT_EXIT(2, run_bench("merge", all, cpu, "--out", m, NULL));
    EXPECT_IN(g_err, "2 machine fingerprints");
    EXPECT_EXIT(0, run_bench("merge", all, cpu, "--out-dir", tmp_path("fleet"), NULL));
    EXPECT_IN(g_out, "intel-xeon-f6m207-avx512");
    /* not a result file */
    const char *bad = tmp_path("bad.json");
    FILE *f = fopen(bad, "w");
    fputs("{\"benchmarks\": [", f);
    fclose(f);
    EXPECT_EXIT(2, run_bench("merge", bad, "--out", m, NULL));
    EXPECT_IN(g_err, "not valid JSON");
    EXPECT_EXIT(2, run_bench("sweep", SWEEP_ARGS, "--shard", "4/3", "--out", s1, NULL));
    EXPECT_IN(g_err, "--shard '4/3'");
}

/* A list of one benchmark in 3 shards: shards 2 and 3 are empty. Each is
 * still a shard (its file, no rows, exit 0), and the three merge into the
 * unsharded sweep's one benchmark. */
#define ONE_ARGS                                                                                   \
    "--seq", "64", "--heads", "2", "--head-dim", "32", "--causal", "0", "--threads", "1",          \
        "--min-time", "0.002", "--kernels", "naive", "--max-seconds", "5"

static void test_empty_shard(void **state) {
    (void)state;
    if (!g_bench) skip();
    const char *s[3] = {tmp_path("e1.json"), tmp_path("e2.json"), tmp_path("e3.json")},
               *m = tmp_path("e-merged.json"), *all = tmp_path("e-all.json");
    EXPECT_EXIT(0, run_bench("sweep", ONE_ARGS, "--out", all, NULL));
    for (int i = 0; i < 3; i++) {
        char spec[8];
        snprintf(spec, sizeof spec, "%d/3", i + 1);
        EXPECT_EXIT(0, run_bench("sweep", ONE_ARGS, "--shard", spec, "--out", s[i], NULL));
    }
    EXPECT_IN(g_out, "shard 3/3: 0 of 1 benchmarks");
    for (int i = 1; i < 3; i++) { /* the empty ones: a context, no rows */
        json_object *root = json_object_from_file(s[i]), *rows, *ctx, *v;
        if (!root) fail_msg("%s does not parse", s[i]);
        assert_true(json_object_object_get_ex(root, "benchmarks", &rows));
        assert_int_equal(json_object_array_length(rows), 0);
        assert_true(json_object_object_get_ex(root, "context", &ctx));
        assert_true(json_object_object_get_ex(ctx, "mha_shard", &v));
        assert_string_equal(json_object_get_string(v), i == 1 ? "2/3" : "3/3");
        assert_true(json_object_object_get_ex(ctx, "mha_shard_benchmarks", &v));
        assert_string_equal(json_object_get_string(v), "0");
        assert_true(json_object_object_get_ex(ctx, "mha_cpu_key", &v));
        assert_true(json_object_object_get_ex(ctx, "host_name", &v));
        json_object_put(root);
    }
    /* an empty shard first: the merged context is still a whole one */
    EXPECT_EXIT(0, run_bench("merge", s[2], s[0], s[1], "--out", m, NULL));
    EXPECT_IN(g_out, "shards of list");
    EXPECT_IN(g_out, "3 of 3");
    static char na[4096], ka[2048], nm[4096], km[2048];
    names_and_keys(all, na, sizeof na, ka, sizeof ka);
    names_and_keys(m, nm, sizeof nm, km, sizeof km);
    assert_true(na[0] != '\0');
    assert_string_equal(na, nm);
    /* the empty shards alone: missing shard 1 is still missing */
    EXPECT_EXIT(2, run_bench("merge", s[1], s[2], "--out", m, NULL));
    EXPECT_IN(g_err, "shards missing: 1 of 3");
}

/* A small result file written by hand: the fingerprint keys merge needs,
 * `reps` repetitions of each name with times base + 0.25 * rep (+ extra),
 * and an optional extra field on every row. */
static void write_file(const char *path, const char *shard, const char *const *names, int nnames,
                       int reps, double base, const char *field, double value) {
    json_object *root = json_object_new_object(), *ctx = json_object_new_object(),
                *rows = json_object_new_array();
    json_object_object_add(ctx, "date", json_object_new_string("2026-12-01T10:00:00+00:00"));
    json_object_object_add(ctx, "host_name", json_object_new_string("h1"));
    json_object_object_add(ctx, "mha_cpu_key", json_object_new_string("amd-epyc-f26m2-avx512"));
    json_object_object_add(ctx, "mha_isa_active", json_object_new_string("avx512"));
    json_object_object_add(ctx, "mha_cores", json_object_new_string("2"));
    json_object_object_add(ctx, "mha_git_revision", json_object_new_string("abc1234"));
    if (shard) {
        json_object_object_add(ctx, "mha_shard", json_object_new_string(shard));
        json_object_object_add(ctx, "mha_sweep_list", json_object_new_string("00000000000000aa"));
    }
    for (int k = 0; k < nnames; k++)
        for (int r = 0; r < reps; r++) {
            json_object *row = json_object_new_object();
            json_object_object_add(row, "name", json_object_new_string(names[k]));
            json_object_object_add(row, "run_name", json_object_new_string(names[k]));
            json_object_object_add(row, "run_type", json_object_new_string("iteration"));
            json_object_object_add(row, "repetitions", json_object_new_int(reps));
            json_object_object_add(row, "repetition_index", json_object_new_int(r));
            json_object_object_add(row, "iterations", json_object_new_int(100));
            json_object_object_add(row, "real_time", json_object_new_double(base + 0.25 * r));
            json_object_object_add(row, "cpu_time", json_object_new_double(base + 0.25 * r));
            json_object_object_add(row, "time_unit", json_object_new_string("us"));
            if (field) json_object_object_add(row, field, json_object_new_double(value));
            json_object_array_add(rows, row);
        }
    json_object_object_add(root, "context", ctx);
    json_object_object_add(root, "benchmarks", rows);
    assert_int_equal(json_object_to_file_ext(path, root, JSON_C_TO_STRING_PRETTY), 0);
    json_object_put(root);
}

/* json-c writes a NaN double as bare NaN, which no strict parser takes:
 * merge writes null for every non-finite number, and a NaN time is a bad
 * row, named. */
static void test_nonfinite(void **state) {
    (void)state;
    if (!g_bench) skip();
    const char *a = tmp_path("nan-field.json"), *b = tmp_path("nan-time.json"),
               *c = tmp_path("inf-cpu.json"), *m = tmp_path("nan-merged.json");
    const char *names[] = {"flash.scalar/B:1/H:2/N:64/d:32/causal:0/threads:1"};
    write_file(a, NULL, names, 1, 3, 10.0, "block_kv", NAN);
    EXPECT_EXIT(0, run_bench("merge", a, "--out", m, NULL));
    static char text[1 << 14];
    tu_slurp(m, text, sizeof text);
    assert_null(strstr(text, "NaN"));
    assert_non_null(strstr(text, "\"block_kv\":null"));
    /* a row whose time is NaN: exit 2 naming the file, the row and the field */
    write_file(b, NULL, names, 1, 3, 10.0, NULL, 0);
    json_object *root = json_object_from_file(b), *rows;
    assert_true(json_object_object_get_ex(root, "benchmarks", &rows));
    json_object_object_add(json_object_array_get_idx(rows, 1), "real_time",
                           json_object_new_double(NAN));
    assert_int_equal(json_object_to_file(b, root), 0);
    json_object_put(root);
    EXPECT_EXIT(2, run_bench("merge", b, "--out", m, NULL));
    EXPECT_IN(g_err, b);
    EXPECT_IN(g_err, "benchmarks[1]");
    EXPECT_IN(g_err, "real_time");
    /* an infinite cpu_time, the same */
    write_file(c, NULL, names, 1, 3, 10.0, NULL, 0);
    root = json_object_from_file(c);
    assert_true(json_object_object_get_ex(root, "benchmarks", &rows));
    json_object_object_add(json_object_array_get_idx(rows, 2), "cpu_time",
                           json_object_new_double(INFINITY));
    assert_int_equal(json_object_to_file(c, root), 0);
    json_object_put(root);
    EXPECT_EXIT(2, run_bench("merge", c, "--out", m, NULL));
    EXPECT_IN(g_err, "benchmarks[2]");
    EXPECT_IN(g_err, "cpu_time");
}

/* A shard's claimed N costs nothing per shard: N above what sweep writes
 * is refused at once, and N = 100000 with one file merges partially and
 * names the missing ones as a range. */
static void test_shard_count_bound(void **state) {
    (void)state;
    if (!g_bench) skip();
    const char *huge = tmp_path("huge-n.json"), *wide = tmp_path("wide-n.json"),
               *m = tmp_path("n-merged.json");
    const char *names[] = {"naive/B:1/H:2/N:64/d:32/causal:0/threads:1"};
    write_file(huge, "1/2147483647", names, 1, 2, 5.0, NULL, 0);
    EXPECT_EXIT(2, run_bench("merge", huge, "--allow-partial", "--out", m, NULL));
    EXPECT_IN(g_err, "1/2147483647");
    EXPECT_IN(g_err, "at most 100000");
    write_file(wide, "1/100000", names, 1, 2, 5.0, NULL, 0);
    EXPECT_EXIT(0, run_bench("merge", wide, "--allow-partial", "--out", m, NULL));
    EXPECT_IN(g_err, "shards missing: 2-100000 of 100000");
    EXPECT_IN(g_out, "1 of 100000 (partial)");
}

/* Pooling a run with itself would double its repetitions: the same file
 * twice, a copy of it, or a file holding another's rows are refused with
 * both files named; two runs are pooled. */
static void test_same_run_twice(void **state) {
    (void)state;
    if (!g_bench) skip();
    const char *x = tmp_path("x.json"), *copy = tmp_path("x-copy.json"),
               *more = tmp_path("x-more.json"), *y = tmp_path("y.json"),
               *m = tmp_path("dup-merged.json");
    const char *one[] = {"flash.scalar/B:1/H:2/N:64/d:32/causal:0/threads:1"};
    const char *two[] = {"flash.scalar/B:1/H:2/N:64/d:32/causal:0/threads:1",
                         "naive/B:1/H:2/N:64/d:32/causal:0/threads:1"};
    write_file(x, NULL, one, 1, 5, 10.0, NULL, 0);
    write_file(more, NULL, two, 2, 5, 10.0, NULL, 0); /* x's rows and more */
    write_file(y, NULL, one, 1, 5, 11.0, NULL, 0);    /* another run */
    set_context(x, copy, "mha_git_revision", "abc1234");
    EXPECT_EXIT(2, run_bench("merge", x, x, "--duplicates", "pool", "--out", m, NULL));
    EXPECT_IN(g_err, "the same run");
    EXPECT_EXIT(2, run_bench("merge", x, copy, "--duplicates", "pool", "--out", m, NULL));
    EXPECT_IN(g_err, x);
    EXPECT_IN(g_err, copy);
    EXPECT_EXIT(2, run_bench("merge", x, copy, "--duplicates", "first", "--out", m, NULL));
    EXPECT_IN(g_err, "the same run");
    EXPECT_EXIT(2, run_bench("merge", x, more, "--duplicates", "pool", "--out", m, NULL));
    EXPECT_IN(g_err, "the same measurement");
    EXPECT_IN(g_err, more);
    /* two runs: 5 + 5 repetitions */
    EXPECT_EXIT(0, run_bench("merge", x, y, "--duplicates", "pool", "--out", m, NULL));
    EXPECT_IN(g_out, "pooled");
    json_object *root = json_object_from_file(m), *rows;
    assert_non_null(root);
    assert_true(json_object_object_get_ex(root, "benchmarks", &rows));
    assert_int_equal(json_object_array_length(rows), 10);
    json_object_put(root);
}

/* The partition on synthetic costs: deterministic, every item once, the
 * largest part within the mean plus the largest item. */
static void test_partition(void **state) {
    (void)state;
    enum { N = 200, S = 7 };
    double cost[N];
    char buf[N][16];
    const char *names[N];
    uint64_t x = 12345;
    double total = 0, biggest = 0;
    for (int i = 0; i < N; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        cost[i] = (double)(x >> 40) / (double)(1 << 24) * (i % 10 == 0 ? 50 : 1);
        snprintf(buf[i], sizeof buf[i], "b%03d", i);
        names[i] = buf[i];
        total += cost[i];
        biggest = cost[i] > biggest ? cost[i] : biggest;
    }
    int a[N], b[N];
    shard_partition(cost, names, N, S, a);
    shard_partition(cost, names, N, S, b);
    double load[S + 1] = {0};
    for (int i = 0; i < N; i++) {
        assert_int_equal(a[i], b[i]);
        assert_true(a[i] >= 1 && a[i] <= S);
        load[a[i]] += cost[i];
    }
    for (int s = 1; s <= S; s++) assert_true(load[s] <= total / S + biggest + 1e-9);
    /* the list hash does not depend on order */
    const char *rev[N];
    for (int i = 0; i < N; i++) rev[i] = names[N - 1 - i];
    assert_true(shard_list_hash(names, N) == shard_list_hash(rev, N));
    assert_true(shard_list_hash(names, N) != shard_list_hash(names, N - 1));
    shard_spec sp;
    assert_int_equal(shard_parse("2/8", &sp), 0);
    assert_int_equal(sp.index, 2);
    assert_int_equal(sp.count, 8);
    assert_int_equal(shard_parse("0/8", &sp), -1);
    assert_int_equal(shard_parse("3", &sp), -1);
    assert_int_equal(shard_parse("1/2x", &sp), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_shards_cover_the_sweep, setup, teardown),
        cmocka_unit_test_setup_teardown(test_empty_shard, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nonfinite, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shard_count_bound, setup, teardown),
        cmocka_unit_test_setup_teardown(test_same_run_twice, setup, teardown),
        cmocka_unit_test(test_partition),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
