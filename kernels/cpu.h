/* cpu.h - what kernels/cpu.c tells beyond mha.h's ISA levels: whether the
 * AMX tiles run here and, when not, which step of their detection failed. */
#ifndef MHA_KERNELS_CPU_H
#define MHA_KERNELS_CPU_H
#include <stddef.h>
#include <stdint.h>

/* 1 if the tiles run here (CPUID, XCR0, a palette, the OS's permission for
 * this process and the self-check all passed; asked once per process, the
 * permission included), else 0 with *why (if why) "does not run here: <the
 * step>". The amx level is detected only when this is 1 (and AVX512BF16 is). */
int mha_amx_status(const char **why);

/* The facts detection judges, in its order (gathered by cpu.c; tests feed
 * their own). */
typedef struct {
    uint32_t leaf7_edx; /* CPUID.(7,0):EDX (bit 24 AMX-TILE, bit 22 AMX-BF16) */
    int osxsave;        /* CPUID.1:ECX bit 27: XGETBV may be used */
    uint64_t xcr0;      /* bits 17 (XTILECFG) and 18 (XTILEDATA) */
    uint32_t max_leaf;  /* CPUID.0:EAX */
    uint32_t palettes;  /* CPUID.(0x1D,0):EAX, the highest palette */
    int perm_asked;     /* arch_prctl(ARCH_REQ_XCOMP_PERM, 18) was called */
    int perm_rc, perm_errno;
    uint64_t perm_granted; /* ARCH_GET_XCOMP_PERM's mask (bit 18) */
} mha_amx_facts;
/* 1 if the facts pass, else 0 with the first failing step written to why. */
int mha_amx_judge(const mha_amx_facts *f, char *why, size_t len);

/* The self-check built against the emulation (kernels/tile_check.c with
 * MHA_TILE_EMU): ops.h's tile_selfcheck, runnable anywhere (tests). */
int mha_tile_selfcheck__amxemu(int flip, char *why, size_t len);
long mha_tile_compare__amxemu(uint64_t seed, long count, long *differ, char *why, size_t len);
/* The tiles' unit loop built against the emulation (kernels/tile_peak.c
 * with MHA_TILE_EMU): the amx row "tdpbf16ps"'s loop, runnable anywhere
 * (tests: its FLOP count and its configure/release). */
double mha_tile_peak_loop__amxemu(int64_t iters);

#endif
