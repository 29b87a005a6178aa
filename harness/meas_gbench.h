/* meas_gbench.h - a C API over Google Benchmark 1.7.1 (harness/meas_gbench.cc, the
 * project's only C++ file), in the manner of IREE's benchmark.h: an opaque
 * state, a definition struct with a run callback, counters, custom context,
 * and one run entry that passes Google Benchmark's own flags through. */
#ifndef MHA_HARNESS_GBENCH_H
#define MHA_HARNESS_GBENCH_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A running benchmark (wraps benchmark::State). */
typedef struct mha_gbench_state mha_gbench_state;

/* The timed loop: `while (mha_gbench_keep_running(s)) work();` Setup before
 * the first call and teardown after the last one are not timed. */
int mha_gbench_keep_running(mha_gbench_state *s);
int64_t mha_gbench_iterations(const mha_gbench_state *s);
/* The time of the iteration just run, in seconds (manual-time benchmarks:
 * Google Benchmark's SetIterationTime). */
void mha_gbench_set_iteration_time(mha_gbench_state *s, double seconds);
/* Marks the run failed (Google Benchmark's SkipWithError); call it before the
 * loop, then return without entering it. */
void mha_gbench_skip_with_error(mha_gbench_state *s, const char *message);

/* Counter kinds (Google Benchmark's benchmark::Counter flags). */
typedef enum {
    MHA_GBENCH_PLAIN = 0,     /* reported as is */
    MHA_GBENCH_RATE = 1,      /* total / seconds */
    MHA_GBENCH_PER_ITER_RATE, /* value per iteration x iterations / seconds */
    MHA_GBENCH_PER_ITER_AVG,  /* total / iterations */
} mha_gbench_counter_kind;

void mha_gbench_counter(mha_gbench_state *s, const char *name, double value,
                        mha_gbench_counter_kind kind);
/* Google Benchmark's bytes_per_second: total bytes over all iterations. */
void mha_gbench_set_bytes_processed(mha_gbench_state *s, int64_t bytes);
/* The row's "label" in the JSON (e.g. what an `auto` benchmark ran). */
void mha_gbench_set_label(mha_gbench_state *s, const char *label);

typedef void (*mha_gbench_fn)(mha_gbench_state *s, void *user);

enum { MHA_GBENCH_MAX_ARGS = 16 };

/* One benchmark. The reported name is `name/arg0:v0/arg1:v1/...`, exactly:
 * the suffixes Google Benchmark would append for MinTime, Repetitions and
 * UseRealTime (`/min_time:..`, `/repeats:..`, `/real_time`) are stripped from
 * the reports (display and file), so names are stable across settings. */
typedef struct {
    const char *name;
    int nargs;
    const char *arg_names[MHA_GBENCH_MAX_ARGS];
    int64_t args[MHA_GBENCH_MAX_ARGS];
    mha_gbench_fn run;
    void *user;
    int real_time; /* 1: wall time (use it whenever OpenMP runs inside) */
    /* 1: the body reports each iteration's time (mha_gbench_set_iteration_time):
     * a peer timed by its own clock in another process (harness/peers). */
    int manual_time;
    double min_time;    /* seconds; 0 = --benchmark_min_time */
    int repetitions;    /* 0 = --benchmark_repetitions */
    int64_t iterations; /* 0 = automatic */
    /* > 0: this registration is one repetition of `name` that is registered
     * this many times (interleaved runs). Reports then number the rows of the
     * same name 0..n-1 in repetition_index, set repetitions to n and give them
     * one family_index, as if Google Benchmark had repeated it n times. */
    int report_as_repetitions;
} mha_gbench_def;

/* Registers a benchmark (copies everything). Returns 0, or -1 on bad input. */
int mha_gbench_register(const mha_gbench_def *def);
/* Adds a key/value to the JSON "context" (benchmark::AddCustomContext). */
void mha_gbench_add_context(const char *key, const char *value);

/* One reported row, as the display reporter sees it. Times in seconds per
 * iteration; counters after Google Benchmark's rate/average finishing. */
typedef struct {
    const char *name; /* without aggregate suffix */
    int aggregate;    /* 0: an iteration row; 1: mean/median/stddev/cv */
    const char *aggregate_name;
    int error;
    const char *error_message;
    int64_t iterations;
    int64_t repetition_index, repetitions;
    double real_time, cpu_time;
    int ncounters;
    const char *const *counter_names;
    const double *counter_values;
    /* The row as Google Benchmark's JSON reporter writes it (one object, its
     * fields and formatting), non-finite numbers as null: what a result file
     * stores (harness/fmt_rows.c writes it once, with the sweep's fields). */
    const char *json;
} mha_gbench_result;

/* The value of a counter in r, or fallback when absent. */
double mha_gbench_result_counter(const mha_gbench_result *r, const char *name, double fallback);

typedef void (*mha_gbench_report_fn)(const mha_gbench_result *r, void *user);

/* Runs every registered benchmark that Google Benchmark's flags select.
 * argv holds only Google Benchmark flags (argv[0] is a program name);
 * unrecognised ones are an error. json_out: when not NULL, Google Benchmark's
 * JSON file reporter writes there (as --benchmark_out; a --benchmark_out in
 * argv is overridden). report: called for every row (may be NULL; then
 * Google Benchmark's console reporter prints, or the --benchmark_format one).
 * Returns 0; MHA_GBENCH_NO_MATCH when no benchmark ran (the filter matched
 * none); 2 on a bad flag or when Google Benchmark threw (message printed: no
 * C++ exception ever reaches the caller). */
enum { MHA_GBENCH_NO_MATCH = 3 };
int mha_gbench_run(int argc, char **argv, const char *json_out, mha_gbench_report_fn report,
                   void *user);

/* The JSON a result file would hold if no benchmark ran: the context
 * (Google Benchmark's keys and the custom ones added so far) and an empty
 * "benchmarks" list, non-finite numbers as null; malloc'd (free it), or
 * NULL after a message. */
char *mha_gbench_context_json(void);

/* Drops every registration (for a second run in one process). Custom context
 * stays: Google Benchmark 1.7.1 has no way to remove it, and adding a key
 * twice keeps the first value (with a warning). */
void mha_gbench_clear(void);

#ifdef __cplusplus
}
#endif
#endif
