/* sizes.h - size arithmetic every layer uses (workspace layouts in kernels/
 * and variants/): a*b and a+b in size_t saturating to SIZE_MAX on overflow,
 * and rounding up to the 64-byte lines buffers are carved on. Below
 * variants/ so that nothing under kernels/ includes it (issue 25). */
#ifndef MHA_KERNELS_SIZES_H
#define MHA_KERNELS_SIZES_H

#include <stddef.h>
#include <stdint.h>

static inline size_t mha_mul_sz(size_t a, size_t b) {
    size_t r;
    return __builtin_mul_overflow(a, b, &r) ? SIZE_MAX : r;
}
static inline size_t mha_add_sz(size_t a, size_t b) {
    size_t r;
    return __builtin_add_overflow(a, b, &r) ? SIZE_MAX : r;
}
/* Rounds up to a multiple of 64 bytes (saturating). */
static inline size_t mha_align64(size_t n) {
    return n > SIZE_MAX - 63 ? SIZE_MAX : (n + 63) & ~(size_t)63;
}

#endif
