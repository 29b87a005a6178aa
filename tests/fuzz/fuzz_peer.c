/* fuzz_peer.c - libFuzzer target for a peer helper's replies
 * (harness/peers/peer_reply.c, peer_reply_parse and peer_claim_check): the
 * bytes of one reply line, parsed as the answer to each request op. Beyond
 * the sanitizers it checks the contract: a failure says why, text holds no
 * control byte (it reaches terminals) and ends inside its array, a run's
 * seconds are finite, and a claim that passes the check lies within its
 * bounds. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "peers/peer_reply.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_text(const char *s, size_t cap) {
    const char *end = memchr(s, '\0', cap);
    if (!end) abort();
    for (const char *p = s; p < end; p++)
        if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char *const ops[] = {"hello", "prepare", "run", "output", "release", "quit"};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        peer_reply r;
        const peer_reply_status st = peer_reply_parse(ops[i], (const char *)data, size, &r);
        check_text(r.text, sizeof r.text);
        if (st != PEER_REPLY_OK && !r.text[0]) abort(); /* says why */
        if (st != PEER_REPLY_OK || strcmp(ops[i], "run") != 0) continue;
        if (!isfinite(r.seconds)) abort();
        /* 1e4 FLOPs at 1e12 FLOP/s: at least 1e-8 s; a 1 ms round trip */
        char why[512] = "";
        if (peer_claim_check(r.seconds, 1e4, 1e12, 1e-3, why, sizeof why) == 0) {
            if (!(r.seconds >= 1e-8) || r.seconds > 1e-3 * 1.01 + 1e-4) abort();
        } else {
            check_text(why, sizeof why);
            if (!why[0]) abort();
        }
    }
    return 0;
}
