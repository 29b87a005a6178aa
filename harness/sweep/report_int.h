/* report_int.h - a sweep result file read into groups and decided
 * (report_read.c), for the summary and verdict that print it (report.c). */
#ifndef MHA_HARNESS_SWEEP_REPORT_INT_H
#define MHA_HARNESS_SWEEP_REPORT_INT_H

#include <stdio.h>

#define AUTO_WITHIN 0.95 /* auto within 5% of the fastest agrees */

typedef struct {
    char *name, *kernel;
    int group;
    double *gf, *peak, *pbw;
    unsigned char *dist;
    int n, cap;
    int above; /* repetitions flagged above their peak (peak_exceeded) */
    char label[200];
} rrow;

typedef struct {
    char *key, *shape; /* the name without the kernel; ... and without threads */
    int threads, order;
    /* the decision */
    int win, nties, *ties;
    double med, lo, hi;
    int auto_row, auto_ok; /* -1: no auto */
    double auto_share;
    int peer;
    double peer_med;
    int peer_tie;
} rgroup;

typedef struct {
    rrow *r;
    int nr, capr;
    rgroup *g;
    int ng, capg;
    int reps, disturbed, above;
    int steady; /* the context's mha_background says a steady background (background.c) */
} rfile;

#define grow(p, n, cap)                                                                            \
    do {                                                                                           \
        if ((n) == (cap)) {                                                                        \
            (cap) = (cap) ? 2 * (cap) : 16;                                                        \
            (p) = xrealloc_or_exit((p), (size_t)(cap), sizeof *(p), "report");                     \
        }                                                                                          \
    } while (0)

/* Our kernels (not auto, not a peer): the fastest is chosen among these. */
int is_candidate(const char *kernel);
/* Median of x (one value per repetition of r) over the repetitions that
 * count, and its 95% interval (lo, hi may be NULL). */
double row_stats(const rrow *r, const double *x, double *lo, double *hi);
double row_med(const rrow *r);
/* Reads path into f and decides every group. Returns 0, or 2 after a message. */
int report_load(const char *path, rfile *f);
void report_free(rfile *f);

#endif
