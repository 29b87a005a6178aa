/* isa.h - naming for code compiled once per instruction set. meson compiles
 * each file of isa_sources once per entry of its isa_flags dict, defining
 * MHA_ISA_SUFFIX (__avx512), MHA_ISA_THIS (MHA_ISA_AVX512) and MHA_VEC_HEADER
 * ("vec_avx512.h"); MHA_SYM(x) gives x's per-ISA symbol. Nothing here names
 * an ISA: adding one touches none of the shared headers. */
#ifndef MHA_KERNELS_ISA_H
#define MHA_KERNELS_ISA_H

#define MHA_CAT_(a, b) a##b
#define MHA_CAT(a, b) MHA_CAT_(a, b)

#if !defined(MHA_ISA_SUFFIX) || !defined(MHA_ISA_THIS) || !defined(MHA_VEC_HEADER)
#error "per-ISA files need MHA_ISA_SUFFIX, MHA_ISA_THIS and MHA_VEC_HEADER (meson's isa_flags)"
#endif

/* mha_flash__avx512 and friends. */
#define MHA_SYM(name) MHA_CAT(MHA_CAT(mha_, name), MHA_ISA_SUFFIX)

#endif
