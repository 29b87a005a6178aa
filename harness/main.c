/* main.c - the mhabench program: subcommand dispatch. Exit status 0 success,
 * 1 a check failed, 2 usage or input error (with a message naming it). */
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "opts.h"
#include "suggest.h"
#include "util.h"

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} commands[] = {
    {"list", cmd_list, "every kernel: name, algorithm, ISA, runs here"},
    {"info", cmd_info, "CPU model, ISA flags, caches and cores, measured FMA peak"},
    {"verify", cmd_verify, "check kernels against the float64 oracle"},
    {"attend", cmd_attend, "attention core on .npy tensors"},
    {"forward", cmd_forward, "the full MHA layer on .npy inputs and weights"},
    {"sweep", cmd_sweep, "benchmark sweep through Google Benchmark (default preset: quick)"},
    {"report", cmd_report, "a sweep's summary and verdict from its result file"},
    {"compare", cmd_compare, "statistical comparison of two result files"},
    {"bisect", cmd_bisect, "the commit between GOOD and BAD that made benchmarks slower"},
    {"tune", cmd_tune, "search block sizes and splits per shape class, write the tuning table"},
    {"recommend", cmd_recommend, "the kernel and knobs mha_select picks for a shape"},
    {"merge", cmd_merge, "join result files of sweep shards or of one machine type"},
    {"profile", cmd_profile, "time one shape; per-phase split with -Dphase_timing=true"},
};

static void usage(FILE *f) {
    fputs("usage: mhabench <command> [options]   (mhabench <command> --help)\n\ncommands:\n", f);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-8s %s\n", commands[i].name, commands[i].help);
    fputs("\nenvironment: MHA_ISA=", f); /* the levels from the ISA table, never a hand list */
    for (int i = 0; i < MHA_ISA_COUNT; i++)
        fprintf(f, "%s%s", i ? "|" : "", mha_isa_name((mha_isa)i));
    fputs(" caps the dispatch; OMP_* as usual.\n", f);
}

enum { MHA_KERNELS_MAX = 64 };

static int imax(int a, int b) {
    return a > b ? a : b;
}

/* "fp32,bf16,fp16" from a MHA_DTYPE_BIT mask. */
static void dtype_list(unsigned mask, char *out, size_t len) {
    out[0] = '\0';
    for (int t = 0; t < MHA_DTYPE_COUNT; t++)
        if (mask & MHA_DTYPE_BIT(t))
            snprintf(out + strlen(out), len - strlen(out), "%s%s", out[0] ? "," : "",
                     mha_dtype_name((mha_dtype)t));
}

/* "window,softcap,sinks,d_v,packed,paged" (the problem variants and layouts
 * beside dense its traits take), or "-". */
static void variant_list(unsigned traits, char *out, size_t len) {
    static const struct {
        unsigned bit;
        const char *name;
    } v[] = {{MHA_KT_WINDOW, "window"},  {MHA_KT_SOFTCAP, "softcap"}, {MHA_KT_SINKS, "sinks"},
             {MHA_KT_HEAD_DIM_V, "d_v"}, {MHA_KT_PACKED, "packed"},   {MHA_KT_PAGED, "paged"}};
    out[0] = '\0';
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        if (traits & v[i].bit)
            snprintf(out + strlen(out), len - strlen(out), "%s%s", out[0] ? "," : "", v[i].name);
    if (!out[0]) snprintf(out, len, "-");
}

static const opt_row LIST_ROWS[] = {OPTS_HELP};

static void list_usage(FILE *f) {
    opts_usage(f, "list", NULL, LIST_ROWS, 1, NULL);
    fputs("Prints every kernel: name, algorithm, ISA, the dtypes it takes for Q/O\n"
          "and for the K/V storage, whether it runs here (under the MHA_ISA cap), the\n"
          "attention variants it takes (window, softcap, sinks, d_v != d) and layouts\n"
          "beside dense (packed, paged: include/mha.h), and a one-line summary.\n",
          f);
    opts_print(f, LIST_ROWS, 1);
}

int cmd_list(int argc, char **argv) {
    opts_parser op;
    opts_init(&op, "list", LIST_ROWS, 1);
    for (int c; (c = opts_next(&op, argc, argv)) != -1;) {
        if (c == 'h') {
            list_usage(stdout);
            return 0;
        }
        list_usage(stderr);
        return EXIT_USAGE;
    }
    if (optind < argc) {
        errorf("list: unexpected argument '%s'", argv[optind]);
        return EXIT_USAGE;
    }
    if (!check_isa_env()) return EXIT_USAGE;
    /* Columns as wide as their longest entry (a fixed 16 misaligned
     * decode.avx512bf16), the dtypes from the kernel list's columns. */
    int wn = 6, wa = 9, wi = 3, wq = 3, wk = 3, wv = 8;
    char q[MHA_KERNELS_MAX][48], kv[MHA_KERNELS_MAX][48], var[MHA_KERNELS_MAX][48];
    const int nk = mha_kernel_count() < MHA_KERNELS_MAX ? mha_kernel_count() : MHA_KERNELS_MAX;
    for (int i = 0; i < nk; i++) {
        const mha_kernel *k = mha_kernel_at(i);
        dtype_list(mha_kernel_dtypes(k), q[i], sizeof q[i]);
        dtype_list(mha_kernel_kv_dtypes(k), kv[i], sizeof kv[i]);
        variant_list(mha_kernel_traits(k), var[i], sizeof var[i]);
        wv = imax(wv, (int)strlen(var[i]));
        wn = imax(wn, (int)strlen(mha_kernel_name(k)));
        wa = imax(wa, (int)strlen(mha_kernel_algorithm(k)));
        wi = imax(wi, (int)strlen(mha_isa_name(mha_kernel_isa(k))));
        wq = imax(wq, (int)strlen(q[i]));
        wk = imax(wk, (int)strlen(kv[i]));
    }
    printf("%-*s %-*s %-*s %-*s %-*s %-9s %-*s %s\n", wn, "kernel", wa, "algorithm", wi, "isa", wq,
           "q/o", wk, "k/v", "runs-here", wv, "variants", "summary");
    for (int i = 0; i < nk; i++) {
        const mha_kernel *k = mha_kernel_at(i);
        const int runs = mha_kernel_supported(k) == MHA_OK;
        printf("%-*s %-*s %-*s %-*s %-*s %-9s %-*s %s%s%s%s\n", wn, mha_kernel_name(k), wa,
               mha_kernel_algorithm(k), wi, mha_isa_name(mha_kernel_isa(k)), wq, q[i], wk, kv[i],
               runs ? "yes" : "no", wv, var[i], mha_kernel_summary(k), runs ? "" : " [",
               runs ? "" : mha_last_error(), runs ? "" : "]"); /* why it does not run */
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return EXIT_USAGE;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(argv[1], commands[i].name) == 0) return commands[i].fn(argc - 1, argv + 1);
    enum { NCMD = sizeof commands / sizeof commands[0] };
    const char *names[NCMD];
    for (int i = 0; i < NCMD; i++) names[i] = commands[i].name;
    char msg[512];
    errorf("%s",
           suggest_unknown(msg, sizeof msg, "command", argv[1], names, NCMD, "see the list below"));
    usage(stderr);
    return EXIT_USAGE;
}
