/* test_torch_bf16.c - bf16 attention against PyTorch's own bf16 error (issue 14): on the
 * fixtures of tests/data/bf16_* (gen_torch_bf16.py), every kernel that takes bf16 Q/K/V/O
 * must stay within 1.5x the max abs error of torch's bf16 SDPA versus the float64
 * reference. The fixtures themselves are checked against mha_reference first, so the
 * yardstick is known to be measured against our oracle even when no kernel takes bf16. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "mha.h"
#include "testutil.h"

/* Issue 14's criterion: our bf16 max abs error <= 1.5x torch's. Torch's max error on these
 * fixtures is essentially the rounding of its output to bf16 (half an ulp of the largest
 * outputs), so a kernel that accumulates in fp32 and rounds once lands at 0.7-1.0x (naive
 * with a convert-round-once bf16 path, measured). The bound is lenient: the same kernel
 * rounding P to bf16 before P.V measured 0.97-1.59x and failed on one shape of six. The
 * printed RMS ratio separates them better (0.70-0.86x against 1.02-1.35x). */
#define TORCH_RATIO 1.5
/* The stored float64 reference against mha_reference on the same bf16 inputs: both are
 * float64 softmax(QK^T*scale)V, so only summation order differs (~1e-16 relative). */
#define REF_TOL 1e-9

static const char *const CASES[] = {"self", "causal", "cross", "gqa", "decode", "tail"};
enum { NCASES = sizeof CASES / sizeof CASES[0], MAX_KERNELS = 64 };

/* One fixture: tests/data/bf16_<name>/. */
typedef struct {
    const char *name;
    mha_problem p;
    uint16_t *q, *k, *v, *torch_out; /* bf16 bits */
    double *ref;                     /* [B,H,Nq,d] */
    double torch_err;                /* meta.json: torch's max abs error vs ref */
    double torch_rms;                /* torch.npy's RMS error vs ref (printed only) */
    char torch_version[64];
} fixture;

static fixture g_fx[NCASES];
static int g_loaded; /* 1: loaded, -1: MHA_TEST_DATA unset */

static size_t out_count(const mha_problem *p) {
    return (size_t)(p->batch * p->heads * p->seq_q * p->head_dim);
}

/* Max |bf16 out - ref| over the output (NaN if any output is NaN; at: its flat index) and,
 * for the printout only, the RMS error: bf16 rounding of the output dominates the max, so
 * the RMS is where an extra rounding inside a kernel shows first. */
static double max_err_bf16(const uint16_t *out, const double *ref, size_t n, size_t *at,
                           double *rms) {
    double worst = 0, sq = 0;
    *at = 0;
    for (size_t i = 0; i < n; i++) {
        float x;
        mha_convert_to_f32(MHA_BF16, &out[i], &x, 1);
        const double e = fabs((double)x - ref[i]);
        sq += e * e;
        if (!(e <= worst)) { /* also takes a NaN, which then sticks */
            worst = e;
            *at = i;
            if (isnan(e)) break;
        }
    }
    *rms = sqrt(sq / (double)n);
    return worst;
}

/* ---- a tiny reader of the fixtures' .npy files ------------------------------------------ */
/* harness/fmt_npy.c reads '<f4' only; these files are np.save's own output (format 1.0,
 * C order), so a fixed-layout reader that checks dtype, order and shape is enough. */
static void *read_npy(const char *path, const char *descr, size_t elem, const int64_t *shape,
                      int ndim) {
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("%s: cannot open (regenerate with tests/data/gen_torch_bf16.py)", path);
    unsigned char pre[10];
    if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0 || pre[6] != 1)
        fail_msg("%s: not a format 1.0 .npy file", path);
    const size_t hlen = (size_t)pre[8] | (size_t)pre[9] << 8;
    char hdr[1024];
    if (hlen >= sizeof hdr || fread(hdr, 1, hlen, f) != hlen)
        fail_msg("%s: header of %zu bytes is truncated or too long", path, hlen);
    hdr[hlen] = 0;
    char want[160];
    snprintf(want, sizeof want, "'descr': '%s'", descr);
    if (!strstr(hdr, want)) fail_msg("%s: header %s, expected dtype '%s'", path, hdr, descr);
    if (!strstr(hdr, "'fortran_order': False")) fail_msg("%s: not C order: %s", path, hdr);
    int len = snprintf(want, sizeof want, "'shape': (");
    size_t count = 1;
    for (int i = 0; i < ndim; i++) {
        len += snprintf(want + len, sizeof want - (size_t)len, "%s%lld", i ? ", " : "",
                        (long long)shape[i]);
        count *= (size_t)shape[i];
    }
    snprintf(want + len, sizeof want - (size_t)len, ")");
    if (!strstr(hdr, want)) fail_msg("%s: header %s, expected %s", path, hdr, want);
    void *data = malloc(count * elem);
    assert_non_null(data);
    if (fread(data, elem, count, f) != count || fgetc(f) != EOF)
        fail_msg("%s: expected exactly %zu elements of %zu bytes after the header", path, count,
                 elem);
    fclose(f);
    return data;
}

static json_object *meta_field(json_object *meta, const char *path, const char *key,
                               json_type type) {
    json_object *v;
    if (!json_object_object_get_ex(meta, key, &v) || !json_object_is_type(v, type))
        fail_msg("%s: \"%s\" is missing or not a %s", path, key, json_type_to_name(type));
    return v;
}

static void load_fixture(const char *data, const char *name, fixture *fx) {
    char dir[1024], path[1100];
    snprintf(dir, sizeof dir, "%s/bf16_%s", data, name);
    snprintf(path, sizeof path, "%s/meta.json", dir);
    char buf[2048];
    tu_slurp(path, buf, sizeof buf);
    json_object *meta = json_tokener_parse(buf);
    if (!meta) fail_msg("%s: unreadable or not JSON", path);
    fx->name = name;
    mha_problem *p = &fx->p;
    *p = (mha_problem){.dtype = MHA_BF16, .kv_dtype = MHA_BF16};
    p->batch = json_object_get_int64(meta_field(meta, path, "batch", json_type_int));
    p->heads = json_object_get_int64(meta_field(meta, path, "heads", json_type_int));
    p->kv_heads = json_object_get_int64(meta_field(meta, path, "kv_heads", json_type_int));
    p->seq_q = json_object_get_int64(meta_field(meta, path, "seq_q", json_type_int));
    p->seq_kv = json_object_get_int64(meta_field(meta, path, "seq_kv", json_type_int));
    p->head_dim = json_object_get_int64(meta_field(meta, path, "head_dim", json_type_int));
    p->causal = json_object_get_boolean(meta_field(meta, path, "causal", json_type_boolean));
    p->scale = (float)json_object_get_double(meta_field(meta, path, "scale", json_type_double));
    fx->torch_err =
        json_object_get_double(meta_field(meta, path, "torch_max_abs_err", json_type_double));
    snprintf(fx->torch_version, sizeof fx->torch_version, "%s",
             json_object_get_string(meta_field(meta, path, "torch_version", json_type_string)));
    json_object_put(meta);

    if (mha_problem_validate(p) != MHA_OK) fail_msg("%s: %s", dir, mha_last_error());

    /* Every file read strictly against meta.json's problem. */
    const int64_t qs[4] = {p->batch, p->heads, p->seq_q, p->head_dim};
    const int64_t ks[4] = {p->batch, p->kv_heads, p->seq_kv, p->head_dim};
    snprintf(path, sizeof path, "%s/q.npy", dir);
    fx->q = read_npy(path, "<u2", 2, qs, 4);
    snprintf(path, sizeof path, "%s/k.npy", dir);
    fx->k = read_npy(path, "<u2", 2, ks, 4);
    snprintf(path, sizeof path, "%s/v.npy", dir);
    fx->v = read_npy(path, "<u2", 2, ks, 4);
    snprintf(path, sizeof path, "%s/torch.npy", dir);
    fx->torch_out = read_npy(path, "<u2", 2, qs, 4);
    snprintf(path, sizeof path, "%s/ref.npy", dir);
    fx->ref = read_npy(path, "<f8", 8, qs, 4);
    size_t at;
    (void)max_err_bf16(fx->torch_out, fx->ref, out_count(p), &at, &fx->torch_rms);
}

static void describe(const fixture *fx, char *buf, size_t n) {
    const mha_problem *p = &fx->p;
    snprintf(buf, n, "%-6s H=%lld kvh=%lld Nq=%lld Nkv=%lld d=%lld causal=%d", fx->name,
             (long long)p->heads, (long long)p->kv_heads, (long long)p->seq_q, (long long)p->seq_kv,
             (long long)p->head_dim, p->causal);
}

/* ---- setup ------------------------------------------------------------------------------ */

static int setup(void **state) {
    (void)state;
    const char *data = getenv("MHA_TEST_DATA");
    if (!data || !*data) {
        g_loaded = -1;
        return 0;
    }
    for (int c = 0; c < NCASES; c++) load_fixture(data, CASES[c], &g_fx[c]);
    g_loaded = 1;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    for (int c = 0; c < NCASES; c++) {
        free(g_fx[c].q);
        free(g_fx[c].k);
        free(g_fx[c].v);
        free(g_fx[c].torch_out);
        free(g_fx[c].ref);
    }
    return 0;
}

#define NEED_DATA()                                                                                \
    do {                                                                                           \
        if (g_loaded < 0) {                                                                        \
            print_message("MHA_TEST_DATA is not set: skipping (run through meson test)\n");        \
            skip();                                                                                \
        }                                                                                          \
    } while (0)

/* ---- the fixtures against our oracle ---------------------------------------------------- */

/* The stored reference is mha_reference on the stored bf16 inputs, and meta.json's torch
 * error is what torch.npy's bf16 output really misses it by: the yardstick is sound. */
static void test_fixtures(void **state) {
    (void)state;
    NEED_DATA();
    for (int c = 0; c < NCASES; c++) {
        const fixture *fx = &g_fx[c];
        const mha_problem *p = &fx->p;
        const size_t n = out_count(p);
        const mha_tensor q = mha_view_typed(fx->q, MHA_BF16, NULL, p->heads, p->seq_q, p->head_dim);
        const mha_tensor k =
            mha_view_typed(fx->k, MHA_BF16, NULL, p->kv_heads, p->seq_kv, p->head_dim);
        const mha_tensor v =
            mha_view_typed(fx->v, MHA_BF16, NULL, p->kv_heads, p->seq_kv, p->head_dim);
        double *ours = malloc(n * sizeof *ours);
        assert_non_null(ours);
        if (mha_reference(p, &q, &k, &v, ours) != MHA_OK)
            fail_msg("bf16_%s: mha_reference: %s", fx->name, mha_last_error());
        double ref_diff = 0, ref_max = 0;
        for (size_t i = 0; i < n; i++) {
            const double e = fabs(ours[i] - fx->ref[i]);
            if (!(e <= ref_diff)) ref_diff = e;
            if (fabs(fx->ref[i]) > ref_max) ref_max = fabs(fx->ref[i]);
        }
        free(ours);
        size_t at;
        double rms;
        const double torch_err = max_err_bf16(fx->torch_out, fx->ref, n, &at, &rms);
        char desc[128];
        describe(fx, desc, sizeof desc);
        print_message("%s  reference diff %.2g  torch %s max abs err %.4g (max |ref| %.3g)\n", desc,
                      ref_diff, fx->torch_version, torch_err, ref_max);
        if (!(ref_diff <= REF_TOL))
            fail_msg("bf16_%s: stored reference differs from mha_reference by %g, expected <= %g",
                     fx->name, ref_diff, REF_TOL);
        if (!(fabs(torch_err - fx->torch_err) <= 1e-12))
            fail_msg("bf16_%s: torch.npy misses the reference by %.17g, meta.json says %.17g",
                     fx->name, torch_err, fx->torch_err);
        /* A yardstick of 0 (or a broken torch output) would make the ratio meaningless:
         * bf16 outputs of magnitude ~1 cannot all be exact, and must be within a few ulps. */
        if (!(torch_err > 0 && torch_err < 0.05 * ref_max))
            fail_msg("bf16_%s: torch's error %g is implausible for outputs up to %g", fx->name,
                     torch_err, ref_max);
    }
}

/* ---- every kernel that takes bf16 against torch's error ----------------------------------- */

/* Guard elements each side of the output; the output itself starts as bf16 NaNs, so a
 * position the kernel never writes shows up as a NaN error. */
enum { GUARD = 64 };
#define SENTINEL 0xffffu

static void test_kernel(void **state) {
    const mha_kernel *kern = *state;
    NEED_DATA();
    if (mha_kernel_supported(kern) != MHA_OK) {
        print_message("skipping %s: %s\n", mha_kernel_name(kern), mha_last_error());
        skip();
    }
    int failures = 0, ran = 0;
    for (int c = 0; c < NCASES; c++) {
        const fixture *fx = &g_fx[c];
        const mha_problem *p = &fx->p;
        char desc[128];
        describe(fx, desc, sizeof desc);
        if (mha_kernel_takes(kern, p) != MHA_OK) {
            print_message("%-14s %s  not taken: %s\n", mha_kernel_name(kern), desc,
                          mha_last_error());
            continue;
        }
        const size_t n = out_count(p);
        const mha_tensor q = mha_view_typed(fx->q, MHA_BF16, NULL, p->heads, p->seq_q, p->head_dim);
        const mha_tensor k =
            mha_view_typed(fx->k, MHA_BF16, NULL, p->kv_heads, p->seq_kv, p->head_dim);
        const mha_tensor v =
            mha_view_typed(fx->v, MHA_BF16, NULL, p->kv_heads, p->seq_kv, p->head_dim);
        uint16_t *buf = malloc((n + 2 * GUARD) * sizeof *buf);
        assert_non_null(buf);
        uint16_t *out = buf + GUARD;
        const mha_tensor_mut o = mha_view_typed_mut(out, MHA_BF16, p->heads, p->seq_q, p->head_dim);
        for (int threads = 1; threads <= 2; threads++) {
            for (size_t i = 0; i < n + 2 * GUARD; i++) buf[i] = SENTINEL;
            const mha_options opt = {.threads = threads};
            size_t ws_bytes = 0;
            mha_status st = mha_workspace_size(kern, p, &opt, &ws_bytes);
            void *ws = NULL;
            if (st == MHA_OK && ws_bytes) assert_non_null(ws = mha_alloc(ws_bytes));
            if (st == MHA_OK) st = mha_attend(kern, p, &opt, &q, &k, &v, &o, ws, ws_bytes);
            mha_free(ws);
            if (st == MHA_EUNSUPPORTED) { /* a shape this kernel does not take */
                print_message("%-14s %s  not taken: %s\n", mha_kernel_name(kern), desc,
                              mha_last_error());
                break;
            }
            if (st != MHA_OK) {
                print_error("%s %s threads=%d: %s: %s\n", mha_kernel_name(kern), desc, threads,
                            mha_status_str(st), mha_last_error());
                failures++;
                continue;
            }
            ran++;
            for (size_t i = 0; i < GUARD; i++)
                if (buf[i] != SENTINEL || out[n + i] != SENTINEL) {
                    print_error("%s %s threads=%d: wrote into the guard zone %s the output\n",
                                mha_kernel_name(kern), desc, threads,
                                buf[i] != SENTINEL ? "before" : "after");
                    failures++;
                    break;
                }
            size_t at;
            double rms;
            const double err = max_err_bf16(out, fx->ref, n, &at, &rms);
            const double bound = TORCH_RATIO * fx->torch_err;
            const int ok = err <= bound;
            print_message("%-14s %s threads=%d  max abs err %.4g, torch %.4g: %.2fx%s  "
                          "(rms %.3g, torch %.3g: %.2fx)\n",
                          mha_kernel_name(kern), desc, threads, err, fx->torch_err,
                          err / fx->torch_err, ok ? "" : "  FAIL", rms, fx->torch_rms,
                          rms / fx->torch_rms);
            if (!ok) {
                const int64_t d = p->head_dim, N = p->seq_q, H = p->heads, i = (int64_t)at;
                float got;
                mha_convert_to_f32(MHA_BF16, &out[at], &got, 1);
                print_error("%s %s threads=%d: max abs err %g > %.1f x torch's %g; worst at "
                            "(b=%lld, h=%lld, i=%lld, c=%lld): got %.9g, reference %.9g\n",
                            mha_kernel_name(kern), desc, threads, err, TORCH_RATIO, fx->torch_err,
                            (long long)(i / d / N / H), (long long)(i / d / N % H),
                            (long long)(i / d % N), (long long)(i % d), (double)got, fx->ref[at]);
                failures++;
            }
        }
        free(buf);
    }
    assert_int_equal(failures, 0);
    if (!ran) {
        print_message("skipping %s: it takes bf16 but none of the fixture shapes\n",
                      mha_kernel_name(kern));
        skip();
    }
}

/* Where no kernel takes bf16 yet: say so, and skip rather than pass. */
static void test_no_bf16_kernel(void **state) {
    (void)state;
    print_message("skipping: no registered kernel takes bf16 Q/K/V/O (kernels.inc's dtype "
                  "columns); only the fixtures were checked\n");
    skip();
}

int main(void) {
    struct CMUnitTest tests[MAX_KERNELS + 2];
    size_t n = 0;
    tests[n++] = (struct CMUnitTest){"fixtures", test_fixtures, NULL, NULL, NULL};
    const unsigned bf16 = MHA_DTYPE_BIT(MHA_BF16);
    for (int i = 0; i < mha_kernel_count() && n < MAX_KERNELS + 1; i++) {
        const mha_kernel *k = mha_kernel_at(i);
        if ((mha_kernel_dtypes(k) & bf16) && (mha_kernel_kv_dtypes(k) & bf16))
            tests[n++] =
                (struct CMUnitTest){mha_kernel_name(k), test_kernel, NULL, NULL, (void *)k};
    }
    if (n == 1)
        tests[n++] = (struct CMUnitTest){"bf16_kernels", test_no_bf16_kernel, NULL, NULL, NULL};
    return _cmocka_run_group_tests("torch_bf16", tests, n, setup, teardown);
}
