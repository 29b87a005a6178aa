#!/usr/bin/python3
"""summarize.py RESULTS.json [--kernels a,b] - a Markdown table of a sweep file:
one row per shape and thread count, per kernel the median GFLOP/s over the
repetitions and its % of peak (and % of bandwidth for decode shapes). Used for
issue notes and the README; reads only the per-repetition rows."""
import argparse
import json
import statistics
from collections import defaultdict


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("results")
    ap.add_argument("--kernels", help="comma list, in column order (default: all)")
    a = ap.parse_args()
    with open(a.results) as f:
        data = json.load(f)
    rows = defaultdict(lambda: defaultdict(list))
    order, kernels = [], []
    for b in data["benchmarks"]:
        if b.get("run_type") == "aggregate" or b.get("error_occurred"):
            continue
        name = b["name"]
        parts = name.split("/")
        layer = parts[0] == "layer"
        kernel = parts[1] if layer else parts[0]
        shape = ("layer " if layer else "") + " ".join(parts[2 if layer else 1:])
        if shape not in rows:
            order.append(shape)
        if kernel not in kernels:
            kernels.append(kernel)
        rows[shape][kernel].append((b.get("GFLOPS", 0.0), b.get("pct_peak", 0.0), b.get("pct_bw")))
    if a.kernels:
        kernels = [k for k in a.kernels.split(",")]

    # Rows: shapes in order of first appearance, thread counts ascending
    # within a shape (interleaved runs list their repetitions shuffled).
    def base(shape):
        return shape.rsplit(" threads:", 1)[0]

    def threads(shape):
        t = shape.rsplit(" threads:", 1)
        return int(t[1]) if len(t) == 2 and t[1].isdigit() else 0

    first = {}
    for i, shape in enumerate(order):
        first.setdefault(base(shape), i)
    order.sort(key=lambda sh: (first[base(sh)], threads(sh)))
    print("| shape | " + " | ".join(kernels) + " |")
    print("|---" * (len(kernels) + 1) + "|")
    for shape in order:
        cells = []
        for k in kernels:
            v = rows[shape].get(k)
            if not v:
                cells.append("-")
                continue
            gf = statistics.median(x[0] for x in v)
            pp = statistics.median(x[1] for x in v)
            bw = [x[2] for x in v if x[2] is not None]
            cell = f"{gf:.1f} ({pp:.1f}%)"
            if bw:
                cell += f" {statistics.median(bw):.0f}% bw"
            cells.append(cell)
        print(f"| {shape.replace('/', ' ')} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
