/* peers.c - the one list of peers (peer.h): the Python ones always (they are
 * detected at run time), the C ones when meson found their library. */
#include <stdio.h>
#include <string.h>

#include "peer.h"

static const peer_ops *const PEERS[] = {
    &peer_torch,   &peer_onnxruntime, &peer_openvino,
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
    {"torch", NULL},           {"onnxruntime", NULL},      {"openvino", NULL},
    {"onednn", "libdnnl-dev"}, {"libxsmm", "libxsmm-dev"},
};
enum { NKNOWN = sizeof KNOWN / sizeof KNOWN[0] };

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
