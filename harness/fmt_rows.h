/* fmt_rows.h - the sweep's result file, written once by one writer
 * (fmt_rows.c): the context Google Benchmark and the sweep give, every row
 * as the shim reports it (mha_gbench_result.json: Google Benchmark's own
 * fields, non-finite numbers as null) with the fields its benchmark was
 * registered with (dtype, kv_dtype), the rows of follow-up passes (retakes
 * of disturbed repetitions, extra repetitions where the median's interval
 * was still wide) appended to their benchmarks, and one summary per
 * benchmark for a reader to judge it by. Nothing patches the file after. */
#ifndef MHA_HARNESS_FMT_ROWS_H
#define MHA_HARNESS_FMT_ROWS_H

#include <stddef.h>

#include <json-c/json.h>

#include "mha_private.h"

typedef struct {
    json_object *root; /* {"context": {...}, "benchmarks": [...]} */
    json_object *rows;
    int *pass; /* per row: the pass it came from (0 the first) */
    int n, cap;
} rows_file;

/* Starts a file with the context Google Benchmark and the custom keys
 * added so far give (mha_gbench_context_json). MHA_OK, or an error with why. */
mha_status rows_begin(rows_file *f, char *why, size_t len);
/* Sets a context key: facts known only at the end (how loaded the host was,
 * how often the peaks were retaken). */
void rows_context(rows_file *f, const char *key, const char *value);
/* One row: json is mha_gbench_result.json; dtype and kv_dtype (NULL: the
 * row has none, e.g. a name outside the sweep's list) go right after its
 * name, and after them, for a variant row (variant not NULL), each of
 * window_left and window_right, softcap, sinks and head_dim_v that is on
 * (a row without variants gets none of them). MHA_EFORMAT when json is not
 * an object. */
mha_status rows_add(rows_file *f, const char *json, int pass, const char *dtype,
                    const char *kv_dtype, const mha_problem *variant, char *why, size_t len);
/* Renumbers repetition_index / repetitions per name over every pass, keeps
 * the first pass's aggregates only for names no later pass added to, adds a
 * top-level "mha_rows" array (per benchmark name: repetitions, disturbed
 * (rows with counter disturbed = 1, which the statistics leave out while a
 * clean row remains), used, median_ns, interval_ns (95%, order statistics),
 * min_ns, cv (over the used rows), and the same for GFLOPS), and writes the
 * whole file into w from its start. MHA_OK, or MHA_EIO with a reason. */
mha_status rows_commit(rows_file *f, mha_out *w, char *why, size_t len);
void rows_free(rows_file *f);

#endif
