/* cmd.c - `mhabench compare`: the options and the four forms (two files,
 * --baseline, --save-baseline, --ab). */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compare.h"

#include "commands.h"
#include "opts.h"

enum {
    O_THRESHOLD = 1000,
    O_ALPHA,
    O_JSON,
    O_FORCE,
    O_BASELINE,
    O_SAVE,
    O_DIR,
    O_AB,
    O_ROUNDS,
    O_BUDGET,
    O_NO_NORMALIZE,
    O_MAX_DRIFT,
    O_CALIBRATE,
    O_RUN,
    O_OUT,
    O_NOISE
};
static const opt_row ROWS[] = {
    {"threshold", required_argument, O_THRESHOLD, 0, "PCT", 0,
     "median change that matters, percent (default: derived from the spread of the changes, "
     "4 robust sigmas within [2, 10]; 5 when fewer than 5 benchmarks are in both files; 3 for "
     "--ab)"},
    {"no-normalize", no_argument, O_NO_NORMALIZE, 0, NULL, 0,
     "keep the drift common to every benchmark (by default the median change over all "
     "benchmarks, the host's drift, is divided out before testing; never with --ab)"},
    {"max-drift", required_argument, O_MAX_DRIFT, 0, "PCT", 0,
     "a drift common to the benchmarks beyond PCT percent is a finding: inconclusive when "
     "divided out, a regression under --ab (default 10)"},
    {"alpha", required_argument, O_ALPHA, 0, "A", 0,
     "significance level of the U test (default 0.01)"},
    {"json", no_argument, O_JSON, 0, NULL, 0,
     "machine-readable report on stdout instead of the table"},
    {"force", no_argument, O_FORCE, 0, NULL, 0,
     "compare even when the machine fingerprints differ"},
    {"baseline", no_argument, O_BASELINE, 0, NULL, 0,
     "compare NEW.json against the newest committed baseline of its machine: "
     "DIR/<cpu-key>.json or DIR/<cpu-key>-<time>.json"},
    {"save-baseline", no_argument, O_SAVE, 0, NULL, 0,
     "add NEW.json as a baseline (never overwrites an existing one)"},
    {"baseline-dir", required_argument, O_DIR, 0, "DIR", 0,
     "where baselines live (default " DEFAULT_BASELINE_DIR ")"},
    {"ab", no_argument, O_AB, 0, NULL, 0,
     "run OLD and NEW `sweep --preset ci` alternately (A B B A B A A B ...), pool each side's "
     "repetitions, compare NEW against OLD"},
    {"budget", required_argument, O_BUDGET, 0, "S", 0,
     "--ab: rounds continue while another fits in S seconds (default 120, at least 2 rounds)"},
    {"rounds", required_argument, O_ROUNDS, 0, "R", 0,
     "--ab: exactly R rounds instead of the budget"},
    {"calibrate", no_argument, O_CALIBRATE, 0, NULL, 0,
     "the gate's noise from A/A pairs (two sweeps of one build): per benchmark the "
     "false-positive rate and the smallest slowdown detected in every pair, the largest common "
     "drift; to DIR/<cpu-key>.noise.json (never overwritten) or --out F"},
    {"run", required_argument, O_RUN, 0, "N", 0,
     "--calibrate: run N pairs of `sweep --preset ci` first"},
    {"out", required_argument, O_OUT, 0, "F", 0, "--calibrate: write the calibration to F"},
    {"noise", required_argument, O_NOISE, 0, "F", 0,
     "compare with calibration F (--baseline: the newest beside the baselines): rows print it, "
     "a row that cannot see twice its threshold is blind, not same; its drift x1.5 is "
     "--max-drift"},
    OPTS_HELP,
};
enum { NROWS = sizeof ROWS / sizeof ROWS[0] };

static void usage(FILE *f) {
    fputs("usage: mhabench compare BASE.json NEW.json [--threshold PCT] [--alpha A] [--json]\n"
          "                        [--force]\n"
          "       mhabench compare --baseline NEW.json [--baseline-dir DIR] [options]\n"
          "       mhabench compare --save-baseline NEW.json [--baseline-dir DIR]\n"
          "       mhabench compare --ab OLD_BINARY NEW_BINARY [--budget S | --rounds R] [options]\n"
          "                        [-- sweep args]\n"
          "       mhabench compare --calibrate A1.json B1.json [A2.json B2.json ...] [--out F]\n"
          "       mhabench compare --calibrate --run N [--out F] [-- sweep args]\n"
          "Compares Google Benchmark result files (as written by `mhabench sweep`) benchmark\n"
          "by benchmark: median real time change, Mann-Whitney U two-sided p-value over the\n"
          "repetitions, and a verdict: slower (p < alpha and median slower by more than the\n"
          "threshold), faster (likewise), noisy (median moved more than the threshold but\n"
          "not significantly: rerun with more repetitions), small (under a threshold\n"
          "derived from the noise, not a given one nor --ab's, a row of a kernel whose rows\n"
          "slowed together: inverse-variance weighted mean over 2% at over 3 standard\n"
          "errors), blind (same on a row whose calibrated detectable effect is over twice\n"
          "the threshold, --noise), or same. Under --ab a slower or faster row must also\n"
          "have moved past half the threshold that way in every round, else it is noisy\n"
          "(and a slower one makes the gate inconclusive).\n"
          "The gate: REGRESSION when a benchmark is slower or one of the base is missing\n"
          "from the new file; no regression only when at least 90% of the base's\n"
          "benchmarks were judged (in both files, undisturbed, >= 9 repetitions a side),\n"
          "none slowed untested or small and no drift beyond --max-drift was divided out;\n"
          "INCONCLUSIVE otherwise, with the reasons.\n"
          "Exit 0 no regression, 1 regression, 2 usage or input error, 3 inconclusive.\n",
          f);
    opts_print(f, ROWS, NROWS);
}

/* compare's command line. */
typedef struct {
    settings s;
    int force, mode_baseline, mode_save, mode_ab, no_normalize;
    int mode_cal, max_drift_given;
    int64_t rounds, run_pairs;
    const char *out_path, *noise_path;
    double budget;
    const char *dir;
    char **sweep_args; /* after a bare "--": the sweeps' of --ab, NULL when none */
    int nsweep;
    char **pos; /* the positional arguments */
    int npos;
} compare_args;

/* Parses argv into *a. Returns 0 to go on, 1 when --help has been printed,
 * -1 after a message. */
static int parse_compare_args(int argc, char **argv, compare_args *a) {
    *a = (compare_args){.s = {DEFAULT_THRESHOLD, 0.01, 0, 0, 1, 0, DEFAULT_MAX_DRIFT, NULL},
                        .budget = AB_DEFAULT_BUDGET,
                        .dir = DEFAULT_BASELINE_DIR};
    settings *s = &a->s;
    /* Everything after a bare "--" goes to the sweeps of --ab untouched. */
    const int nargs = split_at_dashes(argc, argv, &a->sweep_args, &a->nsweep);
    opts_parser op;
    opts_init(&op, "compare", ROWS, NROWS);
    for (int c; (c = opts_next(&op, nargs, argv)) != -1;) {
        switch (c) {
        case O_THRESHOLD:
            if (!parse_double("compare: --threshold", optarg, 0, 1000, 0, &s->threshold)) return -1;
            s->threshold_given = 1;
            break;
        case O_BUDGET:
            if (!parse_double("compare: --budget", optarg, 1, 86400, 1, &a->budget)) return -1;
            break;
        case O_NO_NORMALIZE:
            a->no_normalize = 1;
            break;
        case O_MAX_DRIFT:
            if (!parse_double("compare: --max-drift", optarg, 0, 1000, 1, &s->max_drift)) return -1;
            a->max_drift_given = 1;
            break;
        case O_CALIBRATE:
            a->mode_cal = 1;
            break;
        case O_RUN:
            if (!parse_i64("compare: --run", optarg, 1, 100, &a->run_pairs)) return -1;
            break;
        case O_OUT:
            a->out_path = optarg;
            break;
        case O_NOISE:
            a->noise_path = optarg;
            break;
        case O_ALPHA:
            if (!parse_double("compare: --alpha", optarg, 0, 1, 1, &s->alpha)) return -1;
            break;
        case O_JSON:
            s->json = 1;
            break;
        case O_FORCE:
            a->force = 1;
            break;
        case O_BASELINE:
            a->mode_baseline = 1;
            break;
        case O_SAVE:
            a->mode_save = 1;
            break;
        case O_DIR:
            a->dir = optarg;
            break;
        case O_AB:
            a->mode_ab = 1;
            break;
        case O_ROUNDS:
            if (!parse_i64("--rounds", optarg, 1, MAX_ROUNDS, &a->rounds)) return -1;
            break;
        case 'h':
            usage(stdout);
            return 1;
        default:
            usage(stderr);
            return -1;
        }
    }
    a->pos = argv + optind;
    a->npos = nargs - optind;
    return 0;
}

/* The options that go together (modes exclude each other; --run, --out,
 * --noise and sweep arguments only with their modes): 0, or -1 after a
 * message. */
static int check_modes(const compare_args *a) {
    if (a->mode_baseline + a->mode_save + a->mode_ab + a->mode_cal > 1) {
        errorf_esc("compare: --baseline, --save-baseline, --ab and --calibrate exclude each other");
        return -1;
    }
    if (a->sweep_args && !a->mode_ab && !(a->mode_cal && a->run_pairs)) {
        errorf_esc("compare: arguments after '--' are sweep arguments, only for --ab and "
                   "--calibrate --run");
        return -1;
    }
    if ((a->run_pairs || a->out_path) && !a->mode_cal) {
        errorf_esc("compare: --run and --out go with --calibrate");
        return -1;
    }
    if (a->noise_path && (a->mode_ab || a->mode_save || a->mode_cal)) {
        errorf_esc("compare: --noise goes with a comparison of files (two, or --baseline)");
        return -1;
    }
    if (a->nsweep > MAX_SWEEP_ARGS) {
        errorf_esc("compare: more than %d sweep arguments", MAX_SWEEP_ARGS);
        return -1;
    }
    return 0;
}

/* Two result files compared (or one against its baseline with
 * --baseline), with the machine's calibration when there is one. Returns
 * compare_sets' status, or EXIT_USAGE. */
static int compare_files(compare_args *a) {
    settings *s = &a->s;
    result_set base = {0}, nw = {0};
    noise_table nt = {0};
    char *base_path = NULL;
    int rc = EXIT_USAGE, have_noise = 0;
    if (a->mode_baseline) {
        if (load_results(a->pos[0], &nw)) goto out;
        if (find_baseline(a->dir, &nw, a->force, &base, &base_path)) goto out;
    } else {
        if (load_results(a->pos[0], &base) || load_results(a->pos[1], &nw)) goto out;
    }
    /* The machine's calibration: given, or the newest beside the baselines */
    if (a->noise_path) {
        if (noise_load(a->noise_path, &nt)) goto out;
        have_noise = 1;
    } else if (a->mode_baseline) {
        const int nf = noise_find(a->dir, &nw, &nt);
        if (nf == EXIT_USAGE) goto out;
        have_noise = nf == 0;
    }
    if (have_noise) {
        s->noise = &nt;
        /* its drift, with a margin for the pairs it did not see */
        if (!a->max_drift_given && isfinite(nt.drift_max_pct))
            s->max_drift = fmax(2.0, 1.5 * nt.drift_max_pct);
    }
    const int fp_ok = fingerprints_match(&base, &nw, a->force, 0);
    if (!fp_ok && !a->force) goto out;
    rc = compare_sets(&base, &nw, base.path, nw.path, 1, !fp_ok, s);
out:
    noise_free(&nt);
    result_free(&base);
    result_free(&nw);
    free(base_path);
    return rc;
}

int cmd_compare(int argc, char **argv) {
    compare_args a;
    const int parsed = parse_compare_args(argc, argv, &a);
    if (parsed != 0) return parsed > 0 ? 0 : EXIT_USAGE;
    if (check_modes(&a) != 0) return EXIT_USAGE;
    settings *s = &a.s;
    if (a.mode_cal) {
        if (a.run_pairs && a.npos) {
            errorf_esc("compare: --calibrate --run N makes its own files: no result files");
            return EXIT_USAGE;
        }
        s->normalize = !a.no_normalize;
        return cmd_calibrate(a.pos, a.npos, (int)a.run_pairs, a.sweep_args, a.nsweep, a.dir,
                             a.out_path, s);
    }
    const int want = a.mode_ab ? 2 : (a.mode_baseline || a.mode_save) ? 1 : 2;
    if (a.npos != want) {
        errorf_esc("compare: expected %s, got %d argument%s",
                   a.mode_ab                        ? "OLD_BINARY NEW_BINARY"
                   : a.mode_baseline || a.mode_save ? "one result file NEW.json"
                                                    : "two result files BASE.json NEW.json",
                   a.npos, a.npos == 1 ? "" : "s");
        usage(stderr);
        return EXIT_USAGE;
    }
    if (a.mode_save) return cmd_save_baseline(a.pos[0], a.dir);
    /* Interleaved A/B rounds share the host's drift already; removing a
     * common change there would hide a build that slows everything. */
    s->normalize = !a.no_normalize && !a.mode_ab;
    s->ab = a.mode_ab;
    if (a.mode_ab && !s->threshold_given) {
        s->threshold = AB_DEFAULT_THRESHOLD;
        s->threshold_given = 2; /* the --ab default, reported as such */
    }
    if (a.mode_ab)
        return cmd_ab(a.pos[0], a.pos[1], (int)a.rounds, a.budget, a.sweep_args, a.nsweep, s);
    return compare_files(&a);
}
