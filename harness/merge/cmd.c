/* cmd.c - `mhabench merge`: joins result files of one sweep run as
 * shards on several machines (sweep --shard I/N), or of several runs of one
 * machine type, into one Google Benchmark file per machine fingerprint.
 * It refuses what cannot be one result: files of different builds, shards of
 * different benchmark lists, a shard missing or given twice, the same
 * benchmark measured in two files (unless told how to join those), one run
 * given twice, a row whose time is not a number. The parts are in
 * harness/merge/merge.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "commands.h"
#include "merge.h"
#include "opts.h"
#include "util.h"

enum { O_OUT = 1000, O_OUT_DIR, O_DUP, O_PARTIAL, O_FORCE };
static const opt_row ROWS[] = {
    {"out", required_argument, O_OUT, 0, "F", 0, "the merged file (all inputs of one fingerprint)"},
    {"out-dir", required_argument, O_OUT_DIR, 0, "DIR", 0,
     "one DIR/<cpu-key>-<isa>-c<cores>.json per fingerprint"},
    {"duplicates", required_argument, O_DUP, 0, "R", 0,
     "a benchmark name in two files: refuse (default), pool their repetitions (runs of one "
     "build on hosts of one type), or keep the first file's"},
    {"allow-partial", no_argument, O_PARTIAL, 0, NULL, 0,
     "write even when shards are missing (they are still reported)"},
    {"force", no_argument, O_FORCE, 0, NULL, 0,
     "merge files of different builds (mha_git_revision)"},
    OPTS_HELP,
};
enum { NROWS = sizeof ROWS / sizeof ROWS[0] };

static void usage(FILE *f) {
    opts_usage(f, "merge", "FILES...", ROWS, NROWS, NULL);
    fputs("Joins Google Benchmark result files written by `mhabench sweep` into one file\n"
          "per machine fingerprint (mha_cpu_key, mha_isa_active, mha_cores): the shards of\n"
          "a `sweep --shard I/N` run on N machines, or runs of one machine type. One of\n"
          "--out and --out-dir is required.\n"
          "A run given twice (two files with the same rows, every field alike) is\n"
          "refused in every mode, as is a row whose real_time or cpu_time is not a\n"
          "finite number >= 0. An empty shard's file (no rows) counts as its shard.\n"
          "Exit 0 merged, 2 usage or input error (each refusal names the files and\n"
          "values, missing and doubled shards by index).\n",
          f);
    opts_print(f, ROWS, NROWS);
}

int cmd_merge(int argc, char **argv) {
    const char *out = NULL, *out_dir = NULL;
    dup_rule dup = DUP_REFUSE;
    int allow_partial = 0, force = 0;
    opts_parser op;
    opts_init(&op, "merge", ROWS, NROWS);
    for (int c; (c = opts_next(&op, argc, argv)) != -1;) {
        switch (c) {
        case O_OUT:
            out = optarg;
            break;
        case O_OUT_DIR:
            out_dir = optarg;
            break;
        case O_DUP: { /* in dup_rule's order */
            static const char *const rules[] = {"refuse", "pool", "first"};
            const int r = name_index_or_say("merge: --duplicates", "rule", optarg, rules, 3, NULL);
            if (r < 0) return EXIT_USAGE;
            dup = (dup_rule)r;
            break;
        }
        case O_PARTIAL:
            allow_partial = 1;
            break;
        case O_FORCE:
            force = 1;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return EXIT_USAGE;
        }
    }
    const int n = argc - optind;
    if (n < 1 || !!out == !!out_dir) {
        errorf("merge: expected result files and one of --out or --out-dir");
        usage(stderr);
        return EXIT_USAGE;
    }
    input *in = xrealloc_or_exit(NULL, (size_t)n, sizeof *in, "merge");
    memset(in, 0, (size_t)n * sizeof *in);
    int rc = 0, ngroups = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        in[i].path = argv[optind + i];
        rc = load_input(&in[i]);
    }
    if (rc) goto done;
    /* One build: the git revision of every file agrees. */
    for (int i = 1; i < n; i++) {
        const char *a = in[0].git ? in[0].git : "(none)", *b = in[i].git ? in[i].git : "(none)";
        if (strcmp(a, b) != 0) {
            if (!force) {
                errorf_esc("merge: different builds: mha_git_revision is '%s' in %s but '%s' in "
                           "%s (--force merges anyway)",
                           a, in[0].path, b, in[i].path);
                rc = EXIT_USAGE;
                goto done;
            }
            fprintf(stderr, "mhabench: merge: warning: different builds (%s, %s): --force\n", a, b);
        }
    }
    /* Groups by fingerprint, in the order first seen. */
    for (int i = 0; i < n; i++) {
        in[i].group = -1;
        for (int j = 0; j < i && in[i].group < 0; j++) {
            int same = 1;
            for (int k = 0; k < FP_COUNT; k++) same &= !strcmp(in[i].fp[k], in[j].fp[k]);
            if (same) in[i].group = in[j].group;
        }
        if (in[i].group < 0) in[i].group = ngroups++;
    }
    if (out && ngroups > 1) {
        errorf_esc("merge: the files come from %d machine fingerprints (e.g. %s: %s/%s/%s, and "
                   "the first file's %s/%s/%s); use --out-dir for one file per fingerprint",
                   ngroups, in[n - 1].path, in[n - 1].fp[0], in[n - 1].fp[1], in[n - 1].fp[2],
                   in[0].fp[0], in[0].fp[1], in[0].fp[2]);
        rc = EXIT_USAGE;
        goto done;
    }
    for (int g = 0; g < ngroups && rc == 0; g++) {
        /* every shard list of the group, complete */
        for (int i = 0; i < n && rc == 0; i++) {
            if (in[i].group != g || !in[i].list) continue;
            int first_of_list = 1;
            for (int j = 0; j < i; j++)
                if (in[j].group == g && in[j].list && !strcmp(in[j].list, in[i].list))
                    first_of_list = 0;
            if (first_of_list) rc = check_shards(in, n, g, in[i].list, allow_partial, dup);
        }
        if (rc || (rc = check_same_runs(in, n, g)) != 0) break;
        char path[4096];
        int first = 0;
        while (in[first].group != g) first++;
        if (!out)
            for (int k = 0; k < FP_COUNT; k++)
                if (!file_name_part_ok(in[first].fp[k])) {
                    errorf_esc("merge: %s: %s '%s' cannot be part of a file name", in[first].path,
                               FP_KEYS[k], in[first].fp[k]);
                    rc = EXIT_USAGE;
                }
        if (rc) break;
        if (out)
            snprintf(path, sizeof path, "%s", out);
        else
            snprintf(path, sizeof path, "%s/%s-%s-c%s.json", out_dir, in[first].fp[0],
                     in[first].fp[1], in[first].fp[2]);
        rc = write_group(in, n, g, path, dup);
    }
done:
    for (int i = 0; i < n; i++) json_object_put(in[i].root);
    free(in);
    return rc;
}

/* ---- entry for the fuzz target (tests/fuzz/fuzz_merge.c) ------------------------ */

#include "cmd_merge.h"

int merge_load_for_fuzz(const char *path) {
    input in[2];
    memset(in, 0, sizeof in);
    in[0].path = in[1].path = path;
    int rc = load_input(&in[0]);
    if (rc == 0) { /* the file alone: its shard list (partial allowed), then its merge */
        if (in[0].list) rc = check_shards(in, 1, 0, in[0].list, 1, DUP_REFUSE);
        if (rc == 0) rc = write_group(in, 1, 0, NULL, DUP_REFUSE);
    }
    if (rc == 0 && json_object_array_length(in[0].rows) > 0) {
        /* the file pooled with itself: the same run, refused whatever it holds */
        rc = load_input(&in[1]);
        if (rc == 0 && check_same_runs(in, 2, 0) != EXIT_USAGE) abort();
    }
    for (int i = 0; i < 2; i++) json_object_put(in[i].root);
    return rc;
}
