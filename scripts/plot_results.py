#!/usr/bin/python3
"""plot_results.py - pictures of an `mhabench sweep` result file (Google Benchmark JSON).

    /usr/bin/python3 scripts/plot_results.py RESULTS.json [-o DIR]

writes into DIR (default: the result file's directory), named after the file:
  <stem>-gflops.png    GFLOP/s against sequence length (Nq = Nkv, log2 axis), one line
                       per kernel, one panel per (head_dim, causal, threads)
  <stem>-pct_peak.png  the same as % of the measured FMA peak (kernel ISA x threads)
  <stem>-fastest.png   the fastest kernel for every shape and thread count

Per-repetition rows of one name are reduced to their median over the
repetitions the interference evidence did not mark disturbed, drawn with the
95% interval of that median as an error bar (harness/stats.c's order
statistics); the measured FP32 FMA peak (and, on plots with bf16/fp16 rows, the BF16 dot-product peak where
measured) x threads is drawn as a roofline line, 100% on the pct_peak plot.
Aggregate rows (_mean, _median, ...) and failed runs are ignored. A panel's point at length N
is the median over the axes the panel does not show (batch, heads, kv_heads),
so it reads as "a typical shape of that length"; cross-attention and decode
shapes (Nq != Nkv) appear only in the fastest-kernel map. Debian's
python3-matplotlib, Agg backend (no display needed).
"""
import argparse
import json
import math
import os
import re
import statistics
import sys

from mha_stats import counted, group_decisions, group_samples, median_interval, print_decisions  # scripts/: shared with the other tools

try:  # only drawing needs it: --decisions runs without (CI does not install it)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: E402
    from matplotlib.patches import Patch  # noqa: E402
except ImportError:
    plt = None

NAME_RE = re.compile(
    r"^(?P<kernel>[^/]+)/B:(?P<b>\d+)/H:(?P<h>\d+)/KV:(?P<kv>\d+)/Nq:(?P<nq>\d+)"
    r"/Nkv:(?P<nkv>\d+)/d:(?P<d>\d+)/causal:(?P<causal>[01])"
    r"(?:/dtype:(?P<dtype>\w+))?(?:/kv_dtype:(?P<kv_dtype>\w+))?"
    # the attention variants (sweep --window/--softcap/--sinks/--head-dim-v)
    r"(?P<variant>(?:/w-?\d+:-?\d+)?(?:/cap[0-9.e+-]+)?(?:/sinks)?(?:/dv\d+)?)"
    r"/threads:(?P<threads>\d+)$"
)
AXES = ("b", "h", "kv", "nq", "nkv", "d", "causal", "threads")


def load(path):
    """{(kernel, shape tuple): {"gflops": median, "pct_peak": median}} and the context."""
    with open(path) as f:
        data = json.load(f)
    rows = {}
    for b in data.get("benchmarks", []):
        if b.get("run_type") == "aggregate" or b.get("error_occurred"):
            continue
        m = NAME_RE.match(b.get("name", ""))
        if not m or "GFLOPS" not in b:
            continue
        # typed rows (README "name grammar") are their own series: "flash.x bf16"
        kernel = m["kernel"]
        if m["dtype"] or m["kv_dtype"]:
            kernel += " " + (m["dtype"] or "fp32") + (f" kv:{m['kv_dtype']}" if m["kv_dtype"] else "")
        if m["variant"]:  # a variant row is its own series too: "flash.x w4096:0 cap50"
            kernel += " " + " ".join(m["variant"].strip("/").split("/"))
        key = (kernel, tuple(int(m[a]) for a in AXES))
        r = rows.setdefault(key, {"gflops": [], "pct_peak": [], "disturbed": []})
        r["gflops"].append(float(b["GFLOPS"]))
        # a repetition above its peak is a measurement error, never efficiency
        # a repetition above its peak is a measurement error (of the peak), never efficiency
        pp = float(b.get("pct_peak", 0.0))
        r["pct_peak"].append(float("nan") if b.get("peak_exceeded") or pp > 100 else pp)
        r["disturbed"].append(bool(b.get("disturbed", 0)))
    out = {}
    for k, v in rows.items():
        e = {}
        for m in ("gflops", "pct_peak"):
            xs = [x for x in counted(zip(v[m], v["disturbed"])) if x == x]  # those that count
            if not xs:
                xs = [float("nan")]
            lo, hi = median_interval(xs)
            e[m], e[m + "_lo"], e[m + "_hi"] = statistics.median(xs), lo, hi
        out[k] = e
    return out, data.get("context", {})


def peak_of(ctx, threads):
    """The highest measured FP32 FMA peak in the context (GFLOP/s, 1 thread) x
    threads, and the bf16 one when measured; None when absent."""
    fma = [float(v) for k, v in ctx.items() if re.fullmatch(r"mha_peak_gflops_[a-z0-9]+", k)
           and not k.startswith("mha_peak_gflops_bf16")]
    bf = [float(v) for k, v in ctx.items() if k.startswith("mha_peak_gflops_bf16_")]
    return (max(fma) * threads if fma else None, max(bf) * threads if bf else None)


def kernel_order(kernels):
    """Registry-like order: naive, then by algorithm and ISA, blas last."""
    isa_rank = {"scalar": 0, "avx2": 1, "avx512": 2}

    def rank(k):
        algo, _, isa = k.split(" ")[0].partition(".")
        first = {"naive": 0, "blas": 2, "peer": 3}.get(algo, 1)
        return (first, algo, isa_rank.get(isa, 3), k)

    return sorted(kernels, key=rank)


def kernel_colors(kernels):
    cmap = plt.get_cmap("tab20" if len(kernels) > 10 else "tab10")
    return {k: cmap(i % cmap.N) for i, k in enumerate(kernels)}


def is_peer(k):
    return k.startswith("peer.")


def line_style(kernels):
    """One colour per algorithm, one line style per ISA (solid = widest); each
    peer (peer.<name>, another library's attention) its own colour of a second
    palette, dash-dotted, so ours and theirs read apart at a glance."""
    algos, peers = [], []
    for k in kernels:
        a = k.partition(".")[0]
        if is_peer(k):
            peers.append(k)
        elif a not in algos:
            algos.append(a)
    cmap, pmap = plt.get_cmap("tab10"), plt.get_cmap("Dark2")
    dash = {"scalar": ":", "avx2": "--", "avx512": "-"}
    return {
        k: (pmap(peers.index(k) % 8), "-.")
        if is_peer(k)
        else (cmap(algos.index(k.partition(".")[0]) % 10), dash.get(k.partition(".")[2], "-"))
        for k in kernels
    }


def title_of(ctx, what):
    cpu = ctx.get("mha_cpu_model", "?")
    preset = ctx.get("mha_preset", "?")
    rev = ctx.get("mha_git_revision", "?")
    return f"{what} - {cpu} ({ctx.get('mha_cpu_key', '?')}), preset {preset}, {rev}"


def plot_lines(results, ctx, metric, ylabel, path):
    kernels = kernel_order({k for k, _ in results})
    styles = line_style(kernels)
    # panel (d, causal, threads) -> kernel -> seq -> [values over b, h, kv]
    panels = {}
    for (kernel, s), r in results.items():
        b, h, kv, nq, nkv, d, causal, threads = s
        if nq != nkv:
            continue
        panels.setdefault((d, causal, threads), {}).setdefault(kernel, {}).setdefault(
            nkv, []
        ).append((r[metric], r[metric + "_lo"], r[metric + "_hi"]))
    if not panels:
        return False
    keys = sorted(panels)
    ncols = min(4, len(keys))
    nrows = math.ceil(len(keys) / ncols)
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(4.2 * ncols, 3.3 * nrows + 0.9), squeeze=False, sharey=True
    )
    for ax in axes.flat[len(keys):]:
        ax.set_visible(False)
    for ax, key in zip(axes.flat, keys):
        d, causal, threads = key
        for kernel in kernels:
            series = panels[key].get(kernel)
            if not series:
                continue
            xs = sorted(series)
            ys = [statistics.median(v[0] for v in series[x]) for x in xs]
            # the error bar: the 95% interval of the median (medians of the
            # bounds when a point stands for several shapes)
            lo = [statistics.median(v[1] for v in series[x]) for x in xs]
            hi = [statistics.median(v[2] for v in series[x]) for x in xs]
            color, ls = styles[kernel]
            ax.errorbar(xs, ys, yerr=[[max(0.0, y - l) for y, l in zip(ys, lo)],
                                      [max(0.0, h - y) for y, h in zip(ys, hi)]],
                        marker="o", ms=3, lw=1.4, color=color, ls=ls, label=kernel,
                        capsize=2, elinewidth=0.8)
        # the roofline: the measured peak of the unit (x threads)
        if metric == "gflops":
            fma, bf = peak_of(ctx, threads)
            if fma:
                ax.axhline(fma, color="0.4", ls="-.", lw=0.9)
                ax.annotate("FP32 FMA peak", (0.02, fma), xycoords=("axes fraction", "data"),
                            fontsize=6, color="0.3", va="bottom")
            if bf and any(" bf16" in k or " fp16" in k for k in kernels):
                ax.axhline(bf, color="0.6", ls=":", lw=0.9)
                ax.annotate("BF16 dot peak", (0.02, bf), xycoords=("axes fraction", "data"),
                            fontsize=6, color="0.4", va="bottom")
        elif metric == "pct_peak":
            ax.axhline(100, color="0.4", ls="-.", lw=0.9)
        ax.set_xscale("log", base=2)
        ax.set_title(f"d={d} causal={causal} threads={threads}", fontsize=9)
        ax.set_xlabel("sequence length (Nq = Nkv)", fontsize=8)
        ax.grid(True, which="both", alpha=0.3)
        ax.tick_params(labelsize=7)
    for row in axes:
        row[0].set_ylabel(ylabel, fontsize=8)
    handles = [
        plt.Line2D([], [], color=styles[k][0], ls=styles[k][1], marker="o", ms=3, label=k)
        for k in kernels
    ]
    fig.legend(handles=handles, loc="lower center", ncol=min(len(kernels), 6), fontsize=8)
    fig.suptitle(title_of(ctx, ylabel), fontsize=10)
    # Room for the legend below the panels, in inches of the figure's height.
    legend_in = 0.3 + 0.22 * math.ceil(len(kernels) / 6)
    fig_h = fig.get_size_inches()[1]
    fig.tight_layout(rect=(0, legend_in / fig_h, 1, 1 - 0.35 / fig_h))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def group_label(group):
    """A map row: the group's shape without threads, as the sweep's summary
    writes it (B1 H8 N128 d64 causal bf16)."""
    f = dict(p.split(":", 1) for p in group.split("/") if ":" in p)
    layer = group.startswith("layer/")
    dt = (" " + f["dtype"] if "dtype" in f else "") + (" kv:" + f["kv_dtype"] if "kv_dtype" in f else "")
    causal = " causal" if f.get("causal") == "1" else ""
    if layer:
        return f"layer B{f.get('B')} N{f.get('N')} dm{f.get('dm')} H{f.get('H')}{causal}{dt}"
    kvs = f" KV{f['KV']}" if f.get("KV") != f.get("H") else ""
    seq = f"N{f.get('Nq')}" if f.get("Nq") == f.get("Nkv") else f"Nq{f.get('Nq')} Nkv{f.get('Nkv')}"
    return f"B{f.get('B')} H{f.get('H')}{kvs} {seq} d{f.get('d')}{causal}{dt}"


def fastest_cells(doc):
    """{(row label, threads): (fastest, ties, median, best peer, its median)} for
    every group of the file, decided by mha_stats.group_decisions: the rule of
    the sweep's summary (auto and peers are never the fastest)."""
    decs = group_decisions(doc)
    samples = group_samples(doc)
    cells = {}
    for g, (win, ties, med) in decs.items():
        base, _, t = g.rpartition("/threads:")
        peers = {k: statistics.median(v) for k, v in samples[g].items() if is_peer(k) and v}
        bp = max(peers, key=lambda k: (peers[k], k)) if peers else None
        cells[(group_label(base), int(t or 0))] = (win, ties, med, bp, peers.get(bp))
    return decs, cells


def plot_fastest(doc, results, ctx, path):
    decs, cells = fastest_cells(doc)
    if not cells:
        return False
    # the % of peak of the fastest: the row's median pct_peak (typed rows are
    # their own series in results, keyed "kernel dtype")
    pct = {}
    for (kernel, s), r in results.items():
        pct[(kernel.split(" ")[0], s)] = r["pct_peak"]
    kernels = kernel_order({c[0] for c in cells.values()})
    colors = kernel_colors(kernel_order({c[0] for c in cells.values()} | {k.split(" ")[0] for k, _ in results}))
    rows = []
    for g in decs:  # in the file's order of first appearance
        lab = group_label(g.rpartition("/threads:")[0])
        if lab not in rows:
            rows.append(lab)
    cols = sorted({t for _, t in cells})
    fig, ax = plt.subplots(figsize=(1.6 * len(cols) + 3.2, 0.42 * len(rows) + 1.9))
    for i, lab in enumerate(rows):
        for j, t in enumerate(cols):
            if (lab, t) not in cells:
                continue
            kernel, ties, gf, bp, bpm = cells[(lab, t)]
            ax.add_patch(plt.Rectangle((j, i), 1, 1, color=colors[kernel], alpha=0.85))
            tie = f" +{len(ties)} tied" if ties else ""
            vs = f"\n{gf / bpm:.2f}x {bp[5:]}" if bp and bpm else ""
            ax.text(j + 0.5, i + 0.5, f"{kernel}{tie}\n{gf:.0f} GF/s{vs}", ha="center",
                    va="center", fontsize=5.5)
    ax.set_xlim(0, len(cols))
    ax.set_ylim(len(rows), 0)
    ax.set_xticks([j + 0.5 for j in range(len(cols))])
    ax.set_xticklabels([f"threads {t}" for t in cols], fontsize=7)
    ax.set_yticks([i + 0.5 for i in range(len(rows))])
    ax.set_yticklabels(rows, fontsize=7)
    ax.tick_params(length=0)
    ax.legend(handles=[Patch(color=colors[k], label=k) for k in kernels], fontsize=7,
              loc="upper left", bbox_to_anchor=(1.01, 1))
    what = "fastest of our kernels per shape (median GFLOP/s; +N tied: 95% median intervals overlap"
    what += "; ours / best peer)" if any(c[3] for c in cells.values()) else ")"
    ax.set_title(title_of(ctx, what), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", help="an mhabench sweep result file (Google Benchmark JSON)")
    ap.add_argument("-o", "--out-dir", default=None, help="where to write the PNGs")
    ap.add_argument("--decisions", action="store_true",
                    help="print the fastest-kernel map's decisions (as mhabench report "
                    "--decisions) instead of drawing")
    args = ap.parse_args(argv)
    try:
        results, ctx = load(args.results)
        with open(args.results) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        print(f"plot_results: cannot read {args.results}: {e}", file=sys.stderr)
        return 2
    if args.decisions:
        decs, _ = fastest_cells(doc)
        print_decisions(decs)
        return 0
    if plt is None:
        print("plot_results: drawing needs Debian's python3-matplotlib (apt-get install "
              "python3-matplotlib; run with /usr/bin/python3)", file=sys.stderr)
        return 2
    if not results:
        print(f"plot_results: {args.results} has no sweep rows (kernel/B:../...)",
              file=sys.stderr)
        return 2
    out_dir = args.out_dir or os.path.dirname(os.path.abspath(args.results))
    os.makedirs(out_dir, exist_ok=True)
    stem = os.path.splitext(os.path.basename(args.results))[0]
    written = []
    for name, ok in (
        ("gflops", lambda p: plot_lines(results, ctx, "gflops", "GFLOP/s", p)),
        ("pct_peak", lambda p: plot_lines(results, ctx, "pct_peak", "% of FMA peak", p)),
        ("fastest", lambda p: plot_fastest(doc, results, ctx, p)),
    ):
        path = os.path.join(out_dir, f"{stem}-{name}.png")
        if ok(path):
            written.append(path)
    for p in written:
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
