/* cmd_compare.c - `mhabench compare`: statistical comparison of two Google Benchmark
 * result files (per benchmark: median change, Mann-Whitney U p-value, verdict),
 * the per-CPU baselines under results/baselines/, and A/B runs of two builds. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include "commands.h"
#include "mha_private.h"
#include "fmt_results.h"
#include "proc.h"
#include "stats.h"
#include "util.h"

extern char **environ;

/* Below this many repetitions on either side the U test cannot mean much (at
 * alpha 0.01 it cannot reject at all with 4 + 4 or fewer), and the report says so. */
enum { MIN_REPS = 9 };
/* The exact distribution is counted when both samples have at most this many
 * repetitions; beyond, the normal approximation is accurate to well under alpha. */
enum { EXACT_MAX = 20 };
enum { MAX_ROUNDS = 100, MAX_SWEEP_ARGS = 64 };

#define DEFAULT_BASELINE_DIR "results/baselines"

/* The machine fingerprint: the context keys that must agree for two result
 * files to be comparable. The last one is optional (checked when both have it). */
static const char *const FP_KEYS[] = {"mha_cpu_key", "mha_isa_active", "mha_cores",
                                      "mha_threads_max"};
enum { FP_COUNT = 4, FP_REQUIRED = 3 };

static void usage(FILE *f) {
    fputs("usage: mhabench compare BASE.json NEW.json [--threshold PCT] [--alpha A] [--json]\n"
          "                        [--force]\n"
          "       mhabench compare --baseline NEW.json [--baseline-dir DIR] [options]\n"
          "       mhabench compare --save-baseline NEW.json [--baseline-dir DIR]\n"
          "       mhabench compare --ab OLD_BINARY NEW_BINARY [--budget S | --rounds R] [options]\n"
          "                        [-- sweep args]\n"
          "Compares Google Benchmark result files (as written by `mhabench sweep`) benchmark\n"
          "by benchmark: median real time change, Mann-Whitney U two-sided p-value over the\n"
          "repetitions, and a verdict: slower (p < alpha and median slower by more than the\n"
          "threshold), faster (likewise), noisy (median moved more than the threshold but\n"
          "not significantly: rerun with more repetitions), or same.\n"
          "The gate: REGRESSION when a benchmark is slower or one of the base is missing\n"
          "from the new file; no regression only when at least 90% of the base's\n"
          "benchmarks were judged (in both files, undisturbed, >= 9 repetitions a side),\n"
          "none slowed untested and no drift beyond --max-drift was divided out;\n"
          "INCONCLUSIVE otherwise, with the reasons.\n"
          "Exit 0 no regression, 1 regression, 2 usage or input error, 3 inconclusive.\n"
          "  --threshold PCT    median change that matters, percent (default: derived from\n"
          "                     the spread of the changes, 4 robust sigmas within [2, 10];\n"
          "                     5 when fewer than 5 benchmarks are in both files; 3 for --ab)\n"
          "  --no-normalize     keep the drift common to every benchmark (by default the\n"
          "                     median change over all benchmarks, the host's drift, is\n"
          "                     divided out before testing; never with --ab)\n"
          "  --max-drift PCT    a drift common to the benchmarks beyond PCT percent is a\n"
          "                     finding: inconclusive when divided out, a regression under\n"
          "                     --ab (default 10)\n"
          "  --alpha A          significance level of the U test (default 0.01)\n"
          "  --json             machine-readable report on stdout instead of the table\n"
          "  --force            compare even when the machine fingerprints differ\n"
          "  --baseline         compare NEW.json against the newest committed baseline of\n"
          "                     its machine: DIR/<cpu-key>.json or DIR/<cpu-key>-<time>.json\n"
          "  --save-baseline    add NEW.json as a baseline (never overwrites an existing one)\n"
          "  --baseline-dir DIR where baselines live (default " DEFAULT_BASELINE_DIR ")\n"
          "  --ab               run OLD and NEW `sweep --preset ci` alternately (A B A B ...),\n"
          "                     pool each side's repetitions, compare NEW against OLD\n"
          "  --budget S         --ab: rounds continue while another fits in S seconds\n"
          "                     (default 120, at least 2 rounds)\n"
          "  --rounds R         --ab: exactly R rounds instead of the budget\n",
          f);
}

/* ---- result files ---------------------------------------------------------------- */

typedef struct {
    char *name;
    double *t;  /* real time per iteration of each repetition, ns */
    int n, cap; /* n == 0: every repetition was marked disturbed */
    /* its drift group: memory-bound rows (a bw_level field: decode) drift
     * with the host's memory traffic at their thread count, the others
     * with the core's clock and share */
    int mem, threads;
} bench;

typedef struct {
    const char *path;
    char *fp[FP_COUNT]; /* NULL when the context lacks the key */
    bench *b;
    int nb, cap;
    int rows;      /* iteration rows taken */
    int skipped;   /* rows with error_occurred */
    int disturbed; /* rows the sweep's evidence marked disturbed (retaken in the file) */
} result_set;

static void result_free(result_set *rs) {
    for (int i = 0; i < FP_COUNT; i++) free(rs->fp[i]);
    for (int i = 0; i < rs->nb; i++) {
        free(rs->b[i].name);
        free(rs->b[i].t);
    }
    free(rs->b);
    memset(rs, 0, sizeof *rs);
}

#define xrealloc(p, n) xrealloc_or_exit((p), (n), 1, "compare")
#define xstrdup(s) xstrdup_or_exit((s), "compare")

/* The repetition count is not part of a benchmark's identity: Google Benchmark
 * appends "/repeats:N" to the name when it is set per benchmark. */
static void strip_repeats(char *name) {
    char *p = strstr(name, "/repeats:");
    if (!p) return;
    char *q = p + 9;
    while (*q >= '0' && *q <= '9') q++;
    memmove(p, q, strlen(q) + 1);
}

static bench *find_bench(const result_set *rs, const char *name) {
    for (int i = 0; i < rs->nb; i++)
        if (strcmp(rs->b[i].name, name) == 0) return &rs->b[i];
    return NULL;
}

static bench *bench_of(result_set *rs, const char *name) {
    bench *b = find_bench(rs, name);
    if (!b) {
        if (rs->nb == rs->cap) {
            rs->cap = rs->cap ? 2 * rs->cap : 32;
            rs->b = xrealloc(rs->b, (size_t)rs->cap * sizeof *rs->b);
        }
        b = &rs->b[rs->nb++];
        *b = (bench){xstrdup(name), NULL, 0, 0, 0, 0};
    }
    return b;
}

static void add_time(result_set *rs, const char *name, double ns) {
    bench *b = bench_of(rs, name);
    if (b->n == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 16;
        b->t = xrealloc(b->t, (size_t)b->cap * sizeof *b->t);
    }
    b->t[b->n++] = ns;
}

/* Loads a Google Benchmark JSON file and appends its iteration rows to rs (which
 * may already hold rows from other files: A/B rounds are pooled). The first file
 * loaded sets the fingerprint. Returns 0, or EXIT_USAGE after printing why. */
static int load_results(const char *path, result_set *rs) {
    json_object *root = results_load_json("compare", path);
    if (!root) return EXIT_USAGE;
    int rc = EXIT_USAGE;
    json_object *ctx = NULL, *rows = NULL;
    if (!json_object_is_type(root, json_type_object)) {
        errorf_esc("compare: %s: the top level is not a JSON object (not a Google Benchmark "
                   "result file)",
                   path);
        goto out;
    }
    if (!json_object_object_get_ex(root, "benchmarks", &rows) ||
        !json_object_is_type(rows, json_type_array)) {
        errorf_esc("compare: %s: no \"benchmarks\" array (not a Google Benchmark result file)",
                   path);
        goto out;
    }
    if (!rs->path) {
        rs->path = path;
        if (json_object_object_get_ex(root, "context", &ctx) &&
            json_object_is_type(ctx, json_type_object)) {
            for (int k = 0; k < FP_COUNT; k++) {
                json_object *v;
                if (json_object_object_get_ex(ctx, FP_KEYS[k], &v) && v &&
                    !json_object_is_type(v, json_type_object) &&
                    !json_object_is_type(v, json_type_array))
                    rs->fp[k] = xstrdup(json_object_get_string(v));
            }
        }
    }
    const size_t n = json_object_array_length(rows);
    for (size_t i = 0; i < n; i++) {
        json_object *row = json_object_array_get_idx(rows, i), *v;
        if (!json_object_is_type(row, json_type_object)) {
            errorf_esc("compare: %s: benchmarks[%zu] is not an object", path, i);
            goto out;
        }
        /* Aggregates (_mean, _median, _stddev, _cv) are derived; only the
         * repetitions themselves are samples. Files without run_type (old
         * Google Benchmark) mark aggregates with aggregate_name. */
        if (!results_row_is_iteration(row)) continue;
        if (json_object_object_get_ex(row, "error_occurred", &v) && json_object_get_boolean(v)) {
            rs->skipped++;
            continue;
        }
        const char *name = results_row_str(row, "name");
        if (!name || !*name) {
            errorf_esc("compare: %s: benchmarks[%zu] has no \"name\"", path, i);
            goto out;
        }
        /* A repetition the interference evidence marked (counter
         * "disturbed", written by mhabench sweep) was retaken in the same
         * file; it is not a sample of the code's speed. A benchmark whose
         * every repetition was disturbed stays known (with no times), so
         * the report says it was not judged instead of calling it missing. */
        if (json_object_object_get_ex(row, "disturbed", &v) &&
            (json_object_is_type(v, json_type_double) || json_object_is_type(v, json_type_int)) &&
            json_object_get_double(v) > 0) {
            char *key = xstrdup(name);
            strip_repeats(key);
            bench_of(rs, key);
            free(key);
            rs->disturbed++;
            continue;
        }
        if (!json_object_object_get_ex(row, "real_time", &v) ||
            !(json_object_is_type(v, json_type_double) || json_object_is_type(v, json_type_int))) {
            errorf_esc("compare: %s: benchmark '%s' has no numeric \"real_time\"", path, name);
            goto out;
        }
        const double t = json_object_get_double(v);
        const char *unit = results_row_str(row, "time_unit");
        const double scale = results_unit_ns(unit);
        if (scale == 0) {
            errorf_esc("compare: %s: benchmark '%s': time_unit '%s' is not one of ns, us, ms, s",
                       path, name, unit);
            goto out;
        }
        if (!isfinite(t) || t <= 0) {
            errorf_esc("compare: %s: benchmark '%s': real_time %g must be a positive number", path,
                       name, t);
            goto out;
        }
        char *key = xstrdup(name);
        strip_repeats(key);
        add_time(rs, key, t * scale);
        bench *added = find_bench(rs, key);
        added->mem |= json_object_object_get_ex(row, "bw_level", NULL);
        if (json_object_object_get_ex(row, "threads", &v)) added->threads = json_object_get_int(v);
        free(key);
        rs->rows++;
    }
    if (rs->nb == 0) {
        errorf_esc("compare: %s: no benchmark results (no \"iteration\" rows in \"benchmarks\")",
                   path);
        goto out;
    }
    rc = 0;
out:
    json_object_put(root);
    return rc;
}

/* Checks the two fingerprints agree: returns 1 if they do, else prints each
 * difference (as a refusal, or as a warning when force is set) and returns 0. */
static int fingerprints_match(const result_set *a, const result_set *b, int force) {
    int ok = 1;
    for (int k = 0; k < FP_COUNT; k++) {
        const char *va = a->fp[k], *vb = b->fp[k];
        if (k >= FP_REQUIRED && (!va || !vb)) continue;
        if (!va || !vb) {
            errorf_esc("compare: %s: the context has no \"%s\", so its machine is unknown (not "
                       "written by `mhabench sweep`?)%s",
                       va ? b->path : a->path, FP_KEYS[k],
                       force ? "; comparing anyway (--force)" : "; pass --force to compare anyway");
            ok = 0;
        } else if (strcmp(va, vb) != 0) {
            errorf_esc(
                "compare: the machine fingerprints differ: %s is '%s' in %s but '%s' in %s%s",
                FP_KEYS[k], va, a->path, vb, b->path,
                force ? "; comparing anyway (--force)" : "; pass --force to compare anyway");
            ok = 0;
        }
    }
    return ok;
}

/* ---- statistics -------------------------------------------------------------------- */

typedef struct {
    double u;  /* Mann-Whitney U of the NEW sample: pairs new > base, ties count 1/2 */
    double p;  /* two-sided p-value */
    int exact; /* 1: exact permutation distribution, 0: normal approximation */
} utest;

typedef struct {
    double v;
    int side; /* 0 base, 1 new */
} tagged;

static int cmp_tagged(const void *a, const void *b) {
    return cmp_double(&((const tagged *)a)->v, &((const tagged *)b)->v);
}

/* Exact two-sided p of the rank sum w2 (doubled midranks, so integers) of n items
 * drawn from the N doubled midranks r2: counts the subsets of size n with each
 * sum (all C(N, n) assignments equally likely under H0), so ties are exact too.
 * p = min(1, 2 * min(P(W <= w), P(W >= w))). */
static double exact_p(const int *r2, int N, int n, int w2) {
    const int S = N * (N + 1); /* sum of all doubled ranks: the largest possible sum */
    const size_t ncnt = (size_t)(n + 1) * (size_t)(S + 1);
    double *cnt = xrealloc_or_exit(NULL, ncnt, sizeof *cnt, "compare");
    memset(cnt, 0, ncnt * sizeof *cnt);
#define CNT(k, s) cnt[(size_t)(k) * (size_t)(S + 1) + (size_t)(s)]
    CNT(0, 0) = 1;
    for (int i = 0; i < N; i++)
        for (int k = (i + 1 < n ? i + 1 : n); k >= 1; k--)
            for (int s = S; s >= r2[i]; s--) CNT(k, s) += CNT(k - 1, s - r2[i]);
    double total = 0, lo = 0, hi = 0;
    for (int s = 0; s <= S; s++) {
        const double c = CNT(n, s);
        total += c;
        if (s <= w2) lo += c;
        if (s >= w2) hi += c;
    }
#undef CNT
    free(cnt);
    const double p = 2 * (lo < hi ? lo : hi) / total;
    return p < 1 ? p : 1;
}

/* Mann-Whitney U test of base (m values) against new (n values), two-sided. */
static utest mann_whitney(const double *base, int m, const double *new, int n) {
    const int N = m + n;
    tagged *all = xrealloc(NULL, (size_t)N * sizeof *all);
    int *r2 = xrealloc(NULL, (size_t)N * sizeof *r2);
    for (int i = 0; i < m; i++) all[i] = (tagged){base[i], 0};
    for (int i = 0; i < n; i++) all[m + i] = (tagged){new[i], 1};
    qsort(all, (size_t)N, sizeof *all, cmp_tagged);
    /* Midranks, doubled: a tie group at 1-based positions first..last gets
     * (first + last) / 2, so 2 * rank = first + last is an integer. */
    double ties = 0; /* sum over tie groups of t^3 - t */
    int w2 = 0;
    for (int i = 0; i < N;) {
        int j = i;
        while (j + 1 < N && all[j + 1].v == all[i].v) j++;
        const double t = j - i + 1;
        ties += t * t * t - t;
        for (int k = i; k <= j; k++) {
            r2[k] = (i + 1) + (j + 1);
            if (all[k].side) w2 += r2[k];
        }
        i = j + 1;
    }
    utest r;
    r.u = w2 / 2.0 - n * (n + 1) / 2.0;
    if (n <= EXACT_MAX && m <= EXACT_MAX) {
        r.exact = 1;
        r.p = exact_p(r2, N, n, w2);
    } else {
        /* Normal approximation: mean nm/2, variance with the tie correction
         * nm/12 * ((N+1) - sum(t^3-t) / (N(N-1))), continuity correction 1/2. */
        r.exact = 0;
        const double mu = n * (double)m / 2;
        const double var = n * (double)m / 12 * ((N + 1) - ties / ((double)N * (N - 1)));
        if (var <= 0) {
            r.p = 1;
        } else {
            double d = fabs(r.u - mu) - 0.5;
            if (d < 0) d = 0;
            r.p = erfc(d / sqrt(var) / sqrt(2.0));
            if (r.p > 1) r.p = 1;
        }
    }
    free(all);
    free(r2);
    return r;
}

/* ---- the comparison ------------------------------------------------------------------ */

typedef enum { V_SAME, V_FASTER, V_SLOWER, V_NOISY } verdict;
static const char *const VERDICT_NAME[] = {"same", "faster", "slower", "noisy"};

typedef struct {
    const char *name;
    int nb, nn;
    double med_b, med_n, change; /* medians in ns, change in percent (after drift removal) */
    double change_raw;           /* before drift removal */
    double threshold;            /* percent: its drift group's, else the run's */
    double shift, ci_lo, ci_hi;  /* Hodges-Lehmann shift and its 95% interval, percent (after
                                    drift removal) */
    utest ut;
    int too_few;
    verdict v;
} row;

typedef struct {
    double threshold, alpha;
    int json;
    int threshold_given; /* 0: derived (stats_derived_threshold), 1: --threshold, 2: the --ab
                            default */
    int normalize;       /* remove the drift common to every benchmark before testing */
    int ab;              /* an A/B run: both sides took turns on the same host */
    double max_drift;    /* percent: a common drift beyond it is a finding (--max-drift) */
} settings;

/* A drift group: thread count, size, memory-bound or not, its drift, and
 * (derived thresholds only) the threshold its rows are judged by: from the
 * group's own residual spread when it has STATS_DRIFT_MIN rows or more. */
typedef struct {
    int threads, n, mem;
    double drift;
    double threshold, sigma; /* percent */
    int own;                 /* threshold from the group's own (wider) spread */
} drift_group;

/* What compare_sets used, for the report: the drift it removed and where the
 * threshold came from. */
typedef struct {
    int n;          /* benchmarks in both files */
    double drift;   /* log(new / base) of the compute-bound rows; 0 when not normalised */
    int normalized; /* the drift was removed */
    double sigma;   /* robust spread of the residual changes, percent */
    double threshold;
    const char *threshold_source; /* "given", "derived", "default" (< STATS_DRIFT_MIN benchmarks) */
    drift_group groups[16];       /* the drift groups (threads x compute/memory) */
    int ngroups;
} gate_info;

#define DEFAULT_THRESHOLD 5.0
/* A drift common to the rows beyond this (percent) is a finding, not noise:
 * the A/A pairs of the ci preset drifted up to +7% as a whole in busy hours
 * (README "Regression testing in CI"), a build that lost -march moves every
 * row 2x. Until a baseline carries its machine's measured drift, this bound. */
#define DEFAULT_MAX_DRIFT 10.0

/* The verdict rule. With at least MIN_REPS on both sides: slower iff p < alpha
 * and the median slowed by more than the threshold (faster symmetrically); a
 * median move beyond the threshold without significance is noisy. With fewer,
 * the U test often cannot reach alpha at all, so complete separation of the two
 * samples (every new repetition slower than every base one) also counts as
 * evidence: the threshold then decides, and an overlapping move is noisy. */
/* The contract: a regression needs a significant U test AND a median past the
 * threshold. With fewer than MIN_REPS repetitions on a side the test cannot
 * mean anything, so such a row is at most 'noisy' (never fails a build). */
static verdict decide(const row *r, const settings *s) {
    const int sig = !r->too_few && r->ut.p < s->alpha;
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

/* ---- the comparison ---------------------------------------------------------------- */

/* Everything a comparison works out: the rows in both files with their
 * tests, the drift and thresholds used, and the counts the verdict reads. */
typedef struct {
    row *rows;
    int nr, count[4], too_few, only_b, only_n, nj;
    double common; /* median log change of the compute-bound rows, before any removal */
    gate_info g;
    settings eff; /* the settings with the threshold actually used */
} comparison;

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
    const int nr = c->nr;
    for (int i = 0; i < nr; i++) gdrift[i] = 0, gidx[i] = -1;
    int nc = group_changes(base, c->rows, lr, nr, -1, 0, tmp);
    g->drift = nc >= STATS_DRIFT_MIN ? stats_common_drift(tmp, nc) : stats_common_drift(lr, nr);
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
    for (int i = 0; i < nr; i++)
        c->rows[i].threshold = gidx[i] >= 0 ? g->groups[gidx[i]].threshold : g->threshold;
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
        r->change_raw = (r->med_n / r->med_b - 1) * 100;
        r->change = (r->med_n * f / r->med_b - 1) * 100;
        r->ut = mann_whitney(b->t, b->n, scaled, n->n);
        r->shift = stats_shift_interval(b->t, b->n, scaled, n->n, 0.95, &r->ci_lo, &r->ci_hi);
        r->too_few = b->n < MIN_REPS || n->n < MIN_REPS;
        r->v = decide(r, &c->eff);
        c->count[r->v]++;
        c->too_few += r->too_few;
    }
    free(scaled);
}

static void compare_rows(const result_set *base, const result_set *new, const settings *s,
                         comparison *c) {
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
    char why[6][320];
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

static void gate_decide(const comparison *c, const result_set *base, const settings *s,
                        gate_result *gr) {
    *gr = (gate_result){.verdict = GATE_NO_REGRESSION};
    for (int i = 0; i < c->nr; i++) {
        const row *r = &c->rows[i];
        gr->judged += !r->too_few;
        gr->unjudged_moved += r->too_few && r->change > r->threshold;
    }
    if (c->count[V_SLOWER])
        gate_reason(gr, GATE_REGRESSION, "%d benchmark%s slower", c->count[V_SLOWER],
                    c->count[V_SLOWER] == 1 ? "" : "s");
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
    if (c->g.normalized)
        for (int k = 0; k < c->g.ngroups; k++) {
            const double d = 100 * (exp(c->g.groups[k].drift) - 1);
            if (fabs(d) > s->max_drift) gr->drift_beyond++;
        }
    if (gr->drift_beyond || (c->g.normalized && fabs(100 * (exp(c->g.drift) - 1)) > s->max_drift))
        gate_reason(gr, GATE_INCONCLUSIVE,
                    "the drift divided out (%+.1f%% overall; %d group%s beyond) exceeds the "
                    "%.0f%% bound (--max-drift): a change that slows every row alike looks "
                    "exactly like a slower host; rerun in a quieter hour, or --no-normalize",
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
                    "repetition on a side disturbed, %d with fewer than %d repetitions on a side); "
                    "\"no regression\" needs %.0f%%",
                    gr->judged, base->nb, c->only_b, c->nj, c->too_few, MIN_REPS,
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
        json_object_object_add(e, "p_method",
                               json_object_new_string(r->ut.exact ? "exact" : "normal"));
        json_object_object_add(e, "too_few_repetitions", json_object_new_boolean(r->too_few));
        json_object_object_add(e, "verdict", json_object_new_string(VERDICT_NAME[r->v]));
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
    for (int v = 0; v < 4; v++)
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
    printf("rule: slower/faster = U test p < %g and median moved more than %g%%; noisy = "
           "moved more\nthan %g%% without significance; p exact for n <= %d, else normal "
           "approximation\n\n",
           s->alpha, s->threshold, s->threshold, EXACT_MAX);
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
        char tb[32], tn[32], note[64] = "";
        fmt_time(tb, sizeof tb, r->med_b);
        fmt_time(tn, sizeof tn, r->med_n);
        if (r->too_few) snprintf(note, sizeof note, "too few repetitions (n<%d)", MIN_REPS);
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
    if (c->too_few) printf(" (%d with too few repetitions)", c->too_few);
    if (c->only_b || c->only_n) printf("; %d only in base, %d only in new", c->only_b, c->only_n);
    if (c->nj)
        printf("; %d not judged (the interference evidence marked every repetition on a side)",
               c->nj);
    printf("\n%d of %d benchmarks of the base judged\n", gr->judged, base->nb);
    printf("verdict: %s\n", gr->verdict == GATE_REGRESSION     ? "REGRESSION"
                            : gr->verdict == GATE_INCONCLUSIVE ? "INCONCLUSIVE (exit 3)"
                                                               : "no regression");
    for (int i = 0; i < gr->nwhy; i++) printf("  because: %s\n", gr->why[i]);
    if (c->count[V_NOISY])
        printf("noisy: the median moved but the test cannot tell it from noise; rerun with "
               "more repetitions or use --ab\n");
}

/* Compares new against base and prints the report. Returns the exit status:
 * 0 no regression, 1 regression, 3 inconclusive. */
static int compare_sets(const result_set *base, const result_set *new, const char *base_label,
                        const char *new_label, int fp_checked, int forced, const settings *s) {
    comparison c;
    gate_result gr;
    compare_rows(base, new, s, &c);
    gate_decide(&c, base, s, &gr);
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

/* ---- baselines ------------------------------------------------------------------------ */

static int cmd_save_baseline(const char *path, const char *dir) {
    result_set rs = {0};
    if (load_results(path, &rs)) return EXIT_USAGE;
    const char *key = rs.fp[0];
    int rc = EXIT_USAGE;
    if (!key) {
        errorf_esc("compare: %s: the context has no \"mha_cpu_key\"; a baseline must come from "
                   "`mhabench sweep`",
                   path);
        goto out;
    }
    if (!file_name_part_ok(key)) {
        errorf_esc("compare: %s: mha_cpu_key '%s' is not usable as a file name", path, key);
        goto out;
    }
    int few = 0;
    for (int i = 0; i < rs.nb; i++) few += rs.b[i].n < MIN_REPS;
    if (few)
        fprintf(stderr,
                "mhabench: compare: note: %d benchmarks in %s have fewer than %d repetitions "
                "(use `sweep --preset ci`)\n",
                few, path, MIN_REPS);
    size_t len = 0;
    char why[1024];
    char *text = results_read_file(path, &len, why, sizeof why);
    if (!text) {
        errorf_esc("compare: cannot read %s: %s", path, why);
        goto out;
    }
    /* Never overwrite: <key>.json if absent, else <key>-<UTC time>.json, else
     * with a -2, -3 ... suffix; each commit is a never-replace link of a
     * complete file, so a name is taken atomically and never half written. */
    char stamp[32], target[4096];
    const time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
    snprintf(target, sizeof target, "%s/%s.json", dir, key);
    mha_out w;
    if (mha_out_begin(&w, target, MHA_OUT_NOREPLACE | MHA_OUT_MKDIRS, why, sizeof why) != MHA_OK ||
        mha_out_write(&w, text, len, why, sizeof why) != MHA_OK) {
        mha_out_abort(&w);
        errorf_esc("compare: --save-baseline: %s", why);
        free(text);
        goto out;
    }
    free(text);
    int saved = 0;
    for (int attempt = 0; attempt < 1000 && !saved; attempt++) {
        if (attempt == 1)
            snprintf(target, sizeof target, "%s/%s-%s.json", dir, key, stamp);
        else if (attempt > 1)
            snprintf(target, sizeof target, "%s/%s-%s-%d.json", dir, key, stamp, attempt);
        if (attempt > 0 && mha_out_retarget(&w, target, why, sizeof why) != MHA_OK) break;
        if (mha_out_commit(&w, why, sizeof why) == MHA_OK)
            saved = 1;
        else if (!w.exists)
            break;
    }
    if (!saved) {
        mha_out_abort(&w);
        errorf_esc("compare: --save-baseline: %s", w.exists ? "no free baseline name" : why);
        goto out;
    }
    printf("saved baseline %s (%d benchmarks, cpu %s)\n", target, rs.nb, key);
    rc = 0;
out:
    result_free(&rs);
    return rc;
}

/* A baseline file name, split for ordering: <key>.json is the first (plain);
 * later ones are <key>-<stamp>.json and <key>-<stamp>-<n>.json (n >= 2,
 * taken when the stamp's name was). */
typedef struct {
    char *file;
    int plain;
    char stamp[64];
    long n;
} baseline_name;

static void baseline_name_parse(baseline_name *b, const char *file, size_t keylen) {
    b->file = xstrdup(file);
    b->plain = strlen(file) == keylen + 5;
    b->stamp[0] = '\0';
    b->n = 1;
    if (b->plain) return;
    /* the part between "<key>-" and ".json" */
    snprintf(b->stamp, sizeof b->stamp, "%.*s", (int)(strlen(file) - keylen - 6),
             file + keylen + 1);
    char *dash = strrchr(b->stamp, '-');
    if (dash && dash[1] && strspn(dash + 1, "0123456789") == strlen(dash + 1)) {
        b->n = strtol(dash + 1, NULL, 10);
        *dash = '\0';
    }
}

/* Newest first: any stamped name before the plain one; then the later stamp;
 * then the higher numeric suffix (none counts as 1). */
static int cmp_baseline_desc(const void *pa, const void *pb) {
    const baseline_name *a = pa, *b = pb;
    if (a->plain != b->plain) return a->plain - b->plain;
    const int c = strcmp(b->stamp, a->stamp);
    if (c) return c;
    return (b->n > a->n) - (b->n < a->n);
}

/* The baselines of one key in dir: <key>.json and <key>-<stamp>[-<n>].json,
 * newest first (see cmp_baseline_desc). Returns the count; -1 if dir cannot
 * be opened (errno set). */
static int list_baselines(const char *dir, const char *key, baseline_name **out) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    baseline_name *names = NULL;
    int nn = 0;
    const size_t kl = strlen(key);
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        const char *f = e->d_name;
        const size_t fl = strlen(f);
        if (fl < kl + 5 || strncmp(f, key, kl) != 0 || strcmp(f + fl - 5, ".json") != 0) continue;
        if (fl != kl + 5 && f[kl] != '-') continue;
        names = xrealloc(names, (size_t)(nn + 1) * sizeof *names);
        baseline_name_parse(&names[nn++], f, kl);
    }
    closedir(d);
    if (nn > 0) qsort(names, (size_t)nn, sizeof *names, cmp_baseline_desc);
    *out = names;
    return nn;
}

/* The newest of names (files of key in dir) whose fingerprint matches nw
 * (with force: the newest readable one of the key). Fills base and
 * *path_out and returns its index, else -1 with the first mismatch in why. */
static int pick_baseline(const char *dir, const char *key, const baseline_name *names, int nn,
                         const result_set *nw, int force, result_set *base, char **path_out,
                         char *why, size_t whylen) {
    for (int i = 0; i < nn; i++) {
        char *path = xrealloc(NULL, strlen(dir) + strlen(names[i].file) + 2);
        sprintf(path, "%s/%s", dir, names[i].file);
        result_set rs = {0};
        if (load_results(path, &rs) == 0 && rs.fp[0] && strcmp(rs.fp[0], key) == 0) {
            int match = 1;
            for (int k = 1; k < FP_COUNT && match; k++) {
                if (k >= FP_REQUIRED && (!rs.fp[k] || !nw->fp[k])) continue;
                if (!rs.fp[k] || !nw->fp[k] || strcmp(rs.fp[k], nw->fp[k]) != 0) {
                    match = 0;
                    if (!why[0])
                        snprintf(why, whylen, " (newest: %s has %s '%s', %s has '%s')", path,
                                 FP_KEYS[k], rs.fp[k] ? rs.fp[k] : "(none)", nw->path,
                                 nw->fp[k] ? nw->fp[k] : "(none)");
                }
            }
            if (match || force) {
                *base = rs; /* base->path is path, now owned through *path_out */
                *path_out = path;
                return i;
            }
        }
        result_free(&rs);
        free(path);
    }
    return -1;
}

/* The keys a baseline of this CPU may be under: its own, then the same
 * CPU's older keys. A key ends in the detected ISA level's name, and a build
 * that learned a higher level (avx512 -> avx512bf16, later amx) renames the
 * key; a baseline under the older name still describes this CPU, and its
 * fingerprint (mha_isa_active) says whether it is comparable. Returns the
 * count (at most MHA_ISA_COUNT), keys[0] being key itself. */
static int baseline_keys(const char *key, char keys[][128]) {
    int n = 0;
    snprintf(keys[n++], sizeof keys[0], "%s", key);
    const char *dash = strrchr(key, '-');
    mha_isa level;
    if (!dash || mha_isa_parse(dash + 1, &level) != MHA_OK) return n;
    for (int l = (int)level - 1; l >= 0 && n < MHA_ISA_COUNT; l--)
        snprintf(keys[n++], sizeof keys[0], "%.*s-%s", (int)(dash - key), key,
                 mha_isa_name((mha_isa)l));
    return n;
}

/* Finds the newest baseline in dir whose fingerprint matches nw, under nw's
 * CPU key or, failing that, one of the same CPU's older keys (baseline_keys).
 * On success fills base (path owned by the caller through *path_out) and
 * returns 0; else prints why and returns EXIT_USAGE. */
static int find_baseline(const char *dir, const result_set *nw, int force, result_set *base,
                         char **path_out) {
    const char *key = nw->fp[0];
    if (!key) {
        errorf_esc("compare: %s: the context has no \"mha_cpu_key\", so no baseline can match it",
                   nw->path);
        return EXIT_USAGE;
    }
    if (!file_name_part_ok(key) || strlen(key) >= 100) {
        errorf_esc("compare: %s: mha_cpu_key '%s' is not usable as a file name", nw->path, key);
        return EXIT_USAGE;
    }
    char keys[MHA_ISA_COUNT][128], why[1024] = "", older[512] = "";
    const int nk = baseline_keys(key, keys);
    int total = 0, found = -1, k = 0;
    for (; k < nk && found < 0; k++) {
        baseline_name *names = NULL;
        const int nn = list_baselines(dir, keys[k], &names);
        if (nn < 0) {
            errorf_esc("compare: no baseline for cpu '%s': cannot open %s: %s (run `mhabench "
                       "compare --save-baseline NEW.json` to add one)",
                       key, dir, strerror(errno));
            return EXIT_USAGE;
        }
        if (nn > 0 && k > 0 && !older[0])
            snprintf(older, sizeof older, "; %d under this CPU's older key '%s'", nn, keys[k]);
        total += nn;
        /* --force takes the newest file of the current key only: an older
         * key's baseline is used when its fingerprint matches */
        found = pick_baseline(dir, keys[k], names, nn, nw, force && k == 0, base, path_out, why,
                              sizeof why);
        for (int i = 0; i < nn; i++) free(names[i].file);
        free(names);
    }
    if (found >= 0) {
        fprintf(stderr, "mhabench: compare: baseline %s", *path_out);
        if (k > 1) { /* migrated: from here on it is this CPU's baseline */
            fprintf(stderr,
                    " (this CPU under its older key '%s': the key names the detected ISA "
                    "level, which this build names '%s')",
                    keys[k - 1], strrchr(key, '-') + 1);
            free(base->fp[0]);
            base->fp[0] = xstrdup(key);
        }
        fputc('\n', stderr);
        return 0;
    }
    if (total == 0)
        errorf_esc("compare: no baseline for cpu '%s' in %s (expected %s/%s.json; run `mhabench "
                   "compare --save-baseline NEW.json` to add one)",
                   key, dir, dir, key);
    else
        errorf_esc("compare: %d baseline files for cpu '%s' in %s%s, none with a matching "
                   "fingerprint%s; pass --force to use the newest of '%s', or add one for this "
                   "build with --save-baseline",
                   total, key, dir, older, why, key);
    return EXIT_USAGE;
}

/* ---- A/B runs ------------------------------------------------------------------------- */

/* A stopping signal during an A/B (proc.h) stops the sweep running, the
 * scratch folder is removed, and the process then dies from the same signal. */

/* Prints the last part of a child's log to stderr. */
static void show_log(const char *log) {
    size_t len = 0;
    char why[512];
    char *text = results_read_file(log, &len, why, sizeof why);
    if (!text) return;
    const size_t keep = 4000;
    fprintf(stderr, "---- its output%s ----\n%s", len > keep ? " (last part)" : "",
            len > keep ? text + len - keep : text);
    if (len && text[len - 1] != '\n') fputc('\n', stderr);
    fputs("----\n", stderr);
    free(text);
}

/* --ab's default budget: rounds (A then B) continue while another round fits,
 * at least AB_MIN_ROUNDS; --rounds R runs exactly R instead. */
#define AB_DEFAULT_BUDGET 120.0
/* --ab's threshold when none is given: fixed, not derived (the A/B's own
 * spread includes the real change). A 5% slowdown measured +4.1..+5.3% in
 * 2-round A/Bs on the Zen 4 VM, so a 5% gate would miss half of them. */
#define AB_DEFAULT_THRESHOLD 3.0
enum { AB_MIN_ROUNDS = 2 };

static int cmd_ab(const char *old_bin, const char *new_bin, int rounds, double budget,
                  char **sweep_args, int nsweep, const settings *s) {
    const char *bins[2] = {old_bin, new_bin};
    for (int i = 0; i < nsweep; i++)
        if (strcmp(sweep_args[i], "--out") == 0 || strncmp(sweep_args[i], "--out=", 6) == 0) {
            errorf_esc("compare: --ab: the sweep arguments may not set --out (compare chooses the "
                       "files)");
            return EXIT_USAGE;
        }
    for (int i = 0; i < 2; i++)
        if (strchr(bins[i], '/') && access(bins[i], X_OK) != 0) {
            errorf_esc("compare: --ab: %s binary '%s' is not executable: %s", i ? "NEW" : "OLD",
                       bins[i], strerror(errno));
            return EXIT_USAGE;
        }
    const char *tmp = getenv("TMPDIR");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/mhabench-ab.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    proc_signals sg;
    proc_signals_block(&sg, "compare: --ab"); /* before the folder exists: no signal may leave it */
    if (!mkdtemp(dir)) {
        errorf_esc("compare: --ab: cannot create a temporary directory %s: %s", dir,
                   strerror(errno));
        proc_signals_restore(&sg);
        return EXIT_USAGE;
    }
    char log[4200];
    snprintf(log, sizeof log, "%s/sweep.log", dir);
    result_set sets[2] = {{0}, {0}};
    int rc = 0, caught = 0;
    char out[4200];
    char *argv[MAX_SWEEP_ARGS + 8];
    const double t0 = now_s();
    int done = 0;
    const int max_rounds = rounds > 0 ? rounds : MAX_ROUNDS;
    if (rounds <= 0)
        fprintf(stderr, "mhabench: compare: --ab: budget %g s (at least %d rounds)\n", budget,
                AB_MIN_ROUNDS);
    for (int r = 0; r < max_rounds && rc == 0; r++) {
        if (rounds <= 0 && r >= AB_MIN_ROUNDS) {
            const double spent = now_s() - t0, per = spent / r;
            if (spent + per > budget) break;
        }
        done = r + 1;
        /* ABBA: odd rounds run B first, so whatever favours the first (or
         * the second) sweep of a round falls on both sides alike. */
        for (int turn = 0; turn < 2 && rc == 0; turn++) {
            const int side = r % 2 ? 1 - turn : turn;
            snprintf(out, sizeof out, "%s/%c%d.json", dir, side ? 'B' : 'A', r);
            int a = 0;
            argv[a++] = (char *)bins[side];
            argv[a++] = "sweep";
            argv[a++] = "--preset";
            argv[a++] = "ci";
            argv[a++] = "--out";
            argv[a++] = out;
            for (int i = 0; i < nsweep; i++) argv[a++] = sweep_args[i];
            argv[a] = NULL;
            if (rounds > 0)
                fprintf(stderr, "mhabench: compare: round %d/%d: %s (%s) sweep --preset ci\n",
                        r + 1, rounds, side ? "B" : "A", bins[side]);
            else
                fprintf(stderr,
                        "mhabench: compare: round %d (%.0f s of %g): %s (%s) sweep --preset ci\n",
                        r + 1, now_s() - t0, budget, side ? "B" : "A", bins[side]);
            unlink(log);
            const int st = proc_run(argv, NULL, log, NULL, &sg, &caught);
            if (st == PROC_STOPPED) {
                rc = -1;
            } else if (st != 0) {
                if (st > 0)
                    errorf_esc("compare: --ab: `%s sweep --preset ci` exited with status %d",
                               bins[side], st);
                show_log(log);
                rc = EXIT_USAGE;
            } else if (access(out, R_OK) != 0) {
                errorf_esc("compare: --ab: `%s sweep` wrote no %s", bins[side], out);
                show_log(log);
                rc = EXIT_USAGE;
            } else if (load_results(out, &sets[side]) != 0) {
                show_log(log);
                rc = EXIT_USAGE;
            }
            unlink(out);
        }
    }
    proc_remove_tree(dir, "compare");
    if (!caught) caught = proc_signal_pending(&sg);
    if (caught) {
        result_free(&sets[0]);
        result_free(&sets[1]);
        return proc_die_from(caught, &sg);
    }
    proc_signals_restore(&sg);
    if (rc == 0) {
        char la[4200], lb[4200];
        snprintf(la, sizeof la, "A=%s (%d rounds pooled, %.0f s)", old_bin, done, now_s() - t0);
        snprintf(lb, sizeof lb, "B=%s (%d rounds pooled)", new_bin, done);
        rc = compare_sets(&sets[0], &sets[1], la, lb, 0, 0, s);
    }
    result_free(&sets[0]);
    result_free(&sets[1]);
    return rc;
}

/* ---- the command ---------------------------------------------------------------------- */

int cmd_compare(int argc, char **argv) {
    enum {
        O_THRESHOLD = 1000,
        O_ALPHA,
        O_JSON,
        O_FORCE,
        O_BASELINE,
        O_SAVE,
        O_DIR,
        O_AB,
        O_ROUNDS,
        O_BUDGET,
        O_NO_NORMALIZE,
        O_MAX_DRIFT
    };
    static const struct option opts[] = {{"threshold", required_argument, 0, O_THRESHOLD},
                                         {"alpha", required_argument, 0, O_ALPHA},
                                         {"json", no_argument, 0, O_JSON},
                                         {"force", no_argument, 0, O_FORCE},
                                         {"baseline", no_argument, 0, O_BASELINE},
                                         {"save-baseline", no_argument, 0, O_SAVE},
                                         {"baseline-dir", required_argument, 0, O_DIR},
                                         {"ab", no_argument, 0, O_AB},
                                         {"rounds", required_argument, 0, O_ROUNDS},
                                         {"budget", required_argument, 0, O_BUDGET},
                                         {"no-normalize", no_argument, 0, O_NO_NORMALIZE},
                                         {"max-drift", required_argument, 0, O_MAX_DRIFT},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    settings s = {DEFAULT_THRESHOLD, 0.01, 0, 0, 1, 0, DEFAULT_MAX_DRIFT};
    int force = 0, mode_baseline = 0, mode_save = 0, mode_ab = 0, no_normalize = 0;
    int64_t rounds = 0;
    double budget = AB_DEFAULT_BUDGET;
    const char *dir = DEFAULT_BASELINE_DIR;

    /* Everything after a bare "--" goes to the sweeps of --ab untouched. */
    int nargs = argc, nsweep = 0;
    char **sweep_args = NULL;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--") == 0) {
            nargs = i;
            sweep_args = argv + i + 1;
            nsweep = argc - i - 1;
            break;
        }
    optind = 1;
    for (int c; (c = getopt_long(nargs, argv, "h", opts, NULL)) != -1;) {
        switch (c) {
        case O_THRESHOLD:
            if (!parse_double("compare: --threshold", optarg, 0, 1000, 0, &s.threshold))
                return EXIT_USAGE;
            s.threshold_given = 1;
            break;
        case O_BUDGET:
            if (!parse_double("compare: --budget", optarg, 1, 86400, 1, &budget)) return EXIT_USAGE;
            break;
        case O_NO_NORMALIZE:
            no_normalize = 1;
            break;
        case O_MAX_DRIFT:
            if (!parse_double("compare: --max-drift", optarg, 0, 1000, 1, &s.max_drift))
                return EXIT_USAGE;
            break;
        case O_ALPHA:
            if (!parse_double("compare: --alpha", optarg, 0, 1, 1, &s.alpha)) return EXIT_USAGE;
            break;
        case O_JSON:
            s.json = 1;
            break;
        case O_FORCE:
            force = 1;
            break;
        case O_BASELINE:
            mode_baseline = 1;
            break;
        case O_SAVE:
            mode_save = 1;
            break;
        case O_DIR:
            dir = optarg;
            break;
        case O_AB:
            mode_ab = 1;
            break;
        case O_ROUNDS:
            if (!parse_i64("--rounds", optarg, 1, MAX_ROUNDS, &rounds)) return EXIT_USAGE;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return EXIT_USAGE;
        }
    }
    char **pos = argv + optind;
    const int npos = nargs - optind;
    if (mode_baseline + mode_save + mode_ab > 1) {
        errorf_esc("compare: --baseline, --save-baseline and --ab exclude each other");
        return EXIT_USAGE;
    }
    if (sweep_args && !mode_ab) {
        errorf_esc("compare: arguments after '--' are sweep arguments, only for --ab");
        return EXIT_USAGE;
    }
    if (nsweep > MAX_SWEEP_ARGS) {
        errorf_esc("compare: --ab: more than %d sweep arguments", MAX_SWEEP_ARGS);
        return EXIT_USAGE;
    }
    const int want = mode_ab ? 2 : (mode_baseline || mode_save) ? 1 : 2;
    if (npos != want) {
        errorf_esc("compare: expected %s, got %d argument%s",
                   mode_ab                      ? "OLD_BINARY NEW_BINARY"
                   : mode_baseline || mode_save ? "one result file NEW.json"
                                                : "two result files BASE.json NEW.json",
                   npos, npos == 1 ? "" : "s");
        usage(stderr);
        return EXIT_USAGE;
    }
    if (mode_save) return cmd_save_baseline(pos[0], dir);
    /* Interleaved A/B rounds share the host's drift already; removing a
     * common change there would hide a build that slows everything. */
    s.normalize = !no_normalize && !mode_ab;
    s.ab = mode_ab;
    if (mode_ab && !s.threshold_given) {
        s.threshold = AB_DEFAULT_THRESHOLD;
        s.threshold_given = 2; /* the --ab default, reported as such */
    }
    if (mode_ab) return cmd_ab(pos[0], pos[1], (int)rounds, budget, sweep_args, nsweep, &s);

    result_set base = {0}, nw = {0};
    char *base_path = NULL;
    int rc = EXIT_USAGE;
    if (mode_baseline) {
        if (load_results(pos[0], &nw)) goto out;
        if (find_baseline(dir, &nw, force, &base, &base_path)) goto out;
    } else {
        if (load_results(pos[0], &base) || load_results(pos[1], &nw)) goto out;
    }
    const int fp_ok = fingerprints_match(&base, &nw, force);
    if (!fp_ok && !force) goto out;
    rc = compare_sets(&base, &nw, base.path, nw.path, 1, !fp_ok, &s);
out:
    result_free(&base);
    result_free(&nw);
    free(base_path);
    return rc;
}

/* ---- entry for the fuzz target (tests/fuzz/fuzz_results.c) ---------------------- */

#include "cmd_compare.h"

int compare_load_for_fuzz(const char *path) {
    result_set rs = {0};
    const int rc = load_results(path, &rs);
    result_free(&rs);
    return rc;
}
