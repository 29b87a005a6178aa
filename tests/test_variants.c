/* test_variants.c - the attention variants of issue 30 (window, softcap,
 * sinks, head_dim_v): validation messages, the FLOP count of visible pairs,
 * the float64 oracle on cases small enough to compute by hand, every kernel
 * with a trait against the oracle, refusal by the others, and auto's pick. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "check.h"
#include "mha.h"

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
    if (needle && !strstr(mha_last_error(), needle))
        fail_msg("message '%s' lacks '%s'", mha_last_error(), needle);
}

static void test_validate_variants(void **state) {
    (void)state;
    mha_problem p = good;
    p.window = 2;
    expect(&p, MHA_EINVAL, "problem.window = 2");
    p = good;
    p.window = 1;
    p.window_left = -2;
    expect(&p, MHA_EINVAL, "problem.window_left = -2");
    p.window_left = -1;
    p.window_right = -7;
    expect(&p, MHA_EINVAL, "problem.window_right = -7");
    p.window_right = 0;
    expect(&p, MHA_OK, NULL);
    p = good; /* edges without the flag: a forgotten window = 1, not silently none */
    p.window_left = 4;
    expect(&p, MHA_EINVAL, "problem.window_left = 4 without problem.window = 1");
    p = good;
    p.softcap = -1.0f;
    expect(&p, MHA_EINVAL, "problem.softcap = -1");
    p.softcap = INFINITY;
    expect(&p, MHA_EINVAL, "problem.softcap = inf");
    p.softcap = NAN;
    expect(&p, MHA_EINVAL, "problem.softcap = nan");
    p.softcap = 30.0f;
    expect(&p, MHA_OK, NULL);
    p = good;
    p.sinks = 3;
    expect(&p, MHA_EINVAL, "problem.sinks = 3");
    p = good;
    p.head_dim_v = -1;
    expect(&p, MHA_EINVAL, "problem.head_dim_v = -1");
    p.head_dim_v = (int64_t)1 << 21;
    expect(&p, MHA_EINVAL, "head_dim_v 2097152");
    p.head_dim_v = 3;
    expect(&p, MHA_OK, NULL);
    assert_int_equal(mha_problem_head_dim_v(&p), 3);
    p.head_dim_v = 0;
    assert_int_equal(mha_problem_head_dim_v(&p), 8);
    /* zero-initialised problems are the old attention */
    const mha_problem z = {.batch = 0};
    assert_int_equal(z.window | z.sinks, 0);
    assert_true(z.softcap == 0.0f && z.head_dim_v == 0);
}

static void test_flops_visible_pairs(void **state) {
    (void)state;
    /* Nq = Nkv = 10, d = 4: dense 100 pairs x 16 FLOPs x B*H */
    mha_problem p = {.batch = 1,
                     .heads = 2,
                     .kv_heads = 2,
                     .seq_q = 10,
                     .seq_kv = 10,
                     .head_dim = 4,
                     .causal = 0,
                     .scale = 0.0f,
                     .dtype = MHA_F32,
                     .kv_dtype = MHA_F32};
    assert_true(mha_problem_flops(&p) == 100.0 * 16 * 2);
    p.causal = 1; /* 55 pairs */
    assert_true(mha_problem_flops(&p) == 55.0 * 16 * 2);
    p.window = 1; /* causal, left 2: rows see min(i + 1, 3) keys: 1 + 2 + 8*3 = 27 */
    p.window_left = 2;
    p.window_right = -1;
    assert_true(mha_problem_flops(&p) == 27.0 * 16 * 2);
    p.causal = 0; /* left 2, right 1: per row min(i,2) + 1 + min(9-i,1): 1+... */
    p.window_right = 1;
    double pairs = 0;
    for (int i = 0; i < 10; i++) pairs += (i < 2 ? i : 2) + 1 + (9 - i < 1 ? 9 - i : 1);
    assert_true(mha_problem_flops(&p) == pairs * 16 * 2);
    p.window_left = p.window_right = 0; /* each query its own key */
    assert_true(mha_problem_flops(&p) == 10.0 * 16 * 2);
    p.head_dim_v = 6; /* 2 * (4 + 6) per pair */
    assert_true(mha_problem_flops(&p) == 10.0 * 20 * 2);
    p.window_left = -2;
    assert_true(isnan(mha_problem_flops(&p)));
}

/* The oracle and every kernel the variant's traits name, on one problem. */
static void oracle(const mha_problem *p, const float *q, const float *k, const float *v,
                   const float *sinks, double *out) {
    const int64_t dv = mha_problem_head_dim_v(p);
    const mha_tensor qt = mha_view_bhnd(q, p->heads, p->seq_q, p->head_dim),
                     kt = mha_view_bhnd(k, p->kv_heads, p->seq_kv, p->head_dim),
                     vt = mha_view_bhnd(v, p->kv_heads, p->seq_kv, dv);
    const mha_extras x = {.sinks = sinks};
    assert_int_equal(mha_reference_ex(p, &qt, &kt, &vt, &x, out), MHA_OK);
}

static void test_oracle_sink_halves(void **state) {
    (void)state;
    /* one key: s = scale * q.k = 0.5 * (1*2 + 1*0) = 1; a sink of 1 takes half */
    const float q[] = {1, 1}, k[] = {2, 0}, v[] = {3, -4, 8};
    mha_problem p = {.batch = 1,
                     .heads = 1,
                     .kv_heads = 1,
                     .seq_q = 1,
                     .seq_kv = 1,
                     .head_dim = 2,
                     .causal = 0,
                     .scale = 0.5f,
                     .dtype = MHA_F32,
                     .kv_dtype = MHA_F32};
    p.head_dim_v = 3;
    p.sinks = 1;
    const float sink = 1.0f;
    double out[3];
    oracle(&p, q, k, v, &sink, out);
    assert_float_equal(out[0], 1.5, 1e-12);
    assert_float_equal(out[1], -2.0, 1e-12);
    assert_float_equal(out[2], 4.0, 1e-12);
    /* a sink of -inf takes nothing */
    const float none = -INFINITY;
    oracle(&p, q, k, v, &none, out);
    assert_float_equal(out[0], 3.0, 1e-12);
    /* a sink ln 3 above the logit takes 3/4 */
    const float big = 1.0f + logf(3.0f);
    oracle(&p, q, k, v, &big, out);
    assert_float_equal(out[2], 2.0, 1e-6);
    /* without a pointer the sinks problem is refused, naming the field */
    const mha_tensor qt = mha_view_bhnd(q, 1, 1, 2), kt = mha_view_bhnd(k, 1, 1, 2),
                     vt = mha_view_bhnd(v, 1, 1, 3);
    assert_int_equal(mha_reference(&p, &qt, &kt, &vt, out), MHA_EINVAL);
    assert_non_null(strstr(mha_last_error(), "problem.sinks = 1"));
    /* a sink of +inf has no value in the formula (0/0): refused, by index */
    const float inf = INFINITY;
    const mha_extras xi = {.sinks = &inf};
    assert_int_equal(mha_reference_ex(&p, &qt, &kt, &vt, &xi, out), MHA_EINVAL);
    assert_non_null(strstr(mha_last_error(), "mha_extras.sinks[0] = inf"));
    const mha_kernel *nk = mha_kernel_find("naive");
    float o3[3];
    const mha_tensor_mut ot = mha_view_bhnd_mut(o3, 1, 1, 3);
    assert_int_equal(mha_attend_ex(nk, &p, NULL, &qt, &kt, &vt, &xi, &ot, NULL, 0), MHA_EINVAL);
    assert_non_null(strstr(mha_last_error(), "mha_extras.sinks[0] = inf"));
}

static void test_oracle_window_diagonal(void **state) {
    (void)state;
    /* window (0, 0) non-causal, Nq = 3, Nkv = 5 (off = 2): query i sees
     * exactly key i + 2, so out row i = v[i + 2] whatever the scores */
    const float q[] = {1, -2, 3}, k[] = {5, 4, 3, 2, 1}, v[] = {10, 11, 12, 13, 14};
    mha_problem p = {.batch = 1,
                     .heads = 1,
                     .kv_heads = 1,
                     .seq_q = 3,
                     .seq_kv = 5,
                     .head_dim = 1,
                     .causal = 0,
                     .scale = 0.0f,
                     .dtype = MHA_F32,
                     .kv_dtype = MHA_F32};
    p.window = 1;
    double out[3];
    oracle(&p, q, k, v, NULL, out);
    for (int i = 0; i < 3; i++) assert_float_equal(out[i], 12.0 + i, 1e-12);
    /* a sink on a row that sees one key with s = 0 and sink 0: half */
    p.sinks = 1;
    const float qz[] = {0, 0, 0}, sink = 0.0f;
    oracle(&p, qz, k, v, &sink, out);
    for (int i = 0; i < 3; i++) assert_float_equal(out[i], (12.0 + i) / 2, 1e-12);
    /* seq_q > seq_kv (off = -2), left edge 0, right unbounded: row i sees
     * keys max(0, i - 2)..2; equal scores 0 and the sink 0: the mean of
     * its n keys' v, weighted n / (n + 1) */
    mha_problem r = {.batch = 1,
                     .heads = 1,
                     .kv_heads = 1,
                     .seq_q = 5,
                     .seq_kv = 3,
                     .head_dim = 1,
                     .causal = 0,
                     .scale = 0.0f,
                     .dtype = MHA_F32,
                     .kv_dtype = MHA_F32};
    r.window = 1;
    r.window_left = 0;
    r.window_right = -1;
    r.sinks = 1;
    const float q5[] = {0, 0, 0, 0, 0};
    double o5[5];
    oracle(&r, q5, k, v, &sink, o5);
    for (int i = 0; i < 5; i++) {
        const int lo = i - 2 < 0 ? 0 : i - 2, n = 3 - lo;
        double s = 0;
        for (int j = lo; j < 3; j++) s += v[j];
        assert_float_equal(o5[i], s / (n + 1), 1e-12);
    }
    /* right edge 0 with off = -2: rows 0 and 1 see no key (zeros, the sink
     * notwithstanding), row 2 sees key 0 */
    r.seq_q = 3;
    r.seq_kv = 1;
    r.window_left = -1;
    r.window_right = 0;
    double o3[3];
    oracle(&r, q5, k, v, &sink, o3);
    assert_float_equal(o3[0], 0.0, 0);
    assert_float_equal(o3[1], 0.0, 0);
    assert_float_equal(o3[2], v[0] / 2, 1e-12);
}

static void test_oracle_softcap(void **state) {
    (void)state;
    /* two keys, scores 4 and 0 (scale 1); softcap 2: 2 tanh(2) and 0 */
    const float q[] = {2}, k[] = {2, 0}, v[] = {1, 0};
    mha_problem p = {.batch = 1,
                     .heads = 1,
                     .kv_heads = 1,
                     .seq_q = 1,
                     .seq_kv = 2,
                     .head_dim = 1,
                     .causal = 0,
                     .scale = 1.0f,
                     .dtype = MHA_F32,
                     .kv_dtype = MHA_F32};
    double out;
    oracle(&p, q, k, v, NULL, &out);
    assert_float_equal(out, exp(4.0) / (exp(4.0) + 1), 1e-12);
    p.softcap = 2.0f;
    oracle(&p, q, k, v, NULL, &out);
    const double s = 2 * tanh(2.0);
    assert_float_equal(out, exp(s) / (exp(s) + 1), 1e-12);
}

/* Random problem data for the kernels, within [-1, 1). */
static float *rnd(int64_t n, unsigned *seed) {
    float *p = mha_alloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) {
        *seed = *seed * 1103515245u + 12345u;
        p[i] = (float)((*seed >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
    return p;
}

/* Runs kernel k on p (fp32, contiguous) and compares with the oracle. */
static mha_status run_vs_oracle(const mha_kernel *k, const mha_problem *p, const mha_options *opt,
                                double *max_err) {
    unsigned seed = 7;
    const int64_t dv = mha_problem_head_dim_v(p);
    const int64_t nq = p->batch * p->heads * p->seq_q, nkv = p->batch * p->kv_heads * p->seq_kv;
    float *q = rnd(nq * p->head_dim, &seed), *kk = rnd(nkv * p->head_dim, &seed),
          *v = rnd(nkv * dv, &seed), *sinks = rnd(p->heads, &seed), *o = rnd(nq * dv, &seed);
    for (int64_t h = 0; h < p->heads; h++) sinks[h] *= 3; /* from e^-3 to e^3 of a score */
    /* A bf16 problem: the oracle sees the inputs rounded as the kernel does,
     * the kernel reads them as bf16 and writes bf16 over o's random bits. */
    const int b16 = p->dtype == MHA_BF16;
    uint16_t *q16 = NULL, *k16 = NULL, *v16 = NULL, *o16 = NULL;
    if (b16) {
        float *in[3] = {q, kk, v};
        uint16_t **out[3] = {&q16, &k16, &v16};
        const int64_t len[3] = {nq * p->head_dim, nkv * p->head_dim, nkv * dv};
        for (int u = 0; u < 3; u++) {
            *out[u] = mha_alloc((size_t)len[u] * 2);
            assert_int_equal(mha_convert_from_f32(MHA_BF16, in[u], *out[u], (size_t)len[u]),
                             MHA_OK);
            assert_int_equal(mha_convert_to_f32(MHA_BF16, *out[u], in[u], (size_t)len[u]), MHA_OK);
        }
        o16 = mha_alloc((size_t)(nq * dv) * 2);
        assert_int_equal(mha_convert_from_f32(MHA_BF16, o, o16, (size_t)(nq * dv)), MHA_OK);
    }
    double *ref = malloc((size_t)(nq * dv) * sizeof(double));
    const mha_tensor qt = {.data = q,
                           .stride_b = p->heads * p->seq_q * p->head_dim,
                           .stride_h = p->seq_q * p->head_dim,
                           .stride_n = p->head_dim},
                     kt = {.data = kk,
                           .stride_b = p->kv_heads * p->seq_kv * p->head_dim,
                           .stride_h = p->seq_kv * p->head_dim,
                           .stride_n = p->head_dim},
                     vt = {.data = v,
                           .stride_b = p->kv_heads * p->seq_kv * dv,
                           .stride_h = p->seq_kv * dv,
                           .stride_n = dv};
    const mha_tensor_mut ot = {
        .data = o, .stride_b = p->heads * p->seq_q * dv, .stride_h = p->seq_q * dv, .stride_n = dv};
    const mha_extras x = {.sinks = p->sinks ? sinks : NULL};
    mha_problem p32 = *p; /* the oracle on the (rounded) fp32 values */
    p32.dtype = p32.kv_dtype = MHA_F32;
    assert_int_equal(mha_reference_ex(&p32, &qt, &kt, &vt, &x, ref), MHA_OK);
    mha_tensor q2 = qt, k2 = kt, v2 = vt;
    mha_tensor_mut o2 = ot;
    if (b16) {
        q2.data = q16;
        k2.data = k16;
        v2.data = v16;
        o2.data = o16;
        q2.dtype = k2.dtype = v2.dtype = o2.dtype = MHA_BF16;
    }
    size_t ws_bytes = 0;
    mha_status st = mha_workspace_size(k, p, opt, &ws_bytes);
    void *ws = NULL;
    if (st == MHA_OK) {
        ws = mha_alloc(ws_bytes);
        st = mha_attend_ex(k, p, opt, &q2, &k2, &v2, &x, &o2, ws, ws_bytes);
    }
    if (b16) assert_int_equal(mha_convert_to_f32(MHA_BF16, o16, o, (size_t)(nq * dv)), MHA_OK);
    *max_err = 0;
    if (st == MHA_OK)
        for (int64_t i = 0; i < nq * dv; i++) {
            const double e = fabs((double)o[i] - ref[i]);
            *max_err = isnan(e) || e > *max_err ? (isnan(e) ? INFINITY : e) : *max_err;
        }
    mha_free(q);
    mha_free(kk);
    mha_free(v);
    mha_free(sinks);
    mha_free(o);
    mha_free(ws);
    mha_free(q16);
    mha_free(k16);
    mha_free(v16);
    mha_free(o16);
    free(ref);
    return st;
}

/* One problem per variant and their combination, odd sizes and GQA. */
static mha_problem variant_problem(int which) {
    mha_problem p = {.batch = 2,
                     .heads = 6,
                     .kv_heads = 2,
                     .seq_q = 37,
                     .seq_kv = 53,
                     .head_dim = 24,
                     .causal = which & 1,
                     .scale = 0.0f,
                     .dtype = MHA_F32,
                     .kv_dtype = MHA_F32};
    switch (which >> 1) {
    case 0: /* window, left only */
        p.window = 1;
        p.window_left = 5;
        p.window_right = -1;
        break;
    case 1: /* window, right only (non-causal) and left */
        p.window = 1;
        p.window_left = 9;
        p.window_right = 3;
        break;
    case 2:
        p.softcap = 0.7f;
        break;
    case 3:
        p.sinks = 1;
        break;
    case 4:
        p.head_dim_v = 40;
        break;
    case 5:
        p.head_dim_v = 7;
        break;
    default: /* all of them */
        p.window = 1;
        p.window_left = 17;
        p.window_right = 0;
        p.softcap = 1.5f;
        p.sinks = 1;
        p.head_dim_v = 13;
        break;
    }
    return p;
}
enum { N_VARIANT_PROBLEMS = 14 };

static unsigned needs(const mha_problem *p) {
    return (p->window ? MHA_KT_WINDOW : 0u) | (p->softcap > 0 ? MHA_KT_SOFTCAP : 0u) |
           (p->sinks ? MHA_KT_SINKS : 0u) |
           (mha_problem_head_dim_v(p) != p->head_dim ? MHA_KT_HEAD_DIM_V : 0u);
}

static void test_kernels_take_or_refuse(void **state) {
    (void)state;
    int checked = 0;
    for (int i = 0; i < mha_kernel_count(); i++) {
        const mha_kernel *k = mha_kernel_at(i);
        if (!(mha_kernel_dtypes(k) & MHA_DTYPE_BIT(MHA_F32))) continue;
        if (mha_kernel_supported(k) != MHA_OK) continue;
        for (int w = 0; w < N_VARIANT_PROBLEMS; w++) {
            const mha_problem p = variant_problem(w);
            /* default blocks, then small odd ones: many KV blocks per window
             * edge and per visible range, query blocks that are not a
             * vector wide */
            static const mha_options opts[] = {{.threads = 2},
                                               {.threads = 2, .block_q = 16, .block_kv = 8},
                                               {.threads = 1, .block_q = 5, .block_kv = 3}};
            double err;
            const mha_status st = run_vs_oracle(k, &p, &opts[0], &err);
            if ((needs(&p) & ~mha_kernel_traits(k)) == 0) {
                if (st != MHA_OK)
                    fail_msg("%s, case %d: %s", mha_kernel_name(k), w, mha_last_error());
                if (!(err <= 1e-5))
                    fail_msg("%s, case %d: max error %g", mha_kernel_name(k), w, err);
                for (int oi = 1; oi < 3 && (mha_kernel_traits(k) & MHA_KT_BLOCKS); oi++) {
                    assert_int_equal(run_vs_oracle(k, &p, &opts[oi], &err), MHA_OK);
                    if (!(err <= 1e-5))
                        fail_msg("%s, case %d, blocks %d/%d: max error %g", mha_kernel_name(k), w,
                                 opts[oi].block_q, opts[oi].block_kv, err);
                }
                checked++;
            } else {
                /* refused, naming the kernel and the variant */
                assert_int_equal(st, MHA_EUNSUPPORTED);
                const char *m = mha_last_error();
                assert_non_null(strstr(m, mha_kernel_name(k)));
                assert_non_null(strstr(m, "does not take"));
                assert_non_null(strstr(m, "problem."));
            }
        }
    }
    assert_true(checked >= N_VARIANT_PROBLEMS); /* naive at least */
}

/* A window bounded on the left runs its query blocks in order, several
 * consecutive ones per task (mha_window_chunk: > 1 from 64 tasks per
 * thread, or a KV head's blocks where flash_bf16.c packs K and V per
 * thread and there are 4 KV heads per thread), each prefetching the next
 * one's rows: enough query blocks here for chunks of several blocks at 1
 * and 2 threads, a last block and a head dim that are not a vector wide,
 * GQA, and the window's left edge within and beyond the first blocks; the
 * kernels taking fp32 in fp32, those taking bf16 only (flash.avx512bf16)
 * in bf16 with 8 KV heads (whole KV heads per chunk at 2 threads too). A
 * block skipped or run twice leaves the output's random initial values, or
 * their sum, behind. */
static void test_window_blocks_in_order(void **state) {
    (void)state;
    int checked = 0, checked16 = 0;
    for (int i = 0; i < mha_kernel_count(); i++) {
        const mha_kernel *k = mha_kernel_at(i);
        const int f32 = (mha_kernel_dtypes(k) & MHA_DTYPE_BIT(MHA_F32)) != 0;
        if ((!f32 && !(mha_kernel_dtypes(k) & MHA_DTYPE_BIT(MHA_BF16))) ||
            mha_kernel_supported(k) != MHA_OK || !(mha_kernel_traits(k) & MHA_KT_WINDOW) ||
            !(mha_kernel_traits(k) & MHA_KT_BLOCKS))
            continue;
        for (int w = 0; w < 3; w++) {
            mha_problem p = {.batch = 2,
                             .heads = f32 ? 4 : 16,
                             .kv_heads = f32 ? 2 : 8,
                             .seq_q = 1203,
                             .seq_kv = w == 2 ? 1300 : 1203,
                             .head_dim = 40,
                             .causal = w != 1,
                             .dtype = f32 ? MHA_F32 : MHA_BF16,
                             .kv_dtype = f32 ? MHA_F32 : MHA_BF16,
                             .window = 1,
                             .window_left = w == 0 ? 100 : 37,
                             .window_right = w == 1 ? 5 : 0,
                             .sinks = w == 2};
            for (int t = 1; t <= 2; t++) {
                const mha_options o = {.threads = t, .block_q = 16};
                double err;
                if (run_vs_oracle(k, &p, &o, &err) != MHA_OK)
                    fail_msg("%s, window %d: %s", mha_kernel_name(k), w, mha_last_error());
                /* bf16: P rounded to bf16 and the output rounded, |V| <= 1 */
                if (!(err <= (f32 ? 1e-5 : 2e-2)))
                    fail_msg("%s, window %d, %d threads: max error %g", mha_kernel_name(k), w, t,
                             err);
                checked++;
                checked16 += !f32;
            }
        }
    }
    assert_true(checked >= 6); /* flash.scalar at least */
    print_message("window blocks in order: %d runs, %d of them bf16\n", checked, checked16);
}

static void test_refusal_message(void **state) {
    (void)state;
    const mha_kernel *k = mha_kernel_find("tiled.scalar");
    assert_non_null(k);
    assert_int_equal(mha_kernel_traits(k) & MHA_KT_SINKS, 0);
    mha_problem p = good;
    p.sinks = 1;
    assert_int_equal(mha_kernel_takes(k, &p), MHA_EUNSUPPORTED);
    assert_string_equal(mha_last_error(),
                        "kernel tiled.scalar does not take attention sinks (problem.sinks = 1)");
    p = good;
    p.softcap = 50.0f;
    assert_int_equal(mha_kernel_takes(k, &p), MHA_EUNSUPPORTED);
    assert_non_null(strstr(mha_last_error(), "logit softcap (problem.softcap = 50)"));
    p = good;
    p.head_dim_v = 5;
    assert_int_equal(mha_kernel_takes(k, &p), MHA_EUNSUPPORTED);
    assert_non_null(strstr(mha_last_error(), "problem.head_dim_v = 5, head_dim = 8"));
    p.head_dim_v = 8; /* equal is no variant */
    assert_int_equal(mha_kernel_takes(k, &p), MHA_OK);
    p = good;
    p.window = 1;
    p.window_left = 3;
    assert_int_equal(mha_kernel_takes(k, &p), MHA_EUNSUPPORTED);
    assert_non_null(strstr(mha_last_error(), "sliding window (problem.window, left 3, right 0)"));
}

static void test_auto_takes_variants(void **state) {
    (void)state;
    unsetenv("MHA_KERNEL");
    setenv("MHA_TUNING", "/nonexistent/none.json", 1);
    for (int w = 0; w < N_VARIANT_PROBLEMS; w++) {
        const mha_problem p = variant_problem(w);
        mha_selection s;
        assert_int_equal(mha_select(&p, &(mha_options){.threads = 1}, &s), MHA_OK);
        assert_int_equal(mha_kernel_takes(s.kernel, &p), MHA_OK);
        assert_int_equal(needs(&p) & ~mha_kernel_traits(s.kernel), 0);
    }
}

/* verify's variant cases (check.c) on every kernel with a variant trait, in
 * every (dtype, kv dtype) it takes: the bf16 kernels' variant paths are
 * checked here, which test_kernels (fp32 grids) does not reach. */
static void test_verify_cases_every_dtype(void **state) {
    (void)state;
    static check_case cases[512];
    const int ncases = check_cases(cases, 512, 1);
    int ran = 0;
    for (int ki = 0; ki < mha_kernel_count(); ki++) {
        const mha_kernel *k = mha_kernel_at(ki);
        const unsigned vt = MHA_KT_WINDOW | MHA_KT_SOFTCAP | MHA_KT_SINKS | MHA_KT_HEAD_DIM_V;
        if (!(mha_kernel_traits(k) & vt) || mha_kernel_supported(k) != MHA_OK) continue;
        for (int dt = MHA_F32; dt <= MHA_F16; dt++)
            for (int kv = MHA_F32; kv < MHA_DTYPE_COUNT; kv++) {
                if ((dt != MHA_F32 && kv == MHA_F32) ||
                    !(mha_kernel_dtypes(k) & MHA_DTYPE_BIT(dt)) ||
                    !(mha_kernel_kv_dtypes(k) & MHA_DTYPE_BIT(kv)))
                    continue;
                for (int ci = 0; ci < ncases; ci++) {
                    check_case c = cases[ci];
                    if (!needs(&c.p) || !check_input_fits(c.input, (mha_dtype)dt, (mha_dtype)kv))
                        continue;
                    check_case_set_dtypes(&c, (mha_dtype)dt, (mha_dtype)kv);
                    if (!check_kernel_takes_case(k, &c)) continue;
                    check_data d;
                    assert_int_equal(check_prepare(&c, check_case_seed(4242, ci), &d), MHA_OK);
                    check_report r;
                    if (check_kernel(k, &d, 2, &r) != CHECK_PASS) {
                        char desc[256];
                        check_describe(&c, desc, sizeof desc);
                        fail_msg("%s case %d %s: %s", mha_kernel_name(k), ci, desc, r.detail);
                    }
                    check_release(&d);
                    ran++;
                }
            }
    }
    assert_true(ran > 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_validate_variants),
        cmocka_unit_test(test_flops_visible_pairs),
        cmocka_unit_test(test_oracle_sink_halves),
        cmocka_unit_test(test_oracle_window_diagonal),
        cmocka_unit_test(test_oracle_softcap),
        cmocka_unit_test(test_kernels_take_or_refuse),
        cmocka_unit_test(test_window_blocks_in_order),
        cmocka_unit_test(test_refusal_message),
        cmocka_unit_test(test_auto_takes_variants),
        cmocka_unit_test(test_verify_cases_every_dtype),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
