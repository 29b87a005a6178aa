/* registry.c - the table of every attention kernel, generated from
 * kernels.inc; lookup by name and the "does it run here" check under the
 * MHA_ISA cap. The only place that knows every kernel. */
#include <string.h>

#include "internal.h"

static const mha_kernel kernels[] = {
#define MHA_KERNEL(name, alg, isa, sym, traits, rank, summary)                                     \
    {name, alg, isa, traits, rank, summary, sym##_run, sym##_workspace},
#include "kernels.inc"
#undef MHA_KERNEL
};
enum { n_kernels = sizeof kernels / sizeof kernels[0] };

int mha_kernel_count(void) {
    return n_kernels;
}

const mha_kernel *mha_kernel_at(int index) {
    return index >= 0 && index < n_kernels ? &kernels[index] : NULL;
}

const mha_kernel *mha_kernel_find(const char *name) {
    if (name) {
        for (int i = 0; i < n_kernels; i++)
            if (strcmp(kernels[i].name, name) == 0) return &kernels[i];
    }
    mha_set_error(MHA_EINVAL, "unknown kernel '%s' (see `mhabench list`)", name ? name : "(null)");
    return NULL;
}

const char *mha_kernel_name(const mha_kernel *k) {
    return k ? k->name : "(null)";
}
const char *mha_kernel_algorithm(const mha_kernel *k) {
    return k ? k->algorithm : "(null)";
}
mha_isa mha_kernel_isa(const mha_kernel *k) {
    return k ? k->isa : MHA_ISA_SCALAR;
}
const char *mha_kernel_summary(const mha_kernel *k) {
    return k ? k->summary : "";
}
unsigned mha_kernel_traits(const mha_kernel *k) {
    return k ? k->traits : 0;
}
int mha_kernel_rank(const mha_kernel *k) {
    return k ? k->rank : 0;
}
mha_isa mha_kernel_run_isa(const mha_kernel *k) {
    if (!k) return MHA_ISA_SCALAR;
    return k->traits & MHA_KT_BASELINE ? mha_isa_active() : k->isa;
}

const mha_kernel *mha_kernel_twin(const mha_kernel *k, mha_isa isa) {
    if (k)
        for (int i = 0; i < n_kernels; i++)
            if (kernels[i].isa == isa && strcmp(kernels[i].algorithm, k->algorithm) == 0)
                return &kernels[i];
    return NULL;
}

mha_status mha_kernel_supported(const mha_kernel *k) {
    if (!k) return mha_set_error(MHA_EINVAL, "kernel is NULL");
    const mha_isa det = mha_isa_detected(), act = mha_isa_active();
    if (k->isa > det)
        return mha_set_error(MHA_EUNSUPPORTED,
                             "kernel %s needs %s, which this CPU lacks (best: %s)", k->name,
                             mha_isa_name(k->isa), mha_isa_name(det));
    if (k->isa > act)
        return mha_set_error(MHA_EUNSUPPORTED,
                             "kernel %s needs %s, but MHA_ISA caps dispatch at %s%s", k->name,
                             mha_isa_name(k->isa), mha_isa_name(act),
                             mha_isa_env_status() == MHA_OK ? "" : " (MHA_ISA is malformed)");
    return MHA_OK;
}
