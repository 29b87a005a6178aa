/* progress.c - the sweep's progress lines and bar (progress.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "progress.h"

#include "stats.h"
#include "util.h"

void progress_begin(progress *p, progress_mode mode, int ngroups) {
    memset(p, 0, sizeof *p);
    p->mode = mode;
    p->tty = isatty(STDOUT_FILENO);
    p->t0 = now_s();
    p->ngroups = ngroups;
    p->left = xrealloc_or_exit(NULL, (size_t)(ngroups > 0 ? ngroups : 1), sizeof *p->left, "sweep");
    memset(p->left, 0, (size_t)(ngroups > 0 ? ngroups : 1) * sizeof *p->left);
}

void progress_plan(progress *p, int g, double cost) {
    if (g < 0 || g >= p->ngroups) return;
    p->groups_planned += p->left[g] == 0;
    p->left[g]++;
    p->rows_total++;
    p->cost_total += cost;
}

static void clock_text(double s, char *buf, size_t len) {
    const long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, len, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(buf, len, "%ld:%02ld", t / 60, t % 60);
}

void progress_duration(double s, char *buf, size_t len) {
    if (s < 90)
        snprintf(buf, len, "about %.0f s", s < 1 ? 1 : s);
    else
        snprintf(buf, len, "about %.0f min", s / 60);
}

void progress_prefix(const progress *p, char *buf, size_t len) {
    const double el = now_s() - p->t0;
    char e[32], l[48] = "";
    clock_text(el, e, sizeof e);
    if (p->cost_done > 0 && p->rows_done < p->rows_total) {
        char r[32];
        /* the rows' estimated costs, scaled by the rate measured so far */
        clock_text(el * (p->cost_total - p->cost_done) / p->cost_done, r, sizeof r);
        snprintf(l, sizeof l, ", ~%s left", r);
    }
    snprintf(buf, len, "[%d/%d] %s%s, %d%% disturbed", p->groups_done, p->groups_planned, e, l,
             p->rows_done ? (int)(100.0 * p->disturbed / p->rows_done + 0.5) : 0);
}

int progress_row(progress *p, int g, double cost, int disturbed) {
    p->rows_done++;
    p->cost_done += cost;
    p->disturbed += disturbed != 0;
    int finished = 0;
    if (g >= 0 && g < p->ngroups && p->left[g] > 0 && --p->left[g] == 0) {
        p->groups_done++;
        finished = 1;
    }
    if (p->mode != PROGRESS_NORMAL) return 0;
    if (p->tty) { /* the bar, redrawn in place */
        char pre[128];
        progress_prefix(p, pre, sizeof pre);
        const int width = 24, fill = p->rows_total ? width * p->rows_done / p->rows_total : 0;
        char bar[32];
        for (int i = 0; i < width; i++) bar[i] = i < fill ? '#' : '.';
        bar[width] = '\0';
        printf("\r%s %3d%% %s   ", bar, p->rows_total ? 100 * p->rows_done / p->rows_total : 0,
               pre);
        fflush(stdout);
        p->bar_drawn = 1;
        return 0;
    }
    return finished && !p->quiet_lines;
}

void progress_end(progress *p) {
    if (p->bar_drawn) {
        printf("\n");
        fflush(stdout);
    } else if (p->quiet_lines && p->mode == PROGRESS_NORMAL && p->rows_done) {
        char pre[128];
        progress_prefix(p, pre, sizeof pre);
        printf("%s  pass done\n", pre);
        fflush(stdout);
    }
    free(p->left);
    p->left = NULL;
}
