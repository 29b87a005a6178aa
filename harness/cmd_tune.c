/* cmd_tune.c - `mhabench tune`: per shape class (variants/classes.c), a
 * bounded coordinate-descent search of each tunable kernel's knobs from the
 * cache-model prior; every candidate is checked once against the float64
 * oracle, then timed (median of repetitions). Every measurement goes to a
 * JSON Lines log; the winners become the per-CPU table mha_select reads.
 * `mhabench recommend` prints what mha_select picks for a shape, and why. */
#include <errno.h>
#include <stdarg.h>
#include <getopt.h>
#include <json-c/json.h>
#include <libgen.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "meas_core.h"
#include "commands.h"
#include "mach_info.h"
#include "mha_private.h"
#include "shard.h"
#include "stats.h"
#include "fmt_results.h"
#include "util.h"

#define DEFAULT_BUDGET_S 120.0
#define MIN_REPS 5
#define MAX_REPS 15
/* Sampling stops once the median's 95% interval is this narrow (relative
 * half-width), or the class's time cap or MAX_REPS is reached; disturbed
 * samples (meas_core's evidence) are retaken, at most this many per
 * measurement. */
#define TARGET_HALFWIDTH 0.02
#define MAX_RETAKES 8
/* The final round decides, so it may take more rounds to reach the target
 * (the small classes' sub-millisecond calls needed them: 15 rounds left
 * intervals 5-10% wide there, and their decisions flipped between runs). */
#define FINAL_MAX_REPS 31
/* A sample is at least this long: calls shorter than it are repeated back to
 * back inside one sample (their mean), so a 0.3 ms call is not timed against
 * the timer tick's noise and the probes around it. */
#define SAMPLE_MIN_S 2e-3
#define SAMPLE_MAX_CALLS 64
/* A search step must beat the current point by this much: timing noise on a
 * shared 2-core VM is ~1-2%, and chasing it would wander. */
#define MOVE_MARGIN 1.02
/* What the table acts on: tuned knobs replace the cache model's, and another
 * kernel mha_select's default, only when they win by this much in the final
 * round with their interval wholly above; closer is a tie, and the default
 * stays. Two back-to-back `tune --budget 120` runs here agreed on 45 of 56
 * classes with 2%: the within-run intervals were narrow (+-0.3-1.5%), but
 * moves of 2-5% held in one run and not the other (the descent found
 * 96 x 96 in one run and stopped at 64 x 64 in the other), while the moves
 * above 5% held in both. */
#define REPLACE_MARGIN 1.05
/* The run ends within this fraction past its budget: a class is started only
 * when its first measurements fit in what is left and this. */
#define BUDGET_SLACK 0.05
/* The part of the budget kept for the confirmation rounds at the end of the
 * run (confirm_departures); the classes share the rest. */
#define CONFIRM_FRACTION 0.10
#define MAX_POINTS 96
#define MAX_VALUES 48
/* Kernels whose search best is within this fraction of the top one take
 * part in the final round (the others cannot win it). */
#define FINAL_FRACTION 0.85

/* snprintf for paths: an over-long path is cut (and then fails to open
 * with a message), which is all a command line tool can do. */
static void fmt(char *buf, size_t len, const char *f, ...) __attribute__((format(printf, 3, 4)));
static void fmt(char *buf, size_t len, const char *f, ...) {
    va_list ap;
    va_start(ap, f);
    vsnprintf(buf, len, f, ap);
    va_end(ap);
}

/* Other processes' share of the machine over a window: busy time of all
 * CPUs (/proc/stat, steal included: a VM's host taking the core hurts the
 * same) minus this process's own (/proc/self/stat), over CPUs x wall time.
 * Both count in clock ticks (10 ms), so windows shorter than MIN_LOAD_WINDOW
 * report -1 (unknown). Above CONTENDED_SHARE the numbers are suspect: the
 * final round is repeated once and the class is flagged. */
#define MIN_LOAD_WINDOW 0.25
#define CONTENDED_SHARE 0.10
typedef struct {
    double wall;
    unsigned long long busy, self;
} load_mark;

static void load_mark_now(load_mark *m) {
    m->wall = now_s();
    m->busy = m->self = 0;
    FILE *f = fopen("/proc/stat", "r");
    if (f) {
        unsigned long long v[8] = {0};
        if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                   &v[4], &v[5], &v[6], &v[7]) == 8)
            m->busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7]; /* not idle, iowait */
        fclose(f);
    }
    f = fopen("/proc/self/stat", "r");
    if (f) {
        char buf[1024];
        const size_t n = fread(buf, 1, sizeof buf - 1, f);
        buf[n] = '\0';
        const char *p = strrchr(buf, ')'); /* the command name may hold spaces */
        unsigned long long ut = 0, st = 0;
        if (p &&
            sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) == 2)
            m->self = ut + st;
        fclose(f);
    }
}

static double other_share(const load_mark *a, const load_mark *b) {
    const double wall = b->wall - a->wall;
    const long hz = sysconf(_SC_CLK_TCK), ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (wall < MIN_LOAD_WINDOW || hz <= 0 || ncpu <= 0 || !a->busy || !b->busy) return -1;
    const double other = (double)(b->busy - a->busy) - (double)(b->self - a->self);
    const double share = other / (double)hz / (wall * (double)ncpu);
    return share < 0 ? 0 : share;
}

/* ---- one class's data: timing inputs and the verification case --------------------- */
typedef struct {
    mha_problem p;  /* timed */
    mha_problem vp; /* verified */
    meas_pool pool; /* the timed problem's inputs and every workspace */
    check_data vd;
    int have_vd;
} class_data;

static void class_data_free(class_data *cd) {
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
static int class_data_prepare(class_data *cd, const mha_shape_class *c, uint64_t seed) {
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
typedef struct {
    int bq, bk, split;
    int status; /* 1 measured, -1 failed verification or errored */
    double gflops;
    double lo, hi; /* the final round's 95% interval of the median rate (0, 0: none) */
} point;

typedef struct {
    FILE *log;
    const char *cls;
    int threads;
    int failures;
    int measurements;
    double other;    /* other processes' share during the last timed repetitions, -1 unknown */
    meas_tally last; /* the last measurement's repetitions and retakes */
    int retakes, disturbed_kept;
    /* Seconds per call of each kernel's last prior over the class cost
     * estimate (class_cost) of its class: what the next classes' first
     * measurements will take, as the run goes from cheap classes to dear. */
    double cost; /* the class being tuned */
    const mha_kernel *rk[32];
    double ratio[32];
    int nratio;
} tune_ctx;

/* The ratio recorded for k (0: none yet). */
static double ratio_of(const tune_ctx *tx, const mha_kernel *k) {
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
                       .probe_min = MEAS_PROBE_MIN,
                       .calls = calls};
}

static void tally_add(tune_ctx *tx, const meas_tally *t) {
    tx->last = *t;
    tx->retakes += t->retakes;
    tx->disturbed_kept += t->disturbed_kept;
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
static void measure(tune_ctx *tx, class_data *cd, const mha_kernel *k, point *pt, int verified,
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
    load_mark m0, m1;
    load_mark_now(&m0);
    const meas_plan pl = tune_plan(tx, time_cap, MAX_REPS, calls_per_sample(warm));
    meas_tally tl;
    const int reps = meas_interleave_guarded(&call, 1, &pl, times, &tl);
    tally_add(tx, &tl);
    load_mark_now(&m1);
    tx->other = other_share(&m0, &m1);
    double sorted[MAX_REPS];
    memcpy(sorted, times, (size_t)reps * sizeof(double));
    const double median = median_inplace(sorted, reps);
    pt->gflops = median > 0 ? mha_problem_flops(p) / median * 1e-9 : 0;
    pt->status = 1;
    if (strcmp(phase, "prior") == 0 && tx->cost > 0) ratio_set(tx, k, median / tx->cost);
    log_line(tx, cd, k, pt, verdict, max_err, cd->vd.tol, times, reps, median, phase);
}

/* ---- the search ------------------------------------------------------------------------- */

static int add_value(int *v, int n, int x) {
    for (int i = 0; i < n; i++)
        if (v[i] == x) return n;
    if (n < MAX_VALUES) v[n++] = x;
    return n;
}

static int cmp_int(const void *a, const void *b) {
    const int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* Candidate values in [lo, hi]: powers of two, multiples of the tile width up
 * to four tiles, 1.5 and 3 tiles, power-of-two numbers of tiles, and the prior itself; values
 * past the problem's extent (the kernels clamp to it) collapse to one. */
static int axis_values(int *v, int lo, int hi, int w, int prior, int64_t extent) {
    int n = 0;
    for (int x = 1; x <= hi; x *= 2)
        if (x >= lo) n = add_value(v, n, x);
    for (int m = 1; m <= 4; m++)
        if (m * w >= lo && m * w <= hi) n = add_value(v, n, m * w);
    /* one and a half and three tiles: 96 x 256 beat 64 x 128 by 2-5% for
     * d = 64 on this machine, and 96 is neither a power of two nor a tile */
    if (w % 2 == 0)
        for (int m = 3; m <= 6; m += 3)
            if (m * w / 2 >= lo && m * w / 2 <= hi) n = add_value(v, n, m * w / 2);
    for (int m = 8; m * w <= hi; m *= 2)
        if (m * w >= lo) n = add_value(v, n, m * w);
    n = add_value(v, n, prior);
    qsort(v, (size_t)n, sizeof *v, cmp_int);
    int out = 0, past = 0;
    for (int i = 0; i < n; i++) {
        if (v[i] >= extent) {
            if (past) continue;
            past = 1;
        }
        v[out++] = v[i];
    }
    return out;
}

typedef struct {
    const mha_kernel *k;
    int tunable;
    int in_class;      /* timed on the class being tuned (kernel_in_class) */
    point prior, best; /* best.status 1 when anything was measured */
} kernel_result;

typedef struct {
    point pts[MAX_POINTS];
    int n;
} point_set;

static point *find_point(point_set *s, int bq, int bk, int split) {
    for (int i = 0; i < s->n; i++)
        if (s->pts[i].bq == bq && s->pts[i].bk == bk && s->pts[i].split == split) return &s->pts[i];
    return NULL;
}

/* A descent takes about this many measurements (it sizes each one's time). */
#define DESCENT_EST 12

/* The time one measurement of the search may take when `taken` were taken
 * before it: its part of what is left until the deadline. It bounds the whole
 * measurement (meas_core starts no round past it, probes and retakes
 * counted); only MIN_REPS are taken regardless. */
static double measure_cap(double deadline, int taken) {
    const int left = DESCENT_EST - taken > 4 ? DESCENT_EST - taken : 4;
    const double t = deadline - now_s();
    return t > 0 ? t / left : 0;
}

/* Coordinate descent for one kernel: from the prior, along each axis step
 * while it improves by MOVE_MARGIN, until a pass over the axes changes
 * nothing or the kernel's share of the budget is spent. */
static void search_kernel(tune_ctx *tx, class_data *cd, kernel_result *kr, double deadline,
                          int use_split) {
    const mha_kernel *k = kr->k;
    const int w = mha_tile_width(mha_kernel_isa(k));
    mha_options def = {.threads = tx->threads}; /* the cache model's blocks */
    (void)mha_resolve_options(k, &cd->p, &def, &def);
    /* knob-less kernels are recorded with 0 (= default) knobs */
    kr->prior =
        kr->tunable ? (point){.bq = def.block_q, .bk = def.block_kv, .split = 0} : (point){0};
    point_set set = {.n = 0};
    set.pts[set.n] = kr->prior;
    measure(tx, cd, k, &set.pts[set.n], 0, measure_cap(deadline, 0), "prior");
    kr->prior = set.pts[set.n];
    point cur = set.pts[set.n++];
    kr->best = cur;
    if (!kr->tunable || cur.status != 1) return;

    int vq[MAX_VALUES], vk[MAX_VALUES];
    const int nq = axis_values(vq, w, 512, w, def.block_q, cd->p.seq_q);
    const int nk = axis_values(vk, 16, 1024, w, def.block_kv, cd->p.seq_kv);
    const int vs[3] = {0, MHA_SPLIT_HEADS, MHA_SPLIT_QBLOCKS};
    const int ns = use_split ? 3 : 1;
    int improved = 1;
    while (improved && now_s() < deadline) {
        improved = 0;
        for (int axis = 0; axis < 3 && now_s() < deadline; axis++) {
            const int *vals = axis == 0 ? vq : axis == 1 ? vk : vs;
            const int nvals = axis == 0 ? nq : axis == 1 ? nk : ns;
            if (nvals <= 1) continue;
            int idx = 0;
            const int curv = axis == 0 ? cur.bq : axis == 1 ? cur.bk : cur.split;
            for (int i = 0; i < nvals; i++)
                if (vals[i] == curv) idx = i;
            for (int dir = 1; dir >= -1; dir -= 2) {
                int moved = 0;
                for (int j = idx + dir; j >= 0 && j < nvals && now_s() < deadline; j += dir) {
                    point cand = cur;
                    if (axis == 0) cand.bq = vals[j];
                    if (axis == 1) cand.bk = vals[j];
                    if (axis == 2) cand.split = vals[j];
                    point *seen = find_point(&set, cand.bq, cand.bk, cand.split);
                    if (!seen) {
                        if (set.n == MAX_POINTS) break;
                        set.pts[set.n] = cand;
                        measure(tx, cd, k, &set.pts[set.n], 0, measure_cap(deadline, set.n),
                                "search");
                        seen = &set.pts[set.n++];
                    }
                    if (seen->status == 1 && seen->gflops > cur.gflops * MOVE_MARGIN) {
                        cur = *seen;
                        moved = improved = 1;
                        idx = j;
                    } else {
                        break;
                    }
                }
                if (moved) break; /* no need to try the other direction */
            }
        }
    }
    kr->best = cur;
}

static int same_knobs(const point *a, const point *b) {
    return a->bq == b->bq && a->bk == b->bk && a->split == b->split;
}

/* Times n measured candidates round-robin: MIN_REPS rounds, then more (up to
 * FINAL_MAX_REPS) while the next round fits in time_cap; each point's gflops
 * becomes its median, lo/hi its 95% interval. */
static double interleave(tune_ctx *tx, class_data *cd, const mha_kernel **ks, point **pts, int n,
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
    load_mark m0, m1;
    load_mark_now(&m0);
    const meas_plan pl = tune_plan(tx, time_cap, FINAL_MAX_REPS, calls_per_sample(fastest));
    meas_tally tl;
    const int reps = meas_interleave_guarded(calls, n, &pl, &times[0][0], &tl);
    tally_add(tx, &tl);
    load_mark_now(&m1);
    tx->other = other_share(&m0, &m1);
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

/* ---- the table -------------------------------------------------------------------------- */

static json_object *choice_json(const mha_kernel *k, const point *pt) {
    json_object *o = json_object_new_object();
    json_object_object_add(o, "kernel", json_object_new_string(mha_kernel_name(k)));
    json_object_object_add(o, "block_q", json_object_new_int(pt->bq));
    json_object_object_add(o, "block_kv", json_object_new_int(pt->bk));
    json_object_object_add(o, "split", json_object_new_int(pt->split));
    json_object_object_add(o, "gflops", results_json_double(round(pt->gflops * 100) / 100));
    if (pt->hi > 0) { /* measured in the final round: its 95% interval */
        json_object *iv = json_object_new_array();
        json_object_array_add(iv, results_json_double(round(pt->lo * 100) / 100));
        json_object_array_add(iv, results_json_double(round(pt->hi * 100) / 100));
        json_object_object_add(o, "gflops_interval", iv);
    }
    return o;
}

/* Serialises root into w and commits it (a reader sees the old table or the
 * new one, never half of one). Returns 1, or 0 with a message. */
/* Writes the table. With base (the default target, no --force) a table
 * already at base.json stays: the new one goes beside it as
 * base-<stamp>.json (then -2, -3 ...), which the reader takes as the newer;
 * path gets the name taken. */
static int write_table(mha_out *w, json_object *root, const char *base, const char *stamp,
                       char *path, size_t plen) {
    char why[1024];
    const char *s = json_object_to_json_string_ext(
        root, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED | JSON_C_TO_STRING_NOSLASHESCAPE);
    int ok = mha_out_write(w, s, strlen(s), why, sizeof why) == MHA_OK &&
             mha_out_write(w, "\n", 1, why, sizeof why) == MHA_OK;
    for (int attempt = 0; ok && attempt < 1000; attempt++) {
        if (attempt > 0) {
            if (attempt == 1)
                fmt(path, plen, "%s-%s.json", base, stamp);
            else
                fmt(path, plen, "%s-%s-%d.json", base, stamp, attempt);
            if (mha_out_retarget(w, path, why, sizeof why) != MHA_OK) break;
        }
        if (mha_out_commit(w, why, sizeof why) == MHA_OK) return 1;
        if (!w->exists || !base) break;
    }
    mha_out_abort(w);
    errorf("tune: %s", why);
    return 0;
}

/* Commits the log under dir/<key>-<stamp>.jsonl, or -2, -3 ... when that
 * name is taken: a log never replaces another. */
static int commit_log(mha_out *w, const char *dir, const char *key, const char *stamp) {
    char why[1024], path[4400];
    for (int attempt = 0; attempt < 1000; attempt++) {
        if (attempt > 0) {
            fmt(path, sizeof path, "%s/%s-%s-%d.jsonl", dir, key, stamp, attempt + 1);
            if (mha_out_retarget(w, path, why, sizeof why) != MHA_OK) break;
        }
        if (mha_out_commit(w, why, sizeof why) == MHA_OK) return 1;
        if (!w->exists) {
            errorf("tune: log: %s", why);
            return 0;
        }
    }
    mha_out_abort(w);
    errorf("tune: no free log name in %s", dir);
    return 0;
}

static void usage_tune(FILE *f) {
    fprintf(f,
            "usage: mhabench tune [--budget SECONDS] [--classes quick|full] [--kernels a,b]\n"
            "                     [--threads 1,N] [--dtype fp32,bf16] [--out TABLE.json]\n"
            "                     [--seed N] [--shard I/N]\n"
            "  Searches block_q / block_kv (and the parallel split where the kernel has one)\n"
            "  per shape class, verifying every candidate against the float64 oracle, and\n"
            "  writes the tuning table mha_select and `--kernel auto` use, plus a JSON Lines\n"
            "  log of every measurement in log/ beside it.\n"
            "  --budget S    the run's time in seconds (default %.0f); it ends within about\n"
            "                5%% of it (classes share what is left; past it none is started);\n"
            "                one below the cheapest class's floor is refused (exit 2)\n"
            "  --classes C   quick (default: head_dim 64/128, kv <= 4096, decode at 4096) or full\n"
            "  --dtype D     Q/O dtypes of the classes (default fp32,bf16): prefill classes\n"
            "                come in both, decode in fp32; a dtype no kernel with block knobs\n"
            "                takes here (bf16 without AVX512_BF16) is left out\n"
            "  --kernels K   kernels to search (default: each algorithm at its highest ISA\n"
            "                here, decode kernels on decode classes only, plus knob-less\n"
            "                baselines such as blas.cblas timed as they are); each class\n"
            "                times those that take its dtype\n"
            "  --threads T   thread counts: 1 for the t1 classes, N > 1 for the tall ones\n"
            "                (default 1,<cores>)\n"
            "  --out F       the table (replaced if there; default: this CPU's table where\n"
            "                mha_select reads first: MHA_TUNING_DIR, the installed\n"
            "                <datadir>/mhabench/tuning, else the tree's results/tuning; a\n"
            "                table already there is kept and the new one written beside it\n"
            "                as <cpu key>-<UTC time>.json, which mha_select reads as newer)\n"
            "  --force       replace this CPU's table there instead\n"
            "  --seed N      input data seed (default 1)\n"
            "  --shard I/N   tune every N-th class from the I-th (fleet mode: N hosts of one\n"
            "                CPU type; `scripts/fleet_report.py tuning` joins their tables)\n",
            DEFAULT_BUDGET_S);
}

/* The split knob is searched where it has an effect: flash honours it
 * (per-head tasks vs (head, query block) tasks); with one thread or one
 * query row there is nothing to split. */
static int split_searched(const mha_kernel *k, const mha_shape_class *c) {
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

/* How one of tune's steps ended. The steps print their own messages; only
 * cmd_tune turns a status into an exit code. */
typedef enum {
    TUNE_OK,           /* go on (or, at the end, the run succeeded) */
    TUNE_HELP,         /* --help was printed: stop, successfully */
    TUNE_CHECK_FAILED, /* a candidate failed verification, or a class has no winner */
    TUNE_BAD_INPUT,    /* bad usage, or an input or output that cannot be used */
} tune_status;

/* What the command line asked for; NULL strings mean the default. */
typedef struct {
    float budget;
    const char *set, *kernels, *threads, *out;
    int force;       /* --force: replace this CPU's table instead of adding one beside it */
    unsigned dtypes; /* MHA_DTYPE_BIT mask of the class dtypes to tune */
    int64_t seed;
    shard_spec shard; /* --shard I/N; count 0: every class */
} tune_args;

/* Parses argv into a. Returns TUNE_OK, TUNE_HELP, or TUNE_BAD_INPUT after
 * printing what was wrong. */
static tune_status parse_tune_args(int argc, char **argv, tune_args *a) {
    enum {
        O_BUDGET = 256,
        O_CLASSES,
        O_KERNELS,
        O_THREADS,
        O_OUT,
        O_SEED,
        O_SHARD,
        O_DTYPE,
        O_FORCE
    };
    static const struct option longopts[] = {
        {"budget", required_argument, NULL, O_BUDGET},
        {"classes", required_argument, NULL, O_CLASSES},
        {"kernels", required_argument, NULL, O_KERNELS},
        {"threads", required_argument, NULL, O_THREADS},
        {"out", required_argument, NULL, O_OUT},
        {"force", no_argument, NULL, O_FORCE},
        {"seed", required_argument, NULL, O_SEED},
        {"shard", required_argument, NULL, O_SHARD},
        {"dtype", required_argument, NULL, O_DTYPE},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *a = (tune_args){.budget = DEFAULT_BUDGET_S,
                     .set = "quick",
                     .dtypes = MHA_DTYPE_BIT(MHA_F32) | MHA_DTYPE_BIT(MHA_BF16),
                     .seed = 1};
    optind = 0;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case O_BUDGET:
            if (!parse_float("--budget", optarg, &a->budget)) return TUNE_BAD_INPUT;
            if (!(a->budget > 0) || a->budget > 86400) {
                errorf("--budget: %g is out of range (0, 86400] seconds", (double)a->budget);
                return TUNE_BAD_INPUT;
            }
            break;
        case O_CLASSES:
            a->set = optarg;
            break;
        case O_KERNELS:
            a->kernels = optarg;
            break;
        case O_THREADS:
            a->threads = optarg;
            break;
        case O_OUT:
            a->out = optarg;
            break;
        case O_FORCE:
            a->force = 1;
            break;
        case O_SEED:
            if (!parse_i64("--seed", optarg, 0, INT64_MAX, &a->seed)) return TUNE_BAD_INPUT;
            break;
        case O_SHARD:
            if (shard_parse(optarg, &a->shard) != 0) return TUNE_BAD_INPUT;
            break;
        case O_DTYPE:
            if (!(a->dtypes = parse_dtype_list("tune: --dtype", optarg, 0))) return TUNE_BAD_INPUT;
            break;
        case 'h':
            usage_tune(stdout);
            return TUNE_HELP;
        default:
            if (c == ':')
                errorf("tune: option %s needs a value", argv[optind - 1]);
            else
                errorf("tune: unknown option '%s'", argv[optind - 1]);
            usage_tune(stderr);
            return TUNE_BAD_INPUT;
        }
    }
    if (optind < argc) {
        errorf("tune: unexpected argument '%s'", argv[optind]);
        return TUNE_BAD_INPUT;
    }
    return TUNE_OK;
}

/* A class whose entry departs from the default (another kernel, or other
 * knobs than the cache model's), to be confirmed at the end of the run. */
typedef struct {
    mha_shape_class cl;
    const mha_kernel *wk, *dk; /* the winner and mha_select's default kernel */
    point wp, dp;              /* their knobs (dp: the cache model's) */
    double final_s;            /* how long the class's final round took */
    json_object *entry;        /* its entry in jclasses */
} departure;

/* One run of tune: what it covers, where it writes, and what it has found. */
typedef struct {
    tune_args a;
    mha_shape_class classes[MHA_CLASS_MAX];
    int ncls;
    int t1, tall; /* t1 classes tuned (0/1); the tall classes' thread count (0: none) */
    kernel_result kr[32];
    int nk;
    machine_info mi;
    mha_isa act;
    char key[96], out_path[4096], log_path[4200], logdir[4300];
    char carry_path[4096]; /* the table read before (its classes carried over), or "" */
    char base[4096];       /* default target without ".json": a new table beside gets a stamp */
    char stamp[32], created[32];
    mha_out table_out, log_out; /* unnamed until the run ends */
    tune_ctx tx;
    class_data cd;
    char cls_name[64];     /* the class being tuned (tx.cls) */
    json_object *jclasses; /* the table's entries for this run's classes */
    double t_begin;
    double share, t_search, t_final; /* the class's planned share and what it spent, s */
    int tuned;                       /* classes with a table entry from this run */
    departure pend[MHA_CLASS_MAX];   /* to be confirmed at the end of the run */
    int npend;
    double load0[3]; /* load averages at the start */
    int contended;   /* classes measured while other processes held the cores */
} tune_run;

/* Whether kernel k is timed on class cl (whose problem is p): it takes the
 * class's dtypes, and by default a decode-shaped kernel only on the decode
 * classes: on prefill shapes decode.avx512 runs at 32-40% of peak where flash
 * runs at 73-85% (README, the roofline table), is never mha_select's default
 * there, and its prior cost about a second per kv4096 class. --kernels times
 * what it names wherever the dtypes allow. */
static int kernel_in_class(const tune_run *r, const mha_kernel *k, const mha_shape_class *cl,
                           const mha_problem *p) {
    if (mha_kernel_takes(k, p) != MHA_OK) return 0;
    return r->a.kernels || cl->decode || !(mha_kernel_traits(k) & MHA_KT_DECODE);
}

/* A rough time of one call of class c's problem, only to order the classes:
 * its FLOPs at 100 GFLOP/s and its bytes at 10 GB/s per thread (a decode
 * call streams its cache), over the threads it runs on. */
static double class_cost(const mha_shape_class *c, int tall) {
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
 * and, for a class not in fp32, one with block knobs (a 16-bit class that only
 * the knob-less decode kernels take has nothing to tune, and timing them on
 * prefill shapes would only confirm the cache model's choice). */
static int class_has_kernel(const tune_run *r, const mha_shape_class *c) {
    mha_problem p;
    mha_class_problem(c, &p);
    for (int i = 0; i < r->nk; i++)
        if (kernel_in_class(r, r->kr[i].k, c, &p) && (r->kr[i].tunable || c->dtype == MHA_F32))
            return 1;
    return 0;
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
                   "takes %s (they keep the cache model's choice)\n",
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

/* What the run covers: the MHA_ISA cap checked, the OpenMP pool pinned, the
 * classes and kernels chosen. Returns TUNE_OK, or TUNE_BAD_INPUT (message
 * printed) when the options are bad or leave nothing to do. */
static tune_status check_budget_floor(const tune_run *r); /* below, with class_floor */

static tune_status plan_run(tune_run *r) {
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

/* Starts the table and the log, both unnamed until the run ends: a bad --out
 * fails before any measurement, and a killed tune leaves no partial table or
 * log. Returns TUNE_OK, or TUNE_BAD_INPUT (message printed, nothing left open). */
static tune_status open_outputs(tune_run *r) {
    mha_cpu_key(r->key, sizeof r->key);
    /* The default: the folder mha_select reads first (MHA_TUNING_DIR, the
     * installed tables, else the tree's), a table there kept unless --force */
    if (r->a.out) {
        fmt(r->out_path, sizeof r->out_path, "%s", r->a.out);
        fmt(r->carry_path, sizeof r->carry_path, "%s", r->a.out);
    } else {
        mha_table_cpu_path(mha_table_write_dir(), r->carry_path, sizeof r->carry_path);
        mha_table_cpu_base(mha_table_write_dir(), r->base, sizeof r->base);
        fmt(r->out_path, sizeof r->out_path, "%s.json", r->base);
    }
    const int keep = !r->a.out && !r->a.force;
    char dir[4096], tmpd[4096];
    fmt(tmpd, sizeof tmpd, "%s", r->out_path);
    fmt(dir, sizeof dir, "%s", dirname(tmpd));
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(r->stamp, sizeof r->stamp, "%Y%m%dT%H%M%SZ", &tm);
    strftime(r->created, sizeof r->created, "%Y-%m-%dT%H:%M:%SZ", &tm);
    fmt(r->log_path, sizeof r->log_path, "%s/log/%s-%s.jsonl", dir, r->key, r->stamp);
    fmt(r->logdir, sizeof r->logdir, "%s/log", dir);
    char why[1024];
    if (mha_out_begin(&r->table_out, r->out_path,
                      (keep ? MHA_OUT_NOREPLACE : MHA_OUT_REPLACE) | MHA_OUT_MKDIRS, why,
                      sizeof why) != MHA_OK) {
        errorf("tune: --out: %s", why);
        return TUNE_BAD_INPUT;
    }
    if (mha_out_begin(&r->log_out, r->log_path, MHA_OUT_NOREPLACE | MHA_OUT_MKDIRS, why,
                      sizeof why) != MHA_OK) {
        mha_out_abort(&r->table_out);
        errorf("tune: log: %s", why);
        return TUNE_BAD_INPUT;
    }
    r->tx.log = mha_out_stream(&r->log_out);
    if (!r->tx.log) {
        errorf("tune: cannot write %s: %s", r->log_path, strerror(errno));
        mha_out_abort(&r->table_out);
        mha_out_abort(&r->log_out);
        return TUNE_BAD_INPUT;
    }
    r->act = mha_isa_active();
    return TUNE_OK;
}

/* The search of one class until search_end: knob-less kernels take one
 * measurement each; the tunable ones share the rest of the time. Kernels not
 * in the class keep status 0 (never ranked). */
static void search_class(tune_run *r, const mha_shape_class *cl, double search_end) {
    int ntun = 0;
    for (int i = 0; i < r->nk; i++) {
        kernel_result *kres = &r->kr[i];
        kres->prior = kres->best = (point){0};
        kres->in_class = kernel_in_class(r, kres->k, cl, &r->cd.p);
        ntun += kres->tunable && kres->in_class;
    }
    for (int i = 0; i < r->nk; i++) {
        if (r->kr[i].tunable || !r->kr[i].in_class) continue;
        search_kernel(&r->tx, &r->cd, &r->kr[i], search_end, 0);
    }
    int done_tun = 0;
    for (int i = 0; i < r->nk; i++) {
        if (!r->kr[i].tunable || !r->kr[i].in_class) continue;
        const double left = search_end - now_s();
        const double end = now_s() + (left > 0 ? left / (ntun - done_tun) : 0);
        done_tun++;
        search_kernel(&r->tx, &r->cd, &r->kr[i], end, split_searched(r->kr[i].k, cl));
    }
}

/* The final round: every contender's prior and best (and the no-table
 * default dkern), timed round-robin until class_end so a burst of other load
 * hits them alike (rounds past MIN_REPS only while the next one fits);
 * repeated once when other processes held the machine and the class's time
 * left holds another round as long. Returns their share during the last pass
 * (-1 unknown). */
static double final_round(tune_run *r, const mha_kernel *dkern, double class_end) {
    double top = 0;
    for (int i = 0; i < r->nk; i++)
        if (r->kr[i].best.status == 1 && r->kr[i].best.gflops > top) top = r->kr[i].best.gflops;
    const mha_kernel *fk[2 * 32];
    point *fp[2 * 32];
    int nf = 0;
    for (int i = 0; i < r->nk; i++) {
        kernel_result *kres = &r->kr[i];
        if (kres->best.status != 1) continue;
        if (kres->best.gflops < FINAL_FRACTION * top && kres->k != dkern) continue;
        fk[nf] = kres->k;
        fp[nf++] = &kres->best;
        if (kres->prior.status == 1 && !same_knobs(&kres->prior, &kres->best)) {
            fk[nf] = kres->k;
            fp[nf++] = &kres->prior;
        }
    }
    const double t0 = now_s();
    double other = interleave(&r->tx, &r->cd, fk, fp, nf, class_end - t0, "final");
    if (other > CONTENDED_SHARE) {
        const double took = now_s() - t0;
        if (now_s() + took <= class_end) {
            printf("tune: %s: other processes used %.0f%% of the machine; repeating the final "
                   "round\n",
                   r->tx.cls, other * 100);
            other = interleave(&r->tx, &r->cd, fk, fp, nf, class_end - now_s(), "final");
        } else {
            printf("tune: %s: other processes used %.0f%% of the machine; no time left in the "
                   "class's share to repeat the final round (flagged)\n",
                   r->tx.cls, other * 100);
        }
    }
    return other;
}

/* The search's best is the maximum of noisy samples, so a move away from the
 * prior (the cache model's knobs) stands only if, in the final round, it wins
 * by REPLACE_MARGIN and its interval lies wholly above the prior's: a tie keeps
 * the default. */
static void keep_moves_that_held(tune_run *r) {
    for (int i = 0; i < r->nk; i++) {
        kernel_result *kres = &r->kr[i];
        if (kres->best.status != 1 || kres->prior.status != 1 ||
            same_knobs(&kres->prior, &kres->best))
            continue;
        const point *b = &kres->best, *p = &kres->prior;
        const int beyond = intervals_order(b->lo, b->hi, p->lo, p->hi) == STATS_A_LARGER;
        if (!(b->gflops > p->gflops * REPLACE_MARGIN) || !beyond) kres->best = kres->prior;
    }
}

/* Whether kernel result a ranks above b: a kernel timed in the final round
 * above one that was not (a search's number is the maximum of noisy
 * medians, and one in an earlier moment; it once beat the final round's
 * median of the kernel that had put it out of the round), then the rate. */
static int ranks_above(const kernel_result *a, const kernel_result *b) {
    const int fa = a->best.hi > 0, fb = b->best.hi > 0;
    return fa != fb ? fa : a->best.gflops > b->best.gflops;
}

/* The indices of the fastest measured kernel and the next one (-1: none). */
static void rank_kernels(const tune_run *r, int *wi, int *ri) {
    *wi = *ri = -1;
    for (int i = 0; i < r->nk; i++) {
        if (r->kr[i].best.status != 1) continue;
        if (*wi < 0 || ranks_above(&r->kr[i], &r->kr[*wi])) {
            *ri = *wi;
            *wi = i;
        } else if (*ri < 0 || ranks_above(&r->kr[i], &r->kr[*ri])) {
            *ri = i;
        }
    }
}

/* The kernel mha_select runs without a table (dkern) keeps the class unless
 * the fastest beats it as a move must beat the cache model's knobs: by
 * REPLACE_MARGIN and with its interval wholly above; otherwise dkern wins and
 * the fastest is the runner-up (the two tie: winner_ties). */
static void keep_default_kernel(const tune_run *r, const mha_kernel *dkern, int *wi, int *ri) {
    if (*wi < 0 || r->kr[*wi].k == dkern) return;
    int di = -1;
    for (int i = 0; i < r->nk; i++)
        if (r->kr[i].k == dkern && r->kr[i].best.status == 1 && r->kr[i].best.hi > 0) di = i;
    if (di < 0) return;
    const point *w = &r->kr[*wi].best, *d = &r->kr[di].best;
    if (w->hi > 0 && w->gflops > d->gflops * REPLACE_MARGIN &&
        intervals_order(w->lo, w->hi, d->lo, d->hi) == STATS_A_LARGER)
        return;
    *ri = *wi;
    *wi = di;
}

/* What mha_select would run without a table: dkern (flash at the active ISA)
 * with cache-model blocks; its measured prior when it was searched, else
 * measured now. status is 1 when there is a number. */
static point default_point(tune_run *r, const mha_kernel *dkern) {
    const kernel_result *dres = NULL;
    for (int i = 0; i < r->nk; i++)
        if (r->kr[i].k == dkern && r->kr[i].prior.status == 1) dres = &r->kr[i];
    point dp = {0};
    if (dres) {
        dp = dres->prior;
        if (same_knobs(&dres->best, &dp)) dp = dres->best; /* its latest measurement */
    } else if (dkern) {
        mha_options def = {.threads = r->tx.threads};
        (void)mha_resolve_options(dkern, &r->cd.p, &def, &def);
        dp.bq = def.block_q;
        dp.bk = def.block_kv;
        measure(&r->tx, &r->cd, dkern, &dp, 0, 0, "default");
    }
    return dp;
}

/* The table's entry for class cl: its shape, the winner kr[wi], the runner-up
 * kr[ri] (null when ri < 0) and the default dp (when measured). */
/* The winner and the runner-up tie when both were measured in the final
 * round and their intervals overlap (stats.h) or their rates are within
 * REPLACE_MARGIN (what would not move the table off a default): the table says
 * so. */
static int winner_ties(const tune_run *r, int wi, int ri) {
    if (ri < 0) return 0;
    const point *w = &r->kr[wi].best, *u = &r->kr[ri].best;
    if (!(w->hi > 0 && u->hi > 0)) return 0;
    const double a = w->gflops > u->gflops ? w->gflops : u->gflops,
                 b = w->gflops > u->gflops ? u->gflops : w->gflops;
    return intervals_order(w->lo, w->hi, u->lo, u->hi) == STATS_TIE || a <= b * REPLACE_MARGIN;
}

static json_object *class_entry(const tune_run *r, const mha_shape_class *cl, double class_other,
                                int wi, int ri, const mha_kernel *dkern, const point *dp) {
    json_object *e = json_object_new_object();
    json_object_object_add(e, "class", json_object_new_string(r->tx.cls));
    json_object_object_add(e, "head_dim", json_object_new_int(mha_class_head_dim(cl)));
    json_object_object_add(e, "seq_bucket", json_object_new_int64(mha_class_seq_bound(cl)));
    json_object_object_add(e, "causal", json_object_new_boolean(cl->causal));
    json_object_object_add(e, "threads", json_object_new_int(r->tx.threads));
    json_object_object_add(e, "decode", json_object_new_boolean(cl->decode));
    json_object_object_add(e, "gqa", json_object_new_boolean(cl->gqa));
    /* the dtypes it was measured in (mha_select uses an entry only for them) */
    json_object_object_add(e, "dtype", json_object_new_string(mha_dtype_name(cl->dtype)));
    json_object_object_add(e, "kv_dtype", json_object_new_string(mha_dtype_name(cl->kv_dtype)));
    /* Other processes' share of the machine while this class was measured
     * (-1: too short to tell); above 0.10 the numbers are suspect. */
    json_object_object_add(e, "other_load", results_json_double(round(class_other * 100) / 100));
    json_object *shape = json_object_new_object();
    json_object_object_add(shape, "batch", json_object_new_int64(r->cd.p.batch));
    json_object_object_add(shape, "heads", json_object_new_int64(r->cd.p.heads));
    json_object_object_add(shape, "kv_heads", json_object_new_int64(r->cd.p.kv_heads));
    json_object_object_add(shape, "seq_q", json_object_new_int64(r->cd.p.seq_q));
    json_object_object_add(shape, "seq_kv", json_object_new_int64(r->cd.p.seq_kv));
    json_object_object_add(shape, "head_dim", json_object_new_int64(r->cd.p.head_dim));
    json_object_object_add(e, "shape", shape);
    json_object_object_add(e, "winner", choice_json(r->kr[wi].k, &r->kr[wi].best));
    json_object_object_add(e, "runner_up",
                           ri >= 0 ? choice_json(r->kr[ri].k, &r->kr[ri].best) : NULL);
    json_object_object_add(e, "tie", json_object_new_boolean(winner_ties(r, wi, ri)));
    if (dkern && dp->status == 1) json_object_object_add(e, "default", choice_json(dkern, dp));
    /* The class's share of the budget when it began and what its search and
     * final round (with the default's measurement) took. */
    json_object *ts = json_object_new_object();
    json_object_object_add(ts, "share", results_json_double(round(r->share * 100) / 100));
    json_object_object_add(ts, "search", results_json_double(round(r->t_search * 100) / 100));
    json_object_object_add(ts, "final", results_json_double(round(r->t_final * 100) / 100));
    json_object_object_add(e, "time_s", ts);
    return e;
}

/* The class's line: winner, runner-up, the default with the gain over it, and
 * the time spent (search + final round) against the class's share. */
static void print_class_line(const tune_run *r, int wi, int ri, const point *dp) {
    const kernel_result *w = &r->kr[wi];
    printf("%-27s %-13s bq %3d bk %4d split %d %8.1f GFLOP/s", r->tx.cls, mha_kernel_name(w->k),
           w->best.bq, w->best.bk, w->best.split, w->best.gflops);
    if (ri >= 0)
        printf("  |%s %-13s %8.1f", winner_ties(r, wi, ri) ? " tie" : "",
               mha_kernel_name(r->kr[ri].k), r->kr[ri].best.gflops);
    if (dp->status == 1)
        printf("  | default bq %3d bk %4d %8.1f (%+.1f%%)", dp->bq, dp->bk, dp->gflops,
               dp->gflops > 0 ? (w->best.gflops / dp->gflops - 1) * 100 : 0.0);
    printf("  | %.1f+%.1f s of %.1f\n", r->t_search, r->t_final, r->share);
    fflush(stdout);
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

static double class_floor(const tune_run *r, const mha_shape_class *c) {
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

/* Tunes class ci with its share of the budget left: search, final round,
 * table entry and printed line. Returns TUNE_OK, TUNE_CHECK_FAILED when no
 * kernel passed (the run goes on), or TUNE_BAD_INPUT when the class's data
 * could not be prepared (the run stops); messages printed. */
static tune_status tune_class(tune_run *r, int ci) {
    const mha_shape_class *cl = &r->classes[ci];
    mha_class_name(cl, r->cls_name, sizeof r->cls_name);
    r->tx.cls = r->cls_name;
    r->tx.threads = cl->threads == 1 ? 1 : r->tall;
    if (!class_data_prepare(&r->cd, cl, (uint64_t)r->a.seed)) {
        errorf("tune: cannot prepare the data of class %s (out of memory?)", r->cls_name);
        return TUNE_BAD_INPUT;
    }
    /* per class: what mha_select would run without a table */
    const mha_kernel *dkern = mha_default_kernel(&r->cd.p);
    r->tx.cost = class_cost(cl, r->tall);
    /* What is left of the budget, shared by the classes left: each gets its
     * floor (class_floor, as far as known) and an equal part of the rest, so
     * a class that overran shrinks the others' shares rather than the run
     * growing, and the dear classes at the end still find their floors. */
    const double t0 = now_s();
    const double remaining = r->a.budget * (1 - CONFIRM_FRACTION) - (t0 - r->t_begin);
    double floors = 0;
    for (int j = ci; j < r->ncls; j++) floors += class_floor(r, &r->classes[j]);
    const double own = class_floor(r, cl), pool = remaining - floors;
    double share = own + (pool > 0 ? pool / (r->ncls - ci) : 0);
    if (share > remaining) share = remaining > 0 ? remaining : 0;
    const double class_end = t0 + share;
    load_mark class_m0, class_m1;
    load_mark_now(&class_m0);
    search_class(r, cl, t0 + 0.75 * share); /* a quarter for the final round */
    const double t1 = now_s();
    const double other = final_round(r, dkern, class_end);
    load_mark_now(&class_m1);
    const double class_other = other_share(&class_m0, &class_m1);
    if (other > CONTENDED_SHARE || class_other > CONTENDED_SHARE) r->contended++;
    keep_moves_that_held(r);
    int wi, ri;
    rank_kernels(r, &wi, &ri);
    keep_default_kernel(r, dkern, &wi, &ri);
    if (wi < 0) {
        errorf("tune: no kernel passed verification and timing on class %s", r->cls_name);
        return TUNE_CHECK_FAILED;
    }
    const point dp = default_point(r, dkern);
    r->share = share;
    r->t_search = t1 - t0;
    r->t_final = now_s() - t1;
    json_object *entry = class_entry(r, cl, class_other, wi, ri, dkern, &dp);
    json_object_array_add(r->jclasses, entry);
    print_class_line(r, wi, ri, &dp);
    r->tuned++;
    const kernel_result *w = &r->kr[wi];
    if (dkern && dp.status == 1 && (w->k != dkern || !same_knobs(&w->best, &dp)) &&
        r->npend < MHA_CLASS_MAX)
        r->pend[r->npend++] = (departure){.cl = *cl,
                                          .wk = w->k,
                                          .dk = dkern,
                                          .wp = w->best,
                                          .dp = dp,
                                          .final_s = r->t_final,
                                          .entry = entry};
    return TUNE_OK;
}

/* A departure from the default (another kernel or other knobs than what
 * mha_select runs without a table) won one final round; a burst of other
 * load in that moment can favour one configuration over another (2-thread
 * classes of sub-millisecond calls whose default knobs ran 17% slower for a
 * stretch of the run than in the next run), so at the end of the run, seconds
 * to a minute later, the winner and the default are timed again, round-robin
 * as long as the class's final round took. The entry stands only if the
 * winner again wins by REPLACE_MARGIN beyond the interval; otherwise the
 * default becomes the winner and the two a tie. "confirmed" in the entry:
 * "held", "reverted", or "no time" (the budget left could not hold it; the
 * entry stands as measured once). */
static void confirm_departures(tune_run *r) {
    const double end = r->t_begin + r->a.budget; /* optional work: not into the slack */
    int held = 0, reverted = 0, no_time = 0;
    for (int i = 0; i < r->npend; i++) {
        departure *pd = &r->pend[i];
        mha_class_name(&pd->cl, r->cls_name, sizeof r->cls_name);
        r->tx.cls = r->cls_name;
        r->tx.threads = pd->cl.threads == 1 ? 1 : r->tall;
        const double cap = pd->final_s > 0.05 ? pd->final_s : 0.05;
        if (now_s() + cap > end || !class_data_prepare(&r->cd, &pd->cl, (uint64_t)r->a.seed)) {
            json_object_object_add(pd->entry, "confirmed", json_object_new_string("no time"));
            no_time++;
            continue;
        }
        point wp = pd->wp, dp = pd->dp;
        wp.hi = dp.hi = 0; /* no interval unless timed now (else: reverted) */
        const mha_kernel *ks[2] = {pd->wk, pd->dk};
        point *ps[2] = {&wp, &dp};
        interleave(&r->tx, &r->cd, ks, ps, 2, cap, "confirm");
        const int holds = wp.hi > 0 && dp.hi > 0 && wp.gflops > dp.gflops * REPLACE_MARGIN &&
                          intervals_order(wp.lo, wp.hi, dp.lo, dp.hi) == STATS_A_LARGER;
        printf("tune: confirm %-27s %s bq %d bk %d split %d %.1f vs default %s bq %d bk %d "
               "%.1f (%+.1f%%): %s\n",
               r->cls_name, mha_kernel_name(pd->wk), wp.bq, wp.bk, wp.split, wp.gflops,
               mha_kernel_name(pd->dk), dp.bq, dp.bk, dp.gflops,
               dp.gflops > 0 ? (wp.gflops / dp.gflops - 1) * 100 : 0.0,
               holds ? "held" : "not held, the default stays");
        if (holds) {
            json_object_object_add(pd->entry, "confirmed", json_object_new_string("held"));
            held++;
            continue;
        }
        json_object_object_add(pd->entry, "winner", choice_json(pd->dk, &dp));
        json_object_object_add(pd->entry, "runner_up", choice_json(pd->wk, &wp));
        json_object_object_add(pd->entry, "tie", json_object_new_boolean(1));
        json_object_object_add(pd->entry, "confirmed", json_object_new_string("reverted"));
        reverted++;
    }
    if (r->npend)
        printf("tune: %d departures from the default confirmed: %d held, %d reverted to the "
               "default, %d not timed again (no time left)\n",
               r->npend, held, reverted, no_time);
}

/* Tunes every class in turn, within the budget. Returns TUNE_OK, else the
 * last class's failure; the run stops at a TUNE_BAD_INPUT. */
static tune_status tune_classes(tune_run *r) {
    char tall[16] = ""; /* "1", "2", "1,2": the thread counts tuned */
    if (r->tall) snprintf(tall, sizeof tall, "%d", r->tall);
    printf("tune: %d classes (%s), %d kernels, budget %g s, threads %s%s%s, cpu %s\n", r->ncls,
           r->a.set, r->nk, (double)r->a.budget, r->t1 ? "1" : "", r->t1 && r->tall ? "," : "",
           tall, r->key);
    printf("tune: log %s (named when the run ends)\n", r->log_path);
    r->jclasses = json_object_new_array();
    r->t_begin = now_s();
    getloadavg(r->load0, 3);
    if (r->load0[0] > 0.5)
        printf("tune: load average %.2f at the start: other processes compete for the cores; "
               "their share is measured and flagged per class (other_load)\n",
               r->load0[0]);
    tune_status st = TUNE_OK;
    char skipped[512] = "";
    int nskip = 0;
    for (int ci = 0; ci < r->ncls && st != TUNE_BAD_INPUT; ci++) {
        /* A class costs its kernels' first measurements and a final round
         * of MIN_REPS whatever its share: one whose estimate does not fit in
         * what is left of the budget (and BUDGET_SLACK) is not started. It
         * keeps the cache model, or the entry of the table at --out. */
        const double elapsed = now_s() - r->t_begin, budget = r->a.budget * (1 - CONFIRM_FRACTION);
        if (ci > 0 && (elapsed >= budget || elapsed + class_floor(r, &r->classes[ci]) >
                                                budget + r->a.budget * BUDGET_SLACK)) {
            char name[64];
            mha_class_name(&r->classes[ci], name, sizeof name);
            const size_t n = strlen(skipped);
            if (nskip < 6)
                snprintf(skipped + n, sizeof skipped - n, "%s%s", nskip ? ", " : "", name);
            else if (nskip == 6)
                snprintf(skipped + n, sizeof skipped - n, ", ...");
            nskip++;
            continue;
        }
        const tune_status cs = tune_class(r, ci);
        if (cs != TUNE_OK) st = cs;
    }
    if (nskip)
        printf("tune: %d of %d classes not tuned: what is left of the budget cannot hold their "
               "first measurements (%s); a larger --budget covers them\n",
               nskip, r->ncls, skipped);
    if (st != TUNE_BAD_INPUT) confirm_departures(r);
    return st;
}

/* Names the log (its final name goes to log_path). Returns TUNE_OK, or
 * TUNE_BAD_INPUT when it could not be committed (message printed). */
static tune_status name_log(tune_run *r) {
    class_data_free(&r->cd);
    r->tx.log = NULL; /* the stream belongs to log_out */
    if (!commit_log(&r->log_out, r->logdir, r->key, r->stamp)) return TUNE_BAD_INPUT;
    fmt(r->log_path, sizeof r->log_path, "%s", r->log_out.target);
    return TUNE_OK;
}

/* The table's header: the machine's fingerprint and how the run went; the
 * classes are added by the caller. */
static json_object *table_root(const tune_run *r, double elapsed) {
    json_object *root = json_object_new_object();
    json_object *fp = json_object_new_object();
    mha_caches cs;
    mha_caches_get(&cs);
    const uint64_t l1 = cs.l1d, l2 = cs.l2, l1r = cs.l1d_raw, l2r = cs.l2_raw;
    json_object_object_add(fp, "cpu_key", json_object_new_string(r->key));
    json_object_object_add(fp, "cpu_model", json_object_new_string(r->mi.model));
    json_object_object_add(fp, "vendor", json_object_new_string(r->mi.vendor));
    json_object_object_add(fp, "family", json_object_new_int(r->mi.family));
    json_object_object_add(fp, "model", json_object_new_int(r->mi.model_id));
    json_object_object_add(fp, "isa_detected",
                           json_object_new_string(mha_isa_name(mha_isa_detected())));
    json_object_object_add(fp, "isa_active", json_object_new_string(mha_isa_name(r->act)));
    json_object_object_add(fp, "flags", json_object_new_string(r->mi.flags));
    json_object_object_add(fp, "cores", json_object_new_int(r->mi.cores));
    json_object_object_add(fp, "pus", json_object_new_int(r->mi.pus));
    json_object_object_add(fp, "l1d", json_object_new_int64((int64_t)l1));
    json_object_object_add(fp, "l2", json_object_new_int64((int64_t)l2));
    json_object_object_add(fp, "l1d_raw", json_object_new_int64((int64_t)l1r));
    json_object_object_add(fp, "l2_raw", json_object_new_int64((int64_t)l2r));
    json_object_object_add(fp, "l3", json_object_new_int64((int64_t)r->mi.l3));
    json_object_object_add(root, "fingerprint", fp);
    json_object_object_add(root, "created", json_object_new_string(r->created));
    json_object_object_add(root, "class_set", json_object_new_string(r->a.set));
    json_object_object_add(root, "budget_s", results_json_double(r->a.budget));
    json_object_object_add(root, "elapsed_s", results_json_double(round(elapsed * 10) / 10));
    json_object_object_add(root, "seed", json_object_new_int64(r->a.seed));
    if (r->a.shard.count > 0) {
        char sh[32];
        snprintf(sh, sizeof sh, "%d/%d", r->a.shard.index, r->a.shard.count);
        json_object_object_add(root, "shard", json_object_new_string(sh));
    }
    json_object_object_add(root, "load_avg_start", results_json_double(r->load0[0]));
    json_object_object_add(root, "contended_classes", json_object_new_int(r->contended));
    const char *lp = strrchr(r->log_path, '/');
    char rel[4300];
    fmt(rel, sizeof rel, "log/%s", lp ? lp + 1 : r->log_path);
    json_object_object_add(root, "log", json_object_new_string(rel));
    return root;
}

/* Appends to jclasses the classes of an existing table at out_path for the
 * same CPU and active ISA that this run did not tune (quick then full
 * accumulates). */
static void carry_old_classes(tune_run *r) {
    char why[1024];
    mha_table old;
    if (mha_table_load(r->carry_path, &old, why, sizeof why) != MHA_OK) return;
    if (strcmp(old.cpu_key, r->key) == 0 && strcmp(old.isa_active, mha_isa_name(r->act)) == 0) {
        json_object *oroot = json_object_from_file(r->carry_path), *ocls;
        if (oroot && json_object_object_get_ex(oroot, "classes", &ocls)) {
            const size_t n = json_object_array_length(ocls);
            int carried = 0;
            for (size_t i = 0; i < n; i++) {
                json_object *e = json_object_array_get_idx(ocls, i), *cn;
                json_object_object_get_ex(e, "class", &cn);
                const char *s = json_object_get_string(cn);
                int dup = 0;
                for (size_t j = 0; j < json_object_array_length(r->jclasses) && !dup; j++) {
                    json_object *ne = json_object_array_get_idx(r->jclasses, j), *nn;
                    json_object_object_get_ex(ne, "class", &nn);
                    dup = strcmp(json_object_get_string(nn), s) == 0;
                }
                if (!dup) {
                    json_object_array_add(r->jclasses, json_object_get(e));
                    carried++;
                }
            }
            if (carried)
                printf("tune: kept %d classes of the existing table not tuned in this run\n",
                       carried);
        }
        json_object_put(oroot);
    }
    mha_table_free(&old);
}

/* The closing lines: counts, time, the table, and a warning when classes were
 * measured on a busy machine. */
static void print_summary(const tune_run *r, double elapsed) {
    printf("tune: %d measurements, %d verification failures; table %s\n", r->tx.measurements,
           r->tx.failures, r->out_path);
    if (!r->a.out)
        printf("tune: written where mha_select reads first (%s)%s%s%s\n", mha_table_write_dir(),
               strcmp(r->carry_path, r->out_path) && access(r->carry_path, F_OK) == 0
                   ? "; kept the older "
                   : "",
               strcmp(r->carry_path, r->out_path) && access(r->carry_path, F_OK) == 0
                   ? r->carry_path
                   : "",
               r->a.force ? " (--force: replaced)" : "; the newest table of a CPU is the one read");
    printf("tune: %d samples retaken for interference evidence, %d kept disturbed (retakes ran "
           "out)\n",
           r->tx.retakes, r->tx.disturbed_kept);
    if (r->contended)
        printf("tune: %d of %d classes were measured while other processes held the cores "
               "(other_load > %.2f in the table): rerun on a quiet machine\n",
               r->contended, r->ncls, CONTENDED_SHARE);
    printf("tune: %d classes in %.1f s (budget %g s)\n", r->tuned, elapsed, (double)r->a.budget);
}

/* Names the log, writes the table (this run's classes and the kept ones) and
 * prints the summary; each is tried even when another failed. Returns
 * TUNE_OK, or TUNE_BAD_INPUT when the log or the table could not be written
 * (message printed). */
static tune_status write_outputs(tune_run *r) {
    tune_status st = name_log(r);
    const double elapsed = now_s() - r->t_begin;
    json_object *root = table_root(r, elapsed);
    carry_old_classes(r);
    json_object_object_add(root, "classes", r->jclasses);
    if (!write_table(&r->table_out, root, r->a.out || r->a.force ? NULL : r->base, r->stamp,
                     r->out_path, sizeof r->out_path))
        st = TUNE_BAD_INPUT;
    json_object_put(root);
    print_summary(r, elapsed);
    return st;
}

/* Each step prints its own messages and returns a tune_status; here alone a
 * status becomes the exit code: 0 ok, 1 a check failed, 2 usage or input. */
int cmd_tune(int argc, char **argv) {
    tune_run run = {0};
    tune_run *r = &run;
    tune_status st = parse_tune_args(argc, argv, &r->a);
    if (st == TUNE_OK) st = plan_run(r);
    if (st == TUNE_OK) st = open_outputs(r);
    if (st == TUNE_OK) {
        const tune_status tuned = tune_classes(r);
        const tune_status written = write_outputs(r); /* also after a failed class */
        st = written != TUNE_OK ? written : tuned;
        if (st == TUNE_OK && r->tx.failures) st = TUNE_CHECK_FAILED;
    }
    switch (st) {
    case TUNE_OK:
    case TUNE_HELP:
        return 0;
    case TUNE_CHECK_FAILED:
        return EXIT_CHECK_FAILED;
    case TUNE_BAD_INPUT:
        break;
    }
    return EXIT_USAGE;
}

/* ---- recommend --------------------------------------------------------------------------- */

static void usage_recommend(FILE *f) {
    fprintf(f, "usage: mhabench recommend --seq N [--seq-kv M] --heads H [--kv-heads G]\n"
               "                          --head-dim D [--causal] [--threads T] [--batch B]\n"
               "                          [--dtype fp32|bf16|fp16] [--kv-dtype bf16|fp16|int8]\n"
               "  Prints the kernel and knobs mha_select (and --kernel auto) picks for the\n"
               "  shape, where the choice came from, and the table's expected GFLOP/s.\n"
               "  --threads T   0 = all cores (default 1, as attend and forward)\n"
               "  --dtype       Q/O element type (default fp32); --kv-dtype: the K/V storage\n"
               "                (default: the --dtype)\n");
}

int cmd_recommend(int argc, char **argv) {
    enum {
        O_SEQ = 256,
        O_SEQKV,
        O_HEADS,
        O_KVHEADS,
        O_DIM,
        O_CAUSAL,
        O_THREADS,
        O_BATCH,
        O_DTYPE,
        O_KV_DTYPE
    };
    static const struct option longopts[] = {
        {"seq", required_argument, NULL, O_SEQ},
        {"seq-kv", required_argument, NULL, O_SEQKV},
        {"heads", required_argument, NULL, O_HEADS},
        {"kv-heads", required_argument, NULL, O_KVHEADS},
        {"head-dim", required_argument, NULL, O_DIM},
        {"causal", no_argument, NULL, O_CAUSAL},
        {"threads", required_argument, NULL, O_THREADS},
        {"batch", required_argument, NULL, O_BATCH},
        {"dtype", required_argument, NULL, O_DTYPE},
        {"kv-dtype", required_argument, NULL, O_KV_DTYPE},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int64_t seq = 0, seq_kv = 0, heads = 0, kv_heads = 0, dim = 0, threads = 1, batch = 1;
    int causal = 0;
    mha_dtype dtype = MHA_F32, kv_dtype = MHA_F32;
    int kv_given = 0;
    optind = 0;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case O_SEQ:
            if (!parse_i64("--seq", optarg, 1, INT32_MAX, &seq)) return EXIT_USAGE;
            break;
        case O_SEQKV:
            if (!parse_i64("--seq-kv", optarg, 1, INT32_MAX, &seq_kv)) return EXIT_USAGE;
            break;
        case O_HEADS:
            if (!parse_i64("--heads", optarg, 1, INT32_MAX, &heads)) return EXIT_USAGE;
            break;
        case O_KVHEADS:
            if (!parse_i64("--kv-heads", optarg, 1, INT32_MAX, &kv_heads)) return EXIT_USAGE;
            break;
        case O_DIM:
            if (!parse_i64("--head-dim", optarg, 1, 1 << 20, &dim)) return EXIT_USAGE;
            break;
        case O_CAUSAL:
            causal = 1;
            break;
        case O_THREADS:
            if (!parse_i64("--threads", optarg, 0, 4096, &threads)) return EXIT_USAGE;
            break;
        case O_BATCH:
            if (!parse_i64("--batch", optarg, 1, INT32_MAX, &batch)) return EXIT_USAGE;
            break;
        case O_DTYPE:
            if (mha_dtype_parse(optarg, &dtype) != MHA_OK || dtype == MHA_I8) {
                errorf("recommend: --dtype '%s': expected fp32, bf16 or fp16", optarg);
                return EXIT_USAGE;
            }
            break;
        case O_KV_DTYPE:
            if (mha_dtype_parse(optarg, &kv_dtype) != MHA_OK) {
                errorf("recommend: --kv-dtype '%s': expected fp32, bf16, fp16 or int8", optarg);
                return EXIT_USAGE;
            }
            kv_given = 1;
            break;
        case 'h':
            usage_recommend(stdout);
            return 0;
        default:
            if (c == ':')
                errorf("recommend: option %s needs a value", argv[optind - 1]);
            else
                errorf("recommend: unknown option '%s'", argv[optind - 1]);
            usage_recommend(stderr);
            return EXIT_USAGE;
        }
    }
    if (optind < argc) {
        errorf("recommend: unexpected argument '%s'", argv[optind]);
        return EXIT_USAGE;
    }
    const char *missing = !seq ? "--seq" : !heads ? "--heads" : !dim ? "--head-dim" : NULL;
    if (missing) {
        errorf("recommend: missing required option %s", missing);
        usage_recommend(stderr);
        return EXIT_USAGE;
    }
    if (!kv_heads) kv_heads = heads;
    if (!seq_kv) seq_kv = seq;
    if (heads % kv_heads != 0) {
        errorf("--kv-heads %lld does not divide --heads %lld", (long long)kv_heads,
               (long long)heads);
        return EXIT_USAGE;
    }
    if (!check_isa_env()) return EXIT_USAGE;
    if (!kv_given) kv_dtype = dtype;
    if (kv_dtype == MHA_F32 && dtype != MHA_F32) { /* the API's kv 0 means "the dtype's" */
        errorf("recommend: --kv-dtype fp32 under --dtype %s: an fp32 cache under 16-bit queries "
               "is not a problem the API offers",
               mha_dtype_name(dtype));
        return EXIT_USAGE;
    }
    const mha_problem p = {batch, heads,  kv_heads, seq,   seq_kv,
                           dim,   causal, 0.0f,     dtype, kv_dtype == dtype ? MHA_F32 : kv_dtype};
    if (mha_problem_validate(&p) != MHA_OK) {
        errorf("recommend: %s", mha_last_error());
        return EXIT_USAGE;
    }
    const mha_options o = {.threads = (int)threads};
    mha_selection sel;
    if (mha_select(&p, &o, &sel) != MHA_OK) {
        errorf("recommend: %s", mha_last_error());
        return EXIT_USAGE;
    }
    mha_shape_class cl;
    char cname[64];
    mha_class_of(&p, mha_resolve_threads(&o), &cl);
    mha_class_name(&cl, cname, sizeof cname);
    static const char *const splits[] = {"auto", "heads", "qblocks"};
    static const char *const sources[] = {"forced", "table", "default"};
    printf("kernel    %s\n", mha_kernel_name(sel.kernel));
    if (dtype != MHA_F32 || mha_problem_kv_dtype(&p) != MHA_F32)
        printf("dtype     %s (K/V %s)\n", mha_dtype_name(dtype),
               mha_dtype_name(mha_problem_kv_dtype(&p)));
    printf("knobs     block_q=%d block_kv=%d split=%s threads=%d\n", sel.options.block_q,
           sel.options.block_kv, splits[sel.options.split], mha_resolve_threads(&sel.options));
    printf("class     %s\n", cname);
    printf("source    %s\n", sources[sel.source]);
    if (sel.source == MHA_CHOICE_DEFAULT) {
        char tpath[4096];
        mha_table_default_path(tpath, sizeof tpath);
        if (access(tpath, R_OK) == 0)
            printf("table     %s has no entry for class %s: the cache model decided\n", tpath,
                   cname);
        else
            printf("table     none for this CPU at %s: the cache model decided\n", tpath);
        note_no_tuning_table(stdout);
    }
    printf("reason    %s\n", sel.reason);
    if (sel.expected_gflops > 0)
        printf("expected  %.1f GFLOP/s (measured by tune on the class's representative shape)\n",
               sel.expected_gflops);
    else
        printf("expected  unknown (no table measurement)\n");
    return 0;
}
