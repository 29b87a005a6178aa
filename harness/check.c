/* check.c - verification engine (checkasm-shaped): the tolerance with its
 * reasoning, running a kernel on a prepared case with crash catching, and
 * judging its output (sentinel + guard zones around every output, each
 * element against the float64 oracle). The case list is check_cases.c's,
 * the inputs and the oracle check_data.c's. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "check_int.h"

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
 *    so we allow 2 u_p * mag and either design passes; a kernel whose exp
 *    for P is a short polynomial (flash.amx: degree 3, largest relative
 *    error u_e = 7.5e-5, kernels/vec_avx512bf16.h vexp2_nonpos_bf16) moves
 *    each p_j by u_e more before the rounding and each normalised weight by
 *    2 u_e: we allow 2 (u_p + u_e) * mag;
 *  - the logit softcap of those kernels (vsoftcap_log2_bf16 in
 *    kernels/vec_avx512bf16.h: a shorter tanh, relative error u_c = 2.5e-6,
 *    against ~1e-7 for the fp32 kernels' form, which TOL_LOGIT covers):
 *    a capped logit c tanh(s / c) moves by at most u_c min(smax, c), each
 *    weight by a factor within e^(+-2 u_c min(smax, c)) after
 *    normalisation, so out by at most expm1(2 u_c min(smax, c)) * mag;
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
#define TOL_BF16 0x1p-9     /* unit roundoff of bf16 (8 significant bits) */
#define TOL_F16 0x1p-11     /* unit roundoff of fp16 (11 significant bits) */
#define TOL_EXP_BF16 7.5e-5 /* the degree-3 exp2 of P (vexp2_nonpos_bf16) */
#define TOL_CAP_BF16 2.5e-6 /* their softcap's tanh (vsoftcap_log2_bf16) */

static int is_half(mha_dtype t) {
    return t == MHA_BF16 || t == MHA_F16;
}

void check_tolerance(const mha_problem *p, double mag, double smax, double *tol_abs,
                     double *tol_rel) {
    const mha_dtype dt = p->dtype, kv = mha_problem_kv_dtype(p);
    double e = TOL_BASE + TOL_LOGIT * sqrt((double)p->head_dim) * smax;
    if (is_half(dt) || is_half(kv)) {
        e += 2 * (TOL_BF16 + TOL_EXP_BF16); /* P: exp, bf16 */
        if (p->softcap > 0) e += expm1(2.0 * TOL_CAP_BF16 * fmin(smax, (double)p->softcap));
    }
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

enum { GUARD = 64 }; /* elements of guard zone before and after every output */

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
    /* a packed or paged case in its layout where the kernel takes it, else
     * its values as [B,N,H,d] (the same memory: LAYOUT_PACKED) */
    const int in_layout = d->kp.layout != MHA_LAYOUT_DENSE && mha_kernel_takes(k, &d->kp) == MHA_OK;
    const mha_problem *p = in_layout ? &d->kp : &d->c.p;
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
        const mha_extras x = in_layout ? check_layout_extras(d) : (mha_extras){.sinks = d->sinks};
        st = in_layout
                 ? mha_attend_ex(k, p, &opt, &d->lq, &d->lk, &d->lv, &x, &out.view, ws, ws_bytes)
                 : mha_attend_ex(k, p, &opt, &d->qv, &d->kv, &d->vv, &x, &out.view, ws, ws_bytes);
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
