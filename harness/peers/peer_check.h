/* peer_check.h - a peer's output against the float64 oracle, with the
 * tolerance verify uses for the problem's dtypes (harness/check.c), before
 * the peer is timed. */
#ifndef MHA_HARNESS_PEER_CHECK_H
#define MHA_HARNESS_PEER_CHECK_H

#include "peer.h"

typedef struct {
    double max_err; /* max |out - ref| over the checked elements */
    double tol;     /* the allowed error at that element's |ref| */
    double worst;   /* max over elements of |out - ref| / allowed: <= 1 passes */
    long checked;   /* elements compared */
    char detail[256];
} peer_check_result;

/* The oracle's rows that a check compares: every (batch, query head) when the
 * problem is small, else those of two KV groups (the first group of the
 * first batch and the last of the last batch: a wrong head, batch or group
 * offset shows there) -- all their query rows and dims. Computes them into
 * a new array (free it) for problem p on q, k, v ([B,H,Nq,d], [B,KV,Nkv,d],
 * contiguous, typed; packed and paged as peer_ops.prepare has them, every
 * row checked) and x (may be NULL): when p->sinks, the [H] sink logits, and
 * the layout's index arrays; 0 when out of memory or the oracle refused. */
typedef struct {
    mha_problem p;
    int ngroups;
    int64_t batch[2], group[2]; /* the KV groups checked; ngroups 0: all */
    double *ref; /* per checked group: [G, Nq, d] (all: [B,H,Nq,d], packed and paged [Tq,H,d]) */
    double mag, smax; /* max |v| and the logit bound over what is checked */
} peer_oracle;

int peer_oracle_make(const mha_problem *p, const void *q, const void *k, const void *v,
                     const mha_extras *x, peer_oracle *o);
void peer_oracle_free(peer_oracle *o);

/* Runs pi once (untimed), reads its output and compares the checked rows
 * with o. 1 when every element is within the tolerance, 0 when not, -1
 * when the peer failed or there was nothing to check (a packed or paged
 * problem without query rows; why in r->detail). */
int peer_check(const peer_ops *peer, peer_inst *pi, const peer_oracle *o, peer_check_result *r);

#endif
