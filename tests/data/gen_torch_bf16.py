#!/usr/bin/python3
# Regenerate with: python3 tests/data/gen_torch_bf16.py   (from the repository root; needs
# torch >= 2.5 and numpy; docs/verification.md names the version the committed files came from)
# Writes the bf16 fixtures of tests/test_torch_bf16.c: one folder bf16_<case>/ per shape with
# q/k/v as bf16 bits ('<u2'), the float64 reference computed from those bf16 values
# (ref.npy, '<f8'), PyTorch's own bf16 SDPA output (torch.npy, bf16 bits) and, in meta.json,
# torch's max abs error against the reference: the yardstick our bf16 kernels must stay within.
import json
import os

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))


def save_bits(case, name, t):
    """A bf16 tensor as its raw bits: NumPy has no bf16, '<u2' keeps them exactly."""
    assert t.dtype == torch.bfloat16
    a = t.detach().cpu().contiguous().view(torch.int16).numpy().view("<u2")
    np.save(os.path.join(HERE, case, name + ".npy"), np.ascontiguousarray(a))


def save_f8(case, name, t):
    a = np.ascontiguousarray(t.detach().cpu().numpy().astype("<f8"))
    np.save(os.path.join(HERE, case, name + ".npy"), a)


def reference(q, k, v, causal, scale):
    """softmax(q k^T * scale + mask) v in float64 on the bf16 values; GQA by repeating KV heads;
    bottom-right causal (query i sees key j iff j <= i + Nkv - Nq), as gen_torch.py."""
    q, k, v = q.double(), k.double(), v.double()
    H, kvh = q.shape[1], k.shape[1]
    k = k.repeat_interleave(H // kvh, dim=1)
    v = v.repeat_interleave(H // kvh, dim=1)
    Nq, Nkv = q.shape[2], k.shape[2]
    s = torch.matmul(q, k.transpose(-1, -2)) * scale
    if causal:
        i = torch.arange(Nq).unsqueeze(1)
        j = torch.arange(Nkv).unsqueeze(0)
        visible = j <= i + (Nkv - Nq)
        assert visible.any(dim=-1).all(), "no fixture has a fully masked row"
        s = s.masked_fill(~visible, float("-inf"))
    return torch.matmul(torch.softmax(s, dim=-1), v)


def sdpa(q, k, v, causal, scale):
    """PyTorch's bf16 SDPA as a user calls it: is_causal for square shapes (its top-left
    alignment is ours there), an explicit bottom-right mask otherwise; GQA natively."""
    Nq, Nkv = q.shape[2], k.shape[2]
    kw = {"scale": scale, "enable_gqa": q.shape[1] != k.shape[1]}
    if causal and Nq == Nkv:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, **kw)
    mask = None
    if causal:
        i = torch.arange(Nq).unsqueeze(1)
        j = torch.arange(Nkv).unsqueeze(0)
        mask = j <= i + (Nkv - Nq)  # True = take part
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **kw)


def case(name, seed, B, H, kvh, Nq, Nkv, d, causal):
    torch.manual_seed(seed)
    # Random inputs rounded to bf16: the reference and torch both see exactly these values.
    q = torch.randn(B, H, Nq, d).to(torch.bfloat16)
    k = torch.randn(B, kvh, Nkv, d).to(torch.bfloat16)
    v = torch.randn(B, kvh, Nkv, d).to(torch.bfloat16)
    # The scale as the library holds it (a float32), so both sides use the same number.
    scale = float(np.float32(1.0 / np.sqrt(d)))
    ref = reference(q, k, v, causal, scale)
    out = sdpa(q, k, v, causal, scale)
    assert out.dtype == torch.bfloat16 and torch.isfinite(out).all()
    err = float((out.double() - ref).abs().max())
    case_dir = "bf16_" + name
    os.makedirs(os.path.join(HERE, case_dir), exist_ok=True)
    save_bits(case_dir, "q", q)
    save_bits(case_dir, "k", k)
    save_bits(case_dir, "v", v)
    save_f8(case_dir, "ref", ref)
    save_bits(case_dir, "torch", out)
    meta = {"kind": "attend_bf16", "batch": B, "heads": H, "kv_heads": kvh, "seq_q": Nq,
            "seq_kv": Nkv, "head_dim": d, "causal": bool(causal),
            "scale": scale, "torch_max_abs_err": err, "torch_version": torch.__version__,
            "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "torch_threads": torch.get_num_threads()}
    with open(os.path.join(HERE, case_dir, "meta.json"), "w") as f:
        json.dump(meta, f, sort_keys=True)
        f.write("\n")
    print(f"{case_dir:12s} B={B} H={H} kvh={kvh} Nq={Nq} Nkv={Nkv} d={d} causal={int(causal)}"
          f"  torch max abs err {err:.6g}")


def main():
    torch.set_num_threads(1)
    case("self", 301, B=1, H=4, kvh=4, Nq=64, Nkv=64, d=64, causal=False)
    case("causal", 302, B=1, H=4, kvh=4, Nq=64, Nkv=64, d=64, causal=True)
    case("cross", 303, B=1, H=2, kvh=2, Nq=37, Nkv=91, d=64, causal=False)
    case("gqa", 304, B=1, H=8, kvh=2, Nq=33, Nkv=33, d=80, causal=True)
    # One query over a 513-token cache shared by the 4 query heads (GQA-style decode).
    case("decode", 305, B=1, H=4, kvh=1, Nq=1, Nkv=513, d=128, causal=False)
    case("tail", 306, B=1, H=3, kvh=3, Nq=7, Nkv=7, d=17, causal=True)


if __name__ == "__main__":
    main()
