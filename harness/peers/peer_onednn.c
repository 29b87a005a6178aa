/* peer_onednn.c - peer "onednn": the attention core as a oneDNN user builds it
 * from primitives (C API, oneDNN 2.6 as Debian ships it): matmul S = scale *
 * Q K^T with the causal mask as a binary-add post-op, softmax along the keys,
 * matmul O = P V. GQA through the matmul's batch broadcast. Built when meson
 * finds libdnnl (MHA_HAVE_DNNL); README "Peers" says why it is set up so. */
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dnnl.h>
#include <dnnl_debug.h>

#include "peer.h"

struct peer_inst {
    mha_problem p;
    int threads;
    dnnl_data_type_t dt; /* Q, K, V, O (and P for bf16) */
    dnnl_engine_t eng;
    dnnl_stream_t strm;
    /* our copies of the inputs, the scores, the probabilities (bf16 only:
     * for fp32 the softmax runs in place on S), the output, the mask */
    void *q, *k, *v, *o, *pb, *mask;
    float *s;
    size_t q_bytes, kv_bytes, o_bytes;
    dnnl_memory_t mq, mk, mv, ms, mp, mo, mmask;
    dnnl_primitive_t qk, sm, pv;
    void *scratch[3];
    dnnl_memory_t mscratch[3];
    char settings[256];
};

/* oneDNN runs on libgomp here (DNNL_CPU_RUNTIME == OMP): its parallel regions
 * take omp_get_max_threads() of the calling thread, read when a primitive is
 * created (work split) and when it executes. */
static const char *runtime_name(unsigned r) {
    return r == DNNL_RUNTIME_OMP          ? "OpenMP"
           : r == DNNL_RUNTIME_TBB        ? "TBB"
           : r == DNNL_RUNTIME_SEQ        ? "sequential"
           : r == DNNL_RUNTIME_THREADPOOL ? "threadpool"
                                          : "other";
}

static void say(char *why, size_t len, const char *fmt, const char *what, dnnl_status_t st) {
    if (why && len) snprintf(why, len, fmt, what, dnnl_status2str(st));
}

static int onednn_probe(char *why, size_t len) {
    dnnl_engine_t e;
    dnnl_status_t st = dnnl_engine_create(&e, dnnl_cpu, 0);
    if (st != dnnl_success) {
        say(why, len, "oneDNN: %s failed: %s", "dnnl_engine_create(cpu)", st);
        return 0;
    }
    dnnl_engine_destroy(e);
    return 1;
}

static const char *onednn_version(void) {
    static char buf[160];
    const dnnl_version_t *v = dnnl_version();
    snprintf(buf, sizeof buf, "oneDNN %d.%d.%d (cpu runtime %s, isa %s)", v->major, v->minor,
             v->patch, runtime_name(v->cpu_runtime),
             dnnl_cpu_isa2str(dnnl_get_effective_cpu_isa()));
    return buf;
}

/* Whether oneDNN has a matmul for dtype t on this CPU (asked once per dtype:
 * a tiny primitive descriptor, no primitive). */
static int matmul_exists(dnnl_data_type_t t, char *why, size_t len) {
    static int known[2];
    static dnnl_status_t status[2];
    const int i = t == dnnl_f16;
    if (!known[i]) {
        dnnl_engine_t e;
        dnnl_status_t st = dnnl_engine_create(&e, dnnl_cpu, 0);
        if (st == dnnl_success) {
            dnnl_memory_desc_t a, b, c;
            dnnl_matmul_desc_t md;
            const dnnl_dims_t dims = {16, 16};
            dnnl_primitive_desc_t pd = NULL;
            dnnl_memory_desc_init_by_tag(&a, 2, dims, t, dnnl_ab);
            dnnl_memory_desc_init_by_tag(&b, 2, dims, t, dnnl_ab);
            dnnl_memory_desc_init_by_tag(&c, 2, dims, dnnl_f32, dnnl_ab);
            st = dnnl_matmul_desc_init(&md, &a, &b, NULL, &c);
            if (st == dnnl_success) st = dnnl_primitive_desc_create(&pd, &md, NULL, e, NULL);
            if (pd) dnnl_primitive_desc_destroy(pd);
            dnnl_engine_destroy(e);
        }
        status[i] = st;
        known[i] = 1;
    }
    if (status[i] != dnnl_success)
        say(why, len, "oneDNN has no %s matmul on this CPU (primitive descriptor: %s)",
            t == dnnl_f16 ? "fp16" : "bf16", status[i]);
    return status[i] == dnnl_success;
}

static int onednn_takes(const mha_problem *p, char *why, size_t len) {
    const mha_dtype kv = mha_problem_kv_dtype(p);
    if (!peer_takes_variants(p, 0, why, len)) return 0;
    if (kv == MHA_I8) {
        snprintf(why, len,
                 "int8 KV cache: oneDNN 2.6's matmul has no per-token scaled int8 "
                 "K/V of this kind (this adapter takes fp32 and bf16)");
        return 0;
    }
    if (kv != p->dtype) {
        snprintf(why, len, "Q/O %s with K/V %s: this adapter takes one dtype for all four",
                 mha_dtype_name(p->dtype), mha_dtype_name(kv));
        return 0;
    }
    /* the half types take the bf16 recipe (P in the same half type) where
     * oneDNN has their matmul: fp16 needs AVX512_FP16 in oneDNN 2.6 */
    if (p->dtype == MHA_F16 && !matmul_exists(dnnl_f16, why, len)) return 0;
    if (p->dtype == MHA_BF16 && !matmul_exists(dnnl_bf16, why, len)) return 0;
    if (p->dtype != MHA_F32 && p->dtype != MHA_BF16 && p->dtype != MHA_F16) {
        snprintf(why, len, "dtype %s not taken", mha_dtype_name(p->dtype));
        return 0;
    }
    return 1;
}

static void onednn_release(peer_inst *pi) {
    if (!pi) return;
    dnnl_primitive_t prims[] = {pi->qk, pi->sm, pi->pv};
    for (int i = 0; i < 3; i++)
        if (prims[i]) dnnl_primitive_destroy(prims[i]);
    dnnl_memory_t mems[] = {pi->mq, pi->mk,    pi->mv,          pi->ms,          pi->mp,
                            pi->mo, pi->mmask, pi->mscratch[0], pi->mscratch[1], pi->mscratch[2]};
    for (size_t i = 0; i < sizeof mems / sizeof mems[0]; i++)
        if (mems[i]) dnnl_memory_destroy(mems[i]);
    if (pi->strm) dnnl_stream_destroy(pi->strm);
    if (pi->eng) dnnl_engine_destroy(pi->eng);
    void *bufs[] = {pi->q,    pi->k,          pi->v,          pi->o,         pi->pb,
                    pi->mask, pi->scratch[0], pi->scratch[1], pi->scratch[2]};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) mha_free(bufs[i]);
    mha_free(pi->s);
    free(pi);
}

/* n * m * ... with overflow check; 0 on overflow. */
static size_t mul3(size_t a, size_t b, size_t c) {
    size_t r;
    if (__builtin_mul_overflow(a, b, &r) || __builtin_mul_overflow(r, c, &r)) return 0;
    return r;
}

/* Creates the primitive of op desc d with attr, and (user scratchpad mode)
 * its scratchpad memory; returns the status and names what failed. */
static dnnl_status_t make_prim(peer_inst *pi, const void *d, dnnl_primitive_attr_t attr, int slot,
                               dnnl_primitive_t *prim, char *impl, size_t impl_len) {
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t st = dnnl_primitive_desc_create(&pd, d, attr, pi->eng, NULL);
    if (st != dnnl_success) return st;
    const char *name = NULL;
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &name) == dnnl_success && name)
        snprintf(impl, impl_len, "%s", name);
    const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    const size_t sbytes = smd ? dnnl_memory_desc_get_size(smd) : 0;
    if (sbytes) {
        pi->scratch[slot] = mha_alloc(sbytes);
        if (!pi->scratch[slot]) st = dnnl_out_of_memory;
        if (st == dnnl_success)
            st = dnnl_memory_create(&pi->mscratch[slot], smd, pi->eng, pi->scratch[slot]);
    }
    if (st == dnnl_success) st = dnnl_primitive_create(prim, pd);
    dnnl_primitive_desc_destroy(pd);
    return st;
}

static int execute_all(peer_inst *pi, char *why, size_t len) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(pi->threads);
    dnnl_exec_arg_t a1[5] = {
        {DNNL_ARG_SRC, pi->mq}, {DNNL_ARG_WEIGHTS, pi->mk}, {DNNL_ARG_DST, pi->ms}};
    int n1 = 3;
    if (pi->mmask)
        a1[n1++] = (dnnl_exec_arg_t){DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, pi->mmask};
    if (pi->mscratch[0]) a1[n1++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, pi->mscratch[0]};
    dnnl_exec_arg_t a2[3] = {{DNNL_ARG_SRC, pi->ms}, {DNNL_ARG_DST, pi->mp ? pi->mp : pi->ms}};
    int n2 = 2;
    if (pi->mscratch[1]) a2[n2++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, pi->mscratch[1]};
    dnnl_exec_arg_t a3[4] = {{DNNL_ARG_SRC, pi->mp ? pi->mp : pi->ms},
                             {DNNL_ARG_WEIGHTS, pi->mv},
                             {DNNL_ARG_DST, pi->mo}};
    int n3 = 3;
    if (pi->mscratch[2]) a3[n3++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, pi->mscratch[2]};
    dnnl_status_t st = dnnl_primitive_execute(pi->qk, pi->strm, n1, a1);
    const char *what = "matmul Q K^T";
    if (st == dnnl_success) {
        what = "softmax";
        st = dnnl_primitive_execute(pi->sm, pi->strm, n2, a2);
    }
    if (st == dnnl_success) {
        what = "matmul P V";
        st = dnnl_primitive_execute(pi->pv, pi->strm, n3, a3);
    }
    if (st == dnnl_success) {
        what = "stream wait";
        st = dnnl_stream_wait(pi->strm);
    }
    omp_set_num_threads(saved);
    if (st != dnnl_success) {
        say(why, len, "oneDNN: executing %s: %s", what, st);
        return -1;
    }
    /* Bottom-right causal with Nq > Nkv: the first Nq - Nkv rows see no key.
     * Their scores are all -inf and oneDNN's softmax makes them NaN; our
     * contract says zeros, so those rows are cleared (a memset per head). */
    const mha_problem *p = &pi->p;
    if (p->causal && p->seq_q > p->seq_kv) {
        const size_t es = pi->dt == dnnl_f32 ? 4 : 2, row = (size_t)p->head_dim * es;
        const size_t rows = (size_t)(p->seq_q - p->seq_kv);
        for (int64_t bh = 0; bh < p->batch * p->heads; bh++)
            memset((char *)pi->o + (size_t)bh * (size_t)p->seq_q * row, 0, rows * row);
    }
    return 0;
}

/* Allocates pi's buffers, copies q, k and v in and builds the causal mask:
 * 0, or -1 with why (pi is then released by the caller). */
static int onednn_buffers(peer_inst *pi, const mha_problem *p, const void *q, const void *k,
                          const void *v, char *why, size_t len) {
    const int64_t B = p->batch, H = p->heads, KV = p->kv_heads, Nq = p->seq_q, Nkv = p->seq_kv,
                  d = p->head_dim;
    const size_t es = pi->dt == dnnl_f32 ? 4 : 2;
    pi->q_bytes = mul3((size_t)(B * H), (size_t)(Nq * d), es);
    pi->kv_bytes = mul3((size_t)(B * KV), (size_t)(Nkv * d), es);
    pi->o_bytes = pi->q_bytes;
    const size_t s_bytes = mul3((size_t)(B * H), (size_t)Nq, (size_t)Nkv * 4);
    if (!pi->q_bytes || !pi->kv_bytes || !s_bytes) {
        snprintf(why, len, "problem too large: a buffer's byte count overflows");
        return -1;
    }
    pi->q = mha_alloc(pi->q_bytes);
    pi->k = mha_alloc(pi->kv_bytes);
    pi->v = mha_alloc(pi->kv_bytes);
    pi->o = mha_alloc(pi->o_bytes);
    pi->s = mha_alloc(s_bytes);
    if (pi->dt != dnnl_f32) pi->pb = mha_alloc(s_bytes / 2);
    if (p->causal) pi->mask = mha_alloc(mul3((size_t)(B * KV), (size_t)Nq, (size_t)Nkv * 4));
    if (!pi->q || !pi->k || !pi->v || !pi->o || !pi->s || (pi->dt != dnnl_f32 && !pi->pb) ||
        (p->causal && !pi->mask)) {
        snprintf(why, len, "out of memory (scores: %zu bytes)", s_bytes);
        return -1;
    }
    memcpy(pi->q, q, pi->q_bytes);
    memcpy(pi->k, k, pi->kv_bytes);
    memcpy(pi->v, v, pi->kv_bytes);
    memset(pi->o, 0, pi->o_bytes);
    if (p->causal) {
        float *m = pi->mask;
        const int64_t off = Nkv - Nq;
        for (int64_t i = 0; i < Nq; i++)
            for (int64_t j = 0; j < Nkv; j++) m[i * Nkv + j] = j <= i + off ? 0.0f : -INFINITY;
        for (int64_t g = 1; g < B * KV; g++)
            memcpy(m + g * Nq * Nkv, m, (size_t)(Nq * Nkv) * sizeof(float));
    }
    return 0;
}

/* The memory descriptors of one instance: Q, K^T, V, S (fp32), P (the
 * problem's dtype), O and the causal mask. */
typedef struct {
    dnnl_memory_desc_t q, k, v, s, p, o, m;
} onednn_mds;

/* The engine, the stream, the descriptors and the memory objects over pi's
 * buffers; *what names the step that failed. */
static dnnl_status_t onednn_memories(peer_inst *pi, const mha_problem *p, onednn_mds *md,
                                     const char **what) {
    const int64_t H = p->heads, KV = p->kv_heads, G = H / KV, Nq = p->seq_q, Nkv = p->seq_kv,
                  d = p->head_dim;
    *what = "dnnl_engine_create";
    dnnl_status_t st = dnnl_engine_create(&pi->eng, dnnl_cpu, 0);
    if (st == dnnl_success) {
        *what = "dnnl_stream_create";
        st = dnnl_stream_create(&pi->strm, pi->eng, dnnl_stream_default_flags);
    }
    /* 4-D views [B*KV, G, rows, cols]: the G query heads of one KV head are
     * the matmul's second batch dimension; K and V have 1 there (broadcast).
     * K^T is K read through strides (d contiguous is K^T's row stride 1).
     * The mask is [B*KV, 1, Nq, Nkv], one copy per KV head broadcast over
     * its G query heads: oneDNN 2.6's brgemm matmul takes that binary
     * broadcast (per_mb_spatial); a single [1, 1, Nq, Nkv] mask would send
     * Q K^T to the reference implementation (ref:any). */
    const dnnl_dim_t BK = p->batch * KV;
    const dnnl_dims_t qd = {BK, G, Nq, d}, kd = {BK, 1, d, Nkv}, vd = {BK, 1, Nkv, d},
                      sd = {BK, G, Nq, Nkv}, od = {BK, G, Nq, d}, mkd = {BK, 1, Nq, Nkv};
    const dnnl_dims_t ks = {Nkv * d, Nkv * d, 1, d};
    if (st == dnnl_success) {
        *what = "memory descriptors";
        st = dnnl_memory_desc_init_by_tag(&md->q, 4, qd, pi->dt, dnnl_abcd);
    }
    if (st == dnnl_success) st = dnnl_memory_desc_init_by_strides(&md->k, 4, kd, pi->dt, ks);
    if (st == dnnl_success) st = dnnl_memory_desc_init_by_tag(&md->v, 4, vd, pi->dt, dnnl_abcd);
    if (st == dnnl_success) st = dnnl_memory_desc_init_by_tag(&md->s, 4, sd, dnnl_f32, dnnl_abcd);
    if (st == dnnl_success) st = dnnl_memory_desc_init_by_tag(&md->p, 4, sd, pi->dt, dnnl_abcd);
    if (st == dnnl_success) st = dnnl_memory_desc_init_by_tag(&md->o, 4, od, pi->dt, dnnl_abcd);
    if (st == dnnl_success) st = dnnl_memory_desc_init_by_tag(&md->m, 4, mkd, dnnl_f32, dnnl_abcd);
    if (st == dnnl_success) {
        *what = "memory objects";
        st = dnnl_memory_create(&pi->mq, &md->q, pi->eng, pi->q);
    }
    if (st == dnnl_success) st = dnnl_memory_create(&pi->mk, &md->k, pi->eng, pi->k);
    if (st == dnnl_success) st = dnnl_memory_create(&pi->mv, &md->v, pi->eng, pi->v);
    if (st == dnnl_success) st = dnnl_memory_create(&pi->ms, &md->s, pi->eng, pi->s);
    if (st == dnnl_success && pi->pb) st = dnnl_memory_create(&pi->mp, &md->p, pi->eng, pi->pb);
    if (st == dnnl_success) st = dnnl_memory_create(&pi->mo, &md->o, pi->eng, pi->o);
    if (st == dnnl_success && p->causal)
        st = dnnl_memory_create(&pi->mmask, &md->m, pi->eng, pi->mask);
    return st;
}

/* The three primitives (Q K^T with the scale and the mask, softmax, P V),
 * their implementations' names into impl; *what names the step that
 * failed. Primitives are created at the thread count they will run with. */
static dnnl_status_t onednn_primitives(peer_inst *pi, const mha_problem *p, const onednn_mds *md,
                                       char impl[3][64], const char **what) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(pi->threads);
    dnnl_primitive_attr_t attr = NULL, plain = NULL;
    dnnl_post_ops_t ops = NULL;
    const float scale = mha_problem_scale(p);
    *what = "attributes";
    dnnl_status_t st = dnnl_primitive_attr_create(&attr);
    if (st == dnnl_success) st = dnnl_primitive_attr_create(&plain);
    if (st == dnnl_success)
        st = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
    if (st == dnnl_success)
        st = dnnl_primitive_attr_set_scratchpad_mode(plain, dnnl_scratchpad_mode_user);
    if (st == dnnl_success) st = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &scale);
    if (st == dnnl_success && p->causal) {
        st = dnnl_post_ops_create(&ops);
        if (st == dnnl_success) st = dnnl_post_ops_append_binary(ops, dnnl_binary_add, &md->m);
        if (st == dnnl_success) st = dnnl_primitive_attr_set_post_ops(attr, ops);
    }
    if (st == dnnl_success) {
        *what = "matmul Q K^T";
        dnnl_matmul_desc_t mm;
        st = dnnl_matmul_desc_init(&mm, &md->q, &md->k, NULL, &md->s);
        if (st == dnnl_success) st = make_prim(pi, &mm, attr, 0, &pi->qk, impl[0], sizeof impl[0]);
    }
    if (st == dnnl_success) {
        /* fp32: in place on S; bf16: fp32 in, bf16 P out (softmax v2 takes
         * different src and dst types) */
        *what = "softmax";
        dnnl_softmax_v2_desc_t sdsc;
        st = dnnl_softmax_v2_forward_desc_init(&sdsc, dnnl_forward_inference, dnnl_softmax_accurate,
                                               &md->s, pi->pb ? &md->p : &md->s, 3);
        if (st == dnnl_success)
            st = make_prim(pi, &sdsc, plain, 1, &pi->sm, impl[1], sizeof impl[1]);
    }
    if (st == dnnl_success) {
        *what = "matmul P V";
        dnnl_matmul_desc_t mm;
        st = dnnl_matmul_desc_init(&mm, pi->pb ? &md->p : &md->s, &md->v, NULL, &md->o);
        if (st == dnnl_success) st = make_prim(pi, &mm, plain, 2, &pi->pv, impl[2], sizeof impl[2]);
    }
    omp_set_num_threads(saved);
    if (ops) dnnl_post_ops_destroy(ops);
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (plain) dnnl_primitive_attr_destroy(plain);
    return st;
}

static peer_inst *onednn_prepare(const mha_problem *p, int threads, const void *q, const void *k,
                                 const void *v, const mha_extras *x, char *why, size_t len) {
    (void)x; /* takes() refuses sinks and the packed and paged layouts */
    if (!peer_prepare_ok(p, onednn_takes, q, k, v, why, len)) return NULL;
    peer_inst *pi = calloc(1, sizeof *pi);
    if (!pi) {
        snprintf(why, len, "out of memory");
        return NULL;
    }
    pi->p = *p;
    pi->threads = mha_resolve_threads(&(mha_options){.threads = threads});
    pi->dt = p->dtype == MHA_BF16 ? dnnl_bf16 : p->dtype == MHA_F16 ? dnnl_f16 : dnnl_f32;
    if (onednn_buffers(pi, p, q, k, v, why, len) != 0) {
        onednn_release(pi);
        return NULL;
    }
    const char *what = "";
    onednn_mds md;
    char impl[3][64] = {"?", "?", "?"};
    dnnl_status_t st = onednn_memories(pi, p, &md, &what);
    if (st == dnnl_success) st = onednn_primitives(pi, p, &md, impl, &what);
    if (st != dnnl_success) {
        say(why, len, "oneDNN: %s: %s", what, st);
        onednn_release(pi);
        return NULL;
    }
    snprintf(pi->settings, sizeof pi->settings,
             "threads=%d (omp_set_num_threads) matmul[%s]+softmax[%s]+matmul[%s], S materialised "
             "fp32, P %s, scale as output scale%s, GQA by batch broadcast",
             pi->threads, impl[0], impl[1], impl[2],
             pi->pb ? mha_dtype_name(p->dtype) : "fp32 in place",
             p->causal ? ", causal mask [B*KV,1,Nq,Nkv] as binary-add post-op" : "");
    if (execute_all(pi, why, len) != 0) { /* the untimed warm-up call */
        onednn_release(pi);
        return NULL;
    }
    return pi;
}

static int onednn_run(peer_inst *pi, double *seconds, char *why, size_t len) {
    if (seconds) *seconds = -1;
    if (!pi) {
        snprintf(why, len, "run: no prepared instance");
        return -1;
    }
    return execute_all(pi, why, len);
}

static int onednn_output(peer_inst *pi, void *out, char *why, size_t len) {
    if (!pi || !out) {
        snprintf(why, len, "output: NULL instance or buffer");
        return -1;
    }
    memcpy(out, pi->o, pi->o_bytes); /* [B*KV, G, Nq, d] is [B, H, Nq, d] */
    return 0;
}

static const char *onednn_settings(const peer_inst *pi) {
    return pi ? pi->settings : "";
}

const peer_ops peer_onednn = {
    .name = "onednn",
    .probe = onednn_probe,
    .version = onednn_version,
    .takes = onednn_takes,
    .prepare = onednn_prepare,
    .run = onednn_run,
    .output = onednn_output,
    .settings = onednn_settings,
    .release = onednn_release,
    .shutdown = NULL,
};
