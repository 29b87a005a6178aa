/* mach_measure.h - this machine measured once per run: mach_info.c's facts
 * plus single-thread rates of every compute unit (the ops tables' rows: FMA,
 * bf16 dot product, tiles, exp) per ISA, the all-core FMA ceiling and
 * each level's read bandwidth (1 thread and all cores), the retakes that keep
 * a disturbed take from setting a peak too low, the per-row peak and
 * bandwidth a roofline is held to, and hwloc thread pinning. The result
 * file's context keys (fmt_results.h) are written from it. */
#ifndef MHA_HARNESS_MACH_MEASURE_H
#define MHA_HARNESS_MACH_MEASURE_H

#include "mach_info.h"
#include "mha.h"
#include "mha_private.h"

/* This machine, measured once per run. */
typedef struct {
    machine_info m;
    char cpu_key[128];
    /* Measured single-thread rate of each compute unit of each ISA level,
     * [level][the unit's row in mha_ops_for(level)->units]: GFLOP/s
     * (Gexp/s for exp); 0 for levels that do not run here (not on the CPU,
     * or above the MHA_ISA cap). results_unit_rate reads it. */
    double unit_rate[MHA_ISA_COUNT][MHA_UNITS_MAX];
    /* Every core's FMA loop at once against bw_threads_all x one core
     * (machine_fma_ceiling, the top ISA): multi-thread peaks are scaled by
     * it (results_peak_at). 1 on one core. */
    double fma_ceiling_all;
    double read_bw_1t, read_bw_all;  /* GB/s from DRAM, 1 thread and all cores */
    int bw_threads_all;              /* the thread count of read_bw_all */
    double level_bw[MACH_LEVELS][2]; /* GB/s per level (mach_info.h), [0] 1 thread, [1] all */
    int measure_tries;               /* 1, or 2 when the all-core figures were retaken */
    int peak_takes;                  /* peak retakes since (results_retake_peaks) */
    int disturbed;                   /* the best of the tries still looked disturbed */
} results_machine;

/* The measured rate of unit u (a row of mha_ops_for(isa)->units), 0 when
 * not measured; results_fp32_peak: the FMA's (the level's fp32 unit), 0
 * for a level that does not run here. */
double results_unit_rate(const results_machine *rm, mha_isa isa, const mha_unit *u);
double results_fp32_peak(const results_machine *rm, mha_isa isa);

/* Describes the machine and measures peaks (about budget_s per ISA) and read
 * bandwidth (about budget_s each); with retake (a run with multi-thread
 * rows), when the cores together look disturbed (mach_measure.c:
 * machine_disturbed) takes the all-core figures once more, keeping the better
 * of each. Bind threads first so the all-core bandwidth runs pinned like the
 * benchmarks. */
void results_measure_machine(results_machine *rm, double budget_s, int retake);

/* The peaks measured again, each kept at the best of its takes (a
 * disturbance only ever lowers a peak): the single-thread rates of ISA
 * isa's units that serve rows' FLOPs (the FMA, the bf16 ones; -1: every ISA
 * that runs here; exp, no row's peak, is not retaken) and, with all_cores,
 * the all-core ceiling. The sweep calls it before each
 * follow-up pass and whenever a row comes within 3% of its peak, so no row
 * reads above 100% of a peak that one disturbed take set too low. */
void results_retake_peaks(results_machine *rm, int isa, int all_cores, double budget_s);
/* results_read_bw_at's figure for (bytes, threads) measured again, the
 * better of the takes kept (and returned). */
double results_read_bw_retake(double bytes, int threads);

/* Single-thread peak (GFLOP/s) of the ISA whose code k runs (mha_kernel_run_isa:
 * its own, or the active one for the BLAS baseline). */
double results_kernel_peak(const results_machine *rm, const mha_kernel *k);
/* Single-thread peak (GFLOP/s) of the unit kernel k uses for Q/O dtype t,
 * from the ops tables' units: for fp32 the FMA of its ISA
 * (results_kernel_peak); for bf16/fp16 the best unit serving t (the
 * mha_unit's dtypes) at or below k's ISA level (vdpbf16ps from avx512bf16,
 * the tiles at amx), else the FMA one (16-bit data widened to fp32). */
double results_peak_for(const results_machine *rm, const mha_kernel *k, mha_dtype t);
/* The machine's single-thread peak for dtype t: the highest over the ISA
 * levels this CPU runs of the FMAs and the units serving t: what a peer's
 * row, whose code we do not know, is held to. */
double results_machine_peak(const results_machine *rm, mha_dtype t);
/* The peak of `threads` threads from a single-thread one: single x threads x
 * the measured all-core ceiling (fma_ceiling_all, interpolated linearly
 * from 1 at one thread), so no row reads above 100% of what the cores can
 * do together. */
double results_peak_at(const results_machine *rm, double single, int threads);
/* Read bandwidth (GB/s) of a level for a thread count: the 1-thread figure
 * for 1, the all-core one otherwise, scaled down linearly below the all-core
 * count. */
double results_level_bw(const results_machine *rm, machine_level level, int threads);
/* Read bandwidth (GB/s) of a plain two-stream read of `bytes` with `threads`
 * threads: the roofline of a kernel that streams that working set (it lands
 * where the working set lives, partly cached sizes included). Measured once
 * per (bytes, threads) per process, about 0.1 s; call it outside timing. */
double results_read_bw_at(double bytes, int threads);

/* Pins OpenMP threads one per hwloc core (round robin when threads > cores):
 * each thread of a `threads`-wide parallel region binds itself, so the
 * runtime's pool keeps the binding for later regions. Returns 1 on success;
 * 0 (with a message) when hwloc cannot bind. */
int results_bind_threads(int threads);

#endif
