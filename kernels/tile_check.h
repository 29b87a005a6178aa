/* tile_check.h - the amx level's self-check (kernels/tile_check.c), built in
 * the amx library (the real instructions) and in the emulated twin (the
 * tests' way to run its code without AMX). See ops.h's tile_selfcheck. */
#ifndef MHA_KERNELS_TILE_CHECK_H
#define MHA_KERNELS_TILE_CHECK_H
#include <stddef.h>
#include <stdint.h>

#include "isa.h"

int MHA_SYM(tile_selfcheck)(int flip, char *why, size_t len);
/* count seeded random tile products (shapes 1..16 per side; wide, narrow,
 * near-overflow and denormal value ranges in turn) on both sides; returns
 * count, sets *differ to the products that differ anywhere and why to the
 * first of them (empty when none). */
long MHA_SYM(tile_compare)(uint64_t seed, long count, long *differ, char *why, size_t len);

#endif
