/* report.c - the summary of a sweep's result file and its verdict, read
 * from the file alone (the sweep prints it from the file it committed, and
 * `mhabench report FILE` prints the same), so every tool that reads a file
 * gives one answer. The rule (scripts/mha_stats.py is its Python twin):
 * - a row's samples are its repetitions the interference evidence did not
 *   mark disturbed, or all of them when every one was;
 * - per (shape, threads) group the fastest of our kernels (not auto, not a
 *   peer) is the highest median GFLOP/s (equal medians: the larger name),
 *   and tied with it is every other whose 95% median interval (stats.c's
 *   order statistics) reaches the fastest's lower end;
 * - auto agrees where its row (or the row it is an alias of) is the
 *   fastest, tied with it, or within 5% of its median. */
#include <ctype.h>
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report.h"
#include "report_int.h"

#include "fmt_results.h"
#include "stats.h"
#include "util.h"

/* ---- text ------------------------------------------------------------------------ */

/* 1 when a part of a row's name is a variant's (sweep/variants.c's
 * variant_part: w<L>:<R>, cap<C>, sinks, dv<D>, ragged<L>, page<BS>). */
static int variant_name_part(const char *part) {
    if (!strcmp(part, "sinks")) return 1;
    if (!strncmp(part, "page", 4) && isdigit((unsigned char)part[4])) return 1;
    if (!strncmp(part, "ragged", 6) && isdigit((unsigned char)part[6])) return 1;
    if (part[0] == 'w' && (isdigit((unsigned char)part[1]) || part[1] == '-') && strchr(part, ':'))
        return 1;
    if (!strncmp(part, "cap", 3) && (isdigit((unsigned char)part[3]) || part[3] == '.')) return 1;
    return !strncmp(part, "dv", 2) && isdigit((unsigned char)part[2]);
}

/* "B:1/H:8/KV:8/Nq:128/Nkv:128/d:64/causal:0/dtype:bf16" -> "B1 H8 N128 d64 bf16" */
void report_shape_short(const char *key, char *out, size_t len) {
    long long b = 0, h = 0, kv = 0, nq = 0, nkv = 0, d = 0, n = 0, dm = 0;
    int causal = 0;
    char dt[16] = "", kvdt[16] = "", var[96] = "";
    const int layer = strncmp(key, "layer/", 6) == 0;
    for (const char *p = key + (layer ? 6 : 0); *p;) {
        const char *end = strchr(p, '/');
        const size_t l = end ? (size_t)(end - p) : strlen(p);
        char part[64];
        snprintf(part, sizeof part, "%.*s", (int)(l < 63 ? l : 63), p);
        if (variant_name_part(part)) { /* w4096:0, cap50, sinks, dv128: as they are */
            const size_t o = strlen(var);
            snprintf(var + o, sizeof var - o, " %s", part);
        }
        char *c = strchr(part, ':');
        if (c) {
            *c++ = '\0';
            if (!strcmp(part, "B")) b = atoll(c);
            if (!strcmp(part, "H")) h = atoll(c);
            if (!strcmp(part, "KV")) kv = atoll(c);
            if (!strcmp(part, "Nq")) nq = atoll(c);
            if (!strcmp(part, "Nkv")) nkv = atoll(c);
            if (!strcmp(part, "N")) n = atoll(c);
            if (!strcmp(part, "dm")) dm = atoll(c);
            if (!strcmp(part, "d")) d = atoll(c);
            if (!strcmp(part, "causal")) causal = atoi(c);
            if (!strcmp(part, "dtype")) snprintf(dt, sizeof dt, " %s", c);
            if (!strcmp(part, "kv_dtype")) snprintf(kvdt, sizeof kvdt, " kv:%s", c);
        }
        p += l + (end ? 1 : 0);
    }
    if (layer) {
        snprintf(out, len, "layer B%lld N%lld dm%lld H%lld%s%s", b, n, dm, h,
                 causal ? " causal" : "", dt);
        return;
    }
    char kvs[24] = "", seq[48];
    if (kv && kv != h) snprintf(kvs, sizeof kvs, " KV%lld", kv);
    if (nq == nkv)
        snprintf(seq, sizeof seq, "N%lld", nq);
    else
        snprintf(seq, sizeof seq, "Nq%lld Nkv%lld", nq, nkv);
    snprintf(out, len, "B%lld H%lld%s %s d%lld%s%s%s%s", b, h, kvs, seq, d, causal ? " causal" : "",
             var, dt, kvdt);
}

/* The family a group's shape belongs to, for the verdict, its dtypes and
 * the kinds of variant it has (window, softcap, sinks, d_v: a kernel's
 * verdict on dense attention is not mixed with its variants'). */
static void family(const char *key, char *out, size_t len) {
    const char *fam = "prefill";
    if (strncmp(key, "layer/", 6) == 0)
        fam = "the layer";
    else if (strstr(key, "/Nq:1/"))
        fam = "decode";
    else if (strstr(key, "/causal:1"))
        fam = "causal prefill";
    const char *nq = strstr(key, "/Nq:"), *nkv = strstr(key, "/Nkv:");
    if (nq && nkv && strcmp(fam, "decode") != 0 && atoll(nq + 4) != atoll(nkv + 5))
        fam = "cross-attention";
    const char *dt = strstr(key, "/dtype:"), *kvdt = strstr(key, "/kv_dtype:");
    char dts[32] = "fp32", kvs[32] = "";
    if (dt) snprintf(dts, sizeof dts, "%.*s", (int)strcspn(dt + 7, "/"), dt + 7);
    if (kvdt) snprintf(kvs, sizeof kvs, " kv:%.*s", (int)strcspn(kvdt + 10, "/"), kvdt + 10);
    char var[48] = "";
    for (const char *p = strchr(key, '/'); p; p = strchr(p + 1, '/')) {
        char part[64];
        snprintf(part, sizeof part, "%.*s", (int)strcspn(p + 1, "/"), p + 1);
        if (!variant_name_part(part)) continue;
        const char *kind = part[0] == 'w'   ? " window"
                           : part[0] == 'c' ? " softcap"
                           : part[0] == 's' ? " sinks"
                           : part[0] == 'p' ? " paged"
                           : part[0] == 'r' ? " ragged"
                                            : " d_v";
        const size_t o = strlen(var);
        snprintf(var + o, sizeof var - o, "%s", kind);
    }
    snprintf(out, len, "%s %s%s%s", fam, dts, kvs, var);
}

/* The %-of-roof text of a row: of its compute peak, or of its read
 * bandwidth (decode rows, marked b). */
static void roof_text(const rrow *r, char *out, size_t len) {
    const int bw = r->n && r->pbw[0] >= 0;
    const double pk = row_stats(r, r->peak, NULL, NULL);
    const double pct = bw ? row_stats(r, r->pbw, NULL, NULL) : pk > 0 ? 100.0 * row_med(r) / pk : 0;
    /* above 100%: the figure it is of was measured too low (files written
     * before the peaks were retaken, or flagged peak_exceeded) */
    snprintf(out, len, "%.0f%%%s%s", pct, bw ? "b" : "", pct > 100 || r->above ? "!" : "");
}

/* Whether a row reads above its roof (or was flagged so). */
static int above_roof(const rrow *r) {
    char t[32];
    roof_text(r, t, sizeof t);
    return strchr(t, '!') != NULL;
}

static int cmp_group(const void *a, const void *b) {
    const rgroup *x = *(rgroup *const *)a, *y = *(rgroup *const *)b;
    if (x->order != y->order) return x->order < y->order ? -1 : 1;
    return x->threads - y->threads;
}

static int cmp_key(const void *a, const void *b) {
    return strcmp((*(rgroup *const *)a)->key, (*(rgroup *const *)b)->key);
}

static void block(const rfile *f, const rgroup *g, int peers, FILE *o) {
    if (g->win < 0) {
        fprintf(o, "  %-16s %7s %5s %3s", "(none ran)", "", "", "");
    } else {
        char roof[16], tie[8] = "";
        roof_text(&f->r[g->win], roof, sizeof roof);
        if (g->nties) snprintf(tie, sizeof tie, "+%d", g->nties);
        fprintf(o, "  %-16s %7.1f %5s %3s", f->r[g->win].kernel, g->med, roof, tie);
    }
    if (peers) {
        if (g->peer >= 0 && g->win >= 0 && g->peer_med > 0)
            fprintf(o, " %5.2fx%s", g->med / g->peer_med, g->peer_tie ? "~" : " ");
        else
            fprintf(o, " %7s", "-");
    }
}

static void verbose_row(const rfile *f, const rgroup *g, FILE *o) {
    char shp[96];
    report_shape_short(g->shape, shp, sizeof shp);
    fprintf(o, "%s threads=%d:", shp, g->threads);
    if (g->win < 0) {
        fprintf(o, " none of ours ran\n");
        return;
    }
    fprintf(o, " %s %.1f GFLOP/s [%.1f, %.1f]", f->r[g->win].kernel, g->med, g->lo, g->hi);
    for (int t = 0; t < g->nties; t++)
        fprintf(o, "%s%s", t ? ", " : "; tied: ", f->r[g->ties[t]].kernel);
    const int gi = (int)(g - f->g);
    for (int i = 0; i < f->nr; i++) {
        const rrow *r = &f->r[i];
        if (r->group != gi || r->n == 0 || i == g->win) continue;
        if (!strcmp(r->kernel, "naive") || !strncmp(r->kernel, "blas.", 5))
            fprintf(o, "; vs %s %.2fx", r->kernel, g->med / row_med(r));
    }
    if (g->auto_row >= 0) {
        const rrow *a = &f->r[g->auto_row];
        fprintf(o, "; auto %s [%s] %.0f%%", strcmp(a->kernel, "auto") ? a->kernel : "row",
                a->label[0] ? a->label : "", 100.0 * g->auto_share);
    }
    if (g->peer >= 0)
        fprintf(o, "; best peer %s %.1f (ours/peer %.2fx%s)", f->r[g->peer].kernel, g->peer_med,
                g->med / g->peer_med, g->peer_tie ? ", tie" : "");
    fprintf(o, "\n");
}

/* The table: a row per shape, a block per thread count side by side when
 * there are at most two and no peers (else a line per group). */
static void print_table(const rfile *f, rgroup **sorted, int peers, int verbose, FILE *o) {
    int th[2] = {0, 0}, nth = 0, many = 0;
    for (int i = 0; i < f->ng; i++) {
        int seen = 0;
        for (int t = 0; t < nth; t++) seen |= th[t] == f->g[i].threads;
        if (seen) continue;
        if (nth == 2)
            many = 1;
        else
            th[nth++] = f->g[i].threads;
    }
    if (th[0] > th[1] && nth == 2) th[0] ^= th[1], th[1] ^= th[0], th[0] ^= th[1];
    fprintf(o,
            "\nsummary: the fastest of our kernels per shape (median GFLOP/s over the "
            "undisturbed repetitions;\n%%: of the compute peak, %%b: of the read bandwidth; "
            "+N: N more tied (95%% intervals overlap)%s)\n",
            peers ? ";\nvs peer: ours / the best peer, ~ a tie" : "");
    if (verbose) {
        for (int i = 0; i < f->ng; i++) verbose_row(f, sorted[i], o);
        return;
    }
    const int side = !many && !peers && nth == 2;
    if (side) {
        char t0[32], t1[32];
        snprintf(t0, sizeof t0, "%d thread%s", th[0], th[0] == 1 ? "" : "s");
        snprintf(t1, sizeof t1, "%d threads", th[1]);
        fprintf(o, "%-27s  %-36s%s\n", "", t0, t1);
        fprintf(o, "%-27s  %-16s %7s %5s %3s  %-16s %7s %5s %3s\n", "shape", "fastest", "GFLOP/s",
                "%", "tie", "fastest", "GFLOP/s", "%", "tie");
    } else {
        fprintf(o, "%-27s %3s  %-16s %7s %5s %3s%s\n", "shape", "thr", "fastest", "GFLOP/s", "%",
                "tie", peers ? " vs peer" : "");
    }
    for (int i = 0; i < f->ng;) {
        char shp[96];
        report_shape_short(sorted[i]->shape, shp, sizeof shp);
        if (side) {
            fprintf(o, "%-27s", shp);
            const rgroup *b[2] = {NULL, NULL};
            int j = i;
            for (; j < f->ng && strcmp(sorted[j]->shape, sorted[i]->shape) == 0; j++)
                b[sorted[j]->threads == th[1]] = sorted[j];
            for (int t = 0; t < 2; t++) {
                if (b[t])
                    block(f, b[t], 0, o);
                else
                    fprintf(o, "  %-16s %7s %5s %3s", "-", "", "", "");
            }
            fprintf(o, "\n");
            i = j;
        } else {
            const int first = i == 0 || strcmp(sorted[i - 1]->shape, sorted[i]->shape) != 0;
            fprintf(o, "%-27s %3d", first ? shp : "", sorted[i]->threads);
            block(f, sorted[i], peers, o);
            fprintf(o, "\n");
            i++;
        }
    }
}

/* The verdict: per family of shapes and dtype, the kernel that is fastest
 * or tied in most of its groups; whether auto agrees; how disturbed the run
 * was; rows above their peak. */
/* Per family of shapes and dtype: the kernel fastest or tied in most groups. */
static void verdict_families(const rfile *f, rgroup **sorted, FILE *o) {
    char(*fams)[64] = xrealloc_or_exit(NULL, (size_t)(f->ng ? f->ng : 1), 64, "report");
    int nf = 0;
    for (int i = 0; i < f->ng; i++) {
        char fam[64];
        family(sorted[i]->key, fam, sizeof fam);
        int seen = 0;
        for (int j = 0; j < nf; j++) seen |= !strcmp(fams[j], fam);
        if (!seen) snprintf(fams[nf++], 64, "%s", fam);
    }
    int *good = xrealloc_or_exit(NULL, (size_t)(f->nr ? f->nr : 1), sizeof(int), "report");
    int *wins = xrealloc_or_exit(NULL, (size_t)(f->nr ? f->nr : 1), sizeof(int), "report");
    for (int j = 0; j < nf; j++) {
        memset(good, 0, (size_t)f->nr * sizeof(int));
        memset(wins, 0, (size_t)f->nr * sizeof(int));
        int total = 0;
        /* counted per kernel name: the first row of each name holds its count */
        for (int i = 0; i < f->ng; i++) {
            char fam[64];
            family(f->g[i].key, fam, sizeof fam);
            if (strcmp(fam, fams[j]) != 0 || f->g[i].win < 0) continue;
            total++;
            for (int t = -1; t < f->g[i].nties; t++) {
                const char *k = f->r[t < 0 ? f->g[i].win : f->g[i].ties[t]].kernel;
                for (int r = 0; r < f->nr; r++)
                    if (!strcmp(f->r[r].kernel, k)) {
                        good[r]++;
                        wins[r] += t < 0;
                        break;
                    }
            }
        }
        if (!total) continue;
        int best = -1;
        for (int r = 0; r < f->nr; r++)
            if (good[r] && (best < 0 || good[r] > good[best] ||
                            (good[r] == good[best] && wins[r] > wins[best])))
                best = r;
        fprintf(o, "  %-20s %s: fastest or tied in %d of %d (shape, threads)", fams[j],
                f->r[best].kernel, good[best], total);
        if (good[best] < total) { /* the kernel of the other shapes */
            int other = -1;
            for (int r = 0; r < f->nr; r++)
                if (good[r] && r != best && (other < 0 || good[r] > good[other])) other = r;
            if (other >= 0)
                fprintf(o, "; %s in %d", f->r[other].kernel, good[other]);
            else
                fprintf(o, "; not in %d", total - good[best]);
        }
        fprintf(o, "\n");
    }
    free(good);
    free(wins);
    free(fams);
}

/* 1 when a row's shape is in a packed (ragged) or paged layout: the tuning
 * table's classes are dense shapes (variants/classes.c), so `mhabench tune`
 * never measures these and cannot refit auto's choice for them. */
static int layout_untuned(const char *shape) {
    for (const char *p = strchr(shape, '/'); p; p = strchr(p + 1, '/')) {
        char part[64];
        snprintf(part, sizeof part, "%.*s", (int)strcspn(p + 1, "/"), p + 1);
        if (variant_name_part(part) && (part[0] == 'p' || part[0] == 'r')) return 1;
    }
    return 0;
}

/* Lists the n rows where auto runs more than 5% slower than the fastest,
 * dense (untuned 0) or packed and paged (untuned 1): at most 5, then a count. */
static void auto_misses(const rfile *f, rgroup **sorted, int untuned, int n, FILE *o) {
    int shown = 0;
    for (int i = 0; i < f->ng && shown < 5; i++) {
        const rgroup *g = sorted[i];
        if (g->auto_row < 0 || g->win < 0 || g->auto_ok) continue;
        if (layout_untuned(g->shape) != untuned) continue;
        char shp[96];
        report_shape_short(g->shape, shp, sizeof shp);
        const rrow *a = &f->r[g->auto_row];
        fprintf(o, "    %s threads=%d: %.0f%% of %s [%s]\n", shp, g->threads, 100.0 * g->auto_share,
                f->r[g->win].kernel,
                strcmp(a->kernel, "auto") ? a->kernel : (a->label[0] ? a->label : "?"));
        shown++;
    }
    if (n > shown) fprintf(o, "    ... (%d more: `mhabench report --verbose`)\n", n - shown);
}

/* Whether auto agrees, and where it does not: a dense shape's miss is the
 * tuning table's to fix (`mhabench tune`); a packed or paged one's is not,
 * since the table's classes have no layout, so retuning would not change it. */
static void verdict_auto(const rfile *f, rgroup **sorted, FILE *o) {
    int with_auto = 0, bad[2] = {0, 0}; /* [layout_untuned] */
    for (int i = 0; i < f->ng; i++) {
        if (sorted[i]->auto_row < 0 || sorted[i]->win < 0) continue;
        with_auto++;
        if (!sorted[i]->auto_ok) bad[layout_untuned(sorted[i]->shape)]++;
    }
    if (with_auto && !bad[0] && !bad[1])
        fprintf(o, "  auto agrees: fastest, tied or within 5%% in %s %d (shape, threads)\n",
                with_auto == 1 ? "the" : "all", with_auto);
    else if (with_auto) {
        fprintf(o, "  auto is more than 5%% slower than the fastest in %d of %d (shape, threads)\n",
                bad[0] + bad[1], with_auto);
        if (bad[0]) {
            fprintf(o, "    run `mhabench tune` to refit this CPU's table:\n");
            auto_misses(f, sorted, 0, bad[0], o);
        }
        if (bad[1]) {
            fprintf(o, "    in a packed or paged layout, which the tuning table's classes do not\n"
                       "    cover (`mhabench tune` measures dense shapes only):\n");
            auto_misses(f, sorted, 1, bad[1], o);
        }
    }
}

/* The spread of ours / the best peer, and which peer is best most often. */
static void verdict_peers(const rfile *f, FILE *o) {
    int np = 0, ptie = 0,
        *pcount = xrealloc_or_exit(NULL, (size_t)(f->nr ? f->nr : 1), sizeof(int), "report");
    double pmin = 0, pmax = 0;
    memset(pcount, 0, (size_t)f->nr * sizeof(int));
    for (int i = 0; i < f->ng; i++) {
        const rgroup *g = &f->g[i];
        if (g->peer < 0 || g->win < 0 || g->peer_med <= 0) continue;
        const double x = g->med / g->peer_med;
        pmin = np == 0 || x < pmin ? x : pmin;
        pmax = np == 0 || x > pmax ? x : pmax;
        np++;
        ptie += g->peer_tie;
        for (int r = 0; r < f->nr; r++)
            if (!strcmp(f->r[r].kernel, f->r[g->peer].kernel)) {
                pcount[r]++;
                break;
            }
    }
    if (np) {
        int top = 0;
        for (int r = 1; r < f->nr; r++) top = pcount[r] > pcount[top] ? r : top;
        fprintf(o,
                "  against the best peer: ours %.2fx to %.2fx in %d (shape, threads)%s (%d "
                "tied);\n    the best peer most often: %s (%d)\n",
                pmin, pmax, np, "", ptie, f->r[top].kernel, pcount[top]);
    }
    free(pcount);
}

/* A thread count slower than one thread; how disturbed the run was; the
 * figures above their roof. */
static void verdict_host(const rfile *f, rgroup **sorted, FILE *o) {
    for (int i = 0; i < f->ng; i++) {
        const rgroup *g = sorted[i];
        if (g->threads <= 1 || g->win < 0) continue;
        for (int j = 0; j < f->ng; j++) {
            const rgroup *h = &f->g[j];
            if (h->threads == 1 && h->win >= 0 && !strcmp(h->shape, g->shape) && g->hi < h->med) {
                char shp[96];
                report_shape_short(g->shape, shp, sizeof shp);
                fprintf(o, "  %s: %d threads SLOWER than 1 (%.1f against %.1f GFLOP/s)\n", shp,
                        g->threads, g->med, h->med);
            }
        }
    }
    const double share = f->reps ? (double)f->disturbed / f->reps : 0;
    if (f->steady)
        fprintf(o,
                "  a steady BACKGROUND: other processes held the cores all run (the file's\n"
                "    mha_background); %d of %d repetitions were bursts above it, left out: the\n"
                "    choices and an A/B against a run under the same load hold, the figures\n"
                "    are slowed by it and do not\n",
                f->disturbed, f->reps);
    else if (share < 0.1)
        fprintf(o, "  a quiet run: %d of %d repetitions disturbed (%.0f%%); the figures stand\n",
                f->disturbed, f->reps, 100 * share);
    else if (share <= 0.25)
        fprintf(o,
                "  a partly busy run: %d of %d repetitions disturbed (%.0f%%), left out of\n"
                "    the medians; ties are wider than on a quiet host\n",
                f->disturbed, f->reps, 100 * share);
    else
        fprintf(o,
                "  a BUSY host: %d of %d repetitions disturbed (%.0f%%): the choices above\n"
                "    hold where they are not ties, the figures do not; rerun in a quieter hour\n"
                "    before keeping them\n",
                f->disturbed, f->reps, 100 * share);
    int nabove = 0;
    for (int i = 0; i < f->ng; i++) nabove += f->g[i].win >= 0 && above_roof(&f->r[f->g[i].win]);
    if (nabove)
        fprintf(o,
                "  %d of the fastest rows (marked !) read above the peak or bandwidth they are\n"
                "    judged against: that figure was measured too low, it is not efficiency\n",
                nabove);
}

static void print_verdict(const rfile *f, rgroup **sorted, FILE *o) {
    fprintf(o, "\nverdict:\n");
    verdict_families(f, sorted, o);
    verdict_auto(f, sorted, o);
    verdict_peers(f, o);
    verdict_host(f, sorted, o);
}

int report_file(const char *path, report_mode mode, FILE *o) {
    rfile f;
    memset(&f, 0, sizeof f);
    const int rc = report_load(path, &f);
    if (rc != 0) {
        report_free(&f);
        return rc;
    }
    rgroup **sorted = xrealloc_or_exit(NULL, (size_t)(f.ng ? f.ng : 1), sizeof *sorted, "report");
    for (int i = 0; i < f.ng; i++) sorted[i] = &f.g[i];
    qsort(sorted, (size_t)f.ng, sizeof *sorted, cmp_group);
    int peers = 0;
    for (int i = 0; i < f.ng; i++) peers |= f.g[i].peer >= 0;
    if (mode == REPORT_DECISIONS) { /* sorted by group, as the scripts print them */
        qsort(sorted, (size_t)f.ng, sizeof *sorted, cmp_key);
        for (int i = 0; i < f.ng; i++) {
            const rgroup *g = sorted[i];
            if (g->win < 0) continue;
            fprintf(o, "%s\t%s\t", g->key, f.r[g->win].kernel);
            /* the tied ones sorted by name, as the scripts print them */
            const char **names =
                xrealloc_or_exit(NULL, (size_t)(g->nties ? g->nties : 1), sizeof *names, "report");
            for (int t = 0; t < g->nties; t++) names[t] = f.r[g->ties[t]].kernel;
            for (int a = 1; a < g->nties; a++)
                for (int b = a; b > 0 && strcmp(names[b - 1], names[b]) > 0; b--) {
                    const char *s = names[b];
                    names[b] = names[b - 1];
                    names[b - 1] = s;
                }
            for (int t = 0; t < g->nties; t++) fprintf(o, "%s%s", t ? "," : "", names[t]);
            fprintf(o, "%s\n", g->nties ? "" : "-");
            free(names);
        }
    } else {
        print_table(&f, sorted, peers, mode == REPORT_VERBOSE, o);
        print_verdict(&f, sorted, o);
    }
    free(sorted);
    report_free(&f);
    return 0;
}

static void report_usage(FILE *f) {
    fputs("usage: mhabench report [--verbose | --decisions] RESULTS.json\n"
          "The summary `mhabench sweep` prints at its end, from a result file: per shape and\n"
          "thread count the fastest of our kernels (median GFLOP/s over the undisturbed\n"
          "repetitions), how many are tied with it (95% median intervals overlapping), and the\n"
          "verdict: the kernel to use per family of shapes and dtype, whether auto agrees,\n"
          "how disturbed the run was.\n"
          "  --verbose    a line per shape and thread count with the tied kernels, auto's\n"
          "               choice, the ratio to naive / blas and to the best peer\n"
          "  --decisions  one line per group: <shape/threads> TAB <fastest> TAB <tied,...|->\n"
          "               (what scripts/summarize.py --decisions and plot_results.py\n"
          "               --decisions print for the same file)\n"
          "Exit status: 0 ok, 2 usage or input error.\n",
          f);
}

int cmd_report(int argc, char **argv) {
    report_mode mode = REPORT_SHORT;
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            report_usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--verbose")) {
            mode = REPORT_VERBOSE;
        } else if (!strcmp(argv[i], "--decisions")) {
            mode = REPORT_DECISIONS;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            errorf("report: unknown option '%s'", argv[i]);
            report_usage(stderr);
            return EXIT_USAGE;
        } else if (path) {
            errorf("report: one result file, not '%s' and '%s'", path, argv[i]);
            return EXIT_USAGE;
        } else {
            path = argv[i];
        }
    }
    if (!path) {
        errorf("report: which result file? (usage: mhabench report RESULTS.json)");
        return EXIT_USAGE;
    }
    return report_file(path, mode, stdout);
}
