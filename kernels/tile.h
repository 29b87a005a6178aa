/* tile.h - the tile layer: one kernel source, built twice. With MHA_TILE_EMU
 * defined (non-zero) the macros call the emulation (kernels/tile_emu.c, runs
 * anywhere); without it they are the AMX instructions (-mamx-tile
 * -mamx-bf16; runs where kernels/cpu.c detects the amx level). Tile numbers
 * are integer constants in both modes: gcc pastes them into the instruction
 * text, and the emulated macros refuse anything else at compile time, so a
 * kernel that builds emulated also builds real. */
#ifndef MHA_KERNELS_TILE_H
#define MHA_KERNELS_TILE_H
#include "tile_emu.h"

/* An integer constant 0..7, else a compile error (in both modes). */
#define MHA_TILE_NUM(t)                                                                            \
    ((int)(t) + 0 * (int)sizeof(struct {                                                           \
                    _Static_assert((t) >= 0 && (t) < MHA_TILE_COUNT,                               \
                                   "tile number must be a constant 0..7");                         \
                    int x;                                                                         \
                }))

#if defined(MHA_TILE_EMU) && MHA_TILE_EMU

#define MHA_TILE_CONFIGURE(cfg) mha_tile_emu_loadconfig(cfg)
#define MHA_TILE_RELEASE() mha_tile_emu_release()
#define MHA_TILE_ZERO(t) mha_tile_emu_zero(MHA_TILE_NUM(t))
#define MHA_TILE_LOAD(t, base, stride) mha_tile_emu_loadd(MHA_TILE_NUM(t), base, (long)(stride))
#define MHA_TILE_STREAM_LOAD(t, base, stride)                                                      \
    mha_tile_emu_stream_loadd(MHA_TILE_NUM(t), base, (long)(stride))
#define MHA_TILE_STORE(t, base, stride) mha_tile_emu_stored(MHA_TILE_NUM(t), base, (long)(stride))
#define MHA_TILE_DPBF16PS(c, a, b)                                                                 \
    mha_tile_emu_dpbf16ps(MHA_TILE_NUM(c), MHA_TILE_NUM(a), MHA_TILE_NUM(b))

#else

/* gcc names the features __AMX_TILE__ / __AMX_BF16__, clang (the fuzz
 * build) __AMXTILE__ / __AMXBF16__ */
#if !(defined(__AMX_TILE__) || defined(__AMXTILE__)) ||                                            \
    !(defined(__AMX_BF16__) || defined(__AMXBF16__))
#error "the real tile layer needs -mamx-tile -mamx-bf16 (or define MHA_TILE_EMU=1)"
#endif
#include <immintrin.h>

/* gcc 12's tile asm names no memory: ldtilecfg claims 8 bytes of its block,
 * tileloadd/tilestored none. A compiler barrier on each side keeps the stores
 * that fill a buffer before the load that reads it, and the reads of a stored
 * tile after the store. (The tile instructions are volatile asm: their order
 * among themselves is kept.) */
#define MHA_TILE_BARRIER() __asm__ __volatile__("" ::: "memory")
#define MHA_TILE_CONFIGURE(cfg)                                                                    \
    do {                                                                                           \
        MHA_TILE_BARRIER();                                                                        \
        _tile_loadconfig(cfg);                                                                     \
        MHA_TILE_BARRIER();                                                                        \
    } while (0)
#define MHA_TILE_RELEASE() _tile_release()
#define MHA_TILE_ZERO(t) _tile_zero(t)
#define MHA_TILE_LOAD(t, base, stride)                                                             \
    do {                                                                                           \
        (void)MHA_TILE_NUM(t);                                                                     \
        MHA_TILE_BARRIER();                                                                        \
        _tile_loadd(t, base, (long)(stride));                                                      \
    } while (0)
#define MHA_TILE_STREAM_LOAD(t, base, stride)                                                      \
    do {                                                                                           \
        (void)MHA_TILE_NUM(t);                                                                     \
        MHA_TILE_BARRIER();                                                                        \
        _tile_stream_loadd(t, base, (long)(stride));                                               \
    } while (0)
#define MHA_TILE_STORE(t, base, stride)                                                            \
    do {                                                                                           \
        (void)MHA_TILE_NUM(t);                                                                     \
        _tile_stored(t, base, (long)(stride));                                                     \
        MHA_TILE_BARRIER();                                                                        \
    } while (0)
#define MHA_TILE_DPBF16PS(c, a, b) _tile_dpbf16ps(c, a, b)

#endif
#endif
