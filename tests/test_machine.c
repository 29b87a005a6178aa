/* test_machine.c - harness/mach_info.c: cpuid + hwloc description (cores, caches
 * raw and clamped), the CPU key's alphabet, and the compute units' contract:
 * the rows of each level's table (fma, vdpbf16ps, tdpbf16ps, exp where
 * expected), MHA_EUNSUPPORTED above the active ISA, a plausible FMA rate
 * (within 0.4x-1.5x of nominal) and exp rate below it, which unit a row's
 * pct_peak is held to and the context keys they are written under, and
 * `mhabench info` listing them. A sanity check, not a timed benchmark: short budgets. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>
#include <sched.h>

#include "fmt_results.h"
#include "mach_info.h"
#include "mha_private.h"
#include "testutil.h"

#define KIB ((uint64_t)1024)
#define MIB (1024 * KIB)
#define GIB (1024 * MIB)

static void test_describe(void **state) {
    (void)state;
    machine_info m;
    machine_describe(&m);
    assert_true(m.cores >= 1);
    assert_true(m.pus >= m.cores);
    assert_true(m.vendor[0] != '\0');
    assert_non_null(strstr(m.flags, "sse2")); /* every x86-64 CPU */
    assert_true(m.family > 0);

    /* Clamped sizes are in the documented ranges, whatever hwloc said. */
    assert_in_range(m.l1d, 16 * KIB, 256 * KIB);
    assert_in_range(m.l2, 128 * KIB, 8 * MIB);
    assert_in_range(m.l3, 1 * MIB, 1 * GIB);
    assert_true(m.l3 >= m.l2);
    /* The raw value is kept: equal to the used one unless clamping changed it. */
    const struct {
        uint64_t raw, used;
        int clamped;
    } c[3] = {{m.l1d_raw, m.l1d, m.l1d_clamped},
              {m.l2_raw, m.l2, m.l2_clamped},
              {m.l3_raw, m.l3, m.l3_clamped}};
    for (int i = 0; i < 3; i++) {
        assert_true(c[i].clamped == 0 || c[i].clamped == 1);
        if (c[i].clamped)
            assert_int_not_equal(c[i].raw, c[i].used);
        else
            assert_int_equal(c[i].raw, c[i].used);
    }
}

static int key_ok(const char *k) {
    if (!*k || k[0] == '-' || k[strlen(k) - 1] == '-') return 0;
    for (const char *p = k; *p; p++) {
        const int ok = (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-';
        if (!ok || (p[0] == '-' && p[1] == '-')) return 0;
    }
    return 1;
}

static void test_cpu_key_here(void **state) {
    (void)state;
    machine_info m;
    machine_describe(&m);
    char key[128], fm[32];
    machine_cpu_key(&m, key, sizeof key);
    print_message("cpu key: %s\n", key);
    assert_true(key_ok(key));
    snprintf(fm, sizeof fm, "-f%dm%d-", m.family, m.model_id);
    assert_non_null(strstr(key, fm));
    const char *isa = mha_isa_name(mha_isa_detected());
    assert_string_equal(key + strlen(key) - strlen(isa), isa);
}

/* Brand strings of other machines, as cpuid spells them. */
static void test_cpu_key_brands(void **state) {
    (void)state;
    static const struct {
        const char *vendor, *model;
        int family, model_id;
        const char *prefix;
    } cases[] = {
        {"GenuineIntel", "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz", 6, 143,
         "intel-xeon-platinum-8481c-f6m143-"},
        {"AuthenticAMD", "AMD Ryzen 9 7950X 16-Core Processor", 25, 97,
         "amd-ryzen-9-7950x-f25m97-"},
        {"AuthenticAMD", "AMD EPYC", 26, 2, "amd-epyc-f26m2-"},
        {"AuthenticAMD", "AMD Ryzen 7 PRO 7840U w/ Radeon 780M Graphics", 25, 116,
         "amd-ryzen-7-pro-7840u-f25m116-"},
        {"", "", 0, 0, "unknown-f0m0-"},
        {"Weird Vendor!", "  $$ Odd__Name  ", 1, 2, "weird-vendor-odd-name-f1m2-"},
    };
    const char *isa = mha_isa_name(mha_isa_detected());
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        machine_info m;
        memset(&m, 0, sizeof m);
        snprintf(m.vendor, sizeof m.vendor, "%s", cases[i].vendor);
        snprintf(m.model, sizeof m.model, "%s", cases[i].model);
        m.family = cases[i].family;
        m.model_id = cases[i].model_id;
        char key[128], want[160];
        machine_cpu_key(&m, key, sizeof key);
        snprintf(want, sizeof want, "%s%s", cases[i].prefix, isa);
        assert_string_equal(key, want);
        assert_true(key_ok(key));
        /* A short buffer truncates but stays terminated and in the alphabet. */
        char small[9];
        memset(small, 'X', sizeof small);
        machine_cpu_key(&m, small, sizeof small);
        assert_true(strlen(small) < sizeof small);
        assert_true(key_ok(small));
    }
}

static void test_peak_invalid(void **state) {
    (void)state;
    machine_peak p;
    assert_int_equal(machine_unit_peaks((mha_isa)MHA_ISA_COUNT, 0.01, &p), MHA_EINVAL);
    assert_int_equal(machine_unit_peaks((mha_isa)-1, 0.01, &p), MHA_EINVAL);
    assert_int_equal(machine_unit_peaks(MHA_ISA_SCALAR, 0.01, NULL), MHA_EINVAL);
}

/* For an ISA the active level covers: a positive rate within (0.4x, 1.5x) of
 * nominal. A core that splits 512-bit FMAs into two 256-bit halves (Zen 4,
 * AMD family 25) measures 49-50% of the 2-pipe nominal (machine.c), so the
 * lower bound sits below half. The machine may be busy with other tests, so
 * up to three attempts (an interruption only lowers a measurement). Above
 * it: MHA_EUNSUPPORTED. */
static void test_peak(void **state) {
    const mha_isa isa = (mha_isa)(intptr_t)*state;
    machine_peak p;
    if (isa > mha_isa_active()) {
        assert_int_equal(machine_unit_peaks(isa, 0.02, &p), MHA_EUNSUPPORTED);
        print_message("%s: above the active ISA %s, MHA_EUNSUPPORTED as expected\n",
                      mha_isa_name(isa), mha_isa_name(mha_isa_active()));
        return;
    }
    /* The interference probe (meas_core.c) at this level: nothing for
     * iters <= 0, a fixed FLOP count per iteration (its rate is compared
     * with its own best, so the count must not depend on the run). */
    double (*probe)(int64_t) = mha_ops_for(isa)->probe_loop;
    assert_non_null(probe);
    assert_true(probe(0) == 0 && probe(-3) == 0);
    const double f1 = probe(1000), f2 = probe(2000);
    assert_true(f1 >= 1000 && f2 == 2 * f1);
    double ratio = 0;
    for (int attempt = 0; attempt < 3; attempt++) {
        assert_int_equal(machine_unit_peaks(isa, 0.05, &p), MHA_OK);
        assert_true(p.gflops > 0);
        assert_true(p.ghz > 0.2 && p.ghz < 10);
        assert_true(p.nominal_gflops > 0);
        ratio = p.gflops / p.nominal_gflops;
        print_message("%s: %.1f GFLOP/s at %.3f GHz, nominal %.1f (%.0f%%)\n", mha_isa_name(isa),
                      p.gflops, p.ghz, p.nominal_gflops, 100 * ratio);
        if (ratio > 0.4 && ratio < 1.5) break;
    }
    assert_true(ratio > 0.4 && ratio < 1.5);
    /* The bf16 dot-product peak: measured exactly where the ISA has the loop;
     * a vdpbf16ps does 2 FLOPs per bf16 element against an FMA's 2 per fp32
     * lane, so it lands near 2x the FMA rate on Zen 4 and 5, but at
     * 0.45-0.50x on the Emerald Rapids VM (family 6 model 207, no AMX: one
     * vdpbf16ps every other cycle against two FMAs a cycle; 82.8 against
     * 167.5 GFLOP/s in `mhabench info`). The bound is below both, with room
     * for noise. */
    if (mha_ops_unit(mha_ops_for(isa), MHA_BF16)) {
        print_message("%s: bf16 %.1f GFLOP/s (%.2fx the FMA peak)\n", mha_isa_name(isa),
                      p.bf16_gflops, p.bf16_gflops / p.gflops);
        assert_true(p.bf16_gflops > 0.3 * p.gflops && p.bf16_gflops < 4 * p.gflops);
    } else {
        assert_true(p.bf16_gflops == 0);
    }
}

/* MHA_EUNSUPPORTED above the active level, tested here even when the CPU has
 * the ISA by capping MHA_ISA one level below it (mha_isa_active() reads the
 * variable on each call); skipped visibly if the cap cannot be applied. */
static void test_unsupported(void **state) {
    const mha_isa isa = (mha_isa)(intptr_t)*state;
    machine_peak p;
    if (isa > mha_isa_active()) {
        assert_int_equal(machine_unit_peaks(isa, 0.02, &p), MHA_EUNSUPPORTED);
        return;
    }
    const char *old = getenv("MHA_ISA");
    char saved[32] = "";
    if (old) snprintf(saved, sizeof saved, "%s", old);
    setenv("MHA_ISA", mha_isa_name((mha_isa)(isa - 1)), 1);
    const int capped = mha_isa_active() < isa;
    const mha_status st = capped ? machine_unit_peaks(isa, 0.02, &p) : MHA_OK;
    if (old)
        setenv("MHA_ISA", saved, 1);
    else
        unsetenv("MHA_ISA");
    if (!capped) {
        print_message("%s is available and MHA_ISA could not cap it here\n", mha_isa_name(isa));
        skip();
    }
    assert_int_equal(st, MHA_EUNSUPPORTED);
}

/* The row of ops named name, or NULL. */
static const mha_unit *unit_named(const mha_isa_ops *ops, const char *name) {
    for (int u = 0; u < ops->nunits; u++)
        if (strcmp(ops->units[u].name, name) == 0) return &ops->units[u];
    return NULL;
}

/* The compute units are rows of each level's table (kernels/ops.c): fma
 * (the first fp32 unit, with a nominal) and exp at every level, vdpbf16ps
 * from avx512bf16 on, tdpbf16ps at amx only; every row complete, names
 * unique within a level, and the result context keys of the FMA and
 * vdpbf16ps rows those the files have always had. */
static void test_units_table(void **state) {
    (void)state;
    for (int i = 0; i < MHA_ISA_COUNT; i++) {
        const mha_isa isa = (mha_isa)i;
        const mha_isa_ops *ops = mha_ops_for(isa);
        assert_true(ops->nunits >= 2 && ops->nunits <= MHA_UNITS_MAX);
        for (int u = 0; u < ops->nunits; u++) {
            const mha_unit *r = &ops->units[u];
            assert_true(r->name && r->serves && r->work && r->loop && r->context_key);
            assert_true(r->nominal_per_cycle >= 0);
            for (int v = u + 1; v < ops->nunits; v++)
                assert_string_not_equal(r->name, ops->units[v].name);
            /* a loop runs nothing for iters <= 0 (only called where it runs) */
            if (isa <= mha_isa_detected()) assert_true(r->loop(0) == 0 && r->loop(-5) == 0);
        }
        const mha_unit *fma = unit_named(ops, "fma"), *ex = unit_named(ops, "exp"),
                       *vdp = unit_named(ops, "vdpbf16ps"), *tdp = unit_named(ops, "tdpbf16ps");
        assert_non_null(fma);
        assert_ptr_equal(mha_ops_unit(ops, MHA_F32), fma);
        assert_true(fma->dtypes == MHA_UNIT_DTYPE(MHA_F32) && fma->nominal_per_cycle > 0);
        assert_string_equal(fma->context_key, "mha_peak_gflops_");
        assert_non_null(ex);
        assert_true(ex->dtypes == 0 && strcmp(ex->work, "exp") == 0);
        assert_string_equal(ex->context_key, "mha_peak_gexps_");
        if (isa >= MHA_ISA_AVX512BF16) {
            assert_non_null(vdp);
            assert_true(vdp->dtypes & MHA_UNIT_DTYPE(MHA_BF16));
            assert_true(vdp->dtypes & MHA_UNIT_DTYPE(MHA_F16));
            assert_string_equal(vdp->context_key, "mha_peak_gflops_bf16_");
            assert_ptr_equal(mha_ops_unit(ops, MHA_BF16), vdp); /* info --json's bf16_gflops */
        } else {
            assert_null(vdp);
            assert_null(mha_ops_unit(ops, MHA_BF16));
        }
        if (isa == MHA_ISA_AMX) {
            assert_non_null(tdp);
            assert_true(tdp->dtypes & MHA_UNIT_DTYPE(MHA_BF16));
            assert_true(tdp->nominal_per_cycle == 1024); /* 16x16x32 MACs per 16 cycles */
        } else {
            assert_null(tdp);
        }
    }
}

/* The exp unit: its loop counts 1024 exponentials a pass, and where its
 * level runs it is measured at a positive rate, above 0.1 Gexp/s at the
 * active level (a scalar polynomial runs several times that; a disturbed
 * machine gets three attempts) and below any core's (1000). */
static void test_exp_rate(void **state) {
    (void)state;
    for (int i = 0; i <= (int)mha_isa_active(); i++) {
        const mha_isa isa = (mha_isa)i;
        const mha_isa_ops *ops = mha_ops_for(isa);
        const mha_unit *ex = unit_named(ops, "exp");
        assert_true(ex->loop(1) == 1024 && ex->loop(3) == 3072);
        const int row = (int)(ex - ops->units);
        machine_unit_peak p;
        double best = 0;
        for (int attempt = 0; attempt < 3 && !(best > 0.1); attempt++) {
            assert_int_equal(machine_one_unit_peak(isa, row, 0.05, &p), MHA_OK);
            assert_ptr_equal(p.unit, ex);
            assert_true(p.rate > 0 && p.rate < 1000 && p.ghz > 0.2);
            assert_true(p.nominal == 0); /* the row states none */
            best = p.rate > best ? p.rate : best;
            if (isa != mha_isa_active()) break;
        }
        print_message("%s: exp %.3f Gexp/s\n", mha_isa_name(isa), best);
        if (isa == mha_isa_active()) assert_true(best > 0.1);
        /* no such row */
        assert_int_equal(machine_one_unit_peak(isa, ops->nunits, 0.01, &p), MHA_EINVAL);
        assert_int_equal(machine_one_unit_peak(isa, -1, 0.01, &p), MHA_EINVAL);
    }
    /* every row of a level is measured, in its order, by machine_unit_peaks */
    machine_peak all;
    const mha_isa top = mha_isa_active();
    assert_int_equal(machine_unit_peaks(top, 0.02, &all), MHA_OK);
    assert_int_equal(all.nunits, mha_ops_for(top)->nunits);
    for (int u = 0; u < all.nunits; u++) {
        assert_ptr_equal(all.units[u].unit, &mha_ops_for(top)->units[u]);
        assert_true(all.units[u].rate > 0);
    }
    assert_true(all.gflops == all.units[0].rate); /* the FMA, the first row */
}

/* The row of name in level isa's table (the test's tables have them). */
static int row_of(mha_isa isa, const char *name) {
    const mha_isa_ops *ops = mha_ops_for(isa);
    const mha_unit *u = unit_named(ops, name);
    assert_non_null(u);
    return (int)(u - ops->units);
}

enum { CTX_LEN = 32768 };
static void collect_key(const char *key, const char *value, void *user) {
    char *buf = user;
    const size_t n = strlen(buf);
    snprintf(buf + n, CTX_LEN - n, "%s=%s\n", key, value);
}

/* Which unit a row is held to, on made-up rates: fp32 the FMA of the
 * kernel's level; bf16/fp16 the best unit serving it at or below the level
 * (vdpbf16ps, the tiles at amx), the FMA where none; exp never; a peer's
 * row the machine's best. And the context writes each rate under its
 * row's key. */
static void test_peak_rule(void **state) {
    (void)state;
    static results_machine rm; /* zero: nothing measured */
    const mha_isa B = MHA_ISA_AVX512BF16, A = MHA_ISA_AMX, V = MHA_ISA_AVX512;
    rm.unit_rate[V][row_of(V, "fma")] = 90;
    rm.unit_rate[V][row_of(V, "exp")] = 1e6; /* no row's peak, however fast */
    rm.unit_rate[B][row_of(B, "fma")] = 100;
    rm.unit_rate[B][row_of(B, "vdpbf16ps")] = 200;
    rm.unit_rate[A][row_of(A, "fma")] = 101;
    rm.unit_rate[A][row_of(A, "vdpbf16ps")] = 199;
    rm.unit_rate[A][row_of(A, "tdpbf16ps")] = 3000;
    rm.unit_rate[A][row_of(A, "exp")] = 4.4;
    const mha_kernel *bf = mha_kernel_find("flash.avx512bf16"), *amx = mha_kernel_find("flash.amx"),
                     *dec = mha_kernel_find("decode.avx512");
    assert_true(bf && amx && dec);
    assert_true(results_peak_for(&rm, bf, MHA_F32) == 100);
    assert_true(results_peak_for(&rm, bf, MHA_BF16) == 200);
    assert_true(results_peak_for(&rm, bf, MHA_F16) == 200);
    assert_true(results_peak_for(&rm, amx, MHA_F32) == 101);
    assert_true(results_peak_for(&rm, amx, MHA_BF16) == 3000);
    assert_true(results_peak_for(&rm, dec, MHA_BF16) == 90); /* widened onto the FMAs */
    assert_true(results_machine_peak(&rm, MHA_F32) == 101);
    assert_true(results_machine_peak(&rm, MHA_BF16) == 3000);
    assert_true(results_fp32_peak(&rm, V) == 90 && results_fp32_peak(&rm, MHA_ISA_SCALAR) == 0);
    /* without the tiles measured, amx's bf16 rows fall to the best vdpbf16ps at or below */
    rm.unit_rate[A][row_of(A, "tdpbf16ps")] = 0;
    assert_true(results_peak_for(&rm, amx, MHA_BF16) == 200);
    rm.unit_rate[A][row_of(A, "tdpbf16ps")] = 3000;

    static char ctx[CTX_LEN];
    ctx[0] = 0;
    const results_run_info ri = {
        .preset = "test", .binding = "none", .repetition_order = "interleaved", .threads_max = 1};
    results_context(&rm, &ri, collect_key, ctx);
    const char *want[] = {
        "\nmha_peak_gflops_avx512=90.00\n",      "\nmha_peak_gexps_avx512=1000000.000\n",
        "\nmha_peak_gflops_avx512bf16=100.00\n", "\nmha_peak_gflops_bf16_avx512bf16=200.00\n",
        "\nmha_peak_gflops_amx=101.00\n",        "\nmha_peak_gflops_bf16_amx=199.00\n",
        "\nmha_peak_gflops_tile_amx=3000.00\n",  "\nmha_peak_gexps_amx=4.400\n"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!strstr(ctx, want[i])) fail_msg("the context lacks '%s':\n%s", want[i] + 1, ctx);
    /* nothing for what was not measured */
    assert_null(strstr(ctx, "mha_peak_gflops_scalar="));
    assert_null(strstr(ctx, "mha_peak_gexps_avx512bf16="));
}

/* The mhabench binary meson passes in MHABENCH; the test skips without it. */
static const char *need_bench(void) {
    const char *bench = getenv("MHABENCH");
    if (!bench || !*bench) {
        print_message("skipping: MHABENCH unset\n");
        skip();
    }
    return bench;
}

/* A process given one CPU (as `taskset -c N` does) counts one core and binds
 * there: `info --json` of a child started with this process's affinity cut
 * to its first CPU reads "cores": 1 and the machine's count beside it. On a
 * 1-CPU machine there is nothing to cut: skipped. */
static void test_info_affinity(void **state) {
    (void)state;
    const char *bench = need_bench();
    cpu_set_t all, one;
    assert_int_equal(sched_getaffinity(0, sizeof all, &all), 0);
    if (CPU_COUNT(&all) < 2) {
        print_message("skipping: this process has %d CPU\n", CPU_COUNT(&all));
        skip();
    }
    int first = 0;
    while (!CPU_ISSET(first, &all)) first++;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    char dir[256], out[32768], err[4096];
    assert_int_equal(tu_mkdtemp(dir, sizeof dir, "test_machine"), 0);
    const char *json[] = {"info", "--quick", "--json", NULL};
    assert_int_equal(sched_setaffinity(0, sizeof one, &one), 0);
    const int rc = tu_run(bench, json, dir, out, sizeof out, err, sizeof err);
    assert_int_equal(sched_setaffinity(0, sizeof all, &all), 0);
    tu_rm_tree(dir);
    assert_int_equal(rc, 0);
    json_object *root = json_tokener_parse(out), *f;
    if (!root) fail_msg("info --json is not JSON:\n%s", out);
    assert_true(json_object_object_get_ex(root, "cores", &f));
    assert_int_equal(json_object_get_int(f), 1);
    assert_true(json_object_object_get_ex(root, "cores_machine", &f));
    machine_info m;
    machine_describe(&m); /* this process: every CPU it was started with */
    assert_int_equal(json_object_get_int(f), m.cores_machine);
    assert_true(m.cores_machine >= m.cores && m.cores >= 1);
    json_object_put(root);
}

/* `mhabench info` lists every level's units from the table: in the text a
 * line per measured unit ("<isa> <unit>"), the names with the reason for a
 * level that does not run; in --json a "units" entry per row (and the
 * fma_peak entries as before). */
static const char *const PEAK_KEYS[5] = {"gflops", "ghz", "nominal_gflops", "pct_nominal",
                                         "bf16_gflops"};
static void test_info_units(void **state) {
    (void)state;
    const char *bench = need_bench();
    char dir[256], out[32768], err[4096];
    assert_int_equal(tu_mkdtemp(dir, sizeof dir, "test_machine"), 0);
    const char *text[] = {"info", "--quick", NULL};
    assert_int_equal(tu_run(bench, text, dir, out, sizeof out, err, sizeof err), 0);
    for (int i = 0; i < MHA_ISA_COUNT; i++) {
        const mha_isa_ops *ops = mha_ops_for((mha_isa)i);
        char line[256];
        if ((mha_isa)i <= mha_isa_active()) {
            for (int u = 0; u < ops->nunits; u++) {
                snprintf(line, sizeof line, "\n%-10s %-10s ", mha_isa_name((mha_isa)i),
                         ops->units[u].name);
                if (!strstr(out, line)) fail_msg("info lacks '%s':\n%s", line + 1, out);
            }
        } else {
            int o = snprintf(line, sizeof line, "\n%-10s", mha_isa_name((mha_isa)i));
            for (int u = 0; u < ops->nunits; u++)
                o += snprintf(line + o, sizeof line - (size_t)o, "%s%s", u ? ", " : " ",
                              ops->units[u].name);
            snprintf(line + o, sizeof line - (size_t)o, ": ");
            if (!strstr(out, line)) fail_msg("info lacks '%s':\n%s", line + 1, out);
        }
    }
    const char *json[] = {"info", "--quick", "--json", NULL};
    assert_int_equal(tu_run(bench, json, dir, out, sizeof out, err, sizeof err), 0);
    tu_rm_tree(dir);
    json_object *root = json_tokener_parse(out), *units, *peaks;
    if (!root) fail_msg("info --json is not JSON:\n%s", out);
    assert_true(json_object_object_get_ex(root, "units", &units));
    assert_true(json_object_object_get_ex(root, "fma_peak", &peaks));
    assert_int_equal(json_object_array_length(peaks), MHA_ISA_COUNT);
    size_t n = 0;
    for (int i = 0; i < MHA_ISA_COUNT; i++) {
        const mha_isa_ops *ops = mha_ops_for((mha_isa)i);
        const int measured = (mha_isa)i <= mha_isa_active();
        json_object *pk = json_object_array_get_idx(peaks, (size_t)i), *f;
        assert_true(json_object_object_get_ex(pk, "measured", &f));
        assert_int_equal(json_object_get_boolean(f), measured);
        if (measured)
            for (int k = 0; k < 5; k++)
                assert_true(json_object_object_get_ex(pk, PEAK_KEYS[k], &f));
        for (int u = 0; u < ops->nunits; u++, n++) {
            json_object *e = json_object_array_get_idx(units, n);
            assert_non_null(e);
            assert_true(json_object_object_get_ex(e, "isa", &f));
            assert_string_equal(json_object_get_string(f), mha_isa_name((mha_isa)i));
            assert_true(json_object_object_get_ex(e, "unit", &f));
            assert_string_equal(json_object_get_string(f), ops->units[u].name);
            char key[96];
            snprintf(key, sizeof key, "%s%s", ops->units[u].context_key, mha_isa_name((mha_isa)i));
            assert_true(json_object_object_get_ex(e, "context_key", &f));
            assert_string_equal(json_object_get_string(f), key);
            assert_true(json_object_object_get_ex(e, "measured", &f));
            assert_int_equal(json_object_get_boolean(f), measured);
            if (measured) {
                assert_true(json_object_object_get_ex(e, "rate", &f));
                assert_true(json_object_get_double(f) > 0);
            } else {
                assert_true(json_object_object_get_ex(e, "reason", &f));
            }
        }
    }
    assert_int_equal(json_object_array_length(units), n);
    json_object_put(root);
}

static void test_read_bandwidth(void **state) {
    (void)state;
    machine_info m;
    machine_describe(&m);
    const double gbs = machine_read_bandwidth(&m, 1, 0.02);
    print_message("read bandwidth, 1 thread: %.1f GB/s\n", gbs);
    /* every level is measurable and the L1 is not slower than DRAM */
    const double l1 =
        machine_read_bandwidth_bytes(1, machine_level_probe_bytes(&m, MACH_L1, 1), 0.02);
    print_message("L1: %.1f GB/s\n", l1);
    assert_true(l1 > gbs);
    assert_int_equal(machine_level_of(&m, (double)m.l1d / 2, 1), MACH_L1);
    assert_int_equal(machine_level_of(&m, (double)m.l2, 1), MACH_L2);
    assert_int_equal(machine_level_of(&m, (double)m.l3, 1), m.l3 > m.l2 ? MACH_L3 : MACH_L2);
    assert_int_equal(machine_level_of(&m, 64.0 * m.l3, 2), MACH_DRAM);
    assert_true(gbs > 0.1 && gbs < 10000);
}

int main(void) {
    /* Per ISA level: its peak, and "unsupported" above the cap (levels > 0). */
    enum { NFIXED = 9, N = NFIXED + 2 * MHA_ISA_COUNT - 1 };
    struct CMUnitTest tests[N] = {
        cmocka_unit_test(test_describe),       cmocka_unit_test(test_cpu_key_here),
        cmocka_unit_test(test_cpu_key_brands), cmocka_unit_test(test_peak_invalid),
        cmocka_unit_test(test_read_bandwidth), cmocka_unit_test(test_units_table),
        cmocka_unit_test(test_exp_rate),       cmocka_unit_test(test_info_units),
        cmocka_unit_test(test_info_affinity),  cmocka_unit_test(test_peak_rule),
    };
    static char names[N][40];
    int n = NFIXED;
    for (int i = 0; i < MHA_ISA_COUNT; i++) {
        snprintf(names[n], sizeof names[n], "test_peak_%s", mha_isa_name((mha_isa)i));
        tests[n] = (struct CMUnitTest){names[n], test_peak, NULL, NULL, (void *)(intptr_t)i};
        n++;
        if (i == 0) continue;
        snprintf(names[n], sizeof names[n], "test_unsupported_%s", mha_isa_name((mha_isa)i));
        tests[n] = (struct CMUnitTest){names[n], test_unsupported, NULL, NULL, (void *)(intptr_t)i};
        n++;
    }
    return _cmocka_run_group_tests("machine", tests, (size_t)n, NULL, NULL);
}
