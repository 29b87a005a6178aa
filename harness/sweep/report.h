/* report.h - the sweep's summary and verdict, computed from a result file
 * (harness/sweep/report.c): the one rule the summary, `mhabench report`,
 * scripts/summarize.py and scripts/plot_results.py share (scripts/mha_stats.py
 * is its Python twin), so a file gives one answer whichever tool reads it. */
#ifndef MHA_HARNESS_SWEEP_REPORT_H
#define MHA_HARNESS_SWEEP_REPORT_H

#include <stdio.h>

/* How much to print. */
typedef enum {
    REPORT_SHORT = 0,    /* the table (thread counts side by side) and the verdict */
    REPORT_VERBOSE = 1,  /* ... plus every tie, auto's choice, vs naive / blas per row */
    REPORT_DECISIONS = 2 /* one line per group: "<group>\t<fastest>\t<tied,...|->" */
} report_mode;

/* Prints the summary of the result file at path in the given mode to f.
 * Returns 0, or 2 after a message (unreadable or not a result file). */
int report_file(const char *path, report_mode mode, FILE *f);

/* A group's key (a row name without its kernel and threads:
 * "B:1/H:8/KV:8/Nq:128/Nkv:128/d:64/causal:0") as the summary writes it:
 * "B1 H8 N128 d64" (KV, Nq/Nkv, causal, dtypes where they differ). */
void report_shape_short(const char *key, char *out, size_t len);

#endif
