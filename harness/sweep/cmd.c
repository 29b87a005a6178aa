/* cmd.c - `mhabench sweep`: every selected kernel over a grid of shapes and
 * thread counts through Google Benchmark, with the machine's fingerprint in
 * the JSON context, GFLOP/s and % of the measured peak per benchmark, % of
 * measured bandwidth for decode, progress while it runs, an estimate-based
 * skip of hopeless combinations (always listed), and the summary and
 * verdict read back from the result file. Results go atomically to
 * results/runs/. The steps are in the files beside it (sweep.h). */
#include "sweep.h"

void ctx_emit(const char *key, const char *value, void *user) {
    (void)user;
    mha_gbench_add_context(key, value);
}

/* The closing report: what was skipped and what failed, then the summary
 * and the verdict read back from the committed file (sweep/report.c: one
 * rule for every tool), and the run's totals. Returns the number of failed
 * runs (or 1 when the file cannot be read back). */
int report_sweep(bench *benches, int nbench, const note_list *skipped, int done, double t0,
                 const char *path, report_mode mode, int verbose) {
    int nerr = 0;
    for (int i = 0; i < nbench; i++) nerr += benches[i].errors;
    if (skipped->n && verbose) {
        printf("\nskipped (%d):\n", skipped->n);
        for (int i = 0; i < skipped->n; i++) printf("  %s\n", skipped->items[i].text);
    } else if (skipped->n) {
        printf("\nskipped %d combination%s (estimated too slow, not taken by a kernel or peer, "
               "...): --verbose lists them\n",
               skipped->n, skipped->n == 1 ? "" : "s");
    }
    if (nerr) {
        printf("\nfailed (%d):\n", nerr);
        for (int i = 0; i < nbench; i++)
            if (benches[i].errors) printf("  %s\n", benches[i].name);
    }
    if (report_file(path, mode, stdout) != 0) return nerr ? nerr : 1;
    printf("\n%d run%s in %.1f s; results: %s\n", done, done == 1 ? "" : "s", now_s() - t0, path);
    return nerr;
}

/* The --peers that run here into out (probed: an unavailable one is said,
 * noted in skipped and recorded in the context, never an error). Returns
 * the count. */
int choose_peers(const sweep_args *a, const peer_ops **out, note_list *skipped) {
    const char *const *want = a->peer_names;
    const int nw = a->npeer_names;
    int n = 0;
    for (int i = 0; i < nw; i++) {
        const peer_ops *peer = peer_find(want[i]);
        char why[512] = "", key[64], val[700];
        snprintf(key, sizeof key, "mha_peer_%s", want[i]);
        if (!peer) snprintf(why, sizeof why, "%s", peer_not_built(want[i]));
        if (peer && peer->probe(why, sizeof why)) {
            printf("peer %s: %s\n", want[i], peer->version());
            mha_gbench_add_context(key, peer->version());
            out[n++] = peer;
            continue;
        }
        printf("peer %s: not available here (%s)\n", want[i], why);
        note_add(skipped, "peer.%s: not available here (%s)", want[i], why);
        snprintf(val, sizeof val, "unavailable: %s", why);
        mha_gbench_add_context(key, val);
    }
    fflush(stdout);
    return n;
}

/* Each peer benchmark's output against the float64 oracle before it is
 * timed (peer_check.h): one that fails is reported (and noted in skipped),
 * not timed. The oracle of a shape serves every peer and thread count of it.
 * Returns the benchmarks kept. */
int check_peers(bench *benches, int nbench, note_list *skipped) {
    peer_oracle o = {0};
    shape held_s; /* the shape o is the oracle of (a copy: benches move below) */
    const shape *held = NULL;
    int kept = 0;
    for (int i = 0; i < nbench; i++) {
        bench *b = &benches[i];
        if (!b->peer) {
            benches[kept++] = *b;
            continue;
        }
        meas_call c;
        const char *err = meas_prepare_peer(&sweep_pool, b->peer, &b->s, b->threads, &c);
        peer_check_result r = {0};
        int ok = -1;
        if (!err) {
            if (!held || memcmp(held, &b->s, sizeof *held) != 0) {
                peer_oracle_free(&o);
                held = NULL;
                const meas_inputs *in = meas_inputs_of(&sweep_pool, &b->s);
                const mha_problem p = meas_problem(&b->s);
                const mha_extras x = in ? meas_inputs_extras(in) : (mha_extras){0};
                if (in && peer_oracle_make(&p, in->q, in->k, in->v, &x, &o)) {
                    held_s = b->s;
                    held = &held_s;
                }
            }
            if (held)
                ok = peer_check(b->peer, c.pi, &o, &r);
            else
                snprintf(r.detail, sizeof r.detail, "the oracle could not run (out of memory)");
        } else {
            snprintf(r.detail, sizeof r.detail, "%s", err);
        }
        if (ok == 1) {
            b->max_err = r.max_err;
            b->check_worst = r.worst;
            snprintf(b->label, sizeof b->label, "%s", b->peer->settings(c.pi));
            printf("check %s: %s\n", b->name, r.detail);
            benches[kept++] = *b;
            continue;
        }
        printf("check %s: %s: %s (not timed)\n", b->name, ok == 0 ? "FAILED" : "could not run",
               r.detail);
        note_add(skipped, "%s (%s the oracle check: %s)", b->name,
                 ok == 0 ? "failed" : "could not run", r.detail);
        free(b->gflops);
        free(b->dist);
        free(b->prate);
        free(b->stolen);
    }
    peer_oracle_free(&o);
    fflush(stdout);
    return kept;
}

/* Pins the threads, measures the machine and each kernel's rate for the time
 * estimates, and says so. Returns the binding's name. */
const char *measure_machine(const sweep_args *a, const preset *pr, const sweep_axes *x, int all,
                            const mha_kernel *const *kernels, int nk, results_machine *rm,
                            double *rate) {
    int64_t tmax = 1;
    for (int i = 0; i < x->nthreads; i++) tmax = x->threads[i] > tmax ? x->threads[i] : tmax;
    const char *binding = "none";
    if (a->bind) {
        const int pool = (int)(tmax > all ? tmax : all);
        if (results_bind_threads(pool)) binding = "cores";
    }
    printf("mhabench sweep: preset %s, %d kernel%s, threads", pr->name, nk, nk == 1 ? "" : "s");
    for (int i = 0; i < x->nthreads; i++) printf("%s%lld", i ? "," : " ", (long long)x->threads[i]);
    printf(", binding %s, seed %llu\nmeasuring the machine (compute units per ISA, read "
           "bandwidth)...\n",
           binding, (unsigned long long)a->seed);
    fflush(stdout);
    /* A test hook (tests/meson.build's test_env): the tests that run sweeps
     * for their files and messages, never their figures, take each probe in
     * MHA_SWEEP_TEST_PROBE_S seconds (below the 0.15 used otherwise), so a
     * sweep starts in about 1.6 s instead of 3.7 (Intel VM, stop 51). */
    const char *ps = getenv("MHA_SWEEP_TEST_PROBE_S");
    const double asked = ps ? atof(ps) : 0, probe_s = asked > 0 && asked < 0.15 ? asked : 0.15;
    /* all-core figures matter to multi-thread rows */
    results_measure_machine(rm, probe_s, tmax > 1);
    /* A test hook (tests/test_peak_trust.sh): a start as disturbed as a busy
     * host's, every peak scaled by MHA_SWEEP_TEST_PEAK_SCALE, so the retakes
     * must bring the rows back under 100%. */
    const char *scale = getenv("MHA_SWEEP_TEST_PEAK_SCALE");
    if (scale && atof(scale) > 0 && atof(scale) < 1)
        for (int i = 0; i < MHA_ISA_COUNT; i++)
            for (int u = 0; u < MHA_UNITS_MAX; u++) rm->unit_rate[i][u] *= atof(scale);
    printf("cpu %s (%s), peak GFLOP/s per thread:", rm->m.model, rm->cpu_key);
    for (int i = 0; i < MHA_ISA_COUNT; i++)
        if (results_fp32_peak(rm, (mha_isa)i) > 0)
            printf(" %s %.1f", mha_isa_name((mha_isa)i), results_fp32_peak(rm, (mha_isa)i));
    printf("; read GB/s (1 thread / %d):", rm->bw_threads_all);
    for (int l = 0; l < MACH_LEVELS; l++)
        printf(" %s %.1f/%.1f", machine_level_name((machine_level)l), rm->level_bw[l][0],
               rm->level_bw[l][1]);
    printf("; all cores at once: %.2f x one core each", rm->fma_ceiling_all);
    if (rm->measure_tries > 1)
        printf("; all-core figures taken twice (the first looked disturbed), the better kept");
    if (rm->disturbed)
        printf(" (still low: the machine looks busy; multi-thread rows use these figures as "
               "measured)");
    printf("\n");
    printf("rates on B=1 H=1 N=256 d=64, 1 thread (for the time estimates):");
    for (int i = 0; i < nk; i++) {
        if (!kernels[i]) { /* auto: estimated from the kernel it picks, per shape */
            rate[i] = 0;
            continue;
        }
        rate[i] = probe_rate(kernels[i]);
        printf(" %s %.1f", mha_kernel_name(kernels[i]), rate[i]);
    }
    printf(" GFLOP/s\n");
    fflush(stdout);
    return binding;
}

/* The results file, created (unnamed) before any measurement: a bad --out
 * fails here, and a killed sweep leaves nothing behind. A run file in
 * results/runs never replaces another (a -2, -3 ... suffix instead); a
 * user-named --out may replace a regular file. 0, or -1 after a message. */
static int open_out(const sweep_args *a, time_t started, mha_out *out) {
    char why[1024], path[4096];
    if (a->out_path)
        snprintf(path, sizeof path, "%s", a->out_path);
    else if (!results_run_path(RUNS_DIR, started, 0, path, sizeof path)) {
        errorf("sweep: run-file name too long");
        return -1;
    }
    if (mha_out_begin(out, path,
                      (a->out_path ? MHA_OUT_REPLACE : MHA_OUT_NOREPLACE) | MHA_OUT_MKDIRS, why,
                      sizeof why) != MHA_OK) {
        errorf("sweep: --out: %s", why);
        return -1;
    }
    return 0;
}

/* Repetitions per benchmark: the preset's (or --repetitions); an interleaved
 * preset's baseline-ISA kernels (naive, *.scalar) its baseline_reps. */
static void set_repetitions(const sweep_args *a, const preset *pr, bench *benches, int nbench,
                            int repetitions) {
    for (int i = 0; i < nbench; i++) {
        bench *b = &benches[i];
        b->reps = repetitions;
        if (pr->interleaved && pr->baseline_reps > 0 && a->reps == 0 && b->k && !b->peer &&
            mha_kernel_isa(b->k) == MHA_ISA_SCALAR && !(mha_kernel_traits(b->k) & MHA_KT_BASELINE))
            b->reps = pr->baseline_reps;
    }
}

/* The run's facts in the result file's context (known before it runs): the
 * machine (results_context), the estimate's bound, what was skipped, the
 * auto rows not measured twice ("auto/<shape> = <row>; ..." or none) and how
 * the peaks are taken. */
static void run_context(const sweep_args *a, const preset *pr, const sweep_axes *x,
                        const results_machine *rm, const char *binding, int nskipped,
                        const note_list *aliases) {
    int max_threads = 1;
    for (int i = 0; i < x->nthreads; i++)
        max_threads = x->threads[i] > max_threads ? (int)x->threads[i] : max_threads;
    const results_run_info ri = {pr->name, binding, pr->interleaved ? "interleaved" : "grouped",
                                 max_threads, a->seed};
    results_context(rm, &ri, ctx_emit, NULL);
    char buf[64];
    snprintf(buf, sizeof buf, "%g", a->max_seconds);
    mha_gbench_add_context("mha_max_seconds", buf);
    snprintf(buf, sizeof buf, "%d", nskipped);
    mha_gbench_add_context("mha_skipped", buf);
    size_t alen = 8;
    for (int i = 0; i < aliases->n; i++) alen += strlen(aliases->items[i].text) + 2;
    char *ajoin = xrealloc_or_exit(NULL, alen, 1, "sweep");
    ajoin[0] = '\0';
    for (int i = 0; i < aliases->n; i++) {
        if (i) strcat(ajoin, "; ");
        strcat(ajoin, aliases->items[i].text);
    }
    mha_gbench_add_context("mha_auto_rows", aliases->n ? ajoin : "none");
    free(ajoin);
    mha_gbench_add_context("mha_peak_rule",
                           "each row's pct_peak is of its peak counter: the best take of the "
                           "machine's peaks so far (at the start, before each follow-up pass, and "
                           "whenever a row came within 3% of its peak); a row still above it is "
                           "flagged peak_exceeded, a measurement error");
}

int cmd_sweep(int argc, char **argv) {
    sweep_args a;
    const int parsed = parse_sweep_args(argc, argv, &a);
    if (parsed != 0) return parsed > 0 ? 0 : EXIT_USAGE;
    if (!check_isa_env()) return EXIT_USAGE;
    const preset *prp = preset_find(a.preset_name);
    if (!prp) {
        presets_say_unknown(a.preset_name);
        return EXIT_USAGE;
    }
    const preset pr = *prp;
    if (!a.dtypes) a.dtypes = pr.dtypes ? pr.dtypes : MHA_DTYPE_BIT(MHA_F32);
    if (a.max_seconds < 0) a.max_seconds = pr.max_seconds > 0 ? pr.max_seconds : SWEEP_MAX_SECONDS;
    note_no_tuning_table(stdout);
    machine_info mi;
    machine_describe(&mi);
    const int all = mi.cores > 0 ? mi.cores : 1;
    sweep_axes x;
    if (build_axes(&a, &pr, all, &x) != 0) return EXIT_USAGE;
    const double min_time = a.min_time < 0 ? pr.min_time : a.min_time;
    const int interleaved = pr.interleaved;
    const int repetitions = a.reps > 0 ? (int)a.reps : pr.repetitions;
    if (!a.passes) a.passes = pr.passes ? pr.passes : SWEEP_MAX_PASSES;
    const mha_kernel *kernels[MAX_KERNELS];
    const int nk = choose_kernels(&a, &pr, kernels);
    if (nk < 0) return EXIT_USAGE;

    mha_out out;
    char path[4096];
    const time_t started = time(NULL);
    if (open_out(&a, started, &out) != 0) return EXIT_USAGE;
    meas_pool_init(&sweep_pool, a.seed);
    results_machine rm;
    double rate[MAX_KERNELS];
    const char *binding = measure_machine(&a, &pr, &x, all, kernels, nk, &rm, rate);

    note_list skipped = {0}, notes = {0}, aliases = {0};
    int nshapes = 0, nbench = 0, ngroups = 0, exit_code = 0;
    const peer_ops *peers[MAX_PEERS];
    for (int t = 0; t < MHA_DTYPE_COUNT; t++) /* what bounds a peer's claimed time */
        peer_set_peak((mha_dtype)t, results_machine_peak(&rm, (mha_dtype)t));
    const int npeers = choose_peers(&a, peers, &skipped);
    shape *shapes = build_shapes(&a, &pr, &x, &notes, &nshapes);
    shapes = expand_dtypes(shapes, &nshapes, a.dtypes, a.kv_dtypes);
    const bench_plan plan = {&pr,
                             kernels,
                             rate,
                             nk,
                             x.threads,
                             x.nthreads,
                             a.kernel_list != NULL,
                             &rm,
                             a.max_seconds,
                             min_time,
                             peers,
                             npeers,
                             a.progress == PROGRESS_VERBOSE};
    bench *benches = plan_benches(&plan, shapes, nshapes, &skipped, &aliases, &nbench, &ngroups);
    free(shapes);
    for (int i = 0; i < notes.n; i++) printf("note: %s\n", notes.items[i].text);
    int empty_shard = 0; /* a list with fewer benchmarks than shards leaves some none */
    if (a.shard.count > 0) {
        empty_shard = nbench > 0;
        nbench = take_shard(benches, nbench, &a.shard, min_time);
        empty_shard &= nbench == 0;
    }
    if (npeers > 0) nbench = check_peers(benches, nbench, &skipped);
    set_repetitions(&a, &pr, benches, nbench, repetitions);
    if (nbench == 0 && !empty_shard) {
        errorf("sweep: nothing to run (every combination was skipped)");
        exit_code = EXIT_USAGE;
        goto done;
    }
    if (nbench > 0 && register_benches(benches, nbench, interleaved, pr.by_shape, a.seed) != 0) {
        exit_code = EXIT_USAGE;
        goto done;
    }
    run_context(&a, &pr, &x, &rm, binding, skipped.n, &aliases);

    if (empty_shard) {
        exit_code = write_empty_shard(&a, &out, started);
        goto done;
    }
    sweep_rm = &rm;
    sweep_benches = benches;
    sweep_nbench = nbench;
    run_state rs;
    double t0;
    if (run_and_commit(&a, benches, nbench, ngroups, interleaved, repetitions, min_time, skipped.n,
                       &out, started, &rs, &t0) != 0) {
        exit_code = EXIT_USAGE;
        goto done;
    }
    snprintf(path, sizeof path, "%s", out.target);
    if (report_sweep(benches, nbench, &skipped, rs.runs, t0, path,
                     a.progress == PROGRESS_VERBOSE ? REPORT_VERBOSE : REPORT_SHORT,
                     a.progress == PROGRESS_VERBOSE) > 0)
        exit_code = EXIT_CHECK_FAILED;

done:
    sweep_rm = NULL;
    sweep_benches = NULL;
    sweep_nbench = 0;
    mha_out_abort(&out); /* no-op after a commit */
    for (int i = 0; i < nbench; i++) {
        free(benches[i].gflops);
        free(benches[i].prate);
        free(benches[i].stolen);
        free(benches[i].dist);
    }
    free(benches);
    note_free(&skipped);
    note_free(&notes);
    note_free(&aliases);
    meas_pool_release(&sweep_pool);
    for (int i = 0; i < npeers; i++)
        if (peers[i]->shutdown) peers[i]->shutdown();
    mha_gbench_clear();
    return exit_code;
}
