/* peer.h - peers: other libraries' attention (PyTorch, ONNX Runtime,
 * OpenVINO, zentorch, llama.cpp's ggml, oneDNN, libxsmm), measured as rows of the same sweep as our
 * kernels: `peer.<name>/<our shape part>`, the same FLOP convention, the
 * same inputs, the same measurement core (interference evidence, retakes,
 * intervals), each peer's output checked against the float64 oracle before
 * it is timed.
 *
 * A peer is a table of functions (below) in a module of its own under
 * harness/peers/: the C ones (peer_onednn.c, peer_libxsmm.c) are built when
 * meson finds the library; the Python ones (peers_py.inc: torch,
 * onnxruntime, openvino, zentorch, ggml), each under the interpreter the
 * list names, run in a long-lived helper process (peer_py.c, peer_py_helper.c +
 * scripts/peers/mha_peer.py)
 * that takes shapes and returns its own time of each call, so interpreter
 * start-up and the pipe round trip are never timed. Every peer is optional
 * and detected at run time; none is needed to build or test the suite. */
#ifndef MHA_HARNESS_PEER_H
#define MHA_HARNESS_PEER_H

#include <stddef.h>

#include "mha.h"

/* One prepared (problem, thread count) of a peer: its primitives, graph or
 * session and its own copies of the inputs (the caller's buffers may be
 * freed after prepare returns). */
typedef struct peer_inst peer_inst;

typedef struct peer_ops {
    const char *name; /* "torch", "onnxruntime", ...: rows are peer.<name>/... */
    /* 1 when the peer can run here (library found, helper process started,
     * module imported); else 0 and why in why[len]. Called once before any
     * other function; may be slow (starts a helper). */
    int (*probe)(char *why, size_t len);
    /* After a successful probe: its version ("torch 2.15.0", "oneDNN 2.6.3"). */
    const char *(*version)(void);
    /* 1 when it takes problem p (dtypes, GQA, cross, causal alignment as
     * our contract: bottom-right); else 0 and why. Never called for a
     * layer. */
    int (*takes)(const mha_problem *p, char *why, size_t len);
    /* Prepares p at `threads` threads: q [B,H,Nq,d], k and v [B,KV,Nkv,d]
     * contiguous, of p's dtype and kv dtype (bf16 and fp16 as their 16-bit
     * patterns; int8 is never passed: takes refuses it); in the packed and
     * paged layouts (only to a peer whose takes() accepts them) q [Tq,H,d]
     * and k, v [Tkv,KV,d] or the pools [NB,BS,KV,d], contiguous, as mha.h
     * has them. The peer copies the inputs into memory of its own;
     * primitives, graphs and sessions are created here, outside any timed
     * loop, and one untimed call warms it. x: the call's extras (may be
     * NULL when there are none): sinks, p->sinks' [H] fp32 logits, only
     * to a peer whose takes() accepts sinks; the index arrays of the packed
     * and paged layouts. NULL and why on failure. */
    peer_inst *(*prepare)(const mha_problem *p, int threads, const void *q, const void *k,
                          const void *v, const mha_extras *x, char *why, size_t len);
    /* One call of the attention. *seconds: the peer's own time of that call
     * when it has its own clock (a helper process), else -1 (the caller
     * times it). 0, or -1 with why. */
    int (*run)(peer_inst *pi, double *seconds, char *why, size_t len);
    /* The output of the last run into out: [B,H,Nq,d] contiguous of p's
     * dtype ([Tq,H,d] packed and paged). 0, or -1 with why. Not timed. */
    int (*output)(peer_inst *pi, void *out, char *why, size_t len);
    /* What this instance was set to, one line ("threads=2 graph_opt=all
     * ..."): recorded in the row's label and the context. */
    const char *(*settings)(const peer_inst *pi);
    void (*release)(peer_inst *pi);
    /* Called once at exit (stops a helper process); may be NULL. */
    void (*shutdown)(void);
} peer_ops;

/* Every peer this build knows, in a fixed order (the Python ones of
 * peers_py.inc, then onednn, libxsmm: those built in); *n is the count. */
const peer_ops *const *peer_all(int *n);
/* The peer called name, or NULL. */
const peer_ops *peer_find(const char *name);
/* Every peer the project has an adapter for, built in this build or not,
 * in the order of peer_all; *n is the count. */
/* The most peers the list may name: the sweep's tables are this long
 * (harness/sweep/sweep.h's MAX_PEERS), and peers.c fails to compile when the
 * list outgrows it, rather than the sweep cutting a name off. */
#define MHA_PEERS_MAX 16
const char *const *peer_names(int *n);
/* Why a peer of peer_names is missing from peer_all ("not built: meson did
 * not find its library (libdnnl-dev)"); NULL when it is built. */
const char *peer_not_built(const char *name);

/* The Python peers' interpreter: the variable that names it and the
 * default environment (peers_py.inc); NULL for a name that is not one. */
const char *peer_python_env(const char *name);
const char *peer_python_venv(const char *name);

/* The peers' own modules. */
#define PY(name, env, venv, setup) extern const peer_ops peer_##name; /* peer_py.c */
#include "peers_py.inc"
#undef PY
#ifdef MHA_HAVE_DNNL
extern const peer_ops peer_onednn; /* peer_onednn.c */
#endif
#ifdef MHA_HAVE_XSMM
extern const peer_ops peer_libxsmm; /* peer_libxsmm.c */
#endif

/* 1 when problem p has no attention variant (window, softcap, sinks, d_v
 * != d; mha.h) and no layout other than dense outside `taken` (MHA_KT_*
 * bits: the variants and layouts the peer's adapter passes on), else 0 and
 * why naming the first one refused. Every peer's takes() calls it, so that
 * no adapter times dense attention on a variant row. */
int peer_takes_variants(const mha_problem *p, unsigned taken, char *why, size_t len);

/* The checks every C peer's prepare starts with: a valid problem, one the
 * peer takes (its takes()), and inputs present. 1, or 0 with why set. */
int peer_prepare_ok(const mha_problem *p, int (*takes)(const mha_problem *, char *, size_t),
                    const void *q, const void *k, const void *v, char *why, size_t len);

#endif
