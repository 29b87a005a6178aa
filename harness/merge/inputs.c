/* inputs.c - merge's inputs: one result file read and checked (a Google
 * Benchmark file written by the sweep, its fingerprint, its shard keys, a
 * finite time on every row), and the checks across the files of one
 * fingerprint: every shard of a list once, no run given twice. */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "fmt_results.h"
#include "merge.h"
#include "shard.h"
#include "util.h"

const char *ctx_str(json_object *ctx, const char *key) {
    json_object *v;
    if (!ctx || !json_object_object_get_ex(ctx, key, &v) || !v ||
        json_object_is_type(v, json_type_object) || json_object_is_type(v, json_type_array))
        return NULL;
    return json_object_get_string(v);
}

/* A row's times (real_time, cpu_time) are finite numbers >= 0: a NaN or
 * infinite time (or the null a writer turned one into) is no measurement,
 * and merged it would pass on as one. Rows Google Benchmark marked failed
 * (error_occurred) carry no time to check. Returns 0, or -1 after naming the
 * file, the row and the field. */
static int check_times(const char *path, json_object *row, size_t i) {
    static const char *const fields[] = {"real_time", "cpu_time"};
    json_object *v;
    if (json_object_object_get_ex(row, "error_occurred", &v) && json_object_get_boolean(v))
        return 0;
    for (size_t k = 0; k < sizeof fields / sizeof *fields; k++) {
        if (!json_object_object_get_ex(row, fields[k], &v)) {
            if (k == 0 && results_row_is_iteration(row)) {
                errorf_esc("merge: %s: benchmarks[%zu] ('%s') has no \"real_time\"", path, i,
                           results_row_str(row, "name"));
                return -1;
            }
            continue;
        }
        const int num =
            json_object_is_type(v, json_type_double) || json_object_is_type(v, json_type_int);
        const double t = num ? json_object_get_double(v) : 0;
        if (!num || !isfinite(t) || t < 0) {
            errorf_esc("merge: %s: benchmarks[%zu] ('%s'): %s is %s, expected a finite time >= 0",
                       path, i, results_row_str(row, "name"), fields[k],
                       num ? json_object_to_json_string(v)
                           : json_type_to_name(json_object_get_type(v)));
            return -1;
        }
    }
    return 0;
}

/* The identity of a JSON value (a file's rows, one row): FNV-1a 64 of its
 * text as json-c writes it, which spells NaN alike where json_object_equal
 * finds NaN != NaN. */
uint64_t json_hash(json_object *v) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (const unsigned char *p =
             (const unsigned char *)json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN);
         *p; p++)
        h = (h ^ *p) * 0x100000001b3ull;
    return h;
}

/* Loads one file and its facts. Returns 0, or EXIT_USAGE after a message. */
int load_input(input *in) {
    in->root = results_load_json("merge", in->path);
    if (!in->root) return EXIT_USAGE;
    if (!json_object_is_type(in->root, json_type_object) ||
        !json_object_object_get_ex(in->root, "benchmarks", &in->rows) ||
        !json_object_is_type(in->rows, json_type_array)) {
        errorf_esc("merge: %s: no \"benchmarks\" array (not a Google Benchmark result file)",
                   in->path);
        return EXIT_USAGE;
    }
    if (!json_object_object_get_ex(in->root, "context", &in->ctx) ||
        !json_object_is_type(in->ctx, json_type_object)) {
        errorf_esc("merge: %s: no \"context\" object (not written by `mhabench sweep`)", in->path);
        return EXIT_USAGE;
    }
    for (int k = 0; k < FP_COUNT; k++) {
        in->fp[k] = ctx_str(in->ctx, FP_KEYS[k]);
        if (!in->fp[k]) {
            errorf_esc("merge: %s: the context has no \"%s\", so its machine is unknown (not "
                       "written by `mhabench sweep`?)",
                       in->path, FP_KEYS[k]);
            return EXIT_USAGE;
        }
    }
    in->git = ctx_str(in->ctx, "mha_git_revision");
    const char *sh = ctx_str(in->ctx, "mha_shard");
    if (sh) {
        char extra;
        if (sscanf(sh, "%d/%d%c", &in->shard_i, &in->shard_n, &extra) != 2 || in->shard_n < 1 ||
            in->shard_i < 1 || in->shard_i > in->shard_n) {
            errorf_esc("merge: %s: mha_shard '%s' is not I/N", in->path, sh);
            return EXIT_USAGE;
        }
        /* N comes from the file: nothing is sized by it (check_shards works
         * on the files given), and no sweep writes more than SHARD_MAX. */
        if (in->shard_n > SHARD_MAX) {
            errorf_esc("merge: %s: mha_shard '%s': N is at most %d (sweep --shard's limit)",
                       in->path, sh, SHARD_MAX);
            return EXIT_USAGE;
        }
        in->list = ctx_str(in->ctx, "mha_sweep_list");
        if (!in->list) {
            errorf_esc("merge: %s: a shard (%s) without mha_sweep_list", in->path, sh);
            return EXIT_USAGE;
        }
    }
    const size_t n = json_object_array_length(in->rows);
    for (size_t i = 0; i < n; i++) {
        json_object *row = json_object_array_get_idx(in->rows, i);
        if (!json_object_is_type(row, json_type_object) || !results_row_str(row, "name")) {
            errorf_esc("merge: %s: benchmarks[%zu] is not an object with a \"name\"", in->path, i);
            return EXIT_USAGE;
        }
        if (check_times(in->path, row, i) != 0) return EXIT_USAGE;
    }
    in->rows_hash = json_hash(in->rows);
    return 0;
}

static int cmp_int(const void *a, const void *b) {
    const int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* Appends to a list of at most cap - 1 characters; one that would not fit
 * ends it with " ..." (once). */
static void list_add(char *buf, size_t cap, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void list_add(char *buf, size_t cap, size_t *len, const char *fmt, ...) {
    if (*len >= cap - 1) return; /* full, " ..." written */
    char item[64];
    va_list ap;
    va_start(ap, fmt);
    const int k = vsnprintf(item, sizeof item, fmt, ap);
    va_end(ap);
    if (k > 0 && *len + (size_t)k + 5 < cap) {
        memcpy(buf + *len, item, (size_t)k + 1);
        *len += (size_t)k;
    } else {
        snprintf(buf + *len, cap - *len, " ...");
        *len = cap - 1;
    }
}

/* The shards of one list in a group: every index 1..N exactly once. Prints
 * what is missing or doubled; returns 0 when complete (or missing allowed
 * and nothing doubled), else EXIT_USAGE. */
int check_shards(input *in, int n, int group, const char *list, int allow_partial, dup_rule dup) {
    int count = 0;
    for (int i = 0; i < n; i++)
        if (in[i].group == group && in[i].list && !strcmp(in[i].list, list)) {
            if (count && count != in[i].shard_n) {
                errorf_esc("merge: shards of list %s disagree on N: %d and %d (%s)", list, count,
                           in[i].shard_n, in[i].path);
                return EXIT_USAGE;
            }
            count = in[i].shard_n;
        }
    /* The indices given, sorted: what is doubled are runs of one index, what
     * is missing the gaps (as ranges), so the work is the files', never N's. */
    int *idx = xrealloc_or_exit(NULL, (size_t)n, sizeof *idx, "merge"), nidx = 0;
    for (int i = 0; i < n; i++)
        if (in[i].group == group && in[i].list && !strcmp(in[i].list, list))
            idx[nidx++] = in[i].shard_i;
    qsort(idx, (size_t)nidx, sizeof *idx, cmp_int);
    char missing[1024] = "", doubled[1024] = "";
    size_t lm = 0, ld = 0;
    long nmiss = 0;
    int ndoub = 0, prev = 0;
    for (int j = 0; j <= nidx;) {
        const int next = j < nidx ? idx[j] : count + 1;
        if (next > prev + 1) { /* prev+1 .. next-1 are missing */
            const int lo = prev + 1, hi = next - 1;
            nmiss += hi - lo + 1;
            list_add(missing, sizeof missing, &lm,
                     lo == hi       ? "%s%d"
                     : hi == lo + 1 ? "%s%d, %d"
                                    : "%s%d-%d",
                     lm ? ", " : "", lo, hi);
        }
        if (j == nidx) break;
        int k = j;
        while (k + 1 < nidx && idx[k + 1] == idx[j]) k++;
        if (k > j) {
            ndoub++;
            list_add(doubled, sizeof doubled, &ld, "%s%d (%d files)", ld ? ", " : "", idx[j],
                     k - j + 1);
        }
        prev = idx[j];
        j = k + 1;
    }
    free(idx);
    int rc = 0;
    if (nmiss) {
        if (allow_partial)
            fprintf(stderr, "mhabench: merge: warning: list %s: shards missing: %s of %d\n", list,
                    missing, count);
        else {
            errorf_esc("merge: list %s: shards missing: %s of %d (--allow-partial writes what "
                       "there is)",
                       list, missing, count);
            rc = EXIT_USAGE;
        }
    }
    if (ndoub) {
        if (dup == DUP_REFUSE) {
            errorf_esc("merge: list %s: shards given more than once: %s (--duplicates pool or "
                       "first to join them)",
                       list, doubled);
            rc = EXIT_USAGE;
        } else {
            fprintf(stderr, "mhabench: merge: list %s: shards given more than once: %s (%s)\n",
                    list, doubled, dup == DUP_POOL ? "pooled" : "first kept");
        }
    }
    if (rc == 0)
        printf("shards of list %s: %ld of %d%s\n", list, count - nmiss, count,
               nmiss ? " (partial)" : "");
    return rc;
}

/* One run given twice (a file named twice, a copy, a copy with its context
 * edited) is no more evidence than once: two files of a group whose rows
 * are the same, every row and field, are refused in every --duplicates
 * mode. Real timings agree to the last digit only when they are one
 * measurement. Files without rows (empty shards) hold nothing to count
 * twice and are never the same run (their shards' indices tell them apart).
 * Returns 0, or EXIT_USAGE after naming both files. */
int check_same_runs(input *in, int n, int group) {
    for (int i = 0; i < n; i++) {
        if (in[i].group != group) continue;
        const size_t len = json_object_array_length(in[i].rows);
        if (len == 0) continue;
        for (int j = i + 1; j < n; j++) {
            if (in[j].group != group || in[j].rows_hash != in[i].rows_hash ||
                json_object_array_length(in[j].rows) != len)
                continue;
            if (strcmp(json_object_to_json_string_ext(in[i].rows, JSON_C_TO_STRING_PLAIN),
                       json_object_to_json_string_ext(in[j].rows, JSON_C_TO_STRING_PLAIN)) != 0)
                continue;
            errorf_esc("merge: %s and %s are the same run (the same %zu rows, every field alike: "
                       "a file named twice or a copy); merged, its repetitions would count twice",
                       in[i].path, in[j].path, len);
            return EXIT_USAGE;
        }
    }
    return 0;
}
