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
 * the tolerance of the ordinary cases. */
#define TOL_BASE 2e-5
#define TOL_LOGIT (4.0 * 1.1920929e-7)

enum { GUARD = 64 }; /* floats of guard zone before and after every output */
static const uint32_t SENTINEL = 0x7fc5a5a5u; /* a quiet NaN nobody computes */

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
    snprintf(buf, len, "B=%lld H=%lld KV=%lld Nq=%lld Nkv=%lld d=%lld%s layout=%s input=%s",
             (long long)p->batch, (long long)p->heads, (long long)p->kv_heads, (long long)p->seq_q,
             (long long)p->seq_kv, (long long)p->head_dim, p->causal ? " causal" : "",
             layout_names[c->layout], input_names[c->input]);
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

static mha_status make_input(const check_case *c, int64_t H, int64_t N, float **buf,
                             mha_tensor *view, uint64_t *rng, float gain, int equal_rows) {
    const int64_t B = c->p.batch, d = c->p.head_dim;
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
    if ((st = make_input(c, p->heads, p->seq_q, &d->q, &d->qv, &rng, qgain, 0)) ||
        (st = make_input(c, p->kv_heads, p->seq_kv, &d->k, &d->kv, &rng, kgain,
                         c->input == INPUT_EQUAL_SCORES)) ||
        (st = make_input(c, p->kv_heads, p->seq_kv, &d->v, &d->vv, &rng, 1.0f, 0))) {
        check_release(d);
        return st;
    }
    corrupt(c, d);
    const size_t nout = (size_t)(p->batch * p->heads * p->seq_q * p->head_dim);
    d->ref = malloc(nout * sizeof(double));
    if (!d->ref) {
        check_release(d);
        return MHA_ENOMEM;
    }
    if ((st = mha_reference(p, &d->qv, &d->kv, &d->vv, d->ref)) != MHA_OK) {
        check_release(d);
        return st;
    }
    d->out_floats =
        (size_t)layout_strides(c->layout, p->batch, p->heads, p->seq_q, p->head_dim).span;
    d->mag = 0;
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t g = 0; g < p->kv_heads; g++)
            for (int64_t j = 0; j < p->seq_kv; j++)
                for (int64_t k = 0; k < p->head_dim; k++) {
                    const double a =
                        fabs(((const float *)d->vv.data)[b * d->vv.stride_b + g * d->vv.stride_h +
                                                         j * d->vv.stride_n + k]);
                    d->mag = a > d->mag ? a : d->mag;
                }
    const double smax = (double)mha_problem_scale(p) *
                        max_row_norm(&d->qv, p->batch, p->heads, p->seq_q, p->head_dim) *
                        max_row_norm(&d->kv, p->batch, p->kv_heads, p->seq_kv, p->head_dim);
    d->tol =
        (d->mag > 0 ? d->mag : 1e-30) * (TOL_BASE + TOL_LOGIT * sqrt((double)p->head_dim) * smax);
    return MHA_OK;
}

void check_release(check_data *d) {
    mha_free(d->q);
    mha_free(d->k);
    mha_free(d->v);
    free(d->ref);
    d->q = d->k = d->v = NULL;
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

/* What element (b, h, i, c) must be: within tol of the reference, NaN where
 * the reference is NaN, and non-finite on a row that sees a key when the
 * float32 scores overflow (INPUT_HUGE). Returns 1 if got is acceptable. */
static int element_ok(const check_data *d, int64_t i, double want, float got, double *err) {
    const mha_problem *p = &d->c.p;
    const int sees_key = !p->causal || i + p->seq_kv - p->seq_q + 1 > 0;
    *err = fabs((double)got - want);
    if (isnan(want)) return isnan(got);
    if (d->c.input == INPUT_HUGE && sees_key) return !isfinite(got);
    return *err <= d->tol; /* NaN (an unwritten sentinel too) fails */
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
    const mha_options opt = *o;
    size_t ws_bytes = 0;
    if (mha_workspace_size(k, p, &opt, &ws_bytes) != MHA_OK) {
        snprintf(r->detail, sizeof r->detail, "workspace query failed: %s", mha_last_error());
        return CHECK_FAIL;
    }
    const int64_t total = (int64_t)d->out_floats + 2 * GUARD;
    float *buf = alloc_nan(total);
    /* Workspace starts as NaN garbage: a kernel that reads what it never wrote shows. */
    void *ws = ws_bytes ? mha_alloc(ws_bytes) : NULL;
    if (!buf || (ws_bytes && !ws)) {
        mha_free(buf);
        mha_free(ws);
        snprintf(r->detail, sizeof r->detail, "cannot allocate %zu bytes of workspace", ws_bytes);
        return CHECK_SKIP;
    }
    if (ws) memset(ws, 0xff, ws_bytes);
    const strides s = layout_strides(d->c.layout, p->batch, p->heads, p->seq_q, p->head_dim);
    const mha_tensor_mut ov = {
        .data = buf + GUARD, .stride_b = s.sb, .stride_h = s.sh, .stride_n = s.sn};

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
        st = mha_attend(k, p, &opt, &d->qv, &d->kv, &d->vv, &ov, ws, ws_bytes);
    }
    crash_armed = 0;
    for (int i = 0; i < 4; i++) sigaction(sigs[i], &old[i], NULL);
    int result = CHECK_PASS;
    if (sig != 0) {
        snprintf(r->detail, sizeof r->detail, "crashed with signal %d (%s)", sig, strsignal(sig));
        result = CHECK_FAIL;
    } else if (st != MHA_OK) {
        snprintf(r->detail, sizeof r->detail, "returned %s: %s", mha_status_str(st),
                 mha_last_error());
        result = CHECK_FAIL;
    } else {
        int64_t bad = 0;
        for (int64_t b = 0; b < p->batch; b++)
            for (int64_t h = 0; h < p->heads; h++)
                for (int64_t i = 0; i < p->seq_q; i++)
                    for (int64_t c = 0; c < p->head_dim; c++) {
                        float *e = (float *)ov.data + b * s.sb + h * s.sh + i * s.sn + c;
                        const double want =
                            d->ref[((b * p->heads + h) * p->seq_q + i) * p->head_dim + c];
                        double err = fabs((double)*e - want);
                        uint32_t bits;
                        memcpy(&bits, e, sizeof bits);
                        if (bits == SENTINEL || !element_ok(d, i, want, *e, &err)) {
                            if (bad++ == 0) {
                                snprintf(r->detail, sizeof r->detail,
                                         "first bad element (b=%lld, h=%lld, i=%lld, j=%lld): got "
                                         "%.9g%s, "
                                         "want %.9g%s, |diff| %.3g > tol %.3g",
                                         (long long)b, (long long)h, (long long)i, (long long)c,
                                         (double)*e, bits == SENTINEL ? " (never written)" : "",
                                         want,
                                         d->c.input == INPUT_HUGE
                                             ? " (scores overflow float32: want non-finite)"
                                             : "",
                                         err, d->tol);
                            }
                            r->max_err = INFINITY;
                        } else if (isfinite(err) && err > r->max_err) {
                            r->max_err = err;
                        }
                        memcpy(e, &SENTINEL, sizeof(float)); /* for the stray-write scan */
                    }
        if (bad) {
            size_t len = strlen(r->detail);
            snprintf(r->detail + len, sizeof r->detail - len, "; %lld bad elements",
                     (long long)bad);
            result = CHECK_FAIL;
        }
        /* Everything not a view element (guards, layout gaps) must be untouched. */
        for (int64_t i = 0; i < total && result == CHECK_PASS; i++) {
            uint32_t bits;
            memcpy(&bits, &buf[i], sizeof bits);
            if (bits != SENTINEL) {
                snprintf(r->detail, sizeof r->detail,
                         "stray write at float offset %lld of the output allocation (%s)",
                         (long long)(i - GUARD),
                         i < GUARD || i >= GUARD + (int64_t)d->out_floats ? "guard zone"
                                                                          : "layout gap");
                result = CHECK_FAIL;
            }
        }
    }
    mha_free(buf);
    mha_free(ws);
    return result;
}
