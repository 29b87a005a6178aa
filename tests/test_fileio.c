/* test_fileio.c - variants/fileio.c (and results.c's run-file naming on it): inputs that are not
 * regular files are refused without blocking; outputs follow symlinks to a regular file, refuse
 * folders, FIFOs and devices untouched, never replace under NOREPLACE, and
 * leave no temporary file behind (O_TMPFILE and the named fallback alike). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <grp.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mha_private.h"
#include "fmt_results.h"
#include "testutil.h"

static char g_dir[256];

static int setup(void **state) {
    (void)state;
    return tu_mkdtemp(g_dir, sizeof g_dir, "test_fileio");
}

static int teardown(void **state) {
    (void)state;
    tu_rm_tree(g_dir);
    return 0;
}

/* A fresh scratch folder per test (and per temp-file mode). */
static void sub(char *out, size_t len, const char *name) {
    snprintf(out, len, "%s/%s%s", g_dir, name, mha_fileio_force_named_temp ? "-named" : "");
    assert_int_equal(mkdir(out, 0755), 0);
}

static void put(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

static void write_file(const char *path, int flags, const char *text, mha_status want) {
    mha_out w;
    char why[1024];
    mha_status st = mha_out_begin(&w, path, flags, why, sizeof why);
    if (st == MHA_OK) {
        assert_int_equal(mha_out_write(&w, text, strlen(text), why, sizeof why), MHA_OK);
        st = mha_out_commit(&w, why, sizeof why);
        if (st != MHA_OK) mha_out_abort(&w);
    }
    if (st != MHA_OK) print_message("  %s\n", why);
    assert_int_equal(st, want);
}

static void check_text(const char *path, const char *want) {
    char buf[256];
    tu_slurp(path, buf, sizeof buf);
    assert_string_equal(buf, want);
}

static void on_alarm(int sig) {
    (void)sig;
    static const char msg[] = "blocked: opening a FIFO did not return\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(3);
}

static void test_input_regular_only(void **state) {
    (void)state;
    char d[512], p[1024], why[256];
    sub(d, sizeof d, "input");
    snprintf(p, sizeof p, "%s/fifo", d);
    assert_int_equal(mkfifo(p, 0644), 0);
    signal(SIGALRM, on_alarm);
    alarm(5);
    assert_int_equal(mha_open_input(p, why, sizeof why), -1);
    alarm(0);
    assert_non_null(strstr(why, "FIFO"));
    assert_int_equal(mha_open_input(d, why, sizeof why), -1);
    assert_non_null(strstr(why, "directory"));
    assert_int_equal(mha_open_input("", why, sizeof why), -1);
    snprintf(p, sizeof p, "%s/plain", d);
    put(p, "x");
    const int fd = mha_open_input(p, why, sizeof why);
    assert_true(fd >= 0);
    assert_int_equal(fcntl(fd, F_GETFL) & O_NONBLOCK, 0); /* blocking again */
    close(fd);
}

static void test_new_and_replace(void **state) {
    (void)state;
    char d[512], p[1024];
    sub(d, sizeof d, "replace");
    snprintf(p, sizeof p, "%s/out.txt", d);
    write_file(p, MHA_OUT_REPLACE, "one", MHA_OK);
    check_text(p, "one");
    write_file(p, MHA_OUT_REPLACE, "two", MHA_OK);
    check_text(p, "two");
    struct stat sb;
    assert_int_equal(stat(p, &sb), 0);
    const mode_t mask = umask(0);
    umask(mask);
    assert_int_equal(sb.st_mode & 0777, 0666 & ~mask);
    assert_int_equal(tu_count_entries(d), 1); /* no temporary left */
}

/* Replacing keeps the replaced file's permissions and owner (where the
 * process may set it): a private result stays private, while it is written
 * too; the set-id bits are dropped. Through a symlink, the file it names. */
static void test_replace_keeps_mode(void **state) {
    (void)state;
    char d[512], p[1024], l[1024], why[1024];
    sub(d, sizeof d, "mode");
    snprintf(p, sizeof p, "%s/private.txt", d);
    put(p, "secret");
    assert_int_equal(chmod(p, 0600), 0);
    mha_out w;
    assert_int_equal(mha_out_begin(&w, p, MHA_OUT_REPLACE, why, sizeof why), MHA_OK);
    struct stat sb;
    assert_int_equal(fstat(w.fd, &sb), 0);
    assert_int_equal(sb.st_mode & 07777, 0600); /* not readable by others while written */
    assert_int_equal(mha_out_write(&w, "new", 3, why, sizeof why), MHA_OK);
    assert_int_equal(mha_out_commit(&w, why, sizeof why), MHA_OK);
    check_text(p, "new");
    assert_int_equal(stat(p, &sb), 0);
    assert_int_equal(sb.st_mode & 07777, 0600);

    /* another owner: kept when this process may give it (root) */
    const int root = geteuid() == 0;
    const uid_t uid = root ? 4321 : geteuid();
    const gid_t gid = root ? 4322 : getegid();
    assert_int_equal(chown(p, uid, gid), 0);
    assert_int_equal(chmod(p, 0640), 0);
    write_file(p, MHA_OUT_REPLACE, "again", MHA_OK);
    assert_int_equal(stat(p, &sb), 0);
    assert_int_equal(sb.st_mode & 07777, 0640);
    assert_int_equal(sb.st_uid, uid);
    assert_int_equal(sb.st_gid, gid);
    if (!root) print_message("  not root: only the process's own owner checked\n");

    /* set-id bits are not carried over; the rest of the mode is */
    assert_int_equal(chmod(p, 06750), 0);
    write_file(p, MHA_OUT_REPLACE, "setid", MHA_OK);
    assert_int_equal(stat(p, &sb), 0);
    assert_int_equal(sb.st_mode & 07777, 0750);

    /* through a symlink: the mode of the file it names */
    assert_int_equal(chmod(p, 0600), 0);
    snprintf(l, sizeof l, "%s/link", d);
    assert_int_equal(symlink("private.txt", l), 0);
    write_file(l, MHA_OUT_REPLACE, "linked", MHA_OK);
    check_text(p, "linked");
    assert_int_equal(stat(p, &sb), 0);
    assert_int_equal(sb.st_mode & 07777, 0600);
    assert_int_equal(tu_count_entries(d), 2); /* no temporary left */
}

/* Replacing a file of a group the writer is not in (as a user who may write
 * the folder, not root): the new file is in the writer's group, so the group
 * bits drop to what others get. Root only (it makes that user in a child). */
static void test_replace_other_group(void **state) {
    (void)state;
    if (geteuid() != 0) {
        print_message("not root: cannot act as another user here; skipped\n");
        skip();
    }
    char d[512], p[1024];
    sub(d, sizeof d, "group");
    assert_int_equal(chmod(g_dir, 0755), 0);
    assert_int_equal(chmod(d, 0777), 0);
    static const mode_t modes[2][2] = {{0640, 0600}, {0664, 0644}}; /* before, after */
    for (int m = 0; m < 2; m++) {
        snprintf(p, sizeof p, "%s/shared%d.txt", d, m);
        put(p, "old");
        assert_int_equal(chown(p, 4321, 5555), 0);
        assert_int_equal(chmod(p, modes[m][0]), 0);
        const pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) { /* user 4321 in group 4444 only, not 5555 */
            if (setgroups(0, NULL) != 0 || setgid(4444) != 0 || setuid(4321) != 0) _exit(10);
            mha_out w;
            char why[1024];
            if (mha_out_begin(&w, p, MHA_OUT_REPLACE, why, sizeof why) != MHA_OK) _exit(11);
            if (mha_out_write(&w, "new", 3, why, sizeof why) != MHA_OK) _exit(12);
            _exit(mha_out_commit(&w, why, sizeof why) == MHA_OK ? 0 : 13);
        }
        int status;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0);
        check_text(p, "new");
        struct stat sb;
        assert_int_equal(stat(p, &sb), 0);
        print_message("  %04o 4321:5555 replaced by 4321:4444 -> %04o %d:%d\n",
                      (unsigned)modes[m][0], (unsigned)(sb.st_mode & 07777), (int)sb.st_uid,
                      (int)sb.st_gid);
        assert_int_equal(sb.st_uid, 4321);
        assert_int_equal(sb.st_gid, 4444);
        assert_int_equal(sb.st_mode & 07777, modes[m][1]);
    }
    assert_int_equal(chmod(g_dir, 0700), 0);
}

static void test_symlink_followed(void **state) {
    (void)state;
    char d[512], t[1024], l[1024], buf[1024];
    sub(d, sizeof d, "symlink");
    snprintf(t, sizeof t, "%s/target", d);
    snprintf(l, sizeof l, "%s/link", d);
    put(t, "old");
    assert_int_equal(symlink("target", l), 0);
    write_file(l, MHA_OUT_REPLACE, "new", MHA_OK);
    struct stat sb;
    assert_int_equal(lstat(l, &sb), 0);
    assert_true(S_ISLNK(sb.st_mode)); /* the link is kept */
    check_text(t, "new");             /* its target replaced */
    assert_int_equal(tu_count_entries(d), 2);

    /* A dangling link: the file it names is created, the link kept. */
    snprintf(l, sizeof l, "%s/dangling", d);
    assert_int_equal(symlink("made", l), 0);
    write_file(l, MHA_OUT_REPLACE, "made", MHA_OK);
    assert_int_equal(lstat(l, &sb), 0);
    assert_true(S_ISLNK(sb.st_mode));
    snprintf(buf, sizeof buf, "%s/made", d);
    check_text(buf, "made");
    assert_int_equal(tu_count_entries(d), 4);
}

static void refused(const char *path, const char *kind) {
    mha_out w;
    char why[1024];
    assert_int_not_equal(mha_out_begin(&w, path, MHA_OUT_REPLACE, why, sizeof why), MHA_OK);
    print_message("  %s\n", why);
    assert_non_null(strstr(why, kind));
    assert_non_null(strstr(why, path));
}

static void test_special_targets_refused(void **state) {
    (void)state;
    char d[512], p[1024], l[1024];
    sub(d, sizeof d, "special");
    struct stat sb;

    snprintf(p, sizeof p, "%s/fifo", d);
    assert_int_equal(mkfifo(p, 0644), 0);
    refused(p, "a FIFO");
    assert_int_equal(lstat(p, &sb), 0);
    assert_true(S_ISFIFO(sb.st_mode));

    snprintf(p, sizeof p, "%s/folder", d);
    assert_int_equal(mkdir(p, 0755), 0);
    refused(p, "a directory");

    /* A device node like /dev/null (root only; made here, never the real one). */
    snprintf(p, sizeof p, "%s/null", d);
    if (mknod(p, S_IFCHR | 0666, makedev(1, 3)) == 0) {
        refused(p, "a character device");
        assert_int_equal(lstat(p, &sb), 0);
        assert_true(S_ISCHR(sb.st_mode));
        /* ... also behind a symlink */
        snprintf(l, sizeof l, "%s/to-null", d);
        assert_int_equal(symlink("null", l), 0);
        refused(l, "a character device");
        assert_int_equal(lstat(l, &sb), 0);
        assert_true(S_ISLNK(sb.st_mode));
    } else {
        print_message("  (mknod: %s; device case not run)\n", strerror(errno));
    }

    mha_out w;
    char why[256];
    assert_int_equal(mha_out_begin(&w, "", MHA_OUT_REPLACE, why, sizeof why), MHA_EINVAL);
    snprintf(p, sizeof p, "%s/no/such/folder/x", d);
    assert_int_equal(mha_out_begin(&w, p, MHA_OUT_REPLACE, why, sizeof why), MHA_EIO);
}

static void test_noreplace(void **state) {
    (void)state;
    char d[512], p[1024], q[1024];
    sub(d, sizeof d, "noreplace");
    snprintf(p, sizeof p, "%s/deep/er/run.json", d);
    write_file(p, MHA_OUT_NOREPLACE | MHA_OUT_MKDIRS, "first", MHA_OK);
    check_text(p, "first");

    mha_out w;
    char why[1024];
    assert_int_equal(mha_out_begin(&w, p, MHA_OUT_NOREPLACE, why, sizeof why), MHA_OK);
    assert_int_equal(mha_out_write(&w, "second", 6, why, sizeof why), MHA_OK);
    assert_int_equal(mha_out_commit(&w, why, sizeof why), MHA_EIO);
    assert_int_equal(w.exists, 1);
    check_text(p, "first"); /* never replaced */
    snprintf(q, sizeof q, "%s/deep/er/run-2.json", d);
    assert_int_equal(mha_out_retarget(&w, q, why, sizeof why), MHA_OK);
    assert_int_equal(mha_out_commit(&w, why, sizeof why), MHA_OK);
    check_text(q, "second");
    snprintf(q, sizeof q, "%s/deep/er", d);
    assert_int_equal(tu_count_entries(q), 2);

    /* A symlink at a never-replace name is an existing name, not followed. */
    snprintf(q, sizeof q, "%s/deep/er/link.json", d);
    assert_int_equal(symlink("run.json", q), 0);
    assert_int_equal(mha_out_begin(&w, q, MHA_OUT_NOREPLACE, why, sizeof why), MHA_OK);
    assert_int_equal(mha_out_commit(&w, why, sizeof why), MHA_EIO);
    assert_int_equal(w.exists, 1);
    mha_out_abort(&w);
    check_text(p, "first");
}

static void test_abort_leaves_nothing(void **state) {
    (void)state;
    char d[512], p[1024];
    sub(d, sizeof d, "abort");
    snprintf(p, sizeof p, "%s/out", d);
    mha_out w;
    char why[256];
    assert_int_equal(mha_out_begin(&w, p, MHA_OUT_REPLACE, why, sizeof why), MHA_OK);
    FILE *f = mha_out_stream(&w);
    assert_non_null(f);
    fputs("partial", f);
    /* Another writer can reach the unnamed file by its name (Google Benchmark). */
    FILE *g = fopen(w.name, "w");
    assert_non_null(g);
    fclose(g);
    assert_int_equal(tu_count_entries(d), mha_fileio_force_named_temp ? 1 : 0);
    mha_out_abort(&w);
    mha_out_abort(&w);
    assert_int_equal(tu_count_entries(d), 0);
}

static void test_escape(void **state) {
    (void)state;
    char out[64];
    mha_escape("a\nb\x1b[31m\\", 9, out, sizeof out);
    assert_string_equal(out, "a\\nb\\x1b[31m\\\\");
    mha_escape("abcdefghij", 10, out, 8);
    assert_string_equal(out, "abcd...");
    for (const char *c = out; *c; c++) assert_true(*c >= 0x20 && *c < 0x7f);
}

/* Run files: a fixed clock gives the same name twice; the second run gets
 * -2, a third -3, and none replaces another. */
static void test_run_file_names(void **state) {
    (void)state;
    char d[512], p[1024], why[512];
    sub(d, sizeof d, "runs");
    const time_t t = 1764460800; /* 2025-11-30T00:00:00Z */
    assert_int_equal(results_run_path(d, t, 0, p, sizeof p), 1);
    assert_non_null(strstr(p, "-20251130T000000Z.json"));
    assert_int_equal(results_run_path(d, t, 1, p, sizeof p), 1);
    assert_non_null(strstr(p, "-20251130T000000Z-2.json"));
    const char *texts[3] = {"a", "b", "c"};
    for (int i = 0; i < 3; i++) {
        mha_out w;
        assert_int_equal(results_run_path(d, t, 0, p, sizeof p), 1);
        assert_int_equal(mha_out_begin(&w, p, MHA_OUT_NOREPLACE, why, sizeof why), MHA_OK);
        assert_int_equal(mha_out_write(&w, texts[i], 1, why, sizeof why), MHA_OK);
        assert_int_equal(results_commit_run(&w, d, t, why, sizeof why), MHA_OK);
        print_message("  %s\n", w.target);
        assert_int_equal(results_run_path(d, t, i, p, sizeof p), 1);
        assert_string_equal(w.target, p);
    }
    for (int i = 0; i < 3; i++) {
        assert_int_equal(results_run_path(d, t, i, p, sizeof p), 1);
        check_text(p, texts[i]);
    }
    assert_int_equal(tu_count_entries(d), 3);
}

static void test_named_fallback(void **state) {
    mha_fileio_force_named_temp = 1;
    test_new_and_replace(state);
    test_replace_keeps_mode(state);
    if (geteuid() == 0) test_replace_other_group(state);
    test_symlink_followed(state);
    test_special_targets_refused(state);
    test_noreplace(state);
    test_abort_leaves_nothing(state);
    test_run_file_names(state);
    mha_fileio_force_named_temp = 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_input_regular_only),
        cmocka_unit_test(test_new_and_replace),
        cmocka_unit_test(test_replace_keeps_mode),
        cmocka_unit_test(test_replace_other_group),
        cmocka_unit_test(test_symlink_followed),
        cmocka_unit_test(test_special_targets_refused),
        cmocka_unit_test(test_noreplace),
        cmocka_unit_test(test_abort_leaves_nothing),
        cmocka_unit_test(test_escape),
        cmocka_unit_test(test_run_file_names),
        cmocka_unit_test(test_named_fallback),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
