/* tile_check.c - the amx level's one-time self-check: a few tile products
 * (random shapes and values, the SDM's cancel case, denormals and values
 * that flush) run through tile.h's macros and through the emulation's
 * functions, compared bit for bit. kernels/cpu.c runs the real build once per
 * process before it reports the amx level: a mismatch keeps AMX off, with
 * the case and element as the reason. The emulated build (tests) runs the
 * same code with both sides emulated. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "tile.h"
#include "tile_check.h"

typedef struct {
    const char *name;
    int M, N, K;
    uint16_t a[16][32], b[16][32];
    float c[16][16];
} tcase;

static uint64_t lcg(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}
/* A bf16 of magnitude 2^lo .. 2^hi (either sign), or a denormal where
 * denormals is set and the draw says so. */
static uint16_t rnd_bf16(uint64_t *s, int lo, int hi, int denormals) {
    const uint64_t r = lcg(s);
    const uint32_t sign = (uint32_t)(r >> 20) & 1, man = (uint32_t)(r >> 8) & 0x7f;
    if (denormals && r % 5 == 0) return (uint16_t)(sign << 15 | (man | 1));
    const uint32_t exp = (uint32_t)(127 + lo) + (uint32_t)(r % (uint64_t)(hi - lo + 1));
    return (uint16_t)(sign << 15 | exp << 7 | man);
}
static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void random_case(tcase *t, const char *name, int M, int N, int K, uint64_t seed, int lo,
                        int hi, int denormals) {
    memset(t, 0, sizeof *t);
    t->name = name, t->M = M, t->N = N, t->K = K;
    for (int m = 0; m < 16; m++)
        for (int j = 0; j < 32; j++) t->a[m][j] = rnd_bf16(&seed, lo, hi, denormals);
    for (int k = 0; k < 16; k++)
        for (int j = 0; j < 32; j++) t->b[k][j] = rnd_bf16(&seed, lo, hi, denormals);
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 16; n++) {
            const int clo = 2 * lo < -126 ? -126 : 2 * lo;
            const uint32_t h = rnd_bf16(&seed, clo, 2 * hi + 4, denormals);
            /* C: a full fp32 mantissa, and fp32 denormals where asked */
            t->c[m][n] = bits_f32((uint32_t)h << 16 | (uint32_t)(lcg(&seed) & 0xffff));
        }
}

static void config_for(const tcase *t, mha_tile_config *cfg) {
    mha_tile_config_init(cfg);
    mha_tile_config_set(cfg, 0, t->M, 4 * t->N);
    mha_tile_config_set(cfg, 1, t->M, 4 * t->K);
    mha_tile_config_set(cfg, 2, t->K, 4 * t->N);
}

/* Through tile.h: the instructions in the amx build. */
static void run_layer(const tcase *t, float out[16][16]) {
    mha_tile_config cfg;
    config_for(t, &cfg);
    memcpy(out, t->c, sizeof t->c);
    MHA_TILE_CONFIGURE(&cfg);
    MHA_TILE_LOAD(0, out, 64);
    MHA_TILE_LOAD(1, t->a, 64);
    MHA_TILE_LOAD(2, t->b, 64);
    MHA_TILE_DPBF16PS(0, 1, 2);
    MHA_TILE_STORE(0, out, 64);
    MHA_TILE_RELEASE();
}

/* Through the emulation, always. */
static void run_emu(const tcase *t, float out[16][16]) {
    mha_tile_config cfg;
    config_for(t, &cfg);
    memcpy(out, t->c, sizeof t->c);
    mha_tile_emu_loadconfig(&cfg);
    mha_tile_emu_loadd(0, out, 64);
    mha_tile_emu_loadd(1, t->a, 64);
    mha_tile_emu_loadd(2, t->b, 64);
    mha_tile_emu_dpbf16ps(0, 1, 2);
    mha_tile_emu_stored(0, out, 64);
    mha_tile_emu_release();
}

/* The fixed cases: the random shapes, the denormals and the SDM's cancel. */
static int fixed_cases(tcase *cases) {
    random_case(&cases[0], "random 16x16x16", 16, 16, 16, 20261201, -10, 10, 0);
    random_case(&cases[1], "random 16x16x16, narrow range", 16, 16, 16, 7, -2, 2, 0);
    random_case(&cases[2], "random 7x5x9", 7, 5, 9, 11, -6, 6, 0);
    random_case(&cases[3], "denormals and underflow", 16, 16, 16, 13, -80, -40, 1);
    /* the SDM's cancel: A = (2^24, 1), B = (1, 1), C = -2^24 gives 0 (the
     * vdpbf16ps order gives 1) */
    tcase *z = &cases[4];
    memset(z, 0, sizeof *z);
    z->name = "cancel (2^24, 1).(1, 1) - 2^24";
    z->M = z->N = z->K = 1;
    z->a[0][0] = 0x4b80, z->a[0][1] = 0x3f80, z->b[0][0] = 0x3f80, z->b[0][1] = 0x3f80;
    z->c[0][0] = -16777216.0f;
    random_case(&cases[5], "random 16x16x1", 16, 16, 1, 17, -10, 10, 0);
    return 6;
}

/* Case i of a seeded random run: a shape of 1..16 per side, and a value
 * range that cycles through wide, narrow, near the overflow edge and the
 * denormal one (every fourth case), so the rare paths are drawn often. */
static void drawn_case(tcase *t, uint64_t seed, long i) {
    uint64_t s = seed ^ (0x9e3779b97f4a7c15ull * (uint64_t)(i + 1));
    const int M = 1 + (int)(lcg(&s) % 16), N = 1 + (int)(lcg(&s) % 16), K = 1 + (int)(lcg(&s) % 16);
    static const int range[4][3] = {{-10, 10, 0}, {-2, 2, 0}, {40, 62, 0}, {-80, -40, 1}};
    const int *r = range[i % 4];
    random_case(t, "random", M, N, K, lcg(&s), r[0], r[1], r[2]);
}

/* One case through both sides; 1 and the first differing element in why
 * when they differ. */
static int compare_case(const tcase *t, long index, int flip, char *why, size_t len) {
    static _Thread_local float real[16][16], emu[16][16];
    run_layer(t, real);
    run_emu(t, emu);
    if (flip >= 0) {
        uint32_t u;
        float *e = &real[0][0] + (flip / 32) % 256;
        memcpy(&u, e, 4);
        u ^= 1u << (flip % 32);
        memcpy(e, &u, 4);
    }
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 16; n++) {
            uint32_t r, e;
            memcpy(&r, &real[m][n], 4);
            memcpy(&e, &emu[m][n], 4);
            if (r != e) {
                if (index >= 0)
                    snprintf(why, len,
                             "the tile products differ from the emulation: case %ld (%dx%dx%d), "
                             "C[%d][%d] is %08x (%a) on the tiles, %08x (%a) emulated",
                             index, t->M, t->N, t->K, m, n, r, (double)real[m][n], e,
                             (double)emu[m][n]);
                else
                    snprintf(why, len,
                             "the tile self-check differs from the emulation: %s, C[%d][%d] is "
                             "%08x (%a) on the tiles, %08x (%a) emulated",
                             t->name, m, n, r, (double)real[m][n], e, (double)emu[m][n]);
                return 1;
            }
        }
    return 0;
}

int MHA_SYM(tile_selfcheck)(int flip, char *why, size_t len) {
    static _Thread_local tcase cases[6]; /* 12 KiB: off the stack of whichever thread asks */
    const int n = fixed_cases(cases);
    for (int i = 0; i < n; i++)
        if (compare_case(&cases[i], -1, i == 0 ? flip : -1, why, len)) return 0;
    if (len) why[0] = 0;
    return 1;
}

long MHA_SYM(tile_compare)(uint64_t seed, long count, long *differ, char *why, size_t len) {
    static _Thread_local tcase t;
    *differ = 0;
    if (len) why[0] = 0;
    for (long i = 0; i < count; i++) { /* only the first difference is described */
        drawn_case(&t, seed, i);
        if (compare_case(&t, i, -1, why, *differ ? 0 : len)) (*differ)++;
    }
    return count;
}
