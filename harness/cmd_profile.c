/* cmd_profile.c - `mhabench profile`: where a kernel's time goes. In a build with
 * -Dphase_timing=true the SIMD kernels count cycles per phase (packing and
 * output, Q.K^T, softmax, P.V); this runs one shape repeatedly and prints the
 * split with the achieved rate. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "commands.h"
#include "meas_core.h"
#include "fmt_results.h"
#include "stats.h"
#include "opts.h"
#include "util.h"

static const opt_row ROWS[] = {
    {"kernel", required_argument, 'k', 0, "K|auto", OPT_REQUIRED,
     "a kernel from `mhabench list`, or auto (mha_select's choice for the shape)"},
    {"batch", required_argument, 'b', 0, "B", 0, "batch (default 1)"},
    {"heads", required_argument, 'H', 0, "H", 0, "query heads (default 8)"},
    {"kv-heads", required_argument, 'G', 0, "G", 0, "key/value heads, dividing H (default H)"},
    {"seq", required_argument, 'n', 0, "N", OPT_REQUIRED, "query length"},
    {"seq-kv", required_argument, 'm', 0, "M", 0, "key/value length (default N)"},
    {"head-dim", required_argument, 'd', 0, "D", OPT_REQUIRED, "head dimension"},
    {"causal", no_argument, 'c', 0, NULL, 0, "bottom-right aligned causal mask"},
    {"threads", required_argument, 't', 0, "T", 0, "threads (0 = all cores, default 1)"},
    {"seconds", required_argument, 's', 0, "S", 0, "how long to run (default 2)"},
    {"block-q", required_argument, 'Q', 0, "BQ", 0,
     "query block (default: the cache model, mha_default_blocks)"},
    {"block-kv", required_argument, 'K', 0, "BK", 0, "key/value block (default: the cache model)"},
    {"split", required_argument, 'S', 0, "0|1|2", 0,
     "work split: 0 the kernel's choice, 1 per head, 2 per (head, query block)"},
    {"samples", required_argument, 'N', 0, "COUNT", 0,
     "instead, COUNT single-call samples, each bracketed by the interference probe (meas_core.h); "
     "one line per sample with its evidence, then the median and its 95% interval over all "
     "samples and over the undisturbed ones"},
    {"dtype", required_argument, 'T', 0, "D", 0,
     "the element type of Q, K, V and O: fp32 (default), bf16 or fp16; inputs uniform in "
     "[-1, 1)"},
    OPTS_VARIANT_ROWS,
    {"layer", no_argument, 'L', 0, NULL, 0,
     "the full layer (mha_forward, self-attention over --seq tokens, d_model = heads x "
     "head-dim, weights and inputs in --dtype) with K its attention kernel; then the attention "
     "core alone on the same problem, and the share the rest (the four projections) takes"},
    OPTS_HELP,
};
enum { NROWS = sizeof ROWS / sizeof ROWS[0] };

static void usage(FILE *f) {
    opts_usage(f, "profile", NULL, ROWS, NROWS, NULL);
    fputs("Runs one shape for about S seconds (default 2) and prints GFLOP/s and, in a build\n"
          "configured with -Dphase_timing=true, the share of cycles per phase. Knobs left out\n"
          "come from the cache model (mha_default_blocks), as for an explicit --kernel.\n",
          f);
    opts_print(f, ROWS, NROWS);
}

/* Prints the median GFLOP/s of n samples with its 95% interval. */
static void print_median(const char *what, double *rates, int n) {
    if (n == 0) {
        printf("%s: no samples\n", what);
        return;
    }
    double lo, hi;
    const double med = median_inplace(rates, n);
    const double cov = median_interval(rates, n, 0.95, &lo, &hi);
    printf("%s: %d samples, median %.1f GFLOP/s, interval [%.1f, %.1f] (%.1f%% coverage)\n", what,
           n, med, lo, hi, 100 * cov);
}

/* --samples: n guarded samples, a line each, then the medians. */
static int guarded_samples(const meas_call *c, int n, int threads, double flops) {
    double *all = xrealloc_or_exit(NULL, (size_t)n, 2 * sizeof(double), "profile");
    double *kept = all + n;
    int nkept = 0;
    for (int i = 0; i < n; i++) {
        double t;
        meas_evidence ev;
        if (meas_sample_guarded(c, threads, &t, &ev) != MHA_OK) {
            errorf("profile: %s", mha_last_error());
            free(all);
            return -1;
        }
        all[i] = flops / t * 1e-9;
        const int bad = meas_disturbed(&ev, MEAS_POLICY.probe_min);
        if (!bad) kept[nkept++] = all[i];
        printf("sample %4d  %8.3f ms  %7.1f GFLOP/s  probe %.3f  core %.3f  preempted %ld  stolen "
               "%.3f s%s\n",
               i, t * 1e3, all[i], ev.probe, ev.probe_core, ev.preempted, ev.stolen,
               bad ? "  disturbed" : "");
    }
    print_median("all", all, n);
    print_median("undisturbed", kept, nkept);
    free(all);
    return 0;
}

/* Times one prepared shape for about seconds (at least 5 calls): the median
 * ms per call (robust to a shared machine's bursts), 0 after a message. */
static double time_shape(meas_pool *pool, const mha_kernel *k, const meas_shape *s,
                         const mha_options *o, double seconds) {
    meas_call call;
    const char *why = meas_prepare(pool, k, s, o, &call);
    if (why) {
        errorf("profile: %s", why);
        return 0;
    }
    if (meas_run(&call) != MHA_OK) { /* warm-up */
        errorf("profile: %s", mha_last_error());
        return 0;
    }
    enum { MAX_CALLS = 10000 };
    double *times = xrealloc_or_exit(NULL, MAX_CALLS, sizeof(double), "profile");
    mha_status st;
    const int n = meas_repeat(&call, times, 5, MAX_CALLS, seconds, &st);
    const double ms = st == MHA_OK && n > 0 ? median_inplace(times, n) * 1e3 : 0;
    if (st != MHA_OK) errorf("profile: %s", mha_last_error());
    free(times);
    return ms;
}

/* --layer: the layer of p's shape (self-attention, d_model = heads x
 * head_dim, in p's dtype) with kernel k, then the attention core alone. */
static int profile_layer(const mha_kernel *k, const mha_problem *p, const mha_options *o,
                         double seconds) {
    meas_shape s = meas_shape_of(p);
    s.nkv = s.nq;
    s.kv_dtype = MHA_F32;
    s.layer = 1;
    const mha_layer L = meas_layer(&s, NULL);
    const mha_layer_shape ls = {s.b, s.nq, s.nkv, s.causal, 0.0f};
    size_t ws;
    if (mha_forward_workspace_size(k, &L, &ls, o, &ws) != MHA_OK) {
        errorf("profile: %s", mha_last_error());
        return EXIT_USAGE;
    }
    meas_pool pool;
    meas_pool_init(&pool, 12345);
    const double ms = time_shape(&pool, k, &s, o, seconds);
    s.layer = 0;
    const double ams = ms > 0 ? time_shape(&pool, k, &s, o, seconds / 2) : 0;
    meas_pool_release(&pool);
    if (ms <= 0 || ams <= 0) return EXIT_USAGE;
    const mha_problem ap = meas_problem(&s);
    printf("layer kernel %s B=%lld N=%lld d_model=%lld H=%lld KV=%lld causal=%d dtype=%s "
           "threads=%d: %.3f ms/call (median), %.1f GFLOP/s\n",
           mha_kernel_name(k), (long long)s.b, (long long)s.nq, (long long)L.d_model,
           (long long)s.h, (long long)s.kv, s.causal, mha_dtype_name(s.dtype),
           mha_resolve_threads(o), ms, mha_forward_flops(&L, &ls) / ms * 1e-6);
    printf("attention core alone: %.3f ms/call (%.1f%% of the layer), %.1f GFLOP/s; the rest "
           "(four projections, packing): %.1f%%\n",
           ams, 100 * ams / ms, mha_problem_flops(&ap) / ams * 1e-6, 100 * (1 - ams / ms));
    return 0;
}

/* profile's command line. */
typedef struct {
    const char *kname;
    int64_t B, H, G, N, M, d, T, BQ, BK, SP, NS;
    double seconds;
    int causal, layer;
    variant_args var;
    mha_dtype dt;
} profile_args;

/* Parses argv into *a. Returns 0 to go on, 1 when --help has been printed,
 * -1 after a message. */
static int parse_profile_args(int argc, char **argv, profile_args *a) {
    *a = (profile_args){.B = 1, .H = 8, .T = 1, .seconds = 2.0, .dt = MHA_F32};
    opts_parser op;
    opts_init(&op, "profile", ROWS, NROWS);
    for (int c; (c = opts_next(&op, argc, argv)) != -1;) {
        int ok = 1;
        switch (c) {
        case 'k':
            a->kname = optarg;
            break;
        case 'b':
            ok = parse_i64("--batch", optarg, 1, 1 << 20, &a->B);
            break;
        case 'H':
            ok = parse_i64("--heads", optarg, 1, 1 << 20, &a->H);
            break;
        case 'G':
            ok = parse_i64("--kv-heads", optarg, 1, 1 << 20, &a->G);
            break;
        case 'n':
            ok = parse_i64("--seq", optarg, 1, 1 << 30, &a->N);
            break;
        case 'm':
            ok = parse_i64("--seq-kv", optarg, 1, 1 << 30, &a->M);
            break;
        case 'd':
            ok = parse_i64("--head-dim", optarg, 1, 1 << 16, &a->d);
            break;
        case 'c':
            a->causal = 1;
            break;
        case 'L':
            a->layer = 1;
            break;
        case 'W':
        case 'C':
        case 'Z':
        case 'V':
            ok = variant_arg("profile", c, optarg, &a->var) == 1;
            break;
        case 't':
            ok = parse_i64("--threads", optarg, 0, 4096, &a->T);
            break;
        case 's':
            ok = parse_double("--seconds", optarg, 0.0, 3600.0, 1, &a->seconds);
            break;
        case 'Q':
            ok = parse_i64("--block-q", optarg, 1, 1 << 20, &a->BQ);
            break;
        case 'K':
            ok = parse_i64("--block-kv", optarg, 1, 1 << 20, &a->BK);
            break;
        case 'S':
            ok = parse_i64("--split", optarg, 0, 2, &a->SP);
            break;
        case 'N':
            ok = parse_i64("--samples", optarg, 1, 100000, &a->NS);
            break;
        case 'T':
            ok = dtype_named("profile: --dtype", optarg, 0, &a->dt);
            break;
        case 'h':
            usage(stdout);
            return 1;
        default:
            usage(stderr);
            return -1;
        }
        if (!ok) return -1;
    }
    if (!a->kname || a->N == 0 || a->d == 0) {
        errorf("profile: --kernel, --seq and --head-dim are required");
        usage(stderr);
        return -1;
    }
    if (a->layer && variant_any(&a->var)) {
        errorf("profile: --layer times the dense layer; --window, --softcap, --sinks and "
               "--head-dim-v are for the attention core");
        return -1;
    }
    return 0;
}

/* Runs the prepared call for about seconds and prints its rate and, where
 * the build counts them, the share of each phase's cycles. */
static void time_with_phases(meas_call *call, const mha_kernel *k, const mha_problem *p,
                             const mha_options *o, double seconds) {
    uint64_t cyc[4];
    mha_phase_cycles(cyc, 1);
    int calls = 0;
    double t;
    meas_for(call, seconds, &calls, &t);
    const int have = mha_phase_cycles(cyc, 1);
    const double gf = mha_problem_flops(p) * calls / t * 1e-9;
    const mha_dtype dt = p->dtype;
    const meas_shape s = meas_shape_of(p);
    char var[96];
    printf("kernel %s B=%lld H=%lld KV=%lld Nq=%lld Nkv=%lld d=%lld causal=%d%s %sthreads=%d: %d "
           "calls, %.3f ms/call, %.1f GFLOP/s (visible pairs)\n",
           mha_kernel_name(k), (long long)p->batch, (long long)p->heads, (long long)p->kv_heads,
           (long long)p->seq_q, (long long)p->seq_kv, (long long)p->head_dim, p->causal,
           meas_variant_text(&s, var, sizeof var),
           dt == MHA_F32    ? ""
           : dt == MHA_BF16 ? "bf16 "
                            : "fp16 ",
           mha_resolve_threads(o), calls, t / calls * 1e3, gf);
    if (have) {
        const double tot = (double)(cyc[0] + cyc[1] + cyc[2] + cyc[3]);
        printf(
            "phases (share of counted cycles): pack+output %.1f%%  Q.K^T %.1f%%  softmax %.1f%%  "
            "P.V %.1f%%\n",
            100 * cyc[0] / tot, 100 * cyc[1] / tot, 100 * cyc[2] / tot, 100 * cyc[3] / tot);
    } else {
        printf("phases: not counted in this build (meson configure -Dphase_timing=true)\n");
    }
}

/* The attention core of p with kernel k: --samples guarded samples, or a
 * timed run with its phases. 0, or EXIT_USAGE after a message. */
static int profile_attend(const mha_kernel *k, const mha_problem *p, const mha_options *o,
                          const profile_args *a) {
    size_t ws_bytes;
    if (mha_workspace_size(k, p, o, &ws_bytes) != MHA_OK) {
        errorf("profile: %s", mha_last_error());
        return EXIT_USAGE;
    }
    meas_pool pool;
    meas_pool_init(&pool, 12345);
    meas_call call;
    int rc = EXIT_USAGE;
    const meas_shape shp = meas_shape_of(p); /* inputs in its dtype, the sinks seeded */
    if (meas_prepare(&pool, k, &shp, o, &call)) {
        errorf("profile: cannot allocate inputs and %zu bytes of workspace", ws_bytes);
        goto done;
    }
    if (meas_run(&call) != MHA_OK) { /* warm-up */
        errorf("profile: %s", mha_last_error());
        goto done;
    }
    if (a->NS > 0) {
        rc = guarded_samples(&call, (int)a->NS, mha_resolve_threads(o), mha_problem_flops(p))
                 ? EXIT_USAGE
                 : 0;
        goto done;
    }
    time_with_phases(&call, k, p, o, a->seconds);
    rc = 0;
done:
    meas_pool_release(&pool);
    return rc;
}

int cmd_profile(int argc, char **argv) {
    profile_args a;
    const int parsed = parse_profile_args(argc, argv, &a);
    if (parsed != 0) return parsed > 0 ? 0 : EXIT_USAGE;
    if (!check_isa_env()) return EXIT_USAGE;
    mha_problem p = {.batch = a.B,
                     .heads = a.H,
                     .kv_heads = a.G ? a.G : a.H,
                     .seq_q = a.N,
                     .seq_kv = a.M ? a.M : a.N,
                     .head_dim = a.d,
                     .causal = a.causal,
                     .scale = 0.0f,
                     .dtype = a.dt,
                     .kv_dtype = a.dt};
    variant_apply(&a.var, &p);
    mha_options o = {
        .threads = (int)a.T, .block_q = (int)a.BQ, .block_kv = (int)a.BK, .split = (int)a.SP};
    /* "auto" as everywhere else: mha_select's kernel and knobs for this shape */
    const mha_kernel *k = resolve_kernel(a.kname, &p, &o);
    results_bind_threads(mha_resolve_threads(&(mha_options){.threads = (int)a.T})); /* as sweep */
    if (!k) return EXIT_USAGE;
    if (strcmp(a.kname, "auto") == 0) printf("auto: %s\n", mha_kernel_name(k));
    if (a.layer) return profile_layer(k, &p, &o, a.seconds);
    return profile_attend(k, &p, &o, &a);
}
