/* test_tile.c - the AMX tile emulation (kernels/tile_emu.c) held to the SDM:
 * TDPBF16PS's order (two fp32 chains, then C + (even + odd)) on a sum that
 * cancels, input denormals-are-zero and output flush-to-zero, NaN, Inf, -0,
 * zeroing beyond small configured shapes, random products against a plain
 * reference of the same order computed in double, and every fault (in a
 * forked child: SIGABRT and the message on stderr), a thread that uses tiles
 * it did not configure included. Driven through tile.h's macros, as a kernel
 * built emulated is. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "mha_private.h"
#define MHA_TILE_EMU 1
#include "../kernels/tile.h"

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float fbits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
/* bf16 of an fp32 that is one already (top half). */
static uint16_t bf(float f) {
    return (uint16_t)(bits(f) >> 16);
}

/* A problem in the tile layout: C is M x N fp32, A M rows of K pairs, B K
 * rows of N pairs (VNNI), each in a buffer of full 64-byte rows. */
typedef struct {
    int M, N, K;
    uint16_t a[16][32], b[16][32];
    float c[16][16];
} prob;

/* C += A.B on tiles 0 (C), 1 (A), 2 (B) of a config of exactly these shapes. */
static void tile_product(prob *p) {
    mha_tile_config cfg;
    mha_tile_config_init(&cfg);
    mha_tile_config_set(&cfg, 0, p->M, 4 * p->N);
    mha_tile_config_set(&cfg, 1, p->M, 4 * p->K);
    mha_tile_config_set(&cfg, 2, p->K, 4 * p->N);
    MHA_TILE_CONFIGURE(&cfg);
    MHA_TILE_LOAD(0, p->c, 64);
    MHA_TILE_LOAD(1, p->a, 64);
    MHA_TILE_STREAM_LOAD(2, p->b, 64);
    MHA_TILE_DPBF16PS(0, 1, 2);
    MHA_TILE_STORE(0, p->c, 64);
    MHA_TILE_RELEASE();
}

/* One element of the same order computed in double: a bf16 product has at
 * most 16 significant bits, and with the inputs of random_case (magnitudes
 * 2^-8 .. 2^8) each sum below is exact in double, so casting it to float is
 * the correctly rounded fused multiply-add: a check of fmaf, not a copy. */
static float ref_elem(const prob *p, int m, int n) {
    float even = 0, odd = 0;
    for (int k = 0; k < p->K; k++) {
        even = (float)((double)fbits((uint32_t)p->a[m][2 * k] << 16) *
                           (double)fbits((uint32_t)p->b[k][2 * n] << 16) +
                       (double)even);
        odd = (float)((double)fbits((uint32_t)p->a[m][2 * k + 1] << 16) *
                          (double)fbits((uint32_t)p->b[k][2 * n + 1] << 16) +
                      (double)odd);
    }
    const float t = even + odd; /* fp32 adds: correctly rounded */
    return p->c[m][n] + t;
}

static uint64_t rng_state;
static uint32_t rnd(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}
/* A random bf16 of magnitude 2^-8 .. 2^8, either sign. */
static uint16_t rnd_bf16(void) {
    const uint32_t r = rnd();
    const uint32_t exp = 127 - 8 + r % 17, man = (r >> 8) & 0x7f, sign = (r >> 16) & 1;
    return (uint16_t)(sign << 15 | exp << 7 | man);
}

static void random_case(prob *p, int M, int N, int K, uint64_t seed) {
    memset(p, 0, sizeof *p);
    rng_state = seed;
    p->M = M, p->N = N, p->K = K;
    for (int m = 0; m < 16; m++)
        for (int j = 0; j < 32; j++) p->a[m][j] = rnd_bf16();
    for (int k = 0; k < 16; k++)
        for (int j = 0; j < 32; j++) p->b[k][j] = rnd_bf16();
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 16; n++) p->c[m][n] = (float)((int)(rnd() % 2001) - 1000) / 64.0f;
}

static void test_random_products(void **state) {
    (void)state;
    static const int shapes[][3] = {{16, 16, 16}, {16, 16, 1}, {1, 1, 1},
                                    {5, 7, 3},    {16, 3, 16}, {9, 16, 11}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        for (uint64_t seed = 1; seed <= 20; seed++) {
            prob p, q;
            random_case(&p, shapes[s][0], shapes[s][1], shapes[s][2], seed * 7919 + s);
            q = p;
            tile_product(&p);
            for (int m = 0; m < 16; m++)
                for (int n = 0; n < 16; n++) {
                    const int in = m < q.M && n < q.N;
                    const float want = in ? ref_elem(&q, m, n) : q.c[m][n]; /* store: shape only */
                    if (bits(p.c[m][n]) != bits(want))
                        fail_msg("shape %dx%dx%d seed %llu (%d,%d): %a, want %a", q.M, q.N, q.K,
                                 (unsigned long long)seed, m, n, p.c[m][n], want);
                }
        }
    }
}

/* One element: C = c + sum of the pairs (a0,a1).(b0,b1) over k < K pairs. */
static float one(float c, int K, const float (*a)[2], const float (*b)[2]) {
    prob p;
    memset(&p, 0, sizeof p);
    p.M = 1, p.N = 1, p.K = K;
    for (int k = 0; k < K; k++) {
        p.a[0][2 * k] = bf(a[k][0]), p.a[0][2 * k + 1] = bf(a[k][1]);
        p.b[k][0] = bf(b[k][0]), p.b[k][1] = bf(b[k][1]);
    }
    p.c[0][0] = c;
    tile_product(&p);
    return p.c[0][0];
}
static float one_bits(uint32_t c, uint16_t a0, uint16_t a1, uint16_t b0, uint16_t b1) {
    prob p;
    memset(&p, 0, sizeof p);
    p.M = 1, p.N = 1, p.K = 1;
    p.a[0][0] = a0, p.a[0][1] = a1, p.b[0][0] = b0, p.b[0][1] = b1;
    p.c[0][0] = fbits(c);
    tile_product(&p);
    return p.c[0][0];
}

/* A = (2^24, 1), B = (1, 1), C = -2^24: even + odd = 2^24 + 1 rounds to 2^24
 * (tie to even), so C + (even + odd) = 0; vdpbf16ps's order, (C + a0 b0) +
 * a1 b1, and a left-to-right (C + even) + odd both give 1. */
static void test_cancel_order(void **state) {
    (void)state;
    const float a[1][2] = {{16777216.0f, 1.0f}}, b[1][2] = {{1.0f, 1.0f}};
    const float r = one(-16777216.0f, 1, a, b);
    assert_int_equal(bits(r), bits(0.0f));
    volatile float c = -16777216.0f, vdp = fmaf(a[0][1], b[0][1], fmaf(a[0][0], b[0][0], c));
    assert_true(vdp == 1.0f); /* the case tells the orders apart */
    /* the chains run over k: (2^24, 0) then (1, 0) in the even chain sums to
     * 2^24 there (its own rounding), the same 0 */
    const float a2[2][2] = {{16777216.0f, 0.0f}, {1.0f, 0.0f}}, b2[2][2] = {{1, 1}, {1, 1}};
    assert_int_equal(bits(one(-16777216.0f, 2, a2, b2)), bits(0.0f));
    /* and each step is fused: a bf16 product is exact in fp32 unless it
     * underflows, so the sum shows it: 2^-126 + 2^-70 * 2^-70 keeps the
     * 2^-140 that a separate multiply would flush */
    const float a3[2][2] = {{0x1p-63f, 0}, {0x1p-70f, 0}},
                b3[2][2] = {{0x1p-63f, 0}, {0x1p-70f, 0}};
    assert_true(one(0.0f, 2, a3, b3) == 0x1p-126f + 0x1p-140f);
}

static void test_denormals(void **state) {
    (void)state;
    const uint16_t big = bf(0x1p126f), inf = 0x7f80;
    /* bf16 denormal input (2^-133) times 2^126: 2^-7 without DAZ, 0 with */
    assert_int_equal(bits(one_bits(0, 0x0001, 0, big, 0)), 0);
    /* -denormal is -0 under DAZ: times Inf is NaN (not -Inf) */
    assert_true(isnan(one_bits(0, 0x8001, 0, inf, 0)));
    assert_true(isnan(one_bits(0, inf, 0, 0x0001, 0)));
    /* fp32 C denormal is 0 on input: 1e-45 + 0 gives 0 */
    assert_int_equal(bits(one_bits(0x00000001u, 0, 0, 0, 0)), 0);
    assert_int_equal(bits(one_bits(0x807fffffu, 0, 0, 0, 0)), 0);
    /* ... and a normal C is kept */
    assert_int_equal(bits(one_bits(0x00800000u, 0, 0, 0, 0)), 0x00800000u);
    /* a product 2^-70 * 2^-70 = 2^-140 is flushed in its chain */
    assert_int_equal(bits(one_bits(0, bf(0x1p-70f), 0, bf(0x1p-70f), 0)), 0);
    assert_int_equal(bits(one_bits(0, 0, bf(-0x1p-70f), 0, bf(0x1p-70f))), 0);
    /* the final sum: 1.5 * 2^-126 - 2^-126 = 2^-127 is flushed */
    assert_int_equal(bits(one_bits(bits(0x1.8p-126f), bf(0x1p-63f), 0, bf(-0x1p-63f), 0)), 0);
    /* a normal result is kept: 1.5 * 2^-126 + 2^-125 */
    assert_true(one_bits(bits(0x1.8p-126f), bf(0x1p-63f), 0, bf(0x1p-62f), 0) == 0x1.cp-125f);
}

static void test_nan_inf_zero(void **state) {
    (void)state;
    const uint16_t one16 = bf(1.0f), inf = 0x7f80, ninf = 0xff80, qnan = 0x7fc0, nzero = 0x8000;
    assert_true(isnan(one_bits(0, qnan, 0, one16, 0)));
    assert_true(isnan(one_bits(0, one16, 0, one16, qnan)));          /* B's odd member */
    assert_true(isnan(one_bits(bits(NAN), 0, 0, 0, 0)));             /* C */
    assert_true(isnan(one_bits(0, inf, 0, 0, 0)));                   /* Inf * 0 */
    assert_true(isnan(one_bits(0, inf, ninf, one16, one16)));        /* even + odd = Inf - Inf */
    assert_true(isnan(one_bits(bits(-INFINITY), inf, 0, one16, 0))); /* C + Inf */
    assert_true(one_bits(0, inf, 0, one16, 0) == INFINITY);
    assert_true(one_bits(bits(5.0f), ninf, one16, one16, one16) == -INFINITY);
    assert_true(one_bits(bits(INFINITY), 0, 0, 0, 0) == INFINITY);
    /* overflow in a chain: 2^127 * 2 twice is Inf (no saturation) */
    const float a[2][2] = {{0x1p127f, 0}, {0x1p127f, 0}}, b[2][2] = {{2, 0}, {2, 0}};
    assert_true(one(0.0f, 2, a, b) == INFINITY);
    /* -0: the chains start at +0, so -0 products leave +0 and C = -0 ends +0 */
    assert_int_equal(bits(one_bits(bits(-0.0f), 0, 0, 0, 0)), 0);
    assert_int_equal(bits(one_bits(bits(-0.0f), nzero, nzero, one16, one16)), 0);
    assert_int_equal(bits(one_bits(bits(-3.0f), bf(3.0f), 0, one16, 0)), 0); /* x - x = +0 */
    /* and a -0 C with nothing to add is still +0 + -0 = +0 */
    assert_int_equal(bits(one_bits(bits(0.0f), nzero, 0, one16, 0)), 0);
}

/* Small configured shapes: writes zero rows and bytes beyond them; stores
 * write only the shape (guards around it intact); strides of any value. */
static void test_small_shapes(void **state) {
    (void)state;
    uint8_t junk[16 * 128];
    for (size_t i = 0; i < sizeof junk; i++) junk[i] = (uint8_t)(0xa5 ^ i);
    mha_tile_config cfg;
    mha_tile_config_init(&cfg);
    mha_tile_config_set(&cfg, 0, 3, 8);  /* C: 3 x 2 fp32 */
    mha_tile_config_set(&cfg, 1, 3, 12); /* A: 3 x 3 pairs */
    mha_tile_config_set(&cfg, 2, 3, 8);  /* B: 3 x 2 pairs */
    mha_tile_config_set(&cfg, 5, 1, 1);  /* odd bytes load fine */
    MHA_TILE_CONFIGURE(&cfg);
    assert_true(mha_tile_emu_configured());
    uint8_t t[16][64];
    for (int k = 0; k < 8; k++) { /* a new config zeroes all */
        mha_tile_emu_peek(k, t);
        for (int r = 0; r < 16; r++)
            for (int j = 0; j < 64; j++) assert_int_equal(t[r][j], 0);
    }
    MHA_TILE_LOAD(1, junk, 128);
    mha_tile_emu_peek(1, t);
    for (int r = 0; r < 16; r++)
        for (int j = 0; j < 64; j++)
            assert_int_equal(t[r][j], r < 3 && j < 12 ? junk[r * 128 + j] : 0);
    MHA_TILE_LOAD(5, junk + 7, 0);
    mha_tile_emu_peek(5, t);
    assert_int_equal(t[0][0], junk[7]);
    assert_int_equal(t[0][1], 0);
    /* a negative stride walks backwards */
    MHA_TILE_LOAD(2, junk + 2 * 128, -128);
    mha_tile_emu_peek(2, t);
    for (int r = 0; r < 3; r++) assert_memory_equal(t[r], junk + (2 - r) * 128, 8);
    /* C loaded from junk, product, then all of C beyond 3 x 8 bytes is zero */
    float cbuf[3][32];
    for (int r = 0; r < 3; r++)
        for (int j = 0; j < 32; j++) cbuf[r][j] = (float)(r * 32 + j);
    MHA_TILE_LOAD(0, cbuf, sizeof cbuf[0]);
    MHA_TILE_DPBF16PS(0, 1, 2);
    mha_tile_emu_peek(0, t);
    for (int r = 0; r < 16; r++)
        for (int j = 0; j < 64; j++)
            if (r >= 3 || j >= 8) assert_int_equal(t[r][j], 0);
    /* the store writes 3 rows x 8 bytes at its stride, nothing else */
    uint8_t out[5][40];
    memset(out, 0xee, sizeof out);
    MHA_TILE_STORE(0, out[1], 40);
    for (int r = 0; r < 5; r++)
        for (int j = 0; j < 40; j++)
            if (r >= 1 && r <= 3 && j < 8)
                assert_int_equal(out[r][j], t[r - 1][j]);
            else
                assert_int_equal(out[r][j], 0xee);
    MHA_TILE_ZERO(0);
    mha_tile_emu_peek(0, t);
    for (int j = 0; j < 8; j++) assert_int_equal(t[0][j], 0);
    /* palette 0 and TILERELEASE both return to the initial state */
    mha_tile_config zero;
    memset(&zero, 0, sizeof zero);
    MHA_TILE_CONFIGURE(&zero);
    assert_false(mha_tile_emu_configured());
    MHA_TILE_CONFIGURE(&cfg);
    MHA_TILE_RELEASE();
    assert_false(mha_tile_emu_configured());
}

/* ---- faults: each in a forked child, which must die of SIGABRT with the
 * message on stderr ------------------------------------------------------ */

typedef void (*fault_fn)(void);

static void expect_abort(fault_fn f, const char *want) {
    int fd[2];
    assert_int_equal(pipe(fd), 0);
    fflush(NULL);
    const pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fd[1], 2);
        close(fd[0]);
        mha_tile_emu_release();
        f();
        _exit(0); /* no fault: the parent sees exit 0, not SIGABRT */
    }
    close(fd[1]);
    char err[1024] = "";
    size_t len = 0;
    ssize_t n;
    while (len + 1 < sizeof err && (n = read(fd[0], err + len, sizeof err - 1 - len)) > 0)
        len += (size_t)n;
    err[len] = 0;
    close(fd[0]);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGABRT)
        fail_msg("expected SIGABRT with '%s'; status %#x, stderr '%s'", want, status, err);
    if (!strstr(err, want)) fail_msg("stderr '%s' lacks '%s'", err, want);
}

static mha_tile_config good_cfg(void) {
    mha_tile_config c;
    mha_tile_config_init(&c);
    for (int t = 0; t < 3; t++) mha_tile_config_set(&c, t, 16, 64);
    return c;
}
static void cfg_with(mha_tile_config c) {
    MHA_TILE_CONFIGURE(&c);
}

static float buf[16][16];
static void f_unconfigured(void) {
    MHA_TILE_LOAD(0, buf, 64);
}
static void f_unconfigured_dp(void) {
    MHA_TILE_DPBF16PS(0, 1, 2);
}
static void f_tile_rows0(void) {
    cfg_with(good_cfg());
    MHA_TILE_ZERO(3);
}
static void f_store_rows0(void) {
    cfg_with(good_cfg());
    MHA_TILE_STORE(7, buf, 64);
}
static void f_palette(void) {
    mha_tile_config c = good_cfg();
    c.palette_id = 2;
    cfg_with(c);
}
static void f_reserved(void) {
    mha_tile_config c = good_cfg();
    c.reserved[5] = 1;
    cfg_with(c);
}
static void f_start_row(void) {
    mha_tile_config c = good_cfg();
    c.start_row = 3;
    cfg_with(c);
}
static void f_rows17(void) {
    mha_tile_config c = good_cfg();
    c.rows[4] = 17, c.colsb[4] = 4;
    cfg_with(c);
}
static void f_colsb65(void) {
    mha_tile_config c = good_cfg();
    c.rows[4] = 1, c.colsb[4] = 65;
    cfg_with(c);
}
static void f_rows_without_colsb(void) {
    mha_tile_config c = good_cfg();
    c.rows[6] = 2;
    cfg_with(c);
}
static void f_tile8(void) {
    mha_tile_config c = good_cfg();
    c.rows[8] = 1, c.colsb[8] = 4;
    cfg_with(c);
}
static void f_a_unconfigured(void) {
    mha_tile_config c = good_cfg();
    c.rows[1] = 0, c.colsb[1] = 0;
    cfg_with(c);
    MHA_TILE_DPBF16PS(0, 1, 2);
}
static void f_not_distinct(void) {
    cfg_with(good_cfg());
    MHA_TILE_DPBF16PS(1, 1, 2);
}
static void f_c_rows(void) {
    mha_tile_config c = good_cfg();
    c.rows[1] = 8; /* A 8 rows, C 16 */
    cfg_with(c);
    MHA_TILE_DPBF16PS(0, 1, 2);
}
static void f_b_colsb(void) {
    mha_tile_config c = good_cfg();
    c.colsb[2] = 32; /* B 8 pairs, C 16 fp32 */
    cfg_with(c);
    MHA_TILE_DPBF16PS(0, 1, 2);
}
static void f_k(void) {
    mha_tile_config c = good_cfg();
    c.rows[2] = 8; /* B 8 rows, A 16 pairs */
    cfg_with(c);
    MHA_TILE_DPBF16PS(0, 1, 2);
}
static void f_c_colsb_odd(void) {
    mha_tile_config c = good_cfg();
    c.colsb[0] = 6, c.colsb[2] = 6;
    cfg_with(c);
    MHA_TILE_DPBF16PS(0, 1, 2);
}
static void *thread_load(void *arg) {
    (void)arg;
    MHA_TILE_LOAD(0, buf, 64); /* this thread has no configuration */
    return NULL;
}
static void f_other_thread(void) {
    cfg_with(good_cfg());
    MHA_TILE_LOAD(0, buf, 64); /* fine here */
    pthread_t th;
    if (pthread_create(&th, NULL, thread_load, NULL) == 0) pthread_join(th, NULL);
}

static void test_faults(void **state) {
    (void)state;
    expect_abort(f_unconfigured, "TILELOADD: tmm0 used with no tile configuration");
    expect_abort(f_unconfigured_dp, "TDPBF16PS: tmm0 used with no tile configuration");
    expect_abort(f_tile_rows0, "TILEZERO: tmm3 is not configured");
    expect_abort(f_store_rows0, "TILESTORED: tmm7 is not configured");
    expect_abort(f_palette, "LDTILECFG: palette 2");
    expect_abort(f_reserved, "LDTILECFG: reserved byte 7 is 1");
    expect_abort(f_start_row, "LDTILECFG: start_row 3");
    expect_abort(f_rows17, "LDTILECFG: tile 4 has 17 rows");
    expect_abort(f_colsb65, "LDTILECFG: tile 4 has colsb 65");
    expect_abort(f_rows_without_colsb, "LDTILECFG: tile 6 has rows 2 and colsb 0");
    expect_abort(f_tile8, "LDTILECFG: tile 8");
    expect_abort(f_a_unconfigured, "TDPBF16PS: tmm1 is not configured (rows 0)");
    expect_abort(f_not_distinct, "operands tmm1, tmm1, tmm2 are not distinct");
    expect_abort(f_c_rows, "C (tmm0) has 16 rows, A (tmm1) 8");
    expect_abort(f_b_colsb, "C (tmm0) colsb 64, B (tmm2) colsb 32");
    expect_abort(f_k, "A (tmm1) has 16 pairs per row, B (tmm2) 8 rows");
    expect_abort(f_c_colsb_odd, "C (tmm0) colsb 6");
    expect_abort(f_other_thread, "TILELOADD: tmm0 used with no tile configuration on this thread");
}

/* The checker itself: a child that does not fault fails expect_abort. */
static void f_fine(void) {
    cfg_with(good_cfg());
    MHA_TILE_LOAD(0, buf, 64);
}
static void test_no_fault_is_noticed(void **state) {
    (void)state;
    fflush(NULL);
    const pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        f_fine();
        _exit(0);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_products),     cmocka_unit_test(test_cancel_order),
        cmocka_unit_test(test_denormals),           cmocka_unit_test(test_nan_inf_zero),
        cmocka_unit_test(test_small_shapes),        cmocka_unit_test(test_faults),
        cmocka_unit_test(test_no_fault_is_noticed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
