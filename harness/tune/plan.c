/* plan.c - what a tune run covers (its kernels and classes, cheap classes
 * first) and what each class costs whatever its share of the budget. */
#include <math.h>
#include <omp.h>
#include <stdio.h>

#include "fmt_results.h"
#include "util.h"
#include "tune.h"

/* The split knob is searched where it has an effect: flash honours it
 * (per-head tasks vs (head, query block) tasks); with one thread or one
 * query row there is nothing to split. */
int split_searched(const mha_kernel *k, const mha_shape_class *c) {
    return (mha_kernel_traits(k) & MHA_KT_SPLIT) && c->threads != 1 && !c->decode;
}

/* Another kernel of k's algorithm and dtypes at a higher ISA runs here (then
 * k is not worth timing by default). Any higher level, not only the active
 * one: under avx512bf16 no fp32 kernel has a twin at the active level (the
 * bf16 ones take other dtypes), and every scalar and AVX2 fp32 kernel was
 * timed: 130 s of a 205 s `tune --budget 120` went to their priors. */
static int has_better_twin(const mha_kernel *k) {
    for (int isa = (int)mha_kernel_isa(k) + 1; isa < MHA_ISA_COUNT; isa++) {
        const mha_kernel *o = mha_kernel_twin(k, (mha_isa)isa);
        if (o && mha_kernel_supported(o) == MHA_OK) return 1;
    }
    return 0;
}

/* Whether kernel k is timed on class cl (whose problem is p): it takes the
 * class's dtypes, and by default a decode-shaped kernel only on the decode
 * classes: on prefill shapes decode.avx512 runs at 32-40% of peak where flash
 * runs at 73-85% (README, the roofline table), is never mha_select's default
 * there, and its prior cost about a second per kv4096 class. --kernels times
 * what it names wherever the dtypes allow. */
int kernel_in_class(const tune_run *r, const mha_kernel *k, const mha_shape_class *cl,
                    const mha_problem *p) {
    if (mha_kernel_takes(k, p) != MHA_OK) return 0;
    return r->a.kernels || cl->decode || !(mha_kernel_traits(k) & MHA_KT_DECODE);
}

/* A rough time of one call of class c's problem, only to order the classes:
 * its FLOPs at 100 GFLOP/s and its bytes at 10 GB/s per thread (a decode
 * call streams its cache), over the threads it runs on. */
double class_cost(const mha_shape_class *c, int tall) {
    mha_problem p;
    mha_class_problem(c, &p);
    const double elems = (double)(2 * p.batch * p.heads * p.seq_q * p.head_dim),
                 kv_elems = (double)(2 * p.batch * p.kv_heads * p.seq_kv * p.head_dim);
    const double bytes = elems * (double)mha_dtype_size(p.dtype) +
                         kv_elems * (double)mha_dtype_size(mha_problem_kv_dtype(&p));
    const int threads = c->threads == 1 || tall < 1 ? 1 : tall;
    return (mha_problem_flops(&p) / 100e9 + bytes / 10e9) / threads;
}

/* Whether class c has a kernel to time: one of the run's kernels is in it
 * and, for a class not in fp32, one with block knobs or, for a decode class,
 * two kernels to choose between (a bf16 decode: decode.avx512bf16 against
 * decode.bf16fma and the widening decode.avx512, whose order is the CPU's;
 * a 16-bit prefill class that only knob-less kernels take would only
 * confirm the cache model's choice). */
static int class_has_kernel(const tune_run *r, const mha_shape_class *c) {
    mha_problem p;
    mha_class_problem(c, &p);
    int in = 0;
    for (int i = 0; i < r->nk; i++)
        if (kernel_in_class(r, r->kr[i].k, c, &p)) {
            if (r->kr[i].tunable || c->dtype == MHA_F32) return 1;
            in++;
        }
    return c->decode && in >= 2;
}

/* The classes to tune: the --classes set, less those whose thread count
 * --threads or dtype --dtype leaves out and those no kernel of the run takes
 * (choose_kernels first). Returns TUNE_OK or TUNE_BAD_INPUT (message
 * printed). */
static tune_status choose_classes(tune_run *r) {
    r->ncls = mha_class_list(r->a.set, r->classes, MHA_CLASS_MAX);
    if (r->ncls < 0) {
        errorf("--classes: '%s' is not quick or full", r->a.set);
        return TUNE_BAD_INPUT;
    }
    machine_describe(&r->mi);
    const int all = r->mi.cores > 1 ? r->mi.cores : 1;
    r->t1 = 1;
    r->tall = all > 1 ? all : 0;
    if (r->a.threads) {
        int64_t tv[8];
        const int n = parse_i64_list("--threads", r->a.threads, 1, 4096, tv, 8);
        if (n < 0) return TUNE_BAD_INPUT;
        r->t1 = r->tall = 0;
        for (int i = 0; i < n; i++) {
            if (tv[i] == 1)
                r->t1 = 1;
            else
                r->tall = (int)tv[i];
        }
    }
    int kept = 0, no_kernel[MHA_DTYPE_COUNT] = {0};
    for (int i = 0; i < r->ncls; i++) {
        const mha_shape_class *c = &r->classes[i];
        if (!(r->a.dtypes & MHA_DTYPE_BIT(c->dtype))) continue;
        if (!((c->threads == 1 && r->t1) || (c->threads == 0 && r->tall))) continue;
        if (!class_has_kernel(r, c)) {
            no_kernel[c->dtype]++;
            continue;
        }
        r->classes[kept++] = *c;
    }
    r->ncls = kept;
    for (int t = 0; t < MHA_DTYPE_COUNT; t++)
        if (no_kernel[t])
            printf("tune: %d %s classes left out: no kernel with block knobs that runs here "
                   "takes %s, nor two decode kernels (they keep the cache model's choice)\n",
                   no_kernel[t], mha_dtype_name((mha_dtype)t), mha_dtype_name((mha_dtype)t));
    /* A shard takes every N-th class of the list, so every shard gets the
     * same mix of cheap and dear classes. Shards of one run write their own
     * tables; scripts/fleet_report.py tuning joins them per CPU key. */
    if (r->a.shard.count > 0) {
        kept = 0;
        for (int i = 0; i < r->ncls; i++)
            if (i % r->a.shard.count == r->a.shard.index - 1) r->classes[kept++] = r->classes[i];
        printf("tune: shard %d/%d: %d of %d classes\n", r->a.shard.index, r->a.shard.count, kept,
               r->ncls);
        r->ncls = kept;
    }
    /* Cheap classes first (a stable order by the estimate): they finish
     * early and hand their unused share on to the expensive ones (a d128
     * kv4096 class's first measurements alone take ~2 s), and a budget too
     * small for every class leaves out the costly ones, not the decode
     * classes that happen to come last in the list. */
    double cost[MHA_CLASS_MAX];
    for (int i = 0; i < r->ncls; i++) {
        cost[i] = class_cost(&r->classes[i], r->tall);
        for (int j = i; j > 0 && cost[j - 1] > cost[j]; j--) {
            const double tc = cost[j];
            cost[j] = cost[j - 1];
            cost[j - 1] = tc;
            const mha_shape_class tcl = r->classes[j];
            r->classes[j] = r->classes[j - 1];
            r->classes[j - 1] = tcl;
        }
    }
    return TUNE_OK;
}

/* The kernels to search: --kernels, or by default every algorithm worth
 * timing on this CPU. Returns TUNE_OK or TUNE_BAD_INPUT (message printed). */
static tune_status choose_kernels(tune_run *r) {
    r->nk = 0;
    if (r->a.kernels) {
        const mha_kernel *ks[32];
        r->nk = parse_kernel_list("tune: --kernels", r->a.kernels, KL_SUPPORTED | KL_TIMED, ks, 32);
        if (r->nk < 0) return TUNE_BAD_INPUT;
        for (int i = 0; i < r->nk; i++) r->kr[i] = (kernel_result){.k = ks[i]};
    } else {
        /* Every algorithm at its highest ISA that runs here, except the seed's naive one; lower
         * ISAs of the same algorithm never win a compute-bound class, but the
         * bandwidth-bound decode kernels can (decode.avx2 beat decode.avx512
         * at 1 thread here), so their SIMD twins stay in. */
        for (int i = 0; i < mha_kernel_count(); i++) {
            const mha_kernel *k = mha_kernel_at(i);
            /* each class times those that take its dtypes (kernel_in_class) */
            if (mha_kernel_supported(k) != MHA_OK ||
                (mha_kernel_traits(k) & (MHA_KT_REFERENCE | MHA_KT_EMULATED)))
                continue;
            const int bw_bound =
                (mha_kernel_traits(k) & MHA_KT_DECODE) && mha_kernel_isa(k) != MHA_ISA_SCALAR;
            if (has_better_twin(k) && !bw_bound) continue;
            if (r->nk < 32) r->kr[r->nk++] = (kernel_result){.k = k};
        }
    }
    for (int i = 0; i < r->nk; i++)
        r->kr[i].tunable = (mha_kernel_traits(r->kr[i].k) & MHA_KT_BLOCKS) != 0;
    return TUNE_OK;
}

/* One sample of a call of t seconds: SAMPLE_MIN_S at least, and the probes
 * before and after it. */
static double sample_time(double t) {
    return (t > SAMPLE_MIN_S ? t : SAMPLE_MIN_S) + 2 * MEAS_PROBE_SECONDS;
}

/* What class c costs whatever its share: every kernel's first measurement
 * (verification and warm-up, about two calls, and MIN_REPS samples) and
 * MIN_REPS final rounds of the default kernel's prior and best, from the
 * kernels' ratios so far. A kernel with none yet counts with the ratio
 * `unknown`: 0 makes the floor 0 (nothing to go by); 1 takes class_cost's
 * rough time, which with SAMPLE_MIN_S per sample is what even the cheapest
 * class cannot do without (the start of a run, plan_run's check). */
static double floor_with(const tune_run *r, const mha_shape_class *c, double unknown) {
    mha_problem p;
    mha_class_problem(c, &p);
    const double cost = class_cost(c, r->tall);
    double floor = 0;
    for (int i = 0; i < r->nk; i++) {
        if (!kernel_in_class(r, r->kr[i].k, c, &p)) continue;
        double ratio = ratio_of(&r->tx, r->kr[i].k);
        if (!(ratio > 0)) ratio = unknown;
        const double call = ratio * cost;
        if (!(call > 0)) return 0;
        floor += 2 * call + MIN_REPS * sample_time(call);
    }
    double dratio = ratio_of(&r->tx, mha_default_kernel(&p));
    if (!(dratio > 0)) dratio = unknown;
    return floor + 2 * MIN_REPS * sample_time(dratio * cost);
}

double class_floor(const tune_run *r, const mha_shape_class *c) {
    return floor_with(r, c, 0);
}

/* A budget that cannot hold the first measurements of even the cheapest
 * class would still tune that one (the first class always starts), far past
 * the budget: refused instead. The classes share the budget less the
 * confirmation reserve, plus the slack a class may run over. Returns
 * TUNE_OK, or TUNE_BAD_INPUT after naming the budget needed. */
static tune_status check_budget_floor(const tune_run *r) {
    int cheapest = -1;
    double least = 0;
    for (int i = 0; i < r->ncls; i++) {
        const double f = floor_with(r, &r->classes[i], 1.0);
        if (cheapest < 0 || f < least) {
            cheapest = i;
            least = f;
        }
    }
    const double usable = 1 - CONFIRM_FRACTION + BUDGET_SLACK;
    if (cheapest < 0 || least <= r->a.budget * usable) return TUNE_OK;
    char name[64];
    mha_class_name(&r->classes[cheapest], name, sizeof name);
    errorf("tune: --budget %g s is below the smallest class floor %.2f s (class %s: its "
           "kernels' first measurements and final rounds, with the run's reserve); nothing "
           "tuned",
           (double)r->a.budget, ceil(least / usable * 100) / 100, name);
    return TUNE_BAD_INPUT;
}

/* What the run covers: the MHA_ISA cap checked, the OpenMP pool pinned, the
 * classes and kernels chosen. Returns TUNE_OK, or TUNE_BAD_INPUT (message
 * printed) when the options are bad or leave nothing to do. */
tune_status plan_run(tune_run *r) {
    if (!check_isa_env()) return TUNE_BAD_INPUT;
    /* Pin the OpenMP pool one thread per core, as the sweep does: unpinned
     * threads on this kind of VM sometimes share a core for seconds. */
    results_bind_threads(omp_get_num_procs());
    tune_status st = choose_kernels(r);
    if (st == TUNE_OK) st = choose_classes(r);
    if (st == TUNE_OK && (r->nk == 0 || r->ncls == 0)) {
        errorf("tune: nothing to do (%d kernels, %d classes)", r->nk, r->ncls);
        st = TUNE_BAD_INPUT;
    }
    if (st == TUNE_OK) st = check_budget_floor(r);
    return st;
}
