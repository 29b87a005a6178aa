/* ops.c - this ISA's row of the ops table (kernels/ops.h), compiled once per
 * ISA like the micro-kernels it points to. A level that compiles only its own
 * files (meson's isa_own_sources, e.g. avx512bf16) gets MHA_ISA_BASE_SUFFIX:
 * its fp32 micro-kernels are those of that base level (same vector width);
 * one without peak.c and gemm_bf16.c (amx) gets MHA_ISA_PROBE_SUFFIX: its
 * machine probes and bf16 linear layer are that level's. */
#include "ops.h"

#include "peak.h"
#include "ukernels.h"

#ifdef MHA_ISA_BASE_SUFFIX
#define OPS_SYM(name) MHA_CAT(MHA_CAT(mha_, name), MHA_ISA_BASE_SUFFIX)
#define OPS_FROM_BASE(name) extern __typeof__(MHA_SYM(name)) OPS_SYM(name);
OPS_FROM_BASE(linear)
OPS_FROM_BASE(linear_pack_floats)
OPS_FROM_BASE(softmax_columns)
OPS_FROM_BASE(pack_transpose)
OPS_FROM_BASE(scores_exp)
OPS_FROM_BASE(vexp_array)
OPS_FROM_BASE(vexp2_array)
#undef OPS_FROM_BASE
#else
#define OPS_SYM(name) MHA_SYM(name)
#endif

#ifdef MHA_ISA_PROBE_SUFFIX
#define PROBE_SYM(name) MHA_CAT(MHA_CAT(mha_, name), MHA_ISA_PROBE_SUFFIX)
#define PROBE_FROM_BASE(name) extern __typeof__(MHA_SYM(name)) PROBE_SYM(name);
PROBE_FROM_BASE(fma_peak_loop)
PROBE_FROM_BASE(probe_loop)
PROBE_FROM_BASE(read_sum)
#ifdef __AVX512BF16__
PROBE_FROM_BASE(bf16_peak_loop)
PROBE_FROM_BASE(linear_half)
PROBE_FROM_BASE(linear_half_pack_bytes)
#endif
#undef PROBE_FROM_BASE
#else
#define PROBE_SYM(name) MHA_SYM(name)
#endif

#ifdef __AMX_TILE__
#include "tile_check.h"
#endif

const mha_isa_ops MHA_SYM(ops) = {
    .isa = MHA_ISA_THIS,
    .lanes = VW,
    .tile_rows = MHA_MR,
    .tile_width = MHA_NR,
    .linear = OPS_SYM(linear),
    .linear_pack_floats = OPS_SYM(linear_pack_floats),
    .softmax_columns = OPS_SYM(softmax_columns),
    .pack_transpose = OPS_SYM(pack_transpose),
    .scores_exp = OPS_SYM(scores_exp),
    .vexp_array = OPS_SYM(vexp_array),
    .vexp2_array = OPS_SYM(vexp2_array),
    .fma_peak_loop = PROBE_SYM(fma_peak_loop),
    .probe_loop = PROBE_SYM(probe_loop),
    .read_sum = PROBE_SYM(read_sum),
#ifdef __AVX512BF16__
    .bf16_peak_loop = PROBE_SYM(bf16_peak_loop),
    .linear_half = PROBE_SYM(linear_half),
    .linear_half_pack_bytes = PROBE_SYM(linear_half_pack_bytes),
#else
    .bf16_peak_loop = NULL,
    .linear_half = NULL,
    .linear_half_pack_bytes = NULL,
#endif
#ifdef __AMX_TILE__
    .tile_selfcheck = MHA_SYM(tile_selfcheck),
    .tile_compare = MHA_SYM(tile_compare),
#else
    .tile_selfcheck = NULL,
    .tile_compare = NULL,
#endif
};
