/* fmt_rows.c - the sweep's result file, written once by one writer: the
 * context, every row as Google Benchmark reported it with the sweep's fields,
 * follow-up passes appended, and the per-benchmark summary (fmt_rows.h). */
#include "fmt_rows.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>

#include "fmt_results.h"
#include "meas_gbench.h"
#include "stats.h"
#include "util.h"

typedef struct {
    char *name;
    double *ns, *gf;
    int n, cap, disturbed, extra;
} acc;

static acc *acc_find(acc **a, int *na, const char *name) {
    for (int i = 0; i < *na; i++)
        if (!strcmp((*a)[i].name, name)) return &(*a)[i];
    *a = xrealloc_or_exit(*a, (size_t)*na + 1, sizeof **a, "sweep");
    acc *x = &(*a)[(*na)++];
    memset(x, 0, sizeof *x);
    x->name = xstrdup_or_exit(name, "sweep");
    return x;
}

static json_object *pair(double lo, double hi) {
    json_object *a = json_object_new_array();
    json_object_array_add(a, results_json_double(lo));
    json_object_array_add(a, results_json_double(hi));
    return a;
}

/* The summary of one benchmark: rows not disturbed when any is clean. */
static json_object *summary(const acc *x, const unsigned char *dist) {
    double *ns = xrealloc_or_exit(NULL, (size_t)(x->n ? x->n : 1), sizeof *ns, "sweep");
    double *gf = xrealloc_or_exit(NULL, (size_t)(x->n ? x->n : 1), sizeof *gf, "sweep");
    const int clean = x->n - x->disturbed;
    int u = 0;
    for (int i = 0; i < x->n; i++)
        if (!dist[i] || clean == 0) {
            ns[u] = x->ns[i];
            gf[u++] = x->gf[i];
        }
    json_object *o = json_object_new_object();
    json_object_object_add(o, "name", json_object_new_string(x->name));
    json_object_object_add(o, "repetitions", json_object_new_int(x->n));
    json_object_object_add(o, "disturbed", json_object_new_int(x->disturbed));
    json_object_object_add(o, "extra_repetitions", json_object_new_int(x->extra));
    json_object_object_add(o, "used", json_object_new_int(u));
    if (u > 0) {
        double mean = 0, var = 0, lo, hi;
        for (int i = 0; i < u; i++) mean += ns[i];
        mean /= u;
        for (int i = 0; i < u; i++) var += (ns[i] - mean) * (ns[i] - mean);
        const double cv = u > 1 && mean > 0 ? sqrt(var / (u - 1)) / mean : 0;
        const double med = median_inplace(ns, u);
        median_interval(ns, u, 0.95, &lo, &hi);
        json_object_object_add(o, "median_ns", results_json_double(med));
        json_object_object_add(o, "interval_ns", pair(lo, hi));
        json_object_object_add(o, "min_ns", results_json_double(ns[0]));
        json_object_object_add(o, "cv", results_json_double(cv));
        const double gmed = median_inplace(gf, u);
        median_interval(gf, u, 0.95, &lo, &hi);
        json_object_object_add(o, "gflops_median", results_json_double(gmed));
        json_object_object_add(o, "gflops_interval", pair(lo, hi));
        json_object_object_add(o, "halfwidth",
                               results_json_double(gmed > 0 ? (hi - lo) / 2 / gmed : 0));
    }
    free(ns);
    free(gf);
    return o;
}

mha_status rows_begin(rows_file *f, char *why, size_t len) {
    memset(f, 0, sizeof *f);
    char *text = mha_gbench_context_json();
    if (!text) {
        snprintf(why, len, "Google Benchmark gave no context");
        return MHA_EIO;
    }
    f->root = json_tokener_parse(text);
    free(text);
    json_object *ctx;
    if (!f->root || !json_object_object_get_ex(f->root, "context", &ctx)) {
        json_object_put(f->root);
        f->root = NULL;
        snprintf(why, len, "Google Benchmark's context is not JSON");
        return MHA_EFORMAT;
    }
    f->rows = json_object_new_array();
    json_object_object_add(f->root, "benchmarks", f->rows);
    return MHA_OK;
}

void rows_context(rows_file *f, const char *key, const char *value) {
    json_object *ctx;
    if (f->root && json_object_object_get_ex(f->root, "context", &ctx))
        json_object_object_add(ctx, key, json_object_new_string(value));
}

/* A variant row's fields, each only where its variant is on (a row without
 * variants has none of them: its fields are as before). */
static void add_variant(json_object *out, const mha_problem *p) {
    if (p->window) {
        json_object_object_add(out, "window_left", json_object_new_int64(p->window_left));
        json_object_object_add(out, "window_right", json_object_new_int64(p->window_right));
    }
    if (p->softcap != 0) { /* as the name says it (%g of the float), not its binary tail */
        char c[32];
        snprintf(c, sizeof c, "%g", p->softcap);
        json_object_object_add(out, "softcap", json_object_new_double_s(p->softcap, c));
    }
    if (p->sinks) json_object_object_add(out, "sinks", json_object_new_int(p->sinks));
    const int64_t dv = mha_problem_head_dim_v(p);
    if (dv != p->head_dim) json_object_object_add(out, "head_dim_v", json_object_new_int64(dv));
    if (p->layout == MHA_LAYOUT_PAGED)
        json_object_object_add(out, "page_size", json_object_new_int64(p->block_size));
    if (p->layout != MHA_LAYOUT_DENSE)
        json_object_object_add(out, "layout", json_object_new_string(mha_layout_name(p->layout)));
}

mha_status rows_add(rows_file *f, const char *json, int pass, const char *dtype,
                    const char *kv_dtype, const mha_problem *variant, char *why, size_t len) {
    json_object *row = json ? json_tokener_parse(json) : NULL;
    if (!row || !json_object_is_type(row, json_type_object)) {
        json_object_put(row);
        snprintf(why, len, "a row Google Benchmark reported is not a JSON object");
        return MHA_EFORMAT;
    }
    /* the benchmark's own fields, right after its name */
    json_object *out = json_object_new_object();
    json_object_object_foreach(row, key, val) {
        json_object_object_add(out, key, json_object_get(val));
        if (strcmp(key, "name") == 0 && dtype) {
            json_object_object_add(out, "dtype", json_object_new_string(dtype));
            json_object_object_add(out, "kv_dtype",
                                   json_object_new_string(kv_dtype ? kv_dtype : dtype));
        }
        if (strcmp(key, "name") == 0 && variant) add_variant(out, variant);
    }
    json_object_put(row);
    json_object_array_add(f->rows, out);
    if (f->n == f->cap) {
        f->cap = f->cap ? 2 * f->cap : 64;
        f->pass = xrealloc_or_exit(f->pass, (size_t)f->cap, sizeof *f->pass, "sweep");
    }
    f->pass[f->n++] = pass;
    return MHA_OK;
}

void rows_free(rows_file *f) {
    json_object_put(f->root);
    free(f->pass);
    memset(f, 0, sizeof *f);
}

mha_status rows_commit(rows_file *f, mha_out *w, char *why, size_t len) {
    json_object *rows = f->rows;
    /* iteration rows in the order reported (every pass's after the first's),
     * then the first pass's aggregates of names no later pass added to */
    json_object *out = json_object_new_array();
    acc *a = NULL;
    int na = 0;
    unsigned char **dist = NULL;
    const size_t n = json_object_array_length(rows);
    for (size_t i = 0; i < n; i++) {
        json_object *row = json_object_array_get_idx(rows, i);
        const char *name = results_row_str(row, "name");
        if (!name || !results_row_is_iteration(row)) continue;
        const int before = na;
        acc *x = acc_find(&a, &na, name);
        const int k = (int)(x - a);
        if (na > before) {
            dist = xrealloc_or_exit(dist, (size_t)na, sizeof *dist, "sweep");
            dist[k] = NULL;
        }
        if (x->n == x->cap) {
            x->cap = x->cap ? 2 * x->cap : 8;
            x->ns = xrealloc_or_exit(x->ns, (size_t)x->cap, sizeof *x->ns, "sweep");
            x->gf = xrealloc_or_exit(x->gf, (size_t)x->cap, sizeof *x->gf, "sweep");
            dist[k] = xrealloc_or_exit(dist[k], (size_t)x->cap, 1, "sweep");
        }
        json_object *err;
        const int failed =
            json_object_object_get_ex(row, "error_occurred", &err) && json_object_get_boolean(err);
        if (!failed) {
            x->ns[x->n] = results_row_num(row, "real_time", 0) *
                          results_unit_ns(results_row_str(row, "time_unit"));
            x->gf[x->n] = results_row_num(row, "GFLOPS", 0);
            dist[k][x->n] = results_row_num(row, "disturbed", 0) > 0;
            x->disturbed += dist[k][x->n];
            x->extra += f->pass[i] > 0;
            x->n++;
        }
        json_object_array_add(out, json_object_get(row));
    }
    /* renumber repetitions per name over all passes */
    int *seen = xrealloc_or_exit(NULL, (size_t)(na ? na : 1), sizeof *seen, "sweep");
    int *total = xrealloc_or_exit(NULL, (size_t)(na ? na : 1), sizeof *total, "sweep");
    memset(seen, 0, (size_t)(na ? na : 1) * sizeof *seen);
    memset(total, 0, (size_t)(na ? na : 1) * sizeof *total);
    const size_t nout = json_object_array_length(out);
    for (size_t i = 0; i < nout; i++) {
        acc *x = acc_find(&a, &na, results_row_str(json_object_array_get_idx(out, i), "name"));
        total[x - a]++;
    }
    for (size_t i = 0; i < nout; i++) {
        json_object *row = json_object_array_get_idx(out, i);
        acc *x = acc_find(&a, &na, results_row_str(row, "name"));
        if (total[x - a] < 2 && x->extra == 0) continue; /* a lone row keeps what gbench wrote */
        json_object_object_add(row, "repetition_index", json_object_new_int(seen[x - a]++));
        json_object_object_add(row, "repetitions", json_object_new_int(total[x - a]));
    }
    for (size_t i = 0; i < n; i++) { /* aggregates of names without extra rows */
        json_object *row = json_object_array_get_idx(rows, i);
        if (results_row_is_iteration(row) || f->pass[i] > 0) continue;
        const char *rn = results_row_str(row, "run_name");
        int stale = 0;
        for (int k = 0; k < na && rn; k++)
            if (!strcmp(a[k].name, rn)) stale = a[k].extra > 0;
        if (!stale) json_object_array_add(out, json_object_get(row));
    }
    json_object *sum = json_object_new_array();
    for (int k = 0; k < na; k++) json_object_array_add(sum, summary(&a[k], dist[k]));
    json_object_object_add(f->root, "benchmarks", out);
    f->rows = out;
    json_object_object_add(f->root, "mha_rows", sum);
    const char *text =
        json_object_to_json_string_ext(f->root, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED |
                                                    JSON_C_TO_STRING_NOSLASHESCAPE);
    const size_t tl = strlen(text);
    mha_status st = MHA_OK;
    if (lseek(w->fd, 0, SEEK_SET) != 0 || (st = mha_out_write(w, text, tl, why, len)) != MHA_OK ||
        mha_out_write(w, "\n", 1, why, len) != MHA_OK || ftruncate(w->fd, (off_t)tl + 1) != 0) {
        if (st == MHA_OK) snprintf(why, len, "cannot write the result file: %s", strerror(errno));
        st = MHA_EIO;
    }
    for (int k = 0; k < na; k++) {
        free(a[k].name);
        free(a[k].ns);
        free(a[k].gf);
        free(dist[k]);
    }
    free(a);
    free(dist);
    free(seen);
    free(total);
    return st;
}
