/* vec.h - the vector layer of the ISA this translation unit is built for
 * (meson names its header in MHA_VEC_HEADER), plus MHA_SYM naming from isa.h.
 * Each vec_<isa>.h defines VW (lanes), MHA_MR / MHA_NV (micro-tile) and the
 * same set of inline vector functions. */
#ifndef MHA_VEC_H
#define MHA_VEC_H
#include "isa.h"
#include MHA_VEC_HEADER
#define MHA_NR (MHA_NV * VW) /* micro-tile columns */
#endif
