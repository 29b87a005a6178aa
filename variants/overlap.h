/* overlap.h - whether two strided views share memory (overlap.c): the
 * aliasing rule of mha_attend and mha_forward is built on it; the tests
 * hold it to a byte-by-byte count. */
#ifndef MHA_VARIANTS_OVERLAP_H
#define MHA_VARIANTS_OVERLAP_H

#include <stddef.h>
#include <stdint.h>

/* The bytes a view touches: rows of `row` bytes at base + sum(i_k *
 * stride_k), 0 <= i_k < count_k, dims sorted by stride (overlap.c). */
typedef struct {
    uint64_t base, row;
    int nd;
    uint64_t count[3], stride[3];
} mha_span;
mha_span mha_span_make(const void *base, size_t elem, const int64_t count[3],
                       const int64_t stride[3], int64_t row_elems);
/* 1 if a and b share a byte, 0 if not, -1 if their address ranges meet and
 * one of them is not a layout the test resolves (rows out of order). */
int mha_span_overlap(const mha_span *a, const mha_span *b);

#endif
