/* compare.h - the parts of `mhabench compare` (harness/compare/): the result
 * sets it reads (results.c), the comparison and its gate (gate.c), the
 * per-CPU baselines (baselines.c), the A/B runner (ab.c) and the command
 * (cmd.c). Internal to the command; the fuzz target reaches the reader
 * through cmd_compare.h. */
#ifndef MHA_HARNESS_COMPARE_COMPARE_H
#define MHA_HARNESS_COMPARE_COMPARE_H

#include <json-c/json.h>

#include "stats.h"
#include "util.h"

/* Below this many repetitions on either side the U test cannot mean much (at
 * alpha 0.01 it cannot reject at all with 4 + 4 or fewer), and the report says so. */
enum { MIN_REPS = 9 };
enum { MAX_ROUNDS = 100, MAX_SWEEP_ARGS = 64 };

#define DEFAULT_BASELINE_DIR "results/baselines"

/* The machine fingerprint: the CPU (FP_CPU_KEY) must agree for two result
 * files to be comparable; the run's setup on it (the ISA level it ran, the
 * cores it was given, its widest thread count) is judged by the gate when
 * it differs: less of the machine in the new file is a regression. The
 * last key is optional (used when both have it). */
extern const char *const FP_KEYS[];
enum { FP_CPU_KEY = 0, FP_ISA = 1, FP_CORES = 2, FP_THREADS = 3, FP_COUNT = 4, FP_REQUIRED = 3 };

#define xrealloc(p, n) xrealloc_or_exit((p), (n), 1, "compare")
#define xstrdup(s) xstrdup_or_exit((s), "compare")

/* ---- result files (results.c) ---- */

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
    int files;     /* files loaded into the set */
    int steady;    /* of them, runs under a steady background (context mha_background) */
} result_set;

void result_free(result_set *rs);
bench *find_bench(const result_set *rs, const char *name);
/* Loads a Google Benchmark result file into rs (appending when rs already
 * holds one: --ab pools rounds). 0, or EXIT_USAGE after a message. */
int load_results(const char *path, result_set *rs);
/* Appends src (a loaded set) to dst, as loading src's file into dst would. */
void result_merge(result_set *dst, const result_set *src);
/* 1 if the fingerprints agree (the CPU key; every key with setup_too), else
 * prints each difference (a refusal, or a warning with force) and returns 0.
 * A required key missing on a side never matches: that machine is unknown. */
int fingerprints_match(const result_set *a, const result_set *b, int force, int setup_too);

/* ---- the comparison and its gate (gate.c) ---- */

/* blind: "same" on a benchmark whose calibrated minimum detectable effect
 * is over BLIND_FACTOR x its threshold (calibrate.c): a slowdown the gate is
 * meant to catch would not have shown. small: a row under a threshold the
 * gate derived from the noise (never a given one, never --ab's) of a kernel
 * whose rows slowed together: their mean change, weighted by each row's
 * inverse variance, over SMALL_FLOOR_PCT and over SMALL_Z standard errors. One row's move under
 * 4 spreads is noise; a kernel's rows all moving one way is what a change to
 * that kernel looks like (a build slowed 5% read "same" against a 10%
 * threshold), so the gate says inconclusive. */
typedef enum { V_SAME, V_FASTER, V_SLOWER, V_NOISY, V_BLIND, V_SMALL, V_COUNT } verdict;
/* blind when the detectable effect is over this many thresholds */
#define BLIND_FACTOR 2.0
/* percent: a kernel's weighted mean slowdown below this is "same" (the
 * smallest threshold the gate ever derives); and the standard errors it needs */
#define SMALL_FLOOR_PCT 2.0
#define SMALL_Z 3.0
/* percent: the least spread a row is weighted by (a group of 1-thread rows
 * that happened to agree within 0.3% must not make a 2% move decisive) */
#define SMALL_SIGMA_MIN 1.0
extern const char *const VERDICT_NAME[];

typedef struct {
    const char *name;
    int nb, nn;
    double med_b, med_n, change;  /* medians in ns, change in percent (after drift removal) */
    double change_raw;            /* before drift removal */
    double threshold;             /* percent: its drift group's, else the run's */
    double sigma;                 /* percent: the robust spread its threshold came from */
    double kernel_mean, kernel_z; /* small rows: their kernel's mean change and its z */
    double shift, ci_lo, ci_hi;   /* Hodges-Lehmann shift and its 95% interval, percent (after
                                     drift removal) */
    stats_utest ut;
    double alpha; /* the level its p is held to: Holm's step over the compared rows (0: alpha) */
    int too_few;
    verdict v;
    double mde, fp_rate; /* from the machine's calibration; NaN when none */
    /* --ab: the rounds with the row on both sides, how many of them moved
     * past half the threshold the pooled verdict's way, and the range of
     * their changes (percent, each round's medians, drift divided out) */
    int rounds, rounds_agree;
    double round_lo, round_hi;
    int rounds_split; /* slower or faster by the pooled test, not in every round: noisy */
} row;

/* A machine's measured gate noise (calibrate.c): per benchmark the share of
 * A/A pairs the gate called slower and the smallest slowdown it detected in
 * every pair (NaN: none up to 100%), and the largest common drift. */
typedef struct {
    char *name;
    int pairs, false_positives;
    double mde_pct;
} noise_row;
typedef struct {
    char *path;
    char *fp[FP_COUNT];
    int pairs;
    double drift_max_pct, threshold_pct;
    noise_row *rows;
    int n;
} noise_table;

typedef struct {
    double threshold, alpha;
    int json;
    int threshold_given; /* 0: derived (stats_derived_threshold), 1: --threshold, 2: the --ab
                            default */
    int normalize;       /* remove the drift common to every benchmark before testing */
    int ab;              /* an A/B run: both sides took turns on the same host */
    double max_drift;         /* percent: a common drift beyond it is a finding (--max-drift) */
    const noise_table *noise; /* the machine's calibration, or NULL */
    /* --ab: each side's rounds apart (rounds[0] base, rounds[1] new; nrounds
     * each), for the per-round check of a row the pooled test calls (gate.c) */
    const result_set *rounds[2];
    int nrounds;
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

/* Everything a comparison works out: the rows in both files with their
 * tests, the drift and thresholds used, and the counts the verdict reads. */
typedef struct {
    row *rows;
    int nr, count[V_COUNT], too_few, only_b, only_n, nj;
    double common; /* median log change of the compute-bound rows, before any removal */
    gate_info g;
    settings eff; /* the settings with the threshold actually used */
} comparison;

/* The rows of new against base, tested (no report); free c->rows. */
void compare_rows(const result_set *base, const result_set *new, const settings *s, comparison *c);
/* The row's verdict from its change, test and threshold (the one rule). */
verdict row_verdict(const row *r, const settings *s);

/* Compares new against base and prints the report. Returns the exit status:
 * 0 no regression, 1 regression, 3 inconclusive. */
int compare_sets(const result_set *base, const result_set *new, const char *base_label,
                 const char *new_label, int fp_checked, int forced, const settings *s);

/* ---- baselines (baselines.c) ---- */

/* A baseline file name, split for ordering: <key>.json is the first (plain);
 * later ones are <key>-<stamp>.json and <key>-<stamp>-<n>.json (n >= 2,
 * taken when the stamp's name was). */
typedef struct {
    char *file;
    int plain;
    char stamp[64];
    long n;
} baseline_name;

/* The files of one key in dir: <key>.json and <key>-<stamp>[-<n>].json,
 * newest first (free each .file, then the array). The count; -1 if dir
 * cannot be opened (errno set). Baselines use it, and so do calibrations
 * (key "<cpu-key>.noise"). */
int list_baselines(const char *dir, const char *key, baseline_name **out);
int cmd_save_baseline(const char *path, const char *dir);
/* The newest baseline in dir for nw's CPU (or its older keys) whose
 * fingerprint matches; 0, or EXIT_USAGE after a message. */
int find_baseline(const char *dir, const result_set *nw, int force, result_set *base,
                  char **path_out);

/* ---- calibration (calibrate.c) ---- */

/* `compare --calibrate A1 B1 [A2 B2 ...]` (or --run N pairs first). */
int cmd_calibrate(char **files, int nfiles, int run_pairs, char **sweep_args, int nsweep,
                  const char *dir, const char *out, const settings *s);
/* The newest <key>.noise*.json in dir matching nw's fingerprint, into nt:
 * 0 found, 1 none (nothing printed), EXIT_USAGE a malformed one. */
int noise_find(const char *dir, const result_set *nw, noise_table *nt);
int noise_load(const char *path, noise_table *nt);
void noise_free(noise_table *nt);
const noise_row *noise_row_of(const noise_table *nt, const char *name);

/* The never-overwriting save of baselines and noise files: text to
 * dir/<key><suffix>.json, else dir/<key><suffix>-<UTC time>[-n].json. The
 * name taken in target; 0, or EXIT_USAGE after a message. */
int save_noreplace(const char *dir, const char *key, const char *suffix, const char *text,
                   size_t len, char *target, size_t target_len);

/* ---- A/B runs (ab.c) ---- */

/* --ab's default budget: rounds (A then B) continue while another round fits,
 * at least AB_MIN_ROUNDS; --rounds R runs exactly R instead. */
#define AB_DEFAULT_BUDGET 120.0
/* --ab's threshold when none is given: fixed, not derived (the A/B's own
 * spread includes the real change). A 5% slowdown measured +4.1..+5.3% in
 * 2-round A/Bs on the Zen 4 VM, so a 5% gate would miss half of them. */
#define AB_DEFAULT_THRESHOLD 3.0
enum { AB_MIN_ROUNDS = 2 };
int cmd_ab(const char *old_bin, const char *new_bin, int rounds, double budget, char **sweep_args,
           int nsweep, const settings *s);

#endif
