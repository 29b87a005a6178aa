/* cachemodel.h - the machine's caches as the kernels need them: hwloc's
 * sizes (cpuinfo.c) and the facts a kernel draws a line with (cachemodel.c:
 * where decode's K/V stream sits against the L3, the GEMM micro-tile's
 * width). Below the selection layer (select.h includes it): a kernel that
 * needs a cache fact asks here, never mha_select's machinery (issue 25). */
#ifndef MHA_VARIANTS_CACHEMODEL_H
#define MHA_VARIANTS_CACHEMODEL_H

#include <stdint.h>

#include "mha.h"

/* Per-core L1d and L2 and the L3 object in bytes, as hwloc reports them (raw,
 * 0 = unknown) and clamped to plausible ranges (cpuinfo.c says why). hwloc is
 * queried once per process; the cache model and `mhabench info` read this. */
typedef struct {
    uint64_t l1d, l2, l3;             /* clamped */
    uint64_t l1d_raw, l2_raw, l3_raw; /* as reported, 0 = unknown */
} mha_caches;
void mha_caches_get(mha_caches *c);
/* The K and V a decode call streams (bytes at their storage width, every
 * (batch, KV head)) as a multiple of the L3: where decode.c's one-row
 * prefetch and decode_bf16.c's one-row block length draw their lines. */
double mha_decode_cache_per_l3(const mha_problem *p);
/* Columns of the ISA's GEMM micro-tile (MHA_NR in kernels/vec_*.h): block_q
 * is efficient as a multiple of it. */
int mha_tile_width(mha_isa isa);

#endif
