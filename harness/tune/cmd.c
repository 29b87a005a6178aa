/* cmd.c - `mhabench tune`: its arguments and the steps of a run (plan,
 * outputs, the classes, the table); here alone a status becomes an exit code. */
#include <getopt.h>
#include <stdio.h>

#include "commands.h"
#include "util.h"
#include "tune.h"

static void usage_tune(FILE *f) {
    fprintf(f,
            "usage: mhabench tune [--budget SECONDS] [--classes quick|full] [--kernels a,b]\n"
            "                     [--threads 1,N] [--dtype fp32,bf16] [--out TABLE.json]\n"
            "                     [--seed N] [--shard I/N]\n"
            "  Searches block_q / block_kv (and the parallel split where the kernel has one)\n"
            "  per shape class, verifying every candidate against the float64 oracle, and\n"
            "  writes the tuning table mha_select and `--kernel auto` use, plus a JSON Lines\n"
            "  log of every measurement in log/ beside it.\n"
            "  --budget S    the run's time in seconds (default %.0f); it ends within about\n"
            "                5%% of it (classes share what is left; past it none is started);\n"
            "                one below the cheapest class's floor is refused (exit 2)\n"
            "  --classes C   quick (default: head_dim 64/128, kv <= 4096, decode at 4096) or full\n"
            "  --dtype D     Q/O dtypes of the classes (default fp32,bf16): prefill classes\n"
            "                come in both, decode in fp32; a dtype no kernel with block knobs\n"
            "                takes here (bf16 without AVX512_BF16) is left out\n"
            "  --kernels K   kernels to search (default: each algorithm at its highest ISA\n"
            "                here, decode kernels on decode classes only, plus knob-less\n"
            "                baselines such as blas.cblas timed as they are); each class\n"
            "                times those that take its dtype\n"
            "  --threads T   thread counts: 1 for the t1 classes, N > 1 for the tall ones\n"
            "                (default 1,<cores>)\n"
            "  --out F       the table (replaced if there; default: this CPU's table where\n"
            "                mha_select reads first: MHA_TUNING_DIR, the installed\n"
            "                <datadir>/mhabench/tuning, else the tree's results/tuning; a\n"
            "                table already there is kept and the new one written beside it\n"
            "                as <cpu key>-<UTC time>.json, which mha_select reads as newer)\n"
            "  --force       replace this CPU's table there instead (and let --out replace\n"
            "                an installed table or one in the tree's results/tuning)\n"
            "  --seed N      input data seed (default 1)\n"
            "  --shard I/N   tune every N-th class from the I-th (fleet mode: N hosts of one\n"
            "                CPU type; `scripts/fleet_report.py tuning` joins their tables)\n",
            DEFAULT_BUDGET_S);
}

/* Parses argv into a. Returns TUNE_OK, TUNE_HELP, or TUNE_BAD_INPUT after
 * printing what was wrong. */
static tune_status parse_tune_args(int argc, char **argv, tune_args *a) {
    enum {
        O_BUDGET = 256,
        O_CLASSES,
        O_KERNELS,
        O_THREADS,
        O_OUT,
        O_SEED,
        O_SHARD,
        O_DTYPE,
        O_FORCE
    };
    static const struct option longopts[] = {
        {"budget", required_argument, NULL, O_BUDGET},
        {"classes", required_argument, NULL, O_CLASSES},
        {"kernels", required_argument, NULL, O_KERNELS},
        {"threads", required_argument, NULL, O_THREADS},
        {"out", required_argument, NULL, O_OUT},
        {"force", no_argument, NULL, O_FORCE},
        {"seed", required_argument, NULL, O_SEED},
        {"shard", required_argument, NULL, O_SHARD},
        {"dtype", required_argument, NULL, O_DTYPE},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *a = (tune_args){.budget = DEFAULT_BUDGET_S,
                     .set = "quick",
                     .dtypes = MHA_DTYPE_BIT(MHA_F32) | MHA_DTYPE_BIT(MHA_BF16),
                     .seed = 1};
    optind = 0;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case O_BUDGET:
            if (!parse_float("--budget", optarg, &a->budget)) return TUNE_BAD_INPUT;
            if (!(a->budget > 0) || a->budget > 86400) {
                errorf("--budget: %g is out of range (0, 86400] seconds", (double)a->budget);
                return TUNE_BAD_INPUT;
            }
            break;
        case O_CLASSES:
            a->set = optarg;
            break;
        case O_KERNELS:
            a->kernels = optarg;
            break;
        case O_THREADS:
            a->threads = optarg;
            break;
        case O_OUT:
            a->out = optarg;
            break;
        case O_FORCE:
            a->force = 1;
            break;
        case O_SEED:
            if (!parse_i64("--seed", optarg, 0, INT64_MAX, &a->seed)) return TUNE_BAD_INPUT;
            break;
        case O_SHARD:
            if (shard_parse(optarg, &a->shard) != 0) return TUNE_BAD_INPUT;
            break;
        case O_DTYPE:
            if (!(a->dtypes = parse_dtype_list("tune: --dtype", optarg, 0))) return TUNE_BAD_INPUT;
            break;
        case 'h':
            usage_tune(stdout);
            return TUNE_HELP;
        default:
            if (c == ':')
                errorf("tune: option %s needs a value", argv[optind - 1]);
            else
                errorf("tune: unknown option '%s'", argv[optind - 1]);
            usage_tune(stderr);
            return TUNE_BAD_INPUT;
        }
    }
    if (optind < argc) {
        errorf("tune: unexpected argument '%s'", argv[optind]);
        return TUNE_BAD_INPUT;
    }
    return TUNE_OK;
}

/* Each step prints its own messages and returns a tune_status; here alone a
 * status becomes the exit code: 0 ok, 1 a check failed, 2 usage or input. */
int cmd_tune(int argc, char **argv) {
    tune_run run = {0};
    tune_run *r = &run;
    tune_status st = parse_tune_args(argc, argv, &r->a);
    if (st == TUNE_OK) st = plan_run(r);
    if (st == TUNE_OK) st = open_outputs(r);
    if (st == TUNE_OK) {
        const tune_status tuned = tune_classes(r);
        const tune_status written = write_outputs(r); /* also after a failed class */
        st = written != TUNE_OK ? written : tuned;
        if (st == TUNE_OK && r->tx.failures) st = TUNE_CHECK_FAILED;
    }
    switch (st) {
    case TUNE_OK:
    case TUNE_HELP:
        return 0;
    case TUNE_CHECK_FAILED:
        return EXIT_CHECK_FAILED;
    case TUNE_BAD_INPUT:
        break;
    }
    return EXIT_USAGE;
}
