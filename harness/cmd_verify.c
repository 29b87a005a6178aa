/* cmd_verify.c - `mhabench verify`: every selected kernel against the float64
 * oracle over the shape grid and the adversarial cases, at each thread count.
 * Prints the seed, a repro line for every failure, a per-kernel table and the
 * closing `N passed, N failed, N skipped`. Exit 1 on any failure. */
#include <getopt.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "commands.h"
#include "util.h"

enum { MAX_CASES = 512, MAX_KERNELS = 64, MAX_THREADS = 8 };

static void usage(FILE *f) {
    fputs("usage: mhabench verify [--kernels a,b] [--seed N] [--quick] [--threads 1,2]\n"
          "                       [--case I] [--verbose]\n"
          "Checks each kernel against the float64 oracle on the shape grid and the\n"
          "adversarial inputs. Exit 0 all passed, 1 a mismatch, 2 usage error.\n"
          "  --kernels  comma list of kernel names (default: every kernel)\n"
          "  --seed     input seed (default: time based, printed); each case is re-seeded\n"
          "  --quick    the fast subset (under 10 s)\n"
          "  --threads  comma list of thread counts (default: 1 and all cores)\n"
          "  --case     run only case I (as printed in a repro line)\n",
          f);
}

typedef struct {
    const mha_kernel *k;
    int pass, fail, skip;
    double max_rel;
} kernel_tally;

int cmd_verify(int argc, char **argv) {
    static const struct option opts[] = {
        {"kernels", required_argument, 0, 'k'}, {"seed", required_argument, 0, 's'},
        {"quick", no_argument, 0, 'q'},         {"threads", required_argument, 0, 't'},
        {"case", required_argument, 0, 'c'},    {"verbose", no_argument, 0, 'v'},
        {"help", no_argument, 0, 'h'},          {0, 0, 0, 0}};
    const char *kernel_list = NULL;
    uint64_t seed = (uint64_t)time(NULL) % 1000000;
    int quick = 0, verbose = 0, nthreads = 0;
    int64_t only_case = -1, threads[MAX_THREADS], v;
    optind = 1;
    for (int c; (c = getopt_long(argc, argv, "h", opts, NULL)) != -1;) {
        switch (c) {
        case 'k':
            kernel_list = optarg;
            break;
        case 's':
            if (!parse_i64("--seed", optarg, 0, INT64_MAX, &v)) return EXIT_USAGE;
            seed = (uint64_t)v;
            break;
        case 'q':
            quick = 1;
            break;
        case 'v':
            verbose = 1;
            break;
        case 't':
            if ((nthreads = parse_i64_list("--threads", optarg, 1, 1024, threads, MAX_THREADS)) < 0)
                return EXIT_USAGE;
            break;
        case 'c':
            if (!parse_i64("--case", optarg, 0, MAX_CASES - 1, &only_case)) return EXIT_USAGE;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return EXIT_USAGE;
        }
    }
    if (optind < argc) {
        errorf("verify: unexpected argument '%s'", argv[optind]);
        return EXIT_USAGE;
    }
    if (!check_isa_env()) return EXIT_USAGE;
    if (nthreads == 0) {
        threads[nthreads++] = 1;
        const int all = omp_get_num_procs();
        if (all > 1) threads[nthreads++] = all;
    }

    kernel_tally tally[MAX_KERNELS];
    int nk = 0;
    if (kernel_list) { /* kernels this CPU lacks are kept and reported skipped */
        const mha_kernel *ks[MAX_KERNELS];
        if ((nk = parse_kernel_list("verify: --kernels", kernel_list, 0, ks, MAX_KERNELS)) < 0)
            return EXIT_USAGE;
        for (int i = 0; i < nk; i++) tally[i] = (kernel_tally){ks[i], 0, 0, 0, 0};
    } else {
        for (int i = 0; i < mha_kernel_count(); i++)
            tally[nk++] = (kernel_tally){mha_kernel_at(i), 0, 0, 0, 0};
    }

    static check_case cases[MAX_CASES];
    const int ncases = check_cases(cases, MAX_CASES, quick);
    if (only_case >= ncases) {
        errorf("verify: --case %lld: only %d cases%s", (long long)only_case, ncases,
               quick ? " with --quick" : "");
        return EXIT_USAGE;
    }
    printf("mhabench verify: seed %llu, %d cases%s, ISA %s (detected %s), threads",
           (unsigned long long)seed, only_case >= 0 ? 1 : ncases, quick ? " (quick)" : "",
           mha_isa_name(mha_isa_active()), mha_isa_name(mha_isa_detected()));
    for (int t = 0; t < nthreads; t++) printf(" %lld", (long long)threads[t]);
    printf("\n");
    fflush(stdout);

    int failed_any = 0;
    for (int ci = 0; ci < ncases; ci++) {
        if (only_case >= 0 && ci != only_case) continue;
        char desc[160];
        check_describe(&cases[ci], desc, sizeof desc);
        check_data data;
        mha_status st = check_prepare(&cases[ci], check_case_seed(seed, ci), &data);
        if (st != MHA_OK) {
            printf("ERROR case %d %s: cannot prepare inputs: %s\n", ci, desc, mha_status_str(st));
            failed_any = 1;
            continue;
        }
        for (int ki = 0; ki < nk; ki++) {
            for (int t = 0; t < nthreads; t++) {
                check_report rep;
                const int res = check_kernel(tally[ki].k, &data, (int)threads[t], &rep);
                const char *name = mha_kernel_name(tally[ki].k);
                if (res == CHECK_PASS) {
                    tally[ki].pass++;
                    const double rel = rep.max_err / (data.mag > 0 ? data.mag : 1);
                    if (rel > tally[ki].max_rel) tally[ki].max_rel = rel;
                    if (verbose)
                        printf("ok   %-14s case %3d %s threads=%lld max|err|/mag %.2e\n", name, ci,
                               desc, (long long)threads[t], rel);
                } else if (res == CHECK_SKIP) {
                    tally[ki].skip++;
                    if (verbose) printf("skip %-14s case %3d: %s\n", name, ci, rep.detail);
                } else {
                    tally[ki].fail++;
                    failed_any = 1;
                    printf("FAIL %-14s case %3d %s [%s] threads=%lld\n     %s\n"
                           "     repro: mhabench verify --kernels %s --seed %llu --case %d "
                           "--threads %lld%s\n",
                           name, ci, desc, cases[ci].tag, (long long)threads[t], rep.detail, name,
                           (unsigned long long)seed, ci, (long long)threads[t],
                           quick ? " --quick" : "");
                }
                fflush(stdout);
            }
        }
        check_release(&data);
    }

    int pass = 0, fail = 0, skip = 0;
    printf("\n%-14s %-6s %-7s %6s %6s %7s  %s\n", "kernel", "isa", "status", "passed", "failed",
           "skipped", "max |err|/max|V|");
    for (int ki = 0; ki < nk; ki++) {
        const kernel_tally *t = &tally[ki];
        const char *status = t->fail ? "FAILED" : (t->pass ? "PASSED" : "SKIPPED");
        printf("%-14s %-6s %-7s %6d %6d %7d  %.2e\n", mha_kernel_name(t->k),
               mha_isa_name(mha_kernel_isa(t->k)), status, t->pass, t->fail, t->skip, t->max_rel);
        pass += t->pass;
        fail += t->fail;
        skip += t->skip;
    }
    printf("%d passed, %d failed, %d skipped\n", pass, fail, skip);
    return failed_any ? EXIT_CHECK_FAILED : 0;
}
