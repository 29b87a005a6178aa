#!/usr/bin/env python3
"""sweep_agreement.py A.json B.json - do two sweep runs reach the same
decisions? Per (shape, threads) group, each run's decision is its fastest
kernel of ours (peers and auto left out) and the kernels tied with it (95%
median intervals overlapping the fastest's, as the sweep's summary says).
Two decisions agree when each run's fastest is in the other's decision (its
fastest or a tie), or when, in each run, the other run's fastest is within
--tie-pct (default 3, issue 29's "a tie within 3% counts as agreement") of
that run's fastest median. Prints the groups that disagree and the share that agree;
also, per run, how many rows have a median interval wider than +-5% (a row
whose samples disagree with each other by more than that). Standard library
and scripts/mha_stats.py only."""
import argparse
import json
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mha_stats import counted, decide, median_interval  # noqa: E402

NAME = re.compile(r"^(?:layer/)?(?P<kernel>[^/]+)/(?P<shape>.*)/threads:(?P<threads>\d+)$")


def rows(path):
    """{(shape, threads): {kernel: [the repetitions that count]}}."""
    with open(path) as f:
        doc = json.load(f)
    samples = {}
    for b in doc.get("benchmarks", []):
        if b.get("run_type", "iteration") != "iteration" or b.get("error_occurred"):
            continue
        samples.setdefault(b["name"], []).append((b.get("GFLOPS", 0.0), b.get("disturbed", 0)))
    out = {}
    for name, xs in samples.items():
        m = NAME.match(name)
        if not m or m["kernel"] == "auto" or m["kernel"].startswith("peer."):
            continue
        layer = "layer/" if name.startswith("layer/") else ""
        out.setdefault((layer + m["shape"], int(m["threads"])), {})[m["kernel"]] = counted(xs)
    return out


def wide(rs, limit=0.05):
    n = w = 0
    for g in rs.values():
        for xs in g.values():
            med = statistics.median(xs)
            lo, hi = median_interval(xs)
            n += 1
            w += med > 0 and (hi - lo) / 2 / med > limit
    return w, n


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--tie-pct", type=float, default=3.0,
                    help="the other run's fastest within this many percent of a run's fastest "
                         "median agrees too (default 3; 0: intervals only)")
    args = ap.parse_args(argv)
    try:
        ra, rb = rows(args.a), rows(args.b)
    except (OSError, ValueError) as e:
        print(f"sweep_agreement: {e}", file=sys.stderr)
        return 2
    common = sorted(set(ra) & set(rb))
    if not common:
        print("sweep_agreement: the runs share no (shape, threads) group", file=sys.stderr)
        return 2
    agree = 0
    for key in common:
        fa, ta, _ = decide(ra[key])
        fb, tb, _ = decide(rb[key])
        ok = (fa == fb or fa in tb) and (fb == fa or fb in ta)
        if not ok and args.tie_pct > 0:
            near = True
            for run, mine, other in ((ra[key], fa, fb), (rb[key], fb, fa)):
                if other not in run:
                    near = False
                    continue
                best, theirs = statistics.median(run[mine]), statistics.median(run[other])
                near &= best > 0 and theirs >= best * (1 - args.tie_pct / 100)
            ok = near
        agree += ok
        if not ok:
            print(f"differ: {key[0]} threads={key[1]}: {fa} (ties {sorted(ta)}) vs "
                  f"{fb} (ties {sorted(tb)})")
    for name, rs in ((args.a, ra), (args.b, rb)):
        w, n = wide(rs)
        print(f"{os.path.basename(name)}: {w} of {n} rows with a median interval wider than +-5%")
    print(f"decisions agree in {agree} of {len(common)} groups ({100.0 * agree / len(common):.1f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
