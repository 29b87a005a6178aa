/* cmd_sweep.c - `mhabench sweep`: every selected kernel over a grid of shapes and
 * thread counts through Google Benchmark (gbench.h), with the machine's
 * fingerprint in the JSON context, GFLOP/s and % of the measured peak per
 * benchmark, % of measured bandwidth for decode, a progress line per run, an
 * estimate-based skip of hopeless combinations (always listed), and a summary
 * of the fastest kernel per shape. Results go atomically to results/runs/. */
#include <getopt.h>
#include <math.h>
#include <omp.h>
#include <regex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "commands.h"
#include "meas_gbench.h"
#include "meas_core.h"
#include "peers/peer_check.h"
#include "peers/peer_reply.h"
#include "fmt_results.h"
#include "fmt_rows.h"
#include "shard.h"
#include "sweep/progress.h"
#include "sweep/report.h"
#include "stats.h"
#include "util.h"

enum { MAX_LIST = 64, MAX_KERNELS = 64, MAX_REPS = 1000 };
/* --peers at most (peers.c lists five) */
enum { MAX_PEERS = 8 };
#define RUNS_DIR "results/runs"

/* Every allocation in the sweep: exit 2 on an exhausted heap (util.h). */
#define sweep_realloc(p, n, size) xrealloc_or_exit((p), (n), (size), "sweep")

/* Follow-up passes (run_pass): at most this many passes in all, and the
 * relative half-width of the median interval a multi-repetition benchmark
 * is sampled down to. */
enum { SWEEP_MAX_PASSES = 4 };
#define SWEEP_TARGET_HALFWIDTH 0.02

static void usage(FILE *f) {
    fputs(
        "usage: mhabench sweep [--preset quick|full|ci|roofline] [--kernels a,b] [--seq N,..]\n"
        "                      [--seq-q N,..] [--seq-kv N,..] [--heads H,..] [--kv-heads G,..]\n"
        "                      [--head-dim D,..] [--batch B,..] [--causal 0,1] [--threads "
        "T,..|all]\n"
        "                      [--shard I/N] [--max-seconds S] [--min-time S] [--repetitions N]\n"
        "                      [--passes N] [--bind cores|none]\n"
        "                      [--dtype fp32,bf16,fp16] [--kv-dtype bf16,fp16,int8]\n"
        "                      [--peers torch,onnxruntime,openvino,onednn,libxsmm|all]\n"
        "                      [--out F.json] [--seed N] [--quiet | --verbose]\n"
        "                      [-- GOOGLE_BENCHMARK_FLAGS...]\n"
        "Benchmarks kernels over shapes through Google Benchmark; writes Google Benchmark\n"
        "JSON (context extended with the machine fingerprint) to --out, by default\n"
        "results/runs/<host>-<UTC time>.json, and prints a summary of the fastest kernel\n"
        "per shape with its speedup over naive and over blas.cblas.\n"
        "\n"
        "presets (the axis options below replace the preset's values):\n"
        "  quick  (default) seq 128,512,2048; heads 8,12; head-dim 64,128; causal 0,1;\n"
        "         threads 1,all; plus decode Nq=1 Nkv=4096 H=32 d=128 and the layer\n"
        "         (mha_forward) of BERT-base (N=512) and GPT-2 (N=1024 causal), d_model 768;\n"
        "         3 repetitions of 0.02 s shuffled within each shape (1 for naive and the\n"
        "         *.scalar kernels), one follow-up pass\n"
        "  full   seq 64..8192 (powers of two) and 197; heads 1,4,8,12,16,32; head-dim\n"
        "         32,64,80,128; batch 1,4; causal 0,1; threads 1..all; plus decode shapes\n"
        "  ci     the SIMD flash.* and tiled.* on B1 H8 N512 d64 and B1 H12 N1024 d64 causal,\n"
        "         the SIMD decode.* on decode Nq=1 Nkv=4096 H=32 d=128; threads 1,all; 9\n"
        "         repetitions in a seeded random interleaved order (for mhabench compare)\n"
        "  roofline  the roofline targets' shapes (prefill, decode MHA/GQA, BERT/GPT-2 layers),\n"
        "         5 repetitions of 0.3 s, shuffled within each shape; threads 1,all\n"
        "  The preset's decode and layer shapes are dropped when a shape axis (--seq, --seq-q, "
        "--seq-kv,\n"
        "  --heads, --kv-heads, --head-dim, --batch) is given.\n"
        "\n"
        "  --kernels      comma list; 'auto' = mha_select's choice per shape (default: every\n"
        "                 kernel that runs here, and auto except for ci)\n"
        "  --seq          self-attention lengths (Nq = Nkv)\n"
        "  --seq-q/-kv    cross-attention: every (Nq, Nkv) pair (the other defaults to --seq)\n"
        "  --kv-heads     KV head counts (GQA/MQA); values not dividing a head count are\n"
        "                 skipped for it (default: equal to heads)\n"
        "  --threads      thread counts; 'all' = every core (default 1,all)\n"
        "  --dtype        Q/O dtypes (default fp32; a layer's weights, inputs and output);\n"
        "                 each kernel runs the dtypes it takes\n"
        "  --kv-dtype     K/V storage of the decode rows (Nq = 1; default: the --dtype);\n"
        "                 the other rows store K/V in the --dtype\n"
        "  --max-seconds  skip a benchmark whose estimated time per call exceeds S (default 2);\n"
        "                 the estimate is each kernel's rate measured on B1 H1 N256 d64 at start\n"
        "  --min-time     Google Benchmark's minimum time per benchmark (quick 0.02, full 0.2,\n"
        "                 ci 0.05)\n"
        "  --repetitions  repetitions per benchmark (quick: 3, roofline: 5, interleaved within\n"
        "                 each shape; ci: 9, interleaved; given, every kernel gets them)\n"
        "  --bind         cores: pin OpenMP threads one per core through hwloc (default); none\n"
        "  --seed         seed for inputs and the interleaved order (default 1)\n"
        "  --passes N     at most N passes (default 4, quick 2): after the first, disturbed\n"
        "                 repetitions are retaken and multi-repetition benchmarks whose\n"
        "                 median interval is wider than 2% get more; 1: none\n"
        "  --peers        other libraries' attention as rows peer.<name>/<shape> of the same\n"
        "                 sweep (harness/peers; the Python ones need scripts/peers/setup-venv.sh\n"
        "                 or MHA_PEERS_PYTHON); each is checked against the float64 oracle\n"
        "                 before it is timed, and one that fails is reported, not timed\n"
        "  --shard I/N    run only part I of N of the benchmark list (fleet mode: N machines\n"
        "                 of one type run the N parts; `mhabench merge` joins their files;\n"
        "                 a part with no benchmark writes its file with no rows)\n"
        "  --quiet        no progress while it runs: the summary and the verdict only\n"
        "  --verbose      a line per repetition (and per skip), every tie and auto's choice\n"
        "                 in the summary (default: a line per finished shape and thread count,\n"
        "                 or a progress bar on a terminal)\n"
        "  after --       flags for Google Benchmark (--benchmark_filter=REGEX, ...)\n"
        "Exit status: 0 ok, 1 a benchmark failed, 2 usage or input error.\n",
        f);
}

/* ---- the grid ----------------------------------------------------------- */

typedef meas_shape shape; /* meas_core.h: attention core or the full layer */

typedef struct {
    const char *name;
    int64_t seq[16], heads[16], dims[16], batch[16], causal[2];
    int nseq, nheads, ndims, nbatch, ncausal;
    int threads_full_range; /* 1..all instead of 1,all */
    shape extra[16];        /* decode and layer shapes (or the whole list: ci, roofline) */
    int nextra;
    int extra_only; /* ci: only the listed shapes */
    double min_time;
    int repetitions;
    /* > 0: the baseline-ISA kernels (naive, *.scalar: never the fastest,
     * shown for "vs naive") get only this many repetitions */
    int baseline_reps;
    int passes;      /* --passes when not given (0: SWEEP_MAX_PASSES) */
    int interleaved; /* repetitions run one at a time in a seeded random order */
    int by_shape;    /* ... shuffled within each shape only (no input refills) */
    int ci_kernels;  /* ci: SIMD flash/tiled/decode only, each on its own shapes, no auto */
} preset;

/* An axis of a preset: the values and their count (field and n<field>). */
#define AXIS(field, ...)                                                                           \
    .field = {__VA_ARGS__}, .n##field = (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t))

#define DECODE                                                                                     \
    { 1, 32, 32, 1, 4096, 128, 0, 0 }
/* The layer shapes of issue 6: BERT-base and GPT-2 (causal), d_model 768. */
#define BERT                                                                                       \
    { 1, 12, 12, 512, 512, 64, 0, 1 }
#define GPT2                                                                                       \
    { 1, 12, 12, 1024, 1024, 64, 1, 1 }

/* The presets, as data: `--preset NAME` is a row of this table. */
static const preset PRESETS[] = {
    {
        .name = "quick",
        AXIS(seq, 128, 512, 2048),
        AXIS(heads, 8, 12),
        AXIS(dims, 64, 128),
        AXIS(batch, 1),
        AXIS(causal, 0, 1),
        .extra = {DECODE, BERT, GPT2},
        .nextra = 3,
        /* Three repetitions of 0.02 s, shuffled within each shape, so every
         * row has a median interval and the summary can call ties (issue 13:
         * with one repetition two runs disagreed on close kernels); the
         * baseline-ISA kernels once (they are never the fastest, and their
         * long calls would triple the time); one follow-up pass at most. */
        .min_time = 0.02,
        .repetitions = 3,
        .baseline_reps = 1,
        .passes = 2,
        .interleaved = 1,
        .by_shape = 1,
    },
    {
        .name = "full",
        AXIS(seq, 64, 128, 197, 256, 512, 1024, 2048, 4096, 8192),
        AXIS(heads, 1, 4, 8, 12, 16, 32),
        AXIS(dims, 32, 64, 80, 128),
        AXIS(batch, 1, 4),
        AXIS(causal, 0, 1),
        .threads_full_range = 1,
        .extra = {DECODE,
                  {1, 32, 8, 1, 4096, 128, 0, 0},
                  {1, 32, 32, 1, 16384, 128, 0, 0},
                  {4, 32, 8, 1, 16384, 128, 0, 0},
                  BERT,
                  GPT2},
        .nextra = 6,
        .min_time = 0.2,
        .repetitions = 1,
    },
    {
        /* The shapes of the roofline targets (issue 6): prefill, decode with
         * MHA and GQA caches, and the BERT-base / GPT-2 layers. */
        .name = "roofline",
        AXIS(batch, 1),
        AXIS(causal, 0, 1),
        .extra = {{1, 8, 8, 4096, 4096, 64, 0, 0},
                  {1, 12, 12, 512, 512, 64, 0, 0},
                  {1, 8, 8, 512, 512, 64, 0, 0},
                  {1, 32, 32, 2048, 2048, 128, 0, 0},
                  {1, 32, 32, 2048, 2048, 128, 1, 0},
                  {1, 12, 12, 1024, 1024, 64, 1, 0},
                  {1, 12, 12, 197, 197, 64, 0, 0},
                  {1, 12, 12, 128, 128, 64, 0, 0},
                  DECODE,
                  {1, 32, 8, 1, 4096, 128, 0, 0},
                  BERT,
                  GPT2},
        .nextra = 12,
        .extra_only = 1,
        .min_time = 0.3,
        .repetitions = 5,
        .interleaved = 1, /* a burst of host load hits every kernel of a shape alike */
        .by_shape = 1,
    },
    {
        .name = "ci",
        AXIS(batch, 1),
        AXIS(causal, 0, 1),
        .extra = {{1, 8, 8, 512, 512, 64, 0, 0}, {1, 12, 12, 1024, 1024, 64, 1, 0}, DECODE},
        .nextra = 3,
        .extra_only = 1,
        .min_time = 0.05,
        .repetitions = 9,
        .interleaved = 1,
        .ci_kernels = 1,
    },
};

#undef AXIS
#undef DECODE
#undef BERT
#undef GPT2

/* The preset called name, or NULL. */
static const preset *preset_find(const char *name) {
    for (size_t i = 0; i < sizeof PRESETS / sizeof PRESETS[0]; i++)
        if (strcmp(PRESETS[i].name, name) == 0) return &PRESETS[i];
    return NULL;
}

/* One benchmark: a kernel on a shape at a thread count. For the `auto`
 * pseudo-kernel, k and opts are mha_select's choice for this shape; for a
 * peer (harness/peers), k is NULL and peer says which. */
typedef struct {
    const mha_kernel *k;
    const peer_ops *peer;
    char kname[48]; /* what the row names: the kernel, "auto" or "peer.<name>" */
    int is_auto;
    mha_options opts;
    char label[160];
    shape s;
    int threads;
    char name[256];
    double flops, kv_bytes;
    double cost;         /* estimated seconds per repetition (progress and the estimate) */
    double peak;         /* GFLOP/s: single-thread peak of the kernel's ISA x threads */
    double bw;           /* GB/s read bandwidth of its level at this thread count */
    machine_level level; /* where its K/V working set fits (decode rows) */
    int warmed;
    int group; /* index of its (shape, threads) group */
    /* Set on an explicit row that is also what `auto` runs here (the same
     * kernel, knobs, shape and threads): auto is not measured a second time
     * but points at this row; auto_label says what mha_select chose. */
    int auto_same;
    char auto_label[160];
    /* results (iteration rows) */
    double *gflops;
    unsigned char *dist; /* per result: the evidence said disturbed */
    int nres, cap;
    int errors;
    int reps;    /* repetitions planned (the preset's, or its baseline_reps) */
    int extra;   /* repetitions registered in follow-up passes */
    int retaken; /* disturbed repetitions retaken so far */
    /* a peer's check against the oracle before it was timed */
    double max_err, check_worst;
} bench;

typedef struct {
    char *text;
} note;

/* ---- inputs and workspace: the measurement core's pool -------------------- */

static meas_pool g_pool;

/* The machine's figures and the benchmarks, for the peak retakes of
 * bench_body (a row that came within 3% of its peak retakes it, and every
 * row's peak follows). */
static results_machine *g_rm;
static bench *g_benches;
static int g_nbench;

/* The compute peak row b is held to (GFLOP/s at its thread count): its
 * kernel's unit for its dtype, or the machine's best for a peer's. */
static double bench_peak(const results_machine *rm, const bench *b) {
    const mha_dtype dt = b->s.dtype;
    return results_peak_at(
        rm, b->peer ? results_machine_peak(rm, dt) : results_peak_for(rm, b->k, dt), b->threads);
}

/* Every row's peak from the machine's current figures (after a retake). */
static void refresh_peaks(void) {
    for (int i = 0; i < g_nbench && g_rm; i++) g_benches[i].peak = bench_peak(g_rm, &g_benches[i]);
}

/* A peak is trusted only where no row beats it: a row whose rate (over the
 * wall time around Google Benchmark's loop, so never above what it
 * reports) comes within 3% of its compute peak or read bandwidth retakes
 * that figure, keeping the best take. Returns 1 when the row is still above
 * it: a measurement error, flagged peak_exceeded in the file. */
static int check_roof(bench *b, int64_t iters, double wall) {
    if (!g_rm || wall <= 0 || iters <= 0) return 0;
    const double rate = b->flops * (double)iters / wall * 1e-9;
    int over = 0;
    if (b->peak > 0 && rate > 0.97 * b->peak) {
        results_retake_peaks(g_rm, b->peer ? -1 : (int)mha_kernel_run_isa(b->k), b->threads > 1,
                             0.1);
        refresh_peaks();
        over |= rate > b->peak;
    }
    if (b->bw > 0 && b->s.nq == 1 && !b->s.layer) {
        const double gbs = b->kv_bytes * (double)iters / wall * 1e-9;
        if (gbs > 0.97 * b->bw) {
            const double bw = results_read_bw_retake(b->kv_bytes, b->threads);
            for (int i = 0; i < g_nbench; i++)
                if (g_benches[i].kv_bytes == b->kv_bytes && g_benches[i].threads == b->threads &&
                    g_benches[i].s.nq == 1 && !g_benches[i].s.layer)
                    g_benches[i].bw = bw;
            over |= gbs > b->bw;
        }
    }
    return over;
}

/* ---- the benchmark body --------------------------------------------------- */

static void bench_body(mha_gbench_state *st, void *user) {
    bench *b = user;
    meas_call c;
    const char *err = b->peer ? meas_prepare_peer(&g_pool, b->peer, &b->s, b->threads, &c)
                              : meas_prepare(&g_pool, b->k, &b->s, &b->opts, &c);
    if (err) {
        mha_gbench_skip_with_error(st, err);
        return;
    }
    /* One untimed call the first time round: checks the status and warms
     * caches, pages and the OpenMP team (the first gbench trial is timed). */
    if (!b->warmed) {
        const mha_status s = meas_run(&c);
        if (s != MHA_OK) {
            mha_gbench_skip_with_error(st, b->peer ? meas_peer_error() : mha_last_error());
            return;
        }
        b->warmed = 1;
    }
    /* The evidence brackets the whole repetition (outside Google Benchmark's
     * timer, which runs only inside the loop). */
    meas_window win;
    meas_window_begin(&win, b->threads);
    const double w0 = now_s();
    if (meas_gbench(st, &c) != MHA_OK)
        mha_gbench_skip_with_error(st, b->peer ? meas_peer_error()
                                               : "mha_attend failed in the timed loop");
    const double wdt = now_s() - w0;
    meas_evidence ev;
    meas_window_end(&win, &ev);
    mha_gbench_counter(st, "probe", ev.probe, MHA_GBENCH_PLAIN);
    mha_gbench_counter(st, "probe_core", ev.probe_core, MHA_GBENCH_PLAIN);
    mha_gbench_counter(st, "preempted", (double)ev.preempted, MHA_GBENCH_PLAIN);
    mha_gbench_counter(st, "stolen_ms", ev.stolen * 1e3, MHA_GBENCH_PLAIN);
    mha_gbench_counter(st, "disturbed", meas_disturbed_for(&ev, MEAS_PROBE_MIN, wdt),
                       MHA_GBENCH_PLAIN);
    const int64_t iters = mha_gbench_iterations(st);
    const int over = check_roof(b, iters, wdt);
    mha_gbench_counter(st, "peak", b->peak, MHA_GBENCH_PLAIN);
    mha_gbench_counter(st, "peak_exceeded", over, MHA_GBENCH_PLAIN);
    mha_gbench_counter(st, "GFLOPS", b->flops * 1e-9, MHA_GBENCH_PER_ITER_RATE);
    mha_gbench_counter(st, "pct_peak", b->peak > 0 ? 100.0 * b->flops * 1e-9 / b->peak : 0,
                       MHA_GBENCH_PER_ITER_RATE);
    mha_gbench_counter(st, "threads", b->threads, MHA_GBENCH_PLAIN);
    mha_gbench_counter(st, "block_q", c.o.block_q, MHA_GBENCH_PLAIN);
    mha_gbench_counter(st, "block_kv", c.o.block_kv, MHA_GBENCH_PLAIN);
    mha_gbench_counter(st, "split", c.o.split, MHA_GBENCH_PLAIN);
    if (b->is_auto || b->peer) mha_gbench_set_label(st, b->label);
    if (b->peer) { /* what its check against the oracle found, before timing */
        mha_gbench_counter(st, "max_err", b->max_err, MHA_GBENCH_PLAIN);
        mha_gbench_counter(st, "err_vs_tol", b->check_worst, MHA_GBENCH_PLAIN);
    }
    if (b->s.nq == 1 && !b->s.layer) {
        mha_gbench_set_bytes_processed(st, (int64_t)b->kv_bytes * iters);
        mha_gbench_counter(st, "pct_bw", b->bw > 0 ? 100.0 * b->kv_bytes * 1e-9 / b->bw : 0,
                           MHA_GBENCH_PER_ITER_RATE);
        /* the level pct_bw is measured against: 1 L1, 2 L2, 3 L3, 4 DRAM */
        mha_gbench_counter(st, "bw_level", b->level + 1, MHA_GBENCH_PLAIN);
    }
}

/* Rate of a kernel (GFLOP/s, 1 thread) on B1 H1 N256 d64: the best of a few
 * calls after a warm-up; the basis of the time estimates. 0 on failure. In
 * fp32, or the first dtype the kernel takes (flash.avx512bf16 takes no fp32:
 * probed in fp32 it read 0 and every row of it was skipped as too slow). */
static double probe_rate(const mha_kernel *k) {
    shape s = {1, 1, 1, 256, 256, 64, 0, 0, MHA_F32, MHA_F32};
    const unsigned dts = mha_kernel_dtypes(k);
    for (int t = MHA_F32; t < MHA_DTYPE_COUNT && !(dts & MHA_DTYPE_BIT(s.dtype)); t++)
        s.dtype = (mha_dtype)t;
    meas_call c;
    const mha_options one = {.threads = 1};
    if (meas_prepare(&g_pool, k, &s, &one, &c) || meas_run(&c) != MHA_OK) return 0;
    const mha_problem p = meas_problem(&s);
    const double flops = mha_problem_flops(&p);
    double times[20], best = 1e30;
    const int n = meas_repeat(&c, times, 3, 20, 0.03, NULL);
    for (int i = 0; i < n; i++)
        if (times[i] < best) best = times[i];
    return flops / (best > 1e-9 ? best : 1e-9) * 1e-9;
}

/* ---- reporting ------------------------------------------------------------ */

typedef struct {
    bench *benches;
    int nbench;
    int done, total; /* this pass's rows */
    int interleaved;
    int runs; /* every pass's rows */
    int ngroups;
    progress prog; /* sweep/progress.c: lines, bar, the time left */
} run_state;

static void shape_text(const shape *s, char *buf, size_t len) {
    char kv[32] = "", seq[64];
    if (s->kv != s->h) snprintf(kv, sizeof kv, " KV=%lld", (long long)s->kv);
    if (s->nq == s->nkv)
        snprintf(seq, sizeof seq, "N=%lld", (long long)s->nq);
    else
        snprintf(seq, sizeof seq, "Nq=%lld Nkv=%lld", (long long)s->nq, (long long)s->nkv);
    if (s->layer)
        snprintf(buf, len, "layer B=%lld N=%lld d_model=%lld H=%lld causal=%d%s%s", (long long)s->b,
                 (long long)s->nq, (long long)(s->h * s->d), (long long)s->h, s->causal,
                 s->dtype != MHA_F32 ? " " : "",
                 s->dtype != MHA_F32 ? mha_dtype_name(s->dtype) : "");
    else {
        const mha_dtype kvt = s->kv_dtype ? s->kv_dtype : s->dtype;
        char dt[48] = "";
        if (s->dtype != MHA_F32 || kvt != MHA_F32)
            snprintf(dt, sizeof dt, " %s", mha_dtype_name(s->dtype));
        if (kvt != s->dtype) {
            const size_t n = strlen(dt);
            snprintf(dt + n, sizeof dt - n, " kv=%s", mha_dtype_name(kvt));
        }
        snprintf(buf, len, "B=%lld H=%lld%s %s d=%lld causal=%d%s", (long long)s->b,
                 (long long)s->h, kv, seq, (long long)s->d, s->causal, dt);
    }
}

static double bench_stats(const bench *b, double *lo, double *hi);

/* The line of a finished (shape, threads) group: the progress, the shape,
 * and the fastest of our kernels so far (the summary decides at the end). */
static void group_line(const run_state *rs, const bench *of) {
    const bench *best = NULL;
    double best_gf = 0, lo, hi;
    for (int i = 0; i < rs->nbench; i++) {
        const bench *b = &rs->benches[i];
        if (b->group != of->group || b->is_auto || b->peer || b->nres == 0) continue;
        const double gf = bench_stats(b, &lo, &hi);
        if (!best || gf > best_gf) best = b, best_gf = gf;
    }
    char pre[128], shp[128];
    progress_prefix(&rs->prog, pre, sizeof pre);
    shape_text(&of->s, shp, sizeof shp);
    if (best)
        printf("%s  %s threads=%d: %s %.1f GFLOP/s\n", pre, shp, of->threads, best->kname, best_gf);
    else
        printf("%s  %s threads=%d\n", pre, shp, of->threads);
    fflush(stdout);
}

static void on_report(const mha_gbench_result *r, void *user) {
    run_state *rs = user;
    if (r->aggregate) return;
    bench *b = NULL;
    for (int i = 0; i < rs->nbench && !b; i++)
        if (strcmp(rs->benches[i].name, r->name) == 0) b = &rs->benches[i];
    rs->done++;
    rs->runs++;
    char shp[128], reps[64] = "";
    if (b) shape_text(&b->s, shp, sizeof shp);
    if (r->repetitions > 1)
        snprintf(reps, sizeof reps, " rep %lld/%lld", (long long)r->repetition_index + 1,
                 (long long)r->repetitions);
    char count[32];
    if (rs->total > 0)
        snprintf(count, sizeof count, "[%d/%d]", rs->done, rs->total);
    else
        snprintf(count, sizeof count, "[%d]", rs->done);
    const int verbose = rs->prog.mode == PROGRESS_VERBOSE;
    if (!b) {
        if (verbose) printf("%s %s (not in this sweep's list)\n", count, r->name);
        fflush(stdout);
        return;
    }
    if (r->error) {
        b->errors++;
        progress_row(&rs->prog, b->group, b->cost, 0);
        if (rs->prog.tty && rs->prog.mode == PROGRESS_NORMAL) printf("\n");
        printf("%s %s %s threads=%d%s ... ERROR: %s\n", count, b->kname, shp, b->threads, reps,
               r->error_message);
        fflush(stdout);
        return;
    }
    const double gf = mha_gbench_result_counter(r, "GFLOPS", 0);
    const double pp = mha_gbench_result_counter(r, "pct_peak", 0);
    const double pb = mha_gbench_result_counter(r, "pct_bw", -1);
    const int disturbed = mha_gbench_result_counter(r, "disturbed", 0) > 0;
    if (b->nres == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 4;
        b->gflops = sweep_realloc(b->gflops, (size_t)b->cap, sizeof *b->gflops);
        b->dist = sweep_realloc(b->dist, (size_t)b->cap, sizeof *b->dist);
    }
    b->dist[b->nres] = (unsigned char)disturbed;
    b->gflops[b->nres++] = gf;
    char bw[48] = "";
    if (pb >= 0)
        snprintf(bw, sizeof bw, ", %.1f GB/s = %.1f%% of %s bw",
                 mha_gbench_result_counter(r, "bytes_per_second", 0) * 1e-9, pb,
                 machine_level_name(b->level));
    char kdisp[200];
    if (b->is_auto)
        snprintf(kdisp, sizeof kdisp, "auto [%s]", b->label);
    else
        snprintf(kdisp, sizeof kdisp, "%s", b->kname);
    if (verbose) {
        printf("%s %s %s threads=%d%s ... %.1f GFLOP/s (%.1f%% of peak%s)%s\n", count, kdisp, shp,
               b->threads, reps, gf, pp, bw, disturbed ? " [disturbed: retaken]" : "");
        fflush(stdout);
    } else if (progress_row(&rs->prog, b->group, b->cost, disturbed)) {
        group_line(rs, b);
    }
}

/* How many of b's repetitions the evidence left undisturbed. */
static int bench_clean(const bench *b) {
    int clean = 0;
    for (int i = 0; i < b->nres; i++) clean += !b->dist[i];
    return clean;
}

/* The samples that count, sorted into out: the undisturbed ones, or all of
 * them when every one was disturbed. Returns the count. */
static int bench_samples(const bench *b, double *out) {
    const int clean = bench_clean(b);
    int n = 0;
    for (int i = 0; i < b->nres; i++)
        if (!b->dist[i] || clean == 0) out[n++] = b->gflops[i];
    median_inplace(out, n);
    return n;
}

/* Median GFLOP/s of the samples that count, and its 95% interval
 * (harness/stats.c; with one sample the interval is that sample). */
static double bench_stats(const bench *b, double *lo, double *hi) {
    double *x = sweep_realloc(NULL, (size_t)(b->nres ? b->nres : 1), sizeof *x);
    const int n = bench_samples(b, x);
    double med = 0;
    *lo = *hi = 0;
    if (n > 0) {
        med = median_sorted(x, n);
        median_interval(x, n, 0.95, lo, hi);
    }
    free(x);
    return med;
}

/* ---- option parsing --------------------------------------------------------- */

/* Removes duplicates, keeping the first occurrence. */
static int dedupe(int64_t *v, int n) {
    int o = 0;
    for (int i = 0; i < n; i++) {
        int seen = 0;
        for (int j = 0; j < o; j++) seen |= v[j] == v[i];
        if (!seen) v[o++] = v[i];
    }
    return o;
}

typedef struct {
    note *items;
    int n, cap;
} note_list;

static void note_add(note_list *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note_add(note_list *l, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 16;
        l->items = sweep_realloc(l->items, (size_t)l->cap, sizeof *l->items);
    }
    l->items[l->n++].text = xstrdup_or_exit(buf, "sweep");
}

static void note_free(note_list *l) {
    for (int i = 0; i < l->n; i++) free(l->items[i].text);
    free(l->items);
}

static void ctx_emit(const char *key, const char *value, void *user) {
    (void)user;
    mha_gbench_add_context(key, value);
}

/* How many of the names Google Benchmark's filter selects (for the progress
 * denominator only; Google Benchmark does the real selection). -1 when the
 * filter is not a POSIX extended regex. */
static int count_filtered(const bench *benches, int n, const char *filter, unsigned char *match) {
    if (match) memset(match, 1, (size_t)n);
    if (!filter || !*filter || strcmp(filter, "all") == 0) return n;
    int negate = filter[0] == '-';
    regex_t re;
    if (regcomp(&re, filter + negate, REG_EXTENDED | REG_NOSUB) != 0) return -1;
    int count = 0;
    for (int i = 0; i < n; i++) {
        char full[300];
        snprintf(full, sizeof full, "%s/real_time", benches[i].name);
        const int hit = (regexec(&re, full, 0, NULL, 0) == 0) != negate;
        if (match) match[i] = (unsigned char)hit;
        count += hit;
    }
    regfree(&re);
    return count;
}

/* The dtype part of a row's name: "" for fp32 rows (today's names), else
 * "/dtype:bf16" and, when K/V is stored otherwise, "/kv_dtype:int8". */
static const char *dtype_part(const mha_problem *p, char *buf, size_t len) {
    const mha_dtype kv = mha_problem_kv_dtype(p);
    size_t n = 0;
    buf[0] = '\0';
    if (p->dtype != MHA_F32) n = (size_t)snprintf(buf, len, "/dtype:%s", mha_dtype_name(p->dtype));
    if (kv != p->dtype && n < len) snprintf(buf + n, len - n, "/kv_dtype:%s", mha_dtype_name(kv));
    return buf;
}

/* The shapes once per dtype: each Q/O dtype of the mask, K/V stored in it,
 * or for decode rows (Nq = 1) in each of kv_mask when given; an fp32 cache
 * under bf16/fp16 queries is not a problem the API offers. A layer shape
 * runs in each dtype of the mask (weights, inputs and output in it; the
 * kernels that take it make rows). Returns the new array (freeing shapes) and its count in *count.
 */
static shape *expand_dtypes(shape *shapes, int *count, unsigned dt_mask, unsigned kv_mask) {
    int n = 0;
    const size_t cap = (size_t)*count * MHA_DTYPE_COUNT * MHA_DTYPE_COUNT + 1;
    shape *out = sweep_realloc(NULL, cap, sizeof *out);
    for (int dt = MHA_F32; dt < MHA_DTYPE_COUNT; dt++) {
        if (!(dt_mask & MHA_DTYPE_BIT(dt))) continue;
        for (int i = 0; i < *count; i++) {
            const shape *s = &shapes[i];
            if (s->layer) {
                out[n] = *s;
                out[n].dtype = (mha_dtype)dt;
                out[n++].kv_dtype = MHA_F32;
                continue;
            }
            for (int kv = MHA_F32; kv < MHA_DTYPE_COUNT; kv++) {
                const int want =
                    s->nq == 1 && kv_mask ? (kv_mask & MHA_DTYPE_BIT(kv)) != 0 : kv == dt;
                if (!want || (dt != MHA_F32 && kv == MHA_F32)) continue;
                out[n] = *s;
                out[n].dtype = (mha_dtype)dt;
                out[n].kv_dtype = kv == dt ? MHA_F32 : (mha_dtype)kv;
                n++;
            }
        }
    }
    free(shapes);
    *count = n;
    return out;
}

/* What the benchmark list is made from. */
typedef struct {
    const preset *pr;
    const mha_kernel *const *kernels; /* NULL: auto */
    const double *rate;               /* per kernel, GFLOP/s at 1 thread */
    int nk;
    const int64_t *threads;
    int nthreads;
    int kernels_given; /* --kernels: ci's pairing of algorithms and shapes is off */
    const results_machine *rm;
    double max_seconds, min_time;
    const peer_ops *const *peers; /* --peers that run here */
    int npeers;
    int verbose; /* --verbose: each skip said as it is planned */
} bench_plan;

/* The benchmarks, grouped by (shape, threads), estimated and maybe skipped
 * (each skip a note in skipped). Returns the array (*nbench of them, in
 * *ngroups groups). */
/* Each distinct (kernel, knobs, shape, threads) is measured once: an `auto`
 * row whose choice equals an explicit row of its group (options resolved the
 * one way, mha_resolve_options) is dropped and that row marked; aliases gets
 * "auto/<shape> = <row name>" for the result's context. Returns the count. */
static int fold_auto(bench *benches, int nbench, note_list *aliases) {
    for (int i = 0; i < nbench; i++) {
        bench *a = &benches[i];
        if (!a->is_auto) continue;
        const mha_problem p = meas_problem(&a->s);
        mha_options ra, rb;
        if (mha_resolve_options(a->k, &p, &a->opts, &ra) != MHA_OK) continue;
        for (int j = 0; j < nbench; j++) {
            bench *b = &benches[j];
            if (b->is_auto || b->group != a->group || b->k != a->k ||
                mha_resolve_options(b->k, &p, &b->opts, &rb) != MHA_OK)
                continue;
            if (ra.block_q != rb.block_q || ra.block_kv != rb.block_kv || ra.split != rb.split ||
                mha_resolve_threads(&ra) != mha_resolve_threads(&rb))
                continue;
            b->auto_same = 1;
            snprintf(b->auto_label, sizeof b->auto_label, "%s", a->label);
            note_add(aliases, "%s = %s", a->name, b->name);
            a->is_auto = -1; /* dropped below */
            break;
        }
    }
    int o = 0;
    for (int i = 0; i < nbench; i++)
        if (benches[i].is_auto >= 0) benches[o++] = benches[i];
    return o;
}

/* What row b is judged against: its FLOPs (a layer's with the projections),
 * the bytes it moves at the storage widths (K/V x its dtype's size, + int8
 * scales, Q/O at theirs), its compute peak (bench_peak), and the read bandwidth of where its
 * working set lives (a decode row reads K and V once per call: judged against a plain read of the
 * same bytes at the same thread count, its level named). */
static void bench_roofline(const bench_plan *pl, bench *b) {
    const shape *s = &b->s;
    const mha_problem p = meas_problem(s);
    if (s->layer) {
        const mha_layer lay = meas_layer(s, NULL);
        const mha_layer_shape lsh = {s->b, s->nq, s->nkv, s->causal, 0.0f};
        b->flops = mha_forward_flops(&lay, &lsh);
    } else {
        b->flops = mha_problem_flops(&p);
    }
    b->kv_bytes = meas_io_bytes(s);
    b->peak = bench_peak(pl->rm, b);
    b->level = machine_level_of(&pl->rm->m, b->kv_bytes, b->threads);
    b->bw = s->nq == 1 && !s->layer ? results_read_bw_at(b->kv_bytes, b->threads)
                                    : results_level_bw(pl->rm, b->level, b->threads);
}

/* A peer's benchmark of shape s at `threads` into *b: 1, or 0 when the peer
 * does not take the shape (noted in skipped). Its name is our row's with
 * peer.<name> for the kernel; the same FLOPs, bytes and peak rules (the
 * machine's best peak for the dtype: we do not know which unit it uses). */
static int plan_peer(const bench_plan *pl, const peer_ops *peer, const shape *s, int threads,
                     int group, bench *b, note_list *skipped, int *layer_noted) {
    memset(b, 0, sizeof *b);
    b->peer = peer;
    b->s = *s;
    b->threads = threads;
    b->group = group;
    b->opts = (mha_options){.threads = threads};
    snprintf(b->kname, sizeof b->kname, "peer.%s", peer->name);
    const mha_problem p = meas_problem(s);
    char dtp[48], why[256] = "";
    const int takes = !s->layer && peer->takes(&p, why, sizeof why);
    if (s->layer) { /* one note per peer, not one per layer row */
        if (!*layer_noted)
            note_add(skipped, "%s on the layer rows (peers run the attention core only)", b->kname);
        *layer_noted = 1;
        return 0;
    }
    if (!takes) {
        char shp[160];
        snprintf(shp, sizeof shp, "B=%lld H=%lld KV=%lld Nq=%lld Nkv=%lld d=%lld causal=%d%s",
                 (long long)s->b, (long long)s->h, (long long)s->kv, (long long)s->nq,
                 (long long)s->nkv, (long long)s->d, s->causal, dtype_part(&p, dtp, sizeof dtp));
        if (threads == pl->threads[0]) note_add(skipped, "%s on %s (%s)", b->kname, shp, why);
        return 0;
    }
    snprintf(b->name, sizeof b->name,
             "%s/B:%lld/H:%lld/KV:%lld/Nq:%lld/Nkv:%lld/d:%lld/causal:%d%s/threads:%d", b->kname,
             (long long)s->b, (long long)s->h, (long long)s->kv, (long long)s->nq,
             (long long)s->nkv, (long long)s->d, s->causal, dtype_part(&p, dtp, sizeof dtp),
             threads);
    bench_roofline(pl, b);
    b->warmed = 1;              /* prepare made one untimed call */
    b->cost = 2 * pl->min_time; /* and the helper's round trips */
    return 1;
}

static bench *plan_benches(const bench_plan *pl, const shape *shapes, int nshapes,
                           note_list *skipped, note_list *aliases, int *nbench_out,
                           int *ngroups_out) {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    const double mem_limit = pages > 0 && page > 0 ? 0.5 * (double)pages * (double)page : 1e12;
    int nbench = 0, ngroups = 0;
    int layer_noted[MAX_PEERS] = {0};
    const size_t nslots =
        (size_t)nshapes * (size_t)pl->nthreads * (size_t)(pl->nk + pl->npeers) + 1;
    bench *benches = sweep_realloc(NULL, nslots, sizeof *benches);
    memset(benches, 0, nslots * sizeof *benches);
    for (int si = 0; si < nshapes; si++)
        for (int ti = 0; ti < pl->nthreads; ti++) {
            const int group = ngroups++;
            for (int ki = 0; ki < pl->nk; ki++) {
                bench *b = &benches[nbench];
                memset(b, 0, sizeof *b);
                b->k = pl->kernels[ki];
                b->s = shapes[si];
                b->threads = (int)pl->threads[ti];
                b->group = group;
                b->opts = (mha_options){.threads = b->threads};
                const shape *s = &b->s;
                /* ci pairs each algorithm with the shapes it is for: decode
                 * with the decode shape, flash/tiled with the prefill ones (a
                 * memory-bound kernel on the wrong shape only adds noise). */
                if (pl->pr->ci_kernels && !pl->kernels_given && b->k &&
                    ((mha_kernel_traits(b->k) & MHA_KT_DECODE) != 0) != (s->nq == 1))
                    continue;
                const mha_problem p = meas_problem(s);
                /* a kernel runs the dtypes it takes (its mask columns) */
                if (b->k && mha_kernel_takes(b->k, &p) != MHA_OK) continue;
                const char *kname = b->k ? mha_kernel_name(b->k) : "auto";
                snprintf(b->kname, sizeof b->kname, "%s", kname);
                char dtp[48];
                if (s->layer)
                    snprintf(b->name, sizeof b->name,
                             "layer/%s/B:%lld/N:%lld/dm:%lld/H:%lld/causal:%d%s/threads:%d", kname,
                             (long long)s->b, (long long)s->nq, (long long)(s->h * s->d),
                             (long long)s->h, s->causal, dtype_part(&p, dtp, sizeof dtp),
                             b->threads);
                else
                    snprintf(
                        b->name, sizeof b->name,
                        "%s/B:%lld/H:%lld/KV:%lld/Nq:%lld/Nkv:%lld/d:%lld/causal:%d%s/threads:%d",
                        kname, (long long)s->b, (long long)s->h, (long long)s->kv, (long long)s->nq,
                        (long long)s->nkv, (long long)s->d, s->causal,
                        dtype_part(&p, dtp, sizeof dtp), b->threads);
                double krate = pl->rate[ki];
                if (!b->k) { /* auto: what mha_select picks here, knobs included */
                    mha_selection sel;
                    if (mha_select(&p, &b->opts, &sel) != MHA_OK) {
                        note_add(skipped, "auto on %s (mha_select: %s)", b->name, mha_last_error());
                        continue;
                    }
                    b->is_auto = 1;
                    b->k = sel.kernel;
                    b->opts = sel.options;
                    snprintf(b->label, sizeof b->label, "%s bq=%d bk=%d split=%d (%s)",
                             mha_kernel_name(sel.kernel), sel.options.block_q, sel.options.block_kv,
                             sel.options.split,
                             sel.source == MHA_CHOICE_TABLE
                                 ? "table"
                                 : (sel.source == MHA_CHOICE_FORCED ? "forced" : "default"));
                    for (int kj = 0; kj < pl->nk; kj++)
                        if (pl->kernels[kj] == b->k) krate = pl->rate[kj];
                    if (krate <= 0) krate = probe_rate(b->k);
                }
                if (mha_problem_validate(&p) != MHA_OK) {
                    note_add(skipped, "%s (invalid problem: %s)", b->name, mha_last_error());
                    continue;
                }
                const mha_layer lay = meas_layer(s, NULL);
                const mha_layer_shape lsh = {s->b, s->nq, s->nkv, s->causal, 0.0f};
                bench_roofline(pl, b);
                mha_options o = b->opts;
                size_t ws = 0;
                if ((s->layer ? mha_forward_workspace_size(b->k, &lay, &lsh, &o, &ws)
                              : mha_workspace_size(b->k, &p, &o, &ws)) != MHA_OK) {
                    note_add(skipped, "%s (%s)", b->name, mha_last_error());
                    continue;
                }
                const double need = (double)meas_input_bytes(s) + (double)ws;
                if (need > mem_limit) {
                    note_add(skipped, "%s (needs %.1f GiB, more than half of memory)", b->name,
                             need / (1024.0 * 1024 * 1024));
                    continue;
                }
                /* Per-head parallel kernels use at most B*H threads; those
                 * with a split (flash) also split query blocks. */
                double par = b->threads;
                if (!(mha_kernel_traits(b->k) & MHA_KT_SPLIT) && (double)(s->b * s->h) < par)
                    par = (double)(s->b * s->h);
                const double est = krate > 0 ? b->flops / (krate * 1e9 * par) : 1e30;
                if (est > pl->max_seconds) {
                    char msg[64];
                    snprintf(msg, sizeof msg, "estimated %.1f s per call > --max-seconds %g", est,
                             pl->max_seconds);
                    if (pl->verbose) printf("skip %s (%s)\n", b->name, msg);
                    note_add(skipped, "%s (%s)", b->name, msg);
                    continue;
                }
                /* The untimed warm-up call (and status check) only where it is
                 * cheap: a call longer than the min time is its own 1-iteration
                 * run, its inputs are shared with the kernels before it and the
                 * workspace is touched, so a cold start is a small part of it. */
                b->warmed = est >= pl->min_time;
                /* one repetition: Google Benchmark's iterations up to the min
                 * time (about 1.7 x it, measured on the quick preset), or one
                 * call when that is longer */
                b->cost = est >= pl->min_time ? est : 1.7 * pl->min_time;
                nbench++;
            }
            for (int pi = 0; pi < pl->npeers; pi++)
                nbench += plan_peer(pl, pl->peers[pi], &shapes[si], (int)pl->threads[ti], group,
                                    &benches[nbench], skipped, &layer_noted[pi]);
        }
    nbench = fold_auto(benches, nbench, aliases);
    *nbench_out = nbench;
    *ngroups_out = ngroups;
    return benches;
}

/* ---- fleet mode: one shard of the list ---------------------------------------------
 * The partition must come out the same on every machine that runs a shard,
 * so it cannot use the rates this machine measured: each benchmark's cost is
 * a nominal time from the build alone (FLOPs at 8 FLOP/cycle per vector lane
 * at 1 GHz per thread; K/V bytes at 10 GB/s per thread for decode rows; the
 * reference kernels at 1 GFLOP/s), never less than the min time Google
 * Benchmark spends on any row. Only its proportions matter. */
static double nominal_seconds(const bench *b, double min_time) {
    /* a peer: as a kernel of the widest vectors built (16 lanes) */
    const unsigned tr = b->peer ? 0 : mha_kernel_traits(b->k);
    const int lanes = b->peer ? 16 : mha_ops_for(mha_kernel_run_isa(b->k))->lanes;
    const double rate = (tr & MHA_KT_REFERENCE ? 1.0 : 8.0 * lanes) * 1e9 * b->threads;
    double t = b->flops / rate;
    if (b->s.nq == 1 && !b->s.layer) {
        const double tb = b->kv_bytes / (10e9 * b->threads);
        t = tb > t ? tb : t;
    }
    return t > min_time ? t : min_time;
}

/* Keeps the benchmarks of shard sh (in their order) and records the shard
 * in the result's context: its spec, the whole list's size and hash (merge
 * refuses shards of different lists) and this shard's size. Returns the
 * count kept. */
static int take_shard(bench *benches, int nbench, const shard_spec *sh, double min_time) {
    double *cost = sweep_realloc(NULL, (size_t)(nbench ? nbench : 1), sizeof *cost);
    const char **names = sweep_realloc(NULL, (size_t)(nbench ? nbench : 1), sizeof *names);
    int *part = sweep_realloc(NULL, (size_t)(nbench ? nbench : 1), sizeof *part);
    double mine = 0, total = 0;
    for (int i = 0; i < nbench; i++) {
        cost[i] = nominal_seconds(&benches[i], min_time);
        names[i] = benches[i].name;
        total += cost[i];
    }
    const uint64_t hash = shard_list_hash(names, nbench);
    shard_partition(cost, names, nbench, sh->count, part);
    int kept = 0;
    for (int i = 0; i < nbench; i++) {
        if (part[i] == sh->index) {
            mine += cost[i];
            benches[kept++] = benches[i];
        } else {
            free(benches[i].gflops);
        }
    }
    char buf[64];
    snprintf(buf, sizeof buf, "%d/%d", sh->index, sh->count);
    mha_gbench_add_context("mha_shard", buf);
    snprintf(buf, sizeof buf, "%016llx", (unsigned long long)hash);
    mha_gbench_add_context("mha_sweep_list", buf);
    snprintf(buf, sizeof buf, "%d", nbench);
    mha_gbench_add_context("mha_sweep_benchmarks", buf);
    snprintf(buf, sizeof buf, "%d", kept);
    mha_gbench_add_context("mha_shard_benchmarks", buf);
    printf("shard %d/%d: %d of %d benchmarks, %.0f%% of the nominal time (list %016llx)\n",
           sh->index, sh->count, kept, nbench, total > 0 ? 100 * mine / total : 0,
           (unsigned long long)hash);
    free(cost);
    free(names);
    free(part);
    return kept;
}

/* Fisher-Yates over order[0..n) with splitmix64 seeded by seed: a seeded run
 * repeats its order exactly. */
static void shuffle_order(int *order, int n, uint64_t seed) {
    uint64_t st = seed;
    for (int i = n - 1; i > 0; i--) {
        const int j = (int)(splitmix64(&st) % (uint64_t)(i + 1));
        const int t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

/* Registers b with Google Benchmark: repeated by its own flags
 * (report_as 0), or as one repetition of a name registered report_as times
 * (interleaved). Returns 0, or -1 after a message. */
static int register_one(bench *b, int report_as) {
    mha_gbench_def d;
    memset(&d, 0, sizeof d);
    d.name = b->name;
    d.run = bench_body;
    d.user = b;
    d.real_time = 1;
    d.manual_time = b->peer != NULL; /* a helper process's own clock (meas_gbench) */
    if (report_as > 0) {
        d.repetitions = 1;
        d.report_as_repetitions = report_as;
    }
    if (mha_gbench_register(&d) != 0) {
        errorf("sweep: cannot register %s", b->name);
        return -1;
    }
    return 0;
}

/* Registers the benchmarks with Google Benchmark. Returns 0, or -1 after a
 * message. */
static int register_benches(bench *benches, int nbench, int interleaved, int by_shape,
                            uint64_t seed) {
    /* Registration. Grouped: each benchmark once, repeated by Google
     * Benchmark (--benchmark_repetitions), so the file has one row per
     * repetition plus the _mean/_median/_stddev/_cv aggregates. Interleaved
     * (ci): every (benchmark, repetition) pair is registered on its own, in
     * an order shuffled with the seed, each a one-repetition run; the shim's
     * reporters then number the rows of a name as repetitions 0..n-1 with one
     * family_index, so the file holds n per-repetition rows of each exact name
     * (no aggregate rows) as compare.py and mhabench compare expect. A slow
     * drift of the machine (clock, other load) then spreads over every
     * benchmark instead of biasing the ones that ran during it. */
    int nreg = 0;
    for (int i = 0; i < nbench; i++) nreg += interleaved ? benches[i].reps : 1;
    int *order = sweep_realloc(NULL, (size_t)nreg, sizeof *order), k = 0;
    for (int i = 0; i < nbench; i++)
        for (int r = 0; r < (interleaved ? benches[i].reps : 1); r++) order[k++] = i;
    if (interleaved) shuffle_order(order, nreg, seed ^ 0x5eedull);
    if (interleaved && by_shape) {
        /* roofline: shapes in their listed order, the shuffle kept within each
         * (a stable insertion sort by the shape's first benchmark) */
        int *first = sweep_realloc(NULL, (size_t)nbench, sizeof *first);
        for (int i = 0; i < nbench; i++) {
            first[i] = i;
            for (int j = 0; j < i; j++)
                if (memcmp(&benches[j].s, &benches[i].s, sizeof benches[i].s) == 0) {
                    first[i] = first[j];
                    break;
                }
        }
        for (int i = 1; i < nreg; i++)
            for (int j = i; j > 0 && first[order[j - 1]] > first[order[j]]; j--) {
                const int t = order[j];
                order[j] = order[j - 1];
                order[j - 1] = t;
            }
        free(first);
    }
    mha_gbench_clear();
    for (int i = 0; i < nreg; i++)
        if (register_one(&benches[order[i]], interleaved ? benches[order[i]].reps : 0) != 0) {
            free(order);
            return -1;
        }
    free(order);
    return 0;
}

/* The closing report: what was skipped and what failed, then the summary
 * and the verdict read back from the committed file (sweep/report.c: one
 * rule for every tool), and the run's totals. Returns the number of failed
 * runs (or 1 when the file cannot be read back). */
static int report_sweep(bench *benches, int nbench, const note_list *skipped, int done, double t0,
                        const char *path, report_mode mode, int verbose) {
    int nerr = 0;
    for (int i = 0; i < nbench; i++) nerr += benches[i].errors;
    if (skipped->n && verbose) {
        printf("\nskipped (%d):\n", skipped->n);
        for (int i = 0; i < skipped->n; i++) printf("  %s\n", skipped->items[i].text);
    } else if (skipped->n) {
        printf("\nskipped %d combination%s (estimated too slow, not taken by a kernel or peer, "
               "...): --verbose lists them\n",
               skipped->n, skipped->n == 1 ? "" : "s");
    }
    if (nerr) {
        printf("\nfailed (%d):\n", nerr);
        for (int i = 0; i < nbench; i++)
            if (benches[i].errors) printf("  %s\n", benches[i].name);
    }
    if (report_file(path, mode, stdout) != 0) return nerr ? nerr : 1;
    printf("\n%d run%s in %.1f s; results: %s\n", done, done == 1 ? "" : "s", now_s() - t0, path);
    return nerr;
}

/* ---- cmd_sweep, in steps ------------------------------------------------------------
 * Each step returns 0, or -1 after printing a message (a usage or input
 * error); only cmd_sweep turns that into an exit code. */

/* The command line as given. */
typedef struct {
    const char *preset_name, *kernel_list, *out_path;
    const char *peer_names[MAX_PEERS]; /* --peers, each once (peer_names()' strings) */
    int npeer_names;
    const char *seq, *seq_q, *seq_kv, *heads, *kv, *dims, *batch, *causal, *threads;
    unsigned dtypes, kv_dtypes;   /* MHA_DTYPE_BIT masks; kv_dtypes 0: each row's dtype */
    double max_seconds, min_time; /* min_time < 0: the preset's */
    int64_t reps;                 /* 0: the preset's */
    int bind;
    uint64_t seed;
    char **pass; /* after "--": Google Benchmark's */
    int npass;
    const char *filter;     /* read from pass */
    shard_spec shard;       /* --shard I/N; count 0 when not given */
    int passes;             /* --passes: 1 + follow-up passes at most */
    progress_mode progress; /* --quiet, --verbose */
} sweep_args;

/* --peers: names of peer_names() or "all", into a (each once). 0, or -1
 * after a message naming the bad one. */
static int parse_peers(const char *list, sweep_args *a) {
    int nnames;
    const char *const *names = peer_names(&nnames);
    if (nnames > MAX_PEERS) nnames = MAX_PEERS;
    a->npeer_names = 0;
    if (strcmp(list, "all") == 0) {
        for (int i = 0; i < nnames; i++) a->peer_names[a->npeer_names++] = names[i];
        return 0;
    }
    for (const char *p = list;;) {
        const size_t len = strcspn(p, ",");
        int found = -1;
        for (int i = 0; i < nnames; i++)
            if (strlen(names[i]) == len && strncmp(names[i], p, len) == 0) found = i;
        if (found < 0) {
            errorf("sweep: --peers '%.*s': unknown peer (expected torch, onnxruntime, openvino, "
                   "onednn, libxsmm or all)",
                   (int)len, p);
            return -1;
        }
        int dup = 0;
        for (int i = 0; i < a->npeer_names; i++) dup |= a->peer_names[i] == names[found];
        if (!dup) a->peer_names[a->npeer_names++] = names[found];
        if (!p[len]) return 0;
        p += len + 1;
    }
}

/* Returns 0, 1 when --help was printed, or -1. */
static int parse_sweep_args(int argc, char **argv, sweep_args *a) {
    enum {
        O_PRESET = 256,
        O_KERNELS,
        O_SEQ,
        O_SEQ_Q,
        O_SEQ_KV,
        O_HEADS,
        O_KV_HEADS,
        O_HEAD_DIM,
        O_BATCH,
        O_CAUSAL,
        O_THREADS,
        O_MAX_SECONDS,
        O_MIN_TIME,
        O_REPS,
        O_BIND,
        O_OUT,
        O_SEED,
        O_SHARD,
        O_PASSES,
        O_DTYPE,
        O_KV_DTYPE,
        O_PEERS,
        O_QUIET,
        O_VERBOSE,
    };
    static const struct option opts[] = {
        {"preset", required_argument, 0, O_PRESET},
        {"kernels", required_argument, 0, O_KERNELS},
        {"seq", required_argument, 0, O_SEQ},
        {"seq-q", required_argument, 0, O_SEQ_Q},
        {"seq-kv", required_argument, 0, O_SEQ_KV},
        {"heads", required_argument, 0, O_HEADS},
        {"kv-heads", required_argument, 0, O_KV_HEADS},
        {"head-dim", required_argument, 0, O_HEAD_DIM},
        {"batch", required_argument, 0, O_BATCH},
        {"causal", required_argument, 0, O_CAUSAL},
        {"threads", required_argument, 0, O_THREADS},
        {"max-seconds", required_argument, 0, O_MAX_SECONDS},
        {"min-time", required_argument, 0, O_MIN_TIME},
        {"repetitions", required_argument, 0, O_REPS},
        {"bind", required_argument, 0, O_BIND},
        {"out", required_argument, 0, O_OUT},
        {"seed", required_argument, 0, O_SEED},
        {"shard", required_argument, 0, O_SHARD},
        {"passes", required_argument, 0, O_PASSES},
        {"dtype", required_argument, 0, O_DTYPE},
        {"kv-dtype", required_argument, 0, O_KV_DTYPE},
        {"peers", required_argument, 0, O_PEERS},
        {"quiet", no_argument, 0, O_QUIET},
        {"verbose", no_argument, 0, O_VERBOSE},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    *a = (sweep_args){.passes = 0, /* the preset's */
                      .preset_name = "quick",
                      .max_seconds = 2.0,
                      .min_time = -1,
                      .bind = 1,
                      .seed = 1,
                      .dtypes = MHA_DTYPE_BIT(MHA_F32)};
    int64_t v;
    optind = 1;
    opterr = 0;
    for (int c; (c = getopt_long(argc, argv, "+:h", opts, NULL)) != -1;) {
        switch (c) {
        case O_PRESET:
            a->preset_name = optarg;
            break;
        case O_DTYPE:
            if (!(a->dtypes = parse_dtype_list("sweep: --dtype", optarg, 0))) return -1;
            break;
        case O_KV_DTYPE:
            if (!(a->kv_dtypes = parse_dtype_list("sweep: --kv-dtype", optarg, 1))) return -1;
            break;
        case O_PEERS:
            if (parse_peers(optarg, a) != 0) return -1;
            break;
        case O_KERNELS:
            a->kernel_list = optarg;
            break;
        case O_QUIET:
        case O_VERBOSE:
            if (a->progress && a->progress != (c == O_QUIET ? PROGRESS_QUIET : PROGRESS_VERBOSE)) {
                errorf("sweep: --quiet and --verbose both given; use one");
                return -1;
            }
            a->progress = c == O_QUIET ? PROGRESS_QUIET : PROGRESS_VERBOSE;
            break;
        case O_SEQ:
            a->seq = optarg;
            break;
        case O_SEQ_Q:
            a->seq_q = optarg;
            break;
        case O_SEQ_KV:
            a->seq_kv = optarg;
            break;
        case O_HEADS:
            a->heads = optarg;
            break;
        case O_KV_HEADS:
            a->kv = optarg;
            break;
        case O_HEAD_DIM:
            a->dims = optarg;
            break;
        case O_BATCH:
            a->batch = optarg;
            break;
        case O_CAUSAL:
            a->causal = optarg;
            break;
        case O_THREADS:
            a->threads = optarg;
            break;
        case O_MAX_SECONDS:
            if (!parse_double("--max-seconds", optarg, 1e-6, 86400, 0, &a->max_seconds)) return -1;
            break;
        case O_MIN_TIME:
            if (!parse_double("--min-time", optarg, 1e-6, 86400, 0, &a->min_time)) return -1;
            break;
        case O_REPS:
            if (!parse_i64("--repetitions", optarg, 1, MAX_REPS, &a->reps)) return -1;
            break;
        case O_BIND:
            if (strcmp(optarg, "cores") == 0)
                a->bind = 1;
            else if (strcmp(optarg, "none") == 0)
                a->bind = 0;
            else {
                errorf("sweep: --bind '%s': expected cores or none", optarg);
                return -1;
            }
            break;
        case O_OUT:
            a->out_path = optarg;
            break;
        case O_SEED:
            if (!parse_i64("--seed", optarg, 0, INT64_MAX, &v)) return -1;
            a->seed = (uint64_t)v;
            break;
        case O_SHARD:
            if (shard_parse(optarg, &a->shard) != 0) return -1;
            break;
        case O_PASSES:
            if (!parse_i64("--passes", optarg, 1, SWEEP_MAX_PASSES, &v)) return -1;
            a->passes = (int)v;
            break;
        case 'h':
            usage(stdout);
            return 1;
        case ':':
            errorf("sweep: option '%s' needs a value", argv[optind - 1]);
            return -1;
        default:
            errorf("sweep: unknown option '%s' (Google Benchmark flags go after --)",
                   argv[optind - 1]);
            usage(stderr);
            return -1;
        }
    }
    /* Everything after "--" is for Google Benchmark. */
    if (optind < argc) {
        if (strcmp(argv[optind - 1], "--") != 0) {
            errorf("sweep: unexpected argument '%s' (Google Benchmark flags go after --)",
                   argv[optind]);
            return -1;
        }
        a->pass = argv + optind;
        a->npass = argc - optind;
    }
    /* The Google Benchmark flags we read ourselves. */
    for (int i = 0; i < a->npass; i++) {
        const char *g = a->pass[i];
        if (strncmp(g, "--benchmark_filter=", 19) == 0) a->filter = g + 19;
        if (strncmp(g, "--benchmark_repetitions=", 24) == 0) {
            /* The same request as --repetitions, and honoured as it: an
             * interleaved preset runs one repetition per registration, so
             * passing the flag through would have been overridden (issue:
             * 9 asked, 3 and 5 came out). */
            int64_t r;
            if (!parse_i64("--benchmark_repetitions", g + 24, 1, MAX_REPS, &r)) return -1;
            if (a->reps > 0 && a->reps != r) {
                errorf("sweep: --repetitions %lld and %s disagree; give one", (long long)a->reps,
                       g);
                return -1;
            }
            a->reps = r;
        }
        if (strncmp(g, "--benchmark_out=", 16) == 0) {
            if (a->out_path) {
                errorf("sweep: both --out and --benchmark_out given; use one");
                return -1;
            }
            a->out_path = g + 16;
        }
        if (strncmp(g, "--benchmark_out_format=", 23) == 0 && strcmp(g + 23, "json") != 0) {
            errorf("sweep: '%s': result files are always Google Benchmark JSON", g);
            return -1;
        }
    }
    return 0;
}

/* The grid's axes: the preset's, replaced by any given on the command line. */
typedef struct {
    int64_t seq[MAX_LIST], seq_q[MAX_LIST], seq_kv[MAX_LIST], heads[MAX_LIST], kvh[MAX_LIST],
        dims[MAX_LIST], batch[MAX_LIST], causal[MAX_LIST], threads[MAX_LIST];
    int nseq, nsq, nskv, nheads, nkv, ndims, nbatch, ncausal, nthreads;
    int shape_axes_given;
} sweep_axes;

static int build_axes(const sweep_args *a, const preset *pr, int all, sweep_axes *x) {
    memset(x, 0, sizeof *x);
    x->nseq = pr->nseq, x->nheads = pr->nheads, x->ndims = pr->ndims, x->nbatch = pr->nbatch;
    x->ncausal = pr->ncausal;
    memcpy(x->seq, pr->seq, sizeof pr->seq);
    memcpy(x->heads, pr->heads, sizeof pr->heads);
    memcpy(x->dims, pr->dims, sizeof pr->dims);
    memcpy(x->batch, pr->batch, sizeof pr->batch);
    x->causal[0] = 0;
    x->causal[1] = 1;
    const int64_t big = (int64_t)1 << 24;
    if ((a->seq && (x->nseq = parse_i64_list("--seq", a->seq, 1, big, x->seq, MAX_LIST)) < 0) ||
        (a->seq_q &&
         (x->nsq = parse_i64_list("--seq-q", a->seq_q, 1, big, x->seq_q, MAX_LIST)) < 0) ||
        (a->seq_kv &&
         (x->nskv = parse_i64_list("--seq-kv", a->seq_kv, 1, big, x->seq_kv, MAX_LIST)) < 0) ||
        (a->heads &&
         (x->nheads = parse_i64_list("--heads", a->heads, 1, 4096, x->heads, MAX_LIST)) < 0) ||
        (a->kv && (x->nkv = parse_i64_list("--kv-heads", a->kv, 1, 4096, x->kvh, MAX_LIST)) < 0) ||
        (a->dims &&
         (x->ndims = parse_i64_list("--head-dim", a->dims, 1, 65536, x->dims, MAX_LIST)) < 0) ||
        (a->batch &&
         (x->nbatch = parse_i64_list("--batch", a->batch, 1, 65536, x->batch, MAX_LIST)) < 0) ||
        (a->causal &&
         (x->ncausal = parse_i64_list("--causal", a->causal, 0, 1, x->causal, MAX_LIST)) < 0))
        return -1;
    if (a->threads) {
        if ((x->nthreads = parse_i64_list_all("--threads", a->threads, 1, 1024, all, x->threads,
                                              MAX_LIST)) < 0)
            return -1;
    } else if (pr->threads_full_range) {
        for (int t = 1; t <= all && x->nthreads < MAX_LIST; t++) x->threads[x->nthreads++] = t;
    } else {
        x->threads[x->nthreads++] = 1;
        x->threads[x->nthreads++] = all;
    }
    x->nseq = dedupe(x->seq, x->nseq);
    x->nsq = dedupe(x->seq_q, x->nsq);
    x->nskv = dedupe(x->seq_kv, x->nskv);
    x->nheads = dedupe(x->heads, x->nheads);
    x->nkv = dedupe(x->kvh, x->nkv);
    x->ndims = dedupe(x->dims, x->ndims);
    x->nbatch = dedupe(x->batch, x->nbatch);
    x->ncausal = dedupe(x->causal, x->ncausal);
    x->nthreads = dedupe(x->threads, x->nthreads);
    x->shape_axes_given =
        a->seq || a->seq_q || a->seq_kv || a->heads || a->kv || a->dims || a->batch;
    if (pr->extra_only && x->shape_axes_given && !a->seq && !a->seq_q && !a->seq_kv) {
        /* ci with e.g. --heads only: use the ci lengths as a grid. */
        x->seq[0] = 512;
        x->seq[1] = 1024;
        x->nseq = 2;
    }
    if (pr->extra_only && x->shape_axes_given && !a->heads) {
        x->heads[0] = 8;
        x->nheads = 1;
    }
    if (pr->extra_only && x->shape_axes_given && !a->dims) {
        x->dims[0] = 64;
        x->ndims = 1;
    }
    return 0;
}

/* The --peers that run here into out (probed: an unavailable one is said,
 * noted in skipped and recorded in the context, never an error). Returns
 * the count. */
static int choose_peers(const sweep_args *a, const peer_ops **out, note_list *skipped) {
    const char *const *want = a->peer_names;
    const int nw = a->npeer_names;
    int n = 0;
    for (int i = 0; i < nw; i++) {
        const peer_ops *peer = peer_find(want[i]);
        char why[512] = "", key[64], val[700];
        snprintf(key, sizeof key, "mha_peer_%s", want[i]);
        if (!peer) snprintf(why, sizeof why, "%s", peer_not_built(want[i]));
        if (peer && peer->probe(why, sizeof why)) {
            printf("peer %s: %s\n", want[i], peer->version());
            mha_gbench_add_context(key, peer->version());
            out[n++] = peer;
            continue;
        }
        printf("peer %s: not available here (%s)\n", want[i], why);
        note_add(skipped, "peer.%s: not available here (%s)", want[i], why);
        snprintf(val, sizeof val, "unavailable: %s", why);
        mha_gbench_add_context(key, val);
    }
    fflush(stdout);
    return n;
}

/* Each peer benchmark's output against the float64 oracle before it is
 * timed (peer_check.h): one that fails is reported (and noted in skipped),
 * not timed. The oracle of a shape serves every peer and thread count of it.
 * Returns the benchmarks kept. */
static int check_peers(bench *benches, int nbench, note_list *skipped) {
    peer_oracle o = {0};
    shape held_s; /* the shape o is the oracle of (a copy: benches move below) */
    const shape *held = NULL;
    int kept = 0;
    for (int i = 0; i < nbench; i++) {
        bench *b = &benches[i];
        if (!b->peer) {
            benches[kept++] = *b;
            continue;
        }
        meas_call c;
        const char *err = meas_prepare_peer(&g_pool, b->peer, &b->s, b->threads, &c);
        peer_check_result r = {0};
        int ok = -1;
        if (!err) {
            if (!held || memcmp(held, &b->s, sizeof *held) != 0) {
                peer_oracle_free(&o);
                held = NULL;
                const meas_inputs *in = meas_inputs_of(&g_pool, &b->s);
                const mha_problem p = meas_problem(&b->s);
                if (in && peer_oracle_make(&p, in->q, in->k, in->v, &o)) {
                    held_s = b->s;
                    held = &held_s;
                }
            }
            if (held)
                ok = peer_check(b->peer, c.pi, &o, &r);
            else
                snprintf(r.detail, sizeof r.detail, "the oracle could not run (out of memory)");
        } else {
            snprintf(r.detail, sizeof r.detail, "%s", err);
        }
        if (ok == 1) {
            b->max_err = r.max_err;
            b->check_worst = r.worst;
            snprintf(b->label, sizeof b->label, "%s", b->peer->settings(c.pi));
            printf("check %s: %s\n", b->name, r.detail);
            benches[kept++] = *b;
            continue;
        }
        printf("check %s: %s: %s (not timed)\n", b->name, ok == 0 ? "FAILED" : "could not run",
               r.detail);
        note_add(skipped, "%s (%s the oracle check: %s)", b->name,
                 ok == 0 ? "failed" : "could not run", r.detail);
        free(b->gflops);
        free(b->dist);
    }
    peer_oracle_free(&o);
    fflush(stdout);
    return kept;
}

/* The kernels to sweep (NULL = auto); returns the count or -1. */
static int choose_kernels(const sweep_args *a, const preset *pr, const mha_kernel **kernels) {
    if (a->kernel_list) /* "auto" (NULL here) is mha_select's choice per shape */
        return parse_kernel_list("sweep: --kernels", a->kernel_list,
                                 KL_AUTO | KL_SUPPORTED | KL_TIMED, kernels, MAX_KERNELS);
    int nk = 0;
    for (int i = 0; i < mha_kernel_count() && nk < MAX_KERNELS; i++) {
        const mha_kernel *k = mha_kernel_at(i);
        if (mha_kernel_supported(k) != MHA_OK || (mha_kernel_traits(k) & MHA_KT_EMULATED)) continue;
        /* ci: the project's SIMD kernels only (no reference, no library
         * baseline). The baseline-ISA ones take most of the time and add
         * nothing a regression run needs. */
        if (pr->ci_kernels && ((mha_kernel_traits(k) & (MHA_KT_REFERENCE | MHA_KT_BASELINE)) ||
                               mha_kernel_isa(k) == MHA_ISA_SCALAR))
            continue;
        kernels[nk++] = k;
    }
    /* and what --kernel auto (mha_select) would run, shape by shape */
    if (!pr->ci_kernels && nk < MAX_KERNELS) kernels[nk++] = NULL;
    return nk;
}

/* Pins the threads, measures the machine and each kernel's rate for the time
 * estimates, and says so. Returns the binding's name. */
static const char *measure_machine(const sweep_args *a, const preset *pr, const sweep_axes *x,
                                   int all, const mha_kernel *const *kernels, int nk,
                                   results_machine *rm, double *rate) {
    int64_t tmax = 1;
    for (int i = 0; i < x->nthreads; i++) tmax = x->threads[i] > tmax ? x->threads[i] : tmax;
    const char *binding = "none";
    if (a->bind) {
        const int pool = (int)(tmax > all ? tmax : all);
        if (results_bind_threads(pool)) binding = "cores";
    }
    printf("mhabench sweep: preset %s, %d kernel%s, threads", pr->name, nk, nk == 1 ? "" : "s");
    for (int i = 0; i < x->nthreads; i++) printf("%s%lld", i ? "," : " ", (long long)x->threads[i]);
    printf(", binding %s, seed %llu\nmeasuring the machine (FMA peak per ISA, read bandwidth)...\n",
           binding, (unsigned long long)a->seed);
    fflush(stdout);
    results_measure_machine(rm, 0.15, tmax > 1); /* all-core figures matter to multi-thread rows */
    /* A test hook (tests/test_peak_trust.sh): a start as disturbed as a busy
     * host's, every peak scaled by MHA_SWEEP_TEST_PEAK_SCALE, so the retakes
     * must bring the rows back under 100%. */
    const char *scale = getenv("MHA_SWEEP_TEST_PEAK_SCALE");
    if (scale && atof(scale) > 0 && atof(scale) < 1)
        for (int i = 0; i < MHA_ISA_COUNT; i++) {
            rm->peak_gflops[i] *= atof(scale);
            rm->bf16_peak_gflops[i] *= atof(scale);
        }
    printf("cpu %s (%s), peak GFLOP/s per thread:", rm->m.model, rm->cpu_key);
    for (int i = 0; i < MHA_ISA_COUNT; i++)
        if (rm->peak_gflops[i] > 0)
            printf(" %s %.1f", mha_isa_name((mha_isa)i), rm->peak_gflops[i]);
    printf("; read GB/s (1 thread / %d):", rm->bw_threads_all);
    for (int l = 0; l < MACH_LEVELS; l++)
        printf(" %s %.1f/%.1f", machine_level_name((machine_level)l), rm->level_bw[l][0],
               rm->level_bw[l][1]);
    printf("; all cores at once: %.2f x one core each", rm->fma_ceiling_all);
    if (rm->measure_tries > 1)
        printf("; all-core figures taken twice (the first looked disturbed), the better kept");
    if (rm->disturbed)
        printf(" (still low: the machine looks busy; multi-thread rows use these figures as "
               "measured)");
    printf("\n");
    printf("rates on B=1 H=1 N=256 d=64, 1 thread (for the time estimates):");
    for (int i = 0; i < nk; i++) {
        if (!kernels[i]) { /* auto: estimated from the kernel it picks, per shape */
            rate[i] = 0;
            continue;
        }
        rate[i] = probe_rate(kernels[i]);
        printf(" %s %.1f", mha_kernel_name(kernels[i]), rate[i]);
    }
    printf(" GFLOP/s\n");
    fflush(stdout);
    return binding;
}

/* The shapes: the grid of the axes (unless a preset lists its shapes only),
 * then the preset's extra shapes. Notes go to notes. */
static shape *build_shapes(const sweep_args *a, const preset *pr, const sweep_axes *x,
                           note_list *notes, int *count) {
    int64_t sq_list[MAX_LIST * MAX_LIST], skv_list[MAX_LIST * MAX_LIST];
    int npairs = 0;
    if (x->nsq || x->nskv) {
        const int64_t *qa = x->nsq ? x->seq_q : x->seq, *ka = x->nskv ? x->seq_kv : x->seq;
        const int nqa = x->nsq ? x->nsq : x->nseq, nka = x->nskv ? x->nskv : x->nseq;
        for (int i = 0; i < nqa; i++)
            for (int j = 0; j < nka; j++) {
                sq_list[npairs] = qa[i];
                skv_list[npairs++] = ka[j];
            }
    } else {
        for (int i = 0; i < x->nseq; i++) {
            sq_list[npairs] = x->seq[i];
            skv_list[npairs++] = x->seq[i];
        }
    }
    int n = 0, cap = 64;
    shape *shapes = sweep_realloc(NULL, (size_t)cap, sizeof *shapes);
    if (!pr->extra_only || x->shape_axes_given)
        for (int ib = 0; ib < x->nbatch; ib++)
            for (int ih = 0; ih < x->nheads; ih++)
                for (int ik = 0; ik < (x->nkv ? x->nkv : 1); ik++) {
                    const int64_t kv = x->nkv ? x->kvh[ik] : x->heads[ih];
                    if (x->heads[ih] % kv != 0) {
                        note_add(notes, "--kv-heads %lld does not divide --heads %lld: skipped",
                                 (long long)kv, (long long)x->heads[ih]);
                        continue;
                    }
                    for (int id = 0; id < x->ndims; id++)
                        for (int ic = 0; ic < x->ncausal; ic++)
                            for (int is = 0; is < npairs; is++) {
                                if (n == cap) {
                                    cap *= 2;
                                    shapes = sweep_realloc(shapes, (size_t)cap, sizeof *shapes);
                                }
                                shapes[n++] = (shape){
                                    x->batch[ib], x->heads[ih],       kv, sq_list[is], skv_list[is],
                                    x->dims[id],  (int)x->causal[ic], 0,  MHA_F32,     MHA_F32};
                            }
                }
    if (!x->shape_axes_given)
        for (int i = 0; i < pr->nextra; i++) {
            if (n == cap) {
                cap *= 2;
                shapes = sweep_realloc(shapes, (size_t)cap, sizeof *shapes);
            }
            /* ci's causal shape keeps its mask; --causal filters the others. */
            int keep = pr->extra_only || !a->causal;
            for (int c = 0; c < x->ncausal && !keep; c++)
                keep = x->causal[c] == pr->extra[i].causal;
            if (keep) shapes[n++] = pr->extra[i];
        }
    *count = n;
    return shapes;
}

/* Runs the registered benchmarks through Google Benchmark into out and
 * commits the file. Returns 0 and the run's state, or -1. */
/* ---- follow-up passes -----------------------------------------------------------------
 * After the first pass, a benchmark gets more repetitions when (a) the
 * evidence said some were disturbed (each retaken once, at most as many
 * retakes as planned repetitions), or (b) it was planned with several
 * repetitions and the 95% interval of its median over the clean ones is
 * still wider than SWEEP_TARGET_HALFWIDTH of the median: half the plan
 * again, up to three times the plan in all. Passes stop when nothing needs
 * more, after SWEEP_MAX_PASSES, or when they have taken twice the first
 * pass's time. The extra repetitions run interleaved like the first. */

static int wanted(bench *b, int repetitions) {
    if (b->nres == 0) return 0;
    const int clean = bench_clean(b), disturbed = b->nres - clean;
    /* retakes: every disturbed sample not yet retaken, within the bound */
    int retake = disturbed - b->retaken;
    if (retake > repetitions - b->retaken) retake = repetitions - b->retaken;
    if (retake < 0) retake = 0;
    int more = 0;
    if (repetitions >= 3 && clean >= 3 && b->nres < 3 * repetitions) {
        double lo, hi;
        const double med = bench_stats(b, &lo, &hi);
        if (med > 0 && (hi - lo) / 2 / med > SWEEP_TARGET_HALFWIDTH)
            more = repetitions / 2 > 2 ? repetitions / 2 : 2;
    }
    b->retaken += retake;
    return retake + more;
}

/* One follow-up pass into *pass (an unnamed file beside out). Returns 0
 * when it ran, 1 when nothing needed it, -1 on an error (printed). */
static int run_pass(const sweep_args *a, bench *benches, int nbench, double min_time, int p,
                    const mha_out *out, mha_out *pass, run_state *rs) {
    int *want = sweep_realloc(NULL, (size_t)nbench, sizeof *want), nreg = 0, nb = 0;
    for (int i = 0; i < nbench; i++) {
        want[i] = wanted(&benches[i], benches[i].reps);
        nreg += want[i];
        nb += want[i] > 0;
    }
    if (nreg == 0) {
        free(want);
        return 1;
    }
    int *order = sweep_realloc(NULL, (size_t)nreg, sizeof *order), k = 0;
    for (int i = 0; i < nbench; i++)
        for (int r = 0; r < want[i]; r++) order[k++] = i;
    shuffle_order(order, nreg, a->seed ^ (0x9a55ull * (uint64_t)p));
    mha_gbench_clear();
    for (int i = 0; i < nreg; i++)
        if (register_one(&benches[order[i]], want[order[i]]) != 0) {
            free(order);
            free(want);
            return -1;
        }
    int *extra0 = sweep_realloc(NULL, (size_t)nbench, sizeof *extra0);
    for (int i = 0; i < nbench; i++) {
        extra0[i] = benches[i].extra;
        benches[i].extra += want[i];
    }
    free(order);
    free(want);
    char why[1024], path[4200];
    snprintf(path, sizeof path, "%s.pass%d", out->target, p);
    if (mha_out_begin(pass, path, MHA_OUT_REPLACE, why, sizeof why) != MHA_OK) {
        errorf("sweep: pass %d: %s", p + 1, why);
        free(extra0);
        return -1;
    }
    char a_min[64];
    snprintf(a_min, sizeof a_min, "--benchmark_min_time=%g", min_time);
    char *gargv[] = {(char *)"mhabench", a_min, (char *)"--benchmark_repetitions=1", NULL};
    if (rs->prog.mode != PROGRESS_QUIET) {
        printf("\npass %d: %d more repetition%s of %d benchmark%s (disturbed ones retaken, "
               "intervals wider than %.0f%% narrowed)\n",
               p + 1, nreg, nreg == 1 ? "" : "s", nb, nb == 1 ? "" : "s",
               100 * SWEEP_TARGET_HALFWIDTH);
        fflush(stdout);
    }
    /* the peaks spread over the run: taken again before each pass */
    if (g_rm) {
        results_retake_peaks(g_rm, -1, 1, 0.1);
        refresh_peaks();
    }
    rs->done = 0;
    rs->total = nreg;
    const progress_mode mode = rs->prog.mode;
    progress_begin(&rs->prog, mode, rs->ngroups);
    rs->prog.quiet_lines = 1;
    for (int i = 0; i < nbench; i++)
        for (int r = 0; r < benches[i].extra - extra0[i]; r++)
            progress_plan(&rs->prog, benches[i].group, benches[i].cost);
    free(extra0);
    const int rc = mha_gbench_run(3, gargv, pass->name, on_report, rs);
    progress_end(&rs->prog);
    if (rc != 0 || results_json_fix_nonfinite(pass, why, sizeof why) != MHA_OK) {
        errorf("sweep: pass %d failed%s%s", p + 1, rc ? "" : ": ", rc ? "" : why);
        mha_out_abort(pass);
        return -1;
    }
    return 0;
}

static int run_and_commit(const sweep_args *a, bench *benches, int nbench, int ngroups,
                          int interleaved, int repetitions, double min_time, int nskipped,
                          mha_out *out, time_t started, run_state *rs, double *t0) {
    /* Google Benchmark's argv: ours first, the pass-through ones after (so
     * they win). */
    char a_min[64], a_reps[64], why[1024];
    snprintf(a_min, sizeof a_min, "--benchmark_min_time=%g", min_time);
    snprintf(a_reps, sizeof a_reps, "--benchmark_repetitions=%d", interleaved ? 1 : repetitions);
    char **gargv = sweep_realloc(NULL, (size_t)a->npass + 4, sizeof *gargv);
    int gargc = 0;
    gargv[gargc++] = (char *)"mhabench";
    gargv[gargc++] = a_min;
    gargv[gargc++] = a_reps;
    for (int i = 0; i < a->npass; i++) /* ours carry --out and the repetitions */
        if (strncmp(a->pass[i], "--benchmark_out=", 16) != 0 &&
            strncmp(a->pass[i], "--benchmark_repetitions=", 24) != 0)
            gargv[gargc++] = a->pass[i];
    gargv[gargc] = NULL;

    unsigned char *match = sweep_realloc(NULL, (size_t)(nbench ? nbench : 1), 1);
    const int filtered = count_filtered(benches, nbench, a->filter, match);
    const int rows_per = repetitions;
    int rows = 0; /* interleaved: each benchmark's own count (baseline kernels fewer) */
    for (int i = 0; i < nbench; i++) rows += interleaved ? benches[i].reps : rows_per;
    memset(rs, 0, sizeof *rs);
    rs->benches = benches;
    rs->nbench = nbench;
    rs->total = filtered == nbench ? rows : filtered * rows_per;
    rs->interleaved = interleaved;
    rs->ngroups = ngroups;
    if (filtered < 0) rs->total = -1;
    progress_begin(&rs->prog, a->progress, ngroups);
    for (int i = 0; i < nbench; i++)
        for (int r = 0; r < (interleaved ? benches[i].reps : rows_per) && match[i]; r++)
            progress_plan(&rs->prog, benches[i].group, benches[i].cost);
    free(match);
    char est[48];
    progress_duration(rs->prog.cost_total * (a->passes > 1 ? 1.25 : 1.0), est, sizeof est);
    printf("%d benchmark%s x %d repetition%s (%s), min time %g s, %d skipped; %s\n", nbench,
           nbench == 1 ? "" : "s", rows_per, rows_per == 1 ? "" : "s",
           interleaved ? "interleaved" : "grouped", min_time, nskipped, est);
    fflush(stdout);
    *t0 = now_s();
    const int rc = mha_gbench_run(gargc, gargv, out->name, on_report, rs);
    progress_end(&rs->prog);
    free(gargv);
    if (rc == MHA_GBENCH_NO_MATCH) {
        errorf("sweep: no benchmark matched --benchmark_filter=%s; nothing written",
               a->filter ? a->filter : "");
        return -1;
    }
    if (rc != 0) return -1;
    struct stat sb;
    if (fstat(out->fd, &sb) != 0 || sb.st_size == 0) {
        errorf("sweep: Google Benchmark wrote no results to '%s'; nothing committed", out->target);
        return -1;
    }
    if (results_json_fix_nonfinite(out, why, sizeof why) != MHA_OK) {
        errorf("sweep: %s", why);
        return -1;
    }
    /* Follow-up passes: disturbed repetitions retaken, wide intervals
     * narrowed; their rows join the file (fmt_rows.c). */
    mha_out passes[SWEEP_MAX_PASSES];
    int npasses = 0;
    const double pass1 = now_s() - *t0;
    for (int p = 1; p < a->passes && now_s() - *t0 < 3 * pass1; p++) { /* a->passes: resolved */
        if (run_pass(a, benches, nbench, min_time, p, out, &passes[npasses], rs) != 0) break;
        npasses++;
    }
    const mha_status fst = rows_finish(out, passes, npasses, why, sizeof why);
    for (int p = 0; p < npasses; p++) mha_out_abort(&passes[p]);
    if (fst != MHA_OK) {
        errorf("sweep: %s", why);
        return -1;
    }
    if (results_json_add_dtypes(out, why, sizeof why) != MHA_OK ||
        (a->out_path ? mha_out_commit(out, why, sizeof why)
                     : results_commit_run(out, RUNS_DIR, started, why, sizeof why)) != MHA_OK) {
        errorf("sweep: %s", why);
        return -1;
    }
    return 0;
}

/* An empty shard is still a shard: its file holds the context (machine,
 * list, shard) and no rows, so merge sees every index of a complete run. */
static int write_empty_shard(const sweep_args *a, mha_out *out, time_t started) {
    char why[1024];
    if (mha_gbench_write_context(out->name) != 0) return EXIT_USAGE;
    if (results_json_fix_nonfinite(out, why, sizeof why) != MHA_OK ||
        (a->out_path ? mha_out_commit(out, why, sizeof why)
                     : results_commit_run(out, RUNS_DIR, started, why, sizeof why)) != MHA_OK) {
        errorf("sweep: %s", why);
        return EXIT_USAGE;
    }
    printf("empty shard (no benchmark of the list fell to it): wrote %s with no rows\n",
           out->target);
    return 0;
}

int cmd_sweep(int argc, char **argv) {
    sweep_args a;
    const int parsed = parse_sweep_args(argc, argv, &a);
    if (parsed != 0) return parsed > 0 ? 0 : EXIT_USAGE;
    if (!check_isa_env()) return EXIT_USAGE;
    const preset *prp = preset_find(a.preset_name);
    if (!prp) {
        errorf("sweep: --preset '%s': expected quick, full, ci or roofline", a.preset_name);
        return EXIT_USAGE;
    }
    const preset pr = *prp;
    note_no_tuning_table(stdout);
    machine_info mi;
    machine_describe(&mi);
    const int all = mi.cores > 0 ? mi.cores : 1;
    sweep_axes x;
    if (build_axes(&a, &pr, all, &x) != 0) return EXIT_USAGE;
    const double min_time = a.min_time < 0 ? pr.min_time : a.min_time;
    const int interleaved = pr.interleaved;
    const int repetitions = a.reps > 0 ? (int)a.reps : pr.repetitions;
    if (!a.passes) a.passes = pr.passes ? pr.passes : SWEEP_MAX_PASSES;
    const mha_kernel *kernels[MAX_KERNELS];
    const int nk = choose_kernels(&a, &pr, kernels);
    if (nk < 0) return EXIT_USAGE;

    /* The results file, created (unnamed) before any measurement: a bad --out
     * fails here, and a killed sweep leaves nothing behind. A run file in
     * results/runs never replaces another (a -2, -3 ... suffix instead); a
     * user-named --out may replace a regular file. */
    mha_out out;
    char why[1024], path[4096];
    const time_t started = time(NULL);
    if (a.out_path)
        snprintf(path, sizeof path, "%s", a.out_path);
    else if (!results_run_path(RUNS_DIR, started, 0, path, sizeof path)) {
        errorf("sweep: run-file name too long");
        return EXIT_USAGE;
    }
    if (mha_out_begin(&out, path,
                      (a.out_path ? MHA_OUT_REPLACE : MHA_OUT_NOREPLACE) | MHA_OUT_MKDIRS, why,
                      sizeof why) != MHA_OK) {
        errorf("sweep: --out: %s", why);
        return EXIT_USAGE;
    }
    meas_pool_init(&g_pool, a.seed);
    results_machine rm;
    double rate[MAX_KERNELS];
    const char *binding = measure_machine(&a, &pr, &x, all, kernels, nk, &rm, rate);

    note_list skipped = {0}, notes = {0}, aliases = {0};
    int nshapes = 0, nbench = 0, ngroups = 0, exit_code = 0;
    const peer_ops *peers[MAX_PEERS];
    for (int t = 0; t < MHA_DTYPE_COUNT; t++) /* what bounds a peer's claimed time */
        peer_set_peak((mha_dtype)t, results_machine_peak(&rm, (mha_dtype)t));
    const int npeers = choose_peers(&a, peers, &skipped);
    shape *shapes = build_shapes(&a, &pr, &x, &notes, &nshapes);
    shapes = expand_dtypes(shapes, &nshapes, a.dtypes, a.kv_dtypes);
    const bench_plan plan = {&pr,
                             kernels,
                             rate,
                             nk,
                             x.threads,
                             x.nthreads,
                             a.kernel_list != NULL,
                             &rm,
                             a.max_seconds,
                             min_time,
                             peers,
                             npeers,
                             a.progress == PROGRESS_VERBOSE};
    bench *benches = plan_benches(&plan, shapes, nshapes, &skipped, &aliases, &nbench, &ngroups);
    free(shapes);
    for (int i = 0; i < notes.n; i++) printf("note: %s\n", notes.items[i].text);
    int empty_shard = 0; /* a list with fewer benchmarks than shards leaves some none */
    if (a.shard.count > 0) {
        empty_shard = nbench > 0;
        nbench = take_shard(benches, nbench, &a.shard, min_time);
        empty_shard &= nbench == 0;
    }
    if (npeers > 0) nbench = check_peers(benches, nbench, &skipped);
    for (int i = 0; i < nbench; i++) { /* repetitions per benchmark */
        bench *b = &benches[i];
        b->reps = repetitions;
        if (interleaved && pr.baseline_reps > 0 && a.reps == 0 && b->k && !b->peer &&
            mha_kernel_isa(b->k) == MHA_ISA_SCALAR && !(mha_kernel_traits(b->k) & MHA_KT_BASELINE))
            b->reps = pr.baseline_reps;
    }
    if (nbench == 0 && !empty_shard) {
        errorf("sweep: nothing to run (every combination was skipped)");
        exit_code = EXIT_USAGE;
        goto done;
    }
    if (nbench > 0 && register_benches(benches, nbench, interleaved, pr.by_shape, a.seed) != 0) {
        exit_code = EXIT_USAGE;
        goto done;
    }
    int max_threads = 1;
    for (int i = 0; i < x.nthreads; i++)
        max_threads = x.threads[i] > max_threads ? (int)x.threads[i] : max_threads;
    const results_run_info ri = {pr.name, binding, interleaved ? "interleaved" : "grouped",
                                 max_threads, a.seed};
    results_context(&rm, &ri, ctx_emit, NULL);
    char buf[64];
    snprintf(buf, sizeof buf, "%g", a.max_seconds);
    mha_gbench_add_context("mha_max_seconds", buf);
    snprintf(buf, sizeof buf, "%d", skipped.n);
    mha_gbench_add_context("mha_skipped", buf);
    /* auto rows not measured twice: "auto/<shape> = <row>; ..." (or none) */
    size_t alen = 8;
    for (int i = 0; i < aliases.n; i++) alen += strlen(aliases.items[i].text) + 2;
    char *ajoin = xrealloc_or_exit(NULL, alen, 1, "sweep");
    ajoin[0] = '\0';
    for (int i = 0; i < aliases.n; i++) {
        if (i) strcat(ajoin, "; ");
        strcat(ajoin, aliases.items[i].text);
    }
    mha_gbench_add_context("mha_auto_rows", aliases.n ? ajoin : "none");
    free(ajoin);

    if (empty_shard) {
        exit_code = write_empty_shard(&a, &out, started);
        goto done;
    }
    g_rm = &rm;
    g_benches = benches;
    g_nbench = nbench;
    mha_gbench_add_context("mha_peak_rule",
                           "each row's pct_peak is of its peak counter: the best take of the "
                           "machine's peaks so far (at the start, before each follow-up pass, and "
                           "whenever a row came within 3% of its peak); a row still above it is "
                           "flagged peak_exceeded, a measurement error");
    run_state rs;
    double t0;
    if (run_and_commit(&a, benches, nbench, ngroups, interleaved, repetitions, min_time, skipped.n,
                       &out, started, &rs, &t0) != 0) {
        exit_code = EXIT_USAGE;
        goto done;
    }
    snprintf(path, sizeof path, "%s", out.target);
    if (report_sweep(benches, nbench, &skipped, rs.runs, t0, path,
                     a.progress == PROGRESS_VERBOSE ? REPORT_VERBOSE : REPORT_SHORT,
                     a.progress == PROGRESS_VERBOSE) > 0)
        exit_code = EXIT_CHECK_FAILED;

done:
    g_rm = NULL;
    g_benches = NULL;
    g_nbench = 0;
    mha_out_abort(&out); /* no-op after a commit */
    for (int i = 0; i < nbench; i++) {
        free(benches[i].gflops);
        free(benches[i].dist);
    }
    free(benches);
    note_free(&skipped);
    note_free(&notes);
    note_free(&aliases);
    meas_pool_release(&g_pool);
    for (int i = 0; i < npeers; i++)
        if (peers[i]->shutdown) peers[i]->shutdown();
    mha_gbench_clear();
    return exit_code;
}
