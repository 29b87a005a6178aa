/* vec_amx.h - the vector layer of the amx level: AVX512BF16's, unchanged
 * (the tiles are reached through kernels/tile.h, not through vectors). */
#ifndef MHA_VEC_AMX_H
#define MHA_VEC_AMX_H
#include "vec_avx512bf16.h"
#endif
