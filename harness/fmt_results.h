/* fmt_results.h - what every result file carries and how it is written: the
 * machine fingerprint (the measured machine of mach_measure.h) as the mha_*
 * context keys, the git revision, run-file names that never collide, and
 * valid JSON numbers. Shared by sweep, tune and compare; includes
 * mach_measure.h, so its callers see the machine measurement too. */
#ifndef MHA_HARNESS_RESULTS_H
#define MHA_HARNESS_RESULTS_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "mach_measure.h"
#include "mha.h"
#include "mha_private.h"

/* Run facts that are not the machine's. */
typedef struct {
    const char *preset;           /* "quick", "full", "ci", or a command name */
    const char *binding;          /* "cores" or "none" */
    const char *repetition_order; /* "interleaved" or "grouped" */
    int threads_max;
    uint64_t seed;
} results_run_info;

/* NULL-terminated list of the mha_* context keys every result file carries. */
extern const char *const results_context_keys[];

typedef void (*results_kv_fn)(const char *key, const char *value, void *user);
/* Emits every key of results_context_keys (plus mha_seed, mha_isa_env and
 * mha_blas_env) with its value as a string. */
void results_context(const results_machine *rm, const results_run_info *ri, results_kv_fn emit,
                     void *user);

/* The revision of the source tree when this binary was built (`git describe
 * --always --dirty`: the short hash, "-dirty" appended when tracked files
 * differed; "unknown" outside a git checkout), from mha_build_rev.h. */
void results_git_revision(char *out, size_t len);

/* The name of a run file: attempt 0 is dir/<host>-<UTC YYYYmmddTHHMMSSZ>.json
 * for the time t, attempt n >= 1 the same with -<n+1> before .json (-2, -3,
 * ...). dir defaults to "results/runs". Returns 1, or 0 when out is too small. */
int results_run_path(const char *dir, time_t t, int attempt, char *out, size_t len);
/* Commits w (begun with MHA_OUT_NOREPLACE on results_run_path(dir, t, 0)) under
 * the first of those names that is free: a run file never replaces another,
 * and two runs started in the same second both keep theirs. On MHA_OK
 * w->target is the name written. */
mha_status results_commit_run(mha_out *w, const char *dir, time_t t, char *why, size_t len);

/* Google Benchmark writes non-finite doubles as bare NaN / Infinity, which is
 * not JSON: rewrites the output file of w (from its start) with null there.
 * Returns MHA_OK, or MHA_EIO / MHA_ENOMEM with a reason. */
mha_status results_json_fix_nonfinite(mha_out *w, char *why, size_t len);
/* The whole unnamed file of w (read back from its start), NUL-terminated,
 * *n bytes; NULL with the reason in why. */
char *results_out_read(const mha_out *w, size_t *n, char *why, size_t len);
/* Reads a whole regular file (a FIFO or device is refused, never waited on);
 * NULL with the reason in why on failure. The text is NUL-terminated. */
char *results_read_file(const char *path, size_t *len, char *why, size_t wlen);
/* Reads and parses a JSON file; on failure prints "<who>: cannot read
 * <path>: <why>" or "<who>: <path>: not valid JSON: <json-c's reason> at line
 * L, column C (json-c)" and returns NULL. */
struct json_object *results_load_json(const char *who, const char *path);

/* A Google Benchmark row's string field key, or NULL when absent or not a
 * string. */
const char *results_row_str(struct json_object *row, const char *key);
/* A row's (or any object's) number field key, or dflt when absent or not a
 * number. */
double results_row_num(struct json_object *row, const char *key, double dflt);
/* 1 when a result file's context says its run was under a steady background
 * (mha_background "steady: ...", harness/sweep/background.c); ctx may be NULL. */
int results_background_steady(struct json_object *ctx);
/* 1 for a per-repetition row (run_type "iteration"; files without run_type
 * mark aggregates with aggregate_name), 0 for an aggregate. */
int results_row_is_iteration(struct json_object *row);
/* Nanoseconds per time_unit: 1 for NULL (Google Benchmark's default) and
 * "ns", 1e3 "us", 1e6 "ms", 1e9 "s"; 0 for anything else. */
double results_unit_ns(const char *unit);

/* A JSON number for v, or JSON null (NULL) when v is NaN or infinite. */
struct json_object *results_json_double(double v);

#endif
