/* test_attend_layouts.c - `mhabench attend` on a packed ragged batch
 * (--cu-seqlens-q, --cu-seqlens-kv) and a paged KV cache (--k-cache,
 * --v-cache, --block-table, --seq-lens-kv): the output against the float64
 * oracle, auto's pick, a kernel that refuses the layout, and every
 * malformed flag combination, index file and index value exiting 2 with
 * a message naming it and nothing written; the '<i4' reader (fmt_npy). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "fmt_npy.h"
#include "mha.h"
#include "testutil.h"

static const char *g_bench;
static char g_tmp[256], g_out[8192], g_err[4096];

static int setup(void **state) {
    (void)state;
    g_bench = getenv("MHABENCH");
    if (g_bench && !*g_bench) g_bench = NULL;
    setenv("MHA_TUNING", "/nonexistent/none.json", 1); /* auto: no table, ours or the tree's */
    unsetenv("MHA_KERNEL");
    return tu_mkdtemp(g_tmp, sizeof g_tmp, "test_attend_layouts");
}
static int teardown(void **state) {
    (void)state;
    tu_rm_tree(g_tmp);
    return 0;
}

static const char *tmp(const char *name) {
    static char buf[16][512]; /* enough for one command line's paths */
    static int next;
    char *p = buf[next++ % 16];
    snprintf(p, 512, "%s/%s", g_tmp, name);
    return p;
}

static void write_f4(const char *name, const float *d, const int64_t *shape, int ndim) {
    char err[512];
    if (npy_write(tmp(name), d, shape, ndim, err, sizeof err) != MHA_OK) fail_msg("%s", err);
}

/* A '<i4' (or '<i8', wide) .npy file of n values, 1-D or [rows, n / rows]. */
static void write_int(const char *name, const int32_t *v, int n, int rows, int wide) {
    char dict[128], shape[32];
    if (rows)
        snprintf(shape, sizeof shape, "(%d, %d)", rows, n / rows);
    else
        snprintf(shape, sizeof shape, "(%d,)", n);
    int len = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                       wide ? "<i8" : "<i4", shape);
    const int total = (10 + len + 1 + 63) / 64 * 64; /* magic, version, length, dict, '\n' */
    FILE *f = fopen(tmp(name), "wb");
    assert_non_null(f);
    const unsigned char pre[10] = {0x93,
                                   'N',
                                   'U',
                                   'M',
                                   'P',
                                   'Y',
                                   1,
                                   0,
                                   (unsigned char)((total - 10) & 0xff),
                                   (unsigned char)((total - 10) >> 8)};
    fwrite(pre, 1, 10, f);
    fwrite(dict, 1, (size_t)len, f);
    for (int i = 10 + len; i < total - 1; i++) fputc(' ', f);
    fputc('\n', f);
    for (int i = 0; i < n; i++) {
        const int64_t w = v[i];
        fwrite(wide ? (const void *)&w : (const void *)&v[i], wide ? 8 : 4, 1, f);
    }
    assert_int_equal(fclose(f), 0);
}

static int bench(const char *first, ...) {
    va_list ap;
    va_start(ap, first);
    const int rc = tu_run_va(g_bench, first, ap, g_tmp, g_out, sizeof g_out, g_err, sizeof g_err);
    va_end(ap);
    if (rc < 0) fail_msg("%s did not run to an exit status: %s", g_bench, g_err);
    return rc;
}

/* Exit 2, one "mhabench: " line naming kw1 and kw2, no output written. */
static void expect_usage(int rc, const char *kw1, const char *kw2) {
    print_message("  exit %d: %s", rc, g_err);
    assert_int_equal(rc, 2);
    assert_int_equal(strncmp(g_err, "mhabench: ", 10), 0);
    if (kw1 && !strstr(g_err, kw1)) fail_msg("message lacks \"%s\"", kw1);
    if (kw2 && !strstr(g_err, kw2)) fail_msg("message lacks \"%s\"", kw2);
    assert_int_equal(access(tmp("never.npy"), F_OK), -1);
}

/* Three sequences, queries 2, 0, 3 over keys 3, 2, 4; H = 2, G = 1, d = 4, d_v = 3. */
enum { TQ = 5, TKV = 9, H = 2, D = 4, DV = 3, BS = 2, NB = 6, MB = 3 };
static const int32_t CQ[] = {0, 2, 2, 5}, CK[] = {0, 3, 5, 9}, LENS[] = {3, 2, 4};
/* blocks of 2: sequence 0 in 4, 1 (slot 1 of block 1 unused), 1 in 0, 2 in 5, 2; block 3 spare */
static const int32_t TABLE[] = {4, 1, -1, 0, 99, 99, 5, 2, 1 << 30};
static float g_q[TQ * H * D], g_k[TKV * D], g_v[TKV * DV];
static double g_ref[TQ * H * DV];

/* The inputs as files (packed and paged) and the oracle's answer (causal). */
static void write_inputs(void) {
    unsigned seed = 99;
    float *all[] = {g_q, g_k, g_v};
    const int n[] = {TQ * H * D, TKV * D, TKV * DV};
    for (int t = 0; t < 3; t++)
        for (int i = 0; i < n[t]; i++) {
            seed = seed * 1103515245u + 12345u;
            all[t][i] = (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
        }
    write_f4("q.npy", g_q, (int64_t[]){TQ, H, D}, 3);
    write_f4("k.npy", g_k, (int64_t[]){TKV, 1, D}, 3);
    write_f4("v.npy", g_v, (int64_t[]){TKV, 1, DV}, 3);
    write_int("cq.npy", CQ, 4, 0, 0);
    write_int("ck.npy", CK, 4, 0, 0);
    write_int("lens.npy", LENS, 3, 0, 0);
    write_int("table.npy", TABLE, 9, 3, 0);
    static float kc[NB * BS * D], vc[NB * BS * DV];
    for (int i = 0; i < NB * BS * D; i++) kc[i] = NAN;
    for (int i = 0; i < NB * BS * DV; i++) vc[i] = NAN;
    for (int b = 0; b < 3; b++)
        for (int j = 0; j < LENS[b]; j++) {
            const int slot = TABLE[b * MB + j / BS] * BS + j % BS, row = CK[b] + j;
            memcpy(kc + slot * D, g_k + row * D, D * sizeof(float));
            memcpy(vc + slot * DV, g_v + row * DV, DV * sizeof(float));
        }
    write_f4("kc.npy", kc, (int64_t[]){NB, BS, 1, D}, 4);
    write_f4("vc.npy", vc, (int64_t[]){NB, BS, 1, DV}, 4);
    const mha_problem p = {.batch = 3,
                           .heads = H,
                           .kv_heads = 1,
                           .seq_q = 3,
                           .seq_kv = 4,
                           .head_dim = D,
                           .causal = 1,
                           .head_dim_v = DV,
                           .layout = MHA_LAYOUT_PACKED,
                           .total_q = TQ,
                           .total_kv = TKV};
    const mha_tensor qt = mha_view_bnhd(g_q, H, TQ, D), kt = mha_view_bnhd(g_k, 1, TKV, D),
                     vt = mha_view_bnhd(g_v, 1, TKV, DV);
    const mha_extras x = {.cu_seqlens_q = CQ, .cu_seqlens_kv = CK};
    assert_int_equal(mha_reference_ex(&p, &qt, &kt, &vt, &x, g_ref), MHA_OK);
}

/* out.npy is [TQ, H, DV] and matches the oracle. */
static void expect_answer(void) {
    npy_array o;
    char err[512];
    assert_int_equal(npy_read(tmp("out.npy"), &o, err, sizeof err), MHA_OK);
    assert_int_equal(o.ndim, 3);
    assert_true(o.shape[0] == TQ && o.shape[1] == H && o.shape[2] == DV);
    for (int i = 0; i < TQ * H * DV; i++)
        if (!(fabs((double)o.data[i] - g_ref[i]) <= 1e-5))
            fail_msg("out[%d] = %g, oracle %g", i, (double)o.data[i], g_ref[i]);
    npy_free(&o);
    unlink(tmp("out.npy"));
}

static void test_packed_and_paged_run(void **state) {
    (void)state;
    if (!g_bench) skip();
    write_inputs();
    assert_int_equal(bench("attend", "--kernel", "naive", "--causal", "--q", tmp("q.npy"), "--k",
                           tmp("k.npy"), "--v", tmp("v.npy"), "--cu-seqlens-q", tmp("cq.npy"),
                           "--cu-seqlens-kv", tmp("ck.npy"), "--out", tmp("out.npy"), NULL),
                     0);
    assert_non_null(strstr(g_out, "kernel naive"));
    assert_non_null(strstr(g_out, "packed Tq=5 Tkv=9"));
    expect_answer();
    /* auto picks a kernel that takes the layout */
    assert_int_equal(bench("attend", "--kernel", "auto", "--causal", "--q", tmp("q.npy"), "--k",
                           tmp("k.npy"), "--v", tmp("v.npy"), "--cu-seqlens-q", tmp("cq.npy"),
                           "--cu-seqlens-kv", tmp("ck.npy"), "--out", tmp("out.npy"), NULL),
                     0);
    assert_non_null(strstr(g_out, "kernel "));
    expect_answer();
    /* flash.scalar takes the packed layout too */
    assert_int_equal(bench("attend", "--kernel", "flash.scalar", "--causal", "--q", tmp("q.npy"),
                           "--k", tmp("k.npy"), "--v", tmp("v.npy"), "--cu-seqlens-q",
                           tmp("cq.npy"), "--cu-seqlens-kv", tmp("ck.npy"), "--out", tmp("out.npy"),
                           NULL),
                     0);
    assert_non_null(strstr(g_out, "kernel flash.scalar"));
    expect_answer();
    /* the same keys in a paged pool (NaN in every slot no sequence reads):
     * naive, and flash, which reads it block by block */
    static const char *paged_kernels[] = {"naive", "flash.scalar"};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(bench("attend", "--kernel", paged_kernels[i], "--causal", "--q",
                               tmp("q.npy"), "--k-cache", tmp("kc.npy"), "--v-cache", tmp("vc.npy"),
                               "--block-table", tmp("table.npy"), "--seq-lens-kv", tmp("lens.npy"),
                               "--cu-seqlens-q", tmp("cq.npy"), "--out", tmp("out.npy"), NULL),
                         0);
        assert_non_null(strstr(g_out, "paged Tq=5 blocks=6x2 max_blocks=3"));
        char kline[64];
        snprintf(kline, sizeof kline, "kernel %s", paged_kernels[i]);
        assert_non_null(strstr(g_out, kline));
        expect_answer();
    }
    /* a kernel without the trait refuses, naming the layout */
    expect_usage(bench("attend", "--kernel", "tiled.scalar", "--q", tmp("q.npy"), "--k",
                       tmp("k.npy"), "--v", tmp("v.npy"), "--cu-seqlens-q", tmp("cq.npy"),
                       "--cu-seqlens-kv", tmp("ck.npy"), "--out", tmp("never.npy"), NULL),
                 "kernel tiled.scalar", "does not take the packed ragged layout");
    expect_usage(bench("attend", "--kernel", "tiled.scalar", "--causal", "--q", tmp("q.npy"),
                       "--k-cache", tmp("kc.npy"), "--v-cache", tmp("vc.npy"), "--block-table",
                       tmp("table.npy"), "--seq-lens-kv", tmp("lens.npy"), "--cu-seqlens-q",
                       tmp("cq.npy"), "--out", tmp("never.npy"), NULL),
                 "kernel tiled.scalar", "does not take the paged KV layout");
}

/* attend with the packed files and one flag's file replaced (NULL: as is). */
static int packed_with(const char *cq, const char *ck) {
    return bench("attend", "--kernel", "naive", "--q", tmp("q.npy"), "--k", tmp("k.npy"), "--v",
                 tmp("v.npy"), "--cu-seqlens-q", tmp(cq ? cq : "cq.npy"), "--cu-seqlens-kv",
                 tmp(ck ? ck : "ck.npy"), "--out", tmp("never.npy"), NULL);
}
static int paged_with(const char *table, const char *lens) {
    return bench("attend", "--kernel", "naive", "--q", tmp("q.npy"), "--k-cache", tmp("kc.npy"),
                 "--v-cache", tmp("vc.npy"), "--block-table", tmp(table ? table : "table.npy"),
                 "--seq-lens-kv", tmp(lens ? lens : "lens.npy"), "--cu-seqlens-q", tmp("cq.npy"),
                 "--out", tmp("never.npy"), NULL);
}

static void test_bad_index_files(void **state) {
    (void)state;
    if (!g_bench) skip();
    write_inputs();
    write_int("cq_down.npy", (const int32_t[]){0, 3, 2, 5}, 4, 0, 0);
    expect_usage(packed_with("cq_down.npy", NULL), "--cu-seqlens-q",
                 "mha_extras.cu_seqlens_q[2] = 2 is below cu_seqlens_q[1] = 3");
    write_int("cq_end.npy", (const int32_t[]){0, 2, 2, 4}, 4, 0, 0);
    expect_usage(packed_with("cq_end.npy", NULL), "--cu-seqlens-q",
                 "must end at problem.total_q = 5");
    write_int("ck3.npy", CK, 3, 0, 0);
    expect_usage(packed_with(NULL, "ck3.npy"), "--cu-seqlens-kv", "expected [4]");
    write_int("cq64.npy", CQ, 4, 0, 1);
    expect_usage(packed_with("cq64.npy", NULL), "'<i8' (int64) is not supported",
                 "expected '<i4' (int32)");
    expect_usage(packed_with("q.npy", NULL), "--cu-seqlens-q", "expected '<i4' (int32)");
    write_int("table_bad.npy", (const int32_t[]){4, 9, -1, 0, 99, 99, 5, 2, 1}, 9, 3, 0);
    expect_usage(paged_with("table_bad.npy", NULL), "--block-table",
                 "mha_extras.block_table[0][1] = 9: outside [0, problem.num_blocks = 6)");
    write_int("table_rows.npy", TABLE, 6, 2, 0);
    expect_usage(paged_with("table_rows.npy", NULL), "--block-table", "expected [3, MB]");
    write_int("lens_long.npy", (const int32_t[]){7, 2, 4}, 3, 0, 0);
    expect_usage(paged_with(NULL, "lens_long.npy"), "--seq-lens-kv",
                 "longer than its blocks (problem.max_blocks 3 x block_size 2 = 6 keys)");
    write_int("lens2.npy", LENS, 2, 0, 0);
    expect_usage(paged_with(NULL, "lens2.npy"), "--seq-lens-kv", "expected [3]");
}

static void test_bad_flag_combinations(void **state) {
    (void)state;
    if (!g_bench) skip();
    write_inputs();
    char out[512];
    snprintf(out, sizeof out, "%s", tmp("never.npy"));
    expect_usage(bench("attend", "--kernel", "naive", "--q", tmp("q.npy"), "--v", tmp("v.npy"),
                       "--out", out, NULL),
                 "missing required option --k", "--k-cache");
    expect_usage(bench("attend", "--kernel", "naive", "--q", tmp("q.npy"), "--k", tmp("k.npy"),
                       "--v", tmp("v.npy"), "--cu-seqlens-q", tmp("cq.npy"), "--out", out, NULL),
                 "--cu-seqlens-q without --cu-seqlens-kv", NULL);
    expect_usage(bench("attend", "--kernel", "naive", "--q", tmp("q.npy"), "--k", tmp("k.npy"),
                       "--k-cache", tmp("kc.npy"), "--v-cache", tmp("vc.npy"), "--out", out, NULL),
                 "--k with a paged KV cache", NULL);
    expect_usage(bench("attend", "--kernel", "naive", "--q", tmp("q.npy"), "--k-cache",
                       tmp("kc.npy"), "--v-cache", tmp("vc.npy"), "--seq-lens-kv", tmp("lens.npy"),
                       "--cu-seqlens-q", tmp("cq.npy"), "--out", out, NULL),
                 "a paged KV cache needs --block-table", NULL);
    /* a dense q under --cu-seqlens-q: the rank names the layout's shape */
    write_f4("q4.npy", g_q, (int64_t[]){1, H, TQ, D}, 4);
    expect_usage(bench("attend", "--kernel", "naive", "--q", tmp("q4.npy"), "--k", tmp("k.npy"),
                       "--v", tmp("v.npy"), "--cu-seqlens-q", tmp("cq.npy"), "--cu-seqlens-kv",
                       tmp("ck.npy"), "--out", out, NULL),
                 "expected a rank-3 [Tq,H,d] tensor", "packed");
}

/* The '<i4' reader: values as written; a float32 file is refused, named. */
static void test_read_i32(void **state) {
    (void)state;
    write_int("t.npy", TABLE, 9, 3, 0);
    npy_array a;
    char err[512];
    assert_int_equal(npy_read_i32(tmp("t.npy"), &a, err, sizeof err), MHA_OK);
    assert_int_equal(a.ndim, 2);
    assert_true(a.shape[0] == 3 && a.shape[1] == 3 && a.data == NULL);
    for (int i = 0; i < 9; i++) assert_int_equal(a.i32[i], TABLE[i]);
    npy_free(&a);
    assert_null(a.i32);
    const float f[2] = {1, 2};
    write_f4("f.npy", f, (int64_t[]){2}, 1);
    assert_int_equal(npy_read_i32(tmp("f.npy"), &a, err, sizeof err), MHA_EFORMAT);
    assert_non_null(
        strstr(err, "dtype '<f4' (float32) is not accepted here, expected '<i4' (int32)"));
    /* and a tensor reader does not take int32 */
    assert_int_equal(npy_read(tmp("t.npy"), &a, err, sizeof err), MHA_EFORMAT);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_packed_and_paged_run),
        cmocka_unit_test(test_bad_index_files),
        cmocka_unit_test(test_bad_flag_combinations),
        cmocka_unit_test(test_read_i32),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
