/* calibrate.c - `compare --calibrate`: the noise of this machine's gate, from
 * A/A pairs (two sweeps of one build back to back). Per benchmark: how often
 * the gate called it slower (its false-positive rate) and the smallest
 * slowdown it detects at the gate's alpha in every pair (the minimum
 * detectable effect: the pair's second sweep scaled until the row reads
 * slower, with the pair's drift and threshold); and the largest drift common
 * to a pair. Written beside the baselines as <cpu-key>.noise.json (never
 * overwritten); `compare --baseline` reads the newest that matches, prints
 * both figures beside each row, calls a row "blind" rather than "same" when
 * its detectable effect is above its threshold, and takes the calibrated
 * drift (x 1.5) as --max-drift. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compare.h"
#include "fmt_results.h"
#include "mha_private.h"
#include "proc.h"

/* The largest slowdown searched for (percent): a row that cannot see 100%
 * sees nothing worth gating. */
#define MDE_MAX 100.0

/* Whether r (tested against base b) would read slower with new n's times x (1 + delta). */
static int detects(const row *r0, const bench *b, const bench *n, double delta, const settings *s,
                   double *scaled) {
    row r = *r0;
    const double f = (1 + r0->change / 100) / (1 + r0->change_raw / 100); /* the drift removed */
    for (int j = 0; j < n->n; j++) scaled[j] = n->t[j] * f * (1 + delta / 100);
    r.change = ((1 + r0->change / 100) * (1 + delta / 100) - 1) * 100;
    r.ut = stats_mann_whitney(b->t, b->n, scaled, n->n);
    return row_verdict(&r, s) == V_SLOWER;
}

/* The smallest delta (percent, to 0.1) at which r reads slower; NAN if none
 * up to MDE_MAX. */
static double pair_mde(const row *r, const bench *b, const bench *n, const settings *s) {
    double *scaled = xrealloc(NULL, (size_t)n->n * sizeof *scaled);
    double lo = 0, hi = MDE_MAX, out = NAN;
    if (detects(r, b, n, hi, s, scaled)) {
        while (hi - lo > 0.1) {
            const double mid = 0.5 * (lo + hi);
            if (detects(r, b, n, mid, s, scaled))
                hi = mid;
            else
                lo = mid;
        }
        out = hi;
    }
    free(scaled);
    return out;
}

static noise_row *noise_row_add(noise_table *nt, const char *name) {
    for (int i = 0; i < nt->n; i++)
        if (strcmp(nt->rows[i].name, name) == 0) return &nt->rows[i];
    nt->rows = xrealloc(nt->rows, (size_t)(nt->n + 1) * sizeof *nt->rows);
    nt->rows[nt->n] = (noise_row){.name = xstrdup(name), .mde_pct = 0};
    return &nt->rows[nt->n++];
}

/* Adds one A/A pair to nt. */
static void calibrate_pair(const result_set *a, const result_set *b, const settings *s,
                           noise_table *nt, double *thresholds) {
    comparison c;
    compare_rows(a, b, s, &c);
    for (int i = 0; i < c.nr; i++) {
        const row *r = &c.rows[i];
        noise_row *nr = noise_row_add(nt, r->name);
        nr->pairs++;
        nr->false_positives += r->v == V_SLOWER;
        const double m =
            r->too_few ? NAN : pair_mde(r, find_bench(a, r->name), find_bench(b, r->name), &c.eff);
        /* detectable in every pair: the largest; one pair that saw nothing is NaN */
        nr->mde_pct = isnan(m) || isnan(nr->mde_pct) ? NAN : fmax(nr->mde_pct, m);
    }
    const double drift = fabs(100 * (exp(c.g.normalized ? c.g.drift : c.common) - 1));
    if (drift > nt->drift_max_pct) nt->drift_max_pct = drift;
    thresholds[nt->pairs++] = c.g.threshold;
    free(c.rows);
}

static char *noise_json(const noise_table *nt, double alpha) {
    json_object *o = json_object_new_object();
    for (int k = 0; k < FP_COUNT; k++)
        if (nt->fp[k]) json_object_object_add(o, FP_KEYS[k], json_object_new_string(nt->fp[k]));
    json_object_object_add(o, "pairs", json_object_new_int(nt->pairs));
    json_object_object_add(o, "alpha", results_json_double(alpha));
    json_object_object_add(o, "threshold_pct", results_json_double(nt->threshold_pct));
    json_object_object_add(o, "drift_max_pct", results_json_double(nt->drift_max_pct));
    json_object *arr = json_object_new_array();
    for (int i = 0; i < nt->n; i++) {
        json_object *e = json_object_new_object();
        json_object_object_add(e, "name", json_object_new_string(nt->rows[i].name));
        json_object_object_add(e, "pairs", json_object_new_int(nt->rows[i].pairs));
        json_object_object_add(e, "false_positives",
                               json_object_new_int(nt->rows[i].false_positives));
        json_object_object_add(e, "mde_pct", results_json_double(nt->rows[i].mde_pct));
        json_object_array_add(arr, e);
    }
    json_object_object_add(o, "benchmarks", arr);
    char *text = xstrdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY |
                                                               JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(o);
    return text;
}

/* Runs pairs A/A pairs of this build's ci sweep into dir; the file names
 * into files (2 * pairs). 0, or EXIT_USAGE. */
static int run_pairs(int pairs, char **sweep_args, int nsweep, const char *dir, char **files,
                     proc_signals *sg, int *caught) {
    char self[4096];
    const ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sl <= 0) {
        errorf("compare: --calibrate: cannot find this program: %s", strerror(errno));
        return EXIT_USAGE;
    }
    self[sl] = '\0';
    char log[4200];
    snprintf(log, sizeof log, "%s/sweep.log", dir);
    for (int i = 0; i < 2 * pairs; i++) {
        files[i] = xrealloc(NULL, strlen(dir) + 32);
        sprintf(files[i], "%s/%c%d.json", dir, i % 2 ? 'B' : 'A', i / 2);
        char *argv[MAX_SWEEP_ARGS + 8];
        int a = 0;
        argv[a++] = self;
        argv[a++] = "sweep";
        argv[a++] = "--preset";
        argv[a++] = "ci";
        argv[a++] = "--out";
        argv[a++] = files[i];
        for (int j = 0; j < nsweep; j++) argv[a++] = sweep_args[j];
        argv[a] = NULL;
        fprintf(stderr, "mhabench: compare: --calibrate: pair %d/%d, sweep %c\n", i / 2 + 1, pairs,
                i % 2 ? 'B' : 'A');
        const int st = proc_run(argv, NULL, log, NULL, sg, caught);
        if (st != 0) {
            if (st != PROC_STOPPED)
                errorf_esc("compare: --calibrate: a sweep failed (see %s)", log);
            return EXIT_USAGE;
        }
    }
    return 0;
}

int cmd_calibrate(char **files, int nfiles, int npairs_run, char **sweep_args, int nsweep,
                  const char *dir, const char *out, const settings *s) {
    char scratch[4096] = "";
    char **made = NULL;
    proc_signals sg;
    int caught = 0, rc = EXIT_USAGE;
    proc_signals_catch(&sg, "compare: --calibrate");
    if (npairs_run > 0) {
        const char *tmp = getenv("TMPDIR");
        snprintf(scratch, sizeof scratch, "%s/mhabench-calibrate.XXXXXX",
                 tmp && *tmp && strlen(tmp) < 4000 ? tmp : "/tmp");
        if (!mkdtemp(scratch)) {
            errorf_esc("compare: --calibrate: cannot create %s: %s", scratch, strerror(errno));
            scratch[0] = '\0';
            goto done;
        }
        made = xrealloc(NULL, (size_t)(2 * npairs_run) * sizeof *made);
        memset(made, 0, (size_t)(2 * npairs_run) * sizeof *made);
        if (run_pairs(npairs_run, sweep_args, nsweep, scratch, made, &sg, &caught)) goto done;
        files = made;
        nfiles = 2 * npairs_run;
    }
    if (nfiles < 2 || nfiles % 2) {
        errorf("compare: --calibrate takes A/A pairs: an even number of result files (got %d)",
               nfiles);
        goto done;
    }
    noise_table nt = {0};
    double *thresholds = xrealloc(NULL, (size_t)(nfiles / 2) * sizeof *thresholds);
    for (int p = 0; p < nfiles / 2 && rc == EXIT_USAGE; p++) {
        result_set a = {0}, b = {0};
        if (load_results(files[2 * p], &a) || load_results(files[2 * p + 1], &b) ||
            !fingerprints_match(&a, &b, 0, 1)) { /* an A/A pair: one setup */
            result_free(&a);
            result_free(&b);
            break;
        }
        if (p == 0)
            for (int k = 0; k < FP_COUNT; k++) nt.fp[k] = a.fp[k] ? xstrdup(a.fp[k]) : NULL;
        if (!a.fp[0] || strcmp(a.fp[0], nt.fp[0] ? nt.fp[0] : "") != 0) {
            errorf_esc("compare: --calibrate: %s is not of the machine of %s", files[2 * p],
                       files[0]);
            result_free(&a);
            result_free(&b);
            break;
        }
        calibrate_pair(&a, &b, s, &nt, thresholds);
        result_free(&a);
        result_free(&b);
    }
    if (nt.pairs == nfiles / 2) {
        nt.threshold_pct = median_inplace(thresholds, nt.pairs);
        char *text = noise_json(&nt, s->alpha), target[4096];
        if (out) {
            snprintf(target, sizeof target, "%s", out);
            char why[1024];
            mha_out w;
            if (mha_out_begin(&w, out, MHA_OUT_REPLACE, why, sizeof why) == MHA_OK &&
                mha_out_write(&w, text, strlen(text), why, sizeof why) == MHA_OK &&
                mha_out_commit(&w, why, sizeof why) == MHA_OK) {
                rc = 0;
            } else {
                mha_out_abort(&w);
                errorf_esc("compare: --calibrate: %s", why);
            }
        } else {
            rc = save_noreplace(dir, nt.fp[0], ".noise", text, strlen(text), target, sizeof target);
        }
        free(text);
        if (rc == 0) {
            int fps = 0, blind = 0;
            for (int i = 0; i < nt.n; i++)
                fps += nt.rows[i].false_positives > 0,
                    blind += !(nt.rows[i].mde_pct <= BLIND_FACTOR * nt.threshold_pct);
            printf("calibration of %s from %d A/A pair%s: %d benchmarks, %d with a false alarm, "
                   "%d blind (detectable effect over %.0fx the median threshold %.1f%%); largest "
                   "common drift %.1f%%\nwrote %s\n",
                   nt.fp[0], nt.pairs, nt.pairs == 1 ? "" : "s", nt.n, fps, blind, BLIND_FACTOR,
                   nt.threshold_pct, nt.drift_max_pct, target);
        }
    }
    free(thresholds);
    noise_free(&nt);
done:
    for (int i = 0; made && i < 2 * npairs_run; i++) free(made[i]);
    free(made);
    if (scratch[0]) proc_remove_tree(scratch, "compare");
    if (!caught) caught = proc_signal_pending(&sg);
    if (caught) return proc_die_from(caught, &sg);
    proc_signals_restore(&sg);
    return rc;
}

/* ---- reading a calibration ---- */

void noise_free(noise_table *nt) {
    for (int i = 0; i < nt->n; i++) free(nt->rows[i].name);
    for (int k = 0; k < FP_COUNT; k++) free(nt->fp[k]);
    free(nt->rows);
    free(nt->path);
    memset(nt, 0, sizeof *nt);
}

const noise_row *noise_row_of(const noise_table *nt, const char *name) {
    for (int i = 0; i < nt->n; i++)
        if (strcmp(nt->rows[i].name, name) == 0) return &nt->rows[i];
    return NULL;
}

static double num_or_nan(json_object *o, const char *k) {
    json_object *v;
    if (!json_object_object_get_ex(o, k, &v) || !v) return NAN;
    return json_object_get_double(v);
}

int noise_load(const char *path, noise_table *nt) {
    json_object *root = results_load_json("compare", path), *arr = NULL, *v;
    if (!root) return EXIT_USAGE;
    memset(nt, 0, sizeof *nt);
    int rc = EXIT_USAGE;
    if (!json_object_is_type(root, json_type_object) ||
        !json_object_object_get_ex(root, "benchmarks", &arr) ||
        !json_object_is_type(arr, json_type_array) ||
        !json_object_object_get_ex(root, "pairs", &v) || json_object_get_int(v) < 1) {
        errorf_esc("compare: %s: not a calibration (no \"pairs\" and \"benchmarks\")", path);
        goto out;
    }
    nt->pairs = json_object_get_int(v);
    nt->path = xstrdup(path);
    for (int k = 0; k < FP_COUNT; k++)
        if (json_object_object_get_ex(root, FP_KEYS[k], &v) &&
            json_object_is_type(v, json_type_string))
            nt->fp[k] = xstrdup(json_object_get_string(v));
    nt->drift_max_pct = num_or_nan(root, "drift_max_pct");
    nt->threshold_pct = num_or_nan(root, "threshold_pct");
    for (size_t i = 0; i < json_object_array_length(arr); i++) {
        json_object *e = json_object_array_get_idx(arr, i), *nm;
        if (!json_object_is_type(e, json_type_object) ||
            !json_object_object_get_ex(e, "name", &nm) ||
            !json_object_is_type(nm, json_type_string)) {
            errorf_esc("compare: %s: benchmarks[%zu] has no \"name\"", path, i);
            goto out;
        }
        noise_row *r = noise_row_add(nt, json_object_get_string(nm));
        r->pairs = json_object_object_get_ex(e, "pairs", &v) ? json_object_get_int(v) : 0;
        r->false_positives =
            json_object_object_get_ex(e, "false_positives", &v) ? json_object_get_int(v) : 0;
        r->mde_pct = num_or_nan(e, "mde_pct");
        if (r->pairs < 1 || r->false_positives < 0 || r->false_positives > r->pairs) {
            errorf_esc("compare: %s: benchmark '%s': pairs %d, false_positives %d make no "
                       "rate",
                       path, r->name, r->pairs, r->false_positives);
            goto out;
        }
    }
    rc = 0;
out:
    json_object_put(root);
    if (rc) noise_free(nt);
    return rc;
}

int noise_find(const char *dir, const result_set *nw, noise_table *nt) {
    const char *key = nw->fp[0];
    if (!key) return 1;
    /* the newest of <key>.noise.json and <key>.noise-<stamp>[-n].json, by
     * the baselines' rule */
    char nkey[160];
    snprintf(nkey, sizeof nkey, "%s.noise", key);
    baseline_name *names = NULL;
    const int nn = list_baselines(dir, nkey, &names);
    if (nn <= 0) {
        free(names);
        return 1;
    }
    char path[4800];
    snprintf(path, sizeof path, "%s/%s", dir, names[0].file);
    for (int i = 0; i < nn; i++) free(names[i].file);
    free(names);
    if (noise_load(path, nt)) return EXIT_USAGE;
    for (int k = 1; k < FP_REQUIRED; k++)
        if (!nt->fp[k] || !nw->fp[k] || strcmp(nt->fp[k], nw->fp[k]) != 0) {
            errorf_esc("compare: note: calibration %s is of %s '%s', this run '%s': not used", path,
                       FP_KEYS[k], nt->fp[k] ? nt->fp[k] : "(none)",
                       nw->fp[k] ? nw->fp[k] : "(none)");
            noise_free(nt);
            return 1;
        }
    fprintf(stderr, "mhabench: compare: calibration %s (%d A/A pairs)\n", path, nt->pairs);
    return 0;
}
