/* mach_info.c - what this machine is: cpuid identity and ISA flags, hwloc
 * topology and caches (raw and clamped), each level's compute units measured
 * (the ops table's rows, kernels/ops.h: their loops against a measured
 * clock) and memory read bandwidth.
 * Built without SIMD flags like the rest of the harness. */
#include "mach_info.h"

#include <ctype.h>
#include <hwloc.h>
#include <omp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "mha_private.h"
#include "stats.h"

#define KIB ((uint64_t)1024)
#define MIB (1024 * KIB)

/* ---- cpuid ------------------------------------------------------------- */

static void describe_cpuid(machine_info *m) {
    mha_cpu_id id;
    mha_cpu_identity(&id);
    snprintf(m->vendor, sizeof m->vendor, "%s", id.vendor);
    snprintf(m->model, sizeof m->model, "%s", id.model);
    snprintf(m->flags, sizeof m->flags, "%s", id.flags);
    m->family = id.family;
    m->model_id = id.model_id;
    m->stepping = id.stepping;
}

/* ---- hwloc topology ------------------------------------------------------ */

/* The CPUs this process was given (taskset, numactl, a container's cpuset),
 * read before main: the harness binds its threads later, and a thread's own
 * binding must not shrink what the process may use. */
static cpu_set_t start_affinity;
static int start_affinity_known;
__attribute__((constructor)) static void read_start_affinity(void) {
    start_affinity_known = sched_getaffinity(0, sizeof start_affinity, &start_affinity) == 0;
}

int machine_topology_load(hwloc_topology_t *topo, int *cores_machine) {
    if (hwloc_topology_init(topo) != 0) return -1;
    if (hwloc_topology_load(*topo) != 0) {
        hwloc_topology_destroy(*topo);
        return -1;
    }
    if (cores_machine) *cores_machine = hwloc_get_nbobjs_by_type(*topo, HWLOC_OBJ_CORE);
    if (!start_affinity_known) return 0;
    hwloc_bitmap_t allowed = hwloc_bitmap_alloc();
    if (!allowed) return 0;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &start_affinity)) hwloc_bitmap_set(allowed, (unsigned)c);
    const hwloc_const_bitmap_t all = hwloc_topology_get_topology_cpuset(*topo);
    /* Restricted only to a non-empty part of the machine: a mask naming no CPU
     * hwloc knows leaves the whole topology, as the OS would not run us then. */
    if (hwloc_bitmap_intersects(allowed, all) && !hwloc_bitmap_isincluded(all, allowed))
        hwloc_topology_restrict(*topo, allowed, 0);
    hwloc_bitmap_free(allowed);
    return 0;
}

static void describe_hwloc(machine_info *m) {
    hwloc_topology_t topo;
    int cores_machine = 0;
    if (machine_topology_load(&topo, &cores_machine) != 0) return;
    const int cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
    const int pus = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
    const int packages = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE);
    const int numa = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
    m->cores = cores > 0 ? cores : 0;
    m->cores_machine = cores_machine; /* at least cores: machine_describe */
    m->pus = pus > 0 ? pus : 0;
    m->packages = packages > 0 ? packages : 0;
    m->numa_nodes = numa > 0 ? numa : 0;
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
    if (m->cores_machine < m->cores) m->cores_machine = m->cores;

    /* Caches: the library's one reading and clamp (the cache model's inputs). */
    mha_caches c;
    mha_caches_get(&c);
    m->l1d = c.l1d, m->l2 = c.l2, m->l3 = c.l3;
    m->l1d_raw = c.l1d_raw, m->l2_raw = c.l2_raw, m->l3_raw = c.l3_raw;
    m->l1d_clamped = c.l1d != c.l1d_raw;
    m->l2_clamped = c.l2 != c.l2_raw;
    m->l3_clamped = c.l3 != c.l3_raw;
}

/* ---- clock and compute units ------------------------------------------------- */

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

/* One unit's measurement: after a warm-up, TRIALS rounds of (its loop,
 * clock loop), each about its share of the budget. Rate and clock are each
 * the best over the rounds: an interruption (another process, a VM exit)
 * only ever makes a round slower, so the maximum is the undisturbed figure.
 * The clock loop runs right after the unit's so it sees the frequency that
 * work left (AVX-512 licences on Intel, the tiles' lower clock).
 * nominal = the row's work per cycle x GHz (FMA: 2 pipes x lanes x 2 FLOP):
 * a core with one FMA pipe, or one that splits 512-bit ops into two 256-bit
 * halves (Zen 4), measures about 50% of it, which is the point of reporting
 * both. */
#define PEAK_TRIALS 5
static void measure_unit(const mha_unit *u, double seconds_budget, machine_unit_peak *out) {
    const peak_fn f = u->loop;
    const double warm = 0.1 * seconds_budget;
    const double per_trial = 0.9 * seconds_budget / PEAK_TRIALS;
    const int64_t peak_iters = calibrate(timed_peak, f, 1024, 0.8 * per_trial);
    const int64_t clock_iters = calibrate(timed_clock, f, 4096, 0.2 * per_trial);
    /* Warm-up: bring the core to its steady clock for this kind of work. */
    const double t_warm = now_s();
    while (now_s() - t_warm < warm) f(peak_iters / 4 + 1);

    double best_rate = 0, best_ghz = 0;
    for (int t = 0; t < PEAK_TRIALS; t++) {
        const double t0 = now_s();
        const double work = f(peak_iters);
        const double t1 = now_s();
        const double tc = time_add_chain(clock_iters);
        if (t1 > t0 && work / (t1 - t0) * 1e-9 > best_rate) best_rate = work / (t1 - t0) * 1e-9;
        const double ghz = (double)clock_iters * ADD_CHAIN_CYCLES / (tc > 0 ? tc : 1e-9) * 1e-9;
        if (ghz > best_ghz) best_ghz = ghz;
    }
    out->unit = u;
    out->rate = best_rate;
    out->ghz = best_ghz;
    out->nominal = u->nominal_per_cycle * best_ghz;
}

/* The budget's bounds: a NaN or tiny one 0.01 s, at most 60 s. */
static double clamp_budget(double seconds_budget) {
    if (!(seconds_budget > 0.01)) return 0.01; /* also catches NaN */
    return seconds_budget > 60 ? 60 : seconds_budget;
}

mha_status machine_one_unit_peak(mha_isa isa, int unit, double seconds_budget,
                                 machine_unit_peak *out) {
    if (!out || (unsigned)isa >= MHA_ISA_COUNT) return MHA_EINVAL;
    memset(out, 0, sizeof *out);
    const mha_isa_ops *ops = mha_ops_for(isa);
    if (unit < 0 || unit >= ops->nunits) return MHA_EINVAL;
    if (isa > mha_isa_detected() || isa > mha_isa_active()) return MHA_EUNSUPPORTED;
    measure_unit(&ops->units[unit], clamp_budget(seconds_budget), out);
    return MHA_OK;
}

mha_status machine_unit_peaks(mha_isa isa, double seconds_budget, machine_peak *out) {
    if (!out || (unsigned)isa >= MHA_ISA_COUNT) return MHA_EINVAL;
    memset(out, 0, sizeof *out);
    if (isa > mha_isa_detected() || isa > mha_isa_active()) return MHA_EUNSUPPORTED;
    seconds_budget = clamp_budget(seconds_budget);

    const mha_isa_ops *ops = mha_ops_for(isa);
    const mha_unit *fma = mha_ops_unit(ops, MHA_F32), *bf16 = mha_ops_unit(ops, MHA_BF16);
    for (int i = 0; i < ops->nunits && i < MHA_UNITS_MAX; i++) {
        machine_unit_peak *p = &out->units[out->nunits++];
        measure_unit(&ops->units[i], seconds_budget, p);
        if (p->unit == fma) {
            out->gflops = p->rate;
            out->ghz = p->ghz;
            out->nominal_gflops = p->nominal;
        }
        if (p->unit == bf16) out->bf16_gflops = p->rate;
    }
    return MHA_OK;
}

double machine_fma_ceiling(mha_isa isa, int threads, double seconds_budget) {
    if ((unsigned)isa >= MHA_ISA_COUNT || isa > mha_isa_detected() || isa > mha_isa_active())
        return 0;
    if (threads <= 1) return 1;
    seconds_budget = clamp_budget(seconds_budget);
    const peak_fn f = mha_ops_unit(mha_ops_for(isa), MHA_F32)->loop;
    const double per_trial = seconds_budget / (PEAK_TRIALS + 1);
    const int64_t iters = calibrate(timed_peak, f, 1024, 0.8 * per_trial);
    double one = 0, all = 0;
    for (int t = 0; t < PEAK_TRIALS; t++) { /* one thread, then every thread at once */
        const double t0 = now_s(), flop = f(iters), t1 = now_s();
        if (t1 > t0 && flop / (t1 - t0) > one) one = flop / (t1 - t0);
        double slowest = 0, flops = 0;
#pragma omp parallel num_threads(threads) reduction(max : slowest) reduction(+ : flops)
        {
            const double a = now_s();
            flops += f(iters);
            const double b = now_s() - a;
            slowest = b > slowest ? b : slowest;
        }
        if (slowest > 0 && flops / slowest > all) all = flops / slowest;
    }
    /* above 1 only when every single-thread trial was disturbed: the cores
     * cannot beat threads x one undisturbed core */
    const double r = one > 0 ? all / (one * threads) : 0;
    return r > 1 ? 1 : r;
}

/* ---- memory read bandwidth per level -------------------------------------- */

static volatile uint64_t bw_sink;

const char *machine_level_name(machine_level l) {
    static const char *const names[MACH_LEVELS] = {"L1", "L2", "L3", "DRAM"};
    return (unsigned)l < MACH_LEVELS ? names[l] : "?";
}

size_t machine_level_probe_bytes(const machine_info *m, machine_level l, int threads) {
    const size_t t = threads > 0 ? (size_t)threads : 1;
    switch (l) {
    case MACH_L1:
        return (size_t)m->l1d / 2 * t;
    case MACH_L2:
        return (size_t)m->l2 / 2 * t;
    case MACH_L3:
        return (size_t)m->l3 / 2;
    default: {
        size_t b = 4 * (size_t)m->l3;
        b = b < 256 * MIB ? 256 * MIB : b;
        return b > 2048 * MIB ? 2048 * MIB : b;
    }
    }
}

machine_level machine_level_of(const machine_info *m, double bytes, int threads) {
    const double t = threads > 0 ? threads : 1;
    if (bytes <= (double)m->l1d * t) return MACH_L1;
    if (bytes <= (double)m->l2 * t) return MACH_L2;
    if (bytes <= (double)m->l3) return MACH_L3;
    return MACH_DRAM;
}

double machine_read_bandwidth(const machine_info *m, int threads, double seconds_budget) {
    if (threads <= 0) threads = omp_get_num_procs();
    return machine_read_bandwidth_bytes(threads, machine_level_probe_bytes(m, MACH_DRAM, threads),
                                        seconds_budget);
}

/* Reads p[0..n) as two interleaved streams (its halves, 4 KiB at a time), as
 * decode reads K and V: one stream per thread leaves misses out of flight
 * that a two-stream reader gets (one-stream DRAM probe 34.2 GB/s against a
 * decode at 38.5 GB/s, 2 threads, Zen 4 VM). */
static uint64_t read_two_streams(uint64_t (*sum)(const uint64_t *, size_t), const uint64_t *p,
                                 size_t n) {
    enum { CHUNK = 512 }; /* words: 4 KiB */
    const size_t half = n / 2;
    uint64_t t = 0;
    size_t i = 0;
    for (; i + CHUNK <= half; i += CHUNK) t += sum(p + i, CHUNK) + sum(p + half + i, CHUNK);
    return t + sum(p + i, half - i) + sum(p + half + i, n - half - i);
}

double machine_read_bandwidth_bytes(int threads, size_t bytes, double seconds_budget) {
    if (threads <= 0) threads = omp_get_num_procs();
    if (!(seconds_budget > 0)) seconds_budget = 0.05;
    bytes = (bytes + 4095) & ~(size_t)4095;
    if (bytes < 4096 * (size_t)threads) bytes = 4096 * (size_t)threads;
    uint64_t *buf = NULL;
    /* the benchmarks' page policy: mha_alloc puts large buffers on huge pages */
    while (bytes >= 4096 * (size_t)threads &&
           !(buf = bytes >= MHA_HUGE_PAGE ? mha_alloc(bytes) : aligned_alloc(4096, bytes)))
        bytes /= 2;
    if (!buf) return 0.0;
    const size_t n = bytes / sizeof *buf;
    /* A pass reads the buffer `reps` times (at least 32 MiB in all), so even an
     * L1-sized one is timed over milliseconds, not the clock's resolution. */
    const int reps = bytes >= 32 * MIB ? 1 : (int)((32 * MIB + bytes - 1) / bytes);
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
        /* Pass 0 warms up (page tables, clocks, the cache level); then passes
         * until the budget is spent, at least 3 and at most 20 timed ones. */
        for (int pass = 0; !stop; pass++) {
#pragma omp single
            t0 = now_s();
            for (int r = 0; r < reps; r++) total += read_two_streams(sum_slice, buf + lo, hi - lo);
#pragma omp barrier
#pragma omp single
            {
                const double t1 = now_s(), dt = t1 - t0, read = (double)bytes * reps;
                if (pass > 0 && dt > 0 && read / dt > best) best = read / dt;
                stop = pass >= 20 || (pass >= 3 && t1 - t_start >= seconds_budget);
            }
        }
    }
    bw_sink = total;
    mha_free(buf);
    return best * 1e-9;
}

/* ---- stable CPU key --------------------------------------------------------- */

void machine_cpu_key(const machine_info *m, char *out, size_t len) {
    mha_cpu_key_from(m->vendor, m->model, m->family, m->model_id, out, len);
}
