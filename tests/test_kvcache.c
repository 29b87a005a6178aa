/* test_kvcache.c - the decode kernels over a KV cache stored as bf16, fp16 or
 * int8 (+ one fp32 scale per (batch, KV head, token) row), with Q/O in fp32,
 * bf16 or fp16: every MHA_KT_DECODE kernel that runs here against the float64
 * oracle on the same stored inputs, over a grid of decode shapes (GQA/MQA,
 * causal, tails of head_dim and of the cache, two layouts with scales stored
 * head-major or token-major, 1 and 2 threads, so split-KV merges run too);
 * plus the NaN cases of a typed cache and a check that the comparison catches
 * a wrong scale stride. One cmocka test per (Q dtype, KV dtype) pair; kernels
 * above the MHA_ISA cap are skipped visibly. */
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
#include "testutil.h"

enum { GUARD = 256 };                   /* bytes after every output, checked for stray writes */
static const uint64_t SEED = 20261214u; /* printed; re-seeded per case */

static uint64_t rng;
static uint64_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}
static float unif(void) { /* [-1, 1) */
    return (float)((double)(next() >> 11) * 0x1p-52 - 1.0);
}

/* One stored case: a problem, its typed buffers and views, and the oracle. */
typedef struct {
    mha_problem p;
    int layout; /* 0: [B,H,N,d] with scales [B][G][N]; 1: [B,N,H,d] with scales [B][N][G] */
    void *q, *k, *v;
    float *ks, *vs;
    mha_tensor qt, kt, vt;
    double *ref;
    double tol, mag; /* mag: max |V| */
    size_t out_bytes;
} kv_case;

static mha_tensor view(const void *data, mha_dtype t, const float *scale, int layout, int64_t B,
                       int64_t H, int64_t N, int64_t d) {
    (void)B;
    mha_tensor v = {.data = data, .dtype = t, .scale = scale};
    if (layout == 0) {
        v.stride_b = H * N * d, v.stride_h = N * d, v.stride_n = d;
        v.scale_stride_b = H * N, v.scale_stride_h = N, v.scale_stride_n = 1;
    } else {
        v.stride_b = N * H * d, v.stride_h = d, v.stride_n = H * d;
        v.scale_stride_b = N * H, v.scale_stride_h = 1, v.scale_stride_n = H;
    }
    return v;
}

/* n values of type t from the fp32 values x (rows of d; int8 quantised per
 * row with its scale into scales). K rows get magnitudes spread over 2^-3 ..
 * 2^3 so every row's scale differs and matters. */
static void *store(mha_dtype t, const float *x, int64_t rows, int64_t d, float *scales) {
    void *buf = malloc((size_t)(rows * d) * mha_dtype_size(t) + 1);
    if (t == MHA_I8)
        mha_quantize_rows_i8(x, rows, d, d, buf, d, scales);
    else
        mha_convert_from_f32(t, x, buf, (size_t)(rows * d));
    return buf;
}

/* The stored value of element (b, h, n, c) of a view, widened (and scaled). */
static double value(const mha_tensor *t, int64_t b, int64_t h, int64_t n, int64_t c) {
    const int64_t i = b * t->stride_b + h * t->stride_h + n * t->stride_n + c;
    float f;
    mha_convert_to_f32(t->dtype, (const char *)t->data + i * (int64_t)mha_dtype_size(t->dtype), &f,
                       1);
    if (t->dtype == MHA_I8)
        f *= t->scale[b * t->scale_stride_b + h * t->scale_stride_h + n * t->scale_stride_n];
    return f;
}

static double max_row_norm(const mha_tensor *t, int64_t B, int64_t H, int64_t N, int64_t d) {
    double best = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t n = 0; n < N; n++) {
                double s = 0;
                for (int64_t c = 0; c < d; c++) {
                    const double x = value(t, b, h, n, c);
                    if (isfinite(x)) s += x * x;
                }
                best = s > best ? s : best;
            }
    return sqrt(best);
}

/* The tolerance, derived as harness/check.c derives the fp32 one (read it
 * there): the inputs are exact for the oracle (it reads the stored values:
 * bf16/fp16 widen exactly, int8 times its row's scale), so the kernel's error
 * is its fp32 arithmetic: accumulation (TOL_BASE = 2e-5 of mag = max|V|,
 * ~170 ulp) and the rounding of the logits (4 eps per unit of
 * sqrt(d) * scale * max|q| * max|k|, row norms). Folding an int8 row's scale
 * into its score and its weight adds one fp32 rounding to each (2^-24
 * relative), inside TOL_BASE. The output is then rounded to its dtype (RNE):
 * at most half an ulp, u = 2^-8 relative for bf16 (8 significant bits; the
 * brief's 2^-9 would be the bound of a 9-bit format), 2^-11 for fp16 (11
 * bits), plus fp16's subnormal spacing 2^-24 / 2 absolute; so
 * tol(out) = tol32 + u * (|ref| + tol32) + floor. A kernel on the bf16 dot
 * product or the tiles (the avx512bf16 and amx levels: decode.avx512bf16,
 * decode.amx and its emulated twin) also rounds P to bf16 before P.V with the
 * row sum taken from the unrounded P: each normalised weight moves by at most
 * u_b = 2^-9 relative, so o by <= u_b * mag; check.c's "P rounded to bf16"
 * term, 2 u_b * mag (it also covers a kernel that sums the rounded P), joins
 * tol32 for those kernels. */
#define TOL_BASE 2e-5
#define TOL_LOGIT (4.0 * 1.1920929e-7)
static double out_tol(const kv_case *c, double want, int p_rounded) {
    const mha_dtype t = c->p.dtype;
    const double tol = c->tol + (p_rounded ? 2 * 0x1p-9 * c->mag : 0.0);
    const double u = t == MHA_BF16 ? 0x1p-8 : t == MHA_F16 ? 0x1p-11 : 0.0;
    const double floor = t == MHA_F16 ? 0x1p-25 : 0.0;
    return tol + u * (fabs(want) + tol) + floor;
}

static void make_case(kv_case *c, mha_problem p, int layout, uint64_t seed) {
    memset(c, 0, sizeof *c);
    c->p = p;
    c->layout = layout;
    rng = seed | 1;
    const int64_t B = p.batch, H = p.heads, G = p.kv_heads, Nq = p.seq_q, N = p.seq_kv,
                  d = p.head_dim;
    const mha_dtype kvt = mha_problem_kv_dtype(&p);
    float *x = malloc((size_t)(B * (H > G ? H : G) * (Nq > N ? Nq : N) * d) * sizeof(float));
    /* Q: |q| <= 2; the layout only permutes rows, so fill in storage order */
    for (int64_t i = 0; i < B * H * Nq * d; i++) x[i] = 2.0f * unif();
    c->q = store(p.dtype, x, B * H * Nq, d, NULL);
    const int64_t rows = B * G * N;
    if (kvt == MHA_I8) {
        c->ks = malloc((size_t)rows * sizeof(float));
        c->vs = malloc((size_t)rows * sizeof(float));
    }
    for (int64_t r = 0; r < rows; r++) {
        const float mag = ldexpf(1.0f, (int)(next() % 7) - 3);
        for (int64_t i = 0; i < d; i++) x[r * d + i] = 2.0f * mag * unif();
    }
    c->k = store(kvt, x, rows, d, c->ks);
    for (int64_t r = 0; r < rows; r++) {
        const float mag = ldexpf(1.0f, (int)(next() % 5) - 2);
        for (int64_t i = 0; i < d; i++) x[r * d + i] = mag * unif();
    }
    c->v = store(kvt, x, rows, d, c->vs);
    free(x);
    c->qt = view(c->q, p.dtype, NULL, layout, B, H, Nq, d);
    c->kt = view(c->k, kvt, c->ks, layout, B, G, N, d);
    c->vt = view(c->v, kvt, c->vs, layout, B, G, N, d);
    c->out_bytes = (size_t)(B * H * Nq * d) * mha_dtype_size(p.dtype);
    c->ref = malloc((size_t)(B * H * Nq * d) * sizeof(double));
    if (mha_reference(&c->p, &c->qt, &c->kt, &c->vt, c->ref) != MHA_OK)
        fail_msg("oracle: %s", mha_last_error());
    double mag = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t g = 0; g < G; g++)
            for (int64_t n = 0; n < N; n++)
                for (int64_t i = 0; i < d; i++) {
                    const double a = fabs(value(&c->vt, b, g, n, i));
                    if (isfinite(a) && a > mag) mag = a;
                }
    const double smax = (double)mha_problem_scale(&p) * max_row_norm(&c->qt, B, H, Nq, d) *
                        max_row_norm(&c->kt, B, G, N, d);
    c->mag = mag > 0 ? mag : 1e-30;
    c->tol = (mag > 0 ? mag : 1e-30) * (TOL_BASE + TOL_LOGIT * sqrt((double)d) * smax);
}

static void free_case(kv_case *c) {
    free(c->q);
    free(c->k);
    free(c->v);
    free(c->ks);
    free(c->vs);
    free(c->ref);
}

static void describe(const kv_case *c, char *buf, size_t n) {
    const mha_problem *p = &c->p;
    snprintf(buf, n, "q=%s kv=%s B=%lld H=%lld G=%lld Nq=%lld Nkv=%lld d=%lld causal=%d layout=%s",
             mha_dtype_name(p->dtype), mha_dtype_name(mha_problem_kv_dtype(p)), (long long)p->batch,
             (long long)p->heads, (long long)p->kv_heads, (long long)p->seq_q, (long long)p->seq_kv,
             (long long)p->head_dim, p->causal, c->layout ? "bnhd" : "bhnd");
}

/* Runs kernel k on case c (views k_view/v_view, normally c's own) and
 * compares with c's oracle. Returns 0 if every element passes, else 1 with
 * the first bad element in msg. */
static int run_check(const mha_kernel *k, const kv_case *c, const mha_tensor *k_view,
                     const mha_tensor *v_view, int threads, char *msg, size_t msglen) {
    const mha_problem *p = &c->p;
    const int64_t B = p->batch, H = p->heads, Nq = p->seq_q, d = p->head_dim;
    const mha_options o = {.threads = threads};
    size_t ws = 0;
    if (mha_workspace_size(k, p, &o, &ws) != MHA_OK) {
        snprintf(msg, msglen, "workspace: %s", mha_last_error());
        return 1;
    }
    void *w = mha_alloc(ws);
    unsigned char *out = malloc(c->out_bytes + GUARD);
    memset(out, 0xff, c->out_bytes + GUARD); /* NaN in every dtype: unwritten elements fail */
    mha_tensor_mut ot = {
        .data = out, .stride_b = 0, .stride_h = 0, .stride_n = 0, .dtype = p->dtype};
    const mha_tensor lay = view(out, p->dtype, NULL, c->layout, B, H, Nq, d);
    ot.stride_b = lay.stride_b, ot.stride_h = lay.stride_h, ot.stride_n = lay.stride_n;
    int bad = 0;
    const int p_rounded =
        mha_kernel_isa(k) == MHA_ISA_AVX512BF16 || mha_kernel_isa(k) == MHA_ISA_AMX;
    const mha_status st = mha_attend(k, p, &o, &c->qt, k_view, v_view, &ot, w, ws);
    if (st != MHA_OK) {
        snprintf(msg, msglen, "mha_attend: %s", mha_last_error());
        bad = 1;
    }
    for (int i = 0; i < GUARD && !bad; i++)
        if (out[c->out_bytes + i] != 0xff) {
            snprintf(msg, msglen, "stray write %d bytes past the output", i);
            bad = 1;
        }
    for (int64_t b = 0; b < B && !bad; b++)
        for (int64_t h = 0; h < H && !bad; h++)
            for (int64_t i = 0; i < Nq && !bad; i++)
                for (int64_t e = 0; e < d && !bad; e++) {
                    const double got = value(&lay, b, h, i, e);
                    const double want = c->ref[((b * H + h) * Nq + i) * d + e];
                    const double err = fabs(got - want), tol = out_tol(c, want, p_rounded);
                    if (isnan(want) ? !isnan(got) : !(err <= tol)) {
                        snprintf(msg, msglen,
                                 "(b=%lld, h=%lld, i=%lld, c=%lld): got %.9g, want %.9g, |diff| "
                                 "%.3g > tol %.3g",
                                 (long long)b, (long long)h, (long long)i, (long long)e, got, want,
                                 err, tol);
                        bad = 1;
                    }
                }
    free(out);
    mha_free(w);
    return bad;
}

/* The grid: every (Nkv, d, kv_heads, causal), with Nq cycling 1..4, batch
 * and layout alternating, so each axis value meets every other axis. */
static const int64_t NKV[] = {1, 7, 33, 197, 4097};
static const int64_t DS[] = {17, 64, 128, 129};
static const int64_t GS[] = {8, 2, 1};

typedef struct {
    mha_dtype q, kv;
} dtype_pair;

static void test_pair(void **state) {
    const dtype_pair *dp = *state;
    const int nk = mha_kernel_count();
    int runs = 0, failures = 0, idx = 0;
    for (int ki = 0; ki < nk; ki++) {
        const mha_kernel *k = mha_kernel_at(ki);
        if ((mha_kernel_traits(k) & MHA_KT_DECODE) && mha_kernel_supported(k) != MHA_OK)
            print_message("skipping %s: %s\n", mha_kernel_name(k), mha_last_error());
        const mha_problem probe = {.batch = 1,
                                   .heads = 8,
                                   .kv_heads = 2,
                                   .seq_q = 1,
                                   .seq_kv = 8,
                                   .head_dim = 64,
                                   .dtype = dp->q,
                                   .kv_dtype = dp->kv == dp->q ? MHA_F32 : dp->kv};
        if ((mha_kernel_traits(k) & MHA_KT_DECODE) && mha_kernel_supported(k) == MHA_OK &&
            mha_kernel_takes(k, &probe) != MHA_OK)
            print_message("not run: %s does not take q=%s kv=%s\n", mha_kernel_name(k),
                          mha_dtype_name(dp->q), mha_dtype_name(dp->kv));
    }
    for (size_t a = 0; a < sizeof NKV / sizeof *NKV; a++)
        for (size_t bd = 0; bd < sizeof DS / sizeof *DS; bd++)
            for (size_t cg = 0; cg < sizeof GS / sizeof *GS; cg++)
                for (int causal = 0; causal <= 1; causal++, idx++) {
                    /* under a cap or a sanitizer (MHA_TEST_QUICK): one in
                     * tu_stride(), rotating */
                    if (!tu_take(idx, (long)dp->kv)) continue;
                    const mha_problem p = {.batch = 1 + (idx / 3) % 2,
                                           .heads = 8,
                                           .kv_heads = GS[cg],
                                           .seq_q = 1 + (idx * 3 + (int)a) % 4,
                                           .seq_kv = NKV[a],
                                           .head_dim = DS[bd],
                                           .causal = causal,
                                           .dtype = dp->q,
                                           .kv_dtype = dp->kv == dp->q ? MHA_F32 : dp->kv};
                    kv_case c;
                    make_case(&c, p, idx % 2, SEED ^ (0x9e3779b97f4a7c15ull * (uint64_t)(idx + 1)));
                    for (int ki = 0; ki < nk; ki++) {
                        const mha_kernel *k = mha_kernel_at(ki);
                        if (!(mha_kernel_traits(k) & MHA_KT_DECODE) ||
                            mha_kernel_supported(k) != MHA_OK)
                            continue;
                        if (mha_kernel_takes(k, &p) != MHA_OK) continue; /* e.g. bf16 only */
                        for (int threads = 1; threads <= 2; threads++, runs++) {
                            char msg[256], desc[200];
                            if (run_check(k, &c, &c.kt, &c.vt, threads, msg, sizeof msg)) {
                                describe(&c, desc, sizeof desc);
                                print_error("%s case %d %s threads=%d: %s\n", mha_kernel_name(k),
                                            idx, desc, threads, msg);
                                failures++;
                            }
                        }
                    }
                    free_case(&c);
                }
    print_message("q=%s kv=%s: %d runs (seed %llu), %d failed\n", mha_dtype_name(dp->q),
                  mha_dtype_name(dp->kv), runs, (unsigned long long)SEED, failures);
    assert_int_equal(failures, 0);
}

/* Sets element c of stored row (b, g, n) of a case's K or V to NaN. */
static void plant_nan(kv_case *c, mha_tensor *t, int64_t b, int64_t g, int64_t n, int64_t e) {
    (void)c;
    const int64_t i = b * t->stride_b + g * t->stride_h + n * t->stride_n + e;
    const size_t es = mha_dtype_size(t->dtype);
    const uint16_t nan16 = t->dtype == MHA_BF16 ? 0x7fc0 : 0x7e00;
    const float nanf_ = NAN;
    memcpy((char *)t->data + (size_t)i * es, t->dtype == MHA_F32 ? (const void *)&nanf_ : &nan16,
           es);
}

/* NaN in a typed cache: a NaN int8 scale behaves as NaN data (a row that sees
 * that key is NaN; a row the causal mask hides it from is not touched, K or
 * V); a NaN bf16/fp16 K element likewise. Checked against the oracle, which
 * agrees with those rules, on every decode kernel and 1/2 threads. */
static void test_nan(void **state) {
    (void)state;
    static const mha_dtype kvs[] = {MHA_I8, MHA_BF16, MHA_F16};
    int runs = 0, failures = 0;
    for (size_t ti = 0; ti < sizeof kvs / sizeof *kvs; ti++)
        for (int what = 0; what < 4; what++) { /* 0, 2: K, 1, 3: V (scale for int8) */
            /* 2, 3: Q/O in the cache's dtype too (a bf16 cache only: the
             * kernels that take a bf16 problem alone, decode.avx512bf16) */
            if (what >= 2 && kvs[ti] != MHA_BF16) continue;
            /* Nq = 4 causal over 300 keys: rows 0..2 do not see keys 297..299 */
            const mha_problem p = {.batch = 1,
                                   .heads = 8,
                                   .kv_heads = 2,
                                   .seq_q = 4,
                                   .seq_kv = 300,
                                   .head_dim = 40,
                                   .causal = 1,
                                   .scale = 0.0f,
                                   .dtype = what >= 2 ? kvs[ti] : MHA_F32,
                                   .kv_dtype = kvs[ti]};
            kv_case c;
            make_case(&c, p, (int)ti % 2, SEED + 17 * ti + (uint64_t)(what % 2));
            const int64_t hidden = 299, seen = 10; /* key 299: only row 3 sees it */
            mha_tensor *t = what % 2 ? &c.vt : &c.kt;
            if (kvs[ti] == MHA_I8 && what == 1) {
                ((float *)t->scale)[0 * t->scale_stride_b + 1 * t->scale_stride_h +
                                    hidden * t->scale_stride_n] = NAN;
                ((float *)t->scale)[0 * t->scale_stride_b + 0 * t->scale_stride_h +
                                    seen * t->scale_stride_n] = NAN;
            } else if (kvs[ti] == MHA_I8) {
                ((float *)t->scale)[1 * t->scale_stride_h + hidden * t->scale_stride_n] = NAN;
                ((float *)t->scale)[0 * t->scale_stride_h + seen * t->scale_stride_n] = NAN;
            } else if (what % 2 == 0) { /* NaN data in V reaches 0-weight rows: not planted */
                plant_nan(&c, t, 0, 1, hidden, 5);
                plant_nan(&c, t, 0, 0, seen, 39);
            } else {
                free_case(&c);
                continue;
            }
            if (mha_reference(&c.p, &c.qt, &c.kt, &c.vt, c.ref) != MHA_OK)
                fail_msg("oracle: %s", mha_last_error());
            /* the oracle itself: KV head 0's rows NaN, head 1's rows 0..2 finite, row 3 NaN */
            const int64_t d = p.head_dim;
            assert_true(isnan(c.ref[((0 * 4) + 0) * d]));
            assert_true(isfinite(c.ref[((4 * 4) + 2) * d]));
            assert_true(isnan(c.ref[((4 * 4) + 3) * d]));
            for (int ki = 0; ki < mha_kernel_count(); ki++) {
                const mha_kernel *k = mha_kernel_at(ki);
                if (!(mha_kernel_traits(k) & MHA_KT_DECODE) || mha_kernel_supported(k) != MHA_OK ||
                    mha_kernel_takes(k, &c.p) != MHA_OK)
                    continue;
                for (int threads = 1; threads <= 2; threads++, runs++) {
                    char msg[256];
                    if (run_check(k, &c, &c.kt, &c.vt, threads, msg, sizeof msg)) {
                        print_error("%s NaN in %s %s threads=%d: %s\n", mha_kernel_name(k),
                                    what % 2 ? "V" : "K", mha_dtype_name(kvs[ti]), threads, msg);
                        failures++;
                    }
                }
            }
            free_case(&c);
        }
    print_message("NaN cases: %d runs, %d failed\n", runs, failures);
    assert_int_equal(failures, 0);
}

/* The comparison must catch a wrong answer: the same int8 cache read through
 * a view whose scale stride is wrong (scale_stride_n 0: every token takes the
 * first token's scale; or K's scales for V) fails against the oracle of the
 * right view, on every decode kernel that runs here. */
static void test_catches_wrong_scale(void **state) {
    (void)state;
    const mha_problem p = {.batch = 1,
                           .heads = 8,
                           .kv_heads = 2,
                           .seq_q = 1,
                           .seq_kv = 197,
                           .head_dim = 64,
                           .causal = 0,
                           .scale = 0.0f,
                           .dtype = MHA_F32,
                           .kv_dtype = MHA_I8};
    kv_case c;
    make_case(&c, p, 0, SEED);
    for (int ki = 0; ki < mha_kernel_count(); ki++) {
        const mha_kernel *k = mha_kernel_at(ki);
        if (!(mha_kernel_traits(k) & MHA_KT_DECODE) || mha_kernel_supported(k) != MHA_OK ||
            mha_kernel_takes(k, &c.p) != MHA_OK)
            continue;
        char msg[256];
        if (run_check(k, &c, &c.kt, &c.vt, 1, msg, sizeof msg)) fail_msg("%s", msg);
        mha_tensor wk = c.kt, wv = c.vt;
        wk.scale_stride_n = 0;
        assert_int_equal(run_check(k, &c, &wk, &c.vt, 1, msg, sizeof msg), 1);
        wv.scale_stride_n = 0;
        assert_int_equal(run_check(k, &c, &c.kt, &wv, 1, msg, sizeof msg), 1);
        wv = c.vt;
        wv.scale = c.ks;
        assert_int_equal(run_check(k, &c, &c.kt, &wv, 1, msg, sizeof msg), 1);
    }
    free_case(&c);
}

static const dtype_pair PAIRS[] = {
    {MHA_F32, MHA_F32},   {MHA_F32, MHA_BF16}, {MHA_F32, MHA_F16}, {MHA_F32, MHA_I8},
    {MHA_BF16, MHA_BF16}, {MHA_BF16, MHA_F16}, {MHA_BF16, MHA_I8}, {MHA_F16, MHA_F16},
    {MHA_F16, MHA_BF16},  {MHA_F16, MHA_I8},
};
enum { NPAIRS = sizeof PAIRS / sizeof *PAIRS };

int main(void) {
    static char names[NPAIRS][32];
    struct CMUnitTest tests[NPAIRS + 2];
    for (int i = 0; i < NPAIRS; i++) {
        snprintf(names[i], sizeof names[i], "q_%s_kv_%s", mha_dtype_name(PAIRS[i].q),
                 mha_dtype_name(PAIRS[i].kv));
        tests[i] = (struct CMUnitTest){names[i], test_pair, NULL, NULL, (void *)&PAIRS[i]};
    }
    tests[NPAIRS] = (struct CMUnitTest){"nan", test_nan, NULL, NULL, NULL};
    tests[NPAIRS + 1] =
        (struct CMUnitTest){"catches_wrong_scale", test_catches_wrong_scale, NULL, NULL, NULL};
    return _cmocka_run_group_tests("kvcache", tests, NPAIRS + 2, NULL, NULL);
}
