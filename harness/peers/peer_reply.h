/* peer_reply.h - what a peer helper process says, checked before it is used
 * (harness/peers/peer_py_helper.c speaks the protocol; tests/fuzz/fuzz_peer.c drives
 * the parser): one reply line parsed from a buffer, and a claimed time held to
 * what the machine can do and to the round trip that carried it. Every field
 * of a reply is another process's claim; its text comes back escaped
 * (mha_escape, as .npy header text), so a helper cannot put terminal controls
 * on our output. */
#ifndef MHA_HARNESS_PEER_REPLY_H
#define MHA_HARNESS_PEER_REPLY_H

#include <stddef.h>
#include <stdint.h>

#include "mha.h"

typedef enum {
    PEER_REPLY_OK,      /* {"ok": true, ...} with the fields the op needs */
    PEER_REPLY_REFUSED, /* {"ok": false, "error": "..."}: the helper's own error */
    PEER_REPLY_BAD,     /* not a reply to op: text says what is wrong */
} peer_reply_status;

typedef struct {
    /* OK: "version" (hello) or "settings" (prepare); REFUSED: "error"; BAD:
     * what is wrong. Escaped and NUL-terminated; "" when absent. */
    char text[1024];
    int64_t id;     /* prepare: the instance's id (an integer) */
    double seconds; /* run: the claimed time of one call (a finite number) */
} peer_reply;

/* Parses line[0..n) (any bytes, no newline) as the reply to a request of
 * op: "hello", "prepare" and "run" need their field, any other op only
 * "ok". The whole line must be one JSON object, "ok" a boolean. */
peer_reply_status peer_reply_parse(const char *op, const char *line, size_t n, peer_reply *r);

/* The fastest rate (FLOP/s) a peer's call at `threads` threads on dtype t may
 * claim: 10x the machine's measured single-thread peak for t x threads. For
 * bf16/fp16 the peak is at least 16x the fp32 one: an AMX tile unit, which
 * this machine's measurement does not see, does up to that much more per
 * cycle. Before peer_set_peak, a peak no core reaches (1 TFLOP/s fp32). */
double peer_max_rate(mha_dtype t, int threads);
/* The machine's measured single-thread peak for dtype t (GFLOP/s; the
 * sweep's results_machine_peak); <= 0 keeps the default. */
void peer_set_peak(mha_dtype t, double gflops);

/* 0 when `claimed` seconds for one call of `flops` FLOPs is possible: at
 * least flops / max_rate (peer_max_rate) and at most the `wall` seconds the
 * request that carried the claim took here (the helper's clock runs inside
 * it); else -1 and why, naming the claim and the bound. */
int peer_claim_check(double claimed, double flops, double max_rate, double wall, char *why,
                     size_t len);

#endif
