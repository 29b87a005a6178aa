/* test_layouts.c - the packed ragged batch and the paged KV cache (issue 30,
 * phase 2): the float64 oracle against the dense oracle on each sequence
 * copied into a [1,H,N,d] problem of its own (the independent check), naive
 * against the oracle on odd lengths (0, 1, 7, 33, 197), GQA and MQA, every
 * variant, paged pools of block size 1 and 16 shuffled across the pool with
 * the unused blocks full of NaN (a stray read shows), an int8 paged cache in
 * the oracle, the FLOP count per sequence, every other kernel that takes
 * the packed layout (flash.*) against the oracle in each dtype, and the
 * refusal by the rest. The validation messages: test_layout_errors.c. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "mha.h"
#include "testutil.h"

enum { NSEQ_MAX = 16 };

/* One batch of sequences, packed, or paged from a packed one. */
typedef struct {
    mha_problem p;
    int32_t cu_q[NSEQ_MAX + 1], cu_kv[NSEQ_MAX + 1], lens_kv[NSEQ_MAX];
    int32_t *table;          /* paged: [B][MB] */
    float *q, *k, *v, *sink; /* q [Tq,H,d]; k, v [Tkv,G,d] or pools [NB,BS,G,d] */
    int8_t *k8, *v8;         /* int8 pools (int8 cases only), scales [NB,BS,G] */
    float *ks, *vs;
    mha_tensor qt, kt, vt;
    mha_extras x;
} ragged;

static unsigned g_seed = 12345u;
static float frand(void) {
    g_seed = g_seed * 1103515245u + 12345u;
    return (float)((g_seed >> 8) & 0xffff) / 32768.0f - 1.0f;
}
static float *frands(int64_t n) {
    float *a = mha_alloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++) a[i] = frand();
    return a;
}

/* A packed batch of B sequences of nq[b] queries and nkv[b] keys, random
 * data in [-1, 1), the variants of `base` (heads, dims, mask, sinks). */
static void make_packed(ragged *r, const mha_problem *base, int B, const int *nq, const int *nkv) {
    memset(r, 0, sizeof *r);
    r->p = *base;
    r->p.batch = B;
    r->p.layout = MHA_LAYOUT_PACKED;
    for (int b = 0; b < B; b++) {
        r->cu_q[b + 1] = r->cu_q[b] + nq[b];
        r->cu_kv[b + 1] = r->cu_kv[b] + nkv[b];
    }
    r->p.total_q = r->cu_q[B];
    r->p.total_kv = r->cu_kv[B];
    const int64_t H = r->p.heads, G = r->p.kv_heads, d = r->p.head_dim,
                  dv = mha_problem_head_dim_v(&r->p);
    r->q = frands(r->p.total_q * H * d);
    r->k = frands(r->p.total_kv * G * d);
    r->v = frands(r->p.total_kv * G * dv);
    r->sink = frands(H);
    for (int64_t h = 0; h < H; h++) r->sink[h] *= 3;
    r->qt = mha_view_bnhd(r->q, H, r->p.total_q, d);
    r->kt = mha_view_bnhd(r->k, G, r->p.total_kv, d);
    r->vt = mha_view_bnhd(r->v, G, r->p.total_kv, dv);
    r->x = (mha_extras){
        .sinks = r->p.sinks ? r->sink : NULL, .cu_seqlens_q = r->cu_q, .cu_seqlens_kv = r->cu_kv};
}

/* src's keys moved into pools of blocks of bs tokens: the blocks a sequence
 * uses are shuffled across a pool with 3 spare blocks, every slot no
 * sequence uses is NaN, and the block table's unused entries are out of
 * range (never read, never checked). int8: the pools are int8 copies
 * (src's values x 100, rounded; scales 1/100, NaN where unused). */
static void make_paged(ragged *r, const ragged *src, int bs, int int8) {
    *r = *src;
    const int B = (int)src->p.batch;
    int64_t mb = 1, nb = 3;
    for (int b = 0; b < B; b++) {
        r->lens_kv[b] = src->cu_kv[b + 1] - src->cu_kv[b];
        const int64_t used = (r->lens_kv[b] + bs - 1) / bs;
        mb = used + 1 > mb ? used + 1 : mb;
        nb += used;
    }
    const int64_t G = r->p.kv_heads, d = r->p.head_dim, dv = mha_problem_head_dim_v(&r->p);
    int32_t *perm = malloc((size_t)nb * sizeof *perm);
    for (int64_t i = 0; i < nb; i++) perm[i] = (int32_t)i;
    for (int64_t i = nb - 1; i > 0; i--) {
        g_seed = g_seed * 1103515245u + 12345u;
        const int64_t j = (g_seed >> 8) % (unsigned)(i + 1);
        const int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    r->table = malloc((size_t)(B * mb) * sizeof *r->table);
    r->k = mha_alloc((size_t)(nb * bs * G * d) * sizeof(float));
    r->v = mha_alloc((size_t)(nb * bs * G * dv) * sizeof(float));
    for (int64_t i = 0; i < nb * bs * G * d; i++) r->k[i] = NAN;
    for (int64_t i = 0; i < nb * bs * G * dv; i++) r->v[i] = NAN;
    int64_t next = 0;
    for (int b = 0; b < B; b++)
        for (int64_t t = 0; t < mb; t++)
            r->table[b * mb + t] = t * bs < r->lens_kv[b] ? perm[next++] : (t & 1 ? -7 : 1 << 30);
    for (int b = 0; b < B; b++)
        for (int64_t j = 0; j < r->lens_kv[b]; j++) {
            const int64_t slot = (int64_t)r->table[b * mb + j / bs] * bs + j % bs;
            const int64_t row = src->cu_kv[b] + j;
            memcpy(r->k + slot * G * d, src->k + row * G * d, (size_t)(G * d) * sizeof(float));
            memcpy(r->v + slot * G * dv, src->v + row * G * dv, (size_t)(G * dv) * sizeof(float));
        }
    free(perm);
    r->p.layout = MHA_LAYOUT_PAGED;
    r->p.total_kv = 0;
    r->p.num_blocks = nb;
    r->p.block_size = bs;
    r->p.max_blocks = mb;
    r->kt = mha_view_bnhd(r->k, G, bs, d);
    r->vt = mha_view_bnhd(r->v, G, bs, dv);
    if (int8) {
        const int64_t slots = nb * bs * G;
        r->k8 = mha_alloc((size_t)(slots * d));
        r->v8 = mha_alloc((size_t)(slots * dv));
        r->ks = mha_alloc((size_t)slots * sizeof(float));
        r->vs = mha_alloc((size_t)slots * sizeof(float));
        for (int64_t s = 0; s < slots; s++) {
            r->ks[s] = isnan(r->k[s * d]) ? NAN : 0.01f;
            r->vs[s] = isnan(r->v[s * dv]) ? NAN : 0.01f;
            for (int64_t c = 0; c < d; c++)
                r->k8[s * d + c] =
                    (int8_t)(isnan(r->k[s * d + c]) ? 0 : lrintf(r->k[s * d + c] * 100));
            for (int64_t c = 0; c < dv; c++)
                r->v8[s * dv + c] =
                    (int8_t)(isnan(r->v[s * dv + c]) ? 0 : lrintf(r->v[s * dv + c] * 100));
        }
        r->p.kv_dtype = MHA_I8;
        /* pools [NB,BS,G,d] of int8, scales [NB,BS,G] */
        r->kt = (mha_tensor){.data = r->k8,
                             .stride_b = bs * G * d,
                             .stride_h = d,
                             .stride_n = G * d,
                             .dtype = MHA_I8,
                             .scale = r->ks,
                             .scale_stride_b = bs * G,
                             .scale_stride_h = 1,
                             .scale_stride_n = G};
        r->vt = (mha_tensor){.data = r->v8,
                             .stride_b = bs * G * dv,
                             .stride_h = dv,
                             .stride_n = G * dv,
                             .dtype = MHA_I8,
                             .scale = r->vs,
                             .scale_stride_b = bs * G,
                             .scale_stride_h = 1,
                             .scale_stride_n = G};
    }
    r->x = (mha_extras){.sinks = src->x.sinks,
                        .cu_seqlens_q = r->cu_q,
                        .seq_lens_kv = r->lens_kv,
                        .block_table = r->table};
}

static void free_ragged(ragged *r, int paged) {
    if (!paged) { /* a paged copy shares the queries and sinks */
        mha_free(r->q);
        mha_free(r->sink);
    }
    mha_free(r->k);
    mha_free(r->v);
    mha_free(r->k8);
    mha_free(r->v8);
    mha_free(r->ks);
    mha_free(r->vs);
    free(r->table);
}

/* Sequence b's key row j (KV head 0's start) and its storage, by the layout. */
static int64_t key_slot(const ragged *r, int64_t b, int64_t j) {
    if (r->p.layout == MHA_LAYOUT_PACKED) return r->cu_kv[b] + j;
    return (int64_t)r->table[b * r->p.max_blocks + j / r->p.block_size] * r->p.block_size +
           j % r->p.block_size;
}

/* Sequence b copied into a dense problem of its own and run through the
 * dense oracle: out [H][nq][dv]. Returns the row count nq (0: nothing run). */
static int64_t dense_seq(const ragged *r, int64_t b, double *out) {
    const int64_t H = r->p.heads, G = r->p.kv_heads, d = r->p.head_dim,
                  dv = mha_problem_head_dim_v(&r->p);
    const int64_t nq = r->cu_q[b + 1] - r->cu_q[b];
    const int64_t nkv =
        r->p.layout == MHA_LAYOUT_PACKED ? r->cu_kv[b + 1] - r->cu_kv[b] : r->lens_kv[b];
    if (nq == 0) return 0;
    if (nkv == 0) { /* no key: every row zeros, by the contract */
        for (int64_t i = 0; i < H * nq * dv; i++) out[i] = 0.0;
        return nq;
    }
    mha_problem p = r->p;
    p.batch = 1;
    p.seq_q = nq;
    p.seq_kv = nkv;
    p.layout = MHA_LAYOUT_DENSE;
    p.total_q = p.total_kv = p.num_blocks = p.block_size = p.max_blocks = 0;
    const int i8 = r->p.kv_dtype == MHA_I8;
    const size_t es = i8 ? 1 : sizeof(float);
    float *q = malloc((size_t)(H * nq * d) * sizeof(float)), *ks = malloc((size_t)(G * nkv) * 4),
          *vs = malloc((size_t)(G * nkv) * 4);
    char *k = malloc((size_t)(G * nkv * d) * es), *v = malloc((size_t)(G * nkv * dv) * es);
    for (int64_t h = 0; h < H; h++)
        for (int64_t i = 0; i < nq; i++)
            memcpy(q + (h * nq + i) * d, r->q + ((r->cu_q[b] + i) * H + h) * d,
                   (size_t)d * sizeof(float));
    for (int64_t g = 0; g < G; g++)
        for (int64_t j = 0; j < nkv; j++) {
            const int64_t s = key_slot(r, b, j);
            const char *ksrc = i8 ? (const char *)(r->k8 + (s * G + g) * d)
                                  : (const char *)(r->k + (s * G + g) * d);
            const char *vsrc = i8 ? (const char *)(r->v8 + (s * G + g) * dv)
                                  : (const char *)(r->v + (s * G + g) * dv);
            memcpy(k + (g * nkv + j) * d * (int64_t)es, ksrc, (size_t)d * es);
            memcpy(v + (g * nkv + j) * dv * (int64_t)es, vsrc, (size_t)dv * es);
            if (i8) {
                ks[g * nkv + j] = r->ks[s * G + g];
                vs[g * nkv + j] = r->vs[s * G + g];
            }
        }
    const mha_tensor qt = mha_view_bhnd(q, H, nq, d);
    const mha_tensor kt =
        i8 ? mha_view_typed(k, MHA_I8, ks, G, nkv, d) : mha_view_bhnd((const float *)k, G, nkv, d);
    const mha_tensor vt = i8 ? mha_view_typed(v, MHA_I8, vs, G, nkv, dv)
                             : mha_view_bhnd((const float *)v, G, nkv, dv);
    const mha_extras x = {.sinks = r->x.sinks};
    assert_int_equal(mha_reference_ex(&p, &qt, &kt, &vt, &x, out), MHA_OK);
    free(q);
    free(k);
    free(v);
    free(ks);
    free(vs);
    return nq;
}

/* The layout's oracle against dense_seq, sequence by sequence. */
static void oracle_vs_dense(const ragged *r, const char *what) {
    const int64_t H = r->p.heads, dv = mha_problem_head_dim_v(&r->p);
    double *got = malloc((size_t)(r->p.total_q * H * dv + 1) * sizeof(double));
    double *want = malloc((size_t)(r->p.seq_q * H * dv) * sizeof(double));
    assert_int_equal(mha_reference_ex(&r->p, &r->qt, &r->kt, &r->vt, &r->x, got), MHA_OK);
    for (int64_t b = 0; b < r->p.batch; b++) {
        const int64_t nq = dense_seq(r, b, want);
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < nq; i++)
                for (int64_t c = 0; c < dv; c++) {
                    const double g = got[((r->cu_q[b] + i) * H + h) * dv + c],
                                 w = want[(h * nq + i) * dv + c];
                    if (!(fabs(g - w) <= 1e-12 * (1 + fabs(w))))
                        fail_msg("%s: sequence %lld head %lld row %lld col %lld: %g, dense %g",
                                 what, (long long)b, (long long)h, (long long)i, (long long)c, g,
                                 w);
                }
    }
    free(got);
    free(want);
}

/* Kernel k on r (its q, k, v in dtype t: fp32, or bf16/fp16 copies), with
 * options opt, against the oracle on the same inputs: max |error| (inf for
 * NaN, and for a row left unwritten: the output starts as NaN). */
static double kernel_vs_oracle(const mha_kernel *k, const ragged *r, const mha_options *opt,
                               mha_dtype t) {
    const int64_t dv = mha_problem_head_dim_v(&r->p), n = r->p.total_q * r->p.heads * dv;
    /* the rows of k and v: packed Tkv, paged the whole pool NB x BS */
    const int64_t kvrows =
        r->p.layout == MHA_LAYOUT_PAGED ? r->p.num_blocks * r->p.block_size : r->p.total_kv;
    const int64_t nq = r->p.total_q * r->p.heads * r->p.head_dim,
                  nk = kvrows * r->p.kv_heads * r->p.head_dim, nv = kvrows * r->p.kv_heads * dv;
    mha_problem p = r->p;
    mha_tensor qt = r->qt, kt = r->kt, vt = r->vt;
    void *q16 = NULL, *k16 = NULL, *v16 = NULL;
    if (t != MHA_F32) { /* k and v: [Tkv,G,d] packed, [NB,BS,G,d] paged (NaN stays NaN) */
        p.dtype = p.kv_dtype = t;
        q16 = mha_alloc((size_t)(nq + 1) * 2);
        k16 = mha_alloc((size_t)(nk + 1) * 2);
        v16 = mha_alloc((size_t)(nv + 1) * 2);
        assert_int_equal(mha_convert_from_f32(t, r->q, q16, (size_t)nq), MHA_OK);
        assert_int_equal(mha_convert_from_f32(t, r->k, k16, (size_t)nk), MHA_OK);
        assert_int_equal(mha_convert_from_f32(t, r->v, v16, (size_t)nv), MHA_OK);
        qt.data = q16;
        kt.data = k16;
        vt.data = v16;
        qt.dtype = kt.dtype = vt.dtype = t;
    }
    double *ref = malloc((size_t)(n + 1) * sizeof(double));
    float *o = mha_alloc((size_t)(n + 1) * sizeof(float));
    uint16_t *o16 = mha_alloc((size_t)(n + 1) * 2);
    for (int64_t i = 0; i < n; i++) o[i] = NAN;       /* every row must be written */
    for (int64_t i = 0; i <= n; i++) o16[i] = 0x7fc1; /* a NaN in bf16 and in fp16 */
    assert_int_equal(mha_reference_ex(&p, &qt, &kt, &vt, &r->x, ref), MHA_OK);
    size_t ws_bytes = 0;
    assert_int_equal(mha_workspace_size(k, &p, opt, &ws_bytes), MHA_OK);
    void *ws = mha_alloc(ws_bytes ? ws_bytes : 1);
    mha_tensor_mut ot = mha_view_bnhd_mut(o, p.heads, p.total_q, dv);
    if (t != MHA_F32) {
        ot.data = o16;
        ot.dtype = t;
    }
    if (mha_attend_ex(k, &p, opt, &qt, &kt, &vt, &r->x, &ot, ws, ws_bytes) != MHA_OK)
        fail_msg("%s: %s", mha_kernel_name(k), mha_last_error());
    if (t != MHA_F32) assert_int_equal(mha_convert_to_f32(t, o16, o, (size_t)n), MHA_OK);
    double err = o16[n] == 0x7fc1 ? 0 : INFINITY; /* the guard past the end */
    for (int64_t i = 0; i < n; i++) {
        const double e = fabs((double)o[i] - ref[i]);
        err = isnan(e) ? INFINITY : e > err ? e : err;
    }
    mha_free(ws);
    mha_free(o);
    mha_free(o16);
    mha_free(q16);
    mha_free(k16);
    mha_free(v16);
    free(ref);
    return err;
}

/* naive on r against the oracle at 2 threads: max |error| (inf for NaN). */
static double naive_vs_oracle(const ragged *r) {
    const mha_options opt = {.threads = 2};
    return kernel_vs_oracle(mha_kernel_find("naive"), r, &opt, MHA_F32);
}

/* The odd lengths: no queries, no keys, decode rows, chunks shorter than
 * their cache, more queries than keys (blind rows when causal). */
static const int LQ[] = {0, 1, 7, 33, 1, 7, 33, 197, 5};
static const int LKV[] = {7, 197, 7, 33, 0, 1, 197, 197, 0};
enum { NSEQ = sizeof LQ / sizeof LQ[0] };
/* Decode batches: a query or two per sequence over caches of 0..1000 keys
 * (several 64-key spans, partial cache blocks), and one sequence alone
 * (split into KV chunks at 2 threads); bounds seq_q 2, seq_kv 1000. */
static const int LQD[] = {1, 1, 2, 0, 1, 2, 1}, LKVD[] = {300, 1, 197, 5, 0, 64, 129};
static const int LQ1[] = {2}, LKV1[] = {1000};
typedef struct {
    const int *nq, *nkv;
    int n, bound_q, bound_kv; /* 0: the config's bounds */
} shape_set;
static const shape_set SHAPE_SETS[] = {{LQ, LKV, NSEQ, 0, 0},
                                       {LQD, LKVD, sizeof LQD / sizeof LQD[0], 2, 1000},
                                       {LQ1, LKV1, 1, 2, 1000}};

/* Config w: heads, dims and variants (bounds above the longest sequence). */
static mha_problem config(int w) {
    mha_problem p = {.batch = 1,
                     .heads = 4,
                     .kv_heads = 2,
                     .seq_q = 200,
                     .seq_kv = 197,
                     .head_dim = 12,
                     .causal = 0,
                     .scale = 0.0f,
                     .dtype = MHA_F32,
                     .kv_dtype = MHA_F32};
    switch (w) {
    case 0:
        break;
    case 1:
        p.causal = 1;
        break;
    case 2: /* a left window under causal */
        p.causal = 1;
        p.window = 1;
        p.window_left = 5;
        p.window_right = -1;
        break;
    case 3: /* both edges, not causal */
        p.window = 1;
        p.window_left = 9;
        p.window_right = 3;
        break;
    case 4:
        p.causal = 1;
        p.softcap = 0.7f;
        break;
    case 5:
        p.causal = 1;
        p.sinks = 1;
        break;
    case 6:
        p.head_dim_v = 7;
        break;
    default: /* all of them, MQA */
        p.kv_heads = 1;
        p.causal = 1;
        p.window = 1;
        p.window_left = 17;
        p.window_right = 0;
        p.softcap = 1.5f;
        p.sinks = 1;
        p.head_dim_v = 5;
        break;
    }
    return p;
}
enum { NCONFIG = 8 };

static void test_oracle_vs_dense(void **state) {
    (void)state;
    for (int w = 0; w < NCONFIG; w++) {
        const mha_problem base = config(w);
        ragged pk, pg;
        make_packed(&pk, &base, NSEQ, LQ, LKV);
        oracle_vs_dense(&pk, "packed");
        static const int bss[] = {1, 16};
        for (int i = 0; i < 2; i++) {
            make_paged(&pg, &pk, bss[i], 0);
            oracle_vs_dense(&pg, bss[i] == 1 ? "paged, block size 1" : "paged, block size 16");
            free_ragged(&pg, 1);
        }
        /* int8 pools with [NB,BS,G] scales (NaN in the unused slots) */
        make_paged(&pg, &pk, 16, 1);
        oracle_vs_dense(&pg, "paged int8");
        free_ragged(&pg, 1);
        free_ragged(&pk, 0);
    }
}

static void test_naive_vs_oracle(void **state) {
    (void)state;
    for (int w = 0; w < NCONFIG; w++) {
        const mha_problem base = config(w);
        ragged pk, pg;
        make_packed(&pk, &base, NSEQ, LQ, LKV);
        double e = naive_vs_oracle(&pk);
        if (!(e <= 1e-5)) fail_msg("packed, config %d: max error %g", w, e);
        static const int bss[] = {1, 16};
        for (int i = 0; i < 2; i++) {
            make_paged(&pg, &pk, bss[i], 0);
            e = naive_vs_oracle(&pg);
            if (!(e <= 1e-5))
                fail_msg("paged block size %d, config %d: max error %g", bss[i], w, e);
            free_ragged(&pg, 1);
        }
        free_ragged(&pk, 0);
    }
    /* decode: one query per sequence over caches of 197, 33, 0, 1, 16 keys */
    const int dq[] = {1, 1, 1, 1, 1}, dkv[] = {197, 33, 0, 1, 16};
    for (int w = 0; w < NCONFIG; w++) {
        const mha_problem base = config(w);
        ragged pk, pg;
        make_packed(&pk, &base, 5, dq, dkv);
        make_paged(&pg, &pk, 16, 0);
        oracle_vs_dense(&pg, "decode");
        const double e = naive_vs_oracle(&pg);
        if (!(e <= 1e-5)) fail_msg("decode, config %d: max error %g", w, e);
        free_ragged(&pg, 1);
        free_ragged(&pk, 0);
    }
}

/* Every other kernel that takes the layout (flash.*, decode.*), on each
 * config (window, softcap, sinks, d_v, MQA) and three sets of lengths (the
 * odd ones, decode batches, one long sequence: SHAPE_SETS), fp32 and
 * bf16/fp16, 1 and 2 threads, both splits, default and odd blocks, against
 * the oracle; paged with cache blocks of 1, 5 and 16 keys shuffled across
 * the pool, the unused slots NaN (a stray read shows), and int8 pools where
 * the kernel takes them. A kernel this CPU (or MHA_ISA) cannot run is
 * skipped, said so. */
static void layout_kernels(int layout) {
    const unsigned bit = layout == MHA_LAYOUT_PAGED ? MHA_KT_PAGED : MHA_KT_PACKED;
    const char *lname = mha_layout_name(layout);
    static const int page_sizes[] = {16, 5, 1};
    int ran = 0;
    for (int i = 0; i < mha_kernel_count(); i++) {
        const mha_kernel *k = mha_kernel_at(i);
        if (!(mha_kernel_traits(k) & bit) || !strcmp(mha_kernel_name(k), "naive")) continue;
        if (mha_kernel_supported(k) != MHA_OK) {
            print_message("skipped %s: %s\n", mha_kernel_name(k), mha_last_error());
            continue;
        }
        double worst[4] = {0, 0, 0, 0};
        static const mha_dtype types[] = {MHA_F32, MHA_BF16, MHA_F16};
        long runs = 0; /* under a cap or a sanitizer: one run in tu_stride(), rotating */
        for (int ws = 0; ws < NCONFIG * 3; ws++) {
            const int w = ws / 3;
            const shape_set *sh = &SHAPE_SETS[ws % 3];
            mha_problem base = config(w);
            if (sh->bound_q) {
                base.seq_q = sh->bound_q;
                base.seq_kv = sh->bound_kv;
            }
            ragged pk, pg;
            make_packed(&pk, &base, sh->n, sh->nq, sh->nkv);
            const int bs = page_sizes[(w + ws) % 3];
            if (layout == MHA_LAYOUT_PAGED) make_paged(&pg, &pk, bs, 0);
            const ragged *r = layout == MHA_LAYOUT_PAGED ? &pg : &pk;
            for (int ti = 0; ti < 3; ti++) {
                if (!(mha_kernel_dtypes(k) & MHA_DTYPE_BIT(types[ti]))) continue;
                for (int c = 0; c < 4; c++) {
                    if (!tu_take(runs++, i)) continue;
                    const mha_options opt = {.threads = 1 + (c & 1),
                                             .split = c & 2 ? MHA_SPLIT_HEADS : MHA_SPLIT_AUTO,
                                             .block_q = c == 3 ? 7 : 0,
                                             .block_kv = c == 3 ? 5 : (c == 1 ? 16 : 0)};
                    const double e = kernel_vs_oracle(k, r, &opt, types[ti]);
                    /* fp32: summation order only; 16-bit widened to fp32: the
                     * output's rounding (|out| < 1: half an ulp is 2^-9 bf16,
                     * 2^-12 fp16). The kernels on a bf16 unit (avx512bf16,
                     * amx) round P to bf16 after a short exp (harness/check.c:
                     * 2 (2^-9 + 7.5e-5) of max|V| < 1, 4.1e-3) besides the
                     * output (2e-3), and fp16 inputs to bf16 (the logits move
                     * by 2^-9 of their size: below 1e-3 at these d): 8e-3 */
                    const int via_bf16 = mha_kernel_isa(k) >= MHA_ISA_AVX512BF16;
                    const double tol = types[ti] == MHA_F32    ? 2e-5
                                       : via_bf16              ? 8e-3
                                       : types[ti] == MHA_BF16 ? 4e-3
                                                               : 1e-3;
                    if (!(e <= tol))
                        fail_msg("%s %s (cache blocks of %d), config %d, shapes %d, %s, threads "
                                 "%d, split %s, blocks %d/%d: max error %g (tol %g)",
                                 mha_kernel_name(k), lname, layout == MHA_LAYOUT_PAGED ? bs : 0, w,
                                 ws % 3, mha_dtype_name(types[ti]), opt.threads,
                                 c & 2 ? "heads" : "auto", opt.block_q, opt.block_kv, e, tol);
                    worst[ti] = e > worst[ti] ? e : worst[ti];
                    ran++;
                }
            }
            if (layout == MHA_LAYOUT_PAGED) free_ragged(&pg, 1);
            /* an int8 pool (fp32 queries) where the kernel takes one: its
             * weights are in the oracle's rounding already, so fp32's bound */
            if (layout == MHA_LAYOUT_PAGED && (mha_kernel_kv_dtypes(k) & MHA_DTYPE_BIT(MHA_I8))) {
                ragged p8;
                make_paged(&p8, &pk, bs, 1);
                for (int c = 0; c < 2; c++) {
                    if (!tu_take(runs++, i)) continue;
                    const mha_options opt = {.threads = 1 + c};
                    const double e = kernel_vs_oracle(k, &p8, &opt, MHA_F32);
                    if (!(e <= 2e-5))
                        fail_msg("%s paged int8 (cache blocks of %d), config %d, shapes %d, "
                                 "threads %d: max error %g (tol 2e-5)",
                                 mha_kernel_name(k), bs, w, ws % 3, opt.threads, e);
                    worst[3] = e > worst[3] ? e : worst[3];
                    ran++;
                }
                free_ragged(&p8, 1);
            }
            free_ragged(&pk, 0);
        }
        char i8[48] = "";
        if (worst[3] > 0) snprintf(i8, sizeof i8, ", int8 cache %.3g", worst[3]);
        print_message("%s %s: worst error fp32 %.3g, bf16 %.3g, fp16 %.3g%s\n", mha_kernel_name(k),
                      lname, worst[0], worst[1], worst[2], i8);
    }
    print_message("%d kernel runs against the oracle\n", ran);
    if (!ran) skip(); /* nothing judged is not a pass */
}
static void test_packed_kernels(void **state) {
    (void)state;
    layout_kernels(MHA_LAYOUT_PACKED);
}
static void test_paged_kernels(void **state) {
    (void)state;
    layout_kernels(MHA_LAYOUT_PAGED);
}

/* A sequence whose queries see no key is zeros, with a sink or without. */
static void test_no_key_rows_zero(void **state) {
    (void)state;
    mha_problem base = config(5); /* causal, sinks */
    const int nq[] = {3, 2}, nkv[] = {0, 1};
    ragged pk;
    make_packed(&pk, &base, 2, nq, nkv);
    double ref[5 * 4 * 12];
    assert_int_equal(mha_reference_ex(&pk.p, &pk.qt, &pk.kt, &pk.vt, &pk.x, ref), MHA_OK);
    /* sequence 0 (rows 0..2): no keys; sequence 1 row 0 (row 3): off = -1, blind */
    for (int i = 0; i < 4 * 4 * 12; i++) assert_true(ref[i] == 0.0);
    int nonzero = 0;
    for (int i = 4 * 4 * 12; i < 5 * 4 * 12; i++) nonzero += ref[i] != 0.0;
    assert_true(nonzero > 0);
    free_ragged(&pk, 0);
}

static void test_flops_per_sequence(void **state) {
    (void)state;
    mha_problem p = config(0); /* H = 4, d = 12: 2 * 24 * 4 = 192 FLOPs a pair */
    p.seq_q = p.seq_kv = 4;
    const int nq[] = {2, 0, 3, 1}, nkv[] = {3, 4, 0, 1};
    ragged pk;
    make_packed(&pk, &p, 4, nq, nkv);
    assert_true(mha_problem_flops_ex(&pk.p, &pk.x) == 7.0 * 192); /* 6 + 0 + 0 + 1 */
    pk.p.causal = 1; /* (2, 3): off 1, rows see 2 and 3 keys; (1, 1): 1 */
    assert_true(mha_problem_flops_ex(&pk.p, &pk.x) == 6.0 * 192);
    ragged pg;
    make_paged(&pg, &pk, 2, 0);
    assert_true(mha_problem_flops_ex(&pg.p, &pg.x) == 6.0 * 192);
    /* without the lengths there is no count */
    assert_true(isnan(mha_problem_flops(&pk.p)));
    assert_non_null(strstr(mha_last_error(), "mha_extras.cu_seqlens_q is NULL"));
    pk.cu_q[1] = 3; /* {0, 3, 2, 5, 6} */
    assert_true(isnan(mha_problem_flops_ex(&pk.p, &pk.x)));
    assert_non_null(strstr(mha_last_error(), "mha_extras.cu_seqlens_q[2] = 2 is below"));
    free_ragged(&pg, 1);
    free_ragged(&pk, 0);
}

/* Every kernel but naive refuses both layouts, naming itself and the
 * layout, from mha_attend and mha_workspace_size; auto picks one that takes them. */
static void test_others_refuse(void **state) {
    (void)state;
    unsetenv("MHA_KERNEL");
    setenv("MHA_TUNING", "/nonexistent/none.json", 1);
    ragged pk, pg;
    const mha_problem base = config(1);
    make_packed(&pk, &base, NSEQ, LQ, LKV);
    make_paged(&pg, &pk, 16, 0);
    const ragged *rs[] = {&pk, &pg};
    int takers = 0;
    for (int l = 0; l < 2; l++) {
        const ragged *r = rs[l];
        const char *what = l == 0 ? "packed ragged layout" : "paged KV layout";
        for (int i = 0; i < mha_kernel_count(); i++) {
            const mha_kernel *k = mha_kernel_at(i);
            const unsigned bit = l == 0 ? MHA_KT_PACKED : MHA_KT_PAGED;
            size_t ws = 0;
            if (mha_kernel_traits(k) & bit) {
                /* both: naive, every flash.* and decode.* */
                const char *name = mha_kernel_name(k);
                assert_true(!strcmp(name, "naive") || !strncmp(name, "flash.", 6) ||
                            !strncmp(name, "decode.", 7));
                if (mha_kernel_dtypes(k) & MHA_DTYPE_BIT(r->p.dtype)) {
                    assert_int_equal(mha_kernel_takes(k, &r->p), MHA_OK);
                } else { /* a bf16 kernel: refused for fp32, never for the layout */
                    assert_int_equal(mha_kernel_takes(k, &r->p), MHA_EUNSUPPORTED);
                    assert_null(strstr(mha_last_error(), what));
                }
                takers++;
                continue;
            }
            assert_int_equal(mha_kernel_takes(k, &r->p), MHA_EUNSUPPORTED);
            assert_non_null(strstr(mha_last_error(), mha_kernel_name(k)));
            assert_non_null(strstr(mha_last_error(), what));
            assert_int_equal(mha_workspace_size(k, &r->p, NULL, &ws), MHA_EUNSUPPORTED);
            if (mha_kernel_supported(k) == MHA_OK &&
                (mha_kernel_dtypes(k) & MHA_DTYPE_BIT(MHA_F32))) {
                float o[4];
                const mha_tensor_mut ot = mha_view_bnhd_mut(o, 1, 1, 1);
                assert_int_equal(
                    mha_attend_ex(k, &r->p, NULL, &r->qt, &r->kt, &r->vt, &r->x, &ot, NULL, 0),
                    MHA_EUNSUPPORTED);
                assert_non_null(strstr(mha_last_error(), what));
            }
        }
        mha_selection s;
        assert_int_equal(mha_select(&r->p, &(mha_options){.threads = 1}, &s), MHA_OK);
        assert_int_equal(mha_kernel_takes(s.kernel, &r->p), MHA_OK);
    }
    assert_int_equal(takers, 28); /* 14 kernels (naive, 6 flash, 7 decode), 2 layouts */
    /* an int8 (or bf16, fp16) cache: the oracle takes it, naive refuses it by its dtypes */
    ragged p8;
    make_paged(&p8, &pk, 16, 1);
    assert_int_equal(mha_kernel_takes(mha_kernel_find("naive"), &p8.p), MHA_EUNSUPPORTED);
    assert_non_null(strstr(mha_last_error(), "kernel naive takes a fp32 K/V cache, not int8"));
    free_ragged(&p8, 1);
    assert_string_equal(mha_layout_name(MHA_LAYOUT_PAGED), "paged");
    assert_string_equal(mha_layout_name(7), "?");
    free_ragged(&pg, 1);
    free_ragged(&pk, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_oracle_vs_dense),  cmocka_unit_test(test_naive_vs_oracle),
        cmocka_unit_test(test_no_key_rows_zero), cmocka_unit_test(test_flops_per_sequence),
        cmocka_unit_test(test_others_refuse),    cmocka_unit_test(test_packed_kernels),
        cmocka_unit_test(test_paged_kernels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
