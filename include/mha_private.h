/* mha_private.h - the library internals that mhabench, the tests and the fuzz
 * targets reach on purpose: the AMX detection (kernels/cpu.h), the per-ISA
 * ops table (kernels/ops.h), the AMX tile emulation (kernels/tile_emu.h),
 * selection's internals (shape classes, caches and CPU key, cache model,
 * tuning tables: variants/select.h), the file I/O rules (variants/fileio.h)
 * and the view overlap test (variants/overlap.h). Not installed and not
 * exported by libmha.so (tests/check_exports.sh): only the static
 * mha_internal archive has these symbols. The harness and the tests see
 * include/ and harness/ only, so this is their one way below mha.h. */
#ifndef MHA_PRIVATE_H
#define MHA_PRIVATE_H

#include "mha.h"

#include "../kernels/cpu.h"
#include "../kernels/ops.h"
#include "../kernels/tile_emu.h"
#include "../variants/fileio.h"
#include "../variants/overlap.h"
#include "../variants/select.h"

#endif
