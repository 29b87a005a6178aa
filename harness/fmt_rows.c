/* fmt_rows.c - follow-up passes appended to a sweep's result file and the
 * per-benchmark summary (fmt_rows.h). */
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
#include "stats.h"
#include "util.h"

static json_object *parse_out(const mha_out *w, char *why, size_t len) {
    size_t n;
    char *text = results_out_read(w, &n, why, len);
    if (!text) return NULL;
    json_object *root = json_tokener_parse(text);
    free(text);
    json_object *rows;
    if (!root || !json_object_object_get_ex(root, "benchmarks", &rows) ||
        !json_object_is_type(rows, json_type_array)) {
        json_object_put(root);
        snprintf(why, len, "a pass's result file is not Google Benchmark JSON");
        return NULL;
    }
    return root;
}

static double num_of(json_object *o, const char *key, double dflt) {
    json_object *v;
    if (!json_object_object_get_ex(o, key, &v) ||
        !(json_object_is_type(v, json_type_double) || json_object_is_type(v, json_type_int)))
        return dflt;
    return json_object_get_double(v);
}

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

mha_status rows_finish(mha_out *main, mha_out *passes, int npasses, char *why, size_t len) {
    json_object *root = parse_out(main, why, len), *rows;
    if (!root) return MHA_EFORMAT;
    json_object_object_get_ex(root, "benchmarks", &rows);
    /* names that got rows in a later pass lose their aggregates (stale) */
    json_object *out = json_object_new_array();
    json_object **pr = xrealloc_or_exit(NULL, (size_t)(npasses ? npasses : 1), sizeof *pr, "sweep");
    for (int p = 0; p < npasses; p++) {
        pr[p] = parse_out(&passes[p], why, len);
        if (!pr[p]) {
            for (int q = 0; q < p; q++) json_object_put(pr[q]);
            free(pr);
            json_object_put(root);
            json_object_put(out);
            return MHA_EFORMAT;
        }
    }
    acc *a = NULL;
    int na = 0;
    unsigned char **dist = NULL;
    /* every iteration row, main's first, then each pass's, into out */
    for (int p = -1; p < npasses; p++) {
        json_object *src;
        json_object_object_get_ex(p < 0 ? root : pr[p], "benchmarks", &src);
        const size_t n = json_object_array_length(src);
        for (size_t i = 0; i < n; i++) {
            json_object *row = json_object_array_get_idx(src, i);
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
            const int failed = json_object_object_get_ex(row, "error_occurred", &err) &&
                               json_object_get_boolean(err);
            if (!failed) {
                x->ns[x->n] = num_of(row, "real_time", 0) *
                              results_unit_ns(results_row_str(row, "time_unit"));
                x->gf[x->n] = num_of(row, "GFLOPS", 0);
                dist[k][x->n] = num_of(row, "disturbed", 0) > 0;
                x->disturbed += dist[k][x->n];
                x->extra += p >= 0;
                x->n++;
            }
            json_object *copy = NULL;
            json_object_deep_copy(row, &copy, NULL);
            json_object_array_add(out, copy);
        }
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
    /* aggregates of names without extra rows stay (they still describe them) */
    const size_t nmain = json_object_array_length(rows);
    for (size_t i = 0; i < nmain; i++) {
        json_object *row = json_object_array_get_idx(rows, i);
        if (results_row_is_iteration(row)) continue;
        const char *rn = results_row_str(row, "run_name");
        int stale = 0;
        for (int k = 0; k < na && rn; k++)
            if (!strcmp(a[k].name, rn)) stale = a[k].extra > 0;
        if (stale) continue;
        json_object *copy = NULL;
        json_object_deep_copy(row, &copy, NULL);
        json_object_array_add(out, copy);
    }
    json_object *sum = json_object_new_array();
    for (int k = 0; k < na; k++) json_object_array_add(sum, summary(&a[k], dist[k]));
    json_object_object_add(root, "benchmarks", out);
    json_object_object_add(root, "mha_rows", sum);
    const char *text = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY |
                                                                JSON_C_TO_STRING_NOSLASHESCAPE);
    const size_t tl = strlen(text);
    mha_status st = MHA_OK;
    if (lseek(main->fd, 0, SEEK_SET) != 0 ||
        (st = mha_out_write(main, text, tl, why, len)) != MHA_OK ||
        mha_out_write(main, "\n", 1, why, len) != MHA_OK ||
        ftruncate(main->fd, (off_t)tl + 1) != 0) {
        if (st == MHA_OK) snprintf(why, len, "cannot rewrite the result file: %s", strerror(errno));
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
    for (int p = 0; p < npasses; p++) json_object_put(pr[p]);
    free(pr);
    json_object_put(root);
    return st;
}
