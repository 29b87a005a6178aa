/* peers.c - the one list of peers (peer.h): the Python ones always (they are
 * detected at run time), the C ones when meson found their library. */
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
