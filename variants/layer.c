/* layer.c - the full multi-head attention layer (the seed's forward):
 * Q = x W_q^T + b_q, K/V likewise from the key/value inputs, attention per
 * head through any registered kernel on [B,N,H*d] views (no copies), then
 * y = A W_o^T + b_o. Projections use the blocked SIMD GEMM of the active ISA. */
#include <string.h>

#include "internal.h"

/* The projections run on the attention kernel's ISA, so a layer timed with
 * flash.avx2 is all AVX2 (its % of peak means something); blas.cblas, whose
 * BLAS and softmax follow the active ISA, gets the active ISA's GEMM. */
static const mha_isa_ops *linear_for(const mha_kernel *k) {
    return mha_ops_for(mha_kernel_run_isa(k));
}

/* Checks the layer's dims (and, for a forward call, its weights) and builds
 * the attention problem. A workspace query needs no weights. */
static mha_status layer_problem(const mha_layer *L, const mha_layer_shape *s, mha_problem *p,
                                int need_weights) {
    if (!L || !s) return mha_set_error(MHA_EINVAL, "layer or shape is NULL");
    if (L->d_model <= 0)
        return mha_set_error(MHA_EINVAL, "layer.d_model = %lld: must be >= 1",
                             (long long)L->d_model);
    if (L->heads <= 0)
        return mha_set_error(MHA_EINVAL, "layer.heads = %lld: must be >= 1", (long long)L->heads);
    if (L->d_model % L->heads != 0)
        return mha_set_error(MHA_EINVAL, "layer.d_model = %lld is not divisible by heads = %lld",
                             (long long)L->d_model, (long long)L->heads);
    if (L->kv_heads < 0)
        return mha_set_error(MHA_EINVAL, "layer.kv_heads = %lld: must be >= 0 (0 = heads)",
                             (long long)L->kv_heads);
    if (need_weights && (!L->w_q || !L->w_k || !L->w_v || !L->w_o))
        return mha_set_error(MHA_EINVAL, "layer weights w_q, w_k, w_v and w_o are required");
    *p = (mha_problem){.batch = s->batch,
                       .heads = L->heads,
                       .kv_heads = L->kv_heads ? L->kv_heads : L->heads,
                       .seq_q = s->seq_q,
                       .seq_kv = s->seq_kv,
                       .head_dim = L->d_model / L->heads,
                       .causal = s->causal,
                       .scale = s->scale};
    return mha_problem_validate(p);
}

typedef struct {
    size_t q, kv, a, pack, attn, total; /* bytes, 64-aligned */
} layer_plan;

static mha_status plan(const mha_kernel *k, const mha_problem *p, const mha_options *o,
                       int64_t d_model, layer_plan *lp) {
    const size_t f = sizeof(float);
    const size_t dkv = (size_t)(p->kv_heads * p->head_dim);
    lp->q = mha_align64(mha_mul_sz(mha_mul_sz((size_t)(p->batch * p->seq_q), (size_t)d_model), f));
    lp->kv = mha_align64(mha_mul_sz(mha_mul_sz((size_t)(p->batch * p->seq_kv), dkv), f));
    lp->a = lp->q;
    /* The largest pack any ISA needs, so the size cannot change under MHA_ISA. */
    size_t pk = 0;
    for (int i = 0; i < MHA_ISA_COUNT; i++) {
        const mha_isa_ops *ops = mha_ops_for((mha_isa)i);
        size_t a = ops->linear_pack_floats(d_model, d_model),
               b = ops->linear_pack_floats((int64_t)dkv, d_model);
        pk = a > pk ? a : pk;
        pk = b > pk ? b : pk;
    }
    lp->pack = mha_align64(mha_mul_sz(pk, f));
    mha_status st = mha_workspace_size(k, p, o, &lp->attn);
    if (st != MHA_OK) return st;
    lp->attn = mha_align64(lp->attn);
    lp->total = mha_add_sz(mha_add_sz(mha_add_sz(lp->q, 2 * lp->kv), mha_add_sz(lp->a, lp->pack)),
                           lp->attn);
    if (lp->total == SIZE_MAX || lp->kv > SIZE_MAX / 2)
        return mha_set_error(MHA_ENOMEM, "layer workspace overflows size_t");
    return MHA_OK;
}

mha_status mha_forward_workspace_size(const mha_kernel *k, const mha_layer *L,
                                      const mha_layer_shape *s, const mha_options *o,
                                      size_t *bytes) {
    mha_problem p;
    layer_plan lp;
    mha_status st;
    if (!bytes) return mha_set_error(MHA_EINVAL, "bytes is NULL");
    if ((st = layer_problem(L, s, &p, 0)) != MHA_OK) return st;
    if ((st = plan(k, &p, o, L->d_model, &lp)) != MHA_OK) return st;
    *bytes = lp.total;
    return MHA_OK;
}

double mha_forward_flops(const mha_layer *L, const mha_layer_shape *s) {
    mha_problem p;
    if (layer_problem(L, s, &p, 0) != MHA_OK) return 0.0;
    const double dm = (double)L->d_model, dkv = (double)(p.kv_heads * p.head_dim);
    const double proj = 2.0 * (double)s->batch *
                        ((double)s->seq_q * dm * dm * 2.0 + 2.0 * (double)s->seq_kv * dkv * dm);
    return mha_problem_flops(&p) + proj;
}

mha_status mha_forward(const mha_kernel *k, const mha_layer *L, const mha_layer_shape *s,
                       const mha_options *o, const float *query, const float *key,
                       const float *value, float *out, void *workspace, size_t workspace_size) {
    mha_problem p;
    layer_plan lp;
    mha_status st;
    if ((st = layer_problem(L, s, &p, 1)) != MHA_OK) return st;
    if ((st = mha_kernel_supported(k)) != MHA_OK) return st;
    if (!query || !key || !value || !out)
        return mha_set_error(MHA_EINVAL, "layer input or output pointer is NULL");
    if ((st = plan(k, &p, o, L->d_model, &lp)) != MHA_OK) return st;
    if (!workspace || workspace_size < lp.total)
        return mha_set_error(MHA_EINVAL, "layer workspace of %zu bytes given, %zu needed",
                             workspace ? workspace_size : 0, lp.total);
    if (((uintptr_t)workspace & (MHA_WORKSPACE_ALIGN - 1)) != 0)
        return mha_set_error(MHA_EINVAL, "workspace %p is not %d-byte aligned", workspace,
                             MHA_WORKSPACE_ALIGN);

    const int threads = mha_resolve_threads(o);
    const mha_isa_ops *lin = linear_for(k);
    const int64_t dm = L->d_model, dk = p.head_dim, dkv = p.kv_heads * dk;
    const int64_t Mq = p.batch * p.seq_q, Mkv = p.batch * p.seq_kv;
    char *ws = workspace;
    float *Qp = (float *)ws, *Kp = (float *)(ws + lp.q), *Vp = (float *)(ws + lp.q + lp.kv);
    float *A = (float *)(ws + lp.q + 2 * lp.kv), *pack = (float *)(ws + lp.q + 2 * lp.kv + lp.a);
    void *attn_ws = ws + lp.q + 2 * lp.kv + lp.a + lp.pack;

    lin->linear(Mq, dm, dm, query, dm, L->w_q, dm, L->b_q, Qp, dm, pack, threads);
    lin->linear(Mkv, dkv, dm, key, dm, L->w_k, dm, L->b_k, Kp, dkv, pack, threads);
    lin->linear(Mkv, dkv, dm, value, dm, L->w_v, dm, L->b_v, Vp, dkv, pack, threads);

    const mha_tensor qv = mha_view_bnhd(Qp, p.heads, p.seq_q, dk);
    const mha_tensor kv = mha_view_bnhd(Kp, p.kv_heads, p.seq_kv, dk);
    const mha_tensor vv = mha_view_bnhd(Vp, p.kv_heads, p.seq_kv, dk);
    const mha_tensor_mut av = mha_view_bnhd_mut(A, p.heads, p.seq_q, dk);
    st = mha_attend(k, &p, o, &qv, &kv, &vv, &av, attn_ws, lp.attn);
    if (st != MHA_OK) return st;

    lin->linear(Mq, dm, dm, A, dm, L->w_o, dm, L->b_o, out, dm, pack, threads);
    return MHA_OK;
}
