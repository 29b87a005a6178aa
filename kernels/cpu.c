/* cpu.c - run-time ISA detection (cpuid + xgetbv) and the MHA_ISA cap.
 * Built without SIMD flags: it must run on any x86-64 CPU. An ISA counts only
 * when the CPU has the instructions AND the OS saves their register state;
 * AMX also needs the OS's permission for this process (arch_prctl) and a
 * self-check of the tile products against the emulation (kernels/cpu.h). */
#include <cpuid.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cpu.h"
#include "mha.h"
#include "mha_isa_list.h"
#include "ops.h"

static uint64_t read_xcr0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

/* ---- AMX: the four steps of ../shared/AMX.md, then the self-check ------- */

#define ARCH_GET_XCOMP_PERM_ 0x1022
#define ARCH_REQ_XCOMP_PERM_ 0x1023
#define XFEATURE_XTILEDATA_ 18

int mha_amx_judge(const mha_amx_facts *f, char *why, size_t len) {
    const char *step = NULL;
    char buf[160];
    if (!((f->leaf7_edx >> 24) & 1))
        step = "CPUID.(7,0):EDX bit 24 (AMX-TILE) is clear";
    else if (!((f->leaf7_edx >> 22) & 1))
        step = "CPUID.(7,0):EDX bit 22 (AMX-BF16) is clear";
    else if (!f->osxsave)
        step = "CPUID.1:ECX bit 27 (OSXSAVE) is clear, XCR0 cannot be read";
    else if (((f->xcr0 >> 17) & 3) != 3) {
        snprintf(buf, sizeof buf,
                 "XCR0 = 0x%llx lacks bit 17 (XTILECFG) or 18 (XTILEDATA): the OS does not "
                 "enable the tile state",
                 (unsigned long long)f->xcr0);
        step = buf;
    } else if (f->max_leaf < 0x1d || f->palettes < 1)
        step = "CPUID leaf 0x1D reports no tile palette";
    else if (!f->perm_asked || f->perm_rc != 0) {
        snprintf(buf, sizeof buf,
                 "arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA) failed: %s (a small sigaltstack in "
                 "the process refuses it; Linux before 5.16 lacks it)",
                 f->perm_asked ? strerror(f->perm_errno) : "not asked");
        step = buf;
    } else if (!((f->perm_granted >> XFEATURE_XTILEDATA_) & 1)) {
        snprintf(buf, sizeof buf, "ARCH_GET_XCOMP_PERM = 0x%llx lacks bit 18 (XTILEDATA)",
                 (unsigned long long)f->perm_granted);
        step = buf;
    }
    if (step) {
        snprintf(why, len, "does not run here: %s", step);
        return 0;
    }
    if (len) why[0] = 0;
    return 1;
}

/* The facts in order; the permission is asked only once the CPU and the OS
 * state pass (it changes the process: signal stacks must then hold the tile
 * state). */
static void amx_gather(mha_amx_facts *f) {
    unsigned a, b, c, d;
    memset(f, 0, sizeof *f);
    f->max_leaf = __get_cpuid_max(0, NULL);
    if (__get_cpuid(1, &a, &b, &c, &d)) f->osxsave = (c >> 27) & 1;
    if (f->max_leaf >= 7 && __get_cpuid_count(7, 0, &a, &b, &c, &d)) f->leaf7_edx = d;
    if (f->osxsave) f->xcr0 = read_xcr0();
    if (f->max_leaf >= 0x1d && __get_cpuid_count(0x1d, 0, &a, &b, &c, &d)) f->palettes = a;
    char why[256];
    mha_amx_facts pre = *f;
    pre.perm_asked = 1, pre.perm_granted = 1ull << XFEATURE_XTILEDATA_;
    if (!mha_amx_judge(&pre, why, sizeof why)) return;
    f->perm_asked = 1;
    errno = 0;
    f->perm_rc = (int)syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM_, XFEATURE_XTILEDATA_);
    f->perm_errno = errno;
    unsigned long mask = 0;
    if (f->perm_rc == 0 && syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM_, &mask) == 0)
        f->perm_granted = mask;
}

static mha_isa detect_below_amx(void);

static pthread_once_t amx_once = PTHREAD_ONCE_INIT;
static int amx_runs;
static char amx_why[256];

static void amx_probe(void) {
    mha_amx_facts f;
    amx_gather(&f);
    if (!mha_amx_judge(&f, amx_why, sizeof amx_why)) return;
    if (detect_below_amx() != MHA_ISA_AVX512BF16) { /* the tile code uses AVX-512 too */
        snprintf(amx_why, sizeof amx_why,
                 "does not run here: the level below, avx512bf16, is not "
                 "detected");
        return;
    }
    const mha_isa_ops *ops = mha_ops_for(MHA_ISA_AMX);
    char why[200];
    if (!ops || !ops->tile_selfcheck) {
        snprintf(amx_why, sizeof amx_why, "does not run here: this build has no tile code");
        return;
    }
    if (!ops->tile_selfcheck(-1, why, sizeof why)) {
        snprintf(amx_why, sizeof amx_why, "does not run here: %s", why);
        return;
    }
    amx_runs = 1;
}

int mha_amx_status(const char **why) {
    pthread_once(&amx_once, amx_probe);
    if (why) *why = amx_runs ? "runs here" : amx_why;
    return amx_runs;
}

static mha_isa detect_below_amx(void) {
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

static mha_isa detect(void) {
    const mha_isa below = detect_below_amx();
    return below == MHA_ISA_AVX512BF16 && mha_amx_status(NULL) ? MHA_ISA_AMX : below;
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
