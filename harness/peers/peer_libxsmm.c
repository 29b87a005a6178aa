/* peer_libxsmm.c - peer "libxsmm": the attention core as a libxsmm user
 * writes it (libxsmm 1.17 as Debian ships it): JIT-dispatched small GEMMs of
 * at most 64 x 64 x d per (batch, head, query block), S_blk = Q_blk K^T, a
 * plain-C row softmax, O_blk = P_blk V, OpenMP over the blocks. Built when
 * meson finds libxsmm (MHA_HAVE_XSMM); README "Peers" says why it is so. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libxsmm.h>

#include "peer.h"

/* libxsmm's JIT targets small GEMMs: its default "small" bound is
 * LIBXSMM_CONFIG_MAX_M/N/K = 64 (what it generates without falling back to
 * BLAS when called through libxsmm_gemm). Blocks are at most that. */
enum { BLOCK = 64 };

struct peer_inst {
    mha_problem p;
    int threads;
    int64_t bq, nqb, nq_pad; /* query blocks: nqb of bq rows, padded to nq_pad */
    int64_t bk, nkb, nk_pad; /* key blocks: nkb of bk keys, padded to nk_pad */
    float scale;
    /* ours: Q [B*H][nq_pad][d] (zero pad rows), K [B*KV][Nkv][d] as given,
     * K^T [B*KV][d][nk_pad] (written by every run, pad columns zero),
     * V [B*KV][nk_pad][d] (zero pad rows), O [B*H][nq_pad][d], and one score
     * block [bq][nk_pad] per thread */
    float *q, *k, *kt, *v, *o, *s;
    libxsmm_smmfunction qk, pv;
    char settings[256];
};

static int xsmm_probe(char *why, size_t len) {
    libxsmm_init();
    /* a kernel of the shape the adapter uses says whether the JIT works here */
    const float one = 1.0f, zero = 0.0f;
    if (!libxsmm_smmdispatch(BLOCK, BLOCK, BLOCK, NULL, NULL, NULL, &one, &zero, NULL, NULL)) {
        snprintf(why, len, "libxsmm %s: no JIT kernel for a 64x64x64 fp32 GEMM on target %s",
                 LIBXSMM_VERSION, libxsmm_get_target_arch());
        return 0;
    }
    return 1;
}

static const char *xsmm_version(void) {
    static char buf[128];
    snprintf(buf, sizeof buf, "libxsmm %d.%d.%d (%s branch, JIT target %s)", LIBXSMM_VERSION_MAJOR,
             LIBXSMM_VERSION_MINOR, LIBXSMM_VERSION_UPDATE, LIBXSMM_BRANCH,
             libxsmm_get_target_arch());
    return buf;
}

static int xsmm_takes(const mha_problem *p, char *why, size_t len) {
    const mha_dtype kv = mha_problem_kv_dtype(p);
    if (!peer_takes_variants(p, 0, why, len)) return 0;
    if (p->dtype != MHA_F32 || kv != MHA_F32) {
        /* libxsmm 1.17 has bf16 GEMMs (libxsmm_bsmmdispatch), but they want
         * the A operand packed in VNNI pairs along k; fp16 and int8 K/V it
         * has no GEMM for at all */
        snprintf(why, len,
                 "%s Q / %s K,V: this adapter is fp32 only (libxsmm 1.17's bf16 GEMMs need "
                 "VNNI-packed operands, not wired up; no fp16 or scaled-int8 GEMM)",
                 mha_dtype_name(p->dtype), mha_dtype_name(kv));
        return 0;
    }
    if (p->head_dim > INT32_MAX / 2 || p->seq_kv > INT32_MAX / 2) {
        snprintf(why, len, "head_dim %lld / seq_kv %lld too large for libxsmm_blasint",
                 (long long)p->head_dim, (long long)p->seq_kv);
        return 0;
    }
    return 1;
}

static void xsmm_release(peer_inst *pi) {
    if (!pi) return;
    mha_free(pi->q);
    mha_free(pi->k);
    mha_free(pi->kt);
    mha_free(pi->v);
    mha_free(pi->o);
    mha_free(pi->s);
    free(pi);
}

/* n blocks of at most BLOCK covering len: *blk rows each, *padded in all. */
static void blocks(int64_t len, int64_t *blk, int64_t *n, int64_t *padded) {
    *n = (len + BLOCK - 1) / BLOCK;
    *blk = (len + *n - 1) / *n;
    *padded = *blk * *n;
}

static float *alloc_floats(int64_t a, int64_t b, int64_t c) {
    size_t n;
    if (__builtin_mul_overflow((size_t)a, (size_t)b, &n) ||
        __builtin_mul_overflow(n, (size_t)c, &n) || __builtin_mul_overflow(n, sizeof(float), &n))
        return NULL;
    float *f = mha_alloc(n);
    if (f) memset(f, 0, n);
    return f;
}

/* glibc's vector expf (libmvec): declared simd so that the exp loop below
 * calls it a vector at a time (GCC does so for libm's own declaration only
 * under -ffast-math, whose finite-math assumptions we do not want). */
#ifndef MHA_NO_MVEC
#pragma omp declare simd notinbranch
extern float expf(float);
#endif

/* The softmax of one score row (ours, written once: plain C with OpenMP simd
 * reductions the compiler vectorises at the build's baseline width, expf
 * from libm/libmvec; not the project's tuned kernels): the first kend of
 * ncols columns are the keys the row sees; the rest (masked, padding)
 * become 0. scale is applied here: libxsmm's JIT kernels take alpha = 1. */
static void softmax_row(float *restrict s, int64_t kend, int64_t ncols, float scale) {
    if (kend <= 0) { /* no visible key: P = 0, so O = 0 */
        for (int64_t j = 0; j < ncols; j++) s[j] = 0.0f;
        return;
    }
    float m = -INFINITY;
#pragma omp simd reduction(max : m)
    for (int64_t j = 0; j < kend; j++) {
        s[j] *= scale;
        m = s[j] > m ? s[j] : m;
    }
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < kend; j++) {
        const float e = expf(s[j] - m);
        s[j] = e;
        sum += e;
    }
    const float inv = 1.0f / sum;
#pragma omp simd
    for (int64_t j = 0; j < kend; j++) s[j] *= inv;
    for (int64_t j = kend; j < ncols; j++) s[j] = 0.0f;
}

static void attend(peer_inst *pi) {
    const mha_problem *p = &pi->p;
    const int64_t H = p->heads, G = H / p->kv_heads, Nq = p->seq_q, Nkv = p->seq_kv,
                  d = p->head_dim, bq = pi->bq, bk = pi->bk, nqb = pi->nqb, nkp = pi->nk_pad,
                  nqp = pi->nq_pad, off = Nkv - Nq, bkv = p->batch * p->kv_heads;
    const libxsmm_smmfunction qk = pi->qk, pv = pi->pv;
    const float scale = pi->scale;
    /* K^T per KV head, through libxsmm's transpose: the first GEMM wants
     * the keys contiguous (its A operand, column-major, untransposed: the
     * 1.17 JIT offers no transposed A) */
#pragma omp parallel for num_threads(pi->threads) schedule(static)
    for (int64_t g = 0; g < bkv; g++)
        libxsmm_otrans(pi->kt + g * d * nkp, pi->k + g * Nkv * d, sizeof(float), (libxsmm_blasint)d,
                       (libxsmm_blasint)Nkv, (libxsmm_blasint)d, (libxsmm_blasint)nkp);
    const int64_t tasks = p->batch * H * nqb;
#pragma omp parallel for num_threads(pi->threads) schedule(dynamic, 1)
    for (int64_t t = 0; t < tasks; t++) {
        const int64_t bh = t / nqb, qb = t % nqb, b = bh / H, h = bh % H;
        const int64_t kvh = b * p->kv_heads + h / G, i0 = qb * bq;
        float *s = pi->s + (int64_t)omp_get_thread_num() * bq * nkp;
        const float *qblk = pi->q + (bh * nqp + i0) * d;
        const float *kt = pi->kt + kvh * d * nkp, *v = pi->v + kvh * nkp * d;
        float *oblk = pi->o + (bh * nqp + i0) * d;
        /* keys any row of the block sees (causal: the block's last row's) */
        int64_t kmax = Nkv;
        if (p->causal) {
            kmax = i0 + bq + off;
            kmax = kmax < 0 ? 0 : kmax > Nkv ? Nkv : kmax;
        }
        const int64_t nk = (kmax + bk - 1) / bk, ncols = nk * bk;
        memset(oblk, 0, (size_t)(bq * d) * sizeof(float));
        if (nk == 0) continue;
        /* column-major: S^T_blk (bk x bq) = K^T block (bk x d, ld nk_pad)
         * times Q_blk^T (d x bq): row-major S_blk [bq][nk_pad] */
        /* libxsmm's batch recipe: each call names the next call's operands
         * (prefetch strategy chosen by CPUID at dispatch); the last names
         * itself, so nothing is touched out of bounds */
        for (int64_t kb = 0; kb < nk; kb++) {
            const int64_t nx = kb + 1 < nk ? kb + 1 : kb;
            qk(kt + kb * bk, qblk, s + kb * bk, kt + nx * bk, qblk, s + nx * bk);
        }
        for (int64_t r = 0; r < bq; r++) {
            int64_t kend = Nkv;
            if (p->causal) {
                kend = i0 + r + off + 1;
                kend = kend < 0 ? 0 : kend > Nkv ? Nkv : kend;
            }
            softmax_row(s + r * nkp, kend, ncols, scale);
        }
        /* O^T_blk (d x bq) += V^T block (d x bk) times P^T block (bk x bq) */
        for (int64_t kb = 0; kb < nk; kb++) {
            const int64_t nx = kb + 1 < nk ? kb + 1 : kb;
            pv(v + kb * bk * d, s + kb * bk, oblk, v + nx * bk * d, s + nx * bk, oblk);
        }
    }
}

static peer_inst *xsmm_prepare(const mha_problem *p, int threads, const void *q, const void *k,
                               const void *v, const mha_extras *x, char *why, size_t len) {
    (void)x; /* takes() refuses sinks and the packed and paged layouts */
    if (!peer_prepare_ok(p, xsmm_takes, q, k, v, why, len)) return NULL;
    peer_inst *pi = calloc(1, sizeof *pi);
    if (!pi) {
        snprintf(why, len, "out of memory");
        return NULL;
    }
    libxsmm_init();
    pi->p = *p;
    pi->threads = mha_resolve_threads(&(mha_options){.threads = threads});
    pi->scale = mha_problem_scale(p);
    blocks(p->seq_q, &pi->bq, &pi->nqb, &pi->nq_pad);
    blocks(p->seq_kv, &pi->bk, &pi->nkb, &pi->nk_pad);
    const int64_t BH = p->batch * p->heads, BKV = p->batch * p->kv_heads, d = p->head_dim,
                  Nq = p->seq_q, Nkv = p->seq_kv;
    pi->q = alloc_floats(BH, pi->nq_pad, d);
    pi->k = alloc_floats(BKV, Nkv, d);
    pi->kt = alloc_floats(BKV, d, pi->nk_pad);
    pi->v = alloc_floats(BKV, pi->nk_pad, d);
    pi->o = alloc_floats(BH, pi->nq_pad, d);
    pi->s = alloc_floats(pi->threads, pi->bq, pi->nk_pad);
    if (!pi->q || !pi->k || !pi->kt || !pi->v || !pi->o || !pi->s) {
        snprintf(why, len, "out of memory (or a byte count that overflows)");
        xsmm_release(pi);
        return NULL;
    }
    const size_t row = (size_t)d * sizeof(float);
    for (int64_t bh = 0; bh < BH; bh++)
        memcpy(pi->q + bh * pi->nq_pad * d, (const float *)q + bh * Nq * d, (size_t)Nq * row);
    memcpy(pi->k, k, (size_t)(BKV * Nkv) * row);
    for (int64_t g = 0; g < BKV; g++)
        memcpy(pi->v + g * pi->nk_pad * d, (const float *)v + g * Nkv * d, (size_t)Nkv * row);

    const float one = 1.0f, zero = 0.0f;
    const libxsmm_blasint bq = (libxsmm_blasint)pi->bq, bk = (libxsmm_blasint)pi->bk,
                          dd = (libxsmm_blasint)d, nkp = (libxsmm_blasint)pi->nk_pad;
    const int prefetch = LIBXSMM_PREFETCH_AUTO;
    pi->qk = libxsmm_smmdispatch(bk, bq, dd, &nkp, &dd, &nkp, &one, &zero, NULL, &prefetch);
    pi->pv = libxsmm_smmdispatch(dd, bq, bk, &dd, &nkp, &dd, &one, &one, NULL, &prefetch);
    if (!pi->qk || !pi->pv) {
        snprintf(why, len, "libxsmm: no JIT kernel for %s (m=%d n=%d k=%d) on target %s",
                 !pi->qk ? "S = Q K^T" : "O += P V", !pi->qk ? bk : dd, bq, !pi->qk ? dd : bk,
                 libxsmm_get_target_arch());
        xsmm_release(pi);
        return NULL;
    }
    snprintf(pi->settings, sizeof pi->settings,
             "threads=%d (OpenMP num_threads over batch x head x query block) gemm+softmax+gemm, "
             "blocks q=%lld kv=%lld (JIT smm, prefetch auto, target %s), K^T by libxsmm_otrans per "
             "call, "
             "S block materialised fp32, softmax plain C (expf)",
             pi->threads, (long long)pi->bq, (long long)pi->bk, libxsmm_get_target_arch());
    attend(pi); /* the untimed warm-up call (JITs the transpose) */
    return pi;
}

static int xsmm_run(peer_inst *pi, double *seconds, char *why, size_t len) {
    if (seconds) *seconds = -1;
    if (!pi) {
        snprintf(why, len, "run: no prepared instance");
        return -1;
    }
    attend(pi);
    return 0;
}

static int xsmm_output(peer_inst *pi, void *out, char *why, size_t len) {
    if (!pi || !out) {
        snprintf(why, len, "output: NULL instance or buffer");
        return -1;
    }
    const mha_problem *p = &pi->p;
    const int64_t d = p->head_dim;
    for (int64_t bh = 0; bh < p->batch * p->heads; bh++)
        memcpy((float *)out + bh * p->seq_q * d, pi->o + bh * pi->nq_pad * d,
               (size_t)(p->seq_q * d) * sizeof(float));
    return 0;
}

static const char *xsmm_settings(const peer_inst *pi) {
    return pi ? pi->settings : "";
}

const peer_ops peer_libxsmm = {
    .name = "libxsmm",
    .probe = xsmm_probe,
    .version = xsmm_version,
    .takes = xsmm_takes,
    .prepare = xsmm_prepare,
    .run = xsmm_run,
    .output = xsmm_output,
    .settings = xsmm_settings,
    .release = xsmm_release,
    .shutdown = NULL,
};
