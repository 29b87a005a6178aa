/* mach_measure.c - the machine measured for a run (results_machine): each
 * level's compute units (the ops tables' rows), the all-core FMA ceiling,
 * read bandwidth per level, the retake when the cores together look
 * disturbed, the per-row roofline figures (which unit a row is held to),
 * and hwloc thread pinning. */
#include "mach_measure.h"

#include <hwloc.h>
#include <omp.h>
#include <string.h>

#include "util.h"

double results_unit_rate(const results_machine *rm, mha_isa isa, const mha_unit *u) {
    const mha_isa_ops *ops = mha_ops_for(isa);
    for (int row = 0; ops && u && row < ops->nunits && row < MHA_UNITS_MAX; row++)
        if (&ops->units[row] == u) return rm->unit_rate[isa][row];
    return 0; /* not a row of that level */
}

double results_fp32_peak(const results_machine *rm, mha_isa isa) {
    return results_unit_rate(rm, isa, mha_ops_unit(mha_ops_for(isa), MHA_F32));
}

/* The figures taken with every core at once: the FMA ceiling and each
 * level's all-core read bandwidth (the single-core figures must be in rm). */
static void measure_all_cores(results_machine *rm, double budget_s) {
    rm->bw_threads_all = rm->m.cores > 0 ? rm->m.cores : 1;
    rm->fma_ceiling_all = 1;
    for (int i = MHA_ISA_COUNT - 1; i >= 0 && rm->bw_threads_all > 1; i--)
        if (results_fp32_peak(rm, (mha_isa)i) > 0) { /* the top ISA's loop on every core at once */
            const double c = machine_fma_ceiling((mha_isa)i, rm->bw_threads_all, budget_s);
            if (c > 0) rm->fma_ceiling_all = c;
            break;
        }
    for (int l = 0; l < MACH_LEVELS; l++)
        rm->level_bw[l][1] =
            rm->bw_threads_all == 1
                ? rm->level_bw[l][0]
                : machine_read_bandwidth_bytes(
                      rm->bw_threads_all,
                      machine_level_probe_bytes(&rm->m, (machine_level)l, rm->bw_threads_all),
                      budget_s);
    rm->read_bw_all = rm->level_bw[MACH_DRAM][1];
}

static void measure_once(results_machine *rm, double budget_s) {
    for (int i = 0; i < MHA_ISA_COUNT; i++) {
        machine_peak p;
        if (machine_unit_peaks((mha_isa)i, budget_s, &p) == MHA_OK)
            for (int u = 0; u < p.nunits; u++) rm->unit_rate[i][u] = p.units[u].rate;
    }
    for (int l = 0; l < MACH_LEVELS; l++)
        rm->level_bw[l][0] = machine_read_bandwidth_bytes(
            1, machine_level_probe_bytes(&rm->m, (machine_level)l, 1), budget_s);
    rm->read_bw_1t = rm->level_bw[MACH_DRAM][0];
    measure_all_cores(rm, budget_s);
}

/* Evidence that a measurement of the machine was disturbed (another tenant
 * on a core): the cores together below 0.9 x one core each, or a private
 * level (L1, L2) read on every core at once not even 1.5x one core's rate
 * (seen on the Zen 4 VM: a sweep's start measured a ceiling of 0.50 and L1 /
 * L2 "all cores" at one core's rate, then every 2-thread row read above
 * 100% of its level). */
static int machine_disturbed(const results_machine *rm) {
    if (rm->bw_threads_all <= 1) return 0;
    if (rm->fma_ceiling_all < 0.9) return 1;
    for (int l = MACH_L1; l <= MACH_L2; l++)
        if (rm->level_bw[l][1] < 1.5 * rm->level_bw[l][0]) return 1;
    return 0;
}

static double max2(double a, double b) {
    return a > b ? a : b;
}

void results_measure_machine(results_machine *rm, double budget_s, int retake) {
    memset(rm, 0, sizeof *rm);
    machine_describe(&rm->m);
    machine_cpu_key(&rm->m, rm->cpu_key, sizeof rm->cpu_key);
    measure_once(rm, budget_s);
    rm->measure_tries = 1;
    /* Disturbance only ever lowers a figure: the all-core ones are taken
     * once more when they look disturbed, and the better of each is kept. */
    if (retake && machine_disturbed(rm)) {
        results_machine again = *rm;
        measure_all_cores(&again, budget_s);
        rm->measure_tries = 2;
        rm->fma_ceiling_all = max2(rm->fma_ceiling_all, again.fma_ceiling_all);
        for (int l = 0; l < MACH_LEVELS; l++)
            rm->level_bw[l][1] = max2(rm->level_bw[l][1], again.level_bw[l][1]);
        rm->read_bw_all = rm->level_bw[MACH_DRAM][1];
    }
    rm->disturbed = machine_disturbed(rm);
}

double results_kernel_peak(const results_machine *rm, const mha_kernel *k) {
    return results_fp32_peak(rm, mha_kernel_run_isa(k));
}

static int is_half(mha_dtype t) {
    return t == MHA_BF16 || t == MHA_F16;
}

/* The best measured unit serving dtype t at levels 0..top. */
static double best_serving(const results_machine *rm, int top, mha_dtype t) {
    double best = 0;
    for (int i = 0; i <= top && i < MHA_ISA_COUNT; i++) {
        const mha_isa_ops *ops = mha_ops_for((mha_isa)i);
        for (int u = 0; u < ops->nunits; u++)
            if (ops->units[u].dtypes & MHA_UNIT_DTYPE(t))
                best = max2(best, results_unit_rate(rm, (mha_isa)i, &ops->units[u]));
    }
    return best;
}

double results_peak_for(const results_machine *rm, const mha_kernel *k, mha_dtype t) {
    /* A bf16/fp16 problem on a kernel whose level has a 16-bit unit
     * (flash.avx512bf16: vdpbf16ps; flash.amx: the tiles) is held to the
     * best such unit at or below its level; everything else (fp32, and
     * decode's widen-then-FMA on 16-bit caches) to the FMA of its ISA. */
    const mha_isa isa = mha_kernel_run_isa(k);
    const double half = is_half(t) ? best_serving(rm, (int)isa, t) : 0;
    return half > 0 ? half : results_kernel_peak(rm, k);
}

double results_machine_peak(const results_machine *rm, mha_dtype t) {
    double best = best_serving(rm, MHA_ISA_COUNT - 1, MHA_F32);
    return is_half(t) ? max2(best, best_serving(rm, MHA_ISA_COUNT - 1, t)) : best;
}

double results_peak_at(const results_machine *rm, double single, int threads) {
    const double c = rm->fma_ceiling_all > 0 ? rm->fma_ceiling_all : 1;
    if (threads <= 1 || rm->bw_threads_all <= 1) return single * (threads > 0 ? threads : 1);
    if (threads >= rm->bw_threads_all) return single * threads * c;
    const double f = (double)(threads - 1) / (double)(rm->bw_threads_all - 1);
    return single * threads * (1 + f * (c - 1));
}

double results_level_bw(const results_machine *rm, machine_level level, int threads) {
    const double one = rm->level_bw[level][0], all = rm->level_bw[level][1];
    if (threads <= 1 || rm->bw_threads_all <= 1) return one;
    if (threads >= rm->bw_threads_all) return all;
    const double f = (double)(threads - 1) / (double)(rm->bw_threads_all - 1);
    return one + f * (all - one);
}

enum { BW_CACHE = 32 };
typedef struct {
    double bytes, gbs;
    int threads;
} bw_at;
static bw_at bw_cache[BW_CACHE];
static int bw_n;

double results_read_bw_at(double bytes, int threads) {
    for (int i = 0; i < bw_n; i++)
        if (bw_cache[i].bytes == bytes && bw_cache[i].threads == threads) return bw_cache[i].gbs;
    const double gbs = machine_read_bandwidth_bytes(threads, (size_t)bytes, 0.1);
    if (bw_n < BW_CACHE) bw_cache[bw_n++] = (bw_at){bytes, gbs, threads};
    return gbs;
}

double results_read_bw_retake(double bytes, int threads) {
    const double again = machine_read_bandwidth_bytes(threads, (size_t)bytes, 0.1);
    for (int i = 0; i < bw_n; i++)
        if (bw_cache[i].bytes == bytes && bw_cache[i].threads == threads) {
            if (again > bw_cache[i].gbs) bw_cache[i].gbs = again;
            return bw_cache[i].gbs;
        }
    if (bw_n < BW_CACHE) bw_cache[bw_n++] = (bw_at){bytes, again, threads};
    return again;
}

void results_retake_peaks(results_machine *rm, int isa, int all_cores, double budget_s) {
    for (int i = 0; i < MHA_ISA_COUNT; i++) {
        if ((isa >= 0 && i != isa) || results_fp32_peak(rm, (mha_isa)i) <= 0) continue;
        const mha_isa_ops *ops = mha_ops_for((mha_isa)i);
        for (int u = 0; u < ops->nunits && u < MHA_UNITS_MAX; u++) {
            machine_unit_peak p;
            if (ops->units[u].dtypes == 0 || /* no row is held to it */
                machine_one_unit_peak((mha_isa)i, u, budget_s, &p) != MHA_OK)
                continue;
            rm->unit_rate[i][u] = max2(rm->unit_rate[i][u], p.rate);
        }
    }
    if (all_cores && rm->bw_threads_all > 1)
        for (int i = MHA_ISA_COUNT - 1; i >= 0; i--)
            if (results_fp32_peak(rm, (mha_isa)i) > 0) {
                const double c = machine_fma_ceiling((mha_isa)i, rm->bw_threads_all, budget_s);
                rm->fma_ceiling_all = max2(rm->fma_ceiling_all, c);
                break;
            }
    rm->peak_takes++;
}

int results_bind_threads(int threads) {
    hwloc_topology_t topo; /* the cores the process was given (taskset), not the machine's */
    if (machine_topology_load(&topo, NULL) != 0) {
        errorf("cannot bind threads: hwloc could not load the topology");
        return 0;
    }
    const int ncores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
    int failed = 0;
    if (ncores <= 0) {
        failed = 1;
    } else {
        if (threads < 1) threads = 1;
            /* A parallel region as wide as the widest later one: libgomp keeps
             * these threads in its pool and hands team slot i to the same thread,
             * so the binding made here holds for every later region. */
#pragma omp parallel num_threads(threads) reduction(+ : failed)
        {
            const int t = omp_get_thread_num();
            hwloc_obj_t core = hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE, (unsigned)(t % ncores));
            if (!core || hwloc_set_cpubind(topo, core->cpuset, HWLOC_CPUBIND_THREAD) != 0) failed++;
        }
    }
    hwloc_topology_destroy(topo);
    if (failed) errorf("cannot bind threads to cores through hwloc (%d failed)", failed);
    return failed == 0;
}
