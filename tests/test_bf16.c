/* test_bf16.c - flash.avx512bf16 against the float64 oracle on stored bf16 and
 * fp16 inputs: a grid of tails (N 1, 7, 33, 197; head_dim 17 .. 128, odd ones
 * with a zero-padded pair), cross and decode shapes, GQA/MQA, causal, threads,
 * split, odd blocks and two layouts, with a tolerance derived below and shown
 * to be tight enough to catch a wrong answer; NaN/Inf rows; the MHA_ISA cap;
 * and default selection by dtype. The grid, the bound and the NaN/Inf rows
 * also run flash.amxemu (flash.amx's source on the tile emulation: the same
 * bound holds, its products are exact and its sums fp32). Skips visibly
 * without AVX512_BF16. */
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
#include "../variants/select.h"
#include "testutil.h"

/* The kernel under test: flash.avx512bf16, or flash.amxemu in the tests set
 * up by use_amxemu. */
static const char *g_kernel = "flash.avx512bf16";
static const mha_kernel *kernel(void) {
    return mha_kernel_find(g_kernel);
}
static int use_amxemu(void **state) {
    (void)state;
    g_kernel = "flash.amxemu";
    return 0;
}
/* flash.amx itself (skips where AMX does not run): the grid also holds it to
 * its emulated twin bit for bit, the check that the emulation is the
 * hardware's model. */
static int use_amx(void **state) {
    (void)state;
    g_kernel = "flash.amx";
    return 0;
}
static int use_bf16(void **state) {
    (void)state;
    g_kernel = "flash.avx512bf16";
    return 0;
}

static int skip_unless_bf16(void) {
    const mha_kernel *k = kernel();
    assert_non_null(k);
    if (mha_kernel_supported(k) != MHA_OK) {
        print_message("skipping: %s\n", mha_last_error());
        return 1;
    }
    return 0;
}

static uint64_t rng;
static double uniform(void) { /* [-1, 1) */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) * 0x1p-52 - 1.0;
}

/* Element i of a bf16/fp16 buffer as float. */
static float elem(mha_dtype t, const void *base, int64_t i) {
    float f;
    mha_convert_to_f32(t, (const uint16_t *)base + i, &f, 1);
    return f;
}

typedef struct {
    int64_t B, H, G, Nq, Nkv, d;
    int causal;
    mha_dtype qt, kvt;
    int threads, split, bq, bk;
    int bnhd; /* Q and O as [B, N, H, d] (strided heads) instead of [B, H, N, d] */
    float qmag;
} bf_case;

/* One case's stored inputs, its views and the oracle's output. */
typedef struct {
    bf_case c;
    mha_problem p;
    uint16_t *q, *k, *v, *o;
    mha_tensor qv, kv, vv;
    mha_tensor_mut ov;
    double *ref;
    double tol, vmax;
} bf_data;

static void view_strides(int bnhd, int64_t H, int64_t N, int64_t d, int64_t *sb, int64_t *sh,
                         int64_t *sn) {
    *sb = H * N * d;
    *sh = bnhd ? d : N * d;
    *sn = bnhd ? H * d : d;
}

/* f rounded to bf16 (what the kernel's packing does to fp16 values). */
static float to_bf16(float f) {
    uint16_t h;
    mha_convert_from_f32(MHA_BF16, &f, &h, 1);
    mha_convert_to_f32(MHA_BF16, &h, &f, 1);
    return f;
}

/* The bound on |kernel - oracle| (the oracle computes in double on exactly the
 * stored values; u = 2^-8 is bf16's unit roundoff: 8 significant bits, so
 * round-to-nearest is off by at most 2^-8 relative (2^-9 only at the top of
 * a binade: p = 8.84 rounds to 8.8125, 0.31% off); fp16's is 2^-11):
 *  - scores: Q and K stored in bf16 enter the dot products exactly (products
 *    of bf16 are exact in fp32); fp16 ones are first rounded to bf16 (RNE,
 *    deterministic), which moves score ij by a known c_ij = scale
 *    sum_c (q^ k^ - q k) (q^, k^ the bf16 values; at most S (2u + u^2), but
 *    computed here exactly, since the worst case is several times the actual
 *    one and would hide real bugs). With S = scale max_ij sum_c |q_ic k_jc|,
 *    every score is off by at most eps = max|c_ij| + S (d + 8) 2^-24 (fp32
 *    sums, the scale and log2(e) multiplies). A perturbation e_j of the scores moves each softmax
 *    weight by a factor within e^(+-2 eps), so the output moves by at most
 *    max|v| (e^(2 eps) - 1).
 *  - P rounded to bf16 for P.V (relative u per probability, the sum l keeps
 *    the fp32 P): at most u max|v|; V stored in fp16 is rounded to bf16 (u_v).
 *  - fp32 accumulation over Nkv keys and the exp2 polynomial (~3 2^-24 per
 *    p): (2 Nkv + 16) 2^-24 max|v|.
 *  - the output rounded to its dtype: u_o |o| <= u_o max|v| (1 + u + u_v).
 * Second-order terms are covered by a factor 1.25. For bf16 at d = 64 this is
 * about 0.0098 max|v| (fp16: 0.0064 plus the score term): a wrong key, a lost
 * mask or a scale off by 30% moves some output by several times it (checked
 * in test_bound_catches). */
static double tolerance(const bf_data *x) {
    const mha_problem *p = &x->p;
    const double u = 0x1p-8, uo = p->dtype == MHA_BF16 ? 0x1p-8 : 0x1p-11;
    const double ukv = x->c.kvt == MHA_F16 ? u : 0;
    const int64_t d = p->head_dim, grp = p->heads / p->kv_heads;
    double S = 0, C = 0;
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t h = 0; h < p->heads; h++)
            for (int64_t i = 0; i < p->seq_q; i++)
                for (int64_t j = 0; j < p->seq_kv; j++) {
                    double s = 0, conv = 0;
                    for (int64_t c = 0; c < d; c++) {
                        const float qf =
                            elem(x->qv.dtype, x->qv.data,
                                 b * x->qv.stride_b + h * x->qv.stride_h + i * x->qv.stride_n + c);
                        const float kf = elem(x->kv.dtype, x->kv.data,
                                              b * x->kv.stride_b + h / grp * x->kv.stride_h +
                                                  j * x->kv.stride_n + c);
                        s += fabs((double)qf * kf);
                        conv += (double)to_bf16(qf) * to_bf16(kf) - (double)qf * kf;
                    }
                    S = s > S ? s : S;
                    C = fabs(conv) > C ? fabs(conv) : C;
                }
    const double eps = mha_problem_scale(p) * (C + S * (double)(d + 8) * 0x1p-24);
    return 1.25 * x->vmax *
           (expm1(2 * eps) + u + ukv + u * ukv + uo * (1 + u + ukv) +
            (double)(2 * p->seq_kv + 16) * 0x1p-24);
}

static uint16_t *fill(mha_dtype t, size_t n, float mag, double *amax) {
    uint16_t *h = malloc(n * 2);
    assert_non_null(h);
    for (size_t i = 0; i < n; i++) {
        const float f = (float)(mag * uniform());
        mha_convert_from_f32(t, &f, h + i, 1);
        float back;
        mha_convert_to_f32(t, h + i, &back, 1);
        if (amax && fabs(back) > *amax) *amax = fabs(back);
    }
    return h;
}

static void prepare(const bf_case *c, uint64_t seed, bf_data *x) {
    memset(x, 0, sizeof *x);
    rng = seed * 0x9e3779b97f4a7c15ull + 1;
    x->c = *c;
    x->p = (mha_problem){.batch = c->B,
                         .heads = c->H,
                         .kv_heads = c->G,
                         .seq_q = c->Nq,
                         .seq_kv = c->Nkv,
                         .head_dim = c->d,
                         .causal = c->causal,
                         .scale = 0.0f,
                         .dtype = c->qt,
                         .kv_dtype = c->kvt};
    const size_t nq = (size_t)(c->B * c->H * c->Nq * c->d),
                 nkv = (size_t)(c->B * c->G * c->Nkv * c->d);
    x->q = fill(c->qt, nq, c->qmag, NULL);
    x->k = fill(c->kvt, nkv, 1.0f, NULL);
    x->v = fill(c->kvt, nkv, 1.0f, &x->vmax);
    x->o = malloc(nq * 2);
    x->ref = malloc(nq * sizeof(double));
    assert_true(x->o && x->ref);
    int64_t sb, sh, sn;
    view_strides(c->bnhd, c->H, c->Nq, c->d, &sb, &sh, &sn);
    x->qv =
        (mha_tensor){.data = x->q, .stride_b = sb, .stride_h = sh, .stride_n = sn, .dtype = c->qt};
    x->ov = (mha_tensor_mut){
        .data = x->o, .stride_b = sb, .stride_h = sh, .stride_n = sn, .dtype = c->qt};
    x->kv = mha_view_typed(x->k, c->kvt, NULL, c->G, c->Nkv, c->d);
    x->vv = mha_view_typed(x->v, c->kvt, NULL, c->G, c->Nkv, c->d);
    assert_int_equal(mha_reference(&x->p, &x->qv, &x->kv, &x->vv, x->ref), MHA_OK);
    x->tol = tolerance(x);
}

static void release(bf_data *x) {
    free(x->q);
    free(x->k);
    free(x->v);
    free(x->o);
    free(x->ref);
}

static mha_status run_kernel(const mha_kernel *k, bf_data *x) {
    const mha_options o = {x->c.threads, x->c.bq, x->c.bk, x->c.split};
    size_t ws = 0;
    mha_status st = mha_workspace_size(k, &x->p, &o, &ws);
    if (st != MHA_OK) return st;
    void *w = mha_alloc(ws);
    memset(w, 0xff, ws); /* NaN garbage: a read of what was never written shows */
    memset(x->o, 0xff, (size_t)(x->c.B * x->c.H * x->c.Nq * x->c.d) * 2);
    st = mha_attend(k, &x->p, &o, &x->qv, &x->kv, &x->vv, &x->ov, w, ws);
    mha_free(w);
    return st;
}

static mha_status run(bf_data *x) {
    return run_kernel(kernel(), x);
}

/* Number of elements off the oracle (NaN where it is NaN, within tol where it
 * is finite); the first one is described in msg. */
static int compare(const bf_data *x, const double *ref, char *msg, size_t len, double *max_err) {
    const bf_case *c = &x->c;
    int bad = 0;
    *max_err = 0;
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t h = 0; h < c->H; h++)
            for (int64_t i = 0; i < c->Nq; i++)
                for (int64_t j = 0; j < c->d; j++) {
                    const double want = ref[((b * c->H + h) * c->Nq + i) * c->d + j];
                    const double got =
                        elem(c->qt, x->o,
                             b * x->ov.stride_b + h * x->ov.stride_h + i * x->ov.stride_n + j);
                    const double err = fabs(got - want);
                    const int ok = isnan(want) ? isnan(got) : err <= x->tol;
                    if (!isnan(want) && err > *max_err) *max_err = err;
                    if (!ok && bad++ == 0)
                        snprintf(msg, len,
                                 "(b=%lld, h=%lld, i=%lld, j=%lld) got %.6g want %.6g tol %.3g",
                                 (long long)b, (long long)h, (long long)i, (long long)j, got, want,
                                 x->tol);
                }
    return bad;
}

/* Whether flash.amxemu gives x's output bit for bit (x just ran flash.amx). */
static int same_as_emulated(bf_data *x) {
    const size_t n = (size_t)(x->c.B * x->c.H * x->c.Nq * x->c.d) * 2;
    uint16_t *real = malloc(n);
    assert_non_null(real);
    memcpy(real, x->o, n);
    assert_int_equal(run_kernel(mha_kernel_find("flash.amxemu"), x), MHA_OK);
    const int same = !memcmp(real, x->o, n);
    memcpy(x->o, real, n);
    free(real);
    return same;
}

static void describe(const bf_case *c, char *buf, size_t len) {
    snprintf(buf, len,
             "B=%lld H=%lld KV=%lld Nq=%lld Nkv=%lld d=%lld causal=%d %s/%s threads=%d split=%d "
             "bq=%d bk=%d %s",
             (long long)c->B, (long long)c->H, (long long)c->G, (long long)c->Nq, (long long)c->Nkv,
             (long long)c->d, c->causal, mha_dtype_name(c->qt), mha_dtype_name(c->kvt), c->threads,
             c->split, c->bq, c->bk, c->bnhd ? "bnhd" : "bhnd");
}

static void test_grid(void **state) {
    (void)state;
    if (skip_unless_bf16()) skip();
    static const int64_t shapes[][5] = {
        {1, 2, 2, 1, 1},  {1, 2, 2, 7, 7},  {2, 2, 1, 33, 33}, {1, 4, 2, 197, 197},
        {1, 2, 2, 7, 33}, {1, 2, 2, 33, 7}, {1, 4, 1, 1, 197}, {1, 3, 3, 40, 100},
    };
    static const int64_t dims[] = {17, 63, 64, 80, 128};
    static const int blocks[][2] = {{0, 0}, {1, 1}, {7, 5}, {16, 13}, {33, 64}, {64, 31}, {5, 200}};
    static const mha_dtype types[][2] = {
        {MHA_BF16, MHA_BF16}, {MHA_F16, MHA_F16}, {MHA_BF16, MHA_F16}, {MHA_F16, MHA_BF16}};
    int ci = 0, ran = 0, failures = 0;
    double worst = 0;
    char worst_case[300] = "";
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
            for (int causal = 0; causal <= 1; causal++)
                for (size_t ti = 0; ti < 4; ti++, ci++) {
                    /* under a cap or a sanitizer (MHA_TEST_QUICK): one pair
                     * of cases in tu_stride(), rotating, so both scales,
                     * thread counts and every dtype pair stay in it */
                    if (!tu_take(ci / 2, 0)) continue;
                    const int *bl = blocks[ci % 7];
                    const bf_case c = {
                        shapes[s][0], shapes[s][1],        shapes[s][2],
                        shapes[s][3], shapes[s][4],        dims[di],
                        causal,       types[ti][0],        types[ti][1],
                        1 + (ci & 1), 1 + ((ci >> 1) & 1), bl[0],
                        bl[1],        (ci >> 2) & 1,       ci % 3 == 0 ? 3.0f : 1.0f};
                    bf_data x;
                    ran++;
                    prepare(&c, (uint64_t)ci, &x);
                    char desc[200], msg[200] = "";
                    describe(&c, desc, sizeof desc);
                    const mha_status st = run(&x);
                    double err = 0;
                    if (st != MHA_OK) {
                        print_error("case %d %s: %s\n", ci, desc, mha_last_error());
                        failures++;
                    } else if (compare(&x, x.ref, msg, sizeof msg, &err)) {
                        print_error("case %d %s: %s\n", ci, desc, msg);
                        failures++;
                    } else if (!strcmp(g_kernel, "flash.amx") && !same_as_emulated(&x)) {
                        print_error("case %d %s: flash.amx differs from flash.amxemu\n", ci, desc);
                        failures++;
                    }
                    if (x.vmax > 0 && err / x.tol > worst) {
                        worst = err / x.tol;
                        snprintf(worst_case, sizeof worst_case,
                                 "case %d %s: max|err| %.3g, tol %.3g", ci, desc, err, x.tol);
                    }
                    release(&x);
                }
    print_message("%d of %d cases, worst |err| / tol %.3f (%s)\n", ran, ci, worst, worst_case);
    assert_true(ran > 0);
    assert_int_equal(failures, 0);
}

/* The bound is tight enough to mean something: the kernel's output must fail
 * it against oracles of slightly wrong problems (one key's V row moved by a
 * max|v|, the scale off by 30%, the causal mask), while passing
 * the right one. */
static void test_bound_catches(void **state) {
    (void)state;
    if (skip_unless_bf16()) skip();
    for (int t = 0; t < 2; t++) {
        const mha_dtype dt = t ? MHA_F16 : MHA_BF16;
        const bf_case c = {1, 2, 2, 33, 33, 64, 0, dt, dt, 1, 1, 0, 0, 0, 1.0f};
        bf_data x;
        prepare(&c, 99, &x);
        assert_int_equal(run(&x), MHA_OK);
        char msg[200];
        double err;
        assert_int_equal(compare(&x, x.ref, msg, sizeof msg, &err), 0);
        print_message("%s: max|err| %.3g, tol %.3g\n", mha_dtype_name(dt), err, x.tol);
        const size_t n = (size_t)(c.B * c.H * c.Nq * c.d);
        double *wrong = malloc(n * sizeof(double));
        /* V row 5 of every KV head shifted by max|v| */
        uint16_t *v2 = malloc((size_t)(c.B * c.G * c.Nkv * c.d) * 2);
        memcpy(v2, x.v, (size_t)(c.B * c.G * c.Nkv * c.d) * 2);
        for (int64_t h = 0; h < c.G; h++)
            for (int64_t j = 0; j < c.d; j++) {
                const size_t at = (size_t)((h * c.Nkv + 5) * c.d + j);
                float f = elem(dt, v2, (int64_t)at) + (float)x.vmax;
                mha_convert_from_f32(dt, &f, v2 + at, 1);
            }
        const mha_tensor vv2 = mha_view_typed(v2, dt, NULL, c.G, c.Nkv, c.d);
        assert_int_equal(mha_reference(&x.p, &x.qv, &x.kv, &vv2, wrong), MHA_OK);
        assert_true(compare(&x, wrong, msg, sizeof msg, &err) > 0);
        print_message("%s, V row moved: %s\n", mha_dtype_name(dt), msg);
        mha_problem p2 = x.p;
        p2.scale = mha_problem_scale(&x.p) * 1.3f;
        assert_int_equal(mha_reference(&p2, &x.qv, &x.kv, &x.vv, wrong), MHA_OK);
        assert_true(compare(&x, wrong, msg, sizeof msg, &err) > 0);
        print_message("%s, scale x1.3: %s\n", mha_dtype_name(dt), msg);
        p2 = x.p;
        p2.causal = 1;
        assert_int_equal(mha_reference(&p2, &x.qv, &x.kv, &x.vv, wrong), MHA_OK);
        assert_true(compare(&x, wrong, msg, sizeof msg, &err) > 0);
        print_message("%s, causal: %s\n", mha_dtype_name(dt), msg);
        free(v2);
        free(wrong);
        release(&x);
    }
}

static void set_q(bf_data *x, int64_t h, int64_t i, float f) {
    for (int64_t c = 0; c < x->c.d; c++)
        mha_convert_from_f32(x->c.qt, &f, x->q + h * x->qv.stride_h + i * x->qv.stride_n + c, 1);
}

/* README "NaN and Inf": NaN in a Q row gives that row NaN and no other; rows
 * that see no key are zeros; a row whose scores are all -inf is NaN. */
static void test_nan_inf(void **state) {
    (void)state;
    if (skip_unless_bf16()) skip();
    for (int t = 0; t < 2; t++) {
        const mha_dtype dt = t ? MHA_F16 : MHA_BF16;
        char msg[200];
        double err;
        /* NaN in Q row 3 of head 1; causal with Nq > Nkv: rows 0..5 see no key. */
        bf_case c = {1, 2, 1, 17, 11, 33, 1, dt, dt, 2, 2, 5, 3, 0, 1.0f};
        bf_data x;
        prepare(&c, 7, &x);
        set_q(&x, 1, 9, NAN);
        assert_int_equal(mha_reference(&x.p, &x.qv, &x.kv, &x.vv, x.ref), MHA_OK);
        assert_int_equal(run(&x), MHA_OK);
        assert_int_equal(compare(&x, x.ref, msg, sizeof msg, &err), 0);
        for (int64_t i = 0; i < c.Nq; i++)
            for (int64_t h = 0; h < c.H; h++) {
                const float got = elem(dt, x.o, h * x.ov.stride_h + i * x.ov.stride_n);
                if (i < 6)
                    assert_true(got == 0.0f);
                else
                    assert_int_equal(isnan(got) != 0, h == 1 && i == 9);
            }
        release(&x);
        /* Every score -inf: K = -inf everywhere, Q > 0: NaN rows (0/0). */
        c = (bf_case){1, 1, 1, 5, 9, 20, 0, dt, dt, 1, 1, 0, 0, 0, 1.0f};
        prepare(&c, 8, &x);
        for (int64_t i = 0; i < c.Nq; i++) set_q(&x, 0, i, 0.5f);
        const float ninf = -INFINITY;
        for (int64_t j = 0; j < c.Nkv * c.d; j++) mha_convert_from_f32(dt, &ninf, x.k + j, 1);
        assert_int_equal(mha_reference(&x.p, &x.qv, &x.kv, &x.vv, x.ref), MHA_OK);
        assert_int_equal(run(&x), MHA_OK);
        for (int64_t i = 0; i < c.Nq * c.d; i++) {
            assert_true(isnan(x.ref[i]));
            assert_true(isnan(elem(dt, x.o, i)));
        }
        release(&x);
    }
}

/* README "Element types": the bf16-instruction kernels flush subnormal bf16
 * operands (and products) to zero, as vdpbf16ps and vcvtne(2)ps2bf16 do
 * whatever MXCSR says, so an output is off by at most the largest subnormal
 * bf16, 1.2e-38 (x max|v| for a weight), against the oracle, which takes them
 * exactly. Pinned on V: columns 0 and 1 of every V row set to 2^-127 and to
 * the largest subnormal (0x007f): exact outputs 5.9e-39 and 1.17e-38 come
 * out 0; a Q row of subnormals only moves its scores by ~1e-38 (within the
 * usual bound). Both kernels, bf16 Q/O and K/V. */
static void test_subnormal_flush(void **state) {
    (void)state;
    if (skip_unless_bf16()) skip();
    static const char *const names[] = {"flash.avx512bf16", "decode.avx512bf16"};
    const double largest = 0x7fp-133; /* bf16 0x007f: (1 - 2^-7) 2^-126 */
    for (int n = 0; n < 2; n++) {
        const mha_kernel *k = mha_kernel_find(names[n]);
        assert_non_null(k);
        const bf_case c = {1, 2, 1, n ? 1 : 5, 37, 64, 0, MHA_BF16, MHA_BF16, 1, 1, 0, 0, 0, 1.0f};
        bf_data x;
        prepare(&c, 21 + (uint64_t)n, &x);
        for (int64_t j = 0; j < c.Nkv; j++) {
            x.v[j * c.d] = 0x0040;     /* 2^-127 */
            x.v[j * c.d + 1] = 0x007f; /* the largest subnormal */
        }
        const uint16_t sub = 0x0001; /* 2^-133, the least one */
        for (int64_t cc = 0; cc < c.d; cc++) x.q[(c.Nq - 1) * c.d + cc] = sub;
        assert_int_equal(mha_reference(&x.p, &x.qv, &x.kv, &x.vv, x.ref), MHA_OK);
        assert_int_equal(run_kernel(k, &x), MHA_OK);
        char msg[200];
        double err;
        assert_int_equal(compare(&x, x.ref, msg, sizeof msg, &err), 0); /* the usual bound */
        for (int64_t h = 0; h < c.H; h++)
            for (int64_t i = 0; i < c.Nq; i++)
                for (int col = 0; col < 2; col++) {
                    const int64_t at = h * x.ov.stride_h + i * x.ov.stride_n + col;
                    const double want = x.ref[(h * c.Nq + i) * c.d + col];
                    const double got = elem(MHA_BF16, x.o, at);
                    if (h == 0 && i == 0)
                        print_message("%s: column %d exact %.3g, got %.3g\n", names[n], col, want,
                                      got);
                    assert_true(want > 0 && want <= largest * (1 + 1e-6));
                    assert_true(fabs(got - want) <= largest * (1 + 1e-6));
                    assert_true(got == 0.0); /* flushed, as the README says */
                }
        release(&x);
    }
}

/* MHA_ISA=avx512 hides the kernel: mha_attend refuses it, and the default
 * for a bf16 problem is another kernel that takes bf16 (decode.avx512, which
 * runs any shape), never this one. */
static void test_isa_cap(void **state) {
    (void)state;
    if (skip_unless_bf16()) skip();
    bf_case c = {1, 1, 1, 4, 4, 16, 0, MHA_BF16, MHA_BF16, 1, 0, 0, 0, 0, 1.0f};
    bf_data x;
    prepare(&c, 3, &x);
    setenv("MHA_ISA", "avx512", 1);
    assert_int_equal(mha_kernel_supported(kernel()), MHA_EUNSUPPORTED);
    assert_non_null(strstr(mha_last_error(), "avx512bf16"));
    assert_int_equal(run(&x), MHA_EUNSUPPORTED);
    mha_selection sel;
    const mha_status st = mha_select(&x.p, NULL, &sel);
    if (st == MHA_OK) {
        assert_true(sel.kernel != kernel());
        assert_int_equal(mha_kernel_takes(sel.kernel, &x.p), MHA_OK);
        assert_int_equal(mha_kernel_supported(sel.kernel), MHA_OK);
    } else {
        assert_int_equal(st, MHA_EUNSUPPORTED);
        assert_non_null(strstr(mha_last_error(), "bf16"));
    }
    setenv("MHA_ISA", "avx512bf16", 1);
    assert_int_equal(run(&x), MHA_OK);
    unsetenv("MHA_ISA");
    release(&x);
}

/* Default selection by dtype: a bf16 or fp16 problem gets the bf16 kernel,
 * an fp32 one never does (it would refuse it). */
static void test_default_by_dtype(void **state) {
    (void)state;
    if (skip_unless_bf16()) skip();
    setenv("MHA_TUNING", "/nonexistent/mhabench-table.json", 1);
    mha_problem p = {.batch = 1,
                     .heads = 8,
                     .kv_heads = 8,
                     .seq_q = 512,
                     .seq_kv = 512,
                     .head_dim = 64,
                     .causal = 1,
                     .scale = 0.0f,
                     .dtype = MHA_BF16,
                     .kv_dtype = MHA_BF16};
    /* the bf16 default: flash.amx where the tiles run (same rank, higher
     * ISA), else this level's flash kernel */
    const mha_kernel *amx = mha_kernel_find("flash.amx");
    const mha_kernel *want = amx && mha_kernel_supported(amx) == MHA_OK ? amx : kernel();
    mha_selection sel;
    for (int t = MHA_F32; t <= MHA_F16; t++) {
        p.dtype = p.kv_dtype = (mha_dtype)t;
        assert_int_equal(mha_select(&p, NULL, &sel), MHA_OK);
        assert_int_equal(mha_kernel_takes(sel.kernel, &p), MHA_OK);
        assert_int_equal(sel.kernel == want, t != MHA_F32);
        assert_ptr_equal(mha_default_kernel(&p), sel.kernel);
    }
    p.dtype = MHA_F16;
    p.kv_dtype = MHA_BF16;
    assert_ptr_equal(mha_default_kernel(&p), want);
    unsetenv("MHA_TUNING");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grid),
        cmocka_unit_test(test_bound_catches),
        cmocka_unit_test(test_nan_inf),
        cmocka_unit_test(test_subnormal_flush),
        cmocka_unit_test(test_isa_cap),
        cmocka_unit_test(test_default_by_dtype),
        {"test_grid_amxemu", test_grid, use_amxemu, use_bf16, NULL},
        {"test_bound_catches_amxemu", test_bound_catches, use_amxemu, use_bf16, NULL},
        {"test_nan_inf_amxemu", test_nan_inf, use_amxemu, use_bf16, NULL},
        {"test_grid_amx", test_grid, use_amx, use_bf16, NULL},
        {"test_nan_inf_amx", test_nan_inf, use_amx, use_bf16, NULL},
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
