"""mha_stats.py - the statistics the Python tools share with harness/stats.c:
the distribution-free 95% interval of a median (order statistics with
binomial coverage), so a plot's error bar and a report's tie are the ones
the C harness computes."""
import math


def median_interval(xs, conf=0.95):
    """[x_(j), x_(n+1-j)] (1-based) with the largest j whose coverage
    1 - 2 P(Binomial(n, 1/2) <= j - 1) is >= conf: the whole range when there
    are too few samples, one sample its own interval, (0, 0) for none."""
    x = sorted(xs)
    n = len(x)
    if n == 0:
        return (0.0, 0.0)
    best, tail = 1, 0.5 ** n
    j = 2
    while 2 * j <= n + 1:
        tail += math.comb(n, j - 1) * 0.5 ** n
        if 1 - 2 * tail < conf:
            break
        best = j
        j += 1
    return (x[best - 1], x[n - best])
