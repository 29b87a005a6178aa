/* ops.c - this ISA's row of the ops table (kernels/ops.h), compiled once per
 * ISA like the micro-kernels it points to. */
#include "ops.h"

#include "peak.h"
#include "ukernels.h"

const mha_isa_ops MHA_SYM(ops) = {
    .isa = MHA_ISA_THIS,
    .lanes = VW,
    .tile_rows = MHA_MR,
    .tile_width = MHA_NR,
    .linear = MHA_SYM(linear),
    .linear_pack_floats = MHA_SYM(linear_pack_floats),
    .softmax_columns = MHA_SYM(softmax_columns),
    .pack_transpose = MHA_SYM(pack_transpose),
    .scores_exp = MHA_SYM(scores_exp),
    .vexp_array = MHA_SYM(vexp_array),
    .vexp2_array = MHA_SYM(vexp2_array),
    .fma_peak_loop = MHA_SYM(fma_peak_loop),
    .read_sum = MHA_SYM(read_sum),
};
