/* test_ukernels.c - the fused score micro-kernel of flash attention
 * (scores_exp): P^T = 2^(K Q^T - m) with a lazily raised reference max m.
 * Scores are built to climb by more than the lazy margin from tile to tile,
 * so m moves in the middle of a block and the rows already written, the
 * partial sums and the block factor alpha must follow; every number is
 * checked against a double computation, for each ISA the CPU has. Also the
 * register transpose that packs Q^T. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "mha.h"
#include "mha_private.h"
#include "stats.h"

/* Every ISA level through its ops table: a test's state is the level. */
#define OPS(t) mha_ops_for((mha_isa)(t))

enum { ROWS = 41, COLS = 80, D = 9, LD = 96, LAZY = 8 };

static double score(const float *k, const float *qt, int j, int i) {
    double s = 0;
    for (int c = 0; c < D; c++) s += (double)k[j * D + c] * qt[c * LD + i];
    return s;
}

/* One block from scratch (m = -inf), then a second block on the first's m. */
static void test_lazy_max(void **state) {
    const int t = (int)(intptr_t)*state;
    if ((mha_isa)t > mha_isa_active()) {
        print_message("skipping %s: not available here (or capped by MHA_ISA)\n",
                      mha_isa_name((mha_isa)t));
        skip();
    }
    /* The kernel's layout contract: 64-byte aligned rows of LD floats. */
    float *k = calloc(2 * ROWS * D, sizeof *k), *qt = aligned_alloc(64, D * LD * sizeof *qt);
    float *c = aligned_alloc(64, ROWS * LD * sizeof *c);
    _Alignas(64) float m[LD], bsum[LD], alpha[LD], m1[LD];
    uint64_t s = 7;
    for (int i = 0; i < 2 * ROWS * D; i++) k[i] = 0.5f * uniform_pm1(&s);
    for (int i = 0; i < D * LD; i++) qt[i] = 0.5f * uniform_pm1(&s);
    /* Dimension 0 makes the scores climb: +2.5 per key in the first block (a
     * rise of 15 > LAZY per 6-row tile), flat in the second, lane by lane
     * slopes differ so lanes move m at different tiles. */
    for (int j = 0; j < 2 * ROWS; j++) k[j * D] = j < ROWS ? 2.5f * (float)j : 40.0f;
    for (int i = 0; i < COLS; i++) qt[i] = 1.0f + 0.01f * (float)(i % 7);
    for (int blk = 0; blk < 2; blk++) {
        const float *kb = k + blk * ROWS * D;
        for (int i = 0; i < LD; i++) {
            if (blk == 0) m[i] = -INFINITY;
            m1[i] = m[i];
            bsum[i] = 0.0f;
            alpha[i] = 1.0f;
        }
        OPS(t)->scores_exp(ROWS, COLS, D, kb, D, qt, LD, c, LD, m, bsum, alpha, 0, 0, 0, 0.0f);
        for (int i = 0; i < COLS; i++) {
            double mx = -INFINITY, sum = 0;
            for (int j = 0; j < ROWS; j++) mx = fmax(mx, score(kb, qt, j, i));
            /* m is a reference within LAZY below the running max, never above it. */
            const double ref = blk == 0 ? mx : fmax(mx, m1[i]);
            assert_true(m[i] <= ref + 1e-4 && m[i] >= ref - LAZY - 1e-4);
            for (int j = 0; j < ROWS; j++) {
                const double want = exp2(score(kb, qt, j, i) - m[i]);
                /* float scores of magnitude ~100: a few 1e-6 absolute -> 4e-5 relative */
                assert_true(fabs(c[j * LD + i] - want) <= 4e-5 * want);
                assert_true(c[j * LD + i] <= 256.0f * (1 + 1e-6f));
                sum += want;
            }
            assert_true(fabs(bsum[i] - sum) <= 4e-5 * sum);
            /* alpha rescales what came before: 0 for the first block (nothing). */
            const double a = blk == 0 ? 0.0 : exp2((double)m1[i] - m[i]);
            assert_true(fabs(alpha[i] - a) <= 4e-5 * a);
        }
        if (blk == 1) { /* the flat block stays within LAZY of the first's m */
            int moved = 0;
            for (int i = 0; i < COLS; i++) moved += m[i] != m1[i];
            assert_int_equal(moved, 0);
        }
    }
    free(k);
    free(qt);
    free(c);
}

/* The band: score (r, i) visible iff t0 + r <= i <= t1 + r, t1 open (the
 * causal triangle) or a sliding window's left edge t1 = t0 + w. Rows are
 * visible from column t0 + r on; columns left of t0 (up to 60 here) see no
 * key at all in the block and must keep m = -inf with P = 0 (no NaN), rows
 * past the last column are wholly masked, and under a narrow band (w below
 * a vector, or 0: the diagonal alone) most of each row is. */
static void test_masked(void **state) {
    const int t = (int)(intptr_t)*state;
    if ((mha_isa)t > mha_isa_active()) skip();
    float *k = malloc(ROWS * D * sizeof *k), *qt = aligned_alloc(64, D * LD * sizeof *qt);
    float *c = aligned_alloc(64, ROWS * LD * sizeof *c);
    _Alignas(64) float m[LD], bsum[LD], alpha[LD];
    uint64_t s = 11;
    for (int i = 0; i < ROWS * D; i++) k[i] = 0.5f * uniform_pm1(&s);
    for (int i = 0; i < D * LD; i++) qt[i] = 0.5f * uniform_pm1(&s);
    for (int j = 0; j < ROWS; j++) k[j * D] = 2.5f * (float)j; /* climbing, as above */
    for (int i = 0; i < COLS; i++) qt[i] = 1.0f + 0.01f * (float)(i % 7);
    static const int64_t widths[] = {(int64_t)1 << 40, 0, 5, 17, 40, 200};
    for (size_t wi = 0; wi < sizeof widths / sizeof *widths; wi++)
        for (int t0 = -20; t0 <= 60; t0 += 20) {
            const int64_t t1 = t0 + widths[wi];
            for (int i = 0; i < ROWS * LD; i++) c[i] = NAN; /* every P read must be written */
            for (int i = 0; i < LD; i++) {
                m[i] = -INFINITY;
                bsum[i] = 0.0f;
                alpha[i] = 1.0f;
            }
            OPS(t)->scores_exp(ROWS, COLS, D, k, D, qt, LD, c, LD, m, bsum, alpha, 1, t0, t1, 0.0f);
            for (int i = 0; i < COLS; i++) {
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j < ROWS; j++)
                    if (i >= t0 + j && i <= t1 + j) mx = fmax(mx, score(k, qt, j, i));
                if (mx == -INFINITY) { /* nothing visible in this column */
                    assert_true(m[i] == -INFINITY && bsum[i] == 0.0f);
                } else {
                    assert_true(m[i] <= mx + 1e-4 && m[i] >= mx - LAZY - 1e-4);
                }
                for (int j = 0; j < ROWS; j++) {
                    const float got = c[j * LD + i];
                    if (i < t0 + j || i > t1 + j) { /* masked: written, and exactly 0 */
                        assert_true(got == 0.0f);
                        continue;
                    }
                    const double want = exp2(score(k, qt, j, i) - m[i]);
                    assert_true(fabs(got - want) <= 4e-5 * want);
                    sum += want;
                }
                assert_true(fabs(bsum[i] - sum) <= 4e-5 * sum);
            }
        }
    free(k);
    free(qt);
    free(c);
}

/* pack_transpose: dst[c][i] = scale * src[i][c] for i < n, 0 up to ldd, for
 * sizes around the vector width (odd n, d not a multiple of VW). */

static void test_pack_transpose(void **state) {
    const int t = (int)(intptr_t)*state;
    if ((mha_isa)t > mha_isa_active()) skip();
    static const int ns[] = {1, 7, 16, 33}, ds[] = {1, 5, 16, 24, 40};
    enum { LDS = 45 };
    float *src = malloc(33 * LDS * sizeof *src), *dst = malloc(41 * 64 * sizeof *dst);
    for (int i = 0; i < 33 * LDS; i++) src[i] = (float)i;
    for (size_t a = 0; a < sizeof ns / sizeof *ns; a++)
        for (size_t b = 0; b < sizeof ds / sizeof *ds; b++) {
            const int n = ns[a], d = ds[b], ldd = (n + 15) / 16 * 16 + 16; /* spare padding */
            for (int i = 0; i < 41 * 64; i++) dst[i] = NAN;
            OPS(t)->pack_transpose(n, d, src, LDS, 0.5f, dst, ldd);
            for (int c = 0; c < d; c++)
                for (int i = 0; i < ldd; i++)
                    assert_true(dst[c * ldd + i] == (i < n ? 0.5f * src[i * LDS + c] : 0.0f));
            assert_true(isnan(dst[d * ldd])); /* nothing past row d - 1 */
        }
    free(src);
    free(dst);
}

int main(void) {
    enum { N = 3 * MHA_ISA_COUNT };
    struct CMUnitTest tests[N];
    static char names[N][40];
    static const struct {
        const char *name;
        CMUnitTestFunction fn;
    } kinds[3] = {{"lazy_max", test_lazy_max},
                  {"masked", test_masked},
                  {"pack_transpose", test_pack_transpose}};
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < MHA_ISA_COUNT; i++) {
            const int t = k * MHA_ISA_COUNT + i;
            snprintf(names[t], sizeof names[t], "%s_%s", kinds[k].name, mha_isa_name((mha_isa)i));
            tests[t] = (struct CMUnitTest){names[t], kinds[k].fn, NULL, NULL, (void *)(intptr_t)i};
        }
    return _cmocka_run_group_tests("ukernels", tests, N, NULL, NULL);
}
