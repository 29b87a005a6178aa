/* decode_bf16.c - kernel decode.<isa> on the bf16 dot product (built for the
 * levels with AVX512_BF16: decode.avx512bf16; and as decode.bf16fma, "The
 * FMA flavour" below, at the avx512 level). The algorithm of decode.c (few
 * query rows over a long KV cache, every head of a GQA group in one pass over
 * K and V, split-KV with a log-sum-exp merge) for Q/O and K/V stored as bf16,
 * with both products on vdpbf16ps and no widening of the cache:
 *  - Q.K^T: a Q row (bf16, zero-padded to 32) against a K row as 32 bf16 =
 *    16 pairs along head_dim per instruction; each K vector is loaded once
 *    for all rows of the group. The 16 fp32 lanes of each (row, key) are
 *    reduced 16 keys at a time by a shuffle tree into one vector of scores.
 *  - P.V: two V rows (keys t, t+1) interleaved with vpunpck{l,h}wd into
 *    (v_t[c], v_t+1[c]) pairs (in-lane, so the accumulators hold the columns
 *    permuted; they are put back in order once per pass) against the
 *    broadcast pair (p_t, p_t+1) rounded to bf16 (RNE).
 * The online softmax is fp32 as in decode.c; the row sums l add the fp32 P
 * (as flash.avx512bf16: check.c's "P rounded to bf16" term, 2 u_bf16). The
 * output is rounded from the fp32 accumulators to bf16 (RNE). fp16 is not
 * taken: there is no fp16 dot product here, and converting the cache while
 * streaming it would cost what the bf16 unit saves (decode.avx512 widens it).
 * The variants as in decode.c: a window (the pass starts at the first key a
 * row sees, keys before a row's begin masked), a softcap (each block's
 * scores capped before the mask), sinks (joined once per row) and
 * head_dim_v (o and the partial results are d_v wide, padded to 32).
 * Built on the tile layer too (decode.amx, decode.amxemu; DB_TILES, "The
 * tiles" below): the two products on AMX tiles, up to 16 rows per pass,
 * everything else as here; docs/amx.md has its measurements. */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "internal.h"
#include "cachemodel.h"
#include "ukernels.h"
#include "flash_var.h"

/* Built with the tile layer (level amx: decode.amx; MHA_TILE_EMU:
 * decode.amxemu), both products run on tiles (below, "The tiles"). */
#if (defined(MHA_TILE_EMU) && MHA_TILE_EMU) || defined(__AMX_TILE__) || defined(__AMXTILE__)
#define DB_TILES 1
#include "tile.h"
#include "tile_pack.h"
#else
#define DB_TILES 0
#endif

/* Built with -DDB_FMA=1 (decode.bf16fma; the vector version only), both
 * products run on fp32 FMAs instead of vdpbf16ps: see "The FMA flavour". */
#if defined(DB_FMA) && DB_FMA
#if DB_TILES
#error "DB_FMA is a flavour of the vector version, not of the tiles"
#endif
#else
#undef DB_FMA
#define DB_FMA 0
#endif

/* A Q row as the scores read it: bf16, or in the FMA flavour fp32 with each
 * 32 elements as their 16 even then 16 odd ones (split once per pass). */
#if DB_FMA
typedef float db_qt;
#else
typedef uint16_t db_qt;
#endif

#if !DB_FMA && !defined(__AVX512BF16__)
#error "decode_bf16.c needs AVX512_BF16 (meson builds it only for such levels) but as DB_FMA"
#endif
#ifndef __AVX512BF16__ /* the FMA flavour at the avx512 level: no vec_avx512bf16.h */
typedef __m512i vbf;
/* 16 floats to bf16, nearest even (kernels/dtype.h's rule: NaN quietened):
 * vec_avx512.h's narrowing store's rounding */
static inline __m256i vf_to_bf16(vf x) {
    return vbf16_bits(x);
}
#endif

#define LOG2E 1.44269504088896341f
#define ALWAYS_INLINE static inline __attribute__((always_inline))
/* rows per pass over K/V, keys per softmax block, the block's width rounded
 * (the vector version's 16-key reduction; a tile's 32 keys of P) */
#if DB_TILES
enum { DB_RB = 16, DB_BK = 64, DB_BW = 32 };
#else
enum { DB_RB = 4, DB_BK = 16, DB_BW = 16 };
#endif
/* at most this many rows per (batch, KV head) split the KV (decode.c's) */
enum { DB_SPLIT_ROWS = 16 };
/* A head-major cache: the block whose rows each block prefetches, counted
 * from it, and for a one-row pass the bytes at the head of each 4 KiB page
 * of them that the walk fetches (db_rows) */
enum { DB_PF_AHEAD = 2, DB_PF_HEAD = 256 };
/* keys per block when a pass has one row: short from DRAM, long from a cache
 * that fits the L3 with room to spare (!db_plan.stream); at most DB_RB * DB_BK,
 * the one row's share of the scratch */
enum { DB_BK1_STREAM = 16, DB_BK1_CACHED = 64 };
_Static_assert(DB_BK1_CACHED <= DB_RB * DB_BK && DB_BK1_STREAM <= DB_RB * DB_BK,
               "a one-row block fits the scratch of DB_RB rows");
enum { DB_INIT_ZERO, DB_INIT_ACC, DB_INIT_SCALE };

/* Floats of tmp: the vector version's per-key lanes of DB_RB rows x 16
 * keys, or two 16 x 16 S^T tiles. */
enum { DB_TMP = DB_TILES ? 2 * 256 : DB_RB * 256 };
/* Bytes of the tiles' own buffers, after the scratch above: Q^T as B tiles
 * (dq / 32 of 1 KiB), two 16-key K tiles made from tails (2 KiB) and the V
 * pairs of two 32-key sub-blocks, lo and hi (4 KiB). */
static inline size_t db_tbuf_bytes(int64_t dq) {
    return DB_TILES ? (size_t)dq * 32 + 6 * 1024 : 0;
}

typedef struct {
    int64_t rows, nsplit, chunk, dq; /* dq: head_dim rounded up to 32 (one vdpbf16ps) */
    int64_t dvq;                     /* head_dim_v rounded up to 32: o's width */
    int stream;                  /* the cache is beyond a quarter of the L3: read as from DRAM */
    int rows_pf;                 /* a head-major cache's rows prefetched (db_rows) */
    int all_heads;               /* paged GQA: an item is a (sequence, KV chunk) (below) */
    size_t part, scratch, state; /* state: all_heads' o, m, l of every (KV head, row group) */
    size_t tbuf_at;              /* bytes from a thread's scratch to its db_tbuf_bytes */
} db_plan;

/* A paged pool [NB,BS,G,d] holds a key's G heads side by side: an item per
 * (sequence, KV head) reads d of every G x d elements and ran at the speed of
 * a dense cache stored that way (0.40-0.43x a head-major one, the AMX VM).
 * With all_heads, as decode.c's, an item is a (sequence, KV chunk) that
 * walks its keys in spans (mha_decode_span: 128 KiB of K and V, 32 keys at
 * G 8 d 128; 256 keys measured 0.40 / 0.48 there) and runs every KV head's
 * rows over a span before the next, the pool read in its stored order;
 * each (head, row group) keeps its o (columns still permuted), m and l in
 * the thread's state between spans. For few rows per KV head (decode). */
/* Floats of one (KV head, row group)'s state: o [DB_RB][dvq], m and l
 * [DB_RB], padded to 64 bytes (o is read with aligned loads; the tiles load
 * and store all DB_RB rows of o), and with the tiles the rows' Q^T (dq / 32
 * B tiles of 256 dwords), packed by the first span and read by the rest. */
enum { DB_ML = (2 * DB_RB + 15) / 16 * 16 };
static inline int64_t db_slot(int64_t dvq, int64_t dq) {
    return DB_RB * dvq + DB_ML + (DB_TILES ? 8 * dq : 0);
}

static db_plan plan(const mha_problem *p, int threads, int interleaved) {
    db_plan P;
    const int64_t group = p->heads / p->kv_heads, pairs = p->batch * p->kv_heads;
    P.rows = group * p->seq_q;
    const int64_t nrc = (P.rows + DB_RB - 1) / DB_RB;
    P.all_heads = interleaved && p->kv_heads > 1 && nrc <= 2;
    mha_problem per_seq = *p; /* all_heads: the items are (sequence, chunk): split by sequences */
    if (P.all_heads) per_seq.kv_heads = 1;
    P.nsplit = mha_decode_nsplit(&per_seq, P.rows, DB_SPLIT_ROWS, threads); /* decode.c's */
    P.chunk = (p->seq_kv + P.nsplit - 1) / P.nsplit;
    P.dq = (p->head_dim + 31) / 32 * 32;
    P.dvq = (mha_dv(p) + 31) / 32 * 32;
    /* One row per pass, d = 128, Nkv = 4096, Zen 4 (32 MiB L3), interleaved
     * profile runs, GFLOP/s at 1 / 2 threads: H = 4 (8 MiB) 4 keys 24.9 /
     * 47.5, 16 keys 54.8-57.5 / 94.0-100.7, 64 keys 57.8-62.0 / 108.9-122.3;
     * H = 16 (16 MiB) 16 keys 26.8-29.3, 64 keys 16.2-20.6 (1 thread); H = 32
     * (32 MiB) 16 keys 23.9-24.7 / 33.5-35.2, 64 keys 12.3-12.7 / 25.1-27.3,
     * with prefetch one or two blocks ahead 14.8 / 29.3-31.5. */
    const double per_l3 = mha_decode_cache_per_l3(p);
    P.stream = per_l3 > 0.25; /* a one-row pass: DB_BK1_STREAM keys */
    /* The FMA flavour also prefetches a cache within the L3 but beyond the
     * L2: with its cheaper products the loads wait longer on the L3, where
     * the vector version was bound by vdpbf16ps (a switch measured there
     * changed nothing, stop 48). Emerald Rapids VM, decode.bf16fma H 32 d 128
     * Nkv 8192 bf16 (8-32 MiB), `profile` alternated 5-8 times, median of the
     * per-pair ratios: 4 rows 1.10x (1 thread) and 1.15x (2), 8 rows 1.16x. */
    mha_caches c;
    mha_caches_get(&c);
    P.rows_pf = P.stream || (DB_FMA && per_l3 * (double)c.l3 > (double)c.l2);
    const size_t f = sizeof(float), dv = (size_t)mha_dv(p), dq = (size_t)P.dq, dvq = (size_t)P.dvq;
    P.part =
        P.nsplit > 1
            ? mha_align64(mha_mul_sz(mha_mul_sz((size_t)(pairs * P.rows * P.nsplit), dv + 2), f))
            : 0;
    /* s[RB][BK] scores, tmp (the vector version: [RB][16][16] per-key
     * lanes; the tiles: two 16 x 16 S^T tiles), o[RB][dvq], m, l [RB], P as
     * bf16 [RB][BK], Q rows as db_qt [RB][dq]; the tiles' buffers (db_tbuf) */
    P.state = P.all_heads ? mha_align64((size_t)(p->kv_heads * nrc * db_slot(P.dvq, P.dq)) * f) : 0;
    P.tbuf_at = mha_align64((DB_RB * DB_BK + DB_TMP + DB_RB * dvq + 2 * DB_RB) * f +
                            DB_RB * DB_BK * 2 + DB_RB * dq * sizeof(db_qt));
    P.scratch = P.tbuf_at + db_tbuf_bytes(P.dq) + P.state;
    return P;
}

#if DB_TILES && !(defined(MHA_TILE_EMU) && MHA_TILE_EMU)
/* decode.amx hands a problem with at most DB_VEC_ROWS query rows per
 * (sequence, KV head) to decode.avx512bf16: a pass of the tiles costs the
 * same for 1 row as for 16, the vector version's grows with the rows.
 * Measured on the AMX VM (bench_kvcache, H 32, Nkv 4096, d 128, the tiles
 * against the vector version at 1 / 2 threads, same run): KV heads 32 (1
 * row) 0.68x / 0.76x, 8 (4 rows) 0.92x / 1.06x, 4 (8 rows) 2.04x / 1.99x,
 * 2 (16 rows) 3.66x / 2.61x. decode.amxemu keeps the tiles at every row
 * count: it verifies them. */
#define DB_HAND_OFF 1
enum { DB_VEC_ROWS = 4 };
/* A paged cache of blocks under 32 keys cuts the tiles' 64-key softmax
 * blocks at its pages (page_cap: 16-key blocks at pages of 16, a half-empty
 * P.V tile and the block's fixed work for a quarter of the keys), so there
 * up to 2 DB_VEC_ROWS rows go to the vector kernel. Measured on the AMX VM
 * (sweep, 8 sequences of 4,096 keys, d 128, 1 / 2 threads, the tiles
 * against the vector version): pages of 16, 8 rows 0.60-0.65x, 16 rows
 * 1.04-1.67x, 32 rows 1.17-1.26x; pages of 32, 64 and 128, 8 rows
 * 1.23-1.28x (1 thread). */
static int db_vector_rows(const mha_problem *p) {
    const int64_t most =
        p->layout == MHA_LAYOUT_PAGED && p->block_size < 32 ? 2 * DB_VEC_ROWS : DB_VEC_ROWS;
    return p->heads / p->kv_heads * p->seq_q <= most;
}
#else
#define DB_HAND_OFF 0
#endif

size_t MHA_CAT(MHA_SYM(decode), _workspace)(const mha_problem *p, const mha_options *o,
                                            int threads) {
#if DB_HAND_OFF
    if (db_vector_rows(p)) return mha_decode__bf16fma_workspace(p, o, threads);
#endif
    (void)o;
    /* the run picks all_heads by the tensors' strides: room for either plan */
    const db_plan P0 = plan(p, threads, 0), P1 = plan(p, threads, 1);
    const size_t w0 = mha_add_sz(P0.part, mha_mul_sz(P0.scratch, (size_t)threads)),
                 w1 = mha_add_sz(P1.part, mha_mul_sz(P1.scratch, (size_t)threads));
    return w0 > w1 ? w0 : w1;
}

/* Lane u of the result = the sum of the 16 lanes of t[u * 16 ..]: four levels
 * of pairwise shuffles and adds (15 adds for 16 keys, against 16 separate
 * horizontal sums). */
static inline vf reduce16(const float *t) {
    vf a[16], b[8], c[4], e[2];
    for (int u = 0; u < 16; u++) a[u] = vload(t + 16 * u);
    for (int k = 0; k < 8; k++) /* per 128-bit lane: (x, y, x, y) partials */
        b[k] = vadd(_mm512_unpacklo_ps(a[2 * k], a[2 * k + 1]),
                    _mm512_unpackhi_ps(a[2 * k], a[2 * k + 1]));
    for (int k = 0; k < 4; k++) { /* lane L: keys 4k..4k+3, L's partials */
        const __m512d x = _mm512_castps_pd(b[2 * k]), y = _mm512_castps_pd(b[2 * k + 1]);
        c[k] = vadd(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)),
                    _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
    }
    for (int k = 0; k < 2; k++)
        e[k] = vadd(_mm512_shuffle_f32x4(c[2 * k], c[2 * k + 1], 0x88),
                    _mm512_shuffle_f32x4(c[2 * k], c[2 * k + 1], 0xdd));
    return vadd(_mm512_shuffle_f32x4(e[0], e[1], 0x88), _mm512_shuffle_f32x4(e[0], e[1], 0xdd));
}

static inline __mmask32 mask32(int64_t n) {
    return n >= 32 ? (__mmask32)0xffffffffu : (__mmask32)(((uint32_t)1 << n) - 1u);
}

/* The FMA flavour (decode.bf16fma). A bf16 is the top half of an fp32, so
 * 32 bf16 in one vector are two fp32 vectors at the cost of one shift (the
 * even elements) and one and (the odd ones), exactly: each K vector is split
 * once for all rows of the group and each Q vector once per pass, and a dot
 * product is two FMA chains (even, odd) added at the end. P.V takes one key
 * at a time, P in fp32 (not rounded to bf16), and leaves each 32 columns of
 * o as their 16 even columns then their 16 odd ones (unpermute). Per 32
 * products of 4 rows: 8 FMAs and 2 splits where vdpbf16ps takes 4
 * instructions; the cores where that pays are those whose vdpbf16ps runs
 * at half the FMA's rate (mhabench info on both AMX VMs, Intel Xeon family
 * 6 models 167 and 207: 119-123 against 240-246 and 82-91 against 173-183
 * GFLOP/s), and not those where it runs at twice it (Zen 4: 235 against
 * 117), so it is a kernel of its own, built at the avx512 level (it needs
 * no bf16 instruction: the output is rounded by vf_to_bf16 above, so it also
 * serves AVX-512 CPUs without AVX512_BF16): decode.amx hands its few-row
 * problems to it, sweep and tune time it beside decode.avx512bf16. */
#if DB_FMA
typedef float db_pt; /* P as P.V reads it */
static inline vf bf16_even(vbf x) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
}
static inline vf bf16_odd(vbf x) {
    return _mm512_castsi512_ps(_mm512_and_si512(x, _mm512_set1_epi32((int)0xffff0000u)));
}
#else
typedef uint16_t db_pt;
#endif

/* Scores of keys [j0, j0 + bk) for R rows into s[r][0, ceil16(bk)) in log2
 * units (-inf past a row's end and past bk). NC > 0: head_dim in NC vectors
 * of 32 bf16, the Q rows held in registers; NC == 0: nc vectors, Q from L1. */
ALWAYS_INLINE void scores_blk(const int R, const int NC, int64_t nc, const db_qt *qb, int64_t ldq,
                              const uint16_t *kh, int64_t skn, int64_t d, int64_t j0, int64_t bk,
                              const int64_t *end, float qscale, float *s, float *tmp,
                              mha_span_pf *pf) {
    const __mmask32 last = mask32(d - (nc - 1) * 32);
#if DB_FMA
    vf qe[DB_RB][4], qo[DB_RB][4];
    if (NC)
        for (int r = 0; r < R; r++)
            for (int c = 0; c < NC; c++) {
                qe[r][c] = vloadu(qb + r * ldq + 32 * c);
                qo[r][c] = vloadu(qb + r * ldq + 32 * c + 16);
            }
#else
    vbf qv[DB_RB][4];
    if (NC)
        for (int r = 0; r < R; r++)
            for (int c = 0; c < NC; c++) qv[r][c] = _mm512_loadu_si512(qb + r * ldq + 32 * c);
#endif
    for (int64_t g = 0; g < bk; g += 16) {
        const int n = bk - g < 16 ? (int)(bk - g) : 16;
        for (int u = 0; u < n; u++) {
            const int64_t j = j0 + g + u;
            const uint16_t *kr = kh + j * skn;
            mha_span_pf_step(pf);
            vf acc[DB_RB];
            for (int r = 0; r < R; r++) acc[r] = vzero();
#if DB_FMA
            vf acc2[DB_RB]; /* the odd elements' chains */
            for (int r = 0; r < R; r++) acc2[r] = vzero();
            if (NC) {
                for (int c = 0; c < NC; c++) {
                    const vbf kv = c == NC - 1 ? _mm512_maskz_loadu_epi16(last, kr + 32 * c)
                                               : _mm512_loadu_si512(kr + 32 * c);
                    const vf ke = bf16_even(kv), ko = bf16_odd(kv);
                    for (int r = 0; r < R; r++) {
                        acc[r] = vfma(qe[r][c], ke, acc[r]);
                        acc2[r] = vfma(qo[r][c], ko, acc2[r]);
                    }
                }
            } else {
                for (int64_t c = 0; c < nc; c++) {
                    const vbf kv = c == nc - 1 ? _mm512_maskz_loadu_epi16(last, kr + 32 * c)
                                               : _mm512_loadu_si512(kr + 32 * c);
                    const vf ke = bf16_even(kv), ko = bf16_odd(kv);
                    for (int r = 0; r < R; r++) {
                        acc[r] = vfma(vloadu(qb + r * ldq + 32 * c), ke, acc[r]);
                        acc2[r] = vfma(vloadu(qb + r * ldq + 32 * c + 16), ko, acc2[r]);
                    }
                }
            }
            for (int r = 0; r < R; r++) acc[r] = vadd(acc[r], acc2[r]);
#else
            if (NC) {
                for (int c = 0; c < NC; c++) {
                    const vbf kv = c == NC - 1 ? _mm512_maskz_loadu_epi16(last, kr + 32 * c)
                                               : _mm512_loadu_si512(kr + 32 * c);
                    for (int r = 0; r < R; r++) acc[r] = vdot_bf16(acc[r], qv[r][c], kv);
                }
            } else {
                for (int64_t c = 0; c < nc; c++) {
                    const vbf kv = c == nc - 1 ? _mm512_maskz_loadu_epi16(last, kr + 32 * c)
                                               : _mm512_loadu_si512(kr + 32 * c);
                    for (int r = 0; r < R; r++)
                        acc[r] = vdot_bf16(acc[r], _mm512_loadu_si512(qb + r * ldq + 32 * c), kv);
                }
            }
#endif
            for (int r = 0; r < R; r++) vstore(tmp + (r * 16 + u) * 16, acc[r]);
        }
        for (int u = n; u < 16; u++)
            for (int r = 0; r < R; r++) vstore(tmp + (r * 16 + u) * 16, vzero());
        for (int r = 0; r < R; r++) {
            const int64_t vis = end[r] - (j0 + g) < n ? end[r] - (j0 + g) : n;
            const __mmask16 ok = vis <= 0 ? 0 : (__mmask16)((1u << vis) - 1u);
            const vf sc = vmul(reduce16(tmp + r * 256), vset1(qscale));
            vstore(s + r * DB_BK + g, _mm512_mask_blend_ps(ok, vset1(-INFINITY), sc));
        }
    }
}

/* o[r][c0, c0 + 32 NS) (columns permuted within each 32: see unpermute) =
 * init(o) + sum over key pairs of (p_t, p_t+1) . (v_t, v_t+1), for keys
 * [j0, j0 + bk); pw[r] holds the block's P as bf16 (zero past bk; the FMA
 * flavour: P in fp32, one key at a time, its own column order). */
ALWAYS_INLINE void pv_strip(const int R, const int NS, int init, const float *alpha,
                            const db_pt *pw, const uint16_t *vh, int64_t svn, int64_t j0,
                            int64_t bk, int64_t c0, int64_t d, float *o, int64_t ldo,
                            mha_span_pf *pf) {
    vf acc[DB_RB][4];
    for (int r = 0; r < R; r++)
        for (int v = 0; v < 2 * NS; v++) {
            const float *src = o + r * ldo + c0 + 16 * v;
            acc[r][v] = init == DB_INIT_ZERO    ? vzero()
                        : init == DB_INIT_SCALE ? vmul(vload(src), vset1(alpha[r]))
                                                : vload(src);
        }
    __mmask32 mk[2];
    for (int c = 0; c < NS; c++) mk[c] = mask32(d - c0 - 32 * c);
#if DB_FMA
    for (int64_t t = 0; t < bk; t++) {
        const uint16_t *a = vh + (j0 + t) * svn + c0;
        if (!(t & 1)) mha_span_pf_step(pf); /* once per pair, as db_pf_steps counts */
        vf ve[2], vo[2];
        for (int c = 0; c < NS; c++) {
            const vbf va = _mm512_maskz_loadu_epi16(mk[c], a + 32 * c);
            ve[c] = bf16_even(va);
            vo[c] = bf16_odd(va);
        }
        for (int r = 0; r < R; r++) {
            const vf w = vset1(pw[r * DB_BK + t]);
            for (int c = 0; c < NS; c++) {
                acc[r][2 * c] = vfma(w, ve[c], acc[r][2 * c]);
                acc[r][2 * c + 1] = vfma(w, vo[c], acc[r][2 * c + 1]);
            }
        }
    }
#else
    const int64_t full = bk / 2;
    for (int64_t q = 0; q <= full; q++) {
        if (q == full && !(bk & 1)) break;
        const uint16_t *a = vh + (j0 + 2 * q) * svn + c0;
        mha_span_pf_step(pf);
        vbf lo[2], hi[2];
        for (int c = 0; c < NS; c++) {
            const vbf va = _mm512_maskz_loadu_epi16(mk[c], a + 32 * c);
            const vbf vb = q < full ? _mm512_maskz_loadu_epi16(mk[c], a + svn + 32 * c)
                                    : _mm512_setzero_si512();
            lo[c] = _mm512_unpacklo_epi16(va, vb);
            hi[c] = _mm512_unpackhi_epi16(va, vb);
        }
        for (int r = 0; r < R; r++) {
            const vbf w = vbf_pair_bcast(pw + r * DB_BK + 2 * q);
            for (int c = 0; c < NS; c++) {
                acc[r][2 * c] = vdot_bf16(acc[r][2 * c], w, lo[c]);
                acc[r][2 * c + 1] = vdot_bf16(acc[r][2 * c + 1], w, hi[c]);
            }
        }
    }
#endif
    for (int r = 0; r < R; r++)
        for (int v = 0; v < 2 * NS; v++) vstore(o + r * ldo + c0 + 16 * v, acc[r][v]);
}

ALWAYS_INLINE void pv_rows(const int R, int init, const float *alpha, const db_pt *pw,
                           const uint16_t *vh, int64_t svn, int64_t j0, int64_t bk, int64_t d,
                           float *o, int64_t ldo, mha_span_pf *pf) {
    int64_t c = 0;
    for (; c + 32 < d; c += 64) pv_strip(R, 2, init, alpha, pw, vh, svn, j0, bk, c, d, o, ldo, pf);
    if (c < d) pv_strip(R, 1, init, alpha, pw, vh, svn, j0, bk, c, d, o, ldo, pf);
}

/* vpunpck{l,h}wd pair columns within 128-bit lanes: in each 32 columns the
 * "lo" vector holds columns (0-3, 8-11, 16-19, 24-27), "hi" (4-7, 12-15,
 * 20-23, 28-31). Puts a row of dq floats back in column order. */
static void unpermute(float *o, int64_t dq) {
#if DB_FMA /* the FMA flavour: the 16 even columns, then the 16 odd ones */
    static const int32_t i0[16] = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23};
    static const int32_t i1[16] = {8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
#else
    static const int32_t i0[16] = {0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23};
    static const int32_t i1[16] = {8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31};
#endif
    const __m512i x0 = _mm512_loadu_si512(i0), x1 = _mm512_loadu_si512(i1);
    for (int64_t c = 0; c < dq; c += 32) {
        const vf lo = vload(o + c), hi = vload(o + c + 16);
        vstore(o + c, _mm512_permutex2var_ps(lo, x0, hi));
        vstore(o + c + 16, _mm512_permutex2var_ps(lo, x1, hi));
    }
}

#if DB_TILES
/* The tiles (decode.amx, decode.amxemu). Every tile is 16 rows of 64 bytes
 * (tile_configure_all), configured per thread for the whole parallel region.
 * Scores as S^T = K Q^T: the A operand is 16 keys' rows of K, 32 head_dim
 * elements, read in place (rows skn elements apart), the B operand Q^T as
 * VNNI pairs (tile_pack_b of the pass's rows, once per db_rows), so the
 * cache is never repacked; C holds 16 keys x 16 rows, a row's scores in a
 * column, gathered into s[r]. A tile of keys that would reach past the
 * block, or a head_dim tail, is copied with masked loads into a zero-padded
 * buffer first (a tile load reads whole 64-byte rows). P.V as O += P V: A is
 * P as bf16 (the softmax's pw, 16 rows of 32 keys), B the V rows of 32 keys
 * interleaved in pairs by vpunpck{l,h}wd as the vector version does (the
 * same column permutation: unpermute and all after it are shared), C the
 * 16 fp32 columns of o's lo or hi half of a 32-column group, loaded from and
 * stored to o around the block's products. Rows of a tile past the pass's R
 * rows hold whatever the buffers held; nothing reads what they give.
 * Tiles: 0, 1 S^T of two 16-key groups, then o's lo and hi; 2, 7 the K rows;
 * 3 Q^T; 4, 5 P of two 32-key sub-blocks; 6, 7 and 2, 3 their V pairs. */

/* The A operand of keys [j, j + n) (n <= 16), head_dim elements
 * [32 c, 32 c + 32): in place when all 16 rows and 32 elements exist, else
 * copied into buf (zeros past n rows and past d). Sets *ld (elements). */
ALWAYS_INLINE const uint16_t *k_rows(const uint16_t *kh, int64_t skn, int64_t d, int64_t j,
                                     int64_t n, int64_t c, uint16_t *buf, int64_t *ld) {
    const uint16_t *at = kh + j * skn + 32 * c;
    if (n == 16 && d >= 32 * c + 32) {
        *ld = skn;
        return at;
    }
    const __mmask32 m = mask32(d - 32 * c);
    for (int u = 0; u < 16; u++)
        _mm512_storeu_si512(buf + 32 * u, u < n ? _mm512_maskz_loadu_epi16(m, at + u * skn)
                                                : _mm512_setzero_si512());
    *ld = 32;
    return buf;
}

/* Scores of keys [j0, j0 + bk) (bk <= DB_BK) for R rows into s[r][0,
 * ceil32(bk)) in log2 units (-inf past a row's end and past bk), from Q^T
 * packed in qt (nc B tiles). */
static void scores_tiles(int R, int64_t nc, const uint32_t *qt, const uint16_t *kh, int64_t skn,
                         int64_t d, int64_t j0, int64_t bk, const int64_t *end, float qscale,
                         float *s, float *tmp, uint16_t *kbuf, mha_span_pf *pf) {
    const __m512i col = _mm512_set_epi32(240, 224, 208, 192, 176, 160, 144, 128, 112, 96, 80, 64,
                                         48, 32, 16, 0); /* key u of a column: tmp[16 u] */
    for (int64_t g = 0; g < bk; g += 32) {
        const int64_t n0 = bk - g < 16 ? bk - g : 16, n1 = bk - g - 16 < 16 ? bk - g - 16 : 16;
        const uint16_t *a;
        int64_t lda;
        MHA_TILE_ZERO(0);
        if (n1 > 0) MHA_TILE_ZERO(1);
        for (int64_t c = 0; c < nc; c++) {
            MHA_TILE_LOAD(3, qt + 256 * c, 64);
            a = k_rows(kh, skn, d, j0 + g, n0, c, kbuf, &lda);
            MHA_TILE_LOAD(2, a, lda * 2);
            MHA_TILE_DPBF16PS(0, 2, 3);
            if (n1 > 0) {
                a = k_rows(kh, skn, d, j0 + g + 16, n1, c, kbuf + 512, &lda);
                MHA_TILE_LOAD(7, a, lda * 2);
                MHA_TILE_DPBF16PS(1, 7, 3);
            }
        }
        MHA_TILE_STORE(0, tmp, 64);
        if (n1 > 0) MHA_TILE_STORE(1, tmp + 256, 64);
        for (int64_t u = 0; u < n0 + (n1 > 0 ? n1 : 0); u++) mha_span_pf_step(pf);
        for (int r = 0; r < R; r++)
            for (int h = 0; h < 2; h++) {
                const int64_t jh = j0 + g + 16 * h, n = h ? n1 : n0;
                const int64_t vis = end[r] - jh < n ? end[r] - jh : n;
                const __mmask16 ok = vis <= 0 ? 0 : (__mmask16)((1u << vis) - 1u);
                const vf sc =
                    _mm512_mask_i32gather_ps(vset1(-INFINITY), ok, col, tmp + 256 * h + r, 4);
                vstore(s + r * DB_BK + g + 16 * h, _mm512_mask_mul_ps(sc, ok, sc, vset1(qscale)));
            }
    }
}

/* V rows [j, j + n) (n <= 32) of columns [c, c + 32) as the two B tiles of
 * pairs (rows 2i, 2i + 1; zeros past n and past d), lo and hi as the vector
 * version's vpunpck{l,h}wd order them. A prefetch step per pair when step. */
ALWAYS_INLINE void v_pairs(const uint16_t *vh, int64_t svn, int64_t j, int64_t n, int64_t c,
                           int64_t d, uint32_t *lo, uint32_t *hi, mha_span_pf *pf, int step) {
    const __mmask32 m = mask32(d - c);
    for (int i = 0; i < 16; i++) {
        vbf va = _mm512_setzero_si512(), vb = _mm512_setzero_si512();
        if (2 * i < n) {
            va = _mm512_maskz_loadu_epi16(m, vh + (j + 2 * i) * svn + c);
            if (step) mha_span_pf_step(pf);
        }
        if (2 * i + 1 < n) vb = _mm512_maskz_loadu_epi16(m, vh + (j + 2 * i + 1) * svn + c);
        _mm512_storeu_si512(lo + 16 * i, _mm512_unpacklo_epi16(va, vb));
        _mm512_storeu_si512(hi + 16 * i, _mm512_unpackhi_epi16(va, vb));
    }
}

/* o[r][0, dvq) (columns permuted within each 32: see unpermute) =
 * init(o) + P V over keys [j0, j0 + bk) (bk <= DB_BK); pw holds the
 * block's P as bf16 rows DB_BK apart (zero past bk up to ceil32(bk)). */
static void pv_tiles(int R, int init, const float *alpha, const uint16_t *pw, const uint16_t *vh,
                     int64_t svn, int64_t j0, int64_t bk, int64_t d, float *o, int64_t ldo,
                     uint32_t *vbuf, mha_span_pf *pf) {
    if (init == DB_INIT_SCALE)
        for (int r = 0; r < R; r++)
            for (int64_t c = 0; c < ldo; c += 16)
                vstore(o + r * ldo + c, vmul(vload(o + r * ldo + c), vset1(alpha[r])));
    const int two = bk > 32;
    MHA_TILE_LOAD(4, pw, DB_BK * 2);
    if (two) MHA_TILE_LOAD(5, pw + 32, DB_BK * 2);
    for (int64_t c = 0; c < d; c += 32) {
        if (init == DB_INIT_ZERO) {
            MHA_TILE_ZERO(0);
            MHA_TILE_ZERO(1);
        } else {
            MHA_TILE_LOAD(0, o + c, ldo * 4);
            MHA_TILE_LOAD(1, o + c + 16, ldo * 4);
        }
        const int step = c % 64 == 0; /* the vector version's steps: per pair and 64 columns */
        v_pairs(vh, svn, j0, two ? 32 : bk, c, d, vbuf, vbuf + 256, pf, step);
        MHA_TILE_LOAD(6, vbuf, 64);
        MHA_TILE_LOAD(7, vbuf + 256, 64);
        MHA_TILE_DPBF16PS(0, 4, 6);
        MHA_TILE_DPBF16PS(1, 4, 7);
        if (two) {
            v_pairs(vh, svn, j0 + 32, bk - 32, c, d, vbuf + 512, vbuf + 768, pf, step);
            MHA_TILE_LOAD(2, vbuf + 512, 64);
            MHA_TILE_LOAD(3, vbuf + 768, 64);
            MHA_TILE_DPBF16PS(0, 5, 2);
            MHA_TILE_DPBF16PS(1, 5, 3);
        }
        MHA_TILE_STORE(0, o + c, ldo * 4);
        MHA_TILE_STORE(1, o + c + 16, ldo * 4);
    }
}
#else
/* The out-of-line instances, one per (rows, Q vectors) for the scores and
 * per rows for P.V, reached through the switches below. */
#define DB_SC(R, NC)                                                                               \
    static __attribute__((noinline)) void sc_##R##_##NC(                                           \
        int64_t nc, const db_qt *qb, int64_t ldq, const uint16_t *kh, int64_t skn, int64_t d,      \
        int64_t j0, int64_t bk, const int64_t *end, float qscale, float *s, float *tmp,            \
        mha_span_pf *pf) {                                                                         \
        scores_blk(R, NC, nc, qb, ldq, kh, skn, d, j0, bk, end, qscale, s, tmp, pf);               \
    }
#define DB_SC_R(R) DB_SC(R, 0) DB_SC(R, 1) DB_SC(R, 2) DB_SC(R, 3) DB_SC(R, 4)
DB_SC_R(1)
DB_SC_R(2)
DB_SC_R(3)
DB_SC_R(4)
#undef DB_SC_R
#undef DB_SC
typedef void (*sc_fn)(int64_t, const db_qt *, int64_t, const uint16_t *, int64_t, int64_t, int64_t,
                      int64_t, const int64_t *, float, float *, float *, mha_span_pf *);
#define DB_SC_ROW(R)                                                                               \
    { sc_##R##_0, sc_##R##_1, sc_##R##_2, sc_##R##_3, sc_##R##_4 }
static const sc_fn sc_fns[DB_RB][5] = {DB_SC_ROW(1), DB_SC_ROW(2), DB_SC_ROW(3), DB_SC_ROW(4)};
#undef DB_SC_ROW

#define DB_PV(R)                                                                                   \
    static __attribute__((noinline)) void pv_##R(                                                  \
        int init, const float *alpha, const db_pt *pw, const uint16_t *vh, int64_t svn,            \
        int64_t j0, int64_t bk, int64_t d, float *o, int64_t ldo, mha_span_pf *pf) {               \
        pv_rows(R, init, alpha, pw, vh, svn, j0, bk, d, o, ldo, pf);                               \
    }
DB_PV(1)
DB_PV(2)
DB_PV(3)
DB_PV(4)
#undef DB_PV
typedef void (*pv_fn)(int, const float *, const db_pt *, const uint16_t *, int64_t, int64_t,
                      int64_t, int64_t, float *, int64_t, mha_span_pf *);
static const pv_fn pv_fns[DB_RB] = {pv_1, pv_2, pv_3, pv_4};
#endif

typedef struct {
    const mha_problem *p;
    const mha_tensor *q, *k, *v;
    int64_t group, dq, dvq;
    int stream;   /* the plan's: short one-row blocks */
    int rows_pf;  /* the plan's: a head-major cache's rows prefetched */
    float qscale; /* scale * log2(e), or scale alone under a softcap */
    const float *sinks;
    const int32_t *blocks; /* paged: the sequence's row of the block table; else NULL */
    int64_t bs;            /* paged: keys per cache block */
} db_ctx;

/* The paged cache as in decode.c: a softmax block never crosses the end of
 * a cache block (page_cap), and the block's K and V bases are shifted back
 * so that key j stays at base + j * stride_n (kv_base): the products index
 * keys as in a dense cache, read in place through the table. */
static inline int64_t page_cap(const db_ctx *x, int64_t j0, int64_t n) {
    return mha_page_cap(x->blocks, x->bs, j0, n);
}
static inline const uint16_t *kv_base(const db_ctx *x, const mha_tensor *t, const uint16_t *head,
                                      int64_t j0) {
    if (!x->blocks) return head;
    const int64_t first = j0 / x->bs * x->bs;
    const uint16_t *blk = head + (int64_t)x->blocks[j0 / x->bs] * t->stride_b;
    return (const uint16_t *)((uintptr_t)blk - (uintptr_t)(first * t->stride_n * 2));
}

/* The steps a pass of one row group over n keys gives a prefetch walk
 * (mha_span_pf_step): one per key of the scores, one per key pair of each
 * 64-column strip of P.V (pv_rows). */
static inline int64_t db_pf_steps(int64_t n, int64_t dv) {
    return n + (n + 1) / 2 * ((dv + 63) / 64);
}

typedef struct {
    float *s, *tmp, *o, *m, *l;
    uint16_t *pw;
    db_qt *qb;
    mha_span_pf *pf; /* all_heads: the next span's prefetch, else NULL */
    uint32_t *qt;    /* the tiles: Q^T as B tiles, V pairs; K tiles made from tails */
    uint32_t *vbuf;
    uint16_t *kbuf;
} db_scratch;

/* all_heads: w's o, m, l (and Q^T) are slot i of the state. */
static inline void db_at_slot(db_scratch *w, float *state, int64_t i, int64_t dvq, int64_t dq) {
    w->o = state + i * db_slot(dvq, dq);
    w->m = w->o + DB_RB * dvq;
    w->l = w->m + DB_RB;
#if DB_TILES
    w->qt = (uint32_t *)(w->o + DB_RB * dvq + DB_ML);
#endif
}

static void store_row(const mha_tensor_mut *out, int64_t b, int64_t h, int64_t i, const float *row,
                      int64_t d, float lsum, int64_t blind);

/* Rows [r0, r0 + R) of KV head (b, g) over keys [k0, k1): leaves the
 * unnormalised o (its columns permuted within each 32: unpermute puts them
 * in order), the max m (log2 units) and the sum l. fresh starts them (o = 0,
 * m = -inf, l = 0; the tiles pack the rows' Q^T into w->qt), else the keys
 * join the o, m and l left by earlier calls (all_heads' spans; the tiles
 * reuse the Q^T the first one packed). */
static void db_rows(const db_ctx *x, int64_t b, int64_t g, int64_t r0, int R, int64_t k0,
                    int64_t k1, const db_scratch *w, int fresh) {
    const mha_problem *p = x->p;
    const int64_t d = p->head_dim, dv = mha_dv(p), Nq = p->seq_q, dq = x->dq, dvq = x->dvq,
                  nc = dq / 32;
    const mha_tensor *q = x->q, *k = x->k, *v = x->v;
    float *s = w->s, *o = w->o, *m = w->m, *l = w->l;
    int64_t end[DB_RB], beg[DB_RB];
    for (int r = 0; r < R; r++) {
        const int64_t rr = r0 + r, h = g * x->group + rr / Nq, i = rr % Nq;
        const uint16_t *src =
            (const uint16_t *)q->data + b * q->stride_b + h * q->stride_h + i * q->stride_n;
        if (!DB_TILES || fresh) /* the tiles read Q only through w->qt */
            for (int64_t c = 0; c < dq; c += 32) {
                const vbf qv = _mm512_maskz_loadu_epi16(mask32(d - c), src + c);
#if DB_FMA /* split once per pass: db_qt */
                vstoreu(w->qb + r * dq + c, bf16_even(qv));
                vstoreu(w->qb + r * dq + c + 16, bf16_odd(qv));
#else
                _mm512_storeu_si512(w->qb + r * dq + c, qv);
#endif
            }
        end[r] = mha_kv_end(p, i);
        beg[r] = mha_kv_begin(p, i);
        if (fresh) {
            m[r] = -INFINITY;
            l[r] = 0.0f;
        }
    }
#if DB_TILES
    if (fresh)
        for (int64_t c = 0; c < nc; c++)
            tile_pack_b(w->qb, dq, R, MHA_BF16, dq, c, w->qt + 256 * c);
#endif
    const uint16_t *kh = (const uint16_t *)k->data + b * k->stride_b + g * k->stride_h;
    const uint16_t *vh = (const uint16_t *)v->data + b * v->stride_b + g * v->stride_h;
    /* Short blocks: K and V are read in alternation a few keys at a time.
     * A head-major cache beyond a quarter of the L3 (each head's rows
     * contiguous, no block table) has the rows of the block DB_PF_AHEAD
     * blocks on walked into L2 over this block's steps (mha_span_pf: a few
     * lines per key of the scores and per pair of P.V), beside the hardware
     * prefetchers; all_heads brings its own w->pf, and within the L3 the
     * hardware keeps up, but for the FMA flavour, which prefetches any cache
     * beyond the L2 (x->rows_pf: plan()). One row over a cache well inside
     * the L3 takes long blocks (DB_BK1_CACHED). Measured in
     * docs/attention-variants.md ("Decode from DRAM: the rows two blocks
     * ahead"); before that prefetch (Zen 4, H=32 Nkv=4096 d=128, medians of
     * interleaved runs): one row per pass (KV=32, DRAM): 64 keys with a
     * prefetch 8 KiB ahead 13.5 GFLOP/s; without, 16 keys 16-17, 8 keys
     * 22.4 / 31.5 (1 / 2 threads), 4 keys 20.3 / 40.2. Four rows (KV=8):
     * cold cache (bench_kvcache) 64 keys with prefetch 45 / 80, 16 keys
     * without 52-60 / 107-125. */
    const int rows_pf = x->rows_pf && !w->pf && !x->blocks;
    const int64_t bkb = R > 1 || DB_TILES ? DB_BK : (x->stream ? DB_BK1_STREAM : DB_BK1_CACHED);
    int64_t kend = k0, kbeg = k1; /* keys any row sees: [kbeg, kend) */
    for (int r = 0; r < R; r++) {
        kend = end[r] > kend ? end[r] : kend;
        kbeg = beg[r] < kbeg ? beg[r] : kbeg;
    }
    if (kend > k1) kend = k1;
    if (kbeg < k0) kbeg = k0;
    if (kend <= kbeg && fresh) /* no row sees a key of this chunk: o = 0, m = -inf, l = 0 */
        for (int r = 0; r < R; r++) memset(o + r * dvq, 0, (size_t)dvq * sizeof(float));
#if !DB_TILES
    const sc_fn score = sc_fns[R - 1][nc <= 4 ? nc : 0];
#endif
    const float cap = p->softcap;
    vf lsum[DB_RB]; /* l per row as 16 partial sums: one horizontal sum per call */
    for (int r = 0; r < R; r++) lsum[r] = _mm512_zextps128_ps512(_mm_set_ss(l[r]));
    for (int64_t j0 = kbeg, bk; j0 < kend; j0 += bk) {
        bk = page_cap(x, j0, kend - j0 < bkb ? kend - j0 : bkb);
        const int64_t bw = (bk + DB_BW - 1) / DB_BW * DB_BW; /* s and pw are written to bw */
        mha_span_pf ahead, *pf = w->pf;
        if (rows_pf) {
            const int64_t a = j0 + DB_PF_AHEAD * bk, n = kend - a < bk ? kend - a : bk;
            int64_t lines = 0;
            ahead.nrun = 0; /* rows strided by other heads add nothing: no prefetch */
            mha_span_pf_rows(&ahead, kh, k->stride_n, 2, d, a, n, &lines);
            mha_span_pf_rows(&ahead, vh, v->stride_n, 2, dv, a, n, &lines);
            pf = mha_span_pf_begin(&ahead, lines, db_pf_steps(bk, dv));
            /* One row (MHA decode: 1 flop per byte) walks only the page
             * heads and leaves the rest of each page to the hardware's
             * stream, which follows the rows the products read in order;
             * prefetching every line held the core's misses and cost it
             * the stream's pace. Zen 4 VM, H32 KV32 8,192 keys d128 (128
             * MiB), 3 alternated rounds of best-of-7: decode.avx512bf16
             * 20 -> 31 GFLOP/s at 1 thread (the DRAM's read rate), 41-48
             * -> 59-64 at 2; decode.bf16fma 22-24 -> 33 and 43-46 -> 58-63.
             * With 4 rows (KV8) the heads alone gained 3-10% on
             * decode.avx512bf16 but cost decode.bf16fma 17%, so several
             * rows keep every line. The paged walk (all_heads) needs every
             * line: its rows are not read in order (heads alone: 0.55x). */
            if (pf && R == 1) pf->head = DB_PF_HEAD;
        }
#if DB_TILES
        scores_tiles(R, nc, w->qt, kv_base(x, k, kh, j0), k->stride_n, d, j0, bk, end, x->qscale, s,
                     w->tmp, w->kbuf, pf);
#else
        score(nc, w->qb, dq, kv_base(x, k, kh, j0), k->stride_n, d, j0, bk, end, x->qscale, s,
              w->tmp, pf);
#endif
        if (cap > 0 || p->window) /* the cap before the mask; a window's left edge */
            for (int r = 0; r < R; r++) {
                float *sr = s + r * DB_BK;
                if (cap > 0)
                    for (int64_t j = 0; j < bw; j += 16)
                        vstore(sr + j, vsoftcap_log2(vload(sr + j), cap));
                for (int64_t j = 0; j < bw; j++)
                    if (j >= bk || j0 + j < beg[r] || j0 + j >= end[r]) sr[j] = -INFINITY;
            }
        float arow[DB_RB];
        int rescale = 0;
        for (int r = 0; r < R; r++) {
            float *sr = s + r * DB_BK;
#if !DB_FMA
            uint16_t *pr = w->pw + r * DB_BK;
#endif
            vf mx = vset1(-INFINITY);
            for (int64_t j = 0; j < bw; j += 16) mx = vmax(mx, vload(sr + j));
            /* m is the running max: when no score passes it (most blocks
             * after the first few), no horizontal max, exp2f or rescale;
             * -inf before any key, and NaN compares false */
            float alpha = 1.0f;
            if (vany_gt(mx, vset1(m[r]))) {
                const float m_new = vhmax(mx);
                alpha = m[r] == -INFINITY ? 0.0f : exp2f(m[r] - m_new);
                lsum[r] = vmul(lsum[r], vset1(alpha));
                m[r] = m_new;
            }
            const vf mu = vset1(m[r] == -INFINITY ? 0.0f : m[r]);
            for (int64_t j = 0; j < bw; j += 32) {
                const vf e0 = vexp2_nonpos(vsub(vload(sr + j), mu));
                const vf e1 = j + 16 < bw ? vexp2_nonpos(vsub(vload(sr + j + 16), mu)) : vzero();
                lsum[r] = vadd(lsum[r], vadd(e0, e1));
#if DB_FMA /* P in fp32, over the scores */
                vstore(sr + j, e0);
                if (j + 16 < bw) vstore(sr + j + 16, e1);
#else
                /* pairs (p_2q, p_2q+1); only the row's bw - j (16 or 32) lanes */
                _mm512_mask_storeu_epi16(pr + j, mask32(bw - j), vbf_from2(e0, e1));
#endif
            }
            arow[r] = alpha;
            rescale |= alpha != 1.0f;
        }
        const int init =
            fresh && j0 == kbeg ? DB_INIT_ZERO : (rescale ? DB_INIT_SCALE : DB_INIT_ACC);
#if DB_TILES
        pv_tiles(R, init, arow, w->pw, kv_base(x, v, vh, j0), v->stride_n, j0, bk, dv, o, dvq,
                 w->vbuf, pf);
#else
#if DB_FMA
        const db_pt *pblk = s; /* P in fp32, written over the scores */
#else
        const db_pt *pblk = w->pw;
#endif
        pv_fns[R - 1](init, arow, pblk, kv_base(x, v, vh, j0), v->stride_n, j0, bk, dv, o, dvq, pf);
#endif
    }
    for (int r = 0; r < R; r++) l[r] = vhsum(lsum[r]);
}

/* Rows [r0, r0 + R) of KV head g of an item's (sequence, split) as db_rows
 * left them in w: columns put in order, then either the split's partial
 * result (pair: the global (batch, KV head)) or, unsplit, the output rows
 * (sinks joined, normalised). */
static void emit_rows(const db_ctx *xs, const db_plan *P, float *part, const mha_tensor_mut *os,
                      int64_t b, int64_t pair, int64_t g, int64_t split, int64_t r0, int R,
                      const db_scratch *w) {
    const int64_t d = mha_dv(xs->p), dq = P->dvq, Nq = xs->p->seq_q;
    for (int r = 0; r < R; r++) {
        const int64_t rr = r0 + r;
        float *o = w->o + r * dq;
        unpermute(o, dq);
        if (P->nsplit > 1) {
            float *dst = part + ((pair * P->nsplit + split) * P->rows + rr) * (d + 2);
            memcpy(dst, o, (size_t)d * sizeof(float));
            dst[d] = w->m[r];
            dst[d + 1] = w->l[r];
        } else {
            const int64_t h = g * xs->group + rr / Nq, i = rr % Nq;
            if (xs->p->sinks) mha_decode_add_sink(o, d, &w->l[r], w->m[r], xs->sinks[h] * LOG2E);
            store_row(os, b, h, i, o, d, w->l[r], mha_kv_count(xs->p, i) == 0);
        }
    }
}

/* Row i of head h of batch b of out = row / lsum rounded to bf16 (RNE); the
 * first `blind` rows (a causal row that sees no key) are zeros, l == 0 or
 * NaN gives NaN. */
static void store_row(const mha_tensor_mut *out, int64_t b, int64_t h, int64_t i, const float *row,
                      int64_t d, float lsum, int64_t blind) {
    uint16_t *dst =
        (uint16_t *)out->data + b * out->stride_b + h * out->stride_h + i * out->stride_n;
    const vf inv = blind ? vzero() : vset1(1.0f / lsum);
    for (int64_t c = 0; c < d; c += VW) {
        const int nc = (int)(d - c < VW ? d - c : VW);
        const vf xv = blind ? vzero() : vmul(vloadu_n(row + c, nc), inv);
        _mm256_mask_storeu_epi16(dst + c, (__mmask16)((1u << nc) - 1u), vf_to_bf16(xv));
    }
}

/* The packed batch and the paged cache as in decode.c: the context and
 * output pair (b, .) runs in, the problem's own (dense) or sequence b's
 * view (mha_seq_view) made in sv, whose batch index *b becomes 0. */
typedef struct {
    mha_seq_view v;
    db_ctx x;
} db_seq;

static const db_ctx *pair_ctx(const db_ctx *x, const mha_tensor_mut *out, const mha_extras *ex,
                              int64_t *b, db_seq *sv, const mha_tensor_mut **os) {
    *os = out;
    if (x->p->layout == MHA_LAYOUT_DENSE) return x;
    mha_seq_view_of(x->p, ex, *b, x->q, x->k, x->v, out, &sv->v);
    sv->x = *x;
    MHA_CTX_AT_SEQ(sv->x, sv->v);
    *os = &sv->v.out;
    *b = 0;
    return &sv->x;
}

mha_status MHA_CAT(MHA_SYM(decode), _run)(const mha_problem *p, const mha_options *o, int threads,
                                          const mha_tensor *q, const mha_tensor *k,
                                          const mha_tensor *v, const mha_extras *ex,
                                          const mha_tensor_mut *out, void *workspace) {
#if DB_HAND_OFF
    if (db_vector_rows(p))
        return mha_decode__bf16fma_run(p, o, threads, q, k, v, ex, out, workspace);
#endif
    (void)o;
    const db_plan P = plan(p, threads, mha_decode_interleaved(p, k, v));
    /* scores in log2 units -> exp2; a softcap takes them natural */
    const db_ctx x = {.p = p,
                      .q = q,
                      .k = k,
                      .v = v,
                      .group = p->heads / p->kv_heads,
                      .dq = P.dq,
                      .dvq = P.dvq,
                      .stream = P.stream,
                      .rows_pf = P.rows_pf,
                      .qscale = mha_problem_scale(p) * (p->softcap > 0 ? 1.0f : LOG2E),
                      .sinks = ex->sinks,
                      .blocks = NULL,
                      .bs = 0};
    /* d: V's and O's head dim from here on; dq the width of o. Packed and
     * paged, P is the plan of the bounds (rows, splits) and each sequence
     * takes its own rows and chunks of it. */
    const int64_t d = mha_dv(p), dq = P.dvq, G = p->kv_heads, span = mha_decode_span(p);
    const int64_t nrc = (P.rows + DB_RB - 1) / DB_RB,
                  items = p->batch * (P.all_heads ? 1 : G * nrc) * P.nsplit;
    float *part = (float *)workspace; /* [pair][split][row][d + 2]: o, m, l */
    char *scratch0 = (char *)workspace + P.part;

#pragma omp parallel num_threads(threads)
    {
        float *base = (float *)(scratch0 + (size_t)omp_get_thread_num() * P.scratch);
        db_scratch w = {.pf = NULL}; /* the tiles' buffers set below, else unused */
        w.s = base;
        w.tmp = w.s + DB_RB * DB_BK;
        w.o = w.tmp + DB_TMP;
        w.m = w.o + DB_RB * dq;
        w.l = w.m + DB_RB;
        w.pw = (uint16_t *)(w.l + DB_RB);
        w.qb = (db_qt *)(void *)(w.pw + DB_RB * DB_BK);
#if DB_TILES
        w.qt = (uint32_t *)((char *)base + P.tbuf_at);
        w.kbuf = (uint16_t *)(w.qt + 8 * P.dq); /* dq / 32 tiles of 256 dwords */
        w.vbuf = (uint32_t *)(w.kbuf + 2 * 512);
        tile_configure_all(); /* per thread, before its first tile instruction */
#endif
        float *state = (float *)((char *)base + P.scratch - P.state); /* all_heads */
#pragma omp for schedule(dynamic, 1)
        for (int64_t it = 0; it < items; it++) {
            if (P.all_heads) {
                const int64_t split = it % P.nsplit, b0 = it / P.nsplit;
                int64_t b = b0;
                db_seq sv;
                const mha_tensor_mut *os;
                const db_ctx *xs = pair_ctx(&x, out, ex, &b, &sv, &os);
                const int64_t rows = x.group * xs->p->seq_q, nkv = xs->p->seq_kv,
                              nrcs = (rows + DB_RB - 1) / DB_RB,
                              chunk = (nkv + P.nsplit - 1) / P.nsplit;
                const int64_t k0 = split * chunk < nkv ? split * chunk : nkv,
                              k1 = k0 + chunk < nkv ? k0 + chunk : nkv;
                db_scratch ws = w;
                mha_span_pf pf;
                for (int64_t c0 = k0;;) { /* at least once: a chunk without keys starts zeros */
                    const int64_t c1 = c0 + span < k1 ? c0 + span : k1;
                    /* the next span's lines, spread over this one's steps: keys of
                     * the scores and pairs of P.V (per 64 columns) of every row group */
                    const int64_t steps = G * nrcs * db_pf_steps(c1 - c0, mha_dv(p));
                    ws.pf =
                        mha_span_pf_init(&pf, xs->k, xs->v, p->head_dim, mha_dv(p), xs->blocks,
                                         xs->bs, b, G, c1, c1 + span < k1 ? c1 + span : k1, steps);
                    for (int64_t g = 0; g < G; g++)
                        for (int64_t rc = 0; rc < nrcs; rc++) {
                            db_at_slot(&ws, state, g * nrc + rc, dq, P.dq);
                            const int R =
                                (int)(rows - rc * DB_RB < DB_RB ? rows - rc * DB_RB : DB_RB);
                            db_rows(xs, b, g, rc * DB_RB, R, c0, c1, &ws, c0 == k0);
                        }
                    if (c1 >= k1) break;
                    c0 = c1;
                }
                ws.pf = NULL;
                for (int64_t g = 0; g < G; g++)
                    for (int64_t rc = 0; rc < nrcs; rc++) {
                        db_at_slot(&ws, state, g * nrc + rc, dq, P.dq);
                        const int R = (int)(rows - rc * DB_RB < DB_RB ? rows - rc * DB_RB : DB_RB);
                        emit_rows(xs, &P, part, os, b, b0 * G + g, g, split, rc * DB_RB, R, &ws);
                    }
                continue;
            }
            const int64_t split = it % P.nsplit, rc = (it / P.nsplit) % nrc,
                          pair = it / (P.nsplit * nrc);
            const int64_t g = pair % G, r0 = rc * DB_RB;
            int64_t b = pair / G;
            db_seq sv;
            const mha_tensor_mut *os;
            const db_ctx *xs = pair_ctx(&x, out, ex, &b, &sv, &os);
            const int64_t rows = x.group * xs->p->seq_q, nkv = xs->p->seq_kv;
            if (r0 >= rows) continue;
            const int R = (int)(rows - r0 < DB_RB ? rows - r0 : DB_RB);
            const int64_t chunk = (nkv + P.nsplit - 1) / P.nsplit;
            const int64_t k0 = split * chunk < nkv ? split * chunk : nkv,
                          k1 = k0 + chunk < nkv ? k0 + chunk : nkv;
            db_rows(xs, b, g, r0, R, k0, k1, &w, 1);
            emit_rows(xs, &P, part, os, b, pair, g, split, r0, R, &w);
        }
        if (P.nsplit > 1) {
            /* Merge the chunks: m = max m_s, l = sum l_s 2^(m_s - m), o likewise. */
#pragma omp for schedule(static)
            for (int64_t pr = 0; pr < p->batch * G * P.rows; pr++) {
                const int64_t pair = pr / P.rows, rr = pr % P.rows, g = pair % G;
                int64_t b = pair / G;
                db_seq sv;
                const mha_tensor_mut *os;
                const db_ctx *xs = pair_ctx(&x, out, ex, &b, &sv, &os);
                const int64_t Nq = xs->p->seq_q;
                if (rr >= x.group * Nq) continue;
                float *acc = w.o;
                const float *pt = part + (pair * P.nsplit * P.rows + rr) * (d + 2);
                float lsum = mha_decode_merge(pt, P.nsplit, P.rows * (d + 2), d, acc);
                const int64_t h = g * x.group + rr / Nq, i = rr % Nq;
                if (p->sinks) { /* once, after the merge: acc and lsum are at the chunks' max */
                    float mmax = -INFINITY;
                    for (int64_t sp = 0; sp < P.nsplit; sp++) {
                        const float ms = pt[sp * P.rows * (d + 2) + d];
                        mmax = ms > mmax ? ms : mmax;
                    }
                    mha_decode_add_sink(acc, d, &lsum, mmax, x.sinks[h] * LOG2E);
                }
                store_row(os, b, h, i, acc, d, lsum, mha_kv_count(xs->p, i) == 0);
            }
        }
#if DB_TILES
        MHA_TILE_RELEASE();
#endif
    }
    return MHA_OK;
}
