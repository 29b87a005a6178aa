/* run.c - the sweep's measurement: the benchmark body (with its
 * interference evidence and the peaks it trusts), registration with Google
 * Benchmark in a seeded order, the follow-up passes, the result file. */
#include "sweep.h"

/* ---- inputs and workspace: the measurement core's pool -------------------- */

meas_pool sweep_pool;

/* The machine's figures and the benchmarks, for the peak retakes of
 * bench_body (a row that came within 3% of its peak retakes it, and every
 * row's peak follows). */
results_machine *sweep_rm;
bench *sweep_benches;
int sweep_nbench;

/* The compute peak row b is held to (GFLOP/s at its thread count): its
 * kernel's unit for its dtype, or the machine's best for a peer's. */
double bench_peak(const results_machine *rm, const bench *b) {
    const mha_dtype dt = b->s.dtype;
    return results_peak_at(
        rm, b->peer ? results_machine_peak(rm, dt) : results_peak_for(rm, b->k, dt), b->threads);
}

/* Every row's peak from the machine's current figures (after a retake). */
void refresh_peaks(void) {
    for (int i = 0; i < sweep_nbench && sweep_rm; i++)
        sweep_benches[i].peak = bench_peak(sweep_rm, &sweep_benches[i]);
}

/* A peak is trusted only where no row beats it: a row whose rate (over the
 * wall time around Google Benchmark's loop, so never above what it
 * reports) comes within 3% of its compute peak or read bandwidth retakes
 * that figure, keeping the best take. Returns 1 when the row is still above
 * it: a measurement error, flagged peak_exceeded in the file. */
int check_roof(bench *b, int64_t iters, double wall) {
    if (!sweep_rm || wall <= 0 || iters <= 0) return 0;
    const double rate = b->flops * (double)iters / wall * 1e-9;
    int over = 0;
    if (b->peak > 0 && rate > 0.97 * b->peak) {
        results_retake_peaks(sweep_rm, b->peer ? -1 : (int)mha_kernel_run_isa(b->k), b->threads > 1,
                             0.1);
        refresh_peaks();
        over |= rate > b->peak;
    }
    if (b->bw > 0 && b->s.nq == 1 && !b->s.layer) {
        const double gbs = b->kv_bytes * (double)iters / wall * 1e-9;
        if (gbs > 0.97 * b->bw) {
            const double bw = results_read_bw_retake(b->kv_bytes, b->threads);
            for (int i = 0; i < sweep_nbench; i++)
                if (sweep_benches[i].kv_bytes == b->kv_bytes &&
                    sweep_benches[i].threads == b->threads && sweep_benches[i].s.nq == 1 &&
                    !sweep_benches[i].s.layer)
                    sweep_benches[i].bw = bw;
            over |= gbs > b->bw;
        }
    }
    return over;
}

/* ---- the benchmark body --------------------------------------------------- */

void bench_body(mha_gbench_state *st, void *user) {
    bench *b = user;
    meas_call c;
    const char *err = b->peer ? meas_prepare_peer(&sweep_pool, b->peer, &b->s, b->threads, &c)
                              : meas_prepare(&sweep_pool, b->k, &b->s, &b->opts, &c);
    if (err) {
        mha_gbench_skip_with_error(st, err);
        return;
    }
    /* One untimed call the first time round: checks the status and warms
     * caches, pages and the OpenMP team (the first gbench trial is timed). */
    if (!b->warmed) {
        const mha_status s = meas_run(&c);
        if (s != MHA_OK) {
            mha_gbench_skip_with_error(st, b->peer ? meas_peer_error() : mha_last_error());
            return;
        }
        b->warmed = 1;
    }
    /* The evidence brackets the whole repetition (outside Google Benchmark's
     * timer, which runs only inside the loop). */
    meas_window win;
    meas_window_begin(&win, b->threads);
    const double w0 = now_s();
    if (meas_gbench(st, &c) != MHA_OK)
        mha_gbench_skip_with_error(st, b->peer ? meas_peer_error()
                                               : "mha_attend failed in the timed loop");
    const double wdt = now_s() - w0;
    meas_evidence ev;
    meas_window_end(&win, &ev);
    mha_gbench_counter(st, "probe", ev.probe, MHA_GBENCH_PLAIN);
    mha_gbench_counter(st, "probe_core", ev.probe_core, MHA_GBENCH_PLAIN);
    mha_gbench_counter(st, "preempted", (double)ev.preempted, MHA_GBENCH_PLAIN);
    mha_gbench_counter(st, "stolen_ms", ev.stolen * 1e3, MHA_GBENCH_PLAIN);
    mha_gbench_counter(st, "disturbed", meas_disturbed_for(&ev, MEAS_POLICY.probe_min, wdt),
                       MHA_GBENCH_PLAIN);
    mha_gbench_counter(st, "window_s", wdt, MHA_GBENCH_PLAIN); /* the rate of preemptions */
    const int64_t iters = mha_gbench_iterations(st);
    const int over = check_roof(b, iters, wdt);
    mha_gbench_counter(st, "peak", b->peak, MHA_GBENCH_PLAIN);
    mha_gbench_counter(st, "peak_exceeded", over, MHA_GBENCH_PLAIN);
    mha_gbench_counter(st, "GFLOPS", b->flops * 1e-9, MHA_GBENCH_PER_ITER_RATE);
    mha_gbench_counter(st, "pct_peak", b->peak > 0 ? 100.0 * b->flops * 1e-9 / b->peak : 0,
                       MHA_GBENCH_PER_ITER_RATE);
    mha_gbench_counter(st, "threads", b->threads, MHA_GBENCH_PLAIN);
    mha_gbench_counter(st, "block_q", c.o.block_q, MHA_GBENCH_PLAIN);
    mha_gbench_counter(st, "block_kv", c.o.block_kv, MHA_GBENCH_PLAIN);
    mha_gbench_counter(st, "split", c.o.split, MHA_GBENCH_PLAIN);
    if (b->is_auto || b->peer) mha_gbench_set_label(st, b->label);
    if (b->peer) { /* what its check against the oracle found, before timing */
        mha_gbench_counter(st, "max_err", b->max_err, MHA_GBENCH_PLAIN);
        mha_gbench_counter(st, "err_vs_tol", b->check_worst, MHA_GBENCH_PLAIN);
    }
    if (b->s.nq == 1 && !b->s.layer) {
        mha_gbench_set_bytes_processed(st, (int64_t)b->kv_bytes * iters);
        mha_gbench_counter(st, "pct_bw", b->bw > 0 ? 100.0 * b->kv_bytes * 1e-9 / b->bw : 0,
                           MHA_GBENCH_PER_ITER_RATE);
        /* the level pct_bw is measured against: 1 L1, 2 L2, 3 L3, 4 DRAM */
        mha_gbench_counter(st, "bw_level", b->level + 1, MHA_GBENCH_PLAIN);
    }
}

/* The line of a finished (shape, threads) group: the progress, the shape,
 * and the fastest of our kernels so far (the summary decides at the end). */
void group_line(const run_state *rs, const bench *of) {
    const bench *best = NULL;
    double best_gf = 0, lo, hi;
    for (int i = 0; i < rs->nbench; i++) {
        const bench *b = &rs->benches[i];
        if (b->group != of->group || b->is_auto || b->peer || b->nres == 0) continue;
        const double gf = bench_stats(b, &lo, &hi);
        if (!best || gf > best_gf) best = b, best_gf = gf;
    }
    char pre[128], shp[128], key[300];
    progress_prefix(&rs->prog, pre, sizeof pre);
    /* the summary's short form of the shape: the row name without its kernel
     * and threads */
    const char *k = strncmp(of->name, "layer/", 6) == 0 ? of->name + 6 : of->name;
    const char *rest = strchr(k, '/');
    snprintf(key, sizeof key, "%s%s", k != of->name ? "layer/" : "", rest ? rest + 1 : k);
    char *t = strstr(key, "/threads:");
    if (t) *t = '\0';
    report_shape_short(key, shp, sizeof shp);
    if (best)
        printf("%s  %s, %d thr: %s %.1f\n", pre, shp, of->threads, best->kname, best_gf);
    else
        printf("%s  %s, %d thr\n", pre, shp, of->threads);
    fflush(stdout);
}

void on_report(const mha_gbench_result *r, void *user) {
    run_state *rs = user;
    bench *b = NULL;
    for (int i = 0; i < rs->nbench && !b; i++)
        if (strcmp(rs->benches[i].name, r->name) == 0) b = &rs->benches[i];
    /* the row, with the fields its benchmark was registered with */
    char why[256];
    const char *dt = NULL, *kvdt = NULL;
    mha_problem vp;
    const mha_problem *var = NULL;
    if (b) {
        const mha_problem p = meas_problem(&b->s);
        dt = mha_dtype_name(p.dtype);
        kvdt = mha_dtype_name(b->s.layer ? p.dtype : mha_problem_kv_dtype(&p));
        var = variant_fields(&b->s, &vp);
    }
    if (rows_add(&rs->rows, r->json, rs->pass, dt, kvdt, var, why, sizeof why) != MHA_OK) {
        errorf("sweep: %s: %s", r->name, why);
        rs->row_error = 1;
    }
    if (r->aggregate) return;
    rs->done++;
    rs->runs++;
    char shp[128], reps[64] = "";
    if (b) shape_text(&b->s, shp, sizeof shp);
    if (r->repetitions > 1)
        snprintf(reps, sizeof reps, " rep %lld/%lld", (long long)r->repetition_index + 1,
                 (long long)r->repetitions);
    char count[32];
    if (rs->total > 0)
        snprintf(count, sizeof count, "[%d/%d]", rs->done, rs->total);
    else
        snprintf(count, sizeof count, "[%d]", rs->done);
    const int verbose = rs->prog.mode == PROGRESS_VERBOSE;
    if (!b) {
        if (verbose) printf("%s %s (not in this sweep's list)\n", count, r->name);
        fflush(stdout);
        return;
    }
    if (r->error) {
        b->errors++;
        progress_row(&rs->prog, b->group, b->cost, 0);
        if (rs->prog.tty && rs->prog.mode == PROGRESS_NORMAL) printf("\n");
        printf("%s %s %s threads=%d%s ... ERROR: %s\n", count, b->kname, shp, b->threads, reps,
               r->error_message);
        fflush(stdout);
        return;
    }
    const double gf = mha_gbench_result_counter(r, "GFLOPS", 0);
    const double pp = mha_gbench_result_counter(r, "pct_peak", 0);
    const double pb = mha_gbench_result_counter(r, "pct_bw", -1);
    const double prate = background_rate(mha_gbench_result_counter(r, "preempted", 0),
                                         mha_gbench_result_counter(r, "window_s", 0), b->threads);
    const double stolen = mha_gbench_result_counter(r, "stolen_ms", 0);
    const int disturbed = background_judge(rs, b->threads, prate, stolen,
                                           mha_gbench_result_counter(r, "disturbed", 0) > 0);
    if (b->nres == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 4;
        b->gflops = sweep_realloc(b->gflops, (size_t)b->cap, sizeof *b->gflops);
        b->dist = sweep_realloc(b->dist, (size_t)b->cap, sizeof *b->dist);
        b->prate = sweep_realloc(b->prate, (size_t)b->cap, sizeof *b->prate);
        b->stolen = sweep_realloc(b->stolen, (size_t)b->cap, sizeof *b->stolen);
    }
    b->dist[b->nres] = (unsigned char)disturbed;
    b->prate[b->nres] = (float)prate;
    b->stolen[b->nres] = (float)stolen;
    b->gflops[b->nres++] = gf;
    char bw[48] = "";
    if (pb >= 0)
        snprintf(bw, sizeof bw, ", %.1f GB/s = %.1f%% of %s bw",
                 mha_gbench_result_counter(r, "bytes_per_second", 0) * 1e-9, pb,
                 machine_level_name(b->level));
    char kdisp[200];
    if (b->is_auto)
        snprintf(kdisp, sizeof kdisp, "auto [%s]", b->label);
    else
        snprintf(kdisp, sizeof kdisp, "%s", b->kname);
    if (verbose) {
        printf("%s %s %s threads=%d%s ... %.1f GFLOP/s (%.1f%% of peak%s)%s\n", count, kdisp, shp,
               b->threads, reps, gf, pp, bw, disturbed ? " [disturbed: retaken]" : "");
        fflush(stdout);
    } else if (progress_row(&rs->prog, b->group, b->cost, disturbed)) {
        group_line(rs, b);
    }
}

/* How many of b's repetitions the evidence left undisturbed. */
int bench_clean(const bench *b) {
    int clean = 0;
    for (int i = 0; i < b->nres; i++) clean += !b->dist[i];
    return clean;
}

/* The samples that count, sorted into out: the undisturbed ones, or all of
 * them when every one was disturbed. Returns the count. */
int bench_samples(const bench *b, double *out) {
    const int clean = bench_clean(b);
    int n = 0;
    for (int i = 0; i < b->nres; i++)
        if (!b->dist[i] || clean == 0) out[n++] = b->gflops[i];
    median_inplace(out, n);
    return n;
}

/* Median GFLOP/s of the samples that count, and its 95% interval
 * (harness/stats.c; with one sample the interval is that sample). */
double bench_stats(const bench *b, double *lo, double *hi) {
    double *x = sweep_realloc(NULL, (size_t)(b->nres ? b->nres : 1), sizeof *x);
    const int n = bench_samples(b, x);
    double med = 0;
    *lo = *hi = 0;
    if (n > 0) {
        med = median_sorted(x, n);
        median_interval(x, n, 0.95, lo, hi);
    }
    free(x);
    return med;
}

/* Fisher-Yates over order[0..n) with splitmix64 seeded by seed: a seeded run
 * repeats its order exactly. */
void shuffle_order(int *order, int n, uint64_t seed) {
    uint64_t st = seed;
    for (int i = n - 1; i > 0; i--) {
        const int j = (int)(splitmix64(&st) % (uint64_t)(i + 1));
        const int t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

/* Registers b with Google Benchmark: repeated by its own flags
 * (report_as 0), or as one repetition of a name registered report_as times
 * (interleaved). Returns 0, or -1 after a message. */
int register_one(bench *b, int report_as) {
    mha_gbench_def d;
    memset(&d, 0, sizeof d);
    d.name = b->name;
    d.run = bench_body;
    d.user = b;
    d.real_time = 1;
    d.manual_time = b->peer != NULL; /* a helper process's own clock (meas_gbench) */
    if (report_as > 0) {
        d.repetitions = 1;
        d.report_as_repetitions = report_as;
    }
    if (mha_gbench_register(&d) != 0) {
        errorf("sweep: cannot register %s", b->name);
        return -1;
    }
    return 0;
}

/* Registers the benchmarks with Google Benchmark. Returns 0, or -1 after a
 * message. */
int register_benches(bench *benches, int nbench, int interleaved, int by_shape, uint64_t seed) {
    /* Registration. Grouped: each benchmark once, repeated by Google
     * Benchmark (--benchmark_repetitions), so the file has one row per
     * repetition plus the _mean/_median/_stddev/_cv aggregates. Interleaved
     * (ci): every (benchmark, repetition) pair is registered on its own, in
     * an order shuffled with the seed, each a one-repetition run; the shim's
     * reporters then number the rows of a name as repetitions 0..n-1 with one
     * family_index, so the file holds n per-repetition rows of each exact name
     * (no aggregate rows) as compare.py and mhabench compare expect. A slow
     * drift of the machine (clock, other load) then spreads over every
     * benchmark instead of biasing the ones that ran during it. */
    int nreg = 0;
    for (int i = 0; i < nbench; i++) nreg += interleaved ? benches[i].reps : 1;
    int *order = sweep_realloc(NULL, (size_t)nreg, sizeof *order), k = 0;
    for (int i = 0; i < nbench; i++)
        for (int r = 0; r < (interleaved ? benches[i].reps : 1); r++) order[k++] = i;
    if (interleaved) shuffle_order(order, nreg, seed ^ 0x5eedull);
    if (interleaved && by_shape) {
        /* roofline: shapes in their listed order, the shuffle kept within each
         * (a stable insertion sort by the shape's first benchmark) */
        int *first = sweep_realloc(NULL, (size_t)nbench, sizeof *first);
        for (int i = 0; i < nbench; i++) {
            first[i] = i;
            for (int j = 0; j < i; j++)
                if (memcmp(&benches[j].s, &benches[i].s, sizeof benches[i].s) == 0) {
                    first[i] = first[j];
                    break;
                }
        }
        for (int i = 1; i < nreg; i++)
            for (int j = i; j > 0 && first[order[j - 1]] > first[order[j]]; j--) {
                const int t = order[j];
                order[j] = order[j - 1];
                order[j - 1] = t;
            }
        free(first);
    }
    mha_gbench_clear();
    for (int i = 0; i < nreg; i++)
        if (register_one(&benches[order[i]], interleaved ? benches[order[i]].reps : 0) != 0) {
            free(order);
            return -1;
        }
    free(order);
    return 0;
}

/* Runs the registered benchmarks through Google Benchmark into out and
 * commits the file. Returns 0 and the run's state, or -1. */
/* ---- follow-up passes -----------------------------------------------------------------
 * After the first pass, a benchmark gets more repetitions when (a) the
 * evidence said some were disturbed (each retaken once, at most as many
 * retakes as planned repetitions), or (b) it was planned with several
 * repetitions and the 95% interval of its median over the clean ones is
 * still wider than SWEEP_TARGET_HALFWIDTH of the median: half the plan
 * again, up to three times the plan in all. Passes stop when nothing needs
 * more, after SWEEP_MAX_PASSES, or when they have taken twice the first
 * pass's time. The extra repetitions run interleaved like the first. */

int wanted(bench *b, int repetitions) {
    if (b->nres == 0) return 0;
    const int clean = bench_clean(b), disturbed = b->nres - clean;
    /* retakes: every disturbed sample not yet retaken, within the bound */
    int retake = disturbed - b->retaken;
    if (retake > repetitions - b->retaken) retake = repetitions - b->retaken;
    if (retake < 0) retake = 0;
    int more = 0;
    if (repetitions >= 3 && clean >= 3 && b->nres < 3 * repetitions) {
        double lo, hi;
        const double med = bench_stats(b, &lo, &hi);
        if (med > 0 && (hi - lo) / 2 / med > SWEEP_TARGET_HALFWIDTH)
            more = repetitions / 2 > 2 ? repetitions / 2 : 2;
    }
    b->retaken += retake;
    return retake + more;
}

/* One follow-up pass, its rows into rs->rows. Returns 0
 * when it ran, 1 when nothing needed it, -1 on an error (printed). */
int run_pass(const sweep_args *a, bench *benches, int nbench, double min_time, int p,
             run_state *rs) {
    int *want = sweep_realloc(NULL, (size_t)nbench, sizeof *want), nreg = 0, nb = 0;
    for (int i = 0; i < nbench; i++) {
        want[i] = wanted(&benches[i], benches[i].reps);
        nreg += want[i];
        nb += want[i] > 0;
    }
    if (nreg == 0) {
        free(want);
        return 1;
    }
    int *order = sweep_realloc(NULL, (size_t)nreg, sizeof *order), k = 0;
    for (int i = 0; i < nbench; i++)
        for (int r = 0; r < want[i]; r++) order[k++] = i;
    shuffle_order(order, nreg, a->seed ^ (0x9a55ull * (uint64_t)p));
    mha_gbench_clear();
    for (int i = 0; i < nreg; i++)
        if (register_one(&benches[order[i]], want[order[i]]) != 0) {
            free(order);
            free(want);
            return -1;
        }
    int *extra0 = sweep_realloc(NULL, (size_t)nbench, sizeof *extra0);
    for (int i = 0; i < nbench; i++) {
        extra0[i] = benches[i].extra;
        benches[i].extra += want[i];
    }
    free(order);
    free(want);
    char a_min[64];
    snprintf(a_min, sizeof a_min, "--benchmark_min_time=%g", min_time);
    char *gargv[] = {(char *)"mhabench", a_min, (char *)"--benchmark_repetitions=1", NULL};
    if (rs->prog.mode != PROGRESS_QUIET) {
        printf("\npass %d: %d more repetition%s of %d benchmark%s (disturbed ones retaken, "
               "intervals wider than %.0f%% narrowed)\n",
               p + 1, nreg, nreg == 1 ? "" : "s", nb, nb == 1 ? "" : "s",
               100 * SWEEP_TARGET_HALFWIDTH);
        fflush(stdout);
    }
    /* the peaks spread over the run: taken again before each pass */
    if (sweep_rm) {
        results_retake_peaks(sweep_rm, -1, 1, 0.1);
        refresh_peaks();
    }
    rs->done = 0;
    rs->total = nreg;
    const progress_mode mode = rs->prog.mode;
    progress_begin(&rs->prog, mode, rs->ngroups);
    rs->prog.quiet_lines = 1;
    for (int i = 0; i < nbench; i++)
        for (int r = 0; r < benches[i].extra - extra0[i]; r++)
            progress_plan(&rs->prog, benches[i].group, benches[i].cost);
    free(extra0);
    rs->pass = p;
    const int rc = mha_gbench_run(3, gargv, NULL, on_report, rs);
    progress_end(&rs->prog);
    if (rc != 0 || rs->row_error) {
        errorf("sweep: pass %d failed", p + 1);
        return -1;
    }
    return 0;
}

/* What is known only at the end, for the file's context: how often the
 * peaks were retaken, and how loaded the host was (the share of repetitions
 * the evidence marked disturbed, and the median CPU time stolen per
 * repetition). */
static void run_facts(run_state *rs, const bench *benches, int nbench) {
    char buf[256];
    if (sweep_rm) {
        snprintf(buf, sizeof buf, "%d", sweep_rm->peak_takes);
        rows_context(&rs->rows, "mha_peak_takes", buf);
    }
    int reps = 0, dist = 0;
    for (int i = 0; i < nbench; i++) {
        reps += benches[i].nres;
        dist += benches[i].nres - bench_clean(&benches[i]);
    }
    const double share = reps ? (double)dist / reps : 0;
    snprintf(buf, sizeof buf, "%s: %d of %d repetitions %s (%.0f%%)",
             rs->steady      ? "a steady background"
             : share < 0.1   ? "quiet"
             : share <= 0.25 ? "partly busy"
                             : "busy",
             dist, reps, rs->steady ? "bursts above it" : "disturbed", 100 * share);
    rows_context(&rs->rows, "mha_load", buf);
}

int run_and_commit(const sweep_args *a, bench *benches, int nbench, int ngroups, int interleaved,
                   int repetitions, double min_time, int nskipped, mha_out *out, time_t started,
                   run_state *rs, double *t0) {
    /* Google Benchmark's argv: ours first, the pass-through ones after (so
     * they win). */
    char a_min[64], a_reps[64], why[1024];
    snprintf(a_min, sizeof a_min, "--benchmark_min_time=%g", min_time);
    snprintf(a_reps, sizeof a_reps, "--benchmark_repetitions=%d", interleaved ? 1 : repetitions);
    char **gargv = sweep_realloc(NULL, (size_t)a->npass + 4, sizeof *gargv);
    int gargc = 0;
    gargv[gargc++] = (char *)"mhabench";
    gargv[gargc++] = a_min;
    gargv[gargc++] = a_reps;
    for (int i = 0; i < a->npass; i++) /* ours carry --out and the repetitions */
        if (strncmp(a->pass[i], "--benchmark_out=", 16) != 0 &&
            strncmp(a->pass[i], "--benchmark_repetitions=", 24) != 0)
            gargv[gargc++] = a->pass[i];
    gargv[gargc] = NULL;

    unsigned char *match = sweep_realloc(NULL, (size_t)(nbench ? nbench : 1), 1);
    const int filtered = count_filtered(benches, nbench, a->filter, match);
    const int rows_per = repetitions;
    int rows = 0; /* interleaved: each benchmark's own count (baseline kernels fewer) */
    for (int i = 0; i < nbench; i++) rows += interleaved ? benches[i].reps : rows_per;
    memset(rs, 0, sizeof *rs);
    if (rows_begin(&rs->rows, why, sizeof why) != MHA_OK) {
        errorf("sweep: %s", why);
        free(match);
        free(gargv);
        return -1;
    }
    rs->benches = benches;
    rs->nbench = nbench;
    rs->total = filtered == nbench ? rows : filtered * rows_per;
    rs->interleaved = interleaved;
    rs->ngroups = ngroups;
    if (filtered < 0) rs->total = -1;
    progress_begin(&rs->prog, a->progress, ngroups);
    for (int i = 0; i < nbench; i++)
        for (int r = 0; r < (interleaved ? benches[i].reps : rows_per) && match[i]; r++)
            progress_plan(&rs->prog, benches[i].group, benches[i].cost);
    free(match);
    char est[48];
    progress_duration(rs->prog.cost_total * (a->passes > 1 ? 1.25 : 1.0), est, sizeof est);
    printf("%d benchmark%s x %d repetition%s (%s), min time %g s, %d skipped; %s\n", nbench,
           nbench == 1 ? "" : "s", rows_per, rows_per == 1 ? "" : "s",
           interleaved ? "interleaved" : "grouped", min_time, nskipped, est);
    fflush(stdout);
    *t0 = now_s();
    meas_load_mark(&rs->load0);
    const int rc = mha_gbench_run(gargc, gargv, NULL, on_report, rs);
    progress_end(&rs->prog);
    free(gargv);
    if (rc == MHA_GBENCH_NO_MATCH) {
        errorf("sweep: no benchmark matched --benchmark_filter=%s; nothing written",
               a->filter ? a->filter : "");
        rows_free(&rs->rows);
        return -1;
    }
    if (rc != 0 || rs->row_error) {
        rows_free(&rs->rows);
        return -1;
    }
    /* Follow-up passes: disturbed repetitions retaken, wide intervals
     * narrowed; their rows join the file's (fmt_rows.c). Under a steady
     * background "disturbed" means a burst above it (background.c). */
    const double pass1 = now_s() - *t0;
    background_decide(rs, benches, nbench);
    for (int p = 1; p < a->passes && now_s() - *t0 < 3 * pass1; p++) /* a->passes: resolved */
        if (run_pass(a, benches, nbench, min_time, p, rs) != 0) break;
    run_facts(rs, benches, nbench);
    background_rows(rs);
    const mha_status st = rows_commit(&rs->rows, out, why, sizeof why);
    rows_free(&rs->rows);
    if (st != MHA_OK ||
        (a->out_path ? mha_out_commit(out, why, sizeof why)
                     : results_commit_run(out, RUNS_DIR, started, why, sizeof why)) != MHA_OK) {
        errorf("sweep: %s", why);
        return -1;
    }
    return 0;
}

/* An empty shard is still a shard: its file holds the context (machine,
 * list, shard) and no rows, so merge sees every index of a complete run. */
int write_empty_shard(const sweep_args *a, mha_out *out, time_t started) {
    char why[1024];
    rows_file rows;
    if (rows_begin(&rows, why, sizeof why) != MHA_OK) {
        errorf("sweep: %s", why);
        return EXIT_USAGE;
    }
    const mha_status st = rows_commit(&rows, out, why, sizeof why);
    rows_free(&rows);
    if (st != MHA_OK ||
        (a->out_path ? mha_out_commit(out, why, sizeof why)
                     : results_commit_run(out, RUNS_DIR, started, why, sizeof why)) != MHA_OK) {
        errorf("sweep: %s", why);
        return EXIT_USAGE;
    }
    printf("empty shard (no benchmark of the list fell to it): wrote %s with no rows\n",
           out->target);
    return 0;
}
