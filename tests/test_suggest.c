/* test_suggest.c - "did you mean" (harness/suggest.c): the edit distance,
 * which names are close enough to suggest and which are not, and the message
 * every unknown name is reported with. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "suggest.h"

static const char *const KERNELS[] = {"naive",       "flash.scalar",  "flash.avx2", "flash.avx512",
                                      "decode.avx2", "decode.avx512", "tiled.avx2", "blas.cblas"};
enum { NK = sizeof KERNELS / sizeof *KERNELS };

static void test_distance(void **state) {
    (void)state;
    assert_int_equal(suggest_distance("", ""), 0);
    assert_int_equal(suggest_distance("abc", ""), 3);
    assert_int_equal(suggest_distance("", "abc"), 3);
    assert_int_equal(suggest_distance("flash.avx51", "flash.avx512"), 1);   /* insertion */
    assert_int_equal(suggest_distance("flash.avx5122", "flash.avx512"), 1); /* deletion */
    assert_int_equal(suggest_distance("flash.avx3", "flash.avx2"), 1);      /* substitution */
    assert_int_equal(suggest_distance("fp23", "fp32"), 1);                  /* adjacent swap */
    assert_int_equal(suggest_distance("FP32", "fp32"), 0);                  /* any case */
    assert_int_equal(suggest_distance("kitten", "sitting"), 3);
    assert_int_equal(suggest_distance("pytorch", "torch"), 2);
    /* symmetric */
    assert_int_equal(suggest_distance("decode.avx2", "tiled.avx2"),
                     suggest_distance("tiled.avx2", "decode.avx2"));
    /* longer than the table: the first SUGGEST_MAX_LEN compared, plus the rest */
    char a[200], b[200];
    memset(a, 'x', 150);
    a[150] = '\0';
    memset(b, 'x', 100);
    b[100] = '\0';
    assert_int_equal(suggest_distance(a, b), 50);
}

static void test_closest(void **state) {
    (void)state;
    assert_string_equal(suggest_closest("flash.avx51", KERNELS, NK), "flash.avx512");
    assert_string_equal(suggest_closest("flash.avx", KERNELS, NK), "flash.avx2");
    assert_string_equal(suggest_closest("decode_avx2", KERNELS, NK), "decode.avx2");
    assert_string_equal(suggest_closest("niave", KERNELS, NK), "naive");
    assert_string_equal(suggest_closest("NAIVE", KERNELS, NK), "naive");
    static const char *const DT[] = {"fp32", "bf16", "fp16"};
    assert_string_equal(suggest_closest("fp23", DT, 3), "fp32");
    assert_string_equal(suggest_closest("bf61", DT, 3), "bf16");
    static const char *const PEERS[] = {"torch",  "onnxruntime", "openvino",
                                        "onednn", "libxsmm",     "all"};
    assert_string_equal(suggest_closest("pytorch", PEERS, 6), "torch");
    assert_string_equal(suggest_closest("onnx-runtime", PEERS, 6), "onnxruntime");
    /* far names: nothing rather than a wild guess */
    assert_null(suggest_closest("no_such_kernel", KERNELS, NK));
    assert_null(suggest_closest("flash", KERNELS, NK)); /* a family: find_kernel_or_say's case */
    assert_null(suggest_closest("xyz", DT, 3));
    assert_null(suggest_closest("fp8", DT, 3)); /* 2 edits of 3 characters */
    assert_null(suggest_closest("bogus", PEERS, 6));
    assert_null(suggest_closest("x", (const char *const[]){"amx"}, 1));
    /* a one-letter name one edit from a two-letter candidate is still a typo */
    assert_string_equal(suggest_closest("c", (const char *const[]){"ci"}, 1), "ci");
    /* but never a suggestion as long as the candidate itself */
    assert_null(suggest_closest("a", (const char *const[]){"b"}, 1));
    /* ties go to the first; NULL entries and lists are skipped */
    assert_string_equal(suggest_closest("ab", (const char *const[]){"ax", "ay"}, 2), "ax");
    assert_string_equal(suggest_closest("fp23", (const char *const[]){NULL, "fp32"}, 2), "fp32");
    assert_null(suggest_closest("fp23", NULL, 0));
    assert_null(suggest_closest(NULL, DT, 3));
    assert_null(suggest_closest("fp23", DT, 0));
}

static void test_unknown_message(void **state) {
    (void)state;
    char buf[256];
    static const char *const P[] = {"quick", "full", "ci", "roofline"};
    assert_string_equal(suggest_unknown(buf, sizeof buf, "preset", "quik", P, 4, NULL),
                        "unknown preset 'quik' (did you mean quick?)");
    assert_string_equal(suggest_unknown(buf, sizeof buf, "preset", "nightly", P, 4, NULL),
                        "unknown preset 'nightly' (expected quick, full, ci or roofline)");
    assert_string_equal(suggest_unknown(buf, sizeof buf, "preset", "nightly", P, 2, NULL),
                        "unknown preset 'nightly' (expected quick or full)");
    assert_string_equal(suggest_unknown(buf, sizeof buf, "preset", "nightly", P, 1, NULL),
                        "unknown preset 'nightly' (expected quick)");
    assert_string_equal(
        suggest_unknown(buf, sizeof buf, "kernel", "nope", KERNELS, NK, "see `mhabench list`"),
        "unknown kernel 'nope' (see `mhabench list`)");
    assert_string_equal(suggest_unknown(buf, sizeof buf, "kernel", "flash.avx51", KERNELS, NK,
                                        "see `mhabench list`"),
                        "unknown kernel 'flash.avx51' (did you mean flash.avx512?)");
    /* truncated, still terminated */
    char small[12];
    assert_string_equal(suggest_unknown(small, sizeof small, "preset", "nightly", P, 4, NULL),
                        "unknown pre");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_distance),
        cmocka_unit_test(test_closest),
        cmocka_unit_test(test_unknown_message),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
