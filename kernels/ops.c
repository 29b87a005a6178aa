/* ops.c - this ISA's row of the ops table (kernels/ops.h), compiled once per
 * ISA like the micro-kernels it points to. A level that compiles only its own
 * files (meson's isa_own_sources, e.g. avx512bf16) gets MHA_ISA_BASE_SUFFIX:
 * its fp32 micro-kernels are those of that base level (same vector width);
 * one without peak.c (amx) gets MHA_ISA_PROBE_SUFFIX: its machine probes
 * are that level's (its bf16 linear layer is its own, gemm_amx.c). */
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
OPS_FROM_BASE(vsoftcap_array)
OPS_FROM_BASE(narrow_array)
OPS_FROM_BASE(exp_peak_loop)
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
#endif
#undef PROBE_FROM_BASE
#else
#define PROBE_SYM(name) MHA_SYM(name)
#endif

#ifdef __AMX_TILE__
#include "tile_check.h"
#endif

/* This level's compute units (ops.h's mha_unit), one row each. The FMA's
 * nominal is 2 pipes x lanes x 2 FLOP a cycle (the scalar loop's mulss +
 * addss pairs count the same); the tiles' is 16x16x32 multiply-adds every
 * 16 cycles (../shared/AMX.md). vdpbf16ps and exp state none: cores differ
 * (Zen 4 splits 512-bit operations, Zen 5 does not). */
#define HALF_DTYPES (MHA_UNIT_DTYPE(MHA_BF16) | MHA_UNIT_DTYPE(MHA_F16))
static const mha_unit units[] = {
    {.name = "fma",
     .serves = "fp32 FLOPs",
     .dtypes = MHA_UNIT_DTYPE(MHA_F32),
     .work = "FLOP",
     .loop = PROBE_SYM(fma_peak_loop),
     .nominal_per_cycle = 4.0 * VW,
     .context_key = "mha_peak_gflops_"},
#ifdef __AVX512BF16__
    {.name = "vdpbf16ps",
     .serves = "bf16/fp16 FLOPs",
     .dtypes = HALF_DTYPES,
     .work = "FLOP",
     .loop = PROBE_SYM(bf16_peak_loop),
     .context_key = "mha_peak_gflops_bf16_"},
#endif
#ifdef __AMX_TILE__
    {.name = "tdpbf16ps",
     .serves = "bf16/fp16 FLOPs",
     .dtypes = HALF_DTYPES,
     .work = "FLOP",
     .loop = MHA_SYM(tile_peak_loop),
     .nominal_per_cycle = 2.0 * 16 * 16 * 32 / 16,
     .context_key = "mha_peak_gflops_tile_"},
#endif
    {.name = "exp",
     .serves = "exponentials (softmax)",
     .dtypes = 0,
     .work = "exp",
     .loop = OPS_SYM(exp_peak_loop),
     .context_key = "mha_peak_gexps_"},
};
#undef HALF_DTYPES
_Static_assert(sizeof units / sizeof units[0] <= MHA_UNITS_MAX, "raise ops.h's MHA_UNITS_MAX");

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
    .vsoftcap_array = OPS_SYM(vsoftcap_array),
    .narrow_array = OPS_SYM(narrow_array),
    .units = units,
    .nunits = (int)(sizeof units / sizeof units[0]),
    .probe_loop = PROBE_SYM(probe_loop),
    .read_sum = PROBE_SYM(read_sum),
#ifdef __AVX512BF16__ /* gemm_bf16.c, or at the amx level gemm_amx.c (the tiles) */
    .linear_half = MHA_SYM(linear_half),
    .linear_half_pack_bytes = MHA_SYM(linear_half_pack_bytes),
#else
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
