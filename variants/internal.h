/* internal.h - what the library's own files share and users do not see: the
 * kernel signature, the registry entry, the per-ISA entry points (declared
 * from kernels.inc) and the error-message plumbing. */
#ifndef MHA_VARIANTS_INTERNAL_H
#define MHA_VARIANTS_INTERNAL_H

#include "error.h"
#include "sizes.h"
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "mha.h"
#include "dtype.h"
#include "ops.h"
#include "overlap.h"

/* The one kernel signature. Arguments are validated by mha_attend before the
 * call; workspace is aligned and large enough; threads is resolved (>= 1);
 * x is never NULL (x->sinks is set iff p->sinks; the index arrays of p's
 * layout are set and checked, the others NULL), and p asks only for the
 * variants and layout the kernel's traits name. */
typedef mha_status (*mha_attend_fn)(const mha_problem *p, const mha_options *o, int threads,
                                    const mha_tensor *q, const mha_tensor *k, const mha_tensor *v,
                                    const mha_extras *x, const mha_tensor_mut *out,
                                    void *workspace);
/* Workspace bytes for (p, o, threads); SIZE_MAX when the count overflows. */
typedef size_t (*mha_workspace_fn)(const mha_problem *p, const mha_options *o, int threads);

struct mha_kernel {
    const char *name;
    const char *algorithm;
    mha_isa isa;
    unsigned traits; /* MHA_KT_* */
    int rank;
    unsigned dtypes, kv_dtypes; /* MHA_DTYPE_BIT masks */
    const char *summary;
    mha_attend_fn run;
    mha_workspace_fn workspace;
};

#define MHA_KERNEL(name, alg, isa, sym, traits, rank, dtypes, kv_dtypes, summary)                  \
    mha_status sym##_run(const mha_problem *, const mha_options *, int, const mha_tensor *,        \
                         const mha_tensor *, const mha_tensor *, const mha_extras *,               \
                         const mha_tensor_mut *, void *);                                          \
    size_t sym##_workspace(const mha_problem *, const mha_options *, int);
#include "kernels.inc"
#undef MHA_KERNEL

/* Checks the views of a call against p: present, of the problem's dtypes
 * (k, v: its kv dtype), int8 scales present, strides sane (out may be NULL). */
mha_status mha_check_views(const mha_problem *p, const mha_tensor *q, const mha_tensor *kt,
                           const mha_tensor *v, const mha_tensor_mut *out);

/* MHA_OK if the extras p asks for are in x (x may be NULL when it asks for
 * none) and the layout's index arrays hold (mha_check_layout), else
 * MHA_EINVAL naming the missing or bad one. */
mha_status mha_check_extras(const mha_problem *p, const mha_extras *x);

/* The index arrays of a packed or paged problem (layout.c): present, and
 * every value mha_extras says (cu_seqlens from 0, non-decreasing, ending at
 * the total; lengths within their bounds and blocks; the block indices read
 * inside the pool), else MHA_EINVAL naming it. MHA_OK for a dense problem.
 * p is validated. Called by mha_check_extras. */
mha_status mha_check_layout(const mha_problem *p, const mha_extras *x);
/* The layout and its sizes in mha_problem (layout.c): part of
 * mha_problem_validate. */
mha_status mha_validate_layout(const mha_problem *p);

/* One sequence of a problem whose extras passed mha_check_layout: its
 * queries are rows [q0, q0 + nq) of q and out (dense: sequence b's own nq =
 * seq_q rows), its nkv keys rows [kv0, kv0 + nkv) of packed k and v (paged:
 * through the block table, kv0 = 0; dense: b's own). */
typedef struct {
    int64_t q0, nq, kv0, nkv;
} mha_seq;
static inline mha_seq mha_seq_of(const mha_problem *p, const mha_extras *x, int64_t b) {
    mha_seq s = {0, p->seq_q, 0, p->seq_kv};
    if (p->layout == MHA_LAYOUT_DENSE) return s;
    s.q0 = x->cu_seqlens_q[b];
    s.nq = (int64_t)x->cu_seqlens_q[b + 1] - s.q0;
    if (p->layout == MHA_LAYOUT_PACKED) {
        s.kv0 = x->cu_seqlens_kv[b];
        s.nkv = (int64_t)x->cu_seqlens_kv[b + 1] - s.kv0;
    } else {
        s.nkv = x->seq_lens_kv[b];
    }
    return s;
}

/* Sequence s of a packed or paged problem as a dense problem of its own:
 * batch 1, its own lengths (so the mask helpers align it bottom-right); the
 * workspace planned for p's bounds covers it. The kernels' per-sequence
 * views (flash.c seq_view, decode.c dec_seq_view) start from it. */
static inline mha_problem mha_seq_problem(const mha_problem *p, const mha_seq *s) {
    mha_problem q = *p;
    q.layout = MHA_LAYOUT_DENSE;
    q.batch = 1;
    q.seq_q = s->nq;
    q.seq_kv = s->nkv;
    q.total_q = q.total_kv = 0;
    return q;
}
/* A view of t (or of an output) from its row r on (packed rows: token r),
 * int8 scales included. */
static inline mha_tensor mha_tensor_from_row(const mha_tensor *t, int64_t r) {
    mha_tensor v = *t;
    v.data = (const char *)t->data + r * t->stride_n * (int64_t)mha_dtype_size(t->dtype);
    if (t->dtype == MHA_I8) v.scale += r * t->scale_stride_n;
    return v;
}
static inline mha_tensor_mut mha_tensor_mut_from_row(const mha_tensor_mut *t, int64_t r) {
    mha_tensor_mut v = *t;
    v.data = (char *)t->data + r * t->stride_n * (int64_t)mha_dtype_size(t->dtype);
    return v;
}

/* Sequence b of a packed or paged problem (extras checked) as a dense
 * problem of its own (mha_seq_problem) with views of q, k, v and out from
 * its first rows (no copy; paged, k and v stay the pools: kv0 = 0) and,
 * paged, its row of the block table and the keys per cache block (blocks
 * NULL and bs 0 otherwise). A kernel points a copy of its context at it
 * (flash.c, flash_bf16.c, flash_amx.c, decode.c). */
typedef struct {
    mha_problem p;
    mha_tensor q, k, v;
    mha_tensor_mut out;
    const int32_t *blocks;
    int64_t bs;
} mha_seq_view;
static inline void mha_seq_view_of(const mha_problem *p, const mha_extras *ex, int64_t b,
                                   const mha_tensor *q, const mha_tensor *k, const mha_tensor *v,
                                   const mha_tensor_mut *out, mha_seq_view *s) {
    const mha_seq sq = mha_seq_of(p, ex, b);
    s->p = mha_seq_problem(p, &sq);
    s->q = mha_tensor_from_row(q, sq.q0);
    s->k = mha_tensor_from_row(k, sq.kv0);
    s->v = mha_tensor_from_row(v, sq.kv0);
    s->out = mha_tensor_mut_from_row(out, sq.q0);
    s->blocks = p->layout == MHA_LAYOUT_PAGED ? ex->block_table + b * p->max_blocks : NULL;
    s->bs = p->layout == MHA_LAYOUT_PAGED ? p->block_size : 0;
}
/* Points the fields every kernel context names alike (p, q, k, v, blocks,
 * bs) of the context x, a copy of the problem's, at the view sv; the
 * kernel sets what else its context derives (out, the causal offset). */
#define MHA_CTX_AT_SEQ(x, sv)                                                                      \
    ((x).p = &(sv).p, (x).q = &(sv).q, (x).k = &(sv).k, (x).v = &(sv).v, (x).blocks = (sv).blocks, \
     (x).bs = (sv).bs)

/* A packed batch stores token-major [T, G, d] rows: one KV head's keys are
 * G d elements apart (2 KiB at G 8 d 64 fp32), so a block's rows fall in a
 * few L1 sets and on as many pages. flash.c and flash_bf16.c give each
 * thread a workspace copy of the (sequence, KV head) it works on as
 * contiguous rows, made when a task's pair differs from the thread's last
 * (the pair-by-pair task order, mha_seq_task, makes that once per pair).
 * mha_seq_kv_copy_bytes: its size for problem p (the bounds), 0 when there
 * is none (not packed, one KV head, K/V not of element size es, or more
 * than MHA_SEQKV_MAX bytes: read in place). */
#define MHA_SEQKV_MAX ((size_t)8 << 20)
static inline size_t mha_seq_kv_copy_bytes(const mha_problem *p, size_t es) {
    if (p->layout != MHA_LAYOUT_PACKED || p->kv_heads <= 1 ||
        mha_dtype_size(mha_problem_kv_dtype(p)) != es)
        return 0;
    const size_t b = mha_align64(mha_mul_sz(
        mha_mul_sz((size_t)p->seq_kv, (size_t)(p->head_dim + mha_problem_head_dim_v(p))), es));
    return b <= MHA_SEQKV_MAX ? b : 0;
}
/* Views kc, vc of the copy at ck (K, then V at seq_kv_bound d elements on)
 * of sequence view sv's KV head g: rows j < nkv of k and v made contiguous,
 * read by every KV head index (stride_h 0); the rows are copied when copy
 * is set (the thread's copy holds another pair). */
static inline void mha_seq_kv_copy(const mha_seq_view *sv, int64_t seq_kv_bound, int64_t g,
                                   int copy, char *ck, mha_tensor *kc, mha_tensor *vc) {
    const int64_t nkv = sv->p.seq_kv, d = sv->p.head_dim, dv = mha_problem_head_dim_v(&sv->p);
    const size_t es = mha_dtype_size(sv->k.dtype);
    char *cv = ck + (size_t)(seq_kv_bound * d) * es;
    const char *kh = (const char *)sv->k.data + (size_t)(g * sv->k.stride_h) * es,
               *vh = (const char *)sv->v.data + (size_t)(g * sv->v.stride_h) * es;
    for (int64_t j = 0; copy && j < nkv; j++) {
        memcpy(ck + (size_t)(j * d) * es, kh + (size_t)(j * sv->k.stride_n) * es, (size_t)d * es);
        memcpy(cv + (size_t)(j * dv) * es, vh + (size_t)(j * sv->v.stride_n) * es, (size_t)dv * es);
    }
    *kc = sv->k;
    *vc = sv->v;
    kc->data = ck;
    vc->data = cv;
    kc->stride_b = kc->stride_h = vc->stride_b = vc->stride_h = 0;
    kc->stride_n = d;
    vc->stride_n = dv;
}
/* A thread's copy (buf, mha_seq_kv_copy_bytes of it) and the (sequence b,
 * KV head g) it holds, -1 before the first. */
typedef struct {
    char *buf;
    int64_t b, g;
} mha_seq_kv_cache;
/* Points *k and *v (a kernel context's K and V, at sv's tensors) at the
 * cache's copy of (b, g), copying first when the cache holds another pair;
 * kc and vc hold the views. */
static inline void mha_seq_kv_use(mha_seq_kv_cache *c, const mha_seq_view *sv, int64_t seq_kv_bound,
                                  int64_t b, int64_t g, mha_tensor *kc, mha_tensor *vc,
                                  const mha_tensor **k, const mha_tensor **v) {
    mha_seq_kv_copy(sv, seq_kv_bound, g, b != c->b || g != c->g, c->buf, kc, vc);
    c->b = b;
    c->g = g;
    *k = kc;
    *v = vc;
}

/* The keys of a block from key j0 that stay within j0's cache block: n,
 * or fewer where the paged cache's block (bs keys) ends first (blocks:
 * the sequence's row of the block table, NULL when not paged). flash.c,
 * flash_bf16.c and decode_bf16.c cut their KV blocks there, so every block
 * is rows of one cache block, read in place. */
static inline int64_t mha_page_cap(const int32_t *blocks, int64_t bs, int64_t j0, int64_t n) {
    if (!blocks) return n;
    const int64_t left = bs - j0 % bs;
    return n < left ? n : left;
}

/* Task it of the (query block, sequence, head) tasks of a packed or paged
 * problem (query blocks of bq rows; nqb blocks of the bound seq_q for each
 * of batch x heads pairs): pair by pair, each sequence's own last query
 * blocks first (under a causal mask they cost the most), so that
 * consecutive tasks read the same K and V while the L2 holds them; the
 * dynamic schedule balances the rest. Handing out every sequence's last
 * blocks first instead (longest-first across the pairs) made each task
 * fetch another head's K and V: measured on the AMX VM, flash.avx512 fp32
 * H8 d64, 32 sequences of 24..3,472 keys against one dense sequence of the
 * same pairs, 0.68-0.72x -> 0.84-0.85x (causal 0.64-0.69x -> 0.77-0.79x).
 * Sets *b, *h, *qb; returns 0 for a task past its sequence's blocks. */
static inline int mha_seq_task(const mha_problem *p, const mha_extras *ex, int64_t bq, int64_t it,
                               int64_t *b, int64_t *h, int64_t *qb) {
    const int64_t nqb = (p->seq_q + bq - 1) / bq, pair = it / nqb, k = it % nqb;
    *b = pair / p->heads;
    *h = pair % p->heads;
    const int64_t own = (mha_seq_of(p, ex, *b).nq + bq - 1) / bq; /* the sequence's blocks */
    *qb = own - 1 - k;
    return k < own;
}

/* MHA_OK if a and b share no byte, else MHA_EINVAL naming them ("a is
 * written while b is still read"). */
mha_status mha_check_disjoint(const char *a_name, const mha_span *a, const char *b_name,
                              const mha_span *b);

/* Checks options (threads 0..4096, blocks 0..4096, split): the one rule of
 * mha_attend, mha_workspace_size, mha_resolve_options and mha_select. */
mha_status mha_check_options(const mha_options *o);

/* mha_set_error, mha_clear_error: kernels/error.h */

/* size helpers (mha_mul_sz, mha_add_sz, mha_align64): kernels/sizes.h */

/* A window edge clamped so that i + off +- it cannot overflow (|i + off| <
 * 2^32 by mha_problem_validate): an edge past 2^40 keys is unbounded anyway. */
static inline int64_t mha_window_edge(int64_t w) {
    return w > ((int64_t)1 << 40) ? ((int64_t)1 << 40) : w;
}

/* Visible key range for query row i (global index): keys [begin, end), with
 * off = seq_kv - seq_q: end = min(seq_kv, i + off + 1) when causal and
 * min(.., i + off + window_right + 1) under a right window edge; begin =
 * i + off - window_left under a left edge, else 0; both clamped to
 * [0, seq_kv]. The row sees no key iff end <= begin. */
static inline int64_t mha_kv_end(const mha_problem *p, int64_t i) {
    const int64_t off = p->seq_kv - p->seq_q;
    int64_t e = p->seq_kv;
    if (p->causal && i + off + 1 < e) e = i + off + 1;
    if (p->window && p->window_right >= 0 && i + off + mha_window_edge(p->window_right) + 1 < e)
        e = i + off + mha_window_edge(p->window_right) + 1;
    return e < 0 ? 0 : e;
}
static inline int64_t mha_kv_begin(const mha_problem *p, int64_t i) {
    if (!p->window || p->window_left < 0) return 0;
    const int64_t b = i + p->seq_kv - p->seq_q - mha_window_edge(p->window_left);
    return b < 0 ? 0 : (b > p->seq_kv ? p->seq_kv : b);
}
/* The visible keys as a band: key j is visible to query row i iff
 * i + off - *left <= j <= i + off + *right (off = seq_kv - seq_q), either
 * side 2^40 when it has no bound; within [0, seq_kv) the same keys as
 * [mha_kv_begin, mha_kv_end). */
static inline void mha_kv_band(const mha_problem *p, int64_t *left, int64_t *right) {
    const int64_t open = (int64_t)1 << 40;
    *left = p->window && p->window_left >= 0 ? mha_window_edge(p->window_left) : open;
    *right = p->causal ? 0 : open;
    if (p->window && p->window_right >= 0 && mha_window_edge(p->window_right) < *right)
        *right = mha_window_edge(p->window_right);
}
/* Keys query row i sees (0 for a blind row). */
static inline int64_t mha_kv_count(const mha_problem *p, int64_t i) {
    const int64_t n = mha_kv_end(p, i) - mha_kv_begin(p, i);
    return n > 0 ? n : 0;
}
/* V's and O's head dim (the library's own copy of mha_problem_head_dim_v). */
static inline int64_t mha_dv(const mha_problem *p) {
    return p->head_dim_v > 0 ? p->head_dim_v : p->head_dim;
}
/* The MHA_KT_* variant and layout traits a problem needs of its kernel. */
static inline unsigned mha_problem_needs(const mha_problem *p) {
    return (p->layout == MHA_LAYOUT_PACKED ? (unsigned)MHA_KT_PACKED : 0u) |
           (p->layout == MHA_LAYOUT_PAGED ? (unsigned)MHA_KT_PAGED : 0u) |
           (p->window ? (unsigned)MHA_KT_WINDOW : 0u) |
           (p->softcap > 0 ? (unsigned)MHA_KT_SOFTCAP : 0u) |
           (p->sinks ? (unsigned)MHA_KT_SINKS : 0u) |
           (mha_dv(p) != p->head_dim ? (unsigned)MHA_KT_HEAD_DIM_V : 0u);
}

/* How many of the query rows [i0, i0 + n) see no key at all: the first ones
 * of a causal problem with seq_q > seq_kv (row i sees none iff
 * i < seq_q - seq_kv). Their output is zeros by convention; every other row
 * sees a key, and an all -inf (or NaN) row of scores there gives NaN.
 * Without a window only: a window's blind rows need mha_kv_count. */
static inline int64_t mha_rows_blind(const mha_problem *p, int64_t i0, int64_t n) {
    if (!p->causal) return 0;
    const int64_t b = p->seq_q - p->seq_kv - i0;
    return b < 0 ? 0 : (b > n ? n : b);
}

/* ---- split-KV decode: what decode.c and decode_bf16.c share ----------------
 * KV chunks per (batch, KV head) pair: with at most max_rows query rows per
 * pair and fewer pairs than twice the threads, enough chunks that every
 * thread has about two, none under 256 keys; else one. */
static inline int64_t mha_decode_nsplit(const mha_problem *p, int64_t rows, int64_t max_rows,
                                        int threads) {
    const int64_t pairs = p->batch * p->kv_heads;
    if (rows > max_rows || pairs >= 2 * (int64_t)threads) return 1;
    const int64_t want = (2 * (int64_t)threads + pairs - 1) / pairs;
    const int64_t most = p->seq_kv / 256 > 1 ? p->seq_kv / 256 : 1;
    return want < most ? want : most;
}

/* Whether a decode stores a key's KV heads side by side (the paged pool, the
 * packed layout, a dense [B,N,G,d] cache: the head stride below the token
 * stride), where decode.c's and decode_bf16.c's all_heads items read it in
 * its stored order. Measured on the AMX VM (decode.avx512, 8 sequences of
 * 4,096 keys, H 32, G 8, d 128): a dense [B,N,G,d] cache 5.3 -> 10.8 GB/s
 * fp32 and 3.5 -> 5.3 bf16 at 1 thread with them, a head-major [B,G,N,d]
 * one 8.8 -> 8.3 and 7.8 -> 6.5 (so not there). */
static inline int mha_decode_interleaved(const mha_problem *p, const mha_tensor *k,
                                         const mha_tensor *v) {
    return p->layout != MHA_LAYOUT_DENSE ||
           (k->stride_h < k->stride_n && v->stride_h < v->stride_n);
}

/* all_heads' prefetch of the next span (decode.c, decode_bf16.c): its K
 * and V rows of every KV head as contiguous runs of bytes (a cache block's
 * stretch of keys, or the whole span in a dense or packed cache), walked
 * `per` lines into L2 at each step of the current span's products (a key
 * of the scores, a pair of P.V), so the lines are requested at the pace
 * the products go and in the order they are stored. On the Zen 4 VM one
 * burst per span (every line, or one per 512 B or 4 KiB) changed nothing,
 * presumably dropped beyond the few misses the core holds; demand loads in
 * a pass before the products ran 1.7x, serial with them. Spread, with
 * prefetcht1 (t0 ran 10-15% slower), the paged cache went from 0.33-0.50x
 * the dense one to 0.58-0.85x (bf16) and 0.91-1.08x (fp32)
 * (docs/attention-variants.md). */
enum { MHA_SPAN_PF_RUNS = 16 };
typedef struct {
    const char *run[MHA_SPAN_PF_RUNS];
    int64_t len[MHA_SPAN_PF_RUNS]; /* bytes */
    int nrun, ri, per;             /* per: lines per step */
    int head;                      /* 0: every line; else the lines in the first head bytes of each
                                      4 KiB page only (a stream the hardware follows: decode_bf16.c) */
    const char *p, *end;           /* the run being walked; both NULL when done */
} mha_span_pf;

static __attribute__((noinline, unused)) void mha_span_pf_next(mha_span_pf *f) {
    f->ri++;
    f->p = f->ri < f->nrun ? f->run[f->ri] : NULL;
    f->end = f->ri < f->nrun ? f->p + f->len[f->ri] : NULL;
}

/* One step: `per` lines (the last step of a run may reach past its end by
 * less than per lines: a prefetch never faults). f NULL: nothing. */
static inline __attribute__((always_inline)) void mha_span_pf_step(mha_span_pf *f) {
    if (!f || f->p == f->end) return;
    if (!f->head) {
        for (int i = 0; i < f->per; i++) __builtin_prefetch(f->p + 64 * i, 0, 2);
    } else { /* the page heads that this step's lines [a, e) reach */
        const uintptr_t a = (uintptr_t)f->p, e = a + 64 * (uintptr_t)f->per;
        for (uintptr_t pg = a & ~(uintptr_t)4095; pg < e; pg += 4096)
            for (uintptr_t l = pg > a ? pg : a; l < pg + (uintptr_t)f->head && l < e; l += 64)
                __builtin_prefetch((const void *)l, 0, 2);
    }
    f->p += 64 * f->per;
    if (f->p >= f->end) mha_span_pf_next(f);
}

/* Adds bytes [at, at + bytes) as a run of f (from at's line), its lines
 * counted into *lines; nothing when f is full. */
static inline void mha_span_pf_add(mha_span_pf *f, const void *at, int64_t bytes, int64_t *lines) {
    if (f->nrun >= MHA_SPAN_PF_RUNS || bytes <= 0) return;
    const uintptr_t first = (uintptr_t)at;
    f->run[f->nrun] = (const char *)(first & ~(uintptr_t)63);
    f->len[f->nrun] = bytes + (int64_t)(first & 63);
    *lines += (f->len[f->nrun] + 63) / 64;
    f->nrun++;
}
/* Starts the walk of f's runs (lines of them) over `steps` steps. Returns f,
 * or NULL when there is nothing to fetch. */
static inline mha_span_pf *mha_span_pf_begin(mha_span_pf *f, int64_t lines, int64_t steps) {
    if (!f->nrun || steps <= 0) return NULL;
    f->per = (int)((lines + steps - 1) / steps);
    f->head = 0;
    f->ri = -1;
    mha_span_pf_next(f);
    return f;
}

/* The cursor over keys [n0, n1) of batch entry b (paged: through the
 * sequence's row of the block table, blocks of bs keys), every one of the
 * G KV heads, spread over `steps` steps. Returns f, or NULL when there is
 * nothing to fetch. Beyond MHA_SPAN_PF_RUNS runs (cache blocks of a few
 * keys) the rest of the span is left to the hardware. */
static inline mha_span_pf *mha_span_pf_init(mha_span_pf *f, const mha_tensor *k,
                                            const mha_tensor *v, int64_t dk, int64_t dv,
                                            const int32_t *blocks, int64_t bs, int64_t b, int64_t G,
                                            int64_t n0, int64_t n1, int64_t steps) {
    const mha_tensor *t[2] = {k, v};
    const int64_t w[2] = {dk, dv};
    int64_t lines = 0;
    f->nrun = 0;
    for (int64_t j = n0, n; j < n1 && f->nrun + 2 <= MHA_SPAN_PF_RUNS; j += n) {
        n = blocks ? mha_page_cap(blocks, bs, j, n1 - j) : n1 - j;
        for (int u = 0; u < 2; u++) {
            const int64_t es = (int64_t)mha_dtype_size(t[u]->dtype);
            const int64_t at =
                b * t[u]->stride_b +
                (blocks ? (int64_t)blocks[j / bs] * t[u]->stride_b + (j % bs) * t[u]->stride_n
                        : j * t[u]->stride_n);
            const int64_t bytes = ((n - 1) * t[u]->stride_n + (G - 1) * t[u]->stride_h + w[u]) * es;
            mha_span_pf_add(f, (const char *)t[u]->data + at * es, bytes, &lines);
        }
    }
    return mha_span_pf_begin(f, lines, steps);
}

/* A dense flash kernel under a window bounded on the left (mha_window_local):
 * its query blocks cost about the same and each reads keys no earlier block
 * did, so they run in order (in chunks of consecutive blocks per thread),
 * and each one prefetches the next block's rows while it computes: Q's and
 * the keys [end, end + its rows) of K and V (flash.c, flash_bf16.c). On the
 * Zen 4 VM (flash.avx512, H8 N8192 d64 causal, window 128:0, 1 thread) the
 * rate went from 66.6 to 74.8 GFLOP/s per visible pair (one head alone, its
 * 8 MiB in the L3: 77; docs/attention-variants.md). */
static inline int mha_window_local(const mha_problem *p) {
    return p->window && p->window_left >= 0;
}
/* Rows [r0, r0 + rows) of a head (first element at head, row stride ld
 * elements of es bytes, w of them used) as a run of f when they are
 * contiguous (ld == w); strided rows are left to the hardware. */
static inline void mha_span_pf_rows(mha_span_pf *f, const void *head, int64_t ld, int64_t es,
                                    int64_t w, int64_t r0, int64_t rows, int64_t *lines) {
    if (ld == w) mha_span_pf_add(f, (const char *)head + r0 * ld * es, rows * w * es, lines);
}
/* Consecutive query blocks per task of a dense run: 1 (each task its own
 * block, the causal order's balance), or, under mha_window_local, as many
 * as leave every thread about 64 tasks; or `unit` (the tasks one
 * thread-local pack of K and V serves: a KV head's query blocks, in
 * flash_bf16.c) where that leaves every thread at least 4, so that no KV
 * head is packed by two threads. Measured on the Zen 4 VM (flash.avx512bf16,
 * H8 N8192 d64 causal, 2 threads, best of 5, 2 rounds): window 128 292 ->
 * 298-299 GFLOP/s, 256 336-338 -> 343-345 (before, chunks of 16 of a
 * head's 256 blocks, which both threads took in turn; after, one head per
 * chunk). */
static inline int64_t mha_window_chunk(const mha_problem *p, int64_t tasks, int threads,
                                       int64_t unit) {
    const int64_t t = threads > 0 ? threads : 1, c = tasks / (64 * t);
    if (!mha_window_local(p)) return 1;
    if (unit > 1 && tasks / unit >= 4 * t) return unit;
    return c > 1 ? c : 1;
}

/* Keys per span of a paged GQA decode's all_heads items (decode.c,
 * decode_bf16.c: every KV head's rows over a span before the next): the
 * largest power of two from 8 to 64 whose K and V rows of all KV heads fit
 * 128 KiB. Measured on the AMX VM (family 6 model 167; 8 sequences of 4,096
 * keys, H 32, G 8, d 128, bandwidth against the head-major dense cache, 1
 * thread, pages of 16 / 128): decode.avx512 fp32 8 keys 1.15 / 1.20, 16
 * keys 1.18 / 1.22, 32 keys 0.90 / 1.09, 64 keys 0.80 / 0.96; bf16 8 keys
 * 0.54 / 0.58, 16 keys 0.65 / 0.69, 32 keys 0.70 / 0.72, 64 keys 0.57 /
 * 0.73; decode.avx512bf16 16 keys 0.61 / 0.69, 32 keys 0.63 / 0.69, 64
 * keys 0.50 / 0.56, 128 keys 0.43 / 0.50: the best span holds 128 KiB (16
 * fp32 keys, 32 bf16 ones at G 8 d 128). */
static inline int64_t mha_decode_span(const mha_problem *p) {
    const int64_t row = p->kv_heads * (p->head_dim + mha_problem_head_dim_v(p)) *
                        (int64_t)mha_dtype_size(mha_problem_kv_dtype(p));
    int64_t span = 64;
    while (span > 8 && span * row > 131072) span /= 2;
    return span;
}

/* The log-sum-exp merge of one query row's nsplit partial results, each d
 * values of o then m then l, `stride` floats apart: acc[0, d) = sum over the
 * chunks of o_s 2^(m_s - m) with m = max m_s; returns l = sum l_s 2^(m_s - m).
 * A chunk that saw no key (or only -inf scores: l == 0) adds nothing; l is
 * NaN, not 0, when a score was NaN, and stays NaN. */
static inline float mha_decode_merge(const float *part, int64_t nsplit, int64_t stride, int64_t d,
                                     float *acc) {
    float mmax = -INFINITY, lsum = 0.0f;
    for (int64_t sp = 0; sp < nsplit; sp++) {
        const float ms = part[sp * stride + d];
        mmax = ms > mmax ? ms : mmax;
    }
    for (int64_t c = 0; c < d; c++) acc[c] = 0.0f;
    for (int64_t sp = 0; sp < nsplit; sp++) {
        const float *src = part + sp * stride;
        if (src[d + 1] == 0.0f) continue;
        const float w = exp2f(src[d] - mmax);
        lsum += src[d + 1] * w;
        for (int64_t c = 0; c < d; c++) acc[c] += w * src[c];
    }
    return lsum;
}

/* A sink (log2 units) joins one row's unnormalised o (dv floats), max m and
 * sum l once, after its pass or after the split-KV merge: a partial result
 * with o = 0, m = sink, l = 1 (-inf: no sink; NaN makes l NaN). */
static inline void mha_decode_add_sink(float *o, int64_t dv, float *l, float m, float sink) {
    if (!(sink > -INFINITY)) {
        if (isnan(sink)) *l = NAN;
        return;
    }
    if (sink > m) { /* the sink is the new max: what came before scales by 2^(m - sink) */
        const float f = m == -INFINITY ? 0.0f : exp2f(m - sink);
        for (int64_t c = 0; c < dv; c++) o[c] *= f;
        *l = *l * f + 1.0f;
    } else {
        *l += exp2f(sink - m);
    }
}

#endif
