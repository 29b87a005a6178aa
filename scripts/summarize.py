#!/usr/bin/python3
"""summarize.py RESULTS.json [--kernels a,b] [--decisions] - a Markdown table of a
sweep file: one row per shape and thread count, per kernel the median GFLOP/s
over the repetitions that count (the undisturbed ones, or all when every one
was disturbed) and its % of peak (and % of bandwidth for decode shapes), and
the fastest of our kernels with the number tied with it, decided by the rule
of the sweep's own summary (scripts/mha_stats.py, the twin of
harness/sweep/report.c); a percentage above 100 is marked ! (the peak or
bandwidth it is of was measured too low: a measurement error, not
efficiency). --decisions prints the decisions in the format of
`mhabench report --decisions` instead. Used for issue notes and the docs."""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mha_stats import counted, group_decisions, is_iteration, print_decisions, split_name  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("results")
    ap.add_argument("--kernels", help="comma list, in column order (default: all)")
    ap.add_argument("--decisions", action="store_true",
                    help="print group TAB fastest TAB tied (as mhabench report --decisions)")
    a = ap.parse_args()
    with open(a.results) as f:
        data = json.load(f)
    decs = group_decisions(data)
    if a.decisions:
        print_decisions(decs)
        return
    rows = {}
    order, kernels = [], []
    for b in data["benchmarks"]:
        if not is_iteration(b) or b.get("error_occurred"):
            continue
        kernel, group = split_name(b["name"])
        if kernel is None:
            continue
        if group not in rows:
            order.append(group)
            rows[group] = {}
        if kernel not in kernels:
            kernels.append(kernel)
        rows[group].setdefault(kernel, []).append(
            (b.get("GFLOPS", 0.0), b.get("pct_peak", 0.0), b.get("pct_bw"), b.get("disturbed", 0)))
    if a.kernels:
        kernels = [k for k in a.kernels.split(",")]

    # Rows: shapes in order of first appearance, thread counts ascending
    # within a shape (interleaved runs list their repetitions shuffled).
    def base(group):
        return group.rsplit("/threads:", 1)[0]

    def threads(group):
        t = group.rsplit("/threads:", 1)
        return int(t[1]) if len(t) == 2 and t[1].isdigit() else 0

    first = {}
    for i, group in enumerate(order):
        first.setdefault(base(group), i)
    order.sort(key=lambda g: (first[base(g)], threads(g)))
    print("| shape | fastest | " + " | ".join(kernels) + " |")
    print("|---" * (len(kernels) + 2) + "|")
    for group in order:
        cells = []
        for k in kernels:
            v = rows[group].get(k)
            if not v:
                cells.append("-")
                continue
            gf = statistics.median(counted((x[0], x[3]) for x in v))
            pp = statistics.median(counted((x[1], x[3]) for x in v))
            bw = [x for x in v if x[2] is not None]
            # above 100%: the peak or bandwidth was measured too low (a
            # measurement error, marked !), never efficiency
            cell = f"{gf:.1f} ({pp:.1f}%{'!' if pp > 100 else ''})"
            if bw:
                pb = statistics.median(counted((x[2], x[3]) for x in bw))
                cell += f" {pb:.0f}% bw{'!' if pb > 100 else ''}"
            cells.append(cell)
        win = "-"
        if group in decs:
            w, ties, _ = decs[group]
            win = w + (f" (+{len(ties)} tied)" if ties else "")
        print(f"| {group.replace('/', ' ')} | {win} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
