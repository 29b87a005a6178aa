/* stats.h - the harness's one clock, one random number generator and one
 * median: every command that times, fills inputs or summarises samples uses
 * these, so a change to how we measure is made once. */
#ifndef MHA_HARNESS_STATS_H
#define MHA_HARNESS_STATS_H

#include <stdint.h>

/* Seconds on CLOCK_MONOTONIC (never steps with the wall clock). */
double now_s(void);

/* splitmix64: advances *state and returns the next 64 random bits. The
 * harness's only generator; seeded streams repeat exactly. */
uint64_t splitmix64(uint64_t *state);

/* Uniform in [-1, 1) from the top 24 bits of the next splitmix64 value
 * (exactly representable as float). */
float uniform_pm1(uint64_t *state);

/* qsort comparator for doubles, ascending (NaN sorts as equal to anything). */
int cmp_double(const void *a, const void *b);

/* Median of n >= 1 sorted values (the mean of the middle two when n is even). */
double median_sorted(const double *x, int n);

/* Sorts x[0..n) in place and returns its median; 0 when n == 0. */
double median_inplace(double *x, int n);

#endif
