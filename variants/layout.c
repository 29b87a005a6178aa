/* layout.c - the packed ragged batch and the paged KV cache (mha_layout):
 * the problem's sizes for them (part of mha_problem_validate) and the
 * call-time checks of their index arrays (cu_seqlens, seq_lens_kv,
 * block_table), each bad value named. The oracle, naive and the FLOP count
 * rely on these checks; the kernels that take a layout say so by a trait. */
#include "internal.h"

const char *mha_layout_name(int layout) {
    switch (layout) {
    case MHA_LAYOUT_DENSE:
        return "dense";
    case MHA_LAYOUT_PACKED:
        return "packed";
    case MHA_LAYOUT_PAGED:
        return "paged";
    default:
        return "?";
    }
}

/* The layout's sizes: in range where the layout has them, 0 where not. */
mha_status mha_validate_layout(const mha_problem *p) {
    if (p->layout < 0 || p->layout >= MHA_LAYOUT_COUNT)
        return mha_set_error(MHA_EINVAL,
                             "problem.layout = %d: must be 0 (dense), 1 (packed) or 2 (paged)",
                             p->layout);
    const unsigned packed = 1u << MHA_LAYOUT_PACKED, paged = 1u << MHA_LAYOUT_PAGED;
    const struct {
        const char *name;
        int64_t v, min;
        unsigned in; /* the layouts that have it */
        const char *what;
    } f[] = {
        {"total_q", p->total_q, 0, packed | paged, "the rows of q and out"},
        {"total_kv", p->total_kv, 0, packed, "the rows of k and v"},
        {"num_blocks", p->num_blocks, 1, paged, "the blocks of the k and v pools"},
        {"block_size", p->block_size, 1, paged, "the tokens per block"},
        {"max_blocks", p->max_blocks, 1, paged, "the columns of block_table"},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        if (!(f[i].in & (1u << p->layout))) {
            if (f[i].v != 0)
                return mha_set_error(MHA_EINVAL,
                                     "problem.%s = %lld with problem.layout = %s: only %s it "
                                     "(must be 0)",
                                     f[i].name, (long long)f[i].v, mha_layout_name(p->layout),
                                     f[i].in == packed  ? "the packed layout has"
                                     : f[i].in == paged ? "the paged layout has"
                                                        : "the packed and paged layouts have");
            continue;
        }
        if (f[i].v < f[i].min || f[i].v > INT32_MAX)
            return mha_set_error(MHA_EINVAL,
                                 "problem.%s = %lld: must be %lld..2147483647 (%s; the index "
                                 "arrays are int32)",
                                 f[i].name, (long long)f[i].v, (long long)f[i].min, f[i].what);
    }
    return MHA_OK;
}

/* cu (batch + 1 offsets): 0 first, non-decreasing, `total` last (so every
 * offset is in [0, total]), then no sequence longer than `bound`
 * (problem.<bname>). */
static mha_status check_cu(const char *name, const int32_t *cu, int64_t batch, const char *tname,
                           int64_t total, const char *bname, int64_t bound, const char *what) {
    if (cu[0] != 0)
        return mha_set_error(MHA_EINVAL, "mha_extras.%s[0] = %d: must be 0 (the first offset)",
                             name, (int)cu[0]);
    for (int64_t b = 0; b < batch; b++)
        if (cu[b + 1] < cu[b])
            return mha_set_error(MHA_EINVAL,
                                 "mha_extras.%s[%lld] = %d is below %s[%lld] = %d: must be "
                                 "non-decreasing",
                                 name, (long long)(b + 1), (int)cu[b + 1], name, (long long)b,
                                 (int)cu[b]);
    if (cu[batch] != total)
        return mha_set_error(MHA_EINVAL, "mha_extras.%s[%lld] = %d: must end at problem.%s = %lld",
                             name, (long long)batch, (int)cu[batch], tname, (long long)total);
    for (int64_t b = 0; b < batch; b++)
        if ((int64_t)cu[b + 1] - cu[b] > bound)
            return mha_set_error(MHA_EINVAL,
                                 "sequence %lld has %lld %s (mha_extras.%s[%lld] - [%lld]), "
                                 "more than problem.%s = %lld (the longest a sequence may be)",
                                 (long long)b, (long long)((int64_t)cu[b + 1] - cu[b]), what, name,
                                 (long long)(b + 1), (long long)b, bname, (long long)bound);
    return MHA_OK;
}

/* seq_lens_kv within the blocks and the bound; the block indices read in the pool. */
static mha_status check_paged(const mha_problem *p, const mha_extras *x) {
    const int64_t bs = p->block_size, mb = p->max_blocks, cap = mb * bs;
    for (int64_t b = 0; b < p->batch; b++) {
        const int64_t n = x->seq_lens_kv[b];
        if (n < 0)
            return mha_set_error(MHA_EINVAL, "mha_extras.seq_lens_kv[%lld] = %lld: must be >= 0",
                                 (long long)b, (long long)n);
        if (n > cap)
            return mha_set_error(MHA_EINVAL,
                                 "mha_extras.seq_lens_kv[%lld] = %lld: longer than its blocks "
                                 "(problem.max_blocks %lld x block_size %lld = %lld keys)",
                                 (long long)b, (long long)n, (long long)mb, (long long)bs,
                                 (long long)cap);
        if (n > p->seq_kv)
            return mha_set_error(MHA_EINVAL,
                                 "mha_extras.seq_lens_kv[%lld] = %lld: more keys than "
                                 "problem.seq_kv = %lld (the longest a sequence may be)",
                                 (long long)b, (long long)n, (long long)p->seq_kv);
        const int64_t used = (n + bs - 1) / bs; /* the entries sequence b reads */
        for (int64_t t = 0; t < used; t++) {
            const int32_t e = x->block_table[b * mb + t];
            if (e < 0 || e >= p->num_blocks)
                return mha_set_error(MHA_EINVAL,
                                     "mha_extras.block_table[%lld][%lld] = %d: outside [0, "
                                     "problem.num_blocks = %lld) (sequence %lld reads its first "
                                     "%lld blocks)",
                                     (long long)b, (long long)t, (int)e, (long long)p->num_blocks,
                                     (long long)b, (long long)used);
        }
    }
    return MHA_OK;
}

mha_status mha_check_layout(const mha_problem *p, const mha_extras *x) {
    if (p->layout == MHA_LAYOUT_DENSE) return MHA_OK;
    const char *lname = mha_layout_name(p->layout);
    const long long n1 = (long long)p->batch + 1;
    if (!x || !x->cu_seqlens_q)
        return mha_set_error(MHA_EINVAL,
                             "problem.layout = %s but mha_extras.cu_seqlens_q is NULL (pass "
                             "batch + 1 = %lld int32 row offsets into q)",
                             lname, n1);
    mha_status st = check_cu("cu_seqlens_q", x->cu_seqlens_q, p->batch, "total_q", p->total_q,
                             "seq_q", p->seq_q, "queries");
    if (st != MHA_OK) return st;
    if (p->layout == MHA_LAYOUT_PACKED) {
        if (!x->cu_seqlens_kv)
            return mha_set_error(MHA_EINVAL,
                                 "problem.layout = packed but mha_extras.cu_seqlens_kv is NULL "
                                 "(pass batch + 1 = %lld int32 row offsets into k and v)",
                                 n1);
        return check_cu("cu_seqlens_kv", x->cu_seqlens_kv, p->batch, "total_kv", p->total_kv,
                        "seq_kv", p->seq_kv, "keys");
    }
    if (!x->seq_lens_kv)
        return mha_set_error(MHA_EINVAL,
                             "problem.layout = paged but mha_extras.seq_lens_kv is NULL (pass "
                             "batch = %lld int32 key counts)",
                             (long long)p->batch);
    if (!x->block_table)
        return mha_set_error(MHA_EINVAL,
                             "problem.layout = paged but mha_extras.block_table is NULL (pass "
                             "batch x max_blocks = %lld x %lld int32 block indices)",
                             (long long)p->batch, (long long)p->max_blocks);
    return check_paged(p, x);
}
