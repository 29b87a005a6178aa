/* isa.h - naming for code compiled once per instruction set.
 * Exactly one of MHA_BUILD_SCALAR / MHA_BUILD_AVX2 / MHA_BUILD_AVX512 is defined by
 * meson for files in isa_sources; MHA_SYM(x) gives x's per-ISA symbol. */
#ifndef MHA_KERNELS_ISA_H
#define MHA_KERNELS_ISA_H

#define MHA_CAT_(a, b) a##b
#define MHA_CAT(a, b) MHA_CAT_(a, b)

#if defined(MHA_BUILD_AVX512)
#define MHA_ISA_SUFFIX __avx512
#define MHA_ISA_THIS MHA_ISA_AVX512
#elif defined(MHA_BUILD_AVX2)
#define MHA_ISA_SUFFIX __avx2
#define MHA_ISA_THIS MHA_ISA_AVX2
#elif defined(MHA_BUILD_SCALAR)
#define MHA_ISA_SUFFIX __scalar
#define MHA_ISA_THIS MHA_ISA_SCALAR
#else
#error "compile per-ISA files with -DMHA_BUILD_SCALAR, -DMHA_BUILD_AVX2 or -DMHA_BUILD_AVX512"
#endif

/* mha_flash__avx512 and friends. */
#define MHA_SYM(name) MHA_CAT(MHA_CAT(mha_, name), MHA_ISA_SUFFIX)

#endif
