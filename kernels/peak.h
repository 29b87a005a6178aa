/* peak.h - register-resident loops that measure a core's arithmetic units
 * (FP32 multiply-adds, the bf16 dot product, the tiles), the interference
 * probe and a read-bandwidth probe, per ISA (kernels/peak.c and, at amx,
 * kernels/tile_peak.c compiled per ISA). Reached through the ops table's
 * units (kernels/ops.h). */
#ifndef MHA_KERNELS_PEAK_H
#define MHA_KERNELS_PEAK_H

#include <stddef.h>
#include <stdint.h>

#include "isa.h"

/* Runs `iters` iterations of independent FP32 multiply-adds on
 * register-resident accumulators and returns the FLOPs executed (2 per lane
 * per multiply-add). iters <= 0 runs nothing and returns 0. The scalar
 * version uses mulss + addss (baseline x86-64 has no FMA). */
double MHA_SYM(fma_peak_loop)(int64_t iters);

/* The interference probe (harness/meas_core.c): `iters` iterations of a
 * register- and L1-resident mix of FMAs, loads, adds and integer operations
 * that keeps most of a core's shared resources busy, so that any competitor
 * for the core slows it. Returns the FLOPs executed (its rate is only ever
 * compared with its own best). */
double MHA_SYM(probe_loop)(int64_t iters);

/* Where the ISA has AVX512_BF16: iters iterations of independent vdpbf16ps
 * on register-resident zmm accumulators; returns the FLOPs executed (2 per
 * bf16 pair element, 64 per instruction). */
double MHA_SYM(bf16_peak_loop)(int64_t iters);

/* At amx (kernels/tile_peak.c, also built emulated as
 * mha_tile_peak_loop__amxemu): iters iterations of four independent
 * TDPBF16PS on register-resident tiles, the tile configuration loaded
 * first and released last by the calling thread; returns the FLOPs
 * executed (2 x 16 x 16 x 32 per instruction). */
double MHA_SYM(tile_peak_loop)(int64_t iters);

/* Sum of n 64-bit words read with the ISA's widest loads (memory bandwidth probe). */
uint64_t MHA_SYM(read_sum)(const uint64_t *p, size_t n);

#endif
