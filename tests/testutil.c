/* testutil.c - see testutil.h. */
#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

void tu_rm_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat sb;
        if (lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode))
            tu_rm_tree(p);
        else
            unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

int tu_count_entries(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

void tu_slurp(const char *path, char *buf, size_t len) {
    buf[0] = '\0';
    FILE *f = fopen(path, "rb");
    if (!f) return;
    const size_t n = fread(buf, 1, len - 1, f);
    buf[n] = '\0';
    fclose(f);
}

int tu_spawn(char *const *argv, const char *dir, char *out, size_t outlen, char *err, size_t errlen,
             int *status) {
    char outp[1024], errp[1024];
    snprintf(outp, sizeof outp, "%s/.stdout", dir);
    snprintf(errp, sizeof errp, "%s/.stderr", dir);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, outp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, errp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid;
    const int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc == 0) {
        while (waitpid(pid, status, 0) < 0 && errno == EINTR) {
        }
        if (out) tu_slurp(outp, out, outlen);
        if (err) tu_slurp(errp, err, errlen);
    }
    unlink(outp);
    unlink(errp);
    return rc;
}

int tu_mkdtemp(char *buf, size_t len, const char *name) {
    const char *tmp = getenv("TMPDIR");
    snprintf(buf, len, "%s/%s.XXXXXX", tmp && *tmp ? tmp : "/tmp", name);
    return mkdtemp(buf) ? 0 : -1;
}

enum { TU_MAX_ARGS = 62 };

int tu_run(const char *prog, const char *const *args, const char *dir, char *out, size_t outlen,
           char *err, size_t errlen) {
    char *argv[TU_MAX_ARGS + 2];
    int n = 0;
    argv[n++] = (char *)prog;
    for (; args[n - 1]; n++) {
        if (n > TU_MAX_ARGS) {
            fprintf(stderr, "tu_run: more than %d arguments for %s\n", TU_MAX_ARGS, prog);
            return -1;
        }
        argv[n] = (char *)args[n - 1];
    }
    argv[n] = NULL;
    int status = 0;
    const int rc = tu_spawn(argv, dir, out, outlen, err, errlen, &status);
    if (rc != 0) {
        fprintf(stderr, "tu_run: cannot run %s: %s\n", prog, strerror(rc));
        return -1;
    }
    if (!WIFEXITED(status)) {
        fprintf(stderr, "tu_run: %s %s died from signal %d\n", prog, args[0] ? args[0] : "",
                WIFSIGNALED(status) ? WTERMSIG(status) : 0);
        return -1;
    }
    return WEXITSTATUS(status);
}

int tu_run_va(const char *prog, const char *first, va_list ap, const char *dir, char *out,
              size_t outlen, char *err, size_t errlen) {
    const char *args[TU_MAX_ARGS + 2];
    int n = 0;
    for (const char *a = first; a; a = va_arg(ap, const char *)) {
        if (n > TU_MAX_ARGS) {
            fprintf(stderr, "tu_run: more than %d arguments for %s\n", TU_MAX_ARGS, prog);
            return -1;
        }
        args[n++] = a;
    }
    args[n] = NULL;
    return tu_run(prog, args, dir, out, outlen, err, errlen);
}

int tu_quick(void) {
    const char *q = getenv("MHA_TEST_QUICK");
    return q && *q && strcmp(q, "0") != 0;
}

int tu_stride(void) {
    if (!tu_quick()) return 1;
    const char *v = getenv("MHA_TEST_STRIDE");
    if (!v || !*v) return 6;
    char *end;
    const long s = strtol(v, &end, 10);
    if (*end || s < 1 || s > 1000) {
        fprintf(stderr, "MHA_TEST_STRIDE='%s': must be an integer from 1 to 1000\n", v);
        abort();
    }
    return (int)s;
}

int tu_take(long i, long salt) {
    const long s = tu_stride();
    if (s == 1) return 1;
    if (salt < 0) salt = -salt;
    return i % s == (i / s + salt) % s;
}
