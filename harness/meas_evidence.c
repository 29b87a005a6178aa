/* meas_evidence.c - the measurement core's evidence (meas_core.h): the
 * probes and counters read around a sample, the load check (other
 * processes' share of the machine over a window, from /proc/stat and
 * /proc/self/stat: tune's contended classes and the sweep's mha_load), the
 * policy that judges them, and the guarded interleaved loop that retakes
 * what they call disturbed. */
#include "meas_core.h"

#include <omp.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "mha_private.h"
#include "stats.h"
#include "util.h"

/* ---- the load check ---------------------------------------------------------- */

void meas_load_mark(meas_load *m) {
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

double meas_load_share(const meas_load *a, const meas_load *b) {
    const double wall = b->wall - a->wall;
    const long hz = sysconf(_SC_CLK_TCK), ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (wall < MEAS_MIN_LOAD_WINDOW || hz <= 0 || ncpu <= 0 || !a->busy || !b->busy) return -1;
    const double other = (double)(b->busy - a->busy) - (double)(b->self - a->self);
    const double share = other / (double)hz / (wall * (double)ncpu);
    return share < 0 ? 0 : share;
}

/* ---- evidence ---------------------------------------------------------------- */

enum { PROBES = MEAS_PROBES, PROBE_BEST_MAX = 64 };
static int64_t probe_iters[PROBES]; /* iterations of about MEAS_PROBE_SECONDS each */
/* The best rate of each probe (slowest thread, FLOP/s) this process has
 * seen, per thread count: with both vCPUs running the interference loop at
 * once the Zen 4 VM's typical 2-thread rate was 0.85 of the best a single
 * thread reached while the kernels scaled 1.9x, which is the machine at 2
 * threads, not a disturbance of one sample. Index: threads, the last entry
 * for every count beyond. */
static double probe_best[PROBES][PROBE_BEST_MAX + 1];
static mha_isa probe_isa = (mha_isa)-1;

/* Probe `which`'s loop at the level probe_calibrate timed it for. */
static double (*probe_loop(int which))(int64_t) {
    const mha_isa_ops *ops = mha_ops_for(probe_isa);
    return which == 0 ? mha_ops_unit(ops, MHA_F32)->loop : ops->probe_loop;
}

/* Probe `which` on every thread of a parallel region of `threads`: the
 * slowest thread's rate. */
static double probe_rate(int which, int threads) {
    double (*loop)(int64_t) = probe_loop(which);
    const int64_t iters = probe_iters[which];
    double slowest = INFINITY;
#pragma omp parallel num_threads(threads) reduction(min : slowest)
    {
        const double t0 = now_s(), flop = loop(iters), dt = now_s() - t0;
        slowest = dt > 0 ? flop / dt : slowest;
    }
    return slowest;
}

static void probe_calibrate(void) {
    if (probe_isa == mha_isa_active()) return;
    probe_isa = mha_isa_active();
    memset(probe_best, 0, sizeof probe_best);
    for (int p = 0; p < PROBES; p++) {
        double (*loop)(int64_t) = probe_loop(p);
        int64_t it = 64;
        for (;;) { /* doubling until one run takes the probe's time */
            const double t0 = now_s();
            loop(it);
            if (now_s() - t0 >= MEAS_PROBE_SECONDS || it > ((int64_t)1 << 30)) break;
            it *= 2;
        }
        probe_iters[p] = it;
        for (int i = 0; i < 5; i++) { /* a first best (the core may be clocking up) */
            const double r = probe_rate(p, 1);
            probe_best[p][1] = r > probe_best[p][1] ? r : probe_best[p][1];
        }
    }
}

/* The machine's steal time in seconds (the "steal" column of /proc/stat's cpu
 * line), or -1 when it cannot be read. */
static double steal_seconds(void) {
    FILE *f = fopen("/proc/stat", "r");
    if (!f) return -1;
    unsigned long long v[8] = {0};
    const int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
                         &v[3], &v[4], &v[5], &v[6], &v[7]);
    fclose(f);
    const long hz = sysconf(_SC_CLK_TCK);
    return n == 8 && hz > 0 ? (double)v[7] / (double)hz : -1;
}

static long involuntary_switches(void) {
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_nivcsw : 0;
}

void meas_window_begin(meas_window *w, int threads) {
    probe_calibrate();
    w->threads = threads < 1 ? 1 : threads;
    w->steal0 = steal_seconds();
    w->csw0 = involuntary_switches();
    for (int p = 0; p < PROBES; p++) w->before[p] = probe_rate(p, w->threads);
}

void meas_window_end(const meas_window *w, meas_evidence *ev) {
    double ratio[PROBES];
    for (int p = 0; p < PROBES; p++) {
        const double after = probe_rate(p, w->threads);
        const double slow = w->before[p] < after ? w->before[p] : after,
                     fast = w->before[p] > after ? w->before[p] : after;
        double *best = &probe_best[p][w->threads < PROBE_BEST_MAX ? w->threads : PROBE_BEST_MAX];
        if (fast > *best) *best = fast;
        ratio[p] = *best > 0 ? slow / *best : 1;
    }
    const long csw1 = involuntary_switches();
    const double steal1 = steal_seconds();
    ev->probe = ratio[0];
    ev->probe_core = ratio[1];
    ev->preempted = csw1 - w->csw0;
    ev->stolen = w->steal0 >= 0 && steal1 >= 0 ? steal1 - w->steal0 : 0;
}

mha_status meas_sample_guarded(const meas_call *c, int threads, double *seconds,
                               meas_evidence *ev) {
    meas_window w;
    meas_window_begin(&w, threads);
    const mha_status st = meas_sample(c, seconds);
    meas_window_end(&w, ev);
    return st;
}

const meas_policy MEAS_POLICY = {
    .probe_min = MEAS_PROBE_MIN,
    .core_probe_min = MEAS_CORE_PROBE_MIN,
    .preempt_max = MEAS_PREEMPT_MAX,
    .target_halfwidth = 0.02,
    .contended_share = 0.10,
    .steady_share = 0.25,
    .steady_disturbed = 0.50,
    .burst_factor = 2.0,
};

int meas_background_steady(double other_share, double disturbed_share) {
    return other_share >= MEAS_POLICY.steady_share &&
           disturbed_share >= MEAS_POLICY.steady_disturbed;
}

int meas_burst(double preempt_rate, double median_rate, double stolen) {
    const double allowance = MEAS_POLICY.preempt_max / 0.02; /* per second */
    return stolen > 0 || preempt_rate > MEAS_POLICY.burst_factor * median_rate + allowance;
}

int meas_disturbed_for(const meas_evidence *ev, double probe_min, double seconds) {
    const double allowed = MEAS_POLICY.preempt_max * (seconds > 0.02 ? seconds / 0.02 : 1.0);
    return ev->probe < probe_min || ev->probe_core < MEAS_POLICY.core_probe_min ||
           (double)ev->preempted > allowed || ev->stolen > 0;
}

int meas_disturbed(const meas_evidence *ev, double probe_min) {
    return ev->probe < probe_min || ev->probe_core < MEAS_POLICY.core_probe_min ||
           ev->preempted > MEAS_POLICY.preempt_max || ev->stolen > 0;
}

double meas_halfwidth(const double *x, int n) {
    enum { MAXN = 4096 };
    double sorted[MAXN];
    if (n < 1 || n > MAXN) return 1;
    memcpy(sorted, x, (size_t)n * sizeof *sorted);
    const double med = median_inplace(sorted, n);
    double lo, hi;
    median_interval(sorted, n, 0.95, &lo, &hi);
    return med > 0 ? (hi - lo) / 2 / med : 1;
}

/* pl->calls calls of c inside one bracket; *seconds their mean. */
static void sample_guarded_n(const meas_call *c, const meas_plan *pl, double *seconds,
                             meas_evidence *ev) {
    const int k = pl->calls > 1 ? pl->calls : 1;
    meas_window w;
    meas_window_begin(&w, pl->threads);
    double sum = 0;
    for (int j = 0; j < k; j++) {
        double s;
        meas_sample(c, &s);
        sum += s;
    }
    meas_window_end(&w, ev);
    *seconds = sum / k;
}

int meas_interleave_guarded(const meas_call *c, int n, const meas_plan *pl, double *times,
                            meas_tally *t) {
    *t = (meas_tally){.worst_halfwidth = 1, .other_share = -1};
    meas_load load0, load1;
    meas_load_mark(&load0);
    const double t_start = now_s();
    const double probe_min = pl->probe_min > 0 ? pl->probe_min : MEAS_POLICY.probe_min;
    int reps = 0;
    while (reps < pl->max_reps) {
        /* Past min_reps, a round starts only when it would end within
         * time_cap by the rounds so far (their probes and retakes counted):
         * the caller's budget is overrun by min_reps alone, never by a round
         * that was started late. */
        const double spent = now_s() - t_start;
        if (reps >= pl->min_reps && spent + spent / reps > pl->time_cap) break;
        for (int i = 0; i < n; i++) {
            double *slot = &times[(size_t)i * pl->max_reps + reps];
            for (;;) {
                meas_evidence ev;
                sample_guarded_n(&c[i], pl, slot, &ev);
                if (!meas_disturbed(&ev, probe_min)) break;
                if (t->retakes >= pl->max_retakes) {
                    t->disturbed_kept++;
                    break;
                }
                t->retakes++;
            }
        }
        reps++;
        if (reps >= pl->min_reps && pl->target > 0) {
            double worst = 0;
            for (int i = 0; i < n; i++) {
                const double h = meas_halfwidth(&times[(size_t)i * pl->max_reps], reps);
                worst = h > worst ? h : worst;
            }
            t->worst_halfwidth = worst;
            if (worst <= pl->target) break;
        }
    }
    if (pl->target <= 0 || reps < pl->min_reps) {
        double worst = 0;
        for (int i = 0; i < n; i++) {
            const double h = meas_halfwidth(&times[(size_t)i * pl->max_reps], reps);
            worst = h > worst ? h : worst;
        }
        t->worst_halfwidth = worst;
    }
    t->reps = reps;
    meas_load_mark(&load1);
    t->other_share = meas_load_share(&load0, &load1);
    return reps;
}
