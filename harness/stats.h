/* stats.h - the harness's one clock, one random number generator, one median
 * and its interval, and the one tie rule: every command that times, fills
 * inputs or summarises samples uses these, so a change to how we measure is
 * made once. */
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

/* A distribution-free confidence interval for the median of n >= 1 sorted
 * samples: [x[k-1], x[n-k]] with the largest k whose coverage
 * 1 - 2 P(Binomial(n, 1/2) <= k - 1) is at least conf (no assumption on the
 * samples' distribution: a bimodal host still gets an honest interval).
 * With too few samples for conf (n < 6 at 95%) the whole range is returned.
 * Returns the coverage the interval has. */
double median_interval(const double *x, int n, double conf, double *lo, double *hi);

/* How two measured quantities compare once their intervals are taken into
 * account: the larger only when the intervals do not overlap, else a tie. */
typedef enum { STATS_TIE = 0, STATS_A_LARGER = 1, STATS_B_LARGER = -1 } stats_order;
stats_order intervals_order(double a_lo, double a_hi, double b_lo, double b_hi);

#endif
