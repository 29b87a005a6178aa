/* recommend.c - `mhabench recommend`: what mha_select (and --kernel auto)
 * picks for a shape, where the choice came from, and which tuning table was
 * read and why that one. */
#include <getopt.h>
#include <stdio.h>
#include <unistd.h>

#include "commands.h"
#include "util.h"
#include "tune.h"

static void usage_recommend(FILE *f) {
    fprintf(f, "usage: mhabench recommend --seq N [--seq-kv M] --heads H [--kv-heads G]\n"
               "                          --head-dim D [--causal] [--threads T] [--batch B]\n"
               "                          [--dtype fp32|bf16|fp16] [--kv-dtype bf16|fp16|int8]\n"
               "  Prints the kernel and knobs mha_select (and --kernel auto) picks for the\n"
               "  shape, where the choice came from, and the table's expected GFLOP/s.\n"
               "  --threads T   0 = all cores (default 1, as attend and forward)\n"
               "  --dtype       Q/O element type (default fp32); --kv-dtype: the K/V storage\n"
               "                (default: the --dtype)\n");
}

int cmd_recommend(int argc, char **argv) {
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
    static const struct option longopts[] = {
        {"seq", required_argument, NULL, O_SEQ},
        {"seq-kv", required_argument, NULL, O_SEQKV},
        {"heads", required_argument, NULL, O_HEADS},
        {"kv-heads", required_argument, NULL, O_KVHEADS},
        {"head-dim", required_argument, NULL, O_DIM},
        {"causal", no_argument, NULL, O_CAUSAL},
        {"threads", required_argument, NULL, O_THREADS},
        {"batch", required_argument, NULL, O_BATCH},
        {"dtype", required_argument, NULL, O_DTYPE},
        {"kv-dtype", required_argument, NULL, O_KV_DTYPE},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int64_t seq = 0, seq_kv = 0, heads = 0, kv_heads = 0, dim = 0, threads = 1, batch = 1;
    int causal = 0;
    mha_dtype dtype = MHA_F32, kv_dtype = MHA_F32;
    int kv_given = 0;
    optind = 0;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case O_SEQ:
            if (!parse_i64("--seq", optarg, 1, INT32_MAX, &seq)) return EXIT_USAGE;
            break;
        case O_SEQKV:
            if (!parse_i64("--seq-kv", optarg, 1, INT32_MAX, &seq_kv)) return EXIT_USAGE;
            break;
        case O_HEADS:
            if (!parse_i64("--heads", optarg, 1, INT32_MAX, &heads)) return EXIT_USAGE;
            break;
        case O_KVHEADS:
            if (!parse_i64("--kv-heads", optarg, 1, INT32_MAX, &kv_heads)) return EXIT_USAGE;
            break;
        case O_DIM:
            if (!parse_i64("--head-dim", optarg, 1, 1 << 20, &dim)) return EXIT_USAGE;
            break;
        case O_CAUSAL:
            causal = 1;
            break;
        case O_THREADS:
            if (!parse_i64("--threads", optarg, 0, 4096, &threads)) return EXIT_USAGE;
            break;
        case O_BATCH:
            if (!parse_i64("--batch", optarg, 1, INT32_MAX, &batch)) return EXIT_USAGE;
            break;
        case O_DTYPE:
            if (mha_dtype_parse(optarg, &dtype) != MHA_OK || dtype == MHA_I8) {
                errorf("recommend: --dtype '%s': expected fp32, bf16 or fp16", optarg);
                return EXIT_USAGE;
            }
            break;
        case O_KV_DTYPE:
            if (mha_dtype_parse(optarg, &kv_dtype) != MHA_OK) {
                errorf("recommend: --kv-dtype '%s': expected fp32, bf16, fp16 or int8", optarg);
                return EXIT_USAGE;
            }
            kv_given = 1;
            break;
        case 'h':
            usage_recommend(stdout);
            return 0;
        default:
            if (c == ':')
                errorf("recommend: option %s needs a value", argv[optind - 1]);
            else
                errorf("recommend: unknown option '%s'", argv[optind - 1]);
            usage_recommend(stderr);
            return EXIT_USAGE;
        }
    }
    if (optind < argc) {
        errorf("recommend: unexpected argument '%s'", argv[optind]);
        return EXIT_USAGE;
    }
    const char *missing = !seq ? "--seq" : !heads ? "--heads" : !dim ? "--head-dim" : NULL;
    if (missing) {
        errorf("recommend: missing required option %s", missing);
        usage_recommend(stderr);
        return EXIT_USAGE;
    }
    if (!kv_heads) kv_heads = heads;
    if (!seq_kv) seq_kv = seq;
    if (heads % kv_heads != 0) {
        errorf("--kv-heads %lld does not divide --heads %lld", (long long)kv_heads,
               (long long)heads);
        return EXIT_USAGE;
    }
    if (!check_isa_env()) return EXIT_USAGE;
    if (!kv_given) kv_dtype = dtype;
    if (kv_dtype == MHA_F32 && dtype != MHA_F32) { /* the API's kv 0 means "the dtype's" */
        errorf("recommend: --kv-dtype fp32 under --dtype %s: an fp32 cache under 16-bit queries "
               "is not a problem the API offers",
               mha_dtype_name(dtype));
        return EXIT_USAGE;
    }
    const mha_problem p = {batch, heads,  kv_heads, seq,   seq_kv,
                           dim,   causal, 0.0f,     dtype, kv_dtype == dtype ? MHA_F32 : kv_dtype};
    if (mha_problem_validate(&p) != MHA_OK) {
        errorf("recommend: %s", mha_last_error());
        return EXIT_USAGE;
    }
    const mha_options o = {.threads = (int)threads};
    mha_selection sel;
    if (mha_select(&p, &o, &sel) != MHA_OK) {
        errorf("recommend: %s", mha_last_error());
        return EXIT_USAGE;
    }
    mha_shape_class cl;
    char cname[64];
    mha_class_of(&p, mha_resolve_threads(&o), &cl);
    mha_class_name(&cl, cname, sizeof cname);
    static const char *const splits[] = {"auto", "heads", "qblocks"};
    static const char *const sources[] = {"forced", "table", "default"};
    printf("kernel    %s\n", mha_kernel_name(sel.kernel));
    if (dtype != MHA_F32 || mha_problem_kv_dtype(&p) != MHA_F32)
        printf("dtype     %s (K/V %s)\n", mha_dtype_name(dtype),
               mha_dtype_name(mha_problem_kv_dtype(&p)));
    printf("knobs     block_q=%d block_kv=%d split=%s threads=%d\n", sel.options.block_q,
           sel.options.block_kv, splits[sel.options.split], mha_resolve_threads(&sel.options));
    printf("class     %s\n", cname);
    printf("source    %s\n", sources[sel.source]);
    if (sel.source == MHA_CHOICE_DEFAULT) {
        char tpath[4096];
        mha_table_default_path(tpath, sizeof tpath);
        if (access(tpath, R_OK) == 0)
            printf("table     %s has no entry for class %s: the cache model decided\n", tpath,
                   cname);
        else
            printf("table     none for this CPU at %s: the cache model decided\n", tpath);
        note_no_tuning_table(stdout);
    }
    printf("reason    %s\n", sel.reason);
    if (sel.expected_gflops > 0)
        printf("expected  %.1f GFLOP/s (measured by tune on the class's representative shape)\n",
               sel.expected_gflops);
    else
        printf("expected  unknown (no table measurement)\n");
    return 0;
}
