/* sweep.h - the parts of `mhabench sweep` (harness/sweep/): what they share.
 * presets.c  the presets as data (and the help and errors made from them)
 * args.c     the command line: options, the grid's axes
 * plan.c     the benchmark list: shapes, dtypes, rows, estimates, skips, shards
 * variants.c the attention-variant axes: their shapes, names and row fields
 * run.c      the measurement: the benchmark body, registration, passes and
 *            retakes, the peaks trusted over the run, the result file
 * background.c a steady background (another process on every core all run)
 *            told from bursts: repetitions judged against the run's own level
 * cmd.c      the command in steps: the machine, peers, the run, the report
 * progress.c what it says while it runs; report.c the summary and verdict,
 *            read back from the file. */
#ifndef MHA_HARNESS_SWEEP_H
#define MHA_HARNESS_SWEEP_H

#include <getopt.h>
#include <math.h>
#include <omp.h>
#include <regex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "commands.h"
#include "fmt_results.h"
#include "fmt_rows.h"
#include "meas_core.h"
#include "meas_gbench.h"
#include "peers/peer_check.h"
#include "peers/peer_reply.h"
#include "shard.h"
#include "stats.h"
#include "sweep/progress.h"
#include "sweep/report.h"
#include "opts.h"
#include "util.h"

enum { MAX_LIST = 64, MAX_KERNELS = 64, MAX_REPS = 1000 };
/* --peers at most (peers.c lists five) */
enum { MAX_PEERS = MHA_PEERS_MAX }; /* peer.h: peers.c checks the list against it */
#define RUNS_DIR "results/runs"

/* Every allocation in the sweep: exit 2 on an exhausted heap (util.h). */
#define sweep_realloc(p, n, size) xrealloc_or_exit((p), (n), (size), "sweep")

/* Follow-up passes (run_pass): at most this many passes in all, and the
 * relative half-width of the median interval a multi-repetition benchmark
 * is sampled down to. */
enum { SWEEP_MAX_PASSES = 4 };
#define SWEEP_TARGET_HALFWIDTH MEAS_POLICY.target_halfwidth

/* ---- the grid ----------------------------------------------------------- */

typedef meas_shape shape; /* meas_core.h: attention core or the full layer */

typedef struct {
    const char *name;
    const char *help; /* `sweep --help`'s lines for it (presets_help) */
    int64_t seq[16], heads[16], dims[16], batch[16], causal[2];
    int nseq, nheads, ndims, nbatch, ncausal;
    int threads_full_range; /* 1..all instead of 1,all */
    shape extra[16];        /* decode and layer shapes (or the whole list: ci, roofline) */
    int nextra;
    int extra_only; /* ci: only the listed shapes */
    double min_time;
    int repetitions;
    /* > 0: the baseline-ISA kernels (naive, *.scalar: never the fastest,
     * shown for "vs naive") get only this many repetitions */
    int baseline_reps;
    int passes;         /* --passes when not given (0: SWEEP_MAX_PASSES) */
    int interleaved;    /* repetitions run one at a time in a seeded random order */
    int by_shape;       /* ... shuffled within each shape only (no input refills) */
    int ci_kernels;     /* ci: SIMD flash/tiled/decode only, each on its own shapes, no auto */
    unsigned dtypes;    /* --dtype when not given (MHA_DTYPE_BIT mask; 0: fp32) */
    double max_seconds; /* --max-seconds when not given (0: SWEEP_MAX_SECONDS) */
} preset;

/* --max-seconds when neither it nor the preset says */
#define SWEEP_MAX_SECONDS 2.0

/* One benchmark: a kernel on a shape at a thread count. For the `auto`
 * pseudo-kernel, k and opts are mha_select's choice for this shape; for a
 * peer (harness/peers), k is NULL and peer says which. */
typedef struct {
    const mha_kernel *k;
    const peer_ops *peer;
    char kname[48]; /* what the row names: the kernel, "auto" or "peer.<name>" */
    int is_auto;
    mha_options opts;
    char label[160];
    shape s;
    int threads;
    char name[256];
    double flops, kv_bytes;
    double cost;         /* estimated seconds per repetition (progress and the estimate) */
    double peak;         /* GFLOP/s: single-thread peak of the kernel's ISA x threads */
    double bw;           /* GB/s read bandwidth of its level at this thread count */
    machine_level level; /* where its K/V working set fits (decode rows) */
    int warmed;
    int group; /* index of its (shape, threads) group */
    /* Set on an explicit row that is also what `auto` runs here (the same
     * kernel, knobs, shape and threads): auto is not measured a second time
     * but points at this row; auto_label says what mha_select chose. */
    int auto_same;
    char auto_label[160];
    /* results (iteration rows) */
    double *gflops;
    unsigned char *dist; /* per result: the evidence said disturbed (a burst, under a
                          * steady background: background.c) */
    float *prate;        /* per result: preemptions per second and thread */
    float *stolen;       /* per result: stolen time, ms */
    int nres, cap;
    int errors;
    int reps;    /* repetitions planned (the preset's, or its baseline_reps) */
    int extra;   /* repetitions registered in follow-up passes */
    int retaken; /* disturbed repetitions retaken so far */
    /* a peer's check against the oracle before it was timed */
    double max_err, check_worst;
} bench;

typedef struct {
    char *text;
} note;

/* ---- reporting ------------------------------------------------------------ */

typedef struct {
    bench *benches;
    int nbench;
    int done, total; /* this pass's rows */
    int interleaved;
    int runs; /* every pass's rows */
    int ngroups;
    progress prog;   /* sweep/progress.c: lines, bar, the time left */
    rows_file rows;  /* the result file's rows, written once at the end (fmt_rows.c) */
    int pass;        /* the pass running: 0 the first */
    int row_error;   /* a row the writer refused (its message printed) */
    meas_load load0; /* the machine's load at the run's start (mha_load) */
    /* a steady background (background.c), decided after the first pass */
    int steady;
    double other_share;   /* other processes' share over the first pass, -1 unknown */
    double abs_disturbed; /* share of its repetitions the absolute rule marked */
    int nmed;
    int med_threads[16];
    double med_rate[16]; /* the first pass's median preemption rate per thread count */
} run_state;

typedef struct {
    note *items;
    int n, cap;
} note_list;

/* What the benchmark list is made from. */
typedef struct {
    const preset *pr;
    const mha_kernel *const *kernels; /* NULL: auto */
    const double *rate;               /* per kernel, GFLOP/s at 1 thread */
    int nk;
    const int64_t *threads;
    int nthreads;
    int kernels_given; /* --kernels: ci's pairing of algorithms and shapes is off */
    const results_machine *rm;
    double max_seconds, min_time;
    const peer_ops *const *peers; /* --peers that run here */
    int npeers;
    int verbose; /* --verbose: each skip said as it is planned */
} bench_plan;

/* ---- cmd_sweep, in steps ------------------------------------------------------------
 * Each step returns 0, or -1 after printing a message (a usage or input
 * error); only cmd_sweep turns that into an exit code. */

/* The command line as given. */
typedef struct {
    const char *preset_name, *kernel_list, *out_path;
    const char *peer_names[MAX_PEERS]; /* --peers, each once (peer_names()' strings) */
    int npeer_names;
    const char *seq, *seq_q, *seq_kv, *heads, *kv, *dims, *batch, *causal, *threads;
    const char *window, *softcap, *sinks, *dims_v; /* the variant axes (sweep/variants.c) */
    const char *page_size;                         /* --page-size: the paged layout's axis */
    const char *ragged;                            /* --ragged: ragged lengths' axis */
    /* MHA_DTYPE_BIT masks: dtypes 0 the preset's, kv_dtypes 0 each row's dtype */
    unsigned dtypes, kv_dtypes;
    double max_seconds, min_time; /* < 0: the preset's */
    int64_t reps;                 /* 0: the preset's */
    int bind;
    uint64_t seed;
    char **pass; /* after "--": Google Benchmark's */
    int npass;
    const char *filter;     /* read from pass */
    shard_spec shard;       /* --shard I/N; count 0 when not given */
    int passes;             /* --passes: 1 + follow-up passes at most */
    progress_mode progress; /* --quiet, --verbose */
} sweep_args;

/* The grid's axes: the preset's, replaced by any given on the command line. */
typedef struct {
    int64_t seq[MAX_LIST], seq_q[MAX_LIST], seq_kv[MAX_LIST], heads[MAX_LIST], kvh[MAX_LIST],
        dims[MAX_LIST], batch[MAX_LIST], causal[MAX_LIST], threads[MAX_LIST];
    int nseq, nsq, nskv, nheads, nkv, ndims, nbatch, ncausal, nthreads;
    int shape_axes_given;
    /* The variant axes: each the grid's shapes once per value (default one
     * value, none); the preset's listed shapes keep their own variants. */
    window_spec windows[MAX_LIST];
    double softcaps[MAX_LIST];
    int64_t sinks[MAX_LIST], dims_v[MAX_LIST], pages[MAX_LIST], rags[MAX_LIST];
    int nwindows, nsoftcaps, nsinks, ndims_v, npages, nrags;
    int variant_axes_given;
} sweep_axes;

/* ---- shared state (run.c) ------------------------------------------------------------ */

/* Inputs and workspace: the measurement core's pool. */
extern meas_pool sweep_pool;
/* The machine's figures and the benchmarks, for the peak retakes. */
extern results_machine *sweep_rm;
extern bench *sweep_benches;
extern int sweep_nbench;

/* ---- functions, by file ------------------------------------------------------------- */

/* presets.c: the row called name, or NULL; the names joined ("a|b|c" with
 * sep "|" and last NULL, "a, b or c" with ", " and " or "); the help lines. */
const preset *preset_find(const char *name);
void presets_join(char *buf, size_t len, const char *sep, const char *last);
void presets_help(FILE *f);
/* The names, one per line (sweep --list-presets: what scripts check against). */
void presets_print(FILE *f);
/* The unknown --preset message, with a "did you mean" (util.h: say_unknown). */
void presets_say_unknown(const char *name);
/* The peers' names joined likewise (peers.c's list). */
void peers_join(char *buf, size_t len, const char *sep, const char *last);
void sweep_usage(FILE *f);
double bench_peak(const results_machine *rm, const bench *b);
void refresh_peaks(void);
int check_roof(bench *b, int64_t iters, double wall);
void bench_body(mha_gbench_state *st, void *user);
double probe_rate(const mha_kernel *k);
void shape_text(const shape *s, char *buf, size_t len);
void group_line(const run_state *rs, const bench *of);
void on_report(const mha_gbench_result *r, void *user);
int bench_clean(const bench *b);
int bench_samples(const bench *b, double *out);
double bench_stats(const bench *b, double *lo, double *hi);
int dedupe(int64_t *v, int n);
void note_add(note_list *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void note_free(note_list *l);
void ctx_emit(const char *key, const char *value, void *user);
int count_filtered(const bench *benches, int n, const char *filter, unsigned char *match);
const char *dtype_part(const mha_problem *p, char *buf, size_t len);
shape *expand_dtypes(shape *shapes, int *count, unsigned dt_mask, unsigned kv_mask);
int fold_auto(bench *benches, int nbench, note_list *aliases);
void bench_roofline(const bench_plan *pl, bench *b);
int plan_peer(const bench_plan *pl, const peer_ops *peer, const shape *s, int threads, int group,
              bench *b, note_list *skipped, int *layer_noted);
bench *plan_benches(const bench_plan *pl, const shape *shapes, int nshapes, note_list *skipped,
                    note_list *aliases, int *nbench_out, int *ngroups_out);
double nominal_seconds(const bench *b, double min_time);
int take_shard(bench *benches, int nbench, const shard_spec *sh, double min_time);
void shuffle_order(int *order, int n, uint64_t seed);
int register_one(bench *b, int report_as);
int register_benches(bench *benches, int nbench, int interleaved, int by_shape, uint64_t seed);
int report_sweep(bench *benches, int nbench, const note_list *skipped, int done, double t0,
                 const char *path, report_mode mode, int verbose);
int parse_peers(const char *list, sweep_args *a);
int parse_sweep_args(int argc, char **argv, sweep_args *a);
int build_axes(const sweep_args *a, const preset *pr, int all, sweep_axes *x);
int choose_peers(const sweep_args *a, const peer_ops **out, note_list *skipped);
int check_peers(bench *benches, int nbench, note_list *skipped);
int choose_kernels(const sweep_args *a, const preset *pr, const mha_kernel **kernels);
const char *measure_machine(const sweep_args *a, const preset *pr, const sweep_axes *x, int all,
                            const mha_kernel *const *kernels, int nk, results_machine *rm,
                            double *rate);
shape *build_shapes(const sweep_args *a, const preset *pr, const sweep_axes *x, note_list *notes,
                    int *count);
int wanted(bench *b, int repetitions);
int run_pass(const sweep_args *a, bench *benches, int nbench, double min_time, int p,
             run_state *rs);
int run_and_commit(const sweep_args *a, bench *benches, int nbench, int ngroups, int interleaved,
                   int repetitions, double min_time, int nskipped, mha_out *out, time_t started,
                   run_state *rs, double *t0);
int write_empty_shard(const sweep_args *a, mha_out *out, time_t started);
/* variants.c: the variant axes of a (0, or -1 after a message naming the
 * value); the grid shape base once per combination of them; a row's name
 * part and result-file fields (NULL: a row without variants). */
int build_variant_axes(const sweep_args *a, sweep_axes *x);
int add_grid_shape(shape **shapes, int n, int *cap, const shape *base, const sweep_axes *x);
const char *variant_part(const shape *s, const mha_problem *p, char *buf, size_t len);
const mha_problem *variant_fields(const shape *s, mha_problem *p);
int cmd_sweep(int argc, char **argv);

/* background.c: after the first pass, whether the run is under a steady
 * background (meas_background_steady) and, if so, every repetition so far
 * judged again against the run's own level; a repetition's judgement (the
 * absolute rule's verdict, or a burst under a steady background); and, at
 * the end, the rows' disturbed fields made the same (the absolute rule's
 * verdict kept as disturbed_abs) and the context's mha_background. */
void background_decide(run_state *rs, bench *benches, int nbench);
/* A repetition's preemptions per second and thread (0 without a window). */
double background_rate(double preempted, double window_s, int threads);
int background_judge(const run_state *rs, int threads, double prate, double stolen,
                     int disturbed_abs);
void background_rows(run_state *rs);

#endif
