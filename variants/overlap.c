/* overlap.c - whether two strided views share memory, for the aliasing rule
 * of mha_attend and mha_forward (mha.h: an output may not share memory with
 * an input it is read after, nor with the workspace). Exact for the layouts
 * callers build (a [B,H,N,d] tensor, rows of a fused QKV buffer, a strided
 * slice): such a view is "nested", its rows in index order are in address
 * order, and whether an address range meets one of its rows is a
 * mixed-radix decomposition. A view that is not nested (a stride of 0, rows
 * that interleave) and whose address range meets the other's "may" overlap:
 * the caller refuses it rather than guess. */
#include "internal.h"

/* Drops dims of count 1, sorts the rest by stride, largest first. */
mha_span mha_span_make(const void *base, size_t elem, const int64_t count[3],
                       const int64_t stride[3], int64_t row_elems) {
    mha_span s = {.base = (uintptr_t)base, .row = (uint64_t)row_elems * elem};
    for (int i = 0; i < 3; i++) {
        if (count[i] <= 1) continue;
        int j = s.nd++;
        const uint64_t st = (uint64_t)stride[i] * elem;
        for (; j > 0 && s.stride[j - 1] < st; j--) {
            s.stride[j] = s.stride[j - 1];
            s.count[j] = s.count[j - 1];
        }
        s.stride[j] = st;
        s.count[j] = (uint64_t)count[i];
    }
    return s;
}

/* One past the last byte (validated views: the offsets fit in size_t). */
static uint64_t span_end(const mha_span *s) {
    uint64_t e = s->base + s->row;
    for (int i = 0; i < s->nd; i++) e += (s->count[i] - 1) * s->stride[i];
    return e;
}

/* Each dim's stride clears everything inside it: rows never overlap each
 * other and come in address order. */
static int span_nested(const mha_span *s) {
    uint64_t inner = s->row;
    for (int i = s->nd - 1; i >= 0; i--) {
        if (s->stride[i] < inner) return 0;
        inner += (s->count[i] - 1) * s->stride[i];
    }
    return 1;
}

/* Offset (from base) of the last row starting at or before base + t, t >= 0:
 * for a nested view the greedy digit choice is that row. */
static uint64_t span_row_at_or_below(const mha_span *s, uint64_t t) {
    uint64_t off = 0;
    for (int i = 0; i < s->nd; i++) {
        uint64_t d = t / s->stride[i];
        if (d > s->count[i] - 1) d = s->count[i] - 1;
        off += d * s->stride[i];
        t -= d * s->stride[i];
    }
    return off;
}

static uint64_t span_rows(const mha_span *s) {
    uint64_t n = 1;
    for (int i = 0; i < s->nd; i++) n *= s->count[i];
    return n;
}

int mha_span_overlap(const mha_span *a, const mha_span *b) {
    if (a->row == 0 || b->row == 0) return 0;
    if (span_end(a) <= b->base || span_end(b) <= a->base) return 0;
    if (!span_nested(a) || !span_nested(b)) return -1;
    if (span_rows(a) > span_rows(b)) {
        const mha_span *t = a;
        a = b;
        b = t;
    }
    /* Walk a's rows (fewer) in address order; each meets b iff b's last row
     * starting before the end of a's row reaches into it. */
    const uint64_t b_end = span_end(b);
    uint64_t idx[3] = {0, 0, 0};
    for (;;) {
        uint64_t x = a->base;
        for (int i = 0; i < a->nd; i++) x += idx[i] * a->stride[i];
        if (x >= b_end) return 0; /* a's rows ascend: none further can meet b */
        const uint64_t last = x + a->row - 1;
        if (last >= b->base) {
            const uint64_t y = b->base + span_row_at_or_below(b, last - b->base);
            if (y + b->row > x) return 1;
        }
        int i = a->nd - 1;
        for (; i >= 0; i--) {
            if (++idx[i] < a->count[i]) break;
            idx[i] = 0;
        }
        if (i < 0) return 0;
    }
}
