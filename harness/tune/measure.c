/* measure.c - one class's data (timing inputs, the verification case) and the
 * measurement of a candidate: verified once against the float64 oracle, then
 * timed by the measurement core; every measurement a line of the log. */
#include <math.h>
#include <string.h>
#include <time.h>

#include "fmt_results.h"
#include "stats.h"
#include "util.h"
#include "tune.h"

/* ---- one class's data: timing inputs and the verification case --------------------- */

void class_data_free(class_data *cd) {
    meas_pool_release(&cd->pool);
    if (cd->have_vd) check_release(&cd->vd);
    memset(cd, 0, sizeof *cd);
}

static int same_problem(const mha_problem *a, const mha_problem *b) {
    return a->batch == b->batch && a->heads == b->heads && a->kv_heads == b->kv_heads &&
           a->seq_q == b->seq_q && a->seq_kv == b->seq_kv && a->head_dim == b->head_dim &&
           a->causal == b->causal && a->dtype == b->dtype &&
           mha_problem_kv_dtype(a) == mha_problem_kv_dtype(b);
}

/* Prepares cd for class c, reusing what it holds when the problem is the same
 * (the t1 and tall classes of a shape share inputs and the oracle's output). */
int class_data_prepare(class_data *cd, const mha_shape_class *c, uint64_t seed) {
    mha_problem p, vp;
    mha_class_problem(c, &p);
    mha_class_verify_problem(c, &vp);
    if (cd->have_vd && same_problem(&p, &cd->p) && same_problem(&vp, &cd->vp)) return 1;
    class_data_free(cd);
    cd->p = p;
    cd->vp = vp;
    uint64_t rng = seed ^ ((uint64_t)p.head_dim << 40) ^ ((uint64_t)p.seq_kv << 8) ^
                   (uint64_t)(p.causal + 2 * (p.seq_q == 1));
    /* The timed inputs come from the measurement core (filled from the seed
     * and the shape when first used). */
    meas_pool_init(&cd->pool, seed);
    const check_case cc = {.p = vp, .input = INPUT_UNIFORM, .layout = LAYOUT_BHND, .tag = "tune"};
    if (check_prepare(&cc, splitmix64(&rng), &cd->vd) != MHA_OK) return 0;
    cd->have_vd = 1;
    return 1;
}

/* ---- measuring one candidate ----------------------------------------------------------- */

/* The ratio recorded for k (0: none yet). */
double ratio_of(const tune_ctx *tx, const mha_kernel *k) {
    for (int i = 0; i < tx->nratio; i++)
        if (tx->rk[i] == k) return tx->ratio[i];
    return 0;
}

static void ratio_set(tune_ctx *tx, const mha_kernel *k, double r) {
    int i = 0;
    while (i < tx->nratio && tx->rk[i] != k) i++;
    if (i == 32) return;
    if (i == tx->nratio) tx->rk[tx->nratio++] = k;
    tx->ratio[i] = r;
}

/* Calls per sample for a call of t seconds (SAMPLE_MIN_S). */
static int calls_per_sample(double t) {
    if (!(t > 0) || t >= SAMPLE_MIN_S) return 1;
    const double k = ceil(SAMPLE_MIN_S / t);
    return k < SAMPLE_MAX_CALLS ? (int)k : SAMPLE_MAX_CALLS;
}

/* The sampling plan of one measurement: at most max_reps rounds of samples
 * of `calls` calls. */
static meas_plan tune_plan(const tune_ctx *tx, double time_cap, int max_reps, int calls) {
    return (meas_plan){.threads = mha_resolve_threads(&(mha_options){.threads = tx->threads}),
                       .min_reps = MIN_REPS,
                       .max_reps = max_reps,
                       .time_cap = time_cap,
                       .target = TARGET_HALFWIDTH,
                       .max_retakes = MAX_RETAKES,
                       .probe_min = MEAS_POLICY.probe_min,
                       .calls = calls};
}

static void tally_add(tune_ctx *tx, const meas_tally *t) {
    tx->last = *t;
    tx->retakes += t->retakes;
    tx->disturbed_kept += t->disturbed_kept;
    tx->other = t->other_share; /* the loop's load check, -1 when too short to tell */
}

static void log_line(tune_ctx *tx, const class_data *cd, const mha_kernel *k, const point *pt,
                     const char *verify, double max_err, double tol, const double *times, int reps,
                     double median, const char *phase) {
    if (!tx->log) return;
    json_object *o = json_object_new_object();
    time_t now = time(NULL);
    struct tm tm;
    char ts[32];
    gmtime_r(&now, &tm);
    strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
    json_object_object_add(o, "time", json_object_new_string(ts));
    json_object_object_add(o, "class", json_object_new_string(tx->cls));
    json_object_object_add(o, "phase", json_object_new_string(phase));
    json_object_object_add(o, "kernel", json_object_new_string(mha_kernel_name(k)));
    json_object_object_add(o, "block_q", json_object_new_int(pt->bq));
    json_object_object_add(o, "block_kv", json_object_new_int(pt->bk));
    json_object_object_add(o, "split", json_object_new_int(pt->split));
    json_object_object_add(o, "threads", json_object_new_int(tx->threads));
    json_object *shape = json_object_new_object();
    json_object_object_add(shape, "batch", json_object_new_int64(cd->p.batch));
    json_object_object_add(shape, "heads", json_object_new_int64(cd->p.heads));
    json_object_object_add(shape, "kv_heads", json_object_new_int64(cd->p.kv_heads));
    json_object_object_add(shape, "seq_q", json_object_new_int64(cd->p.seq_q));
    json_object_object_add(shape, "seq_kv", json_object_new_int64(cd->p.seq_kv));
    json_object_object_add(shape, "head_dim", json_object_new_int64(cd->p.head_dim));
    json_object_object_add(shape, "causal", json_object_new_boolean(cd->p.causal));
    json_object_object_add(shape, "dtype", json_object_new_string(mha_dtype_name(cd->p.dtype)));
    json_object_object_add(shape, "kv_dtype",
                           json_object_new_string(mha_dtype_name(mha_problem_kv_dtype(&cd->p))));
    json_object_object_add(o, "shape", shape);
    json_object_object_add(o, "verify", json_object_new_string(verify));
    json_object_object_add(o, "max_err", results_json_double(max_err));
    json_object_object_add(o, "tolerance", results_json_double(tol));
    json_object *t = json_object_new_array();
    for (int i = 0; i < reps; i++) json_object_array_add(t, results_json_double(times[i]));
    json_object_object_add(o, "times_s", t);
    json_object_object_add(o, "median_s", results_json_double(median));
    json_object_object_add(o, "gflops", results_json_double(pt->gflops));
    json_object_object_add(o, "other_load", results_json_double(round(tx->other * 1000) / 1000));
    if (reps > 0) {
        json_object_object_add(o, "retakes", json_object_new_int(tx->last.retakes));
        json_object_object_add(o, "disturbed_kept", json_object_new_int(tx->last.disturbed_kept));
        json_object_object_add(o, "halfwidth",
                               results_json_double(round(meas_halfwidth(times, reps) * 1e4) / 1e4));
    }
    fprintf(tx->log, "%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
    fflush(tx->log);
    json_object_put(o);
}

/* Verifies (once per kernel and knobs: `verified` says whether it already
 * passed) and times one candidate; time_cap bounds the repetitions after the
 * first MIN_REPS. Fills pt->status and pt->gflops. */
void measure(tune_ctx *tx, class_data *cd, const mha_kernel *k, point *pt, int verified,
             double time_cap, const char *phase) {
    const mha_options o = {
        .threads = tx->threads, .block_q = pt->bq, .block_kv = pt->bk, .split = pt->split};
    double max_err = 0;
    const char *verdict = verified ? "skipped (passed before)" : "pass";
    pt->status = -1;
    pt->gflops = 0;
    tx->measurements++;
    if (!verified) {
        /* verify's check (check.c): a sentinel-filled, guarded output of the
         * class's dtype, the tolerance written down for that dtype */
        check_report rep;
        const int res = check_kernel_opts(k, &cd->vd, &o, &rep);
        max_err = rep.max_err;
        if (res != CHECK_PASS) {
            errorf("tune: %s block_q=%d block_kv=%d split=%d FAILS verification on %s: %s "
                   "(candidate dropped)",
                   mha_kernel_name(k), pt->bq, pt->bk, pt->split, tx->cls, rep.detail);
            log_line(tx, cd, k, pt, res == CHECK_FAIL ? "fail" : "error", max_err, cd->vd.tol, NULL,
                     0, 0, phase);
            tx->failures++;
            return;
        }
    }
    const mha_problem *p = &cd->p;
    const meas_shape shp = meas_shape_of(p);
    meas_call call;
    if (meas_prepare(&cd->pool, k, &shp, &o, &call)) {
        errorf("tune: %s: no workspace for %s (%zu bytes)", mha_kernel_name(k), tx->cls,
               call.ws_size);
        log_line(tx, cd, k, pt, "error", 0, 0, NULL, 0, 0, phase);
        return;
    }
    double times[MAX_REPS], warm = 0;
    /* warm-up: caches, page faults of a fresh workspace, the OpenMP pool */
    if (meas_sample(&call, &warm) != MHA_OK) {
        errorf("tune: %s on %s: %s", mha_kernel_name(k), tx->cls, mha_last_error());
        log_line(tx, cd, k, pt, "error", max_err, cd->vd.tol, NULL, 0, 0, phase);
        return;
    }
    const meas_plan pl = tune_plan(tx, time_cap, MAX_REPS, calls_per_sample(warm));
    meas_tally tl;
    const int reps = meas_interleave_guarded(&call, 1, &pl, times, &tl);
    tally_add(tx, &tl);
    double sorted[MAX_REPS];
    memcpy(sorted, times, (size_t)reps * sizeof(double));
    const double median = median_inplace(sorted, reps);
    pt->gflops = median > 0 ? mha_problem_flops(p) / median * 1e-9 : 0;
    pt->status = 1;
    if (strcmp(phase, "prior") == 0 && tx->cost > 0) ratio_set(tx, k, median / tx->cost);
    log_line(tx, cd, k, pt, verdict, max_err, cd->vd.tol, times, reps, median, phase);
}

/* Times n measured candidates round-robin: MIN_REPS rounds, then more (up to
 * FINAL_MAX_REPS) while the next round fits in time_cap; each point's gflops
 * becomes its median, lo/hi its 95% interval. */
double interleave(tune_ctx *tx, class_data *cd, const mha_kernel **ks, point **pts, int n,
                  double time_cap, const char *phase) {
    const mha_problem *p = &cd->p;
    const meas_shape shp = meas_shape_of(p);
    meas_call calls[64];
    /* Twice: the first pass grows the shared workspace to the largest need
     * (moving it), the second binds every call to where it ended up. */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < n; i++) {
            const mha_options o = {.threads = tx->threads,
                                   .block_q = pts[i]->bq,
                                   .block_kv = pts[i]->bk,
                                   .split = pts[i]->split};
            if (meas_prepare(&cd->pool, ks[i], &shp, &o, &calls[i]))
                return -1; /* keep the search's numbers */
        }
    static double times[64][FINAL_MAX_REPS];
    double fastest = INFINITY;
    for (int i = 0; i < n; i++) {
        double t = INFINITY;
        meas_sample(&calls[i], &t);
        fastest = t < fastest ? t : fastest;
    }
    const meas_plan pl = tune_plan(tx, time_cap, FINAL_MAX_REPS, calls_per_sample(fastest));
    meas_tally tl;
    const int reps = meas_interleave_guarded(calls, n, &pl, &times[0][0], &tl);
    tally_add(tx, &tl);
    for (int i = 0; i < n; i++) {
        double sorted[FINAL_MAX_REPS];
        memcpy(sorted, times[i], (size_t)reps * sizeof(double));
        const double median = median_inplace(sorted, reps);
        pts[i]->gflops = median > 0 ? mha_problem_flops(p) / median * 1e-9 : 0;
        double tlo, thi; /* times: the slow end of the rate is the long time */
        median_interval(sorted, reps, 0.95, &tlo, &thi);
        pts[i]->lo = thi > 0 ? mha_problem_flops(p) / thi * 1e-9 : 0;
        pts[i]->hi = tlo > 0 ? mha_problem_flops(p) / tlo * 1e-9 : 0;
        tx->measurements++;
        log_line(tx, cd, ks[i], pts[i], "skipped (passed before)", 0, cd->vd.tol, times[i], reps,
                 median, phase);
    }
    return tx->other;
}
