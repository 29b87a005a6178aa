/* meas_core.h - the harness's measurement core. A pool owns the inputs (filled
 * and touched before any timing, a few shapes cached) and one grow-only
 * workspace; a call binds a kernel, its options and a problem (the attention
 * core or the full layer) to them; and every timing loop of the harness is
 * here: Google Benchmark's (sweep), a fixed count of timed samples (tune,
 * the sweep's rate probe, attend, forward), round-robin samples of several
 * calls (tune's final round) and a time budget (profile). meas_run is the
 * one place that calls a kernel inside a timed region; nothing in a timed
 * region allocates, prints or locks. */
#ifndef MHA_HARNESS_MEASURE_H
#define MHA_HARNESS_MEASURE_H

#include <stddef.h>
#include <stdint.h>

#include "meas_gbench.h"
#include "mha.h"
#include "peers/peer.h"

/* A problem to time. layer = 1: the full MHA layer (mha_forward) with
 * d_model = h * d, self-attention over nq = nkv tokens; its weights and
 * biases live in the k buffer, stored like its input and output in dtype
 * (kv_dtype unused). dtype / kv_dtype: how Q/O and K/V are
 * stored (0 = fp32; kv_dtype 0 = dtype, as in mha_problem); inputs are
 * filled in fp32, then rounded or quantised per row (int8 + scales).
 * The attention variants, as in mha_problem (0 = none, so positional
 * initialisers that stop at kv_dtype keep their meaning): window and its
 * edges (-1 = unbounded), softcap, sinks (the pool holds one seeded fp32
 * logit per query head, passed as mha_extras.sinks) and head_dim_v (0 = d;
 * V and O are head_dim_v wide). page > 0 is the paged layout: the b
 * sequences of nq queries (q and out packed [b nq, h, d]) over nkv keys
 * each in a pool of ceil(nkv / page) blocks per sequence, shuffled by a
 * seeded block table (mha_problem.layout = MHA_LAYOUT_PAGED); the same
 * visible pairs as the dense shape. ragged > 0 gives the b sequences
 * their own lengths (meas_ragged_len) in the packed layout (q, k, v, out
 * [T, heads, d]), or the paged one with page. No padding: inputs are
 * cached by memcmp. */
typedef struct {
    int64_t b, h, kv, nq, nkv, d;
    int causal;
    int layer;
    mha_dtype dtype, kv_dtype;
    int window, sinks;
    int64_t window_left, window_right, head_dim_v;
    double softcap;
    int64_t page;   /* > 0: a paged KV cache of `page` keys per block (meas_problem) */
    int64_t ragged; /* > 0: ragged lengths from `ragged` keys up (meas_ragged_len), packed */
} meas_shape;

enum { MEAS_INPUT_CACHE = 4 };

typedef struct {
    meas_shape s;
    void *q, *k, *v, *o; /* in the shape's dtypes */
    float *k_sc, *v_sc;  /* int8 row scales, else NULL */
    float *sinks;        /* [h] sink logits, uniform [-1, 1), when s.sinks; else NULL */
    int32_t *cu_q, *cu_kv, *lens, *table; /* packed / paged: the index arrays */
    size_t bytes;
    uint64_t last_use;
} meas_inputs;

/* A prepared peer instance (harness/peers): one per (peer, shape, threads),
 * kept while the pool lives (a session or graph is costly to make), the
 * least recently used released past MEAS_PEER_CACHE. */
enum { MEAS_PEER_CACHE = 24 };
typedef struct {
    const peer_ops *peer;
    meas_shape s;
    int threads;
    peer_inst *pi;
    uint64_t last_use;
} meas_peer_slot;

/* Inputs (least recently used shape goes), the workspace and the prepared
 * peers. Zero it, or use meas_pool_init; meas_pool_release frees everything. */
typedef struct {
    uint64_t seed;
    meas_inputs in[MEAS_INPUT_CACHE];
    uint64_t use_clock;
    void *ws;
    size_t ws_size;
    meas_peer_slot peers[MEAS_PEER_CACHE];
} meas_pool;

/* One prepared call. For a layer, q.data, k.data and v.data are the query,
 * key and value inputs of mha_forward and out.data its output. */
typedef struct {
    const mha_kernel *kernel;
    mha_problem p;
    mha_options o;
    mha_tensor q, k, v;
    mha_tensor_mut out;
    mha_extras x; /* the sink logits of p.sinks: the pool's (meas_prepare), else set after
                     meas_call_attend */
    void *ws;
    size_t ws_size;
    int layer;
    mha_layer L;
    mha_layer_shape ls;
    /* A peer's call instead of a kernel's (kernel NULL): meas_run runs the
     * peer's instance; its own clock, when it has one, times the samples. */
    const peer_ops *peer;
    peer_inst *pi;
} meas_call;

void meas_pool_init(meas_pool *m, uint64_t seed);
void meas_pool_release(meas_pool *m);

mha_problem meas_problem(const meas_shape *s);
meas_shape meas_shape_of(const mha_problem *p);
size_t meas_elems_q(const meas_shape *s);
size_t meas_elems_kv(const meas_shape *s);
/* V's and O's elements, head_dim_v wide (meas_elems_kv and _q: K's and Q's). */
size_t meas_elems_v(const meas_shape *s);
size_t meas_elems_o(const meas_shape *s);
/* 1 when the shape has an attention variant (window, softcap, sinks, d_v != d). */
int meas_has_variant(const meas_shape *s);
/* The FLOPs of a shape's attention (mha_problem_flops; a paged shape's are
 * its dense shape's: the same visible pairs). */
double meas_flops(const meas_shape *s);
/* Sequence i of a ragged shape: keys log-uniform in [min(ragged, nkv), nkv]
 * from a seed of (b, nq, nkv, ragged, i), so every kernel, thread count,
 * pass and run sees the same batch; queries as many when nq == nkv
 * (self-attention), else min(nq, keys). */
void meas_ragged_len(const meas_shape *s, int64_t i, int64_t *nq, int64_t *nkv);
/* Its variants in words for progress lines and messages: " window=L:R
 * softcap=C sinks d_v=D" (each only when on; "" without variants). */
const char *meas_variant_text(const meas_shape *s, char *buf, size_t len);
/* Bytes of Q, K (or the layer's weights and biases), V and O as stored (V, O
 * head_dim_v wide), and the sink logits. */
size_t meas_input_bytes(const meas_shape *s);
/* Bytes one attention call reads and writes at the storage widths: K and V
 * elements x the K/V dtype's size (+ one fp32 scale per row each for int8),
 * Q and O at the problem's dtype: what a bandwidth-bound (decode) row moves. */
double meas_io_bytes(const meas_shape *s);
/* The layer of a layer shape (of the shape's dtype), its weights carved from
 * w, which holds elements of that dtype (NULL: no weights, enough for
 * workspace and FLOP queries). */
mha_layer meas_layer(const meas_shape *s, const void *w);

/* The pool's workspace, at least bytes (grown and zeroed when needed, which
 * moves it: calls prepared before then hold the old pointer). NULL when out
 * of memory. */
void *meas_workspace(meas_pool *m, size_t bytes);

/* Prepares c: the shape's inputs (uniform [-1, 1) from the pool's seed and
 * the shape; layer weights scaled by 1/sqrt(d_model)), views, the workspace
 * from mha_workspace_size or mha_forward_workspace_size. Returns NULL, or a
 * message (static storage). c stays valid until the next meas_prepare or
 * meas_workspace on the same pool. */
const char *meas_prepare(meas_pool *m, const mha_kernel *k, const meas_shape *s,
                         const mha_options *o, meas_call *c);

/* Prepares c as a call of peer at `threads` threads on the shape's inputs
 * (the same values our kernels get): the peer's instance is made once per
 * (peer, shape, threads) and kept in the pool. NULL, or why (static
 * storage). */
const char *meas_prepare_peer(meas_pool *m, const peer_ops *peer, const meas_shape *s, int threads,
                              meas_call *c);
/* The shape's inputs as the pool holds them (q, k, v typed; NULL when out of
 * memory): what a peer's output is checked on. */
const meas_inputs *meas_inputs_of(meas_pool *m, const meas_shape *s);
/* The extras of a shape's inputs: the sink logits, and the packed and paged
 * layouts' index arrays (those the shape has; the rest NULL). What
 * meas_prepare passes a kernel and meas_prepare_peer a peer. */
mha_extras meas_inputs_extras(const meas_inputs *in);
/* Why the last peer call failed (meas_run returned MHA_EIO). */
const char *meas_peer_error(void);

/* A call over buffers the caller owns (attend, forward): views, output and
 * workspace as given. */
meas_call meas_call_attend(const mha_kernel *k, const mha_problem *p, const mha_options *o,
                           const mha_tensor *q, const mha_tensor *kt, const mha_tensor *v,
                           const mha_tensor_mut *out, void *ws, size_t ws_size);
meas_call meas_call_forward(const mha_kernel *k, const mha_layer *L, const mha_layer_shape *ls,
                            const mha_options *o, const void *x, const void *key, const void *value,
                            void *out, void *ws, size_t ws_size);

/* One call, untimed (warm-ups, checks). */
mha_status meas_run(const meas_call *c);

/* One timed call: *seconds is its wall time (a peer with its own clock: its
 * time of the call, the round trip to its helper process left out). */
mha_status meas_sample(const meas_call *c, double *seconds);

/* Timed samples of one call into times[]: at least min_reps, then more while
 * less than time_cap seconds have passed since the first, at most max_reps.
 * Returns the count; *status (may be NULL) is MHA_OK unless a call failed. */
int meas_repeat(const meas_call *c, double *times, int min_reps, int max_reps, double time_cap,
                mha_status *status);

/* The same for n calls round-robin (a burst of other load hits them alike):
 * a round times each call once; times[i * max_reps + r] is call i's sample
 * in round r. Returns the rounds. */
int meas_interleave(const meas_call *c, int n, double *times, int min_reps, int max_reps,
                    double time_cap);

/* Calls c back to back until seconds have passed: *calls calls in *elapsed
 * seconds (clock read after each call). */
mha_status meas_for(const meas_call *c, double seconds, int *calls, double *elapsed);

/* Google Benchmark's timed loop over c (the state keeps its own iteration
 * count and clock). */
mha_status meas_gbench(mha_gbench_state *st, const meas_call *c);

/* ---- evidence that a sample ran undisturbed ---------------------------------
 * A shared VM's host takes a core's throughput away for seconds at a time;
 * such samples must not decide anything. Around a sample, every thread in
 * use runs two short probes before and after, about MEAS_PROBE_SECONDS
 * each: the active ISA's FMA peak loop (the FMA pipes only) and its
 * interference loop (kernels/peak.c: FMAs, L1 loads, adds and integer
 * operations at once, so a competitor for any of the core's shared
 * resources slows it); the process's involuntary context switches and the
 * machine's steal time are read around it. A slow probe (its rate against
 * the best this process has seen at that thread count), a preemption or
 * stolen time is evidence of interference. */
#define MEAS_PROBE_SECONDS 200e-6
/* A sample counts as disturbed when the FMA probe's ratio is below
 * MEAS_PROBE_MIN, the interference probe's below MEAS_CORE_PROBE_MIN, the
 * process was preempted more than MEAS_PREEMPT_MAX times, or time was
 * stolen. Chosen on measured samples (README, "Interference evidence"):
 * the FMA rule flags 1 of 200 quiet samples and every sample slowed by more
 * than 5% under a competing process on the same vCPU, but only 7% of the
 * kernel calls that a busy host slowed by more than 5%; the interference
 * probe below 0.60 adds the deep dips (calls there ran about 10% slow) at
 * 0.3% of the calls that were not slower. Higher interference thresholds
 * catch more (0.75: 33%) but in busy minutes flag most samples of kernels
 * that lost only 2%, which left rows without enough samples to judge. */
#define MEAS_PROBE_MIN 0.80
#define MEAS_CORE_PROBE_MIN 0.60
#define MEAS_PREEMPT_MAX 1
enum { MEAS_PROBES = 2 }; /* 0: the FMA probe, 1: the interference probe */
typedef struct {
    double probe;      /* the FMA probe: slowest rate (before/after, any thread) / best seen */
    double probe_core; /* the interference probe, the same way */
    long preempted;    /* involuntary context switches during the sample (whole process) */
    double stolen;     /* steal time during the sample, seconds (all CPUs; 0 if unknown) */
} meas_evidence;

/* The same evidence around any stretch of work (a Google Benchmark
 * repetition): begin before it, end after it. */
typedef struct {
    double steal0, before[MEAS_PROBES]; /* each probe's rate before */
    long csw0;
    int threads;
} meas_window;
void meas_window_begin(meas_window *w, int threads);
void meas_window_end(const meas_window *w, meas_evidence *ev);
/* ---- the measurement policy ---------------------------------------------------------
 * The rules every measurement here follows (sweep and tune read them from
 * this one struct): the evidence's thresholds above, the half-width of a
 * median's 95% interval that is narrow enough (the sweep's follow-up passes
 * and tune's rounds stop there), and the share of the machine other
 * processes may take before a window is called contended (tune flags the
 * class and repeats its final round; the sweep says so in mha_load). */
typedef struct {
    double probe_min;        /* MEAS_PROBE_MIN */
    double core_probe_min;   /* MEAS_CORE_PROBE_MIN */
    int preempt_max;         /* MEAS_PREEMPT_MAX per 20 ms */
    double target_halfwidth; /* 0.02 */
    double contended_share;  /* 0.10 */
    /* A steady background (meas_background_steady): other processes held at
     * least steady_share of the machine over a run's first pass and the rule
     * above marked at least steady_disturbed of its repetitions. */
    double steady_share;     /* 0.25 */
    double steady_disturbed; /* 0.50 */
    /* Under it, a burst (meas_burst): a preemption rate above burst_factor x
     * the run's median at that thread count plus the quiet allowance. */
    double burst_factor; /* 2.0 */
} meas_policy;
extern const meas_policy MEAS_POLICY;

/* ---- a steady background and the bursts above it ------------------------------------
 * On a runner whose cores are shared for the whole run (another process on
 * every core), the rule above marks nearly every repetition disturbed: each
 * is preempted many times. Such a background slows the two sides of a
 * comparison alike (and the interleaved A/B rounds cancel what drifts), so
 * dropping every repetition would judge nothing for no gain. A run is under
 * a steady background when the load check and the rule agree that the
 * machine was shared throughout (MEAS_POLICY.steady_share over the first
 * pass, MEAS_POLICY.steady_disturbed of its repetitions marked); its
 * repetitions are then judged against the run's own level: a burst is one
 * preempted more than burst_factor times as often as the run's median at
 * its thread count (per second and thread, plus the quiet allowance of
 * preempt_max per 20 ms), or one during which time was stolen. The probes
 * are not used there: a 200 us probe under time-slicing sees a slice
 * boundary or not, which says nothing about a change in the load. */
int meas_background_steady(double other_share, double disturbed_share);
/* 1 when a repetition with this preemption rate (per second and thread)
 * and stolen time is a burst above a run whose median rate is median_rate. */
int meas_burst(double preempt_rate, double median_rate, double stolen);

/* Other processes' share of the machine over a window: busy time of all
 * CPUs (/proc/stat, steal included: a VM's host taking the core hurts the
 * same) minus this process's own (/proc/self/stat), over CPUs x wall time.
 * Both count in clock ticks (10 ms), so windows shorter than
 * MEAS_MIN_LOAD_WINDOW report -1 (unknown); a steady share above
 * MEAS_POLICY.contended_share is a loaded machine, not a burst. */
#define MEAS_MIN_LOAD_WINDOW 0.25
typedef struct {
    double wall;
    unsigned long long busy, self;
} meas_load;
/* Takes the window's start or end. */
void meas_load_mark(meas_load *m);
/* Other processes' share of the machine between a and b (0..1), -1 unknown. */
double meas_load_share(const meas_load *a, const meas_load *b);

/* meas_disturbed for a stretch of `seconds`: a quiet VM preempts a process
 * now and then, so the preemption bound grows with the stretch
 * (MEAS_PREEMPT_MAX per 20 ms). */
int meas_disturbed_for(const meas_evidence *ev, double probe_min, double seconds);

/* One timed call bracketed by probes on `threads` threads; *ev says what
 * happened around it. */
mha_status meas_sample_guarded(const meas_call *c, int threads, double *seconds, meas_evidence *ev);
/* 1 if ev shows interference: probe below probe_min, more than
 * MEAS_PREEMPT_MAX preemptions, or any steal. */
int meas_disturbed(const meas_evidence *ev, double probe_min);

/* ---- retakes and adaptive repetitions ------------------------------------------
 * The loop tune (and whoever wants numbers that hold on a shared VM) uses:
 * n calls round-robin (drift hits them alike), each sample bracketed by the
 * evidence above; a disturbed sample is taken again, up to max_retakes in
 * all (then kept and counted); rounds go on until every call's median has a
 * 95% interval whose half-width is at most `target` of the median (after
 * min_reps), or the next round would end past time_cap (judged by the mean
 * round so far, retakes included), or max_reps rounds. The tally carries
 * the evidence of the whole loop: retakes, disturbed samples kept, and the
 * load check's share of other processes over it. */
typedef struct {
    int threads; /* threads the calls run on (the probe runs on as many) */
    int min_reps, max_reps;
    double time_cap;  /* no round that would end past this many seconds (min_reps always run) */
    double target;    /* relative half-width of the median interval to stop at; 0: never early */
    int max_retakes;  /* disturbed samples retaken, in all */
    double probe_min; /* MEAS_PROBE_MIN unless a caller knows better */
    int calls;        /* calls per sample, back to back (0 or 1: one); a sample is their mean */
} meas_plan;

typedef struct {
    int reps;               /* rounds: samples per call */
    int retakes;            /* disturbed samples that were taken again */
    int disturbed_kept;     /* disturbed samples kept because the retakes ran out */
    double worst_halfwidth; /* the largest relative half-width at the end */
    /* The load check over the whole loop (meas_load_share): other processes'
     * share of the machine, -1 when the loop was too short to tell; above
     * MEAS_POLICY.contended_share the loop ran on a loaded machine, which
     * per-sample probes can miss when the load is steady. */
    double other_share;
} meas_tally;

/* times[i * pl->max_reps + r] is call i's sample of round r (with
 * pl->calls > 1, the mean of that many calls inside one bracket: a call of
 * a fraction of a millisecond is shorter than the probes and the timer
 * tick's noise). Returns the rounds (also in t->reps). */
int meas_interleave_guarded(const meas_call *c, int n, const meas_plan *pl, double *times,
                            meas_tally *t);

/* The relative half-width of the 95% median interval of n samples (not
 * modified): (hi - lo) / 2 / median; 1 when it cannot be formed. */
double meas_halfwidth(const double *x, int n);

#endif
