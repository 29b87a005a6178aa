/* test_validate.c - argument validation: every bad dimension, kv_heads not
 * dividing heads, byte counts that overflow, bad strides, workspace and
 * options; each gives the right status and a message naming the value. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "mha.h"
#include "mha_private.h"

static const mha_problem good = {.batch = 2,
                                 .heads = 4,
                                 .kv_heads = 2,
                                 .seq_q = 5,
                                 .seq_kv = 7,
                                 .head_dim = 8,
                                 .causal = 1,
                                 .scale = 0.0f,
                                 .dtype = MHA_F32,
                                 .kv_dtype = MHA_F32};

static void expect(const mha_problem *p, mha_status want, const char *needle) {
    assert_int_equal(mha_problem_validate(p), want);
    if (needle) assert_non_null(strstr(mha_last_error(), needle));
}

static void test_dims(void **state) {
    (void)state;
    expect(&good, MHA_OK, NULL);
    mha_problem p = good;
    p.batch = 0;
    expect(&p, MHA_EINVAL, "batch = 0");
    p = good;
    p.heads = -3;
    expect(&p, MHA_EINVAL, "heads = -3");
    p = good;
    p.kv_heads = 0;
    expect(&p, MHA_EINVAL, "kv_heads = 0");
    p = good;
    p.seq_q = 0;
    expect(&p, MHA_EINVAL, "seq_q = 0");
    p = good;
    p.seq_kv = -1;
    expect(&p, MHA_EINVAL, "seq_kv = -1");
    p = good;
    p.head_dim = 0;
    expect(&p, MHA_EINVAL, "head_dim = 0");
    p = good;
    p.kv_heads = 3;
    expect(&p, MHA_EINVAL, "kv_heads = 3 does not divide heads = 4");
    p = good;
    p.kv_heads = 8;
    expect(&p, MHA_EINVAL, "kv_heads = 8");
    p = good;
    p.scale = NAN;
    expect(&p, MHA_EINVAL, "scale");
    p = good;
    p.scale = -1.0f;
    expect(&p, MHA_EINVAL, "scale");
    expect(NULL, MHA_EINVAL, "NULL");
}

static void test_overflow(void **state) {
    (void)state;
    mha_problem p = good;
    p.batch = (int64_t)1 << 40;
    p.heads = p.kv_heads = (int64_t)1 << 20;
    expect(&p, MHA_ENOMEM, "overflow");
    p = good;
    p.seq_q = p.seq_kv = (int64_t)1 << 31; /* the score matrix alone is 2^62 floats */
    p.batch = 4;
    expect(&p, MHA_ENOMEM, "overflow");
    p = good;
    p.seq_q = (int64_t)1 << 40;
    expect(&p, MHA_EINVAL, "too large");
}

static void test_attend_arguments(void **state) {
    (void)state;
    const mha_kernel *k = mha_kernel_find("naive");
    float buf[64] = {0}, out[64];
    const mha_problem p = {.batch = 1,
                           .heads = 1,
                           .kv_heads = 1,
                           .seq_q = 2,
                           .seq_kv = 2,
                           .head_dim = 4,
                           .causal = 0,
                           .scale = 0.0f,
                           .dtype = MHA_F32,
                           .kv_dtype = MHA_F32};
    mha_tensor t = mha_view_bhnd(buf, 1, 2, 4);
    mha_tensor_mut o = mha_view_bhnd_mut(out, 1, 2, 4);
    size_t need = 0;
    assert_int_equal(mha_workspace_size(k, &p, &(mha_options){.threads = 1}, &need), MHA_OK);
    assert_true(need > 0);
    char *ws = mha_alloc(need + 64);
    const mha_options one = {.threads = 1};
    assert_int_equal(mha_attend(k, &p, &one, &t, &t, &t, &o, ws, need), MHA_OK);
    /* too little workspace, misaligned workspace */
    assert_int_equal(mha_attend(k, &p, &one, &t, &t, &t, &o, ws, need - 1), MHA_EINVAL);
    assert_non_null(strstr(mha_last_error(), "workspace"));
    assert_int_equal(mha_attend(k, &p, &one, &t, &t, &t, &o, ws + 4, need), MHA_EINVAL);
    assert_non_null(strstr(mha_last_error(), "aligned"));
    /* NULL data, negative and overlapping strides */
    mha_tensor bad = t;
    bad.data = NULL;
    assert_int_equal(mha_attend(k, &p, &one, &bad, &t, &t, &o, ws, need), MHA_EINVAL);
    assert_non_null(strstr(mha_last_error(), "q.data"));
    bad = t;
    bad.stride_n = -4;
    assert_int_equal(mha_attend(k, &p, &one, &t, &bad, &t, &o, ws, need), MHA_EINVAL);
    assert_non_null(strstr(mha_last_error(), "k strides"));
    mha_tensor_mut overlap = o;
    overlap.stride_n = 2;
    assert_int_equal(mha_attend(k, &p, &one, &t, &t, &t, &overlap, ws, need), MHA_EINVAL);
    assert_non_null(strstr(mha_last_error(), "overlap"));
    /* options */
    assert_int_equal(mha_attend(k, &p, &(mha_options){.threads = -1}, &t, &t, &t, &o, ws, need),
                     MHA_EINVAL);
    assert_non_null(strstr(mha_last_error(), "threads = -1"));
    assert_int_equal(mha_attend(k, &p, &(mha_options){.block_q = -5}, &t, &t, &t, &o, ws, need),
                     MHA_EINVAL);
    assert_non_null(strstr(mha_last_error(), "block_q = -5"));
    assert_int_equal(mha_attend(NULL, &p, &one, &t, &t, &t, &o, ws, need), MHA_EINVAL);
    mha_free(ws);
}

static void test_layer_arguments(void **state) {
    (void)state;
    const mha_kernel *k = mha_kernel_find("naive");
    float w[36] = {0};
    mha_layer L = {6, 4, 0, w, w, w, w, NULL, NULL, NULL, NULL, MHA_F32};
    const mha_layer_shape s = {1, 2, 2, 0, 0.0f};
    size_t need;
    assert_int_equal(mha_forward_workspace_size(k, &L, &s, NULL, &need), MHA_EINVAL);
    assert_non_null(strstr(mha_last_error(), "d_model = 6 is not divisible by heads = 4"));
    L.heads = 3;
    L.kv_heads = 2;
    assert_int_equal(mha_forward_workspace_size(k, &L, &s, NULL, &need), MHA_EINVAL);
    assert_non_null(strstr(mha_last_error(), "kv_heads = 2"));
    L.kv_heads = 0;
    L.w_o = NULL; /* a workspace query needs no weights; a forward call does */
    assert_int_equal(mha_forward_workspace_size(k, &L, &s, NULL, &need), MHA_OK);
    float x[12] = {0}, y[12];
    void *ws = mha_alloc(need);
    assert_int_equal(mha_forward(k, &L, &s, NULL, x, x, x, y, ws, need), MHA_EINVAL);
    assert_non_null(strstr(mha_last_error(), "w_o"));
    mha_free(ws);
    L.w_o = w;
    assert_int_equal(mha_forward_workspace_size(k, &L, &s, NULL, &need), MHA_OK);
    const mha_layer_shape bad = {0, 2, 2, 0, 0.0f};
    assert_int_equal(mha_forward_workspace_size(k, &L, &bad, NULL, &need), MHA_EINVAL);
    assert_non_null(strstr(mha_last_error(), "batch = 0"));
}

/* mha_alloc's page policy: small buffers 64-byte aligned, large ones on 2
 * MiB boundaries (advised onto huge pages; whether the kernel grants them is
 * its business, so only the alignment and usability are asserted), every
 * byte writable; MHA_HUGEPAGES=0 turns the advice off. */
static void test_alloc_pages(void **state) {
    (void)state;
    setenv("MHA_HUGEPAGES", "1", 1);
    assert_int_equal(mha_hugepages(), 1);
    char *small = mha_alloc(1000);
    assert_non_null(small);
    assert_int_equal((uintptr_t)small % MHA_WORKSPACE_ALIGN, 0);
    memset(small, 1, 1000);
    const size_t sizes[] = {MHA_HUGE_PAGE, MHA_HUGE_PAGE + 1, 3 * MHA_HUGE_PAGE + 4096};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        char *big = mha_alloc(sizes[i]);
        assert_non_null(big);
        assert_int_equal((uintptr_t)big % MHA_HUGE_PAGE, 0);
        memset(big, 2, sizes[i]);
        assert_int_equal(big[sizes[i] - 1], 2);
        mha_free(big);
    }
    mha_free(small);
    setenv("MHA_HUGEPAGES", "0", 1);
    assert_int_equal(mha_hugepages(), 0);
    char *plain = mha_alloc(MHA_HUGE_PAGE + 64);
    assert_non_null(plain);
    assert_int_equal((uintptr_t)plain % MHA_WORKSPACE_ALIGN, 0);
    mha_free(plain);
    unsetenv("MHA_HUGEPAGES");
    assert_null(mha_alloc(SIZE_MAX - 8)); /* overflow: NULL, not a wrapped size */
}

/* Aliasing (mha.h): out exactly over q (in place) gives the same bits as a
 * separate out, for every kernel that runs here, every Q/O dtype it takes,
 * decode and prefill shapes, GQA, causal and not, threads 1 and 2. */
struct alias_shape {
    int64_t b, h, g, nq, nkv, d;
    int causal;
};

static void fill_random(void *dst, mha_dtype t, size_t n, unsigned *seed) {
    float *tmp = malloc(n * sizeof *tmp);
    assert_non_null(tmp);
    for (size_t i = 0; i < n; i++) {
        *seed = *seed * 1103515245u + 12345u;
        tmp[i] = ((float)((*seed >> 8) & 0xffff) / 65536.0f - 0.5f);
    }
    mha_convert_from_f32(t, tmp, dst, n);
    free(tmp);
}

static void test_attend_in_place(void **state) {
    (void)state;
    const struct alias_shape shapes[] = {
        {2, 4, 2, 33, 33, 40, 1}, {1, 8, 2, 1, 197, 64, 0}, {1, 4, 4, 7, 70, 16, 0},
        {1, 2, 1, 4, 300, 24, 1}, {2, 3, 3, 65, 65, 64, 0},
    };
    for (int ki = 0; ki < mha_kernel_count(); ki++) {
        const mha_kernel *k = mha_kernel_at(ki);
        if (mha_kernel_supported(k) != MHA_OK) continue;
        for (int dt = 0; dt < 3; dt++) {
            if (!(mha_kernel_dtypes(k) & MHA_DTYPE_BIT(dt))) continue;
            if (!(mha_kernel_kv_dtypes(k) & MHA_DTYPE_BIT(dt))) continue;
            for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++)
                for (int threads = 1; threads <= 2; threads++) {
                    const struct alias_shape *s = &shapes[si];
                    const mha_problem p = {.batch = s->b,
                                           .heads = s->h,
                                           .kv_heads = s->g,
                                           .seq_q = s->nq,
                                           .seq_kv = s->nkv,
                                           .head_dim = s->d,
                                           .causal = s->causal,
                                           .scale = 0.0f,
                                           .dtype = (mha_dtype)dt,
                                           .kv_dtype = 0};
                    const mha_options o = {.threads = threads};
                    size_t need = 0;
                    assert_int_equal(mha_workspace_size(k, &p, &o, &need), MHA_OK);
                    const size_t es = mha_dtype_size((mha_dtype)dt);
                    const size_t nq = (size_t)(s->b * s->h * s->nq * s->d);
                    const size_t nkv = (size_t)(s->b * s->g * s->nkv * s->d);
                    char *q = mha_alloc(nq * es), *kk = mha_alloc(nkv * es),
                         *v = mha_alloc(nkv * es);
                    char *ref = mha_alloc(nq * es), *ws = mha_alloc(need);
                    unsigned seed = 1234u + (unsigned)si;
                    fill_random(q, (mha_dtype)dt, nq, &seed);
                    fill_random(kk, (mha_dtype)dt, nkv, &seed);
                    fill_random(v, (mha_dtype)dt, nkv, &seed);
                    const mha_tensor tq = mha_view_typed(q, (mha_dtype)dt, NULL, s->h, s->nq, s->d);
                    const mha_tensor tk =
                        mha_view_typed(kk, (mha_dtype)dt, NULL, s->g, s->nkv, s->d);
                    const mha_tensor tv =
                        mha_view_typed(v, (mha_dtype)dt, NULL, s->g, s->nkv, s->d);
                    mha_tensor_mut to = mha_view_typed_mut(ref, (mha_dtype)dt, s->h, s->nq, s->d);
                    assert_int_equal(mha_attend(k, &p, &o, &tq, &tk, &tv, &to, ws, need), MHA_OK);
                    to.data = q; /* in place */
                    assert_int_equal(mha_attend(k, &p, &o, &tq, &tk, &tv, &to, ws, need), MHA_OK);
                    if (memcmp(q, ref, nq * es) != 0)
                        fail_msg("%s %s shape %zu threads %d: out over q differs",
                                 mha_kernel_name(k), mha_dtype_name((mha_dtype)dt), si, threads);
                    mha_free(q);
                    mha_free(kk);
                    mha_free(v);
                    mha_free(ref);
                    mha_free(ws);
                }
        }
    }
}

/* Every other overlap mha_attend refuses, naming both views; layouts that
 * share a buffer without sharing bytes (a fused [B,N,3,H,d] QKV buffer, out
 * in its fourth slot) run and give the separate-buffer result. */
static void test_attend_aliasing(void **state) {
    (void)state;
    const int64_t H = 2, N = 9, d = 12; /* MHA: q, k, v and out views of one shape */
    const mha_problem p = {.batch = 1,
                           .heads = H,
                           .kv_heads = H,
                           .seq_q = N,
                           .seq_kv = N,
                           .head_dim = d,
                           .causal = 1,
                           .scale = 0.0f,
                           .dtype = MHA_F32,
                           .kv_dtype = MHA_F32};
    const mha_options one = {.threads = 1};
    const size_t n = (size_t)(H * N * d);
    for (int ki = 0; ki < mha_kernel_count(); ki++) {
        const mha_kernel *k = mha_kernel_at(ki);
        if (mha_kernel_supported(k) != MHA_OK || mha_kernel_takes(k, &p) != MHA_OK) continue;
        size_t need = 0;
        assert_int_equal(mha_workspace_size(k, &p, &one, &need), MHA_OK);
        float *fused = mha_alloc(4 * n * sizeof(float)), *sep = mha_alloc(4 * n * sizeof(float));
        char *ws = mha_alloc(need + 4096);
        unsigned seed = 77u;
        fill_random(fused, MHA_F32, 4 * n, &seed);
        memcpy(sep, fused, 4 * n * sizeof(float));
        /* fused [N, 4, H, d]: slot 0 q, 1 k, 2 v, 3 out (strides: n = 4*H*d, h = d) */
        mha_tensor fq = mha_view_bnhd(fused, H, N, d);
        fq.stride_n = 4 * H * d;
        mha_tensor fk = fq, fv = fq;
        fk.data = fused + H * d;
        fv.data = fused + 2 * H * d;
        mha_tensor_mut fo = {.data = fused + 3 * H * d,
                             .stride_b = fq.stride_b,
                             .stride_h = fq.stride_h,
                             .stride_n = fq.stride_n};
        assert_int_equal(mha_attend(k, &p, &one, &fq, &fk, &fv, &fo, ws, need), MHA_OK);
        /* the same inputs copied out into their own [H,N,d] buffers */
        float *q = sep, *kk = sep + n, *v = sep + 2 * n, *o = sep + 3 * n;
        for (int64_t i = 0; i < N; i++)
            for (int64_t h = 0; h < H; h++)
                for (int s = 0; s < 3; s++)
                    memcpy(sep + (size_t)s * n + (size_t)((h * N + i) * d),
                           fused + (size_t)(i * 4 * H * d + s * H * d + h * d), d * sizeof(float));
        const mha_tensor tq = mha_view_bhnd(q, H, N, d), tk = mha_view_bhnd(kk, H, N, d),
                         tv = mha_view_bhnd(v, H, N, d);
        const mha_tensor_mut to = mha_view_bhnd_mut(o, H, N, d);
        assert_int_equal(mha_attend(k, &p, &one, &tq, &tk, &tv, &to, ws, need), MHA_OK);
        for (int64_t i = 0; i < N; i++)
            for (int64_t h = 0; h < H; h++)
                if (memcmp(o + (h * N + i) * d, fused + i * 4 * H * d + 3 * H * d + h * d,
                           d * sizeof(float)))
                    fail_msg("%s: out in the fused buffer's gap differs", mha_kernel_name(k));
        /* out over k, over v, over part of q, partly over the fused k slot */
        mha_tensor_mut bad = to;
        bad.data = kk;
        assert_int_equal(mha_attend(k, &p, &one, &tq, &tk, &tv, &bad, ws, need), MHA_EINVAL);
        assert_non_null(strstr(mha_last_error(), "out and k share memory"));
        bad.data = v + d; /* one row in */
        assert_int_equal(mha_attend(k, &p, &one, &tq, &tk, &tv, &bad, ws, need), MHA_EINVAL);
        assert_non_null(strstr(mha_last_error(), "out and v share memory"));
        bad.data = q + d; /* q shifted by a row: not in place */
        assert_int_equal(mha_attend(k, &p, &one, &tq, &tk, &tv, &bad, ws, need), MHA_EINVAL);
        assert_non_null(strstr(mha_last_error(), "out and q share memory"));
        mha_tensor_mut fbad = fo;
        fbad.data = fused + 2 * H * d + d; /* v slot, shifted by one head */
        assert_int_equal(mha_attend(k, &p, &one, &fq, &fk, &fv, &fbad, ws, need), MHA_EINVAL);
        assert_non_null(strstr(mha_last_error(), "out and v share memory"));
        /* a k view with a zero stride (rows repeat) whose range meets out */
        mha_tensor bcast = tk;
        bcast.data = o;
        bcast.stride_h = 0;
        assert_int_equal(mha_attend(k, &p, &one, &tq, &bcast, &tv, &to, ws, need), MHA_EINVAL);
        assert_non_null(strstr(mha_last_error(), "out and k may share memory"));
        /* the workspace over an input (need > 0 for every kernel but decode-less ones) */
        if (need > 0) {
            float *big = mha_alloc(need + n * sizeof(float));
            memcpy(big, kk, n * sizeof(float));
            const mha_tensor wk = mha_view_bhnd(big, H, N, d);
            assert_int_equal(mha_attend(k, &p, &one, &tq, &wk, &tv, &to, big, need), MHA_EINVAL);
            assert_non_null(strstr(mha_last_error(), "workspace and k share memory"));
            mha_free(big);
        }
        mha_free(fused);
        mha_free(sep);
        mha_free(ws);
    }
}

/* int8 scales are views too: out over them is refused. */
static void test_attend_aliasing_scales(void **state) {
    (void)state;
    const mha_kernel *k = mha_kernel_find("decode.scalar");
    assert_non_null(k);
    const int64_t H = 2, N = 16, d = 8;
    const mha_problem p = {.batch = 1,
                           .heads = H,
                           .kv_heads = H,
                           .seq_q = 1,
                           .seq_kv = N,
                           .head_dim = d,
                           .causal = 0,
                           .scale = 0.0f,
                           .dtype = MHA_F32,
                           .kv_dtype = MHA_I8};
    const mha_options one = {.threads = 1};
    size_t need = 0;
    assert_int_equal(mha_workspace_size(k, &p, &one, &need), MHA_OK);
    float q[16] = {0}, scales[64];
    int8_t kv[256] = {0};
    for (int i = 0; i < 64; i++) scales[i] = 1.0f;
    const mha_tensor tq = mha_view_bhnd(q, H, 1, d);
    const mha_tensor tk = mha_view_typed(kv, MHA_I8, scales, H, N, d);
    const mha_tensor tv = mha_view_typed(kv, MHA_I8, scales + 32, H, N, d);
    char *ws = mha_alloc(need);
    float o[16];
    mha_tensor_mut to = mha_view_bhnd_mut(o, H, 1, d);
    assert_int_equal(mha_attend(k, &p, &one, &tq, &tk, &tv, &to, ws, need), MHA_OK);
    to.data = scales + 40;
    assert_int_equal(mha_attend(k, &p, &one, &tq, &tk, &tv, &to, ws, need), MHA_EINVAL);
    assert_non_null(strstr(mha_last_error(), "out and v.scale share memory"));
    mha_free(ws);
}

/* mha_forward writes out last: in place over the query input is fine, over
 * W_o (still read while out is written) or the workspace is refused. */
static void test_forward_aliasing(void **state) {
    (void)state;
    const mha_kernel *k = mha_kernel_find("flash.scalar");
    const int64_t dm = 8, Nq = 5;
    float w[4][64], x[40], x2[40], y[40];
    unsigned seed = 5u;
    fill_random(w, MHA_F32, 4 * 64, &seed);
    fill_random(x, MHA_F32, 40, &seed);
    memcpy(x2, x, sizeof x);
    const mha_layer L = {dm, 2, 0, w[0], w[1], w[2], w[3], NULL, NULL, NULL, NULL, MHA_F32};
    const mha_layer_shape s = {1, Nq, Nq, 1, 0.0f};
    const mha_options one = {.threads = 1};
    size_t need;
    assert_int_equal(mha_forward_workspace_size(k, &L, &s, &one, &need), MHA_OK);
    char *ws = mha_alloc(need);
    assert_int_equal(mha_forward(k, &L, &s, &one, x, x, x, y, ws, need), MHA_OK);
    assert_int_equal(mha_forward(k, &L, &s, &one, x2, x2, x2, x2, ws, need), MHA_OK);
    assert_memory_equal(x2, y, sizeof y);
    float wo[80];
    memcpy(wo, w[3], sizeof w[3]);
    const mha_layer L2 = {dm, 2, 0, w[0], w[1], w[2], wo, NULL, NULL, NULL, NULL, MHA_F32};
    assert_int_equal(mha_forward(k, &L2, &s, &one, x, x, x, wo + 16, ws, need), MHA_EINVAL);
    assert_non_null(strstr(mha_last_error(), "out and w_o share memory"));
    assert_int_equal(mha_forward(k, &L, &s, &one, (float *)ws, x, x, y, ws, need), MHA_EINVAL);
    assert_non_null(strstr(mha_last_error(), "workspace and query share memory"));
    mha_free(ws);
}

/* Entry points that return a value, not a status, return one that cannot
 * pass for a result on NULL; conversions of an unknown dtype write nothing;
 * mha_select refuses the options mha_attend would. */
static void test_api_hygiene(void **state) {
    (void)state;
    assert_true(isnan(mha_problem_scale(NULL)));
    assert_non_null(strstr(mha_last_error(), "NULL"));
    assert_true(isnan(mha_problem_flops(NULL)));
    mha_problem bad = good;
    bad.heads = 0;
    assert_true(isnan(mha_problem_flops(&bad)));
    assert_non_null(strstr(mha_last_error(), "heads = 0"));
    assert_int_equal((int)mha_problem_kv_dtype(NULL), MHA_DTYPE_COUNT);
    assert_int_equal(mha_dtype_size(mha_problem_kv_dtype(NULL)), 0);
    /* a 2-element bf16-sized buffer with guards: an unknown dtype must not write */
    uint16_t buf[4] = {0xaaaa, 0xbbbb, 0xcccc, 0xdddd};
    const float src[2] = {1.0f, 2.0f};
    float dst[2] = {-1.0f, -1.0f};
    assert_int_equal(mha_convert_from_f32((mha_dtype)7, src, buf + 1, 2), MHA_EINVAL);
    assert_non_null(strstr(mha_last_error(), "dtype 7"));
    assert_int_equal(buf[1], 0xbbbb);
    assert_int_equal(buf[3], 0xdddd);
    assert_int_equal(mha_convert_to_f32((mha_dtype)-1, buf, dst, 2), MHA_EINVAL);
    assert_true(dst[0] == -1.0f && dst[1] == -1.0f);
    assert_int_equal(mha_convert_from_f32(MHA_BF16, src, buf + 1, 2), MHA_OK);
    assert_int_equal(buf[1], 0x3f80);
    assert_int_equal(buf[3], 0xdddd);
    assert_int_equal(mha_convert_to_f32(MHA_BF16, NULL, dst, 2), MHA_EINVAL);
    int8_t q8[4];
    float sc[2];
    assert_int_equal(mha_quantize_rows_i8(src, 2, 2, 1, q8, 2, sc), MHA_EINVAL);
    assert_int_equal(mha_quantize_rows_i8(src, 1, 2, 2, q8, 2, NULL), MHA_EINVAL);
    assert_int_equal(mha_quantize_rows_i8(src, 1, 2, 2, q8, 2, sc), MHA_OK);
    assert_int_equal(q8[1], 127);
    /* one options rule for mha_select and mha_attend */
    mha_selection sel;
    assert_int_equal(mha_select(&good, &(mha_options){.threads = 100000}, &sel), MHA_EINVAL);
    assert_non_null(strstr(mha_last_error(), "threads = 100000"));
    assert_int_equal(mha_select(&good, &(mha_options){.threads = 4096}, &sel), MHA_OK);
}

/* mha_span_overlap against a byte-by-byte count over random views of one
 * arena: 1 and 0 are always right, and -1 ("cannot tell") only comes for a
 * view whose rows are out of address order. */
static void test_span_overlap_exact(void **state) {
    (void)state;
    static unsigned char arena[4096];
    unsigned seed = 2024u;
    int counted[3] = {0, 0, 0};
    for (int trial = 0; trial < 20000; trial++) {
        mha_span s[2];
        unsigned char mark[2][4096];
        int nested[2];
        for (int v = 0; v < 2; v++) {
#define RND(n) ((seed = seed * 1103515245u + 12345u), (int64_t)((seed >> 8) % (unsigned)(n)))
            const size_t es = (size_t)1 << RND(3);
            const int64_t d = 1 + RND(6);
            int64_t count[3], stride[3];
            for (int i = 0; i < 3; i++) count[i] = 1 + RND(4);
            /* half the views nested by construction: strides that clear the inner dims */
            nested[v] = RND(2);
            int64_t inner = d;
            for (int i = 2; i >= 0; i--) {
                stride[i] = nested[v] ? inner + RND(8) : RND(3 * d + 4);
                inner = (count[i] - 1) * stride[i] + (nested[v] ? inner : d);
            }
            const int64_t base = RND(64); /* < 256 + 825 * 4 bytes: inside the arena */
            memset(mark[v], 0, sizeof mark[v]);
            for (int64_t a = 0; a < count[0]; a++)
                for (int64_t b = 0; b < count[1]; b++)
                    for (int64_t c = 0; c < count[2]; c++)
                        for (int64_t e = 0; e < d * (int64_t)es; e++)
                            mark[v][(size_t)base * es +
                                    (size_t)(a * stride[0] + b * stride[1] + c * stride[2]) * es +
                                    (size_t)e] = 1;
            s[v] = mha_span_make(arena + base * (int64_t)es, es, count, stride, d);
#undef RND
        }
        int truth = 0;
        for (size_t i = 0; i < sizeof arena; i++) truth |= mark[0][i] & mark[1][i];
        const int got = mha_span_overlap(&s[0], &s[1]);
        assert_int_equal(got, mha_span_overlap(&s[1], &s[0]));
        if (got >= 0 && got != truth)
            fail_msg("trial %d: overlap says %d, the byte count %d", trial, got, truth);
        if (got < 0) assert_false(nested[0] && nested[1]);
        counted[got + 1]++;
    }
    /* the draw reaches every answer, often */
    assert_true(counted[0] > 100 && counted[1] > 100 && counted[2] > 100);
}

static void test_status_strings(void **state) {
    (void)state;
    for (int s = MHA_OK; s <= MHA_EFORMAT; s++)
        assert_true(strlen(mha_status_str((mha_status)s)) > 1);
    assert_string_equal(mha_status_str((mha_status)99), "unknown status");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dims),
        cmocka_unit_test(test_overflow),
        cmocka_unit_test(test_attend_arguments),
        cmocka_unit_test(test_layer_arguments),
        cmocka_unit_test(test_alloc_pages),
        cmocka_unit_test(test_status_strings),
        cmocka_unit_test(test_attend_in_place),
        cmocka_unit_test(test_attend_aliasing),
        cmocka_unit_test(test_attend_aliasing_scales),
        cmocka_unit_test(test_forward_aliasing),
        cmocka_unit_test(test_api_hygiene),
        cmocka_unit_test(test_span_overlap_exact),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
