/* tile_emu.h - the AMX tile emulation (kernels/tile_emu.c): LDTILECFG,
 * TILEZERO, TILELOADD(T1), TILESTORED, TDPBF16PS and TILERELEASE in plain C,
 * with the state per thread as the hardware keeps it. Written from the SDM's
 * semantics (../shared/AMX.md); every condition on which the hardware faults
 * aborts with a message naming it. Kernels reach it through tile.h's macros
 * (MHA_TILE_EMU builds); the self-check and the tests call it directly. */
#ifndef MHA_KERNELS_TILE_EMU_H
#define MHA_KERNELS_TILE_EMU_H
#include <stddef.h>
#include <stdint.h>

/* The 64-byte LDTILECFG block (palette 1: tiles 0..7 of up to 16 rows x 64
 * bytes; the entries for 8..15 and the reserved bytes must be 0). */
typedef struct {
    uint8_t palette_id;
    uint8_t start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} mha_tile_config;
_Static_assert(sizeof(mha_tile_config) == 64, "LDTILECFG takes a 64-byte block");

#define MHA_TILE_COUNT 8
#define MHA_TILE_MAX_ROWS 16
#define MHA_TILE_MAX_COLSB 64

/* A palette-1 block with every tile unconfigured; then set each tile used. */
static inline void mha_tile_config_init(mha_tile_config *c) {
    __builtin_memset(c, 0, sizeof *c);
    c->palette_id = 1;
}
static inline void mha_tile_config_set(mha_tile_config *c, int tile, int rows, int colsb) {
    c->rows[tile] = (uint8_t)rows;
    c->colsb[tile] = (uint16_t)colsb;
}

void mha_tile_emu_loadconfig(const void *cfg);
void mha_tile_emu_release(void);
void mha_tile_emu_zero(int t);
void mha_tile_emu_loadd(int t, const void *base, long stride);
void mha_tile_emu_stream_loadd(int t, const void *base, long stride);
void mha_tile_emu_stored(int t, void *base, long stride);
void mha_tile_emu_dpbf16ps(int c, int a, int b);

/* Whether this thread has a tile configuration loaded (the hardware's
 * TILES_CONFIGURED), for tests. */
int mha_tile_emu_configured(void);
/* All 16 x 64 bytes of tile t (beyond the configured shape too, as XSAVE
 * would show them), for tests. */
void mha_tile_emu_peek(int t, void *out);

#endif
