/* report_read.c - a sweep result file read into (shape, threads) groups and
 * decided by the one rule (report.c's header says it). */
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report_int.h"

#include "fmt_results.h"
#include "stats.h"
#include "util.h"

int is_candidate(const char *kernel) {
    return strcmp(kernel, "auto") != 0 && strncmp(kernel, "peer.", 5) != 0;
}

static int group_of(rfile *f, const char *key) {
    for (int i = 0; i < f->ng; i++)
        if (strcmp(f->g[i].key, key) == 0) return i;
    grow(f->g, f->ng, f->capg);
    rgroup *g = &f->g[f->ng];
    memset(g, 0, sizeof *g);
    g->key = xstrdup_or_exit(key, "report");
    g->shape = xstrdup_or_exit(key, "report");
    char *t = strstr(g->shape, "/threads:");
    g->threads = t ? atoi(t + 9) : 1;
    if (t) *t = '\0';
    g->order = f->ng;
    for (int i = 0; i < f->ng; i++) /* groups of a shape share its first one's place */
        if (strcmp(f->g[i].shape, g->shape) == 0) {
            g->order = f->g[i].order;
            break;
        }
    g->win = g->auto_row = g->peer = -1;
    return f->ng++;
}

static rrow *row_of(rfile *f, const char *name) {
    for (int i = 0; i < f->nr; i++)
        if (strcmp(f->r[i].name, name) == 0) return &f->r[i];
    /* kernel: the first part, or the second of a layer row */
    const int layer = strncmp(name, "layer/", 6) == 0;
    const char *k = layer ? name + 6 : name;
    const char *slash = strchr(k, '/');
    if (!slash) return NULL;
    char key[512];
    snprintf(key, sizeof key, "%s%s", layer ? "layer/" : "", slash + 1);
    const int g = group_of(f, key);
    grow(f->r, f->nr, f->capr);
    rrow *r = &f->r[f->nr++];
    memset(r, 0, sizeof *r);
    r->name = xstrdup_or_exit(name, "report");
    r->kernel = xstrdup_or_exit(k, "report");
    r->kernel[slash - k] = '\0';
    r->group = g;
    return r;
}

static void add_sample(rrow *r, json_object *row) {
    if (r->n == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 8;
        r->gf = xrealloc_or_exit(r->gf, (size_t)r->cap, sizeof *r->gf, "report");
        r->peak = xrealloc_or_exit(r->peak, (size_t)r->cap, sizeof *r->peak, "report");
        r->pbw = xrealloc_or_exit(r->pbw, (size_t)r->cap, sizeof *r->pbw, "report");
        r->dist = xrealloc_or_exit(r->dist, (size_t)r->cap, sizeof *r->dist, "report");
    }
    const double gf = results_row_num(row, "GFLOPS", 0), pp = results_row_num(row, "pct_peak", 0);
    r->gf[r->n] = gf;
    r->peak[r->n] = results_row_num(row, "peak", pp > 0 ? 100.0 * gf / pp : 0);
    r->pbw[r->n] = results_row_num(row, "pct_bw", -1);
    r->dist[r->n] = results_row_num(row, "disturbed", 0) > 0;
    r->above += results_row_num(row, "peak_exceeded", 0) > 0;
    r->n++;
}

/* The values of x (one per repetition of r) that count, sorted into out. */
static int counted(const rrow *r, const double *x, double *out) {
    int clean = 0, n = 0;
    for (int i = 0; i < r->n; i++) clean += !r->dist[i];
    for (int i = 0; i < r->n; i++)
        if (!r->dist[i] || clean == 0) out[n++] = x[i];
    median_inplace(out, n);
    return n;
}

double row_stats(const rrow *r, const double *x, double *lo, double *hi) {
    double *s = xrealloc_or_exit(NULL, (size_t)(r->n ? r->n : 1), sizeof *s, "report");
    const int n = counted(r, x, s);
    double med = 0, l = 0, h = 0;
    if (n > 0) {
        med = median_sorted(s, n);
        median_interval(s, n, 0.95, &l, &h);
    }
    free(s);
    if (lo) *lo = l;
    if (hi) *hi = h;
    return med;
}

double row_med(const rrow *r) {
    return row_stats(r, r->gf, NULL, NULL);
}

/* "auto/<...> = <row>; ..." (the context's mha_auto_rows): auto rows not
 * measured twice, each an alias of the row it equals. */
static void read_aliases(rfile *f, json_object *ctx) {
    json_object *v;
    if (!ctx || !json_object_object_get_ex(ctx, "mha_auto_rows", &v) ||
        !json_object_is_type(v, json_type_string))
        return;
    const char *s = json_object_get_string(v);
    while (s && *s) {
        const char *end = strstr(s, "; ");
        const size_t len = end ? (size_t)(end - s) : strlen(s);
        char item[700];
        snprintf(item, sizeof item, "%.*s", (int)len, s);
        char *eq = strstr(item, " = ");
        if (eq) {
            *eq = '\0';
            for (int i = 0; i < f->nr; i++)
                if (strcmp(f->r[i].name, eq + 3) == 0) {
                    rgroup *g = &f->g[f->r[i].group];
                    if (g->auto_row < 0) g->auto_row = i;
                }
        }
        s = end ? end + 2 : NULL;
    }
}

static void decide(rfile *f, rgroup *g) {
    const int gi = (int)(g - f->g);
    for (int i = 0; i < f->nr; i++) {
        const rrow *r = &f->r[i];
        if (r->group != gi || r->n == 0 || !is_candidate(r->kernel)) continue;
        const double m = row_med(r);
        if (g->win < 0 || m > g->med || (m == g->med && strcmp(r->kernel, f->r[g->win].kernel) > 0))
            g->win = i, g->med = m;
    }
    g->ties = xrealloc_or_exit(NULL, (size_t)(f->nr ? f->nr : 1), sizeof(int), "report");
    if (g->win < 0) return;
    row_stats(&f->r[g->win], f->r[g->win].gf, &g->lo, &g->hi);
    for (int i = 0; i < f->nr; i++) {
        const rrow *r = &f->r[i];
        if (r->group != gi || r->n == 0 || i == g->win) continue;
        double lo, hi;
        const double m = row_stats(r, r->gf, &lo, &hi);
        if (is_candidate(r->kernel)) {
            if (hi >= g->lo) g->ties[g->nties++] = i;
        } else if (strcmp(r->kernel, "auto") == 0) {
            g->auto_row = i;
        } else if (g->peer < 0 || m > g->peer_med) {
            g->peer = i, g->peer_med = m,
            g->peer_tie = intervals_order(g->lo, g->hi, lo, hi) == STATS_TIE;
        }
    }
    if (g->auto_row >= 0) {
        const rrow *a = &f->r[g->auto_row];
        double lo, hi;
        const double m = row_stats(a, a->gf, &lo, &hi);
        int tied = g->auto_row == g->win;
        for (int t = 0; t < g->nties; t++) tied |= g->ties[t] == g->auto_row;
        g->auto_share = g->med > 0 ? m / g->med : 0;
        g->auto_ok = tied || hi >= g->lo || g->auto_share >= AUTO_WITHIN;
    }
}

void report_free(rfile *f) {
    for (int i = 0; i < f->nr; i++) {
        free(f->r[i].name);
        free(f->r[i].kernel);
        free(f->r[i].gf);
        free(f->r[i].peak);
        free(f->r[i].pbw);
        free(f->r[i].dist);
    }
    for (int i = 0; i < f->ng; i++) {
        free(f->g[i].key);
        free(f->g[i].shape);
        free(f->g[i].ties);
    }
    free(f->r);
    free(f->g);
}

/* Loads path into f. Returns 0, or 2 after a message. */
int report_load(const char *path, rfile *f) {
    json_object *root = results_load_json("report", path), *rows, *ctx = NULL;
    if (!root) return EXIT_USAGE;
    if (!json_object_is_type(root, json_type_object) ||
        !json_object_object_get_ex(root, "benchmarks", &rows) ||
        !json_object_is_type(rows, json_type_array)) {
        errorf_esc("report: %s: no \"benchmarks\" array (not a Google Benchmark result file)",
                   path);
        json_object_put(root);
        return EXIT_USAGE;
    }
    json_object_object_get_ex(root, "context", &ctx);
    const size_t n = json_object_array_length(rows);
    for (size_t i = 0; i < n; i++) {
        json_object *row = json_object_array_get_idx(rows, i), *v;
        if (!json_object_is_type(row, json_type_object) || !results_row_is_iteration(row)) continue;
        if (json_object_object_get_ex(row, "error_occurred", &v) && json_object_get_boolean(v))
            continue;
        const char *name = results_row_str(row, "name");
        rrow *r = name ? row_of(f, name) : NULL;
        if (!r) continue;
        add_sample(r, row);
        const char *label = results_row_str(row, "label");
        if (label) snprintf(r->label, sizeof r->label, "%s", label);
        f->reps++;
        f->disturbed += r->dist[r->n - 1];
        f->above += results_row_num(row, "peak_exceeded", 0) > 0;
    }
    read_aliases(f, json_object_is_type(ctx, json_type_object) ? ctx : NULL);
    f->steady = results_background_steady(ctx);
    json_object_put(root);
    for (int i = 0; i < f->ng; i++) decide(f, &f->g[i]);
    return 0;
}
