/* decode.c - kernels decode.<isa>: attention for few query rows over a long
 * KV cache (autoregressive decode, Nq = 1), where the limit is memory
 * bandwidth, not FLOPs. Per (batch, KV head) the query rows of every head in
 * the group share one pass over K and V (GQA reads the cache once, not
 * heads/kv_heads times). Scores are dot products vectorised over head_dim;
 * the online softmax runs with keys along the lanes. When there are fewer
 * (batch, KV head) pairs than threads, the KV sequence is split across threads
 * and the partial results merged with their log-sum-exp (Flash-Decoding).
 * Any problem is accepted (long Nq just makes many row chunks).
 * Storage types: K and V may be fp32, bf16, fp16 or int8 with one fp32 scale
 * per (batch, KV head, token) row; they are widened to fp32 vectors as they
 * are loaded, inside the dot products and the P.V loops, so the stream reads
 * the stored bytes only (no conversion pass). An int8 row's scale is folded
 * into its score (s_j = scale_k[j] * q.k_j) and into its probability for V
 * (p_j * scale_v[j]), never applied per element. Q (fp32, bf16, fp16) is
 * widened once per pass into per-thread scratch; O is written in the
 * problem's dtype (round to nearest even).
 * The variants (mha.h): head_dim_v sizes o, the partial results and P.V; a
 * window's right edge is the rows' end (as causal), its left edge starts the
 * pass at the first key any row sees and masks the keys before each row's
 * begin; a softcap caps each block's scores (natural units) before the
 * mask; a sink joins each row once, after its pass or after the split-KV
 * merge (mha_decode_add_sink): a softmax column with no value. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "internal.h"
#include "cachemodel.h"
#include "ukernels.h"
#include "flash_var.h"

#define LOG2E 1.44269504088896341f
enum { DEC_RB = 4, DEC_BK = 64 }; /* rows per pass over K/V, keys per softmax block */
enum { DEC_PF_BYTES = 8192 };     /* how far ahead K / V are prefetched (measured best here) */

/* Every cache line of a stored row of `bytes` bytes: into L1 and L2 for
 * the K rows of the multi-row passes, read within a few keys; into L2 for
 * their V rows, read by the P.V pass a whole 64-key block later, and for the
 * one-row stream: 64-key blocks of K and V (32 KiB each at d = 128 fp32) do
 * not both fit beside each other in L1. Measured on the Emerald Rapids VM
 * (H32 KV8 Nkv4096 d128, fp32 Q/O): both non-temporal (prefetchnta), the
 * fp32 GQA decode ran 8.2-8.8 GFLOP/s at 1 thread (4.5 GB/s); V into L2,
 * 18.8-20.1; K also out of non-temporal (stop 47, `mhabench profile`
 * alternated 3 x 2) 34.0-34.4 against 14.3-15.6, and 65.5-66.8 against
 * 55.2-56.2 at 2 threads; bench_kvcache over 3 alternated rounds, median
 * ms per call new/old: fp32 1.59-2.06x, bf16 and fp16 1.22-1.65x, int8
 * 1.09-1.26x faster; the paged pools (prefetch_keys) level, 0.98-1.02x.
 * Prefetching K to L2 alone ran as fast as to L1 and L2; no prefetch of K
 * at all about as fast (the hardware's streams). On Intel a non-temporal
 * line is not kept in L2. Neither change has been measured on Zen since:
 * both only move lines into levels the non-temporal hint left out. */
static inline void prefetch_row(const void *p, int64_t bytes) {
    for (int64_t c = 0; c < bytes; c += 64) __builtin_prefetch((const char *)p + c, 0, 3);
}
static inline void prefetch_row_l2(const void *p, int64_t bytes) {
    for (int64_t c = 0; c < bytes; c += 64) __builtin_prefetch((const char *)p + c, 0, 2);
}

/* ---- stored elements ---------------------------------------------------------
 * t is a K/V storage type (mha_dtype); every function below that takes one is
 * inlined into a per-type instance (the DEC_TYPES table at the end), where t
 * is a constant and the switches fold away. */
static inline __attribute__((always_inline)) int64_t esize(int t) {
    return t == MHA_F32 ? 4 : t == MHA_I8 ? 1 : 2;
}
/* Element i of a row (or any base) of type t. */
static inline __attribute__((always_inline)) const void *elem(int t, const void *base, int64_t i) {
    return (const char *)base + i * esize(t);
}
/* VW elements at p, widened to fp32 (int8 unscaled). */
static inline __attribute__((always_inline)) vf vload_kv(int t, const void *p) {
    switch (t) {
    case MHA_BF16:
        return vload_bf16((const uint16_t *)p);
    case MHA_F16:
        return vload_f16((const uint16_t *)p);
    case MHA_I8:
        return vload_i8((const int8_t *)p);
    default:
        return vloadu((const float *)p);
    }
}
/* The first n (<= VW) elements at p, the other lanes 0; nothing past them is read. */
static inline __attribute__((always_inline)) vf vload_kv_n(int t, const void *p, int n) {
    switch (t) {
    case MHA_BF16:
        return vload_bf16_n((const uint16_t *)p, n);
    case MHA_F16:
        return vload_f16_n((const uint16_t *)p, n);
    case MHA_I8:
        return vload_i8_n((const int8_t *)p, n);
    default:
        return vloadu_n((const float *)p, n);
    }
}

typedef struct {
    int64_t rows;   /* query rows per (batch, KV head): group * seq_q */
    int64_t nsplit; /* KV chunks per (batch, KV head) */
    int64_t chunk;  /* keys per chunk */
    size_t part;    /* bytes of the partial results (0 when nsplit == 1) */
    size_t scratch; /* bytes per thread */
    int wide_q;     /* Q is not fp32: its rows are widened into the scratch */
    int stream_pf;  /* the cache is beyond the L3: one-row passes prefetch ahead, multi-row
                       ones of fp32 rows (any on AVX2) V rows only (dec_rows) */
    int all_heads;  /* paged GQA: an item is a (sequence, KV chunk) with every KV head (below) */
    size_t state;   /* all_heads: bytes per thread of every (KV head, row group)'s o, m, l */
} dec_plan;

/* A paged pool [NB,BS,G,d] holds a key's G heads side by side, so one KV
 * head's rows are G x d apart: an item per (sequence, KV head) reads d of
 * every G x d elements, and the stream ran at 0.42-0.71x a head-major dense
 * cache's bandwidth (docs/attention-variants.md). With all_heads an item is
 * a (sequence, KV chunk) that walks its keys in spans (mha_decode_span) and runs
 * every KV head's rows over a span before the next, so the pool is read in
 * the order it is stored while a span of it (128 KiB of K and V: 16 fp32
 * keys x G heads at G 8 d 128) sits in the L2; each (head, row group)
 * keeps its o, m and l in the thread's state between spans. For few rows
 * per KV head (decode), where the state stays small. */

static dec_plan plan(const mha_problem *p, int threads, int interleaved) {
    dec_plan P;
    const int64_t group = p->heads / p->kv_heads, pairs = p->batch * p->kv_heads;
    P.rows = group * p->seq_q;
    const int64_t nrc = (P.rows + DEC_RB - 1) / DEC_RB;
    P.all_heads = interleaved && p->kv_heads > 1 && nrc <= 2;
    mha_problem per_seq = *p; /* all_heads: the items are (sequence, chunk): split by sequences */
    if (P.all_heads) per_seq.kv_heads = 1;
    P.nsplit = mha_decode_nsplit(&per_seq, P.rows, 4 * DEC_RB, threads);
    P.chunk = (p->seq_kv + P.nsplit - 1) / P.nsplit;
    const size_t f = sizeof(float), d = (size_t)p->head_dim, dv = (size_t)mha_dv(p);
    P.part =
        P.nsplit > 1
            ? mha_align64(mha_mul_sz(mha_mul_sz((size_t)(pairs * P.rows * P.nsplit), dv + 2), f))
            : 0;
    /* s[RB][BK] scores, o[RB][dvp] accumulators, m/l per row, and the Q rows
     * widened to fp32 [RB][dp] when Q is bf16/fp16 */
    const size_t dp = (d + 15) / 16 * 16, dvp = (dv + 15) / 16 * 16;
    P.wide_q = p->dtype != MHA_F32;
    /* One row per pass (MHA decode) streams K and V with q in registers;
     * software prefetch pays only when the stream comes from DRAM. Measured
     * on Zen 4 (32 MiB L3), d = 128, Nkv = 4096, interleaved profile runs,
     * GFLOP/s at 1 / 2 threads: H = 4 fp32 (16 MiB, L3) without prefetch
     * 29.4 / 61.9, with 27.4 / 56.3; H = 32 fp32 (128 MiB) without 9.5 /
     * 16.7, with 10.3 / 17.4; H = 32 bf16 (64 MiB) once 28.8 / 43.5 without
     * against 18.5 / 35.6 with, but level (13.3-14.8 / 29.1-30.2) when
     * measured again on huge pages. Measured again in stop 56 (huge pages,
     * H = 32 bf16, 8,192 keys): without 29 against 18 at 1 thread, so
     * AVX-512 streams 16-bit and int8 V rows unprefetched (pv1_strip). The
     * multi-row passes are compute-bound and always prefetch. */
    P.stream_pf = mha_decode_cache_per_l3(p) > 1.5;
    P.state = P.all_heads
                  ? mha_align64((size_t)(p->kv_heads * nrc) * (DEC_RB * dvp + 2 * DEC_RB) * f)
                  : 0;
    P.scratch =
        mha_align64((DEC_RB * DEC_BK + DEC_RB * dvp + 2 * DEC_RB + (P.wide_q ? DEC_RB * dp : 0)) *
                    f) +
        P.state;
    return P;
}

size_t MHA_CAT(MHA_SYM(decode), _workspace)(const mha_problem *p, const mha_options *o,
                                            int threads) {
    (void)o;
    /* the run picks all_heads by the tensors' strides: room for either plan */
    const dec_plan P0 = plan(p, threads, 0), P1 = plan(p, threads, 1);
    const size_t w0 = mha_add_sz(P0.part, mha_mul_sz(P0.scratch, (size_t)threads)),
                 w1 = mha_add_sz(P1.part, mha_mul_sz(P1.scratch, (size_t)threads));
    return w0 > w1 ? w0 : w1;
}

/* out[r] = q[r] . krow for r < R (R <= DEC_RB, a constant where inlined):
 * each K vector is loaded (and widened) once for all rows, two accumulators
 * per row, and the row sums are reduced together. */
static inline __attribute__((always_inline)) void dots_n(const int t, const int R,
                                                         const float *const *q, const void *krow,
                                                         int64_t d, float out[DEC_RB]) {
    vf acc[DEC_RB] = {vzero(), vzero(), vzero(), vzero()}, acc2[DEC_RB];
    for (int r = 0; r < R; r++) acc2[r] = vzero();
    int64_t c = 0;
    for (; c + 2 * VW <= d; c += 2 * VW) {
        const vf k0 = vload_kv(t, elem(t, krow, c)), k1 = vload_kv(t, elem(t, krow, c + VW));
        for (int r = 0; r < R; r++) {
            acc[r] = vfma(vloadu(q[r] + c), k0, acc[r]);
            acc2[r] = vfma(vloadu(q[r] + c + VW), k1, acc2[r]);
        }
    }
    for (; c < d; c += VW) {
        const int n = d - c < VW ? (int)(d - c) : VW;
        const vf kv = vload_kv_n(t, elem(t, krow, c), n);
        for (int r = 0; r < R; r++) acc[r] = vfma(vloadu_n(q[r] + c, n), kv, acc[r]);
    }
    for (int r = 0; r < R; r++) acc[r] = vadd(acc[r], acc2[r]);
    vhsum4(acc, out);
}

static inline __attribute__((always_inline)) float dot(const int t, const float *a, const void *b,
                                                       int64_t d) {
    vf acc0 = vzero(), acc1 = vzero();
    int64_t c = 0;
    for (; c + 2 * VW <= d; c += 2 * VW) {
        acc0 = vfma(vloadu(a + c), vload_kv(t, elem(t, b, c)), acc0);
        acc1 = vfma(vloadu(a + c + VW), vload_kv(t, elem(t, b, c + VW)), acc1);
    }
    for (; c + VW <= d; c += VW) acc0 = vfma(vloadu(a + c), vload_kv(t, elem(t, b, c)), acc0);
    if (c < d)
        acc1 =
            vfma(vloadu_n(a + c, (int)(d - c)), vload_kv_n(t, elem(t, b, c), (int)(d - c)), acc1);
    return vhsum(vadd(acc0, acc1));
}

/* Scores of keys [j0, j0 + bk) (log2 units, -inf past a row's end) into
 * s[r][j]; an int8 K row's scale ks[j * kss] multiplies its score. The
 * stream is memory-bound with little work per byte, so the K rows pf ahead
 * are prefetched (KPF: see dec_rows for where not); with several rows, so
 * are the V rows of this block, which the register-blocked P.V reads next.
 * Kept out of line per row count and storage type (the DEC_TYPES
 * instances): one loop nest per case lets each keep its registers (one row
 * ran 10% slower sharing a loop with the multi-row case). */
/* out[r][u] = q[r] . K row u, for R rows and 4 keys at once: each q vector
 * is loaded once for 4 keys and each K vector once for R rows, so the loads
 * per FMA halve against one key at a time (with 4 rows the loop was load-port
 * bound), and the R x 4 sums share R horizontal reductions. */
static inline __attribute__((always_inline)) void dots_x4(const int t, const int R,
                                                          const float *const *q,
                                                          const void *const *kr, int64_t d,
                                                          float out[DEC_RB][4]) {
    vf acc[DEC_RB * 4];
    for (int f = 0; f < 4 * R; f++) acc[f] = vzero();
    int64_t c = 0;
    for (; c + VW <= d; c += VW) {
        vf kv[4];
        for (int u = 0; u < 4; u++) kv[u] = vload_kv(t, elem(t, kr[u], c));
        for (int r = 0; r < R; r++) {
            const vf qv = vloadu(q[r] + c);
            for (int u = 0; u < 4; u++) acc[4 * r + u] = vfma(qv, kv[u], acc[4 * r + u]);
        }
    }
    if (c < d) {
        const int n = (int)(d - c);
        vf kv[4];
        for (int u = 0; u < 4; u++) kv[u] = vload_kv_n(t, elem(t, kr[u], c), n);
        for (int r = 0; r < R; r++) {
            const vf qv = vloadu_n(q[r] + c, n);
            for (int u = 0; u < 4; u++) acc[4 * r + u] = vfma(qv, kv[u], acc[4 * r + u]);
        }
    }
    for (int r = 0; r < R; r++) vhsum4(acc + 4 * r, out[r]);
}

static inline __attribute__((always_inline)) void
scores_block(const int t, const int KPF, int R, const float *const *qrow, const int64_t *end,
             const void *kh, int64_t skn, const float *ks, int64_t kss, const void *vh, int64_t svn,
             int64_t j0, int64_t bk, int64_t kend, int64_t pf, int64_t d, float qscale, float *s,
             mha_span_pf *spf) {
    const int64_t rb = d * esize(t); /* bytes of a stored row */
    int64_t j = 0;
    /* int8: 4 keys at a time (dots_x4); it was 25% faster here, while bf16 and
     * fp16, twice the bytes per FMA, ran 15% slower than one key at a time
     * (G = 8, one thread, interleaved A/B runs of bench_kvcache) */
    for (; t == MHA_I8 && j + 4 <= bk; j += 4) {
        const void *kr[4];
        for (int u = 0; u < 4; u++) {
            mha_span_pf_step(spf);
            kr[u] = elem(t, kh, (j0 + j + u) * skn);
            if (pf > 0 && j0 + j + u + pf < kend) {
                if (KPF) prefetch_row(elem(t, kr[u], pf * skn), rb);
                prefetch_row_l2(elem(t, vh, (j0 + j + u) * svn), rb);
            }
        }
        float dj[DEC_RB][4];
        switch (R) {
        case 2:
            dots_x4(t, 2, qrow, kr, d, dj);
            break;
        case 3:
            dots_x4(t, 3, qrow, kr, d, dj);
            break;
        default:
            dots_x4(t, 4, qrow, kr, d, dj);
            break;
        }
        for (int u = 0; u < 4; u++) {
            const int64_t jj = j0 + j + u;
            const float sc = t == MHA_I8 ? qscale * ks[jj * kss] : qscale;
            for (int r = 0; r < R; r++)
                s[r * DEC_BK + j + u] = jj < end[r] ? dj[r][u] * sc : -INFINITY;
        }
    }
    for (; j < bk; j++) { /* one key at a time (int8: the block's last keys) */
        mha_span_pf_step(spf);
        const void *krow = elem(t, kh, (j0 + j) * skn);
        if (pf > 0 && j0 + j + pf < kend) {
            if (KPF) prefetch_row(elem(t, krow, pf * skn), rb);
            prefetch_row_l2(elem(t, vh, (j0 + j) * svn), rb);
        }
        float dj[DEC_RB];
        switch (R) {
        case 2:
            dots_n(t, 2, qrow, krow, d, dj);
            break;
        case 3:
            dots_n(t, 3, qrow, krow, d, dj);
            break;
        default:
            dots_n(t, 4, qrow, krow, d, dj);
            break;
        }
        const float sc = t == MHA_I8 ? qscale * ks[(j0 + j) * kss] : qscale;
        for (int r = 0; r < R; r++) s[r * DEC_BK + j] = j0 + j < end[r] ? dj[r] * sc : -INFINITY;
    }
}

/* One row, NV (<= 8) vectors of q held in registers (the last with tail
 * valid lanes, zero beyond): s[j] for keys [j0, j0 + bk), one key at a
 * time with two accumulators and one horizontal sum. */
static inline __attribute__((always_inline)) void
scores1_reg(const int t, const int NV, const float *qrow, int tail, int64_t end, const void *kh,
            int64_t skn, const float *ks, int64_t kss, int64_t j0, int64_t bk, float qscale,
            float *s, mha_span_pf *spf) {
    vf qv[8];
    for (int v = 0; v < NV; v++)
        qv[v] = v == NV - 1 && tail < VW ? vloadu_n(qrow + v * VW, tail) : vloadu(qrow + v * VW);
    for (int64_t j = 0; j < bk; j++) {
        mha_span_pf_step(spf);
        const void *krow = elem(t, kh, (j0 + j) * skn);
        vf a0 = vzero(), a1 = vzero();
        for (int v = 0; v < NV; v++) {
            const vf kv = v == NV - 1 && tail < VW ? vload_kv_n(t, elem(t, krow, v * VW), tail)
                                                   : vload_kv(t, elem(t, krow, v * VW));
            if (v & 1)
                a1 = vfma(qv[v], kv, a1);
            else
                a0 = vfma(qv[v], kv, a0);
        }
        const float sc = t == MHA_I8 ? qscale * ks[(j0 + j) * kss] : qscale;
        s[j] = j0 + j < end ? vhsum(vadd(a0, a1)) * sc : -INFINITY;
    }
}

static inline __attribute__((always_inline)) void
scores_block1(const int t, const float *qrow, int64_t end, const void *kh, int64_t skn,
              const float *ks, int64_t kss, int64_t j0, int64_t bk, int64_t kend, int64_t pf,
              int64_t d, float qscale, float *s, mha_span_pf *spf) {
    const int64_t rb = d * esize(t);
    if (d <= 8 * VW) { /* q in registers: the common head dims */
        const int64_t nv = (d + VW - 1) / VW;
        const int tail = (int)(d - (nv - 1) * VW);
        switch (nv) {
        // clang-format off
        default: break;
#define S1_CASE(n) case n: scores1_reg(t, n, qrow, tail, end, kh, skn, ks, kss, j0, bk, qscale, s, spf); return;
        S1_CASE(1) S1_CASE(2) S1_CASE(3) S1_CASE(4) S1_CASE(5) S1_CASE(6) S1_CASE(7) S1_CASE(8)
#undef S1_CASE
            // clang-format on
        }
    }
    for (int64_t j = 0; j < bk; j++) {
        mha_span_pf_step(spf);
        const void *krow = elem(t, kh, (j0 + j) * skn);
        if (pf > 0 && j0 + j + pf < kend) prefetch_row_l2(elem(t, krow, pf * skn), rb);
        const float sc = t == MHA_I8 ? qscale * ks[(j0 + j) * kss] : qscale;
        s[j] = j0 + j < end ? dot(t, qrow, krow, d) * sc : -INFINITY;
    }
}

typedef struct {
    const mha_problem *p;
    const mha_tensor *q, *k, *v;
    int64_t group;
    float qscale;  /* scale * log2(e), or scale alone under a softcap */
    int stream_pf; /* dec_plan.stream_pf */
    const float *sinks;
    const int32_t *blocks; /* paged: the sequence's row of the block table; else NULL */
    int64_t bs;            /* paged: keys per cache block */
} dec_ctx;

/* ---- the paged cache -----------------------------------------------------------------------
 * The streaming loops below read key j's K row at kh + j * skn (its int8
 * scale at ks + j * kss) and its V row likewise. A paged cache keeps that:
 * the keys of a block are visited in stretches that end at a cache block's
 * end (kv_stretch), and each stretch's bases are its cache block's rows
 * shifted back by the stretch's first key of that block, so the loops, the
 * masks (key indices) and the scales are unchanged, and nothing is copied.
 * Dense and packed: one stretch, the block itself, at the head's bases. */
typedef struct {
    const void *kh, *vh;  /* key j's rows at kh + j * skn, vh + j * svn */
    const float *ks, *vs; /* int8: key j's scales at ks + j * kss, vs + j * vss; else NULL */
    int64_t n;            /* keys in the stretch */
    int64_t pf_end;       /* the prefetches stay below this key (the stretch's cache block) */
} kv_stretch;

/* base - by elements of t (a cache block's rows shifted back; never read there) */
static inline const void *shift_back(int t, const void *base, int64_t by) {
    return (const void *)((uintptr_t)base - (uintptr_t)(by * esize(t)));
}
static inline const float *shift_back_f(const float *base, int64_t by) {
    return base ? (const float *)((uintptr_t)base - (uintptr_t)by * sizeof(float)) : NULL;
}

/* The stretch of keys [j, min(stop, end of j's cache block)) of a KV head;
 * kh, vh, ks, vs: the head's bases (dense, packed) or the pools' head g
 * (paged: then block blocks[j / bs] holds the keys). kend bounds the
 * prefetches of a dense stretch. */
static inline kv_stretch kv_stretch_at(const dec_ctx *x, int t, const void *kh, const void *vh,
                                       const float *ks, const float *vs, int64_t j, int64_t stop,
                                       int64_t kend) {
    kv_stretch st = {kh, vh, ks, vs, stop - j, kend};
    if (!x->blocks) return st;
    const int64_t bs = x->bs, first = j / bs * bs, left = first + bs - j;
    const int64_t blk = x->blocks[j / bs];
    const mha_tensor *k = x->k, *v = x->v;
    st.n = st.n < left ? st.n : left;
    st.pf_end = first + bs < kend ? first + bs : kend;
    st.kh = shift_back(t, elem(t, kh, blk * k->stride_b), first * k->stride_n);
    st.vh = shift_back(t, elem(t, vh, blk * v->stride_b), first * v->stride_n);
    if (t == MHA_I8) {
        st.ks = shift_back_f(ks + blk * k->scale_stride_b, first * k->scale_stride_n);
        st.vs = shift_back_f(vs + blk * v->scale_stride_b, first * v->scale_stride_n);
    }
    return st;
}

/* Paged: the K and V rows of keys [from, to) (across cache blocks) fetched
 * ahead, K into L1 (l1) or L2, V into L2: what a dense stream's per-row
 * prefetch does beyond the end of the current cache block. */
static void prefetch_keys(const dec_ctx *x, int t, const void *kh, const void *vh, int64_t from,
                          int64_t to, int l1) {
    const int64_t kb = x->p->head_dim * esize(t), vb = mha_dv(x->p) * esize(t);
    for (int64_t j = from; j < to; j++) {
        const int64_t blk = x->blocks[j / x->bs], slot = j % x->bs;
        const void *kr = elem(t, kh, blk * x->k->stride_b + slot * x->k->stride_n);
        if (l1)
            prefetch_row(kr, kb);
        else
            prefetch_row_l2(kr, kb);
        prefetch_row_l2(elem(t, vh, blk * x->v->stride_b + slot * x->v->stride_n), vb);
    }
}

/* One row, NV (<= 8) vectors from column c0 (the last holding tail valid
 * columns): the accumulators stay in registers across the block. */
static inline __attribute__((always_inline)) void pv1_strip(const int t, const int NV, int init,
                                                            float alpha, const float *p,
                                                            const void *vh, int64_t svn, int64_t j0,
                                                            int64_t bk, int64_t kend, int64_t pf,
                                                            int64_t c0, int tail, float *o) {
    vf acc[8];
    for (int v = 0; v < NV; v++)
        acc[v] = init == MHA_INIT_ZERO       ? vzero()
                 : init == MHA_INIT_ROWSCALE ? vmul(vloadu(o + c0 + v * VW), vset1(alpha))
                                             : vloadu(o + c0 + v * VW);
    for (int64_t j = 0; j < bk; j++) {
        const void *vrow = elem(t, vh, (j0 + j) * svn);
        /* AVX-512 over 16-bit and int8 rows: no prefetch; the hardware's
         * stream keeps up, and the prefetch in this loop cost the loop
         * more than it fetched (Zen 4 VM, H32 KV32 8,192 keys d128, 3
         * alternated rounds of best-of-5: bf16 cache 1.56-1.64x at 1
         * thread, 1.30x at 2; the sweep's fp16 1.4-1.55x, int8 1.4x). On
         * AVX2 the same removal lost 10-15%; fp32 rows keep it too. */
        if ((t == MHA_F32 || VW < 16) && pf > 0 && j0 + j + pf < kend)
            prefetch_row_l2(elem(t, vrow, pf * svn + c0), NV * VW * esize(t));
        const vf pj = vset1(p[j]);
        for (int v = 0; v < NV; v++)
            acc[v] = vfma(pj,
                          v == NV - 1 && tail < VW ? vload_kv_n(t, elem(t, vrow, c0 + v * VW), tail)
                                                   : vload_kv(t, elem(t, vrow, c0 + v * VW)),
                          acc[v]);
    }
    for (int v = 0; v < NV; v++) vstoreu(o + c0 + v * VW, acc[v]);
}

/* One row: o = alpha o + sum_j p[j] V[j0 + j], 8 vectors of o at a time in
 * registers (one pass over V for d <= 8 VW). */
static inline __attribute__((always_inline)) void
pv_block1(const int t, int init, float alpha, const float *p, const void *vh, int64_t svn,
          int64_t j0, int64_t bk, int64_t kend, int64_t pf, int64_t d, float *o) {
    int64_t c = 0;
    for (; c + 8 * VW <= d; c += 8 * VW)
        pv1_strip(t, 8, init, alpha, p, vh, svn, j0, bk, kend, pf, c, VW, o);
    if (c < d) {
        const int64_t nv = (d - c + VW - 1) / VW;
        const int tail = (int)(d - c - (nv - 1) * VW);
        switch (nv) {
        // clang-format off
        default: break;
#define PV1_CASE(n) case n: pv1_strip(t, n, init, alpha, p, vh, svn, j0, bk, kend, pf, c, tail, o); return;
        PV1_CASE(1) PV1_CASE(2) PV1_CASE(3) PV1_CASE(4) PV1_CASE(5) PV1_CASE(6) PV1_CASE(7) PV1_CASE(8)
#undef PV1_CASE
            // clang-format on
        }
    }
}

/* Several rows, V stored narrow: o[r][c0 .. c0 + NV*VW) = init(o) + sum_j
 * p[r][j] V[j0 + j][..] with the R x NV accumulators in registers, each V
 * vector widened once for all rows (k_gemm's register blocking, which reads
 * fp32 only). The last vector holds tail (<= VW) valid columns; o's rows are
 * padded to dp, so full vectors are stored. */
static inline __attribute__((always_inline)) void
pv_strip(const int t, const int R, const int NV, int init, const float *alpha, const float *p,
         const void *vh, int64_t svn, int64_t j0, int64_t bk, int64_t c0, int tail, float *o,
         int64_t dp) {
    vf acc[DEC_RB][MHA_NV];
    for (int r = 0; r < R; r++)
        for (int v = 0; v < NV; v++) {
            const float *src = o + r * dp + c0 + v * VW;
            acc[r][v] = init == MHA_INIT_ZERO       ? vzero()
                        : init == MHA_INIT_ROWSCALE ? vmul(vloadu(src), vset1(alpha[r]))
                                                    : vloadu(src);
        }
    for (int64_t j = 0; j < bk; j++) {
        const void *vrow = elem(t, vh, (j0 + j) * svn);
        vf x[MHA_NV];
        for (int v = 0; v < NV; v++)
            x[v] = v == NV - 1 && tail < VW ? vload_kv_n(t, elem(t, vrow, c0 + v * VW), tail)
                                            : vload_kv(t, elem(t, vrow, c0 + v * VW));
        for (int r = 0; r < R; r++) {
            const vf pr = vset1(p[r * DEC_BK + j]);
            for (int v = 0; v < NV; v++) acc[r][v] = vfma(pr, x[v], acc[r][v]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int v = 0; v < NV; v++) vstoreu(o + r * dp + c0 + v * VW, acc[r][v]);
}

static inline __attribute__((always_inline)) void
pv_rows_r(const int t, const int R, int init, const float *alpha, const float *p, const void *vh,
          int64_t svn, int64_t j0, int64_t bk, int64_t d, float *o, int64_t dp) {
    int64_t c = 0;
    for (; c + MHA_NV * VW <= d; c += MHA_NV * VW)
        pv_strip(t, R, MHA_NV, init, alpha, p, vh, svn, j0, bk, c, VW, o, dp);
    for (; c < d; c += VW)
        pv_strip(t, R, 1, init, alpha, p, vh, svn, j0, bk, c, d - c < VW ? (int)(d - c) : VW, o,
                 dp);
}

static inline __attribute__((always_inline)) void
pv_rows(const int t, int R, int init, const float *alpha, const float *p, const void *vh,
        int64_t svn, int64_t j0, int64_t bk, int64_t d, float *o, int64_t dp) {
    switch (R) {
    case 2:
        pv_rows_r(t, 2, init, alpha, p, vh, svn, j0, bk, d, o, dp);
        break;
    case 3:
        pv_rows_r(t, 3, init, alpha, p, vh, svn, j0, bk, d, o, dp);
        break;
    default:
        pv_rows_r(t, 4, init, alpha, p, vh, svn, j0, bk, d, o, dp);
        break;
    }
}

/* The per-type instances: one out-of-line copy of each streaming loop per K/V
 * storage type, reached through dec_fns[kv dtype]. */
/* The multi-row scores loop (scores_block): one instance prefetching K and
 * V rows, one V rows only (dec_rows chooses). */
typedef void dec_scores_fn(int R, const float *const *qrow, const int64_t *end, const void *kh,
                           int64_t skn, const float *ks, int64_t kss, const void *vh, int64_t svn,
                           int64_t j0, int64_t bk, int64_t kend, int64_t pf, int64_t d,
                           float qscale, float *s, mha_span_pf *spf);
typedef struct {
    dec_scores_fn *scores, *scores_v;
    void (*scores1)(const float *qrow, int64_t end, const void *kh, int64_t skn, const float *ks,
                    int64_t kss, int64_t j0, int64_t bk, int64_t kend, int64_t pf, int64_t d,
                    float qscale, float *s, mha_span_pf *spf);
    void (*pv1)(int init, float alpha, const float *p, const void *vh, int64_t svn, int64_t j0,
                int64_t bk, int64_t kend, int64_t pf, int64_t d, float *o);
    void (*pvn)(int R, int init, const float *alpha, const float *p, const void *vh, int64_t svn,
                int64_t j0, int64_t bk, int64_t d, float *o, int64_t dp);
} dec_fn_set;

#define DEC_SCORES(fn, T, KPF)                                                                     \
    static __attribute__((noinline)) void fn(                                                      \
        int R, const float *const *qrow, const int64_t *end, const void *kh, int64_t skn,          \
        const float *ks, int64_t kss, const void *vh, int64_t svn, int64_t j0, int64_t bk,         \
        int64_t kend, int64_t pf, int64_t d, float qscale, float *s, mha_span_pf *spf) {           \
        scores_block(T, KPF, R, qrow, end, kh, skn, ks, kss, vh, svn, j0, bk, kend, pf, d, qscale, \
                     s, spf);                                                                      \
    }
#define DEC_INSTANCE(name, T)                                                                      \
    DEC_SCORES(scores_##name, T, 1)                                                                \
    DEC_SCORES(scores_v_##name, T, 0)                                                              \
    static __attribute__((noinline)) void scores1_##name(                                          \
        const float *qrow, int64_t end, const void *kh, int64_t skn, const float *ks, int64_t kss, \
        int64_t j0, int64_t bk, int64_t kend, int64_t pf, int64_t d, float qscale, float *s,       \
        mha_span_pf *spf) {                                                                        \
        scores_block1(T, qrow, end, kh, skn, ks, kss, j0, bk, kend, pf, d, qscale, s, spf);        \
    }                                                                                              \
    static __attribute__((noinline)) void pv1_##name(                                              \
        int init, float alpha, const float *p, const void *vh, int64_t svn, int64_t j0,            \
        int64_t bk, int64_t kend, int64_t pf, int64_t d, float *o) {                               \
        pv_block1(T, init, alpha, p, vh, svn, j0, bk, kend, pf, d, o);                             \
    }                                                                                              \
    static __attribute__((noinline)) void pvn_##name(                                              \
        int R, int init, const float *alpha, const float *p, const void *vh, int64_t svn,          \
        int64_t j0, int64_t bk, int64_t d, float *o, int64_t dp) {                                 \
        pv_rows(T, R, init, alpha, p, vh, svn, j0, bk, d, o, dp);                                  \
    }
DEC_INSTANCE(f32, MHA_F32)
DEC_INSTANCE(bf16, MHA_BF16)
DEC_INSTANCE(f16, MHA_F16)
DEC_INSTANCE(i8, MHA_I8)
#undef DEC_INSTANCE
#undef DEC_SCORES

static const dec_fn_set dec_fns[MHA_DTYPE_COUNT] = {
    [MHA_F32] = {scores_f32, scores_v_f32, scores1_f32, pv1_f32, pvn_f32},
    [MHA_BF16] = {scores_bf16, scores_v_bf16, scores1_bf16, pv1_bf16, pvn_bf16},
    [MHA_F16] = {scores_f16, scores_v_f16, scores1_f16, pv1_f16, pvn_f16},
    [MHA_I8] = {scores_i8, scores_v_i8, scores1_i8, pv1_i8, pvn_i8},
};

/* Rows [r0, r0+R) of KV head (b, g) over keys [k0, k1): leaves the unnormalised
 * o (row stride dvp), the max m (log2 units) and the sum l per row in the
 * scratch arrays; fresh starts them (o = 0, m = -inf, l = 0), else the keys
 * join the o, m and l left there by earlier calls (all_heads' spans). qw (R
 * rows of dp floats) takes the Q rows widened to fp32 when Q is not fp32. */
static void dec_rows(const dec_ctx *x, int64_t b, int64_t g, int64_t r0, int R, int64_t k0,
                     int64_t k1, float *s, float *o, int64_t dvp, float *m, float *l, float *qw,
                     int fresh, mha_span_pf *spf) {
    const mha_problem *p = x->p;
    const int64_t d = p->head_dim, dv = mha_dv(p), Nq = p->seq_q, dp = (d + 15) / 16 * 16;
    const mha_tensor *q = x->q, *k = x->k, *v = x->v;
    const int kvt = k->dtype;
    const float *qrow[DEC_RB];
    int64_t end[DEC_RB], beg[DEC_RB];
    for (int r = 0; r < R; r++) {
        const int64_t rr = r0 + r, h = g * x->group + rr / Nq, i = rr % Nq;
        const int64_t off = b * q->stride_b + h * q->stride_h + i * q->stride_n;
        if (q->dtype == MHA_F32) {
            qrow[r] = (const float *)q->data + off;
        } else { /* once per pass: d elements against the whole cache */
            for (int64_t c = 0; c < d; c++)
                qw[r * dp + c] = mha_load_elem(q->data, q->dtype, off + c);
            qrow[r] = qw + r * dp;
        }
        end[r] = mha_kv_end(p, i);
        beg[r] = mha_kv_begin(p, i);
        if (fresh) {
            m[r] = -INFINITY;
            l[r] = 0.0f;
        }
    }
    const void *kh = elem(kvt, k->data, b * k->stride_b + g * k->stride_h);
    const void *vh = elem(kvt, v->data, b * v->stride_b + g * v->stride_h);
    /* int8: this head's row scales (NULL otherwise, never read) */
    const float *ks =
        kvt == MHA_I8 ? k->scale + b * k->scale_stride_b + g * k->scale_stride_h : NULL;
    const float *vs =
        kvt == MHA_I8 ? v->scale + b * v->scale_stride_b + g * v->scale_stride_h : NULL;
    const int64_t kss = k->scale_stride_n, vss = v->scale_stride_n;
    const dec_fn_set *F = &dec_fns[kvt];
    /* The multi-row passes prefetch K rows into L1 beside the V rows into
     * L2 (scores_block), except over a cache from DRAM (the plan's
     * stream_pf) of fp32 rows on AVX-512 and of any rows on AVX2 (the
     * scalar level, not measured, keeps them): there the K stream is the
     * hardware's, and the prefetches held the misses the V rows need.
     * Zen 4 VM, H32 KV8 d128, 32,768 keys, alternated rounds: fp32 1.20x /
     * 1.19x at 1 / 2 threads, AVX2 fp32 1.42x / 1.27x, AVX2 bf16 1.16x;
     * B4 8,192 keys fp32 1.22x, 8 rows per KV head 1.12x. With the cache
     * in the L3 (2,048 keys) dropping them cost 16%, and AVX-512 bf16 rows
     * from DRAM were level, so those keep them. Two instances (scores,
     * scores_v): a test in the loop cost 5% where nothing changed. */
    const int kpf = !(x->stream_pf && VW >= 8 && (kvt == MHA_F32 || VW == 8)); /* 8: AVX2 */
    /* prefetch distance: a fixed number of bytes of storage ahead; none in
     * all_heads' spans, whose next span spf fetches (the per-row stream beside
     * it requested the same lines again: without it, Zen 4 VM, decode.avx512
     * on 16 x 8,192 keys, the paged/dense ratios stayed within the run-to-run
     * spread, fp32 0.89-1.06x and bf16 pools 0.87-1.03x) */
    const int64_t rowb = d * esize(kvt),
                  pf = spf ? 0 : (DEC_PF_BYTES / rowb > 4 ? DEC_PF_BYTES / rowb : 4);
    int64_t kend = k0, kbeg = k1; /* keys any row sees: [kbeg, kend) */
    for (int r = 0; r < R; r++) {
        kend = end[r] > kend ? end[r] : kend;
        kbeg = beg[r] < kbeg ? beg[r] : kbeg;
    }
    if (kend > k1) kend = k1;
    if (kbeg < k0) kbeg = k0;
    if (kend <= kbeg && fresh) /* no row sees a key of this chunk: o = 0, m = -inf, l = 0 */
        for (int r = 0; r < R; r++) memset(o + r * dvp, 0, (size_t)dv * sizeof(float));
    /* one row: the stream is prefetched only when it comes from DRAM (see plan) */
    const int64_t pf1 = x->stream_pf ? pf : 0, bkb = DEC_BK;
    const float cap = p->softcap;
    for (int64_t j0 = kbeg; j0 < kend; j0 += bkb) {
        const int64_t bk = kend - j0 < bkb ? kend - j0 : bkb;
        /* scores: one pass over the K block serves every row (paged: a call
         * per cache block it spans, each prefetching the next one's first
         * keys as a dense stream's prefetch would) */
        for (int64_t js = j0, n; js < j0 + bk; js += n) {
            const kv_stretch st = kv_stretch_at(x, kvt, kh, vh, ks, vs, js, j0 + bk, kend);
            n = st.n;
            const int64_t dist = R == 1 ? pf1 : pf;
            if (x->blocks && dist > 0 && js + n == st.pf_end && st.pf_end < kend)
                prefetch_keys(x, kvt, kh, vh, st.pf_end,
                              st.pf_end + dist < kend ? st.pf_end + dist : kend, R > 1);
            if (R == 1)
                F->scores1(qrow[0], end[0], st.kh, k->stride_n, st.ks, kss, js, n, st.pf_end, pf1,
                           d, x->qscale, s + (js - j0), spf);
            else
                (kpf ? F->scores : F->scores_v)(R, qrow, end, st.kh, k->stride_n, st.ks, kss, st.vh,
                                                v->stride_n, js, n, st.pf_end, pf, d, x->qscale,
                                                s + (js - j0), spf);
        }
        if (cap > 0 || p->window) /* the cap before the mask; a window's left edge */
            for (int r = 0; r < R; r++) {
                float *sr = s + r * DEC_BK;
                if (cap > 0) {
                    int64_t j = 0;
                    for (; j + VW <= bk; j += VW)
                        vstoreu(sr + j, vsoftcap_log2(vloadu(sr + j), cap));
                    if (j < bk)
                        vstoreu_n(sr + j, vsoftcap_log2(vloadu_n(sr + j, (int)(bk - j)), cap),
                                  (int)(bk - j));
                }
                for (int64_t j = 0; j < bk; j++)
                    if (j0 + j < beg[r] || j0 + j >= end[r]) sr[j] = -INFINITY;
            }
        float arow[DEC_RB];
        int rescale = 0;
        for (int r = 0; r < R; r++) {
            float *sr = s + r * DEC_BK;
            vf mx = vset1(-INFINITY);
            int64_t j = 0;
            for (; j + VW <= bk; j += VW) mx = vmax(mx, vloadu(sr + j));
            float bmax = vhmax(mx);
            for (; j < bk; j++) bmax = sr[j] > bmax ? sr[j] : bmax;
            const float m_new = bmax > m[r] ? bmax : m[r];
            const float m_use = m_new == -INFINITY ? 0.0f : m_new;
            const float alpha = m[r] == -INFINITY ? 0.0f : exp2f(m[r] - m_use);
            vf sum = vzero();
            const vf mu = vset1(m_use);
            for (j = 0; j + VW <= bk; j += VW) {
                const vf e = vexp2_nonpos(vsub(vloadu(sr + j), mu));
                vstoreu(sr + j, e);
                sum = vadd(sum, e);
            }
            if (j < bk) {
                const int t = (int)(bk - j);
                const vf e = vexp2_nonpos(vsub(vloadu_n(sr + j, t), mu));
                vstoreu_n(sr + j, e, t);
                sum = vadd(sum, vloadu_n(sr + j, t));
            }
            l[r] = l[r] * alpha + vhsum(sum);
            m[r] = m_new;
            arow[r] = alpha;
            rescale |= alpha != 1.0f;
        }
        /* o[r] = alpha[r] o[r] + sum_j p[r][j] V[j0+j]. Several rows (GQA
         * groups, Nq > 1): register-blocked, V read in place (its rows were
         * prefetched during the scores): fp32 through the k_gemm
         * micro-kernel, narrower types widened in pv_rows. One row is a pure
         * stream: V row by row with its own prefetch ahead, o in L1. */
        const int init =
            fresh && j0 == kbeg ? MHA_INIT_ZERO : (rescale ? MHA_INIT_ROWSCALE : MHA_INIT_ACC);
        for (int64_t js = j0, n; js < j0 + bk; js += n) { /* paged: per cache block */
            const kv_stretch st = kv_stretch_at(x, kvt, kh, vh, ks, vs, js, j0 + bk, kend);
            n = st.n;
            const int in = js == j0 ? init : MHA_INIT_ACC;
            float *sp = s + (js - j0);
            /* int8 V: the row scale joins the weight (after the sum, which
             * is of the weights alone); keys this row cannot see keep
             * weight 0 whatever their scale, as in the oracle */
            if (kvt == MHA_I8)
                for (int r = 0; r < R; r++) {
                    const int64_t vis = end[r] - js < n ? end[r] - js : n;
                    for (int64_t j = beg[r] > js ? beg[r] - js : 0; j < vis; j++)
                        sp[r * DEC_BK + j] *= st.vs[(js + j) * vss];
                }
            if (R > 1 && kvt == MHA_F32)
                k_gemm(R, dv, n, sp, DEC_BK, 1, (const float *)st.vh + js * v->stride_n,
                       v->stride_n, o, dvp, in | MHA_B_EXACT, arow);
            else if (R > 1)
                F->pvn(R, in, arow, sp, st.vh, v->stride_n, js, n, dv, o, dvp);
            else
                F->pv1(in, arow[0], sp, st.vh, v->stride_n, js, n, st.pf_end, pf1, dv, o);
        }
    }
}

/* Sequence b of a packed or paged problem as a dense problem of its own
 * (mha_seq_view: batch 1, its lengths, so the mask helpers align it
 * bottom-right; q and out views from its first row, k and v, int8 scales
 * included, from its first key (packed) or the pools with its row of the
 * block table (paged). No copy. */
typedef struct {
    mha_seq_view v;
    dec_ctx x;
} dec_seq;

static void dec_seq_view(const dec_ctx *x, const mha_tensor_mut *out, const mha_extras *ex,
                         int64_t b, dec_seq *s) {
    mha_seq_view_of(x->p, ex, b, x->q, x->k, x->v, out, &s->v);
    s->x = *x;
    MHA_CTX_AT_SEQ(s->x, s->v);
}

/* The context and output pair (b, .) is run in: the problem's own (dense),
 * or sequence b's view made in sv (packed, paged), whose batch index *b
 * becomes 0. */
static const dec_ctx *pair_ctx(const dec_ctx *x, const mha_tensor_mut *out, const mha_extras *ex,
                               int64_t *b, dec_seq *sv, const mha_tensor_mut **os) {
    *os = out;
    if (x->p->layout == MHA_LAYOUT_DENSE) return x;
    dec_seq_view(x, out, ex, *b, sv);
    *os = &sv->v.out;
    *b = 0;
    return &sv->x;
}

/* all_heads: the o [DEC_RB][dp], m and l [DEC_RB] of (KV head g, row group
 * rc) in the thread's state, and its row count R of rows in all. */
static inline float *head_state(float *state, int64_t g, int64_t rc, int64_t nrc, int64_t dp,
                                int64_t rows, int *R) {
    *R = (int)(rows - rc * DEC_RB < DEC_RB ? rows - rc * DEC_RB : DEC_RB);
    return state + (g * nrc + rc) * (DEC_RB * dp + 2 * DEC_RB);
}

/* Row i of head h of batch b of out = row (d floats, normalised), rounded to
 * out's dtype (nearest even); fp32 goes through store_normalized directly. */
static void store_row(const mha_tensor_mut *out, int64_t b, int64_t h, int64_t i, float *row,
                      int64_t d, const float *lsum, int64_t blind) {
    const int64_t off = b * out->stride_b + h * out->stride_h + i * out->stride_n;
    if (out->dtype == MHA_F32) {
        k_store_normalized(1, d, row, d, lsum, blind, (float *)out->data + off, d);
        return;
    }
    k_store_normalized(1, d, row, d, lsum, blind, row, d); /* in place */
    k_narrow_array(row, (uint16_t *)out->data + off, d, out->dtype == MHA_BF16);
}

/* Rows [r0, r0 + R) of pair (b, g) after their pass over chunk split: o
 * (row stride dp), m and l into the partial results (split-KV, merged
 * after) or, normalised with the sink, into out. x: the sequence's (or the
 * problem's) context. */
static void finish_rows(const dec_ctx *x, const dec_plan *P, float *part, const mha_tensor_mut *out,
                        int64_t b, int64_t pair, int64_t split, int64_t r0, int R, float *o,
                        int64_t dp, float *m, float *l) {
    const int64_t d = mha_dv(x->p), nq = x->p->seq_q, g = pair % x->p->kv_heads;
    for (int r = 0; r < R; r++) {
        const int64_t rr = r0 + r;
        if (P->nsplit > 1) {
            float *dst = part + ((pair * P->nsplit + split) * P->rows + rr) * (d + 2);
            memcpy(dst, o + r * dp, (size_t)d * sizeof(float));
            dst[d] = m[r];
            dst[d + 1] = l[r];
        } else {
            const int64_t h = g * x->group + rr / nq, i = rr % nq;
            if (x->p->sinks) mha_decode_add_sink(o + r * dp, d, &l[r], m[r], x->sinks[h] * LOG2E);
            store_row(out, b, h, i, o + r * dp, d, &l[r], mha_kv_count(x->p, i) == 0);
        }
    }
}

mha_status MHA_CAT(MHA_SYM(decode), _run)(const mha_problem *p, const mha_options *o, int threads,
                                          const mha_tensor *q, const mha_tensor *k,
                                          const mha_tensor *v, const mha_extras *ex,
                                          const mha_tensor_mut *out, void *workspace) {
    (void)o;
    const dec_plan P = plan(p, threads, mha_decode_interleaved(p, k, v));
    /* scores in log2 units -> exp2; a softcap takes them natural */
    const dec_ctx x = {p,
                       q,
                       k,
                       v,
                       p->heads / p->kv_heads,
                       mha_problem_scale(p) * (p->softcap > 0 ? 1.0f : LOG2E),
                       P.stream_pf,
                       ex->sinks,
                       NULL,
                       0};
    const int64_t d = mha_dv(p), dp = (d + 15) / 16 * 16, G = p->kv_heads,
                  span = mha_decode_span(p);
    const int64_t nrc = (P.rows + DEC_RB - 1) / DEC_RB,
                  items = p->batch * (P.all_heads ? 1 : G * nrc) * P.nsplit;
    float *part = (float *)workspace; /* [pair][split][row][d + 2]: o, m, l */
    char *scratch0 = (char *)workspace + P.part;

#pragma omp parallel num_threads(threads)
    {
        char *sc = scratch0 + (size_t)omp_get_thread_num() * P.scratch;
        float *s = (float *)sc, *ob = s + DEC_RB * DEC_BK, *m = ob + DEC_RB * dp, *l = m + DEC_RB;
        float *qw = P.wide_q ? l + DEC_RB : NULL;
        float *state = (float *)(sc + P.scratch - P.state); /* all_heads */
#pragma omp for schedule(dynamic, 1)
        for (int64_t it = 0; it < items; it++) {
            if (P.all_heads) {
                const int64_t split = it % P.nsplit, b0 = it / P.nsplit;
                int64_t b = b0;
                dec_seq sv;
                const mha_tensor_mut *os;
                const dec_ctx *xs = pair_ctx(&x, out, ex, &b, &sv, &os);
                const int64_t rows = x.group * xs->p->seq_q, nkv = xs->p->seq_kv,
                              nrcs = (rows + DEC_RB - 1) / DEC_RB;
                int R;
                int64_t k0 = split * P.chunk, k1 = k0 + P.chunk;
                k0 = k0 < nkv ? k0 : nkv;
                k1 = k1 < nkv ? k1 : nkv;
                mha_span_pf pf;
                for (int64_t c0 = k0;;) { /* at least once: a chunk without keys starts zeros */
                    const int64_t c1 = c0 + span < k1 ? c0 + span : k1;
                    /* the next span's lines, spread over this one's score steps (a
                     * key each; P.V runs in k_gemm for fp32). Zen 4 VM, 16
                     * sequences of 8,192 keys, H 32, G 8, d 128, fp32 pages of 16 /
                     * 128 against the dense cache: 0.44-0.58x without, 0.91-1.08x */
                    mha_span_pf *spf = mha_span_pf_init(
                        &pf, xs->k, xs->v, xs->p->head_dim, d, xs->blocks, xs->bs, b, G, c1,
                        c1 + span < k1 ? c1 + span : k1, G * nrcs * (c1 - c0));
                    for (int64_t g = 0; g < G; g++)
                        for (int64_t rc = 0; rc < nrcs; rc++) {
                            float *o_ = head_state(state, g, rc, nrc, dp, rows, &R);
                            float *m_ = o_ + DEC_RB * dp;
                            dec_rows(xs, b, g, rc * DEC_RB, R, c0, c1, s, o_, dp, m_, m_ + DEC_RB,
                                     qw, c0 == k0, spf);
                        }
                    if (c1 >= k1) break;
                    c0 = c1;
                }
                for (int64_t g = 0; g < G; g++)
                    for (int64_t rc = 0; rc < nrcs; rc++) {
                        float *o_ = head_state(state, g, rc, nrc, dp, rows, &R);
                        float *m_ = o_ + DEC_RB * dp;
                        finish_rows(xs, &P, part, os, b, b0 * G + g, split, rc * DEC_RB, R, o_, dp,
                                    m_, m_ + DEC_RB);
                    }
                continue;
            }
            const int64_t split = it % P.nsplit, rc = (it / P.nsplit) % nrc,
                          pair = it / (P.nsplit * nrc);
            int64_t b = pair / G;
            const int64_t g = pair % G, r0 = rc * DEC_RB;
            dec_seq sv;
            const mha_tensor_mut *os;
            const dec_ctx *xs = pair_ctx(&x, out, ex, &b, &sv, &os);
            const int64_t rows = x.group * xs->p->seq_q, nkv = xs->p->seq_kv;
            if (r0 >= rows) continue; /* past a short sequence's rows (merged by nobody) */
            const int R = (int)(rows - r0 < DEC_RB ? rows - r0 : DEC_RB);
            const int64_t k0 = split * P.chunk, k1 = k0 + P.chunk < nkv ? k0 + P.chunk : nkv;
            dec_rows(xs, b, g, r0, R, k0 < k1 ? k0 : k1, k1, s, ob, dp, m, l, qw, 1, NULL);
            finish_rows(xs, &P, part, os, b, pair, split, r0, R, ob, dp, m, l);
        }
        if (P.nsplit > 1) {
            /* Merge the chunks: m = max m_s, l = sum l_s 2^(m_s - m), o likewise. */
#pragma omp for schedule(static)
            for (int64_t pr = 0; pr < p->batch * G * P.rows; pr++) {
                const int64_t pair = pr / P.rows, rr = pr % P.rows, g = pair % G;
                int64_t b = pair / G;
                dec_seq sv;
                const mha_tensor_mut *os;
                const dec_ctx *xs = pair_ctx(&x, out, ex, &b, &sv, &os);
                const int64_t nq = xs->p->seq_q;
                if (rr >= x.group * nq) continue; /* past a short sequence's rows */
                float *acc = ob;                  /* this thread's scratch row */
                const float *pt = part + (pair * P.nsplit * P.rows + rr) * (d + 2);
                float lsum = mha_decode_merge(pt, P.nsplit, P.rows * (d + 2), d, acc);
                const int64_t h = g * x.group + rr / nq, i = rr % nq;
                if (p->sinks) { /* once, after the merge: acc and lsum are at the chunks' max */
                    float mmax = -INFINITY;
                    for (int64_t sp = 0; sp < P.nsplit; sp++) {
                        const float ms = pt[sp * P.rows * (d + 2) + d];
                        mmax = ms > mmax ? ms : mmax;
                    }
                    mha_decode_add_sink(acc, d, &lsum, mmax, x.sinks[h] * LOG2E);
                }
                store_row(os, b, h, i, acc, d, &lsum, mha_kv_count(xs->p, i) == 0);
            }
        }
    }
    return MHA_OK;
}
