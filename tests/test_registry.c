/* test_registry.c - the kernel registry and the MHA_ISA cap: names, lookup,
 * "runs here" under each cap, malformed caps, unsupported kernels refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <ctype.h>
#include <stdio.h>

#include "mha.h"

static char *saved_isa;

static int save_env(void **state) {
    (void)state;
    const char *e = getenv("MHA_ISA");
    saved_isa = e ? strdup(e) : NULL;
    return 0;
}
static int restore_env(void **state) {
    (void)state;
    if (saved_isa)
        setenv("MHA_ISA", saved_isa, 1);
    else
        unsetenv("MHA_ISA");
    free(saved_isa);
    return 0;
}

static void test_names(void **state) {
    (void)state;
    static const char *const expected[] = {"naive",        "tiled.scalar", "tiled.avx2",
                                           "tiled.avx512", "flash.scalar", "flash.avx2",
                                           "flash.avx512"};
    for (size_t i = 0; i < sizeof expected / sizeof expected[0]; i++) {
        const mha_kernel *k = mha_kernel_find(expected[i]);
        assert_non_null(k);
        assert_string_equal(mha_kernel_name(k), expected[i]);
        assert_true(strlen(mha_kernel_summary(k)) > 10);
    }
    assert_true(mha_kernel_count() >= 7);
    for (int i = 0; i < mha_kernel_count(); i++)
        for (int j = i + 1; j < mha_kernel_count(); j++)
            assert_string_not_equal(mha_kernel_name(mha_kernel_at(i)),
                                    mha_kernel_name(mha_kernel_at(j)));
    assert_null(mha_kernel_at(-1));
    assert_null(mha_kernel_at(mha_kernel_count()));
    assert_int_equal(mha_kernel_isa(mha_kernel_find("flash.avx2")), MHA_ISA_AVX2);
    assert_string_equal(mha_kernel_algorithm(mha_kernel_find("tiled.avx512")), "tiled");
}

/* The traits column: what callers ask instead of comparing names. Every
 * kernel with blocks is tunable; the block model, split, decode shape,
 * baseline and reference bits sit where the algorithms need them; a twin is
 * the same algorithm at another level. */
static void test_traits(void **state) {
    (void)state;
    int references = 0;
    for (int i = 0; i < mha_kernel_count(); i++) {
        const mha_kernel *k = mha_kernel_at(i);
        const unsigned t = mha_kernel_traits(k);
        const char *alg = mha_kernel_algorithm(k);
        assert_int_equal(!!(t & MHA_KT_BLOCKS),
                         strcmp(alg, "flash") == 0 || strcmp(alg, "tiled") == 0);
        assert_int_equal(!!(t & MHA_KT_SPLIT), strcmp(alg, "flash") == 0);
        assert_int_equal(!!(t & MHA_KT_MATERIALISED), strcmp(alg, "tiled") == 0);
        assert_int_equal(!!(t & MHA_KT_DECODE), strcmp(alg, "decode") == 0);
        assert_int_equal(!!(t & MHA_KT_BASELINE), strcmp(alg, "blas") == 0);
        references += !!(t & MHA_KT_REFERENCE);
        assert_true(mha_kernel_rank(k) >= 1);
        /* an emulated kernel (flash.amxemu) is nobody's twin, its own neither */
        if (t & MHA_KT_EMULATED)
            assert_ptr_not_equal(mha_kernel_twin(k, mha_kernel_isa(k)), k);
        else
            assert_ptr_equal(mha_kernel_twin(k, mha_kernel_isa(k)), k);
        for (int isa = 0; isa < MHA_ISA_COUNT; isa++) {
            const mha_kernel *tw = mha_kernel_twin(k, (mha_isa)isa);
            assert_false(tw && (mha_kernel_traits(tw) & MHA_KT_EMULATED));
        }
        if (t & MHA_KT_BASELINE)
            assert_int_equal(mha_kernel_run_isa(k), mha_isa_active());
        else
            assert_int_equal(mha_kernel_run_isa(k), mha_kernel_isa(k));
    }
    assert_int_equal(references, 1); /* naive: the fallback of every selection */
    assert_ptr_equal(mha_kernel_twin(mha_kernel_find("flash.scalar"), MHA_ISA_AVX512),
                     mha_kernel_find("flash.avx512"));
    assert_null(mha_kernel_twin(mha_kernel_find("naive"), MHA_ISA_AVX2));
    assert_int_equal(mha_kernel_traits(NULL), 0);
}

static void test_unknown(void **state) {
    (void)state;
    assert_null(mha_kernel_find("flash.avx1024"));
    assert_non_null(strstr(mha_last_error(), "flash.avx1024"));
    assert_null(mha_kernel_find(NULL));
}

static void test_isa_cap(void **state) {
    (void)state;
    const mha_isa det = mha_isa_detected();
    setenv("MHA_ISA", "scalar", 1);
    assert_int_equal(mha_isa_active(), MHA_ISA_SCALAR);
    assert_int_equal(mha_kernel_supported(mha_kernel_find("flash.scalar")), MHA_OK);
    assert_int_equal(mha_kernel_supported(mha_kernel_find("naive")), MHA_OK);
    assert_int_equal(mha_kernel_supported(mha_kernel_find("flash.avx2")), MHA_EUNSUPPORTED);
    assert_non_null(strstr(mha_last_error(), "avx2"));
    char top[32]; /* the highest level there is, in capitals: a cap never raises the level */
    snprintf(top, sizeof top, "%s", mha_isa_name((mha_isa)(MHA_ISA_COUNT - 1)));
    for (char *c = top; *c; c++) *c = (char)toupper((unsigned char)*c);
    setenv("MHA_ISA", top, 1);
    assert_int_equal(mha_isa_active(), det);
    for (int i = 0; i < mha_kernel_count(); i++) {
        const mha_kernel *k = mha_kernel_at(i);
        assert_int_equal(mha_kernel_supported(k),
                         mha_kernel_isa(k) <= det ? MHA_OK : MHA_EUNSUPPORTED);
    }
    setenv("MHA_ISA", "avx", 1); /* malformed: reported, and dispatch falls to scalar */
    assert_int_equal(mha_isa_env_status(), MHA_EINVAL);
    assert_int_equal(mha_isa_active(), MHA_ISA_SCALAR);
    unsetenv("MHA_ISA");
    assert_int_equal(mha_isa_env_status(), MHA_OK);
    assert_int_equal(mha_isa_active(), det);
}

static void test_unsupported_refused(void **state) {
    (void)state;
    setenv("MHA_ISA", "scalar", 1);
    float q[4] = {1, 2, 3, 4}, o[4];
    const mha_problem p = {.batch = 1,
                           .heads = 1,
                           .kv_heads = 1,
                           .seq_q = 1,
                           .seq_kv = 1,
                           .head_dim = 4,
                           .causal = 0,
                           .scale = 0.0f,
                           .dtype = MHA_F32,
                           .kv_dtype = MHA_F32};
    const mha_tensor t = mha_view_bhnd(q, 1, 1, 4);
    const mha_tensor_mut ot = mha_view_bhnd_mut(o, 1, 1, 4);
    void *ws = mha_alloc(1 << 16);
    assert_int_equal(
        mha_attend(mha_kernel_find("flash.avx512"), &p, NULL, &t, &t, &t, &ot, ws, 1 << 16),
        MHA_EUNSUPPORTED);
    assert_int_equal(
        mha_attend(mha_kernel_find("flash.scalar"), &p, NULL, &t, &t, &t, &ot, ws, 1 << 16),
        MHA_OK);
    mha_free(ws);
}

static void test_isa_names(void **state) {
    (void)state;
    mha_isa isa;
    for (int i = 0; i < MHA_ISA_COUNT; i++) {
        assert_int_equal(mha_isa_parse(mha_isa_name((mha_isa)i), &isa), MHA_OK);
        assert_int_equal(isa, i);
    }
    assert_int_equal(mha_isa_parse("sse9", &isa), MHA_EINVAL);
    assert_string_equal(mha_isa_name((mha_isa)7), "unknown");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_traits),
        cmocka_unit_test(test_unknown),
        cmocka_unit_test_setup_teardown(test_isa_cap, save_env, restore_env),
        cmocka_unit_test_setup_teardown(test_unsupported_refused, save_env, restore_env),
        cmocka_unit_test(test_isa_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
