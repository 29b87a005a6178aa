/* baselines.c - the per-CPU baselines under results/baselines/: adding one
 * (never overwriting) and finding the newest that matches a result file's
 * machine, under its CPU key or that CPU's older keys. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compare.h"
#include <dirent.h>
#include <time.h>

#include "fmt_results.h"
#include "mha_private.h"

int save_noreplace(const char *dir, const char *key, const char *suffix, const char *text,
                   size_t len, char *target, size_t target_len) {
    /* Never overwrite: <key><suffix>.json if absent, else with the UTC time,
     * else with a -2, -3 ... suffix; each commit is a never-replace link of
     * a complete file, so a name is taken atomically and never half written. */
    char stamp[32], why[1024];
    const time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
    snprintf(target, target_len, "%s/%s%s.json", dir, key, suffix);
    mha_out w;
    if (mha_out_begin(&w, target, MHA_OUT_NOREPLACE | MHA_OUT_MKDIRS, why, sizeof why) != MHA_OK ||
        mha_out_write(&w, text, len, why, sizeof why) != MHA_OK) {
        mha_out_abort(&w);
        errorf_esc("compare: saving %s: %s", target, why);
        return EXIT_USAGE;
    }
    int saved = 0;
    for (int attempt = 0; attempt < 1000 && !saved; attempt++) {
        if (attempt == 1)
            snprintf(target, target_len, "%s/%s%s-%s.json", dir, key, suffix, stamp);
        else if (attempt > 1)
            snprintf(target, target_len, "%s/%s%s-%s-%d.json", dir, key, suffix, stamp, attempt);
        if (attempt > 0 && mha_out_retarget(&w, target, why, sizeof why) != MHA_OK) break;
        if (mha_out_commit(&w, why, sizeof why) == MHA_OK)
            saved = 1;
        else if (!w.exists)
            break;
    }
    if (!saved) {
        mha_out_abort(&w);
        errorf_esc("compare: saving under %s/%s%s: %s", dir, key, suffix,
                   w.exists ? "no free name" : why);
        return EXIT_USAGE;
    }
    return 0;
}

int cmd_save_baseline(const char *path, const char *dir) {
    result_set rs = {0};
    if (load_results(path, &rs)) return EXIT_USAGE;
    const char *key = rs.fp[0];
    int rc = EXIT_USAGE;
    if (!key) {
        errorf_esc("compare: %s: the context has no \"mha_cpu_key\"; a baseline must come from "
                   "`mhabench sweep`",
                   path);
        goto out;
    }
    if (!file_name_part_ok(key)) {
        errorf_esc("compare: %s: mha_cpu_key '%s' is not usable as a file name", path, key);
        goto out;
    }
    int few = 0;
    for (int i = 0; i < rs.nb; i++) few += rs.b[i].n < MIN_REPS;
    if (few)
        fprintf(stderr,
                "mhabench: compare: note: %d benchmarks in %s have fewer than %d repetitions "
                "(use `sweep --preset ci`)\n",
                few, path, MIN_REPS);
    size_t len = 0;
    char why[1024], target[4096];
    char *text = results_read_file(path, &len, why, sizeof why);
    if (!text) {
        errorf_esc("compare: cannot read %s: %s", path, why);
        goto out;
    }
    const int st = save_noreplace(dir, key, "", text, len, target, sizeof target);
    free(text);
    if (st) goto out;
    printf("saved baseline %s (%d benchmarks, cpu %s)\n", target, rs.nb, key);
    rc = 0;
out:
    result_free(&rs);
    return rc;
}

static void baseline_name_parse(baseline_name *b, const char *file, size_t keylen) {
    b->file = xstrdup(file);
    b->plain = strlen(file) == keylen + 5;
    b->stamp[0] = '\0';
    b->n = 1;
    if (b->plain) return;
    /* the part between "<key>-" and ".json" */
    snprintf(b->stamp, sizeof b->stamp, "%.*s", (int)(strlen(file) - keylen - 6),
             file + keylen + 1);
    char *dash = strrchr(b->stamp, '-');
    if (dash && dash[1] && strspn(dash + 1, "0123456789") == strlen(dash + 1)) {
        b->n = strtol(dash + 1, NULL, 10);
        *dash = '\0';
    }
}

/* Newest first: any stamped name before the plain one; then the later stamp;
 * then the higher numeric suffix (none counts as 1). */
static int cmp_baseline_desc(const void *pa, const void *pb) {
    const baseline_name *a = pa, *b = pb;
    if (a->plain != b->plain) return a->plain - b->plain;
    const int c = strcmp(b->stamp, a->stamp);
    if (c) return c;
    return (b->n > a->n) - (b->n < a->n);
}

/* compare.h */
int list_baselines(const char *dir, const char *key, baseline_name **out) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    baseline_name *names = NULL;
    int nn = 0;
    const size_t kl = strlen(key);
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        const char *f = e->d_name;
        const size_t fl = strlen(f);
        if (fl < kl + 5 || strncmp(f, key, kl) != 0 || strcmp(f + fl - 5, ".json") != 0) continue;
        if (fl != kl + 5 && f[kl] != '-') continue;
        names = xrealloc(names, (size_t)(nn + 1) * sizeof *names);
        baseline_name_parse(&names[nn++], f, kl);
    }
    closedir(d);
    if (nn > 0) qsort(names, (size_t)nn, sizeof *names, cmp_baseline_desc);
    *out = names;
    return nn;
}

/* The newest of names (files of key in dir) whose fingerprint matches nw
 * (with any: the newest readable one of the key, whose other setup the gate
 * then judges). Fills base and *path_out and returns its index, else -1 with
 * the first mismatch in why. */
static int pick_baseline(const char *dir, const char *key, const baseline_name *names, int nn,
                         const result_set *nw, int any, result_set *base, char **path_out,
                         char *why, size_t whylen) {
    for (int i = 0; i < nn; i++) {
        char *path = xrealloc(NULL, strlen(dir) + strlen(names[i].file) + 2);
        sprintf(path, "%s/%s", dir, names[i].file);
        result_set rs = {0};
        if (load_results(path, &rs) == 0 && rs.fp[0] && strcmp(rs.fp[0], key) == 0) {
            int match = 1;
            for (int k = 1; k < FP_COUNT && match; k++) {
                if (k >= FP_REQUIRED && (!rs.fp[k] || !nw->fp[k])) continue;
                if (!rs.fp[k] || !nw->fp[k] || strcmp(rs.fp[k], nw->fp[k]) != 0) {
                    match = 0;
                    if (!why[0])
                        snprintf(why, whylen, " (newest: %s has %s '%s', %s has '%s')", path,
                                 FP_KEYS[k], rs.fp[k] ? rs.fp[k] : "(none)", nw->path,
                                 nw->fp[k] ? nw->fp[k] : "(none)");
                }
            }
            if (match || any) {
                *base = rs; /* base->path is path, now owned through *path_out */
                *path_out = path;
                return i;
            }
        }
        result_free(&rs);
        free(path);
    }
    return -1;
}

/* The keys a baseline of this CPU may be under: its own, then the same
 * CPU's older keys. A key ends in the detected ISA level's name, and a build
 * that learned a higher level (avx512 -> avx512bf16, later amx) renames the
 * key; a baseline under the older name still describes this CPU, and its
 * fingerprint (mha_isa_active) says whether it is comparable. Returns the
 * count (at most MHA_ISA_COUNT), keys[0] being key itself. */
static int baseline_keys(const char *key, char keys[][128]) {
    int n = 0;
    snprintf(keys[n++], sizeof keys[0], "%s", key);
    const char *dash = strrchr(key, '-');
    mha_isa level;
    if (!dash || mha_isa_parse(dash + 1, &level) != MHA_OK) return n;
    for (int l = (int)level - 1; l >= 0 && n < MHA_ISA_COUNT; l--)
        snprintf(keys[n++], sizeof keys[0], "%.*s-%s", (int)(dash - key), key,
                 mha_isa_name((mha_isa)l));
    return n;
}

/* Finds the newest baseline in dir whose fingerprint matches nw, under nw's
 * CPU key or, failing that, one of the same CPU's older keys (baseline_keys).
 * On success fills base (path owned by the caller through *path_out) and
 * returns 0; else prints why and returns EXIT_USAGE. */
int find_baseline(const char *dir, const result_set *nw, int force, result_set *base,
                  char **path_out) {
    const char *key = nw->fp[0];
    if (!key) {
        errorf_esc("compare: %s: the context has no \"mha_cpu_key\", so no baseline can match it",
                   nw->path);
        return EXIT_USAGE;
    }
    if (!file_name_part_ok(key) || strlen(key) >= 100) {
        errorf_esc("compare: %s: mha_cpu_key '%s' is not usable as a file name", nw->path, key);
        return EXIT_USAGE;
    }
    char keys[MHA_ISA_COUNT][128], why[1024] = "", older[1024] = "";
    const int nk = baseline_keys(key, keys);
    int total = 0, found = -1, k = 0;
    for (; k < nk && found < 0; k++) {
        baseline_name *names = NULL;
        const int nn = list_baselines(dir, keys[k], &names);
        if (nn < 0) {
            errorf_esc("compare: no baseline for cpu '%s': cannot open %s: %s (run `mhabench "
                       "compare --save-baseline NEW.json` to add one)",
                       key, dir, strerror(errno));
            return EXIT_USAGE;
        }
        if (nn > 0 && k > 0 && !older[0])
            snprintf(older, sizeof older, "; %d under this CPU's older key '%s'", nn, keys[k]);
        total += nn;
        /* --force takes the newest file of the current key only: an older
         * key's baseline is used when its fingerprint matches */
        found = pick_baseline(dir, keys[k], names, nn, nw, force && k == 0, base, path_out, why,
                              sizeof why);
        /* None of this CPU's current key has the new run's setup (an MHA_ISA
         * cap, a taskset): its newest baseline still describes this machine,
         * and the gate says what the setup lost */
        if (found < 0 && k == 0 && nn > 0)
            found = pick_baseline(dir, keys[k], names, nn, nw, 1, base, path_out, why, sizeof why);
        for (int i = 0; i < nn; i++) free(names[i].file);
        free(names);
    }
    if (found >= 0) {
        fprintf(stderr, "mhabench: compare: baseline %s", *path_out);
        if (k > 1) { /* migrated: from here on it is this CPU's baseline */
            fprintf(stderr,
                    " (this CPU under its older key '%s': the key names the detected ISA "
                    "level, which this build names '%s')",
                    keys[k - 1], strrchr(key, '-') + 1);
            free(base->fp[0]);
            base->fp[0] = xstrdup(key);
        }
        fputc('\n', stderr);
        return 0;
    }
    if (total == 0)
        errorf_esc("compare: no baseline for cpu '%s' in %s (expected %s/%s.json; run `mhabench "
                   "compare --save-baseline NEW.json` to add one)",
                   key, dir, dir, key);
    else
        errorf_esc("compare: %d baseline files for cpu '%s' in %s%s, none with a matching "
                   "fingerprint%s; add one for this build with --save-baseline",
                   total, key, dir, older, why);
    return EXIT_USAGE;
}
