"""mha_stats.py - the statistics the Python tools share with harness/stats.c:
the distribution-free 95% interval of a median (order statistics with
binomial coverage), so a plot's error bar and a report's tie are the ones
the C harness computes; which repetitions count; and the fastest of a set
with the ones tied with it, as the sweep's summary decides."""
import math
import statistics


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


def counted(samples):
    """The values of a benchmark's repetitions [(value, disturbed), ...] that
    count, as in the sweep's summary: the undisturbed ones, or all of them
    when every one was disturbed."""
    samples = list(samples)
    return [v for v, d in samples if not d] or [v for v, _ in samples]


def decide(kernels):
    """(winner, tie set sorted, winner's median) for {kernel: samples}: the
    highest median; tied are those whose 95% median interval reaches the
    winner's (their medians are lower, so that is an overlap)."""
    stats = {}
    for k, xs in kernels.items():
        stats[k] = (statistics.median(xs), *median_interval(xs))
    win = max(stats, key=lambda k: (stats[k][0], k))
    lo_w = stats[win][1]
    ties = sorted(k for k in stats if k != win and stats[k][2] >= lo_w)
    return win, ties, stats[win][0]


def is_iteration(row):
    """A repetition row (not an aggregate), as harness/fmt_results.c decides."""
    t = row.get("run_type")
    return t == "iteration" if t is not None else "aggregate_name" not in row


def split_name(name):
    """(kernel, group) of a sweep row's name: the group is the name without
    its kernel part ("layer/<kernel>/..." keeps "layer/"), as
    harness/sweep/report.c groups rows."""
    parts = name.split("/")
    if parts[0] == "layer" and len(parts) > 2:
        return parts[1], "layer/" + "/".join(parts[2:])
    if len(parts) < 2:
        return None, None
    return parts[0], "/".join(parts[1:])


def is_candidate(kernel):
    """Ours: the fastest is chosen among these (not auto, not a peer)."""
    return kernel != "auto" and not kernel.startswith("peer.")


def group_samples(doc):
    """{group: {kernel: [the repetitions' GFLOP/s that count]}} in the order
    the groups first appear, from a result file's parsed JSON."""
    raw = {}
    for b in doc.get("benchmarks", []):
        if not isinstance(b, dict) or not is_iteration(b) or b.get("error_occurred"):
            continue
        kernel, group = split_name(b.get("name", ""))
        if kernel is None:
            continue
        raw.setdefault(group, {}).setdefault(kernel, []).append(
            (float(b.get("GFLOPS", 0.0) or 0.0), bool(b.get("disturbed", 0))))
    return {g: {k: counted(v) for k, v in ks.items()} for g, ks in raw.items()}


def group_decisions(doc):
    """{group: (fastest, [tied, sorted], its median)} over our kernels, the
    one rule of the sweep's summary (`mhabench report --decisions`)."""
    out = {}
    for g, ks in group_samples(doc).items():
        ours = {k: v for k, v in ks.items() if is_candidate(k) and v}
        if ours:
            out[g] = decide(ours)
    return out


def print_decisions(decs, file=None):
    """The `mhabench report --decisions` format: group TAB fastest TAB tied,...|-
    sorted by group."""
    import sys
    for g in sorted(decs):
        win, ties, _ = decs[g]
        print(f"{g}\t{win}\t{','.join(ties) or '-'}", file=file or sys.stdout)
