/* select.c - which kernel and knobs to run: mha_select's chain (MHA_KERNEL,
 * then the tuning table matching this CPU (tables.c) for the problem's shape
 * class (classes.c), then the cache model's defaults (cachemodel.c) for the
 * best-ranked kernel that runs here). Built without SIMD flags. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "select.h"

/* ---- mha_select ---------------------------------------------------------------------------- */

/* snprintf for messages that may be cut short: a long table path only
 * truncates the reason, which is fine. */
static void put(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void put(char *buf, size_t len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
}

static int verbose(void) {
    const char *v = getenv("MHA_VERBOSE");
    return v && *v && strcmp(v, "0") != 0;
}

/* A table choice usable here: the kernel exists, runs and takes p's dtypes,
 * the knobs are in range. Otherwise writes why. */
static int choice_usable(const mha_table_choice *c, const mha_problem *p, const mha_kernel **k,
                         char *why, size_t len) {
    if (!c->present) {
        put(why, len, "no entry");
        return 0;
    }
    const mha_kernel *kk = mha_kernel_find(c->kernel);
    if (!kk) {
        put(why, len, "unknown kernel '%s'", c->kernel);
        return 0;
    }
    if (mha_kernel_supported(kk) != MHA_OK) {
        put(why, len, "kernel %s does not run here", c->kernel);
        return 0;
    }
    if (mha_kernel_takes(kk, p) != MHA_OK) {
        if (mha_problem_needs(p) & ~kk->traits)
            put(why, len, "%s", mha_last_error()); /* names the variant */
        else
            put(why, len, "kernel %s does not take dtype %s with a %s K/V cache", c->kernel,
                mha_dtype_name(p->dtype), mha_dtype_name(mha_problem_kv_dtype(p)));
        return 0;
    }
    if (c->block_q < 0 || c->block_q > 4096 || c->block_kv < 0 || c->block_kv > 4096) {
        put(why, len, "%s knobs out of range (block_q %d, block_kv %d; expected 0..4096)",
            c->kernel, c->block_q, c->block_kv);
        return 0;
    }
    if (c->split < MHA_SPLIT_AUTO || c->split > MHA_SPLIT_QBLOCKS) {
        put(why, len, "%s split %d out of range (expected 0..2)", c->kernel, c->split);
        return 0;
    }
    *k = kk;
    return 1;
}

/* Fills block_q / block_kv left at 0 from the cache model. */
/* Blocks left at 0 from the cache model: the library's one resolution
 * (the options were range-checked by mha_select already). */
static void fill_blocks(const mha_problem *p, const mha_kernel *k, mha_options *o) {
    const mha_options req = *o;
    (void)mha_resolve_options(k, p, &req, o);
}

/* The best kernel the CPU runs without a table, by algorithm: decode for a
 * few query rows per KV head (Nq = 1 decode steps: memory-bound, split-KV),
 * else flash; only kernels that take p's dtypes (a bf16 problem never gets
 * an fp32-only kernel, nor an fp32 one a bf16 kernel) and its variants
 * (window, softcap, sinks, head_dim_v: the MHA_KT_* traits; naive, the
 * reference, when no other takes them). NULL when none here takes them. */
const mha_kernel *mha_default_kernel(const mha_problem *p) {
    const int few_rows = p->seq_q * (p->heads / p->kv_heads) <= 8;
    const mha_kernel *best = NULL, *other = NULL, *reference = NULL;
    for (int i = 0; i < mha_kernel_count(); i++) {
        const mha_kernel *k = mha_kernel_at(i);
        if (mha_kernel_supported(k) != MHA_OK || mha_kernel_takes(k, p) != MHA_OK) continue;
        if (k->traits & MHA_KT_EMULATED) continue; /* verification only */
        if (k->traits & MHA_KT_REFERENCE) {
            if (!reference) reference = k;
            continue;
        }
        const mha_kernel **slot = ((k->traits & MHA_KT_DECODE) != 0) == few_rows ? &best : &other;
        if (!*slot || k->rank < (*slot)->rank ||
            (k->rank == (*slot)->rank && k->isa > (*slot)->isa))
            *slot = k;
    }
    mha_clear_error();
    return best ? best : other ? other : reference;
}

/* The table step; returns 1 and fills out when the table decides, else 0
 * with the reason in why. */
static int select_from_table(const mha_problem *p, const mha_options *req, mha_selection *out,
                             char *why, size_t len) {
    char path[1024];
    mha_table_default_path(path, sizeof path);
    const int threads = mha_resolve_threads(req);
    mha_shape_class c;
    mha_class_of(p, threads, &c);
    /* This class, then the same class in the nearest seq bucket. */
    char names[MHA_CLASS_BUCKETS][64];
    const char *ptrs[MHA_CLASS_BUCKETS];
    int n = 0;
    for (int dist = 0; dist < MHA_CLASS_BUCKETS; dist++)
        for (int sgn = -1; sgn <= 1; sgn += 2) {
            if (dist == 0 && sgn > 0) continue;
            const int b = c.bucket + sgn * dist;
            if (b < 0 || b >= MHA_CLASS_BUCKETS) continue;
            mha_shape_class cc = c;
            cc.bucket = b;
            mha_class_name(&cc, names[n], sizeof names[n]);
            ptrs[n] = names[n];
            n++;
        }
    mha_table_entry e;
    int found = 0;
    char tkey[96] = "", tisa[16] = "", lwhy[192] = "";
    mha_status st = mha_table_lookup(path, ptrs, n, c.dtype, c.kv_dtype, &e, &found, tkey,
                                     sizeof tkey, tisa, sizeof tisa, lwhy, sizeof lwhy);
    if (st == MHA_EIO) {
        put(why, len, "no tuning table %s (%s)", path, lwhy);
        return 0;
    }
    if (st != MHA_OK) {
        put(why, len, "tuning table %s ignored: %s", path, lwhy);
        return 0;
    }
    char key[96];
    mha_cpu_key(key, sizeof key);
    const char *isa = mha_isa_name(mha_isa_active());
    if (strcmp(tkey, key) != 0 || strcmp(tisa, isa) != 0) {
        put(why, len,
            "tuning table %s not used: it is for CPU %s (isa %s), this CPU is %s (isa %s)", path,
            tkey, tisa, key, isa);
        return 0;
    }
    if (!found) {
        put(why, len, "tuning table %s has no entry for class %s", path, names[0]);
        return 0;
    }
    const mha_kernel *k = NULL;
    char w1[160], w2[160];
    const mha_table_choice *ch = NULL;
    if (choice_usable(&e.winner, p, &k, w1, sizeof w1))
        ch = &e.winner;
    else if (choice_usable(&e.runner_up, p, &k, w2, sizeof w2))
        ch = &e.runner_up;
    if (!ch) {
        put(why, len, "tuning table %s, class %s: winner skipped (%s), runner-up skipped (%s)",
            path, e.cls, w1, w2);
        return 0;
    }
    out->kernel = k;
    out->options = *req;
    /* The classes are tuned without a window; under one bounded on the
     * left a query block reads W + bq keys, not the class's, so its blocks
     * are the cache model's (which has a rule for short windows), not the
     * table's. */
    const int own_blocks = !mha_window_local(p);
    if (out->options.block_q == 0 && own_blocks) out->options.block_q = ch->block_q;
    if (out->options.block_kv == 0 && own_blocks) out->options.block_kv = ch->block_kv;
    if (out->options.split == 0) out->options.split = ch->split;
    fill_blocks(p, k, &out->options);
    out->source = MHA_CHOICE_TABLE;
    out->expected_gflops = ch->gflops;
    char near[80] = "", skipped[200] = "";
    if (strcmp(e.cls, names[0]) != 0) put(near, sizeof near, " (nearest to %s)", names[0]);
    if (ch == &e.runner_up) put(skipped, sizeof skipped, ", runner-up (winner: %s)", w1);
    put(out->reason, sizeof out->reason, "tuning table %s, class %s%s%s%s", path, e.cls, near,
        skipped,
        own_blocks ? ""
                   : "; blocks from the cache model (a window: the class is tuned without one)");
    return 1;
}

mha_status mha_select(const mha_problem *p, const mha_options *o, mha_selection *out) {
    if (!out) return mha_set_error(MHA_EINVAL, "mha_select: out is NULL");
    memset(out, 0, sizeof *out);
    mha_status st;
    if ((st = mha_problem_validate(p)) != MHA_OK) return st;
    if ((st = mha_check_options(o)) != MHA_OK)
        return st; /* mha_attend's rule, so what
                      it picks, mha_attend runs */
    const mha_options req = o ? *o : (mha_options){0};

    const char *forced = getenv("MHA_KERNEL");
    if (forced && *forced && strcmp(forced, "auto") != 0) {
        const mha_kernel *k = mha_kernel_find(forced);
        if (!k)
            return mha_set_error(MHA_EINVAL,
                                 "MHA_KERNEL='%s' is not a kernel (see `mhabench list`)", forced);
        if ((st = mha_kernel_supported(k)) != MHA_OK || (st = mha_kernel_takes(k, p)) != MHA_OK)
            return mha_set_error(st, "MHA_KERNEL='%s': %s", forced, mha_last_error());
        out->kernel = k;
        out->options = req;
        fill_blocks(p, k, &out->options);
        out->source = MHA_CHOICE_FORCED;
        put(out->reason, sizeof out->reason, "forced by MHA_KERNEL=%s", forced);
    } else {
        char why[sizeof out->reason];
        if (!select_from_table(p, &req, out, why, sizeof why)) {
            const mha_kernel *k = mha_default_kernel(p);
            if (!k)
                return mha_set_error(MHA_EUNSUPPORTED,
                                     "no kernel that runs here takes dtype %s with a "
                                     "%s K/V cache, the problem's variants and its %s layout (%s)",
                                     mha_dtype_name(p->dtype),
                                     mha_dtype_name(mha_problem_kv_dtype(p)),
                                     mha_layout_name(p->layout), why);
            out->kernel = k;
            out->options = req;
            fill_blocks(p, k, &out->options);
            out->source = MHA_CHOICE_DEFAULT;
            out->expected_gflops = 0;
            put(out->reason, sizeof out->reason, "cache-model defaults; %s", why);
        }
    }
    if (verbose())
        fprintf(stderr, "mha_select: %s block_q=%d block_kv=%d split=%d threads=%d (%s): %s\n",
                out->kernel->name, out->options.block_q, out->options.block_kv, out->options.split,
                mha_resolve_threads(&out->options),
                out->source == MHA_CHOICE_FORCED  ? "forced"
                : out->source == MHA_CHOICE_TABLE ? "table"
                                                  : "default",
                out->reason);
    mha_clear_error();
    return MHA_OK;
}
