/* layer.c - the full multi-head attention layer (the seed's forward):
 * Q = x W_q^T + b_q, K/V likewise from the key/value inputs, attention per
 * head through any registered kernel on [B,N,H*d] views (no copies), then
 * y = A W_o^T + b_o. Projections use the blocked SIMD GEMM of the kernel's
 * ISA: fp32 (ops->linear), or for a bf16/fp16 layer the typed one
 * (ops->linear_half, vdpbf16ps) where the level has it, else the fp32 GEMM
 * on widened copies with the result rounded back (correct everywhere, fast
 * where the bf16 unit is). */
#include <string.h>

#include "internal.h"

/* The projections run on the attention kernel's ISA, so a layer timed with
 * flash.avx2 is all AVX2 (its % of peak means something); blas.cblas, whose
 * BLAS and softmax follow the active ISA, gets the active ISA's GEMM. An
 * emulated kernel (flash.amxemu, MHA_KT_EMULATED) gets the emulated tiles
 * for a bf16/fp16 layer: kernels/gemm_amx.c built on the emulation, so that
 * the AMX projections are checked on every machine. */
void mha_linear_half__amxemu(int64_t M, int64_t N, int64_t K, mha_dtype t, const void *x,
                             int64_t ldx, const void *w, int64_t ldw, const void *bias, void *y,
                             int64_t ldy, void *pack, int threads);
size_t mha_linear_half_pack_bytes__amxemu(int64_t M, int64_t N, int64_t K, int threads);
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
    if (L->dtype != MHA_F32 && L->dtype != MHA_BF16 && L->dtype != MHA_F16)
        return mha_set_error(MHA_EINVAL, "layer.dtype = %d (%s): must be fp32, bf16 or fp16",
                             (int)L->dtype, mha_dtype_name(L->dtype));
    if (need_weights && (!L->w_q || !L->w_k || !L->w_v || !L->w_o))
        return mha_set_error(MHA_EINVAL, "layer weights w_q, w_k, w_v and w_o are required");
    *p = (mha_problem){.batch = s->batch,
                       .heads = L->heads,
                       .kv_heads = L->kv_heads ? L->kv_heads : L->heads,
                       .seq_q = s->seq_q,
                       .seq_kv = s->seq_kv,
                       .head_dim = L->d_model / L->heads,
                       .causal = s->causal,
                       .scale = s->scale,
                       .dtype = L->dtype};
    return mha_problem_validate(p);
}

typedef struct {
    size_t q, kv, a, pack, attn, total; /* bytes, 64-aligned */
} layer_plan;

/* Scratch of the widened fallback for one projection (M x K by N x K):
 * fp32 copies of X, W and the bias, the fp32 result, and the fp32 GEMM's
 * pack (the largest any level needs). */
typedef struct {
    size_t x, w, b, y, pack, total;
} wide_plan;

static wide_plan wide_plan_of(int64_t M, int64_t N, int64_t K) {
    const size_t f = sizeof(float);
    wide_plan w;
    size_t pk = 0;
    for (int i = 0; i < MHA_ISA_COUNT; i++) {
        const size_t n = mha_ops_for((mha_isa)i)->linear_pack_floats(N, K);
        pk = n > pk ? n : pk;
    }
    w.x = mha_align64(mha_mul_sz(mha_mul_sz((size_t)M, (size_t)K), f));
    w.w = mha_align64(mha_mul_sz(mha_mul_sz((size_t)N, (size_t)K), f));
    w.b = mha_align64(mha_mul_sz((size_t)N, f));
    w.y = mha_align64(mha_mul_sz(mha_mul_sz((size_t)M, (size_t)N), f));
    w.pack = mha_align64(mha_mul_sz(pk, f));
    w.total = mha_add_sz(mha_add_sz(mha_add_sz(w.x, w.w), mha_add_sz(w.b, w.y)), w.pack);
    return w;
}

/* Pack bytes of one projection (M x K by N x K) on every path a level could
 * take, so the size cannot change under MHA_ISA. */
static size_t pack_bytes(mha_dtype t, int64_t M, int64_t N, int64_t K, int threads) {
    size_t pk = t == MHA_F32 ? 0 : mha_linear_half_pack_bytes__amxemu(M, N, K, threads);
    for (int i = 0; i < MHA_ISA_COUNT; i++) {
        const mha_isa_ops *ops = mha_ops_for((mha_isa)i);
        size_t n;
        if (t == MHA_F32)
            n = mha_mul_sz(ops->linear_pack_floats(N, K), sizeof(float));
        else if (ops->linear_half)
            n = ops->linear_half_pack_bytes(M, N, K, threads);
        else
            n = wide_plan_of(M, N, K).total;
        pk = n > pk ? n : pk;
    }
    return mha_align64(pk);
}

static mha_status plan(const mha_kernel *k, const mha_problem *p, const mha_options *o,
                       int64_t d_model, layer_plan *lp) {
    const size_t es = mha_dtype_size(p->dtype);
    const int64_t dkv = p->kv_heads * p->head_dim;
    const int threads = mha_resolve_threads(o);
    const int64_t Mq = p->batch * p->seq_q, Mkv = p->batch * p->seq_kv;
    lp->q = mha_align64(mha_mul_sz(mha_mul_sz((size_t)Mq, (size_t)d_model), es));
    lp->kv = mha_align64(mha_mul_sz(mha_mul_sz((size_t)Mkv, (size_t)dkv), es));
    lp->a = lp->q;
    const size_t pq = pack_bytes(p->dtype, Mq, d_model, d_model, threads),
                 pkv = pack_bytes(p->dtype, Mkv, dkv, d_model, threads);
    lp->pack = pq > pkv ? pq : pkv;
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

/* The widened path of a typed projection: X, W and the bias to fp32, the
 * fp32 GEMM, the result rounded (RNE) to t. */
static void linear_wide(const mha_isa_ops *lin, int64_t M, int64_t N, int64_t K, mha_dtype t,
                        const void *x, const void *w, const void *b, void *y, char *scratch,
                        int threads) {
    const wide_plan wp = wide_plan_of(M, N, K);
    float *xf = (float *)scratch, *wf = (float *)(scratch + wp.x),
          *bf = (float *)(scratch + wp.x + wp.w), *yf = (float *)(scratch + wp.x + wp.w + wp.b),
          *pk = (float *)(scratch + wp.x + wp.w + wp.b + wp.y);
    mha_convert_to_f32(t, x, xf, (size_t)(M * K));
    mha_convert_to_f32(t, w, wf, (size_t)(N * K));
    if (b) mha_convert_to_f32(t, b, bf, (size_t)N);
    lin->linear(M, N, K, xf, K, wf, K, b ? bf : NULL, yf, N, pk, threads);
    mha_convert_from_f32(t, yf, y, (size_t)(M * N));
}

/* Y[M,N] = X[M,K] W^T + b, everything contiguous and of dtype t; emulated:
 * the kernel runs emulated tiles (linear_for). */
static void project(const mha_isa_ops *lin, int emulated, int64_t M, int64_t N, int64_t K,
                    mha_dtype t, const void *x, const void *w, const void *b, void *y, void *pack,
                    int threads) {
    if (t == MHA_F32)
        lin->linear(M, N, K, x, K, w, K, b, y, N, pack, threads);
    else if (emulated)
        mha_linear_half__amxemu(M, N, K, t, x, K, w, K, b, y, N, pack, threads);
    else if (lin->linear_half)
        lin->linear_half(M, N, K, t, x, K, w, K, b, y, N, pack, threads);
    else
        linear_wide(lin, M, N, K, t, x, w, b, y, pack, threads);
}

/* [B,N,H*d] of dtype t as a view (mha_view_bnhd for any dtype). */
static mha_tensor view_bnhd(const void *data, mha_dtype t, int64_t H, int64_t N, int64_t d) {
    return (mha_tensor){
        .data = data, .stride_b = N * H * d, .stride_h = d, .stride_n = H * d, .dtype = t};
}

/* A contiguous buffer of n elements of es bytes as a span. */
static mha_span flat_span(const void *data, size_t es, int64_t n) {
    const int64_t one[3] = {1, 1, 1}, zero[3] = {0, 0, 0};
    return mha_span_make(data, es, one, zero, data ? n : 0);
}

/* The layer's aliasing rule (mha.h): out is written last, from the heads in
 * the workspace through W_o, so it may share memory with the inputs it has
 * already consumed (query, key, value, W_q/W_k/W_v and their biases) but not
 * with W_o or b_o; the workspace shares memory with nothing. */
static mha_status check_layer_aliasing(const mha_layer *L, const mha_problem *p, const void *query,
                                       const void *key, const void *value, const void *out,
                                       const void *workspace, size_t ws_bytes) {
    const size_t es = mha_dtype_size(L->dtype);
    const int64_t dm = L->d_model, dkv = p->kv_heads * p->head_dim;
    const int64_t Mq = p->batch * p->seq_q, Mkv = p->batch * p->seq_kv;
    const struct {
        const char *name;
        mha_span s;
    } in[] = {
        {"w_o", flat_span(L->w_o, es, dm * dm)},   {"b_o", flat_span(L->b_o, es, dm)},
        {"query", flat_span(query, es, Mq * dm)},  {"key", flat_span(key, es, Mkv * dm)},
        {"value", flat_span(value, es, Mkv * dm)}, {"w_q", flat_span(L->w_q, es, dm * dm)},
        {"w_k", flat_span(L->w_k, es, dkv * dm)},  {"w_v", flat_span(L->w_v, es, dkv * dm)},
        {"b_q", flat_span(L->b_q, es, dm)},        {"b_k", flat_span(L->b_k, es, dkv)},
        {"b_v", flat_span(L->b_v, es, dkv)},
    };
    const mha_span so = flat_span(out, es, Mq * dm);
    const mha_span sw = flat_span(workspace, 1, (int64_t)ws_bytes);
    mha_status st;
    for (size_t i = 0; i < 2; i++)
        if ((st = mha_check_disjoint("out", &so, in[i].name, &in[i].s)) != MHA_OK) return st;
    if ((st = mha_check_disjoint("workspace", &sw, "out", &so)) != MHA_OK) return st;
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++)
        if ((st = mha_check_disjoint("workspace", &sw, in[i].name, &in[i].s)) != MHA_OK) return st;
    return MHA_OK;
}

mha_status mha_forward(const mha_kernel *k, const mha_layer *L, const mha_layer_shape *s,
                       const mha_options *o, const void *query, const void *key, const void *value,
                       void *out, void *workspace, size_t workspace_size) {
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
    if ((st = check_layer_aliasing(L, &p, query, key, value, out, workspace, lp.total)) != MHA_OK)
        return st;

    const int threads = mha_resolve_threads(o);
    const mha_isa_ops *lin = linear_for(k);
    const int emu = (mha_kernel_traits(k) & MHA_KT_EMULATED) != 0;
    const mha_dtype t = L->dtype;
    const int64_t dm = L->d_model, dk = p.head_dim, dkv = p.kv_heads * dk;
    const int64_t Mq = p.batch * p.seq_q, Mkv = p.batch * p.seq_kv;
    char *ws = workspace;
    char *Qp = ws, *Kp = ws + lp.q, *Vp = ws + lp.q + lp.kv, *A = ws + lp.q + 2 * lp.kv;
    char *pack = ws + lp.q + 2 * lp.kv + lp.a;
    void *attn_ws = ws + lp.q + 2 * lp.kv + lp.a + lp.pack;

    project(lin, emu, Mq, dm, dm, t, query, L->w_q, L->b_q, Qp, pack, threads);
    project(lin, emu, Mkv, dkv, dm, t, key, L->w_k, L->b_k, Kp, pack, threads);
    project(lin, emu, Mkv, dkv, dm, t, value, L->w_v, L->b_v, Vp, pack, threads);

    const mha_tensor qv = view_bnhd(Qp, t, p.heads, p.seq_q, dk);
    const mha_tensor kv = view_bnhd(Kp, t, p.kv_heads, p.seq_kv, dk);
    const mha_tensor vv = view_bnhd(Vp, t, p.kv_heads, p.seq_kv, dk);
    const mha_tensor a = view_bnhd(A, t, p.heads, p.seq_q, dk);
    const mha_tensor_mut av = {.data = A,
                               .stride_b = a.stride_b,
                               .stride_h = a.stride_h,
                               .stride_n = a.stride_n,
                               .dtype = t};
    st = mha_attend(k, &p, o, &qv, &kv, &vv, &av, attn_ws, lp.attn);
    if (st != MHA_OK) return st;

    project(lin, emu, Mq, dm, dm, t, A, L->w_o, L->b_o, out, pack, threads);
    return MHA_OK;
}
