/* testutil.h - plumbing the cmocka tests share: removing a scratch tree,
 * counting a folder's entries, reading a small file, and running a program
 * with its stdout/stderr captured. Plain C, no cmocka: callers assert. */
#ifndef MHA_TESTS_TESTUTIL_H
#define MHA_TESTS_TESTUTIL_H
#include <stdarg.h>
#include <stddef.h>

/* Removes dir and everything below it (symlinks are not followed). */
void tu_rm_tree(const char *dir);
/* Entries of dir besides . and ..; -1 if it cannot be opened. */
int tu_count_entries(const char *dir);
/* 1 when MHA_TEST_QUICK is set (the ISA-cap and sanitizer setups of
 * tests/meson.build). */
int tu_quick(void);
/* The big kernel grids' sampling under MHA_TEST_QUICK: 1 (every case) when
 * it is unset; otherwise MHA_TEST_STRIDE (a positive integer; what
 * `scripts/test.sh --heavy` sets to 1) or 6. */
int tu_stride(void);
/* Whether a kernel grid runs its case i: always at stride 1; at stride s one
 * case in each run of s consecutive ones, the chosen place moving by one
 * from run to run (and by salt between kernels or dtypes), so a parameter
 * that cycles with i is not stuck at one value. */
int tu_take(long i, long salt);
/* Reads up to len-1 bytes of path into buf, NUL-terminated ("" if unreadable). */
void tu_slurp(const char *path, char *buf, size_t len);
/* Runs argv[0] with argv (NULL-terminated); stdout and stderr go through
 * files in dir (removed afterwards) into out/err (either may be NULL).
 * Returns posix_spawn's error (0 on success); *status is waitpid's status. */
int tu_spawn(char *const *argv, const char *dir, char *out, size_t outlen, char *err, size_t errlen,
             int *status);
/* Makes the scratch folder $TMPDIR/<name>.XXXXXX (TMPDIR unset: /tmp) into
 * buf; 0 on success, -1 otherwise. */
int tu_mkdtemp(char *buf, size_t len, const char *name);
/* Runs prog with the NULL-terminated arguments args (at most 62) through
 * tu_spawn. Returns its exit status, or -1 if it could not be started, had
 * too many arguments or did not exit (a signal): the reason goes to stderr. */
int tu_run(const char *prog, const char *const *args, const char *dir, char *out, size_t outlen,
           char *err, size_t errlen);
/* The same with the arguments first, ... (NULL-terminated) of a variadic caller. */
int tu_run_va(const char *prog, const char *first, va_list ap, const char *dir, char *out,
              size_t outlen, char *err, size_t errlen);
#endif
