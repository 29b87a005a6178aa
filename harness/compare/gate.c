/* gate.c - the comparison of two result sets: per benchmark the medians, the
 * drift of its group divided out, the U test and the shift's interval; then
 * the gate's verdict over the set (regression / no regression /
 * inconclusive, with the reasons) and the text and JSON reports. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compare.h"

#include "fmt_results.h"

const char *const VERDICT_NAME[] = {"same", "faster", "slower", "noisy", "blind", "small"};

/* The verdict rule. With at least MIN_REPS on both sides: slower iff p < alpha
 * and the median slowed by more than the threshold (faster symmetrically); a
 * median move beyond the threshold without significance is noisy. With fewer,
 * the U test often cannot reach alpha at all, so complete separation of the two
 * samples (every new repetition slower than every base one) also counts as
 * evidence: the threshold then decides, and an overlapping move is noisy. */
/* The contract: a regression needs a significant U test AND a median past the
 * threshold. With fewer than MIN_REPS repetitions on a side the test cannot
 * mean anything, so such a row is at most 'noisy' (never fails a build). */
verdict row_verdict(const row *r, const settings *s) {
    const int sig = !r->too_few && r->ut.p < (r->alpha > 0 ? r->alpha : s->alpha);
    const double t = r->threshold > 0 ? r->threshold : s->threshold;
    if (r->change > t && sig) return V_SLOWER;
    if (r->change < -t && sig) return V_FASTER;
    if (fabs(r->change) > t) return V_NOISY;
    return V_SAME;
}

static void fmt_time(char *out, size_t len, double ns) {
    static const char *const units[] = {"ns", "us", "ms", "s"};
    int u = 0;
    while (u < 3 && ns >= 1000) {
        ns /= 1000;
        u++;
    }
    snprintf(out, len, "%#.4g %s", ns, units[u]);
}

static json_object *fp_json(const result_set *rs) {
    json_object *o = json_object_new_object();
    for (int k = 0; k < FP_COUNT; k++)
        json_object_object_add(o, FP_KEYS[k], rs->fp[k] ? json_object_new_string(rs->fp[k]) : NULL);
    return o;
}

static json_object *name_list(const result_set *in, const result_set *other) {
    json_object *a = json_object_new_array();
    for (int i = 0; i < in->nb; i++)
        if (!find_bench(other, in->b[i].name))
            json_object_array_add(a, json_object_new_string(in->b[i].name));
    return a;
}

/* A benchmark in both files that cannot be judged: every repetition on a
 * side was marked disturbed. */
static int not_judged(const bench *b, const bench *n) {
    return n && (b->n == 0 || n->n == 0);
}

/* The log changes lr of the rows in one drift group into out: the rows
 * with `threads` threads (any when threads < 0) that are memory-bound (mem
 * 1) or compute-bound (mem 0). Returns the count. */
static int group_changes(const result_set *base, const row *rows, const double *lr, int nr,
                         int threads, int mem, double *out) {
    int n = 0;
    for (int j = 0; j < nr; j++) {
        const bench *b = find_bench(base, rows[j].name);
        if ((threads < 0 || b->threads == threads) && b->mem == mem) out[n++] = lr[j];
    }
    return n;
}

/* Pass 1: medians, and the log changes (into lr) whose median is the drift. */
static void measure_rows(const result_set *base, const result_set *new, comparison *c, double *lr) {
    for (int i = 0; i < base->nb; i++) {
        const bench *b = &base->b[i], *n = find_bench(new, b->name);
        if (!n) {
            c->only_b++;
            continue;
        }
        if (not_judged(b, n)) {
            c->nj++;
            continue;
        }
        qsort(b->t, (size_t)b->n, sizeof *b->t, cmp_double);
        qsort(n->t, (size_t)n->n, sizeof *n->t, cmp_double);
        row *r = &c->rows[c->nr];
        r->name = b->name;
        r->nb = b->n;
        r->nn = n->n;
        r->med_b = median_sorted(b->t, b->n);
        r->med_n = median_sorted(n->t, n->n);
        lr[c->nr++] = log(r->med_n / r->med_b);
    }
    for (int i = 0; i < new->nb; i++) c->only_n += !find_bench(base, new->b[i].name);
}

/* The drift per resource group: rows at one thread count that are
 * compute-bound share the cores' clock and share, memory-bound ones (a
 * bw_level field: decode) the host's memory traffic. A group too small to
 * estimate (compute: < STATS_DRIFT_MIN, memory: < 2) takes the drift of the
 * compute rows at its thread count, else of all compute rows. Each group's
 * drift is computed once (g->groups), then given to its rows: gdrift[i] the
 * drift of row i, gidx[i] its group (-1: none kept). */
static void fit_drift(const result_set *base, const comparison *c, const double *lr, gate_info *g,
                      double *gdrift, int *gidx, double *tmp) {
    const int nr = c->nr; /* gdrift and gidx come zeroed and -1 (compare_rows) */
    int nc;
    g->drift = c->common; /* the compute rows' median change, as compare_rows found it */
    g->normalized = 1;
    for (int i = 0; i < nr; i++) {
        const bench *bi = find_bench(base, c->rows[i].name);
        const drift_group *dg = NULL;
        for (int k = 0; k < g->ngroups && !dg; k++)
            if (g->groups[k].threads == bi->threads && g->groups[k].mem == bi->mem)
                dg = &g->groups[k];
        drift_group here;
        if (!dg) {
            here = (drift_group){.threads = bi->threads, .mem = bi->mem, .drift = g->drift};
            here.n = group_changes(base, c->rows, lr, nr, bi->threads, bi->mem, tmp);
            if (here.n >= (bi->mem ? 2 : STATS_DRIFT_MIN)) {
                here.drift = median_inplace(tmp, here.n);
            } else {
                nc = group_changes(base, c->rows, lr, nr, bi->threads, 0, tmp);
                if (nc >= STATS_DRIFT_MIN) here.drift = median_inplace(tmp, nc);
            }
            dg = &here;
            if (g->ngroups < (int)(sizeof g->groups / sizeof g->groups[0])) {
                g->groups[g->ngroups] = here;
                dg = &g->groups[g->ngroups++];
            }
        }
        gdrift[i] = dg->drift;
        if (dg != &here) gidx[i] = (int)(dg - g->groups);
    }
}

/* The run's threshold (derived from the residual spread unless given), and a
 * noisier drift group's own: on a 2-vCPU VM the 2-thread rows (both vCPUs
 * must be free) spread 3-5x wider than the 1-thread rows, and one pooled
 * threshold flagged 2-thread noise as regressions (A/A pairs, README
 * "Regression testing in CI"). A group of STATS_DRIFT_MIN rows or more is
 * judged by its own derived threshold when that is wider than the run's;
 * never narrower: 8 rows' spread is too rough an estimate to tighten on (an
 * A/A pair moved two 1-thread rows 4-5% together while the other six moved
 * under 1%). */
static void fit_thresholds(comparison *c, const double *lr, const int *gidx, double *tmp,
                           const settings *s) {
    gate_info *g = &c->g;
    const int nr = c->nr;
    const double derived = stats_derived_threshold(lr, nr, DEFAULT_THRESHOLD, &g->sigma);
    if (!s->threshold_given) {
        g->threshold = derived;
        g->threshold_source = nr >= STATS_DRIFT_MIN ? "derived" : "default";
    }
    for (int k = 0; k < g->ngroups; k++) {
        drift_group *dg = &g->groups[k];
        dg->threshold = g->threshold;
        if (s->threshold_given || strcmp(g->threshold_source, "derived") != 0) continue;
        int n = 0;
        for (int i = 0; i < nr; i++)
            if (gidx[i] == k) tmp[n++] = lr[i];
        if (n >= STATS_DRIFT_MIN) {
            const double t = stats_derived_threshold(tmp, n, g->threshold, &dg->sigma);
            if (t > g->threshold) dg->threshold = t, dg->own = 1;
        }
    }
    for (int i = 0; i < nr; i++) {
        const drift_group *dg = gidx[i] >= 0 ? &g->groups[gidx[i]] : NULL;
        c->rows[i].threshold = dg ? dg->threshold : g->threshold;
        /* the group's own spread where it has one (rows at one thread count
         * share their noise: 2-thread rows here spread 3x wider than 1-thread
         * ones), else the run's */
        c->rows[i].sigma = dg && dg->sigma > 0 ? dg->sigma : g->sigma;
    }
}

/* Holm's step-down over the rows with enough repetitions (stats.h:
 * stats_holm_levels): the gate's "slower" is a claim about the compared set
 * (one slower row fails it), so alpha bounds the chance that any row of an
 * unchanged build reads slower, not each row's. Why: with 20 rows at 0.01
 * each, an A/A pair reads some row slower by chance alone in up to
 * 1 - 0.99^20 = 18% of pairs, and the A/A pairs here were clean in 8 of 10. */
static void holm_levels(comparison *c, double alpha) {
    const size_t cap = (size_t)(c->nr ? c->nr : 1);
    int *idx = xrealloc(NULL, cap * sizeof *idx), m = 0;
    double *p = xrealloc(NULL, cap * sizeof *p), *level = xrealloc(NULL, cap * sizeof *level);
    for (int i = 0; i < c->nr; i++)
        if (!c->rows[i].too_few) idx[m] = i, p[m++] = c->rows[i].ut.p;
    stats_holm_levels(p, m, alpha, level);
    for (int k = 0; k < m; k++) c->rows[idx[k]].alpha = level[k];
    free(idx);
    free(p);
    free(level);
}

/* The kernel a row measures: its name up to the first '/'. */
static size_t kernel_len(const char *name) {
    return strcspn(name, "/");
}

static int same_kernel(const char *a, const char *b) {
    const size_t la = kernel_len(a);
    return kernel_len(b) == la && strncmp(a, b, la) == 0;
}

/* 1 when no row before i of rows[0..i) with verdict v (any when v < 0)
 * measures row i's kernel: each kernel handled once. */
static int first_of_kernel(const comparison *c, int i, int v) {
    for (int j = 0; j < i; j++)
        if ((v < 0 || (int)c->rows[j].v == v) && same_kernel(c->rows[j].name, c->rows[i].name))
            return 0;
    return 1;
}

/* "small" (compare.h): under a derived threshold, the rows of each kernel
 * with enough repetitions and no row already slower are combined, each
 * weighted by its inverse variance (its spread: its drift group's, at least
 * SMALL_SIGMA_MIN), so that the quiet rows carry the evidence and a noisy
 * 2-thread row does not drown it; a weighted mean over SMALL_FLOOR_PCT at
 * over SMALL_Z of its standard errors marks the kernel's slowed rows small.
 * A derived threshold is the gate's estimate of one row's noise between
 * runs, not the size of a change that matters; a given threshold, and
 * --ab's, mean what they say. */
static void mark_small(comparison *c) {
    if (c->eff.threshold_given) return;
    for (int i = 0; i < c->nr; i++) {
        if (!first_of_kernel(c, i, -1)) continue;
        int n = 0, slower = 0;
        double wsum = 0, w = 0;
        for (int j = i; j < c->nr; j++) {
            const row *r = &c->rows[j];
            if (!same_kernel(r->name, c->rows[i].name) || r->too_few || !(r->sigma > 0)) continue;
            const double sg = fmax(r->sigma, SMALL_SIGMA_MIN);
            slower += r->v == V_SLOWER;
            wsum += r->change / (sg * sg), w += 1 / (sg * sg), n++;
        }
        if (slower || n < 2) continue;
        const double mean = wsum / w, z = mean * sqrt(w);
        if (!(z > SMALL_Z && mean > SMALL_FLOOR_PCT)) continue;
        for (int j = i; j < c->nr; j++) {
            row *r = &c->rows[j];
            if (!same_kernel(r->name, c->rows[i].name) || r->too_few) continue;
            if ((r->v == V_SAME || r->v == V_BLIND) && r->change > 0)
                r->v = V_SMALL, r->kernel_mean = mean, r->kernel_z = z;
        }
    }
}

/* --ab: the row's change round by round (each round's two medians, the
 * row's drift factor f divided out), and whether every round moved past
 * half the threshold the way the pooled verdict says. The pooled U test
 * takes every repetition as independent, but repetitions of one sweep share
 * the host's state during that sweep: on the Emerald Rapids VM (stop 54) a
 * neighbour's load switched between two levels for minutes at a time: a
 * 4-round A/B called a build 18.8% faster at p 4e-10 that a rerun of it
 * read 4.5% faster, and another read a row whose arithmetic the change had
 * not altered 30% slower (44 against 57 ms a call). A move the rounds do
 * not each show is not evidence of a change, whatever the pooled p. */
static void check_rounds(row *r, const settings *s, double f) {
    r->rounds = r->rounds_agree = r->rounds_split = 0;
    r->round_lo = r->round_hi = NAN;
    if (s->nrounds < 2) return;
    const int dir = r->v == V_SLOWER ? 1 : r->v == V_FASTER ? -1 : 0;
    const double half = (r->threshold > 0 ? r->threshold : s->threshold) / 2;
    double *tmp = NULL;
    for (int k = 0; k < s->nrounds; k++) {
        const bench *b = find_bench(&s->rounds[0][k], r->name),
                    *n = find_bench(&s->rounds[1][k], r->name);
        if (!b || !n || b->n == 0 || n->n == 0) continue;
        tmp = xrealloc(tmp, (size_t)(b->n > n->n ? b->n : n->n) * sizeof *tmp);
        memcpy(tmp, b->t, (size_t)b->n * sizeof *tmp);
        const double mb = median_inplace(tmp, b->n);
        memcpy(tmp, n->t, (size_t)n->n * sizeof *tmp);
        const double ch = (median_inplace(tmp, n->n) * f / mb - 1) * 100;
        if (r->rounds == 0 || ch < r->round_lo) r->round_lo = ch;
        if (r->rounds == 0 || ch > r->round_hi) r->round_hi = ch;
        r->rounds++;
        r->rounds_agree += dir != 0 && dir * ch > half;
    }
    free(tmp);
    if (dir != 0 && r->rounds >= 2 && r->rounds_agree < r->rounds) {
        r->v = V_NOISY;
        r->rounds_split = 1;
    }
}

/* Pass 2: the U test on the new samples with their group's drift divided out. */
static void test_rows(const result_set *base, const result_set *new, comparison *c,
                      const double *gdrift) {
    double *scaled = NULL;
    for (int i = 0; i < c->nr; i++) {
        row *r = &c->rows[i];
        const double f = exp(-gdrift[i]);
        const bench *b = find_bench(base, r->name), *n = find_bench(new, r->name);
        scaled = xrealloc(scaled, (size_t)n->n * sizeof *scaled);
        for (int j = 0; j < n->n; j++) scaled[j] = n->t[j] * f;
        r->ut = stats_mann_whitney(b->t, b->n, scaled, n->n);
        r->too_few = b->n < MIN_REPS || n->n < MIN_REPS;
    }
    holm_levels(c, c->eff.alpha);
    for (int i = 0; i < c->nr; i++) {
        row *r = &c->rows[i];
        const double f = exp(-gdrift[i]);
        const bench *b = find_bench(base, r->name), *n = find_bench(new, r->name);
        scaled = xrealloc(scaled, (size_t)n->n * sizeof *scaled);
        for (int j = 0; j < n->n; j++) scaled[j] = n->t[j] * f;
        r->change_raw = (r->med_n / r->med_b - 1) * 100;
        r->change = (r->med_n * f / r->med_b - 1) * 100;
        r->shift = stats_shift_interval(b->t, b->n, scaled, n->n, 0.95, &r->ci_lo, &r->ci_hi);
        r->v = row_verdict(r, &c->eff);
        check_rounds(r, &c->eff, f);
        const noise_row *nz = c->eff.noise ? noise_row_of(c->eff.noise, r->name) : NULL;
        r->mde = nz ? nz->mde_pct : NAN;
        r->fp_rate = nz ? (double)nz->false_positives / nz->pairs : NAN;
        /* "same" is a claim the row cannot make when a slowdown of its
         * threshold would not show: its calibrated detectable effect is over
         * BLIND_FACTOR x the threshold (never below 1x: detection needs the
         * median past the threshold and significance too) */
        if (r->v == V_SAME && nz && !(nz->mde_pct <= BLIND_FACTOR * r->threshold)) r->v = V_BLIND;
        c->too_few += r->too_few;
    }
    free(scaled);
    mark_small(c);
    for (int i = 0; i < c->nr; i++) c->count[c->rows[i].v]++;
}

void compare_rows(const result_set *base, const result_set *new, const settings *s, comparison *c) {
    const size_t cap = (size_t)(base->nb ? base->nb : 1);
    *c = (comparison){.rows = xrealloc(NULL, cap * sizeof *c->rows)};
    double *lr = xrealloc(NULL, cap * sizeof *lr), *gdrift = xrealloc(NULL, cap * sizeof *gdrift);
    double *tmp = xrealloc(NULL, cap * sizeof *tmp);
    int *gidx = xrealloc(NULL, cap * sizeof *gidx);
    measure_rows(base, new, c, lr);
    c->g = (gate_info){c->nr, 0, 0, 0, s->threshold, s->threshold_given == 2 ? "ab" : "given",
                       {{0}}, 0};
    const int nc = group_changes(base, c->rows, lr, c->nr, -1, 0, tmp);
    c->common = nc >= STATS_DRIFT_MIN ? stats_common_drift(tmp, nc) : stats_common_drift(lr, c->nr);
    for (int i = 0; i < c->nr; i++) gdrift[i] = 0, gidx[i] = -1;
    if (s->normalize && c->nr >= STATS_DRIFT_MIN) fit_drift(base, c, lr, &c->g, gdrift, gidx, tmp);
    for (int i = 0; i < c->nr; i++) lr[i] -= gdrift[i];
    fit_thresholds(c, lr, gidx, tmp, s);
    c->eff = *s;
    c->eff.threshold = c->g.threshold;
    test_rows(base, new, c, gdrift);
    free(lr);
    free(gdrift);
    free(tmp);
    free(gidx);
}

/* ---- the verdict ---------------------------------------------------------------------- */

/* The gate's three answers (exit 0, 1, 3). "no regression" is a claim about
 * the compared set, so it needs evidence for most of it: at least
 * GATE_JUDGED_SHARE of the base's benchmarks judged (in both files, an
 * undisturbed repetition on each side and MIN_REPS or more, so the U test
 * can reach alpha), no unjudged benchmark whose median slowed past its
 * threshold, and no drift divided out beyond --max-drift. 90%: the A/A
 * batches of the ci preset left 6 of 200 row comparisons (3%) short of
 * repetitions after retakes, so one short row of 20 still gives a verdict,
 * while a sweep whose rows were mostly disturbed does not. A regression
 * (a slower row, a benchmark of the base missing from the new file) is
 * reported whatever else was judged. */
enum { GATE_NO_REGRESSION = 0, GATE_REGRESSION = 1, GATE_INCONCLUSIVE = 2 };
static const char *const GATE_NAME[] = {"no regression", "regression", "inconclusive"};
#define GATE_JUDGED_SHARE 0.9

typedef struct {
    int verdict, judged, unjudged_moved, drift_beyond;
    char why[8][400];
    int nwhy;
} gate_result;

static void gate_reason(gate_result *gr, int verdict, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void gate_reason(gate_result *gr, int verdict, const char *fmt, ...) {
    if (verdict == GATE_REGRESSION || gr->verdict == GATE_NO_REGRESSION) gr->verdict = verdict;
    if (gr->nwhy >= (int)(sizeof gr->why / sizeof gr->why[0])) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(gr->why[gr->nwhy++], sizeof gr->why[0], fmt, ap);
    va_end(ap);
}

/* The runs' setups on one CPU (compare.h: FP_ISA, FP_CORES, FP_THREADS):
 * the new run with a lower ISA level (an MHA_ISA cap, a build that lost its
 * detection or its -march) or fewer cores or threads (taskset, a cpuset) had
 * less of the machine, which is a regression of its own whatever the rows
 * say; a setup that differs otherwise (the base was the capped one) leaves
 * the rows measuring different configurations: inconclusive. */
static void gate_setup(const result_set *base, const result_set *new, gate_result *gr) {
    char less[256] = "", other[256] = "";
    for (int k = FP_ISA; k < FP_COUNT; k++) {
        const char *vb = base->fp[k], *vn = new->fp[k];
        if (!vb || !vn || strcmp(vb, vn) == 0) continue;
        int lower = 0;
        if (k == FP_ISA) {
            mha_isa ib, in;
            lower = mha_isa_parse(vb, &ib) == MHA_OK && mha_isa_parse(vn, &in) == MHA_OK && in < ib;
        } else {
            char *eb, *en;
            const long nb = strtol(vb, &eb, 10), nn = strtol(vn, &en, 10);
            lower = !*eb && !*en && nn < nb;
        }
        char *to = lower ? less : other;
        const size_t used = strlen(to);
        snprintf(to + used, sizeof less - used, "%s%s '%s' -> '%s'", used ? ", " : "", FP_KEYS[k],
                 vb, vn);
    }
    if (less[0])
        gate_reason(gr, GATE_REGRESSION,
                    "the new run had less of this machine than the base (%s): an MHA_ISA cap or a "
                    "lost ISA detection, taskset or a cpuset; the rows it could not run are "
                    "missing and the rest ran on less",
                    less);
    if (other[0])
        gate_reason(gr, GATE_INCONCLUSIVE,
                    "the runs' setups on this CPU differ (%s): the rows measure different "
                    "configurations",
                    other);
}

static void gate_decide(const comparison *c, const result_set *base, const result_set *new,
                        const settings *s, gate_result *gr) {
    *gr = (gate_result){.verdict = GATE_NO_REGRESSION};
    gate_setup(base, new, gr);
    for (int i = 0; i < c->nr; i++) {
        const row *r = &c->rows[i];
        gr->judged += !r->too_few && r->v != V_BLIND;
        gr->unjudged_moved += r->too_few && r->change > r->threshold;
    }
    if (c->count[V_SLOWER])
        gate_reason(gr, GATE_REGRESSION, "%d benchmark%s slower", c->count[V_SLOWER],
                    c->count[V_SLOWER] == 1 ? "" : "s");
    int split_slower = 0;
    for (int i = 0; i < c->nr; i++)
        split_slower += c->rows[i].rounds_split && c->rows[i].change > 0;
    if (split_slower)
        gate_reason(gr, GATE_INCONCLUSIVE,
                    "%d benchmark%s slower by the pooled test but not past half the threshold in "
                    "every round (the host's speed moved between the sweeps); rerun with more "
                    "rounds or in a quieter hour",
                    split_slower, split_slower == 1 ? "" : "s");
    for (int i = 0, said = 0; i < c->nr; i++) {
        const row *r = &c->rows[i];
        /* one reason per kernel */
        if (r->v != V_SMALL || !first_of_kernel(c, i, V_SMALL) || said++ >= 3) continue;
        gate_reason(gr, GATE_INCONCLUSIVE,
                    "the rows of %.*s slowed together, %+.1f%% on average (weighted; %.1f "
                    "standard errors) but each under the threshold derived from this pair's "
                    "noise: too small for a history comparison to call; judge it with compare "
                    "--ab, or give --threshold for the size that matters",
                    (int)kernel_len(r->name), r->name, r->kernel_mean, r->kernel_z);
    }
    if (c->only_b)
        gate_reason(gr, GATE_REGRESSION,
                    "%d benchmark%s of the base missing from the new file (a kernel or shape "
                    "that vanished: a lower ISA level, a kernel that no longer runs or registers)",
                    c->only_b, c->only_b == 1 ? "" : "s");
    const double common_pct = 100 * (exp(c->common) - 1);
    if (!c->g.normalized && c->nr >= STATS_DRIFT_MIN && common_pct > s->max_drift &&
        !c->count[V_SLOWER])
        gate_reason(gr, s->ab ? GATE_REGRESSION : GATE_INCONCLUSIVE,
                    "the compute-bound benchmarks moved %+.1f%% together, beyond the %.0f%% "
                    "bound (--max-drift)%s",
                    common_pct, s->max_drift,
                    s->ab ? ": both builds ran on the same host in turns, so that is the build"
                          : "");
    /* Only a slowdown divided out can hide a regression (a build that
     * slows every row alike); a group that got faster as a whole hides at
     * most an improvement, and memory-bound groups move -13..+15% between
     * back-to-back sweeps here, mostly faster. */
    if (c->g.normalized)
        for (int k = 0; k < c->g.ngroups; k++) {
            const double d = 100 * (exp(c->g.groups[k].drift) - 1);
            if (d > s->max_drift) gr->drift_beyond++;
        }
    if (gr->drift_beyond || (c->g.normalized && 100 * (exp(c->g.drift) - 1) > s->max_drift))
        gate_reason(gr, GATE_INCONCLUSIVE,
                    "the slowdown divided out as drift (%+.1f%% overall; %d group%s beyond) "
                    "exceeds the %.0f%% bound (--max-drift): a change that slows every row alike "
                    "looks exactly like a slower host; rerun in a quieter hour, or --no-normalize",
                    100 * (exp(c->g.drift) - 1), gr->drift_beyond, gr->drift_beyond == 1 ? "" : "s",
                    s->max_drift);
    if (gr->unjudged_moved)
        gate_reason(gr, GATE_INCONCLUSIVE,
                    "%d benchmark%s slowed past the threshold with too few repetitions to test "
                    "(fewer than %d on a side)",
                    gr->unjudged_moved, gr->unjudged_moved == 1 ? "" : "s", MIN_REPS);
    if (gr->judged < GATE_JUDGED_SHARE * base->nb)
        gate_reason(gr, GATE_INCONCLUSIVE,
                    "%d of the base's %d benchmarks judged (%d not in the new file, %d with every "
                    "repetition on a side disturbed, %d with fewer than %d repetitions on a side, "
                    "%d blind: calibrated detectable effect above the threshold); \"no "
                    "regression\" needs %.0f%%",
                    gr->judged, base->nb, c->only_b, c->nj, c->too_few, MIN_REPS, c->count[V_BLIND],
                    100 * GATE_JUDGED_SHARE);
}

static int gate_exit(const gate_result *gr) {
    return gr->verdict == GATE_REGRESSION     ? EXIT_CHECK_FAILED
           : gr->verdict == GATE_INCONCLUSIVE ? EXIT_INCONCLUSIVE
                                              : 0;
}

/* ---- the reports ---------------------------------------------------------------------- */

static void report_json(const comparison *c, const gate_result *gr, const result_set *base,
                        const result_set *new, const char *base_label, const char *new_label,
                        int fp_checked, int forced) {
    const settings *s = &c->eff;
    const gate_info *g = &c->g;
    json_object *o = json_object_new_object();
    json_object_object_add(o, "base", json_object_new_string(base_label));
    json_object_object_add(o, "new", json_object_new_string(new_label));
    json_object_object_add(o, "threshold_pct", results_json_double(s->threshold));
    json_object_object_add(o, "threshold_source", json_object_new_string(g->threshold_source));
    json_object_object_add(o, "residual_sigma_pct", results_json_double(g->sigma));
    json_object_object_add(o, "drift_pct", results_json_double(100 * (exp(g->drift) - 1)));
    json_object_object_add(o, "drift_removed", json_object_new_boolean(g->normalized));
    json_object_object_add(o, "common_change_pct", results_json_double(100 * (exp(c->common) - 1)));
    json_object_object_add(o, "max_drift_pct", results_json_double(s->max_drift));
    json_object *mg = json_object_new_array();
    for (int k = 0; k < g->ngroups; k++) {
        json_object *e = json_object_new_object();
        json_object_object_add(e, "threads", json_object_new_int(g->groups[k].threads));
        json_object_object_add(e, "bound",
                               json_object_new_string(g->groups[k].mem ? "memory" : "compute"));
        json_object_object_add(e, "benchmarks", json_object_new_int(g->groups[k].n));
        json_object_object_add(e, "drift_pct",
                               results_json_double(100 * (exp(g->groups[k].drift) - 1)));
        json_object_object_add(e, "threshold_pct", results_json_double(g->groups[k].threshold));
        json_object_object_add(e, "threshold_from_group",
                               json_object_new_boolean(g->groups[k].own));
        json_object_array_add(mg, e);
    }
    json_object_object_add(o, "drift_groups", mg);
    json_object_object_add(o, "alpha", results_json_double(s->alpha));
    json_object_object_add(o, "min_repetitions", json_object_new_int(MIN_REPS));
    json_object *fp = json_object_new_object();
    json_object_object_add(fp, "base", fp_json(base));
    json_object_object_add(fp, "new", fp_json(new));
    json_object_object_add(fp, "checked", json_object_new_boolean(fp_checked));
    json_object_object_add(fp, "forced", json_object_new_boolean(forced));
    json_object_object_add(o, "fingerprint", fp);
    json_object *arr = json_object_new_array();
    for (int i = 0; i < c->nr; i++) {
        const row *r = &c->rows[i];
        json_object *e = json_object_new_object();
        json_object_object_add(e, "name", json_object_new_string(r->name));
        json_object_object_add(e, "base_repetitions", json_object_new_int(r->nb));
        json_object_object_add(e, "new_repetitions", json_object_new_int(r->nn));
        json_object_object_add(e, "base_median_ns", results_json_double(r->med_b));
        json_object_object_add(e, "new_median_ns", results_json_double(r->med_n));
        json_object_object_add(e, "change_pct", results_json_double(r->change));
        json_object_object_add(e, "change_raw_pct", results_json_double(r->change_raw));
        json_object_object_add(e, "shift_pct", results_json_double(r->shift));
        json_object *ci = json_object_new_array();
        json_object_array_add(ci, results_json_double(r->ci_lo));
        json_object_array_add(ci, results_json_double(r->ci_hi));
        json_object_object_add(e, "change_ci95_pct", ci);
        json_object_object_add(e, "threshold_pct", results_json_double(r->threshold));
        json_object_object_add(e, "u", results_json_double(r->ut.u));
        json_object_object_add(e, "p_value", results_json_double(r->ut.p));
        json_object_object_add(e, "alpha", results_json_double(r->alpha > 0 ? r->alpha : s->alpha));
        json_object_object_add(e, "p_method",
                               json_object_new_string(r->ut.exact ? "exact" : "normal"));
        json_object_object_add(e, "too_few_repetitions", json_object_new_boolean(r->too_few));
        json_object_object_add(e, "verdict", json_object_new_string(VERDICT_NAME[r->v]));
        if (r->rounds) {
            json_object_object_add(e, "rounds", json_object_new_int(r->rounds));
            json_object_object_add(e, "rounds_agreeing", json_object_new_int(r->rounds_agree));
            json_object *rr = json_object_new_array();
            json_object_array_add(rr, results_json_double(r->round_lo));
            json_object_array_add(rr, results_json_double(r->round_hi));
            json_object_object_add(e, "round_change_range_pct", rr);
            json_object_object_add(e, "rounds_disagree", json_object_new_boolean(r->rounds_split));
        }
        json_object_object_add(e, "calibrated_mde_pct", results_json_double(r->mde));
        json_object_object_add(e, "calibrated_false_positive_rate",
                               results_json_double(r->fp_rate));
        json_object_array_add(arr, e);
    }
    json_object_object_add(o, "benchmarks", arr);
    json_object_object_add(o, "only_in_base", name_list(base, new));
    json_object *nja = json_object_new_array();
    for (int i = 0; i < base->nb; i++)
        if (not_judged(&base->b[i], find_bench(new, base->b[i].name)))
            json_object_array_add(nja, json_object_new_string(base->b[i].name));
    json_object_object_add(o, "not_judged_disturbed", nja);
    json_object_object_add(o, "only_in_new", name_list(new, base));
    json_object *sum = json_object_new_object();
    for (int v = 0; v < V_COUNT; v++)
        json_object_object_add(sum, VERDICT_NAME[v], json_object_new_int(c->count[v]));
    json_object_object_add(sum, "too_few_repetitions", json_object_new_int(c->too_few));
    json_object_object_add(sum, "only_in_base", json_object_new_int(c->only_b));
    json_object_object_add(sum, "only_in_new", json_object_new_int(c->only_n));
    json_object_object_add(sum, "not_judged_disturbed", json_object_new_int(c->nj));
    json_object_object_add(sum, "judged", json_object_new_int(gr->judged));
    json_object_object_add(sum, "in_base", json_object_new_int(base->nb));
    json_object_object_add(sum, "regression",
                           json_object_new_boolean(gr->verdict == GATE_REGRESSION));
    json_object_object_add(sum, "verdict", json_object_new_string(GATE_NAME[gr->verdict]));
    json_object *why = json_object_new_array();
    for (int i = 0; i < gr->nwhy; i++)
        json_object_array_add(why, json_object_new_string(gr->why[i]));
    json_object_object_add(sum, "reasons", why);
    json_object_object_add(o, "summary", sum);
    puts(json_object_to_json_string_ext(o,
                                        JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(o);
}

/* The text report's header: machine, drift, threshold and the rule. */
static void report_header(const comparison *c, const result_set *base, const char *base_label,
                          const char *new_label, int fp_checked, int forced) {
    const settings *s = &c->eff;
    const gate_info *g = &c->g;
    printf("mhabench compare: base %s, new %s\n", base_label, new_label);
    if (fp_checked && base->fp[0])
        printf("machine: cpu %s, isa %s, cores %s%s%s%s\n", base->fp[0],
               base->fp[1] ? base->fp[1] : "?", base->fp[2] ? base->fp[2] : "?",
               base->fp[3] ? ", threads " : "", base->fp[3] ? base->fp[3] : "",
               forced ? " (fingerprints differ: --force)" : "");
    if (g->normalized) {
        printf("host drift, divided out of every new sample before testing (--no-normalize "
               "keeps it; bound %.0f%%, --max-drift):\n",
               s->max_drift);
        for (int k = 0; k < g->ngroups; k++) {
            printf("  %s-bound at %d thread%s: %+.1f%% (%d benchmark%s%s)",
                   g->groups[k].mem ? "memory" : "compute", g->groups[k].threads,
                   g->groups[k].threads == 1 ? "" : "s", 100 * (exp(g->groups[k].drift) - 1),
                   g->groups[k].n, g->groups[k].n == 1 ? "" : "s",
                   (g->groups[k].mem ? g->groups[k].n < 2 : g->groups[k].n < STATS_DRIFT_MIN)
                       ? "; too few: the compute rows' drift"
                       : "");
            if (g->groups[k].own)
                printf("; threshold %.1f%% (%.0f x its own spread %.2f%%)", g->groups[k].threshold,
                       STATS_THRESHOLD_K, g->groups[k].sigma);
            printf("\n");
        }
    } else if (s->normalize)
        printf("host drift: not removed (fewer than %d benchmarks in both files)\n",
               STATS_DRIFT_MIN);
    else if (c->nr >= STATS_DRIFT_MIN)
        printf("common change of the compute-bound benchmarks: %+.1f%% (kept in every row; "
               "bound %.0f%%)\n",
               100 * (exp(c->common) - 1), s->max_drift);
    if (strcmp(g->threshold_source, "derived") == 0)
        printf("threshold: %.1f%% derived: %.0f x the robust spread %.2f%% of the %d changes%s, "
               "within [%.0f, %.0f]%%%s\n",
               g->threshold, STATS_THRESHOLD_K, g->sigma, g->n,
               g->normalized ? " after drift removal" : "", STATS_THRESHOLD_MIN,
               STATS_THRESHOLD_MAX,
               g->normalized ? "; a noisier group of 5 or more rows uses its own (above)" : "");
    else
        printf("threshold: %.1f%% %s\n", g->threshold,
               strcmp(g->threshold_source, "given") == 0 ? "(--threshold)"
               : strcmp(g->threshold_source, "ab") == 0
                   ? "(the --ab default: fixed, since an A/B's spread includes the change)"
                   : "(the default: under 5 benchmarks in both files, no noise estimate)");
    printf("rule: slower/faster = U test p below its Holm level (alpha %g over the compared "
           "rows: the\nsmallest p against %g / rows, ...) and median moved more than %g%%; "
           "noisy = moved more\nthan %g%% without significance; p exact for n <= %d, else "
           "normal approximation\n\n",
           s->alpha, s->alpha, s->threshold, s->threshold, STATS_EXACT_MAX);
}

static void report_text(const comparison *c, const gate_result *gr, const result_set *base,
                        const result_set *new) {
    int w = 9;
    for (int i = 0; i < c->nr; i++)
        if ((int)strlen(c->rows[i].name) > w) w = (int)strlen(c->rows[i].name);
    printf("%-*s %11s %11s %8s %5s %5s %8s  %-8s%s\n", w, "benchmark", "base median", "new median",
           "change", "n_b", "n_n", "p-value", "verdict", "note");
    for (int i = 0; i < c->nr; i++) {
        const row *r = &c->rows[i];
        char tb[32], tn[32], note[96] = "";
        fmt_time(tb, sizeof tb, r->med_b);
        fmt_time(tn, sizeof tn, r->med_n);
        if (r->too_few) {
            snprintf(note, sizeof note, "too few repetitions (n<%d)", MIN_REPS);
        } else if (r->rounds_split) {
            snprintf(note, sizeof note,
                     "rounds disagree: %d of %d past half the threshold, %+.1f..%+.1f%%",
                     r->rounds_agree, r->rounds, r->round_lo, r->round_hi);
        } else if (r->v == V_SMALL) {
            snprintf(note, sizeof note, "its kernel's rows %+.1f%% together (z %.1f)",
                     r->kernel_mean, r->kernel_z);
        } else if (!isnan(r->fp_rate)) { /* the machine's calibration knows this row */
            char mde[32] = "nothing below 100%";
            if (!isnan(r->mde)) snprintf(mde, sizeof mde, ">= %.1f%%", r->mde);
            snprintf(note, sizeof note, "calibrated: detects %s, false alarms %.0f%%", mde,
                     100 * r->fp_rate);
        } else if (r->v == V_NOISY && r->ut.p < c->eff.alpha) {
            snprintf(note, sizeof note, "p above its Holm level %.2g", r->alpha);
        }
        printf("%-*s %11s %11s %+7.1f%% %5d %5d %8.2g  %-*s%s\n", w, r->name, tb, tn, r->change,
               r->nb, r->nn, r->ut.p, note[0] ? 8 : 0, VERDICT_NAME[r->v], note);
    }
    for (int i = 0; i < base->nb; i++)
        if (!find_bench(new, base->b[i].name))
            printf("MISSING from new (only in base): %s\n", base->b[i].name);
    for (int i = 0; i < base->nb; i++) {
        const bench *b = &base->b[i], *n = find_bench(new, b->name);
        if (not_judged(b, n))
            printf("not judged: %s (every repetition disturbed in %s)\n", b->name,
                   b->n == 0 && n->n == 0 ? "both files"
                   : b->n == 0            ? "base"
                                          : "new");
    }
    for (int i = 0; i < new->nb; i++)
        if (!find_bench(base, new->b[i].name)) printf("only in new: %s\n", new->b[i].name);
    printf("\n%d compared: %d slower, %d faster, %d same, %d noisy", c->nr, c->count[V_SLOWER],
           c->count[V_FASTER], c->count[V_SAME], c->count[V_NOISY]);
    if (c->count[V_SMALL]) printf(", %d small", c->count[V_SMALL]);
    if (c->count[V_BLIND]) printf(", %d blind", c->count[V_BLIND]);
    if (c->too_few) printf(" (%d with too few repetitions)", c->too_few);
    if (c->only_b || c->only_n) printf("; %d only in base, %d only in new", c->only_b, c->only_n);
    if (c->nj)
        printf("; %d not judged (the interference evidence marked every repetition on a side)",
               c->nj);
    if (base->steady || new->steady)
        printf("\na steady background in %d of %d base file%s and %d of %d new: their "
               "repetitions were judged against each run's own level (bursts above it left "
               "out; the interleaved rounds cancel what the background shares)",
               base->steady, base->files, base->files == 1 ? "" : "s", new->steady, new->files);
    printf("\n%d of %d benchmarks of the base judged\n", gr->judged, base->nb);
    printf("verdict: %s\n", gr->verdict == GATE_REGRESSION     ? "REGRESSION"
                            : gr->verdict == GATE_INCONCLUSIVE ? "INCONCLUSIVE (exit 3)"
                                                               : "no regression");
    for (int i = 0; i < gr->nwhy; i++) printf("  because: %s\n", gr->why[i]);
    if (c->count[V_NOISY])
        printf("noisy: the median moved but the test cannot tell it from noise; rerun with "
               "more repetitions or use --ab\n");
}

int compare_sets(const result_set *base, const result_set *new, const char *base_label,
                 const char *new_label, int fp_checked, int forced, const settings *s) {
    comparison c;
    gate_result gr;
    compare_rows(base, new, s, &c);
    gate_decide(&c, base, new, s, &gr);
    if (s->json) {
        report_json(&c, &gr, base, new, base_label, new_label, fp_checked, forced);
    } else {
        report_header(&c, base, base_label, new_label, fp_checked, forced);
        report_text(&c, &gr, base, new);
    }
    if (base->skipped || new->skipped)
        fprintf(stderr, "mhabench: compare: ignored %d + %d repetitions that reported an error\n",
                base->skipped, new->skipped);
    if (base->disturbed || new->disturbed)
        fprintf(stderr,
                "mhabench: compare: left out %d + %d repetitions the sweep marked disturbed "
                "(retaken in the files)\n",
                base->disturbed, new->disturbed);
    if (c.nr == 0 && c.nj == 0)
        fprintf(stderr, "mhabench: compare: no benchmark name is in both files\n");
    free(c.rows);
    return gate_exit(&gr);
}
