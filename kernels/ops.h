/* ops.h - what differs by instruction set, in one place: each per-ISA
 * library exports one const table (mha_ops__<isa>, kernels/ops.c compiled per
 * ISA) and mha_ops_for() finds it by level. Code outside the per-ISA files asks
 * this table; it never switches on the ISA or names a suffixed symbol. The
 * list of ISA levels itself comes from meson's isa_flags dict
 * (mha_isa_list.h, generated). */
#ifndef MHA_KERNELS_OPS_H
#define MHA_KERNELS_OPS_H
#include <stddef.h>
#include <stdint.h>

#include "mha.h"

/* A compute unit of a level, as one row of its table: the FMAs at every
 * level, the bf16 dot product (vdpbf16ps) from avx512bf16, the tiles
 * (tdpbf16ps) at amx, and the exponential that bounds a softmax at every
 * level. A level lists every unit its code may use, those it shares with
 * the levels below included. `mhabench info`, the result context and the
 * peak a row's pct_peak is held to (harness/mach_measure.c) read the rows
 * and name none, so a new unit is a row (kernels/ops.c) plus its loop. */
typedef struct {
    const char *name;   /* "fma", "vdpbf16ps", "tdpbf16ps", "exp" */
    const char *serves; /* what it serves, for people: "fp32 FLOPs", "exponentials (softmax)" */
    /* The row dtypes whose FLOPs it serves (a row of such a dtype may be
     * held to it), MHA_UNIT_DTYPE(t) per mha_dtype; 0 for a unit whose work
     * is not FLOPs (exp). */
    unsigned dtypes;
    const char *work; /* what its loop counts: "FLOP" or "exp" (rates in G<work>/s) */
    /* iters iterations on registers or an L1-resident buffer (the unit
     * alone); returns the work done, in `work`. iters <= 0 runs nothing
     * and returns 0. */
    double (*loop)(int64_t iters);
    /* Nominal work per cycle of one core, 0 where none is stated: times a
     * measured clock, the nominal rate its measured one is shown against. */
    double nominal_per_cycle;
    /* The result context's key for its measured rate, less the level's
     * name: "mha_peak_gflops_" + "avx512". */
    const char *context_key;
} mha_unit;
#define MHA_UNIT_DTYPE(t) (1u << (unsigned)(t))
#define MHA_UNITS_MAX 8 /* the most rows of one level (kernels/ops.c asserts it) */

typedef struct {
    mha_isa isa;
    int lanes;      /* floats per vector (VW) */
    int tile_rows;  /* micro-tile rows (MHA_MR) */
    int tile_width; /* micro-tile columns (MHA_NR = vectors x lanes) */
    /* The linear layer: Y[M,N] = X[M,K] W^T + bias (kernels/gemm.c), and the
     * floats of packing scratch it needs for N x K weights. */
    void (*linear)(int64_t M, int64_t N, int64_t K, const float *x, int64_t ldx, const float *w,
                   int64_t ldw, const float *bias, float *y, int64_t ldy, float *pack, int threads);
    size_t (*linear_pack_floats)(int64_t N, int64_t K);
    /* The typed linear layer of a bf16/fp16 layer (kernels/gemm_bf16.c):
     * X, W, bias and Y all of dtype t, fp32 sums, Y rounded to t; pack is
     * linear_half_pack_bytes(M, N, K, threads) bytes, 64-aligned. NULL at levels
     * without a bf16 dot product: the layer then widens to fp32 and uses
     * linear (variants/layer.c). */
    void (*linear_half)(int64_t M, int64_t N, int64_t K, mha_dtype t, const void *x, int64_t ldx,
                        const void *w, int64_t ldw, const void *bias, void *y, int64_t ldy,
                        void *pack, int threads);
    size_t (*linear_half_pack_bytes)(int64_t M, int64_t N, int64_t K, int threads);
    /* Micro-kernels other algorithms and the tests reach (kernels/ukernels.h). */
    void (*softmax_columns)(int64_t n, int64_t ncols, float *s, int64_t ld, float *m, float *l);
    void (*pack_transpose)(int64_t n, int64_t d, const float *src, int64_t ld, float scale,
                           float *dst, int64_t ldd);
    void (*scores_exp)(int64_t rows, int64_t ncols, int64_t kc, const float *a, int64_t a_rs,
                       const float *b, int64_t ldb, float *c, int64_t ldc, float *m, float *bsum,
                       float *alpha, int masked, int64_t t0, int64_t t1, float cap);
    void (*vexp_array)(const float *x, float *y, int64_t n);
    void (*vexp2_array)(const float *x, float *y, int64_t n);
    void (*vsoftcap_array)(const float *x, float *y, int64_t n, float c);
    void (*narrow_array)(const float *x, uint16_t *y, int64_t n, int bf16);
    /* This level's compute units (mha_unit above), nunits rows; the first
     * that serves fp32 is the FMA (mha_ops_unit). */
    const mha_unit *units;
    int nunits;
    /* Machine probes (kernels/peak.c): the interference probe (FMAs,
     * loads, adds and integer operations at once; returns FLOPs) and a sum
     * with the widest loads (read bandwidth). */
    double (*probe_loop)(int64_t iters);
    uint64_t (*read_sum)(const uint64_t *p, size_t n);
    /* The tile self-check (kernels/tile_check.c): tile products on the real
     * instructions compared bit for bit with the emulation; 1 if they agree,
     * else 0 and why says where. flip >= 0 flips that bit of the real
     * results first (a test's way to see a mismatch; -1 otherwise). Needs
     * the tile permission (kernels/cpu.c asks first). NULL below amx. */
    int (*tile_selfcheck)(int flip, char *why, size_t len);
    /* count seeded random tile products, real vs emulated (kernels/
     * tile_check.h; `mhabench info --tiles N`). NULL below amx. */
    long (*tile_compare)(uint64_t seed, long count, long *differ, char *why, size_t len);
} mha_isa_ops;

/* The table of ISA level isa, or NULL if none was built (or isa is out of
 * range). Every level from scalar to MHA_ISA_COUNT - 1 is built. */
const mha_isa_ops *mha_ops_for(mha_isa isa);

/* The first unit of ops that serves row dtype t, or NULL: for fp32 the FMA,
 * at every level (also the loop the interference evidence and the all-core
 * ceiling run). */
static inline const mha_unit *mha_ops_unit(const mha_isa_ops *ops, mha_dtype t) {
    for (int i = 0; ops && i < ops->nunits; i++)
        if (ops->units[i].dtypes & MHA_UNIT_DTYPE(t)) return &ops->units[i];
    return NULL;
}

#endif
