/* cmd.c - `mhabench tune`: its arguments and the steps of a run (plan,
 * outputs, the classes, the table); here alone a status becomes an exit code. */
#include <getopt.h>
#include <stdio.h>

#include "commands.h"
#include "opts.h"
#include "util.h"
#include "tune.h"

enum { O_BUDGET = 256, O_CLASSES, O_KERNELS, O_THREADS, O_OUT, O_SEED, O_SHARD, O_DTYPE, O_FORCE };

/* The options, as data: the parser, the usage and the options section come
 * from these rows (opts.h). */
static const opt_row ROWS[] = {
    {"budget", required_argument, O_BUDGET, 0, "S", 0,
     "the run's time in seconds (default 120); it ends within about 5% of it (classes share "
     "what is left; past it none is started); one below the cheapest class's floor is refused "
     "(exit 2)"},
    {"classes", required_argument, O_CLASSES, 0, "quick|full", 0,
     "quick (default: head_dim 64/128, kv <= 4096, decode at 4096) or full"},
    {"kernels", required_argument, O_KERNELS, 0, "LIST", 0,
     "kernels to search (default: each algorithm at its highest ISA here, decode kernels on "
     "decode classes only, plus knob-less baselines such as blas.cblas timed as they are); each "
     "class times those that take its dtype"},
    {"threads", required_argument, O_THREADS, 0, "1,N", 0,
     "thread counts: 1 for the t1 classes, N > 1 for the tall ones (default 1,<cores>)"},
    {"dtype", required_argument, O_DTYPE, 0, "LIST", 0,
     "Q/O dtypes of the classes (default fp32,bf16): prefill and decode classes come in both; "
     "a 16-bit class no kernel with block knobs takes here (bf16 without AVX512_BF16) is left "
     "out, but for a decode class with two kernels to choose between"},
    {"out", required_argument, O_OUT, 0, "TABLE.json", 0,
     "the table (replaced if there; default: this CPU's table where mha_select reads first: "
     "MHA_TUNING_DIR, the installed <datadir>/mhabench/tuning, else the tree's results/tuning; "
     "a table already there is kept and the new one written beside it as <cpu key>-<UTC "
     "time>.json, which mha_select reads as newer)"},
    {"force", no_argument, O_FORCE, 0, NULL, 0,
     "replace this CPU's table there instead (and let --out replace an installed table or one "
     "in the tree's results/tuning)"},
    {"seed", required_argument, O_SEED, 0, "N", 0, "input data seed (default 1)"},
    {"shard", required_argument, O_SHARD, 0, "I/N", 0,
     "tune every N-th class from the I-th (fleet mode: N hosts of one CPU type; "
     "`scripts/fleet_report.py tuning` joins their tables)"},
    OPTS_HELP,
};
enum { NROWS = sizeof ROWS / sizeof ROWS[0] };

static void usage_tune(FILE *f) {
    opts_usage(f, "tune", NULL, ROWS, NROWS, NULL);
    fputs("Searches block_q / block_kv (and the parallel split where the kernel has one) per\n"
          "shape class, verifying every candidate against the float64 oracle, and writes the\n"
          "tuning table mha_select and `--kernel auto` use, plus a JSON Lines log of every\n"
          "measurement in log/ beside it.\n",
          f);
    opts_print(f, ROWS, NROWS);
}

/* Parses argv into a. Returns TUNE_OK, TUNE_HELP, or TUNE_BAD_INPUT after
 * printing what was wrong. */
static tune_status parse_tune_args(int argc, char **argv, tune_args *a) {
    *a = (tune_args){.budget = DEFAULT_BUDGET_S,
                     .set = "quick",
                     .dtypes = MHA_DTYPE_BIT(MHA_F32) | MHA_DTYPE_BIT(MHA_BF16),
                     .seed = 1};
    opts_parser op;
    opts_init(&op, "tune", ROWS, NROWS);
    for (int c; (c = opts_next(&op, argc, argv)) != -1;) {
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
        default: /* opts_next said what */
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
