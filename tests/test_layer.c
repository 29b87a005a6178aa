/* test_layer.c - the full MHA layer: against PyTorch's nn.MultiheadAttention
 * (fp32, cases made by tests/data/gen_torch.py) with every kernel that runs
 * here, and a grouped-KV layer against a float64 composition of the parts. */
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
                             has_b[3] ? b[3].data : NULL};
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
    float *Qf = malloc(B * Nq * dm * 4), *Kf = malloc(B * Nkv * dkv * 4),
          *Vf = malloc(B * Nkv * dkv * 4);
    for (int64_t i = 0; i < B * Nq * dm; i++) Qf[i] = (float)Q[i];
    for (int64_t i = 0; i < B * Nkv * dkv; i++) Kf[i] = (float)K[i], Vf[i] = (float)V[i];
    const mha_problem p = {B, H, G, Nq, Nkv, dk, 1, 0.0f, MHA_F32, MHA_F32};
    const mha_tensor qv = mha_view_bnhd(Qf, H, Nq, dk), kv = mha_view_bnhd(Kf, G, Nkv, dk),
                     vv = mha_view_bnhd(Vf, G, Nkv, dk);
    double *Ahd = malloc(B * H * Nq * dk * 8);
    assert_int_equal(mha_reference(&p, &qv, &kv, &vv, Ahd), MHA_OK);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < Nq; i++)
                for (int64_t c = 0; c < dk; c++)
                    A[(b * Nq + i) * dm + h * dk + c] = Ahd[((b * H + h) * Nq + i) * dk + c];
    linear64(B * Nq, dm, dm, A, wo, bo, Y);
    double mag = 0;
    for (int64_t i = 0; i < B * Nq * dm; i++) mag = fmax(mag, fabs(Y[i]));

    const mha_layer L = {dm, H, G, wq, wk, wv, wo, bq, bk, bv, bo};
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
    free(A), free(Y), free(Qf), free(Kf), free(Vf), free(Ahd), free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_torch),
                                       cmocka_unit_test(test_grouped_layer)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
