/* bench_tile.c - what a tile instruction costs on this machine, and whether
 * the tile unit runs beside the AVX-512 units: the measurements behind
 * flash.amx's design (docs/amx.md). Cycles are TSC ticks scaled by the
 * core clock the FMA loop measures (`mhabench info`'s GHz, given with
 * --ghz), so they are rough; the ratios between lines are the point.
 *  1. tdpbf16ps with four independent accumulators, register resident;
 *     then with one tile load per product (L1), half a load, loads from a
 *     1 MiB stream (L2); then four stores and four zeros (a step's end)
 *     per 8 and per 16 products.
 *  2. a 2 x 2 step (16 products, 16 loads, 4 stores: Q.K^T at d = 128)
 *     alone, 32 / 64 groups of an exp2 polynomial on 16 floats (loads from
 *     L1, a bf16 store every two groups: the softmax) alone, and the two
 *     one after the other: "both" near "tile + vec" means no overlap.
 * A benchmark, not a test; it runs only where the amx level runs:
 *   taskset -c 0 build/tests/bench_tile [--ghz 4.05] */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <x86intrin.h>

#include "mha.h"

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_cfg;

static uint16_t A[1 << 20] __attribute__((aligned(4096))); /* 2 MiB of bf16 ones */
static float C[16 * 1024] __attribute__((aligned(64)));
static float S[32 * 1024] __attribute__((aligned(64)));
static uint16_t P[32 * 1024] __attribute__((aligned(64)));
static double ghz_ratio = 1.0; /* core cycles per TSC tick */

#define BARRIER() __asm__ __volatile__("" ::: "memory")
#define REPS 20000
/* core cycles per tdpbf16ps of BODY (16 products per repetition) */
#define PER_TDP(name, body)                                                                        \
    do {                                                                                           \
        const uint64_t t0 = __rdtsc();                                                             \
        for (long r = 0; r < REPS; r++) {                                                          \
            body BARRIER();                                                                        \
        }                                                                                          \
        printf("  %-44s %5.1f cycles per tdpbf16ps\n", name,                                       \
               (double)(__rdtsc() - t0) / REPS / 16 * ghz_ratio);                                  \
    } while (0)
#define STEP_END() /* a 2x2 step's end: the accumulators stored, then zeroed */                    \
    _tile_stored(0, C, 64);                                                                        \
    _tile_stored(1, C + 256, 64);                                                                  \
    _tile_stored(2, C + 512, 64);                                                                  \
    _tile_stored(3, C + 768, 64);                                                                  \
    _tile_zero(0);                                                                                 \
    _tile_zero(1);                                                                                 \
    _tile_zero(2);                                                                                 \
    _tile_zero(3)
#define TDP4()                                                                                     \
    _tile_dpbf16ps(0, 4, 6);                                                                       \
    _tile_dpbf16ps(1, 4, 7);                                                                       \
    _tile_dpbf16ps(2, 5, 6);                                                                       \
    _tile_dpbf16ps(3, 5, 7)

static void step_2x2(void) { /* 4 chunks: 16 loads, 16 products, 4 zeros, 4 stores */
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int i = 0; i < 4; i++) {
        _tile_loadd(4, A + 512 * i, 64);
        _tile_loadd(6, A + 8192 + 512 * i, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_loadd(7, A + 16384 + 512 * i, 64);
        _tile_dpbf16ps(1, 4, 7);
        _tile_loadd(5, A + 24576 + 512 * i, 64);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, C, 64);
    _tile_stored(1, C + 256, 64);
    _tile_stored(2, C + 512, 64);
    _tile_stored(3, C + 768, 64);
    BARRIER();
}

static __m512 vec_work(int groups, __m512 acc) { /* the softmax's exp2 (degree 3) */
    for (int g = 0; g < groups; g++) {
        __m512 x = _mm512_fmadd_ps(_mm512_load_ps(S + 16 * (g & 1023)), _mm512_set1_ps(0.1f),
                                   _mm512_set1_ps(-1.0f));
        x = _mm512_max_ps(_mm512_set1_ps(-200.0f), x);
        const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        const __m512 f = _mm512_sub_ps(x, n);
        __m512 p = _mm512_set1_ps(5.5e-2f);
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.2426f));
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.6933f));
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.99993f));
        p = _mm512_scalef_ps(p, n);
        acc = _mm512_add_ps(acc, p);
        if (g & 1)
            _mm256_store_si256((__m256i *)(P + 16 * (g & 1023)), (__m256i)_mm512_cvtneps_pbh(p));
    }
    return acc;
}

int main(int argc, char **argv) {
    double ghz = 0;
    if (argc == 3 && !strcmp(argv[1], "--ghz")) {
        ghz = atof(argv[2]);
    } else if (argc != 1) {
        fprintf(stderr, "usage: bench_tile [--ghz CORE_GHZ]\n");
        return 2;
    }
    if (mha_isa_active() < MHA_ISA_AMX) { /* the detection also asks Linux for the tile state */
        printf("bench_tile: the amx level does not run here (mhabench info says why)\n");
        return 77;
    }
    if (ghz > 0) {
        const uint64_t t0 = __rdtsc();
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        do clock_gettime(CLOCK_MONOTONIC, &b);
        while ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec) < 2e8);
        const double tsc_ghz =
            (double)(__rdtsc() - t0) / ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec));
        ghz_ratio = ghz / tsc_ghz;
        printf("TSC %.3f GHz, core %.3f GHz (given): %.3f core cycles per tick\n", tsc_ghz, ghz,
               ghz_ratio);
    } else {
        printf("no --ghz: figures in TSC ticks\n");
    }
    tile_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) cfg.rows[t] = 16, cfg.colsb[t] = 64;
    _tile_loadconfig(&cfg);
    for (size_t i = 0; i < sizeof A / 2; i++) A[i] = 0x3f80;
    for (int i = 0; i < 32 * 1024; i++) S[i] = -1.0f;
    for (int t = 0; t < 8; t++) switch (t) { /* tile numbers are literals */
        case 0:
            _tile_zero(0);
            break;
        case 1:
            _tile_zero(1);
            break;
        case 2:
            _tile_zero(2);
            break;
        case 3:
            _tile_zero(3);
            break;
        case 4:
            _tile_zero(4);
            break;
        case 5:
            _tile_zero(5);
            break;
        case 6:
            _tile_zero(6);
            break;
        default:
            _tile_zero(7);
            break;
        }
    printf("1. tdpbf16ps and what surrounds it (16 products a repetition)\n");
    PER_TDP(
        "warm-up", for (int i = 0; i < 4; i++) { TDP4(); });
    PER_TDP(
        "4 accumulators, registers only", for (int i = 0; i < 4; i++) { TDP4(); });
    PER_TDP(
        "+ 1 tile load per product (L1)", for (int i = 0; i < 4; i++) {
            _tile_loadd(4, A, 64);
            _tile_dpbf16ps(0, 4, 6);
            _tile_loadd(7, A + 512, 64);
            _tile_dpbf16ps(1, 4, 7);
            _tile_loadd(5, A + 1024, 64);
            _tile_dpbf16ps(2, 5, 6);
            _tile_loadd(6, A + 1536, 64);
            _tile_dpbf16ps(3, 5, 7);
        });
    size_t off = 0;
    PER_TDP(
        "+ 1 tile load per product (1 MiB stream)", for (int i = 0; i < 4; i++) {
            _tile_loadd(4, A + off, 64);
            _tile_dpbf16ps(0, 4, 6);
            _tile_loadd(7, A + off + 512, 64);
            _tile_dpbf16ps(1, 4, 7);
            _tile_loadd(5, A + off + 1024, 64);
            _tile_dpbf16ps(2, 5, 6);
            _tile_loadd(6, A + off + 1536, 64);
            _tile_dpbf16ps(3, 5, 7);
            off = off + 2048 >= 512 * 1024 ? 0 : off + 2048;
        });
    PER_TDP(
        "+ 4 stores and 4 zeros per 8 products", for (int i = 0; i < 2; i++) {
            TDP4();
            TDP4();
            STEP_END();
        });
    PER_TDP("+ 4 stores and 4 zeros per 16 products", {
        for (int i = 0; i < 4; i++) {
            TDP4();
        }
        STEP_END();
    });
    printf("2. a 2x2 step (16 products) and the softmax's vector work: do they overlap?\n");
    __m512 acc = _mm512_setzero_ps();
    for (int groups = 32; groups <= 64; groups *= 2) {
        uint64_t t0 = __rdtsc();
        for (long r = 0; r < REPS; r++) step_2x2();
        const uint64_t t1 = __rdtsc();
        for (long r = 0; r < REPS; r++) acc = vec_work(groups, acc);
        const uint64_t t2 = __rdtsc();
        for (long r = 0; r < REPS; r++) {
            step_2x2();
            acc = vec_work(groups, acc);
        }
        const uint64_t t3 = __rdtsc();
        const double tile = (double)(t1 - t0) / REPS * ghz_ratio,
                     vec = (double)(t2 - t1) / REPS * ghz_ratio,
                     both = (double)(t3 - t2) / REPS * ghz_ratio;
        printf(
            "  %2d exp groups: tile %5.0f, vec %5.0f, both %5.0f cycles (sum %5.0f, max %5.0f)\n",
            groups, tile, vec, both, tile + vec, tile > vec ? tile : vec);
    }
    float o[16];
    _mm512_storeu_ps(o, acc);
    _tile_release();
    return o[0] == 12345.0f; /* keeps acc alive */
}
