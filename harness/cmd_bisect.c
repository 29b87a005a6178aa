/* cmd_bisect.c - `mhabench bisect GOOD BAD`: the commit that made benchmarks
 * slower. GOOD and BAD are built from a git tree, an A/B (`compare --ab`)
 * finds the rows BAD slowed and by how much; each step then builds the
 * middle revision and decides only on positive evidence at alpha (0.001 per
 * step, as Chromium's Pinpoint): the middle is bad when it is slower than
 * GOOD on those rows, good when BAD is slower than it. A revision that does
 * not build is skipped (as `git bisect skip`); a step whose tests reach no
 * decision within --max-rounds ends the search "inconclusive between X and
 * Y" (exit 3), never with a guess. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>

#include "commands.h"
#include "fmt_results.h"
#include "proc.h"
#include "stats.h"
#include "opts.h"
#include "util.h"

#define DEFAULT_BUILD                                                                              \
    "meson setup build --buildtype=release >/dev/null && meson compile -C build mhabench"
#define DEFAULT_BINARY "build/mhabench"
enum { MAX_REVS = 4096, MAX_TRACK = 64, MAX_ARGS = 64, PATH_CAP = 2048 };
#define xrealloc(p, n) xrealloc_or_exit((p), (n), 1, "bisect")
#define xstrdup(s) xstrdup_or_exit((s), "bisect")

typedef struct {
    const char *repo, *build, *binary;
    double alpha;
    int rounds, max_rounds, keep;
    char **sweep;
    int nsweep;
    char self[PATH_CAP];    /* this mhabench: it runs the comparisons */
    char scratch[PATH_CAP]; /* builds and reports */
    proc_signals sg;
    int caught; /* a stopping signal arrived */
} bisect_ctx;

typedef struct {
    char sha[41];
    int built; /* 0 not tried, 1 built, -1 does not build */
    char bin[2 * PATH_CAP + 64];
} rev;

/* The rows tracked: the benchmarks BAD made slower, their effect. */
typedef struct {
    char *name[MAX_TRACK];
    int n;
    double threshold; /* half the smallest effect: a middle at either end's speed is clear of it */
} tracked;

/* Runs argv (in cwd when not NULL), stdout into out, stderr into err (NULL:
 * out); the exit status, -1 when it did not run to one. A stopping signal
 * sets c->caught. */
static int run2(bisect_ctx *c, char *const *argv, const char *cwd, const char *out,
                const char *err) {
    if (c->caught) return -1;
    const int st = proc_run(argv, cwd, out, err, &c->sg, &c->caught);
    return st == PROC_STOPPED ? -1 : st;
}
static int run(bisect_ctx *c, char *const *argv, const char *cwd, const char *log) {
    return run2(c, argv, cwd, log, NULL);
}

/* The first line of what argv prints (git's answers), into out. */
static int run_line(bisect_ctx *c, char *const *argv, char *out, size_t len) {
    char log[PATH_CAP + 16];
    snprintf(log, sizeof log, "%s/git.out", c->scratch);
    unlink(log);
    const int st = run(c, argv, NULL, log);
    char why[256];
    size_t n = 0;
    char *text = st == 0 ? results_read_file(log, &n, why, sizeof why) : NULL;
    unlink(log);
    if (!text) return -1;
    const size_t line = strcspn(text, "\n");
    snprintf(out, len, "%.*s", (int)line, text);
    free(text);
    return 0;
}

static int resolve(bisect_ctx *c, const char *name, char sha[41]) {
    char spec[512];
    snprintf(spec, sizeof spec, "%s^{commit}", name);
    char *argv[] = {"git", "-C", (char *)c->repo, "rev-parse", "--verify", "--quiet", spec, NULL};
    char out[128];
    if (run_line(c, argv, out, sizeof out) != 0 || strlen(out) != 40) {
        errorf_esc("bisect: '%s' is not a commit of the git tree %s", name, c->repo);
        return -1;
    }
    memcpy(sha, out, 41);
    return 0;
}

/* GOOD's first-parent descendants up to BAD, oldest first, after revs[0] = GOOD. */
static int list_revs(bisect_ctx *c, const char *good, const char *bad, rev *revs) {
    char range[100], log[PATH_CAP + 16];
    snprintf(range, sizeof range, "%s..%s", good, bad);
    snprintf(log, sizeof log, "%s/revs.txt", c->scratch);
    char *argv[] = {"git", "-C", (char *)c->repo, "rev-list", "--first-parent", "--reverse",
                    range, NULL};
    if (run(c, argv, NULL, log) != 0) {
        errorf_esc("bisect: git rev-list %s failed (see %s)", range, log);
        return -1;
    }
    char why[256];
    size_t len = 0;
    char *text = results_read_file(log, &len, why, sizeof why);
    if (!text) return -1;
    int n = 1;
    memcpy(revs[0].sha, good, 41);
    for (char *p = text, *nl; *p && n < MAX_REVS; p = nl + 1) {
        nl = strchr(p, '\n');
        if (!nl) nl = p + strlen(p);
        if (nl - p == 40) {
            memcpy(revs[n].sha, p, 40);
            revs[n++].sha[40] = '\0';
        }
        if (!*nl) break;
    }
    free(text);
    if (n < 2 || strcmp(revs[n - 1].sha, bad) != 0) {
        errorf_esc("bisect: %s is not an ancestor of %s on its first-parent line", good, bad);
        return -1;
    }
    return n;
}

/* Builds revs[i] in scratch/<i>: git archive, tar, the build command in
 * that folder. 0 when the binary is there; -1 (skipped) otherwise. */
static int build_rev(bisect_ctx *c, rev *r, int i) {
    if (r->built) return r->built > 0 ? 0 : -1;
    char dir[PATH_CAP + 64], tar[PATH_CAP + 96], log[PATH_CAP + 96];
    snprintf(dir, sizeof dir, "%s/rev%d-%.10s", c->scratch, i, r->sha);
    snprintf(tar, sizeof tar, "%s.tar", dir);
    snprintf(log, sizeof log, "%s.log", dir);
    r->built = -1;
    if (mkdir(dir, 0700) != 0) {
        errorf_esc("bisect: cannot create %s: %s", dir, strerror(errno));
        return -1;
    }
    char *archive[] = {"git", "-C", (char *)c->repo, "archive", "--format=tar",
                       "-o",  tar,  r->sha,          NULL};
    char *untar[] = {"tar", "-xf", tar, "-C", dir, NULL};
    char *sh[] = {"sh", "-c", (char *)c->build, NULL};
    const double t0 = now_s();
    fprintf(stderr, "mhabench: bisect: building %.10s (%s)\n", r->sha, c->build);
    if (run(c, archive, NULL, log) != 0 || run(c, untar, NULL, log) != 0) {
        errorf_esc("bisect: cannot check out %.10s (see %s)", r->sha, log);
        return -1;
    }
    unlink(tar);
    const int st = run(c, sh, dir, log);
    snprintf(r->bin, sizeof r->bin, "%s/%s", dir, c->binary);
    if (st != 0 || access(r->bin, X_OK) != 0) {
        fprintf(stderr, "mhabench: bisect: %.10s does not build (exit %d, %s%s; log %s): skipped\n",
                r->sha, st, c->binary, access(r->bin, X_OK) ? " missing" : " there", log);
        return -1;
    }
    fprintf(stderr, "mhabench: bisect: built %.10s in %.0f s\n", r->sha, now_s() - t0);
    r->built = 1;
    return 0;
}

/* One interleaved A/B of two builds: `SELF compare --ab A B --json`, the
 * report parsed. Returns the report (caller frees) or NULL. */
static json_object *ab(bisect_ctx *c, const rev *a, const rev *b, int rounds, double threshold) {
    char out[PATH_CAP + 128], r_s[32], a_s[32], t_s[32];
    snprintf(out, sizeof out, "%s/ab-%.10s-%.10s-%d.json", c->scratch, a->sha, b->sha, rounds);
    snprintf(r_s, sizeof r_s, "%d", rounds);
    snprintf(a_s, sizeof a_s, "%g", c->alpha);
    snprintf(t_s, sizeof t_s, "%g", threshold);
    char *argv[MAX_ARGS + 16];
    int n = 0;
    argv[n++] = c->self;
    argv[n++] = "compare";
    argv[n++] = "--ab";
    argv[n++] = (char *)a->bin;
    argv[n++] = (char *)b->bin;
    argv[n++] = "--rounds";
    argv[n++] = r_s;
    argv[n++] = "--alpha";
    argv[n++] = a_s;
    argv[n++] = "--json";
    if (threshold > 0) {
        argv[n++] = "--threshold";
        argv[n++] = t_s;
    }
    if (c->nsweep) argv[n++] = "--";
    for (int i = 0; i < c->nsweep; i++) argv[n++] = c->sweep[i];
    argv[n] = NULL;
    fprintf(stderr, "mhabench: bisect: A/B %.10s vs %.10s, %d round%s\n", a->sha, b->sha, rounds,
            rounds == 1 ? "" : "s");
    char err[PATH_CAP + 160];
    snprintf(err, sizeof err, "%s.log", out);
    const int st = run2(c, argv, NULL, out, err);
    if (st < 0 || st == EXIT_USAGE) {
        if (!c->caught)
            errorf_esc("bisect: the A/B of %.10s and %.10s failed (exit %d; log %s)", a->sha,
                       b->sha, st, err);
        return NULL;
    }
    json_object *o = json_object_from_file(out);
    if (!o) errorf_esc("bisect: the A/B's report %s does not parse", out);
    return o;
}

static json_object *jget(json_object *o, const char *k) {
    json_object *v = NULL;
    return o && json_object_object_get_ex(o, k, &v) ? v : NULL;
}

/* The report's row for name, or NULL. */
static json_object *row_of(json_object *rep, const char *name) {
    json_object *arr = jget(rep, "benchmarks");
    for (size_t i = 0; arr && i < json_object_array_length(arr); i++) {
        json_object *e = json_object_array_get_idx(arr, i);
        const char *nm = json_object_get_string(jget(e, "name"));
        if (nm && strcmp(nm, name) == 0) return e;
    }
    return NULL;
}

/* How many tracked rows the report calls slower. */
static int slower_count(json_object *rep, const tracked *t) {
    int n = 0;
    for (int i = 0; i < t->n; i++) {
        const char *v = json_object_get_string(jget(row_of(rep, t->name[i]), "verdict"));
        n += v && strcmp(v, "slower") == 0;
    }
    return n;
}

static void print_effect(json_object *rep, const tracked *t) {
    for (int i = 0; i < t->n; i++) {
        json_object *e = row_of(rep, t->name[i]), *ci = jget(e, "change_ci95_pct");
        if (!e) continue;
        printf("  %s: %+.1f%% (Hodges-Lehmann shift; 95%% interval %+.1f%% .. %+.1f%%, p %.2g)\n",
               t->name[i], json_object_get_double(jget(e, "shift_pct")),
               ci ? json_object_get_double(json_object_array_get_idx(ci, 0)) : NAN,
               ci ? json_object_get_double(json_object_array_get_idx(ci, 1)) : NAN,
               json_object_get_double(jget(e, "p_value")));
    }
}

/* The rows BAD made slower than GOOD (at alpha), and their threshold. */
static int find_effect(bisect_ctx *c, const rev *good, const rev *bad, tracked *t) {
    json_object *rep = NULL;
    for (int rounds = c->rounds; rounds <= c->max_rounds; rounds *= 2) {
        json_object_put(rep);
        if (!(rep = ab(c, good, bad, rounds, 0))) return -1;
        {
            json_object *arr = jget(rep, "benchmarks");
            double smallest = INFINITY;
            t->n = 0;
            for (size_t i = 0; arr && i < json_object_array_length(arr) && t->n < MAX_TRACK; i++) {
                json_object *e = json_object_array_get_idx(arr, i);
                if (strcmp(json_object_get_string(jget(e, "verdict")), "slower") != 0) continue;
                t->name[t->n++] = xstrdup(json_object_get_string(jget(e, "name")));
                const double ch = json_object_get_double(jget(e, "change_pct"));
                if (ch < smallest) smallest = ch;
            }
            if (t->n > 0) {
                t->threshold = smallest / 2;
                printf("bisect: %.10s is slower than %.10s on %d benchmark%s (%d round%s):\n",
                       bad->sha, good->sha, t->n, t->n == 1 ? "" : "s", rounds,
                       rounds == 1 ? "" : "s");
                print_effect(rep, t);
                json_object_put(rep);
                return 0;
            }
        }
        if (rounds * 2 > c->max_rounds) break;
    }
    /* Nothing slower: what the last A/B measured, so "not slower" has its
     * figures (an interval around 0, or a move the test could not tell). */
    json_object *arr = rep ? jget(rep, "benchmarks") : NULL;
    if (arr && json_object_array_length(arr)) {
        tracked all = {.n = 0};
        for (size_t i = 0; i < json_object_array_length(arr) && all.n < MAX_TRACK; i++)
            all.name[all.n++] =
                xstrdup(json_object_get_string(jget(json_object_array_get_idx(arr, i), "name")));
        printf("bisect: %.10s against %.10s, the last A/B:\n", bad->sha, good->sha);
        print_effect(rep, &all);
        for (int i = 0; i < all.n; i++) free(all.name[i]);
    }
    json_object_put(rep);
    return 1;
}

/* One step's verdict on revs[mid]: 1 bad, 0 good, -1 inconclusive (no
 * decision within max_rounds, or the slowdown split around it), -2 failed. */
static int judge(bisect_ctx *c, const rev *good, const rev *mid, const rev *bad, const tracked *t) {
    for (int rounds = c->rounds; rounds <= c->max_rounds; rounds *= 2) {
        json_object *r1 = ab(c, good, mid, rounds, t->threshold);
        json_object *r2 = r1 ? ab(c, mid, bad, rounds, t->threshold) : NULL;
        if (!r2) {
            json_object_put(r1);
            return -2;
        }
        const int mid_slow = slower_count(r1, t), bad_slow = slower_count(r2, t);
        json_object_put(r1);
        json_object_put(r2);
        fprintf(stderr,
                "mhabench: bisect: %.10s: %d of %d rows slower than GOOD, BAD slower than it on "
                "%d\n",
                mid->sha, mid_slow, t->n, bad_slow);
        if (mid_slow && !bad_slow) return 1;
        if (bad_slow && !mid_slow) return 0;
        if (mid_slow && bad_slow) {
            printf("bisect: %.10s is slower than GOOD and faster than BAD: the slowdown is split "
                   "across commits on both sides of it\n",
                   mid->sha);
            return -1;
        }
        if (rounds * 2 > c->max_rounds) break;
    }
    return -1;
}

/* The unbuilt-or-built candidate in (lo, hi) nearest the middle that builds;
 * -1 when every one is skipped. */
static int pick_mid(bisect_ctx *c, rev *revs, int lo, int hi) {
    const int m = lo + (hi - lo) / 2;
    for (int d = 0; d < hi - lo; d++)
        for (int s = 0; s < 2; s++) {
            const int i = s ? m - d : m + d;
            if ((s && d == 0) || i <= lo || i >= hi) continue;
            if (build_rev(c, &revs[i], i) == 0) return i;
            if (c->caught) return -1;
        }
    return -1;
}

enum { O_REPO = 1000, O_BUILD, O_BINARY, O_ROUNDS, O_MAX_ROUNDS, O_ALPHA, O_KEEP };
static const opt_row ROWS[] = {
    {"repo", required_argument, O_REPO, 0, "DIR", 0, "the git tree (default .)"},
    {"build", required_argument, O_BUILD, 0, "CMD", 0,
     "run by sh in each checkout (default: " DEFAULT_BUILD ")"},
    {"binary", required_argument, O_BINARY, 0, "PATH", 0,
     "the mhabench it builds, relative to the checkout (default " DEFAULT_BINARY ")"},
    {"rounds", required_argument, O_ROUNDS, 0, "R", 0, "A/B rounds of a first test (default 2)"},
    {"max-rounds", required_argument, O_MAX_ROUNDS, 0, "R", 0,
     "rounds are doubled up to R while a test decides nothing (default 8)"},
    {"alpha", required_argument, O_ALPHA, 0, "A", 0, "significance per test (default 0.001)"},
    {"keep", no_argument, O_KEEP, 0, NULL, 0, "keep the scratch folder (builds, logs, reports)"},
    OPTS_HELP,
};
enum { NROWS = sizeof ROWS / sizeof ROWS[0] };

static void usage(FILE *f) {
    opts_usage(f, "bisect", "GOOD BAD", ROWS, NROWS, "[-- sweep args]");
    fputs("Finds the first commit between GOOD and BAD (git revisions of the tree DIR, on\n"
          "BAD's first-parent line) that made benchmarks slower. Each revision is checked\n"
          "out (git archive) into a scratch folder and built with CMD; an interleaved A/B\n"
          "(`mhabench compare --ab`, ci preset sweeps restricted by the sweep args) first\n"
          "finds the rows BAD slowed; each step then calls the middle revision bad when it\n"
          "is slower than GOOD on them, good when BAD is slower than it, both at alpha,\n"
          "doubling the rounds up to --max-rounds before it gives up. A revision that does\n"
          "not build is skipped.\n"
          "Exit 0 the first bad commit found, 3 inconclusive (no slowdown between GOOD and\n"
          "BAD, or a step without a decision: the range is printed), 2 usage or a build of\n"
          "GOOD or BAD failing.\n",
          f);
    opts_print(f, ROWS, NROWS);
}

static int parse_args(int argc, char **argv, bisect_ctx *c, char **good, char **bad) {
    const int nargs = split_at_dashes(argc, argv, &c->sweep, &c->nsweep);
    if (c->nsweep > MAX_ARGS) {
        errorf("bisect: more than %d sweep arguments", MAX_ARGS);
        return EXIT_USAGE;
    }
    int64_t v;
    opts_parser op;
    opts_init(&op, "bisect", ROWS, NROWS);
    for (int o; (o = opts_next(&op, nargs, argv)) != -1;) {
        switch (o) {
        case O_REPO:
            c->repo = optarg;
            break;
        case O_BUILD:
            c->build = optarg;
            break;
        case O_BINARY:
            c->binary = optarg;
            break;
        case O_ROUNDS:
            if (!parse_i64("bisect: --rounds", optarg, 1, 100, &v)) return EXIT_USAGE;
            c->rounds = (int)v;
            break;
        case O_MAX_ROUNDS:
            if (!parse_i64("bisect: --max-rounds", optarg, 1, 100, &v)) return EXIT_USAGE;
            c->max_rounds = (int)v;
            break;
        case O_ALPHA:
            if (!parse_double("bisect: --alpha", optarg, 0, 0.5, 1, &c->alpha)) return EXIT_USAGE;
            break;
        case O_KEEP:
            c->keep = 1;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return EXIT_USAGE;
        }
    }
    if (strlen(c->binary) >= PATH_CAP) {
        errorf("bisect: --binary is longer than %d characters", PATH_CAP - 1);
        return EXIT_USAGE;
    }
    if (nargs - optind != 2) {
        errorf("bisect: expected GOOD BAD, got %d argument%s", nargs - optind,
               nargs - optind == 1 ? "" : "s");
        usage(stderr);
        return EXIT_USAGE;
    }
    if (c->max_rounds < c->rounds) {
        errorf("bisect: --max-rounds %d is below --rounds %d", c->max_rounds, c->rounds);
        return EXIT_USAGE;
    }
    *good = argv[optind];
    *bad = argv[optind + 1];
    return -1;
}

/* The search itself, once the scratch folder exists. */
static int bisect(bisect_ctx *c, const char *good_name, const char *bad_name) {
    char good[41], bad[41];
    if (resolve(c, good_name, good) || resolve(c, bad_name, bad)) return EXIT_USAGE;
    rev *revs = xrealloc(NULL, MAX_REVS * sizeof *revs);
    memset(revs, 0, MAX_REVS * sizeof *revs);
    tracked t = {0};
    int rc = EXIT_USAGE;
    const int n = list_revs(c, good, bad, revs);
    if (n < 0) goto out;
    printf("bisect: %d commit%s after %.10s up to %.10s\n", n - 1, n == 2 ? "" : "s", good, bad);
    if (build_rev(c, &revs[0], 0) || build_rev(c, &revs[n - 1], n - 1)) {
        if (!c->caught) errorf("bisect: GOOD and BAD must both build");
        goto out;
    }
    const int fe = find_effect(c, &revs[0], &revs[n - 1], &t);
    if (fe < 0) goto out;
    if (fe > 0) {
        printf("bisect: INCONCLUSIVE: %.10s is not slower than %.10s on any benchmark at alpha %g "
               "within %d rounds: nothing to bisect\n",
               bad, good, c->alpha, c->max_rounds);
        rc = EXIT_INCONCLUSIVE;
        goto out;
    }
    int lo = 0, hi = n - 1, steps = 0;
    while (hi - lo > 1) {
        const int mid = pick_mid(c, revs, lo, hi);
        if (c->caught) goto out;
        if (mid < 0) break; /* only skipped commits left */
        steps++;
        const int v = judge(c, &revs[0], &revs[mid], &revs[n - 1], &t);
        if (v == -2) goto out;
        if (v < 0) {
            printf("bisect: INCONCLUSIVE between %.10s (good) and %.10s (bad): no decision on "
                   "%.10s within %d rounds at alpha %g\n",
                   revs[lo].sha, revs[hi].sha, revs[mid].sha, c->max_rounds, c->alpha);
            rc = EXIT_INCONCLUSIVE;
            goto out;
        }
        printf("bisect: step %d: %.10s is %s\n", steps, revs[mid].sha, v ? "bad" : "good");
        if (v)
            hi = mid;
        else
            lo = mid;
    }
    if (hi - lo > 1) {
        printf("bisect: INCONCLUSIVE between %.10s (good) and %.10s (bad): the %d commit%s "
               "between do%s not build\n",
               revs[lo].sha, revs[hi].sha, hi - lo - 1, hi - lo - 1 == 1 ? "" : "s",
               hi - lo - 1 == 1 ? "es" : "");
        rc = EXIT_INCONCLUSIVE;
        goto out;
    }
    /* The effect of the first bad commit against its parent, with intervals. */
    json_object *rep = ab(c, &revs[lo], &revs[hi], c->rounds, t.threshold);
    printf("bisect: first bad commit: %s (after %d step%s)\n", revs[hi].sha, steps,
           steps == 1 ? "" : "s");
    if (rep) {
        printf("its effect against its parent %.10s:\n", revs[lo].sha);
        print_effect(rep, &t);
        json_object_put(rep);
    }
    rc = 0;
out:
    for (int i = 0; i < t.n; i++) free(t.name[i]);
    free(revs);
    return rc;
}

int cmd_bisect(int argc, char **argv) {
    bisect_ctx c = {.repo = ".",
                    .build = DEFAULT_BUILD,
                    .binary = DEFAULT_BINARY,
                    .alpha = 0.001,
                    .rounds = 2,
                    .max_rounds = 8};
    char *good = NULL, *bad = NULL;
    const int pa = parse_args(argc, argv, &c, &good, &bad);
    if (pa >= 0) return pa;
    const ssize_t sl = readlink("/proc/self/exe", c.self, sizeof c.self - 1);
    if (sl <= 0) {
        errorf("bisect: cannot find this program (/proc/self/exe): %s", strerror(errno));
        return EXIT_USAGE;
    }
    c.self[sl] = '\0';
    const char *tmp = getenv("TMPDIR");
    if (tmp && strlen(tmp) > PATH_CAP - 64) tmp = NULL;
    snprintf(c.scratch, sizeof c.scratch, "%s/mhabench-bisect.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(c.scratch)) {
        errorf_esc("bisect: cannot create a scratch folder %s: %s", c.scratch, strerror(errno));
        return EXIT_USAGE;
    }
    const double t0 = now_s();
    proc_signals_catch(&c.sg, "bisect");
    int rc = bisect(&c, good, bad);
    printf("bisect: %.0f s\n", now_s() - t0);
    fflush(stdout);
    if (c.keep)
        fprintf(stderr, "mhabench: bisect: kept %s\n", c.scratch);
    else
        proc_remove_tree(c.scratch, "bisect");
    if (!c.caught) c.caught = proc_signal_pending(&c.sg);
    if (c.caught) return proc_die_from(c.caught, &c.sg);
    proc_signals_restore(&c.sg);
    return rc;
}
