#!/usr/bin/python3
# Regenerate with: /usr/bin/python3 tests/data/gen_torch.py   (from the repository root; needs torch + numpy)
# Writes the PyTorch float32 CPU ground truth used by tests/test_cli.c: one folder per case under
# tests/data/, layer cases (torch.nn.MultiheadAttention) and attention-core cases (manual softmax).
import json
import os

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def save(case, name, t):
    d = os.path.join(HERE, case)
    os.makedirs(d, exist_ok=True)
    a = np.ascontiguousarray(t.detach().cpu().numpy().astype("<f4"))
    np.save(os.path.join(d, name + ".npy"), a)


def save_meta(case, meta):
    with open(os.path.join(HERE, case, "meta.json"), "w") as f:
        json.dump(meta, f, sort_keys=True)
        f.write("\n")


def layer_case(case, seed, B, Nq, Nkv, E, H, causal, bias, self_attn):
    """nn.MultiheadAttention with random (seeded) init; weights split into nn.Linear layout."""
    torch.manual_seed(seed)
    m = torch.nn.MultiheadAttention(embed_dim=E, num_heads=H, bias=bias, batch_first=True)
    m.eval()
    # The default init leaves the biases at zero; give them values so they are tested.
    if bias:
        with torch.no_grad():
            m.in_proj_bias.uniform_(-0.5, 0.5)
            m.out_proj.bias.uniform_(-0.5, 0.5)
    query = torch.randn(B, Nq, E)
    if self_attn:
        key = value = query
    else:
        key = torch.randn(B, Nkv, E)
        value = torch.randn(B, Nkv, E)
    mask = None
    # Bottom-right causal; with Nq == 1 (decode) the single query sees every key: no mask.
    if causal and Nq > 1:
        assert Nq == Nkv
        mask = torch.triu(torch.ones(Nq, Nkv, dtype=torch.bool), diagonal=1)  # True = masked
    # Grad enabled keeps torch 1.13 off its fused fast path, which fails for bias=False
    # (_native_multi_head_attention rejects a None qkv_bias); the math is the same.
    out, _ = m(query, key, value, attn_mask=mask, need_weights=False)
    w_q, w_k, w_v = m.in_proj_weight.chunk(3, dim=0)
    save(case, "query", query)
    save(case, "key", key)
    save(case, "value", value)
    save(case, "w_q", w_q)
    save(case, "w_k", w_k)
    save(case, "w_v", w_v)
    save(case, "w_o", m.out_proj.weight)
    if bias:
        b_q, b_k, b_v = m.in_proj_bias.chunk(3, dim=0)
        save(case, "b_q", b_q)
        save(case, "b_k", b_k)
        save(case, "b_v", b_v)
        save(case, "b_o", m.out_proj.bias)
    save(case, "out", out)
    save_meta(case, {"kind": "layer", "heads": H, "causal": bool(causal),
                     "self_attention": bool(self_attn), "bias": bool(bias)})


def attention(q, k, v, causal, scale):
    """softmax(q k^T * scale + mask) v in float32; GQA by repeating KV heads; bottom-right causal."""
    H, kvh = q.shape[1], k.shape[1]
    k = k.repeat_interleave(H // kvh, dim=1)
    v = v.repeat_interleave(H // kvh, dim=1)
    Nq, Nkv = q.shape[2], k.shape[2]
    s = torch.matmul(q, k.transpose(-1, -2)) * scale
    if causal:
        i = torch.arange(Nq).unsqueeze(1)
        j = torch.arange(Nkv).unsqueeze(0)
        visible = j <= i + (Nkv - Nq)
        s = s.masked_fill(~visible, float("-inf"))
        p = torch.softmax(s, dim=-1)
        # A row with no visible key is all -inf, softmax gives NaN; the contract says zeros.
        empty = ~visible.any(dim=-1)
        p = p.masked_fill(empty.unsqueeze(-1), 0.0)
    else:
        p = torch.softmax(s, dim=-1)
    return torch.matmul(p, v)


def attn_case(case, seed, B, H, kvh, Nq, Nkv, d, causal):
    torch.manual_seed(seed)
    q = torch.randn(B, H, Nq, d)
    k = torch.randn(B, kvh, Nkv, d)
    v = torch.randn(B, kvh, Nkv, d)
    scale = 1.0 / float(np.sqrt(d))
    out = attention(q, k, v, causal, torch.tensor(scale, dtype=torch.float32))
    assert torch.isfinite(out).all()
    save(case, "q", q)
    save(case, "k", k)
    save(case, "v", v)
    save(case, "out", out)
    save_meta(case, {"kind": "attend", "heads": H, "kv_heads": kvh, "causal": bool(causal)})


def main():
    torch.set_num_threads(1)
    layer_case("self", 101, B=2, Nq=5, Nkv=5, E=16, H=4, causal=False, bias=True, self_attn=True)
    layer_case("causal", 102, B=2, Nq=6, Nkv=6, E=16, H=2, causal=True, bias=True, self_attn=True)
    layer_case("cross", 103, B=1, Nq=3, Nkv=7, E=12, H=3, causal=False, bias=True,
               self_attn=False)
    layer_case("decode", 104, B=2, Nq=1, Nkv=9, E=16, H=4, causal=True, bias=True,
               self_attn=False)
    layer_case("nobias", 105, B=2, Nq=4, Nkv=4, E=8, H=2, causal=False, bias=False,
               self_attn=True)
    attn_case("attn_self", 201, B=1, H=2, kvh=2, Nq=7, Nkv=7, d=8, causal=False)
    attn_case("attn_causal", 202, B=2, H=2, kvh=2, Nq=9, Nkv=9, d=5, causal=True)
    attn_case("attn_cross", 203, B=1, H=3, kvh=3, Nq=4, Nkv=11, d=16, causal=False)
    attn_case("attn_gqa", 204, B=1, H=4, kvh=2, Nq=6, Nkv=6, d=8, causal=True)
    attn_case("attn_decode", 205, B=1, H=2, kvh=2, Nq=1, Nkv=13, d=8, causal=True)


if __name__ == "__main__":
    main()
