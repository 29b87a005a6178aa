/* stats.c - the harness's clock, generator and median (stats.h). */
#include "stats.h"

#include "util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

float uniform_pm1(uint64_t *state) {
    /* x / 2^24 * 2 - 1 is exact in double for x < 2^24, so this is the same
     * number whichever way the scaling is written. */
    return (float)((double)(splitmix64(state) >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}

int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double median_sorted(const double *x, int n) {
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

double median_inplace(double *x, int n) {
    if (n <= 0) return 0;
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    return median_sorted(x, n);
}

double median_interval(const double *x, int n, double conf, double *lo, double *hi) {
    *lo = n > 0 ? x[0] : 0;
    *hi = n > 0 ? x[n - 1] : 0;
    if (n <= 0) return 0;
    /* The interval [x_(j), x_(n+1-j)] (1-based) covers the median with
     * probability 1 - 2 P(B <= j - 1), B ~ Binomial(n, 1/2). tail holds
     * P(B <= j - 1) for the next j to try; terms in log space (no overflow). */
    const double ln2n = n * log(2.0);
    double tail = exp(-ln2n), coverage = 1 - 2 * tail; /* j = 1: the whole range */
    int best = 1;
    for (int j = 2; 2 * j <= n + 1; j++) {
        tail += exp(lgamma(n + 1.0) - lgamma(j) - lgamma(n - j + 2.0) - ln2n); /* P(B = j-1) */
        if (1 - 2 * tail < conf) break;
        best = j;
        coverage = 1 - 2 * tail;
    }
    *lo = x[best - 1];
    *hi = x[n - best];
    return coverage;
}

stats_order intervals_order(double a_lo, double a_hi, double b_lo, double b_hi) {
    if (a_lo > b_hi) return STATS_A_LARGER;
    if (a_hi < b_lo) return STATS_B_LARGER;
    return STATS_TIE;
}

/* The median of a copy of x. */
static double median_copy(const double *x, int n) {
    double *c = malloc((size_t)n * sizeof *c);
    if (!c) return 0;
    memcpy(c, x, (size_t)n * sizeof *c);
    const double m = median_inplace(c, n);
    free(c);
    return m;
}

double stats_common_drift(const double *x, int n) {
    return n < STATS_DRIFT_MIN ? 0 : median_copy(x, n);
}

double stats_robust_sigma(const double *x, int n) {
    if (n < 2) return 0;
    const double m = median_copy(x, n);
    double *d = malloc((size_t)n * sizeof *d);
    if (!d) return 0;
    for (int i = 0; i < n; i++) d[i] = fabs(x[i] - m);
    const double mad = median_inplace(d, n);
    free(d);
    return 1.4826 * mad;
}

double stats_derived_threshold(const double *resid, int n, double fallback, double *sigma_pct) {
    if (sigma_pct) *sigma_pct = 0;
    if (n < STATS_DRIFT_MIN) return fallback;
    const double sig = 100 * (exp(stats_robust_sigma(resid, n)) - 1);
    if (sigma_pct) *sigma_pct = sig;
    const double t = STATS_THRESHOLD_K * sig;
    return t < STATS_THRESHOLD_MIN ? STATS_THRESHOLD_MIN
                                   : (t > STATS_THRESHOLD_MAX ? STATS_THRESHOLD_MAX : t);
}

/* z with P(|N(0,1)| > z) = p, by bisection on erfc (monotone; 80 halvings of
 * [0, 40] are below double precision). */
static double z_two_sided(double p) {
    double lo = 0, hi = 40;
    for (int i = 0; i < 80; i++) {
        const double mid = 0.5 * (lo + hi);
        if (erfc(mid / sqrt(2.0)) > p)
            lo = mid;
        else
            hi = mid;
    }
    return 0.5 * (lo + hi);
}

double stats_shift_interval(const double *base, int m, const double *new, int n, double conf,
                            double *lo, double *hi) {
    const size_t N = (size_t)m * (size_t)n;
    if (m < 1 || n < 1) {
        *lo = *hi = NAN;
        return NAN;
    }
    double *d = malloc(N * sizeof *d);
    if (!d) {
        *lo = *hi = NAN;
        return NAN;
    }
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) d[(size_t)i * n + j] = log(new[j]) - log(base[i]);
    qsort(d, N, sizeof *d, cmp_double);
    const double z = z_two_sided(1 - conf);
    const double k = floor((double)N / 2 - z * sqrt((double)m * n * (m + n + 1) / 12.0));
    const size_t ki = k > 0 ? (size_t)k : 0;
    *lo = 100 * (exp(d[ki]) - 1);
    *hi = 100 * (exp(d[N - 1 - ki]) - 1);
    const double est = 100 * (exp(median_sorted(d, (int)N)) - 1);
    free(d);
    return est;
}

/* ---- the Mann-Whitney U test (compare's per-benchmark test) ---- */

typedef struct {
    double v;
    int side; /* 0 base, 1 new */
} tagged;

static int cmp_tagged(const void *a, const void *b) {
    return cmp_double(&((const tagged *)a)->v, &((const tagged *)b)->v);
}

/* Exact two-sided p of the rank sum w2 (doubled midranks, so integers) of n items
 * drawn from the N doubled midranks r2: counts the subsets of size n with each
 * sum (all C(N, n) assignments equally likely under H0), so ties are exact too.
 * p = min(1, 2 * min(P(W <= w), P(W >= w))). */
static double exact_p(const int *r2, int N, int n, int w2) {
    const int S = N * (N + 1); /* sum of all doubled ranks: the largest possible sum */
    const size_t ncnt = (size_t)(n + 1) * (size_t)(S + 1);
    double *cnt = xrealloc_or_exit(NULL, ncnt, sizeof *cnt, "stats");
    memset(cnt, 0, ncnt * sizeof *cnt);
#define CNT(k, s) cnt[(size_t)(k) * (size_t)(S + 1) + (size_t)(s)]
    CNT(0, 0) = 1;
    for (int i = 0; i < N; i++)
        for (int k = (i + 1 < n ? i + 1 : n); k >= 1; k--)
            for (int s = S; s >= r2[i]; s--) CNT(k, s) += CNT(k - 1, s - r2[i]);
    double total = 0, lo = 0, hi = 0;
    for (int s = 0; s <= S; s++) {
        const double c = CNT(n, s);
        total += c;
        if (s <= w2) lo += c;
        if (s >= w2) hi += c;
    }
#undef CNT
    free(cnt);
    const double p = 2 * (lo < hi ? lo : hi) / total;
    return p < 1 ? p : 1;
}

/* Mann-Whitney U test of base (m values) against new (n values), two-sided. */
stats_utest stats_mann_whitney(const double *base, int m, const double *new, int n) {
    const int N = m + n;
    tagged *all = xrealloc_or_exit(NULL, (size_t)N, sizeof *all, "stats");
    int *r2 = xrealloc_or_exit(NULL, (size_t)N, sizeof *r2, "stats");
    for (int i = 0; i < m; i++) all[i] = (tagged){base[i], 0};
    for (int i = 0; i < n; i++) all[m + i] = (tagged){new[i], 1};
    qsort(all, (size_t)N, sizeof *all, cmp_tagged);
    /* Midranks, doubled: a tie group at 1-based positions first..last gets
     * (first + last) / 2, so 2 * rank = first + last is an integer. */
    double ties = 0; /* sum over tie groups of t^3 - t */
    int w2 = 0;
    for (int i = 0; i < N;) {
        int j = i;
        while (j + 1 < N && all[j + 1].v == all[i].v) j++;
        const double t = j - i + 1;
        ties += t * t * t - t;
        for (int k = i; k <= j; k++) {
            r2[k] = (i + 1) + (j + 1);
            if (all[k].side) w2 += r2[k];
        }
        i = j + 1;
    }
    stats_utest r;
    r.u = w2 / 2.0 - n * (n + 1) / 2.0;
    if (n <= STATS_EXACT_MAX && m <= STATS_EXACT_MAX) {
        r.exact = 1;
        r.p = exact_p(r2, N, n, w2);
    } else {
        /* Normal approximation: mean nm/2, variance with the tie correction
         * nm/12 * ((N+1) - sum(t^3-t) / (N(N-1))), continuity correction 1/2. */
        r.exact = 0;
        const double mu = n * (double)m / 2;
        const double var = n * (double)m / 12 * ((N + 1) - ties / ((double)N * (N - 1)));
        if (var <= 0) {
            r.p = 1;
        } else {
            double d = fabs(r.u - mu) - 0.5;
            if (d < 0) d = 0;
            r.p = erfc(d / sqrt(var) / sqrt(2.0));
            if (r.p > 1) r.p = 1;
        }
    }
    free(all);
    free(r2);
    return r;
}

void stats_holm_levels(const double *p, int n, double alpha, double *level) {
    int *ord = n > 0 ? malloc((size_t)n * sizeof *ord) : NULL;
    if (!ord) { /* no memory: Bonferroni, which Holm only relaxes */
        for (int i = 0; i < n; i++) level[i] = alpha / n;
        return;
    }
    for (int i = 0; i < n; i++) ord[i] = i;
    for (int i = 1; i < n; i++) /* insertion sort by p, stable: n is a sweep's rows */
        for (int j = i; j > 0 && p[ord[j]] < p[ord[j - 1]]; j--) {
            const int t = ord[j];
            ord[j] = ord[j - 1];
            ord[j - 1] = t;
        }
    int stopped = 0;
    double lv = alpha;
    for (int k = 0; k < n; k++) {
        if (!stopped) {
            lv = alpha / (n - k);
            stopped = !(p[ord[k]] < lv);
        }
        level[ord[k]] = lv;
    }
    free(ord);
}
