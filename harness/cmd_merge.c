/* cmd_merge.c - `mhabench merge`: joins result files of one sweep run as
 * shards on several machines (sweep --shard I/N), or of several runs of one
 * machine type, into one Google Benchmark file per machine fingerprint.
 * It refuses what cannot be one result: files of different builds, shards of
 * different benchmark lists, a shard missing or given twice, the same
 * benchmark measured in two files (unless told how to join those), one run
 * given twice, a row whose time is not a number. */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "commands.h"
#include "fmt_results.h"
#include "mha_private.h"
#include "shard.h"
#include "opts.h"
#include "util.h"

/* The context keys that name a machine: files are merged per fingerprint. */
static const char *const FP_KEYS[] = {"mha_cpu_key", "mha_isa_active", "mha_cores"};
enum { FP_COUNT = 3 };

typedef enum { DUP_REFUSE, DUP_POOL, DUP_FIRST } dup_rule;

typedef struct {
    const char *path;
    json_object *root, *ctx, *rows;
    const char *fp[FP_COUNT];
    const char *git;
    int shard_i, shard_n; /* 0, 0: not a shard */
    const char *list;     /* mha_sweep_list of a shard */
    int group;
    uint64_t rows_hash; /* json_hash(rows): files holding the same rows */
} input;

enum { O_OUT = 1000, O_OUT_DIR, O_DUP, O_PARTIAL, O_FORCE };
static const opt_row ROWS[] = {
    {"out", required_argument, O_OUT, 0, "F", 0, "the merged file (all inputs of one fingerprint)"},
    {"out-dir", required_argument, O_OUT_DIR, 0, "DIR", 0,
     "one DIR/<cpu-key>-<isa>-c<cores>.json per fingerprint"},
    {"duplicates", required_argument, O_DUP, 0, "R", 0,
     "a benchmark name in two files: refuse (default), pool their repetitions (runs of one "
     "build on hosts of one type), or keep the first file's"},
    {"allow-partial", no_argument, O_PARTIAL, 0, NULL, 0,
     "write even when shards are missing (they are still reported)"},
    {"force", no_argument, O_FORCE, 0, NULL, 0,
     "merge files of different builds (mha_git_revision)"},
    OPTS_HELP,
};
enum { NROWS = sizeof ROWS / sizeof ROWS[0] };

static void usage(FILE *f) {
    opts_usage(f, "merge", "FILES...", ROWS, NROWS, NULL);
    fputs("Joins Google Benchmark result files written by `mhabench sweep` into one file\n"
          "per machine fingerprint (mha_cpu_key, mha_isa_active, mha_cores): the shards of\n"
          "a `sweep --shard I/N` run on N machines, or runs of one machine type. One of\n"
          "--out and --out-dir is required.\n"
          "A run given twice (two files with the same rows, every field alike) is\n"
          "refused in every mode, as is a row whose real_time or cpu_time is not a\n"
          "finite number >= 0. An empty shard's file (no rows) counts as its shard.\n"
          "Exit 0 merged, 2 usage or input error (each refusal names the files and\n"
          "values, missing and doubled shards by index).\n",
          f);
    opts_print(f, ROWS, NROWS);
}

static const char *ctx_str(json_object *ctx, const char *key) {
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
static uint64_t json_hash(json_object *v) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (const unsigned char *p =
             (const unsigned char *)json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN);
         *p; p++)
        h = (h ^ *p) * 0x100000001b3ull;
    return h;
}

/* Loads one file and its facts. Returns 0, or EXIT_USAGE after a message. */
static int load_input(input *in) {
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
static int check_shards(input *in, int n, int group, const char *list, int allow_partial,
                        dup_rule dup) {
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
static int check_same_runs(input *in, int n, int group) {
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

/* A benchmark name seen in the group: which file it came from first and how
 * many iteration rows it has so far. */
typedef struct {
    char *name;
    int file;
    int reps;
    int pooled;
} seen_name;

/* name -> index into the seen names: a hash lookup (json-c's object is a
 * hash table), so a merge of 1,000 shards is linear in its rows. */
static json_object *g_index;

static seen_name *find_name(seen_name *s, int n, const char *name) {
    json_object *v;
    if (!name || !g_index || !json_object_object_get_ex(g_index, name, &v)) return NULL;
    const int i = json_object_get_int(v);
    return i >= 0 && i < n ? &s[i] : NULL;
}

/* One iteration row of a pooled benchmark, for check_pooled_rows. */
typedef struct {
    uint64_t hash;
    int file;
    size_t row;
    json_object *obj;
} pooled_row;

static int by_hash(const void *pa, const void *pb) {
    const pooled_row *a = pa, *b = pb;
    return (a->hash > b->hash) - (a->hash < b->hash);
}

/* Two files of one run may be pooled; one measurement in two files may not
 * (a merged file and one of its shards, say): the rows of a pooled name
 * that are identical, every field alike, are the same repetition twice.
 * Returns 0, or -1 after naming both files and rows. */
static int check_pooled_rows(input *in, int n, int group, seen_name *names, int nn,
                             const int *total_rep) {
    size_t *at = xrealloc_or_exit(NULL, (size_t)nn + 1, sizeof *at, "merge");
    at[0] = 0;
    for (int k = 0; k < nn; k++) at[k + 1] = at[k] + (size_t)(names[k].pooled ? total_rep[k] : 0);
    pooled_row *pr = xrealloc_or_exit(NULL, at[nn] ? at[nn] : 1, sizeof *pr, "merge");
    size_t *fill = xrealloc_or_exit(NULL, (size_t)nn + 1, sizeof *fill, "merge");
    memcpy(fill, at, ((size_t)nn + 1) * sizeof *fill);
    for (int i = 0; i < n; i++) {
        if (in[i].group != group) continue;
        const size_t nr = json_object_array_length(in[i].rows);
        for (size_t r = 0; r < nr; r++) {
            json_object *row = json_object_array_get_idx(in[i].rows, r);
            seen_name *s = find_name(names, nn, results_row_str(row, "name"));
            if (!s || !s->pooled || !results_row_is_iteration(row)) continue;
            pr[fill[s - names]++] = (pooled_row){json_hash(row), i, r, row};
        }
    }
    int rc = 0;
    for (int k = 0; k < nn && rc == 0; k++) {
        pooled_row *p = pr + at[k];
        const size_t m = at[k + 1] - at[k];
        qsort(p, m, sizeof *p, by_hash);
        for (size_t a = 0; a + 1 < m && rc == 0; a++)
            for (size_t b = a + 1; b < m && p[b].hash == p[a].hash && rc == 0; b++) {
                if (p[a].file == p[b].file) continue;
                const char *ta = json_object_to_json_string_ext(p[a].obj, JSON_C_TO_STRING_PLAIN);
                const char *tb = json_object_to_json_string_ext(p[b].obj, JSON_C_TO_STRING_PLAIN);
                if (strcmp(ta, tb) != 0) continue;
                const pooled_row *x = p[a].file < p[b].file ? &p[a] : &p[b],
                                 *y = x == &p[a] ? &p[b] : &p[a];
                errorf_esc("merge: benchmark '%s': benchmarks[%zu] of %s and benchmarks[%zu] of "
                           "%s are the same measurement (identical rows: one file holds the "
                           "other's, e.g. a merged file and one of its shards); pooled it would "
                           "count twice",
                           names[k].name, x->row, in[x->file].path, y->row, in[y->file].path);
                rc = -1;
            }
    }
    free(at);
    free(fill);
    free(pr);
    return rc;
}

/* Builds and writes the merged file of one group (out_path NULL: builds it
 * only). Returns 0 or EXIT_USAGE. */
static int write_group(input *in, int n, int group, const char *out_path, dup_rule dup) {
    seen_name *names = NULL;
    int nn = 0, rc = 0, first = -1, nfiles = 0;
    json_object_put(g_index);
    g_index = json_object_new_object();
    for (int i = 0; i < n; i++)
        if (in[i].group == group) {
            if (first < 0) first = i;
            nfiles++;
        }
    /* Pass 1: names and conflicts. */
    for (int i = 0; i < n && rc == 0; i++) {
        if (in[i].group != group) continue;
        const size_t nr = json_object_array_length(in[i].rows);
        for (size_t r = 0; r < nr; r++) {
            json_object *row = json_object_array_get_idx(in[i].rows, r);
            if (!results_row_is_iteration(row)) continue;
            const char *name = results_row_str(row, "name");
            seen_name *s = find_name(names, nn, name);
            if (!s) {
                if (nn % 1024 == 0)
                    names = xrealloc_or_exit(names, (size_t)nn + 1024, sizeof *names, "merge");
                json_object_object_add(g_index, name, json_object_new_int(nn));
                names[nn++] = (seen_name){xstrdup_or_exit(name, "merge"), i, 1, 0};
            } else if (s->file == i) {
                s->reps++;
            } else if (dup == DUP_REFUSE) {
                errorf_esc("merge: benchmark '%s' is in both %s and %s (--duplicates pool joins "
                           "their repetitions, first keeps %s's)",
                           name, in[s->file].path, in[i].path, in[s->file].path);
                rc = EXIT_USAGE;
                break;
            } else if (dup == DUP_POOL) {
                s->pooled = 1;
            }
        }
    }
    if (rc) goto out;
    /* Complete shards of one list cover exactly the list they were cut from. */
    for (int i = 0; i < n; i++) {
        if (in[i].group != group || !in[i].list) continue;
        const char *total = ctx_str(in[i].ctx, "mha_sweep_benchmarks");
        int have = 0, files = 0;
        for (int j = 0; j < n; j++)
            if (in[j].group == group && in[j].list && !strcmp(in[j].list, in[i].list)) files++;
        for (int k = 0; k < nn; k++)
            if (in[names[k].file].list && !strcmp(in[names[k].file].list, in[i].list)) have++;
        if (total && files == in[i].shard_n && have != atoi(total)) {
            errorf_esc("merge: list %s: the shards hold %d benchmarks, the list has %s", in[i].list,
                       have, total);
            rc = EXIT_USAGE;
            goto out;
        }
        break;
    }
    /* Pass 2: the rows. Pooled names get their repetitions renumbered and
     * lose their aggregates (they described one file's repetitions). */
    json_object *outrows = json_object_new_array();
    int *next_rep = xrealloc_or_exit(NULL, (size_t)(nn ? nn : 1), sizeof *next_rep, "merge");
    int *total_rep = xrealloc_or_exit(NULL, (size_t)(nn ? nn : 1), sizeof *total_rep, "merge");
    memset(next_rep, 0, (size_t)(nn ? nn : 1) * sizeof *next_rep);
    memset(total_rep, 0, (size_t)(nn ? nn : 1) * sizeof *total_rep);
    for (int i = 0; i < n; i++) {
        if (in[i].group != group) continue;
        const size_t nr = json_object_array_length(in[i].rows);
        for (size_t r = 0; r < nr; r++) {
            json_object *row = json_object_array_get_idx(in[i].rows, r);
            seen_name *s = find_name(names, nn, results_row_str(row, "name"));
            if (s && s->pooled && results_row_is_iteration(row)) total_rep[s - names]++;
        }
    }
    if (dup == DUP_POOL && check_pooled_rows(in, n, group, names, nn, total_rep) != 0) {
        free(next_rep);
        free(total_rep);
        json_object_put(outrows);
        rc = EXIT_USAGE;
        goto out;
    }
    int dropped_aggs = 0;
    for (int i = 0; i < n; i++) {
        if (in[i].group != group) continue;
        const size_t nr = json_object_array_length(in[i].rows);
        for (size_t r = 0; r < nr; r++) {
            json_object *row = json_object_array_get_idx(in[i].rows, r);
            const char *name = results_row_str(row, "name");
            const char *run_name = results_row_str(row, "run_name");
            /* an aggregate row belongs to its run_name's benchmark */
            seen_name *s = find_name(names, nn,
                                     results_row_is_iteration(row) ? name
                                     : run_name                    ? run_name
                                                                   : "");
            if (s && s->file != i && dup == DUP_FIRST) continue;
            if (!results_row_is_iteration(row) && s && s->pooled) {
                dropped_aggs++;
                continue;
            }
            json_object *copy = NULL;
            json_object_deep_copy(row, &copy, NULL);
            if (s && s->pooled && results_row_is_iteration(row)) {
                const int k = (int)(s - names);
                json_object_object_add(copy, "repetition_index",
                                       json_object_new_int(next_rep[k]++));
                json_object_object_add(copy, "repetitions", json_object_new_int(total_rep[k]));
            }
            json_object_array_add(outrows, copy);
        }
    }
    free(next_rep);
    free(total_rep);
    /* The context: the first file's, the shard keys replaced by what was
     * merged, skips counted once per run: every shard of a sweep records
     * the skips of its whole list, files of separate runs their own. */
    json_object *ctx = NULL;
    json_object_deep_copy(in[first].ctx, &ctx, NULL);
    json_object_object_del(ctx, "mha_shard");
    json_object_object_del(ctx, "mha_shard_benchmarks");
    long skipped = 0, shard_skipped = 0;
    size_t plen = 1;
    for (int i = 0; i < n; i++)
        if (in[i].group == group) {
            const char *sk = ctx_str(in[i].ctx, "mha_skipped");
            const long v = sk ? strtol(sk, NULL, 10) : 0;
            if (ctx_str(in[i].ctx, "mha_shard"))
                shard_skipped = v > shard_skipped ? v : shard_skipped;
            else
                skipped += v;
            plen += strlen(in[i].path) + 2;
        }
    skipped += shard_skipped;
    char *paths = xrealloc_or_exit(NULL, plen, 1, "merge"), num[32];
    paths[0] = '\0';
    for (int i = 0; i < n; i++)
        if (in[i].group == group) {
            if (paths[0]) strcat(paths, ", ");
            strcat(paths, in[i].path);
        }
    json_object_object_add(ctx, "mha_merged_from", json_object_new_string(paths));
    free(paths);
    snprintf(num, sizeof num, "%ld", skipped);
    json_object_object_add(ctx, "mha_skipped", json_object_new_string(num));
    snprintf(num, sizeof num, "%d", nn);
    json_object_object_add(ctx, "mha_merged_benchmarks", json_object_new_string(num));
    json_object *root = json_object_new_object();
    json_object_object_add(root, "context", ctx);
    json_object_object_add(root, "benchmarks", outrows);
    const char *text = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY |
                                                                JSON_C_TO_STRING_NOSLASHESCAPE);
    char why[1024];
    mha_out w;
    if (!out_path) { /* merge_load_for_fuzz: built and written out as text, no file */
        if (!text) rc = EXIT_USAGE;
    } else if (mha_out_begin(&w, out_path, MHA_OUT_REPLACE | MHA_OUT_MKDIRS, why, sizeof why) !=
                   MHA_OK ||
               mha_out_write(&w, text, strlen(text), why, sizeof why) != MHA_OK ||
               mha_out_write(&w, "\n", 1, why, sizeof why) != MHA_OK ||
               results_json_fix_nonfinite(&w, why, sizeof why) != MHA_OK ||
               mha_out_commit(&w, why, sizeof why) != MHA_OK) {
        mha_out_abort(&w);
        errorf_esc("merge: --out %s: %s", out_path, why);
        rc = EXIT_USAGE;
    } else {
        int pooled = 0;
        for (int i = 0; i < nn; i++) pooled += names[i].pooled;
        printf("merged %d file%s (cpu %s, isa %s, cores %s): %d benchmarks%s -> %s\n", nfiles,
               nfiles == 1 ? "" : "s", in[first].fp[0], in[first].fp[1], in[first].fp[2], nn, "",
               out_path);
        if (pooled)
            printf("  %d benchmarks pooled from several files (%d aggregate rows dropped)\n",
                   pooled, dropped_aggs);
    }
    json_object_put(root);
out:
    for (int i = 0; i < nn; i++) free(names[i].name);
    free(names);
    json_object_put(g_index);
    g_index = NULL;
    return rc;
}

int cmd_merge(int argc, char **argv) {
    const char *out = NULL, *out_dir = NULL;
    dup_rule dup = DUP_REFUSE;
    int allow_partial = 0, force = 0;
    opts_parser op;
    opts_init(&op, "merge", ROWS, NROWS);
    for (int c; (c = opts_next(&op, argc, argv)) != -1;) {
        switch (c) {
        case O_OUT:
            out = optarg;
            break;
        case O_OUT_DIR:
            out_dir = optarg;
            break;
        case O_DUP: { /* in dup_rule's order */
            static const char *const rules[] = {"refuse", "pool", "first"};
            const int r = name_index_or_say("merge: --duplicates", "rule", optarg, rules, 3, NULL);
            if (r < 0) return EXIT_USAGE;
            dup = (dup_rule)r;
            break;
        }
        case O_PARTIAL:
            allow_partial = 1;
            break;
        case O_FORCE:
            force = 1;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return EXIT_USAGE;
        }
    }
    const int n = argc - optind;
    if (n < 1 || !!out == !!out_dir) {
        errorf("merge: expected result files and one of --out or --out-dir");
        usage(stderr);
        return EXIT_USAGE;
    }
    input *in = xrealloc_or_exit(NULL, (size_t)n, sizeof *in, "merge");
    memset(in, 0, (size_t)n * sizeof *in);
    int rc = 0, ngroups = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        in[i].path = argv[optind + i];
        rc = load_input(&in[i]);
    }
    if (rc) goto done;
    /* One build: the git revision of every file agrees. */
    for (int i = 1; i < n; i++) {
        const char *a = in[0].git ? in[0].git : "(none)", *b = in[i].git ? in[i].git : "(none)";
        if (strcmp(a, b) != 0) {
            if (!force) {
                errorf_esc("merge: different builds: mha_git_revision is '%s' in %s but '%s' in "
                           "%s (--force merges anyway)",
                           a, in[0].path, b, in[i].path);
                rc = EXIT_USAGE;
                goto done;
            }
            fprintf(stderr, "mhabench: merge: warning: different builds (%s, %s): --force\n", a, b);
        }
    }
    /* Groups by fingerprint, in the order first seen. */
    for (int i = 0; i < n; i++) {
        in[i].group = -1;
        for (int j = 0; j < i && in[i].group < 0; j++) {
            int same = 1;
            for (int k = 0; k < FP_COUNT; k++) same &= !strcmp(in[i].fp[k], in[j].fp[k]);
            if (same) in[i].group = in[j].group;
        }
        if (in[i].group < 0) in[i].group = ngroups++;
    }
    if (out && ngroups > 1) {
        errorf_esc("merge: the files come from %d machine fingerprints (e.g. %s: %s/%s/%s, and "
                   "the first file's %s/%s/%s); use --out-dir for one file per fingerprint",
                   ngroups, in[n - 1].path, in[n - 1].fp[0], in[n - 1].fp[1], in[n - 1].fp[2],
                   in[0].fp[0], in[0].fp[1], in[0].fp[2]);
        rc = EXIT_USAGE;
        goto done;
    }
    for (int g = 0; g < ngroups && rc == 0; g++) {
        /* every shard list of the group, complete */
        for (int i = 0; i < n && rc == 0; i++) {
            if (in[i].group != g || !in[i].list) continue;
            int first_of_list = 1;
            for (int j = 0; j < i; j++)
                if (in[j].group == g && in[j].list && !strcmp(in[j].list, in[i].list))
                    first_of_list = 0;
            if (first_of_list) rc = check_shards(in, n, g, in[i].list, allow_partial, dup);
        }
        if (rc || (rc = check_same_runs(in, n, g)) != 0) break;
        char path[4096];
        int first = 0;
        while (in[first].group != g) first++;
        if (!out)
            for (int k = 0; k < FP_COUNT; k++)
                if (!file_name_part_ok(in[first].fp[k])) {
                    errorf_esc("merge: %s: %s '%s' cannot be part of a file name", in[first].path,
                               FP_KEYS[k], in[first].fp[k]);
                    rc = EXIT_USAGE;
                }
        if (rc) break;
        if (out)
            snprintf(path, sizeof path, "%s", out);
        else
            snprintf(path, sizeof path, "%s/%s-%s-c%s.json", out_dir, in[first].fp[0],
                     in[first].fp[1], in[first].fp[2]);
        rc = write_group(in, n, g, path, dup);
    }
done:
    for (int i = 0; i < n; i++) json_object_put(in[i].root);
    free(in);
    return rc;
}

/* ---- entry for the fuzz target (tests/fuzz/fuzz_merge.c) ------------------------ */

#include "cmd_merge.h"

int merge_load_for_fuzz(const char *path) {
    input in[2];
    memset(in, 0, sizeof in);
    in[0].path = in[1].path = path;
    int rc = load_input(&in[0]);
    if (rc == 0) { /* the file alone: its shard list (partial allowed), then its merge */
        if (in[0].list) rc = check_shards(in, 1, 0, in[0].list, 1, DUP_REFUSE);
        if (rc == 0) rc = write_group(in, 1, 0, NULL, DUP_REFUSE);
    }
    if (rc == 0 && json_object_array_length(in[0].rows) > 0) {
        /* the file pooled with itself: the same run, refused whatever it holds */
        rc = load_input(&in[1]);
        if (rc == 0 && check_same_runs(in, 2, 0) != EXIT_USAGE) abort();
    }
    for (int i = 0; i < 2; i++) json_object_put(in[i].root);
    return rc;
}
