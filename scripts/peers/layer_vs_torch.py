#!/usr/bin/env python3
"""layer_vs_torch.py [--mhabench BIN] [--kernel K] [--dtype bf16|fp32] [--rounds R]
[--threads 1,2] - the whole attention layer against PyTorch's
nn.MultiheadAttention (need_weights=False: its SDPA fast path) on BERT-base
(B=1, N=512, d_model 768, 12 heads) and GPT-2 (B=1, N=1024, causal), in one
run: per round and shape, `mhabench profile --layer` of our kernel and the
same layer in PyTorch timed here, alternately, so both see the same host.
Prints per shape and thread count the median GFLOP/s of each (the FLOPs of
mha_forward_flops: visible attention pairs plus the four projections), the
ratio of the medians, and the median and range of the per-round ratios (each
of two runs seconds apart: the figure to quote on a host whose speed drifts).
The layer has no peer row in a sweep (the peers take the attention core);
this is the measurement behind docs/amx.md's layer figures.

Runs under the peers' environment (scripts/peers/setup-venv.sh):
    .venv-peers/bin/python3 scripts/peers/layer_vs_torch.py --kernel flash.amx
"""
import argparse
import re
import statistics
import subprocess
import sys
import time

SHAPES = [("BERT-base N=512", 512, False), ("GPT-2 N=1024 causal", 1024, True)]
DM, H = 768, 12


def layer_flops(n, causal):
    """mha_forward_flops for B=1 self-attention of n tokens."""
    pairs = n * (n + 1) // 2 if causal else n * n
    return 4.0 * H * pairs * (DM // H) + 2.0 * (n + 2 * n + n) * DM * DM


def torch_rate(torch, n, causal, dtype, threads, seconds):
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    m = torch.nn.MultiheadAttention(DM, H, batch_first=True, dtype=dtype).eval()
    x = torch.rand(1, n, DM, dtype=dtype) * 2 - 1
    mask = torch.nn.Transformer.generate_square_subsequent_mask(n, dtype=dtype) if causal else None
    with torch.inference_mode():
        def call():
            return m(x, x, x, need_weights=False, attn_mask=mask, is_causal=causal)[0]
        call()
        times = []
        end = time.perf_counter() + seconds
        while time.perf_counter() < end or len(times) < 3:
            t0 = time.perf_counter()
            call()
            times.append(time.perf_counter() - t0)
    return layer_flops(n, causal) / statistics.median(times) / 1e9


def ours_rate(binary, kernel, n, causal, dtype, threads, seconds):
    cmd = [binary, "profile", "--kernel", kernel, "--layer", "--dtype", dtype, "--heads", str(H),
           "--head-dim", str(DM // H), "--seq", str(n), "--threads", str(threads),
           "--seconds", str(seconds)] + (["--causal"] if causal else [])
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    m = re.search(r"ms/call \(median\), ([0-9.]+) GFLOP/s", out)
    if not m:
        sys.exit("layer_vs_torch.py: no rate in `%s`:\n%s" % (" ".join(cmd), out))
    return float(m.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mhabench", default="build/mhabench")
    ap.add_argument("--kernel", default="auto")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--seconds", type=float, default=0.5)
    a = ap.parse_args()
    import torch
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    threads = [int(t) for t in a.threads.split(",")]
    res = {}
    for _ in range(a.rounds):
        for name, n, causal in SHAPES:
            for t in threads:
                r = res.setdefault((name, t), ([], []))
                r[0].append(ours_rate(a.mhabench, a.kernel, n, causal, a.dtype, t, a.seconds))
                r[1].append(torch_rate(torch, n, causal, dtype, t, a.seconds))
    print("torch %s; mhabench kernel %s; %s; medians of %d alternating rounds" %
          (torch.__version__, a.kernel, a.dtype, a.rounds))
    print("%-22s %3s %12s %12s %8s %18s" % ("layer", "thr", "ours GF/s", "torch GF/s", "ratio",
                                            "per round: median"))
    for (name, t), (ours, theirs) in res.items():
        mo, mt = statistics.median(ours), statistics.median(theirs)
        # each round's ratio is of two runs seconds apart: on a host whose speed
        # drifts within minutes it is the steadier figure of the two
        per = sorted(o / r for o, r in zip(ours, theirs))
        print("%-22s %3d %12.1f %12.1f %7.2fx %7.2fx (%.2f-%.2f)" %
              (name, t, mo, mt, mo / mt, statistics.median(per), per[0], per[-1]))


if __name__ == "__main__":
    main()
