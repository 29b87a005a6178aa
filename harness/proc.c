/* proc.c - child programs that a stopping signal ends cleanly (proc.h). */
#include "proc.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "stats.h"
#include "util.h"

extern char **environ;

/* SIGINT, SIGTERM, SIGHUP stop; SIGCHLD wakes the wait */
static const int SIGS[4] = {SIGINT, SIGTERM, SIGHUP, SIGCHLD};
static volatile sig_atomic_t g_caught;
static int g_wake[2] = {-1, -1}; /* the self-pipe: handlers write, the wait polls */

static void wake(void) {
    const int e = errno;
    if (g_wake[1] >= 0) (void)!write(g_wake[1], "", 1); /* full: a wake is pending anyway */
    errno = e;
}
static void on_signal(int sig) {
    if (sig != SIGCHLD && !g_caught) g_caught = sig;
    wake();
}

void proc_signals_catch(proc_signals *sg, const char *who) {
    g_caught = 0;
    sg->who = who;
    if (g_wake[0] < 0 && pipe2(g_wake, O_CLOEXEC | O_NONBLOCK) != 0) g_wake[0] = g_wake[1] = -1;
    for (int i = 0; i < 4; i++) {
        sg->handled[i] = 0;
        if (sigaction(SIGS[i], NULL, &sg->old[i]) != 0 ||
            (SIGS[i] != SIGCHLD && sg->old[i].sa_handler == SIG_IGN))
            continue;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = SA_RESTART | (SIGS[i] == SIGCHLD ? SA_NOCLDSTOP : 0);
        sg->handled[i] = sigaction(SIGS[i], &sa, NULL) == 0;
    }
}

void proc_signals_restore(const proc_signals *sg) {
    for (int i = 0; i < 4; i++)
        if (sg->handled[i]) sigaction(SIGS[i], &sg->old[i], NULL);
}

int proc_signal_pending(const proc_signals *sg) {
    (void)sg;
    return g_caught;
}

/* Sleeps until a handler wrote to the pipe (a signal, a child's end) or ms
 * pass (-1: no limit), then empties the pipe. Without a pipe: ms, or 50. */
static void sleep_for_wake(int ms) {
    if (g_wake[0] < 0) {
        const struct timespec t = {0, (ms < 0 ? 50 : ms) * 1000L * 1000L};
        nanosleep(&t, NULL);
        return;
    }
    struct pollfd pf = {.fd = g_wake[0], .events = POLLIN};
    (void)poll(&pf, 1, ms);
    char buf[64];
    while (read(g_wake[0], buf, sizeof buf) > 0) {
    }
}

/* Stops the process group of a child with sig: waits up to PROC_STOP_GRACE_S
 * for the child to exit, then kills what is left of the group (the child,
 * unreaped until then, keeps the group's id from being reused) and reaps it. */
#define PROC_STOP_GRACE_S 5.0
static void stop_child(pid_t pid, int sig) {
    (void)kill(-pid, sig);
    const double end = now_s() + PROC_STOP_GRACE_S;
    for (;;) {
        siginfo_t si;
        memset(&si, 0, sizeof si);
        const int r = waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT);
        if ((r == 0 && si.si_pid == pid) || (r < 0 && errno != EINTR) || now_s() > end) break;
        sleep_for_wake(50);
    }
    (void)kill(-pid, SIGKILL);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
}

int proc_run(char *const *argv, const char *cwd, const char *out, const char *err,
             const proc_signals *sg, int *caught) {
    if ((*caught = proc_signal_pending(sg)) != 0) return PROC_STOPPED; /* one between two runs */
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (err)
        posix_spawn_file_actions_addopen(&fa, 2, err, O_WRONLY | O_CREAT | O_APPEND, 0644);
    else
        posix_spawn_file_actions_adddup2(&fa, 1, 2);
    if (cwd) posix_spawn_file_actions_addchdir_np(&fa, cwd);
    posix_spawnattr_t at; /* exec resets our handlers to the default; ignored stays ignored */
    posix_spawnattr_init(&at);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&at, 0);
    pid_t pid;
    const int e = strchr(argv[0], '/') ? posix_spawn(&pid, argv[0], &fa, &at, argv, environ)
                                       : posix_spawnp(&pid, argv[0], &fa, &at, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    if (e != 0) {
        errorf_esc("%s: cannot run %s%s%s: %s", sg->who, argv[0], cwd ? " in " : "", cwd ? cwd : "",
                   strerror(e));
        return -1;
    }
    int status;
    for (;;) {
        const pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) break;
        if (r < 0 && errno != EINTR) {
            errorf_esc("%s: waiting for %s: %s", sg->who, argv[0], strerror(errno));
            return -1;
        }
        if (g_caught) {
            stop_child(pid, g_caught);
            *caught = g_caught;
            return PROC_STOPPED;
        }
        /* a child that ended since the waitpid above left a byte: no sleep;
         * the timeout only guards a handler that could not be installed */
        sleep_for_wake(1000);
    }
    if (WIFSIGNALED(status)) {
        errorf_esc("%s: %s died from signal %d", sg->who, argv[0], WTERMSIG(status));
        return -1;
    }
    return WEXITSTATUS(status);
}

static int remove_one(const char *path, const struct stat *st, int type, struct FTW *ftw) {
    (void)st;
    (void)ftw;
    (void)(type == FTW_DP ? rmdir(path) : unlink(path)); /* what is left is said below */
    return 0;
}

void proc_remove_tree(const char *dir, const char *who) {
    if (nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS) != 0 || access(dir, F_OK) == 0)
        fprintf(stderr, "mhabench: %s: could not remove all of %s\n", who, dir);
}

int proc_die_from(int sig, const proc_signals *sg) {
    fprintf(stderr, "mhabench: %s: stopped by signal %d (%s)\n", sg->who, sig, strsignal(sig));
    proc_signals_restore(sg);
    signal(sig, SIG_DFL);
    raise(sig);
    return 128 + sig;
}
