/* test_select.c - kernel selection (variants/classes.c, cpuinfo.c, cachemodel.c, tables.c,
 * select.c): the cache model's block sizes, the library's CPU key against harness/mach_info.c's,
 * and mha_select's fallback chain (MHA_KERNEL, a matching tuning table, defaults) with foreign,
 * malformed and inconsistent tables, which must fall back with a reason and never crash. Tables are
 * written to a mkdtemp directory. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mach_info.h"
#include "mha_private.h"
#include "testutil.h"

static const char *const env_names[] = {"MHA_KERNEL", "MHA_TUNING", "MHA_TUNING_DIR", "MHA_VERBOSE",
                                        "MHA_ISA"};
#define NENV (sizeof env_names / sizeof env_names[0])
static char *saved_env[NENV];
static char tmpdir[256];

static int setup(void **state) {
    (void)state;
    for (size_t i = 0; i < NENV; i++) {
        const char *e = getenv(env_names[i]);
        saved_env[i] = e ? strdup(e) : NULL;
    }
    unsetenv("MHA_KERNEL");
    unsetenv("MHA_TUNING");
    unsetenv("MHA_TUNING_DIR");
    unsetenv("MHA_VERBOSE");
    return tu_mkdtemp(tmpdir, sizeof tmpdir, "test_select");
}

static int teardown(void **state) {
    (void)state;
    for (size_t i = 0; i < NENV; i++) {
        if (saved_env[i])
            setenv(env_names[i], saved_env[i], 1);
        else
            unsetenv(env_names[i]);
        free(saved_env[i]);
        saved_env[i] = NULL;
    }
    tu_rm_tree(tmpdir);
    return 0;
}

/* Writes text to <tmpdir>/name and returns the path (static buffer). */
static const char *write_file(const char *name, const char *text) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return path;
}

static const mha_problem P1024 = {.batch = 1,
                                  .heads = 8,
                                  .kv_heads = 8,
                                  .seq_q = 1024,
                                  .seq_kv = 1024,
                                  .head_dim = 64,
                                  .causal = 0,
                                  .scale = 0.0f,
                                  .dtype = MHA_F32,
                                  .kv_dtype = MHA_F32};

/* A table for this CPU (or the given key / ISA) with one class entry. */
static const char *table_text(const char *key, const char *isa, const char *cls, const char *winner,
                              const char *runner) {
    static char buf[4096];
    char mykey[96];
    mha_cpu_key(mykey, sizeof mykey);
    snprintf(buf, sizeof buf,
             "{\"fingerprint\": {\"cpu_key\": \"%s\", \"isa_active\": \"%s\"},\n"
             " \"classes\": [{\"class\": \"%s\", \"winner\": %s, \"runner_up\": %s}]}\n",
             key ? key : mykey, isa ? isa : mha_isa_name(mha_isa_active()), cls, winner,
             runner ? runner : "null");
    return buf;
}

static const char *class_of(const mha_problem *p, int threads) {
    static char name[64];
    mha_shape_class c;
    mha_class_of(p, threads, &c);
    mha_class_name(&c, name, sizeof name);
    return name;
}

static void select_ok(const mha_problem *p, int threads, mha_selection *s) {
    const mha_options o = {.threads = threads};
    assert_int_equal(mha_select(p, &o, s), MHA_OK);
    assert_non_null(s->kernel);
    assert_true(s->options.block_q >= 1 && s->options.block_q <= 4096);
    assert_true(s->options.block_kv >= 1 && s->options.block_kv <= 4096);
    assert_int_equal(s->options.threads, threads);
}

/* ---- cache model -------------------------------------------------------------------- */
/* The two block models, as flash and tiled declare them in kernels.inc. */
#define FLASH (MHA_KT_BLOCKS | MHA_KT_SPLIT)
#define TILED (MHA_KT_BLOCKS | MHA_KT_MATERIALISED)

static void test_default_blocks(void **state) {
    (void)state;
    static const unsigned models[] = {MHA_KT_BLOCKS | MHA_KT_SPLIT,
                                      MHA_KT_BLOCKS | MHA_KT_MATERIALISED, MHA_KT_DECODE, 0};
    static const int64_t dims[] = {1, 32, 64, 80, 96, 128, 256, 1024, 1 << 20};
    for (int isa = 0; isa < MHA_ISA_COUNT; isa++) {
        const int w = mha_tile_width((mha_isa)isa);
        assert_true(w >= 1);
        for (size_t a = 0; a < 4; a++)
            for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
                const mha_problem p = {.batch = 1,
                                       .heads = 8,
                                       .kv_heads = 8,
                                       .seq_q = 8192,
                                       .seq_kv = 8192,
                                       .head_dim = dims[i],
                                       .causal = 1,
                                       .scale = 0.0f,
                                       .dtype = MHA_F32,
                                       .kv_dtype = MHA_F32};
                int bq = -1, bk = -1;
                mha_default_blocks(&p, models[a], (mha_isa)isa, 1, &bq, &bk);
                assert_in_range(bq, w, 512);
                assert_int_equal(bq % (w >= 64 ? w / 2 : w), 0); /* whole tiles, or 1.5 */
                assert_in_range(bk, 16, 1024);
                /* the same inputs, the same answer */
                int bq2, bk2;
                mha_default_blocks(&p, models[a], (mha_isa)isa, 1, &bq2, &bk2);
                assert_int_equal(bq, bq2);
                assert_int_equal(bk, bk2);
            }
        /* Tiny problems: clamped to the problem, never 0. */
        const mha_problem tiny = {.batch = 1,
                                  .heads = 1,
                                  .kv_heads = 1,
                                  .seq_q = 1,
                                  .seq_kv = 3,
                                  .head_dim = 64,
                                  .causal = 0,
                                  .scale = 0.0f,
                                  .dtype = MHA_F32,
                                  .kv_dtype = MHA_F32};
        int bq, bk;
        mha_default_blocks(&tiny, FLASH, (mha_isa)isa, 1, &bq, &bk);
        assert_int_equal(bq, 1);
        assert_int_equal(bk, 3);
        mha_default_blocks(NULL, FLASH, (mha_isa)isa, 1, &bq, &bk);
        assert_in_range(bq, 1, 4096);
        assert_in_range(bk, 1, 4096);
    }
    /* The flash working set Q^T + S^T + O^T stays within the L2 for usual head dims. */
    mha_caches cs;
    mha_caches_get(&cs);
    const uint64_t l1 = cs.l1d, l2 = cs.l2;
    assert_in_range(l1, 16 * 1024, 256 * 1024);
    assert_in_range(l2, 128 * 1024, 8 * 1024 * 1024);
    for (int64_t d = 32; d <= 128; d *= 2) {
        const mha_problem p = {.batch = 1,
                               .heads = 8,
                               .kv_heads = 8,
                               .seq_q = 4096,
                               .seq_kv = 4096,
                               .head_dim = d,
                               .causal = 0,
                               .scale = 0.0f,
                               .dtype = MHA_F32,
                               .kv_dtype = MHA_F32};
        int bq, bk;
        mha_default_blocks(&p, FLASH, MHA_ISA_AVX512, 1, &bq, &bk);
        assert_true((uint64_t)(2 * d + bk) * (uint64_t)bq * 4 <= l2 / 2);
    }
    /* With threads and few tasks, flash's query blocks shrink (never below two
     * vectors, always whole vectors); tiled and long problems keep theirs. */
    const mha_problem vit = {.batch = 1,
                             .heads = 12,
                             .kv_heads = 12,
                             .seq_q = 197,
                             .seq_kv = 197,
                             .head_dim = 64,
                             .causal = 0,
                             .scale = 0.0f,
                             .dtype = MHA_F32,
                             .kv_dtype = MHA_F32},
                      big = {.batch = 1,
                             .heads = 32,
                             .kv_heads = 32,
                             .seq_q = 2048,
                             .seq_kv = 2048,
                             .head_dim = 64,
                             .causal = 0,
                             .scale = 0.0f,
                             .dtype = MHA_F32,
                             .kv_dtype = MHA_F32};
    int bq1, bq2, bk;
    mha_default_blocks(&vit, FLASH, MHA_ISA_AVX512, 1, &bq1, &bk);
    mha_default_blocks(&vit, FLASH, MHA_ISA_AVX512, 2, &bq2, &bk);
    assert_true(bq2 < bq1 && bq2 >= 32 && bq2 % 16 == 0);
    mha_default_blocks(&vit, TILED, MHA_ISA_AVX512, 1, &bq1, &bk);
    mha_default_blocks(&vit, TILED, MHA_ISA_AVX512, 2, &bq2, &bk);
    assert_int_equal(bq1, bq2);
    mha_default_blocks(&big, FLASH, MHA_ISA_AVX512, 1, &bq1, &bk);
    mha_default_blocks(&big, FLASH, MHA_ISA_AVX512, 2, &bq2, &bk);
    assert_int_equal(bq1, bq2);
    /* flash.avx512bf16 under a window of at most 1,024 keys at d <= 64: two
     * vectors of queries, 256 keys; a wider window, a larger head dim, the
     * fp32 level and the tiles keep the unwindowed bq (the KV block: below). */
    mha_problem plain = big;
    plain.seq_q = plain.seq_kv = 8192;
    plain.causal = 1;
    mha_problem win = plain;
    win.window = 1;
    win.window_left = 128;
    win.window_right = -1;
    int bqw, bkw, bq0, bk0;
    mha_default_blocks(&win, FLASH, MHA_ISA_AVX512BF16, 1, &bqw, &bkw);
    assert_int_equal(bqw, 32);
    assert_int_equal(bkw, 256);
    win.causal = 0;
    win.window_right = 895; /* a span of 1,024 */
    mha_default_blocks(&win, FLASH, MHA_ISA_AVX512BF16, 1, &bqw, &bkw);
    assert_int_equal(bqw, 32);
    mha_default_blocks(&plain, FLASH, MHA_ISA_AVX512BF16, 1, &bq0, &bk0);
    win.window_right = 896; /* 1,025: the unwindowed bq, and bk by the band (below) */
    mha_default_blocks(&win, FLASH, MHA_ISA_AVX512BF16, 1, &bqw, &bkw);
    assert_int_equal(bqw, bq0);
    assert_true(bkw == bk0 || bkw == (1024 + bq0 + 31) / 32 * 32);
    win.window_right = 0;
    win.head_dim = 128;
    mha_default_blocks(&win, FLASH, MHA_ISA_AVX512BF16, 1, &bqw, &bkw);
    mha_problem plain128 = plain;
    plain128.head_dim = 128;
    mha_default_blocks(&plain128, FLASH, MHA_ISA_AVX512BF16, 1, &bq0, &bk0);
    assert_int_equal(bqw, bq0);
    win.head_dim = 64;
    mha_default_blocks(&win, FLASH, MHA_ISA_AVX512, 1, &bqw, &bkw);
    mha_default_blocks(&plain, FLASH, MHA_ISA_AVX512, 1, &bq0, &bk0);
    assert_int_equal(bqw, bq0);
    assert_int_equal(bkw, bk0);
    mha_default_blocks(&win, FLASH | MHA_KT_TILES, MHA_ISA_AVX512BF16, 1, &bqw, &bkw);
    assert_int_equal(bqw, 64);
    assert_int_equal(bkw, 256);
    /* flash.avx512bf16 without a short window: 1,024-key blocks where P's
     * pairs (512 x bq words) fit a quarter of the L2; the fp32 level keeps
     * its own */
    mha_caches cw;
    mha_caches_get(&cw);
    mha_default_blocks(&plain, FLASH, MHA_ISA_AVX512BF16, 1, &bq0, &bk0);
    if ((uint64_t)512 * (uint64_t)bq0 * 4 <= cw.l2 / 4) assert_int_equal(bk0, 1024);
    mha_default_blocks(&plain128, FLASH, MHA_ISA_AVX512BF16, 1, &bq0, &bk0);
    if ((uint64_t)512 * (uint64_t)bq0 * 4 <= cw.l2 / 4) assert_int_equal(bk0, 1024);
    mha_default_blocks(&plain, FLASH, MHA_ISA_AVX512, 1, &bq0, &bk0);
    assert_true(bk0 <= 256);
    /* the fp32 level at 64 < d <= 128: at least 256 keys where the working
     * set fits half the L2; AVX2 keeps the L1 fit */
    mha_default_blocks(&plain128, FLASH, MHA_ISA_AVX512, 1, &bq0, &bk0);
    if ((uint64_t)(2 * 128 + 256) * (uint64_t)bq0 * 4 + 2 * 256 * 128 * 4 <= cw.l2 / 2)
        assert_int_equal(bk0, 256);
    mha_default_blocks(&plain128, FLASH, MHA_ISA_AVX2, 1, &bq0, &bk0);
    assert_true(bk0 <= 256);
    /* On the AVX-512 levels a KV block spans a query block's band (span +
     * bq - 1 keys, in 32s) where S^T stays within half the L2: window 256
     * (causal), 32 + 256 -> 288 keys (bf16), the fp32 level from its own
     * bq; AVX2 and a band too long for the L2 keep the unwindowed blocks. */
    win.window_left = 256;
    mha_default_blocks(&win, FLASH, MHA_ISA_AVX512BF16, 1, &bqw, &bkw);
    assert_int_equal(bqw, 32);
    assert_int_equal(bkw, 288);
    mha_default_blocks(&win, FLASH, MHA_ISA_AVX512, 1, &bqw, &bkw);
    mha_default_blocks(&plain, FLASH, MHA_ISA_AVX512, 1, &bq0, &bk0);
    assert_int_equal(bqw, bq0);
    const int band = (256 + bqw + 31) / 32 * 32;
    assert_int_equal(bkw,
                     band > bk0 && (uint64_t)band * (uint64_t)bqw * 4 <= cw.l2 / 2 ? band : bk0);
    mha_default_blocks(&win, FLASH, MHA_ISA_AVX2, 1, &bqw, &bkw);
    mha_default_blocks(&plain, FLASH, MHA_ISA_AVX2, 1, &bq0, &bk0);
    assert_int_equal(bqw, bq0);
    assert_int_equal(bkw, bk0);
    win.window_left = 4095; /* 4,096 + 95 keys x 96 queries: 1.6 MiB of S^T */
    mha_default_blocks(&win, FLASH, MHA_ISA_AVX512BF16, 1, &bqw, &bkw);
    mha_default_blocks(&plain, FLASH, MHA_ISA_AVX512BF16, 1, &bq0, &bk0);
    assert_int_equal(bqw, bq0);
    if ((uint64_t)(4096 + bqw) * (uint64_t)bqw * 4 > cw.l2 / 2) assert_int_equal(bkw, bk0);
    win.window_left = 1 << 20; /* no window that short */
    mha_default_blocks(&win, FLASH, MHA_ISA_AVX512, 1, &bqw, &bkw);
    mha_default_blocks(&plain, FLASH, MHA_ISA_AVX512, 1, &bq0, &bk0);
    assert_int_equal(bkw, bk0);
}

/* The cache-model default: the best-ranked kernel that runs here for the
 * shape class, at the highest level the cap allows (decode for a few query
 * rows per KV head, flash otherwise), never the reference. */
static const mha_kernel *highest_running(const char *algorithm) {
    const mha_kernel *best = NULL;
    for (int i = 0; i < mha_kernel_count(); i++) {
        const mha_kernel *k = mha_kernel_at(i);
        if (strcmp(mha_kernel_algorithm(k), algorithm) == 0 && mha_kernel_supported(k) == MHA_OK &&
            (mha_kernel_dtypes(k) & MHA_DTYPE_BIT(MHA_F32)) && /* the problems here are fp32 */
            (!best || mha_kernel_isa(k) > mha_kernel_isa(best)))
            best = k;
    }
    return best;
}

static void test_default_kernel(void **state) {
    (void)state;
    const mha_problem decode = {.batch = 1,
                                .heads = 32,
                                .kv_heads = 8,
                                .seq_q = 1,
                                .seq_kv = 4096,
                                .head_dim = 128,
                                .causal = 0,
                                .scale = 0.0f,
                                .dtype = MHA_F32,
                                .kv_dtype = MHA_F32},
                      prefill = {.batch = 1,
                                 .heads = 8,
                                 .kv_heads = 8,
                                 .seq_q = 512,
                                 .seq_kv = 512,
                                 .head_dim = 64,
                                 .causal = 1,
                                 .scale = 0.0f,
                                 .dtype = MHA_F32,
                                 .kv_dtype = MHA_F32};
    assert_non_null(highest_running("decode"));
    assert_non_null(highest_running("flash"));
    assert_ptr_equal(mha_default_kernel(&decode), highest_running("decode"));
    assert_ptr_equal(mha_default_kernel(&prefill), highest_running("flash"));
}

/* mha_attend / mha_workspace_size resolve 0 through the model: the same bytes
 * as the explicit values. */
static void test_workspace_resolves_defaults(void **state) {
    (void)state;
    static const char *const names[] = {"flash.scalar", "tiled.scalar"};
    for (int i = 0; i < 2; i++) {
        const mha_kernel *k = mha_kernel_find(names[i]);
        assert_non_null(k);
        int bq, bk;
        mha_default_blocks(&P1024, mha_kernel_traits(k), mha_kernel_isa(k), 1, &bq, &bk);
        const mha_options zero = {.threads = 2},
                          expl = {.threads = 2, .block_q = bq, .block_kv = bk};
        size_t a = 0, b = 0;
        assert_int_equal(mha_workspace_size(k, &P1024, &zero, &a), MHA_OK);
        assert_int_equal(mha_workspace_size(k, &P1024, &expl, &b), MHA_OK);
        assert_int_equal(a, b);
    }
}

static void test_cpu_key_agrees(void **state) {
    (void)state;
    machine_info m;
    machine_describe(&m);
    char a[96], b[96];
    machine_cpu_key(&m, a, sizeof a);
    mha_cpu_key(b, sizeof b);
    assert_string_equal(a, b);
}

/* ---- classes ------------------------------------------------------------------------------ */
static void test_classes(void **state) {
    (void)state;
    mha_shape_class cl[MHA_CLASS_MAX];
    const int nq = mha_class_list("quick", cl, MHA_CLASS_MAX);
    assert_true(nq >= 8);
    const int nf = mha_class_list("full", cl, MHA_CLASS_MAX);
    assert_true(nf > nq && nf <= MHA_CLASS_MAX);
    assert_int_equal(mha_class_list("bogus", cl, MHA_CLASS_MAX), -1);
    char names[MHA_CLASS_MAX][64];
    for (int i = 0; i < nf; i++) {
        mha_class_name(&cl[i], names[i], sizeof names[i]);
        for (int j = 0; j < i; j++) assert_string_not_equal(names[i], names[j]);
        /* the representative problem belongs to its own class */
        mha_problem p, vp;
        mha_class_problem(&cl[i], &p);
        mha_class_verify_problem(&cl[i], &vp);
        assert_int_equal(mha_problem_validate(&p), MHA_OK);
        assert_int_equal(mha_problem_validate(&vp), MHA_OK);
        char again[64];
        assert_string_equal(class_of(&p, cl[i].threads == 1 ? 1 : 4), names[i]);
        mha_class_name(&cl[i], again, sizeof again);
        assert_string_equal(again, names[i]);
    }
    /* prefill and decode classes in fp32 and bf16: quick has 24 + 24 + 8 + 8 */
    for (int set = 0; set < 2; set++) {
        const int n = mha_class_list(set ? "full" : "quick", cl, MHA_CLASS_MAX);
        int n32 = 0, n16 = 0, ndec32 = 0, ndec16 = 0;
        for (int i = 0; i < n; i++) {
            assert_true(cl[i].dtype == MHA_F32 || cl[i].dtype == MHA_BF16);
            assert_int_equal(cl[i].kv_dtype, cl[i].dtype);
            const int b16 = cl[i].dtype == MHA_BF16;
            ndec32 += cl[i].decode && !b16;
            ndec16 += cl[i].decode && b16;
            n32 += !cl[i].decode && !b16;
            n16 += !cl[i].decode && b16;
        }
        assert_int_equal(n16, n32);
        assert_int_equal(ndec16, ndec32);
        if (!set) {
            assert_int_equal(n, 64);
            assert_int_equal(ndec32, 8);
        }
    }
    const mha_problem dec = {.batch = 2,
                             .heads = 8,
                             .kv_heads = 8,
                             .seq_q = 1,
                             .seq_kv = 3000,
                             .head_dim = 128,
                             .causal = 1,
                             .scale = 0.0f,
                             .dtype = MHA_F32,
                             .kv_dtype = MHA_F32},
                      gqa = {.batch = 2,
                             .heads = 8,
                             .kv_heads = 2,
                             .seq_q = 1,
                             .seq_kv = 3000,
                             .head_dim = 128,
                             .causal = 1,
                             .scale = 0.0f,
                             .dtype = MHA_F32,
                             .kv_dtype = MHA_F32};
    assert_string_equal(class_of(&dec, 1), "decode-d128-kv4096-t1");
    assert_string_equal(class_of(&gqa, 1), "decode-gqa-d128-kv4096-t1");
    const mha_problem odd = {.batch = 1,
                             .heads = 4,
                             .kv_heads = 4,
                             .seq_q = 77,
                             .seq_kv = 5000,
                             .head_dim = 63,
                             .causal = 1,
                             .scale = 0.0f,
                             .dtype = MHA_F32,
                             .kv_dtype = MHA_F32};
    assert_string_equal(class_of(&odd, 8), "dother-kvlong-causal-tall");
}

/* ---- the fallback chain --------------------------------------------------------------------- */
static void test_no_table_defaults(void **state) {
    (void)state;
    setenv("MHA_TUNING", "/nonexistent/mha-table.json", 1);
    mha_selection s;
    select_ok(&P1024, 1, &s);
    assert_int_equal(s.source, MHA_CHOICE_DEFAULT);
    assert_ptr_equal(s.kernel, highest_running("flash")); /* the best fp32 flash here */
    assert_non_null(strstr(s.reason, "no tuning table"));
    assert_true(s.expected_gflops == 0);
    int bq, bk;
    /* the chosen kernel's level: flash.avx512bf16's blocks differ from the
     * fp32 kernel's where the CPU has AVX512_BF16 */
    mha_default_blocks(&P1024, FLASH, mha_kernel_isa(s.kernel), 1, &bq, &bk);
    assert_int_equal(s.options.block_q, bq);
    assert_int_equal(s.options.block_kv, bk);
}

static void test_forced(void **state) {
    (void)state;
    mha_selection s;
    setenv("MHA_KERNEL", "tiled.scalar", 1);
    select_ok(&P1024, 2, &s);
    assert_int_equal(s.source, MHA_CHOICE_FORCED);
    assert_string_equal(mha_kernel_name(s.kernel), "tiled.scalar");
    assert_non_null(strstr(s.reason, "MHA_KERNEL"));
    /* The caller's explicit knobs survive. */
    const mha_options o = {.threads = 1, .block_q = 40, .block_kv = 24};
    assert_int_equal(mha_select(&P1024, &o, &s), MHA_OK);
    assert_int_equal(s.options.block_q, 40);
    assert_int_equal(s.options.block_kv, 24);

    setenv("MHA_KERNEL", "flash.nonsense", 1);
    assert_int_equal(mha_select(&P1024, NULL, &s), MHA_EINVAL);
    assert_non_null(strstr(mha_last_error(), "flash.nonsense"));

    setenv("MHA_KERNEL", "flash.avx512", 1);
    setenv("MHA_ISA", "scalar", 1);
    assert_int_equal(mha_select(&P1024, NULL, &s), MHA_EUNSUPPORTED);
    assert_non_null(strstr(mha_last_error(), "MHA_KERNEL"));
}

static void test_table_match(void **state) {
    (void)state;
    const char *path =
        write_file("match.json",
                   table_text(NULL, NULL, class_of(&P1024, 1),
                              "{\"kernel\": \"tiled.scalar\", \"block_q\": 32, \"block_kv\": 128, "
                              "\"split\": 0, \"gflops\": 12.5}",
                              "{\"kernel\": \"flash.scalar\", \"block_q\": 16, \"block_kv\": 64, "
                              "\"gflops\": 10}"));
    setenv("MHA_TUNING", path, 1);
    mha_selection s, s2;
    select_ok(&P1024, 1, &s);
    assert_int_equal(s.source, MHA_CHOICE_TABLE);
    assert_string_equal(mha_kernel_name(s.kernel), "tiled.scalar");
    assert_int_equal(s.options.block_q, 32);
    assert_int_equal(s.options.block_kv, 128);
    assert_true(s.expected_gflops == 12.5);
    assert_non_null(strstr(s.reason, class_of(&P1024, 1)));
    /* determinism: the same inputs, the same choice */
    for (int i = 0; i < 3; i++) {
        select_ok(&P1024, 1, &s2);
        assert_ptr_equal(s2.kernel, s.kernel);
        assert_memory_equal(&s2.options, &s.options, sizeof s.options);
        assert_int_equal(s2.source, s.source);
        assert_string_equal(s2.reason, s.reason);
    }
    /* Another seq bucket of the same class family: the nearest entry. */
    const mha_problem p300 = {.batch = 1,
                              .heads = 8,
                              .kv_heads = 8,
                              .seq_q = 3000,
                              .seq_kv = 3000,
                              .head_dim = 64,
                              .causal = 0,
                              .scale = 0.0f,
                              .dtype = MHA_F32,
                              .kv_dtype = MHA_F32};
    select_ok(&p300, 1, &s);
    assert_int_equal(s.source, MHA_CHOICE_TABLE);
    assert_non_null(strstr(s.reason, "nearest"));
    /* A class the table lacks: defaults, and the reason says so. */
    const mha_problem causal = {.batch = 1,
                                .heads = 8,
                                .kv_heads = 8,
                                .seq_q = 1024,
                                .seq_kv = 1024,
                                .head_dim = 64,
                                .causal = 1,
                                .scale = 0.0f,
                                .dtype = MHA_F32,
                                .kv_dtype = MHA_F32};
    select_ok(&causal, 1, &s);
    assert_int_equal(s.source, MHA_CHOICE_DEFAULT);
    assert_non_null(strstr(s.reason, "no entry"));
    /* A window bounded on the left: the table's kernel (tiled does not take
     * a window, so its runner-up), the cache model's blocks, and the reason
     * says so; a window unbounded on the left keeps the table's blocks. */
    mha_problem win = P1024;
    win.window = 1;
    win.window_left = 128;
    win.window_right = 0;
    select_ok(&win, 1, &s);
    assert_int_equal(s.source, MHA_CHOICE_TABLE);
    assert_string_equal(mha_kernel_name(s.kernel), "flash.scalar");
    assert_non_null(strstr(s.reason, "cache model"));
    setenv("MHA_KERNEL", "flash.scalar", 1);
    select_ok(&win, 1, &s2);
    unsetenv("MHA_KERNEL");
    assert_int_equal(s.options.block_q, s2.options.block_q);
    assert_int_equal(s.options.block_kv, s2.options.block_kv);
    win.window_left = -1;
    select_ok(&win, 1, &s);
    assert_string_equal(mha_kernel_name(s.kernel), "flash.scalar");
    assert_int_equal(s.options.block_q, 16);
    assert_int_equal(s.options.block_kv, 64);
    assert_null(strstr(s.reason, "cache model"));

    /* The committed-table location: MHA_TUNING_DIR/<cpu key>.json. */
    unsetenv("MHA_TUNING");
    setenv("MHA_TUNING_DIR", tmpdir, 1);
    char cpu_path[512];
    mha_table_cpu_path(mha_table_dir(), cpu_path, sizeof cpu_path);
    assert_int_equal(strncmp(cpu_path, tmpdir, strlen(tmpdir)), 0);
    assert_int_equal(rename(path, cpu_path), 0);
    select_ok(&P1024, 1, &s);
    assert_int_equal(s.source, MHA_CHOICE_TABLE);
    assert_string_equal(mha_kernel_name(s.kernel), "tiled.scalar");
}

/* tune never replaces a table: it adds <key>-<UTC time>[-n].json beside it,
 * and the reader takes the newest of them (the plain name is the oldest;
 * -n orders numerically; a name that only looks like one is ignored). */
static void test_table_newest(void **state) {
    (void)state;
    char dir[256]; /* its own folder: the files below are made and removed */
    assert_int_equal(tu_mkdtemp(dir, sizeof dir, "test_select_newest"), 0);
    setenv("MHA_TUNING_DIR", dir, 1);
    unsetenv("MHA_TUNING");
    char base[512], path[600], want[600];
    mha_table_cpu_base(mha_table_dir(), base, sizeof base);
    assert_int_equal(strncmp(base, dir, strlen(dir)), 0); /* never the tree's tables */
    mha_table_cpu_path(mha_table_dir(), path, sizeof path);
    snprintf(want, sizeof want, "%s.json", base);
    assert_string_equal(path, want); /* none yet: the plain name */
    static const char *const names[] = {".json",
                                        "-20261201T101010Z.json",
                                        "-20261201T101010Z-2.json",
                                        "-20261201T101010Z-10.json",
                                        "-20251231T235959Z.json",
                                        "-2026120xT101010Z.json",
                                        "-cap-avx2.json"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        snprintf(path, sizeof path, "%s%s", base, names[i]);
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fclose(f);
    }
    mha_table_cpu_path(mha_table_dir(), path, sizeof path);
    snprintf(want, sizeof want, "%s-20261201T101010Z-10.json", base);
    assert_string_equal(path, want);
    unsetenv("MHA_TUNING_DIR");
    tu_rm_tree(dir);
}

/* Runs mha_select with stderr captured; returns what it printed. */
static const char *select_captured(const mha_problem *p, mha_selection *s) {
    static char text[2048];
    char path[512];
    snprintf(path, sizeof path, "%s/stderr.txt", tmpdir);
    fflush(stderr);
    const int saved = dup(2);
    FILE *f = fopen(path, "w+");
    assert_non_null(f);
    dup2(fileno(f), 2);
    const mha_status st = mha_select(p, NULL, s);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(f);
    const size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
    assert_int_equal(st, MHA_OK);
    return text;
}

static void test_table_foreign(void **state) {
    (void)state;
    const char *winner = "{\"kernel\": \"tiled.scalar\", \"block_q\": 32, \"block_kv\": 128}";
    const mha_problem p = {.batch = 1,
                           .heads = 8,
                           .kv_heads = 8,
                           .seq_q = 1024,
                           .seq_kv = 1024,
                           .head_dim = 64,
                           .causal = 0,
                           .scale = 0.0f,
                           .dtype = MHA_F32,
                           .kv_dtype = MHA_F32};
    const int all = mha_resolve_threads(NULL);
    /* another CPU */
    setenv("MHA_TUNING",
           write_file("foreign.json", table_text("intel-xeon-platinum-8480-f6m143-avx512", NULL,
                                                 class_of(&p, all), winner, NULL)),
           1);
    mha_selection s;
    setenv("MHA_VERBOSE", "1", 1);
    const char *err = select_captured(&p, &s);
    assert_int_equal(s.source, MHA_CHOICE_DEFAULT);
    assert_non_null(strstr(s.reason, "not used"));
    assert_non_null(strstr(s.reason, "intel-xeon-platinum-8480"));
    assert_non_null(strstr(err, "not used"));
    assert_non_null(strstr(err, mha_kernel_name(s.kernel)));
    /* this CPU, tuned under another ISA cap */
    const char *other_isa = mha_isa_active() == MHA_ISA_SCALAR ? "avx2" : "scalar";
    setenv("MHA_TUNING",
           write_file("isa.json", table_text(NULL, other_isa, class_of(&p, all), winner, NULL)), 1);
    err = select_captured(&p, &s);
    assert_int_equal(s.source, MHA_CHOICE_DEFAULT);
    assert_non_null(strstr(s.reason, "not used"));
    /* quiet without MHA_VERBOSE */
    unsetenv("MHA_VERBOSE");
    err = select_captured(&p, &s);
    assert_string_equal(err, "");
}

static void expect_fallback(const char *name, const char *text, const char *why) {
    setenv("MHA_TUNING", write_file(name, text), 1);
    mha_selection s;
    select_ok(&P1024, 1, &s);
    if (s.source != MHA_CHOICE_DEFAULT || !strstr(s.reason, why))
        fail_msg("%s: source %d, reason '%s', expected a fallback mentioning '%s'", name,
                 (int)s.source, s.reason, why);
}

static void test_table_malformed(void **state) {
    (void)state;
    const char *cls = class_of(&P1024, 1);
    char good[4096], text[4096];
    snprintf(good, sizeof good, "%s",
             table_text(NULL, NULL, cls,
                        "{\"kernel\": \"tiled.scalar\", \"block_q\": 32, \"block_kv\": 128}",
                        NULL));
    expect_fallback("empty.json", "", "empty");
    expect_fallback("blank.json", "  \n\t\n", "empty");
    /* truncated at several points */
    const size_t len = strlen(good);
    for (size_t cut = 1; cut < len - 2; cut += len / 7) {
        snprintf(text, sizeof text, "%.*s", (int)cut, good);
        expect_fallback("truncated.json", text, "ignored");
    }
    expect_fallback("garbage.json",
                    "\x7f"
                    "ELF\x01\x02 not json at all",
                    "ignored");
    expect_fallback("array.json", "[1, 2, 3]", "not an object");
    expect_fallback("trailing.json", "{\"fingerprint\": {}} }}", "ignored");
    expect_fallback("nofp.json", "{\"classes\": []}", "fingerprint");
    expect_fallback(
        "keytype.json",
        "{\"fingerprint\": {\"cpu_key\": 7, \"isa_active\": \"avx2\"}, \"classes\": []}",
        "cpu_key");
    char key[96];
    mha_cpu_key(key, sizeof key);
    snprintf(text, sizeof text,
             "{\"fingerprint\": {\"cpu_key\": \"%s\", \"isa_active\": \"%s\"}, \"classes\": {}}",
             key, mha_isa_name(mha_isa_active()));
    expect_fallback("classes.json", text, "classes");
    /* wrong types inside an entry */
    expect_fallback(
        "strknob.json",
        table_text(NULL, NULL, cls,
                   "{\"kernel\": \"tiled.scalar\", \"block_q\": \"32\", \"block_kv\": 8}", NULL),
        "block_q is not an integer");
    expect_fallback("floatknob.json",
                    table_text(NULL, NULL, cls,
                               "{\"kernel\": \"tiled.scalar\", \"block_q\": 3.5, \"block_kv\": 8}",
                               NULL),
                    "block_q is not an integer");
    expect_fallback("nokernel.json",
                    table_text(NULL, NULL, cls, "{\"block_q\": 32, \"block_kv\": 8}", NULL),
                    "kernel is missing");
    expect_fallback("winnernull.json", table_text(NULL, NULL, cls, "null", NULL), "winner");
    expect_fallback("winnerarr.json", table_text(NULL, NULL, cls, "[64, 64]", NULL), "winner");
    /* consistent JSON, unusable entries */
    expect_fallback("unknown.json",
                    table_text(NULL, NULL, cls,
                               "{\"kernel\": \"warp.avx1024\", \"block_q\": 32, \"block_kv\": 8}",
                               NULL),
                    "unknown kernel");
    expect_fallback("range.json",
                    table_text(NULL, NULL, cls,
                               "{\"kernel\": \"tiled.scalar\", \"block_q\": 100000, "
                               "\"block_kv\": 8}",
                               NULL),
                    "out of range");
    expect_fallback("negative.json",
                    table_text(NULL, NULL, cls,
                               "{\"kernel\": \"tiled.scalar\", \"block_q\": -4, \"block_kv\": 8}",
                               NULL),
                    "out of range");
    expect_fallback("split.json",
                    table_text(NULL, NULL, cls,
                               "{\"kernel\": \"flash.scalar\", \"block_q\": 4, \"block_kv\": 8, "
                               "\"split\": 9}",
                               NULL),
                    "split");
    /* A kernel above the active ISA: skipped; the usable runner-up is taken. */
    setenv("MHA_ISA", "scalar", 1);
    setenv(
        "MHA_TUNING",
        write_file("isa-skip.json",
                   table_text(NULL, "scalar", cls,
                              "{\"kernel\": \"flash.avx512\", \"block_q\": 64, \"block_kv\": 64}",
                              "{\"kernel\": \"tiled.scalar\", \"block_q\": 8, \"block_kv\": 32, "
                              "\"gflops\": 3}")),
        1);
    mha_selection s;
    select_ok(&P1024, 1, &s);
    assert_int_equal(s.source, MHA_CHOICE_TABLE);
    assert_string_equal(mha_kernel_name(s.kernel), "tiled.scalar");
    assert_int_equal(s.options.block_q, 8);
    assert_non_null(strstr(s.reason, "runner-up"));
    assert_non_null(strstr(s.reason, "does not run here"));
}

/* ---- dtypes in classes and selection ------------------------------------------------------ */

/* fp32 class names are unchanged; other dtypes add a part, and the class's
 * problems carry the dtypes back. */
static void test_dtype_classes(void **state) {
    (void)state;
    mha_problem p = P1024;
    assert_string_equal(class_of(&p, 1), "d64-kv1024-t1");
    p.dtype = MHA_BF16;
    assert_string_equal(class_of(&p, 1), "d64-kv1024-t1-bf16");
    p.kv_dtype = MHA_BF16; /* the same as 0 */
    assert_string_equal(class_of(&p, 1), "d64-kv1024-t1-bf16");
    const mha_problem dec = {.batch = 1,
                             .heads = 32,
                             .kv_heads = 8,
                             .seq_q = 1,
                             .seq_kv = 4096,
                             .head_dim = 128,
                             .causal = 0,
                             .scale = 0.0f,
                             .dtype = MHA_F32,
                             .kv_dtype = MHA_I8},
                      dec16 = {.batch = 1,
                               .heads = 32,
                               .kv_heads = 8,
                               .seq_q = 1,
                               .seq_kv = 4096,
                               .head_dim = 128,
                               .causal = 0,
                               .scale = 0.0f,
                               .dtype = MHA_F16,
                               .kv_dtype = MHA_I8};
    assert_string_equal(class_of(&dec, 2), "decode-gqa-d128-kv4096-tall-kv_int8");
    assert_string_equal(class_of(&dec16, 1), "decode-gqa-d128-kv4096-t1-fp16-kv_int8");
    const mha_problem *ps[3] = {&p, &dec, &dec16};
    for (int i = 0; i < 3; i++) {
        mha_shape_class c;
        mha_class_of(ps[i], 1, &c);
        mha_problem rp, vp;
        mha_class_problem(&c, &rp);
        mha_class_verify_problem(&c, &vp);
        assert_int_equal(rp.dtype, ps[i]->dtype);
        assert_int_equal(mha_problem_kv_dtype(&rp), mha_problem_kv_dtype(ps[i]));
        assert_int_equal(mha_problem_kv_dtype(&vp), mha_problem_kv_dtype(ps[i]));
        assert_string_equal(class_of(&rp, 1), class_of(ps[i], 1));
    }
}

/* The default takes the problem's dtypes: a kernel that takes them (decode
 * family first for decode shapes), or none, and then mha_select says so. */
static void test_dtype_default(void **state) {
    (void)state;
    const mha_problem probs[] = {
        {.batch = 1,
         .heads = 8,
         .kv_heads = 8,
         .seq_q = 512,
         .seq_kv = 512,
         .head_dim = 64,
         .causal = 1,
         .scale = 0.0f,
         .dtype = MHA_BF16,
         .kv_dtype = MHA_F32},
        {.batch = 1,
         .heads = 8,
         .kv_heads = 8,
         .seq_q = 512,
         .seq_kv = 512,
         .head_dim = 64,
         .causal = 0,
         .scale = 0.0f,
         .dtype = MHA_F16,
         .kv_dtype = MHA_F32},
        {.batch = 1,
         .heads = 32,
         .kv_heads = 8,
         .seq_q = 1,
         .seq_kv = 4096,
         .head_dim = 128,
         .causal = 0,
         .scale = 0.0f,
         .dtype = MHA_F32,
         .kv_dtype = MHA_I8},
        {.batch = 1,
         .heads = 32,
         .kv_heads = 32,
         .seq_q = 1,
         .seq_kv = 4096,
         .head_dim = 128,
         .causal = 0,
         .scale = 0.0f,
         .dtype = MHA_BF16,
         .kv_dtype = MHA_I8},
        {.batch = 1,
         .heads = 32,
         .kv_heads = 8,
         .seq_q = 1,
         .seq_kv = 4096,
         .head_dim = 128,
         .causal = 0,
         .scale = 0.0f,
         .dtype = MHA_F32,
         .kv_dtype = MHA_BF16},
    };
    for (size_t i = 0; i < sizeof probs / sizeof probs[0]; i++) {
        const mha_problem *p = &probs[i];
        const mha_kernel *k = mha_default_kernel(p);
        const char *cls = class_of(p, 1);
        int any = 0, any_family = 0;
        const int few = p->seq_q * (p->heads / p->kv_heads) <= 8;
        for (int j = 0; j < mha_kernel_count(); j++) {
            const mha_kernel *kk = mha_kernel_at(j);
            if (mha_kernel_supported(kk) != MHA_OK || mha_kernel_takes(kk, p) != MHA_OK) continue;
            any = 1;
            any_family |= ((mha_kernel_traits(kk) & MHA_KT_DECODE) != 0) == few;
        }
        mha_selection s;
        if (!any) {
            print_message("%s: no kernel here takes it (default NULL, mha_select refuses)\n", cls);
            assert_null(k);
            assert_int_equal(mha_select(p, &(mha_options){.threads = 1}, &s), MHA_EUNSUPPORTED);
            assert_non_null(strstr(mha_last_error(), mha_dtype_name(mha_problem_kv_dtype(p))));
            continue;
        }
        print_message("%s: default %s\n", cls, mha_kernel_name(k));
        assert_int_equal(mha_kernel_takes(k, p), MHA_OK);
        if (any_family) assert_int_equal((mha_kernel_traits(k) & MHA_KT_DECODE) != 0, few);
        select_ok(p, 1, &s);
        assert_int_equal(mha_kernel_takes(s.kernel, p), MHA_OK);
    }
}

/* A table entry for a typed class whose kernel does not take the dtype is
 * not used; MHA_KERNEL naming such a kernel is refused (tiled.scalar: fp32
 * only; the flash kernels widen bf16/fp16). */
static void test_dtype_table(void **state) {
    (void)state;
    mha_problem p = P1024;
    p.dtype = MHA_BF16;
    char text[4096];
    snprintf(text, sizeof text, "%s",
             table_text(NULL, NULL, class_of(&p, 1),
                        "{\"kernel\": \"tiled.scalar\", \"block_q\": 32, \"block_kv\": 128, "
                        "\"split\": 0, \"gflops\": 12.5}",
                        NULL));
    /* recorded as bf16, so that the entry is found and its kernel judged */
    char *at = strstr(text, "\"winner\"");
    assert_non_null(at);
    memmove(at + 17, at, strlen(at) + 1);
    memcpy(at, "\"dtype\": \"bf16\", ", 17);
    const char *path = write_file("dtype.json", text);
    setenv("MHA_TUNING", path, 1);
    mha_selection s;
    const mha_status st = mha_select(&p, &(mha_options){.threads = 1}, &s);
    if (st == MHA_OK) {
        assert_int_equal(s.source, MHA_CHOICE_DEFAULT);
        assert_non_null(strstr(s.reason, "does not take dtype bf16"));
    } else {
        assert_int_equal(st, MHA_EUNSUPPORTED);
        print_message("%s\n", mha_last_error());
        assert_non_null(strstr(mha_last_error(), "does not take dtype bf16"));
    }
    unsetenv("MHA_TUNING");
    setenv("MHA_KERNEL", "tiled.scalar", 1);
    assert_int_equal(mha_select(&p, &(mha_options){.threads = 1}, &s), MHA_EUNSUPPORTED);
    assert_non_null(strstr(mha_last_error(), "MHA_KERNEL='tiled.scalar'"));
    assert_non_null(strstr(mha_last_error(), "bf16"));
    unsetenv("MHA_KERNEL");
}

/* A table with the entries (JSON objects, comma-separated) for this CPU. */
static const char *table_entries(const char *entries) {
    static char buf[8192];
    char key[96];
    mha_cpu_key(key, sizeof key);
    snprintf(buf, sizeof buf,
             "{\"fingerprint\": {\"cpu_key\": \"%s\", \"isa_active\": \"%s\"},\n"
             " \"classes\": [%s]}\n",
             key, mha_isa_name(mha_isa_active()), entries);
    return buf;
}

/* One entry: class cls, "dtype" dt unless NULL (then absent, as in tables
 * before 16-bit classes were tuned), winner kernel k with the knobs. */
static void entry_text(char *buf, size_t len, const char *cls, const char *dt, const char *k,
                       int bq, int bk) {
    char dts[64] = "";
    if (dt) snprintf(dts, sizeof dts, "\"dtype\": \"%s\", \"kv_dtype\": \"%s\", ", dt, dt);
    snprintf(buf, len,
             "{\"class\": \"%s\", %s\"winner\": {\"kernel\": \"%s\", \"block_q\": %d, "
             "\"block_kv\": %d, \"split\": 0, \"gflops\": 50}, \"runner_up\": null}",
             cls, dts, k, bq, bk);
}

/* Tables record each class's dtype. A bf16 problem takes the bf16 entry (or
 * the nearest bf16 bucket) and never an fp32 one, whatever its name: an
 * fp32-only table, as every table before bf16 classes were tuned, leaves bf16
 * problems on the cache model and still serves fp32 ones. */
static void test_dtype_table_entries(void **state) {
    (void)state;
    const mha_problem p32 = P1024;
    mha_problem p16 = P1024;
    p16.dtype = MHA_BF16;
    const mha_kernel *k16 = mha_default_kernel(&p16); /* one that takes bf16 and runs here */
    assert_non_null(k16);
    const int knobs16 = (mha_kernel_traits(k16) & MHA_KT_BLOCKS) != 0;
    char cls32[64], cls16[64], e32[512], e16[512], entries[1200];
    snprintf(cls32, sizeof cls32, "%s", class_of(&p32, 1));
    snprintf(cls16, sizeof cls16, "%s", class_of(&p16, 1));
    assert_string_equal(cls16, "d64-kv1024-t1-bf16");
    mha_selection s;

    /* both dtypes in one table: each problem its own entry */
    entry_text(e32, sizeof e32, cls32, "fp32", "tiled.scalar", 32, 128);
    entry_text(e16, sizeof e16, cls16, "bf16", mha_kernel_name(k16), 32, 64);
    snprintf(entries, sizeof entries, "%s,\n%s", e32, e16);
    const char *path = write_file("mixed.json", table_entries(entries));
    setenv("MHA_TUNING", path, 1);
    select_ok(&p32, 1, &s);
    assert_int_equal(s.source, MHA_CHOICE_TABLE);
    assert_string_equal(mha_kernel_name(s.kernel), "tiled.scalar");
    assert_int_equal(s.options.block_q, 32);
    assert_int_equal(s.options.block_kv, 128);
    assert_int_equal(mha_select(&p16, &(mha_options){.threads = 1}, &s), MHA_OK);
    print_message("bf16: %s (%s)\n", mha_kernel_name(s.kernel), s.reason);
    assert_int_equal(s.source, MHA_CHOICE_TABLE);
    assert_ptr_equal(s.kernel, k16);
    assert_non_null(strstr(s.reason, cls16));
    if (knobs16) {
        assert_int_equal(s.options.block_q, 32);
        assert_int_equal(s.options.block_kv, 64);
    }
    /* the nearest bucket of the same dtype: a bf16 problem of 3000 keys */
    mha_problem p16long = p16;
    p16long.seq_q = p16long.seq_kv = 3000;
    assert_int_equal(mha_select(&p16long, &(mha_options){.threads = 1}, &s), MHA_OK);
    assert_int_equal(s.source, MHA_CHOICE_TABLE);
    assert_ptr_equal(s.kernel, k16);
    assert_non_null(strstr(s.reason, "nearest"));
    /* what the reader holds */
    mha_table t;
    char why[256];
    assert_int_equal(mha_table_load(path, &t, why, sizeof why), MHA_OK);
    assert_int_equal(t.count, 2);
    assert_int_equal(t.entries[0].dtype, MHA_F32);
    assert_int_equal(t.entries[0].kv_dtype, MHA_F32);
    assert_int_equal(t.entries[1].dtype, MHA_BF16);
    assert_int_equal(t.entries[1].kv_dtype, MHA_BF16);
    mha_table_free(&t);

    /* an fp32-only table without dtype fields (the older format) */
    entry_text(e32, sizeof e32, cls32, NULL, "tiled.scalar", 32, 128);
    path = write_file("fp32only.json", table_entries(e32));
    setenv("MHA_TUNING", path, 1);
    assert_int_equal(mha_table_load(path, &t, why, sizeof why), MHA_OK);
    assert_int_equal(t.entries[0].dtype, MHA_F32);
    assert_int_equal(t.entries[0].kv_dtype, MHA_F32);
    mha_table_free(&t);
    select_ok(&p32, 1, &s);
    assert_int_equal(s.source, MHA_CHOICE_TABLE);
    assert_string_equal(mha_kernel_name(s.kernel), "tiled.scalar");
    assert_int_equal(mha_select(&p16, &(mha_options){.threads = 1}, &s), MHA_OK);
    assert_int_equal(s.source, MHA_CHOICE_DEFAULT);
    assert_ptr_equal(s.kernel, k16);
    assert_non_null(strstr(s.reason, "no entry for class d64-kv1024-t1-bf16"));
    int bq, bk; /* the cache model's knobs, as without a table */
    mha_default_blocks(&p16, mha_kernel_traits(k16), mha_kernel_isa(k16), 1, &bq, &bk);
    if (knobs16) {
        assert_int_equal(s.options.block_q, bq);
        assert_int_equal(s.options.block_kv, bk);
    }

    /* a bf16 class name without a dtype field is an fp32 entry: not used */
    entry_text(e16, sizeof e16, cls16, NULL, mha_kernel_name(k16), 32, 64);
    setenv("MHA_TUNING", write_file("noname.json", table_entries(e16)), 1);
    assert_int_equal(mha_select(&p16, &(mha_options){.threads = 1}, &s), MHA_OK);
    assert_int_equal(s.source, MHA_CHOICE_DEFAULT);
    assert_non_null(strstr(s.reason, "no entry"));

    /* malformed dtype fields make the table malformed */
    static const char *const bad[][2] = {
        {"\"dtype\": \"int8\"", "dtype"},
        {"\"dtype\": 16", "dtype"},
        {"\"dtype\": \"fp32\", \"kv_dtype\": \"fp64\"", "kv_dtype"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(e32, sizeof e32,
                 "{\"class\": \"%s\", %s, \"winner\": {\"kernel\": \"tiled.scalar\", "
                 "\"block_q\": 32, \"block_kv\": 128}}",
                 cls32, bad[i][0]);
        expect_fallback("baddtype.json", table_entries(e32), bad[i][1]);
    }
    unsetenv("MHA_TUNING");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_blocks),
        cmocka_unit_test(test_table_newest),
        cmocka_unit_test(test_default_kernel),
        cmocka_unit_test(test_workspace_resolves_defaults),
        cmocka_unit_test(test_cpu_key_agrees),
        cmocka_unit_test(test_classes),
        cmocka_unit_test_setup_teardown(test_no_table_defaults, setup, teardown),
        cmocka_unit_test_setup_teardown(test_forced, setup, teardown),
        cmocka_unit_test_setup_teardown(test_table_match, setup, teardown),
        cmocka_unit_test_setup_teardown(test_table_foreign, setup, teardown),
        cmocka_unit_test_setup_teardown(test_table_malformed, setup, teardown),
        cmocka_unit_test(test_dtype_classes),
        cmocka_unit_test_setup_teardown(test_dtype_default, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dtype_table, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dtype_table_entries, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
