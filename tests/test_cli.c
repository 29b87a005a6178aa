/* test_cli.c - mhabench's command lines, run as a child process: attend and forward
 * against PyTorch ground truth from tests/data (gen_torch.py) for every kernel
 * `mhabench list` marks runnable; malformed inputs, bad output paths and bad
 * arguments (attend, forward, sweep, tune, verify, profile) that must exit 2 with a
 * message naming the value, leaving nothing behind. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include "peers/peer.h"

#include "meas_gbench.h"
#include "fmt_npy.h"
#include "mha_private.h"
#include "testutil.h"

extern char **environ;

/* Outputs must match torch within this fraction of the largest |expected| (max abs
 * error): float32 end to end on tiny shapes, so a few ulps of the output scale. */
#define CLI_REL_TOL 1e-5

#define MAX_KERNELS 64

static const char *g_bench; /* $MHABENCH */
static const char *g_data;  /* $MHA_TEST_DATA */
static char g_tmp[256];     /* mkdtemp scratch */
static char g_out[1 << 16]; /* captured stdout of the last run */
static char g_err[4096];    /* captured stderr of the last run */
static char g_kernels[MAX_KERNELS][64];
static int g_nkernels = -1; /* -1: `mhabench list` not run yet */

static const char *const LAYER_CASES[] = {"self", "causal", "cross", "decode", "nobias"};
static const char *const ATTN_CASES[] = {"attn_self", "attn_causal", "attn_cross", "attn_gqa",
                                         "attn_decode"};

/* ---- plumbing ------------------------------------------------------------------------ */

static int setup(void **state) {
    (void)state;
    g_bench = getenv("MHABENCH");
    g_data = getenv("MHA_TEST_DATA");
    if (g_bench && !*g_bench) g_bench = NULL;
    if (g_data && !*g_data) g_data = NULL;
    return tu_mkdtemp(g_tmp, sizeof g_tmp, "test_cli");
}

static int teardown(void **state) {
    (void)state;
    tu_rm_tree(g_tmp);
    return 0;
}

/* Every test needs the binary; the data-driven ones also the data directory. */
#define NEED_BENCH()                                                                               \
    do {                                                                                           \
        if (!g_bench) {                                                                            \
            print_message("MHABENCH is not set: skipping (run through meson test)\n");             \
            skip();                                                                                \
        }                                                                                          \
    } while (0)
#define NEED_DATA()                                                                                \
    do {                                                                                           \
        NEED_BENCH();                                                                              \
        if (!g_data) {                                                                             \
            print_message("MHA_TEST_DATA is not set: skipping (run through meson test)\n");        \
            skip();                                                                                \
        }                                                                                          \
    } while (0)

/* Runs mhabench with the NULL-terminated argument list (after argv[0]); captures
 * stdout/stderr into g_out/g_err. Returns the exit status; a signal fails the test. */
static int run_bench(const char *first, ...) {
    va_list ap;
    va_start(ap, first);
    const int rc = tu_run_va(g_bench, first, ap, g_tmp, g_out, sizeof g_out, g_err, sizeof g_err);
    va_end(ap);
    if (rc < 0) fail_msg("%s %s did not run to an exit status; stderr: %s", g_bench, first, g_err);
    return rc;
}

/* The kernels `mhabench list` marks runnable here: lines "<name> <algorithm> <isa>
 * <q/o dtypes> <k/v dtypes> <yes|no> ..." after a header line starting with
 * "kernel", the dtype columns those of the kernel list and every column
 * aligned with the header's; those that take fp32. */
static void load_kernels(void) {
    if (g_nkernels >= 0) return;
    int rc = run_bench("list", NULL);
    if (rc != 0) print_message("mhabench list: exit %d: %s\n", rc, g_err);
    assert_int_equal(rc, 0);
    g_nkernels = 0;
    int header = 0;
    long runs_col = -1;
    for (char *line = strtok(g_out, "\n"); line; line = strtok(NULL, "\n")) {
        char name[64], alg[64], isa[64], qo[64], kv[64], yes[16];
        if (!header) {
            while (*line == ' ') line++;
            header = strncmp(line, "kernel", 6) == 0;
            if (header) runs_col = strstr(line, "runs-here") - line;
            continue;
        }
        if (sscanf(line, "%63s %63s %63s %63s %63s %15s", name, alg, isa, qo, kv, yes) != 6)
            continue;
        const char *at = strstr(line, strcmp(yes, "yes") ? " no " : " yes ");
        assert_non_null(at);
        if (strcmp(yes, "yes") != 0) assert_non_null(strstr(line, "[kernel ")); /* says why */
        assert_int_equal(at + 1 - line, runs_col); /* aligned, also for decode.avx512bf16 */
        const mha_kernel *kl = mha_kernel_find(name);
        assert_non_null(kl);
        for (int t = 0; t < MHA_DTYPE_COUNT; t++) {
            char want[16];
            snprintf(want, sizeof want, "%s", mha_dtype_name((mha_dtype)t));
            char lq[80], lk[80];
            snprintf(lq, sizeof lq, ",%s,", qo);
            snprintf(lk, sizeof lk, ",%s,", kv);
            char pat[24];
            snprintf(pat, sizeof pat, ",%s,", want);
            assert_int_equal(!!strstr(lq, pat), !!(mha_kernel_dtypes(kl) & MHA_DTYPE_BIT(t)));
            assert_int_equal(!!strstr(lk, pat), !!(mha_kernel_kv_dtypes(kl) & MHA_DTYPE_BIT(t)));
        }
        /* the .npy files here are fp32: kernels that do not take fp32 are out */
        const mha_kernel *k = mha_kernel_find(name);
        if (strcmp(yes, "yes") == 0 && k && (mha_kernel_dtypes(k) & MHA_DTYPE_BIT(MHA_F32)) &&
            g_nkernels < MAX_KERNELS)
            snprintf(g_kernels[g_nkernels++], sizeof g_kernels[0], "%s", name);
    }
    int naive = 0;
    for (int i = 0; i < g_nkernels; i++) naive |= !strcmp(g_kernels[i], "naive");
    if (!naive)
        fail_msg("`mhabench list` does not mark 'naive' runnable (header seen: %d)", header);
    print_message("runnable kernels:");
    for (int i = 0; i < g_nkernels; i++) print_message(" %s", g_kernels[i]);
    print_message("\n");
}

static void data_path(char *out, size_t len, const char *c, const char *name) {
    snprintf(out, len, "%s/%s/%s.npy", g_data, c, name);
}

static void read_meta(const char *c, int *heads, int *causal, int *self_attn) {
    char path[1024], buf[1024];
    snprintf(path, sizeof path, "%s/%s/meta.json", g_data, c);
    tu_slurp(path, buf, sizeof buf);
    const char *h = strstr(buf, "\"heads\":");
    if (!h) fail_msg("%s: no \"heads\"", path);
    *heads = atoi(h + 8);
    *causal = strstr(buf, "\"causal\": true") != NULL;
    *self_attn = strstr(buf, "\"self_attention\": true") != NULL;
}

static void load_npy(const char *path, npy_array *a) {
    char err[512];
    mha_status st = npy_read(path, a, err, sizeof err);
    if (st != MHA_OK) fail_msg("%s", err);
}

/* Compares the output file with the expected one; returns the max abs error. */
static double compare(const char *got_path, const char *want_path, const char *what) {
    npy_array got, want;
    load_npy(got_path, &got);
    load_npy(want_path, &want);
    assert_int_equal(got.ndim, want.ndim);
    for (int i = 0; i < got.ndim; i++) assert_int_equal(got.shape[i], want.shape[i]);
    double maxerr = 0, maxref = 0;
    for (size_t i = 0; i < want.count; i++) {
        double e = fabs((double)got.data[i] - (double)want.data[i]);
        if (!(e <= maxerr)) maxerr = e; /* NaN propagates */
        if (fabs(want.data[i]) > maxref) maxref = fabs(want.data[i]);
    }
    npy_free(&got);
    npy_free(&want);
    if (!(maxerr <= CLI_REL_TOL * maxref))
        fail_msg("%s: max abs error %.3g > %.1g * max|expected| (%.3g)", what, maxerr, CLI_REL_TOL,
                 maxref);
    return maxerr;
}

/* ---- ground truth ---------------------------------------------------------------------- */

static void test_attend_torch(void **state) {
    (void)state;
    NEED_DATA();
    load_kernels();
    char q[1024], k[1024], v[1024], want[1024], out[512];
    snprintf(out, sizeof out, "%s/attend_out.npy", g_tmp);
    for (size_t c = 0; c < sizeof ATTN_CASES / sizeof *ATTN_CASES; c++) {
        const char *cs = ATTN_CASES[c];
        int heads, causal, self_attn;
        read_meta(cs, &heads, &causal, &self_attn);
        data_path(q, sizeof q, cs, "q");
        data_path(k, sizeof k, cs, "k");
        data_path(v, sizeof v, cs, "v");
        data_path(want, sizeof want, cs, "out");
        for (int ki = 0; ki < g_nkernels; ki++)
            for (int t = 1; t <= 2; t++) {
                const char *kn = g_kernels[ki];
                unlink(out);
                int rc =
                    run_bench("attend", "--kernel", kn, "--q", q, "--k", k, "--v", v, "--out", out,
                              "--threads", t == 1 ? "1" : "2", causal ? "--causal" : NULL, NULL);
                if (rc != 0) fail_msg("attend %s %s threads=%d: exit %d: %s", cs, kn, t, rc, g_err);
                if (!strstr(g_out, kn)) fail_msg("attend stdout does not name %s: %s", kn, g_out);
                char what[256];
                snprintf(what, sizeof what, "attend %.63s %.63s threads=%d", cs, kn, t);
                double e = compare(out, want, what);
                if (t == 1) print_message("%-34s max abs error %.2e\n", what, e);
            }
    }
    /* An explicit --scale equal to the default 1/sqrt(8) gives the same result. */
    data_path(q, sizeof q, "attn_self", "q");
    data_path(k, sizeof k, "attn_self", "k");
    data_path(v, sizeof v, "attn_self", "v");
    data_path(want, sizeof want, "attn_self", "out");
    unlink(out);
    int rc = run_bench("attend", "--kernel", "naive", "--q", q, "--k", k, "--v", v, "--out", out,
                       "--scale", "0.35355339", NULL);
    if (rc != 0) fail_msg("attend --scale: exit %d: %s", rc, g_err);
    compare(out, want, "attend attn_self --scale 0.35355339");
}

static void test_forward_torch(void **state) {
    (void)state;
    NEED_DATA();
    load_kernels();
    char x[1024], xk[1024], xv[1024], want[1024], wdir[1024], out[512], heads_s[16];
    snprintf(out, sizeof out, "%s/forward_out.npy", g_tmp);
    for (size_t c = 0; c < sizeof LAYER_CASES / sizeof *LAYER_CASES; c++) {
        const char *cs = LAYER_CASES[c];
        int heads, causal, self_attn;
        read_meta(cs, &heads, &causal, &self_attn);
        snprintf(heads_s, sizeof heads_s, "%d", heads);
        data_path(x, sizeof x, cs, "query");
        data_path(xk, sizeof xk, cs, "key");
        data_path(xv, sizeof xv, cs, "value");
        data_path(want, sizeof want, cs, "out");
        snprintf(wdir, sizeof wdir, "%s/%s", g_data, cs);
        for (int ki = 0; ki < g_nkernels; ki++)
            for (int t = 1; t <= 2; t++) {
                const char *kn = g_kernels[ki];
                const char *ts = t == 1 ? "1" : "2";
                const char *cz = causal ? "--causal" : NULL;
                unlink(out);
                /* Self-attention cases use the default (query is key and value);
                 * the first kernel also runs them with explicit --key/--value. */
                int rc;
                if (self_attn)
                    rc = run_bench("forward", "--kernel", kn, "--query", x, "--heads", heads_s,
                                   "--weights", wdir, "--out", out, "--threads", ts, cz, NULL);
                else
                    rc = run_bench("forward", "--kernel", kn, "--query", x, "--key", xk, "--value",
                                   xv, "--heads", heads_s, "--weights", wdir, "--out", out,
                                   "--threads", ts, cz, NULL);
                if (rc != 0)
                    fail_msg("forward %s %s threads=%d: exit %d: %s", cs, kn, t, rc, g_err);
                if (!strstr(g_out, kn)) fail_msg("forward stdout does not name %s: %s", kn, g_out);
                char what[256];
                snprintf(what, sizeof what, "forward %.63s %.63s threads=%d", cs, kn, t);
                double e = compare(out, want, what);
                if (t == 1) print_message("%-34s max abs error %.2e\n", what, e);
                if (self_attn && ki == 0 && t == 1) {
                    unlink(out);
                    rc = run_bench("forward", "--kernel", kn, "--query", x, "--key", xk, "--value",
                                   xv, "--heads", heads_s, "--weights", wdir, "--out", out, cz,
                                   NULL);
                    if (rc != 0)
                        fail_msg("forward %s explicit key/value: exit %d: %s", cs, rc, g_err);
                    compare(out, want, "forward with explicit --key/--value");
                }
            }
    }
}

static void test_help(void **state) {
    (void)state;
    NEED_BENCH();
    assert_int_equal(run_bench("attend", "--help", NULL), 0);
    assert_non_null(strstr(g_out, "usage"));
    assert_string_equal(g_err, "");
    assert_int_equal(run_bench("forward", "-h", NULL), 0);
    assert_non_null(strstr(g_out, "usage"));
    assert_non_null(strstr(g_out, "--weights"));
}

/* Every option of every command but sweep, tune and recommend (their own
 * tests): "name=" takes a value. Each is in the command's --help, in the
 * usage lines (but --help itself) and the options section, and the parser
 * accepts it; and the options section lists nothing else. The help and
 * the parser are made from one table (harness/opts.h), so this is what the
 * table gives; a new option is added here too. */
static void expect_usage(int rc, const char *want); /* below, with verify's cases */

typedef struct {
    const char *cmd;
    int usage_lists_all; /* compare's usage lines are its forms, not every option */
    const char *opts[40];
} cmd_opts;

static const cmd_opts ALL_OPTS[] = {
    {"verify",
     1,
     {"kernels=", "seed=", "quick", "threads=", "dtype=", "kv-dtype=", "case=", "verbose", "help"}},
    {"attend",
     1,
     {"kernel=",  "q=",       "k=",           "v=",           "out=",          "causal",
      "scale=",   "threads=", "dtype=",       "kv-dtype=",    "out-dtype=",    "k-scale=",
      "v-scale=", "window=",  "softcap=",     "sinks=",       "cu-seqlens-q=", "cu-seqlens-kv=",
      "k-cache=", "v-cache=", "block-table=", "seq-lens-kv=", "help"}},
    {"forward",
     1,
     {"kernel=", "query=", "key=", "value=", "heads=", "kv-heads=", "weights=", "out=", "causal",
      "scale=", "threads=", "dtype=", "out-dtype=", "help"}},
    {"profile", 1, {"kernel=",     "batch=",   "heads=",   "kv-heads=", "seq=",     "seq-kv=",
                    "head-dim=",   "causal",   "threads=", "seconds=",  "block-q=", "block-kv=",
                    "split=",      "samples=", "dtype=",   "window=",   "softcap=", "sinks",
                    "head-dim-v=", "layer",    "help"}},
    {"info", 1, {"quick", "json", "tiles=", "seed=", "help"}},
    {"list", 1, {"help"}},
    {"merge", 1, {"out=", "out-dir=", "duplicates=", "allow-partial", "force", "help"}},
    {"bisect",
     1,
     {"repo=", "build=", "binary=", "rounds=", "max-rounds=", "alpha=", "keep", "help"}},
    {"sweep", 1, {"preset=",      "kernels=",  "seq=",         "seq-q=",      "seq-kv=",
                  "heads=",       "kv-heads=", "head-dim=",    "batch=",      "causal=",
                  "window=",      "softcap=",  "sinks=",       "head-dim-v=", "page-size=",
                  "ragged=",      "threads=",  "dtype=",       "kv-dtype=",   "shard=",
                  "max-seconds=", "min-time=", "repetitions=", "passes=",     "bind=",
                  "peers=",       "out=",      "seed=",        "quiet",       "verbose",
                  "list-presets", "help"}},
    {"tune",
     1,
     {"budget=", "classes=", "kernels=", "threads=", "dtype=", "out=", "force",
      "seed=", "shard=", "help"}},
    {"recommend",
     1,
     {"seq=", "seq-kv=", "heads=", "kv-heads=", "head-dim=", "causal", "threads=", "batch=",
      "dtype=", "kv-dtype=", "window=", "softcap=", "sinks", "head-dim-v=", "help"}},
    {"compare",
     0,
     {"threshold=", "no-normalize", "max-drift=", "alpha=", "json", "force", "baseline",
      "save-baseline", "baseline-dir=", "ab", "budget=", "rounds=", "calibrate",
      "run=", "out=", "noise=", "help"}},
};

static void test_help_lists_options(void **state) {
    (void)state;
    NEED_BENCH();
    for (size_t c = 0; c < sizeof ALL_OPTS / sizeof *ALL_OPTS; c++) {
        const cmd_opts *co = &ALL_OPTS[c];
        print_message("%s --help\n", co->cmd);
        if (run_bench(co->cmd, "--help", NULL) != 0) fail_msg("%s --help: %s", co->cmd, g_err);
        assert_string_equal(g_err, "");
        char want[64];
        snprintf(want, sizeof want, "usage: mhabench %s", co->cmd);
        if (strncmp(g_out, want, strlen(want)) != 0) fail_msg("%s --help: %.80s", co->cmd, g_out);
        /* the usage lines: the first and those indented under it */
        const char *end = g_out;
        do end = strchr(end, '\n') + 1;
        while (strncmp(end, "        ", 8) == 0 || strncmp(end, "usage: ", 7) == 0 ||
               strncmp(end, "       mhabench", 15) == 0);
        const char *section = strstr(g_out, "\noptions:\n");
        if (!section) fail_msg("%s --help has no options section", co->cmd);
        int n = 0;
        for (; co->opts[n]; n++) {
            char name[40], item[48];
            snprintf(name, sizeof name, "%.*s", (int)strcspn(co->opts[n], "="), co->opts[n]);
            snprintf(item, sizeof item, "--%s%s", name, strchr(co->opts[n], '=') ? " " : "]");
            const char *at = strstr(g_out, item);
            if (co->usage_lists_all && strcmp(name, "help") != 0 && (!at || at >= end))
                fail_msg("%s --help's usage lines lack %s", co->cmd, item);
            snprintf(item, sizeof item, "\n  --%s", name);
            char shorter[48];
            snprintf(shorter, sizeof shorter, ", --%s", name);
            if (!strstr(section, item) && !strstr(section, shorter))
                fail_msg("%s --help's options section lacks --%s", co->cmd, name);
        }
        /* the section lists only these */
        char copy[sizeof g_out];
        snprintf(copy, sizeof copy, "%s", section + 1);
        for (char *line = strtok(copy, "\n"); line; line = strtok(NULL, "\n")) {
            char *dd = strncmp(line, "  --", 4) == 0       ? line + 4
                       : strncmp(line + 4, ", --", 4) == 0 ? line + 8
                                                           : NULL;
            if (!dd || line[2] == ' ') continue;
            const size_t len = strcspn(dd, " ");
            int known = 0;
            for (int i = 0; i < n; i++)
                known |= strncmp(co->opts[i], dd, len) == 0 &&
                         (co->opts[i][len] == '\0' || co->opts[i][len] == '=');
            if (!known) fail_msg("%s --help lists --%.*s: add it here", co->cmd, (int)len, dd);
        }
        /* the parser takes each: --name=x is a value or "takes no value",
         * never an unknown option (and never a run: each exits 2 at once) */
        for (int i = 0; i < n; i++) {
            char name[40], arg[48];
            snprintf(name, sizeof name, "%.*s", (int)strcspn(co->opts[i], "="), co->opts[i]);
            if (strcmp(name, "help") == 0) continue;
            snprintf(arg, sizeof arg, "--%s=x", name);
            /* after it a bad value of another option, so that one whose
             * value x is fine (sweep --out=x) still exits 2 at once */
            const char *then = strcmp(co->cmd, "sweep") == 0  ? "--preset=none"
                               : strcmp(co->cmd, "tune") == 0 ? "--classes=none"
                                                              : NULL;
            const int rc = run_bench(co->cmd, arg, then, NULL);
            if (rc != 2) fail_msg("%s %s: exit %d: %s", co->cmd, arg, rc, g_err);
            if (strstr(g_err, "unknown option") || strstr(g_err, "unrecognized"))
                fail_msg("%s does not take --%s: %s", co->cmd, name, g_err);
            char says[80];
            snprintf(says, sizeof says, "option '--%s' takes no value", name);
            if (!strchr(co->opts[i], '=') && !strstr(g_err, says))
                fail_msg("%s %s: %s", co->cmd, arg, g_err);
        }
        /* and refuses a near miss, naming the option meant */
        if (n > 1) {
            char typo[48], says[96], name[40];
            snprintf(name, sizeof name, "%.*s", (int)strcspn(co->opts[0], "="), co->opts[0]);
            snprintf(typo, sizeof typo, "--%sx", name);
            expect_usage(run_bench(co->cmd, typo, NULL), typo);
            snprintf(says, sizeof says, "(did you mean --%s?)", name);
            if (!strstr(g_err, says)) fail_msg("%s %s: %s", co->cmd, typo, g_err);
        }
    }
}

/* ---- malformed inputs --------------------------------------------------------------------- */

/* The run failed with exit 2, the first stderr line is "mhabench: ..." and names the
 * problem (kw1, kw2), only one line unless usage follows, and the --out file
 * (g_tmp/never.npy) was not created. */
static void expect_error(int rc, const char *kw1, const char *kw2, int one_line) {
    char out[512];
    snprintf(out, sizeof out, "%s/never.npy", g_tmp);
    char *nl = strchr(g_err, '\n');
    char first[4096];
    snprintf(first, sizeof first, "%.*s", nl ? (int)(nl - g_err) : (int)strlen(g_err), g_err);
    print_message("  exit %d: %s\n", rc, first);
    assert_int_equal(rc, 2);
    assert_int_equal(strncmp(first, "mhabench: ", 10), 0);
    if (kw1 && !strstr(first, kw1)) fail_msg("message does not contain \"%s\"", kw1);
    if (kw2 && !strstr(first, kw2)) fail_msg("message does not contain \"%s\"", kw2);
    if (one_line) {
        assert_non_null(nl);
        assert_int_equal(nl[1], '\0');
    }
    assert_int_equal(access(out, F_OK), -1);
}

static void tmp_path(char *out, size_t len, const char *name) {
    snprintf(out, len, "%s/%s", g_tmp, name);
}

static void write_f4(const char *name, const int64_t *shape, int ndim) {
    char path[512], err[512];
    tmp_path(path, sizeof path, name);
    size_t n = 1;
    for (int i = 0; i < ndim; i++) n *= (size_t)shape[i];
    float *d = calloc(n ? n : 1, sizeof(float));
    assert_non_null(d);
    for (size_t i = 0; i < n; i++) d[i] = (float)(i % 7) * 0.25f - 0.5f;
    mha_status st = npy_write(path, d, shape, ndim, err, sizeof err);
    free(d);
    if (st != MHA_OK) fail_msg("%s", err);
}

static void write_raw(const char *name, const void *buf, size_t n) {
    char path[512];
    tmp_path(path, sizeof path, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

/* Runs attend with q/k/v files from the scratch dir (names) and out = never.npy. */
static int attend_tmp(const char *kernel, const char *qn, const char *kn, const char *vn) {
    char q[512], k[512], v[512], out[512];
    tmp_path(q, sizeof q, qn);
    tmp_path(k, sizeof k, kn);
    tmp_path(v, sizeof v, vn);
    tmp_path(out, sizeof out, "never.npy");
    return run_bench("attend", "--kernel", kernel, "--q", q, "--k", k, "--v", v, "--out", out,
                     NULL);
}

static void test_attend_bad_inputs(void **state) {
    (void)state;
    NEED_BENCH();
    const int64_t s_ok[4] = {1, 2, 5, 8};
    write_f4("q.npy", s_ok, 4);
    write_f4("k.npy", s_ok, 4);
    write_f4("v.npy", s_ok, 4);
    /* Sanity: the valid inputs run. */
    char out[512];
    tmp_path(out, sizeof out, "ok.npy");
    char q[512], k[512], v[512];
    tmp_path(q, sizeof q, "q.npy");
    tmp_path(k, sizeof k, "k.npy");
    tmp_path(v, sizeof v, "v.npy");
    int rc =
        run_bench("attend", "--kernel", "naive", "--q", q, "--k", k, "--v", v, "--out", out, NULL);
    if (rc != 0) fail_msg("valid attend failed: exit %d: %s", rc, g_err);
    assert_int_equal(access(out, F_OK), 0);

    print_message("missing file\n");
    expect_error(attend_tmp("naive", "missing_q.npy", "k.npy", "v.npy"), "missing_q.npy",
                 "No such file", 1);

    print_message("bad magic\n");
    static const char zip[] = "PK\x03\x04 this is a zip, not a .npy file..........";
    write_raw("badmagic.npy", zip, sizeof zip - 1);
    expect_error(attend_tmp("naive", "q.npy", "badmagic.npy", "v.npy"), "badmagic.npy", "magic", 1);

    print_message("'<f8' input\n");
    {
        unsigned char buf[128 + 8 * 80]; /* 128-byte header, 80 doubles */
        memset(buf, 0, sizeof buf);
        const char *h = "{'descr': '<f8', 'fortran_order': False, 'shape': (1, 2, 5, 8), }";
        memcpy(buf, "\x93NUMPY\x01\x00\x76\x00", 10);
        memset(buf + 10, ' ', 118);
        memcpy(buf + 10, h, strlen(h));
        buf[127] = '\n';
        write_raw("f8.npy", buf, sizeof buf);
    }
    expect_error(attend_tmp("naive", "f8.npy", "k.npy", "v.npy"), "f8.npy", "'<f8'", 1);

    print_message("rank-3 q\n");
    const int64_t s3[3] = {2, 5, 8};
    write_f4("q3.npy", s3, 3);
    expect_error(attend_tmp("naive", "q3.npy", "k.npy", "v.npy"), "rank", "q3.npy", 1);

    print_message("K/V shape mismatch\n");
    const int64_t s_v6[4] = {1, 2, 6, 8};
    write_f4("v6.npy", s_v6, 4);
    expect_error(attend_tmp("naive", "q.npy", "k.npy", "v6.npy"), "[1, 2, 5, 8]", "[1, 2, 6, 8]",
                 1);

    print_message("head_dim mismatch\n");
    const int64_t s_d4[4] = {1, 2, 5, 4};
    write_f4("k4.npy", s_d4, 4);
    write_f4("v4.npy", s_d4, 4);
    expect_error(attend_tmp("naive", "q.npy", "k4.npy", "v4.npy"), "[1, 2, 5, 8]", "[1, 2, 5, 4]",
                 1);

    print_message("batch mismatch\n");
    const int64_t s_b2[4] = {2, 2, 5, 8};
    write_f4("kb2.npy", s_b2, 4);
    write_f4("vb2.npy", s_b2, 4);
    expect_error(attend_tmp("naive", "q.npy", "kb2.npy", "vb2.npy"), "batch", "[2, 2, 5, 8]", 1);

    print_message("kv heads not dividing heads\n");
    const int64_t s_q4[4] = {1, 4, 5, 8}, s_kv3[4] = {1, 3, 5, 8};
    write_f4("q4h.npy", s_q4, 4);
    write_f4("k3h.npy", s_kv3, 4);
    write_f4("v3h.npy", s_kv3, 4);
    expect_error(attend_tmp("naive", "q4h.npy", "k3h.npy", "v3h.npy"), "divide", "[1, 3, 5, 8]", 1);

    print_message("unknown kernel\n");
    expect_error(attend_tmp("no_such_kernel", "q.npy", "k.npy", "v.npy"), "no_such_kernel", NULL,
                 0);

    print_message("unknown option\n");
    tmp_path(out, sizeof out, "never.npy");
    rc = run_bench("attend", "--kernel", "naive", "--q", q, "--k", k, "--v", v, "--out", out,
                   "--bogus", NULL);
    expect_error(rc, "--bogus", NULL, 0);

    print_message("missing --out\n");
    rc = run_bench("attend", "--kernel", "naive", "--q", q, "--k", k, "--v", v, NULL);
    expect_error(rc, "--out", NULL, 0);

    print_message("bad --threads\n");
    rc = run_bench("attend", "--kernel", "naive", "--q", q, "--k", k, "--v", v, "--out", out,
                   "--threads", "two", NULL);
    expect_error(rc, "--threads", NULL, 0);
}

static void expect_usage(int rc, const char *want); /* below, with verify's cases */

/* ---- dtypes on the command line ---------------------------------------------------------- */

/* Writes g_tmp/name as dtype t: the values of write_f4, rounded / quantised
 * without scale (int8: small integers). */
static void write_typed(const char *name, mha_dtype t, const int64_t *shape, int ndim) {
    char path[512], err[512];
    tmp_path(path, sizeof path, name);
    size_t n = 1;
    for (int i = 0; i < ndim; i++) n *= (size_t)shape[i];
    float *f = calloc(n, sizeof(float));
    void *d = calloc(n, mha_dtype_size(t));
    assert_non_null(f);
    assert_non_null(d);
    for (size_t i = 0; i < n; i++)
        f[i] = t == MHA_I8 ? (float)(i % 7) - 3 : (float)(i % 7) * 0.25f - 0.5f;
    mha_convert_from_f32(t, f, d, n);
    mha_status st = npy_write_typed(path, t, d, shape, ndim, err, sizeof err);
    free(f);
    free(d);
    if (st != MHA_OK) fail_msg("%s", err);
}

/* attend on g_tmp files with extra arguments (NULL-terminated, at most 8). */
static int attend_dt(const char *kernel, const char *qn, const char *kn, const char *vn,
                     const char *outn, ...) {
    char q[512], k[512], v[512], out[512];
    tmp_path(q, sizeof q, qn);
    tmp_path(k, sizeof k, kn);
    tmp_path(v, sizeof v, vn);
    tmp_path(out, sizeof out, outn);
    const char *x[9] = {0};
    va_list ap;
    va_start(ap, outn);
    for (int i = 0; i < 8; i++)
        if (!(x[i] = va_arg(ap, const char *))) break;
    va_end(ap);
    return run_bench("attend", "--kernel", kernel, "--q", q, "--k", k, "--v", v, "--out", out, x[0],
                     x[1], x[2], x[3], x[4], x[5], x[6], x[7], NULL);
}

static void read_any(const char *name, npy_array *a) {
    char path[512], err[512];
    tmp_path(path, sizeof path, name);
    const unsigned all = MHA_DTYPE_BIT(MHA_F32) | MHA_DTYPE_BIT(MHA_BF16) | MHA_DTYPE_BIT(MHA_F16) |
                         MHA_DTYPE_BIT(MHA_I8);
    if (npy_read_typed(path, all, a, err, sizeof err) != MHA_OK) fail_msg("%s", err);
}

/* The first runnable kernel that takes (dt, kv) by its masks, or NULL. */
static const mha_kernel *typed_kernel(mha_dtype dt, mha_dtype kv) {
    for (int i = 0; i < mha_kernel_count(); i++) {
        const mha_kernel *k = mha_kernel_at(i);
        if (mha_kernel_supported(k) == MHA_OK && (mha_kernel_dtypes(k) & MHA_DTYPE_BIT(dt)) &&
            (mha_kernel_kv_dtypes(k) & MHA_DTYPE_BIT(kv)))
            return k;
    }
    return NULL;
}

/* --out-dtype converts the output; typed files are read only with the dtype
 * that names them; bad typed inputs and scales are exit 2 naming the file. */
/* A new user's first errors point at the fix (issue: the first hour): a
 * bf16-only kernel on float32 files names --dtype bf16; an int16 file (torch
 * bf16 bits viewed as int16) names the uint16 view; `profile --kernel auto`
 * runs mha_select's choice; attend's usage lines come before its text. */
static void test_first_hour_hints(void **state) {
    (void)state;
    NEED_BENCH();
    const int64_t s[4] = {1, 2, 5, 8};
    write_f4("hq.npy", s, 4);
    write_f4("hk.npy", s, 4);
    write_f4("hv.npy", s, 4);
    const mha_kernel *bk = mha_kernel_find("flash.avx512bf16");
    if (bk && mha_kernel_supported(bk) == MHA_OK) {
        expect_error(attend_tmp("flash.avx512bf16", "hq.npy", "hk.npy", "hv.npy"), "fp32",
                     "pass --dtype bf16", 1);
    } else {
        print_message("flash.avx512bf16 does not run here: its --dtype hint not checked\n");
    }
    /* '<i2' of the same shape: 80-byte header + 40 int16 */
    char hdr[128];
    const int hl = snprintf(hdr, sizeof hdr,
                            "{'descr': '<i2', 'fortran_order': False, 'shape': (1, 2, 5, 8), }");
    unsigned char file[256] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
    const int total = ((10 + hl + 1 + 63) / 64) * 64, hlen = total - 10;
    file[8] = (unsigned char)(hlen & 0xff), file[9] = (unsigned char)(hlen >> 8);
    memset(file + 10, ' ', (size_t)hlen);
    memcpy(file + 10, hdr, (size_t)hl);
    file[total - 1] = '\n';
    unsigned char buf[256 + 80] = {0};
    memcpy(buf, file, (size_t)total);
    write_raw("hq_i2.npy", buf, (size_t)total + 80);
    char q[512], k[512], v[512], out[512];
    tmp_path(q, sizeof q, "hq_i2.npy");
    tmp_path(k, sizeof k, "hk.npy");
    tmp_path(v, sizeof v, "hv.npy");
    tmp_path(out, sizeof out, "never.npy");
    expect_error(run_bench("attend", "--kernel", "naive", "--q", q, "--k", k, "--v", v, "--dtype",
                           "bf16", "--out", out, NULL),
                 "'<i2'", "view(np.uint16)", 0);
    assert_int_equal(run_bench("profile", "--kernel", "auto", "--seq", "32", "--head-dim", "16",
                               "--seconds", "0.05", NULL),
                     0);
    assert_non_null(strstr(g_out, "auto: "));
    assert_int_equal(run_bench("attend", "--help", NULL), 0);
    /* every line up to the description is a usage line */
    const char *desc = strstr(g_out, "  Runs the attention core");
    assert_non_null(desc);
    assert_null(strstr(desc, "                       ["));
}

/* --window, --softcap, --sinks and a v with its own head dim (issue 30): the
 * output matches the oracle, and each malformed value is exit 2 naming it. */
static void test_attend_variants(void **state) {
    (void)state;
    NEED_BENCH();
    const int64_t sq[4] = {1, 2, 5, 8}, sk[4] = {1, 1, 7, 8}, sv[4] = {1, 1, 7, 3}, ss[1] = {2},
                  sbad[1] = {3};
    write_f4("q.npy", sq, 4);
    write_f4("k.npy", sk, 4);
    write_f4("v.npy", sv, 4);
    write_f4("s.npy", ss, 1);
    write_f4("s3.npy", sbad, 1);
    char q[512], k[512], v[512], sk_[512], s3[512], out[512], never[512];
    tmp_path(q, sizeof q, "q.npy");
    tmp_path(k, sizeof k, "k.npy");
    tmp_path(v, sizeof v, "v.npy");
    tmp_path(sk_, sizeof sk_, "s.npy");
    tmp_path(s3, sizeof s3, "s3.npy");
    tmp_path(out, sizeof out, "var.npy");
    tmp_path(never, sizeof never, "never.npy");
    const char *kernels[] = {"naive", "auto"};
    for (int ki = 0; ki < 2; ki++) {
        int rc = run_bench("attend", "--kernel", kernels[ki], "--q", q, "--k", k, "--v", v, "--out",
                           out, "--window", "1,0", "--softcap", "0.75", "--sinks", sk_, NULL);
        if (rc != 0) fail_msg("attend with variants: exit %d: %s", rc, g_err);
        assert_non_null(strstr(g_out, "window=1,0 softcap=0.75 sinks d_v=3"));
        npy_array o, a[4];
        char err[512];
        const char *paths[4] = {q, k, v, sk_};
        assert_int_equal(npy_read(out, &o, err, sizeof err), MHA_OK);
        assert_int_equal(o.ndim, 4);
        assert_int_equal(o.shape[3], 3); /* v's head dim */
        for (int i = 0; i < 4; i++)
            assert_int_equal(npy_read(paths[i], &a[i], err, sizeof err), MHA_OK);
        mha_problem p = {.batch = 1,
                         .heads = 2,
                         .kv_heads = 1,
                         .seq_q = 5,
                         .seq_kv = 7,
                         .head_dim = 8,
                         .causal = 0,
                         .scale = 0.0f,
                         .dtype = MHA_F32,
                         .kv_dtype = MHA_F32};
        p.window = 1;
        p.window_left = 1;
        p.softcap = 0.75f;
        p.sinks = 1;
        p.head_dim_v = 3;
        const mha_tensor tq = mha_view_bhnd(a[0].data, 2, 5, 8),
                         tk = mha_view_bhnd(a[1].data, 1, 7, 8),
                         tv = mha_view_bhnd(a[2].data, 1, 7, 3);
        const mha_extras x = {.sinks = a[3].data};
        double ref[30];
        assert_int_equal(mha_reference_ex(&p, &tq, &tk, &tv, &x, ref), MHA_OK);
        for (int i = 0; i < 30; i++) assert_float_equal(o.data[i], ref[i], 1e-5);
        npy_free(&o);
        for (int i = 0; i < 4; i++) npy_free(&a[i]);
    }
    /* list names what each kernel takes: the traits, not the algorithm */
    assert_int_equal(run_bench("list", NULL), 0);
    for (char *line = strtok(g_out, "\n"); line; line = strtok(NULL, "\n")) {
        char name[64];
        if (sscanf(line, "%63s", name) != 1) continue;
        const mha_kernel *kl = mha_kernel_find(name);
        if (!kl) continue;
        const unsigned tr = mha_kernel_traits(kl);
        if (tr & MHA_KT_WINDOW) assert_non_null(strstr(line, " window,"));
        if (tr & MHA_KT_HEAD_DIM_V) assert_non_null(strstr(line, ",d_v"));
        /* the layouts beside dense: as the kernel's traits say */
        assert_int_equal(strstr(line, ",packed") != NULL, !!(tr & MHA_KT_PACKED));
        assert_int_equal(strstr(line, ",paged ") != NULL, !!(tr & MHA_KT_PAGED));
        if (!(tr & (MHA_KT_WINDOW | MHA_KT_SOFTCAP | MHA_KT_SINKS | MHA_KT_HEAD_DIM_V |
                    MHA_KT_PACKED | MHA_KT_PAGED)))
            assert_non_null(strstr(line, " - "));
    }
    print_message("sinks of the wrong length\n");
    expect_error(run_bench("attend", "--kernel", "naive", "--q", q, "--k", k, "--v", v, "--out",
                           never, "--sinks", s3, NULL),
                 "--sinks", "expected [2]", 1);
    print_message("window below -1\n");
    expect_error(run_bench("attend", "--kernel", "naive", "--q", q, "--k", k, "--v", v, "--out",
                           never, "--window", "-2,0", NULL),
                 "--window '-2,0'", "L = -2 is below -1", 1);
    print_message("window of one number\n");
    expect_error(run_bench("attend", "--kernel", "naive", "--q", q, "--k", k, "--v", v, "--out",
                           never, "--window", "5", NULL),
                 "--window '5'", "expected L,R", 1);
    print_message("softcap 0 and below\n");
    expect_error(run_bench("attend", "--kernel", "naive", "--q", q, "--k", k, "--v", v, "--out",
                           never, "--softcap", "0", NULL),
                 "--softcap", "out of range (0", 1);
    expect_error(run_bench("attend", "--kernel", "naive", "--q", q, "--k", k, "--v", v, "--out",
                           never, "--softcap", "-3", NULL),
                 "--softcap", "-3", 1);
    print_message("d_v on a kernel that does not take it\n");
    expect_error(run_bench("attend", "--kernel", "tiled.scalar", "--q", q, "--k", k, "--v", v,
                           "--out", never, NULL),
                 "tiled.scalar", "head_dim_v", 1);
    print_message("sinks on a kernel that does not take them\n");
    expect_error(run_bench("attend", "--kernel", "tiled.scalar", "--q", q, "--k", k, "--v", k,
                           "--out", never, "--sinks", sk_, NULL),
                 "tiled.scalar", "sinks", 1);
}

static void test_attend_dtypes(void **state) {
    (void)state;
    NEED_BENCH();
    const int64_t s[4] = {1, 2, 5, 8}, s3[3] = {1, 2, 5}, s3bad[3] = {1, 2, 4};
    write_f4("q.npy", s, 4);
    write_f4("k.npy", s, 4);
    write_f4("v.npy", s, 4);
    write_typed("q_bf16.npy", MHA_BF16, s, 4);
    write_typed("k_bf16.npy", MHA_BF16, s, 4);
    write_typed("k_f16.npy", MHA_F16, s, 4);
    write_typed("k_i8.npy", MHA_I8, s, 4);
    write_typed("v_i8.npy", MHA_I8, s, 4);
    write_typed("q_i8.npy", MHA_I8, s, 4);
    write_f4("ks.npy", s3, 3);
    write_f4("ks_bad.npy", s3bad, 3);
    write_typed("ks_bf16.npy", MHA_BF16, s3, 3);
    char ks[512], ksb[512], ksh[512];
    tmp_path(ks, sizeof ks, "ks.npy");
    tmp_path(ksb, sizeof ksb, "ks_bad.npy");
    tmp_path(ksh, sizeof ksh, "ks_bf16.npy");

    /* fp32 run, then the same written as bf16 and fp16: each element rounded */
    assert_int_equal(attend_dt("naive", "q.npy", "k.npy", "v.npy", "o32.npy", NULL), 0);
    const mha_dtype outs[2] = {MHA_BF16, MHA_F16};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(attend_dt("naive", "q.npy", "k.npy", "v.npy", "ot.npy", "--out-dtype",
                                   mha_dtype_name(outs[i]), NULL),
                         0);
        assert_non_null(strstr(g_out, "out_dtype="));
        npy_array a, b;
        read_any("o32.npy", &a);
        read_any("ot.npy", &b);
        assert_int_equal(b.dtype, outs[i]);
        assert_int_equal(b.count, a.count);
        void *want = calloc(a.count, 2);
        mha_convert_from_f32(outs[i], a.data, want, a.count);
        assert_memory_equal(b.raw, want, a.count * 2);
        free(want);
        npy_free(&a);
        npy_free(&b);
    }

    print_message("typed files without the dtype that reads them\n");
    expect_error(attend_dt("naive", "q_bf16.npy", "k.npy", "v.npy", "never.npy", NULL),
                 "q_bf16.npy", "--dtype bf16", 1);
    expect_error(attend_dt("naive", "q.npy", "k_f16.npy", "v.npy", "never.npy", NULL), "k_f16.npy",
                 "fp16 ('<f2')", 1);
    expect_error(
        attend_dt("naive", "q.npy", "k_bf16.npy", "v.npy", "never.npy", "--kv-dtype", "fp16", NULL),
        "k_bf16.npy", "the K/V dtype is fp16", 1);
    expect_error(attend_dt("naive", "q_i8.npy", "k.npy", "v.npy", "never.npy", NULL), "q_i8.npy",
                 "K/V dtype only", 1);
    print_message("int8 caches and their scales\n");
    expect_error(attend_dt("naive", "q.npy", "k_i8.npy", "v_i8.npy", "never.npy", "--kv-dtype",
                           "int8", NULL),
                 "k_i8.npy", "--k-scale", 1);
    expect_error(attend_dt("naive", "q.npy", "k_i8.npy", "v_i8.npy", "never.npy", "--kv-dtype",
                           "int8", "--k-scale", ksb, "--v-scale", ks, NULL),
                 "ks_bad.npy", "expected [1, 2, 5]", 1);
    expect_error(attend_dt("naive", "q.npy", "k_i8.npy", "v_i8.npy", "never.npy", "--kv-dtype",
                           "int8", "--k-scale", ksh, "--v-scale", ks, NULL),
                 "ks_bf16.npy", "'<u2'", 1);
    expect_error(attend_dt("naive", "q.npy", "k.npy", "v.npy", "never.npy", "--kv-dtype", "int8",
                           "--k-scale", ks, NULL),
                 "--k-scale", "quantised on load", 1);
    expect_error(attend_dt("naive", "q.npy", "k.npy", "v.npy", "never.npy", "--k-scale", ks, NULL),
                 "--k-scale", "int8", 1);
    print_message("dtype options\n");
    expect_error(
        attend_dt("naive", "q.npy", "k.npy", "v.npy", "never.npy", "--dtype", "int8", NULL),
        "--dtype", "int8", 1);
    expect_error(attend_dt("naive", "q.npy", "k.npy", "v.npy", "never.npy", "--dtype", "bf16",
                           "--kv-dtype", "fp32", NULL),
                 "--kv-dtype fp32", "not offered", 1);
    expect_error(
        attend_dt("naive", "q.npy", "k.npy", "v.npy", "never.npy", "--out-dtype", "f64", NULL),
        "--out-dtype", "f64", 1);
    /* a kernel that does not take the dtype is refused, naming both */
    expect_error(
        attend_dt("naive", "q.npy", "k.npy", "v.npy", "never.npy", "--dtype", "bf16", NULL),
        "naive", "bf16", 1);
    expect_error(attend_dt("naive", "q.npy", "k_i8.npy", "v_i8.npy", "never.npy", "--kv-dtype",
                           "int8", "--k-scale", ks, "--v-scale", ks, NULL),
                 "naive", "int8", 1);

    /* With a kernel that takes them: fp32 files converted on load, typed files
     * as they are; the output within the dtype's reach of the fp32 one. */
    static const struct {
        mha_dtype dt, kv;
        const char *k, *v;
    } runs[] = {{MHA_BF16, MHA_BF16, "k.npy", "v.npy"},
                {MHA_BF16, MHA_BF16, "k_bf16.npy", "v.npy"},
                {MHA_F16, MHA_F16, "k.npy", "v.npy"},
                {MHA_F32, MHA_I8, "k.npy", "v.npy"},
                {MHA_F32, MHA_I8, "k_i8.npy", "v_i8.npy"}};
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        const mha_kernel *k = typed_kernel(runs[i].dt, runs[i].kv);
        if (!k) {
            print_message("no runnable kernel takes dtype %s with a %s cache: that run skipped\n",
                          mha_dtype_name(runs[i].dt), mha_dtype_name(runs[i].kv));
            continue;
        }
        const int i8file = !strcmp(runs[i].k, "k_i8.npy");
        int rc = attend_dt(mha_kernel_name(k), "q.npy", runs[i].k, runs[i].v, "ot.npy", "--dtype",
                           mha_dtype_name(runs[i].dt), "--kv-dtype", mha_dtype_name(runs[i].kv),
                           i8file ? "--k-scale" : NULL, ks, "--v-scale", ks, NULL);
        if (rc != 0) fail_msg("attend %s: exit %d: %s", mha_kernel_name(k), rc, g_err);
        npy_array b;
        read_any("ot.npy", &b);
        assert_int_equal(b.dtype, runs[i].dt);
        npy_free(&b);
    }
}

/* sweep --dtype: fp32 rows keep their names and carry dtype fields; a
 * kernel runs only the dtypes it takes; a bad dtype is exit 2. */
static void test_sweep_dtypes(void **state) {
    (void)state;
    NEED_BENCH();
    char out[512], buf[65536];
    tmp_path(out, sizeof out, "sweep-dtypes.json");
    expect_usage(run_bench("sweep", "--dtype", "int8", "--out", out, NULL), "int8");
    expect_usage(run_bench("sweep", "--kv-dtype", "fp8", "--out", out, NULL), "fp8");
    const int rc = run_bench("sweep", "--kernels", "tiled.scalar,flash.scalar,decode.scalar",
                             "--seq-q", "1", "--seq-kv", "64", "--heads", "2", "--head-dim", "16",
                             "--threads", "1", "--min-time", "0.001", "--dtype", "fp32,bf16",
                             "--kv-dtype", "fp32,bf16,int8", "--out", out, NULL);
    if (rc != 0) fail_msg("sweep --dtype: exit %d: %s", rc, g_err);
    tu_slurp(out, buf, sizeof buf);
    assert_non_null(strstr(buf, "\"dtype\": \"fp32\""));
    /* tiled.scalar takes fp32 only: no typed tiled.scalar row; flash.scalar
     * widens bf16 (but takes no int8 cache) */
    assert_null(strstr(buf, "tiled.scalar/B:1/H:2/KV:2/Nq:1/Nkv:64/d:16/causal:0/dtype:"));
    assert_null(strstr(buf, "tiled.scalar/B:1/H:2/KV:2/Nq:1/Nkv:64/d:16/causal:0/kv_dtype:"));
    assert_non_null(strstr(buf, "flash.scalar/B:1/H:2/KV:2/Nq:1/Nkv:64/d:16/causal:0/dtype:bf16"));
    assert_null(strstr(buf, "flash.scalar/B:1/H:2/KV:2/Nq:1/Nkv:64/d:16/causal:0/kv_dtype:int8"));
    /* with --kv-dtype fp32,bf16,int8 the fp32 decode rows also read bf16 and int8 caches;
     * rows exist only where a kernel takes them */
    const mha_problem pb = {.batch = 1,
                            .heads = 2,
                            .kv_heads = 2,
                            .seq_q = 1,
                            .seq_kv = 64,
                            .head_dim = 16,
                            .causal = 0,
                            .scale = 0.0f,
                            .dtype = MHA_F32,
                            .kv_dtype = MHA_BF16};
    const mha_kernel *dec = mha_kernel_find("decode.scalar");
    if (mha_kernel_takes(dec, &pb) == MHA_OK)
        assert_non_null(strstr(buf, "decode.scalar/B:1/H:2/KV:2/Nq:1/Nkv:64/d:16/causal:0/"
                                    "kv_dtype:bf16/threads:1"));
    else
        assert_null(strstr(buf, "kv_dtype:bf16/threads"));
}

/* The value of the JSON string field "key" in text (json-c writes `"k":"v"`
 * or `"k": "v"`), or NULL. */
static const char *json_str_value(const char *text, const char *key) {
    char pat[96];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *v = strstr(text, pat);
    if (!v) return NULL;
    v += strlen(pat);
    while (*v == ' ') v++;
    return *v == '"' ? v + 1 : NULL;
}

/* sweep --peers: an unknown name is exit 2 naming it; a peer that cannot run
 * here (a Python peer without its environment, a C peer not built) is said
 * and recorded in the context, never an error; every peer that runs gets a
 * row named as ours, checked against the oracle (its max_err) before timed,
 * and its version in the context. */
static void test_sweep_peers(void **state) {
    (void)state;
    NEED_BENCH();
    static char buf[1 << 18];
    char out[512], key[64], row[256];
    tmp_path(out, sizeof out, "sweep-peers.json");
    expect_usage(run_bench("sweep", "--peers", "torch,pytorch", "--out", out, NULL), "pytorch");
    /* no peer Python here whatever the caller has: the Python peers are
     * unavailable; the C ones run when this build has them */
    /* each Python peer's interpreter variable (peers_py.inc) */
    enum { NENV = 16 };
    const char *py_envs[NENV];
    char *saved[NENV];
    int nenv = 0, nnames;
    const char *const *names = peer_names(&nnames);
    for (int i = 0; i < nnames && nenv < NENV; i++) {
        const char *e = peer_python_env(names[i]);
        int seen = !e;
        for (int j = 0; j < nenv && !seen; j++) seen = strcmp(py_envs[j], e) == 0;
        if (!seen) py_envs[nenv++] = e;
    }
    assert_true(nenv >= 3); /* MHA_PEERS_PYTHON, _ZENTORCH, _GGML */
    for (int i = 0; i < nenv; i++) {
        const char *old = getenv(py_envs[i]);
        saved[i] = old ? strdup(old) : NULL;
        setenv(py_envs[i], "/nonexistent/python3", 1);
    }
    const int rc = run_bench("sweep", "--kernels", "flash.scalar", "--peers", "all", "--seq", "33",
                             "--heads", "2", "--head-dim", "64", "--causal", "0", "--threads", "1",
                             "--min-time", "0.001", "--passes", "1", "--out", out, NULL);
    for (int i = 0; i < nenv; i++) {
        if (saved[i])
            setenv(py_envs[i], saved[i], 1);
        else
            unsetenv(py_envs[i]);
        free(saved[i]);
    }
    if (rc != 0) fail_msg("sweep --peers all: exit %d: %s", rc, g_err);
    assert_non_null(strstr(g_out, "peer torch: not available here"));
    tu_slurp(out, buf, sizeof buf);
    const char *tv = json_str_value(buf, "mha_peer_torch");
    assert_non_null(tv);
    assert_int_equal(strncmp(tv, "unavailable: ", 13), 0);
    assert_null(strstr(buf, "peer.torch/"));
    /* zentorch's and ggml's interpreters are their own variables': unavailable too */
    assert_non_null(strstr(g_out, "peer zentorch: not available here"));
    assert_null(strstr(buf, "peer.zentorch/"));
    assert_non_null(strstr(g_out, "peer ggml: not available here"));
    assert_null(strstr(buf, "peer.ggml/"));
    static const char *const c_peers[] = {"onednn", "libxsmm"};
    for (size_t i = 0; i < sizeof c_peers / sizeof c_peers[0]; i++) {
        snprintf(key, sizeof key, "mha_peer_%s", c_peers[i]);
        const char *v = json_str_value(buf, key);
        assert_non_null(v); /* available or not, the context says */
        snprintf(row, sizeof row, "peer.%s/B:1/H:2/KV:2/Nq:33/Nkv:33/d:64/causal:0/threads:1",
                 c_peers[i]);
        if (strncmp(v, "unavailable", 11) == 0) {
            assert_null(strstr(buf, row));
            continue;
        }
        const char *r = strstr(buf, row);
        if (!r) fail_msg("%s ran here but wrote no row %s", c_peers[i], row);
        assert_non_null(strstr(r, "\"max_err\""));
        char check[300];
        snprintf(check, sizeof check, "check %s: ", row);
        assert_non_null(strstr(g_out, check));
    }
}

/* forward --dtype bf16|fp16: float32 files rounded on load, the output in
 * the layer dtype (or --out-dtype), close to torch's fp32 output; a kernel
 * that does not take the dtype and a typed file without --dtype are exit 2. */
static void test_forward_dtype(void **state) {
    (void)state;
    NEED_BENCH();
    NEED_DATA();
    char x[1024], wdir[1024], out[512], want[1024], xb[512];
    data_path(x, sizeof x, "self", "query"); /* [2, 5, 16], 4 heads */
    data_path(want, sizeof want, "self", "out");
    snprintf(wdir, sizeof wdir, "%s/self", g_data);
    tmp_path(out, sizeof out, "never.npy");
    expect_error(run_bench("forward", "--kernel", "naive", "--query", x, "--heads", "4",
                           "--weights", wdir, "--out", out, "--dtype", "bf16", NULL),
                 "naive", "bf16", 1);
    const int64_t xs[3] = {2, 5, 16};
    write_typed("fxb.npy", MHA_BF16, xs, 3);
    tmp_path(xb, sizeof xb, "fxb.npy");
    expect_error(run_bench("forward", "--kernel", "auto", "--query", xb, "--heads", "4",
                           "--weights", wdir, "--out", out, NULL),
                 "holds bf16", "--dtype bf16", 1);

    npy_array w;
    load_npy(want, &w);
    double mag = 0;
    for (size_t i = 0; i < w.count; i++) mag = fmax(mag, fabs(w.data[i]));
    const mha_dtype ts[2] = {MHA_BF16, MHA_F16};
    for (int ti = 0; ti < 2; ti++) {
        const mha_problem p = {.batch = 2,
                               .heads = 4,
                               .kv_heads = 4,
                               .seq_q = 5,
                               .seq_kv = 5,
                               .head_dim = 4,
                               .causal = 0,
                               .scale = 0.0f,
                               .dtype = ts[ti],
                               .kv_dtype = MHA_F32};
        mha_selection sel;
        if (mha_select(&p, NULL, &sel) != MHA_OK) {
            print_message("no kernel here takes %s\n", mha_dtype_name(ts[ti]));
            continue;
        }
        char got[512], err[512];
        tmp_path(got, sizeof got, "fwd-typed.npy");
        for (int od = 0; od < 2; od++) {
            const int rc =
                run_bench("forward", "--kernel", "auto", "--query", x, "--heads", "4", "--weights",
                          wdir, "--out", got, "--dtype", mha_dtype_name(ts[ti]),
                          od ? "--out-dtype" : NULL, "fp32", NULL);
            if (rc != 0)
                fail_msg("forward --dtype %s: exit %d: %s", mha_dtype_name(ts[ti]), rc, g_err);
            assert_non_null(strstr(g_out, mha_dtype_name(ts[ti])));
            npy_array a;
            if (npy_read_typed(got, MHA_DTYPE_BIT(MHA_F32) | MHA_DTYPE_BIT(ts[ti]), &a, err,
                               sizeof err) != MHA_OK)
                fail_msg("%s", err);
            assert_int_equal(a.dtype, od ? MHA_F32 : ts[ti]);
            assert_int_equal(a.count, w.count);
            double e = 0;
            for (size_t i = 0; i < a.count; i++) {
                float v;
                mha_convert_to_f32(a.dtype, (const char *)a.raw + i * mha_dtype_size(a.dtype), &v,
                                   1);
                e = fmax(e, fabs(v - w.data[i]));
            }
            /* rounded inputs and weights: a few bf16 ulps of the output */
            if (!(e <= 0.03 * mag))
                fail_msg("forward --dtype %s: max |err| %.3g vs torch > 0.03 * %.3g",
                         mha_dtype_name(ts[ti]), e, mag);
            npy_free(&a);
        }
    }
    npy_free(&w);
}

/* verify's dtype filters. */
static void test_verify_dtypes(void **state) {
    (void)state;
    NEED_BENCH();
    expect_usage(run_bench("verify", "--quick", "--dtype", "int8", NULL), "int8");
    expect_usage(run_bench("verify", "--quick", "--kv-dtype", "bf16,,fp16", NULL), "position 2");
    assert_int_equal(run_bench("verify", "--quick", "--case", "0", "--threads", "1", "--kernels",
                               "naive", "--dtype", "fp32", "--kv-dtype", "fp32", NULL),
                     0);
    assert_non_null(strstr(g_out, "dtype kv"));
    assert_non_null(strstr(g_out, "1 passed, 0 failed"));
    /* naive takes fp32 only: asking for bf16 runs nothing and says so */
    assert_int_equal(run_bench("verify", "--quick", "--case", "0", "--kernels", "naive", "--dtype",
                               "bf16", NULL),
                     0);
    assert_non_null(strstr(g_out, "no selected kernel takes dtype bf16"));
    assert_non_null(strstr(g_out, "0 passed, 0 failed, 0 skipped"));
}

/* Copies the 'self' case's weights into g_tmp/<dir>, replacing w_k by a wrong shape. */
static void make_bad_weights(const char *dir) {
    char d[512], src[1024], dst[1024], err[512];
    tmp_path(d, sizeof d, dir);
    assert_int_equal(mkdir(d, 0755), 0);
    const char *names[] = {"w_q", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        npy_array a;
        data_path(src, sizeof src, "self", names[i]);
        load_npy(src, &a);
        snprintf(dst, sizeof dst, "%s/%s.npy", d, names[i]);
        mha_status st = npy_write(dst, a.data, a.shape, a.ndim, err, sizeof err);
        npy_free(&a);
        if (st != MHA_OK) fail_msg("%s", err);
    }
    const int64_t bad[2] = {16, 12};
    char name[64];
    snprintf(name, sizeof name, "%s/w_k.npy", dir);
    write_f4(name, bad, 2);
}

static void test_forward_bad_inputs(void **state) {
    (void)state;
    NEED_DATA();
    char x[1024], xk[1024], wdir[1024], out[512], bad[512];
    data_path(x, sizeof x, "self", "query");  /* [2, 5, 16], 4 heads */
    data_path(xk, sizeof xk, "cross", "key"); /* [1, 7, 12] */
    snprintf(wdir, sizeof wdir, "%s/self", g_data);
    tmp_path(out, sizeof out, "never.npy");

    print_message("wrong weight shape\n");
    make_bad_weights("badw");
    tmp_path(bad, sizeof bad, "badw");
    int rc = run_bench("forward", "--kernel", "naive", "--query", x, "--heads", "4", "--weights",
                       bad, "--out", out, NULL);
    expect_error(rc, "w_k", "[16, 12]", 1);

    print_message("d_model not divisible by heads\n");
    rc = run_bench("forward", "--kernel", "naive", "--query", x, "--heads", "5", "--weights", wdir,
                   "--out", out, NULL);
    expect_error(rc, "divisible", "5", 1);

    print_message("weights for other heads/kv-heads\n");
    rc = run_bench("forward", "--kernel", "naive", "--query", x, "--heads", "4", "--kv-heads", "2",
                   "--weights", wdir, "--out", out, NULL);
    expect_error(rc, "w_k", "[8, 16]", 1);

    print_message("kv-heads not dividing heads\n");
    rc = run_bench("forward", "--kernel", "naive", "--query", x, "--heads", "4", "--kv-heads", "3",
                   "--weights", wdir, "--out", out, NULL);
    expect_error(rc, "divide", NULL, 1);

    print_message("key/value with the wrong batch and d_model\n");
    rc = run_bench("forward", "--kernel", "naive", "--query", x, "--key", xk, "--value", xk,
                   "--heads", "4", "--weights", wdir, "--out", out, NULL);
    expect_error(rc, "key", "[1, 7, 12]", 1);

    print_message("--key without --value\n");
    rc = run_bench("forward", "--kernel", "naive", "--query", x, "--key", x, "--heads", "4",
                   "--weights", wdir, "--out", out, NULL);
    expect_error(rc, "--value", NULL, 0);

    print_message("rank-4 query\n");
    data_path(bad, sizeof bad, "attn_self", "q");
    rc = run_bench("forward", "--kernel", "naive", "--query", bad, "--heads", "2", "--weights",
                   wdir, "--out", out, NULL);
    expect_error(rc, "rank", NULL, 1);

    print_message("missing weights directory\n");
    tmp_path(bad, sizeof bad, "no_such_weights");
    rc = run_bench("forward", "--kernel", "naive", "--query", x, "--heads", "4", "--weights", bad,
                   "--out", out, NULL);
    expect_error(rc, "no_such_weights", NULL, 1);

    print_message("unknown kernel\n");
    rc = run_bench("forward", "--kernel", "no_such_kernel", "--query", x, "--heads", "4",
                   "--weights", wdir, "--out", out, NULL);
    expect_error(rc, "no_such_kernel", NULL, 0);

    print_message("unknown option\n");
    rc = run_bench("forward", "--kernel", "naive", "--query", x, "--heads", "4", "--weights", wdir,
                   "--out", out, "--frobnicate", NULL);
    expect_error(rc, "--frobnicate", NULL, 0);

    print_message("missing --heads\n");
    rc = run_bench("forward", "--kernel", "naive", "--query", x, "--weights", wdir, "--out", out,
                   NULL);
    expect_error(rc, "--heads", NULL, 0);
}

/* An optional bias is absent only when DIR has no entry of its name: one
 * that is there but cannot be read (a dangling symlink, a link loop, a
 * folder, a FIFO) is exit 2 naming it, never a run without that bias. A
 * weights folder of links to tests/data/self, whose biases are all there. */
static void test_forward_bias_unreadable(void **state) {
    (void)state;
    NEED_DATA();
    char x[1024], wdir[512], src[1024], dst[1024], out[512];
    data_path(x, sizeof x, "self", "query"); /* [2, 5, 16], 4 heads */
    tmp_path(wdir, sizeof wdir, "linkw");
    assert_int_equal(mkdir(wdir, 0755), 0);
    static const char *const names[] = {"w_q", "w_k", "w_v", "w_o", "b_k", "b_v", "b_o"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        data_path(src, sizeof src, "self", names[i]);
        snprintf(dst, sizeof dst, "%s/%s.npy", wdir, names[i]);
        assert_int_equal(symlink(src, dst), 0);
    }
    tmp_path(out, sizeof out, "bias_out.npy");
    snprintf(dst, sizeof dst, "%s/b_q.npy", wdir);
    for (int c = 0; c < 4; c++) {
        static const char *const kinds[] = {"dangling symlink", "symlink loop", "folder", "FIFO"};
        static const char *const words[] = {"leads nowhere", "b_q.npy", "directory", "FIFO"};
        print_message("b_q.npy as a %s\n", kinds[c]);
        if (c == 0) assert_int_equal(symlink("no-such-b_q.npy", dst), 0);
        if (c == 1) assert_int_equal(symlink("b_q.npy", dst), 0);
        if (c == 2) assert_int_equal(mkdir(dst, 0755), 0);
        if (c == 3) assert_int_equal(mkfifo(dst, 0644), 0);
        const int rc = run_bench("forward", "--kernel", "naive", "--query", x, "--heads", "4",
                                 "--weights", wdir, "--out", out, NULL);
        expect_error(rc, dst, words[c], 1);
        assert_int_equal(access(out, F_OK), -1);
        if (c == 2)
            assert_int_equal(rmdir(dst), 0);
        else
            assert_int_equal(unlink(dst), 0);
    }
    /* no entry at all: absent, the run goes on without that bias */
    const int rc = run_bench("forward", "--kernel", "naive", "--query", x, "--heads", "4",
                             "--weights", wdir, "--out", out, NULL);
    if (rc != 0) fail_msg("forward without b_q.npy: exit %d: %s", rc, g_err);
    assert_int_equal(access(out, F_OK), 0);
}

/* ---- sweep outputs -------------------------------------------------------------------- */

static const char *const TINY[] = {"--kernels",  "naive",      "--seq",  "16",        "--heads",
                                   "1",          "--head-dim", "16",     "--threads", "1",
                                   "--min-time", "0.01",       "--bind", "none",      NULL};

/* Runs `cd dir && [env] timeout 60 mhabench sweep TINY extra` through sh, so a
 * default run file lands in dir/results/runs and a hang ends as exit 124. */
static int sweep_in(const char *dir, const char *env, const char *extra) {
    char cmd[4096];
    size_t o = (size_t)snprintf(cmd, sizeof cmd, "cd '%s' && %s timeout 60 '%s' sweep", dir,
                                env ? env : "", g_bench);
    for (int i = 0; TINY[i]; i++) o += (size_t)snprintf(cmd + o, sizeof cmd - o, " %s", TINY[i]);
    snprintf(cmd + o, sizeof cmd - o, " %s", extra ? extra : "");
    const char *args[] = {"-c", cmd, NULL};
    const int rc = tu_run("/bin/sh", args, g_tmp, g_out, sizeof g_out, g_err, sizeof g_err);
    print_message("  sweep %s -> exit %d: %.300s\n", extra ? extra : "", rc, g_err);
    return rc;
}

static void fresh_dir(char *out, size_t len, const char *name) {
    tmp_path(out, len, name);
    assert_int_equal(mkdir(out, 0755), 0);
}

static int runs_in(const char *dir) {
    char p[1024];
    snprintf(p, sizeof p, "%s/results/runs", dir);
    const int n = tu_count_entries(p);
    return n < 0 ? 0 : n;
}

/* A bad --out fails before anything is measured, and what is there is left. */
static void test_sweep_bad_out(void **state) {
    (void)state;
    NEED_BENCH();
    char d[512], p[1024], extra[1200];
    fresh_dir(d, sizeof d, "sweep-bad-out");
    assert_int_equal(sweep_in(d, NULL, "--out ''"), 2);
    assert_non_null(strstr(g_err, "empty"));
    assert_null(strstr(g_out, "measuring"));

    snprintf(p, sizeof p, "%s/fifo.json", d);
    assert_int_equal(mkfifo(p, 0644), 0);
    snprintf(extra, sizeof extra, "--out '%s'", p);
    assert_int_equal(sweep_in(d, NULL, extra), 2);
    assert_non_null(strstr(g_err, "FIFO"));
    assert_non_null(strstr(g_err, p));
    assert_null(strstr(g_out, "measuring"));
    struct stat sb;
    assert_int_equal(lstat(p, &sb), 0);
    assert_true(S_ISFIFO(sb.st_mode));

    snprintf(extra, sizeof extra, "--out '%s'", d);
    assert_int_equal(sweep_in(d, NULL, extra), 2);
    assert_non_null(strstr(g_err, "directory"));

    /* a /dev/null of our own (root only) */
    snprintf(p, sizeof p, "%s/null", d);
    if (mknod(p, S_IFCHR | 0666, makedev(1, 3)) == 0) {
        snprintf(extra, sizeof extra, "--out '%s'", p);
        assert_int_equal(sweep_in(d, NULL, extra), 2);
        assert_non_null(strstr(g_err, "character device"));
        assert_int_equal(lstat(p, &sb), 0);
        assert_true(S_ISCHR(sb.st_mode));
    }
    assert_int_equal(runs_in(d), 0);
}

/* Flags Google Benchmark cannot honour are errors with nothing committed or
 * left behind (the file is an unnamed inode until the end). */
static void test_sweep_gbench_errors(void **state) {
    (void)state;
    NEED_BENCH();
    char d[512];
    fresh_dir(d, sizeof d, "sweep-gb");
    assert_int_equal(sweep_in(d, NULL, "-- --benchmark_filter=NOMATCH"), 2);
    assert_non_null(strstr(g_err, "NOMATCH"));
    assert_int_equal(runs_in(d), 0);
    assert_int_equal(sweep_in(d, NULL, "-- --benchmark_repetitions=-1"), 2);
    assert_non_null(strstr(g_err, "repetitions"));
    assert_int_equal(runs_in(d), 0);
    assert_int_equal(sweep_in(d, NULL, "-- --benchmark_repetitions=0"), 2);
    assert_int_equal(runs_in(d), 0);
}

/* Default run files: two sweeps at once both keep theirs (a -2 name when they
 * share a second), each printed name exists, and the JSON is valid: the _cv
 * rows' NaN became null. */
static void test_sweep_run_files(void **state) {
    (void)state;
    NEED_BENCH();
    char d[512], cmd[4096], p[1024];
    fresh_dir(d, sizeof d, "sweep-runs");
    char one[1024];
    snprintf(one, sizeof one, "timeout 60 '%s' sweep", g_bench);
    size_t o = (size_t)snprintf(cmd, sizeof cmd, "cd '%s' && (%s", d, one);
    for (int i = 0; TINY[i]; i++) o += (size_t)snprintf(cmd + o, sizeof cmd - o, " %s", TINY[i]);
    /* --preset full: grouped repetitions, so the file has the _cv rows whose NaN
     * must be written as null */
    o += (size_t)snprintf(cmd + o, sizeof cmd - o,
                          " --preset full --repetitions 2 --passes 1 >out1 & %s", one);
    for (int i = 0; TINY[i]; i++) o += (size_t)snprintf(cmd + o, sizeof cmd - o, " %s", TINY[i]);
    snprintf(cmd + o, sizeof cmd - o, " --preset full --repetitions 2 --passes 1 >out2; wait)");
    const char *args[] = {"-c", cmd, NULL};
    assert_int_equal(tu_run("/bin/sh", args, g_tmp, g_out, sizeof g_out, g_err, sizeof g_err), 0);
    assert_int_equal(runs_in(d), 2);
    int printed = 0;
    static char text[1 << 16];
    for (int k = 1; k <= 2; k++) {
        snprintf(p, sizeof p, "%s/out%d", d, k);
        tu_slurp(p, text, sizeof text);
        const char *r = strstr(text, "results: ");
        assert_non_null(r);
        char name[512];
        assert_int_equal(sscanf(r + 9, "%511s", name), 1);
        snprintf(p, sizeof p, "%s/%s", d, name);
        print_message("  %s\n", name);
        assert_int_equal(access(p, F_OK), 0);
        tu_slurp(p, text, sizeof text);
        assert_non_null(strstr(text, "null")); /* the _cv rows' NaN */
        assert_null(strstr(text, "NaN"));
        assert_null(strstr(text, "Infinity"));
        printed++;
    }
    assert_int_equal(printed, 2);
}

/* --out through a symlink: the link stays, the file it names is replaced. */
static void test_sweep_out_symlink(void **state) {
    (void)state;
    NEED_BENCH();
    char d[512], t[1024], l[1024], extra[1200];
    fresh_dir(d, sizeof d, "sweep-link");
    snprintf(t, sizeof t, "%s/target.json", d);
    snprintf(l, sizeof l, "%s/link.json", d);
    FILE *f = fopen(t, "w");
    assert_non_null(f);
    fputs("old", f);
    fclose(f);
    assert_int_equal(symlink("target.json", l), 0);
    snprintf(extra, sizeof extra, "--out '%s'", l);
    assert_int_equal(sweep_in(d, NULL, extra), 0);
    struct stat sb;
    assert_int_equal(lstat(l, &sb), 0);
    assert_true(S_ISLNK(sb.st_mode));
    char text[256];
    tu_slurp(t, text, sizeof text);
    assert_non_null(strstr(text, "\"context\""));
    assert_int_equal(tu_count_entries(d), 2);
}

/* attend's --out: a FIFO is refused before computing and left as it was; a
 * FIFO as --q is refused at once instead of blocking in open. */
static void test_attend_special_files(void **state) {
    (void)state;
    NEED_BENCH();
    const int64_t shp[4] = {1, 1, 4, 8};
    write_f4("sq.npy", shp, 4);
    char q[512], fifo[512];
    tmp_path(q, sizeof q, "sq.npy");
    tmp_path(fifo, sizeof fifo, "attend.fifo");
    assert_int_equal(mkfifo(fifo, 0644), 0);
    int rc =
        run_bench("attend", "--kernel", "naive", "--q", q, "--k", q, "--v", q, "--out", fifo, NULL);
    print_message("  exit %d: %s", rc, g_err);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(g_err, "FIFO"));
    struct stat sb;
    assert_int_equal(lstat(fifo, &sb), 0);
    assert_true(S_ISFIFO(sb.st_mode));
    char cmd[4096], out[512];
    tmp_path(out, sizeof out, "never.npy");
    snprintf(cmd, sizeof cmd,
             "timeout 20 '%s' attend --kernel naive --q '%s' --k '%s' --v '%s' --out '%s'", g_bench,
             fifo, q, q, out);
    const char *args[] = {"-c", cmd, NULL};
    rc = tu_run("/bin/sh", args, g_tmp, g_out, sizeof g_out, g_err, sizeof g_err);
    print_message("  exit %d: %s", rc, g_err);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(g_err, "FIFO"));
    assert_int_equal(access(out, F_OK), -1);
}

/* attend --out over a private (0600) file: the result replaces it and stays
 * 0600, not the umask's 0644 (README "Files mhabench reads and writes"). */
static void test_out_keeps_mode(void **state) {
    (void)state;
    NEED_BENCH();
    const int64_t shp[4] = {1, 1, 4, 8};
    write_f4("mq.npy", shp, 4);
    char q[512], out[512];
    tmp_path(q, sizeof q, "mq.npy");
    tmp_path(out, sizeof out, "private.npy");
    FILE *f = fopen(out, "w");
    assert_non_null(f);
    fputs("old", f);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(chmod(out, 0600), 0);
    const int rc =
        run_bench("attend", "--kernel", "naive", "--q", q, "--k", q, "--v", q, "--out", out, NULL);
    if (rc != 0) fail_msg("attend: exit %d: %s", rc, g_err);
    char head[16];
    tu_slurp(out, head, sizeof head);
    assert_int_equal(memcmp(head, "\x93NUMPY", 6), 0); /* replaced */
    struct stat sb;
    assert_int_equal(stat(out, &sb), 0);
    print_message("  mode after --out: %04o\n", (unsigned)(sb.st_mode & 07777));
    assert_int_equal(sb.st_mode & 07777, 0600);
}

static void sleep_ms(int ms) {
    const struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* compare --ab stopped by SIGINT (Ctrl-C), SIGTERM or SIGHUP while a sweep
 * runs: the sweep is stopped, the scratch folder $TMPDIR/mhabench-ab.*
 * (with its sweep.log) removed, and compare dies from that signal (what a
 * shell reports as 128 + N, 130 for SIGINT). The fake sweep writes its pid
 * and sleeps; the signal goes to compare alone, as kill(1) sends it. */
static void test_ab_signal(void **state) {
    (void)state;
    NEED_BENCH();
    char fake[512], pidf[512], log[512], tmpdir[512];
    tmp_path(fake, sizeof fake, "sleeper.sh");
    tmp_path(pidf, sizeof pidf, "sleeper.pid");
    tmp_path(log, sizeof log, "ab-signal.log");
    FILE *f = fopen(fake, "w");
    assert_non_null(f);
    fprintf(f, "#!/bin/sh\necho $$ > '%s.tmp' && mv '%s.tmp' '%s'\nexec sleep 60\n", pidf, pidf,
            pidf);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(chmod(fake, 0755), 0);
    const char *old_tmp = getenv("TMPDIR");
    char *saved = old_tmp ? strdup(old_tmp) : NULL;
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) {
        const int sig = sigs[i];
        /* a signal this process ignores (SIGHUP under nohup) stays ignored
         * in the child, as it should: there is nothing to test then */
        struct sigaction cur;
        if (sigaction(sig, NULL, &cur) == 0 && cur.sa_handler == SIG_IGN) {
            print_message("  %s is ignored by this test process (nohup?): not tested\n",
                          strsignal(sig));
            continue;
        }
        snprintf(tmpdir, sizeof tmpdir, "%s/abtmp-%d", g_tmp, sig);
        assert_int_equal(mkdir(tmpdir, 0755), 0);
        unlink(pidf);
        setenv("TMPDIR", tmpdir, 1);
        char *argv[] = {(char *)g_bench, "compare", "--ab", fake, fake, "--rounds", "2", NULL};
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        posix_spawn_file_actions_adddup2(&fa, 1, 2);
        pid_t pid;
        assert_int_equal(posix_spawn(&pid, g_bench, &fa, NULL, argv, environ), 0);
        posix_spawn_file_actions_destroy(&fa);
        if (saved)
            setenv("TMPDIR", saved, 1);
        else
            unsetenv("TMPDIR");
        /* the sweep runs: the folder and its log exist */
        int waited = 0;
        while (access(pidf, F_OK) != 0 && waited < 20000) {
            sleep_ms(10);
            waited += 10;
        }
        char text[64];
        tu_slurp(pidf, text, sizeof text);
        const pid_t sweep = (pid_t)atoi(text);
        assert_true(sweep > 0);
        assert_int_equal(tu_count_entries(tmpdir), 1);
        assert_int_equal(kill(pid, sig), 0);
        int status = 0;
        pid_t r = 0;
        /* 60 s: under the CI's parallel tests (the heavy verify grid on both
         * cores) a 20 s wait once ran out */
        for (waited = 0; (r = waitpid(pid, &status, WNOHANG)) == 0 && waited < 60000; waited += 10)
            sleep_ms(10);
        if (r == 0) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
        }
        const int sweep_alive = kill(sweep, 0) == 0;
        if (sweep_alive) kill(sweep, SIGKILL);
        tu_slurp(log, g_err, sizeof g_err);
        print_message("  %s: %s, %d entries left in TMPDIR, sweep %s; stderr: %s", strsignal(sig),
                      r == 0                ? "did not end"
                      : WIFSIGNALED(status) ? strsignal(WTERMSIG(status))
                                            : "exited",
                      tu_count_entries(tmpdir), sweep_alive ? "still running" : "stopped", g_err);
        if (r != pid)
            fail_msg("%s: compare --ab did not end within 60 s of the signal (waitpid %d); "
                     "stderr: %s",
                     strsignal(sig), (int)r, g_err);
        assert_true(WIFSIGNALED(status)); /* a shell then reports 128 + N */
        assert_int_equal(WTERMSIG(status), sig);
        assert_int_equal(tu_count_entries(tmpdir), 0);
        assert_false(sweep_alive);
        assert_non_null(strstr(g_err, "stopped by signal"));
    }
    free(saved);
}

/* tune checks its table path before measuring: a FIFO or folder is refused
 * at once and left as it was (the log is not created either). */
/* Tables live where they are read: without --out, tune writes where
 * mha_select reads first (here MHA_TUNING_DIR), says where and why, never
 * writes over a table that is there (a new one beside it, which recommend
 * then reads), and replaces it only with --force; it notes when mha_select
 * reads another file. recommend names the table it read and why that one
 * (the folder, the file), or says there is none and what decided instead. */
static void test_tune_keeps_tables(void **state) {
    (void)state;
    NEED_BENCH();
    char d[512], before[4096], after[4096], key[96];
    fresh_dir(d, sizeof d, "tune-keep");
    setenv("MHA_TUNING_DIR", d, 1);
    unsetenv("MHA_TUNING");
    mha_cpu_key(key, sizeof key);
    char plain[1024], line[2200];
    snprintf(plain, sizeof plain, "%s/%s.json", d, key);
    /* no table yet: recommend says so, where it looked, and what decided */
    int rc = run_bench("recommend", "--seq", "1024", "--heads", "8", "--head-dim", "64", NULL);
    assert_int_equal(rc, 0);
    snprintf(line, sizeof line, "\ntable     none for this CPU: no %s,", plain);
    if (!strstr(g_out, line)) fail_msg("recommend without a table: %s", g_out);
    snprintf(line, sizeof line, "\nfolder    %s: MHA_TUNING_DIR names it\n", d);
    if (!strstr(g_out, line)) fail_msg("recommend does not say why that folder: %s", g_out);
    assert_non_null(strstr(g_out, "\nfile      none: no "));
    assert_non_null(strstr(g_out, "\ninstead   the cache model: "));
    const char *tune[] = {"tune",    "--budget", "1",       "--threads", "1",
                          "--dtype", "fp32",     "--shard", "3/16",      NULL};
    rc = run_bench(tune[0], tune[1], tune[2], tune[3], tune[4], tune[5], tune[6], tune[7], tune[8],
                   NULL);
    if (rc != 0) fail_msg("tune: exit %d: %s", rc, g_err);
    snprintf(line, sizeof line,
             "written where mha_select reads first (%s: MHA_TUNING_DIR names it)", d);
    if (!strstr(g_out, line)) fail_msg("tune does not say where and why: %s", g_out);
    assert_null(strstr(g_out, "tune: note: mha_select reads"));
    rc = run_bench("recommend", "--seq", "1024", "--heads", "8", "--head-dim", "64", NULL);
    assert_int_equal(rc, 0);
    snprintf(line, sizeof line, "\ntable     %s\n", plain);
    if (!strstr(g_out, line)) fail_msg("recommend does not name the table: %s", g_out);
    snprintf(line, sizeof line, "\nfile      this CPU's table %s.json (no newer one", key);
    if (!strstr(g_out, line)) fail_msg("recommend does not say why that file: %s", g_out);
    tu_slurp(plain, before, sizeof before);
    assert_true(before[0] == '{');
    sleep(1); /* a new UTC second: the next table's name */
    rc = run_bench(tune[0], tune[1], tune[2], tune[3], tune[4], tune[5], tune[6], tune[7], tune[8],
                   NULL);
    if (rc != 0) fail_msg("tune: exit %d: %s", rc, g_err);
    assert_non_null(strstr(g_out, "kept the older"));
    tu_slurp(plain, after, sizeof after);
    assert_string_equal(before, after);       /* the first table untouched */
    assert_int_equal(tu_count_entries(d), 3); /* two tables and the log folder */
    rc = run_bench("recommend", "--seq", "1024", "--heads", "8", "--head-dim", "64", NULL);
    assert_int_equal(rc, 0);
    char stamped[1100];
    snprintf(stamped, sizeof stamped, "\ntable     %s/%s-2", d, key); /* <key>-2026... */
    if (!strstr(g_out, stamped)) fail_msg("recommend did not read the newer table: %s", g_out);
    assert_non_null(strstr(g_out, "\nfile      the newest of this CPU's 2 tables there"));
    /* MHA_TUNING elsewhere: tune says the library reads that file, not its table */
    snprintf(line, sizeof line, "%s/other.json", d);
    setenv("MHA_TUNING", line, 1);
    rc = run_bench(tune[0], tune[1], tune[2], tune[3], tune[4], tune[5], tune[6], tune[7], tune[8],
                   "--out", line, NULL);
    unsetenv("MHA_TUNING");
    if (rc != 0) fail_msg("tune --out: exit %d: %s", rc, g_err);
    assert_null(strstr(g_out, "tune: note: mha_select reads"));
    snprintf(line, sizeof line, "%s/elsewhere.json", d);
    rc = run_bench(tune[0], tune[1], tune[2], tune[3], tune[4], tune[5], tune[6], tune[7], tune[8],
                   "--out", line, NULL);
    if (rc != 0) fail_msg("tune --out: exit %d: %s", rc, g_err);
    assert_non_null(strstr(g_out, "tune: note: mha_select reads "));
    assert_non_null(strstr(g_out, "makes it read this one"));
    assert_int_equal(unlink(line), 0);
    snprintf(line, sizeof line, "%s/other.json", d);
    assert_int_equal(unlink(line), 0);
    rc = run_bench(tune[0], tune[1], tune[2], tune[3], tune[4], tune[5], tune[6], tune[7], tune[8],
                   "--force", NULL);
    if (rc != 0) fail_msg("tune --force: exit %d: %s", rc, g_err);
    assert_non_null(strstr(g_out, "--force: replaced"));
    assert_int_equal(tu_count_entries(d), 3);
    unsetenv("MHA_TUNING_DIR");
}

static void test_tune_bad_out(void **state) {
    (void)state;
    NEED_BENCH();
    char d[512], p[1024];
    fresh_dir(d, sizeof d, "tune-bad-out");
    snprintf(p, sizeof p, "%s/fifo.json", d);
    assert_int_equal(mkfifo(p, 0644), 0);
    int rc = run_bench("tune", "--budget", "1", "--out", p, NULL);
    print_message("  exit %d: %s", rc, g_err);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(g_err, "FIFO"));
    rc = run_bench("tune", "--budget", "1", "--out", d, NULL);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(g_err, "directory"));
    struct stat sb;
    assert_int_equal(lstat(p, &sb), 0);
    assert_true(S_ISFIFO(sb.st_mode));
    assert_int_equal(tu_count_entries(d), 1);
}

/* The numeric field key of a JSON object (0 when absent). */
static double json_num(json_object *o, const char *key) {
    json_object *v;
    return json_object_object_get_ex(o, key, &v) ? json_object_get_double(v) : 0;
}

/* Every kernel a tune log (the JSON Lines files in dir) names: none may have
 * a twin of its dtypes at a higher ISA that runs here (such a kernel never
 * wins, and under avx512bf16 the scalar and AVX2 fp32 twins once took most of
 * the budget). Returns the lines read. */
static int check_log_kernels(const char *dir) {
    DIR *dp = opendir(dir);
    assert_non_null(dp);
    int lines = 0;
    static char buf[1 << 20];
    for (struct dirent *de; (de = readdir(dp));) {
        if (!strstr(de->d_name, ".jsonl")) continue;
        char path[1400];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        tu_slurp(path, buf, sizeof buf);
        for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
            json_object *o = json_tokener_parse(line), *kn;
            assert_non_null(o);
            assert_true(json_object_object_get_ex(o, "kernel", &kn));
            const mha_kernel *k = mha_kernel_find(json_object_get_string(kn));
            assert_non_null(k);
            for (int isa = (int)mha_kernel_isa(k) + 1; isa < MHA_ISA_COUNT; isa++) {
                const mha_kernel *t = mha_kernel_twin(k, (mha_isa)isa);
                if (t && mha_kernel_supported(t) == MHA_OK)
                    fail_msg("tune timed %s although %s runs here", mha_kernel_name(k),
                             mha_kernel_name(t));
            }
            json_object_put(o);
            lines++;
        }
    }
    closedir(dp);
    return lines;
}

/* tune on single cheap classes (--threads 1 --shard): the table records each
 * class's dtype and its time against its share; the run ends near its budget
 * (checked natively, with a second of slack for a class of millisecond
 * calls); a spent budget starts no further class; bf16 classes are tuned
 * exactly when a kernel with block knobs that takes bf16 runs here, and
 * mha_select then takes a bf16 entry for a bf16 problem only. */
static void test_tune_budget_dtypes(void **state) {
    (void)state;
    NEED_BENCH();
    char d[512], out[1024], logdir[1100];
    fresh_dir(d, sizeof d, "tune-budget");
    snprintf(out, sizeof out, "%s/t32.json", d);
    snprintf(logdir, sizeof logdir, "%s/log", d);
    expect_usage(run_bench("tune", "--dtype", "int8", "--out", out, NULL), "int8");

    /* one fp32 class: the 3rd of the 16 t1 fp32 classes, d64-kv1024-t1 */
    int rc = run_bench("tune", "--budget", "1", "--threads", "1", "--dtype", "fp32", "--shard",
                       "3/16", "--out", out, NULL);
    print_message("%s", g_out);
    if (rc != 0) fail_msg("tune: exit %d: %s", rc, g_err);
    assert_non_null(strstr(g_out, "tune: 1 classes in "));
    mha_table t;
    char why[256];
    assert_int_equal(mha_table_load(out, &t, why, sizeof why), MHA_OK);
    assert_int_equal(t.count, 1);
    assert_string_equal(t.entries[0].cls, "d64-kv1024-t1");
    assert_int_equal(t.entries[0].dtype, MHA_F32);
    mha_table_free(&t);
    json_object *root = json_object_from_file(out), *cls, *ts;
    assert_non_null(root);
    const double elapsed = json_num(root, "elapsed_s"), budget = json_num(root, "budget_s");
    print_message("elapsed %.2f s of a %.2f s budget\n", elapsed, budget);
    assert_true(budget == 1.0);
    if (!tu_quick()) assert_true(elapsed <= budget + 1.0);
    assert_true(json_object_object_get_ex(root, "classes", &cls));
    json_object *e = json_object_array_get_idx(cls, 0);
    assert_true(json_object_object_get_ex(e, "time_s", &ts));
    assert_true(json_num(ts, "share") > 0 && json_num(ts, "share") <= budget);
    assert_true(json_num(ts, "search") >= 0 && json_num(ts, "final") >= 0);
    json_object_put(root);
    assert_true(check_log_kernels(logdir) > 0);

    /* a budget below every class's floor: nothing tuned, nothing written,
     * the message naming the budget and the least that holds a class */
    snprintf(out, sizeof out, "%s/spent.json", d);
    rc = run_bench("tune", "--budget", "0.001", "--threads", "1", "--dtype", "fp32", "--shard",
                   "1/8", "--out", out, NULL);
    expect_usage(rc, "--budget 0.001 s is below the smallest class floor ");
    assert_null(strstr(g_out, "classes in"));
    assert_int_equal(access(out, F_OK), -1);
    const char *fl = strstr(g_err, "class floor ");
    double least = 0;
    assert_int_equal(sscanf(fl + 12, "%lf", &least), 1);
    assert_true(least > 0.001 && least < 1.0);
    /* a spent budget: the first of two classes runs (its floor fits), the
     * second does not start */
    char least_s[32];
    snprintf(least_s, sizeof least_s, "%.2f", least);
    rc = run_bench("tune", "--budget", least_s, "--threads", "1", "--dtype", "fp32", "--shard",
                   "1/8", "--out", out, NULL);
    print_message("%s", g_out);
    if (rc != 0) fail_msg("tune: exit %d: %s", rc, g_err);
    assert_non_null(strstr(g_out, "1 of 2 classes not tuned"));
    assert_non_null(strstr(g_out, "tune: 1 classes in "));
    assert_int_equal(mha_table_load(out, &t, why, sizeof why), MHA_OK);
    assert_int_equal(t.count, 1);
    mha_table_free(&t);

    /* bf16: the first t1 bf16 class, d64-kv256-t1-bf16 */
    const mha_problem p16 = {.batch = 1,
                             .heads = 8,
                             .kv_heads = 8,
                             .seq_q = 128,
                             .seq_kv = 128,
                             .head_dim = 64,
                             .causal = 0,
                             .scale = 0.0f,
                             .dtype = MHA_BF16,
                             .kv_dtype = MHA_F32};
    int knobs16 = 0;
    for (int i = 0; i < mha_kernel_count(); i++) {
        const mha_kernel *k = mha_kernel_at(i);
        knobs16 |= mha_kernel_supported(k) == MHA_OK && mha_kernel_takes(k, &p16) == MHA_OK &&
                   (mha_kernel_traits(k) & MHA_KT_BLOCKS);
    }
    snprintf(out, sizeof out, "%s/t16.json", d);
    /* 1/16: one class whether the 4 t1 bf16 decode classes are in (two
     * decode kernels take bf16 here) or not */
    rc = run_bench("tune", "--budget", "1", "--threads", "1", "--dtype", "bf16", "--shard", "1/16",
                   "--out", out, NULL);
    print_message("%s", g_out);
    if (!knobs16) {
        print_message("no kernel with block knobs takes bf16 here: no bf16 class to tune\n");
        assert_non_null(strstr(g_out, "bf16 classes left out"));
        assert_int_equal(rc, 2);
        assert_non_null(strstr(g_err, "nothing to do"));
        return;
    }
    if (rc != 0) fail_msg("tune --dtype bf16: exit %d: %s", rc, g_err);
    assert_int_equal(mha_table_load(out, &t, why, sizeof why), MHA_OK);
    assert_int_equal(t.count, 1);
    assert_string_equal(t.entries[0].cls, "d64-kv256-t1-bf16");
    assert_int_equal(t.entries[0].dtype, MHA_BF16);
    assert_int_equal(t.entries[0].kv_dtype, MHA_BF16);
    const mha_kernel *w = mha_kernel_find(t.entries[0].winner.kernel);
    assert_non_null(w);
    assert_int_equal(mha_kernel_takes(w, &p16), MHA_OK);
    mha_table_free(&t);
    /* mha_select: the bf16 problem from the table, the fp32 one of the same
     * shape on the cache model (the table has no fp32 entry) */
    setenv("MHA_TUNING", out, 1);
    mha_selection sel;
    assert_int_equal(mha_select(&p16, &(mha_options){.threads = 1}, &sel), MHA_OK);
    print_message("bf16: %s (%s)\n", mha_kernel_name(sel.kernel), sel.reason);
    assert_int_equal(sel.source, MHA_CHOICE_TABLE);
    assert_ptr_equal(sel.kernel, w);
    mha_problem p32 = p16;
    p32.dtype = MHA_F32;
    assert_int_equal(mha_select(&p32, &(mha_options){.threads = 1}, &sel), MHA_OK);
    assert_int_equal(sel.source, MHA_CHOICE_DEFAULT);
    unsetenv("MHA_TUNING");
}

static void spin(mha_gbench_state *st, void *user) {
    (void)user;
    while (mha_gbench_keep_running(st)) {
    }
}

/* The shim turns Google Benchmark's exceptions into status 2 (it threw
 * std::length_error through C and aborted the sweep), and reports a filter
 * that matches nothing. */
static void test_gbench_shim_errors(void **state) {
    (void)state;
    mha_gbench_clear();
    mha_gbench_def d = {0};
    d.name = "shim/spin";
    d.run = spin;
    d.iterations = 1;
    assert_int_equal(mha_gbench_register(&d), 0);
    char a0[] = "test", a1[] = "--benchmark_repetitions=-1", a2[] = "--benchmark_filter=NOMATCH";
    char *bad[] = {a0, a1, NULL};
    assert_int_equal(mha_gbench_run(2, bad, NULL, NULL, NULL), 2);
    char *none[] = {a0, a2, NULL};
    assert_int_equal(mha_gbench_run(2, none, NULL, NULL, NULL), MHA_GBENCH_NO_MATCH);
    mha_gbench_clear();
}

/* The row the shim hands over (mha_gbench_result.json) is Google
 * Benchmark's own JSON for it with non-finite numbers as null: the one
 * writer (harness/fmt_rows.c) stores it as is, nothing patches the file. */
static void nonfinite(mha_gbench_state *st, void *user) {
    (void)user;
    while (mha_gbench_keep_running(st)) {
    }
    mha_gbench_counter(st, "nan", 0.0 / 0.0, MHA_GBENCH_PLAIN);
    mha_gbench_counter(st, "inf", 1.0 / 0.0, MHA_GBENCH_PLAIN);
    mha_gbench_counter(st, "ninf", -1.0 / 0.0, MHA_GBENCH_PLAIN);
    mha_gbench_counter(st, "GFLOPS", 2.5, MHA_GBENCH_PLAIN);
    mha_gbench_set_label(st, "a \"label\" NaN Infinity");
}

typedef struct {
    int rows;
    char json[4096];
} row_capture;

static void capture_row(const mha_gbench_result *r, void *user) {
    row_capture *c = user;
    if (r->aggregate) return;
    c->rows++;
    snprintf(c->json, sizeof c->json, "%s", r->json ? r->json : "");
}

static void test_gbench_row_json(void **state) {
    (void)state;
    mha_gbench_clear();
    mha_gbench_def d = {0};
    d.name = "shim/nonfinite";
    d.run = nonfinite;
    d.iterations = 1;
    assert_int_equal(mha_gbench_register(&d), 0);
    /* Google Benchmark's flags outlive a run in one process: the filter set */
    char a0[] = "test", a1[] = "--benchmark_filter=shim/nonfinite",
         a2[] = "--benchmark_repetitions=1";
    char *argv[] = {a0, a1, a2, NULL};
    row_capture c = {0};
    assert_int_equal(mha_gbench_run(3, argv, NULL, capture_row, &c), 0);
    assert_int_equal(c.rows, 1);
    print_message("  row: %s\n", c.json);
    json_object *o = json_tokener_parse(c.json);
    assert_non_null(o); /* valid JSON: no bare NaN or Infinity */
    json_object *v;
    assert_true(json_object_object_get_ex(o, "nan", &v));
    assert_null(v);
    assert_true(json_object_object_get_ex(o, "inf", &v));
    assert_null(v);
    assert_true(json_object_object_get_ex(o, "ninf", &v));
    assert_null(v);
    assert_true(json_object_object_get_ex(o, "GFLOPS", &v));
    assert_true(json_object_get_double(v) == 2.5);
    assert_true(json_object_object_get_ex(o, "label", &v));
    assert_string_equal(json_object_get_string(v), "a \"label\" NaN Infinity");
    assert_true(json_object_object_get_ex(o, "name", &v));
    assert_string_equal(json_object_get_string(v), "shim/nonfinite");
    json_object_put(o);
    mha_gbench_clear();
}

/* MHA_TUNING naming a FIFO is reported (and, like any unusable table,
 * ignored) at once instead of blocking in open. */
static void test_tuning_fifo(void **state) {
    (void)state;
    NEED_BENCH();
    char d[512], p[1024], cmd[2048];
    fresh_dir(d, sizeof d, "tuning-fifo");
    snprintf(p, sizeof p, "%s/table.json", d);
    assert_int_equal(mkfifo(p, 0644), 0);
    snprintf(cmd, sizeof cmd,
             "MHA_TUNING='%s' timeout 20 '%s' recommend --seq 64 --heads 2 --head-dim 16", p,
             g_bench);
    const char *args[] = {"-c", cmd, NULL};
    const int rc = tu_run("/bin/sh", args, g_tmp, g_out, sizeof g_out, g_err, sizeof g_err);
    print_message("  exit %d: %s%s\n", rc, g_out, g_err);
    assert_int_not_equal(rc, 124);
    assert_non_null(strstr(g_out, "FIFO"));
}

/* The kernel on recommend's "kernel" line in g_out (NULL if unknown), and
 * the problem of `recommend --seq n --heads 4 --head-dim 64 [--causal]`. */
static const mha_kernel *recommended_kernel(void) {
    char kname[64] = "";
    assert_int_equal(sscanf(g_out, "kernel %63s", kname), 1);
    return mha_kernel_find(kname);
}
static mha_problem recommend_problem(int64_t n, int causal, mha_dtype dt) {
    return (mha_problem){.batch = 1,
                         .heads = 4,
                         .kv_heads = 4,
                         .seq_q = n,
                         .seq_kv = n,
                         .head_dim = 64,
                         .causal = causal,
                         .scale = 0.0f,
                         .dtype = dt,
                         .kv_dtype = MHA_F32};
}

/* recommend --dtype/--kv-dtype: the class and the kernel follow the dtype
 * (a bf16 prefill goes to a kernel that takes bf16, a decode over an int8
 * cache to a decode kernel); a dtype the API does not offer is exit 2. */
static void test_recommend_dtype(void **state) {
    (void)state;
    NEED_BENCH();
    int rc = run_bench("recommend", "--seq", "256", "--heads", "4", "--head-dim", "64", "--dtype",
                       "bf16", NULL);
    if (rc != 0) fail_msg("recommend --dtype bf16: exit %d: %s", rc, g_err);
    assert_non_null(strstr(g_out, "-bf16\n")); /* the class names the dtype */
    const mha_problem pb = recommend_problem(256, 0, MHA_BF16);
    assert_int_equal(mha_kernel_takes(recommended_kernel(), &pb), MHA_OK);
    rc = run_bench("recommend", "--seq", "1", "--seq-kv", "4096", "--heads", "32", "--kv-heads",
                   "8", "--head-dim", "128", "--kv-dtype", "int8", NULL);
    if (rc != 0) fail_msg("recommend --kv-dtype int8: exit %d: %s", rc, g_err);
    assert_non_null(strstr(g_out, "kernel    decode."));
    assert_non_null(strstr(g_out, "kv_int8"));
    expect_usage(run_bench("recommend", "--seq", "8", "--heads", "2", "--head-dim", "16", "--dtype",
                           "int8", NULL),
                 "int8");
    expect_usage(run_bench("recommend", "--seq", "8", "--heads", "2", "--head-dim", "16", "--dtype",
                           "bf16", "--kv-dtype", "fp32", NULL),
                 "fp32");
}

/* The verdict tells the rows where auto lags apart: a dense shape's is the
 * tuning table's to refit (`mhabench tune`), a packed or paged one's is not
 * (the table's classes have no layout). tests/data/report_auto.json holds
 * two shapes of a real `llm` run (Zen 4, stop 61), auto aliased to a slower
 * kernel on each: decode.scalar on a dense decode, decode.avx512bf16 (as
 * measured) on the paged decode step. */
static void test_report_auto_layouts(void **state) {
    (void)state;
    NEED_DATA();
    char path[1024];
    snprintf(path, sizeof path, "%s/report_auto.json", g_data);
    const int rc = run_bench("report", path, NULL);
    if (rc != 0) fail_msg("report %s: exit %d: %s", path, rc, g_err);
    const char *want[] = {
        "  auto is more than 5% slower than the fastest in 2 of 2 (shape, threads)\n"
        "    run `mhabench tune` to refit this CPU's table:\n"
        "    B1 H32 KV8 Nq1 Nkv8192 d128 threads=1: ",
        "[decode.scalar]\n"
        "    in a packed or paged layout, which the tuning table's classes do not\n"
        "    cover (`mhabench tune` measures dense shapes only):\n"
        "    B16 H32 KV8 Nq1 Nkv32768 d128 ragged1024 page16 bf16 threads=1: ",
        "of decode.bf16fma [decode.avx512bf16]\n"};
    const char *at = g_out;
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const char *hit = strstr(at, want[i]);
        if (!hit) fail_msg("report's verdict lacks (in order) \"%s\":\n%s", want[i], g_out);
        at = hit + strlen(want[i]);
    }
}

/* recommend --window/--softcap/--sinks/--head-dim-v: the problem it asks
 * mha_select about carries them (a window's blocks come from the cache
 * model, the reason says so; a kernel that takes them), and a bad value is
 * exit 2 naming it. */
static void test_recommend_variants(void **state) {
    (void)state;
    NEED_BENCH();
    int rc =
        run_bench("recommend", "--seq", "2048", "--heads", "4", "--head-dim", "64", "--causal",
                  "--window", "128,0", "--softcap", "30", "--sinks", "--head-dim-v", "32", NULL);
    if (rc != 0) fail_msg("recommend --window: exit %d: %s", rc, g_err);
    mha_problem pw = recommend_problem(2048, 1, MHA_F32);
    pw.window = 1;
    pw.window_left = 128;
    pw.window_right = 0;
    pw.softcap = 30.0f;
    pw.sinks = 1;
    pw.head_dim_v = 32;
    assert_int_equal(mha_kernel_takes(recommended_kernel(), &pw), MHA_OK);
    if (strstr(g_out, "source    table"))
        assert_non_null(strstr(g_out, "blocks from the cache model"));
    expect_usage(run_bench("recommend", "--seq", "8", "--heads", "2", "--head-dim", "16",
                           "--window", "1,-2", NULL),
                 "-2");
    expect_usage(run_bench("recommend", "--seq", "8", "--heads", "2", "--head-dim", "16",
                           "--softcap", "0", NULL),
                 "--softcap");
}

/* ---- argument edge cases of verify and profile ---------------------------------------- */

/* Exit 2 and a "mhabench: " line on stderr containing want (the sanitizer
 * runtime may print a warning line of its own before it). */
static void expect_usage(int rc, const char *want) {
    print_message("  exit %d: %s", rc, g_err);
    assert_int_equal(rc, 2);
    const char *line =
        strncmp(g_err, "mhabench: ", 10) == 0 ? g_err : strstr(g_err, "\nmhabench: ");
    if (!line) fail_msg("no \"mhabench: \" message on stderr: %s", g_err);
    if (!strstr(line, want)) fail_msg("the message does not name \"%s\": %s", want, line);
}

/* verify --kernels: an empty list or name is an error, not "0 passed". */
static void test_verify_kernel_list(void **state) {
    (void)state;
    NEED_BENCH();
    expect_usage(run_bench("verify", "--quick", "--kernels", "", NULL), "empty kernel list");
    expect_usage(run_bench("verify", "--quick", "--kernels", ",", NULL), "empty name");
    expect_usage(run_bench("verify", "--quick", "--kernels", "naive,,naive", NULL), "position 2");
    expect_usage(run_bench("verify", "--quick", "--kernels", "naive,nope", NULL), "nope");
    /* a repeat is measured once, and a real list still runs */
    assert_int_equal(run_bench("verify", "--quick", "--case", "0", "--threads", "1", "--kernels",
                               "naive,naive", NULL),
                     0);
    assert_non_null(strstr(g_out, "1 passed, 0 failed"));
}

/* An unknown name is exit 2 with a "did you mean" when one is close, an
 * algorithm's name lists its kernels (from the registry), and a far name
 * gets no guess; for every command that takes kernel, dtype or ISA names. */
static void test_unknown_names(void **state) {
    (void)state;
    NEED_BENCH();
    char out[512];
    tmp_path(out, sizeof out, "never.npy");
    expect_usage(run_bench("verify", "--kernels", "naive,flash.avx51", NULL),
                 "verify: --kernels: unknown kernel 'flash.avx51' (did you mean flash.avx512?)");
    expect_usage(run_bench("sweep", "--kernels", "decode.avx2,flash.avx51", "--out", out, NULL),
                 "unknown kernel 'flash.avx51' (did you mean flash.avx512?)");
    expect_usage(run_bench("tune", "--kernels", "tiled.av2", NULL),
                 "unknown kernel 'tiled.av2' (did you mean tiled.avx2?)");
    expect_usage(run_bench("attend", "--kernel", "flash.avx51", "--q", "q.npy", "--k", "k.npy",
                           "--v", "v.npy", "--out", out, NULL),
                 "--kernel: unknown kernel 'flash.avx51' (did you mean flash.avx512?)");
    expect_usage(run_bench("profile", "--kernel", "atuo", "--seq", "8", "--head-dim", "8", NULL),
                 "unknown kernel 'atuo' (did you mean auto?)");
    /* "auto" is a candidate only where it is accepted */
    expect_usage(run_bench("verify", "--kernels", "atuo", NULL), "unknown kernel 'atuo' (see");
    /* a far name: no guess */
    expect_usage(run_bench("verify", "--kernels", "no_such_kernel", NULL),
                 "unknown kernel 'no_such_kernel' (see `mhabench list`)");
    assert_null(strstr(g_err, "did you mean"));
    /* an algorithm: its kernels, every one the registry has */
    static const char *const fams[] = {"flash", "decode", "tiled"};
    for (size_t f = 0; f < sizeof fams / sizeof *fams; f++) {
        char want[128];
        snprintf(want, sizeof want, "'%s' is an algorithm, not a kernel; its kernels: %s.", fams[f],
                 fams[f]);
        expect_usage(run_bench("verify", "--kernels", fams[f], NULL), want);
        char line[4096];
        snprintf(line, sizeof line, "%s", g_err);
        assert_int_equal(run_bench("list", NULL), 0);
        int listed = 0;
        for (char *l = strtok(g_out, "\n"); l; l = strtok(NULL, "\n")) {
            char name[64], alg[64];
            if (sscanf(l, "%63s %63s", name, alg) != 2 || strcmp(alg, fams[f]) != 0) continue;
            listed++;
            char item[80];
            snprintf(item, sizeof item, " %s", name);
            if (!strstr(line, item)) fail_msg("'%s' lacks %s: %s", fams[f], name, line);
        }
        assert_true(listed >= 2);
    }
    expect_usage(run_bench("attend", "--kernel", "decode", "--q", "q.npy", "--k", "k.npy", "--v",
                           "v.npy", "--out", out, NULL),
                 "'decode' is an algorithm, not a kernel; its kernels: decode.scalar");
    /* dtypes */
    expect_usage(run_bench("verify", "--dtype", "fp23", NULL),
                 "verify: --dtype: unknown dtype 'fp23' (did you mean fp32?)");
    expect_usage(run_bench("profile", "--kernel", "naive", "--seq", "8", "--head-dim", "8",
                           "--dtype", "bf61", NULL),
                 "profile: --dtype: unknown dtype 'bf61' (did you mean bf16?)");
    expect_usage(run_bench("attend", "--kernel", "naive", "--q", "q.npy", "--k", "k.npy", "--v",
                           "v.npy", "--out", out, "--out-dtype", "fp61", NULL),
                 "--out-dtype: unknown dtype 'fp61' (did you mean fp16?)");
    expect_usage(run_bench("verify", "--kv-dtype", "xyz", NULL),
                 "unknown dtype 'xyz' (expected fp32, bf16, fp16 or int8)");
    /* other names */
    expect_usage(run_bench("merge", "a.json", "--out", out, "--duplicates", "pol", NULL),
                 "merge: --duplicates: unknown rule 'pol' (did you mean pool?)");
    expect_usage(run_bench("merge", "a.json", "--out", out, "--duplicates", "keep", NULL),
                 "unknown rule 'keep' (expected refuse, pool or first)");
    /* commands */
    expect_usage(run_bench("verfy", NULL), "unknown command 'verfy' (did you mean verify?)");
    expect_usage(run_bench("frobnicate", NULL), "unknown command 'frobnicate' (see the list");
    /* the ISA cap */
    const char *old = getenv("MHA_ISA");
    char saved[64];
    snprintf(saved, sizeof saved, "%s", old ? old : "");
    setenv("MHA_ISA", "avx51", 1);
    const int rc = run_bench("list", NULL);
    setenv("MHA_ISA", "bogus", 1);
    char first[4096];
    snprintf(first, sizeof first, "%s", g_err);
    const int rc2 = run_bench("info", "--quick", NULL);
    if (old)
        setenv("MHA_ISA", saved, 1);
    else
        unsetenv("MHA_ISA");
    assert_int_equal(rc, 2);
    assert_non_null(strstr(first, "MHA_ISA: unknown ISA 'avx51' (did you mean avx512?)"));
    /* the names from the ISA table, as the message makes them: "a, b or c" */
    char want[512];
    int o = snprintf(want, sizeof want, "MHA_ISA: unknown ISA 'bogus' (expected ");
    for (int i = 0; i < MHA_ISA_COUNT; i++)
        o += snprintf(want + o, sizeof want - (size_t)o, "%s%s",
                      i == 0                   ? ""
                      : i == MHA_ISA_COUNT - 1 ? " or "
                                               : ", ",
                      mha_isa_name((mha_isa)i));
    snprintf(want + o, sizeof want - (size_t)o, ")");
    expect_usage(rc2, want);
}

static void test_profile_seconds(void **state) {
    (void)state;
    NEED_BENCH();
    const char *bad[] = {"0", "-1", "nan", "1e9", "x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_usage(run_bench("profile", "--kernel", "naive", "--seq", "8", "--head-dim", "8",
                               "--seconds", bad[i], NULL),
                     "--seconds");
}

/* A workspace that cannot be allocated (naive: Nq x Nkv floats, 4 TiB here)
 * is exit 2 with a message; under ASan, LeakSanitizer fails the run if the
 * inputs allocated before it are not released. */
static void test_profile_alloc_failure(void **state) {
    (void)state;
    NEED_BENCH();
    const char *old = getenv("ASAN_OPTIONS");
    char opts[512];
    snprintf(opts, sizeof opts, "%s%sallocator_may_return_null=1", old ? old : "",
             old && *old ? ":" : "");
    setenv("ASAN_OPTIONS", opts, 1);
    const int rc = run_bench("profile", "--kernel", "naive", "--heads", "1", "--seq", "1048576",
                             "--head-dim", "4", "--seconds", "0.01", NULL);
    if (old)
        setenv("ASAN_OPTIONS", old, 1);
    else
        unsetenv("ASAN_OPTIONS");
    expect_usage(rc, "cannot allocate");
    assert_null(strstr(g_err, "LeakSanitizer"));
}

/* profile --samples: one line per sample with its evidence, then the medians
 * (5 samples: the captured stdout holds 1 KiB). */
static void test_profile_samples(void **state) {
    (void)state;
    NEED_BENCH();
    assert_int_equal(run_bench("profile", "--kernel", "flash.scalar", "--heads", "1", "--seq", "16",
                               "--head-dim", "16", "--samples", "5", NULL),
                     0);
    int lines = 0;
    for (const char *p = g_out; (p = strstr(p, "sample ")); p++) lines++;
    assert_int_equal(lines, 5);
    assert_non_null(strstr(g_out, "probe "));
    assert_non_null(strstr(g_out, "all: 5 samples, median "));
    assert_non_null(strstr(g_out, "undisturbed: "));
    expect_usage(run_bench("profile", "--kernel", "naive", "--seq", "8", "--head-dim", "8",
                           "--samples", "0", NULL),
                 "--samples");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_help),
        cmocka_unit_test(test_help_lists_options),
        cmocka_unit_test(test_attend_torch),
        cmocka_unit_test(test_forward_torch),
        cmocka_unit_test(test_attend_bad_inputs),
        cmocka_unit_test(test_attend_variants),
        cmocka_unit_test(test_forward_bad_inputs),
        cmocka_unit_test(test_forward_bias_unreadable),
        cmocka_unit_test(test_sweep_bad_out),
        cmocka_unit_test(test_sweep_gbench_errors),
        cmocka_unit_test(test_sweep_run_files),
        cmocka_unit_test(test_sweep_out_symlink),
        cmocka_unit_test(test_tuning_fifo),
        cmocka_unit_test(test_tune_bad_out),
        cmocka_unit_test(test_tune_keeps_tables),
        cmocka_unit_test(test_tune_budget_dtypes),
        cmocka_unit_test(test_attend_special_files),
        cmocka_unit_test(test_out_keeps_mode),
        cmocka_unit_test(test_ab_signal),
        cmocka_unit_test(test_gbench_shim_errors),
        cmocka_unit_test(test_gbench_row_json),
        cmocka_unit_test(test_verify_kernel_list),
        cmocka_unit_test(test_unknown_names),
        cmocka_unit_test(test_profile_seconds),
        cmocka_unit_test(test_profile_alloc_failure),
        cmocka_unit_test(test_profile_samples),
        cmocka_unit_test(test_attend_dtypes),
        cmocka_unit_test(test_first_hour_hints),
        cmocka_unit_test(test_forward_dtype),
        cmocka_unit_test(test_sweep_dtypes),
        cmocka_unit_test(test_sweep_peers),
        cmocka_unit_test(test_recommend_dtype),
        cmocka_unit_test(test_recommend_variants),
        cmocka_unit_test(test_report_auto_layouts),
        cmocka_unit_test(test_verify_dtypes),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
