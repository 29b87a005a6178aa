/* ab.c - `compare --ab`: two builds' ci sweeps in alternating (ABBA) rounds
 * on one machine, each side's repetitions pooled, then compared; a stopping
 * signal ends it cleanly (proc.h). */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compare.h"
#include <unistd.h>

#include "fmt_results.h"
#include "proc.h"

/* A stopping signal during an A/B (proc.h) stops the sweep running, the
 * scratch folder is removed, and the process then dies from the same signal. */

/* Prints the last part of a child's log to stderr. */
static void show_log(const char *log) {
    size_t len = 0;
    char why[512];
    char *text = results_read_file(log, &len, why, sizeof why);
    if (!text) return;
    const size_t keep = 4000;
    fprintf(stderr, "---- its output%s ----\n%s", len > keep ? " (last part)" : "",
            len > keep ? text + len - keep : text);
    if (len && text[len - 1] != '\n') fputc('\n', stderr);
    fputs("----\n", stderr);
    free(text);
}

int cmd_ab(const char *old_bin, const char *new_bin, int rounds, double budget, char **sweep_args,
           int nsweep, const settings *s) {
    const char *bins[2] = {old_bin, new_bin};
    for (int i = 0; i < nsweep; i++)
        if (strcmp(sweep_args[i], "--out") == 0 || strncmp(sweep_args[i], "--out=", 6) == 0) {
            errorf_esc("compare: --ab: the sweep arguments may not set --out (compare chooses the "
                       "files)");
            return EXIT_USAGE;
        }
    for (int i = 0; i < 2; i++)
        if (strchr(bins[i], '/') && access(bins[i], X_OK) != 0) {
            errorf_esc("compare: --ab: %s binary '%s' is not executable: %s", i ? "NEW" : "OLD",
                       bins[i], strerror(errno));
            return EXIT_USAGE;
        }
    const char *tmp = getenv("TMPDIR");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/mhabench-ab.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    proc_signals sg;
    proc_signals_catch(&sg, "compare: --ab"); /* before the folder exists: no signal may leave it */
    if (!mkdtemp(dir)) {
        errorf_esc("compare: --ab: cannot create a temporary directory %s: %s", dir,
                   strerror(errno));
        proc_signals_restore(&sg);
        return EXIT_USAGE;
    }
    char log[4200];
    snprintf(log, sizeof log, "%s/sweep.log", dir);
    result_set sets[2] = {{0}, {0}};
    const int max_rounds = rounds > 0 ? rounds : MAX_ROUNDS;
    /* each round's files apart too (the per-round check, gate.c) */
    result_set *per[2] = {xrealloc(NULL, (size_t)max_rounds * sizeof(result_set)),
                          xrealloc(NULL, (size_t)max_rounds * sizeof(result_set))};
    memset(per[0], 0, (size_t)max_rounds * sizeof(result_set));
    memset(per[1], 0, (size_t)max_rounds * sizeof(result_set));
    int rc = 0, caught = 0;
    char out[4200];
    char *argv[MAX_SWEEP_ARGS + 8];
    const double t0 = now_s();
    int done = 0;
    if (rounds <= 0)
        fprintf(stderr, "mhabench: compare: --ab: budget %g s (at least %d rounds)\n", budget,
                AB_MIN_ROUNDS);
    for (int r = 0; r < max_rounds && rc == 0; r++) {
        if (rounds <= 0 && r >= AB_MIN_ROUNDS) {
            const double spent = now_s() - t0, per = spent / r;
            if (spent + per > budget) break;
        }
        done = r + 1;
        /* The sweeps follow the Thue-Morse sequence (A B B A B A A B ...):
         * sweep k runs B when k has an odd number of 1 bits. Over 2 rounds
         * that is ABBA, which cancels a linear trend in the host's speed;
         * over 4 rounds (ABBA BAAB) the positions of A and B have equal sums
         * and equal sums of squares, so a quadratic one cancels too (the
         * A/A pairs of 2-round ABBA showed one: the middle sweeps ran faster,
         * which favours B). Round r runs B first when r has odd parity. */
        const int b_first = __builtin_parity((unsigned)r);
        for (int turn = 0; turn < 2 && rc == 0; turn++) {
            const int side = b_first ? 1 - turn : turn;
            snprintf(out, sizeof out, "%s/%c%d.json", dir, side ? 'B' : 'A', r);
            int a = 0;
            argv[a++] = (char *)bins[side];
            argv[a++] = "sweep";
            argv[a++] = "--preset";
            argv[a++] = "ci";
            argv[a++] = "--out";
            argv[a++] = out;
            for (int i = 0; i < nsweep; i++) argv[a++] = sweep_args[i];
            argv[a] = NULL;
            if (rounds > 0)
                fprintf(stderr, "mhabench: compare: round %d/%d: %s (%s) sweep --preset ci\n",
                        r + 1, rounds, side ? "B" : "A", bins[side]);
            else
                fprintf(stderr,
                        "mhabench: compare: round %d (%.0f s of %g): %s (%s) sweep --preset ci\n",
                        r + 1, now_s() - t0, budget, side ? "B" : "A", bins[side]);
            unlink(log);
            const int st = proc_run(argv, NULL, log, NULL, &sg, &caught);
            if (st == PROC_STOPPED) {
                rc = -1;
            } else if (st != 0) {
                if (st > 0)
                    errorf_esc("compare: --ab: `%s sweep --preset ci` exited with status %d",
                               bins[side], st);
                show_log(log);
                rc = EXIT_USAGE;
            } else if (access(out, R_OK) != 0) {
                errorf_esc("compare: --ab: `%s sweep` wrote no %s", bins[side], out);
                show_log(log);
                rc = EXIT_USAGE;
            } else if (load_results(out, &per[side][r]) != 0) {
                show_log(log);
                rc = EXIT_USAGE;
            } else {
                result_merge(&sets[side], &per[side][r]); /* the rounds pooled */
            }
            unlink(out);
        }
    }
    proc_remove_tree(dir, "compare");
    if (!caught) caught = proc_signal_pending(&sg);
    if (!caught && rc == 0) {
        proc_signals_restore(&sg);
        char la[4200], lb[4200];
        snprintf(la, sizeof la, "A=%s (%d rounds pooled, %.0f s)", old_bin, done, now_s() - t0);
        snprintf(lb, sizeof lb, "B=%s (%d rounds pooled)", new_bin, done);
        settings sr = *s;
        sr.rounds[0] = per[0];
        sr.rounds[1] = per[1];
        sr.nrounds = done;
        rc = compare_sets(&sets[0], &sets[1], la, lb, 0, 0, &sr);
    } else if (!caught) {
        proc_signals_restore(&sg);
    }
    for (int side = 0; side < 2; side++) {
        result_free(&sets[side]);
        for (int r = 0; r < max_rounds; r++) result_free(&per[side][r]);
        free(per[side]);
    }
    return caught ? proc_die_from(caught, &sg) : rc;
}
