#!/usr/bin/python3
"""fleet_report.py - one decision map from the result files of several CPUs.

    /usr/bin/python3 scripts/fleet_report.py report MERGED.json... [-o DIR] [--name NAME]
    /usr/bin/python3 scripts/fleet_report.py tuning TABLE.json... [--out-dir DIR]

report: each file is one machine's sweep (a `mhabench merge` output, or any
`mhabench sweep` file); files of one CPU key (and ISA cap) are pooled. For
every shape (the benchmark name without its kernel part) and every CPU, the
fastest kernel by median GFLOP/s over its repetitions, or the tie set: the
kernels whose 95% median interval overlaps the fastest's (the interval rule
of `harness/stats.c`: order statistics with binomial coverage, no
distribution assumed; a single repetition is its own interval, so one-shot
sweeps tie only on equal numbers). `auto` rows are left out (they run one of
the listed kernels). Writes DIR/NAME.md (a table) and DIR/NAME.png (the map:
one column per CPU, one row per shape, the cell coloured by the winning
kernel's algorithm, hatched when tied).

tuning: tuning tables (`mhabench tune` outputs) of one CPU key measured on
several hosts become one table per CPU key (DIR/<cpu-key>.json). Per class,
hosts that agree keep their choice (its gflops the median of theirs); hosts
that disagree are decided by the intervals: a choice whose gflops_interval
lies above every other's wins, otherwise the class falls back to the cache
model's default (recorded as a tie), as `mhabench tune` does on one host.

Only the standard library for `tuning`; `report` needs Debian's
python3-matplotlib for the picture (the table is written without it).
"""
import argparse
import collections
import json
import math
import os
import re
import statistics
import sys

from mha_stats import decide  # scripts/: shared with the other tools


def split_name(name):
    """(kernel, shape) of a benchmark name; layer rows keep their 'layer/' prefix."""
    parts = name.split("/")
    if parts[0] == "layer" and len(parts) > 2:
        return parts[1], "layer/" + "/".join(parts[2:])
    return parts[0], "/".join(parts[1:])


def algorithm(kernel):
    return kernel.split(".")[0]


def load_runs(paths):
    """{cpu label: {shape: {kernel: [gflops per repetition]}}}, and the labels' facts."""
    data = collections.OrderedDict()
    facts = {}
    for path in paths:
        with open(path) as f:
            doc = json.load(f)
        ctx = doc.get("context", {})
        key = ctx.get("mha_cpu_key")
        if not key:
            sys.exit(f"fleet_report: {path}: no mha_cpu_key in the context (not a mhabench file)")
        cap = ctx.get("mha_isa_active", "?")
        label = key if key.endswith(cap) else f"{key} (cap {cap})"
        facts.setdefault(label, {"model": ctx.get("mha_cpu_model", "?"), "files": []})
        facts[label]["files"].append(os.path.basename(path))
        per = data.setdefault(label, collections.defaultdict(lambda: collections.defaultdict(list)))
        for row in doc.get("benchmarks", []):
            if row.get("run_type", "iteration") != "iteration" or row.get("error_occurred"):
                continue
            g = row.get("GFLOPS")
            if not isinstance(g, (int, float)) or not math.isfinite(g) or g <= 0:
                continue
            kernel, shape = split_name(row["name"])
            if kernel == "auto":
                continue
            per[shape][kernel].append(float(g))
    return data, facts


def report(args):
    data, facts = load_runs(args.files)
    labels = list(data)
    shapes = sorted({s for per in data.values() for s in per})
    table = {}
    for lab in labels:
        for s in shapes:
            if s in data[lab] and data[lab][s]:
                table[(lab, s)] = decide(data[lab][s])
    os.makedirs(args.o, exist_ok=True)
    md = os.path.join(args.o, args.name + ".md")
    with open(md, "w") as f:
        f.write(f"# Fastest kernel per shape and CPU ({len(labels)} CPUs)\n\n")
        f.write("Made by `scripts/fleet_report.py report` from:\n\n")
        for lab in labels:
            f.write(f"- `{lab}` ({facts[lab]['model']}): {', '.join(facts[lab]['files'])}\n")
        f.write("\nCell: the fastest kernel (median GFLOP/s); `=` lists kernels tied with it "
                "(95% median intervals overlap).\n\n")
        f.write("| shape | " + " | ".join(f"`{l}`" for l in labels) + " |\n")
        f.write("|---|" + "---|" * len(labels) + "\n")
        for s in shapes:
            cells = []
            for lab in labels:
                if (lab, s) not in table:
                    cells.append("-")
                    continue
                win, ties, med = table[(lab, s)]
                cell = f"{win} {med:.0f}"
                if ties:
                    cell += " = " + ", ".join(ties)
                cells.append(cell)
            f.write(f"| `{s}` | " + " | ".join(cells) + " |\n")
        agree = sum(1 for s in shapes
                    if len({table[(l, s)][0] for l in labels if (l, s) in table}) == 1
                    and sum((l, s) in table for l in labels) > 1)
        both = sum(1 for s in shapes if sum((l, s) in table for l in labels) > 1)
        f.write(f"\nShapes measured on more than one CPU: {both}; the same fastest kernel on all "
                f"of them: {agree}.\n")
    print(f"fleet_report: {md}")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch
    except ImportError:
        print("fleet_report: no matplotlib (Debian: python3-matplotlib): table only")
        return 0
    algs = sorted({algorithm(v[0]) for v in table.values()})
    cmap = plt.get_cmap("tab10")
    color = {a: cmap(i % 10) for i, a in enumerate(algs)}
    fig, ax = plt.subplots(figsize=(3.0 + 3.2 * len(labels), 0.9 + 0.28 * len(shapes)))
    for yi, s in enumerate(shapes):
        for xi, lab in enumerate(labels):
            if (lab, s) not in table:
                continue
            win, ties, med = table[(lab, s)]
            ax.add_patch(plt.Rectangle((xi, yi), 1, 1, color=color[algorithm(win)],
                                       hatch="//" if ties else None, ec="white"))
            ax.text(xi + 0.5, yi + 0.5, f"{win.split('.', 1)[-1]} {med:.0f}" + (" =" if ties else ""),
                    ha="center", va="center", fontsize=7)
    ax.set_xlim(0, len(labels))
    ax.set_ylim(0, len(shapes))
    ax.set_xticks([i + 0.5 for i in range(len(labels))])
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_yticks([i + 0.5 for i in range(len(shapes))])
    ax.set_yticklabels(shapes, fontsize=6)
    ax.invert_yaxis()
    ax.legend(handles=[Patch(color=color[a], label=a) for a in algs] +
              [Patch(facecolor="white", hatch="//", label="tie (intervals overlap)")],
              loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    ax.set_title("fastest kernel per shape (cell: ISA, median GFLOP/s)", fontsize=9)
    fig.tight_layout()
    png = os.path.join(args.o, args.name + ".png")
    fig.savefig(png, dpi=110)
    print(f"fleet_report: {png}")
    return 0


def choice_key(c):
    return (c["kernel"], c.get("block_q"), c.get("block_kv"), c.get("split"))


def tuning(args):
    by_key = collections.OrderedDict()
    for path in args.files:
        with open(path) as f:
            t = json.load(f)
        key = t.get("fingerprint", {}).get("cpu_key")
        if not key or not isinstance(t.get("classes"), list):
            sys.exit(f"fleet_report: {path}: not a mhabench tuning table")
        by_key.setdefault(key, []).append((path, t))
    os.makedirs(args.out_dir, exist_ok=True)
    for key, tables in by_key.items():
        classes = collections.OrderedDict()
        for path, t in tables:
            for c in t["classes"]:
                classes.setdefault(c["class"], []).append(c)
        merged, ties, agreed = [], 0, 0
        for name, entries in classes.items():
            winners = collections.defaultdict(list)
            for e in entries:
                winners[choice_key(e["winner"])].append(e)
            out = dict(entries[0])
            if len(winners) == 1:
                agreed += 1
                out["winner"] = dict(entries[0]["winner"])
                out["winner"]["gflops"] = round(statistics.median(
                    e["winner"]["gflops"] for e in entries), 2)
            else:
                # a choice wins only if its interval lies above every other's
                def iv(e):
                    w = e["winner"]
                    return w.get("gflops_interval", [w["gflops"], w["gflops"]])
                best = None
                for k, es in winners.items():
                    lo = min(iv(e)[0] for e in es)
                    others = [iv(e)[1] for k2, es2 in winners.items() if k2 != k for e in es2]
                    if lo > max(others):
                        best = es[0]
                if best is not None:
                    out["winner"] = dict(best["winner"])
                else:
                    ties += 1
                    out["winner"] = dict(entries[0].get("default", entries[0]["winner"]))
                    out["tie"] = True
            out["hosts"] = len(entries)
            merged.append(out)
        base = dict(tables[0][1])
        base["classes"] = merged
        base["merged_from"] = [os.path.basename(p) for p, _ in tables]
        dst = os.path.join(args.out_dir, key + ".json")
        with open(dst + ".tmp", "w") as f:
            json.dump(base, f, indent=1)
            f.write("\n")
        os.replace(dst + ".tmp", dst)
        print(f"fleet_report: {dst}: {len(merged)} classes from {len(tables)} tables, "
              f"{agreed} agreed, {ties} ties kept at the default")
    return 0


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("report")
    r.add_argument("files", nargs="+")
    r.add_argument("-o", default=".")
    r.add_argument("--name", default="fleet-report")
    t = sub.add_parser("tuning")
    t.add_argument("files", nargs="+")
    t.add_argument("--out-dir", default="results/tuning")
    args = ap.parse_args(argv)
    return report(args) if args.cmd == "report" else tuning(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
