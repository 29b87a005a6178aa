/* recommend.c - `mhabench recommend`: what mha_select (and --kernel auto)
 * picks for a shape, where the choice came from, and which tuning table was
 * read and why that one. */
#include <getopt.h>
#include <stdio.h>
#include <unistd.h>

#include "commands.h"
#include "meas_core.h"
#include "opts.h"
#include "util.h"
#include "tune.h"

enum {
    O_SEQ = 256,
    O_SEQKV,
    O_HEADS,
    O_KVHEADS,
    O_DIM,
    O_CAUSAL,
    O_THREADS,
    O_BATCH,
    O_DTYPE,
    O_KV_DTYPE
};

/* The options, as data: the parser, the usage and the options section come
 * from these rows (opts.h). */
static const opt_row ROWS[] = {
    {"seq", required_argument, O_SEQ, 0, "N", OPT_REQUIRED, "query length (and key length)"},
    {"seq-kv", required_argument, O_SEQKV, 0, "M", 0, "key/value length (default: --seq)"},
    {"heads", required_argument, O_HEADS, 0, "H", OPT_REQUIRED, "query heads"},
    {"kv-heads", required_argument, O_KVHEADS, 0, "G", 0, "K/V heads (default: --heads)"},
    {"head-dim", required_argument, O_DIM, 0, "D", OPT_REQUIRED, "head dim"},
    {"causal", no_argument, O_CAUSAL, 0, NULL, 0, "the bottom-right aligned causal mask"},
    {"threads", required_argument, O_THREADS, 0, "T", 0,
     "0 = all cores (default 1, as attend and forward)"},
    {"batch", required_argument, O_BATCH, 0, "B", 0, "batch (default 1)"},
    {"dtype", required_argument, O_DTYPE, 0, "fp32|bf16|fp16", 0,
     "Q/O element type (default fp32)"},
    {"kv-dtype", required_argument, O_KV_DTYPE, 0, "bf16|fp16|int8", 0,
     "the K/V storage (default: the --dtype)"},
    OPTS_VARIANT_ROWS,
    OPTS_HELP,
};
enum { NROWS = sizeof ROWS / sizeof ROWS[0] };

static void usage_recommend(FILE *f) {
    opts_usage(f, "recommend", NULL, ROWS, NROWS, NULL);
    fputs("Prints the kernel and knobs mha_select (and --kernel auto) picks for the shape,\n"
          "where the choice came from, which tuning table it read and why that one (or,\n"
          "without one, what the cache model chose), and the table's expected GFLOP/s.\n",
          f);
    opts_print(f, ROWS, NROWS);
}

/* What the command line asked for (0: not given). */
typedef struct {
    int64_t seq, seq_kv, heads, kv_heads, dim, threads, batch;
    int causal, kv_given;
    mha_dtype dtype, kv_dtype;
    variant_args var;
} recommend_args;

/* Parses argv into a. Returns -1 to go on, else the exit code (0 after
 * --help; EXIT_USAGE after a message). */
static int parse_recommend_args(int argc, char **argv, recommend_args *a) {
    *a = (recommend_args){.threads = 1, .batch = 1, .dtype = MHA_F32, .kv_dtype = MHA_F32};
    opts_parser op;
    opts_init(&op, "recommend", ROWS, NROWS);
    for (int c; (c = opts_next(&op, argc, argv)) != -1;) {
        switch (c) {
        case O_SEQ:
            if (!parse_i64("--seq", optarg, 1, INT32_MAX, &a->seq)) return EXIT_USAGE;
            break;
        case O_SEQKV:
            if (!parse_i64("--seq-kv", optarg, 1, INT32_MAX, &a->seq_kv)) return EXIT_USAGE;
            break;
        case O_HEADS:
            if (!parse_i64("--heads", optarg, 1, INT32_MAX, &a->heads)) return EXIT_USAGE;
            break;
        case O_KVHEADS:
            if (!parse_i64("--kv-heads", optarg, 1, INT32_MAX, &a->kv_heads)) return EXIT_USAGE;
            break;
        case O_DIM:
            if (!parse_i64("--head-dim", optarg, 1, 1 << 20, &a->dim)) return EXIT_USAGE;
            break;
        case O_CAUSAL:
            a->causal = 1;
            break;
        case O_THREADS:
            if (!parse_i64("--threads", optarg, 0, 4096, &a->threads)) return EXIT_USAGE;
            break;
        case O_BATCH:
            if (!parse_i64("--batch", optarg, 1, INT32_MAX, &a->batch)) return EXIT_USAGE;
            break;
        case O_DTYPE:
            if (mha_dtype_parse(optarg, &a->dtype) != MHA_OK || a->dtype == MHA_I8) {
                errorf("recommend: --dtype '%s': expected fp32, bf16 or fp16", optarg);
                return EXIT_USAGE;
            }
            break;
        case O_KV_DTYPE:
            if (mha_dtype_parse(optarg, &a->kv_dtype) != MHA_OK) {
                errorf("recommend: --kv-dtype '%s': expected fp32, bf16, fp16 or int8", optarg);
                return EXIT_USAGE;
            }
            a->kv_given = 1;
            break;
        case 'W':
        case 'C':
        case 'Z':
        case 'V':
            if (variant_arg("recommend", c, optarg, &a->var) != 1) return EXIT_USAGE;
            break;
        case 'h':
            usage_recommend(stdout);
            return 0;
        default: /* opts_next said what */
            usage_recommend(stderr);
            return EXIT_USAGE;
        }
    }
    if (optind < argc) {
        errorf("recommend: unexpected argument '%s'", argv[optind]);
        return EXIT_USAGE;
    }
    return -1;
}

/* The problem a asks about, defaults filled in and validated. Returns 0, or
 * EXIT_USAGE after a message. */
static int recommend_problem(recommend_args *a, mha_problem *p) {
    const char *missing = !a->seq ? "--seq" : !a->heads ? "--heads" : !a->dim ? "--head-dim" : NULL;
    if (missing) {
        errorf("recommend: missing required option %s", missing);
        usage_recommend(stderr);
        return EXIT_USAGE;
    }
    if (!a->kv_heads) a->kv_heads = a->heads;
    if (!a->seq_kv) a->seq_kv = a->seq;
    if (a->heads % a->kv_heads != 0) {
        errorf("--kv-heads %lld does not divide --heads %lld", (long long)a->kv_heads,
               (long long)a->heads);
        return EXIT_USAGE;
    }
    if (!check_isa_env()) return EXIT_USAGE;
    if (!a->kv_given) a->kv_dtype = a->dtype;
    if (a->kv_dtype == MHA_F32 && a->dtype != MHA_F32) { /* the API's kv 0 means "the dtype's" */
        errorf("recommend: --kv-dtype fp32 under --dtype %s: an fp32 cache under 16-bit queries "
               "is not a problem the API offers",
               mha_dtype_name(a->dtype));
        return EXIT_USAGE;
    }
    *p = (mha_problem){.batch = a->batch,
                       .heads = a->heads,
                       .kv_heads = a->kv_heads,
                       .seq_q = a->seq,
                       .seq_kv = a->seq_kv,
                       .head_dim = a->dim,
                       .causal = a->causal,
                       .scale = 0.0f,
                       .dtype = a->dtype,
                       .kv_dtype = a->kv_dtype == a->dtype ? MHA_F32 : a->kv_dtype};
    variant_apply(&a->var, p);
    if (mha_problem_validate(p) != MHA_OK) {
        errorf("recommend: %s", mha_last_error());
        return EXIT_USAGE;
    }
    return 0;
}

/* Which table mha_select read and why that one (mha_table_locate's rule);
 * without one, what the cache model chose instead. */
static void print_table_lines(const mha_problem *p, const mha_selection *sel, const char *cname) {
    if (sel->source == MHA_CHOICE_FORCED) {
        printf("table     not read: MHA_KERNEL forces the kernel\n");
        return;
    }
    char tpath[4096], dwhy[1024], fwhy[1024];
    mha_table_locate(tpath, sizeof tpath, dwhy, sizeof dwhy, fwhy, sizeof fwhy);
    const int readable = access(tpath, R_OK) == 0;
    if (sel->source == MHA_CHOICE_TABLE)
        printf("table     %s\n", tpath);
    else if (readable)
        printf("table     %s: not used for class %s (see reason): the cache model decided\n", tpath,
               cname);
    else
        printf("table     none for this CPU: no %s, the cache model decided\n", tpath);
    printf("folder    %s\n", dwhy);
    printf("file      %s\n", fwhy);
    if (sel->source != MHA_CHOICE_DEFAULT) return;
    mha_caches cs;
    mha_caches_get(&cs);
    printf("instead   the cache model: %s, the best-ranked kernel here that takes %s, with "
           "blocks from L1d %llu KiB and L2 %llu KiB\n",
           mha_kernel_name(sel->kernel), mha_dtype_name(p->dtype),
           (unsigned long long)(cs.l1d >> 10), (unsigned long long)(cs.l2 >> 10));
    note_no_tuning_table(stdout);
}

static void print_recommendation(const mha_problem *p, const mha_options *o,
                                 const mha_selection *sel) {
    mha_shape_class cl;
    char cname[64];
    mha_class_of(p, mha_resolve_threads(o), &cl);
    mha_class_name(&cl, cname, sizeof cname);
    static const char *const splits[] = {"auto", "heads", "qblocks"};
    static const char *const sources[] = {"forced", "table", "default"};
    printf("kernel    %s\n", mha_kernel_name(sel->kernel));
    if (p->dtype != MHA_F32 || mha_problem_kv_dtype(p) != MHA_F32)
        printf("dtype     %s (K/V %s)\n", mha_dtype_name(p->dtype),
               mha_dtype_name(mha_problem_kv_dtype(p)));
    printf("knobs     block_q=%d block_kv=%d split=%s threads=%d\n", sel->options.block_q,
           sel->options.block_kv, splits[sel->options.split], mha_resolve_threads(&sel->options));
    const meas_shape shp = meas_shape_of(p);
    if (meas_has_variant(&shp)) {
        char var[256];
        printf("variant  %s (the class is the shape's without them)\n",
               meas_variant_text(&shp, var, sizeof var));
    }
    printf("class     %s\n", cname);
    printf("source    %s\n", sources[sel->source]);
    print_table_lines(p, sel, cname);
    printf("reason    %s\n", sel->reason);
    if (sel->expected_gflops > 0)
        printf("expected  %.1f GFLOP/s (measured by tune on the class's representative shape)\n",
               sel->expected_gflops);
    else
        printf("expected  unknown (no table measurement)\n");
}

int cmd_recommend(int argc, char **argv) {
    recommend_args a;
    int rc = parse_recommend_args(argc, argv, &a);
    if (rc >= 0) return rc;
    mha_problem p;
    if ((rc = recommend_problem(&a, &p)) != 0) return rc;
    const mha_options o = {.threads = (int)a.threads};
    mha_selection sel;
    if (mha_select(&p, &o, &sel) != MHA_OK) {
        errorf("recommend: %s", mha_last_error());
        return EXIT_USAGE;
    }
    print_recommendation(&p, &o, &sel);
    return 0;
}
