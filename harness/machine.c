/* machine.c - what this machine is: cpuid identity and ISA flags, hwloc
 * topology and caches (raw and clamped), the measured FP32 FMA peak per ISA
 * (kernels/peak.c's loops against a measured clock) and memory read bandwidth.
 * Built without SIMD flags like the rest of the harness. */
#include "machine.h"

#include <cpuid.h>
#include <ctype.h>
#include <hwloc.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "ops.h"
#include "select.h"
#include "stats.h"

#define KIB ((uint64_t)1024)
#define MIB (1024 * KIB)
#define GIB (1024 * MIB)

/* ---- cpuid ------------------------------------------------------------- */

typedef struct {
    unsigned leaf, subleaf;
    int reg; /* 0 eax, 1 ebx, 2 ecx, 3 edx */
    int bit;
    const char *name;
} cpu_flag;

/* The flags that matter to attention kernels and their fast paths, in the
 * names Linux's /proc/cpuinfo uses. All of them fit machine_info.flags. */
static const cpu_flag cpu_flags[] = {
    {1, 0, 3, 26, "sse2"},        {1, 0, 2, 0, "sse3"},        {1, 0, 2, 9, "ssse3"},
    {1, 0, 2, 19, "sse4_1"},      {1, 0, 2, 20, "sse4_2"},     {1, 0, 2, 28, "avx"},
    {7, 0, 1, 5, "avx2"},         {1, 0, 2, 12, "fma"},        {1, 0, 2, 29, "f16c"},
    {7, 0, 1, 8, "bmi2"},         {7, 0, 1, 16, "avx512f"},    {7, 0, 1, 17, "avx512dq"},
    {7, 0, 1, 28, "avx512cd"},    {7, 0, 1, 30, "avx512bw"},   {7, 0, 1, 31, "avx512vl"},
    {7, 0, 1, 21, "avx512ifma"},  {7, 0, 2, 1, "avx512_vbmi"}, {7, 0, 2, 6, "avx512_vbmi2"},
    {7, 0, 2, 11, "avx512_vnni"}, {7, 1, 0, 5, "avx512_bf16"}, {7, 0, 3, 23, "avx512_fp16"},
    {7, 1, 0, 4, "avx_vnni"},     {7, 0, 3, 24, "amx_tile"},   {7, 0, 3, 22, "amx_bf16"},
    {7, 0, 3, 25, "amx_int8"},
};

static void describe_cpuid(machine_info *m) {
    mha_cpu_id id;
    mha_cpu_identity(&id);
    snprintf(m->vendor, sizeof m->vendor, "%s", id.vendor);
    snprintf(m->model, sizeof m->model, "%s", id.model);
    m->family = id.family;
    m->model_id = id.model_id;
    m->stepping = id.stepping;

    unsigned r[4];
    if (!__get_cpuid(0, &r[0], &r[1], &r[2], &r[3])) return;
    const unsigned max_leaf = r[0];

    /* The three leaves the flags live in; absent leaves read as all zero
     * (leaf 7 subleaf 1 exists only when subleaf 0's eax says so). */
    unsigned l1[4] = {0}, l70[4] = {0}, l71[4] = {0};
    if (max_leaf >= 1) __get_cpuid(1, &l1[0], &l1[1], &l1[2], &l1[3]);
    if (max_leaf >= 7) __get_cpuid_count(7, 0, &l70[0], &l70[1], &l70[2], &l70[3]);
    if (max_leaf >= 7 && l70[0] >= 1) __get_cpuid_count(7, 1, &l71[0], &l71[1], &l71[2], &l71[3]);
    size_t o = 0;
    for (size_t i = 0; i < sizeof cpu_flags / sizeof cpu_flags[0]; i++) {
        const cpu_flag *f = &cpu_flags[i];
        const unsigned *regs = f->leaf == 1 ? l1 : f->subleaf == 0 ? l70 : l71;
        if (!((regs[f->reg] >> f->bit) & 1)) continue;
        const size_t n = strlen(f->name);
        if (o + n + 2 > sizeof m->flags) break;
        if (o) m->flags[o++] = ' ';
        memcpy(m->flags + o, f->name, n);
        o += n;
    }
    m->flags[o] = '\0';
}

/* ---- hwloc topology and cache clamping ----------------------------------- */

/* Plausible per-object cache sizes. hwloc reports what the (virtual) firmware
 * says, and VMs say odd things: L3 = 0, an L3 of the whole host or smaller than
 * the L2, L2 = 0 or 16 MiB. The cache models only need the right order of
 * magnitude, so out-of-range values are clamped to the nearest bound and
 * unknown (0) ones get a typical size; both set the *_clamped flag and the raw
 * value is kept for the record.
 *   L1d [16 KiB, 256 KiB]: 16 KiB (Bulldozer) is the smallest x86 L1d since
 *     2011; today's cores have 32-48 KiB, Apple-class cores 128 KiB; 256 KiB
 *     leaves headroom. Unknown -> 32 KiB.
 *   L2 [128 KiB, 8 MiB]: per-core L2s run 256 KiB - 3 MiB and the shared L2 of
 *     an Atom cluster 4 MiB; below 128 KiB or above 8 MiB is a misreport.
 *     Unknown -> 1 MiB.
 *   L3 [1 MiB, 1 GiB] and >= L2: one L3 object (one CCD on AMD, one socket's
 *     mesh on Intel) is 2 MiB - 128 MiB (96 MiB on V-Cache parts; 1 GiB is far
 *     above anything shipped), and an L3 smaller than the L2 it backs is a
 *     misreport. Unknown -> 8 MiB (or the L2 when larger). */
static uint64_t clamp_cache(uint64_t raw, uint64_t lo, uint64_t hi, uint64_t unknown,
                            int *clamped) {
    uint64_t v = raw == 0 ? unknown : raw < lo ? lo : raw > hi ? hi : raw;
    *clamped = v != raw;
    return v;
}

static void describe_hwloc(machine_info *m) {
    hwloc_topology_t topo;
    if (hwloc_topology_init(&topo) != 0) return;
    if (hwloc_topology_load(topo) == 0) {
        const int cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
        const int pus = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
        const int packages = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE);
        const int numa = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
        m->cores = cores > 0 ? cores : 0;
        m->pus = pus > 0 ? pus : 0;
        m->packages = packages > 0 ? packages : 0;
        m->numa_nodes = numa > 0 ? numa : 0;
        m->l3_raw = mha_hwloc_cache_size(topo, HWLOC_OBJ_L3CACHE);
    }
    hwloc_topology_destroy(topo);
}

void machine_describe(machine_info *m) {
    memset(m, 0, sizeof *m);
    describe_cpuid(m);
    describe_hwloc(m);
    /* hwloc failed or found no cores: the OS's processor count stands in. */
    if (m->pus <= 0) {
        const long n = sysconf(_SC_NPROCESSORS_ONLN);
        m->pus = n > 0 ? (int)n : 1;
    }
    if (m->cores <= 0 || m->cores > m->pus) m->cores = m->pus;

    /* L1d and L2: the library's reading and clamp (the cache model's inputs). */
    mha_cache_sizes(&m->l1d, &m->l2, &m->l1d_raw, &m->l2_raw);
    m->l1d_clamped = m->l1d != m->l1d_raw;
    m->l2_clamped = m->l2 != m->l2_raw;
    m->l3 = clamp_cache(m->l3_raw, 1 * MIB, 1 * GIB, 8 * MIB, &m->l3_clamped);
    if (m->l3 < m->l2) {
        m->l3 = m->l2;
        m->l3_clamped = 1;
    }
}

/* ---- clock and FMA peak ------------------------------------------------- */

/* A dependent chain of integer adds, 8 per iteration: add reg, reg has a
 * 1-cycle latency on every current x86 core, so the loop runs at
 * 8 cycles per iteration (the loop counter is a separate, parallel chain).
 * A register operand, not an immediate, keeps the renamer from folding it. */
static void add_chain(int64_t iters) {
    uint64_t x = 0, one = 1;
    int64_t n = iters;
    __asm__ __volatile__(".p2align 5\n"
                         "1:\n\t"
                         "add %[one], %[x]\n\t"
                         "add %[one], %[x]\n\t"
                         "add %[one], %[x]\n\t"
                         "add %[one], %[x]\n\t"
                         "add %[one], %[x]\n\t"
                         "add %[one], %[x]\n\t"
                         "add %[one], %[x]\n\t"
                         "add %[one], %[x]\n\t"
                         "dec %[n]\n\t"
                         "jnz 1b\n\t"
                         : [x] "+r"(x), [n] "+r"(n)
                         : [one] "r"(one)
                         : "cc");
}
#define ADD_CHAIN_CYCLES 8

/* Seconds one call of the loop takes. */
static double time_add_chain(int64_t iters) {
    const double t0 = now_s();
    add_chain(iters);
    return now_s() - t0;
}

typedef double (*peak_fn)(int64_t iters);

/* Iterations of f that take about `seconds` (timed through `timed`), found by
 * doubling from `iters` until one run lasts >= 2 ms (which also warms up). */
static int64_t calibrate(double (*timed)(peak_fn, int64_t), peak_fn f, int64_t iters,
                         double seconds) {
    double t = timed(f, iters);
    while (t < 2e-3 && iters < ((int64_t)1 << 40)) {
        iters *= 2;
        t = timed(f, iters);
    }
    const double scaled = (double)iters * seconds / (t > 0 ? t : 1e-9);
    return scaled < 1 ? 1 : scaled > 1e15 ? (int64_t)1e15 : (int64_t)scaled;
}

static double timed_peak(peak_fn f, int64_t iters) {
    const double t0 = now_s();
    f(iters);
    return now_s() - t0;
}

static double timed_clock(peak_fn f, int64_t iters) {
    (void)f;
    return time_add_chain(iters);
}

/* The measurement: after a warm-up, TRIALS rounds of (peak loop, clock loop),
 * each about its share of the budget. Rate and clock are each the best over
 * the rounds: an interruption (another process, a VM exit) only ever makes a
 * round slower, so the maximum is the undisturbed figure. The clock loop runs
 * right after the FMA loop so it sees the frequency the FMA work left (AVX-512
 * licences on Intel). nominal = 2 pipes x lanes x 2 FLOP x GHz: a core with
 * one FMA pipe, or one that splits 512-bit ops into two 256-bit halves (Zen 4),
 * measures about 50% of it, which is the point of reporting both. */
#define PEAK_TRIALS 5
mha_status machine_fma_peak(mha_isa isa, double seconds_budget, machine_peak *out) {
    if (!out || (unsigned)isa >= MHA_ISA_COUNT) return MHA_EINVAL;
    memset(out, 0, sizeof *out);
    if (isa > mha_isa_detected() || isa > mha_isa_active()) return MHA_EUNSUPPORTED;
    if (!(seconds_budget > 0.01)) seconds_budget = 0.01; /* also catches NaN */
    if (seconds_budget > 60) seconds_budget = 60;

    const mha_isa_ops *ops = mha_ops_for(isa);
    const peak_fn f = ops->fma_peak_loop;
    const double warm = 0.1 * seconds_budget;
    const double per_trial = 0.9 * seconds_budget / PEAK_TRIALS;
    int64_t peak_iters = calibrate(timed_peak, f, 1024, 0.8 * per_trial);
    int64_t clock_iters = calibrate(timed_clock, f, 4096, 0.2 * per_trial);
    /* Warm-up: bring the core to its steady clock for this kind of work. */
    const double t_warm = now_s();
    while (now_s() - t_warm < warm) f(peak_iters / 4 + 1);

    double best_gflops = 0, best_ghz = 0;
    for (int t = 0; t < PEAK_TRIALS; t++) {
        const double t0 = now_s();
        const double flop = f(peak_iters);
        const double t1 = now_s();
        const double tc = time_add_chain(clock_iters);
        if (t1 > t0 && flop / (t1 - t0) * 1e-9 > best_gflops) best_gflops = flop / (t1 - t0) * 1e-9;
        const double ghz = (double)clock_iters * ADD_CHAIN_CYCLES / (tc > 0 ? tc : 1e-9) * 1e-9;
        if (ghz > best_ghz) best_ghz = ghz;
    }
    out->gflops = best_gflops;
    out->ghz = best_ghz;
    out->nominal_gflops = 2.0 * ops->lanes * 2.0 * best_ghz;
    return MHA_OK;
}

/* ---- memory read bandwidth ------------------------------------------------ */

/* 256 MiB: 8x the 32 MiB L3 of this class of machine and far beyond any L3
 * object we clamp to, so every pass streams from DRAM. */
#define BW_BYTES (256 * MIB)

static volatile uint64_t bw_sink;

double machine_read_bandwidth(int threads, double seconds_budget) {
    if (threads <= 0) threads = omp_get_num_procs();
    if (!(seconds_budget > 0)) seconds_budget = 0.05;
    size_t bytes = BW_BYTES;
    uint64_t *buf = NULL;
    while (bytes >= 32 * MIB && !(buf = aligned_alloc(4096, bytes))) bytes /= 2;
    if (!buf) return 0.0;
    const size_t n = bytes / sizeof *buf;
    /* Slices summed with the widest loads the active ISA has (kernels/peak.c):
     * a baseline SSE2 loop leaves one core short of the memory's bandwidth. */
    uint64_t (*const sum_slice)(const uint64_t *, size_t) = mha_ops_for(mha_isa_active())->read_sum;

    double best = 0.0;
    uint64_t total = 0;
    int stop = 0;
    double t_start = 0, t0 = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
    {
        const size_t nth = (size_t)omp_get_num_threads(), tid = (size_t)omp_get_thread_num();
        /* Whole 4 KiB pages per thread, each thread's slice touched first by
         * that thread (NUMA first-touch) and read only by it. */
        const size_t per = (n / nth) & ~(size_t)511;
        const size_t lo = tid * per, hi = tid + 1 == nth ? n : lo + per;
        for (size_t i = lo; i < hi; i++) buf[i] = i;
#pragma omp single
        t_start = now_s();
        /* Pass 0 warms up (page tables, clocks); then passes until the
         * budget is spent, at least 3 and at most 20 timed ones. */
        for (int pass = 0; !stop; pass++) {
#pragma omp single
            t0 = now_s();
            total += sum_slice(buf + lo, hi - lo);
#pragma omp barrier
#pragma omp single
            {
                const double t1 = now_s(), dt = t1 - t0;
                if (pass > 0 && dt > 0 && (double)bytes / dt > best) best = (double)bytes / dt;
                stop = pass >= 20 || (pass >= 3 && t1 - t_start >= seconds_budget);
            }
        }
    }
    bw_sink = total;
    free(buf);
    return best * 1e-9;
}

/* ---- stable CPU key --------------------------------------------------------- */

void machine_cpu_key(const machine_info *m, char *out, size_t len) {
    mha_cpu_key_from(m->vendor, m->model, m->family, m->model_id, out, len);
}
