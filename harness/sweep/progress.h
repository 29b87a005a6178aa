/* progress.h - what the sweep says while it runs (harness/sweep/progress.c):
 * by default one line per finished (shape, threads) group, or a bar
 * redrawn in place on a terminal; --quiet nothing; --verbose a line per
 * repetition (the caller prints those). Each line carries what is done, the
 * time taken and left (from the rows' estimated costs, scaled by the rate
 * measured so far) and the disturbed share so far. */
#ifndef MHA_HARNESS_SWEEP_PROGRESS_H
#define MHA_HARNESS_SWEEP_PROGRESS_H

#include <stddef.h>

typedef enum { PROGRESS_NORMAL = 0, PROGRESS_QUIET = 1, PROGRESS_VERBOSE = 2 } progress_mode;

typedef struct {
    progress_mode mode;
    int tty; /* stdout is a terminal: the bar instead of lines (normal mode) */
    double t0, cost_total, cost_done;
    int rows_total, rows_done, disturbed;
    int ngroups, groups_done, groups_planned;
    int *left; /* rows still to come per group in this pass */
    int bar_drawn;
    int quiet_lines; /* a follow-up pass: no group lines, one at its end */
} progress;

/* A pass of ngroups groups starts (the first, or a follow-up: set
 * p->quiet_lines after it for one line at the end instead of one a group). */
void progress_begin(progress *p, progress_mode mode, int ngroups);
/* One row (registration) of group g costing about cost seconds is planned. */
void progress_plan(progress *p, int g, double cost);
/* A row of group g finished. Returns 1 when the caller should print the
 * group's line (normal mode, not a terminal, the group's last row), after
 * which it calls progress_prefix for the line's start. */
int progress_row(progress *p, int g, double cost, int disturbed);
/* "[12/56] 0:42, about 1:30 left, 3% disturbed" for the line the caller prints. */
void progress_prefix(const progress *p, char *buf, size_t len);
/* The pass ended: the bar's line closed, the per-group counts freed. */
void progress_end(progress *p);
/* "about 3 min" / "about 40 s" for an estimate in seconds. */
void progress_duration(double s, char *buf, size_t len);

#endif
