/* write.c - one fingerprint's merged file: the benchmark names of its files
 * and their conflicts (refused, pooled, or the first file's kept), the rows
 * (pooled repetitions renumbered, their aggregates dropped), the context
 * (what was merged, skips counted once per run), then the file written
 * whole or not at all. write_group runs those steps in turn. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "fmt_results.h"
#include "merge.h"
#include "util.h"

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

/* Pass 1 of write_group: the names of the group's iteration rows into
 * *names (and g_index), each with its first file and its repetitions; a
 * name in two files is refused (DUP_REFUSE) or marked pooled (DUP_POOL).
 * Returns 0 or EXIT_USAGE. */
static int collect_names(input *in, int n, int group, dup_rule dup, seen_name **names, int *nn) {
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        if (in[i].group != group) continue;
        const size_t nr = json_object_array_length(in[i].rows);
        for (size_t r = 0; r < nr; r++) {
            json_object *row = json_object_array_get_idx(in[i].rows, r);
            if (!results_row_is_iteration(row)) continue;
            const char *name = results_row_str(row, "name");
            seen_name *s = find_name(*names, *nn, name);
            if (!s) {
                if (*nn % 1024 == 0)
                    *names = xrealloc_or_exit(*names, (size_t)*nn + 1024, sizeof **names, "merge");
                json_object_object_add(g_index, name, json_object_new_int(*nn));
                (*names)[(*nn)++] = (seen_name){xstrdup_or_exit(name, "merge"), i, 1, 0};
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
    return rc;
}

/* Complete shards of one list cover exactly the list they were cut from.
 * Returns 0 or EXIT_USAGE. */
static int check_list_covered(input *in, int n, int group, const seen_name *names, int nn) {
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
            return EXIT_USAGE;
        }
        break;
    }
    return 0;
}

/* total_rep[k]: the iteration rows of pooled name k over the group's files. */
static void count_pooled_reps(input *in, int n, int group, seen_name *names, int nn,
                              int *total_rep) {
    for (int i = 0; i < n; i++) {
        if (in[i].group != group) continue;
        const size_t nr = json_object_array_length(in[i].rows);
        for (size_t r = 0; r < nr; r++) {
            json_object *row = json_object_array_get_idx(in[i].rows, r);
            seen_name *s = find_name(names, nn, results_row_str(row, "name"));
            if (s && s->pooled && results_row_is_iteration(row)) total_rep[s - names]++;
        }
    }
}

/* Pass 2 of write_group: the rows into *outrows. Pooled names get their
 * repetitions renumbered and lose their aggregates (they described one
 * file's repetitions; *dropped_aggs counts them); with DUP_FIRST a name
 * keeps only its first file's rows. Returns 0, or EXIT_USAGE (nothing in
 * *outrows) when pooled rows are the same measurement twice. */
static int merged_rows(input *in, int n, int group, dup_rule dup, seen_name *names, int nn,
                       json_object **outrows, int *dropped_aggs) {
    *outrows = json_object_new_array();
    int *next_rep = xrealloc_or_exit(NULL, (size_t)(nn ? nn : 1), sizeof *next_rep, "merge");
    int *total_rep = xrealloc_or_exit(NULL, (size_t)(nn ? nn : 1), sizeof *total_rep, "merge");
    memset(next_rep, 0, (size_t)(nn ? nn : 1) * sizeof *next_rep);
    memset(total_rep, 0, (size_t)(nn ? nn : 1) * sizeof *total_rep);
    count_pooled_reps(in, n, group, names, nn, total_rep);
    if (dup == DUP_POOL && check_pooled_rows(in, n, group, names, nn, total_rep) != 0) {
        free(next_rep);
        free(total_rep);
        json_object_put(*outrows);
        *outrows = NULL;
        return EXIT_USAGE;
    }
    *dropped_aggs = 0;
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
                (*dropped_aggs)++;
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
            json_object_array_add(*outrows, copy);
        }
    }
    free(next_rep);
    free(total_rep);
    return 0;
}

/* The context: the first file's, the shard keys replaced by what was
 * merged, skips counted once per run: every shard of a sweep records
 * the skips of its whole list, files of separate runs their own. */
static json_object *merged_context(input *in, int n, int group, int first, int nn) {
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
    return ctx;
}

/* Writes root to out_path (NULL: only turned into text, for the fuzz
 * target) and prints the summary of the group's nfiles files, first being
 * the first of them. Returns 0 or EXIT_USAGE. */
static int write_merged(json_object *root, const char *out_path, const input *in, int first,
                        int nfiles, const seen_name *names, int nn, int dropped_aggs) {
    const char *text = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY |
                                                                JSON_C_TO_STRING_NOSLASHESCAPE);
    char why[1024];
    mha_out w;
    if (!out_path) { /* merge_load_for_fuzz: built and written out as text, no file */
        if (!text) return EXIT_USAGE;
    } else if (mha_out_begin(&w, out_path, MHA_OUT_REPLACE | MHA_OUT_MKDIRS, why, sizeof why) !=
                   MHA_OK ||
               mha_out_write(&w, text, strlen(text), why, sizeof why) != MHA_OK ||
               mha_out_write(&w, "\n", 1, why, sizeof why) != MHA_OK ||
               results_json_fix_nonfinite(&w, why, sizeof why) != MHA_OK ||
               mha_out_commit(&w, why, sizeof why) != MHA_OK) {
        mha_out_abort(&w);
        errorf_esc("merge: --out %s: %s", out_path, why);
        return EXIT_USAGE;
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
    return 0;
}

/* The steps above in turn: names, list coverage, rows, context, the file. */
int write_group(input *in, int n, int group, const char *out_path, dup_rule dup) {
    seen_name *names = NULL;
    int nn = 0, first = -1, nfiles = 0, dropped_aggs = 0;
    json_object_put(g_index);
    g_index = json_object_new_object();
    for (int i = 0; i < n; i++)
        if (in[i].group == group) {
            if (first < 0) first = i;
            nfiles++;
        }
    json_object *outrows = NULL;
    int rc = collect_names(in, n, group, dup, &names, &nn);
    if (rc == 0) rc = check_list_covered(in, n, group, names, nn);
    if (rc == 0) rc = merged_rows(in, n, group, dup, names, nn, &outrows, &dropped_aggs);
    if (rc == 0) {
        json_object *ctx = merged_context(in, n, group, first, nn);
        json_object *root = json_object_new_object();
        json_object_object_add(root, "context", ctx);
        json_object_object_add(root, "benchmarks", outrows);
        rc = write_merged(root, out_path, in, first, nfiles, names, nn, dropped_aggs);
        json_object_put(root);
    }
    for (int i = 0; i < nn; i++) free(names[i].name);
    free(names);
    json_object_put(g_index);
    g_index = NULL;
    return rc;
}
