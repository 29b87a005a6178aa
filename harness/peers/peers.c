/* peers.c - the one list of peers (peer.h): the Python ones of peers_py.inc
 * always (they are detected at run time), the C ones when meson found their library. */
#include <stdio.h>
#include <string.h>

#include "peer.h"

static const peer_ops *const PEERS[] = {
#define PY(name, env, venv, setup) &peer_##name,
#include "peers_py.inc"
#undef PY
#ifdef MHA_HAVE_DNNL
    &peer_onednn,
#endif
#ifdef MHA_HAVE_XSMM
    &peer_libxsmm,
#endif
};

const peer_ops *const *peer_all(int *n) {
    *n = (int)(sizeof PEERS / sizeof PEERS[0]);
    return PEERS;
}

const peer_ops *peer_find(const char *name) {
    for (size_t i = 0; i < sizeof PEERS / sizeof PEERS[0]; i++)
        if (strcmp(PEERS[i]->name, name) == 0) return PEERS[i];
    return NULL;
}

/* Each name with the Debian package a C peer is built from (NULL: found at
 * run time). */
static const struct {
    const char *name, *package;
} KNOWN[] = {
#define PY(name, env, venv, setup) {#name, NULL},
#include "peers_py.inc"
#undef PY
    {"onednn", "libdnnl-dev"},
    {"libxsmm", "libxsmm-dev"},
};
enum { NKNOWN = sizeof KNOWN / sizeof KNOWN[0] };
_Static_assert(NKNOWN <= MHA_PEERS_MAX, "more peers than MHA_PEERS_MAX (peer.h): raise it");

const char *const *peer_names(int *n) {
    static const char *names[NKNOWN];
    for (int i = 0; i < NKNOWN; i++) names[i] = KNOWN[i].name;
    *n = NKNOWN;
    return names;
}

const char *peer_not_built(const char *name) {
    static char why[NKNOWN][96];
    if (peer_find(name)) return NULL;
    for (int i = 0; i < NKNOWN; i++)
        if (strcmp(KNOWN[i].name, name) == 0) {
            snprintf(why[i], sizeof why[i], "not built: meson did not find its library (%s)",
                     KNOWN[i].package ? KNOWN[i].package : "?");
            return why[i];
        }
    return NULL;
}

static const struct {
    const char *name, *env, *venv;
} PYTHONS[] = {
#define PY(name, env, venv, setup) {#name, env, venv},
#include "peers_py.inc"
#undef PY
};

const char *peer_python_env(const char *name) {
    for (size_t i = 0; i < sizeof PYTHONS / sizeof PYTHONS[0]; i++)
        if (strcmp(PYTHONS[i].name, name) == 0) return PYTHONS[i].env;
    return NULL;
}

const char *peer_python_venv(const char *name) {
    for (size_t i = 0; i < sizeof PYTHONS / sizeof PYTHONS[0]; i++)
        if (strcmp(PYTHONS[i].name, name) == 0) return PYTHONS[i].venv;
    return NULL;
}

int peer_takes_variants(const mha_problem *p, unsigned taken, char *why, size_t len) {
    const char *no = NULL;
    if (p->layout == MHA_LAYOUT_PACKED && !(taken & MHA_KT_PACKED))
        no = "packed (ragged) layout";
    else if (p->layout == MHA_LAYOUT_PAGED && !(taken & MHA_KT_PAGED))
        no = "paged KV cache";
    else if (p->layout != MHA_LAYOUT_DENSE && p->layout != MHA_LAYOUT_PACKED &&
             p->layout != MHA_LAYOUT_PAGED)
        no = "layout of this number";
    else if (p->window && !(taken & MHA_KT_WINDOW))
        no = "sliding window";
    else if (p->softcap > 0 && !(taken & MHA_KT_SOFTCAP))
        no = "logit softcap";
    else if (p->sinks && !(taken & MHA_KT_SINKS))
        no = "attention sinks";
    else if (p->head_dim_v && p->head_dim_v != p->head_dim && !(taken & MHA_KT_HEAD_DIM_V))
        no = "head_dim_v != head_dim";
    if (no) snprintf(why, len, "its adapter takes no %s", no);
    return !no;
}

int peer_prepare_ok(const mha_problem *p, int (*takes)(const mha_problem *, char *, size_t),
                    const void *q, const void *k, const void *v, char *why, size_t len) {
    if (mha_problem_validate(p) != MHA_OK) {
        snprintf(why, len, "invalid problem: %s", mha_last_error());
        return 0;
    }
    if (!takes(p, why, len)) return 0;
    if (!q || !k || !v) {
        snprintf(why, len, "prepare: q, k and v must not be NULL");
        return 0;
    }
    return 1;
}
