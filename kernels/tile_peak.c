/* tile_peak.c - the tiles' unit loop (ops.h's "tdpbf16ps" row at amx):
 * register-resident TDPBF16PS through tile.h's macros, so the amx build runs
 * the instructions and the emulated twin (mha_tile_peak_loop__amxemu, the
 * tests) the same code on the emulation. Built at amx (meson's
 * isa_own_sources) and in libmha_amxemu. */
#include <stdint.h>

#include "peak.h"
#include "tile.h"

/* Where the accumulators go, so the products are consumed. */
static volatile float tile_peak_sink;

/* The 2x2 split of ../shared/AMX.md: C in tiles 0-3 (16 x 16 fp32), A in
 * 4-5 (16 rows x 32 bf16), B in 6-7 (16 rows of 16 bf16 pairs): four
 * independent products per iteration, so each accumulator waits 4 issues
 * (about 64 cycles) against a latency of about 50. A = (2^-30, ...), B = 1,
 * C = 1: each product adds 32 x 2^-30 = 2^-25 to 1, which rounds back to 1
 * (as in peak.c's loops), so the values stay exact and normal however long
 * the loop runs. The configuration is this thread's: loaded here before the
 * first tile instruction and released before returning, so any thread may
 * call it and none is left holding tile state. */
double MHA_SYM(tile_peak_loop)(int64_t iters) {
    if (iters <= 0) return 0.0;
    _Alignas(64) uint16_t a[16][32], b[16][32];
    _Alignas(64) float c[16][16];
    for (int r = 0; r < 16; r++) {
        for (int j = 0; j < 32; j++) a[r][j] = 0x3080, b[r][j] = 0x3f80; /* 2^-30, 1 */
        for (int j = 0; j < 16; j++) c[r][j] = 1.0f;
    }
    mha_tile_config cfg;
    mha_tile_config_init(&cfg);
    for (int t = 0; t < MHA_TILE_COUNT; t++) mha_tile_config_set(&cfg, t, 16, 64);
    MHA_TILE_CONFIGURE(&cfg);
    MHA_TILE_LOAD(0, c, 64);
    MHA_TILE_LOAD(1, c, 64);
    MHA_TILE_LOAD(2, c, 64);
    MHA_TILE_LOAD(3, c, 64);
    MHA_TILE_LOAD(4, a, 64);
    MHA_TILE_LOAD(5, a, 64);
    MHA_TILE_LOAD(6, b, 64);
    MHA_TILE_LOAD(7, b, 64);
    for (int64_t i = 0; i < iters; i++) {
        MHA_TILE_DPBF16PS(0, 4, 6);
        MHA_TILE_DPBF16PS(1, 4, 7);
        MHA_TILE_DPBF16PS(2, 5, 6);
        MHA_TILE_DPBF16PS(3, 5, 7);
    }
    float s = 0.0f;
    MHA_TILE_STORE(0, c, 64);
    s += c[0][0];
    MHA_TILE_STORE(1, c, 64);
    s += c[5][7];
    MHA_TILE_STORE(2, c, 64);
    s += c[10][11];
    MHA_TILE_STORE(3, c, 64);
    s += c[15][15];
    MHA_TILE_RELEASE();
    tile_peak_sink = s;
    return (double)iters * 4 * (2.0 * 16 * 16 * 32);
}
