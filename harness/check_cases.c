/* check_cases.c - the verification engine's cases: the shape grid, the
 * adversarial inputs and the variants (window, softcap, sinks, d_v), which
 * input kinds mean something in which dtypes, the per-case seed, and the
 * one-line description of a case. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "check_int.h"
#include "stats.h"

int check_input_fits(int input, mha_dtype dtype, mha_dtype kv_dtype) {
    /* an int8 row cannot hold -inf (its scale would turn the row into NaN:
     * nan-k again), and fp16 cannot hold the 1e30 that overflows the scores */
    if (kv_dtype == MHA_I8 && (input == INPUT_NINF_K || input == INPUT_NINF_ALL)) return 0;
    if (input == INPUT_HUGE && (dtype == MHA_F16 || kv_dtype == MHA_F16)) return 0;
    return 1;
}
uint64_t check_case_seed(uint64_t seed, int index) {
    uint64_t s = seed ^ (0x632be59bd9b4e019ull * (uint64_t)(index + 1));
    return splitmix64(&s);
}

/* ---- cases ------------------------------------------------------------------ */
static int add(check_case *out, int n, int max, int64_t B, int64_t H, int64_t G, int64_t Nq,
               int64_t Nkv, int64_t d, int causal, int input, int layout, const char *tag) {
    if (n < max)
        out[n] = (check_case){
            .p = {B, H, G, Nq, Nkv, d, causal, 0.0f}, .input = input, .layout = layout, .tag = tag};
    return n + 1;
}

/* The variants of issue 30 (window, softcap, sinks, head_dim_v), alone and
 * together, on odd sizes, tails, cross shapes (off != 0) and GQA/MQA, in
 * every layout; run only on the kernels whose traits take them. */
typedef struct {
    int64_t B, H, G, Nq, Nkv, d;
    int causal;
    int window;
    int64_t left, right;
    float softcap;
    int sinks; /* 0 none, else SINKS_* + 1 */
    int64_t dv;
    int input;
    const char *tag;
} variant_spec;

static int add_variants(check_case *out, int n, int max, int quick) {
    enum {
        U = INPUT_UNIFORM,
        X30 = INPUT_LARGE_LOGITS,
        EQ = INPUT_EQUAL_SCORES,
        X400 = INPUT_WIDE_LOGITS
    };
    static const variant_spec vs[] = {
        /* windows: 0 (the diagonal only), left-only, right-only, both, wide */
        {1, 2, 2, 33, 33, 16, 0, 1, 0, 0, 0, 0, 0, U, "window-0"},
        {2, 3, 1, 17, 40, 8, 1, 1, 0, -1, 0, 0, 0, U, "window-0"},
        {1, 4, 2, 197, 197, 64, 1, 1, 31, -1, 0, 0, 0, U, "window-left"},
        {2, 3, 3, 64, 64, 63, 0, 1, 7, -1, 0, 0, 0, U, "window-left"},
        {1, 2, 1, 70, 33, 16, 0, 1, -1, 5, 0, 0, 0, U, "window-right"},
        {1, 8, 2, 37, 53, 80, 0, 1, 9, 3, 0, 0, 0, U, "window-both"},
        {2, 2, 2, 12, 5, 8, 1, 1, 1, 0, 0, 0, 0, U, "window-blind"},
        {1, 3, 1, 5, 37, 33, 0, 1, 2, 1, 0, 0, 0, U, "window-cross"},
        {1, 4, 4, 1, 300, 128, 1, 1, 127, -1, 0, 0, 0, U, "window-decode"},
        {1, 2, 2, 256, 256, 64, 1, 1, 1000, -1, 0, 0, 0, X30, "window-wide"},
        /* softcap: small (every score near +-c) and large (near no cap) */
        {1, 3, 3, 33, 33, 16, 1, 0, 0, 0, 0.5f, 0, 0, X30, "softcap-small"},
        {2, 8, 2, 64, 197, 64, 0, 0, 0, 0, 50.0f, 0, 0, X30, "softcap-large"},
        {1, 2, 1, 7, 7, 1, 0, 0, 0, 0, 1.0f, 0, 0, U, "softcap"},
        /* sinks: uniform, -inf, +20, mixed per head */
        {1, 4, 2, 33, 33, 63, 1, 0, 0, 0, 0, SINKS_UNIFORM + 1, 0, U, "sinks"},
        {2, 3, 1, 16, 16, 8, 0, 0, 0, 0, 0, SINKS_NINF + 1, 0, EQ, "sinks-ninf"},
        {1, 2, 2, 64, 64, 64, 1, 0, 0, 0, 0, SINKS_LARGE + 1, 0, U, "sinks-large"},
        {1, 8, 8, 12, 9, 16, 1, 0, 0, 0, 0, SINKS_MIXED + 1, 0, U, "sinks-mixed"},
        {1, 4, 1, 1, 197, 64, 0, 0, 0, 0, 0, SINKS_MIXED + 1, 0, U, "sinks-decode"},
        /* long enough for decode's split-KV: the sink joins once, after the merge */
        {1, 4, 1, 1, 1500, 64, 0, 0, 0, 0, 0, SINKS_UNIFORM + 1, 0, U, "sinks-split"},
        {1, 2, 2, 2, 1300, 32, 1, 1, 700, -1, 0, SINKS_MIXED + 1, 0, U, "sinks-split"},
        /* d_v below and above d_qk (DeepSeek MLA: 192 / 128) */
        {1, 2, 2, 33, 33, 64, 1, 0, 0, 0, 0, 0, 16, U, "dv-narrow"},
        {2, 3, 1, 17, 40, 16, 0, 0, 0, 0, 0, 0, 80, U, "dv-wide"},
        {1, 4, 2, 64, 64, 192, 1, 0, 0, 0, 0, 0, 128, U, "dv-mla"},
        {1, 4, 4, 1, 256, 63, 0, 0, 0, 0, 0, 0, 1, U, "dv-decode"},
        /* combinations (gpt-oss: sinks + window 128; Gemma 2: softcap 50 + window) */
        {1, 8, 2, 197, 197, 64, 1, 1, 31, 0, 0, SINKS_UNIFORM + 1, 0, U, "sinks+window"},
        {2, 4, 2, 64, 64, 80, 1, 1, 15, -1, 50.0f, 0, 0, X30, "softcap+window"},
        {1, 6, 2, 37, 53, 24, 0, 1, 17, 2, 1.5f, SINKS_MIXED + 1, 13, U, "all"},
        {1, 3, 1, 70, 33, 33, 1, 1, 4, 0, 2.0f, SINKS_LARGE + 1, 48, U, "all-blind"},
        {1, 2, 2, 1, 1000, 64, 1, 1, 100, -1, 30.0f, SINKS_NINF + 1, 96, U, "all-decode"},
        /* a window long in keys over a long sequence, KV heads enough for
         * flash.amx's per-group split at 1 and 2 threads: its packs are a
         * ring of chunks there, and a query block's chunks wrap around it */
        {1, 8, 8, 700, 700, 32, 1, 1, 100, -1, 0, 0, 0, U, "window-ring"},
        {1, 4, 4, 300, 350, 48, 0, 1, 40, 20, 0, 0, 0, U, "window-ring"},
        /* a band in one KV block of span + bq - 1 keys (cachemodel.c, the
         * AVX-512 levels: 352 or 416 keys, not a power of two), many query
         * blocks deep; and two-sided, not causal, odd sizes */
        {1, 4, 2, 1000, 1000, 64, 1, 1, 300, 0, 0, 0, 0, U, "window-band"},
        {1, 2, 2, 777, 801, 48, 0, 1, 200, 90, 0, 0, 0, U, "window-band"},
        {1, 2, 1, 999, 999, 64, 1, 1, 255, 0, 0, SINKS_UNIFORM + 1, 0, U, "window-band"},
    };
    for (size_t i = 0; i < sizeof vs / sizeof vs[0]; i++) {
        if (quick && i % 3 == 2) continue;
        const variant_spec *v = &vs[i];
        n = add(out, n, max, v->B, v->H, v->G, v->Nq, v->Nkv, v->d, v->causal, v->input,
                (int)(i % LAYOUT_COUNT), v->tag);
        if (n <= max) {
            mha_problem *p = &out[n - 1].p;
            p->window = v->window;
            p->window_left = v->window ? v->left : 0;
            p->window_right = v->window ? v->right : 0;
            p->softcap = v->softcap;
            p->sinks = v->sinks != 0;
            p->head_dim_v = v->dv;
            out[n - 1].sinks = v->sinks ? v->sinks - 1 : 0;
        }
    }
    /* A softcap over logits x400 (raw scores hundreds of binades beyond
     * their capped values), in a layout every dense kernel takes: a kernel
     * that kept a row's max on the raw scores and took it into log2 units
     * without the cap passed every other case (a flash.amx mutation tried in
     * stop 54), since the max only has to be within 125 binades of the
     * capped scores for P to survive. */
    n = add(out, n, max, 1, 3, 1, 97, 97, 32, 1, X400, LAYOUT_BNHD, "softcap-wide");
    if (n <= max) out[n - 1].p.softcap = 30.0f;
    return n;
}

int check_kernel_takes_case(const mha_kernel *k, const check_case *c) {
    const int ok = mha_kernel_takes(k, &c->p) == MHA_OK;
    return ok;
}

int check_cases(check_case *out, int max, int quick) {
    static const int64_t Ns[] = {1, 2, 7, 16, 33, 64, 197, 256};
    static const int64_t ds[] = {1, 8, 16, 63, 64, 80, 128};
    /* (B, H, kv_heads): MHA, GQA and MQA, cycled through the grid. */
    static const int64_t bhg[][3] = {{1, 1, 1}, {2, 3, 3}, {1, 8, 2}, {3, 3, 1},
                                     {1, 8, 8}, {2, 8, 1}, {1, 3, 3}, {2, 8, 4}};
    const int nbhg = sizeof bhg / sizeof bhg[0];
    int n = 0, idx = 0;
    for (int in = 0; in < 8; in++) {
        for (int id = 0; id < 7; id++) {
            for (int causal = 0; causal <= 1; causal++, idx++) {
                if (quick && idx % 5 != 0) continue;
                const int64_t *s = bhg[(in * 7 + id + causal) % nbhg];
                n = add(out, n, max, s[0], s[1], s[2], Ns[in], Ns[in], ds[id], causal,
                        INPUT_UNIFORM, idx % LAYOUT_COUNT, "grid");
            }
        }
    }
    /* Cross attention and decode (Nq != Nkv), bottom-right causal alignment;
     * Nq > Nkv with causal leaves the first rows with no visible key. */
    static const int64_t cross[][3] = {{5, 37, 64}, {1, 300, 128}, {37, 5, 16},
                                       {7, 3, 8},   {1, 1, 80},    {3, 64, 63},
                                       {64, 3, 1},  {1, 4096, 64}, {9, 4, 33}};
    for (int i = 0; i < 9; i++)
        for (int causal = 0; causal <= 1; causal++) {
            if (quick && (i == 7 || (i + causal) % 2)) continue;
            n = add(out, n, max, 1 + i % 2, 4, i % 3 == 0 ? 1 : (i % 3 == 1 ? 2 : 4), cross[i][0],
                    cross[i][1], cross[i][2], causal, INPUT_UNIFORM, (i + causal) % LAYOUT_COUNT,
                    "cross");
        }
    /* Inputs that hurt: near one-hot softmax, all scores equal, long rows. */
    n = add(out, n, max, 1, 2, 2, 64, 64, 64, 0, INPUT_LARGE_LOGITS, LAYOUT_BHND, "logits-x30");
    n = add(out, n, max, 1, 3, 1, 197, 197, 80, 1, INPUT_LARGE_LOGITS, LAYOUT_PADDED, "logits-x30");
    n = add(out, n, max, 1, 2, 2, 64, 64, 64, 0, INPUT_WIDE_LOGITS, LAYOUT_BNHD, "logits-x400");
    n = add(out, n, max, 1, 3, 1, 197, 197, 64, 1, INPUT_WIDE_LOGITS, LAYOUT_BHND, "logits-x400");
    n = add(out, n, max, 2, 2, 1, 33, 33, 16, 0, INPUT_EQUAL_SCORES, LAYOUT_BNHD, "equal-scores");
    n = add(out, n, max, 1, 2, 2, 7, 40, 63, 1, INPUT_EQUAL_SCORES, LAYOUT_BHND, "equal-scores");
    n = add(out, n, max, 1, 2, 1, 12, 5, 8, 1, INPUT_UNIFORM, LAYOUT_PADDED, "masked-rows");
    /* Corrupted inputs: NaN/Inf must come out where the oracle has them
     * (decode shapes with a KV split across threads merge partial results). */
    n = add(out, n, max, 1, 4, 2, 33, 33, 63, 1, INPUT_NAN_K, LAYOUT_PADDED, "nan-k");
    n = add(out, n, max, 2, 2, 1, 7, 197, 17, 0, INPUT_NAN_Q, LAYOUT_BNHD, "nan-q");
    n = add(out, n, max, 1, 4, 1, 1, 4096, 64, 0, INPUT_NAN_Q, LAYOUT_BHND, "nan-q");
    n = add(out, n, max, 1, 2, 2, 197, 197, 80, 1, INPUT_INF_Q, LAYOUT_BHND, "inf-q");
    n = add(out, n, max, 1, 3, 1, 33, 70, 16, 1, INPUT_NINF_K, LAYOUT_PADDED, "ninf-k");
    n = add(out, n, max, 1, 2, 1, 12, 9, 8, 1, INPUT_NINF_ALL, LAYOUT_BNHD, "ninf-all");
    n = add(out, n, max, 1, 2, 1, 1, 1000, 8, 0, INPUT_NINF_ALL, LAYOUT_BHND, "ninf-all");
    n = add(out, n, max, 1, 2, 2, 64, 64, 64, 0, INPUT_HUGE, LAYOUT_BHND, "huge-x1e30");
    n = add(out, n, max, 1, 4, 1, 1, 300, 128, 1, INPUT_HUGE, LAYOUT_BNHD, "huge-x1e30");
    n = add_variants(out, n, max, quick);
    if (!quick) {
        n = add(out, n, max, 1, 1, 1, 2048, 2048, 64, 0, INPUT_UNIFORM, LAYOUT_BHND, "long");
        n = add(out, n, max, 1, 2, 1, 1500, 1500, 128, 1, INPUT_UNIFORM, LAYOUT_BNHD, "long");
    }
    return n;
}

static const char *const layout_names[LAYOUT_COUNT] = {"bhnd", "bnhd", "padded", "packed", "paged"};
static const char *const input_names[INPUT_COUNT] = {
    "uniform", "logits-x30", "equal-scores", "logits-x400", "nan-k",
    "nan-q",   "inf-q",      "ninf-k",       "ninf-all",    "huge-x1e30"};

void check_describe(const check_case *c, char *buf, size_t len) {
    const mha_problem *p = &c->p;
    char dt[48] = "";
    const mha_dtype kv = mha_problem_kv_dtype(p);
    if (p->dtype != MHA_F32 || kv != MHA_F32)
        snprintf(dt, sizeof dt, " dtype=%s kv=%s", mha_dtype_name(p->dtype), mha_dtype_name(kv));
    static const char *const sink_names[SINKS_COUNT] = {"uniform", "-inf", "+20", "mixed"};
    char var[128] = "";
    size_t vl = 0;
    if (p->window)
        vl += (size_t)snprintf(var + vl, sizeof var - vl, " window=%lld,%lld",
                               (long long)p->window_left, (long long)p->window_right);
    if (p->softcap > 0 && vl < sizeof var)
        vl += (size_t)snprintf(var + vl, sizeof var - vl, " softcap=%g", (double)p->softcap);
    if (p->sinks && vl < sizeof var)
        vl += (size_t)snprintf(var + vl, sizeof var - vl, " sinks=%s", sink_names[c->sinks]);
    if (p->head_dim_v && vl < sizeof var)
        snprintf(var + vl, sizeof var - vl, " d_v=%lld", (long long)p->head_dim_v);
    char page[24] = "";
    if (c->layout == LAYOUT_PAGED)
        snprintf(page, sizeof page, "%lld", (long long)check_page_size(p));
    snprintf(buf, len, "B=%lld H=%lld KV=%lld Nq=%lld Nkv=%lld d=%lld%s%s layout=%s%s input=%s%s",
             (long long)p->batch, (long long)p->heads, (long long)p->kv_heads, (long long)p->seq_q,
             (long long)p->seq_kv, (long long)p->head_dim, p->causal ? " causal" : "", var,
             layout_names[c->layout], page, input_names[c->input], dt);
}

void check_case_set_dtypes(check_case *c, mha_dtype dtype, mha_dtype kv_dtype) {
    c->p.dtype = dtype;
    c->p.kv_dtype = kv_dtype == dtype ? MHA_F32 : kv_dtype; /* 0 = the problem's dtype */
}
