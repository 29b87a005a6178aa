/* tables.c - the per-CPU tuning tables: where they live (MHA_TUNING,
 * MHA_TUNING_DIR, the installed data folder, the source tree), the json-c
 * reader that validates one, and a per-process cache of the parsed table.
 * Built without SIMD flags. */
#include <ctype.h>
#include <errno.h>
#include <json-c/json.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>

#include "fileio.h"
#include "internal.h"
#include "select.h"

#ifndef MHA_SOURCE_DIR
#define MHA_SOURCE_DIR "."
#endif
#ifndef MHA_DATA_DIR
#define MHA_DATA_DIR MHA_SOURCE_DIR "/results"
#endif

/* ---- tuning tables ------------------------------------------------------------------------ */

static int is_dir(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* Where mha_table_dir's answer comes from: 0 MHA_TUNING_DIR, 1 the installed
 * tables, 2 the source tree's. */
static int table_dir_origin(void) {
    const char *dir = getenv("MHA_TUNING_DIR");
    if (dir && *dir) return 0;
    /* An installed library reads the tables meson installed; a build that
     * was never installed reads the source tree's. */
    return is_dir(MHA_DATA_DIR "/tuning") ? 1 : 2;
}

const char *mha_table_dir(void) {
    static const char *const dirs[] = {NULL, MHA_DATA_DIR "/tuning",
                                       MHA_SOURCE_DIR "/results/tuning"};
    const int origin = table_dir_origin();
    return origin == 0 ? getenv("MHA_TUNING_DIR") : dirs[origin];
}

void mha_table_dir_why(char *why, size_t len) {
    switch (table_dir_origin()) {
    case 0:
        snprintf(why, len, "MHA_TUNING_DIR names it");
        break;
    case 1:
        snprintf(why, len, "this installation's tables (MHA_TUNING_DIR is unset)");
        break;
    default:
        snprintf(why, len,
                 "the source tree's tables (MHA_TUNING_DIR is unset, and " MHA_DATA_DIR
                 "/tuning is absent: not installed)");
    }
}

/* Whether path's folder is the resolved folder dir. */
static int in_folder(const char *path, const char *dir) {
    char buf[4096], rp[PATH_MAX], rd[PATH_MAX];
    snprintf(buf, sizeof buf, "%s", path);
    char *slash = strrchr(buf, '/');
    if (slash == buf)
        buf[1] = '\0';
    else if (slash)
        *slash = '\0';
    else
        snprintf(buf, sizeof buf, ".");
    return realpath(buf, rp) && realpath(dir, rd) && strcmp(rp, rd) == 0;
}

const char *mha_table_shipped(const char *path) {
    if (in_folder(path, MHA_DATA_DIR "/tuning")) return "an installed table";
    if (in_folder(path, MHA_SOURCE_DIR "/results/tuning"))
        return "a table of the source tree's results/tuning (committed ones live there)";
    return NULL;
}

const char *mha_table_write_dir(void) {
    return mha_table_dir(); /* where the reader looks first, so a fresh table is the one read */
}

/* <dir>/<cpu key>, or <dir>/<cpu key>-cap-<isa> under an MHA_ISA cap: the
 * name tables of this CPU and level share. */
void mha_table_cpu_base(const char *dir, char *out, size_t len) {
    char key[96];
    mha_cpu_key(key, sizeof key);
    const mha_isa act = mha_isa_active();
    if (act == mha_isa_detected())
        snprintf(out, len, "%s/%s", dir, key);
    else /* a table tuned under an MHA_ISA cap must not replace the native one */
        snprintf(out, len, "%s/%s-cap-%s", dir, key, mha_isa_name(act));
}

/* "YYYYMMDDTHHMMSSZ", or with "-<n>": tune's never-replacing names; *num
 * gets n (1 when absent). */
static int stamp_part(const char *s, size_t n, long *num) {
    if (n < 16) return 0;
    for (int i = 0; i < 16; i++) {
        const char c = s[i];
        if (i == 8 ? c != 'T' : i == 15 ? c != 'Z' : !isdigit((unsigned char)c)) return 0;
    }
    *num = 1;
    if (n == 16) return 1;
    if (s[16] != '-' || n == 17) return 0;
    for (size_t i = 17; i < n; i++)
        if (!isdigit((unsigned char)s[i])) return 0;
    *num = strtol(s + 17, NULL, 10);
    return 1;
}

/* The newest stamp part among <name>-<stamp>[-n].json in dir (best, "" when
 * none); *count gets the number of such tables. */
static void newest_stamped(const char *dir, const char *name, char *best, size_t blen, int *count) {
    const size_t bl = strlen(name);
    long best_n = 0;
    best[0] = '\0';
    *count = 0;
    DIR *d = opendir(dir);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        const char *f = e->d_name;
        const size_t fl = strlen(f);
        long n;
        if (fl < bl + 6 || fl - bl - 6 >= blen || strncmp(f, name, bl) != 0 || f[bl] != '-' ||
            strcmp(f + fl - 5, ".json") != 0 || !stamp_part(f + bl + 1, fl - bl - 6, &n))
            continue;
        ++*count;
        const int c = best[0] ? strncmp(f + bl + 1, best, 16) : 1;
        if (c > 0 || (c == 0 && n > best_n)) {
            snprintf(best, blen, "%.*s", (int)(fl - bl - 6), f + bl + 1);
            best_n = n;
        }
    }
    closedir(d);
}

/* mha_table_cpu_path, and in why (when not NULL) how the file was picked. */
static void cpu_path_why(const char *dir, char *out, size_t len, char *why, size_t wlen) {
    char base[4096], best[64];
    mha_table_cpu_base(dir, base, sizeof base);
    snprintf(out, len, "%s.json", base);
    /* the newest of <base>.json and <base>-<stamp>[-n].json: tune never
     * replaces a table, it adds one beside it */
    const char *name = strrchr(base, '/') + 1;
    int stamped = 0;
    newest_stamped(dir, name, best, sizeof best, &stamped);
    if (best[0]) snprintf(out, len, "%s-%s.json", base, best);
    if (!why) return;
    struct stat sb;
    char plain[4200];
    snprintf(plain, sizeof plain, "%s.json", base);
    const int have_plain = stat(plain, &sb) == 0;
    char cap[96] = "";
    if (mha_isa_active() != mha_isa_detected())
        snprintf(cap, sizeof cap, "; the name under the MHA_ISA cap %s",
                 mha_isa_name(mha_isa_active()));
    if (best[0])
        snprintf(why, wlen,
                 "the newest of this CPU's %d tables there (%s.json and the %s-<UTC time>.json "
                 "tune adds beside it)%s",
                 stamped + have_plain, name, name, cap);
    else if (have_plain)
        snprintf(why, wlen, "this CPU's table %s.json (no newer one beside it)%s", name, cap);
    else
        snprintf(why, wlen, "none: no %s.json or %s-<UTC time>.json there%s", name, name, cap);
}

void mha_table_cpu_path(const char *dir, char *out, size_t len) {
    cpu_path_why(dir, out, len, NULL, 0);
}

void mha_table_locate(char *out, size_t len, char *dir_why, size_t dlen, char *file_why,
                      size_t flen) {
    const char *file = getenv("MHA_TUNING");
    if (file && *file) {
        snprintf(out, len, "%s", file);
        if (dir_why) snprintf(dir_why, dlen, "none searched: MHA_TUNING names the file");
        if (file_why) snprintf(file_why, flen, "MHA_TUNING=%s", file);
        return;
    }
    const char *dir = mha_table_dir();
    if (dir_why) {
        char why[512];
        mha_table_dir_why(why, sizeof why);
        snprintf(dir_why, dlen, "%s: %s", dir, why);
    }
    cpu_path_why(dir, out, len, file_why, flen);
}

void mha_table_default_path(char *out, size_t len) {
    mha_table_locate(out, len, NULL, 0, NULL, 0);
}

void mha_table_free(mha_table *t) {
    free(t->entries);
    memset(t, 0, sizeof *t);
}

#define TABLE_MAX_BYTES ((uint64_t)16 << 20) /* 16 MiB */

static mha_status fmt_error(char *why, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static mha_status fmt_error(char *why, size_t len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, len, fmt, ap);
    va_end(ap);
    return MHA_EFORMAT;
}

/* An integer member (json-c accepts "64" as an int; a table must not). */
static int get_int(json_object *o, const char *key, int required, int *out) {
    json_object *v;
    if (!json_object_object_get_ex(o, key, &v) || !v) return required ? -1 : 0;
    if (!json_object_is_type(v, json_type_int)) return -2;
    const int64_t x = json_object_get_int64(v);
    *out = x < -1000000 ? -1000000 : x > 1000000 ? 1000000 : (int)x;
    return 0;
}

static mha_status parse_choice(json_object *o, const char *where, mha_table_choice *c, char *why,
                               size_t len) {
    memset(c, 0, sizeof *c);
    if (!o || json_object_is_type(o, json_type_null)) return MHA_OK;
    if (!json_object_is_type(o, json_type_object))
        return fmt_error(why, len, "%s is not an object", where);
    json_object *k;
    if (!json_object_object_get_ex(o, "kernel", &k) || !json_object_is_type(k, json_type_string))
        return fmt_error(why, len, "%s.kernel is missing or not a string", where);
    snprintf(c->kernel, sizeof c->kernel, "%s", json_object_get_string(k));
    static const char *const knobs[] = {"block_q", "block_kv", "split"};
    int *dst[] = {&c->block_q, &c->block_kv, &c->split};
    for (int i = 0; i < 3; i++) {
        const int r = get_int(o, knobs[i], i < 2, dst[i]);
        if (r == -1) return fmt_error(why, len, "%s.%s is missing", where, knobs[i]);
        if (r == -2) return fmt_error(why, len, "%s.%s is not an integer", where, knobs[i]);
    }
    json_object *g;
    if (json_object_object_get_ex(o, "gflops", &g) && g) {
        if (!json_object_is_type(g, json_type_double) && !json_object_is_type(g, json_type_int))
            return fmt_error(why, len, "%s.gflops is not a number", where);
        c->gflops = json_object_get_double(g);
    }
    c->present = 1;
    return MHA_OK;
}

static mha_status parse_table(json_object *root, mha_table *t, char *why, size_t len) {
    if (!json_object_is_type(root, json_type_object))
        return fmt_error(why, len, "the top level is not an object");
    json_object *fp, *v, *classes;
    if (!json_object_object_get_ex(root, "fingerprint", &fp) ||
        !json_object_is_type(fp, json_type_object))
        return fmt_error(why, len, "\"fingerprint\" is missing or not an object");
    if (!json_object_object_get_ex(fp, "cpu_key", &v) || !json_object_is_type(v, json_type_string))
        return fmt_error(why, len, "fingerprint.cpu_key is missing or not a string");
    snprintf(t->cpu_key, sizeof t->cpu_key, "%s", json_object_get_string(v));
    if (!json_object_object_get_ex(fp, "isa_active", &v) ||
        !json_object_is_type(v, json_type_string))
        return fmt_error(why, len, "fingerprint.isa_active is missing or not a string");
    snprintf(t->isa_active, sizeof t->isa_active, "%s", json_object_get_string(v));
    if (!json_object_object_get_ex(root, "classes", &classes) ||
        !json_object_is_type(classes, json_type_array))
        return fmt_error(why, len, "\"classes\" is missing or not an array");
    const size_t n = json_object_array_length(classes);
    if (n > 100000) return fmt_error(why, len, "\"classes\" has %zu entries (too many)", n);
    t->entries = calloc(n ? n : 1, sizeof *t->entries);
    if (!t->entries) return fmt_error(why, len, "out of memory for %zu classes", n);
    for (size_t i = 0; i < n; i++) {
        json_object *e = json_object_array_get_idx(classes, i), *cls, *w, *r = NULL;
        char where[64];
        if (!json_object_is_type(e, json_type_object))
            return fmt_error(why, len, "classes[%zu] is not an object", i);
        if (!json_object_object_get_ex(e, "class", &cls) ||
            !json_object_is_type(cls, json_type_string))
            return fmt_error(why, len, "classes[%zu].class is missing or not a string", i);
        mha_table_entry *te = &t->entries[t->count];
        snprintf(te->cls, sizeof te->cls, "%s", json_object_get_string(cls));
        /* the dtypes it was measured in: fp32 when absent (older tables) */
        static const char *const dkeys[] = {"dtype", "kv_dtype"};
        mha_dtype *dst[] = {&te->dtype, &te->kv_dtype};
        te->dtype = MHA_F32;
        for (int j = 0; j < 2; j++) {
            json_object *dv;
            *dst[j] = te->dtype; /* kv_dtype: the dtype's unless given */
            if (!json_object_object_get_ex(e, dkeys[j], &dv) || !dv) continue;
            if (!json_object_is_type(dv, json_type_string) ||
                mha_dtype_parse(json_object_get_string(dv), dst[j]) != MHA_OK ||
                (j == 0 && *dst[j] == MHA_I8))
                return fmt_error(why, len, "classes[%zu].%s is not %s", i, dkeys[j],
                                 j == 0 ? "fp32, bf16 or fp16" : "fp32, bf16, fp16 or int8");
        }
        if (!json_object_object_get_ex(e, "winner", &w) || !w)
            return fmt_error(why, len, "classes[%zu].winner is missing", i);
        snprintf(where, sizeof where, "classes[%zu].winner", i);
        mha_status st = parse_choice(w, where, &te->winner, why, len);
        if (st != MHA_OK) return st;
        if (!te->winner.present) return fmt_error(why, len, "classes[%zu].winner is null", i);
        json_object_object_get_ex(e, "runner_up", &r);
        snprintf(where, sizeof where, "classes[%zu].runner_up", i);
        if ((st = parse_choice(r, where, &te->runner_up, why, len)) != MHA_OK) return st;
        t->count++;
    }
    return MHA_OK;
}

mha_status mha_table_load(const char *path, mha_table *t, char *why, size_t len) {
    memset(t, 0, sizeof *t);
    why[0] = '\0';
    /* A FIFO or device named by MHA_TUNING is refused, never waited on. */
    FILE *f = mha_fopen_input(path, why, len);
    if (!f) return MHA_EIO;
    /* The buffer grows with the file (tables are kilobytes): one 16 MiB
     * allocation per load is what ASan made cost 3 ms in the fuzz target. */
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            if (cap > TABLE_MAX_BYTES) break;
            cap = cap ? 2 * cap : 65536;
            if (cap > TABLE_MAX_BYTES + 1) cap = TABLE_MAX_BYTES + 1;
            char *grown = realloc(buf, cap);
            if (!grown) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = grown;
        }
        const size_t got = fread(buf + n, 1, cap - n, f);
        if (got == 0) break;
        n += got;
    }
    const int rerr = ferror(f);
    fclose(f);
    if (!buf || rerr) {
        free(buf);
        snprintf(why, len, "%s", buf ? "read error" : "out of memory");
        return MHA_EIO;
    }
    if (n > TABLE_MAX_BYTES) {
        free(buf);
        return fmt_error(why, len, "larger than %llu bytes", (unsigned long long)TABLE_MAX_BYTES);
    }
    size_t start = 0;
    while (start < n && isspace((unsigned char)buf[start])) start++;
    if (start == n) {
        free(buf);
        return fmt_error(why, len, "empty file");
    }
    json_tokener *tok = json_tokener_new();
    if (!tok) {
        free(buf);
        snprintf(why, len, "out of memory");
        return MHA_EIO;
    }
    json_object *root = json_tokener_parse_ex(tok, buf, (int)n);
    const enum json_tokener_error jerr = json_tokener_get_error(tok);
    size_t end = json_tokener_get_parse_end(tok);
    json_tokener_free(tok);
    mha_status st = MHA_OK;
    if (jerr == json_tokener_continue) {
        st = fmt_error(why, len, "truncated JSON (ends inside a value after %zu bytes)", n);
    } else if (jerr != json_tokener_success || !root) {
        st = fmt_error(why, len, "malformed JSON: %s", json_tokener_error_desc(jerr));
    } else {
        while (end < n && isspace((unsigned char)buf[end])) end++;
        if (end < n)
            st = fmt_error(why, len, "trailing data after the JSON value at byte %zu", end);
        else
            st = parse_table(root, t, why, len);
    }
    json_object_put(root);
    free(buf);
    if (st != MHA_OK) mha_table_free(t);
    return st;
}

/* One parsed table kept per process, keyed by path and file identity, so
 * repeated mha_select calls do not re-read it; a changed file is re-read. */
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    int valid;
    char path[1024];
    struct stat sb;
    mha_status st;
    char why[192];
    mha_table t;
} table_cache;

static int same_file(const struct stat *a, const struct stat *b) {
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

/* Copies the entry for class name cls (and the table's fingerprint) out of the
 * cached table at path. Returns MHA_OK and *found = 0/1, or the load status. */
mha_status mha_table_lookup(const char *path, const char *const *names, int nnames, mha_dtype dtype,
                            mha_dtype kv_dtype, mha_table_entry *entry, int *found, char *key,
                            size_t keylen, char *isa, size_t isalen, char *why, size_t len) {
    *found = 0;
    struct stat sb;
    if (stat(path, &sb) != 0) {
        snprintf(why, len, "cannot open: %s", strerror(errno));
        return MHA_EIO;
    }
    pthread_mutex_lock(&table_lock);
    if (!table_cache.valid || strcmp(table_cache.path, path) != 0 ||
        !same_file(&table_cache.sb, &sb)) {
        if (table_cache.valid) mha_table_free(&table_cache.t);
        table_cache.valid = 1;
        snprintf(table_cache.path, sizeof table_cache.path, "%s", path);
        table_cache.sb = sb;
        table_cache.st =
            mha_table_load(path, &table_cache.t, table_cache.why, sizeof table_cache.why);
    }
    const mha_status st = table_cache.st;
    if (st != MHA_OK) {
        snprintf(why, len, "%s", table_cache.why);
    } else {
        snprintf(key, keylen, "%s", table_cache.t.cpu_key);
        snprintf(isa, isalen, "%s", table_cache.t.isa_active);
        for (int n = 0; n < nnames && !*found; n++)
            for (int i = 0; i < table_cache.t.count; i++)
                if (strcmp(table_cache.t.entries[i].cls, names[n]) == 0 &&
                    table_cache.t.entries[i].dtype == dtype &&
                    table_cache.t.entries[i].kv_dtype == kv_dtype) {
                    *entry = table_cache.t.entries[i];
                    *found = 1;
                    break;
                }
    }
    pthread_mutex_unlock(&table_lock);
    return st;
}
