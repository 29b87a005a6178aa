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

static const mha_problem good = {2, 4, 2, 5, 7, 8, 1, 0.0f, MHA_F32, MHA_F32};

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
    const mha_problem p = {1, 1, 1, 2, 2, 4, 0, 0.0f, MHA_F32, MHA_F32};
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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
