/* args.c - the sweep's command line: its options and the grid's axes. */
#include "sweep.h"

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
    O_LIST_PRESETS,
    O_WINDOW,
    O_SOFTCAP,
    O_SINKS,
    O_HEAD_DIM_V,
    O_PAGE_SIZE,
    O_RAGGED,
};

/* The options, as data: the parser, the usage and the options section come
 * from these rows (opts.h). */
static const opt_row ROWS[] = {
    {"preset", required_argument, O_PRESET, 0, "NAME", 0,
     "one of the presets above (default quick); the axis options replace its values"},
    {"kernels", required_argument, O_KERNELS, 0, "LIST", 0,
     "comma list; 'auto' = mha_select's choice per shape (default: every kernel that runs "
     "here, and auto except for ci)"},
    {"seq", required_argument, O_SEQ, 0, "N,..", 0, "self-attention lengths (Nq = Nkv)"},
    {"seq-q", required_argument, O_SEQ_Q, 0, "N,..", 0,
     "cross-attention query lengths: every (Nq, Nkv) pair (the other defaults to --seq)"},
    {"seq-kv", required_argument, O_SEQ_KV, 0, "N,..", 0, "cross-attention key/value lengths"},
    {"heads", required_argument, O_HEADS, 0, "H,..", 0, "query head counts"},
    {"kv-heads", required_argument, O_KV_HEADS, 0, "G,..", 0,
     "KV head counts (GQA/MQA); values not dividing a head count are skipped for it "
     "(default: equal to heads)"},
    {"head-dim", required_argument, O_HEAD_DIM, 0, "D,..", 0, "head dims"},
    {"batch", required_argument, O_BATCH, 0, "B,..", 0, "batch sizes"},
    {"causal", required_argument, O_CAUSAL, 0, "0,1", 0, "masks: 0 none, 1 causal"},
    {"window", required_argument, O_WINDOW, 0, "L:R,..", 0,
     "sliding windows, each L:R (L keys before the diagonal, R after; -1 = unbounded) or none, "
     "e.g. none,4096:0 with --causal 1 (default none). This and the next three are the attention "
     "variants (docs/attention-variants.md): the grid's shapes once per combination, named "
     "/w4096:0, /cap50, /sinks, /dv128; a kernel runs only the variants its traits take and a "
     "peer none"},
    {"softcap", required_argument, O_SOFTCAP, 0, "C,..", 0,
     "logit softcaps: s = C tanh(s / C) on the scaled score; 0 = none (default)"},
    {"sinks", required_argument, O_SINKS, 0, "0,1", 0,
     "1 = attention sinks: one seeded fp32 logit per query head (uniform in [-1, 1), passed as "
     "mha_extras.sinks); 0 = none (default)"},
    {"head-dim-v", required_argument, O_HEAD_DIM_V, 0, "D,..", 0,
     "V's and O's head dims (0 = the --head-dim, the default; e.g. --head-dim 192 "
     "--head-dim-v 128)"},
    {"page-size", required_argument, O_PAGE_SIZE, 0, "BS,..", 0,
     "a paged KV cache of BS keys per block (0 = dense, the default): the grid's B sequences "
     "of equal length read through a block table shuffled across the pool (q and out packed), "
     "named /page16; only the kernels that take the paged layout run it, no peer"},
    {"ragged", required_argument, O_RAGGED, 0, "L,..", 0,
     "ragged lengths (0 = equal, the default): the grid's B sequences each of its own length, "
     "keys log-uniform in [L, Nkv] (seeded by the shape), queries as many (self-attention) or "
     "the shape's Nq at most; packed (paged with --page-size), named /ragged16, FLOPs over "
     "each sequence's visible pairs; the kernels that take the layout run it, no peer"},
    {"threads", required_argument, O_THREADS, 0, "T,..|all", 0,
     "thread counts; 'all' = every core (default 1,all)"},
    {"dtype", required_argument, O_DTYPE, 0, "LIST", 0,
     "Q/O dtypes fp32,bf16,fp16 (default fp32, llm fp32,bf16; a layer's weights, inputs and "
     "output); each "
     "kernel runs the dtypes it takes"},
    {"kv-dtype", required_argument, O_KV_DTYPE, 0, "LIST", 0,
     "K/V storage bf16,fp16,int8 of the decode rows (Nq = 1; default: the --dtype); the other "
     "rows store K/V in the --dtype"},
    {"shard", required_argument, O_SHARD, 0, "I/N", 0,
     "run only part I of N of the benchmark list (fleet mode: `mhabench merge` joins the "
     "parts' files; a part with no benchmark writes its file with no rows)"},
    {"max-seconds", required_argument, O_MAX_SECONDS, 0, "S", 0,
     "skip a benchmark whose estimated time per call exceeds S (default 2, llm 5); the estimate is "
     "each kernel's rate measured on B1 H1 N256 d64 at start"},
    {"min-time", required_argument, O_MIN_TIME, 0, "S", 0,
     "Google Benchmark's minimum time per benchmark (quick 0.02, full 0.2, ci and llm 0.05)"},
    {"repetitions", required_argument, O_REPS, 0, "N", 0,
     "repetitions per benchmark (quick and llm 3, roofline 5, interleaved within each shape; ci 9, "
     "interleaved; given, every kernel gets them); --benchmark_repetitions=N after -- is the "
     "same request"},
    {"passes", required_argument, O_PASSES, 0, "N", 0,
     "at most N passes (default 4, quick 2): after the first, disturbed repetitions are "
     "retaken and multi-repetition benchmarks whose median interval is wider than 2% get more; "
     "1: none"},
    {"bind", required_argument, O_BIND, 0, "cores|none", 0,
     "cores: pin OpenMP threads one per core through hwloc (default); none"},
    {"peers", required_argument, O_PEERS, 0, "LIST|all", 0,
     "other libraries' attention as rows peer.<name>/<shape> of the same sweep (the Python "
     "ones need their environments: scripts/peers/setup-all.sh sets every peer up, or "
     "MHA_PEERS_PYTHON[_ZENTORCH|_GGML] name them); each is checked against the "
     "float64 oracle before it is timed, and one that fails is reported, not timed"},
    {"out", required_argument, O_OUT, 0, "F.json", 0,
     "the result file (default results/runs/<host>-<UTC time>.json, never replacing one)"},
    {"seed", required_argument, O_SEED, 0, "N", 0,
     "seed for inputs and the interleaved order (default 1)"},
    {"quiet", no_argument, O_QUIET, 0, NULL, 0,
     "no progress while it runs: the summary and the verdict only"},
    {"verbose", no_argument, O_VERBOSE, 0, NULL, 0,
     "a line per repetition (and per skip), every tie and auto's choice in the summary "
     "(default: a line per finished shape and thread count, or a bar on a terminal)"},
    {"list-presets", no_argument, O_LIST_PRESETS, 0, NULL, 0,
     "print the presets' names, one per line, and exit (the fleet recipes check their "
     "--preset with it)"},
    OPTS_HELP,
};
enum { NROWS = sizeof ROWS / sizeof ROWS[0] };

void sweep_usage(FILE *f) {
    char peers[160];
    peers_join(peers, sizeof peers, ",", NULL);
    opts_usage(f, "sweep", NULL, ROWS, NROWS, "[-- GOOGLE_BENCHMARK_FLAGS...]");
    fprintf(f,
            "Benchmarks kernels over shapes through Google Benchmark; writes Google Benchmark\n"
            "JSON (context extended with the machine fingerprint) to --out and prints a\n"
            "summary of the fastest kernel per shape and a verdict (`mhabench report` prints\n"
            "them again from the file). Peers: %s.\n"
            "\n"
            "presets:\n",
            peers);
    presets_help(f);
    fputs("  The preset's decode and layer shapes are dropped when a shape axis (--seq,\n"
          "  --seq-q, --seq-kv, --heads, --kv-heads, --head-dim, --batch) is given.\n"
          "  The variant axes (--window, --softcap, --sinks, --head-dim-v), --page-size and\n"
          "  --ragged multiply the grid's shapes only; the preset's listed shapes keep\n"
          "  their own.\n"
          "\n",
          f);
    opts_print(f, ROWS, NROWS);
    fputs("  after --  flags for Google Benchmark (--benchmark_filter=REGEX, ...)\n"
          "Exit status: 0 ok, 1 a benchmark failed, 2 usage or input error.\n",
          f);
}

/* ---- option parsing --------------------------------------------------------- */

/* Removes duplicates, keeping the first occurrence. */
int dedupe(int64_t *v, int n) {
    int o = 0;
    for (int i = 0; i < n; i++) {
        int seen = 0;
        for (int j = 0; j < o; j++) seen |= v[j] == v[i];
        if (!seen) v[o++] = v[i];
    }
    return o;
}

/* --peers: names of peer_names() or "all", into a (each once). 0, or -1
 * after a message naming the bad one. */
int parse_peers(const char *list, sweep_args *a) {
    int nnames;
    const char *const *names = peer_names(&nnames);
    a->npeer_names = 0;
    if (strcmp(list, "all") == 0) {
        for (int i = 0; i < nnames; i++) a->peer_names[a->npeer_names++] = names[i];
        return 0;
    }
    for (const char *p = list;;) {
        const size_t len = strcspn(p, ",");
        char tok[64], known[200];
        snprintf(tok, sizeof tok, "%.*s", (int)(len < 63 ? len : 63), p);
        peers_join(known, sizeof known, ", ", ", ");
        char otherwise[240];
        snprintf(otherwise, sizeof otherwise, "expected %s or all", known);
        const int found =
            len < 64 ? name_index_or_say("sweep: --peers", "peer", tok, names, nnames, otherwise)
                     : -1;
        if (found < 0) {
            if (len >= 64) say_unknown("sweep: --peers", "peer", tok, names, nnames, otherwise);
            return -1;
        }
        int dup = 0;
        for (int i = 0; i < a->npeer_names; i++) dup |= a->peer_names[i] == names[found];
        if (!dup) a->peer_names[a->npeer_names++] = names[found];
        if (!p[len]) return 0;
        p += len + 1;
    }
}

/* The field of an option that is kept as given (an axis, a list, a path:
 * parsed later), or NULL. */
static const char **kept_as_given(sweep_args *a, int c) {
    switch (c) {
    case O_PRESET:
        return &a->preset_name;
    case O_KERNELS:
        return &a->kernel_list;
    case O_SEQ:
        return &a->seq;
    case O_SEQ_Q:
        return &a->seq_q;
    case O_SEQ_KV:
        return &a->seq_kv;
    case O_HEADS:
        return &a->heads;
    case O_KV_HEADS:
        return &a->kv;
    case O_HEAD_DIM:
        return &a->dims;
    case O_BATCH:
        return &a->batch;
    case O_CAUSAL:
        return &a->causal;
    case O_WINDOW:
        return &a->window;
    case O_SOFTCAP:
        return &a->softcap;
    case O_SINKS:
        return &a->sinks;
    case O_HEAD_DIM_V:
        return &a->dims_v;
    case O_PAGE_SIZE:
        return &a->page_size;
    case O_RAGGED:
        return &a->ragged;
    case O_THREADS:
        return &a->threads;
    case O_OUT:
        return &a->out_path;
    default:
        return NULL;
    }
}

/* Returns 0, 1 when --help or --list-presets was printed, or -1. */
int parse_sweep_args(int argc, char **argv, sweep_args *a) {
    *a = (sweep_args){.passes = 0, /* the preset's */
                      .preset_name = "quick",
                      .max_seconds = -1, /* the preset's */
                      .min_time = -1,
                      .bind = 1,
                      .seed = 1};
    int64_t v;
    opts_parser op;
    opts_init(&op, "sweep", ROWS, NROWS);
    for (int c; (c = opts_next(&op, argc, argv)) != -1;) {
        const char **given = kept_as_given(a, c);
        if (given) {
            *given = optarg;
            continue;
        }
        switch (c) {
        case O_DTYPE:
            if (!(a->dtypes = parse_dtype_list("sweep: --dtype", optarg, 0))) return -1;
            break;
        case O_KV_DTYPE:
            if (!(a->kv_dtypes = parse_dtype_list("sweep: --kv-dtype", optarg, 1))) return -1;
            break;
        case O_PEERS:
            if (parse_peers(optarg, a) != 0) return -1;
            break;
        case O_QUIET:
        case O_VERBOSE:
            if (a->progress && a->progress != (c == O_QUIET ? PROGRESS_QUIET : PROGRESS_VERBOSE)) {
                errorf("sweep: --quiet and --verbose both given; use one");
                return -1;
            }
            a->progress = c == O_QUIET ? PROGRESS_QUIET : PROGRESS_VERBOSE;
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
        case O_LIST_PRESETS:
            presets_print(stdout);
            return 1;
        case 'h':
            sweep_usage(stdout);
            return 1;
        default: /* opts_next said what (Google Benchmark flags go after --) */
            fprintf(stderr, "(Google Benchmark flags go after --; `mhabench sweep --help`)\n");
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

int build_axes(const sweep_args *a, const preset *pr, int all, sweep_axes *x) {
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
    return build_variant_axes(a, x);
}
