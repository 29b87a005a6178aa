/* peak.h - register-resident FP32 multiply-add loops that measure a core's
 * arithmetic peak, one per ISA (kernels/peak.c compiled per ISA). harness/
 * machine.c calls them by their suffixed names to fill `mhabench info`. */
#ifndef MHA_KERNELS_PEAK_H
#define MHA_KERNELS_PEAK_H

#include <stddef.h>
#include <stdint.h>

/* Each runs `iters` iterations of independent FP32 multiply-adds on
 * register-resident accumulators and returns the FLOPs executed (2 per lane
 * per multiply-add). iters <= 0 runs nothing and returns 0. The scalar
 * version uses mulss + addss (baseline x86-64 has no FMA). */
double mha_fma_peak_loop__scalar(int64_t iters);
double mha_fma_peak_loop__avx2(int64_t iters);
double mha_fma_peak_loop__avx512(int64_t iters);

/* Sum of n 64-bit words read with the ISA's widest loads (memory bandwidth probe). */
uint64_t mha_read_sum__scalar(const uint64_t *p, size_t n);
uint64_t mha_read_sum__avx2(const uint64_t *p, size_t n);
uint64_t mha_read_sum__avx512(const uint64_t *p, size_t n);

#endif
