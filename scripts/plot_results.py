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

from mha_stats import counted, median_interval  # scripts/: shared with the other tools

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

NAME_RE = re.compile(
    r"^(?P<kernel>[^/]+)/B:(?P<b>\d+)/H:(?P<h>\d+)/KV:(?P<kv>\d+)/Nq:(?P<nq>\d+)"
    r"/Nkv:(?P<nkv>\d+)/d:(?P<d>\d+)/causal:(?P<causal>[01])"
    r"(?:/dtype:(?P<dtype>\w+))?(?:/kv_dtype:(?P<kv_dtype>\w+))?/threads:(?P<threads>\d+)$"
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
        key = (kernel, tuple(int(m[a]) for a in AXES))
        r = rows.setdefault(key, {"gflops": [], "pct_peak": [], "disturbed": []})
        r["gflops"].append(float(b["GFLOPS"]))
        r["pct_peak"].append(float(b.get("pct_peak", 0.0)))
        r["disturbed"].append(bool(b.get("disturbed", 0)))
    out = {}
    for k, v in rows.items():
        e = {}
        for m in ("gflops", "pct_peak"):
            xs = counted(zip(v[m], v["disturbed"]))  # the repetitions that count
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


def row_label(rk):
    """A map row: the shape without Nkv and threads (Nq only when it differs)."""
    b, h, kv, nq, d, causal = rk
    kvs = f" KV{kv}" if kv != h else ""
    q = f" Nq{nq}" if nq != -1 else ""
    return f"B{b} H{h}{kvs}{q} d{d} causal={causal}"


def plot_fastest(results, ctx, path):
    # best kernel of ours per full shape (incl. threads), and the best peer's rate
    best, peer = {}, {}
    for (kernel, s), r in results.items():
        if is_peer(kernel):
            if s not in peer or r["gflops"] > peer[s][1]:
                peer[s] = (kernel, r["gflops"])
        elif s not in best or r["gflops"] > best[s][1]:
            best[s] = (kernel, r["gflops"], r["pct_peak"])
    if not best:
        return False
    kernels = kernel_order({v[0] for v in best.values()})
    colors = kernel_colors(kernel_order({k for k, _ in results}))
    # rows: the shape without Nkv and threads; columns: (Nkv, threads)
    rows = sorted({(s[0], s[1], s[2], s[3] if s[3] != s[4] else -1, s[5], s[6]) for s in best})
    cols = sorted({(s[4], s[7]) for s in best})
    fig, ax = plt.subplots(figsize=(1.25 * len(cols) + 2.8, 0.42 * len(rows) + 1.9))
    for i, rk in enumerate(rows):
        for j, (nkv, threads) in enumerate(cols):
            b, h, kv, nqk, d, causal = rk
            s = (b, h, kv, nkv if nqk == -1 else nqk, nkv, d, causal, threads)
            if s not in best:
                continue
            kernel, gf, pct = best[s]
            ax.add_patch(plt.Rectangle((j, i), 1, 1, color=colors[kernel], alpha=0.85))
            vs = ""
            if s in peer and peer[s][1] > 0:  # ours / the best peer
                vs = f"\n{gf / peer[s][1]:.2f}x {peer[s][0][5:]}"
            ax.text(j + 0.5, i + 0.5, f"{kernel}\n{gf:.0f} GF/s {pct:.0f}%{vs}", ha="center",
                    va="center", fontsize=5.5)
    ax.set_xlim(0, len(cols))
    ax.set_ylim(len(rows), 0)
    ax.set_xticks([j + 0.5 for j in range(len(cols))])
    ax.set_xticklabels([f"Nkv {n}\nt={t}" for n, t in cols], fontsize=7)
    ax.set_yticks([i + 0.5 for i in range(len(rows))])
    labels = [row_label(rk) for rk in rows]
    ax.set_yticklabels(labels, fontsize=7)
    ax.tick_params(length=0)
    ax.legend(handles=[Patch(color=colors[k], label=k) for k in kernels], fontsize=7,
              loc="upper left", bbox_to_anchor=(1.01, 1))
    what = "fastest kernel per shape (GFLOP/s, % of peak"
    what += ", ours / best peer)" if peer else ")"
    ax.set_title(title_of(ctx, what), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", help="an mhabench sweep result file (Google Benchmark JSON)")
    ap.add_argument("-o", "--out-dir", default=None, help="where to write the PNGs")
    args = ap.parse_args(argv)
    try:
        results, ctx = load(args.results)
    except (OSError, ValueError) as e:
        print(f"plot_results: cannot read {args.results}: {e}", file=sys.stderr)
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
        ("fastest", lambda p: plot_fastest(results, ctx, p)),
    ):
        path = os.path.join(out_dir, f"{stem}-{name}.png")
        if ok(path):
            written.append(path)
    for p in written:
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
