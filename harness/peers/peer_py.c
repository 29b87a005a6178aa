/* peer_py.c - the Python peers (peers_py.inc: torch, onnxruntime, openvino,
 * zentorch, ggml): each runs in
 * a long-lived helper process, `python scripts/peers/mha_peer.py --peer NAME
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
 * requests have a deadline (over_deadline), so tiny claims cannot keep a
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

#include "peer.h"
#include "peer_reply.h"

#ifndef MHA_SOURCE_DIR
#define MHA_SOURCE_DIR "."
#endif

extern char **environ;

/* Seconds to wait for a reply: importing torch or openvino takes seconds,
 * compiling a big graph or copying GBs of inputs minutes. MHA_PEERS_WAIT_S
 * caps them all (fail fast on a machine where minutes mean a stuck helper;
 * the tests' stopped-helper case). */
enum {
    WAIT_HELLO = 180,
    WAIT_PREPARE = 600,
    WAIT_RUN = 300,
    WAIT_OUTPUT = 300,
    WAIT_SMALL = 30,
    WAIT_QUIT = 5,
    STRIKES = 2,
    ROW_SLACK_S = 60,
    ROW_RATIO = 100,
    HELPER_SHM_FD = 3,
    MAX_LINE = 1 << 20
};

/* The peer-specific facts of takes(), in one place per peer. */
typedef struct {
    const char *name;                       /* "torch": the helper's --peer and the row names */
    const char *label;                      /* "PyTorch": messages */
    unsigned dtypes;                        /* MHA_DTYPE_BIT of the dtypes taken */
    const char *why_dtype[MHA_DTYPE_COUNT]; /* why one is refused */
    int bf16_needs_isa;    /* bf16 only where the CPU has AVX512_BF16 (else it runs f32) */
    unsigned kv_under_f32; /* MHA_DTYPE_BIT of 16-bit K/V taken under fp32 queries */
    const char *why_i8;    /* why an int8 KV cache is refused (NULL: not an SDPA input) */
} py_rules;

typedef struct {
    const py_rules *r;
    const char *env, *venv, *setup; /* its interpreter (peers_py.inc) */
    pid_t pid;                      /* 0: not running */
    int chan, shm;                  /* -1 when closed */
    unsigned gen;                   /* bumped at each start: instances remember theirs */
    int probed;                     /* 0 not yet, 1 ran, -1 failed (why) */
    int strikes; /* replies it failed to give in time: at STRIKES it is not restarted */
    char why[1024];
    char version[1024]; /* escaped, as all of a helper's text */
    char *buf;          /* received bytes not yet consumed */
    size_t len, cap;
} helper;

struct peer_inst {
    helper *h;
    unsigned gen;
    int64_t id;
    size_t out_bytes;
    char *settings;
    double flops, max_rate; /* what bounds a claimed time (peer_claim_check) */
    double wall, claimed;   /* this instance's run requests: our clock, the helper's */
    int64_t calls;
    char failed[1024]; /* set once a claim was impossible or the deadline passed */
};

static const py_rules RULES_torch = {
    .name = "torch",
    .label = "PyTorch",
    .dtypes = MHA_DTYPE_BIT(MHA_F32) | MHA_DTYPE_BIT(MHA_BF16) | MHA_DTYPE_BIT(MHA_F16),
};
static const py_rules RULES_onnxruntime = {
    .name = "onnxruntime",
    .label = "ONNX Runtime",
    .dtypes = MHA_DTYPE_BIT(MHA_F32) | MHA_DTYPE_BIT(MHA_F16),
    .why_dtype = {[MHA_BF16] = "bf16: ONNX Runtime's CPU execution provider has no bf16 "
                               "MultiHeadAttention kernel (NOT_IMPLEMENTED)"},
};
static const py_rules RULES_openvino = {
    .name = "openvino",
    .label = "OpenVINO",
    .dtypes = MHA_DTYPE_BIT(MHA_F32) | MHA_DTYPE_BIT(MHA_BF16),
    .why_dtype = {[MHA_F16] = "fp16: OpenVINO's CPU plugin computes in fp16 only on AMX-FP16 "
                              "CPUs (elsewhere it would run f32 or bf16 and not be an fp16 peer)"},
    .bf16_needs_isa = 1,
};

/* zentorch (AMD's ZenDNN plugin for PyTorch 2.14.x, in an environment of
 * its own): zentorch_sdpa_attn / zentorch_sdpa, fp32 and bf16. An fp16 call
 * returns numbers too, but through another path than its fp32/bf16 kernels
 * (its errors there are PyTorch's, not ZenDNN's), so it is not offered. */
static const py_rules RULES_zentorch = {
    .name = "zentorch",
    .label = "zentorch",
    .dtypes = MHA_DTYPE_BIT(MHA_F32) | MHA_DTYPE_BIT(MHA_BF16),
    .why_dtype = {[MHA_F16] = "fp16: zentorch's SDPA kernels are fp32 and bf16 (an fp16 call "
                              "takes another, non-ZenDNN path)"},
};

/* llama.cpp's ggml (ggml_flash_attn_ext, from llama-cpp-python's shared
 * libraries): its CPU kernel reads f32 queries and writes f32, with K/V of
 * f32, f16 (llama.cpp's KV cache) or bf16. */
static const py_rules RULES_ggml = {
    .name = "ggml",
    .label = "ggml",
    .dtypes = MHA_DTYPE_BIT(MHA_F32),
    .why_dtype = {[MHA_BF16] = "bf16 queries: ggml's CPU flash attention reads f32 queries and "
                               "writes f32 (its 16-bit form is fp32 Q/O with --kv-dtype fp16 "
                               "or bf16)",
                  [MHA_F16] = "fp16 queries: ggml's CPU flash attention reads f32 queries and "
                              "writes f32 (its 16-bit form is fp32 Q/O with --kv-dtype fp16 "
                              "or bf16)"},
    .kv_under_f32 = MHA_DTYPE_BIT(MHA_F16) | MHA_DTYPE_BIT(MHA_BF16),
    .why_i8 = "int8 KV cache: ggml's q8_0 is another format (blocks of 32 with an fp16 scale "
              "each; ours one float scale per row), so it is not offered as our int8",
};

/* One helper per entry of peers_py.inc, in its order, with the interpreter
 * the list names; each peer's rules (RULES_<name> above) must exist. */
enum {
#define PY(name, env, venv, setup) IDX_##name,
#include "peers_py.inc"
#undef PY
    NPY
};
static helper HELPERS[NPY] = {
#define PY(name, e, v, su)                                                                         \
    {.r = &RULES_##name, .env = e, .venv = v, .setup = su, .chan = -1, .shm = -1},
#include "peers_py.inc"
#undef PY
};

static void setwhy(char *why, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void setwhy(char *why, size_t len, const char *fmt, ...) {
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
static void helper_fail(helper *h, const char *doing, const char *what) {
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
        setwhy(why, len, "no peer Python environment (%s/%s): run %s or set %s", MHA_SOURCE_DIR,
               h->venv, h->setup, h->env);
        return -1;
    }
    const char *script = script_path(scbuf, sizeof scbuf);
    if (access(script, R_OK) != 0) {
        setwhy(why, len, "peer helper script %s: %s (MHA_PEERS_SCRIPT overrides)", script,
               strerror(errno));
        return -1;
    }
    char name[64];
    snprintf(name, sizeof name, "mha-peer-%s", h->r->name);
    int sv[2] = {-1, -1}, ep[2] = {-1, -1};
    int shm = high_fd(memfd_create(name, MFD_CLOEXEC));
    if (shm < 0 || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0 ||
        (sv[1] = high_fd(sv[1])) < 0 || pipe2(ep, O_CLOEXEC) != 0) {
        setwhy(why, len, "cannot set up the %s helper's channels: %s", h->r->name, strerror(errno));
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
        setwhy(why, len, "cannot start the %s helper: fork: %s", h->r->name, strerror(fork_errno));
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
        setwhy(why, len, "cannot run the peer Python %s: %s", py, strerror(e));
        return -1;
    }
    return 0;
}

/* A wait of wait_s seconds, or less under MHA_PEERS_WAIT_S (env). */
static int env_cap(const char *name, int wait_s) {
    const char *env = getenv(name);
    char *end;
    const long cap = env && *env ? strtol(env, &end, 10) : 0;
    return env && *env && !*end && cap > 0 && cap < wait_s ? (int)cap : wait_s;
}

static int wait_cap(int wait_s) {
    return env_cap("MHA_PEERS_WAIT_S", wait_s);
}

/* One request and its reply: 0 with *r (ok true, with the fields the op
 * needs, text escaped), or -1 with why: the helper's own error (it lives on)
 * or what happened to it (then it is stopped and reaped). *wall: the
 * seconds from sending to the whole reply (NULL: not wanted). */
static int request(helper *h, json_object *req, int wait_s, peer_reply *r, double *wall, char *why,
                   size_t len) {
    memset(r, 0, sizeof *r);
    wait_s = wait_cap(wait_s);
    const char *op = json_object_get_string(json_object_object_get(req, "op"));
    if (!h->pid) {
        setwhy(why, len, "%s", h->why[0] ? h->why : "the helper is not running");
        return -1;
    }
    const char *text = json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN);
    const size_t tn = strlen(text);
    char *line = malloc(tn + 2);
    if (!line) {
        setwhy(why, len, "%s: out of memory", h->r->name);
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
            helper_fail(h, op, errno == EPIPE ? "had gone (EPIPE)" : "could not be written to");
            setwhy(why, len, "%s", h->why);
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
                helper_fail(h, op, "sent a reply line over 1 MiB");
                setwhy(why, len, "%s", h->why);
                return -1;
            }
            const size_t cap = h->cap ? 2 * h->cap : 65536;
            char *b = realloc(h->buf, cap);
            if (!b) {
                helper_fail(h, op, "could not be read (out of memory)");
                setwhy(why, len, "%s", h->why);
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
            helper_fail(h, op, what);
            setwhy(why, len, "%s", h->why);
            return -1;
        }
        const ssize_t got = pr < 0 ? -1 : recv(h->chan, h->buf + h->len, h->cap - h->len, 0);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
            helper_fail(h, op, "ended");
            setwhy(why, len, "%s", h->why);
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
        helper_fail(h, op, what);
        setwhy(why, len, "%s", h->why);
        return -1;
    }
    if (st == PEER_REPLY_REFUSED) {
        setwhy(why, len, "%s %s: %s", h->r->name, op, r->text);
        return -1;
    }
    return 0;
}

static json_object *new_request(const char *op) {
    json_object *o = json_object_new_object();
    json_object_object_add(o, "op", json_object_new_string(op));
    return o;
}

/* The helper running and greeted, or -1 with why. One that has missed
 * STRIKES deadlines is not started again: a helper that hangs would cost
 * every later row the whole wait. */
static int helper_start(helper *h, char *why, size_t len) {
    if (h->pid) return 0;
    if (h->strikes >= STRIKES) {
        setwhy(why, len, "%s (%d deadlines missed: not restarted)", h->why, h->strikes);
        return -1;
    }
    h->why[0] = 0;
    if (helper_spawn(h, why, len) != 0) return -1;
    json_object *req = new_request("hello");
    peer_reply r;
    const int rc = request(h, req, WAIT_HELLO, &r, NULL, why, len);
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
static void helper_stop(helper *h) {
    if (h->pid) {
        json_object *req = new_request("quit");
        peer_reply r;
        char why[256];
        (void)request(h, req, WAIT_QUIT, &r, NULL, why, sizeof why);
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
static int shm_size(helper *h, size_t bytes, char *why, size_t len) {
    if (ftruncate(h->shm, (off_t)bytes) == 0) return 0;
    setwhy(why, len, "%s: cannot size the shared region to %zu bytes: %s", h->r->name, bytes,
           strerror(errno));
    return -1;
}

/* Writes n bytes of src at off of the memfd; 0, or -1 with why. */
static int shm_put(helper *h, const void *src, size_t n, size_t off, char *why, size_t len) {
    for (size_t done = 0; done < n;) {
        const ssize_t w = pwrite(h->shm, (const char *)src + done, n - done, (off_t)(off + done));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            setwhy(why, len, "%s: cannot write %zu bytes into the shared region: %s", h->r->name, n,
                   w < 0 ? strerror(errno) : "no progress");
            return -1;
        }
        done += (size_t)w;
    }
    return 0;
}

/* Reads n bytes at offset 0 of the memfd into dst: 0, or -1 when the helper
 * left it shorter than n (a claim of an output that is not there). */
static int shm_get(helper *h, void *dst, size_t n, char *what, size_t len) {
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
static void shm_empty(helper *h) {
    if (h->shm >= 0 && ftruncate(h->shm, 0) != 0) { /* keeps the pages: harmless */
    }
}

/* ---- the peer_ops functions, shared by the Python peers -------------------------- */

static int py_probe(helper *h, char *why, size_t len) {
    if (h->probed == 1 && h->pid) return 1;
    if (h->probed == -1) {
        setwhy(why, len, "%s", h->why);
        return 0;
    }
    char w[1024];
    if (helper_start(h, w, sizeof w) != 0) {
        snprintf(h->why, sizeof h->why, "%s", w);
        h->probed = -1;
        setwhy(why, len, "%s", w);
        return 0;
    }
    h->probed = 1;
    return 1;
}

static int py_takes(const helper *h, const mha_problem *p, char *why, size_t len) {
    const py_rules *r = h->r;
    const mha_dtype kv = mha_problem_kv_dtype(p);
    if (kv == MHA_I8) {
        if (r->why_i8)
            setwhy(why, len, "%s", r->why_i8);
        else
            setwhy(why, len, "int8 KV cache: not a %s SDPA input", r->label);
        return 0;
    }
    if ((unsigned)p->dtype >= MHA_DTYPE_COUNT || !(r->dtypes & MHA_DTYPE_BIT(p->dtype))) {
        const char *w = (unsigned)p->dtype < MHA_DTYPE_COUNT ? r->why_dtype[p->dtype] : NULL;
        setwhy(why, len, "%s", w ? w : "dtype not taken");
        return 0;
    }
    if (kv != p->dtype && !(p->dtype == MHA_F32 && (r->kv_under_f32 & MHA_DTYPE_BIT(kv)))) {
        setwhy(why, len, "K/V of %s under %s queries: %s attention takes one dtype for all",
               mha_dtype_name(kv), mha_dtype_name(p->dtype), r->label);
        return 0;
    }
    if (p->dtype == MHA_BF16 && r->bf16_needs_isa && mha_isa_detected() < MHA_ISA_AVX512BF16) {
        setwhy(why, len, "bf16: %s runs bf16 only with AVX512_BF16 or AMX (this CPU would run f32)",
               r->label);
        return 0;
    }
    if (p->causal && p->seq_q > p->seq_kv) {
        setwhy(why, len,
               "causal with seq_q %lld > seq_kv %lld: its first rows see no key (zeros in our "
               "contract, NaN from a %s mask)",
               (long long)p->seq_q, (long long)p->seq_kv, r->label);
        return 0;
    }
    return 1;
}

static peer_inst *py_prepare(helper *h, const mha_problem *p, int threads, const void *q,
                             const void *k, const void *v, char *why, size_t len) {
    if (mha_problem_validate(p) != MHA_OK) {
        setwhy(why, len, "%s: invalid problem: %s", h->r->name, mha_last_error());
        return NULL;
    }
    if (!py_takes(h, p, why, len)) return NULL;
    if (!h->pid) { /* it ended since the probe: a fresh one */
        char w[1024];
        if (h->probed != 1 || helper_start(h, w, sizeof w) != 0) {
            setwhy(why, len, "%s", h->probed != 1 ? "probe() first" : w);
            return NULL;
        }
    }
    if (threads < 1) threads = mha_resolve_threads(&(mha_options){0});
    const size_t es = mha_dtype_size(p->dtype);
    const size_t kes = mha_dtype_size(mha_problem_kv_dtype(p));
    const size_t qb = (size_t)(p->batch * p->heads * p->seq_q * p->head_dim) * es;
    const size_t kb = (size_t)(p->batch * p->kv_heads * p->seq_kv * p->head_dim) * kes;
    const size_t total = qb + 2 * kb;
    if (shm_size(h, total, why, len) != 0 || shm_put(h, q, qb, 0, why, len) != 0 ||
        shm_put(h, k, kb, qb, why, len) != 0 || shm_put(h, v, kb, qb + kb, why, len) != 0) {
        shm_empty(h);
        return NULL;
    }
    json_object *req = new_request("prepare");
    const struct {
        const char *key;
        int64_t val;
    } ints[] = {{"batch", p->batch},
                {"heads", p->heads},
                {"kv_heads", p->kv_heads},
                {"seq_q", p->seq_q},
                {"seq_kv", p->seq_kv},
                {"head_dim", p->head_dim},
                {"causal", p->causal ? 1 : 0},
                {"threads", threads},
                {"shm_bytes", (int64_t)total},
                {"q", 0},
                {"k", (int64_t)qb},
                {"v", (int64_t)(qb + kb)}};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        json_object_object_add(req, ints[i].key, json_object_new_int64(ints[i].val));
    json_object_object_add(req, "scale", json_object_new_double(mha_problem_scale(p)));
    json_object_object_add(req, "dtype", json_object_new_string(mha_dtype_name(p->dtype)));
    json_object_object_add(req, "kv_dtype",
                           json_object_new_string(mha_dtype_name(mha_problem_kv_dtype(p))));
    peer_reply r;
    const int rc = request(h, req, WAIT_PREPARE, &r, NULL, why, len);
    json_object_put(req);
    shm_empty(h);
    if (rc != 0) return NULL;
    peer_inst *pi = calloc(1, sizeof *pi);
    if (pi) pi->settings = strdup(r.text);
    if (!pi || !pi->settings) {
        free(pi);
        setwhy(why, len, "%s: out of memory", h->r->name);
        return NULL;
    }
    pi->h = h;
    pi->gen = h->gen;
    pi->id = r.id;
    pi->out_bytes = qb;
    pi->flops = mha_problem_flops(p);
    pi->max_rate = peer_max_rate(p->dtype, threads);
    return pi;
}

/* 0 when pi's helper is the one running now, else -1 with why. */
static int inst_alive(const peer_inst *pi, char *why, size_t len) {
    const helper *h = pi->h;
    if (h->pid && h->gen == pi->gen) return 0;
    setwhy(why, len, "%s", h->why[0] ? h->why : "its helper has ended since prepare");
    return -1;
}

static json_object *inst_request(const peer_inst *pi, const char *op) {
    json_object *req = new_request(op);
    json_object_object_add(req, "id", json_object_new_int64(pi->id));
    return req;
}

/* The deadline of one instance (a sweep row): its run requests may take
 * ROW_SLACK_S (MHA_PEERS_ROW_S lowers it) plus ROW_RATIO times the time the
 * helper claims for them. An honest helper's round trip adds tens of
 * microseconds to a call; one whose claims are tiny against the round trip
 * would keep a min-time loop asking forever. */
static int over_deadline(peer_inst *pi, int64_t calls) {
    const double slack = env_cap("MHA_PEERS_ROW_S", ROW_SLACK_S);
    if (!(pi->wall > slack + ROW_RATIO * pi->claimed)) return 0;
    snprintf(pi->failed, sizeof pi->failed,
             "the %s helper, during run: past the row's deadline: %lld calls took %.3g s here "
             "while it claimed %.3g s for them (allowed: %.0f s + %dx the claimed time)",
             pi->h->r->name, (long long)calls, pi->wall, pi->claimed, slack, ROW_RATIO);
    return 1;
}

static int py_run(peer_inst *pi, double *seconds, char *why, size_t len) {
    *seconds = -1;
    if (pi->failed[0]) { /* a lie or a deadline is not retried */
        setwhy(why, len, "%s", pi->failed);
        return -1;
    }
    if (inst_alive(pi, why, len) != 0) return -1;
    json_object *req = inst_request(pi, "run");
    peer_reply r;
    double wall = 0;
    const int rc = request(pi->h, req, WAIT_RUN, &r, &wall, why, len);
    json_object_put(req);
    if (rc != 0) return -1;
    char claim[512];
    if (peer_claim_check(r.seconds, pi->flops, pi->max_rate, wall, claim, sizeof claim) != 0) {
        snprintf(pi->failed, sizeof pi->failed, "the %s helper, during run: %s", pi->h->r->name,
                 claim);
        setwhy(why, len, "%s", pi->failed);
        return -1;
    }
    pi->wall += wall;
    pi->claimed += r.seconds;
    pi->calls++;
    if (over_deadline(pi, pi->calls)) {
        setwhy(why, len, "%s", pi->failed);
        return -1;
    }
    *seconds = r.seconds;
    return 0;
}

static int py_output(peer_inst *pi, void *out, char *why, size_t len) {
    if (inst_alive(pi, why, len) != 0) return -1;
    helper *h = pi->h;
    if (shm_size(h, pi->out_bytes, why, len) != 0) return -1;
    json_object *req = inst_request(pi, "output");
    json_object_object_add(req, "shm_bytes", json_object_new_int64((int64_t)pi->out_bytes));
    json_object_object_add(req, "offset", json_object_new_int64(0));
    peer_reply r;
    int rc = request(h, req, WAIT_OUTPUT, &r, NULL, why, len);
    json_object_put(req);
    char what[256];
    if (rc == 0 && shm_get(h, out, pi->out_bytes, what, sizeof what) != 0) {
        helper_fail(h, "output", what);
        setwhy(why, len, "%s", h->why);
        rc = -1;
    }
    shm_empty(h);
    return rc;
}

static const char *py_settings(const peer_inst *pi) {
    return pi->settings;
}

static void py_release(peer_inst *pi) {
    if (!pi) return;
    char why[256];
    if (inst_alive(pi, why, sizeof why) == 0) {
        json_object *req = inst_request(pi, "release");
        peer_reply r;
        (void)request(pi->h, req, WAIT_SMALL, &r, NULL, why, sizeof why);
        json_object_put(req);
    }
    free(pi->settings);
    free(pi);
}

/* ---- the peers of peers_py.inc ------------------------------------------------------------- */
#define PY_PEER(var, idx, nm)                                                                      \
    static int var##_probe(char *why, size_t len) {                                                \
        return py_probe(&HELPERS[idx], why, len);                                                  \
    }                                                                                              \
    static const char *var##_version(void) {                                                       \
        return HELPERS[idx].version;                                                               \
    }                                                                                              \
    static int var##_takes(const mha_problem *p, char *why, size_t len) {                          \
        return py_takes(&HELPERS[idx], p, why, len);                                               \
    }                                                                                              \
    static peer_inst *var##_prepare(const mha_problem *p, int threads, const void *q,              \
                                    const void *k, const void *v, char *why, size_t len) {         \
        return py_prepare(&HELPERS[idx], p, threads, q, k, v, why, len);                           \
    }                                                                                              \
    static void var##_shutdown(void) {                                                             \
        helper_stop(&HELPERS[idx]);                                                                \
    }                                                                                              \
    const peer_ops var = {                                                                         \
        .name = nm,                                                                                \
        .probe = var##_probe,                                                                      \
        .version = var##_version,                                                                  \
        .takes = var##_takes,                                                                      \
        .prepare = var##_prepare,                                                                  \
        .run = py_run,                                                                             \
        .output = py_output,                                                                       \
        .settings = py_settings,                                                                   \
        .release = py_release,                                                                     \
        .shutdown = var##_shutdown,                                                                \
    }

#define PY(name, env, venv, setup) PY_PEER(peer_##name, IDX_##name, #name);
#include "peers_py.inc"
#undef PY
