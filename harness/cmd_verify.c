/* cmd_verify.c - `mhabench verify`: every selected kernel against the float64
 * oracle over the shape grid and the adversarial cases, at each thread count,
 * in every (dtype, kv dtype) the kernel takes (its mask columns). Prints the
 * seed, a repro line for every failure, a per-kernel-and-dtype table and the
 * closing `N passed, N failed, N skipped`. Exit 1 on any failure. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "commands.h"
#include "opts.h"
#include "util.h"

enum { MAX_CASES = 512, MAX_KERNELS = 64, MAX_THREADS = 8, MAX_COMBOS = 16 };

static const opt_row ROWS[] = {
    {"kernels", required_argument, 'k', 0, "LIST", 0,
     "comma list of kernel names (default: every kernel)"},
    {"seed", required_argument, 's', 0, "N", 0,
     "input seed (default: time based, printed); each case is re-seeded"},
    {"quick", no_argument, 'q', 0, NULL, 0, "the fast subset (under 10 s)"},
    {"threads", required_argument, 't', 0, "LIST", 0,
     "comma list of thread counts (default: 1 and all cores)"},
    {"dtype", required_argument, 'd', 0, "LIST", 0,
     "comma list of Q/O dtypes to check (fp32,bf16,fp16; default: every dtype some selected "
     "kernel takes)"},
    {"kv-dtype", required_argument, 'K', 0, "LIST", 0,
     "comma list of K/V storage dtypes (fp32,bf16,fp16,int8; default: all)"},
    {"case", required_argument, 'c', 0, "I", 0, "run only case I (as printed in a repro line)"},
    {"verbose", no_argument, 'v', 0, NULL, 0, "a line for every case passed or skipped too"},
    OPTS_HELP,
};
enum { NROWS = sizeof ROWS / sizeof ROWS[0] };

static void usage(FILE *f) {
    opts_usage(f, "verify", NULL, ROWS, NROWS, NULL);
    fputs("Checks each kernel against the float64 oracle on the shape grid and the\n"
          "adversarial inputs. Exit 0 all passed, 1 a mismatch, 2 usage error.\n",
          f);
    opts_print(f, ROWS, NROWS);
}

typedef struct {
    const mha_kernel *k;
    mha_dtype dt, kv; /* Q/O dtype and K/V storage */
    int pass, fail, skip;
    double max_rel;
} kernel_tally;

/* Does kernel k take Q/O dtype dt with K/V stored as kv? (its mask columns) */
static int takes(const mha_kernel *k, mha_dtype dt, mha_dtype kv) {
    return (mha_kernel_dtypes(k) & MHA_DTYPE_BIT(dt)) &&
           (mha_kernel_kv_dtypes(k) & MHA_DTYPE_BIT(kv));
}

/* verify's command line. */
typedef struct {
    unsigned want_dt, want_kv; /* --dtype, --kv-dtype as dtype bits; ~0u: not given */
    const char *kernel_list;   /* --kernels, NULL for every kernel */
    uint64_t seed;
    int quick, verbose, nthreads;
    int64_t only_case; /* --case, -1 for every case */
    int64_t threads[MAX_THREADS];
} verify_args;

/* The (dtype, kv dtype) pairs to check. */
typedef struct {
    mha_dtype dt[MAX_COMBOS], kv[MAX_COMBOS];
    int n;
} combo_list;

/* Parses argv into *a (threads default to 1 and all cores). Returns 0 to go
 * on, 1 when --help has been printed, -1 after a message. */
static int parse_verify_args(int argc, char **argv, verify_args *a) {
    *a = (verify_args){
        .want_dt = ~0u, .want_kv = ~0u, .seed = (uint64_t)time(NULL) % 1000000, .only_case = -1};
    int64_t v;
    opts_parser op;
    opts_init(&op, "verify", ROWS, NROWS);
    for (int c; (c = opts_next(&op, argc, argv)) != -1;) {
        switch (c) {
        case 'k':
            a->kernel_list = optarg;
            break;
        case 's':
            if (!parse_i64("--seed", optarg, 0, INT64_MAX, &v)) return -1;
            a->seed = (uint64_t)v;
            break;
        case 'q':
            a->quick = 1;
            break;
        case 'v':
            a->verbose = 1;
            break;
        case 't':
            if ((a->nthreads =
                     parse_i64_list("--threads", optarg, 1, 1024, a->threads, MAX_THREADS)) < 0)
                return -1;
            break;
        case 'c':
            if (!parse_i64("--case", optarg, 0, MAX_CASES - 1, &a->only_case)) return -1;
            break;
        case 'd':
            if (!(a->want_dt = parse_dtype_list("verify: --dtype", optarg, 0))) return -1;
            break;
        case 'K':
            if (!(a->want_kv = parse_dtype_list("verify: --kv-dtype", optarg, 1))) return -1;
            break;
        case 'h':
            usage(stdout);
            return 1;
        default:
            usage(stderr);
            return -1;
        }
    }
    if (optind < argc) {
        errorf("verify: unexpected argument '%s'", argv[optind]);
        return -1;
    }
    return 0;
}

/* The kernels named by --kernels (those this CPU lacks are kept and
 * reported skipped), else every kernel: their count, or -1 after a message. */
static int select_kernels(const verify_args *a, const mha_kernel **ks) {
    int nk = 0;
    if (a->kernel_list)
        return parse_kernel_list("verify: --kernels", a->kernel_list, 0, ks, MAX_KERNELS);
    for (int i = 0; i < mha_kernel_count() && nk < MAX_KERNELS; i++) ks[nk++] = mha_kernel_at(i);
    return nk;
}

/* The (dtype, kv dtype) pairs to check: those the filters allow and some
 * selected kernel takes; a kernel runs only the pairs it takes (fp32
 * first, so an fp32-only run reads as before). An fp32 cache under
 * bf16/fp16 queries is not a problem the API offers. */
static void choose_combos(const verify_args *a, const mha_kernel *const *ks, int nk,
                          combo_list *cl) {
    cl->n = 0;
    for (int dt = MHA_F32; dt <= MHA_F16; dt++)
        for (int kv = MHA_F32; kv < MHA_DTYPE_COUNT; kv++) {
            if (dt != MHA_F32 && kv == MHA_F32) continue;
            if (!(a->want_dt & MHA_DTYPE_BIT(dt)) || !(a->want_kv & MHA_DTYPE_BIT(kv))) continue;
            int any = 0;
            for (int i = 0; i < nk; i++) any |= takes(ks[i], (mha_dtype)dt, (mha_dtype)kv);
            if (!any) continue;
            cl->dt[cl->n] = (mha_dtype)dt;
            cl->kv[cl->n++] = (mha_dtype)kv;
        }
}

/* A dtype asked for by name that no selected kernel takes is said once
 * (not a skip: there is nothing that could run it). */
static void note_unchecked_dtypes(const verify_args *a, const combo_list *cl) {
    for (int t = MHA_F32; t < MHA_DTYPE_COUNT; t++) {
        const int asked_dt = a->want_dt != ~0u && (a->want_dt & MHA_DTYPE_BIT(t));
        const int asked_kv = a->want_kv != ~0u && (a->want_kv & MHA_DTYPE_BIT(t));
        int seen_dt = 0, seen_kv = 0;
        for (int c = 0; c < cl->n; c++) {
            seen_dt |= cl->dt[c] == (mha_dtype)t;
            seen_kv |= cl->kv[c] == (mha_dtype)t;
        }
        if ((asked_dt && !seen_dt) || (asked_kv && !seen_kv))
            printf("note: no selected kernel takes %s%s in this build: nothing to check\n",
                   asked_dt && !seen_dt ? "dtype " : "a K/V cache of ",
                   mha_dtype_name((mha_dtype)t));
    }
}

/* Runs the kernel of ta on case ci's prepared data at each thread count,
 * counting and printing each result (a repro line for a failure). Returns 1
 * when one failed. */
static int run_tally(const verify_args *a, kernel_tally *ta, const check_case *cc, int ci,
                     const char *desc, const char *dtopt, const check_data *data) {
    int failed = 0;
    for (int t = 0; t < a->nthreads; t++) {
        check_report rep;
        const int res = check_kernel(ta->k, data, (int)a->threads[t], &rep);
        const char *name = mha_kernel_name(ta->k);
        if (res == CHECK_PASS) {
            ta->pass++;
            const double rel = rep.max_err / (data->mag > 0 ? data->mag : 1);
            if (rel > ta->max_rel) ta->max_rel = rel;
            if (a->verbose)
                printf("ok   %-14s case %3d %s threads=%lld max|err|/mag %.2e\n", name, ci, desc,
                       (long long)a->threads[t], rel);
        } else if (res == CHECK_SKIP) {
            ta->skip++;
            if (a->verbose) printf("skip %-14s case %3d: %s\n", name, ci, rep.detail);
        } else {
            ta->fail++;
            failed = 1;
            printf("FAIL %-14s case %3d %s [%s] threads=%lld\n     %s\n"
                   "     repro: mhabench verify --kernels %s --seed %llu --case %d "
                   "--threads %lld%s%s\n",
                   name, ci, desc, cc->tag, (long long)a->threads[t], rep.detail, name,
                   (unsigned long long)a->seed, ci, (long long)a->threads[t], dtopt,
                   a->quick ? " --quick" : "");
        }
        fflush(stdout);
    }
    return failed;
}

/* Case ci in combo cb on every tallied kernel that takes it. Returns 1 when
 * something failed (its inputs could not be prepared, or a kernel). */
static int run_case(const verify_args *a, const check_case *base, int ci, const combo_list *cl,
                    int cb, kernel_tally *tally, int nt) {
    check_case cc = *base;
    if (!check_input_fits(cc.input, cl->dt[cb], cl->kv[cb])) return 0;
    check_case_set_dtypes(&cc, cl->dt[cb], cl->kv[cb]);
    char desc[192], dtopt[64] = "";
    check_describe(&cc, desc, sizeof desc);
    if (cl->dt[cb] != MHA_F32 || cl->kv[cb] != MHA_F32)
        snprintf(dtopt, sizeof dtopt, " --dtype %s --kv-dtype %s", mha_dtype_name(cl->dt[cb]),
                 mha_dtype_name(cl->kv[cb]));
    check_data data;
    mha_status st = check_prepare(&cc, check_case_seed(a->seed, ci), &data);
    if (st != MHA_OK) {
        printf("ERROR case %d %s: cannot prepare inputs: %s\n", ci, desc, mha_status_str(st));
        return 1;
    }
    int failed = 0;
    for (int ti = 0; ti < nt; ti++) {
        kernel_tally *ta = &tally[ti];
        if (ta->dt != cl->dt[cb] || ta->kv != cl->kv[cb]) continue;
        /* a variant (window, softcap, sinks, d_v) only where the traits say */
        if (!check_kernel_takes_case(ta->k, &cc)) continue;
        failed |= run_tally(a, ta, &cc, ci, desc, dtopt, &data);
    }
    check_release(&data);
    return failed;
}

/* The per-kernel-and-dtype table and the closing counts. */
static void print_tallies(const kernel_tally *tally, int nt) {
    int pass = 0, fail = 0, skip = 0;
    printf("\n%-17s %-10s %-5s %-5s %-7s %6s %6s %7s  %s\n", "kernel", "isa", "dtype", "kv",
           "status", "passed", "failed", "skipped", "max |err|/max|V|");
    for (int ti = 0; ti < nt; ti++) {
        const kernel_tally *t = &tally[ti];
        const char *status = t->fail ? "FAILED" : (t->pass ? "PASSED" : "SKIPPED");
        printf("%-17s %-10s %-5s %-5s %-7s %6d %6d %7d  %.2e\n", mha_kernel_name(t->k),
               mha_isa_name(mha_kernel_isa(t->k)), mha_dtype_name(t->dt), mha_dtype_name(t->kv),
               status, t->pass, t->fail, t->skip, t->max_rel);
        pass += t->pass;
        fail += t->fail;
        skip += t->skip;
    }
    printf("%d passed, %d failed, %d skipped\n", pass, fail, skip);
}

int cmd_verify(int argc, char **argv) {
    verify_args a;
    const int parsed = parse_verify_args(argc, argv, &a);
    if (parsed != 0) return parsed > 0 ? 0 : EXIT_USAGE;
    if (!check_isa_env()) return EXIT_USAGE;
    if (a.nthreads == 0) {
        a.threads[a.nthreads++] = 1;
        const int all = omp_get_num_procs();
        if (all > 1) a.threads[a.nthreads++] = all;
    }
    const mha_kernel *ks[MAX_KERNELS];
    const int nk = select_kernels(&a, ks);
    if (nk < 0) return EXIT_USAGE;
    combo_list cl;
    choose_combos(&a, ks, nk, &cl);
    note_unchecked_dtypes(&a, &cl);
    static kernel_tally tally[MAX_KERNELS * MAX_COMBOS];
    int nt = 0;
    for (int i = 0; i < nk; i++)
        for (int c = 0; c < cl.n; c++)
            if (takes(ks[i], cl.dt[c], cl.kv[c]))
                tally[nt++] = (kernel_tally){ks[i], cl.dt[c], cl.kv[c], 0, 0, 0, 0};

    static check_case cases[MAX_CASES];
    const int ncases = check_cases(cases, MAX_CASES, a.quick);
    if (a.only_case >= ncases) {
        errorf("verify: --case %lld: only %d cases%s", (long long)a.only_case, ncases,
               a.quick ? " with --quick" : "");
        return EXIT_USAGE;
    }
    printf("mhabench verify: seed %llu, %d cases%s, ISA %s (detected %s), threads",
           (unsigned long long)a.seed, a.only_case >= 0 ? 1 : ncases, a.quick ? " (quick)" : "",
           mha_isa_name(mha_isa_active()), mha_isa_name(mha_isa_detected()));
    for (int t = 0; t < a.nthreads; t++) printf(" %lld", (long long)a.threads[t]);
    printf("\n");
    fflush(stdout);

    int failed_any = 0;
    for (int ci = 0; ci < ncases; ci++) {
        if (a.only_case >= 0 && ci != a.only_case) continue;
        for (int cb = 0; cb < cl.n; cb++)
            failed_any |= run_case(&a, &cases[ci], ci, &cl, cb, tally, nt);
    }
    print_tallies(tally, nt);
    return failed_any ? EXIT_CHECK_FAILED : 0;
}
