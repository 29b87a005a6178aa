/* test_amx.c - the amx level's detection (kernels/cpu.c): each of the four
 * steps (CPUID bits, XCR0, a palette, the OS's permission) judged on given
 * facts with its reason; this machine's answer consistent with the detected
 * level, the same from racing threads, and shown by `mhabench info`; the
 * MHA_ISA=amx cap; the ops row of the level; and the self-check, emulated
 * (the code runs anywhere; a flipped bit is reported with its case and
 * element) and real where the tiles run (else a visible skip); the tiles'
 * unit loop on the emulation; the rules of
 * the emulated twin flash.amxemu (never selected, nobody's twin, refused by
 * sweep and tune). Its numbers are test_bf16.c's (the grid, the bound and
 * the NaN/Inf rows run it too) and verify's. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "mha_private.h"
#include "testutil.h"

static mha_amx_facts passing(void) {
    mha_amx_facts f;
    memset(&f, 0, sizeof f);
    f.leaf7_edx = 1u << 24 | 1u << 22;
    f.osxsave = 1;
    f.xcr0 = 0x60007;
    f.max_leaf = 0x20;
    f.palettes = 1;
    f.perm_asked = 1;
    f.perm_granted = 0x60003;
    return f;
}

static void expect_why(const mha_amx_facts *f, const char *want) {
    char why[256] = "unchanged";
    assert_int_equal(mha_amx_judge(f, why, sizeof why), 0);
    if (strncmp(why, "does not run here: ", 19) != 0 || !strstr(why, want))
        fail_msg("why '%s', expected 'does not run here: ...%s...'", why, want);
}

static void test_judge_steps(void **state) {
    (void)state;
    char why[256] = "x";
    mha_amx_facts f = passing();
    assert_int_equal(mha_amx_judge(&f, why, sizeof why), 1);
    assert_string_equal(why, "");

    f = passing(), f.leaf7_edx &= ~(1u << 24);
    expect_why(&f, "bit 24 (AMX-TILE)");
    f = passing(), f.leaf7_edx &= ~(1u << 22);
    expect_why(&f, "bit 22 (AMX-BF16)");
    f = passing(), f.osxsave = 0;
    expect_why(&f, "OSXSAVE");
    f = passing(), f.xcr0 &= ~(1ull << 18);
    expect_why(&f, "XCR0 = 0x20007 lacks bit 17 (XTILECFG) or 18 (XTILEDATA)");
    f = passing(), f.xcr0 &= ~(1ull << 17);
    expect_why(&f, "XCR0 = 0x40007");
    f = passing(), f.max_leaf = 0x1c;
    expect_why(&f, "CPUID leaf 0x1D reports no tile palette");
    f = passing(), f.palettes = 0;
    expect_why(&f, "CPUID leaf 0x1D reports no tile palette");
    f = passing(), f.perm_rc = -1, f.perm_errno = 22;
    expect_why(&f, "arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA) failed: Invalid argument");
    f = passing(), f.perm_asked = 0;
    expect_why(&f, "failed: not asked");
    f = passing(), f.perm_granted = 0x3;
    expect_why(&f, "ARCH_GET_XCOMP_PERM = 0x3 lacks bit 18");
    /* the first failing step is the one named */
    f = passing(), f.leaf7_edx = 0, f.palettes = 0, f.perm_rc = -1;
    expect_why(&f, "AMX-TILE");
}

static void *ask(void *arg) {
    const char **why = arg;
    return (void *)(intptr_t)mha_amx_status(why);
}

static void test_this_machine(void **state) {
    (void)state;
    const char *why[4] = {NULL, NULL, NULL, NULL};
    pthread_t th[4];
    for (int i = 0; i < 4; i++) assert_int_equal(pthread_create(&th[i], NULL, ask, &why[i]), 0);
    intptr_t runs[4];
    for (int i = 0; i < 4; i++) {
        void *r;
        assert_int_equal(pthread_join(th[i], &r), 0);
        runs[i] = (intptr_t)r;
    }
    for (int i = 1; i < 4; i++) {
        assert_int_equal(runs[i], runs[0]);
        assert_ptr_equal(why[i], why[0]);
    }
    const char *w;
    const int amx = mha_amx_status(&w);
    assert_int_equal(amx, runs[0]);
    print_message("amx tiles: %s\n", w);
    if (amx) {
        assert_string_equal(w, "runs here");
        assert_int_equal(mha_isa_detected(), MHA_ISA_AMX);
    } else {
        assert_true(strncmp(w, "does not run here: ", 19) == 0 && strlen(w) > 19);
        assert_true(mha_isa_detected() < MHA_ISA_AMX);
    }
}

static void test_level_and_cap(void **state) {
    (void)state;
    assert_string_equal(mha_isa_name(MHA_ISA_AMX), "amx");
    assert_int_equal(MHA_ISA_AMX, MHA_ISA_COUNT - 1);
    mha_isa isa;
    assert_int_equal(mha_isa_parse("AMX", &isa), MHA_OK);
    assert_int_equal(isa, MHA_ISA_AMX);
    const char *old = getenv("MHA_ISA");
    char saved[64] = "";
    if (old) snprintf(saved, sizeof saved, "%s", old);
    setenv("MHA_ISA", "amx", 1);
    assert_int_equal(mha_isa_env_status(), MHA_OK);
    assert_int_equal(mha_isa_active(), mha_isa_detected()); /* the top cap changes nothing */
    setenv("MHA_ISA", "avx512bf16", 1);
    assert_true(mha_isa_active() <= MHA_ISA_AVX512BF16);
    if (old)
        setenv("MHA_ISA", saved, 1);
    else
        unsetenv("MHA_ISA");
}

static void test_ops_row(void **state) {
    (void)state;
    const mha_isa_ops *amx = mha_ops_for(MHA_ISA_AMX), *bf = mha_ops_for(MHA_ISA_AVX512BF16),
                      *avx512 = mha_ops_for(MHA_ISA_AVX512);
    assert_non_null(amx);
    assert_int_equal(amx->isa, MHA_ISA_AMX);
    assert_non_null(amx->tile_selfcheck);
    for (int i = 0; i < MHA_ISA_AMX; i++) assert_null(mha_ops_for((mha_isa)i)->tile_selfcheck);
    /* fp32 micro-kernels from avx512, probes from avx512bf16 */
    assert_ptr_equal(amx->linear, avx512->linear);
    assert_ptr_equal(amx->scores_exp, avx512->scores_exp);
    assert_ptr_equal(mha_ops_unit(amx, MHA_F32)->loop, mha_ops_unit(bf, MHA_F32)->loop);
    assert_ptr_equal(mha_ops_unit(amx, MHA_BF16)->loop, mha_ops_unit(bf, MHA_BF16)->loop);
    /* and one unit of its own, the tiles (tile_peak.c), after vdpbf16ps */
    assert_int_equal(amx->nunits, bf->nunits + 1);
    const mha_unit *tiles = &amx->units[2];
    assert_string_equal(tiles->name, "tdpbf16ps");
    for (int u = 0; u < bf->nunits; u++) assert_ptr_not_equal(tiles->loop, bf->units[u].loop);
    /* the bf16 layer its own: the tiles (gemm_amx.c), beside vdpbf16ps's */
    assert_non_null(amx->linear_half);
    assert_ptr_not_equal(amx->linear_half, bf->linear_half);
    assert_ptr_not_equal(amx->linear_half_pack_bytes, bf->linear_half_pack_bytes);
    assert_int_equal(amx->lanes, avx512->lanes);
}

static void test_selfcheck_emulated(void **state) {
    (void)state;
    char why[256] = "x";
    assert_int_equal(mha_tile_selfcheck__amxemu(-1, why, sizeof why), 1);
    assert_string_equal(why, "");
    assert_false(mha_tile_emu_configured()); /* it releases */
    /* a flipped bit (element 3, bit 7) is found and named */
    assert_int_equal(mha_tile_selfcheck__amxemu(3 * 32 + 7, why, sizeof why), 0);
    if (!strstr(why, "the tile self-check differs from the emulation: random 16x16x16, C[0][3]"))
        fail_msg("why '%s'", why);
    /* the sign bit of element 17 */
    assert_int_equal(mha_tile_selfcheck__amxemu(17 * 32 + 31, why, sizeof why), 0);
    assert_non_null(strstr(why, "C[1][1]"));
}

/* The seeded random comparison on the emulated twin: every drawn shape and
 * value range runs through both sides without a fault, and the same seed
 * draws the same products. */
static void test_compare_emulated(void **state) {
    (void)state;
    char why[256] = "x";
    long differ = -1;
    assert_int_equal(mha_tile_compare__amxemu(5, 4000, &differ, why, sizeof why), 4000);
    assert_int_equal(differ, 0);
    assert_string_equal(why, "");
    assert_false(mha_tile_emu_configured());
}

/* The real one where AMX runs: none of 2,000 products differs. */
static void test_compare_real(void **state) {
    (void)state;
    const char *w;
    if (!mha_amx_status(&w)) {
        print_message("skipping the real tile comparison: amx %s\n", w);
        skip();
    }
    char why[256];
    long differ = -1;
    assert_int_equal(mha_ops_for(MHA_ISA_AMX)->tile_compare(9, 2000, &differ, why, sizeof why),
                     2000);
    if (differ) fail_msg("%ld of 2000 differ; the first: %s", differ, why);
}

/* The tiles' unit loop (kernels/tile_peak.c, the amx row tdpbf16ps) on the
 * emulation: 2 x 16 x 16 x 32 FLOPs per TDPBF16PS, four per iteration,
 * nothing for iters <= 0, and the thread's tiles released when it returns;
 * from two threads at once, each configuring its own. */
static void *tile_loop_thread(void *arg) {
    double *flop = arg;
    *flop = mha_tile_peak_loop__amxemu(3);
    return mha_tile_emu_configured() ? arg : NULL;
}

static void test_tile_unit_emulated(void **state) {
    (void)state;
    assert_true(mha_tile_peak_loop__amxemu(0) == 0 && mha_tile_peak_loop__amxemu(-2) == 0);
    assert_false(mha_tile_emu_configured());
    assert_true(mha_tile_peak_loop__amxemu(2) == 2 * 4 * 2.0 * 16 * 16 * 32);
    assert_false(mha_tile_emu_configured());
    pthread_t t[2];
    double flop[2] = {0, 0};
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&t[i], NULL, tile_loop_thread, &flop[i]), 0);
    for (int i = 0; i < 2; i++) {
        void *left_configured = &flop[i];
        assert_int_equal(pthread_join(t[i], &left_configured), 0);
        assert_null(left_configured);
        assert_true(flop[i] == 3 * 4 * 2.0 * 16 * 16 * 32);
    }
}

static void test_selfcheck_real(void **state) {
    (void)state;
    const char *w;
    if (!mha_amx_status(&w)) {
        print_message("skipping the real self-check: amx %s\n", w);
        skip();
    }
    char why[256];
    assert_int_equal(mha_ops_for(MHA_ISA_AMX)->tile_selfcheck(-1, why, sizeof why), 1);
    assert_int_equal(mha_ops_for(MHA_ISA_AMX)->tile_selfcheck(5, why, sizeof why), 0);
}

/* An AMX kernel, its emulated build and the avx512bf16 kernel of the same
 * algorithm: only the emulated one has MHA_KT_EMULATED; it is listed at
 * avx512bf16 (where the emulation runs), the real one at amx; all three
 * take the same dtypes; the real one and the avx512bf16 one are each
 * other's twins at their levels (that the emulated one is nobody's twin,
 * test_registry checks). */
static void check_amx_trio(const char *emu_name, const char *amx_name, const char *bf_name,
                           const mha_kernel **emu, const mha_kernel **amx, const mha_kernel **bf) {
    *emu = mha_kernel_find(emu_name);
    *amx = mha_kernel_find(amx_name);
    *bf = mha_kernel_find(bf_name);
    assert_true(*emu && *amx && *bf);
    assert_true(mha_kernel_traits(*emu) & MHA_KT_EMULATED);
    assert_false(mha_kernel_traits(*amx) & MHA_KT_EMULATED);
    assert_int_equal(mha_kernel_isa(*emu), MHA_ISA_AVX512BF16);
    assert_int_equal(mha_kernel_isa(*amx), MHA_ISA_AMX);
    assert_int_equal(mha_kernel_dtypes(*emu), mha_kernel_dtypes(*bf));
    assert_int_equal(mha_kernel_dtypes(*amx), mha_kernel_dtypes(*bf));
    assert_ptr_equal(mha_kernel_twin(*bf, MHA_ISA_AVX512BF16), *bf);
    assert_ptr_equal(mha_kernel_twin(*amx, MHA_ISA_AVX512BF16), *bf);
    assert_ptr_equal(mha_kernel_twin(*bf, MHA_ISA_AMX), *amx);
}

static void test_emulated_twin(void **state) {
    (void)state;
    const mha_kernel *emu, *amx, *bf;
    check_amx_trio("flash.amxemu", "flash.amx", "flash.avx512bf16", &emu, &amx, &bf);
    /* the tiles' block model on both (MHA_KT_TILES), so that left at 0 their
     * blocks agree and so do their bits (test_bf16's grid compares them) */
    assert_true(mha_kernel_traits(emu) & mha_kernel_traits(amx) & MHA_KT_TILES);
    assert_false(mha_kernel_traits(bf) & MHA_KT_TILES);
    const mha_problem p = {.batch = 1,
                           .heads = 4,
                           .kv_heads = 2,
                           .seq_q = 197,
                           .seq_kv = 197,
                           .head_dim = 80,
                           .dtype = MHA_BF16,
                           .kv_dtype = MHA_BF16};
    const mha_options o = {.threads = 2};
    mha_options re, ra;
    assert_int_equal(mha_resolve_options(emu, &p, &o, &re), MHA_OK);
    assert_int_equal(mha_resolve_options(amx, &p, &o, &ra), MHA_OK);
    assert_int_equal(re.block_q, ra.block_q);
    assert_int_equal(re.block_kv, ra.block_kv);
    if (mha_kernel_supported(emu) != MHA_OK) {
        print_message("skipping the selection check: %s\n", mha_last_error());
        return;
    }
    /* a bf16 problem never defaults to it, whatever runs here */
    const mha_dtype ts[2] = {MHA_BF16, MHA_F16};
    for (int t = 0; t < 2; t++)
        for (int seq = 1; seq <= 4096; seq *= 64) {
            const mha_problem p = {.batch = 1,
                                   .heads = 8,
                                   .kv_heads = 8,
                                   .seq_q = seq,
                                   .seq_kv = seq,
                                   .head_dim = 64,
                                   .causal = 1,
                                   .scale = 0.0f,
                                   .dtype = ts[t],
                                   .kv_dtype = ts[t]};
            const mha_kernel *k = mha_default_kernel(&p);
            assert_non_null(k);
            assert_ptr_not_equal(k, emu);
        }
    if (!mha_amx_status(NULL)) {
        assert_int_equal(mha_kernel_supported(amx), MHA_EUNSUPPORTED);
        assert_non_null(strstr(mha_last_error(), "needs amx"));
    }
}

/* decode.amx (decode_bf16.c on the tiles) and its emulated twin
 * decode.amxemu: the traits, and where decode.amx runs the same bits. Over
 * a dense cache (these cases), above 4 query rows per (sequence, KV head)
 * decode.amx runs the tiles and gives decode.amxemu's bits; at 4 or fewer it
 * hands the problem to decode.bf16fma (the vector version on fp32 FMAs) and
 * gives that kernel's. */
static mha_status run_bf16(const mha_kernel *k, const mha_problem *p, const uint16_t *q,
                           const uint16_t *kc, const uint16_t *vc, uint16_t *out, int threads) {
    const mha_tensor qt = mha_view_typed(q, MHA_BF16, NULL, p->heads, p->seq_q, p->head_dim);
    const mha_tensor kt = mha_view_typed(kc, MHA_BF16, NULL, p->kv_heads, p->seq_kv, p->head_dim);
    const mha_tensor vt = mha_view_typed(vc, MHA_BF16, NULL, p->kv_heads, p->seq_kv, p->head_dim);
    const mha_tensor_mut ot = mha_view_typed_mut(out, MHA_BF16, p->heads, p->seq_q, p->head_dim);
    const mha_options o = {.threads = threads};
    size_t bytes = 0;
    assert_int_equal(mha_workspace_size(k, p, &o, &bytes), MHA_OK);
    void *ws = mha_alloc(bytes ? bytes : 64);
    assert_non_null(ws);
    const mha_status st = mha_attend_ex(k, p, &o, &qt, &kt, &vt, NULL, &ot, ws, bytes);
    mha_free(ws);
    return st;
}

static void test_decode_twin(void **state) {
    (void)state;
    const mha_kernel *emu, *amx, *bf;
    check_amx_trio("decode.amxemu", "decode.amx", "decode.avx512bf16", &emu, &amx, &bf);
    assert_true(mha_kernel_traits(emu) & mha_kernel_traits(amx) & MHA_KT_DECODE);
    const mha_kernel *fma = mha_kernel_find("decode.bf16fma");
    assert_non_null(fma);
    if (mha_kernel_supported(amx) != MHA_OK) {
        print_message("skipping decode.amx against its twin: %s\n", mha_last_error());
        return;
    }
    /* rows per KV head: 8 (one pass), 24 (two, a d tail, causal), 16 (split
     * across 2 threads), 4 (handed to decode.bf16fma) */
    const mha_problem ps[] = {
        {.batch = 1, .heads = 16, .kv_heads = 2, .seq_q = 1, .seq_kv = 300, .head_dim = 80},
        {.batch = 1,
         .heads = 8,
         .kv_heads = 1,
         .seq_q = 3,
         .seq_kv = 197,
         .head_dim = 17,
         .causal = 1},
        {.batch = 1, .heads = 32, .kv_heads = 2, .seq_q = 1, .seq_kv = 1000, .head_dim = 128},
        {.batch = 1, .heads = 8, .kv_heads = 2, .seq_q = 1, .seq_kv = 300, .head_dim = 64},
    };
    uint64_t x = 0x5eed28u;
    for (size_t i = 0; i < sizeof ps / sizeof *ps; i++) {
        mha_problem p = ps[i];
        p.dtype = p.kv_dtype = MHA_BF16;
        const size_t nq = (size_t)(p.heads * p.seq_q * p.head_dim),
                     nk = (size_t)(p.kv_heads * p.seq_kv * p.head_dim);
        uint16_t *q = malloc(nq * 2), *kc = malloc(nk * 2), *vc = malloc(nk * 2),
                 *a = malloc(nq * 2), *b = malloc(nq * 2);
        assert_true(q && kc && vc && a && b);
        uint16_t *all[3] = {q, kc, vc};
        const size_t n[3] = {nq, nk, nk};
        for (int t = 0; t < 3; t++)
            for (size_t e = 0; e < n[t]; e++) { /* bf16 of a float uniform in [-1, 1) */
                x = x * 6364136223846793005ull + 1442695040888963407ull;
                const float f = (float)((double)(x >> 11) * 0x1p-52 - 1.0);
                uint32_t u;
                memcpy(&u, &f, 4);
                all[t][e] = (uint16_t)(u >> 16);
            }
        const int tiles = p.heads / p.kv_heads * p.seq_q > 4;
        const mha_kernel *same = tiles ? emu : fma;
        for (int threads = 1; threads <= 2; threads++) {
            memset(a, 0xff, nq * 2);
            memset(b, 0, nq * 2);
            assert_int_equal(run_bf16(amx, &p, q, kc, vc, a, threads), MHA_OK);
            assert_int_equal(run_bf16(same, &p, q, kc, vc, b, threads), MHA_OK);
            if (memcmp(a, b, nq * 2)) {
                print_error("case %zu threads %d: decode.amx differs from %s\n", i, threads,
                            mha_kernel_name(same));
                fail();
            }
        }
        free(q), free(kc), free(vc), free(a), free(b);
    }
}

/* sweep and tune refuse to time it, naming it (exit 2). */
static void test_emulated_not_timed(void **state) {
    (void)state;
    const char *bench = getenv("MHABENCH");
    if (!bench || !*bench) {
        print_message("skipping: MHABENCH unset\n");
        skip();
    }
    char dir[256], out[4096], err[4096];
    assert_int_equal(tu_mkdtemp(dir, sizeof dir, "test_amx"), 0);
    const char *sweep[] = {"sweep", "--kernels", "flash.amxemu,flash.avx512bf16",
                           "--seq", "64",        NULL};
    assert_int_equal(tu_run(bench, sweep, dir, out, sizeof out, err, sizeof err), 2);
    if (!strstr(err, "sweep: --kernels: flash.amxemu runs emulated instructions"))
        fail_msg("sweep's stderr: %s", err);
    const char *tune[] = {"tune", "--kernels", "flash.amxemu", NULL};
    assert_int_equal(tu_run(bench, tune, dir, out, sizeof out, err, sizeof err), 2);
    if (!strstr(err, "tune: --kernels: flash.amxemu runs emulated instructions"))
        fail_msg("tune's stderr: %s", err);
    tu_rm_tree(dir);
}

/* `mhabench info` shows the same answer, in text and JSON. */
static void test_info(void **state) {
    (void)state;
    const char *bench = getenv("MHABENCH");
    if (!bench || !*bench) {
        print_message("skipping: MHABENCH unset\n");
        skip();
    }
    char dir[256], out[16384], err[4096];
    assert_int_equal(tu_mkdtemp(dir, sizeof dir, "test_amx"), 0);
    const char *w;
    const int amx = mha_amx_status(&w);
    const char *text[] = {"info", "--quick", NULL};
    assert_int_equal(tu_run(bench, text, dir, out, sizeof out, err, sizeof err), 0);
    char line[512];
    snprintf(line, sizeof line, "amx tiles  %s\n", w);
    if (!strstr(out, line)) fail_msg("info lacks '%s':\n%s", line, out);
    const char *json[] = {"info", "--quick", "--json", NULL};
    assert_int_equal(tu_run(bench, json, dir, out, sizeof out, err, sizeof err), 0);
    snprintf(line, sizeof line, "\"amx\": {\"runs\": %s, \"reason\": \"%s\"}",
             amx ? "true" : "false", w);
    if (!strstr(out, line)) fail_msg("info --json lacks '%s':\n%s", line, out);
    /* --tiles: where AMX does not run, exit 2 naming why; --seed alone is refused */
    const char *tiles[] = {"info", "--tiles", "50", "--seed", "3", NULL};
    const int rc = tu_run(bench, tiles, dir, out, sizeof out, err, sizeof err);
    if (amx) {
        assert_int_equal(rc, 0);
        assert_non_null(strstr(out, "50 seeded random ones (seed 3), real vs emulated: 0 differ"));
    } else {
        assert_int_equal(rc, 2);
        snprintf(line, sizeof line, "info: --tiles: the amx level %s", w);
        if (!strstr(err, line)) fail_msg("info --tiles' stderr lacks '%s':\n%s", line, err);
    }
    const char *seed_alone[] = {"info", "--seed", "3", NULL};
    assert_int_equal(tu_run(bench, seed_alone, dir, out, sizeof out, err, sizeof err), 2);
    assert_non_null(strstr(err, "--seed is the seed of --tiles"));
    tu_rm_tree(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_judge_steps),        cmocka_unit_test(test_this_machine),
        cmocka_unit_test(test_level_and_cap),      cmocka_unit_test(test_ops_row),
        cmocka_unit_test(test_selfcheck_emulated), cmocka_unit_test(test_selfcheck_real),
        cmocka_unit_test(test_compare_emulated),   cmocka_unit_test(test_compare_real),
        cmocka_unit_test(test_tile_unit_emulated), cmocka_unit_test(test_info),
        cmocka_unit_test(test_emulated_twin),      cmocka_unit_test(test_decode_twin),
        cmocka_unit_test(test_emulated_not_timed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
