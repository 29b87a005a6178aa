/* test_layout_errors.c - every malformed packed or paged problem and index
 * array is MHA_EINVAL with a message naming the value (issue 30, phase 2):
 * the problem's layout and sizes (mha_problem_validate), cu_seqlens that
 * do not start at 0, decrease or miss their total, sequences longer than
 * their bound or their blocks, block indices outside the pool among the
 * entries read (the others may be anything), missing arrays, and an index
 * array inside out. From mha_attend_ex (naive) and the oracle alike. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "mha.h"

static void expect_invalid(const mha_problem *p, mha_status want, const char *needle) {
    assert_int_equal(mha_problem_validate(p), want);
    if (!strstr(mha_last_error(), needle))
        fail_msg("message '%s' lacks '%s'", mha_last_error(), needle);
}

/* Three sequences: queries 1, 2, 1 and keys 2, 5, 0 (H = 2, G = 1, d = 4). */
static mha_problem packed_problem(void) {
    return (mha_problem){.batch = 3,
                         .heads = 2,
                         .kv_heads = 1,
                         .seq_q = 4,
                         .seq_kv = 5,
                         .head_dim = 4,
                         .layout = MHA_LAYOUT_PACKED,
                         .total_q = 4,
                         .total_kv = 7};
}
/* Two sequences: queries 1, 2 over 3 and 0 keys in blocks of 2 (4 blocks, 3 a row). */
static mha_problem paged_problem(void) {
    return (mha_problem){.batch = 2,
                         .heads = 2,
                         .kv_heads = 1,
                         .seq_q = 2,
                         .seq_kv = 6,
                         .head_dim = 4,
                         .layout = MHA_LAYOUT_PAGED,
                         .total_q = 3,
                         .num_blocks = 4,
                         .block_size = 2,
                         .max_blocks = 3};
}

static void test_problem_sizes(void **state) {
    (void)state;
    mha_problem p = packed_problem();
    assert_int_equal(mha_problem_validate(&p), MHA_OK);
    p.layout = 3;
    expect_invalid(&p, MHA_EINVAL,
                   "problem.layout = 3: must be 0 (dense), 1 (packed) or 2 (paged)");
    p.layout = -1;
    expect_invalid(&p, MHA_EINVAL, "problem.layout = -1");
    p = packed_problem();
    p.layout = MHA_LAYOUT_DENSE; /* a size without its layout is refused, not ignored */
    expect_invalid(&p, MHA_EINVAL,
                   "problem.total_q = 4 with problem.layout = dense: only the packed and paged "
                   "layouts have it (must be 0)");
    p = packed_problem();
    p.num_blocks = 2;
    expect_invalid(&p, MHA_EINVAL,
                   "problem.num_blocks = 2 with problem.layout = packed: only the paged layout "
                   "has it");
    p = paged_problem();
    assert_int_equal(mha_problem_validate(&p), MHA_OK);
    p.total_kv = 7;
    expect_invalid(&p, MHA_EINVAL,
                   "problem.total_kv = 7 with problem.layout = paged: only the packed layout");
    p = packed_problem();
    p.total_q = -1;
    expect_invalid(&p, MHA_EINVAL, "problem.total_q = -1: must be 0..2147483647");
    p = packed_problem();
    p.total_kv = (int64_t)1 << 31;
    expect_invalid(&p, MHA_EINVAL, "problem.total_kv = 2147483648: must be 0..2147483647");
    p = paged_problem();
    p.block_size = 0;
    expect_invalid(&p, MHA_EINVAL, "problem.block_size = 0: must be 1..2147483647");
    p = paged_problem();
    p.max_blocks = 0;
    expect_invalid(&p, MHA_EINVAL, "problem.max_blocks = 0");
    p = paged_problem();
    p.num_blocks = -3;
    expect_invalid(&p, MHA_EINVAL, "problem.num_blocks = -3");
    p = paged_problem();
    p.num_blocks = p.block_size = INT32_MAX;
    p.head_dim = 1 << 20;
    expect_invalid(&p, MHA_ENOMEM, "num_blocks 2147483647 x block_size 2147483647");
    /* zero-initialised problems are dense */
    const mha_problem z = {.batch = 0};
    assert_int_equal(z.layout, MHA_LAYOUT_DENSE);
    assert_string_equal(mha_layout_name(z.layout), "dense");
}

/* The data of either problem (zeros; the checks never look at values). */
static float g_q[64], g_k[64], g_v[64], g_o[64];

/* attend_ex (naive) and the oracle both refuse x with `needle`. */
static void expect_call(const mha_problem *p, const mha_extras *x, const char *needle) {
    const mha_kernel *k = mha_kernel_find("naive");
    const mha_options opt = {.threads = 1};
    size_t ws_bytes = 0;
    assert_int_equal(mha_workspace_size(k, p, &opt, &ws_bytes), MHA_OK); /* needs no arrays */
    void *ws = mha_alloc(ws_bytes);
    const int paged = p->layout == MHA_LAYOUT_PAGED;
    const mha_tensor qt = mha_view_bnhd(g_q, p->heads, p->total_q, p->head_dim);
    const mha_tensor kt = paged ? mha_view_bnhd(g_k, p->kv_heads, p->block_size, p->head_dim)
                                : mha_view_bnhd(g_k, p->kv_heads, p->total_kv, p->head_dim);
    const mha_tensor vt = paged ? mha_view_bnhd(g_v, p->kv_heads, p->block_size, p->head_dim)
                                : mha_view_bnhd(g_v, p->kv_heads, p->total_kv, p->head_dim);
    const mha_tensor_mut ot = mha_view_bnhd_mut(g_o, p->heads, p->total_q, p->head_dim);
    const mha_status st = mha_attend_ex(k, p, &opt, &qt, &kt, &vt, x, &ot, ws, ws_bytes);
    mha_free(ws);
    if (!needle) {
        if (st != MHA_OK) fail_msg("expected MHA_OK: %s", mha_last_error());
        return;
    }
    assert_int_equal(st, MHA_EINVAL);
    if (!strstr(mha_last_error(), needle))
        fail_msg("attend: message '%s' lacks '%s'", mha_last_error(), needle);
    double ref[64];
    assert_int_equal(mha_reference_ex(p, &qt, &kt, &vt, x, ref), MHA_EINVAL);
    if (!strstr(mha_last_error(), needle))
        fail_msg("oracle: message '%s' lacks '%s'", mha_last_error(), needle);
}

static void test_cu_seqlens(void **state) {
    (void)state;
    mha_problem p = packed_problem();
    int32_t cq[] = {0, 1, 3, 4}, ckv[] = {0, 2, 7, 7};
    mha_extras x = {.cu_seqlens_q = cq, .cu_seqlens_kv = ckv};
    expect_call(&p, &x, NULL);
    expect_call(&p, NULL,
                "problem.layout = packed but mha_extras.cu_seqlens_q is NULL (pass batch + 1 = 4 "
                "int32 row offsets into q)");
    cq[0] = 1;
    expect_call(&p, &x, "mha_extras.cu_seqlens_q[0] = 1: must be 0 (the first offset)");
    memcpy(cq, (int32_t[]){0, 2, 1, 4}, sizeof cq);
    expect_call(&p, &x,
                "mha_extras.cu_seqlens_q[2] = 1 is below cu_seqlens_q[1] = 2: must be "
                "non-decreasing");
    memcpy(cq, (int32_t[]){0, 1, 3, 3}, sizeof cq);
    expect_call(&p, &x, "mha_extras.cu_seqlens_q[3] = 3: must end at problem.total_q = 4");
    memcpy(cq, (int32_t[]){0, 1, 3, 4}, sizeof cq);
    p.seq_q = 1;
    expect_call(&p, &x,
                "sequence 1 has 2 queries (mha_extras.cu_seqlens_q[2] - [1]), more than "
                "problem.seq_q = 1 (the longest a sequence may be)");
    p = packed_problem();
    x.cu_seqlens_kv = NULL;
    expect_call(&p, &x, "problem.layout = packed but mha_extras.cu_seqlens_kv is NULL");
    x.cu_seqlens_kv = ckv;
    ckv[3] = 6;
    expect_call(&p, &x, "mha_extras.cu_seqlens_kv[3] = 6 is below cu_seqlens_kv[2] = 7");
    memcpy(ckv, (int32_t[]){0, 2, 6, 6}, sizeof ckv);
    expect_call(&p, &x, "mha_extras.cu_seqlens_kv[3] = 6: must end at problem.total_kv = 7");
    memcpy(ckv, (int32_t[]){0, 2, 7, 7}, sizeof ckv);
    p.seq_kv = 4;
    expect_call(&p, &x,
                "sequence 1 has 5 keys (mha_extras.cu_seqlens_kv[2] - [1]), more than "
                "problem.seq_kv = 4");
}

static void test_block_table(void **state) {
    (void)state;
    mha_problem p = paged_problem();
    int32_t cq[] = {0, 1, 3}, lens[] = {3, 0};
    /* sequence 0 reads entries [0][0..1]; the rest is never read: any value */
    int32_t table[] = {2, 0, 99, -5, -5, 1 << 30};
    mha_extras x = {.cu_seqlens_q = cq, .seq_lens_kv = lens, .block_table = table};
    expect_call(&p, &x, NULL);
    x.cu_seqlens_q = NULL;
    expect_call(&p, &x, "problem.layout = paged but mha_extras.cu_seqlens_q is NULL");
    x.cu_seqlens_q = cq;
    cq[2] = 2;
    expect_call(&p, &x, "mha_extras.cu_seqlens_q[2] = 2: must end at problem.total_q = 3");
    cq[2] = 3;
    x.seq_lens_kv = NULL;
    expect_call(&p, &x,
                "problem.layout = paged but mha_extras.seq_lens_kv is NULL (pass batch = 2 int32 "
                "key counts)");
    x.seq_lens_kv = lens;
    x.block_table = NULL;
    expect_call(&p, &x, "problem.layout = paged but mha_extras.block_table is NULL");
    x.block_table = table;
    lens[0] = -1;
    expect_call(&p, &x, "mha_extras.seq_lens_kv[0] = -1: must be >= 0");
    lens[0] = 7;
    expect_call(&p, &x,
                "mha_extras.seq_lens_kv[0] = 7: longer than its blocks (problem.max_blocks 3 x "
                "block_size 2 = 6 keys)");
    lens[0] = 3;
    lens[1] = 5;
    p.seq_kv = 4;
    expect_call(&p, &x,
                "mha_extras.seq_lens_kv[1] = 5: more keys than problem.seq_kv = 4 (the longest a "
                "sequence may be)");
    p = paged_problem();
    lens[1] = 0;
    lens[0] = 5; /* now entry [0][2] = 99 is read */
    expect_call(&p, &x,
                "mha_extras.block_table[0][2] = 99: outside [0, problem.num_blocks = 4) (sequence "
                "0 reads its first 3 blocks)");
    lens[0] = 3;
    table[1] = -1;
    expect_call(&p, &x, "mha_extras.block_table[0][1] = -1: outside [0, problem.num_blocks = 4)");
    table[1] = 4;
    expect_call(&p, &x, "mha_extras.block_table[0][1] = 4: outside");
    table[1] = 3;
    expect_call(&p, &x, NULL);
}

/* The index arrays are read while out is written: inside out they are refused. */
static void test_index_arrays_alias_out(void **state) {
    (void)state;
    const mha_problem p = packed_problem();
    static float buf[64]; /* out is buf[0..32): 4 tokens x 2 heads x 4 */
    int32_t *cq = (int32_t *)(buf + 20), ckv[] = {0, 2, 7, 7};
    memcpy(cq, (int32_t[]){0, 1, 3, 4}, 4 * sizeof(int32_t));
    const mha_extras x = {.cu_seqlens_q = cq, .cu_seqlens_kv = ckv};
    const mha_kernel *k = mha_kernel_find("naive");
    const mha_options opt = {.threads = 1};
    size_t ws_bytes = 0;
    assert_int_equal(mha_workspace_size(k, &p, &opt, &ws_bytes), MHA_OK);
    void *ws = mha_alloc(ws_bytes);
    const mha_tensor qt = mha_view_bnhd(g_q, 2, 4, 4), kt = mha_view_bnhd(g_k, 1, 7, 4),
                     vt = mha_view_bnhd(g_v, 1, 7, 4);
    const mha_tensor_mut ot = mha_view_bnhd_mut(buf, 2, 4, 4);
    assert_int_equal(mha_attend_ex(k, &p, &opt, &qt, &kt, &vt, &x, &ot, ws, ws_bytes), MHA_EINVAL);
    assert_non_null(strstr(mha_last_error(), "out and mha_extras.cu_seqlens_q share memory"));
    mha_free(ws);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_problem_sizes),
        cmocka_unit_test(test_cu_seqlens),
        cmocka_unit_test(test_block_table),
        cmocka_unit_test(test_index_arrays_alias_out),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
