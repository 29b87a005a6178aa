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

/* ---- host drift and same-build noise (compare's regression gate) ---------
 * Between two sweeps minutes apart a shared host drifts by 5-8%, and the
 * drift hits every benchmark alike. Given x[i] = log(new median / base
 * median) over n benchmarks, the common drift is their median (robust: up to
 * half the benchmarks may have really changed); the residuals x[i] - drift
 * spread like same-build noise, and their robust sigma (1.4826 x the median
 * absolute deviation, which equals the standard deviation for normal noise)
 * measures it. Fewer than STATS_DRIFT_MIN benchmarks: no estimate. */
enum { STATS_DRIFT_MIN = 5 };
/* The median of x (n values, not modified); 0 when n < STATS_DRIFT_MIN. */
double stats_common_drift(const double *x, int n);
/* 1.4826 x median |x[i] - median(x)| (x not modified); 0 when n < 2. */
double stats_robust_sigma(const double *x, int n);
/* The regression threshold in percent derived from residual log changes:
 * STATS_THRESHOLD_K robust sigmas, clamped to [STATS_THRESHOLD_MIN,
 * STATS_THRESHOLD_MAX]; the fallback when there are too few residuals to
 * measure the noise. *sigma_pct (may be NULL) gets the sigma in percent. */
#define STATS_THRESHOLD_K 4.0
#define STATS_THRESHOLD_MIN 2.0
#define STATS_THRESHOLD_MAX 10.0
double stats_derived_threshold(const double *resid, int n, double fallback, double *sigma_pct);

/* The shift between two samples of times, in percent of base: the
 * Hodges-Lehmann estimate (the median of the pairwise log ratios new_j /
 * base_i, returned) and its distribution-free interval at confidence conf
 * (order statistics of the same ratios at the rank-sum test's critical
 * value, normal approximation): the effect and interval bisect and compare
 * report. Allocates m*n doubles; NaN when a sample is empty. */
double stats_shift_interval(const double *base, int m, const double *new, int n, double conf,
                            double *lo, double *hi);

/* The Mann-Whitney U test of base (m values) against new (n values),
 * two-sided: exact (every assignment of the pooled doubled midranks counted,
 * ties included) when both have at most STATS_EXACT_MAX values, else the
 * normal approximation with tie and continuity correction. */
enum { STATS_EXACT_MAX = 20 };
typedef struct {
    double u;  /* U of the NEW sample: pairs new > base, ties count 1/2 */
    double p;  /* two-sided p-value */
    int exact; /* 1: exact permutation distribution, 0: normal approximation */
} stats_utest;
stats_utest stats_mann_whitney(const double *base, int m, const double *new, int n);

/* Holm's step-down at family-wise level alpha over n p-values: the values
 * sorted ascending are held to alpha / n, alpha / (n-1), ... until the first
 * that misses its level; it and every later one are held to that level (and
 * miss it). level[i] is the level p[i] is held to: p[i] < level[i] is a
 * rejection. */
void stats_holm_levels(const double *p, int n, double alpha, double *level);

#endif
