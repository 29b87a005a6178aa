/* classes.c - the shape classes a tuning table is keyed by (head_dim x seq_kv
 * bucket x causal x threads, and decode split by GQA), shared by mha_select
 * and `mhabench tune`. Built without SIMD flags. */
#include <stdio.h>
#include <string.h>

#include "internal.h"
#include "select.h"

/* ---- shape classes ---------------------------------------------------------------- */

/* The one table of classes. head_dims: the sizes models use, exact; anything
 * else is "other" (represented by 96). Buckets bound seq_kv (the length that
 * sets the work per query); each has the length and head count tune measures. */
static const int class_dims[MHA_CLASS_DIMS] = {32, 64, 80, 128, 0};
#define OTHER_DIM_REP 96
static const struct {
    int64_t bound; /* seq_kv <= bound; 0: no bound */
    const char *name;
    int64_t rep_seq, rep_heads;
} class_buckets[MHA_CLASS_BUCKETS] = {
    {256, "kv256", 128, 8},
    {1024, "kv1024", 512, 8},
    {4096, "kv4096", 2048, 4},
    {0, "kvlong", 8192, 1},
};
#define DECODE_HEADS 32
#define DECODE_GROUP 4 /* query heads per KV head of the GQA decode classes (Llama-style 32/8) */
#define VERIFY_SEQ_CAP 579 /* odd: every block size leaves a tail */

void mha_class_of(const mha_problem *p, int threads, mha_shape_class *c) {
    memset(c, 0, sizeof *c);
    c->dim = MHA_CLASS_DIMS - 1;
    for (int i = 0; i < MHA_CLASS_DIMS - 1; i++)
        if (p->head_dim == class_dims[i]) c->dim = i;
    c->bucket = MHA_CLASS_BUCKETS - 1;
    for (int i = 0; i < MHA_CLASS_BUCKETS - 1; i++)
        if (p->seq_kv <= class_buckets[i].bound) {
            c->bucket = i;
            break;
        }
    c->decode = p->seq_q == 1;
    c->gqa = c->decode && p->heads > p->kv_heads;
    c->causal = !c->decode && p->causal;
    c->threads = threads > 1 ? 0 : 1;
    c->dtype = p->dtype;
    c->kv_dtype = mha_problem_kv_dtype(p);
}

void mha_class_name(const mha_shape_class *c, char *buf, size_t len) {
    char d[16];
    if (class_dims[c->dim])
        snprintf(d, sizeof d, "d%d", class_dims[c->dim]);
    else
        snprintf(d, sizeof d, "dother");
    /* the dtype part: none for fp32 (committed tables keep working) */
    char dt[32] = "";
    if (c->dtype != MHA_F32) snprintf(dt, sizeof dt, "-%s", mha_dtype_name(c->dtype));
    if (c->kv_dtype != c->dtype) {
        const size_t n = strlen(dt);
        snprintf(dt + n, sizeof dt - n, "-kv_%s", mha_dtype_name(c->kv_dtype));
    }
    snprintf(buf, len, "%s%s%s-%s%s-%s%s", c->decode ? "decode-" : "", c->gqa ? "gqa-" : "", d,
             class_buckets[c->bucket].name, c->causal ? "-causal" : "",
             c->threads == 1 ? "t1" : "tall", dt);
}

int mha_class_head_dim(const mha_shape_class *c) {
    return class_dims[c->dim];
}

int64_t mha_class_seq_bound(const mha_shape_class *c) {
    return class_buckets[c->bucket].bound;
}

int mha_class_list(const char *set, mha_shape_class *out, int max) {
    int full;
    if (set && strcmp(set, "quick") == 0)
        full = 0;
    else if (set && strcmp(set, "full") == 0)
        full = 1;
    else
        return -1;
    /* quick: the head dims and lengths most models run (those of `mhabench
     * sweep --preset quick`), both thread counts, and decode against a 4K cache.
     * The prefill classes come in fp32 and bf16 (the kernel and its blocks
     * differ by dtype: flash.avx512bf16 where it runs); decode too, though its
     * kernels have no block knobs: which bf16 decode kernel is the faster is
     * the CPU's (decode.avx512bf16 on vdpbf16ps, decode.bf16fma on the FMAs,
     * decode.avx512 widening; vdpbf16ps runs at twice the FMA's rate on Zen
     * 4 and at half it on the Xeon VMs). */
    static const int quick_dims[] = {1, 3}, quick_buckets[] = {0, 1, 2};
    static const mha_dtype dtypes[] = {MHA_F32, MHA_BF16};
    int n = 0;
    for (int decode = 0; decode <= 1; decode++)
        for (int ti = 0; ti < 2; ti++)
            for (int di = 0; di < (full ? MHA_CLASS_DIMS : 2); di++)
                for (int bi = 0; bi < (full ? MHA_CLASS_BUCKETS : (decode ? 1 : 3)); bi++)
                    /* decode: the second pass is the GQA family (causal is moot) */
                    for (int causal = 0; causal <= 1; causal++)
                        for (int t = 1; t >= 0; t--) {
                            mha_shape_class c = {
                                .dim = full ? di : quick_dims[di],
                                .bucket = full ? bi : (decode ? 2 : quick_buckets[bi]),
                                .causal = decode ? 0 : causal,
                                .threads = t,
                                .decode = decode,
                                .gqa = decode && causal,
                                .dtype = dtypes[ti],
                                .kv_dtype = dtypes[ti],
                            };
                            if (n < max) out[n] = c;
                            n++;
                        }
    return n < max ? n : max;
}

void mha_class_problem(const mha_shape_class *c, mha_problem *p) {
    const int d = class_dims[c->dim] ? class_dims[c->dim] : OTHER_DIM_REP;
    /* decode: a cache as long as the bucket allows (the sweep's 4096) */
    const int64_t bound = class_buckets[c->bucket].bound;
    const int64_t n = c->decode ? (bound ? bound : 16384) : class_buckets[c->bucket].rep_seq;
    const int64_t h = c->decode ? DECODE_HEADS : class_buckets[c->bucket].rep_heads;
    *p = (mha_problem){.batch = 1,
                       .heads = h,
                       .kv_heads = c->gqa ? h / DECODE_GROUP : h,
                       .seq_q = c->decode ? 1 : n,
                       .seq_kv = n,
                       .head_dim = d,
                       .causal = c->causal,
                       .scale = 0.0f,
                       .dtype = c->dtype,
                       .kv_dtype = c->kv_dtype == c->dtype ? MHA_F32 : c->kv_dtype};
}

void mha_class_verify_problem(const mha_shape_class *c, mha_problem *p) {
    mha_class_problem(c, p);
    p->heads = 2;
    /* grouped KV (the head mapping is exercised too), except for the decode
     * family of one query row per KV head */
    p->kv_heads = c->decode && !c->gqa ? 2 : 1;
    if (p->seq_kv > VERIFY_SEQ_CAP) p->seq_kv = VERIFY_SEQ_CAP;
    if (p->seq_q > VERIFY_SEQ_CAP) p->seq_q = VERIFY_SEQ_CAP;
    p->seq_kv |= 1; /* odd lengths: the last block of every size is a tail */
    if (p->seq_q > 1) p->seq_q = p->seq_kv;
}
