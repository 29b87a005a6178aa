/* test_sweep_variants.c - the attention variants on the timing side (issue
 * 30): the measurement core's variant shapes (sinks seeded in the pool, V
 * and O head_dim_v wide, the oracle's answer), `mhabench sweep --window
 * --softcap --sinks --head-dim-v` (rows named and fielded by their variant,
 * only for kernels that take them, GFLOP/s of the visible pairs), its bad
 * values, the llm preset's plan, and `mhabench profile` with the same
 * flags. The mhabench runs are child processes ($MHABENCH). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "meas_core.h"
#include "testutil.h"

static const char *g_bench; /* $MHABENCH */
static char g_tmp[256];
static char g_out[1 << 17], g_err[8192]; /* stdout and stderr of the last run */

static int setup(void **state) {
    (void)state;
    g_bench = getenv("MHABENCH");
    if (g_bench && !*g_bench) g_bench = NULL;
    return tu_mkdtemp(g_tmp, sizeof g_tmp, "test_sweep_variants");
}

static int teardown(void **state) {
    (void)state;
    tu_rm_tree(g_tmp);
    return 0;
}

#define REQUIRE_BENCH()                                                                            \
    do {                                                                                           \
        if (!g_bench) {                                                                            \
            print_message("MHABENCH is not set: skipping (run through meson test)\n");             \
            skip();                                                                                \
        }                                                                                          \
    } while (0)

static int run_bench(const char *const *args) {
    return tu_run(g_bench, args, g_tmp, g_out, sizeof g_out, g_err, sizeof g_err);
}

/* ---- the measurement core ------------------------------------------------------------ */

/* A shape with every variant: the pool holds one seeded sink logit per
 * head, V and O are d_v wide, and the prepared call gives the oracle's
 * answer (without the sinks in the call it would be MHA_EINVAL; with V's
 * view d wide, garbage). */
static void test_core_variant_call(void **state) {
    (void)state;
    const meas_shape s = {.b = 1,
                          .h = 2,
                          .kv = 1,
                          .nq = 5,
                          .nkv = 7,
                          .d = 8,
                          .causal = 1,
                          .window = 1,
                          .window_left = 2,
                          .softcap = 3,
                          .sinks = 1,
                          .head_dim_v = 3};
    assert_true(meas_has_variant(&s));
    /* Q 2*5*8, O 2*5*3, K 7*8, V 7*3 fp32, and two sink logits */
    assert_int_equal(meas_input_bytes(&s), 4 * (80 + 30 + 56 + 21) + 4 * 2);
    char text[96];
    assert_string_equal(meas_variant_text(&s, text, sizeof text),
                        " window=2:0 softcap=3 sinks d_v=3");
    const mha_problem p = meas_problem(&s);
    assert_true(p.window == 1 && p.window_left == 2 && p.window_right == 0 && p.softcap == 3.0f &&
                p.sinks == 1 && p.head_dim_v == 3);
    const meas_shape back = meas_shape_of(&p);
    assert_memory_equal(&back, &s, sizeof s);

    meas_pool pool;
    meas_pool_init(&pool, 7);
    meas_call c;
    const mha_options o = {.threads = 1};
    assert_null(meas_prepare(&pool, mha_kernel_find("naive"), &s, &o, &c));
    assert_int_equal(meas_run(&c), MHA_OK);
    const meas_inputs *in = meas_inputs_of(&pool, &s);
    assert_non_null(in->sinks);
    assert_true(c.x.sinks == in->sinks);
    assert_true(in->sinks[0] != in->sinks[1]);
    for (int h = 0; h < 2; h++) assert_true(in->sinks[h] >= -1 && in->sinks[h] < 1);
    double ref[2 * 5 * 3];
    assert_int_equal(mha_reference_ex(&p, &c.q, &c.k, &c.v, &c.x, ref), MHA_OK);
    const float *got = c.out.data;
    for (int i = 0; i < 2 * 5 * 3; i++) assert_true(fabs(got[i] - ref[i]) < 1e-5);
    /* a kernel that does not take them: refused before any input is made */
    assert_non_null(meas_prepare(&pool, mha_kernel_find("tiled.scalar"), &s, &o, &c));
    /* the dense shape holds no sinks */
    const meas_shape dense = {.b = 1, .h = 2, .kv = 1, .nq = 5, .nkv = 7, .d = 8, .causal = 1};
    assert_false(meas_has_variant(&dense));
    assert_null(meas_prepare(&pool, mha_kernel_find("naive"), &dense, &o, &c));
    assert_null(meas_inputs_of(&pool, &dense)->sinks);
    assert_null(c.x.sinks);
    meas_pool_release(&pool);
}

/* ---- sweep ---------------------------------------------------------------------------- */

static json_object *field(json_object *o, const char *key) {
    json_object *v = NULL;
    return json_object_object_get_ex(o, key, &v) ? v : NULL;
}

static double number(json_object *o, const char *key) {
    json_object *v = field(o, key);
    if (!v) fail_msg("no '%s' in %s", key, json_object_to_json_string(o));
    return json_object_get_double(v);
}

/* A paged shape (--page-size): two sequences of 37 keys in a pool of
 * cache blocks of 5 shuffled by the seeded table, q and out packed; the
 * prepared call is the oracle's answer on that layout, its FLOPs the dense
 * shape's, and a kernel without the paged layout is refused. */
static void test_core_paged_call(void **state) {
    (void)state;
    const meas_shape s = {
        .b = 2, .h = 4, .kv = 2, .nq = 3, .nkv = 37, .d = 8, .causal = 1, .page = 5};
    const meas_shape dense = {.b = 2, .h = 4, .kv = 2, .nq = 3, .nkv = 37, .d = 8, .causal = 1};
    assert_true(meas_has_variant(&s));
    char text[96];
    assert_string_equal(meas_variant_text(&s, text, sizeof text), " page=5");
    const mha_problem p = meas_problem(&s);
    assert_int_equal(p.layout, MHA_LAYOUT_PAGED);
    assert_true(p.block_size == 5 && p.max_blocks == 8 && p.num_blocks == 16 && p.total_q == 6);
    const meas_shape back = meas_shape_of(&p);
    assert_memory_equal(&back, &s, sizeof s);
    assert_true(meas_flops(&s) == meas_flops(&dense) && meas_flops(&s) > 0);
    /* the pools hold 8 blocks of 5 per (sequence, KV head): 40 slots, not 37 */
    assert_int_equal(meas_input_bytes(&s), 4 * (2 * 4 * 3 * 8 * 2 + 2 * 2 * 40 * 8 * 2));
    meas_pool pool;
    meas_pool_init(&pool, 7);
    const mha_options o = {.threads = 2};
    for (int i = 0; i < 2; i++) {
        meas_call c;
        const char *k = i ? "flash.scalar" : "naive";
        assert_null(meas_prepare(&pool, mha_kernel_find(k), &s, &o, &c));
        assert_int_equal(meas_run(&c), MHA_OK);
        const meas_inputs *in = meas_inputs_of(&pool, &s);
        int32_t seen[16] = {0};
        for (int j = 0; j < 16; j++) seen[in->table[j]]++;
        for (int j = 0; j < 16; j++) assert_int_equal(seen[j], 1); /* a permutation */
        int moved = 0;
        for (int j = 0; j < 16; j++) moved += in->table[j] != j;
        assert_true(moved > 0);
        double ref[6 * 4 * 8];
        assert_int_equal(mha_reference_ex(&p, &c.q, &c.k, &c.v, &c.x, ref), MHA_OK);
        const float *got = c.out.data;
        for (int j = 0; j < 6 * 4 * 8; j++)
            if (!(fabs(got[j] - ref[j]) < 1e-5))
                fail_msg("%s: element %d: %g, want %g", k, j, got[j], ref[j]);
    }
    meas_call c;
    assert_non_null(meas_prepare(&pool, mha_kernel_find("tiled.scalar"), &s, &o, &c));
    meas_pool_release(&pool);
}

/* A ragged shape (--ragged): five sequences of 16..200 keys (self-attention:
 * as many queries), packed, and the same paged in blocks of 5; each
 * prepared call is the oracle's answer on its layout, the FLOPs the sum of
 * the sequences' visible pairs. */
static void test_core_ragged_call(void **state) {
    (void)state;
    meas_shape s = {
        .b = 5, .h = 4, .kv = 2, .nq = 200, .nkv = 200, .d = 16, .causal = 1, .ragged = 16};
    int64_t tq = 0, tkv = 0, lo = 1 << 30, hi = 0;
    double flops = 0;
    for (int i = 0; i < 5; i++) {
        int64_t nq, nkv;
        meas_ragged_len(&s, i, &nq, &nkv);
        assert_true(nq == nkv && nkv >= 16 && nkv <= 200);
        tq += nq;
        tkv += nkv;
        lo = nkv < lo ? nkv : lo;
        hi = nkv > hi ? nkv : hi;
        const mha_problem one = {.batch = 1,
                                 .heads = 4,
                                 .kv_heads = 2,
                                 .seq_q = nq,
                                 .seq_kv = nkv,
                                 .head_dim = 16,
                                 .causal = 1};
        flops += mha_problem_flops(&one);
    }
    assert_true(hi > lo); /* ragged indeed */
    char text[96];
    assert_string_equal(meas_variant_text(&s, text, sizeof text), " ragged=16");
    assert_true(fabs(meas_flops(&s) - flops) < 1e-9 * flops);
    meas_pool pool;
    meas_pool_init(&pool, 7);
    const mha_options o = {.threads = 2};
    for (int paged = 0; paged < 2; paged++) {
        s.page = paged ? 5 : 0;
        const mha_problem p = meas_problem(&s);
        assert_int_equal(p.layout, paged ? MHA_LAYOUT_PAGED : MHA_LAYOUT_PACKED);
        assert_int_equal(p.total_q, tq);
        if (!paged) assert_int_equal(p.total_kv, tkv);
        for (int i = 0; i < 2; i++) {
            meas_call c;
            const char *k = i ? "flash.scalar" : "naive";
            assert_null(meas_prepare(&pool, mha_kernel_find(k), &s, &o, &c));
            assert_int_equal(meas_run(&c), MHA_OK);
            assert_true(fabs(mha_problem_flops_ex(&p, &c.x) - flops) < 1e-9 * flops);
            const size_t n = (size_t)(tq * 4 * 16);
            double *ref = malloc(n * sizeof(double));
            assert_int_equal(mha_reference_ex(&p, &c.q, &c.k, &c.v, &c.x, ref), MHA_OK);
            const float *got = c.out.data;
            for (size_t j = 0; j < n; j++)
                if (!(fabs(got[j] - ref[j]) < 1e-5))
                    fail_msg("%s %s: element %zu: %g, want %g", k, paged ? "paged" : "packed", j,
                             got[j], ref[j]);
            free(ref);
        }
    }
    meas_pool_release(&pool);
}

/* --page-size 0,16: flash.scalar makes the dense row and the paged one
 * (named /page16, with its page_size field, its GFLOP/s from the dense
 * shape's FLOPs); tiled.scalar the dense row only. */
static void test_sweep_page_rows(void **state) {
    (void)state;
    REQUIRE_BENCH();
    char out[512];
    snprintf(out, sizeof out, "%s/paged.json", g_tmp);
    const char *args[] = {"sweep",
                          "--passes",
                          "1",
                          "--repetitions",
                          "1",
                          "--kernels",
                          "flash.scalar,tiled.scalar",
                          "--seq-q",
                          "4",
                          "--seq-kv",
                          "40",
                          "--batch",
                          "2",
                          "--heads",
                          "2",
                          "--head-dim",
                          "16",
                          "--causal",
                          "1",
                          "--threads",
                          "1",
                          "--min-time",
                          "0.002",
                          "--page-size",
                          "0,16",
                          "--out",
                          out,
                          NULL};
    const int rc = run_bench(args);
    if (rc != 0) print_error("exit %d, stderr:\n%s\n", rc, g_err);
    assert_int_equal(rc, 0);
    json_object *root = json_object_from_file(out);
    assert_non_null(root);
    json_object *rows = field(root, "benchmarks");
    const meas_shape dense = {.b = 2, .h = 2, .kv = 2, .nq = 4, .nkv = 40, .d = 16, .causal = 1};
    int paged = 0, flat = 0;
    for (size_t i = 0; i < json_object_array_length(rows); i++) {
        json_object *r = json_object_array_get_idx(rows, i);
        const char *name = json_object_get_string(field(r, "name"));
        const int pg = strstr(name, "/page16/") != NULL;
        assert_true((field(r, "page_size") != NULL) == pg);
        if (pg) {
            assert_string_equal(name, "flash.scalar/B:2/H:2/KV:2/Nq:4/Nkv:40/d:16/causal:1/"
                                      "page16/threads:1");
            assert_true(number(r, "page_size") == 16);
            paged++;
        } else {
            flat++;
        }
        const double got = number(r, "GFLOPS") * number(r, "real_time");
        if (fabs(got - meas_flops(&dense)) > 1e-3 * meas_flops(&dense))
            fail_msg("%s: GFLOPS x real_time = %g FLOPs, want %g", name, got, meas_flops(&dense));
    }
    assert_int_equal(paged, 1);
    assert_int_equal(flat, 2);
    json_object_put(root);
}

/* A tiny grid with every variant axis: flash.scalar (takes them all) makes
 * a row per combination, named and fielded by its variants, its GFLOP/s
 * from the visible pairs (mha_problem_flops); tiled.scalar (takes none)
 * makes the dense row only, under the name it always had. */
static void test_sweep_variant_rows(void **state) {
    (void)state;
    REQUIRE_BENCH();
    char out[512];
    snprintf(out, sizeof out, "%s/variants.json", g_tmp);
    const char *args[] = {"sweep",
                          "--passes",
                          "1",
                          "--repetitions",
                          "1",
                          "--kernels",
                          "flash.scalar,tiled.scalar",
                          "--seq",
                          "48",
                          "--heads",
                          "2",
                          "--head-dim",
                          "16",
                          "--causal",
                          "1",
                          "--threads",
                          "1",
                          "--min-time",
                          "0.002",
                          "--window",
                          "none,8:0",
                          "--softcap",
                          "0,5",
                          "--sinks",
                          "0,1",
                          "--head-dim-v",
                          "0,8,16",
                          "--out",
                          out,
                          NULL};
    const int rc = run_bench(args);
    if (rc != 0) print_error("exit %d, stderr:\n%s\n", rc, g_err);
    assert_int_equal(rc, 0);
    json_object *root = json_object_from_file(out);
    assert_non_null(root);
    json_object *rows = field(root, "benchmarks");
    const char *base = "/B:1/H:2/KV:2/Nq:48/Nkv:48/d:16/causal:1";
    int flash = 0, tiled = 0, seen[16] = {0};
    for (size_t i = 0; i < json_object_array_length(rows); i++) {
        json_object *r = json_object_array_get_idx(rows, i);
        const char *name = json_object_get_string(field(r, "name"));
        const int is_tiled = strncmp(name, "tiled.scalar/", 13) == 0;
        assert_true(is_tiled || strncmp(name, "flash.scalar/", 13) == 0);
        const char *rest = strchr(name, '/');
        assert_int_equal(strncmp(rest, base, strlen(base)), 0);
        const char *var = rest + strlen(base); /* the variant parts, then /threads:1 */
        const int w = strstr(var, "/w8:0") != NULL, cap = strstr(var, "/cap5") != NULL,
                  sk = strstr(var, "/sinks") != NULL, dv = strstr(var, "/dv8") != NULL;
        char want[128];
        snprintf(want, sizeof want, "%s%s%s%s/threads:1", w ? "/w8:0" : "", cap ? "/cap5" : "",
                 sk ? "/sinks" : "", dv ? "/dv8" : "");
        assert_string_equal(var, want); /* in that order, nothing else (d_v 16 = d: default) */
        /* each field exactly where its variant is on */
        assert_true((field(r, "window_left") != NULL) == w);
        assert_true((field(r, "window_right") != NULL) == w);
        assert_true((field(r, "softcap") != NULL) == cap);
        assert_true((field(r, "sinks") != NULL) == sk);
        assert_true((field(r, "head_dim_v") != NULL) == dv);
        if (w) assert_true(number(r, "window_left") == 8 && number(r, "window_right") == 0);
        if (cap) assert_true(number(r, "softcap") == 5);
        if (sk) assert_true(number(r, "sinks") == 1);
        if (dv) assert_true(number(r, "head_dim_v") == 8);
        if (is_tiled) {
            tiled++;
            assert_false(w || cap || sk || dv);
            continue;
        }
        flash++;
        seen[w | cap << 1 | sk << 2 | dv << 3]++;
        /* GFLOPS x ns per call = the FLOPs of the visible pairs */
        const mha_problem p = {.batch = 1,
                               .heads = 2,
                               .kv_heads = 2,
                               .seq_q = 48,
                               .seq_kv = 48,
                               .head_dim = 16,
                               .causal = 1,
                               .window = w,
                               .window_left = w ? 8 : 0,
                               .softcap = cap ? 5.0f : 0.0f,
                               .sinks = sk,
                               .head_dim_v = dv ? 8 : 0};
        const double flops = mha_problem_flops(&p);
        assert_string_equal(json_object_get_string(field(r, "time_unit")), "ns");
        const double got = number(r, "GFLOPS") * number(r, "real_time");
        if (fabs(got - flops) > 1e-3 * flops)
            fail_msg("%s: GFLOPS x real_time = %g FLOPs, the visible pairs' are %g", name, got,
                     flops);
        assert_true(fabs(number(r, "pct_peak") - 100 * number(r, "GFLOPS") / number(r, "peak")) <
                    1e-3 * number(r, "pct_peak"));
    }
    assert_int_equal(tiled, 1);
    assert_int_equal(flash, 16);
    for (int i = 0; i < 16; i++) assert_int_equal(seen[i], 1);
    json_object_put(root);
    /* the window's FLOPs are not the causal ones: the check above can fail */
    mha_problem dense = {.batch = 1,
                         .heads = 2,
                         .kv_heads = 2,
                         .seq_q = 48,
                         .seq_kv = 48,
                         .head_dim = 16,
                         .causal = 1},
                win = dense;
    win.window = 1, win.window_left = 8;
    assert_true(mha_problem_flops(&win) < 0.5 * mha_problem_flops(&dense));
}

/* A peer runs the variants its adapter passes on and is skipped on the
 * others, saying why (the fake peer, tests/fake_peer.c, as torch: a window
 * through an explicit mask, no softcap): the dense and the windowed rows
 * run, each checked against the oracle first (a fake ignoring the window
 * would fail there), the softcapped ones are skipped. */
static void test_sweep_variant_peer_skip(void **state) {
    (void)state;
    REQUIRE_BENCH();
    const char *fake = getenv("MHA_FAKE_PEER");
    if (!fake || !*fake) {
        print_message("MHA_FAKE_PEER is not set: skipping (run through meson test)\n");
        skip();
    }
    setenv("MHA_PEERS_PYTHON", fake, 1);
    setenv("MHA_PEERS_SCRIPT", fake, 1); /* any readable file: the fake ignores it */
    char out[512];
    snprintf(out, sizeof out, "%s/peer.json", g_tmp);
    const char *args[] = {"sweep",
                          "--passes",
                          "1",
                          "--repetitions",
                          "1",
                          "--kernels",
                          "flash.scalar",
                          "--peers",
                          "torch",
                          "--seq",
                          "32",
                          "--heads",
                          "2",
                          "--head-dim",
                          "16",
                          "--causal",
                          "1",
                          "--threads",
                          "1",
                          "--min-time",
                          "0.002",
                          "--window",
                          "none,8:0",
                          "--softcap",
                          "0,50",
                          "--verbose",
                          "--out",
                          out,
                          NULL};
    const int rc = run_bench(args);
    unsetenv("MHA_PEERS_PYTHON");
    unsetenv("MHA_PEERS_SCRIPT");
    if (rc != 0) print_error("exit %d, stderr:\n%s\n", rc, g_err);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(g_out, "peer.torch on B=1 H=2 KV=2 Nq=32 Nkv=32 d=16 causal=1 "
                                  "softcap=50 (its adapter takes no logit softcap)"));
    assert_non_null(strstr(g_out, "peer.torch on B=1 H=2 KV=2 Nq=32 Nkv=32 d=16 causal=1 "
                                  "window=8:0 softcap=50 (its adapter takes no logit softcap)"));
    assert_null(strstr(g_out, "takes no sliding window"));
    json_object *root = json_object_from_file(out);
    assert_non_null(root);
    json_object *rows = field(root, "benchmarks");
    int peer_rows = 0, windowed = 0;
    for (size_t i = 0; i < json_object_array_length(rows); i++) {
        const char *name =
            json_object_get_string(field(json_object_array_get_idx(rows, i), "name"));
        if (strncmp(name, "peer.torch/", 11) != 0) continue;
        peer_rows++;
        assert_null(strstr(name, "/cap50"));
        windowed += strstr(name, "/w8:0") != NULL;
        assert_false(
            json_object_get_boolean(field(json_object_array_get_idx(rows, i), "error_occurred")));
    }
    assert_int_equal(peer_rows, 2);
    assert_int_equal(windowed, 1);
    json_object_put(root);
}
static void expect_usage(const char *const *args, const char *mention) {
    const int rc = run_bench(args);
    if (rc != 2 || !strstr(g_err, mention))
        fail_msg("%s %s %s: exit %d (want 2), stderr '%s' (want '%s')", args[0], args[1], args[2],
                 rc, g_err, mention);
}

/* Each malformed variant value is exit 2 naming it, and nothing is written. */
static void test_sweep_variant_bad_values(void **state) {
    (void)state;
    REQUIRE_BENCH();
    char out[512];
    snprintf(out, sizeof out, "%s/never.json", g_tmp);
    const char *a1[] = {"sweep", "--window", "5", "--out", out, NULL};
    expect_usage(a1, "sweep: --window '5': expected L:R");
    const char *a2[] = {"sweep", "--window", "none,-2:0", "--out", out, NULL};
    expect_usage(a2, "--window '-2:0': L = -2 is below -1");
    const char *a3[] = {"sweep", "--window", "4:0:1", "--out", out, NULL};
    expect_usage(a3, "--window '4:0:1'");
    const char *a4[] = {"sweep", "--softcap", "-1", "--out", out, NULL};
    expect_usage(a4, "sweep: --softcap: -1 is out of range");
    const char *a5[] = {"sweep", "--softcap", "inf", "--out", out, NULL};
    expect_usage(a5, "--softcap: 'inf' is not a finite number");
    const char *a6[] = {"sweep", "--sinks", "2", "--out", out, NULL};
    expect_usage(a6, "sweep: --sinks: 2 is out of range [0, 1]");
    const char *a7[] = {"sweep", "--head-dim-v", "-3", "--out", out, NULL};
    expect_usage(a7, "--head-dim-v: -3 is out of range");
    const char *a8[] = {"sweep", "--page-size", "-16", "--out", out, NULL};
    expect_usage(a8, "--page-size: -16 is out of range");
    const char *a9[] = {"sweep", "--ragged", "-1", "--out", out, NULL};
    expect_usage(a9, "--ragged: -1 is out of range");
    struct stat sb;
    assert_int_not_equal(stat(out, &sb), 0);
}

/* The llm preset plans its rows (listed, not run): the seven shapes with
 * their variants' and layouts' names, in fp32 and bf16, at 1 thread and
 * all; a kernel that takes no variant or layout (tiled.scalar) only on the
 * dense ones. */
static void test_llm_plan(void **state) {
    (void)state;
    REQUIRE_BENCH();
    char out[512];
    snprintf(out, sizeof out, "%s/llm.json", g_tmp);
    const char *args[] = {"sweep",
                          "--preset",
                          "llm",
                          "--kernels",
                          "flash.scalar,tiled.scalar,decode.scalar",
                          "--threads",
                          "1",
                          "--max-seconds",
                          "86400", /* planned, not skipped: nothing runs */
                          "--out",
                          out,
                          "--",
                          "--benchmark_list_tests=true",
                          NULL};
    const int rc = run_bench(args);
    if (rc != 0) print_error("exit %d, stderr:\n%s\n", rc, g_err);
    assert_int_equal(rc, 0);
    static const char *const want[] = {
        "flash.scalar/B:1/H:32/KV:8/Nq:2048/Nkv:2048/d:128/causal:1/threads:1",
        "decode.scalar/B:1/H:32/KV:8/Nq:1/Nkv:8192/d:128/causal:0/threads:1",
        "flash.scalar/B:1/H:32/KV:8/Nq:8192/Nkv:8192/d:128/causal:1/w4096:0/threads:1",
        "flash.scalar/B:1/H:8/KV:4/Nq:8192/Nkv:8192/d:256/causal:1/w4096:0/cap50/threads:1",
        "flash.scalar/B:1/H:64/KV:8/Nq:4096/Nkv:4096/d:64/causal:1/w128:0/sinks/threads:1",
        "flash.scalar/B:1/H:16/KV:16/Nq:2048/Nkv:2048/d:192/causal:1/dv128/threads:1",
        "decode.scalar/B:1/H:16/KV:16/Nq:2048/Nkv:2048/d:192/causal:1/dtype:bf16/dv128/threads:1",
        "tiled.scalar/B:1/H:32/KV:8/Nq:2048/Nkv:2048/d:128/causal:1/threads:1",
        "decode.scalar/B:16/H:32/KV:8/Nq:1/Nkv:32768/d:128/causal:0/ragged1024/page16/threads:1",
        "decode.scalar/B:16/H:32/KV:8/Nq:1/Nkv:32768/d:128/causal:0/dtype:bf16/ragged1024/page16/"
        "threads:1",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!strstr(g_out, want[i])) fail_msg("the llm plan lacks %s", want[i]);
    assert_null(strstr(g_out, "tiled.scalar/B:1/H:32/KV:8/Nq:8192")); /* no variant rows */
    assert_null(strstr(g_out, "tiled.scalar/B:1/H:16/KV:16/Nq:2048/Nkv:2048/d:192"));
    assert_null(strstr(g_out, "tiled.scalar/B:16/H:32/KV:8/Nq:1")); /* no paged layout */
    assert_non_null(strstr(g_out, "preset llm"));
}

/* ---- profile --------------------------------------------------------------------------- */

/* One variant shape timed by hand: the line names its variants; a kernel
 * that does not take them and malformed values are exit 2 naming them. */
static void test_profile_variants(void **state) {
    (void)state;
    REQUIRE_BENCH();
    const char *ok[] = {"profile",      "--kernel", "flash.scalar", "--heads", "2",
                        "--seq",        "64",       "--head-dim",   "16",      "--causal",
                        "--window",     "8,0",      "--softcap",    "5",       "--sinks",
                        "--head-dim-v", "8",        "--seconds",    "0.02",    NULL};
    const int rc = run_bench(ok);
    if (rc != 0) print_error("exit %d, stderr:\n%s\n", rc, g_err);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(g_out, "causal=1 window=8:0 softcap=5 sinks d_v=8 threads=1"));
    const char *tiled[] = {"profile", "--kernel", "tiled.scalar", "--seq", "16", "--head-dim",
                           "8",       "--sinks",  "--seconds",    "0.01",  NULL};
    expect_usage(tiled, "does not take attention sinks");
    const char *w[] = {"profile",    "--kernel", "naive",    "--seq", "8",
                       "--head-dim", "8",        "--window", "5",     NULL};
    expect_usage(w, "profile: --window '5': expected L,R");
    const char *c[] = {"profile",    "--kernel", "naive",     "--seq", "8",
                       "--head-dim", "8",        "--softcap", "-1",    NULL};
    expect_usage(c, "--softcap: -1 is out of range");
    const char *v[] = {"profile",    "--kernel", "naive",        "--seq", "8",
                       "--head-dim", "8",        "--head-dim-v", "0",     NULL};
    expect_usage(v, "--head-dim-v: 0 is out of range");
    const char *l[] = {"profile",    "--kernel", "naive",   "--seq",   "8",
                       "--head-dim", "8",        "--layer", "--sinks", NULL};
    expect_usage(l, "--layer times the dense layer");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_core_variant_call),
        cmocka_unit_test(test_core_paged_call),
        cmocka_unit_test(test_core_ragged_call),
        cmocka_unit_test(test_sweep_page_rows),
        cmocka_unit_test(test_sweep_variant_rows),
        cmocka_unit_test(test_sweep_variant_peer_skip),
        cmocka_unit_test(test_sweep_variant_bad_values),
        cmocka_unit_test(test_llm_plan),
        cmocka_unit_test(test_profile_variants),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
