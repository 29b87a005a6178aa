/* api.c - the library's entry points around a kernel call: option
 * validation, the one resolution of options left at 0, workspace queries and
 * mha_attend, which validates everything before a kernel runs. (Problems and
 * views: problem.c; status texts and the error message: error.c.) */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "internal.h"
#include "phase.h"

#ifdef MHA_PHASE_TIMING
struct mha_phase_slot mha_phase_slots[PHASE_MAX_THREADS];
#endif

int mha_phase_cycles(uint64_t out[4], int reset) {
    for (int i = 0; i < PHASE_COUNT; i++) out[i] = 0;
#ifdef MHA_PHASE_TIMING
    for (int t = 0; t < PHASE_MAX_THREADS; t++)
        for (int i = 0; i < PHASE_COUNT; i++) {
            out[i] += mha_phase_slots[t].cycles[i];
            if (reset) mha_phase_slots[t].cycles[i] = 0;
        }
    return 1;
#else
    (void)reset;
    return 0;
#endif
}

int mha_resolve_threads(const mha_options *o) {
    if (o && o->threads > 0) return o->threads;
    int n = omp_get_num_procs();
    return n > 0 ? n : 1;
}

int mha_hugepages(void) {
    const char *e = getenv("MHA_HUGEPAGES");
    return !(e && strcmp(e, "0") == 0);
}

void *mha_alloc(size_t bytes) {
    if (bytes == 0) bytes = MHA_WORKSPACE_ALIGN;
    bytes = mha_align64(bytes);
    if (bytes == SIZE_MAX) return NULL;
#ifdef MADV_HUGEPAGE
    /* Large buffers (a KV cache, a layer's activations) on 2 MiB pages where
     * the kernel's transparent huge pages allow it ("madvise" or "always"):
     * one TLB entry covers 512x the bytes, and a stream through an L3- or
     * DRAM-resident cache no longer walks page tables every 4 KiB. Measured
     * on Zen 4 (decode d = 128, Nkv = 4096, fp32): 16 MiB cache 1.17x at 1
     * thread, 1.10x at 2; 64 MiB 1.36x / 1.12x (README "Huge pages"). */
    if (bytes >= MHA_HUGE_PAGE && mha_hugepages()) {
        const size_t round = (bytes + MHA_HUGE_PAGE - 1) / MHA_HUGE_PAGE * MHA_HUGE_PAGE;
        void *p = round >= bytes ? aligned_alloc(MHA_HUGE_PAGE, round) : NULL;
        if (p) {
            (void)madvise(p, round, MADV_HUGEPAGE); /* advice only: may be refused */
            return p;
        }
    }
#endif
    return aligned_alloc(MHA_WORKSPACE_ALIGN, bytes);
}

void mha_free(void *ptr) {
    free(ptr);
}

mha_status mha_check_options(const mha_options *o) {
    if (!o) return MHA_OK;
    if (o->threads < 0 || o->threads > 4096)
        return mha_set_error(MHA_EINVAL, "options.threads = %d: must be 0 (all cores) or 1..4096",
                             o->threads);
    if (o->block_q < 0 || o->block_q > 4096)
        return mha_set_error(MHA_EINVAL, "options.block_q = %d: must be 0 (default) or 1..4096",
                             o->block_q);
    if (o->block_kv < 0 || o->block_kv > 4096)
        return mha_set_error(MHA_EINVAL, "options.block_kv = %d: must be 0 (default) or 1..4096",
                             o->block_kv);
    if (o->split < MHA_SPLIT_AUTO || o->split > MHA_SPLIT_QBLOCKS)
        return mha_set_error(MHA_EINVAL,
                             "options.split = %d: must be 0 (auto), 1 (heads) or 2 (query blocks)",
                             o->split);
    return MHA_OK;
}

/* The options a kernel runs with: block_q / block_kv left at 0 resolved
 * through the cache model, identically for mha_workspace_size and mha_attend. */
static mha_options resolve_options(const mha_kernel *k, const mha_problem *p,
                                   const mha_options *o) {
    mha_options r = o ? *o : (mha_options){0};
    if (r.block_q == 0 || r.block_kv == 0) {
        int bq, bk;
        mha_default_blocks(p, k->traits, k->isa, mha_resolve_threads(&r), &bq, &bk);
        if (r.block_q == 0) r.block_q = bq;
        if (r.block_kv == 0) r.block_kv = bk;
    }
    return r;
}

mha_status mha_resolve_options(const mha_kernel *k, const mha_problem *p, const mha_options *o,
                               mha_options *out) {
    mha_status st;
    if (!k || !out) return mha_set_error(MHA_EINVAL, "kernel or out is NULL");
    if ((st = mha_problem_validate(p)) != MHA_OK) return st;
    if ((st = mha_check_options(o)) != MHA_OK) return st;
    *out = resolve_options(k, p, o);
    return MHA_OK;
}

mha_status mha_workspace_size(const mha_kernel *k, const mha_problem *p, const mha_options *o,
                              size_t *bytes) {
    mha_status st;
    if (!k || !bytes) return mha_set_error(MHA_EINVAL, "kernel or bytes is NULL");
    if ((st = mha_problem_validate(p)) != MHA_OK) return st;
    if ((st = mha_check_options(o)) != MHA_OK) return st;
    if ((st = mha_kernel_takes(k, p)) != MHA_OK) return st;
    const mha_options r = resolve_options(k, p, o);
    size_t n = k->workspace(p, &r, mha_resolve_threads(&r));
    if (n == SIZE_MAX)
        return mha_set_error(MHA_ENOMEM, "workspace of kernel %s for this problem overflows size_t",
                             k->name);
    *bytes = n;
    return MHA_OK;
}

/* Checks one view: data present, the dtype the problem says, scales for
 * int8, strides >= 0, rows of an output do not overlap, and the largest
 * offset fits. A view of no rows (a packed layout's total of 0) may have
 * NULL data. */
static mha_status check_view(const char *what, const void *data, mha_dtype t, mha_dtype want,
                             int64_t sb, int64_t sh, int64_t sn, int64_t B, int64_t H, int64_t N,
                             int64_t d, int is_out) {
    const int empty = B == 0 || H == 0 || N == 0;
    if (!data && !empty) return mha_set_error(MHA_EINVAL, "%s.data is NULL", what);
    if (t != want)
        return mha_set_error(MHA_EINVAL, "%s.dtype = %s, but the problem says %s", what,
                             mha_dtype_name(t), mha_dtype_name(want));
    if (sb < 0 || sh < 0 || sn < 0)
        return mha_set_error(MHA_EINVAL, "%s strides (%lld, %lld, %lld) must be >= 0", what,
                             (long long)sb, (long long)sh, (long long)sn);
    if (empty) return MHA_OK;
    if (is_out && ((N > 1 && sn < d) || (H > 1 && sh < d) || (B > 1 && sb < d)))
        return mha_set_error(MHA_EINVAL, "%s strides (%lld, %lld, %lld) make rows of %lld overlap",
                             what, (long long)sb, (long long)sh, (long long)sn, (long long)d);
    int64_t off = d - 1, t2;
    if (__builtin_mul_overflow(B - 1, sb, &t2) || __builtin_add_overflow(off, t2, &off) ||
        __builtin_mul_overflow(H - 1, sh, &t2) || __builtin_add_overflow(off, t2, &off) ||
        __builtin_mul_overflow(N - 1, sn, &t2) || __builtin_add_overflow(off, t2, &off) ||
        (uint64_t)off > SIZE_MAX / mha_dtype_size(t))
        return mha_set_error(MHA_EINVAL, "%s strides overflow the address space", what);
    return MHA_OK;
}

/* The scales of an int8 view: present, strides >= 0, largest offset fits. */
static mha_status check_scales(const char *what, const mha_tensor *v, int64_t B, int64_t H,
                               int64_t N) {
    if (v->dtype != MHA_I8 || B == 0 || H == 0 || N == 0) return MHA_OK;
    if (!v->scale) return mha_set_error(MHA_EINVAL, "%s is int8 but %s.scale is NULL", what, what);
    if (v->scale_stride_b < 0 || v->scale_stride_h < 0 || v->scale_stride_n < 0)
        return mha_set_error(MHA_EINVAL, "%s scale strides (%lld, %lld, %lld) must be >= 0", what,
                             (long long)v->scale_stride_b, (long long)v->scale_stride_h,
                             (long long)v->scale_stride_n);
    int64_t off = 0, t;
    if (__builtin_mul_overflow(B - 1, v->scale_stride_b, &t) ||
        __builtin_add_overflow(off, t, &off) ||
        __builtin_mul_overflow(H - 1, v->scale_stride_h, &t) ||
        __builtin_add_overflow(off, t, &off) ||
        __builtin_mul_overflow(N - 1, v->scale_stride_n, &t) ||
        __builtin_add_overflow(off, t, &off) || off > (int64_t)(SIZE_MAX / sizeof(float)))
        return mha_set_error(MHA_EINVAL, "%s scale strides overflow the address space", what);
    return MHA_OK;
}

/* The extents (view batch, heads, view seq) of q and out (qe) and of k and
 * v (ke) in p's layout: dense [B,H,Nq] and [B,G,Nkv]; packed [1,H,Tq] and
 * [1,G,Tkv] (token rows, stride_b unused); paged [1,H,Tq] and [NB,G,BS]
 * (blocks, heads, slots). */
static void extents(const mha_problem *p, int64_t qe[3], int64_t ke[3]) {
    const int dense = p->layout == MHA_LAYOUT_DENSE, paged = p->layout == MHA_LAYOUT_PAGED;
    qe[0] = dense ? p->batch : 1;
    qe[1] = p->heads;
    qe[2] = dense ? p->seq_q : p->total_q;
    ke[0] = dense ? p->batch : paged ? p->num_blocks : 1;
    ke[1] = p->kv_heads;
    ke[2] = dense ? p->seq_kv : paged ? p->block_size : p->total_kv;
}

/* Every view of a call against p (shared with the oracle). */
mha_status mha_check_views(const mha_problem *p, const mha_tensor *q, const mha_tensor *kt,
                           const mha_tensor *v, const mha_tensor_mut *out) {
    mha_status st;
    if (!q || !kt || !v) return mha_set_error(MHA_EINVAL, "a tensor view is NULL");
    const int64_t d = p->head_dim, dv = mha_dv(p);
    int64_t qe[3], ke[3];
    extents(p, qe, ke);
    const mha_dtype kv = mha_problem_kv_dtype(p);
    if ((st = check_view("q", q->data, q->dtype, p->dtype, q->stride_b, q->stride_h, q->stride_n,
                         qe[0], qe[1], qe[2], d, 0)) ||
        (st = check_view("k", kt->data, kt->dtype, kv, kt->stride_b, kt->stride_h, kt->stride_n,
                         ke[0], ke[1], ke[2], d, 0)) ||
        (st = check_view("v", v->data, v->dtype, kv, v->stride_b, v->stride_h, v->stride_n, ke[0],
                         ke[1], ke[2], dv, 0)) ||
        (st = check_scales("k", kt, ke[0], ke[1], ke[2])) ||
        (st = check_scales("v", v, ke[0], ke[1], ke[2])))
        return st;
    if (out && (st = check_view("out", out->data, out->dtype, p->dtype, out->stride_b,
                                out->stride_h, out->stride_n, qe[0], qe[1], qe[2], dv, 1)))
        return st;
    return MHA_OK;
}

/* A tensor view as the bytes it touches (none for a view of no rows). */
static mha_span view_span(const void *data, mha_dtype t, int64_t sb, int64_t sh, int64_t sn,
                          int64_t B, int64_t H, int64_t N, int64_t d) {
    if (B == 0 || H == 0 || N == 0) return (mha_span){0};
    const int64_t count[3] = {B, H, N}, stride[3] = {sb, sh, sn};
    return mha_span_make(data, mha_dtype_size(t), count, stride, d);
}
/* An index array of n int32 (none when absent or empty). */
static mha_span index_span(const int32_t *a, int64_t n) {
    const int64_t one[3] = {1, 1, 1}, zero[3] = {0, 0, 0};
    return a && n > 0 ? mha_span_make(a, sizeof(int32_t), one, zero, n) : (mha_span){0};
}
static mha_span tensor_span(const mha_tensor *v, int64_t B, int64_t H, int64_t N, int64_t d) {
    return view_span(v->data, v->dtype, v->stride_b, v->stride_h, v->stride_n, B, H, N, d);
}
static mha_span scale_span(const mha_tensor *v, int64_t B, int64_t H, int64_t N) {
    if (B == 0 || H == 0 || N == 0) return (mha_span){0};
    const int64_t count[3] = {B, H, N};
    const int64_t stride[3] = {v->scale_stride_b, v->scale_stride_h, v->scale_stride_n};
    return mha_span_make(v->scale, sizeof(float), count, stride, 1);
}

mha_status mha_check_disjoint(const char *a_name, const mha_span *a, const char *b_name,
                              const mha_span *b) {
    const int r = mha_span_overlap(a, b);
    if (r > 0)
        return mha_set_error(MHA_EINVAL,
                             "%s and %s share memory: %s is written while %s is still read "
                             "(give %s its own buffer)",
                             a_name, b_name, a_name, b_name, a_name);
    if (r < 0)
        return mha_set_error(MHA_EINVAL,
                             "%s and %s may share memory: their address ranges meet and one "
                             "has rows out of address order (a zero or interleaved stride)",
                             a_name, b_name);
    return MHA_OK;
}

/* The aliasing rule (mha.h): out may be exactly q's view (in place: every
 * kernel reads a query row before it writes that row's output, and no
 * other); any other byte out shares with q, k, v or the int8 scales, and
 * any byte the workspace shares with a view, is MHA_EINVAL. */
static mha_status check_aliasing(const mha_problem *p, const mha_tensor *q, const mha_tensor *kt,
                                 const mha_tensor *v, const mha_extras *x,
                                 const mha_tensor_mut *out, const void *workspace,
                                 size_t workspace_size) {
    const int64_t B = p->batch, H = p->heads, d = p->head_dim, dv = mha_dv(p);
    int64_t qe[3], ke[3];
    extents(p, qe, ke);
    const mha_span so = view_span(out->data, out->dtype, out->stride_b, out->stride_h,
                                  out->stride_n, qe[0], qe[1], qe[2], dv);
    const int64_t one[3] = {1, 1, 1}, zero[3] = {0, 0, 0};
    const int in_place = out->data == q->data && out->stride_b == q->stride_b &&
                         out->stride_h == q->stride_h && out->stride_n == q->stride_n;
    struct {
        const char *name;
        mha_span s;
        int present;
    } in[] = {
        {"q", tensor_span(q, qe[0], qe[1], qe[2], d), 1},
        {"k", tensor_span(kt, ke[0], ke[1], ke[2], d), 1},
        {"v", tensor_span(v, ke[0], ke[1], ke[2], dv), 1},
        {"k.scale", kt->dtype == MHA_I8 ? scale_span(kt, ke[0], ke[1], ke[2]) : (mha_span){0},
         kt->dtype == MHA_I8},
        {"v.scale", v->dtype == MHA_I8 ? scale_span(v, ke[0], ke[1], ke[2]) : (mha_span){0},
         v->dtype == MHA_I8},
        {"sinks", p->sinks ? mha_span_make(x->sinks, sizeof(float), one, zero, H) : (mha_span){0},
         p->sinks},
        /* the index arrays are read while out is written (absent ones: NULL, no span) */
        {"mha_extras.cu_seqlens_q", index_span(x->cu_seqlens_q, B + 1), 1},
        {"mha_extras.cu_seqlens_kv", index_span(x->cu_seqlens_kv, B + 1), 1},
        {"mha_extras.seq_lens_kv", index_span(x->seq_lens_kv, B), 1},
        {"mha_extras.block_table", index_span(x->block_table, B * p->max_blocks), 1},
    };
    mha_status st;
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++) {
        if (!in[i].present || (i == 0 && in_place)) continue;
        if ((st = mha_check_disjoint("out", &so, in[i].name, &in[i].s)) != MHA_OK) return st;
    }
    if (workspace && workspace_size > 0) {
        const mha_span sw = mha_span_make(workspace, 1, one, zero, (int64_t)workspace_size);
        if ((st = mha_check_disjoint("workspace", &sw, "out", &so)) != MHA_OK) return st;
        for (size_t i = 0; i < sizeof in / sizeof in[0]; i++)
            if (in[i].present &&
                (st = mha_check_disjoint("workspace", &sw, in[i].name, &in[i].s)) != MHA_OK)
                return st;
    }
    return MHA_OK;
}

/* The extras a problem asks for are present (x may be NULL when it asks for none). */
mha_status mha_check_extras(const mha_problem *p, const mha_extras *x) {
    if (p->sinks && !(x && x->sinks))
        return mha_set_error(MHA_EINVAL,
                             "problem.sinks = 1 but no sink logits given (mha_extras.sinks is "
                             "NULL: pass one float per query head, %lld)",
                             (long long)p->heads);
    /* +inf would take every weight and leave 0/0: the formula has no value there */
    for (int64_t h = 0; p->sinks && h < p->heads; h++)
        if (x->sinks[h] == INFINITY)
            return mha_set_error(MHA_EINVAL,
                                 "mha_extras.sinks[%lld] = inf: a sink logit must be finite or "
                                 "-inf (no sink)",
                                 (long long)h);
    return mha_check_layout(p, x);
}

mha_status mha_attend(const mha_kernel *k, const mha_problem *p, const mha_options *o,
                      const mha_tensor *q, const mha_tensor *kt, const mha_tensor *v,
                      const mha_tensor_mut *out, void *workspace, size_t workspace_size) {
    return mha_attend_ex(k, p, o, q, kt, v, NULL, out, workspace, workspace_size);
}

mha_status mha_attend_ex(const mha_kernel *k, const mha_problem *p, const mha_options *o,
                         const mha_tensor *q, const mha_tensor *kt, const mha_tensor *v,
                         const mha_extras *x, const mha_tensor_mut *out, void *workspace,
                         size_t workspace_size) {
    mha_status st;
    if (!k) return mha_set_error(MHA_EINVAL, "kernel is NULL");
    if ((st = mha_kernel_supported(k)) != MHA_OK) return st;
    if ((st = mha_problem_validate(p)) != MHA_OK) return st;
    if ((st = mha_check_options(o)) != MHA_OK) return st;
    if ((st = mha_kernel_takes(k, p)) != MHA_OK) return st;
    if (!out) return mha_set_error(MHA_EINVAL, "a tensor view is NULL");
    if ((st = mha_check_views(p, q, kt, v, out)) != MHA_OK) return st;
    if ((st = mha_check_extras(p, x)) != MHA_OK) return st;
    /* the kernels read only what the problem asks for */
    const int packed = p->layout == MHA_LAYOUT_PACKED, paged = p->layout == MHA_LAYOUT_PAGED;
    const mha_extras ex = {.sinks = p->sinks ? x->sinks : NULL,
                           .cu_seqlens_q = packed || paged ? x->cu_seqlens_q : NULL,
                           .cu_seqlens_kv = packed ? x->cu_seqlens_kv : NULL,
                           .seq_lens_kv = paged ? x->seq_lens_kv : NULL,
                           .block_table = paged ? x->block_table : NULL};
    const mha_options r = resolve_options(k, p, o);
    const int threads = mha_resolve_threads(&r);
    const size_t need = k->workspace(p, &r, threads);
    if (need == SIZE_MAX)
        return mha_set_error(MHA_ENOMEM, "workspace of kernel %s overflows size_t", k->name);
    if (need > 0 && (!workspace || workspace_size < need))
        return mha_set_error(MHA_EINVAL, "workspace of %zu bytes given, kernel %s needs %zu",
                             workspace ? workspace_size : 0, k->name, need);
    if (((uintptr_t)workspace & (MHA_WORKSPACE_ALIGN - 1)) != 0)
        return mha_set_error(MHA_EINVAL, "workspace %p is not %d-byte aligned", workspace,
                             MHA_WORKSPACE_ALIGN);
    /* Only the bytes the kernel uses count: a caller may pass a larger pool. */
    if ((st = check_aliasing(p, q, kt, v, &ex, out, workspace, need)) != MHA_OK) return st;
    return k->run(p, &r, threads, q, kt, v, &ex, out, workspace);
}
