/* test_opts.c - option tables (harness/opts.c): the parser made from the
 * rows, its messages, and the usage and options text made from the same
 * rows. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "opts.h"

enum { O_ALPHA = 1000, O_BETA_LONG };
static const opt_row ROWS[] = {
    {"kernel", required_argument, 'k', 0, "K", OPT_REQUIRED, "the kernel"},
    {"kv-dtype", required_argument, 'K', 0, "D", 0, "storage"},
    {"quick", no_argument, 'q', 0, NULL, 0, "fast"},
    {"alpha", required_argument, O_ALPHA, 0, "A", 0,
     "a long help text that has to be wrapped because it runs well past the eighty columns of "
     "a terminal\nand a line of its own"},
    {"a-rather-long-option-name", no_argument, O_BETA_LONG, 0, NULL, 0, "help below the name"},
    OPTS_HELP,
};
enum { N = sizeof ROWS / sizeof *ROWS };

static char g_err[4096];

/* Parses the NULL-terminated arguments, stderr captured into g_err; returns
 * the ids in order (OPTS_ERROR included) in ids, their count. */
static int parse(int *ids, const char **args, opts_parser *p) {
    char *argv[16];
    int argc = 0;
    argv[argc++] = "cmd";
    for (; args[argc - 1]; argc++) argv[argc] = (char *)args[argc - 1];
    argv[argc] = NULL;
    fflush(stderr);
    FILE *tmp = tmpfile();
    assert_non_null(tmp);
    const int saved = dup(2);
    dup2(fileno(tmp), 2);
    opts_init(p, "cmd", ROWS, N);
    int n = 0;
    for (int c; (c = opts_next(p, argc, argv)) != -1;) ids[n++] = c;
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(tmp);
    const size_t got = fread(g_err, 1, sizeof g_err - 1, tmp);
    g_err[got] = '\0';
    fclose(tmp);
    return n;
}

static void test_parse(void **state) {
    (void)state;
    opts_parser p;
    int ids[16];
    int n = parse(ids, (const char *[]){"--kernel", "naive", "--quick", "--alpha=3", NULL}, &p);
    assert_int_equal(n, 3);
    assert_int_equal(ids[0], 'k');
    assert_int_equal(ids[1], 'q');
    assert_int_equal(ids[2], O_ALPHA);
    assert_string_equal(g_err, "");
    assert_null(opts_missing(&p));
    n = parse(ids, (const char *[]){"--quick", "-h", NULL}, &p);
    assert_int_equal(n, 2);
    assert_int_equal(ids[1], 'h');
    assert_string_equal(opts_missing(&p)->name, "kernel");
    /* an unambiguous prefix is the option */
    n = parse(ids, (const char *[]){"--kern", "x", NULL}, &p);
    assert_int_equal(ids[0], 'k');
    assert_null(opts_missing(&p));
}

static void test_errors(void **state) {
    (void)state;
    static const struct {
        const char *arg, *msg;
    } cases[] = {
        {"--kernal", "mhabench: cmd: unknown option '--kernal' (did you mean --kernel?)\n"},
        {"--bogus=1", "mhabench: cmd: unknown option '--bogus' (see `mhabench cmd --help`)\n"},
        {"--k", "mhabench: cmd: option '--k' is ambiguous (--kernel, --kv-dtype)\n"},
        {"--quick=1", "mhabench: cmd: option '--quick' takes no value\n"},
        {"--alpha", "mhabench: cmd: option '--alpha' needs a value\n"},
        {"-x", "mhabench: cmd: unknown option '-x'\n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        opts_parser p;
        int ids[16];
        const int n = parse(ids, (const char *[]){cases[i].arg, NULL}, &p);
        assert_int_equal(n, 1);
        assert_int_equal(ids[0], OPTS_ERROR);
        assert_string_equal(g_err, cases[i].msg);
    }
    /* inside a group of short options after a long one with a value */
    opts_parser p;
    int ids[16];
    const int n = parse(ids, (const char *[]){"--alpha=2", "-xh", NULL}, &p);
    assert_int_equal(n, 3);
    assert_int_equal(ids[1], OPTS_ERROR);
    assert_int_equal(ids[2], 'h');
    assert_string_equal(g_err, "mhabench: cmd: unknown option '-x'\n");
}

static void test_help_text(void **state) {
    (void)state;
    char buf[4096];
    FILE *f = fmemopen(buf, sizeof buf, "w");
    assert_non_null(f);
    opts_usage(f, "cmd", "FILES...", ROWS, N, "[-- args]");
    opts_print(f, ROWS, N);
    fclose(f);
    assert_string_equal(
        buf, "usage: mhabench cmd FILES... --kernel K [--kv-dtype D] [--quick] [--alpha A]\n"
             "                    [--a-rather-long-option-name] [-- args]\n"
             "options:\n"
             "  --kernel K    the kernel\n"
             "  --kv-dtype D  storage\n"
             "  --quick       fast\n"
             "  --alpha A     a long help text that has to be wrapped because it runs well\n"
             "                past the eighty columns of a terminal\n"
             "                and a line of its own\n"
             "  --a-rather-long-option-name\n"
             "                help below the name\n"
             "  -h, --help    print this help and exit 0\n");
    /* no line is wider than 80 */
    for (const char *l = buf; *l;) {
        const size_t len = strcspn(l, "\n");
        assert_true(len <= 80);
        l += len + (l[len] == '\n');
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_help_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
