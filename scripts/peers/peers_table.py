#!/usr/bin/env python3
"""peers_table.py RESULTS.json - the comparison of a sweep run with --peers as
a Markdown table: per shape and thread count, our fastest kernel, the best
peer, ours / best peer (ratio of medians; "tie" when their 95% median
intervals overlap), and every peer's median GFLOP/s; then each peer's
version, settings and its checked max error. Reads the file's mha_rows
summaries (medians and intervals over the undisturbed repetitions, as the
sweep's own summary) and falls back to the iteration rows. Standard library
only (plus scripts/mha_stats.py), so it runs with Debian's python3."""
import argparse
import json
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from mha_stats import counted, median_interval  # noqa: E402

NAME = re.compile(r"^(?P<kernel>[^/]+)/(?P<shape>B:.*)/threads:(?P<threads>\d+)$")


def load(path):
    with open(path) as f:
        doc = json.load(f)
    ctx = doc.get("context", {})
    rows = {}  # (shape, threads) -> kernel -> (median, lo, hi)
    samples, labels, errs = {}, {}, {}
    for b in doc.get("benchmarks", []):
        if b.get("run_type", "iteration") != "iteration" or b.get("error_occurred"):
            continue
        samples.setdefault(b["name"], []).append((b.get("GFLOPS", 0.0), b.get("disturbed", 0)))
        if b.get("label"):
            labels[b["name"]] = b["label"]
        if "max_err" in b:
            errs[b["name"]] = (b["max_err"], b.get("err_vs_tol", 0.0))
    summary = {r["name"]: r for r in doc.get("mha_rows", [])}
    for name, xs in samples.items():
        m = NAME.match(name)
        if not m:
            continue
        if name in summary and "gflops_median" in summary[name]:
            r = summary[name]
            med, (lo, hi) = r["gflops_median"], r["gflops_interval"]
        else:
            clean = counted(xs)
            med = statistics.median(clean)
            lo, hi = median_interval(clean)
        key = (m["shape"], int(m["threads"]))
        rows.setdefault(key, {})[m["kernel"]] = (med, lo, hi)
    return ctx, rows, labels, errs


SHAPE_FIELDS = {"B", "H", "KV", "Nq", "Nkv", "d", "causal", "dtype", "kv_dtype"}


def shape_text(shape):
    # the shape's fields; the variant segments (w4096:0, cap50, sinks, dv128,
    # ragged16, page16) kept as they are named, in their order
    f, tags = {}, []
    for p in shape.split("/"):
        k, sep, v = p.partition(":")
        if sep and k in SHAPE_FIELDS:
            f[k] = v
        else:
            tags.append(p)
    kv = f" KV={f['KV']}" if f.get("KV") != f.get("H") else ""
    n = f"N={f['Nq']}" if f.get("Nq") == f.get("Nkv") else f"Nq={f['Nq']} Nkv={f['Nkv']}"
    dt = f" {f['dtype']}" if "dtype" in f else ""
    dt += f" kv={f['kv_dtype']}" if "kv_dtype" in f else ""
    c = " causal" if f.get("causal") == "1" else ""
    c += "".join(" " + t for t in tags)
    return f"B={f['B']} H={f['H']}{kv} {n} d={f['d']}{c}{dt}"


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results")
    a = ap.parse_args(argv)
    try:
        ctx, rows, labels, errs = load(a.results)
    except (OSError, ValueError, KeyError) as e:
        print(f"peers_table: cannot read {a.results}: {e}", file=sys.stderr)
        return 2
    peers = sorted({k for r in rows.values() for k in r if k.startswith("peer.")})
    if not peers:
        print(f"peers_table: {a.results} has no peer rows (run sweep --peers)", file=sys.stderr)
        return 2
    print(f"Machine: {ctx.get('mha_cpu_model', '?')} ({ctx.get('mha_cpu_key', '?')}), "
          f"revision {ctx.get('mha_git_revision', '?')}, preset {ctx.get('mha_preset', '?')}. "
          "GFLOP/s are medians over the undisturbed repetitions; ours/peer is the ratio of "
          "medians, \"tie\" when the 95% median intervals overlap.\n")
    head = ["shape", "threads", "ours (fastest)", "GFLOP/s", "best peer", "GFLOP/s", "ours/peer"]
    head += [p[5:] for p in peers]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for (shape, threads), ks in sorted(rows.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        ours = {k: v for k, v in ks.items() if not k.startswith("peer.") and k != "auto"}
        theirs = {k: v for k, v in ks.items() if k.startswith("peer.")}
        if not ours or not theirs:
            continue
        ok, (om, olo, ohi) = max(ours.items(), key=lambda kv: kv[1][0])
        pk, (pm, plo, phi) = max(theirs.items(), key=lambda kv: kv[1][0])
        tie = not (olo > phi or plo > ohi)
        ratio = f"{om / pm:.2f}x" + (" (tie)" if tie else "")
        cells = [shape_text(shape), str(threads), ok, f"{om:.1f}", pk[5:], f"{pm:.1f}", ratio]
        cells += [f"{theirs[p][0]:.1f}" if p in theirs else "-" for p in peers]
        print("| " + " | ".join(cells) + " |")
    print("\nPeers (version from the run's context; settings and the largest checked error "
          "against the float64 oracle over its rows, as a share of the tolerance):\n")
    for p in peers:
        name = p[5:]
        mine = [n for n in labels if n.startswith(p + "/")]
        settings = sorted({labels[n] for n in mine})
        worst = max((errs[n] for n in errs if n.startswith(p + "/")), key=lambda e: e[1],
                    default=None)
        err = f"max error {worst[0]:.2g} ({worst[1]:.2f} of tolerance)" if worst else ""
        print(f"- **{name}**: {ctx.get('mha_peer_' + name, '?')}; {err}; settings: "
              + "; ".join(settings[:3]) + (" ..." if len(settings) > 3 else ""))
    for k, v in sorted(ctx.items()):
        if k.startswith("mha_peer_") and v.startswith("unavailable"):
            print(f"- **{k[9:]}**: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
