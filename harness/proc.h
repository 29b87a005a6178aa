/* proc.h - running the harness's child programs (the sweeps of
 * `compare --ab`, the builds and A/Bs of `bisect`) so that Ctrl-C, kill or a
 * closed terminal stops the child and everything it started, lets the
 * caller remove its scratch files, and then ends this process by the same
 * signal (a shell reports 128 + N: 130 for SIGINT). */
#ifndef MHA_HARNESS_PROC_H
#define MHA_HARNESS_PROC_H

#include <signal.h>

/* The stopping signals (SIGINT, SIGTERM, SIGHUP) get a handler that notes
 * the first one, and SIGCHLD one that says a child ended; both write a byte
 * to a pipe the wait sleeps on (poll), so the wait neither spins nor misses
 * one. Not a blocked mask and sigwaitinfo: a process-directed signal goes to
 * any thread that does not block it, and threads a library starts before
 * main (OpenBLAS's pool) never saw our mask, so one of them took the
 * default action about one time in six. Not a timed poll either: waking
 * every few ms preempted the sweep's threads, whose samples then read as
 * disturbed. One ignored at the start (nohup, a background job of a
 * script) stays ignored. */
typedef struct {
    struct sigaction old[4]; /* the actions before, restored at the end */
    int handled[4];          /* which of SIGINT, SIGTERM, SIGHUP, SIGCHLD got ours */
    const char *who;         /* "compare", "bisect": for messages */
} proc_signals;

void proc_signals_catch(proc_signals *sg, const char *who);
void proc_signals_restore(const proc_signals *sg);
/* A stopping signal already pending (taken), or 0. */
int proc_signal_pending(const proc_signals *sg);

/* Runs argv (PATH searched when argv[0] has no '/'; in cwd when not NULL) in
 * a process group of its own, stdout appended to out and stderr to err
 * (NULL: to out as well). Returns the exit status; -1 (after a message)
 * when it could not start or died from a signal; PROC_STOPPED when a
 * stopping signal came (in *caught; the child's group has been stopped). */
enum { PROC_STOPPED = -2 };
int proc_run(char *const *argv, const char *cwd, const char *out, const char *err,
             const proc_signals *sg, int *caught);

/* Removes dir and everything below it (links are not followed); says so on
 * stderr when something is left. */
void proc_remove_tree(const char *dir, const char *who);

/* After a stopping signal: the mask as it was, then die from the signal;
 * returns 128 + sig should it be blocked there. */
int proc_die_from(int sig, const proc_signals *sg);

#endif
