/* mach_info.h - what this machine is: CPU identity and ISA flags (cpuid), cores
 * and caches (hwloc, raw and clamped), each ISA level's compute units measured
 * (the ops table's rows: FMA, bf16 dot product, tiles, exp) and memory read
 * bandwidth. Used by `mhabench info`, the sweep's JSON context and
 * the cache-model defaults. */
#ifndef MHA_HARNESS_MACHINE_H
#define MHA_HARNESS_MACHINE_H

#include <stddef.h>
#include <stdint.h>
#include "mha.h"
#include "mha_private.h" /* kernels/ops.h: the units */

typedef struct {
    char model[64];  /* cpuid brand string, trimmed */
    char vendor[16]; /* "AuthenticAMD" */
    int family, model_id, stepping;
    char flags[256]; /* space separated ISA flags relevant here: "sse2 avx avx2 fma avx512f ..." */
    /* Counted within the CPUs the process was given at start (taskset,
     * numactl, a cgroup): what the harness may use. cores_machine: the whole
     * machine's cores, larger only under such a restriction. */
    int cores, pus, packages, numa_nodes, cores_machine;
    /* Per-core L1d/L2, shared L3 in bytes: as hwloc reports them and clamped
     * to plausible ranges (VMs report odd sizes; 0 = unknown). */
    uint64_t l1d_raw, l2_raw, l3_raw;
    uint64_t l1d, l2, l3;
    int l1d_clamped, l2_clamped, l3_clamped; /* 1 where clamping changed the value */
} machine_info;

/* Fills *m from cpuid and hwloc. Never fails: unknown fields are 0 / "". */
void machine_describe(machine_info *m);

/* Loads hwloc's topology (a hwloc_topology_t) restricted to the CPUs the
 * process was given at start, so that binding and counting stay inside a
 * `taskset`; *cores_machine (when not NULL) gets the unrestricted core count.
 * 0 on success (destroy it with hwloc_topology_destroy), -1 when hwloc fails. */
int machine_topology_load(struct hwloc_topology **topo, int *cores_machine);

/* One compute unit of a level measured: its ops-table row (kernels/ops.h's
 * mha_unit) and what its loop did here. */
typedef struct {
    const mha_unit *unit;
    double rate;    /* single thread, G unit->work per second (GFLOP/s, Gexp/s) */
    double ghz;     /* the core clock measured right after its loop */
    double nominal; /* unit->nominal_per_cycle x ghz; 0 where the row states none */
} machine_unit_peak;

typedef struct {
    double gflops;         /* the FMA's rate (the level's fp32 unit): units[] has it too */
    double ghz;            /* the core clock during it */
    double nominal_gflops; /* 2 FMA pipes x lanes x 2 FLOP x ghz */
    /* the first bf16 unit's rate (vdpbf16ps, 2 FLOP per bf16 multiply-add:
     * 64 per zmm instruction); 0 where the level has none */
    double bf16_gflops;
    int nunits;
    machine_unit_peak units[MHA_UNITS_MAX]; /* every unit of the level, in its table's order */
} machine_peak;

/* Measures every compute unit of an ISA level the CPU runs (the level's
 * ops-table rows: FMA, bf16 dot product, tiles, exp), each its loop alone
 * (register or L1 resident) against a measured clock, ~seconds_budget per
 * unit. Returns MHA_EUNSUPPORTED for a level that does not run here (not
 * on the CPU, which for amx means mha_amx_status refused it, or above the
 * MHA_ISA cap). */
mha_status machine_unit_peaks(mha_isa isa, double seconds_budget, machine_peak *out);
/* The same for one unit, row `unit` of the level's table (MHA_EINVAL for
 * no such row). */
mha_status machine_one_unit_peak(mha_isa isa, int unit, double seconds_budget,
                                 machine_unit_peak *out);
/* The FMA ceiling of `threads` cores together, relative to `threads` x one
 * core: the ISA's peak loop on every thread at once (OpenMP, each thread
 * timed; best of a few trials of the slowest thread), about seconds_budget.
 * A shared VM's cores need not add up (SMT siblings, a host that caps the
 * package): on the AMD VMs 1.96-1.98x for 2 threads. Returns the ratio
 * (<= about 1), or 0 when the ISA does not run here. */
double machine_fma_ceiling(mha_isa isa, int threads, double seconds_budget);

/* The memory levels a working set can live in, and the bytes the bandwidth
 * probe reads at each with `threads` threads (in all): half of each thread's
 * L1d or L2, half of the L3, and DRAM = max(256 MiB, 4 x L3) (at most 2 GiB),
 * so each probe stays within its level (and DRAM's is not an L3 hit). */
typedef enum { MACH_L1, MACH_L2, MACH_L3, MACH_DRAM, MACH_LEVELS } machine_level;
const char *machine_level_name(machine_level l); /* "L1", "L2", "L3", "DRAM" */
size_t machine_level_probe_bytes(const machine_info *m, machine_level l, int threads);
/* The level a working set of bytes (read by threads threads) fits: the first
 * whose capacity (L1d or L2 per thread, the L3) holds it, else DRAM. */
machine_level machine_level_of(const machine_info *m, double bytes, int threads);

/* Measured read bandwidth in GB/s using `threads` threads, each summing its
 * share of a bytes-long buffer over and over (the widest loads the active ISA
 * has); machine_read_bandwidth is the DRAM one. */
double machine_read_bandwidth_bytes(int threads, size_t bytes, double seconds_budget);
double machine_read_bandwidth(const machine_info *m, int threads, double seconds_budget);

/* Stable key for per-CPU files: e.g. "amd-epyc-f26m2-avx512". */
void machine_cpu_key(const machine_info *m, char *out, size_t len);

#endif
