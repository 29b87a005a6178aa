/* peer_py.h - what the two halves of the Python peers share (internal to
 * harness/peers/): peer_py_helper.c runs a peer's helper process (spawn,
 * channel, shared memfd, reply deadlines); peer_py.c holds each peer's rules,
 * the peer_ops the sweep calls and the glue generated from peers_py.inc.
 * The protocol is described at the top of peer_py_helper.c. */
#ifndef MHA_PEER_PY_H
#define MHA_PEER_PY_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <json-c/json.h>

#include "peer.h"
#include "peer_reply.h"

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
    unsigned variants;     /* MHA_KT_* attention variants its adapter passes on */
    /* 1: the packed and paged layouts, and dense problems with sinks, go to
     * a PagedAttention op (OpenVINO's; py_takes_paged has what it takes),
     * not to the SDPA call the other rules describe */
    int paged_attention;
    /* where not NULL: the peer's rules beyond the fields above, checked after
     * them (0 with why set: refused) */
    int (*takes_more)(const mha_problem *p, char *why, size_t len);
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

void py_setwhy(char *why, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* A wait of wait_s seconds, or less under the environment variable name. */
int py_env_cap(const char *name, int wait_s);

/* One request and its reply: 0 with *r (ok true, with the fields the op
 * needs, text escaped), or -1 with why: the helper's own error (it lives on)
 * or what happened to it (then it is stopped and reaped). *wall: the
 * seconds from sending to the whole reply (NULL: not wanted). */
int py_request(helper *h, json_object *req, int wait_s, peer_reply *r, double *wall, char *why,
               size_t len);
json_object *py_new_request(const char *op);

/* The helper running and greeted, or -1 with why (not restarted after
 * STRIKES missed deadlines). */
int py_helper_start(helper *h, char *why, size_t len);
/* quit, then reap (killing it when it does not exit). */
void py_helper_stop(helper *h);
/* Stops h's child after a failure and keeps in h->why how it ended. */
void py_helper_fail(helper *h, const char *doing, const char *what);

/* The memfd, by pwrite/pread (never mapped): 0, or -1 with why/what. */
int py_shm_size(helper *h, size_t bytes, char *why, size_t len);
int py_shm_put(helper *h, const void *src, size_t n, size_t off, char *why, size_t len);
int py_shm_get(helper *h, void *dst, size_t n, char *what, size_t len);
void py_shm_empty(helper *h);

#endif
