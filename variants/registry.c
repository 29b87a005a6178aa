/* registry.c - the table of every attention kernel, generated from
 * kernels.inc; lookup by name and the "does it run here" check under the
 * MHA_ISA cap. The only place that knows every kernel. */
#include <stdio.h>
#include <string.h>

#include "cpu.h"
#include "internal.h"

static const mha_kernel kernels[] = {
#define MHA_KERNEL(name, alg, isa, sym, traits, rank, dtypes, kv_dtypes, summary)                  \
    {name, alg, isa, traits, rank, dtypes, kv_dtypes, summary, sym##_run, sym##_workspace},
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
            if (kernels[i].isa == isa && !(kernels[i].traits & MHA_KT_EMULATED) &&
                strcmp(kernels[i].algorithm, k->algorithm) == 0 && kernels[i].dtypes == k->dtypes &&
                kernels[i].kv_dtypes == k->kv_dtypes)
                return &kernels[i];
    return NULL;
}

mha_status mha_kernel_supported(const mha_kernel *k) {
    if (!k) return mha_set_error(MHA_EINVAL, "kernel is NULL");
    const mha_isa det = mha_isa_detected(), act = mha_isa_active();
    if (k->isa > det) {
        /* the tiles' detection has steps: name the one that failed */
        const char *why = NULL;
        if (k->isa == MHA_ISA_AMX) mha_amx_status(&why);
        return mha_set_error(
            MHA_EUNSUPPORTED, "kernel %s needs %s, which this CPU lacks (best: %s)%s%s", k->name,
            mha_isa_name(k->isa), mha_isa_name(det), why ? "; " : "", why ? why : "");
    }
    if (k->isa > act)
        return mha_set_error(MHA_EUNSUPPORTED,
                             "kernel %s needs %s, but MHA_ISA caps dispatch at %s%s", k->name,
                             mha_isa_name(k->isa), mha_isa_name(act),
                             mha_isa_env_status() == MHA_OK ? "" : " (MHA_ISA is malformed)");
    return MHA_OK;
}

unsigned mha_kernel_dtypes(const mha_kernel *k) {
    return k ? k->dtypes : 0;
}
unsigned mha_kernel_kv_dtypes(const mha_kernel *k) {
    return k ? k->kv_dtypes : 0;
}

/* "fp32, bf16" from a mask, into buf. */
static const char *mask_names(unsigned mask, char *buf, size_t n) {
    size_t len = 0;
    buf[0] = 0;
    for (int t = 0; t < MHA_DTYPE_COUNT; t++)
        if (mask & MHA_DTYPE_BIT(t) && len < n)
            len += (size_t)snprintf(buf + len, n - len, "%s%s", len ? ", " : "",
                                    mha_dtype_name((mha_dtype)t));
    return buf;
}

mha_status mha_kernel_takes(const mha_kernel *k, const mha_problem *p) {
    if (!k || !p) return mha_set_error(MHA_EINVAL, "kernel or problem is NULL");
    char buf[64];
    const unsigned missing = mha_problem_needs(p) & ~k->traits;
    /* the layout first: it decides how every tensor is read */
    if (missing & MHA_KT_PACKED)
        return mha_set_error(MHA_EUNSUPPORTED,
                             "kernel %s does not take the packed ragged layout (problem.layout = "
                             "packed: rows by cu_seqlens); see `mhabench list` for the kernels "
                             "that do",
                             k->name);
    if (missing & MHA_KT_PAGED)
        return mha_set_error(MHA_EUNSUPPORTED,
                             "kernel %s does not take the paged KV layout (problem.layout = "
                             "paged: keys by block_table); see `mhabench list` for the kernels "
                             "that do",
                             k->name);
    const mha_dtype kv = mha_problem_kv_dtype(p);
    if (!((unsigned)p->dtype < MHA_DTYPE_COUNT && k->dtypes & MHA_DTYPE_BIT(p->dtype)))
        return mha_set_error(MHA_EUNSUPPORTED, "kernel %s takes dtype %s, not %s", k->name,
                             mask_names(k->dtypes, buf, sizeof buf), mha_dtype_name(p->dtype));
    if (!((unsigned)kv < MHA_DTYPE_COUNT && k->kv_dtypes & MHA_DTYPE_BIT(kv)))
        return mha_set_error(MHA_EUNSUPPORTED, "kernel %s takes a %s K/V cache, not %s", k->name,
                             mask_names(k->kv_dtypes, buf, sizeof buf), mha_dtype_name(kv));
    if (missing & MHA_KT_WINDOW)
        return mha_set_error(MHA_EUNSUPPORTED,
                             "kernel %s does not take a sliding window (problem.window, left "
                             "%lld, right %lld); see `mhabench list` for the kernels that do",
                             k->name, (long long)p->window_left, (long long)p->window_right);
    if (missing & MHA_KT_SOFTCAP)
        return mha_set_error(MHA_EUNSUPPORTED,
                             "kernel %s does not take a logit softcap (problem.softcap = %g)",
                             k->name, (double)p->softcap);
    if (missing & MHA_KT_SINKS)
        return mha_set_error(MHA_EUNSUPPORTED,
                             "kernel %s does not take attention sinks (problem.sinks = %d)",
                             k->name, p->sinks);
    if (missing & MHA_KT_HEAD_DIM_V)
        return mha_set_error(MHA_EUNSUPPORTED,
                             "kernel %s does not take head_dim_v != head_dim (problem.head_dim_v "
                             "= %lld, head_dim = %lld)",
                             k->name, (long long)p->head_dim_v, (long long)p->head_dim);
    return MHA_OK;
}
