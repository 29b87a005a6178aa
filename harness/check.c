/* check.c - verification engine (checkasm-shaped): cases, deterministic
 * inputs re-seeded per case, the float64 oracle, sentinel + guard zones around
 * every output, crash catching, and the tolerance with its reasoning. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "stats.h"

/* ---- tolerance -------------------------------------------------------------
 * The output is a convex combination of V rows, so |out| <= mag = max|V| and
 * an error in the attention weights of relative size e moves out by at most
 * e * mag. Float32 kernels make two kinds of error:
 *  - accumulation (dot products over d, the softmax sum and P.V over Nkv,
 *    the exp polynomial, ~2 ulp): a few hundred ulp even for Nkv = 4096,
 *    covered by TOL_BASE = 2e-5 (~170 ulp);
 *  - rounding of the logits themselves: |ds| <~ sqrt(d) * eps * smax where
 *    smax = scale * max|q| * max|k| bounds every logit's sum of |products|
 *    (Cauchy-Schwarz); a logit error ds changes a weight by a factor e^ds.
 *    TOL_LOGIT = 4 eps per unit allows for that with headroom.
 * A real bug (one wrong mask entry, a lost tail column, a missed rescale)
 * moves the output by ~mag/Nkv or more: >= 2e-4 * mag on the grid, ten times
 * the tolerance of the ordinary cases.
 *
 * Other dtypes (check_tolerance). The oracle reads the inputs as stored
 * (bf16/fp16 widened exactly, int8 * its row scale), so rounding the inputs
 * costs nothing here; what a kernel may still round on the way adds:
 *  - P rounded to bf16 before P.V when Q/O or K/V is bf16/fp16 (u_p = 2^-9
 *    relative per probability): sum_j |dp_j| |v_j| <= u_p sum_j p_j |v_j|
 *    <= u_p * mag when the row sum is taken from the unrounded p; a kernel
 *    that sums the rounded p moves each normalised weight by at most 2 u_p,
 *    so we allow 2 u_p * mag and either design passes;
 *  - fp16 inputs converted to bf16 for a bf16 dot-product unit (2^-9
 *    relative on each converted element): Q and K each perturb a logit by at
 *    most 2^-9 * |scale| |q| |k| <= 2^-9 * smax (Cauchy-Schwarz), so with n
 *    of Q, K in fp16 every logit moves by delta <= n 2^-9 smax, each weight
 *    by a factor within e^(+-2 delta) after normalisation, and out by at
 *    most expm1(2 delta) * mag; V converted adds 2^-9 * mag;
 *  - the output rounded to its dtype: bf16 2^-9, fp16 2^-11 relative to
 *    |out| (u_o), checked per element as u_o * |ref| + (1 + u_o) * tol;
 *  - int8 caches: the oracle reads int8 * scale, so nothing is lost before
 *    the kernel sees them: the fp32 tolerance (plus the terms above when Q/O
 *    is bf16/fp16).
 * The terms are first order; their products (~2^-18) sit well inside
 * TOL_BASE. A wrong mask entry or a lost column is still ~mag/Nkv. */
#define TOL_BASE 2e-5
#define TOL_LOGIT (4.0 * 1.1920929e-7)
#define TOL_BF16 0x1p-9 /* unit roundoff of bf16 (8 significant bits) */
#define TOL_F16 0x1p-11 /* unit roundoff of fp16 (11 significant bits) */

static int is_half(mha_dtype t) {
    return t == MHA_BF16 || t == MHA_F16;
}

void check_tolerance(const mha_problem *p, double mag, double smax, double *tol_abs,
                     double *tol_rel) {
    const mha_dtype dt = p->dtype, kv = mha_problem_kv_dtype(p);
    double e = TOL_BASE + TOL_LOGIT * sqrt((double)p->head_dim) * smax;
    if (is_half(dt) || is_half(kv)) e += 2 * TOL_BF16; /* P rounded to bf16 */
    const int n16 = (dt == MHA_F16) + (kv == MHA_F16); /* Q, K converted fp16 -> bf16 */
    if (n16) e += expm1(2.0 * n16 * TOL_BF16 * smax);
    if (kv == MHA_F16) e += TOL_BF16; /* V converted fp16 -> bf16 */
    *tol_abs = (mag > 0 ? mag : 1e-30) * e;
    *tol_rel = dt == MHA_BF16 ? TOL_BF16 : dt == MHA_F16 ? TOL_F16 : 0.0;
}

/* The layer in bf16/fp16 (mha_forward with layer.dtype; test_layer.c). The
 * oracle is the layer in float64 on the stored (rounded) weights and inputs
 * with no rounding in between; the layer rounds on the way. Worst-case
 * bounds through four stages are vacuous (they add every rounding with the
 * same sign: for d_model 768 they pass outputs off by half their size), so
 * each error is propagated to first order and the sums of independent
 * roundings are bounded as Hoeffding does: n zero-mean errors |e_i| <= b_i
 * sum to more than C sqrt(sum b_i^2) with probability <= 2 e^(-C^2/2);
 * C = CHECK_SIGMAS = 4 is 6.9 standard deviations of such a sum (a rounding
 * error is ~uniform, sd b/sqrt(3)). u is the unit roundoff of the layer
 * dtype (bf16 2^-9, fp16 2^-11), u_b = 2^-9 that of the bf16 unit.
 *  1. A projected value v (check_layer_proj_err): rounded to the dtype,
 *     u |v|; fp16 x and w rounded to bf16 by the bf16 GEMM (<= 2 u_b per
 *     product, independent: C 2 u_b ||x o w||_2); the fp32 sums (K steps of
 *     <= 2^-24 vbar: C sqrt(K) 2^-24 vbar); an fp16 Q/K/V is rounded to
 *     bf16 once more inside flash.avx512bf16 (u_b |v|). The widened fallback
 *     (convert, fp32 GEMM, round) makes fewer roundings: the bound covers it.
 *  2. A head (check_layer_head_err): a = sum_j p_j v_j with p = softmax(s).
 *     A logit error ds_j moves a_c by sum_j p_j ds_j (v_jc - a_c) (first
 *     order, the normalisation included); ds_j = scale sum_c' (dq_c' k_jc' +
 *     q_c' dk_jc'). The dq are shared by all keys, the dk are not, so
 *     da_c = scale sum_c' dq_c' [sum_j p_j k_jc' (v_jc - a_c)]
 *          + scale sum_{j,c'} q_c' dk_jc' p_j (v_jc - a_c),
 *     sums of independent terms: C scale sqrt(sum_c' (eq_c' S_c')^2 +
 *     sum_j p_j^2 (v_jc - a_c)^2 sum_c' q_c'^2 ek_jc'^2). V's errors add
 *     C sqrt(sum_j (p_j ev_jc)^2); P rounded to bf16 before P.V (u_b p_j,
 *     the row sum taken from the fp32 P) adds C u_b sqrt(sum_j (p_j
 *     v_jc)^2); the fp32 softmax and sums TOL_BASE max_j |v_jc|; the head
 *     rounded to the dtype u |a_c|.
 *  3. The output (check_layer_out_err): y = sum_c a_c w_c + b moves by
 *     sum_c da_c w_c; the da_c are sums of different roundings (V's columns,
 *     P times different v_jc, the logit terms times v_jc - a_c), taken as
 *     independent: C sqrt(sum_c (ea_c w_c)^2); then stage 1 for y itself
 *     (fp16 A and W_o to bf16, fp32 sums, the rounding: u |y|).
 * The bound is per element and first order (products of terms ~u^2 are
 * below TOL_BASE's share). A wrong head, a lost bias or a transposed weight
 * moves the output by O(|out|); test_layer.c checks the tolerance stays a
 * small fraction of max|out| (else the check means nothing: MISTRUSTED). */
static double unit_of(mha_dtype t) {
    return t == MHA_F16 ? TOL_F16 : TOL_BF16;
}

double check_layer_proj_err(mha_dtype t, int64_t K, double v, double v2, double vbar, int qkv) {
    const double conv = t == MHA_F16 ? CHECK_SIGMAS * 2 * TOL_BF16 * v2 : 0.0;
    const double again = t == MHA_F16 && qkv ? TOL_BF16 * fabs(v) : 0.0;
    return unit_of(t) * fabs(v) + conv + again + CHECK_SIGMAS * sqrt((double)K) * 0x1p-24 * vbar;
}

void check_layer_head_err(mha_dtype t, int64_t nkv, int64_t dk, const double *p, const double *q,
                          const double *eq, const double *k, const double *ek, const double *v,
                          const double *ev, int64_t ld, const double *a, double scale, double *e) {
    for (int64_t c = 0; c < dk; c++) {
        double t1 = 0, t2 = 0, t3 = 0, t4 = 0, vmax = 0;
        for (int64_t c2 = 0; c2 < dk; c2++) {
            double sc = 0;
            for (int64_t j = 0; j < nkv; j++) sc += p[j] * k[j * ld + c2] * (v[j * ld + c] - a[c]);
            t1 += eq[c2] * sc * eq[c2] * sc;
        }
        for (int64_t j = 0; j < nkv; j++) {
            if (p[j] == 0) continue;
            double w = 0;
            for (int64_t c2 = 0; c2 < dk; c2++)
                w += q[c2] * ek[j * ld + c2] * q[c2] * ek[j * ld + c2];
            const double dv = p[j] * (v[j * ld + c] - a[c]);
            t2 += dv * dv * w;
            t3 += p[j] * ev[j * ld + c] * p[j] * ev[j * ld + c];
            t4 += p[j] * v[j * ld + c] * p[j] * v[j * ld + c];
            vmax = fmax(vmax, fabs(v[j * ld + c]));
        }
        e[c] = CHECK_SIGMAS * sqrt(scale * scale * (t1 + t2) + t3 + TOL_BF16 * TOL_BF16 * t4) +
               TOL_BASE * vmax + unit_of(t) * fabs(a[c]);
    }
}

double check_layer_out_err(mha_dtype t, int64_t d_model, const double *ea, const double *w,
                           double y, double y2, double ybar) {
    double s = 0;
    for (int64_t c = 0; c < d_model; c++) s += ea[c] * w[c] * ea[c] * w[c];
    return CHECK_SIGMAS * sqrt(s) + check_layer_proj_err(t, d_model, y, y2, ybar, 0);
}

int check_input_fits(int input, mha_dtype dtype, mha_dtype kv_dtype) {
    /* an int8 row cannot hold -inf (its scale would turn the row into NaN:
     * nan-k again), and fp16 cannot hold the 1e30 that overflows the scores */
    if (kv_dtype == MHA_I8 && (input == INPUT_NINF_K || input == INPUT_NINF_ALL)) return 0;
    if (input == INPUT_HUGE && (dtype == MHA_F16 || kv_dtype == MHA_F16)) return 0;
    return 1;
}

enum { GUARD = 64 }; /* elements of guard zone before and after every output */
/* Quiet NaNs nobody computes (a converted NaN is 0x7fc0 / 0x7e00), one per
 * output width: unwritten elements and stray writes show in any dtype. */
static const uint32_t SENTINEL = 0x7fc5a5a5u;
static const uint16_t SENTINEL_BF16 = 0x7fc5u, SENTINEL_F16 = 0x7e5au;

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
    enum { U = INPUT_UNIFORM, X30 = INPUT_LARGE_LOGITS, EQ = INPUT_EQUAL_SCORES };
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

static const char *const layout_names[] = {"bhnd", "bnhd", "padded"};
static const char *const input_names[INPUT_COUNT] = {"uniform", "logits-x30", "equal-scores",
                                                     "nan-k",   "nan-q",      "inf-q",
                                                     "ninf-k",  "ninf-all",   "huge-x1e30"};

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
    snprintf(buf, len, "B=%lld H=%lld KV=%lld Nq=%lld Nkv=%lld d=%lld%s%s layout=%s input=%s%s",
             (long long)p->batch, (long long)p->heads, (long long)p->kv_heads, (long long)p->seq_q,
             (long long)p->seq_kv, (long long)p->head_dim, p->causal ? " causal" : "", var,
             layout_names[c->layout], input_names[c->input], dt);
}

void check_case_set_dtypes(check_case *c, mha_dtype dtype, mha_dtype kv_dtype) {
    c->p.dtype = dtype;
    c->p.kv_dtype = kv_dtype == dtype ? MHA_F32 : kv_dtype; /* 0 = the problem's dtype */
}

/* ---- data ---------------------------------------------------------------------- */
typedef struct {
    int64_t sb, sh, sn, span;
} strides;

static strides layout_strides(int layout, int64_t B, int64_t H, int64_t N, int64_t d) {
    strides s;
    switch (layout) {
    case LAYOUT_BNHD:
        s = (strides){N * H * d, d, H * d, 0};
        break;
    case LAYOUT_PADDED: /* gaps after every row, head and batch: stray reads see NaN */
        s.sn = d + 3;
        s.sh = N * s.sn + 5;
        s.sb = H * s.sh + 7;
        break;
    default:
        s = (strides){H * N * d, N * d, d, 0};
        break;
    }
    s.span = (B - 1) * s.sb + (H - 1) * s.sh + (N - 1) * s.sn + d;
    return s;
}

static float *alloc_nan(int64_t n) {
    float *p = mha_alloc((size_t)n * sizeof(float));
    if (p) {
        for (int64_t i = 0; i < n; i++) memcpy(&p[i], &SENTINEL, sizeof(float));
    }
    return p;
}

static mha_status make_input(const check_case *c, int64_t H, int64_t N, int64_t d, float **buf,
                             mha_tensor *view, uint64_t *rng, float gain, int equal_rows) {
    const int64_t B = c->p.batch;
    const strides s = layout_strides(c->layout, B, H, N, d);
    float *p = alloc_nan(s.span);
    if (!p) return MHA_ENOMEM;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < N; i++)
                for (int64_t k = 0; k < d; k++) {
                    float *e = p + b * s.sb + h * s.sh + i * s.sn + k;
                    *e = (equal_rows && i > 0) ? p[b * s.sb + h * s.sh + k]
                                               : gain * uniform_pm1(rng);
                }
    *buf = p;
    *view = (mha_tensor){.data = p, .stride_b = s.sb, .stride_h = s.sh, .stride_n = s.sn};
    return MHA_OK;
}

/* Over the finite elements only: the tolerance of the rows a NaN/Inf does
 * not reach must not become NaN/Inf itself. */
static double max_row_norm(const mha_tensor *t, int64_t B, int64_t H, int64_t N, int64_t d) {
    double best = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < N; i++) {
                double s = 0;
                const float *r =
                    (const float *)t->data + b * t->stride_b + h * t->stride_h + i * t->stride_n;
                for (int64_t k = 0; k < d; k++)
                    if (isfinite(r[k])) s += (double)r[k] * r[k];
                best = s > best ? s : best;
            }
    return sqrt(best);
}

static float *elem(const mha_tensor *t, int64_t b, int64_t h, int64_t i, int64_t c) {
    return (float *)t->data + b * t->stride_b + h * t->stride_h + i * t->stride_n + c;
}

/* Stores the fp32 input t (span elements, NaN in layout gaps) as dtype dt:
 * bf16/fp16 rounded to nearest even, int8 quantised per (b, h, n) row with
 * its scale in a contiguous [B,H,N] array (gaps hold -128, a value no row
 * has). The fp32 buffer is then overwritten with the stored values widened,
 * so the magnitudes the tolerance is computed from are the oracle's. */
static mha_status store_typed(mha_dtype dt, int64_t B, int64_t H, int64_t N, int64_t d,
                              int64_t span, float *f, mha_tensor *view, void **typed,
                              float **scales) {
    *typed = NULL;
    *scales = NULL;
    view->dtype = dt;
    if (dt == MHA_F32) return MHA_OK;
    void *t = mha_alloc((size_t)span * mha_dtype_size(dt));
    if (!t) return MHA_ENOMEM;
    if (dt != MHA_I8) {
        mha_convert_from_f32(dt, f, t, (size_t)span);
        mha_convert_to_f32(dt, t, f, (size_t)span);
    } else {
        float *sc = malloc((size_t)(B * H * N) * sizeof(float));
        if (!sc) {
            mha_free(t);
            return MHA_ENOMEM;
        }
        memset(t, 0x80, (size_t)span);
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < H; h++) {
                const int64_t off = b * view->stride_b + h * view->stride_h;
                float *rs = sc + (b * H + h) * N;
                mha_quantize_rows_i8(f + off, N, d, view->stride_n, (int8_t *)t + off,
                                     view->stride_n, rs);
                for (int64_t i = 0; i < N; i++)
                    for (int64_t c = 0; c < d; c++)
                        f[off + i * view->stride_n + c] =
                            (float)((int8_t *)t)[off + i * view->stride_n + c] * rs[i];
            }
        *scales = sc;
        view->scale = sc;
        view->scale_stride_b = H * N;
        view->scale_stride_h = N;
        view->scale_stride_n = 1;
    }
    view->data = t;
    *typed = t;
    return MHA_OK;
}

/* Plants the corruption of the case's input kind (positions are fixed, so a
 * failure repeats with the printed seed). */
static void corrupt(const check_case *c, check_data *d) {
    const mha_problem *p = &c->p;
    const int64_t Nq = p->seq_q, Nkv = p->seq_kv, dd = p->head_dim;
    switch (c->input) {
    case INPUT_NAN_K: /* one key of KV head 0 vanishes into NaN for the rows that see it */
        *elem(&d->kv, 0, 0, Nkv / 2, dd / 2) = NAN;
        break;
    case INPUT_NAN_Q: /* one element of the last query row of the last head */
        *elem(&d->qv, p->batch - 1, p->heads - 1, Nq - 1, dd - 1) = NAN;
        break;
    case INPUT_INF_Q: /* scores +-inf for that row: inf - inf in the softmax */
        *elem(&d->qv, 0, p->heads - 1, Nq / 2, dd / 3) = INFINITY;
        break;
    case INPUT_NINF_K: /* key Nkv/3 scores -inf for rows with q > 0 there, +inf for q < 0 */
        *elem(&d->kv, 0, 0, Nkv / 3, dd - 1) = -INFINITY;
        break;
    case INPUT_NINF_ALL: /* every score of KV group 0 is -inf (head 0) or +inf (the rest) */
        for (int64_t j = 0; j < Nkv; j++) *elem(&d->kv, 0, 0, j, 0) = -INFINITY;
        for (int64_t h = 0; h < p->heads / p->kv_heads; h++)
            for (int64_t i = 0; i < Nq; i++) {
                float *e = elem(&d->qv, 0, h, i, 0);
                *e = (h == 0 ? 1.0f : -1.0f) * (0.5f + fabsf(*e));
            }
        break;
    default:
        break;
    }
}

mha_status check_prepare(const check_case *c, uint64_t case_seed, check_data *d) {
    memset(d, 0, sizeof *d);
    d->c = *c;
    const mha_problem *p = &c->p;
    uint64_t rng = case_seed;
    mha_status st;
    if ((st = mha_problem_validate(p)) != MHA_OK) return st;
    const float qgain = c->input == INPUT_LARGE_LOGITS ? 30.0f
                        : c->input == INPUT_HUGE       ? 1e30f
                                                       : 1.0f;
    const float kgain = c->input == INPUT_HUGE ? 1e30f : 1.0f;
    const int64_t dv = mha_problem_head_dim_v(p);
    if ((st = make_input(c, p->heads, p->seq_q, p->head_dim, &d->q, &d->qv, &rng, qgain, 0)) ||
        (st = make_input(c, p->kv_heads, p->seq_kv, p->head_dim, &d->k, &d->kv, &rng, kgain,
                         c->input == INPUT_EQUAL_SCORES)) ||
        (st = make_input(c, p->kv_heads, p->seq_kv, dv, &d->v, &d->vv, &rng, 1.0f, 0))) {
        check_release(d);
        return st;
    }
    if (p->sinks) { /* drawn after the tensors: the same seed gives the same q, k, v */
        d->sinks = malloc((size_t)p->heads * sizeof(float));
        if (!d->sinks) {
            check_release(d);
            return MHA_ENOMEM;
        }
        for (int64_t h = 0; h < p->heads; h++) {
            const int kind = c->sinks == SINKS_MIXED ? (int)(h % 3) : c->sinks;
            const float u = 2.0f * uniform_pm1(&rng);
            d->sinks[h] = kind == SINKS_NINF ? -INFINITY : kind == SINKS_LARGE ? 20.0f : u;
        }
    }
    corrupt(c, d);
    /* the fp32 views stay for the tolerance's magnitudes; the typed ones go
     * to the oracle and the kernels */
    mha_tensor fq = d->qv, fk = d->kv, fv = d->vv;
    const mha_dtype kvt = mha_problem_kv_dtype(p);
    const int64_t qspan = layout_strides(c->layout, p->batch, p->heads, p->seq_q, p->head_dim).span;
    const int64_t kspan =
        layout_strides(c->layout, p->batch, p->kv_heads, p->seq_kv, p->head_dim).span;
    const int64_t vspan = layout_strides(c->layout, p->batch, p->kv_heads, p->seq_kv, dv).span;
    if ((st = store_typed(p->dtype, p->batch, p->heads, p->seq_q, p->head_dim, qspan, d->q, &d->qv,
                          &d->tq, &d->sq)) ||
        (st = store_typed(kvt, p->batch, p->kv_heads, p->seq_kv, p->head_dim, kspan, d->k, &d->kv,
                          &d->tk, &d->sk)) ||
        (st = store_typed(kvt, p->batch, p->kv_heads, p->seq_kv, dv, vspan, d->v, &d->vv, &d->tv,
                          &d->sv))) {
        check_release(d);
        return st;
    }
    const size_t nout = (size_t)(p->batch * p->heads * p->seq_q * dv);
    d->ref = malloc(nout * sizeof(double));
    if (!d->ref) {
        check_release(d);
        return MHA_ENOMEM;
    }
    const mha_extras x = {.sinks = d->sinks};
    if ((st = mha_reference_ex(p, &d->qv, &d->kv, &d->vv, &x, d->ref)) != MHA_OK) {
        check_release(d);
        return st;
    }
    d->out_floats = (size_t)layout_strides(c->layout, p->batch, p->heads, p->seq_q, dv).span;
    d->mag = 0;
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t g = 0; g < p->kv_heads; g++)
            for (int64_t j = 0; j < p->seq_kv; j++)
                for (int64_t k = 0; k < dv; k++) {
                    const double a = fabs(*elem(&fv, b, g, j, k));
                    d->mag = a > d->mag ? a : d->mag;
                }
    d->smax = (double)mha_problem_scale(p) *
              max_row_norm(&fq, p->batch, p->heads, p->seq_q, p->head_dim) *
              max_row_norm(&fk, p->batch, p->kv_heads, p->seq_kv, p->head_dim);
    check_tolerance(p, d->mag, d->smax, &d->tol, &d->tol_rel);
    return MHA_OK;
}

void check_release(check_data *d) {
    mha_free(d->q);
    mha_free(d->k);
    mha_free(d->v);
    mha_free(d->tq);
    mha_free(d->tk);
    mha_free(d->tv);
    free(d->sq);
    free(d->sk);
    free(d->sv);
    free(d->sinks);
    free(d->ref);
    d->sinks = NULL;
    d->q = d->k = d->v = NULL;
    d->tq = d->tk = d->tv = NULL;
    d->sq = d->sk = d->sv = NULL;
    d->ref = NULL;
}

/* ---- running a kernel ------------------------------------------------------------ */
static sigjmp_buf crash_jmp;
static pthread_t crash_thread;
static volatile sig_atomic_t crash_armed;

static void on_crash(int sig) {
    if (crash_armed && pthread_equal(pthread_self(), crash_thread)) siglongjmp(crash_jmp, sig);
    static const char msg[] = "mhabench: kernel crashed on a worker thread\n";
    if (write(2, msg, sizeof msg - 1) < 0) { /* nothing more to do */
    }
    _exit(3);
}

int check_kernel(const mha_kernel *k, const check_data *d, int threads, check_report *r) {
    const mha_options opt = {.threads = threads};
    return check_kernel_opts(k, d, &opt, r);
}

/* What element (b, h, i, c) must be: within tolerance of the reference, NaN
 * where the reference is NaN, and non-finite on a row that sees a key when the
 * float32 scores overflow (INPUT_HUGE). Returns 1 if got is acceptable. */
static int element_ok(const check_data *d, int64_t i, double want, double got, double *err,
                      double *allowed) {
    const mha_problem *p = &d->c.p;
    const int64_t off = p->seq_kv - p->seq_q;
    int64_t lo = 0, hi = p->seq_kv - 1; /* the visible keys of row i (mha.h's rule) */
    if (p->causal && i + off < hi) hi = i + off;
    if (p->window && p->window_right >= 0 && i + off + p->window_right < hi)
        hi = i + off + p->window_right;
    if (p->window && p->window_left >= 0 && i + off - p->window_left > lo)
        lo = i + off - p->window_left;
    const int sees_key = lo <= hi;
    *err = fabs(got - want);
    *allowed = (1 + d->tol_rel) * d->tol + d->tol_rel * fabs(want);
    if (isnan(want)) return isnan(got);
    if (d->c.input == INPUT_HUGE && sees_key) return !isfinite(got);
    return *err <= *allowed; /* NaN (an unwritten sentinel too) fails */
}

/* ---- outputs: typed, sentinel-filled, guarded ------------------------------------ */
static void put_sentinel(void *buf, mha_dtype t, int64_t i) {
    if (t == MHA_F32)
        memcpy((char *)buf + 4 * i, &SENTINEL, 4);
    else
        memcpy((char *)buf + 2 * i, t == MHA_F16 ? &SENTINEL_F16 : &SENTINEL_BF16, 2);
}

static int is_sentinel(const void *buf, mha_dtype t, int64_t i) {
    if (t == MHA_F32) {
        uint32_t bits;
        memcpy(&bits, (const char *)buf + 4 * i, 4);
        return bits == SENTINEL;
    }
    uint16_t bits;
    memcpy(&bits, (const char *)buf + 2 * i, 2);
    return bits == (t == MHA_F16 ? SENTINEL_F16 : SENTINEL_BF16);
}

int check_out_alloc(const check_data *d, check_out *o) {
    const mha_problem *p = &d->c.p;
    memset(o, 0, sizeof *o);
    o->dtype = p->dtype;
    o->total = (int64_t)d->out_floats + 2 * GUARD;
    o->buf = mha_alloc((size_t)o->total * mha_dtype_size(o->dtype));
    if (!o->buf) return 0;
    for (int64_t i = 0; i < o->total; i++) put_sentinel(o->buf, o->dtype, i);
    const strides s =
        layout_strides(d->c.layout, p->batch, p->heads, p->seq_q, mha_problem_head_dim_v(p));
    o->view = (mha_tensor_mut){.data = (char *)o->buf + GUARD * mha_dtype_size(o->dtype),
                               .stride_b = s.sb,
                               .stride_h = s.sh,
                               .stride_n = s.sn,
                               .dtype = o->dtype};
    return 1;
}

void check_out_free(check_out *o) {
    mha_free(o->buf);
    o->buf = NULL;
}

int check_out_compare(const check_data *d, const check_out *o, check_report *r) {
    const mha_problem *p = &d->c.p;
    const mha_tensor_mut *ov = &o->view;
    const mha_dtype t = o->dtype;
    const int64_t dv = mha_problem_head_dim_v(p);
    int result = CHECK_PASS;
    int64_t bad = 0;
    r->max_err = 0;
    r->detail[0] = 0;
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t h = 0; h < p->heads; h++)
            for (int64_t i = 0; i < p->seq_q; i++)
                for (int64_t c = 0; c < dv; c++) {
                    const int64_t at =
                        GUARD + b * ov->stride_b + h * ov->stride_h + i * ov->stride_n + c;
                    float got;
                    mha_convert_to_f32(t, (const char *)o->buf + at * mha_dtype_size(t), &got, 1);
                    const double want = d->ref[((b * p->heads + h) * p->seq_q + i) * dv + c];
                    double err, allowed;
                    const int unwritten = is_sentinel(o->buf, t, at);
                    if (unwritten || !element_ok(d, i, want, got, &err, &allowed)) {
                        if (bad++ == 0) {
                            snprintf(r->detail, sizeof r->detail,
                                     "first bad element (b=%lld, h=%lld, i=%lld, j=%lld): got "
                                     "%.9g%s%s%s, want %.9g%s, |diff| %.3g > tol %.3g",
                                     (long long)b, (long long)h, (long long)i, (long long)c,
                                     (double)got, t != MHA_F32 ? " (" : "",
                                     t != MHA_F32 ? mha_dtype_name(t) : "", t != MHA_F32 ? ")" : "",
                                     want,
                                     d->c.input == INPUT_HUGE
                                         ? " (scores overflow float32: want non-finite)"
                                         : "",
                                     fabs((double)got - want),
                                     (1 + d->tol_rel) * d->tol + d->tol_rel * fabs(want));
                            if (unwritten) {
                                size_t len = strlen(r->detail);
                                snprintf(r->detail + len, sizeof r->detail - len,
                                         " (never written)");
                            }
                        }
                        r->max_err = INFINITY;
                    } else if (isfinite(err) && err > r->max_err) {
                        r->max_err = err;
                    }
                    put_sentinel(o->buf, t, at); /* for the stray-write scan */
                }
    if (bad) {
        size_t len = strlen(r->detail);
        snprintf(r->detail + len, sizeof r->detail - len, "; %lld bad elements", (long long)bad);
        result = CHECK_FAIL;
    }
    /* Everything not a view element (guards, layout gaps) must be untouched. */
    for (int64_t i = 0; i < o->total && result == CHECK_PASS; i++) {
        if (!is_sentinel(o->buf, t, i)) {
            snprintf(r->detail, sizeof r->detail,
                     "stray write at %s element offset %lld of the output allocation (%s)",
                     mha_dtype_name(t), (long long)(i - GUARD),
                     i < GUARD || i >= GUARD + (int64_t)d->out_floats ? "guard zone"
                                                                      : "layout gap");
            result = CHECK_FAIL;
        }
    }
    return result;
}

int check_kernel_opts(const mha_kernel *k, const check_data *d, const mha_options *o,
                      check_report *r) {
    const mha_problem *p = &d->c.p;
    r->max_err = 0;
    r->detail[0] = 0;
    if (mha_kernel_supported(k) != MHA_OK) {
        snprintf(r->detail, sizeof r->detail, "%s", mha_last_error());
        return CHECK_SKIP;
    }
    if (mha_kernel_takes(k, p) != MHA_OK) { /* a variant or dtype it does not take */
        snprintf(r->detail, sizeof r->detail, "%s", mha_last_error());
        return CHECK_SKIP;
    }
    const mha_options opt = *o;
    size_t ws_bytes = 0;
    if (mha_workspace_size(k, p, &opt, &ws_bytes) != MHA_OK) {
        snprintf(r->detail, sizeof r->detail, "workspace query failed: %s", mha_last_error());
        return CHECK_FAIL;
    }
    check_out out;
    const int have_out = check_out_alloc(d, &out);
    /* Workspace starts as NaN garbage: a kernel that reads what it never wrote shows. */
    void *ws = ws_bytes ? mha_alloc(ws_bytes) : NULL;
    if (!have_out || (ws_bytes && !ws)) {
        if (have_out) check_out_free(&out);
        mha_free(ws);
        snprintf(r->detail, sizeof r->detail, "cannot allocate %zu bytes of workspace", ws_bytes);
        return CHECK_SKIP;
    }
    if (ws) memset(ws, 0xff, ws_bytes);

    struct sigaction sa, old[4];
    const int sigs[4] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE};
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_crash;
    sa.sa_flags = SA_NODEFER;
    for (int i = 0; i < 4; i++) sigaction(sigs[i], &sa, &old[i]);
    crash_thread = pthread_self();
    int sig = sigsetjmp(crash_jmp, 1);
    mha_status st = MHA_OK;
    if (sig == 0) {
        crash_armed = 1;
        const mha_extras x = {.sinks = d->sinks};
        st = mha_attend_ex(k, p, &opt, &d->qv, &d->kv, &d->vv, &x, &out.view, ws, ws_bytes);
    }
    crash_armed = 0;
    for (int i = 0; i < 4; i++) sigaction(sigs[i], &old[i], NULL);
    int result;
    if (sig != 0) {
        snprintf(r->detail, sizeof r->detail, "crashed with signal %d (%s)", sig, strsignal(sig));
        result = CHECK_FAIL;
    } else if (st != MHA_OK) {
        snprintf(r->detail, sizeof r->detail, "returned %s: %s", mha_status_str(st),
                 mha_last_error());
        result = CHECK_FAIL;
    } else {
        result = check_out_compare(d, &out, r);
    }
    check_out_free(&out);
    mha_free(ws);
    return result;
}
