/* vec.h - picks the vector layer of the ISA this translation unit is built
 * for (meson defines MHA_BUILD_<NAME>), plus MHA_SYM naming from isa.h. */
#ifndef MHA_VEC_H
#define MHA_VEC_H
#include "isa.h"
#if defined(MHA_BUILD_AVX512)
#include "vec_avx512.h"
#elif defined(MHA_BUILD_AVX2)
#include "vec_avx2.h"
#elif defined(MHA_BUILD_SCALAR)
#include "vec_scalar.h"
#else
#error "vec.h needs MHA_BUILD_SCALAR, MHA_BUILD_AVX2 or MHA_BUILD_AVX512"
#endif
#define MHA_NR (MHA_NV * VW) /* micro-tile columns */
#endif
