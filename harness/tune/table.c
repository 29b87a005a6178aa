/* table.c - tune's outputs: the table and the log (opened unnamed, named
 * when the run ends, never over another), a class's entry, the table's
 * header, the classes carried from the table before, the closing lines. */
#include <errno.h>
#include <limits.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fmt_results.h"
#include "stats.h"
#include "util.h"
#include "tune.h"

/* ---- the table -------------------------------------------------------------------------- */

json_object *choice_json(const mha_kernel *k, const point *pt) {
    json_object *o = json_object_new_object();
    json_object_object_add(o, "kernel", json_object_new_string(mha_kernel_name(k)));
    json_object_object_add(o, "block_q", json_object_new_int(pt->bq));
    json_object_object_add(o, "block_kv", json_object_new_int(pt->bk));
    json_object_object_add(o, "split", json_object_new_int(pt->split));
    json_object_object_add(o, "gflops", results_json_double(round(pt->gflops * 100) / 100));
    if (pt->hi > 0) { /* measured in the final round: its 95% interval */
        json_object *iv = json_object_new_array();
        json_object_array_add(iv, results_json_double(round(pt->lo * 100) / 100));
        json_object_array_add(iv, results_json_double(round(pt->hi * 100) / 100));
        json_object_object_add(o, "gflops_interval", iv);
    }
    return o;
}

/* Serialises root into w and commits it (a reader sees the old table or the
 * new one, never half of one). Returns 1, or 0 with a message. */
/* Writes the table. With base (the default target, no --force) a table
 * already at base.json stays: the new one goes beside it as
 * base-<stamp>.json (then -2, -3 ...), which the reader takes as the newer;
 * path gets the name taken. */
static int write_table(mha_out *w, json_object *root, const char *base, const char *stamp,
                       char *path, size_t plen) {
    char why[1024];
    const char *s = json_object_to_json_string_ext(
        root, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED | JSON_C_TO_STRING_NOSLASHESCAPE);
    int ok = mha_out_write(w, s, strlen(s), why, sizeof why) == MHA_OK &&
             mha_out_write(w, "\n", 1, why, sizeof why) == MHA_OK;
    for (int attempt = 0; ok && attempt < 1000; attempt++) {
        if (attempt > 0) {
            if (attempt == 1)
                fmt(path, plen, "%s-%s.json", base, stamp);
            else
                fmt(path, plen, "%s-%s-%d.json", base, stamp, attempt);
            if (mha_out_retarget(w, path, why, sizeof why) != MHA_OK) break;
        }
        if (mha_out_commit(w, why, sizeof why) == MHA_OK) return 1;
        if (!w->exists || !base) break;
    }
    mha_out_abort(w);
    errorf("tune: %s", why);
    return 0;
}

/* Commits the log under dir/<key>-<stamp>.jsonl, or -2, -3 ... when that
 * name is taken: a log never replaces another. */
static int commit_log(mha_out *w, const char *dir, const char *key, const char *stamp) {
    char why[1024], path[4400];
    for (int attempt = 0; attempt < 1000; attempt++) {
        if (attempt > 0) {
            fmt(path, sizeof path, "%s/%s-%s-%d.jsonl", dir, key, stamp, attempt + 1);
            if (mha_out_retarget(w, path, why, sizeof why) != MHA_OK) break;
        }
        if (mha_out_commit(w, why, sizeof why) == MHA_OK) return 1;
        if (!w->exists) {
            errorf("tune: log: %s", why);
            return 0;
        }
    }
    mha_out_abort(w);
    errorf("tune: no free log name in %s", dir);
    return 0;
}

/* Starts the table and the log, both unnamed until the run ends: a bad --out
 * fails before any measurement, and a killed tune leaves no partial table or
 * log. Returns TUNE_OK, or TUNE_BAD_INPUT (message printed, nothing left open). */
tune_status open_outputs(tune_run *r) {
    mha_cpu_key(r->key, sizeof r->key);
    /* The default: the folder mha_select reads first (MHA_TUNING_DIR, the
     * installed tables, else the tree's), a table there kept unless --force */
    if (r->a.out) {
        fmt(r->out_path, sizeof r->out_path, "%s", r->a.out);
        fmt(r->carry_path, sizeof r->carry_path, "%s", r->a.out);
    } else {
        mha_table_cpu_path(mha_table_write_dir(), r->carry_path, sizeof r->carry_path);
        mha_table_cpu_base(mha_table_write_dir(), r->base, sizeof r->base);
        fmt(r->out_path, sizeof r->out_path, "%s.json", r->base);
    }
    const int keep = !r->a.out && !r->a.force;
    const char *shipped = r->a.out ? mha_table_shipped(r->a.out) : NULL;
    if (shipped && !r->a.force && access(r->a.out, F_OK) == 0) {
        errorf("tune: --out %s is %s: --force replaces it, or without --out tune adds a new "
               "table beside it (which mha_select reads as the newer)",
               r->a.out, shipped);
        return TUNE_BAD_INPUT;
    }
    char dir[4096], tmpd[4096];
    fmt(tmpd, sizeof tmpd, "%s", r->out_path);
    fmt(dir, sizeof dir, "%s", dirname(tmpd));
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(r->stamp, sizeof r->stamp, "%Y%m%dT%H%M%SZ", &tm);
    strftime(r->created, sizeof r->created, "%Y-%m-%dT%H:%M:%SZ", &tm);
    fmt(r->log_path, sizeof r->log_path, "%s/log/%s-%s.jsonl", dir, r->key, r->stamp);
    fmt(r->logdir, sizeof r->logdir, "%s/log", dir);
    char why[1024];
    if (mha_out_begin(&r->table_out, r->out_path,
                      (keep ? MHA_OUT_NOREPLACE : MHA_OUT_REPLACE) | MHA_OUT_MKDIRS, why,
                      sizeof why) != MHA_OK) {
        errorf("tune: --out: %s", why);
        return TUNE_BAD_INPUT;
    }
    if (mha_out_begin(&r->log_out, r->log_path, MHA_OUT_NOREPLACE | MHA_OUT_MKDIRS, why,
                      sizeof why) != MHA_OK) {
        mha_out_abort(&r->table_out);
        errorf("tune: log: %s", why);
        return TUNE_BAD_INPUT;
    }
    r->tx.log = mha_out_stream(&r->log_out);
    if (!r->tx.log) {
        errorf("tune: cannot write %s: %s", r->log_path, strerror(errno));
        mha_out_abort(&r->table_out);
        mha_out_abort(&r->log_out);
        return TUNE_BAD_INPUT;
    }
    r->act = mha_isa_active();
    return TUNE_OK;
}

/* The table's entry for class cl: its shape, the winner kr[wi], the runner-up
 * kr[ri] (null when ri < 0) and the default dp (when measured). */

json_object *class_entry(const tune_run *r, const mha_shape_class *cl, double class_other, int wi,
                         int ri, const mha_kernel *dkern, const point *dp) {
    json_object *e = json_object_new_object();
    json_object_object_add(e, "class", json_object_new_string(r->tx.cls));
    json_object_object_add(e, "head_dim", json_object_new_int(mha_class_head_dim(cl)));
    json_object_object_add(e, "seq_bucket", json_object_new_int64(mha_class_seq_bound(cl)));
    json_object_object_add(e, "causal", json_object_new_boolean(cl->causal));
    json_object_object_add(e, "threads", json_object_new_int(r->tx.threads));
    json_object_object_add(e, "decode", json_object_new_boolean(cl->decode));
    json_object_object_add(e, "gqa", json_object_new_boolean(cl->gqa));
    /* the dtypes it was measured in (mha_select uses an entry only for them) */
    json_object_object_add(e, "dtype", json_object_new_string(mha_dtype_name(cl->dtype)));
    json_object_object_add(e, "kv_dtype", json_object_new_string(mha_dtype_name(cl->kv_dtype)));
    /* Other processes' share of the machine while this class was measured
     * (-1: too short to tell); above 0.10 the numbers are suspect. */
    json_object_object_add(e, "other_load", results_json_double(round(class_other * 100) / 100));
    json_object *shape = json_object_new_object();
    json_object_object_add(shape, "batch", json_object_new_int64(r->cd.p.batch));
    json_object_object_add(shape, "heads", json_object_new_int64(r->cd.p.heads));
    json_object_object_add(shape, "kv_heads", json_object_new_int64(r->cd.p.kv_heads));
    json_object_object_add(shape, "seq_q", json_object_new_int64(r->cd.p.seq_q));
    json_object_object_add(shape, "seq_kv", json_object_new_int64(r->cd.p.seq_kv));
    json_object_object_add(shape, "head_dim", json_object_new_int64(r->cd.p.head_dim));
    json_object_object_add(e, "shape", shape);
    json_object_object_add(e, "winner", choice_json(r->kr[wi].k, &r->kr[wi].best));
    json_object_object_add(e, "runner_up",
                           ri >= 0 ? choice_json(r->kr[ri].k, &r->kr[ri].best) : NULL);
    json_object_object_add(e, "tie", json_object_new_boolean(winner_ties(r, wi, ri)));
    if (dkern && dp->status == 1) json_object_object_add(e, "default", choice_json(dkern, dp));
    /* The class's share of the budget when it began and what its search
     * (with the preparation of its data) and final round (with the
     * default's measurement) took. */
    json_object *ts = json_object_new_object();
    json_object_object_add(ts, "share", results_json_double(round(r->share * 100) / 100));
    json_object_object_add(ts, "search", results_json_double(round(r->t_search * 100) / 100));
    json_object_object_add(ts, "final", results_json_double(round(r->t_final * 100) / 100));
    json_object_object_add(e, "time_s", ts);
    return e;
}

/* Names the log (its final name goes to log_path). Returns TUNE_OK, or
 * TUNE_BAD_INPUT when it could not be committed (message printed). */
static tune_status name_log(tune_run *r) {
    class_data_free(&r->cd);
    r->tx.log = NULL; /* the stream belongs to log_out */
    if (!commit_log(&r->log_out, r->logdir, r->key, r->stamp)) return TUNE_BAD_INPUT;
    fmt(r->log_path, sizeof r->log_path, "%s", r->log_out.target);
    return TUNE_OK;
}

/* The table's header: the machine's fingerprint and how the run went; the
 * classes are added by the caller. */
static json_object *table_root(const tune_run *r, double elapsed) {
    json_object *root = json_object_new_object();
    json_object *fp = json_object_new_object();
    mha_caches cs;
    mha_caches_get(&cs);
    const uint64_t l1 = cs.l1d, l2 = cs.l2, l1r = cs.l1d_raw, l2r = cs.l2_raw;
    json_object_object_add(fp, "cpu_key", json_object_new_string(r->key));
    json_object_object_add(fp, "cpu_model", json_object_new_string(r->mi.model));
    json_object_object_add(fp, "vendor", json_object_new_string(r->mi.vendor));
    json_object_object_add(fp, "family", json_object_new_int(r->mi.family));
    json_object_object_add(fp, "model", json_object_new_int(r->mi.model_id));
    json_object_object_add(fp, "isa_detected",
                           json_object_new_string(mha_isa_name(mha_isa_detected())));
    json_object_object_add(fp, "isa_active", json_object_new_string(mha_isa_name(r->act)));
    json_object_object_add(fp, "flags", json_object_new_string(r->mi.flags));
    json_object_object_add(fp, "cores", json_object_new_int(r->mi.cores));
    json_object_object_add(fp, "pus", json_object_new_int(r->mi.pus));
    json_object_object_add(fp, "l1d", json_object_new_int64((int64_t)l1));
    json_object_object_add(fp, "l2", json_object_new_int64((int64_t)l2));
    json_object_object_add(fp, "l1d_raw", json_object_new_int64((int64_t)l1r));
    json_object_object_add(fp, "l2_raw", json_object_new_int64((int64_t)l2r));
    json_object_object_add(fp, "l3", json_object_new_int64((int64_t)r->mi.l3));
    json_object_object_add(root, "fingerprint", fp);
    json_object_object_add(root, "created", json_object_new_string(r->created));
    json_object_object_add(root, "class_set", json_object_new_string(r->a.set));
    json_object_object_add(root, "budget_s", results_json_double(r->a.budget));
    json_object_object_add(root, "elapsed_s", results_json_double(round(elapsed * 10) / 10));
    json_object_object_add(root, "seed", json_object_new_int64(r->a.seed));
    if (r->a.shard.count > 0) {
        char sh[32];
        snprintf(sh, sizeof sh, "%d/%d", r->a.shard.index, r->a.shard.count);
        json_object_object_add(root, "shard", json_object_new_string(sh));
    }
    json_object_object_add(root, "load_avg_start", results_json_double(r->load0[0]));
    json_object_object_add(root, "contended_classes", json_object_new_int(r->contended));
    const char *lp = strrchr(r->log_path, '/');
    char rel[4300];
    fmt(rel, sizeof rel, "log/%s", lp ? lp + 1 : r->log_path);
    json_object_object_add(root, "log", json_object_new_string(rel));
    return root;
}

/* Appends to jclasses the classes of an existing table at out_path for the
 * same CPU and active ISA that this run did not tune (quick then full
 * accumulates). */
static void carry_old_classes(tune_run *r) {
    char why[1024];
    mha_table old;
    if (mha_table_load(r->carry_path, &old, why, sizeof why) != MHA_OK) return;
    if (strcmp(old.cpu_key, r->key) == 0 && strcmp(old.isa_active, mha_isa_name(r->act)) == 0) {
        json_object *oroot = json_object_from_file(r->carry_path), *ocls;
        if (oroot && json_object_object_get_ex(oroot, "classes", &ocls)) {
            const size_t n = json_object_array_length(ocls);
            int carried = 0;
            for (size_t i = 0; i < n; i++) {
                json_object *e = json_object_array_get_idx(ocls, i), *cn;
                json_object_object_get_ex(e, "class", &cn);
                const char *s = json_object_get_string(cn);
                int dup = 0;
                for (size_t j = 0; j < json_object_array_length(r->jclasses) && !dup; j++) {
                    json_object *ne = json_object_array_get_idx(r->jclasses, j), *nn;
                    json_object_object_get_ex(ne, "class", &nn);
                    dup = strcmp(json_object_get_string(nn), s) == 0;
                }
                if (!dup) {
                    json_object_array_add(r->jclasses, json_object_get(e));
                    carried++;
                }
            }
            if (carried)
                printf("tune: kept %d classes of the existing table not tuned in this run\n",
                       carried);
        }
        json_object_put(oroot);
    }
    mha_table_free(&old);
}

/* Whether paths a and b name one file (both resolved; else as written). */
static int same_path(const char *a, const char *b) {
    char ra[PATH_MAX], rb[PATH_MAX];
    if (realpath(a, ra) && realpath(b, rb)) return strcmp(ra, rb) == 0;
    return strcmp(a, b) == 0;
}

/* Where the table went and why there; a note when mha_select reads another
 * file (MHA_TUNING set, or --out elsewhere): the run's table is then not
 * what `--kernel auto` and the library use. */
static void print_where(const tune_run *r) {
    printf("tune: %d measurements, %d verification failures; table %s\n", r->tx.measurements,
           r->tx.failures, r->out_path);
    const int kept = strcmp(r->carry_path, r->out_path) && access(r->carry_path, F_OK) == 0;
    char dwhy[512];
    mha_table_dir_why(dwhy, sizeof dwhy);
    if (!r->a.out)
        printf("tune: written where mha_select reads first (%s: %s)%s%s%s\n", mha_table_write_dir(),
               dwhy, kept ? "; kept the older " : "", kept ? r->carry_path : "",
               r->a.force ? " (--force: replaced)" : "; the newest table of a CPU is the one read");
    char reads[4096];
    mha_table_default_path(reads, sizeof reads);
    if (!same_path(reads, r->out_path))
        printf("tune: note: mha_select reads %s%s, not this table; MHA_TUNING=%s makes it read "
               "this one\n",
               reads, getenv("MHA_TUNING") && *getenv("MHA_TUNING") ? " (MHA_TUNING)" : "",
               r->out_path);
}

/* The closing lines: where the table went, counts, time, and a warning when
 * classes were measured on a busy machine. */
static void print_summary(const tune_run *r, double elapsed) {
    print_where(r);
    printf("tune: %d samples retaken for interference evidence, %d kept disturbed (retakes ran "
           "out)\n",
           r->tx.retakes, r->tx.disturbed_kept);
    if (r->contended)
        printf("tune: %d of %d classes were measured while other processes held the cores "
               "(other_load > %.2f in the table): rerun on a quiet machine\n",
               r->contended, r->ncls, MEAS_POLICY.contended_share);
    printf("tune: %d classes in %.1f s (budget %g s)\n", r->tuned, elapsed, (double)r->a.budget);
}

/* Names the log, writes the table (this run's classes and the kept ones) and
 * prints the summary; each is tried even when another failed. Returns
 * TUNE_OK, or TUNE_BAD_INPUT when the log or the table could not be written
 * (message printed). */
tune_status write_outputs(tune_run *r) {
    tune_status st = name_log(r);
    const double elapsed = now_s() - r->t_begin;
    json_object *root = table_root(r, elapsed);
    carry_old_classes(r);
    json_object_object_add(root, "classes", r->jclasses);
    if (!write_table(&r->table_out, root, r->a.out || r->a.force ? NULL : r->base, r->stamp,
                     r->out_path, sizeof r->out_path))
        st = TUNE_BAD_INPUT;
    json_object_put(root);
    print_summary(r, elapsed);
    return st;
}
