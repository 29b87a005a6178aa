/* cpu.c - run-time ISA detection (cpuid + xgetbv) and the MHA_ISA cap.
 * Built without SIMD flags: it must run on any x86-64 CPU. An ISA counts only
 * when the CPU has the instructions AND the OS saves their register state. */
#include <cpuid.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "mha.h"
#include "mha_isa_list.h"
#include "ops.h"

static uint64_t read_xcr0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static mha_isa detect(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return MHA_ISA_SCALAR;
    const int has_osxsave = (c >> 27) & 1, has_avx = (c >> 28) & 1, has_fma = (c >> 12) & 1;
    if (!has_osxsave || !has_avx || !has_fma) return MHA_ISA_SCALAR;
    const uint64_t xcr0 = read_xcr0();
    if ((xcr0 & 0x6) != 0x6) return MHA_ISA_SCALAR; /* XMM and YMM state */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return MHA_ISA_SCALAR;
    const unsigned max_subleaf7 = a;
    const int has_avx2 = (b >> 5) & 1;
    if (!has_avx2) return MHA_ISA_SCALAR;
    /* AVX-512 F, DQ, BW, VL and the opmask / ZMM_Hi256 / Hi16_ZMM state. */
    const int has_512 = ((b >> 16) & 1) && ((b >> 17) & 1) && ((b >> 30) & 1) && ((b >> 31) & 1);
    if (!has_512 || (xcr0 & 0xe0) != 0xe0) return MHA_ISA_AVX2;
    /* AVX512_BF16: leaf 7 subleaf 1, EAX bit 5 (no new register state). */
    if (max_subleaf7 >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d) && ((a >> 5) & 1))
        return MHA_ISA_AVX512BF16;
    return MHA_ISA_AVX512;
}

/* The levels meson builds (its isa_flags dict, in enum order): their names
 * and their ops tables (kernels/ops.h). */
#define MHA_ISA_LEVEL(isa) #isa,
static const char *const isa_names[] = {MHA_ISA_LIST};
#undef MHA_ISA_LEVEL
_Static_assert(sizeof isa_names / sizeof isa_names[0] == MHA_ISA_COUNT,
               "meson's isa_flags and mha.h's mha_isa enum must list the same ISA levels");
#define MHA_ISA_LEVEL(isa) extern const mha_isa_ops mha_ops__##isa;
MHA_ISA_LIST
#undef MHA_ISA_LEVEL
#define MHA_ISA_LEVEL(isa) &mha_ops__##isa,
static const mha_isa_ops *const isa_ops[] = {MHA_ISA_LIST};
#undef MHA_ISA_LEVEL

const mha_isa_ops *mha_ops_for(mha_isa isa) {
    return (unsigned)isa < MHA_ISA_COUNT ? isa_ops[isa] : NULL;
}

const char *mha_isa_name(mha_isa isa) {
    return (unsigned)isa < MHA_ISA_COUNT ? isa_names[isa] : "unknown";
}

mha_status mha_isa_parse(const char *s, mha_isa *out) {
    if (!s) return MHA_EINVAL;
    for (int i = 0; i < MHA_ISA_COUNT; i++) {
        if (strcasecmp(s, isa_names[i]) == 0) {
            *out = (mha_isa)i;
            return MHA_OK;
        }
    }
    return MHA_EINVAL;
}

static int cached_detected = -1;

mha_isa mha_isa_detected(void) {
    int v = __atomic_load_n(&cached_detected, __ATOMIC_ACQUIRE);
    if (v < 0) {
        v = (int)detect();
        __atomic_store_n(&cached_detected, v, __ATOMIC_RELEASE);
    }
    return (mha_isa)v;
}

/* The cap is read on every call (a getenv, no allocation or locking), so a
 * program or test that changes MHA_ISA sees the change. */
static mha_isa resolve_active(mha_status *st) {
    mha_isa act = mha_isa_detected();
    *st = MHA_OK;
    const char *env = getenv("MHA_ISA");
    if (env && *env) {
        mha_isa cap;
        if (mha_isa_parse(env, &cap) == MHA_OK) {
            if (cap < act) act = cap;
        } else {
            act = MHA_ISA_SCALAR;
            *st = MHA_EINVAL;
        }
    }
    return act;
}

mha_isa mha_isa_active(void) {
    mha_status st;
    return resolve_active(&st);
}

mha_status mha_isa_env_status(void) {
    mha_status st;
    (void)resolve_active(&st);
    return st;
}
