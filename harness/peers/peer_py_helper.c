/* peer_py_helper.c - the helper process of the Python peers (peers_py.inc: torch, onnxruntime,
 * openvino, zentorch, ggml): each runs in a long-lived helper process, `python
 * scripts/peers/mha_peer.py --peer NAME
 * --shm-fd 3`, started lazily by probe() and kept for the whole run, so the
 * interpreter's start-up and imports are never timed; the helper times each
 * call with its own clock, so neither is the round trip.
 *
 * Protocol (also written out at the top of scripts/peers/mha_peer.py):
 *  - the helper's fd 0 is one end of a socketpair (our end: h->chan): one
 *    JSON object per line each way, one reply per request, in order. A
 *    socket, not two pipes, so send(MSG_NOSIGNAL) reports a dead helper as
 *    EPIPE without a SIGPIPE and without touching the process's signal
 *    state. The helper moves the channel off fds 0/1 at once (stdout goes
 *    to stderr), so what a library prints cannot corrupt a reply.
 *  - fd 3 of the helper is a memfd we own (h->shm): bulk data crosses only
 *    through it, never through the JSON. We size it for one request
 *    (inputs at prepare, the output at output), name byte offsets in the
 *    request, and truncate it to 0 afterwards so it holds no memory between
 *    requests. The helper must not resize it.
 *  - replies: {"ok": true, ...} or {"ok": false, "error": "..."}.
 *  - requests: hello -> version; prepare (problem, dtype, threads, resolved
 *    scale, shm_bytes, q/k/v offsets) -> id, settings (the helper copies
 *    the inputs into its own tensors in the layout its library prefers,
 *    builds the graph or session and makes one untimed warm-up call); run
 *    (id) -> seconds, time.perf_counter() around exactly one call; output
 *    (id, shm_bytes, offset) -> the last output, contiguous [B,H,Nq,d] of
 *    the problem's dtype, in the memfd; release (id); quit.
 * No call can hang on a dead or stuck helper: every reply is awaited with
 * poll() and a deadline (600 s for prepare, 300 s for run and output); EOF,
 * EPIPE or a missed deadline stops the helper (SIGKILL when it does not
 * quit), reaps it and is reported with how it ended. The next prepare
 * starts a fresh helper (not after STRIKES missed deadlines); instances of
 * the old one fail with that why.
 * What a helper says is a claim, checked before use (peer_reply.h): a reply
 * line is parsed from its bytes, its text escaped; the memfd is never mapped
 * here (pwrite/pread: a helper that shrinks it gets an error, not our
 * SIGBUS); a claimed time must lie between the problem's FLOPs at 10x the
 * machine's peak and the round trip that carried it; and an instance's run
 * requests have a deadline (over_deadline, peer_py.c), so tiny claims cannot keep a
 * min-time loop asking for ever. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include "peer_py.h"

#ifndef MHA_SOURCE_DIR
#define MHA_SOURCE_DIR "."
#endif

extern char **environ;

void py_setwhy(char *why, size_t len, const char *fmt, ...) {
    if (!why || !len) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, len, fmt, ap);
    va_end(ap);
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* fd moved to >= 10 (close-on-exec), so the child's dup2 onto 0, 1 and 3
 * can never overwrite one of its own sources. */
static int high_fd(int fd) {
    if (fd < 0 || fd >= 10) return fd;
    int h = fcntl(fd, F_DUPFD_CLOEXEC, 10);
    close(fd);
    return h;
}

/* ---- process plumbing ---------------------------------------------------------- */

/* How a reaped child ended: "exited with status 1", "killed by signal 9
 * (Killed)". */
static void describe_status(int st, char *buf, size_t len) {
    if (WIFEXITED(st))
        snprintf(buf, len, "exited with status %d", WEXITSTATUS(st));
    else if (WIFSIGNALED(st))
        snprintf(buf, len, "killed by signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
    else
        snprintf(buf, len, "ended (wait status %#x)", (unsigned)st);
}

/* Reaps h's child, waiting up to grace seconds for it to exit by itself
 * and then killing it; describes how it ended into buf. */
static void reap(helper *h, double grace, char *buf, size_t len) {
    int st = 0;
    pid_t r = 0;
    const double end = now_s() + grace;
    while ((r = waitpid(h->pid, &st, WNOHANG)) == 0 && now_s() < end) {
        struct timespec ms = {0, 10 * 1000 * 1000};
        nanosleep(&ms, NULL);
    }
    if (r == 0) {
        kill(h->pid, SIGKILL);
        while ((r = waitpid(h->pid, &st, 0)) < 0 && errno == EINTR) {
        }
    }
    if (buf && len) {
        if (r == h->pid)
            describe_status(st, buf, len);
        else
            snprintf(buf, len, "could not be reaped (%s)", strerror(errno));
    }
    h->pid = 0;
}

static void close_fds(helper *h) {
    if (h->chan >= 0) close(h->chan);
    if (h->shm >= 0) close(h->shm);
    h->chan = h->shm = -1;
    free(h->buf);
    h->buf = NULL;
    h->len = h->cap = 0;
}

/* Stops h's child after a failure (no quit: it may be stuck) and keeps in
 * h->why how it ended, prefixed with what we were doing. */
void py_helper_fail(helper *h, const char *doing, const char *what) {
    char how[128] = "";
    const pid_t pid = h->pid;
    if (h->chan >= 0) shutdown(h->chan, SHUT_RDWR); /* an alive helper reads EOF */
    if (pid) reap(h, 1.0, how, sizeof how);
    close_fds(h);
    snprintf(h->why, sizeof h->why, "the %s helper (pid %ld), during %s: %s%s%s%s", h->r->name,
             (long)pid, doing, what, how[0] ? " (" : "", how, how[0] ? ")" : "");
}

/* The interpreter of h's peer: its variable (MHA_PEERS_PYTHON for most,
 * MHA_PEERS_PYTHON_ZENTORCH for zentorch), else <source>/<its venv>/bin/python3
 * when that exists, else NULL. */
static const char *python_path(const helper *h, char *buf, size_t len) {
    const char *env = getenv(h->env);
    if (env && *env) return env;
    snprintf(buf, len, "%s/%s/bin/python3", MHA_SOURCE_DIR, h->venv);
    return access(buf, X_OK) == 0 ? buf : NULL;
}

static const char *script_path(char *buf, size_t len) {
    const char *env = getenv("MHA_PEERS_SCRIPT");
    if (env && *env) return env;
    snprintf(buf, len, "%s/scripts/peers/mha_peer.py", MHA_SOURCE_DIR);
    return buf;
}

/* Starts h's child; 0, or -1 with why. Does not say hello. */
static int helper_spawn(helper *h, char *why, size_t len) {
    char pybuf[4096], scbuf[4096];
    const char *py = python_path(h, pybuf, sizeof pybuf);
    if (!py) {
        py_setwhy(why, len, "no peer Python environment (%s/%s): run %s or set %s", MHA_SOURCE_DIR,
                  h->venv, h->setup, h->env);
        return -1;
    }
    const char *script = script_path(scbuf, sizeof scbuf);
    if (access(script, R_OK) != 0) {
        py_setwhy(why, len, "peer helper script %s: %s (MHA_PEERS_SCRIPT overrides)", script,
                  strerror(errno));
        return -1;
    }
    char name[64];
    snprintf(name, sizeof name, "mha-peer-%s", h->r->name);
    int sv[2] = {-1, -1}, ep[2] = {-1, -1};
    int shm = high_fd(memfd_create(name, MFD_CLOEXEC));
    if (shm < 0 || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0 ||
        (sv[1] = high_fd(sv[1])) < 0 || pipe2(ep, O_CLOEXEC) != 0) {
        py_setwhy(why, len, "cannot set up the %s helper's channels: %s", h->r->name,
                  strerror(errno));
        if (shm >= 0) close(shm);
        for (int i = 0; i < 2; i++) {
            if (sv[i] >= 0) close(sv[i]);
            if (ep[i] >= 0) close(ep[i]);
        }
        return -1;
    }
    char fdarg[16];
    snprintf(fdarg, sizeof fdarg, "%d", HELPER_SHM_FD);
    char *const argv[] = {(char *)py, (char *)script, "--peer", (char *)h->r->name,
                          "--shm-fd", fdarg,          NULL};
    /* Every CPU: a child inherits the forking thread's affinity, and the
     * sweep pins its main thread to one core (--bind cores), which put a
     * 2-thread peer on one core (OpenVINO's 2-thread rows equalled its
     * 1-thread ones). A library in the helper places its own threads. */
    cpu_set_t all;
    CPU_ZERO(&all);
    const long ncpu = sysconf(_SC_NPROCESSORS_CONF);
    for (long i = 0; i < ncpu && i < CPU_SETSIZE; i++) CPU_SET((int)i, &all);
    const pid_t pid = fork();
    if (pid == 0) {
        /* only async-signal-safe calls until exec: the parent may have threads */
        (void)sched_setaffinity(0, sizeof all, &all); /* a raw system call */
        int ok = dup2(sv[1], 0) == 0 && dup2(2, 1) == 1 && dup2(shm, HELPER_SHM_FD) >= 0;
        /* its own process group: a ^C meant for mhabench reaches the helper
         * as EOF when mhabench has gone, not as a KeyboardInterrupt mid-reply */
        setpgid(0, 0);
        if (ok) execve(py, argv, environ);
        const int e = errno;
        ssize_t w = write(ep[1], &e, sizeof e);
        (void)w;
        _exit(127);
    }
    const int fork_errno = errno;
    close(sv[1]);
    close(ep[1]);
    if (pid < 0) {
        close(sv[0]);
        close(ep[0]);
        close(shm);
        py_setwhy(why, len, "cannot start the %s helper: fork: %s", h->r->name,
                  strerror(fork_errno));
        return -1;
    }
    /* exec succeeded iff the close-on-exec pipe closes without a word */
    int e = 0;
    ssize_t n;
    while ((n = read(ep[0], &e, sizeof e)) < 0 && errno == EINTR) {
    }
    close(ep[0]);
    h->pid = pid;
    h->chan = sv[0];
    h->shm = shm;
    h->gen++;
    if (n == (ssize_t)sizeof e) {
        close_fds(h);
        reap(h, 5.0, NULL, 0);
        py_setwhy(why, len, "cannot run the peer Python %s: %s", py, strerror(e));
        return -1;
    }
    return 0;
}

/* A wait of wait_s seconds, or less under MHA_PEERS_WAIT_S (env). */
int py_env_cap(const char *name, int wait_s) {
    const char *env = getenv(name);
    char *end;
    const long cap = env && *env ? strtol(env, &end, 10) : 0;
    return env && *env && !*end && cap > 0 && cap < wait_s ? (int)cap : wait_s;
}

static int wait_cap(int wait_s) {
    return py_env_cap("MHA_PEERS_WAIT_S", wait_s);
}

/* One request and its reply: 0 with *r (ok true, with the fields the op
 * needs, text escaped), or -1 with why: the helper's own error (it lives on)
 * or what happened to it (then it is stopped and reaped). *wall: the
 * seconds from sending to the whole reply (NULL: not wanted). */
int py_request(helper *h, json_object *req, int wait_s, peer_reply *r, double *wall, char *why,
               size_t len) {
    memset(r, 0, sizeof *r);
    wait_s = wait_cap(wait_s);
    const char *op = json_object_get_string(json_object_object_get(req, "op"));
    if (!h->pid) {
        py_setwhy(why, len, "%s", h->why[0] ? h->why : "the helper is not running");
        return -1;
    }
    const char *text = json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN);
    const size_t tn = strlen(text);
    char *line = malloc(tn + 2);
    if (!line) {
        py_setwhy(why, len, "%s: out of memory", h->r->name);
        return -1;
    }
    memcpy(line, text, tn);
    line[tn] = '\n';
    const double t0 = now_s();
    size_t sent = 0;
    while (sent < tn + 1) {
        const ssize_t s = send(h->chan, line + sent, tn + 1 - sent, MSG_NOSIGNAL);
        if (s < 0 && errno == EINTR) continue;
        if (s <= 0) {
            free(line);
            py_helper_fail(h, op, errno == EPIPE ? "had gone (EPIPE)" : "could not be written to");
            py_setwhy(why, len, "%s", h->why);
            return -1;
        }
        sent += (size_t)s;
    }
    free(line);
    /* read until a newline, within the deadline */
    const double end = t0 + wait_s;
    char *nl;
    while (!(nl = h->buf ? memchr(h->buf, '\n', h->len) : NULL)) {
        if (h->len + 4096 > h->cap) {
            if (h->cap >= MAX_LINE) {
                py_helper_fail(h, op, "sent a reply line over 1 MiB");
                py_setwhy(why, len, "%s", h->why);
                return -1;
            }
            const size_t cap = h->cap ? 2 * h->cap : 65536;
            char *b = realloc(h->buf, cap);
            if (!b) {
                py_helper_fail(h, op, "could not be read (out of memory)");
                py_setwhy(why, len, "%s", h->why);
                return -1;
            }
            h->buf = b;
            h->cap = cap;
        }
        const double left = end - now_s();
        struct pollfd pf = {.fd = h->chan, .events = POLLIN};
        const int pr = left > 0 ? poll(&pf, 1, (int)(left * 1000) + 1) : 0;
        if (pr < 0 && errno == EINTR) continue;
        if (pr == 0) {
            char what[96];
            snprintf(what, sizeof what, "gave no answer within %d s, so mhabench stopped it",
                     wait_s);
            h->strikes++;
            py_helper_fail(h, op, what);
            py_setwhy(why, len, "%s", h->why);
            return -1;
        }
        const ssize_t got = pr < 0 ? -1 : recv(h->chan, h->buf + h->len, h->cap - h->len, 0);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
            py_helper_fail(h, op, "ended");
            py_setwhy(why, len, "%s", h->why);
            return -1;
        }
        h->len += (size_t)got;
    }
    if (wall) *wall = now_s() - t0;
    const size_t used = (size_t)(nl - h->buf) + 1;
    const peer_reply_status st = peer_reply_parse(op, h->buf, used - 1, r);
    memmove(h->buf, h->buf + used, h->len - used);
    h->len -= used;
    if (st == PEER_REPLY_BAD) {
        char what[1100];
        snprintf(what, sizeof what, "sent %s", r->text);
        py_helper_fail(h, op, what);
        py_setwhy(why, len, "%s", h->why);
        return -1;
    }
    if (st == PEER_REPLY_REFUSED) {
        py_setwhy(why, len, "%s %s: %s", h->r->name, op, r->text);
        return -1;
    }
    return 0;
}

json_object *py_new_request(const char *op) {
    json_object *o = json_object_new_object();
    json_object_object_add(o, "op", json_object_new_string(op));
    return o;
}

/* The helper running and greeted, or -1 with why. One that has missed
 * STRIKES deadlines is not started again: a helper that hangs would cost
 * every later row the whole wait. */
int py_helper_start(helper *h, char *why, size_t len) {
    if (h->pid) return 0;
    if (h->strikes >= STRIKES) {
        py_setwhy(why, len, "%s (%d deadlines missed: not restarted)", h->why, h->strikes);
        return -1;
    }
    h->why[0] = 0;
    if (helper_spawn(h, why, len) != 0) return -1;
    json_object *req = py_new_request("hello");
    peer_reply r;
    const int rc = py_request(h, req, WAIT_HELLO, &r, NULL, why, len);
    json_object_put(req);
    if (rc != 0) {
        if (h->pid) {
            /* its import failed: no use keeping it */
            if (h->chan >= 0) shutdown(h->chan, SHUT_RDWR);
            reap(h, WAIT_QUIT, NULL, 0);
            close_fds(h);
        }
        return -1;
    }
    snprintf(h->version, sizeof h->version, "%s", r.text[0] ? r.text : h->r->name);
    return 0;
}

/* quit, then reap (killing it when it does not exit). */
void py_helper_stop(helper *h) {
    if (h->pid) {
        json_object *req = py_new_request("quit");
        peer_reply r;
        char why[256];
        (void)py_request(h, req, WAIT_QUIT, &r, NULL, why, sizeof why);
        json_object_put(req);
        if (h->pid) {
            if (h->chan >= 0) shutdown(h->chan, SHUT_RDWR);
            reap(h, WAIT_QUIT, NULL, 0);
        }
    }
    close_fds(h);
    h->probed = 0;
    h->strikes = 0;
    h->why[0] = 0;
}

/* The memfd is shared with another process that can resize it at any
 * moment, so it is never mapped here (a copy from a mapping the helper has
 * shrunk is a SIGBUS): bytes go in with pwrite and come out with pread,
 * which see the file's size as it is. */

/* Sizes the memfd to bytes; 0, or -1 with why. */
int py_shm_size(helper *h, size_t bytes, char *why, size_t len) {
    if (ftruncate(h->shm, (off_t)bytes) == 0) return 0;
    py_setwhy(why, len, "%s: cannot size the shared region to %zu bytes: %s", h->r->name, bytes,
              strerror(errno));
    return -1;
}

/* Writes n bytes of src at off of the memfd; 0, or -1 with why. */
int py_shm_put(helper *h, const void *src, size_t n, size_t off, char *why, size_t len) {
    for (size_t done = 0; done < n;) {
        const ssize_t w = pwrite(h->shm, (const char *)src + done, n - done, (off_t)(off + done));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            py_setwhy(why, len, "%s: cannot write %zu bytes into the shared region: %s", h->r->name,
                      n, w < 0 ? strerror(errno) : "no progress");
            return -1;
        }
        done += (size_t)w;
    }
    return 0;
}

/* Reads n bytes at offset 0 of the memfd into dst: 0, or -1 when the helper
 * left it shorter than n (a claim of an output that is not there). */
int py_shm_get(helper *h, void *dst, size_t n, char *what, size_t len) {
    struct stat sb;
    if (fstat(h->shm, &sb) != 0) {
        snprintf(what, len, "left a shared region that cannot be examined (%s)", strerror(errno));
        return -1;
    }
    size_t done = 0;
    while ((off_t)n <= sb.st_size && done < n) {
        const ssize_t r = pread(h->shm, (char *)dst + done, n - done, (off_t)done);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break; /* shrunk after the fstat */
        done += (size_t)r;
    }
    if (done == n) return 0;
    if (fstat(h->shm, &sb) != 0) sb.st_size = (off_t)done;
    snprintf(what, len,
             "replied that its output was written but left the shared region at %lld bytes, "
             "short of the output's %zu (a helper must not resize it)",
             (long long)sb.st_size, n);
    return -1;
}

/* Empties the memfd (it holds no memory between requests). */
void py_shm_empty(helper *h) {
    if (h->shm >= 0 && ftruncate(h->shm, 0) != 0) { /* keeps the pages: harmless */
    }
}
