/* test_layer.c - the full MHA layer: against PyTorch's nn.MultiheadAttention
 * (fp32, cases made by tests/data/gen_torch.py) with every kernel that runs
 * here, a grouped-KV layer against a float64 composition of the parts, and
 * the bf16/fp16 layer against a float64 oracle on its stored weights and
 * inputs (tolerance: check_layer_* in harness/check.c). */
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
#include "check.h"
#include "fmt_npy.h"
#include "stats.h"

static const char *data_dir(void) {
    return getenv("MHA_TEST_DATA");
}

static int load(const char *dir, const char *cs, const char *name, npy_array *a, int optional) {
    char path[1024], err[512];
    snprintf(path, sizeof path, "%s/%s/%s.npy", dir, cs, name);
    mha_status st = npy_read(path, a, err, sizeof err);
    if (st != MHA_OK && !optional) fail_msg("%s", err);
    return st == MHA_OK;
}

static const struct {
    const char *name;
    int heads, causal, self;
} torch_cases[] = {{"self", 4, 0, 1},
                   {"causal", 2, 1, 1},
                   {"cross", 3, 0, 0},
                   {"decode", 4, 1, 0},
                   {"nobias", 2, 0, 1}};

static void test_torch(void **state) {
    (void)state;
    const char *dir = data_dir();
    if (!dir) {
        print_message("MHA_TEST_DATA not set\n");
        skip();
    }
    for (size_t c = 0; c < sizeof torch_cases / sizeof torch_cases[0]; c++) {
        const char *cs = torch_cases[c].name;
        npy_array x, kx, vx, w[4], b[4], want;
        static const char *const wn[4] = {"w_q", "w_k", "w_v", "w_o"}, *const bn[4] = {"b_q", "b_k",
                                                                                       "b_v",
                                                                                       "b_o"};
        load(dir, cs, "query", &x, 0);
        load(dir, cs, "key", &kx, 0);
        load(dir, cs, "value", &vx, 0);
        load(dir, cs, "out", &want, 0);
        int has_b[4];
        for (int i = 0; i < 4; i++) {
            load(dir, cs, wn[i], &w[i], 0);
            has_b[i] = load(dir, cs, bn[i], &b[i], 1);
        }
        const mha_layer L = {x.shape[2],
                             torch_cases[c].heads,
                             0,
                             w[0].data,
                             w[1].data,
                             w[2].data,
                             w[3].data,
                             has_b[0] ? b[0].data : NULL,
                             has_b[1] ? b[1].data : NULL,
                             has_b[2] ? b[2].data : NULL,
                             has_b[3] ? b[3].data : NULL,
                             MHA_F32};
        const mha_layer_shape s = {x.shape[0], x.shape[1], kx.shape[1], torch_cases[c].causal,
                                   0.0f};
        double mag = 0;
        for (size_t i = 0; i < want.count; i++) mag = fmax(mag, fabs(want.data[i]));
        float *out = malloc(want.count * sizeof(float));
        for (int ki = 0; ki < mha_kernel_count(); ki++) {
            const mha_kernel *k = mha_kernel_at(ki);
            /* the layer is fp32 throughout: kernels that do not take fp32 are out */
            if (mha_kernel_supported(k) != MHA_OK ||
                !(mha_kernel_dtypes(k) & MHA_DTYPE_BIT(MHA_F32)))
                continue;
            for (int threads = 1; threads <= 2; threads++) {
                const mha_options o = {.threads = threads};
                size_t bytes;
                assert_int_equal(mha_forward_workspace_size(k, &L, &s, &o, &bytes), MHA_OK);
                void *ws = mha_alloc(bytes);
                const float *key = torch_cases[c].self ? x.data : kx.data;
                const float *val = torch_cases[c].self ? x.data : vx.data;
                assert_int_equal(mha_forward(k, &L, &s, &o, x.data, key, val, out, ws, bytes),
                                 MHA_OK);
                double err = 0;
                for (size_t i = 0; i < want.count; i++)
                    err = fmax(err, fabs(out[i] - want.data[i]));
                if (!(err <= 1e-5 * mag))
                    fail_msg("%s with %s threads=%d: max |err| %.3g > 1e-5 * %.3g", cs,
                             mha_kernel_name(k), threads, err, mag);
                mha_free(ws);
            }
        }
        free(out);
        npy_free(&x);
        npy_free(&kx);
        npy_free(&vx);
        npy_free(&want);
        for (int i = 0; i < 4; i++) {
            npy_free(&w[i]);
            if (has_b[i]) npy_free(&b[i]);
        }
    }
}

/* y = x W^T + b in double. */
static void linear64(int64_t M, int64_t N, int64_t K, const double *x, const float *w,
                     const float *b, double *y) {
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            double s = b ? b[n] : 0;
            for (int64_t k = 0; k < K; k++) s += x[m * K + k] * w[n * K + k];
            y[m * N + n] = s;
        }
}

/* The attention part of the float64 layer oracle: mha_reference on the
 * projections Q [B,Nq,H*dk] and K, V [B,Nkv,G*dk] held as float (2^-24, far
 * inside every tolerance here), the heads concatenated into A [B,Nq,H*dk]. */
static void attend64(int64_t B, int64_t H, int64_t G, int64_t Nq, int64_t Nkv, int64_t dk,
                     int causal, const double *Q, const double *K, const double *V, double *A) {
    const int64_t nq = B * Nq * H * dk, nk = B * Nkv * G * dk, dm = H * dk;
    float *Qf = malloc(nq * 4), *Kf = malloc(nk * 4), *Vf = malloc(nk * 4);
    for (int64_t i = 0; i < nq; i++) Qf[i] = (float)Q[i];
    for (int64_t i = 0; i < nk; i++) Kf[i] = (float)K[i], Vf[i] = (float)V[i];
    const mha_problem p = {.batch = B,
                           .heads = H,
                           .kv_heads = G,
                           .seq_q = Nq,
                           .seq_kv = Nkv,
                           .head_dim = dk,
                           .causal = causal,
                           .scale = 0.0f,
                           .dtype = MHA_F32,
                           .kv_dtype = MHA_F32};
    const mha_tensor qv = mha_view_bnhd(Qf, H, Nq, dk), kv = mha_view_bnhd(Kf, G, Nkv, dk),
                     vv = mha_view_bnhd(Vf, G, Nkv, dk);
    double *Ahd = malloc(B * H * Nq * dk * 8);
    assert_int_equal(mha_reference(&p, &qv, &kv, &vv, Ahd), MHA_OK);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < Nq; i++)
                for (int64_t c = 0; c < dk; c++)
                    A[(b * Nq + i) * dm + h * dk + c] = Ahd[((b * H + h) * Nq + i) * dk + c];
    free(Qf), free(Kf), free(Vf), free(Ahd);
}

static float frand(uint64_t *s) { /* [-0.5, 0.5) */
    return 0.5f * uniform_pm1(s);
}

static void test_grouped_layer(void **state) {
    (void)state;
    /* d_model 24, 6 heads of 4 over 2 KV heads, cross attention 5 x 9, causal, biases. */
    const int64_t B = 2, Nq = 5, Nkv = 9, dm = 24, H = 6, G = 2, dk = 4, dkv = G * dk;
    uint64_t seed = 42;
    float *xq = malloc(B * Nq * dm * 4), *xk = malloc(B * Nkv * dm * 4),
          *xv = malloc(B * Nkv * dm * 4);
    float *wq = malloc(dm * dm * 4), *wk = malloc(dkv * dm * 4), *wv = malloc(dkv * dm * 4),
          *wo = malloc(dm * dm * 4);
    float bq[24], bk[8], bv[8], bo[24];
    for (int64_t i = 0; i < B * Nq * dm; i++) xq[i] = frand(&seed);
    for (int64_t i = 0; i < B * Nkv * dm; i++) xk[i] = frand(&seed), xv[i] = frand(&seed);
    for (int64_t i = 0; i < dm * dm; i++) wq[i] = frand(&seed), wo[i] = frand(&seed);
    for (int64_t i = 0; i < dkv * dm; i++) wk[i] = frand(&seed), wv[i] = frand(&seed);
    for (int i = 0; i < 24; i++) bq[i] = frand(&seed), bo[i] = frand(&seed);
    for (int i = 0; i < 8; i++) bk[i] = frand(&seed), bv[i] = frand(&seed);

    /* float64 composition: projections, the oracle on the projected (float) tensors, W_o. */
    double *xd = malloc(B * Nkv * dm * 8), *Q = malloc(B * Nq * dm * 8),
           *K = malloc(B * Nkv * dkv * 8), *V = malloc(B * Nkv * dkv * 8),
           *A = malloc(B * Nq * dm * 8), *Y = malloc(B * Nq * dm * 8);
    for (int64_t i = 0; i < B * Nq * dm; i++) xd[i] = xq[i];
    linear64(B * Nq, dm, dm, xd, wq, bq, Q);
    for (int64_t i = 0; i < B * Nkv * dm; i++) xd[i] = xk[i];
    linear64(B * Nkv, dkv, dm, xd, wk, bk, K);
    for (int64_t i = 0; i < B * Nkv * dm; i++) xd[i] = xv[i];
    linear64(B * Nkv, dkv, dm, xd, wv, bv, V);
    attend64(B, H, G, Nq, Nkv, dk, 1, Q, K, V, A);
    linear64(B * Nq, dm, dm, A, wo, bo, Y);
    double mag = 0;
    for (int64_t i = 0; i < B * Nq * dm; i++) mag = fmax(mag, fabs(Y[i]));

    const mha_layer L = {dm, H, G, wq, wk, wv, wo, bq, bk, bv, bo, MHA_F32};
    const mha_layer_shape s = {B, Nq, Nkv, 1, 0.0f};
    float *out = malloc(B * Nq * dm * 4);
    for (int ki = 0; ki < mha_kernel_count(); ki++) {
        const mha_kernel *k = mha_kernel_at(ki);
        if (mha_kernel_supported(k) != MHA_OK || !(mha_kernel_dtypes(k) & MHA_DTYPE_BIT(MHA_F32)))
            continue;
        size_t bytes;
        assert_int_equal(mha_forward_workspace_size(k, &L, &s, NULL, &bytes), MHA_OK);
        void *ws = mha_alloc(bytes);
        assert_int_equal(mha_forward(k, &L, &s, NULL, xq, xk, xv, out, ws, bytes), MHA_OK);
        double err = 0;
        for (int64_t i = 0; i < B * Nq * dm; i++) err = fmax(err, fabs(out[i] - Y[i]));
        if (!(err <= 1e-5 * mag))
            fail_msg("%s: max |err| %.3g > 1e-5 * %.3g", mha_kernel_name(k), err, mag);
        mha_free(ws);
    }
    free(xq), free(xk), free(xv), free(wq), free(wk), free(wv), free(wo), free(xd), free(Q),
        free(K), free(V);
    free(A), free(Y), free(out);
}

/* ---- the bf16 / fp16 layer ---------------------------------------------------------- */

typedef struct {
    int64_t B, Nq, Nkv, dm, H, G;
    int causal, bias, cross;
} typed_case;

/* n values ~ U(-a, a) stored as t (rounded once, nearest even), and the
 * stored values widened to double: what the oracle reads. */
static void *typed_fill(mha_dtype t, size_t n, float a, uint64_t *seed, double *wide) {
    float *f = calloc(n, sizeof(float));
    void *st = malloc(n * 2);
    for (size_t i = 0; i < n; i++) f[i] = a * uniform_pm1(seed);
    mha_convert_from_f32(t, f, st, n);
    mha_convert_to_f32(t, st, f, n);
    for (size_t i = 0; i < n; i++) wide[i] = f[i];
    free(f);
    return st;
}

/* y = x W^T + b in double, with ||x o w||_2 (y2) and sum |x w| + |b| (ybar)
 * per element: what check_layer_proj_err takes. */
static void linear64d(int64_t M, int64_t N, int64_t K, const double *x, const double *w,
                      const double *b, double *y, double *y2, double *ybar) {
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            double s = b ? b[n] : 0, a = b ? fabs(b[n]) : 0, q = 0;
            for (int64_t k = 0; k < K; k++) {
                const double t = x[m * K + k] * w[n * K + k];
                s += t, a += fabs(t), q += t * t;
            }
            y[m * N + n] = s, y2[m * N + n] = sqrt(q), ybar[m * N + n] = a;
        }
}

static void run_typed_case(mha_dtype t, const typed_case *c, uint64_t seed) {
    const int64_t B = c->B, Nq = c->Nq, Nkv = c->cross ? c->Nkv : c->Nq, dm = c->dm, H = c->H,
                  G = c->G, dk = dm / H, dkv = G * dk, grp = H / G;
    const int64_t nq = B * Nq * dm, nkv = B * Nkv * dm, nk = B * Nkv * dkv;
    double *xq = malloc(nq * 8), *xk = malloc(nkv * 8), *xv = malloc(nkv * 8);
    double *w[4], *b[4];
    void *ws_[4], *bs[4] = {NULL, NULL, NULL, NULL};
    const int64_t rows[4] = {dm, dkv, dkv, dm};
    /* W_q and W_k larger than 1/sqrt(d_model): logits of a few units, so the
     * softmax is peaked and the heads are not averages near zero */
    const float wa[4] = {3.0f / sqrtf((float)dm), 3.0f / sqrtf((float)dm), 1.0f / sqrtf((float)dm),
                         1.0f / sqrtf((float)dm)};
    void *sq = typed_fill(t, (size_t)nq, 1.0f, &seed, xq);
    void *sk = c->cross ? typed_fill(t, (size_t)nkv, 1.0f, &seed, xk) : sq;
    void *sv = c->cross ? typed_fill(t, (size_t)nkv, 1.0f, &seed, xv) : sq;
    if (!c->cross) memcpy(xk, xq, nq * 8), memcpy(xv, xq, nq * 8);
    for (int i = 0; i < 4; i++) {
        w[i] = malloc(rows[i] * dm * 8);
        b[i] = c->bias ? malloc(rows[i] * 8) : NULL;
        ws_[i] = typed_fill(t, (size_t)(rows[i] * dm), wa[i], &seed, w[i]);
        if (c->bias) bs[i] = typed_fill(t, (size_t)rows[i], 0.5f, &seed, b[i]);
    }

    /* the oracle: projections in double, attention (mha_reference on the
     * projections held as float: 2^-24, far inside the tolerance), W_o */
    double *P[3][3], *A = malloc(nq * 8), *Y = malloc(nq * 8), *Y2 = malloc(nq * 8),
                     *Yb = malloc(nq * 8);
    const int64_t pn[3] = {nq, nk, nk};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) P[i][j] = malloc(pn[i] * 8);
    linear64d(B * Nq, dm, dm, xq, w[0], b[0], P[0][0], P[0][1], P[0][2]);
    linear64d(B * Nkv, dkv, dm, xk, w[1], b[1], P[1][0], P[1][1], P[1][2]);
    linear64d(B * Nkv, dkv, dm, xv, w[2], b[2], P[2][0], P[2][1], P[2][2]);
    const double *Q = P[0][0], *K = P[1][0], *V = P[2][0];
    attend64(B, H, G, Nq, Nkv, dk, c->causal, Q, K, V, A);
    linear64d(B * Nq, dm, dm, A, w[3], b[3], Y, Y2, Yb);

    /* the error bounds of the stages (harness/check.c): projections, then per
     * (batch, head, query) the softmax weights in double and the head's bound */
    double *E[3];
    for (int i = 0; i < 3; i++) {
        E[i] = malloc(pn[i] * 8);
        for (int64_t j = 0; j < pn[i]; j++)
            E[i][j] = check_layer_proj_err(t, dm, P[i][0][j], P[i][1][j], P[i][2][j], 1);
    }
    const double scale = 1.0 / sqrt((double)dk);
    double *pj = malloc(Nkv * 8), *EA = malloc(nq * 8);
    for (int64_t bb = 0; bb < B; bb++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < Nq; i++) {
                const int64_t qo = (bb * Nq + i) * dm + h * dk,
                              ko = bb * Nkv * dkv + (h / grp) * dk;
                double mx = -INFINITY, sum = 0;
                for (int64_t j = 0; j < Nkv; j++) {
                    pj[j] = -INFINITY;
                    if (c->causal && j > i + (Nkv - Nq)) continue;
                    double d = 0;
                    for (int64_t e = 0; e < dk; e++) d += Q[qo + e] * K[ko + j * dkv + e];
                    pj[j] = d * scale;
                    mx = fmax(mx, pj[j]);
                }
                for (int64_t j = 0; j < Nkv; j++) sum += (pj[j] = exp(pj[j] - mx));
                for (int64_t j = 0; j < Nkv; j++) pj[j] /= sum;
                check_layer_head_err(t, Nkv, dk, pj, Q + qo, E[0] + qo, K + ko, E[1] + ko, V + ko,
                                     E[2] + ko, dkv, A + qo, scale, EA + qo);
            }
    double *tol = malloc(nq * 8), ymax = 0, tmax = 0;
    for (int64_t m = 0; m < B * Nq; m++)
        for (int64_t j = 0; j < dm; j++) {
            const int64_t i = m * dm + j;
            tol[i] = check_layer_out_err(t, dm, EA + m * dm, w[3] + j * dm, Y[i], Y2[i], Yb[i]);
            ymax = fmax(ymax, fabs(Y[i]));
            tmax = fmax(tmax, tol[i]);
        }
    char what[160];
    snprintf(what, sizeof what, "%s layer B=%lld Nq=%lld Nkv=%lld dm=%lld H=%lld G=%lld%s%s%s",
             mha_dtype_name(t), (long long)B, (long long)Nq, (long long)Nkv, (long long)dm,
             (long long)H, (long long)G, c->causal ? " causal" : "", c->bias ? " bias" : "",
             c->cross ? " cross" : "");
    /* a tolerance near |out| would pass anything (benchdnn's MISTRUSTED);
     * bf16 comes to ~1.5% of max|out|, fp16 (rounded to bf16 in every GEMM)
     * to 5-14% */
    if (!(tmax < 0.2 * ymax))
        fail_msg("%s: tolerance up to %.3g is not small against max|out| %.3g", what, tmax, ymax);

    const mha_layer L = {dm, H, G, ws_[0], ws_[1], ws_[2], ws_[3], bs[0], bs[1], bs[2], bs[3], t};
    const mha_layer_shape s = {B, Nq, Nkv, c->causal, 0.0f};
    uint16_t *out = malloc(nq * 2);
    int ran = 0;
    for (int ki = 0; ki < mha_kernel_count(); ki++) {
        const mha_kernel *k = mha_kernel_at(ki);
        if (mha_kernel_supported(k) != MHA_OK || !(mha_kernel_dtypes(k) & MHA_DTYPE_BIT(t)))
            continue;
        for (int threads = 1; threads <= 2; threads++) {
            const mha_options o = {.threads = threads};
            size_t bytes;
            assert_int_equal(mha_forward_workspace_size(k, &L, &s, &o, &bytes), MHA_OK);
            void *wsp = mha_alloc(bytes);
            memset(out, 0xff, nq * 2); /* NaN in both dtypes: an unwritten element shows */
            if (mha_forward(k, &L, &s, &o, sq, sk, sv, out, wsp, bytes) != MHA_OK)
                fail_msg("%s with %s: %s", what, mha_kernel_name(k), mha_last_error());
            double worst = 0;
            for (int64_t i = 0; i < nq; i++) {
                float v;
                mha_convert_to_f32(t, out + i, &v, 1);
                const double err = fabs(v - Y[i]), lim = tol[i];
                if (!(err <= lim))
                    fail_msg("%s with %s threads=%d: out[%lld] = %.6g, oracle %.6g, |err| %.3g > "
                             "%.3g",
                             what, mha_kernel_name(k), threads, (long long)i, v, Y[i], err, lim);
                worst = fmax(worst, err / lim);
            }
            if (threads == 1)
                print_message("%-66s %-17s max err/tol %.3f, tol <= %.3g, max|out| %.3g\n", what,
                              mha_kernel_name(k), worst, tmax, ymax);
            mha_free(wsp);
            ran++;
        }
    }
    if (!ran) print_message("%s: no kernel here takes %s\n", what, mha_dtype_name(t));
    free(out), free(sq);
    if (c->cross) free(sk), free(sv);
    for (int i = 0; i < 4; i++) free(w[i]), free(b[i]), free(ws_[i]), free(bs[i]);
    for (int i = 0; i < 3; i++) {
        free(E[i]);
        for (int j = 0; j < 3; j++) free(P[i][j]);
    }
    free(xq), free(xk), free(xv), free(A), free(Y), free(Y2), free(Yb), free(pj), free(EA),
        free(tol);
}

static const typed_case typed_cases[] = {
    /* B, Nq, Nkv, d_model, H, G, causal, bias, cross */
    {1, 1, 1, 48, 12, 12, 0, 1, 0},     /* N = 1 */
    {2, 7, 7, 96, 12, 4, 1, 0, 0},      /* GQA, no bias, causal */
    {1, 33, 33, 96, 12, 12, 0, 1, 0},   /* tails of 6-row tiles and 16-lane vectors */
    {1, 197, 197, 192, 12, 6, 1, 1, 0}, /* ViT's sequence, GQA, causal */
    {2, 33, 50, 96, 12, 3, 1, 1, 1},    /* cross-attention, bottom-right causal */
    {1, 7, 9, 39, 3, 1, 0, 1, 1},       /* odd d_model (odd K: a half pair), MQA */
    {1, 64, 64, 768, 12, 12, 1, 1, 0},  /* GPT-2's width */
};

static void test_typed_layer(void **state) {
    (void)state;
    const mha_dtype ts[2] = {MHA_BF16, MHA_F16};
    for (int ti = 0; ti < 2; ti++)
        for (size_t c = 0; c < sizeof typed_cases / sizeof typed_cases[0]; c++)
            run_typed_case(ts[ti], &typed_cases[c], 1000 + c);
}

/* A kernel that does not take the layer's dtype is refused, naming both,
 * before any work; so is a dtype the layer does not have. */
static void test_typed_layer_refused(void **state) {
    (void)state;
    uint16_t w[36] = {0}, x[12] = {0}, y[12];
    mha_layer L = {6, 3, 0, w, w, w, w, NULL, NULL, NULL, NULL, MHA_BF16};
    const mha_layer_shape s = {1, 2, 2, 0, 0.0f};
    const mha_kernel *naive = mha_kernel_find("naive");
    size_t need;
    assert_int_equal(mha_forward_workspace_size(naive, &L, &s, NULL, &need), MHA_EUNSUPPORTED);
    assert_non_null(strstr(mha_last_error(), "naive"));
    assert_non_null(strstr(mha_last_error(), "bf16"));
    char ws[4096] __attribute__((aligned(64)));
    assert_int_equal(mha_forward(naive, &L, &s, NULL, x, x, x, y, ws, sizeof ws), MHA_EUNSUPPORTED);
    assert_non_null(strstr(mha_last_error(), "naive"));
    L.dtype = MHA_I8;
    assert_int_equal(mha_forward_workspace_size(naive, &L, &s, NULL, &need), MHA_EINVAL);
    assert_non_null(strstr(mha_last_error(), "layer.dtype = 3 (int8)"));
    L.dtype = (mha_dtype)9;
    assert_int_equal(mha_forward_workspace_size(naive, &L, &s, NULL, &need), MHA_EINVAL);
    assert_non_null(strstr(mha_last_error(), "layer.dtype = 9"));
    /* and the fp32 layer refuses a kernel that takes only bf16/fp16 */
    for (int ki = 0; ki < mha_kernel_count(); ki++) {
        const mha_kernel *k = mha_kernel_at(ki);
        if (mha_kernel_dtypes(k) & MHA_DTYPE_BIT(MHA_F32)) continue;
        L.dtype = MHA_F32;
        assert_int_equal(mha_forward_workspace_size(k, &L, &s, NULL, &need), MHA_EUNSUPPORTED);
        assert_non_null(strstr(mha_last_error(), mha_kernel_name(k)));
        assert_non_null(strstr(mha_last_error(), "fp32"));
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_torch), cmocka_unit_test(test_grouped_layer),
        cmocka_unit_test(test_typed_layer), cmocka_unit_test(test_typed_layer_refused)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
