/* test_peer_check.c - the check a peer's output passes before the sweep times
 * it (harness/peers/peer_check.c), on a test double of a peer whose output
 * is the float64 oracle's rounded to the problem's dtype, then corrupted on
 * purpose: one element off by a few tolerances, a NaN, two heads swapped
 * in a problem big enough to be checked on two KV groups only, a failing
 * run. Each must be caught (and an honest output pass). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "check.h"
#include "peers/peer_check.h"

/* ---- the test double -------------------------------------------------------- */
enum { FAULT_NONE, FAULT_ONE_ELEMENT, FAULT_NAN, FAULT_SWAP_LAST_HEADS, FAULT_RUN };
static int g_fault;

struct peer_inst {
    mha_problem p;
    void *q, *k, *v, *out;
    size_t nq, nkv;
};

static int double_probe(char *why, size_t len) {
    (void)why, (void)len;
    return 1;
}
static const char *double_version(void) {
    return "test double 1.0";
}
static int double_takes(const mha_problem *p, char *why, size_t len) {
    (void)p, (void)why, (void)len;
    return 1;
}

static void *dup_typed(const void *src, size_t n, mha_dtype t) {
    void *d = malloc(n * mha_dtype_size(t));
    if (d) memcpy(d, src, n * mha_dtype_size(t));
    return d;
}

static peer_inst *double_prepare(const mha_problem *p, int threads, const void *q, const void *k,
                                 const void *v, const mha_extras *x, char *why, size_t len) {
    (void)threads, (void)x, (void)why, (void)len;
    peer_inst *pi = calloc(1, sizeof *pi);
    pi->p = *p;
    pi->nq = (size_t)(p->batch * p->heads * p->seq_q * p->head_dim);
    pi->nkv = (size_t)(p->batch * p->kv_heads * p->seq_kv * p->head_dim);
    pi->q = dup_typed(q, pi->nq, p->dtype);
    pi->k = dup_typed(k, pi->nkv, mha_problem_kv_dtype(p));
    pi->v = dup_typed(v, pi->nkv, mha_problem_kv_dtype(p));
    pi->out = calloc(pi->nq, mha_dtype_size(p->dtype));
    return pi;
}

static int double_run(peer_inst *pi, double *seconds, char *why, size_t len) {
    *seconds = -1;
    if (g_fault == FAULT_RUN) {
        snprintf(why, len, "the helper died (test)");
        return -1;
    }
    const mha_problem *p = &pi->p;
    const mha_dtype kt = mha_problem_kv_dtype(p);
    const mha_tensor q = mha_view_typed(pi->q, p->dtype, NULL, p->heads, p->seq_q, p->head_dim);
    const mha_tensor k = mha_view_typed(pi->k, kt, NULL, p->kv_heads, p->seq_kv, p->head_dim);
    const mha_tensor v = mha_view_typed(pi->v, kt, NULL, p->kv_heads, p->seq_kv, p->head_dim);
    double *ref = malloc(pi->nq * sizeof *ref);
    float *f = malloc(pi->nq * sizeof *f);
    assert_int_equal(mha_reference(p, &q, &k, &v, ref), MHA_OK);
    for (size_t i = 0; i < pi->nq; i++) f[i] = (float)ref[i];
    const size_t last = pi->nq - 1, head = (size_t)(p->seq_q * p->head_dim);
    if (g_fault == FAULT_ONE_ELEMENT) f[last] += 0.05f;
    if (g_fault == FAULT_NAN) f[pi->nq / 2] = NAN;
    if (g_fault == FAULT_SWAP_LAST_HEADS) /* the last two heads of the last batch */
        for (size_t i = 0; i < head; i++) {
            const float t = f[pi->nq - head + i];
            f[pi->nq - head + i] = f[pi->nq - 2 * head + i];
            f[pi->nq - 2 * head + i] = t;
        }
    mha_convert_from_f32(p->dtype, f, pi->out, pi->nq);
    free(ref);
    free(f);
    return 0;
}

static int double_output(peer_inst *pi, void *out, char *why, size_t len) {
    (void)why, (void)len;
    memcpy(out, pi->out, pi->nq * mha_dtype_size(pi->p.dtype));
    return 0;
}
static const char *double_settings(const peer_inst *pi) {
    (void)pi;
    return "threads=1";
}
static void double_release(peer_inst *pi) {
    free(pi->q);
    free(pi->k);
    free(pi->v);
    free(pi->out);
    free(pi);
}

static const peer_ops peer_double = {"double",       double_probe, double_version, double_takes,
                                     double_prepare, double_run,   double_output,  double_settings,
                                     double_release, NULL};

/* A peer of no output rows (test_no_rows_is_not_a_pass). */
static peer_inst *empty_prepare(const mha_problem *p, int threads, const void *q, const void *k,
                                const void *v, const mha_extras *x, char *why, size_t len) {
    (void)threads, (void)q, (void)k, (void)v, (void)x, (void)why, (void)len;
    peer_inst *pi = calloc(1, sizeof *pi);
    pi->p = *p;
    return pi;
}
static int empty_run(peer_inst *pi, double *seconds, char *why, size_t len) {
    (void)pi, (void)why, (void)len;
    *seconds = -1;
    return 0;
}
static int empty_output(peer_inst *pi, void *out, char *why, size_t len) {
    (void)pi, (void)out, (void)why, (void)len;
    return 0;
}
static const peer_ops peer_empty = {"empty",        double_probe, double_version, double_takes,
                                    empty_prepare,  empty_run,    empty_output,   double_settings,
                                    double_release, NULL};

/* ---- inputs ------------------------------------------------------------------- */

/* Uniform [-1, 1) inputs of p (typed): q, k, v to free. */
static void make_inputs(const mha_problem *p, void **q, void **k, void **v) {
    const size_t nq = (size_t)(p->batch * p->heads * p->seq_q * p->head_dim);
    const size_t nkv = (size_t)(p->batch * p->kv_heads * p->seq_kv * p->head_dim);
    uint64_t st = 12345;
    float *f = malloc((nq > nkv ? nq : nkv) * sizeof *f);
    void **bufs[3] = {q, k, v};
    for (int b = 0; b < 3; b++) {
        const size_t n = b ? nkv : nq;
        const mha_dtype t = b ? mha_problem_kv_dtype(p) : p->dtype;
        for (size_t i = 0; i < n; i++) {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            f[i] = (float)((double)(st >> 11) / 9007199254740992.0 * 2 - 1);
        }
        *bufs[b] = malloc(n * mha_dtype_size(t));
        mha_convert_from_f32(t, f, *bufs[b], n);
    }
    free(f);
}

/* Checks the double on p with fault f: the check's verdict (1, 0, -1). */
static int check_with(const mha_problem *p, int fault, peer_check_result *r, int *ngroups) {
    void *q, *k, *v;
    make_inputs(p, &q, &k, &v);
    peer_oracle o;
    assert_int_equal(peer_oracle_make(p, q, k, v, NULL, &o), 1);
    *ngroups = o.ngroups;
    char why[256];
    peer_inst *pi = peer_double.prepare(p, 1, q, k, v, NULL, why, sizeof why);
    g_fault = fault;
    const int verdict = peer_check(&peer_double, pi, &o, r);
    g_fault = FAULT_NONE;
    peer_double.release(pi);
    peer_oracle_free(&o);
    free(q);
    free(k);
    free(v);
    return verdict;
}

/* ---- tests -------------------------------------------------------------------- */

static const mha_problem SMALL = {.batch = 2,
                                  .heads = 4,
                                  .kv_heads = 2,
                                  .seq_q = 7,
                                  .seq_kv = 33,
                                  .head_dim = 37,
                                  .causal = 1,
                                  .scale = 0.0f,
                                  .dtype = MHA_F32,
                                  .kv_dtype = MHA_F32};

static void test_honest_output_passes(void **state) {
    (void)state;
    peer_check_result r;
    int ng;
    assert_int_equal(check_with(&SMALL, FAULT_NONE, &r, &ng), 1);
    assert_int_equal(ng, 0); /* small: every element */
    assert_int_equal(r.checked, 2 * 4 * 7 * 37);
    assert_true(r.worst < 0.05);
    mha_problem bf = SMALL;
    bf.dtype = MHA_BF16; /* output rounded to bf16: within the bf16 tolerance */
    assert_int_equal(check_with(&bf, FAULT_NONE, &r, &ng), 1);
    assert_true(r.max_err > 0 && r.worst <= 1);
}

static void test_one_bad_element_fails(void **state) {
    (void)state;
    peer_check_result r;
    int ng;
    assert_int_equal(check_with(&SMALL, FAULT_ONE_ELEMENT, &r, &ng), 0);
    assert_true(r.worst > 1);
    assert_true(r.max_err > 0.04 && r.max_err < 0.06);
    /* the message names the last element: b=1 h=3 i=6 k=36 */
    assert_non_null(strstr(r.detail, "b=1 h=3 i=6 k=36"));
}

static void test_nan_fails(void **state) {
    (void)state;
    peer_check_result r;
    int ng;
    assert_int_equal(check_with(&SMALL, FAULT_NAN, &r, &ng), 0);
    assert_true(isinf(r.worst));
}

static void test_big_problem_checks_two_groups(void **state) {
    (void)state;
    /* above PEER_CHECK_ALL_FLOPS: the first and the last KV group */
    const mha_problem big = {.batch = 2,
                             .heads = 4,
                             .kv_heads = 2,
                             .seq_q = 720,
                             .seq_kv = 720,
                             .head_dim = 64,
                             .causal = 0,
                             .scale = 0.0f,
                             .dtype = MHA_F32,
                             .kv_dtype = MHA_F32};
    peer_check_result r;
    int ng;
    assert_int_equal(check_with(&big, FAULT_NONE, &r, &ng), 1);
    assert_int_equal(ng, 2);
    assert_int_equal(r.checked, 2 * 2 * 720 * 64); /* two groups of two heads */
    /* two heads of the last group swapped: caught */
    assert_int_equal(check_with(&big, FAULT_SWAP_LAST_HEADS, &r, &ng), 0);
    assert_non_null(strstr(r.detail, "b=1 h=2"));
}

/* A packed problem whose sequences have no queries: nothing is checked, so
 * the peer is not judged (-1), never a pass. */
static void test_no_rows_is_not_a_pass(void **state) {
    (void)state;
    mha_problem p = {.batch = 2,
                     .heads = 2,
                     .kv_heads = 1,
                     .seq_q = 1,
                     .seq_kv = 8,
                     .head_dim = 16,
                     .dtype = MHA_F32,
                     .layout = MHA_LAYOUT_PACKED,
                     .total_q = 0,
                     .total_kv = 9};
    static const int32_t cu_q[3] = {0, 0, 0}, cu_kv[3] = {0, 8, 9};
    float q[1] = {0}, kv[9 * 16];
    for (int i = 0; i < 9 * 16; i++) kv[i] = (float)(i % 7) * 0.125f;
    const mha_extras x = {.cu_seqlens_q = cu_q, .cu_seqlens_kv = cu_kv};
    peer_oracle o;
    assert_true(peer_oracle_make(&p, q, kv, kv, &x, &o));
    char why[64];
    peer_inst *pi = peer_empty.prepare(&p, 1, q, kv, kv, &x, why, sizeof why);
    peer_check_result r;
    assert_int_equal(peer_check(&peer_empty, pi, &o, &r), -1);
    assert_int_equal(r.checked, 0);
    assert_non_null(strstr(r.detail, "nothing to check"));
    peer_empty.release(pi);
    peer_oracle_free(&o);
}

static void test_failed_run_reports_why(void **state) {
    (void)state;
    peer_check_result r;
    int ng;
    assert_int_equal(check_with(&SMALL, FAULT_RUN, &r, &ng), -1);
    assert_non_null(strstr(r.detail, "helper died"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_honest_output_passes),
        cmocka_unit_test(test_one_bad_element_fails),
        cmocka_unit_test(test_nan_fails),
        cmocka_unit_test(test_big_problem_checks_two_groups),
        cmocka_unit_test(test_failed_run_reports_why),
        cmocka_unit_test(test_no_rows_is_not_a_pass),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
