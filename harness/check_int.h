/* check_int.h - what the parts of the verification engine share (check.c:
 * the tolerance, running and judging a kernel; check_cases.c: the case list;
 * check_data.c: a case's inputs and oracle): the memory layouts' strides and
 * the sentinel an unwritten output element holds. Internal to them. */
#ifndef MHA_HARNESS_CHECK_INT_H
#define MHA_HARNESS_CHECK_INT_H

#include <stdint.h>

#include "check.h"

/* Quiet NaNs nobody computes (a converted NaN is 0x7fc0 / 0x7e00), one per
 * output width: unwritten elements and stray writes show in any dtype. */
static const uint32_t SENTINEL = 0x7fc5a5a5u;
static const uint16_t SENTINEL_BF16 = 0x7fc5u, SENTINEL_F16 = 0x7e5au;

/* Element strides of a [B, H, N, d] tensor in a LAYOUT_* and its span. */
typedef struct {
    int64_t sb, sh, sn, span;
} strides;
strides layout_strides(int layout, int64_t B, int64_t H, int64_t N, int64_t d);

#endif
