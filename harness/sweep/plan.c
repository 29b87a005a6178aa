/* plan.c - the sweep's benchmark list: the shapes (grid, presets' extra
 * shapes, dtypes), one row per (kernel or peer, shape, threads) with its
 * FLOPs, roofline and estimated time, the skips, and a fleet shard of it. */
#include "sweep.h"

/* Rate of a kernel (GFLOP/s, 1 thread) on B1 H1 N256 d64: the best of a few
 * calls after a warm-up; the basis of the time estimates. 0 on failure. In
 * fp32, or the first dtype the kernel takes (flash.avx512bf16 takes no fp32:
 * probed in fp32 it read 0 and every row of it was skipped as too slow). */
double probe_rate(const mha_kernel *k) {
    shape s = {.b = 1, .h = 1, .kv = 1, .nq = 256, .nkv = 256, .d = 64, .dtype = MHA_F32};
    const unsigned dts = mha_kernel_dtypes(k);
    for (int t = MHA_F32; t < MHA_DTYPE_COUNT && !(dts & MHA_DTYPE_BIT(s.dtype)); t++)
        s.dtype = (mha_dtype)t;
    meas_call c;
    const mha_options one = {.threads = 1};
    if (meas_prepare(&sweep_pool, k, &s, &one, &c) || meas_run(&c) != MHA_OK) return 0;
    const double flops = meas_flops(&s);
    double times[20], best = 1e30;
    const int n = meas_repeat(&c, times, 3, 20, 0.03, NULL);
    for (int i = 0; i < n; i++)
        if (times[i] < best) best = times[i];
    return flops / (best > 1e-9 ? best : 1e-9) * 1e-9;
}

void shape_text(const shape *s, char *buf, size_t len) {
    char kv[32] = "", seq[64];
    if (s->kv != s->h) snprintf(kv, sizeof kv, " KV=%lld", (long long)s->kv);
    if (s->nq == s->nkv)
        snprintf(seq, sizeof seq, "N=%lld", (long long)s->nq);
    else
        snprintf(seq, sizeof seq, "Nq=%lld Nkv=%lld", (long long)s->nq, (long long)s->nkv);
    if (s->layer)
        snprintf(buf, len, "layer B=%lld N=%lld d_model=%lld H=%lld causal=%d%s%s", (long long)s->b,
                 (long long)s->nq, (long long)(s->h * s->d), (long long)s->h, s->causal,
                 s->dtype != MHA_F32 ? " " : "",
                 s->dtype != MHA_F32 ? mha_dtype_name(s->dtype) : "");
    else {
        const mha_dtype kvt = s->kv_dtype ? s->kv_dtype : s->dtype;
        char dt[48] = "";
        if (s->dtype != MHA_F32 || kvt != MHA_F32)
            snprintf(dt, sizeof dt, " %s", mha_dtype_name(s->dtype));
        if (kvt != s->dtype) {
            const size_t n = strlen(dt);
            snprintf(dt + n, sizeof dt - n, " kv=%s", mha_dtype_name(kvt));
        }
        char var[96];
        snprintf(buf, len, "B=%lld H=%lld%s %s d=%lld causal=%d%s%s", (long long)s->b,
                 (long long)s->h, kv, seq, (long long)s->d, s->causal,
                 meas_variant_text(s, var, sizeof var), dt);
    }
}

void note_add(note_list *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void note_add(note_list *l, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 16;
        l->items = sweep_realloc(l->items, (size_t)l->cap, sizeof *l->items);
    }
    l->items[l->n++].text = xstrdup_or_exit(buf, "sweep");
}

void note_free(note_list *l) {
    for (int i = 0; i < l->n; i++) free(l->items[i].text);
    free(l->items);
}

/* How many of the names Google Benchmark's filter selects (for the progress
 * denominator only; Google Benchmark does the real selection). -1 when the
 * filter is not a POSIX extended regex. */
int count_filtered(const bench *benches, int n, const char *filter, unsigned char *match) {
    if (match) memset(match, 1, (size_t)n);
    if (!filter || !*filter || strcmp(filter, "all") == 0) return n;
    int negate = filter[0] == '-';
    regex_t re;
    if (regcomp(&re, filter + negate, REG_EXTENDED | REG_NOSUB) != 0) return -1;
    int count = 0;
    for (int i = 0; i < n; i++) {
        char full[300];
        snprintf(full, sizeof full, "%s/real_time", benches[i].name);
        const int hit = (regexec(&re, full, 0, NULL, 0) == 0) != negate;
        if (match) match[i] = (unsigned char)hit;
        count += hit;
    }
    regfree(&re);
    return count;
}

/* The dtype part of a row's name: "" for fp32 rows (today's names), else
 * "/dtype:bf16" and, when K/V is stored otherwise, "/kv_dtype:int8". */
const char *dtype_part(const mha_problem *p, char *buf, size_t len) {
    const mha_dtype kv = mha_problem_kv_dtype(p);
    size_t n = 0;
    buf[0] = '\0';
    if (p->dtype != MHA_F32) n = (size_t)snprintf(buf, len, "/dtype:%s", mha_dtype_name(p->dtype));
    if (kv != p->dtype && n < len) snprintf(buf + n, len - n, "/kv_dtype:%s", mha_dtype_name(kv));
    return buf;
}

/* The shapes once per dtype: each Q/O dtype of the mask, K/V stored in it,
 * or for decode rows (Nq = 1) in each of kv_mask when given; an fp32 cache
 * under bf16/fp16 queries is not a problem the API offers. A layer shape
 * runs in each dtype of the mask (weights, inputs and output in it; the
 * kernels that take it make rows). Returns the new array (freeing shapes) and its count in *count.
 */
shape *expand_dtypes(shape *shapes, int *count, unsigned dt_mask, unsigned kv_mask) {
    int n = 0;
    const size_t cap = (size_t)*count * MHA_DTYPE_COUNT * MHA_DTYPE_COUNT + 1;
    shape *out = sweep_realloc(NULL, cap, sizeof *out);
    for (int dt = MHA_F32; dt < MHA_DTYPE_COUNT; dt++) {
        if (!(dt_mask & MHA_DTYPE_BIT(dt))) continue;
        for (int i = 0; i < *count; i++) {
            const shape *s = &shapes[i];
            if (s->layer) {
                out[n] = *s;
                out[n].dtype = (mha_dtype)dt;
                out[n++].kv_dtype = MHA_F32;
                continue;
            }
            for (int kv = MHA_F32; kv < MHA_DTYPE_COUNT; kv++) {
                const int want =
                    s->nq == 1 && kv_mask ? (kv_mask & MHA_DTYPE_BIT(kv)) != 0 : kv == dt;
                if (!want || (dt != MHA_F32 && kv == MHA_F32)) continue;
                out[n] = *s;
                out[n].dtype = (mha_dtype)dt;
                out[n].kv_dtype = kv == dt ? MHA_F32 : (mha_dtype)kv;
                n++;
            }
        }
    }
    free(shapes);
    *count = n;
    return out;
}

/* The benchmarks, grouped by (shape, threads), estimated and maybe skipped
 * (each skip a note in skipped). Returns the array (*nbench of them, in
 * *ngroups groups). */
/* Each distinct (kernel, knobs, shape, threads) is measured once: an `auto`
 * row whose choice equals an explicit row of its group (options resolved the
 * one way, mha_resolve_options) is dropped and that row marked; aliases gets
 * "auto/<shape> = <row name>" for the result's context. Returns the count. */
int fold_auto(bench *benches, int nbench, note_list *aliases) {
    for (int i = 0; i < nbench; i++) {
        bench *a = &benches[i];
        if (!a->is_auto) continue;
        const mha_problem p = meas_problem(&a->s);
        mha_options ra, rb;
        if (mha_resolve_options(a->k, &p, &a->opts, &ra) != MHA_OK) continue;
        for (int j = 0; j < nbench; j++) {
            bench *b = &benches[j];
            if (b->is_auto || b->group != a->group || b->k != a->k ||
                mha_resolve_options(b->k, &p, &b->opts, &rb) != MHA_OK)
                continue;
            if (ra.block_q != rb.block_q || ra.block_kv != rb.block_kv || ra.split != rb.split ||
                mha_resolve_threads(&ra) != mha_resolve_threads(&rb))
                continue;
            b->auto_same = 1;
            snprintf(b->auto_label, sizeof b->auto_label, "%s", a->label);
            note_add(aliases, "%s = %s", a->name, b->name);
            a->is_auto = -1; /* dropped below */
            break;
        }
    }
    int o = 0;
    for (int i = 0; i < nbench; i++)
        if (benches[i].is_auto >= 0) benches[o++] = benches[i];
    return o;
}

/* What row b is judged against: its FLOPs (a layer's with the projections),
 * the bytes it moves at the storage widths (K/V x its dtype's size, + int8
 * scales, Q/O at theirs), its compute peak (bench_peak), and the read bandwidth of where its
 * working set lives (a decode row reads K and V once per call: judged against a plain read of the
 * same bytes at the same thread count, its level named). */
void bench_roofline(const bench_plan *pl, bench *b) {
    const shape *s = &b->s;
    if (s->layer) {
        const mha_layer lay = meas_layer(s, NULL);
        const mha_layer_shape lsh = {s->b, s->nq, s->nkv, s->causal, 0.0f};
        b->flops = mha_forward_flops(&lay, &lsh);
    } else {
        b->flops = meas_flops(s);
    }
    b->kv_bytes = meas_io_bytes(s);
    b->peak = bench_peak(pl->rm, b);
    b->level = machine_level_of(&pl->rm->m, b->kv_bytes, b->threads);
    b->bw = s->nq == 1 && !s->layer ? results_read_bw_at(b->kv_bytes, b->threads)
                                    : results_level_bw(pl->rm, b->level, b->threads);
}

/* A row's name: the kernel (or auto, peer.<name>), the shape, its dtype and
 * variant parts (only where not the default: every name as before), the
 * threads. */
static void row_name(char *buf, size_t len, const char *kname, const shape *s, const mha_problem *p,
                     int threads) {
    char dtp[48], var[96];
    if (s->layer)
        snprintf(buf, len, "layer/%s/B:%lld/N:%lld/dm:%lld/H:%lld/causal:%d%s/threads:%d", kname,
                 (long long)s->b, (long long)s->nq, (long long)(s->h * s->d), (long long)s->h,
                 s->causal, dtype_part(p, dtp, sizeof dtp), threads);
    else
        snprintf(buf, len,
                 "%s/B:%lld/H:%lld/KV:%lld/Nq:%lld/Nkv:%lld/d:%lld/causal:%d%s%s/threads:%d", kname,
                 (long long)s->b, (long long)s->h, (long long)s->kv, (long long)s->nq,
                 (long long)s->nkv, (long long)s->d, s->causal, dtype_part(p, dtp, sizeof dtp),
                 variant_part(s, p, var, sizeof var), threads);
}

/* A peer's benchmark of shape s at `threads` into *b: 1, or 0 when the peer
 * does not take the shape (noted in skipped). Its name is our row's with
 * peer.<name> for the kernel; the same FLOPs, bytes and peak rules (the
 * machine's best peak for the dtype: we do not know which unit it uses). */
int plan_peer(const bench_plan *pl, const peer_ops *peer, const shape *s, int threads, int group,
              bench *b, note_list *skipped, int *layer_noted) {
    memset(b, 0, sizeof *b);
    b->peer = peer;
    b->s = *s;
    b->threads = threads;
    b->group = group;
    b->opts = (mha_options){.threads = threads};
    snprintf(b->kname, sizeof b->kname, "peer.%s", peer->name);
    const mha_problem p = meas_problem(s);
    char dtp[48], why[256] = "", var[96];
    /* a variant or layout its adapter does not pass on: takes() refuses it
     * (peer_takes_variants), as meas_prepare_peer does */
    const int takes = !s->layer && peer->takes(&p, why, sizeof why);
    if (s->layer) { /* one note per peer, not one per layer row */
        if (!*layer_noted)
            note_add(skipped, "%s on the layer rows (peers run the attention core only)", b->kname);
        *layer_noted = 1;
        return 0;
    }
    if (!takes) {
        char shp[160];
        snprintf(shp, sizeof shp, "B=%lld H=%lld KV=%lld Nq=%lld Nkv=%lld d=%lld causal=%d%s%s",
                 (long long)s->b, (long long)s->h, (long long)s->kv, (long long)s->nq,
                 (long long)s->nkv, (long long)s->d, s->causal, dtype_part(&p, dtp, sizeof dtp),
                 meas_variant_text(s, var, sizeof var));
        if (threads == pl->threads[0]) note_add(skipped, "%s on %s (%s)", b->kname, shp, why);
        return 0;
    }
    row_name(b->name, sizeof b->name, b->kname, s, &p, threads);
    bench_roofline(pl, b);
    b->warmed = 1;              /* prepare made one untimed call */
    b->cost = 2 * pl->min_time; /* and the helper's round trips */
    return 1;
}

bench *plan_benches(const bench_plan *pl, const shape *shapes, int nshapes, note_list *skipped,
                    note_list *aliases, int *nbench_out, int *ngroups_out) {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    const double mem_limit = pages > 0 && page > 0 ? 0.5 * (double)pages * (double)page : 1e12;
    int nbench = 0, ngroups = 0;
    int layer_noted[MAX_PEERS] = {0};
    const size_t nslots =
        (size_t)nshapes * (size_t)pl->nthreads * (size_t)(pl->nk + pl->npeers) + 1;
    bench *benches = sweep_realloc(NULL, nslots, sizeof *benches);
    memset(benches, 0, nslots * sizeof *benches);
    for (int si = 0; si < nshapes; si++)
        for (int ti = 0; ti < pl->nthreads; ti++) {
            const int group = ngroups++;
            for (int ki = 0; ki < pl->nk; ki++) {
                bench *b = &benches[nbench];
                memset(b, 0, sizeof *b);
                b->k = pl->kernels[ki];
                b->s = shapes[si];
                b->threads = (int)pl->threads[ti];
                b->group = group;
                b->opts = (mha_options){.threads = b->threads};
                const shape *s = &b->s;
                /* ci pairs each algorithm with the shapes it is for: decode
                 * with the decode shape, flash/tiled with the prefill ones (a
                 * memory-bound kernel on the wrong shape only adds noise). */
                if (pl->pr->ci_kernels && !pl->kernels_given && b->k &&
                    ((mha_kernel_traits(b->k) & MHA_KT_DECODE) != 0) != (s->nq == 1))
                    continue;
                const mha_problem p = meas_problem(s);
                /* a kernel runs the dtypes it takes (its mask columns) */
                if (b->k && mha_kernel_takes(b->k, &p) != MHA_OK) continue;
                const char *kname = b->k ? mha_kernel_name(b->k) : "auto";
                snprintf(b->kname, sizeof b->kname, "%s", kname);
                row_name(b->name, sizeof b->name, kname, s, &p, b->threads);
                double krate = pl->rate[ki];
                if (!b->k) { /* auto: what mha_select picks here, knobs included */
                    mha_selection sel;
                    if (mha_select(&p, &b->opts, &sel) != MHA_OK) {
                        note_add(skipped, "auto on %s (mha_select: %s)", b->name, mha_last_error());
                        continue;
                    }
                    b->is_auto = 1;
                    b->k = sel.kernel;
                    b->opts = sel.options;
                    snprintf(b->label, sizeof b->label, "%s bq=%d bk=%d split=%d (%s)",
                             mha_kernel_name(sel.kernel), sel.options.block_q, sel.options.block_kv,
                             sel.options.split,
                             sel.source == MHA_CHOICE_TABLE
                                 ? "table"
                                 : (sel.source == MHA_CHOICE_FORCED ? "forced" : "default"));
                    for (int kj = 0; kj < pl->nk; kj++)
                        if (pl->kernels[kj] == b->k) krate = pl->rate[kj];
                    if (krate <= 0) krate = probe_rate(b->k);
                }
                if (mha_problem_validate(&p) != MHA_OK) {
                    note_add(skipped, "%s (invalid problem: %s)", b->name, mha_last_error());
                    continue;
                }
                const mha_layer lay = meas_layer(s, NULL);
                const mha_layer_shape lsh = {s->b, s->nq, s->nkv, s->causal, 0.0f};
                bench_roofline(pl, b);
                mha_options o = b->opts;
                size_t ws = 0;
                if ((s->layer ? mha_forward_workspace_size(b->k, &lay, &lsh, &o, &ws)
                              : mha_workspace_size(b->k, &p, &o, &ws)) != MHA_OK) {
                    note_add(skipped, "%s (%s)", b->name, mha_last_error());
                    continue;
                }
                const double need = (double)meas_input_bytes(s) + (double)ws;
                if (need > mem_limit) {
                    note_add(skipped, "%s (needs %.1f GiB, more than half of memory)", b->name,
                             need / (1024.0 * 1024 * 1024));
                    continue;
                }
                /* Per-head parallel kernels use at most B*H threads; those
                 * with a split (flash) also split query blocks. */
                double par = b->threads;
                if (!(mha_kernel_traits(b->k) & MHA_KT_SPLIT) && (double)(s->b * s->h) < par)
                    par = (double)(s->b * s->h);
                const double est = krate > 0 ? b->flops / (krate * 1e9 * par) : 1e30;
                if (est > pl->max_seconds) {
                    char msg[64];
                    snprintf(msg, sizeof msg, "estimated %.1f s per call > --max-seconds %g", est,
                             pl->max_seconds);
                    if (pl->verbose) printf("skip %s (%s)\n", b->name, msg);
                    note_add(skipped, "%s (%s)", b->name, msg);
                    continue;
                }
                /* The untimed warm-up call (and status check) only where it is
                 * cheap: a call longer than the min time is its own 1-iteration
                 * run, its inputs are shared with the kernels before it and the
                 * workspace is touched, so a cold start is a small part of it. */
                b->warmed = est >= pl->min_time;
                /* one repetition: Google Benchmark's iterations up to the min
                 * time with Google Benchmark's own overhead (2.6 x it: the quick
                 * preset's first pass took 150 s on the Zen 5 VM against 96 s
                 * predicted at 1.7 x), or one
                 * call when that is longer */
                b->cost = est >= pl->min_time ? est : 2.6 * pl->min_time;
                nbench++;
            }
            for (int pi = 0; pi < pl->npeers; pi++)
                nbench += plan_peer(pl, pl->peers[pi], &shapes[si], (int)pl->threads[ti], group,
                                    &benches[nbench], skipped, &layer_noted[pi]);
        }
    nbench = fold_auto(benches, nbench, aliases);
    *nbench_out = nbench;
    *ngroups_out = ngroups;
    return benches;
}

/* ---- fleet mode: one shard of the list ---------------------------------------------
 * The partition must come out the same on every machine that runs a shard,
 * so it cannot use the rates this machine measured: each benchmark's cost is
 * a nominal time from the build alone (FLOPs at 8 FLOP/cycle per vector lane
 * at 1 GHz per thread; K/V bytes at 10 GB/s per thread for decode rows; the
 * reference kernels at 1 GFLOP/s), never less than the min time Google
 * Benchmark spends on any row. Only its proportions matter. */
double nominal_seconds(const bench *b, double min_time) {
    /* a peer: as a kernel of the widest vectors built (16 lanes) */
    const unsigned tr = b->peer ? 0 : mha_kernel_traits(b->k);
    const int lanes = b->peer ? 16 : mha_ops_for(mha_kernel_run_isa(b->k))->lanes;
    const double rate = (tr & MHA_KT_REFERENCE ? 1.0 : 8.0 * lanes) * 1e9 * b->threads;
    double t = b->flops / rate;
    if (b->s.nq == 1 && !b->s.layer) {
        const double tb = b->kv_bytes / (10e9 * b->threads);
        t = tb > t ? tb : t;
    }
    return t > min_time ? t : min_time;
}

/* Keeps the benchmarks of shard sh (in their order) and records the shard
 * in the result's context: its spec, the whole list's size and hash (merge
 * refuses shards of different lists) and this shard's size. Returns the
 * count kept. */
int take_shard(bench *benches, int nbench, const shard_spec *sh, double min_time) {
    double *cost = sweep_realloc(NULL, (size_t)(nbench ? nbench : 1), sizeof *cost);
    const char **names = sweep_realloc(NULL, (size_t)(nbench ? nbench : 1), sizeof *names);
    int *part = sweep_realloc(NULL, (size_t)(nbench ? nbench : 1), sizeof *part);
    double mine = 0, total = 0;
    for (int i = 0; i < nbench; i++) {
        cost[i] = nominal_seconds(&benches[i], min_time);
        names[i] = benches[i].name;
        total += cost[i];
    }
    const uint64_t hash = shard_list_hash(names, nbench);
    shard_partition(cost, names, nbench, sh->count, part);
    int kept = 0;
    for (int i = 0; i < nbench; i++) {
        if (part[i] == sh->index) {
            mine += cost[i];
            benches[kept++] = benches[i];
        } else {
            free(benches[i].gflops);
            free(benches[i].prate);
            free(benches[i].stolen);
            free(benches[i].dist);
        }
    }
    char buf[64];
    snprintf(buf, sizeof buf, "%d/%d", sh->index, sh->count);
    mha_gbench_add_context("mha_shard", buf);
    snprintf(buf, sizeof buf, "%016llx", (unsigned long long)hash);
    mha_gbench_add_context("mha_sweep_list", buf);
    snprintf(buf, sizeof buf, "%d", nbench);
    mha_gbench_add_context("mha_sweep_benchmarks", buf);
    snprintf(buf, sizeof buf, "%d", kept);
    mha_gbench_add_context("mha_shard_benchmarks", buf);
    printf("shard %d/%d: %d of %d benchmarks, %.0f%% of the nominal time (list %016llx)\n",
           sh->index, sh->count, kept, nbench, total > 0 ? 100 * mine / total : 0,
           (unsigned long long)hash);
    free(cost);
    free(names);
    free(part);
    return kept;
}

/* The kernels to sweep (NULL = auto); returns the count or -1. */
int choose_kernels(const sweep_args *a, const preset *pr, const mha_kernel **kernels) {
    if (a->kernel_list) /* "auto" (NULL here) is mha_select's choice per shape */
        return parse_kernel_list("sweep: --kernels", a->kernel_list,
                                 KL_AUTO | KL_SUPPORTED | KL_TIMED, kernels, MAX_KERNELS);
    int nk = 0;
    for (int i = 0; i < mha_kernel_count() && nk < MAX_KERNELS; i++) {
        const mha_kernel *k = mha_kernel_at(i);
        if (mha_kernel_supported(k) != MHA_OK || (mha_kernel_traits(k) & MHA_KT_EMULATED)) continue;
        /* ci: the project's SIMD kernels only (no reference, no library
         * baseline). The baseline-ISA ones take most of the time and add
         * nothing a regression run needs. */
        if (pr->ci_kernels && ((mha_kernel_traits(k) & (MHA_KT_REFERENCE | MHA_KT_BASELINE)) ||
                               mha_kernel_isa(k) == MHA_ISA_SCALAR))
            continue;
        kernels[nk++] = k;
    }
    /* and what --kernel auto (mha_select) would run, shape by shape */
    if (!pr->ci_kernels && nk < MAX_KERNELS) kernels[nk++] = NULL;
    return nk;
}

/* The shapes: the grid of the axes (unless a preset lists its shapes only),
 * then the preset's extra shapes. Notes go to notes. */
shape *build_shapes(const sweep_args *a, const preset *pr, const sweep_axes *x, note_list *notes,
                    int *count) {
    int64_t sq_list[MAX_LIST * MAX_LIST], skv_list[MAX_LIST * MAX_LIST];
    int npairs = 0;
    if (x->nsq || x->nskv) {
        const int64_t *qa = x->nsq ? x->seq_q : x->seq, *ka = x->nskv ? x->seq_kv : x->seq;
        const int nqa = x->nsq ? x->nsq : x->nseq, nka = x->nskv ? x->nskv : x->nseq;
        for (int i = 0; i < nqa; i++)
            for (int j = 0; j < nka; j++) {
                sq_list[npairs] = qa[i];
                skv_list[npairs++] = ka[j];
            }
    } else {
        for (int i = 0; i < x->nseq; i++) {
            sq_list[npairs] = x->seq[i];
            skv_list[npairs++] = x->seq[i];
        }
    }
    int n = 0, cap = 64;
    shape *shapes = sweep_realloc(NULL, (size_t)cap, sizeof *shapes);
    if (pr->extra_only && !x->shape_axes_given && x->variant_axes_given)
        note_add(notes,
                 "--window, --softcap, --sinks and --head-dim-v multiply the grid's shapes; preset "
                 "%s lists its own (give a shape axis, e.g. --seq, for a grid)",
                 pr->name);
    if (!pr->extra_only || x->shape_axes_given)
        for (int ib = 0; ib < x->nbatch; ib++)
            for (int ih = 0; ih < x->nheads; ih++)
                for (int ik = 0; ik < (x->nkv ? x->nkv : 1); ik++) {
                    const int64_t kv = x->nkv ? x->kvh[ik] : x->heads[ih];
                    if (x->heads[ih] % kv != 0) {
                        note_add(notes, "--kv-heads %lld does not divide --heads %lld: skipped",
                                 (long long)kv, (long long)x->heads[ih]);
                        continue;
                    }
                    for (int id = 0; id < x->ndims; id++)
                        for (int ic = 0; ic < x->ncausal; ic++)
                            for (int is = 0; is < npairs; is++) {
                                const shape base = {.b = x->batch[ib],
                                                    .h = x->heads[ih],
                                                    .kv = kv,
                                                    .nq = sq_list[is],
                                                    .nkv = skv_list[is],
                                                    .d = x->dims[id],
                                                    .causal = (int)x->causal[ic]};
                                n = add_grid_shape(&shapes, n, &cap, &base, x);
                            }
                }
    if (!x->shape_axes_given)
        for (int i = 0; i < pr->nextra; i++) {
            if (n == cap) {
                cap *= 2;
                shapes = sweep_realloc(shapes, (size_t)cap, sizeof *shapes);
            }
            /* ci's causal shape keeps its mask; --causal filters the others. */
            int keep = pr->extra_only || !a->causal;
            for (int c = 0; c < x->ncausal && !keep; c++)
                keep = x->causal[c] == pr->extra[i].causal;
            if (keep) shapes[n++] = pr->extra[i];
        }
    *count = n;
    return shapes;
}
