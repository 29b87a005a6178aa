/* results.c - compare's reader: Google Benchmark result files as sets of
 * repetition times per benchmark (aggregates, failed and disturbed rows
 * left out and counted), and the machine fingerprint two files must share. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compare.h"

#include "cmd_compare.h"
#include "fmt_results.h"

const char *const FP_KEYS[] = {"mha_cpu_key", "mha_isa_active", "mha_cores", "mha_threads_max"};

void result_free(result_set *rs) {
    for (int i = 0; i < FP_COUNT; i++) free(rs->fp[i]);
    for (int i = 0; i < rs->nb; i++) {
        free(rs->b[i].name);
        free(rs->b[i].t);
    }
    free(rs->b);
    memset(rs, 0, sizeof *rs);
}

/* The repetition count is not part of a benchmark's identity: Google Benchmark
 * appends "/repeats:N" to the name when it is set per benchmark. */
static void strip_repeats(char *name) {
    char *p = strstr(name, "/repeats:");
    if (!p) return;
    char *q = p + 9;
    while (*q >= '0' && *q <= '9') q++;
    memmove(p, q, strlen(q) + 1);
}

bench *find_bench(const result_set *rs, const char *name) {
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

static void bench_add(bench *b, double ns) {
    if (b->n == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 16;
        b->t = xrealloc(b->t, (size_t)b->cap * sizeof *b->t);
    }
    b->t[b->n++] = ns;
}

static void add_time(result_set *rs, const char *name, double ns) {
    bench_add(bench_of(rs, name), ns);
}

/* Appends src's rows and counts to dst, as loading src's file into dst
 * would have (the first set merged sets the fingerprint): compare --ab
 * reads each round's file once, into the round's own set, and pools the
 * rounds from those. */
void result_merge(result_set *dst, const result_set *src) {
    if (!dst->path) {
        dst->path = src->path;
        for (int k = 0; k < FP_COUNT; k++) dst->fp[k] = src->fp[k] ? xstrdup(src->fp[k]) : NULL;
    }
    dst->files += src->files;
    dst->steady += src->steady;
    dst->rows += src->rows;
    dst->skipped += src->skipped;
    dst->disturbed += src->disturbed;
    for (int i = 0; i < src->nb; i++) {
        const bench *from = &src->b[i];
        bench *to = bench_of(dst, from->name);
        for (int j = 0; j < from->n; j++) bench_add(to, from->t[j]);
        to->mem |= from->mem;
        if (from->threads) to->threads = from->threads;
    }
}

/* Loads a Google Benchmark JSON file and appends its iteration rows to rs (which
 * may already hold rows from other files: A/B rounds are pooled). The first file
 * loaded sets the fingerprint. Returns 0, or EXIT_USAGE after printing why. */
int load_results(const char *path, result_set *rs) {
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
    rs->files++;
    json_object *bctx = NULL;
    json_object_object_get_ex(root, "context", &bctx);
    rs->steady += results_background_steady(bctx);
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
int fingerprints_match(const result_set *a, const result_set *b, int force, int setup_too) {
    int ok = 1;
    for (int k = 0; k < FP_COUNT; k++) {
        const char *va = a->fp[k], *vb = b->fp[k];
        if (k >= FP_REQUIRED && (!va || !vb)) continue;
        if (!setup_too && k != FP_CPU_KEY && va && vb) continue; /* the gate judges the setup */
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

/* The entry for the fuzz target (tests/fuzz/fuzz_results.c). */
int compare_load_for_fuzz(const char *path) {
    result_set rs = {0};
    const int rc = load_results(path, &rs);
    result_free(&rs);
    return rc;
}
