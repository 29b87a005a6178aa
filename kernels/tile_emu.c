/* tile_emu.c - AMX tiles in plain C (tile_emu.h): the per-thread state
 * (config + 8 tiles of 16 x 64 bytes) and the instructions, from the SDM's
 * pseudo-code. Built without SIMD flags; the TDPBF16PS inner loop is also
 * built for FMA and chosen at run time (same results: fmaf is exact either
 * way, the hardware instruction only makes it fast). Faults of the hardware
 * (#GP for a bad config block, #UD for the rest) abort with a message. */
#include "tile_emu.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int configured; /* TILES_CONFIGURED: a palette-1 block is loaded */
    uint8_t rows[MHA_TILE_COUNT];
    uint16_t colsb[MHA_TILE_COUNT];
    _Alignas(64) uint8_t data[MHA_TILE_COUNT][MHA_TILE_MAX_ROWS][MHA_TILE_MAX_COLSB];
} tile_state;

static _Thread_local tile_state st;

__attribute__((noreturn, format(printf, 1, 2))) static void fault(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("mha tile emulation: fault: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

int mha_tile_emu_configured(void) {
    return st.configured;
}

void mha_tile_emu_peek(int t, void *out) {
    if (t < 0 || t >= MHA_TILE_COUNT) fault("peek: tile %d does not exist", t);
    memcpy(out, st.data[t], sizeof st.data[t]);
}

void mha_tile_emu_release(void) {
    memset(&st, 0, sizeof st);
}

void mha_tile_emu_loadconfig(const void *cfg) {
    mha_tile_config c;
    memcpy(&c, cfg, sizeof c);
    if (c.palette_id == 0) { /* palette 0: the initial state */
        mha_tile_emu_release();
        return;
    }
    if (c.palette_id != 1)
        fault("LDTILECFG: palette %u (this model has palettes 0 and 1)", c.palette_id);
    if (c.start_row != 0) fault("LDTILECFG: start_row %u: restarts are not modelled", c.start_row);
    for (int i = 0; i < 14; i++)
        if (c.reserved[i]) fault("LDTILECFG: reserved byte %d is %u, not 0", i + 2, c.reserved[i]);
    for (int t = 0; t < 16; t++) {
        const unsigned r = c.rows[t], cb = c.colsb[t];
        if (t >= MHA_TILE_COUNT) {
            if (r || cb)
                fault("LDTILECFG: tile %d (rows %u, colsb %u) beyond palette 1's 8", t, r, cb);
            continue;
        }
        if (r > MHA_TILE_MAX_ROWS) fault("LDTILECFG: tile %d has %u rows (at most 16)", t, r);
        if (cb > MHA_TILE_MAX_COLSB) fault("LDTILECFG: tile %d has colsb %u (at most 64)", t, cb);
        if ((r == 0) != (cb == 0))
            fault("LDTILECFG: tile %d has rows %u and colsb %u (both zero or neither)", t, r, cb);
    }
    memset(&st, 0, sizeof st); /* loading a config zeroes every tile */
    for (int t = 0; t < MHA_TILE_COUNT; t++) {
        st.rows[t] = c.rows[t];
        st.colsb[t] = c.colsb[t];
    }
    st.configured = 1;
}

static void need_tile(const char *insn, int t) {
    if (t < 0 || t >= MHA_TILE_COUNT) fault("%s: tile %d does not exist", insn, t);
    if (!st.configured) fault("%s: tmm%d used with no tile configuration on this thread", insn, t);
    if (st.rows[t] == 0) fault("%s: tmm%d is not configured (rows 0)", insn, t);
}

void mha_tile_emu_zero(int t) {
    need_tile("TILEZERO", t);
    memset(st.data[t], 0, sizeof st.data[t]);
}

static void load(const char *insn, int t, const void *base, long stride) {
    need_tile(insn, t);
    memset(st.data[t], 0, sizeof st.data[t]); /* rows and bytes beyond the shape */
    for (int r = 0; r < st.rows[t]; r++)
        memcpy(st.data[t][r], (const char *)base + (long)r * stride, st.colsb[t]);
}

void mha_tile_emu_loadd(int t, const void *base, long stride) {
    load("TILELOADD", t, base, stride);
}
void mha_tile_emu_stream_loadd(int t, const void *base, long stride) {
    load("TILELOADDT1", t, base, stride);
}

void mha_tile_emu_stored(int t, void *base, long stride) {
    need_tile("TILESTORED", t);
    for (int r = 0; r < st.rows[t]; r++)
        memcpy((char *)base + (long)r * stride, st.data[t][r], st.colsb[t]);
}

/* ---- TDPBF16PS --------------------------------------------------------- */

/* Inputs denormals-are-zero (keeping the sign), results flush-to-zero. */
static inline float daz(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    u &= (u & 0x7f800000u) ? 0xffffffffu : 0x80000000u; /* branch-free: vectorises */
    memcpy(&x, &u, 4);
    return x;
}
static inline float ftz(float x) {
    return daz(x);
}
static inline float bf16_daz(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, 4);
    return daz(x);
}

/* C[m][n] for every row: per element two fp32 chains (even and odd pair
 * members), each step one fused multiply-add rounded to nearest even, then
 * C + (even + odd). B's pairs are split once (be, bo: K x 16, DAZ applied)
 * so that the loop over the 16 columns is plain vector code; columns past N
 * read B's zeroed bytes and are not written back. */
#define DP_BODY(FMA)                                                                               \
    for (int m = 0; m < M; m++) {                                                                  \
        float even[16] = {0}, odd[16] = {0};                                                       \
        for (int k = 0; k < K; k++) {                                                              \
            const float ae = bf16_daz(a[m][2 * k]), ao = bf16_daz(a[m][2 * k + 1]);                \
            for (int n = 0; n < 16; n++) {                                                         \
                even[n] = ftz(FMA(ae, be[k][n], even[n]));                                         \
                odd[n] = ftz(FMA(ao, bo[k][n], odd[n]));                                           \
            }                                                                                      \
        }                                                                                          \
        for (int n = 0; n < N; n++) {                                                              \
            const float t = ftz(even[n] + odd[n]);                                                 \
            c[m][n] = ftz(daz(c[m][n]) + t);                                                       \
        }                                                                                          \
    }

typedef const uint16_t (*bf16_rows)[32];
static void dp_all(int M, int N, int K, bf16_rows a, const float (*be)[16], const float (*bo)[16],
                   float (*c)[16]) {
    DP_BODY(fmaf)
}
__attribute__((target("avx2,fma"))) static void dp_all_fma(int M, int N, int K, bf16_rows a,
                                                           const float (*be)[16],
                                                           const float (*bo)[16], float (*c)[16]) {
    DP_BODY(__builtin_fmaf)
}

void mha_tile_emu_dpbf16ps(int c, int a, int b) {
    need_tile("TDPBF16PS", c);
    need_tile("TDPBF16PS", a);
    need_tile("TDPBF16PS", b);
    if (c == a || c == b || a == b)
        fault("TDPBF16PS: operands tmm%d, tmm%d, tmm%d are not distinct", c, a, b);
    const int M = st.rows[c], N = st.colsb[c] / 4, K = st.colsb[a] / 4;
    /* (Stricter than the SDM's list, which divides by 4: a kernel with a
     * colsb of odd bytes in a product has a bug.) */
    if (st.colsb[c] % 4) fault("TDPBF16PS: C (tmm%d) colsb %u is not whole fp32s", c, st.colsb[c]);
    if (st.colsb[a] % 4) fault("TDPBF16PS: A (tmm%d) colsb %u is not whole pairs", a, st.colsb[a]);
    if (st.rows[a] != M)
        fault("TDPBF16PS: C (tmm%d) has %d rows, A (tmm%d) %u", c, M, a, st.rows[a]);
    if (st.colsb[b] != st.colsb[c])
        fault("TDPBF16PS: C (tmm%d) colsb %u, B (tmm%d) colsb %u", c, st.colsb[c], b, st.colsb[b]);
    if (st.rows[b] != K)
        fault("TDPBF16PS: A (tmm%d) has %d pairs per row, B (tmm%d) %u rows", a, K, b, st.rows[b]);
    static int use_fma = -1; /* every thread finds the same answer */
    int fma = __atomic_load_n(&use_fma, __ATOMIC_RELAXED);
    if (fma < 0) {
        fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? 1 : 0;
        __atomic_store_n(&use_fma, fma, __ATOMIC_RELAXED);
    }
    float be[16][16], bo[16][16], cc[16][16];
    const uint16_t(*bp)[32] = (const uint16_t(*)[32])st.data[b];
    for (int k = 0; k < K; k++)
        for (int n = 0; n < 16; n++) {
            be[k][n] = bf16_daz(bp[k][2 * n]);
            bo[k][n] = bf16_daz(bp[k][2 * n + 1]);
        }
    memcpy(cc, st.data[c], sizeof cc);
    if (fma)
        dp_all_fma(M, N, K, (bf16_rows)st.data[a], be, bo, cc);
    else
        dp_all(M, N, K, (bf16_rows)st.data[a], be, bo, cc);
    for (int m = 0; m < M; m++) {
        memset(st.data[c][m], 0, MHA_TILE_MAX_COLSB); /* bytes beyond colsb */
        memcpy(st.data[c][m], cc[m], (size_t)N * 4);
    }
    /* rows beyond C's are zero already (every write zeroes them) */
}
