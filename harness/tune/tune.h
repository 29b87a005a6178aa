/* tune.h - the parts of `mhabench tune` and `mhabench recommend`
 * (harness/tune/): the load check (load.c), one class's data and the
 * measurement of a candidate (measure.c), the knob search and the choice of a
 * winner (search.c), what a run covers and its budget (plan.c), the classes in
 * turn (run.c), the table and the log (table.c), the command (cmd.c), and
 * `recommend` (recommend.c). Internal to the two commands.
 *
 * tune: per shape class (variants/classes.c), a bounded coordinate-descent
 * search of each tunable kernel's knobs from the cache-model prior; every
 * candidate is checked once against the float64 oracle, then timed (median of
 * repetitions). Every measurement goes to a JSON Lines log; the winners
 * become the per-CPU table mha_select reads. */
#ifndef MHA_HARNESS_TUNE_TUNE_H
#define MHA_HARNESS_TUNE_TUNE_H

#include <json-c/json.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>

#include "check.h"
#include "meas_core.h"
#include "mach_info.h"
#include "mha_private.h"
#include "shard.h"

#define DEFAULT_BUDGET_S 120.0
#define MIN_REPS 5
#define MAX_REPS 15
/* Sampling stops once the median's 95% interval is this narrow (relative
 * half-width), or the class's time cap or MAX_REPS is reached; disturbed
 * samples (meas_core's evidence) are retaken, at most this many per
 * measurement. */
#define TARGET_HALFWIDTH MEAS_POLICY.target_halfwidth
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
static inline void fmt(char *buf, size_t len, const char *f, ...)
    __attribute__((format(printf, 3, 4)));
static inline void fmt(char *buf, size_t len, const char *f, ...) {
    va_list ap;
    va_start(ap, f);
    vsnprintf(buf, len, f, ap);
    va_end(ap);
}

/* The load check (other processes' share of the machine over a window) is
 * the measurement core's: each timing loop's share comes back in its
 * meas_tally (other_share) with the rest of the evidence; a class's whole
 * window (search and final round) is read with meas_load_mark /
 * meas_load_share (meas_core.h). */

/* ---- one class's data: timing inputs and the verification case --------------------- */
typedef struct {
    mha_problem p;  /* timed */
    mha_problem vp; /* verified */
    meas_pool pool; /* the timed problem's inputs and every workspace */
    check_data vd;
    int have_vd;
} class_data;

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

typedef struct {
    const mha_kernel *k;
    int tunable;
    int in_class;      /* timed on the class being tuned (kernel_in_class) */
    point prior, best; /* best.status 1 when anything was measured */
} kernel_result;

static inline int same_knobs(const point *a, const point *b) {
    return a->bq == b->bq && a->bk == b->bk && a->split == b->split;
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

/* ---- one class's data and measuring a candidate (measure.c) ---- */

void class_data_free(class_data *cd);
/* Prepares cd for class c, reusing what it holds when the problem is the same.
 * Returns 1, or 0 when the data could not be allocated. */
int class_data_prepare(class_data *cd, const mha_shape_class *c, uint64_t seed);
/* The ratio of a call of k to its class's cost estimate (0: none yet). */
double ratio_of(const tune_ctx *tx, const mha_kernel *k);
/* Verifies (unless verified) and times one candidate into pt. */
void measure(tune_ctx *tx, class_data *cd, const mha_kernel *k, point *pt, int verified,
             double time_cap, const char *phase);
/* Times n candidates round-robin into pts (median and interval); returns the
 * other processes' share meanwhile (-1 unknown), or -1 without a workspace. */
double interleave(tune_ctx *tx, class_data *cd, const mha_kernel **ks, point **pts, int n,
                  double time_cap, const char *phase);

/* ---- the search and the winner (search.c) ---- */

void search_class(tune_run *r, const mha_shape_class *cl, double search_end);
double final_round(tune_run *r, const mha_kernel *dkern, double class_end);
void keep_moves_that_held(tune_run *r);
void rank_kernels(const tune_run *r, int *wi, int *ri);
void keep_default_kernel(const tune_run *r, const mha_kernel *dkern, int *wi, int *ri);
point default_point(tune_run *r, const mha_kernel *dkern);
int winner_ties(const tune_run *r, int wi, int ri);

/* ---- what the run covers (plan.c) ---- */

int split_searched(const mha_kernel *k, const mha_shape_class *c);
int kernel_in_class(const tune_run *r, const mha_kernel *k, const mha_shape_class *cl,
                    const mha_problem *p);
double class_cost(const mha_shape_class *c, int tall);
/* What class c costs whatever its share (its first measurements). */
double class_floor(const tune_run *r, const mha_shape_class *c);
tune_status plan_run(tune_run *r);

/* ---- the classes in turn (run.c) ---- */

tune_status tune_classes(tune_run *r);

/* ---- the table and the log (table.c) ---- */

json_object *choice_json(const mha_kernel *k, const point *pt);
tune_status open_outputs(tune_run *r);
json_object *class_entry(const tune_run *r, const mha_shape_class *cl, double class_other, int wi,
                         int ri, const mha_kernel *dkern, const point *dp);
tune_status write_outputs(tune_run *r);

#endif
