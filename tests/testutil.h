/* testutil.h - plumbing the cmocka tests share: removing a scratch tree,
 * counting a folder's entries, reading a small file, and running a program
 * with its stdout/stderr captured. Plain C, no cmocka: callers assert. */
#ifndef MHA_TESTS_TESTUTIL_H
#define MHA_TESTS_TESTUTIL_H
#include <stddef.h>

/* Removes dir and everything below it (symlinks are not followed). */
void tu_rm_tree(const char *dir);
/* Entries of dir besides . and ..; -1 if it cannot be opened. */
int tu_count_entries(const char *dir);
/* Reads up to len-1 bytes of path into buf, NUL-terminated ("" if unreadable). */
void tu_slurp(const char *path, char *buf, size_t len);
/* Runs argv[0] with argv (NULL-terminated); stdout and stderr go through
 * files in dir (removed afterwards) into out/err (either may be NULL).
 * Returns posix_spawn's error (0 on success); *status is waitpid's status. */
int tu_spawn(char *const *argv, const char *dir, char *out, size_t outlen, char *err, size_t errlen,
             int *status);
#endif
