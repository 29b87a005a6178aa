/* peak.c - the FP32 multiply-add peak loop, compiled once per ISA (see
 * isa_sources in meson.build). harness/mach_info.c times it to report each ISA's
 * measured single-thread peak next to the nominal 2 pipes x lanes x 2 FLOP.
 *
 * The loop is inline asm so the compiler can neither fold nor drop it, and the
 * instruction mix is exactly what we count. Each accumulator is one dependency
 * chain acc = acc * 1 + 2^-24 starting at 1: 1 + 2^-24 is a tie that rounds
 * back to 1, so the values stay exactly 1 (normal, no denormal slow path, no
 * overflow) however long the loop runs, while the hardware does the full work. */
#include <stdint.h>

#include "peak.h"
#include "vec.h" /* VW: the loop below is chosen by vector width, not by ISA name */

/* Where the reduced accumulators go, so the chains' results are consumed. */
static volatile float peak_sink;

/* The accumulators are pinned to named registers (declared clobbered) rather
 * than passed as operands: GCC allows at most 30 asm operands and each "+"
 * operand counts twice. */
#define STR_(x) #x
#define STR(x) STR_(x)

#if VW == 16

/* 16 chains of 512-bit FMAs in zmm0-15, m and c in zmm16/17: 2 pipes x
 * 4-cycle latency needs >= 8 in flight; 16 covers a 5-6 cycle latency
 * (Intel server parts) and keeps the loop branch a small share. */
#define PEAK_ACCS 16
#define PEAK_LANES 16
#define FMA1(i) "vfmadd213ps %%zmm17, %%zmm16, %%zmm" STR(i) "\n\t"
#define MOV1(i) "vmovaps %%zmm0, %%zmm" STR(i) "\n\t"
#define ADD1(d, s) "vaddps %%zmm" STR(s) ", %%zmm" STR(d) ", %%zmm" STR(d) "\n\t"

double MHA_SYM(fma_peak_loop)(int64_t iters) {
    if (iters <= 0) return 0.0;
    const float one = 1.0f, c = 0x1p-24f;
    float out[16];
    int64_t n = iters;
    __asm__ __volatile__(
        "vbroadcastss %[one], %%zmm0\n\t"
        "vbroadcastss %[one], %%zmm16\n\t"
        "vbroadcastss %[c], %%zmm17\n\t" MOV1(1) MOV1(2) MOV1(3) MOV1(4) MOV1(5) MOV1(6) MOV1(7)
            MOV1(8) MOV1(9) MOV1(10) MOV1(11) MOV1(12) MOV1(13) MOV1(14)
                MOV1(15) ".p2align 5\n"
                         "1:\n\t" FMA1(0) FMA1(1) FMA1(2) FMA1(3) FMA1(4) FMA1(5) FMA1(6) FMA1(7)
                             FMA1(8) FMA1(9) FMA1(10) FMA1(11) FMA1(12) FMA1(13) FMA1(14)
                                 FMA1(15) "dec %[n]\n\t"
                                          "jnz 1b\n\t" ADD1(0, 8) ADD1(1, 9) ADD1(2, 10) ADD1(3, 11)
                                              ADD1(4, 12) ADD1(5, 13) ADD1(6, 14) ADD1(7, 15)
                                                  ADD1(0, 4) ADD1(1, 5) ADD1(2, 6) ADD1(3, 7)
                                                      ADD1(0, 2) ADD1(1, 3)
                                                          ADD1(0, 1) "vmovups %%zmm0, %[out]\n\t"
                                                                     "vzeroupper\n\t"
        : [n] "+r"(n), [out] "=m"(out)
        : [one] "m"(one), [c] "m"(c)
        : "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",
          "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17");
    float s = 0.0f;
    for (int i = 0; i < 16; i++) s += out[i];
    peak_sink = s;
    return (double)iters * PEAK_ACCS * PEAK_LANES * 2.0;
}

#elif VW == 8

/* 12 chains of 256-bit FMAs in ymm0-11 (>= 2 pipes x 4-5 cycles), m and c in
 * ymm12/13. */
#define PEAK_ACCS 12
#define PEAK_LANES 8
#define FMA1(i) "vfmadd213ps %%ymm13, %%ymm12, %%ymm" STR(i) "\n\t"
#define MOV1(i) "vmovaps %%ymm0, %%ymm" STR(i) "\n\t"
#define ADD1(d, s) "vaddps %%ymm" STR(s) ", %%ymm" STR(d) ", %%ymm" STR(d) "\n\t"

double MHA_SYM(fma_peak_loop)(int64_t iters) {
    if (iters <= 0) return 0.0;
    const float one = 1.0f, c = 0x1p-24f;
    float out[8];
    int64_t n = iters;
    __asm__ __volatile__(
        "vbroadcastss %[one], %%ymm0\n\t"
        "vbroadcastss %[one], %%ymm12\n\t"
        "vbroadcastss %[c], %%ymm13\n\t" MOV1(1) MOV1(2) MOV1(3) MOV1(4) MOV1(5) MOV1(6) MOV1(7)
            MOV1(8) MOV1(9) MOV1(10)
                MOV1(11) ".p2align 5\n"
                         "1:\n\t" FMA1(0) FMA1(1) FMA1(2) FMA1(3) FMA1(4) FMA1(5) FMA1(6) FMA1(7)
                             FMA1(8) FMA1(9) FMA1(10)
                                 FMA1(11) "dec %[n]\n\t"
                                          "jnz 1b\n\t" ADD1(0, 6) ADD1(1, 7) ADD1(2, 8) ADD1(3, 9)
                                              ADD1(4, 10) ADD1(5, 11) ADD1(0, 3) ADD1(1, 4)
                                                  ADD1(2, 5) ADD1(0, 1)
                                                      ADD1(0, 2) "vmovups %%ymm0, %[out]\n\t"
                                                                 "vzeroupper\n\t"
        : [n] "+r"(n), [out] "=m"(out)
        : [one] "m"(one), [c] "m"(c)
        : "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",
          "xmm10", "xmm11", "xmm12", "xmm13");
    float s = 0.0f;
    for (int i = 0; i < 8; i++) s += out[i];
    peak_sink = s;
    return (double)iters * PEAK_ACCS * PEAK_LANES * 2.0;
}

#else

/* Baseline x86-64 has no FMA instruction: each chain is mulss then addss in
 * xmm0-13, m and c in xmm14/15. A chain's latency is mul + add (about 3 + 3
 * cycles) and the core issues two of each per cycle, so >= 12 chains keep
 * both pairs of pipes busy. */
#define PEAK_ACCS 14
#define MULADD1(i)                                                                                 \
    "mulss %%xmm14, %%xmm" STR(i) "\n\t"                                                           \
                                  "addss %%xmm15, %%xmm" STR(i) "\n\t"
#define MOV1(i) "movaps %%xmm0, %%xmm" STR(i) "\n\t"
#define ADD1(d, s) "addss %%xmm" STR(s) ", %%xmm" STR(d) "\n\t"

double MHA_SYM(fma_peak_loop)(int64_t iters) {
    if (iters <= 0) return 0.0;
    const float one = 1.0f, c = 0x1p-24f;
    float out;
    int64_t n = iters;
    __asm__ __volatile__(
        "movss %[one], %%xmm0\n\t"
        "movss %[one], %%xmm14\n\t"
        "movss %[c], %%xmm15\n\t" MOV1(1) MOV1(2) MOV1(3) MOV1(4) MOV1(5) MOV1(6) MOV1(7) MOV1(8)
            MOV1(9) MOV1(10) MOV1(11) MOV1(12)
                MOV1(13) ".p2align 5\n"
                         "1:\n\t" MULADD1(0) MULADD1(1) MULADD1(2) MULADD1(3) MULADD1(4) MULADD1(5)
                             MULADD1(6) MULADD1(7) MULADD1(8) MULADD1(9) MULADD1(10) MULADD1(11)
                                 MULADD1(12) MULADD1(
                                     13) "dec %[n]\n\t"
                                         "jnz 1b\n\t" ADD1(0, 7) ADD1(1, 8) ADD1(2, 9) ADD1(3, 10)
                                             ADD1(4, 11) ADD1(5, 12) ADD1(6, 13) ADD1(0, 4)
                                                 ADD1(1, 5) ADD1(2, 6) ADD1(0, 3) ADD1(1, 2)
                                                     ADD1(0, 1) "movss %%xmm0, %[out]\n\t"
        : [n] "+r"(n), [out] "=m"(out)
        : [one] "m"(one), [c] "m"(c)
        : "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",
          "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15");
    peak_sink = out;
    return (double)iters * PEAK_ACCS * 2.0;
}

#endif

/* The interference probe (harness/meas_core.c): unlike the peak loop above,
 * which keeps only the FMA pipes busy, it keeps most of a core's shared
 * resources busy at once, so that a competitor for any of them (the host's
 * other hardware thread on the same core, above all) slows it: per iteration
 * 8 FMA chains (the FMA pipes, 4 cycles), 6 add chains fed by loads from a
 * 192-byte buffer that stays in L1 (the add pipes and load ports) and 4
 * integer operations, about 20 operations in 4 cycles, near the dispatch
 * width. Measured on the Zen 4 VM (README, "Interference evidence"): against
 * the FMA-only loop it caught 5x as many slow kernel samples at the same
 * threshold. 256-bit operations at every vector level (AVX-512 builds
 * included): twice the instructions of 512-bit ones per FLOP, so more of the
 * front end is exercised. The values stay exact as in the peak loop (acc * 1
 * + 2^-24 rounds back to 1; the adds add zeros). */
static const float probe_zeros[48] __attribute__((aligned(64)));

#if VW >= 8

#define PFMA(i) "vfmadd213ps %%ymm15, %%ymm14, %%ymm" STR(i) "\n\t"
#define PADD(j, r) "vaddps " STR(j) "(%[p]), %%ymm" STR(r) ", %%ymm" STR(r) "\n\t"
#define PMOV(i) "vmovaps %%ymm14, %%ymm" STR(i) "\n\t"
#define PZERO(i) "vxorps %%ymm" STR(i) ", %%ymm" STR(i) ", %%ymm" STR(i) "\n\t"

double MHA_SYM(probe_loop)(int64_t iters) {
    if (iters <= 0) return 0.0;
    const float one = 1.0f, c = 0x1p-24f;
    float out[8];
    int64_t n = iters, x = 0, y = 1;
    __asm__ __volatile__(
        "vbroadcastss %[one], %%ymm14\n\t"
        "vbroadcastss %[c], %%ymm15\n\t" PMOV(0) PMOV(1) PMOV(2) PMOV(3) PMOV(4) PMOV(5) PMOV(6)
            PMOV(7) PZERO(8) PZERO(9) PZERO(10) PZERO(11) PZERO(12)
                PZERO(13) ".p2align 5\n"
                          "1:\n\t" PFMA(0) PFMA(1) PFMA(2) PFMA(3) PFMA(4) PFMA(5) PFMA(6) PFMA(7)
                              PADD(0, 8) PADD(32, 9) PADD(64, 10) PADD(96, 11) PADD(128, 12)
                                  PADD(160, 13) "add %[n], %[x]\n\t"
                                                "xor %[x], %[y]\n\t"
                                                "add $3, %[y]\n\t"
                                                "sub $1, %[x]\n\t"
                                                "dec %[n]\n\t"
                                                "jnz 1b\n\t"
                                                "vaddps %%ymm8, %%ymm0, %%ymm0\n\t"
                                                "vaddps %%ymm13, %%ymm7, %%ymm7\n\t"
                                                "vaddps %%ymm7, %%ymm0, %%ymm0\n\t"
                                                "vmovups %%ymm0, %[out]\n\t"
                                                "vzeroupper\n\t"
        : [n] "+r"(n), [x] "+r"(x), [y] "+r"(y), [out] "=m"(out)
        : [one] "m"(one), [c] "m"(c), [p] "r"(probe_zeros)
        : "cc", "memory", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8",
          "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15");
    peak_sink = out[0] + (float)(y & 1);
    return (double)iters * (8 * 16 + 6 * 8);
}

#else

/* Baseline x86-64: 8 mulss chains (the multiply pipes, 4 cycles), 4 addss
 * chains fed by loads, and the same integer operations. */
#define PMUL(i) "mulss %%xmm14, %%xmm" STR(i) "\n\t"
#define PADD(j, r) "addss " STR(j) "(%[p]), %%xmm" STR(r) "\n\t"
#define PMOV(i) "movaps %%xmm14, %%xmm" STR(i) "\n\t"
#define PZERO(i) "xorps %%xmm" STR(i) ", %%xmm" STR(i) "\n\t"

double MHA_SYM(probe_loop)(int64_t iters) {
    if (iters <= 0) return 0.0;
    const float one = 1.0f;
    float out;
    int64_t n = iters, x = 0, y = 1;
    __asm__ __volatile__("movss %[one], %%xmm14\n\t" PMOV(0) PMOV(1) PMOV(2) PMOV(3) PMOV(4) PMOV(5)
                             PMOV(6) PMOV(7) PZERO(8) PZERO(9) PZERO(10)
                                 PZERO(11) ".p2align 5\n"
                                           "1:\n\t" PMUL(0) PMUL(1) PMUL(2) PMUL(3) PMUL(4) PMUL(5)
                                               PMUL(6) PMUL(7) PADD(0, 8) PADD(4, 9) PADD(8, 10)
                                                   PADD(12, 11) "add %[n], %[x]\n\t"
                                                                "xor %[x], %[y]\n\t"
                                                                "add $3, %[y]\n\t"
                                                                "sub $1, %[x]\n\t"
                                                                "dec %[n]\n\t"
                                                                "jnz 1b\n\t"
                                                                "addss %%xmm8, %%xmm0\n\t"
                                                                "addss %%xmm11, %%xmm7\n\t"
                                                                "addss %%xmm7, %%xmm0\n\t"
                                                                "movss %%xmm0, %[out]\n\t"
                         : [n] "+r"(n), [x] "+r"(x), [y] "+r"(y), [out] "=m"(out)
                         : [one] "m"(one), [p] "r"(probe_zeros)
                         : "cc", "memory", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6",
                           "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm14");
    peak_sink = out + (float)(y & 1);
    return (double)iters * (8 + 4);
}

#endif

#ifdef __AVX512BF16__
/* The bf16 peak: 16 chains of vdpbf16ps in zmm0-15 (acc += a0 b0 + a1 b1
 * per fp32 lane), the pairs in zmm16/17. a = (2^-30, 2^-30), b = (1, 1):
 * each addition to 1 rounds back to 1, so the chains stay exactly 1 (as in
 * the FMA loop above). 64 FLOPs per instruction: 16 lanes x 2 products x
 * (multiply + add). */
#define DOT1(i) "vdpbf16ps %%zmm17, %%zmm16, %%zmm" STR(i) "\n\t"
#define BMOV1(i) "vmovaps %%zmm0, %%zmm" STR(i) "\n\t"
#define BADD1(d, s) "vaddps %%zmm" STR(s) ", %%zmm" STR(d) ", %%zmm" STR(d) "\n\t"
double MHA_SYM(bf16_peak_loop)(int64_t iters) {
    if (iters <= 0) return 0.0;
    const float one = 1.0f;
    const uint32_t a = 0x30803080u, b = 0x3f803f80u; /* bf16 pairs (2^-30, 2^-30), (1, 1) */
    float out[16];
    int64_t n = iters;
    __asm__ __volatile__(
        "vbroadcastss %[one], %%zmm0\n\t"
        "vpbroadcastd %[a], %%zmm16\n\t"
        "vpbroadcastd %[b], %%zmm17\n\t" BMOV1(1) BMOV1(2) BMOV1(3) BMOV1(4) BMOV1(5) BMOV1(6)
            BMOV1(7) BMOV1(8) BMOV1(9) BMOV1(10) BMOV1(11) BMOV1(12) BMOV1(13) BMOV1(14)
                BMOV1(15) ".p2align 5\n"
                          "1:\n\t" DOT1(0) DOT1(1) DOT1(2) DOT1(3) DOT1(4) DOT1(5) DOT1(6) DOT1(7)
                              DOT1(8) DOT1(9) DOT1(10) DOT1(11) DOT1(12) DOT1(13) DOT1(14)
                                  DOT1(15) "dec %[n]\n\t"
                                           "jnz 1b\n\t" BADD1(0, 8) BADD1(1, 9) BADD1(2, 10)
                                               BADD1(3, 11) BADD1(4, 12) BADD1(5, 13) BADD1(6, 14)
                                                   BADD1(7, 15) BADD1(0, 4) BADD1(1, 5) BADD1(2, 6)
                                                       BADD1(3, 7) BADD1(0, 2) BADD1(1, 3)
                                                           BADD1(0, 1) "vmovups %%zmm0, %[out]\n\t"
                                                                       "vzeroupper\n\t"
        : [n] "+r"(n), [out] "=m"(out)
        : [one] "m"(one), [a] "m"(a), [b] "m"(b)
        : "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",
          "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17");
    float s = 0.0f;
    for (int i = 0; i < 16; i++) s += out[i];
    peak_sink = s;
    return (double)iters * 16 * 16 * 2 * 2.0;
}
#endif

/* ---- memory read bandwidth -------------------------------------------------
 * Sums n 64-bit words with the widest loads this ISA has and four independent
 * integer accumulators (no FP denormal or latency effects), so one core keeps
 * as many misses in flight as it can: the read-bandwidth probe behind
 * `mhabench info` and the sweeps' % of bandwidth. */
#include <stddef.h>

uint64_t MHA_SYM(read_sum)(const uint64_t *p, size_t n) {
    size_t i = 0;
    uint64_t tail = 0;
#if VW == 16
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm512_add_epi64(a0, _mm512_loadu_si512((const void *)(p + i)));
        a1 = _mm512_add_epi64(a1, _mm512_loadu_si512((const void *)(p + i + 8)));
        a2 = _mm512_add_epi64(a2, _mm512_loadu_si512((const void *)(p + i + 16)));
        a3 = _mm512_add_epi64(a3, _mm512_loadu_si512((const void *)(p + i + 24)));
    }
    tail = (uint64_t)_mm512_reduce_add_epi64(
        _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)));
#elif VW == 8
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (; i + 16 <= n; i += 16) {
        a0 = _mm256_add_epi64(a0, _mm256_loadu_si256((const __m256i *)(p + i)));
        a1 = _mm256_add_epi64(a1, _mm256_loadu_si256((const __m256i *)(p + i + 4)));
        a2 = _mm256_add_epi64(a2, _mm256_loadu_si256((const __m256i *)(p + i + 8)));
        a3 = _mm256_add_epi64(a3, _mm256_loadu_si256((const __m256i *)(p + i + 12)));
    }
    uint64_t lanes[4];
    _mm256_storeu_si256((__m256i *)lanes,
                        _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)));
    tail = lanes[0] + lanes[1] + lanes[2] + lanes[3];
#else
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += p[i];
        s1 += p[i + 1];
        s2 += p[i + 2];
        s3 += p[i + 3];
    }
    tail = (s0 + s1) + (s2 + s3);
#endif
    for (; i < n; i++) tail += p[i];
    return tail;
}
