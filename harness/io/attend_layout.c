/* attend_layout.c - `mhabench attend`'s packed ragged batches and paged KV
 * caches (attend.h): which layout the flags ask for, the '<i4' index files
 * and their lengths, the tensors' shapes in the layout, the problem's layout
 * fields (the bounds seq_q / seq_kv from the lengths) and the views. The
 * index values are the library's to check (layout.c); their messages are
 * given the flag of the file at fault. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "attend.h"
#include "io.h"
#include "util.h"

static const char *const IX_FLAG[4] = {"--cu-seqlens-q", "--cu-seqlens-kv", "--block-table",
                                       "--seq-lens-kv"};

/* The layout the flags ask for, and the files k and v come from (--k/--v or
 * --k-cache/--v-cache): 0, or -1 after a message naming the flag missing or
 * out of place. */
int attend_choose_layout(attend_inputs *in) {
    static const char *const cache_flag[2] = {"--k-cache", "--v-cache"};
    const int paged =
        in->cache_path[0] || in->cache_path[1] || in->ix_path[IX_TABLE] || in->ix_path[IX_LENS];
    if (!paged) {
        for (int i = 1; i < 3; i++)
            if (!in->path[i]) {
                errorf("attend: missing required option --%s (or %s for a paged KV cache)",
                       ATTEND_NAME[i], cache_flag[i - 1]);
                return -1;
            }
        if (!in->ix_path[IX_CU_Q] != !in->ix_path[IX_CU_KV]) {
            const int has_q = in->ix_path[IX_CU_Q] != NULL;
            errorf("attend: %s without %s: a packed ragged batch gives both (a paged KV cache: "
                   "--cu-seqlens-q with --k-cache, --v-cache, --block-table, --seq-lens-kv)",
                   IX_FLAG[has_q ? IX_CU_Q : IX_CU_KV], IX_FLAG[has_q ? IX_CU_KV : IX_CU_Q]);
            return -1;
        }
        in->layout = in->ix_path[IX_CU_Q] ? MHA_LAYOUT_PACKED : MHA_LAYOUT_DENSE;
        return 0;
    }
    for (int i = 1; i < 3; i++)
        if (in->path[i]) {
            errorf("attend: --%s with a paged KV cache: give k and v as --k/--v or as "
                   "--k-cache/--v-cache, not both",
                   ATTEND_NAME[i]);
            return -1;
        }
    if (in->ix_path[IX_CU_KV]) {
        errorf("attend: --cu-seqlens-kv with a paged KV cache: its sequences' keys are counted "
               "by --seq-lens-kv");
        return -1;
    }
    const char *need[5][2] = {{cache_flag[0], in->cache_path[0]},
                              {cache_flag[1], in->cache_path[1]},
                              {IX_FLAG[IX_TABLE], in->ix_path[IX_TABLE]},
                              {IX_FLAG[IX_LENS], in->ix_path[IX_LENS]},
                              {IX_FLAG[IX_CU_Q], in->ix_path[IX_CU_Q]}};
    for (int i = 0; i < 5; i++)
        if (!need[i][1]) {
            errorf("attend: a paged KV cache needs %s (it takes --k-cache, --v-cache, "
                   "--block-table, --seq-lens-kv and --cu-seqlens-q)",
                   need[i][0]);
            return -1;
        }
    in->path[1] = in->cache_path[0];
    in->path[2] = in->cache_path[1];
    in->layout = MHA_LAYOUT_PAGED;
    return 0;
}

/* Reads the layout's '<i4' index files and checks their lengths against
 * each other: B + 1 offsets, B key counts, B rows of the block table (the
 * values are the library's to check). 0, or -1 after a message. */
int attend_load_index_files(attend_inputs *in) {
    static const int rank[4] = {1, 1, 2, 1};
    static const char *const shape[4] = {"[B + 1]", "[B + 1]", "[B, MB]", "[B]"};
    char err[512], s1[160];
    for (int i = 0; i < 4; i++) {
        if (!in->ix_path[i]) continue;
        if (npy_read_i32(in->ix_path[i], &in->ix[i], err, sizeof err) != MHA_OK) {
            errorf("%s: %s", IX_FLAG[i], err);
            return -1;
        }
        if (in->ix[i].ndim != rank[i]) {
            errorf("%s %s: shape %s, expected %s", IX_FLAG[i], in->ix_path[i],
                   shape_str(&in->ix[i], s1, sizeof s1), shape[i]);
            return -1;
        }
    }
    if (in->layout == MHA_LAYOUT_DENSE) return 0;
    const npy_array *cq = &in->ix[IX_CU_Q], *t = &in->ix[IX_TABLE];
    const int64_t B = cq->shape[0] - 1;
    if (B < 1) {
        errorf("%s %s: shape %s, expected [B + 1] offsets of B >= 1 sequences", IX_FLAG[IX_CU_Q],
               in->ix_path[IX_CU_Q], shape_str(cq, s1, sizeof s1));
        return -1;
    }
    const npy_array *other = in->layout == MHA_LAYOUT_PACKED ? &in->ix[IX_CU_KV] : &in->ix[IX_LENS];
    const int oi = in->layout == MHA_LAYOUT_PACKED ? IX_CU_KV : IX_LENS;
    const int64_t want = in->layout == MHA_LAYOUT_PACKED ? B + 1 : B;
    if (other->shape[0] != want) {
        errorf("%s %s: shape %s, expected [%lld] (%s, as %s %s)", IX_FLAG[oi], in->ix_path[oi],
               shape_str(other, s1, sizeof s1), (long long)want,
               oi == IX_CU_KV ? "B + 1 offsets" : "one key count per sequence", IX_FLAG[IX_CU_Q],
               in->ix_path[IX_CU_Q]);
        return -1;
    }
    if (in->layout == MHA_LAYOUT_PAGED && (t->shape[0] != B || t->shape[1] < 1)) {
        errorf("%s %s: shape %s, expected [%lld, MB] with MB >= 1 (a row of block indices per "
               "sequence of %s)",
               IX_FLAG[IX_TABLE], in->ix_path[IX_TABLE], shape_str(t, s1, sizeof s1), (long long)B,
               IX_FLAG[IX_CU_Q]);
        return -1;
    }
    return 0;
}

/* q, k and v of a packed or paged problem: q [Tq,H,d]; k, v [Tkv,G,d] or
 * pools [NB,BS,G,d], alike but for d_v; only Tq and Tkv may be 0; the same
 * d; G dividing H. 0, or -1 after a message naming the tensors. */
int attend_check_layout_shapes(const attend_inputs *in) {
    const npy_array *q = &in->a[0], *k = &in->a[1], *v = &in->a[2];
    const int paged = in->layout == MHA_LAYOUT_PAGED, kr = paged ? 4 : 3;
    static const char *const want[3][2] = {
        {"[Tq,H,d]", "[Tq,H,d]"}, {"[Tkv,G,d]", "[NB,BS,G,d]"}, {"[Tkv,G,d_v]", "[NB,BS,G,d_v]"}};
    char s1[160], s2[160];
    for (int i = 0; i < 3; i++) {
        const int r = i == 0 ? 3 : kr;
        if (in->a[i].ndim != r) {
            errorf("%s: %s has rank %d, shape %s: expected a rank-%d %s tensor (the %s layout)",
                   in->path[i], ATTEND_NAME[i], in->a[i].ndim, shape_str(&in->a[i], s1, sizeof s1),
                   r, want[i][paged], mha_layout_name(in->layout));
            return -1;
        }
        for (int j = i == 0 || !paged ? 1 : 0; j < r; j++) /* the token rows may be 0 */
            if (in->a[i].shape[j] == 0) {
                errorf("%s: %s has an empty dimension, shape %s", in->path[i], ATTEND_NAME[i],
                       shape_str(&in->a[i], s1, sizeof s1));
                return -1;
            }
    }
    if (memcmp(k->shape, v->shape, (size_t)(kr - 1) * sizeof k->shape[0]) != 0) {
        errorf("k and v shapes differ in %s: k %s, v %s", paged ? "[NB,BS,G]" : "[Tkv,G]",
               shape_str(k, s1, sizeof s1), shape_str(v, s2, sizeof s2));
        return -1;
    }
    if (q->shape[2] != k->shape[kr - 1]) {
        errorf("head_dim mismatch: q %s has d=%lld, k %s has d=%lld", shape_str(q, s1, sizeof s1),
               (long long)q->shape[2], shape_str(k, s2, sizeof s2), (long long)k->shape[kr - 1]);
        return -1;
    }
    if (q->shape[1] % k->shape[kr - 2] != 0) {
        errorf("kv heads %lld (k %s) do not divide query heads %lld (q %s)",
               (long long)k->shape[kr - 2], shape_str(k, s2, sizeof s2), (long long)q->shape[1],
               shape_str(q, s1, sizeof s1));
        return -1;
    }
    return 0;
}

/* The longest of n sequences by offsets or lengths clamped to [0, cap]: the
 * bound seq_q / seq_kv (at least 1). A malformed value is the library's to
 * name (mha_problem_flops_ex), and with every value in range the bound is
 * exact, so no sequence is ever "longer than the bound" here. */
static int64_t longest(const int32_t *a, int64_t n, int offsets, int64_t cap) {
    int64_t m = 1;
    for (int64_t b = 0; b < n; b++) {
        int64_t lo = offsets ? a[b] : 0, hi = offsets ? a[b + 1] : a[b];
        lo = lo < 0 ? 0 : lo > cap ? cap : lo;
        hi = hi < 0 ? 0 : hi > cap ? cap : hi;
        m = hi - lo > m ? hi - lo : m;
    }
    return m;
}

/* p's layout fields and x's index arrays (the bounds: the longest sequence). */
void attend_layout_problem(const attend_inputs *in, mha_problem *pp, mha_extras *x) {
    mha_problem p = *pp;
    const npy_array *q = &in->a[0], *k = &in->a[1];
    const npy_array *cq = &in->ix[IX_CU_Q];
    p.layout = in->layout;
    p.batch = cq->shape[0] - 1;
    p.total_q = q->shape[0];
    p.seq_q = longest(cq->i32, p.batch, 1, p.total_q);
    x->cu_seqlens_q = cq->i32;
    if (in->layout == MHA_LAYOUT_PACKED) {
        p.total_kv = k->shape[0];
        p.seq_kv = longest(in->ix[IX_CU_KV].i32, p.batch, 1, p.total_kv);
        x->cu_seqlens_kv = in->ix[IX_CU_KV].i32;
    } else {
        p.num_blocks = k->shape[0];
        p.block_size = k->shape[1];
        p.max_blocks = in->ix[IX_TABLE].shape[1];
        p.seq_kv = longest(in->ix[IX_LENS].i32, p.batch, 0, p.max_blocks * p.block_size);
        x->seq_lens_kv = in->ix[IX_LENS].i32;
        x->block_table = in->ix[IX_TABLE].i32;
    }
    *pp = p;
}

/* The index files against the problem (the library's checks), the message
 * naming the flag of the array at fault: 0, or -1 after it. */
int attend_check_index_values(const attend_inputs *in, const mha_problem *p, const mha_extras *x) {
    static const char *const field[4] = {"cu_seqlens_q", "cu_seqlens_kv", "block_table",
                                         "seq_lens_kv"};
    if (p->layout == MHA_LAYOUT_DENSE || !isnan(mha_problem_flops_ex(p, x))) return 0;
    const char *m = mha_last_error();
    for (int i = 0; i < 4; i++)
        if (in->ix_path[i] && strstr(m, field[i])) {
            errorf("%s %s: %s", IX_FLAG[i], in->ix_path[i], m);
            return -1;
        }
    errorf("%s", m);
    return -1;
}

/* q, k, v and out as views of a packed or paged p: token rows [T,H,d] (k and
 * v packed [Tkv,G,d] or pools [NB,BS,G,d]; int8 scales [Tkv,G] or [NB,BS,G]). */
void attend_layout_views(const attend_inputs *in, const mha_problem *p, void *out, mha_tensor t[3],
                         mha_tensor_mut *to) {
    const int64_t H = p->heads, G = p->kv_heads, d = p->head_dim, dv = mha_problem_head_dim_v(p);
    const int64_t bs = p->layout == MHA_LAYOUT_PAGED ? p->block_size : 1; /* tokens a block */
    t[0] =
        (mha_tensor){.data = attend_data(in, 0), .stride_h = d, .stride_n = H * d, .dtype = in->dt};
    for (int i = 1; i < 3; i++) {
        const int64_t w = i == 1 ? d : dv;
        t[i] = (mha_tensor){.data = attend_data(in, i),
                            .stride_b = bs * G * w,
                            .stride_h = w,
                            .stride_n = G * w,
                            .dtype = in->kv,
                            .scale = attend_scales(in, i),
                            .scale_stride_b = bs * G,
                            .scale_stride_h = 1,
                            .scale_stride_n = G};
    }
    *to = (mha_tensor_mut){.data = out, .stride_h = dv, .stride_n = H * dv, .dtype = in->dt};
}
