/* bench_probe.c - which interference probe sees what slows the kernels?
 * The evidence behind MEAS_PROBE_MIN and the probe loop (harness/meas_core.h,
 * kernels/peak.c; README, "Interference evidence"). For --seconds it times
 * one call at a time of each kernel in turn on one shape on --threads threads (default 1), and
 * brackets every call with both probes at the active ISA on every thread
 * (the slowest thread counts), about 200 us each before and after: the FMA peak loop (FMA pipes
 * only) and the interference loop (FMAs, L1 loads, adds and integer operations at once). Then, per
 * probe and threshold, how many calls that ran more than 5% (10%) slower
 * than their kernel's median the probe flagged (the slower of its two runs
 * below the threshold times its best rate), and how many calls within 2% of
 * the median it flagged wrongly. No deliberate disturbance: it records what
 * the host does, so run it with nothing else on the machine (one instance
 * per vCPU, each pinned with taskset, sees every core).
 * A benchmark, not a test:
 *   taskset -c 0 build/tests/bench_probe [--seconds 600] [--kernels K1,K2,...]
 *       [--threads 1] [--heads 12] [--seq 1024] [--head-dim 64] [--causal 0|1]
 *       [--log F] */
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mha.h"
#include "mha_private.h"
#include "stats.h" /* now_s, median_inplace */

enum { MAX_K = 8, NPROBE = 2, NTH = 6 };
static const char *const PROBE_NAME[NPROBE] = {"fma-only", "interference"};
static const double TH[NTH] = {0.60, 0.65, 0.70, 0.75, 0.80, 0.85};

typedef struct {
    int k;            /* kernel index */
    double t;         /* call seconds */
    double p[NPROBE]; /* slower of the probe's two runs, FLOP/s */
} sample;

/* The probe on every one of `threads` threads at once (as meas_core.c runs
 * it): the slowest thread's rate. */
static double rate(double (*f)(int64_t), int64_t it, int threads) {
    double slowest = 1e300;
#pragma omp parallel num_threads(threads) reduction(min : slowest)
    {
        const double t0 = now_s(), flop = f(it), r = flop / (now_s() - t0);
        slowest = r < slowest ? r : slowest;
    }
    return slowest;
}

static int64_t calibrate(double (*f)(int64_t)) {
    int64_t it = 64;
    for (;;) {
        const double t0 = now_s();
        f(it);
        if (now_s() - t0 >= 200e-6 || it > ((int64_t)1 << 30)) return it;
        it *= 2;
    }
}

static void fill(float *x, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)(seed >> 8) / (float)(1u << 24) * 2.0f - 1.0f;
    }
}

int main(int argc, char **argv) {
    double seconds = 600;
    char kernels[256] = "tiled.avx2,tiled.avx512,flash.avx2,flash.avx512";
    int heads = 12, seq = 1024, dim = 64, causal = 1, threads = 1;
    const char *log_path = NULL;
    static const struct option opts[] = {{"seconds", required_argument, 0, 's'},
                                         {"kernels", required_argument, 0, 'k'},
                                         {"heads", required_argument, 0, 'h'},
                                         {"seq", required_argument, 0, 'n'},
                                         {"head-dim", required_argument, 0, 'd'},
                                         {"causal", required_argument, 0, 'c'},
                                         {"log", required_argument, 0, 'l'},
                                         {"threads", required_argument, 0, 't'},
                                         {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 's':
            seconds = atof(optarg);
            break;
        case 'k':
            snprintf(kernels, sizeof kernels, "%s", optarg);
            break;
        case 'h':
            heads = atoi(optarg);
            break;
        case 'n':
            seq = atoi(optarg);
            break;
        case 'd':
            dim = atoi(optarg);
            break;
        case 'c':
            causal = atoi(optarg);
            break;
        case 'l':
            log_path = optarg;
            break;
        case 't':
            threads = atoi(optarg);
            break;
        default:
            fprintf(stderr, "usage: see the comment at the top of bench_probe.c\n");
            return 2;
        }
    }
    if (seconds <= 0 || threads < 1 || heads < 1 || seq < 1 || dim < 1 ||
        (causal != 0 && causal != 1)) {
        fprintf(stderr,
                "bench_probe: --seconds, --threads, --heads, --seq, --head-dim must be positive, "
                "--causal 0 or 1\n");
        return 2;
    }
    const mha_kernel *kl[MAX_K];
    const char *kname[MAX_K];
    int nk = 0;
    for (char *t = strtok(kernels, ","); t && nk < MAX_K; t = strtok(NULL, ",")) {
        const mha_kernel *k = mha_kernel_find(t);
        if (!k) {
            fprintf(stderr, "bench_probe: %s\n", mha_last_error());
            return 2;
        }
        if (mha_kernel_supported(k) != MHA_OK) {
            fprintf(stderr, "bench_probe: skipping %s: %s\n", t, mha_last_error());
            continue;
        }
        kname[nk] = t;
        kl[nk++] = k;
    }
    if (nk == 0) {
        fprintf(stderr, "bench_probe: no kernel runs here\n");
        return 0;
    }
    const mha_problem p = {.batch = 1,
                           .heads = heads,
                           .kv_heads = heads,
                           .seq_q = seq,
                           .seq_kv = seq,
                           .head_dim = dim,
                           .causal = causal,
                           .scale = 0.0f,
                           .dtype = MHA_F32,
                           .kv_dtype = MHA_F32};
    const mha_options o = {.threads = threads};
    size_t ws = 0;
    for (int j = 0; j < nk; j++) {
        size_t w;
        if (mha_workspace_size(kl[j], &p, &o, &w) != MHA_OK) {
            fprintf(stderr, "bench_probe: %s: %s\n", kname[j], mha_last_error());
            return 2;
        }
        ws = w > ws ? w : ws;
    }
    const size_t n = (size_t)heads * (size_t)seq * (size_t)dim;
    float *q = mha_alloc(n * sizeof *q), *k = mha_alloc(n * sizeof *k),
          *v = mha_alloc(n * sizeof *v), *out = mha_alloc(n * sizeof *out);
    void *work = mha_alloc(ws ? ws : 64);
    const size_t cap = (size_t)(seconds * 2000 + 16); /* calls of 0.5 ms at the least */
    sample *s = malloc(sizeof *s * cap);
    if (!q || !k || !v || !out || !work || !s) {
        fprintf(stderr, "bench_probe: out of memory\n");
        return 1;
    }
    fill(q, n, 1), fill(k, n, 2), fill(v, n, 3);
    const mha_tensor qt = mha_view_bhnd(q, heads, seq, dim), kt = mha_view_bhnd(k, heads, seq, dim),
                     vt = mha_view_bhnd(v, heads, seq, dim);
    const mha_tensor_mut ot = mha_view_bhnd_mut(out, heads, seq, dim);
    const mha_isa_ops *ops = mha_ops_for(mha_isa_active());
    double (*probe[NPROBE])(int64_t) = {mha_ops_unit(ops, MHA_F32)->loop, ops->probe_loop};
    int64_t iters[NPROBE];
    for (int i = 0; i < NPROBE; i++) iters[i] = calibrate(probe[i]);
    FILE *lf = log_path ? fopen(log_path, "w") : NULL;
    if (log_path && !lf) {
        perror(log_path);
        return 1;
    }
    size_t ns = 0;
    const double t0 = now_s(), t_end = t0 + seconds;
    while (now_s() < t_end && ns < cap) {
        sample *x = &s[ns];
        x->k = (int)(ns % (size_t)nk);
        double before[NPROBE];
        for (int i = 0; i < NPROBE; i++) before[i] = rate(probe[i], iters[i], threads);
        const double c0 = now_s();
        if (mha_attend(kl[x->k], &p, &o, &qt, &kt, &vt, &ot, work, ws) != MHA_OK) {
            fprintf(stderr, "bench_probe: %s: %s\n", kname[x->k], mha_last_error());
            return 1;
        }
        x->t = now_s() - c0;
        for (int i = 0; i < NPROBE; i++) {
            const double after = rate(probe[i], iters[i], threads);
            x->p[i] = after < before[i] ? after : before[i];
        }
        if (lf)
            fprintf(lf, "%.3f %s %.6f %.4g %.4g\n", c0 - t0, kname[x->k], x->t * 1e3,
                    x->p[0] * 1e-9, x->p[1] * 1e-9);
        ns++;
    }
    if (lf) fclose(lf);
    /* Per kernel its median call; per probe its best rate (any sample). */
    double med[MAX_K], best[NPROBE] = {0, 0};
    double *tmp = malloc(sizeof *tmp * (ns ? ns : 1));
    for (int j = 0; j < nk; j++) {
        size_t m = 0;
        for (size_t i = 0; i < ns; i++)
            if (s[i].k == j) tmp[m++] = s[i].t;
        med[j] = m ? median_inplace(tmp, (int)m) : 0;
    }
    for (size_t i = 0; i < ns; i++)
        for (int r = 0; r < NPROBE; r++) best[r] = s[i].p[r] > best[r] ? s[i].p[r] : best[r];
    printf(
        "bench_probe: %zu calls in %.0f s, (1,%d,%d,%d) causal %d, %d thread%s, isa %s; medians:",
        ns, now_s() - t0, heads, seq, dim, causal, threads, threads == 1 ? "" : "s",
        mha_isa_name(mha_isa_active()));
    for (int j = 0; j < nk; j++) printf(" %s %.3f ms", kname[j], med[j] * 1e3);
    printf("\n%-13s %5s  %-22s %-22s %s\n", "probe", "below", "slow >5% flagged",
           "slow >10% flagged", "within 2% flagged (false)");
    for (int r = 0; r < NPROBE; r++)
        for (int t = 0; t < NTH; t++) {
            size_t s5 = 0, c5 = 0, s10 = 0, c10 = 0, ok = 0, f = 0;
            for (size_t i = 0; i < ns; i++) {
                const double slow = s[i].t / med[s[i].k];
                const int flag = s[i].p[r] < TH[t] * best[r];
                s5 += slow > 1.05, c5 += slow > 1.05 && flag;
                s10 += slow > 1.10, c10 += slow > 1.10 && flag;
                ok += slow <= 1.02, f += slow <= 1.02 && flag;
            }
            printf("%-13s %5.2f  %6zu / %-6zu (%3.0f%%)  %6zu / %-6zu (%3.0f%%)  %6zu / %-6zu "
                   "(%.1f%%)\n",
                   PROBE_NAME[r], TH[t], c5, s5, s5 ? 100.0 * c5 / s5 : 0, c10, s10,
                   s10 ? 100.0 * c10 / s10 : 0, f, ok, ok ? 100.0 * f / ok : 0);
        }
    free(tmp);
    free(s);
    mha_free(q), mha_free(k), mha_free(v), mha_free(out), mha_free(work);
    return 0;
}
