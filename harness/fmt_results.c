/* fmt_results.c - the fingerprint every result file carries (the measured
 * machine of mach_measure.c, compiler, flags, git revision, ISA cap,
 * binding, OMP environment) as mha_* key/values, run-file names under
 * results/runs/ that never collide, and the rewrite that turns Google
 * Benchmark's bare NaN / Infinity into JSON null. */
#include "fmt_results.h"

#include <ctype.h>
#include <errno.h>
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "mha_build_rev.h"
#include "util.h"

extern char **environ;

const char *const results_context_keys[] = {
    "mha_cpu_model",
    "mha_cpu_vendor",
    "mha_cpu_family",
    "mha_cpu_model_id",
    "mha_cpu_stepping",
    "mha_isa_flags",
    "mha_isa_detected",
    "mha_isa_cap",
    "mha_isa_active",
    "mha_cores",
    "mha_pus",
    "mha_cores_machine",
    "mha_l1d",
    "mha_l2",
    "mha_l3",
    "mha_l1d_raw",
    "mha_l2_raw",
    "mha_l3_raw",
    "mha_read_bw_gbs_1t",
    "mha_read_bw_gbs_all",
    "mha_read_bw_gbs_l1_1t",
    "mha_read_bw_gbs_l1_all",
    "mha_read_bw_gbs_l2_1t",
    "mha_read_bw_gbs_l2_all",
    "mha_read_bw_gbs_l3_1t",
    "mha_read_bw_gbs_l3_all",
    "mha_machine_measured",
    "mha_hugepages",
    "mha_compiler",
    "mha_cflags",
    "mha_git_revision",
    "mha_threads_max",
    "mha_binding",
    "mha_omp_env",
    "mha_cpu_key",
    "mha_preset",
    "mha_version",
    "mha_repetition_order",
    NULL,
};

/* Joins every environment variable starting with one of the prefixes as
 * NAME=value, space separated; "none" when there is none. */
static void env_joined(const char *const *prefixes, char *out, size_t len) {
    size_t o = 0;
    out[0] = '\0';
    for (char **e = environ; e && *e; e++) {
        int match = 0;
        for (const char *const *p = prefixes; *p; p++)
            if (strncmp(*e, *p, strlen(*p)) == 0) match = 1;
        if (!match) continue;
        const int n = snprintf(out + o, len - o, "%s%s", o ? " " : "", *e);
        if (n < 0 || (size_t)n >= len - o) break;
        o += (size_t)n;
    }
    if (o == 0) snprintf(out, len, "none");
}

#ifndef MHA_BUILD_FLAGS
#define MHA_BUILD_FLAGS "unknown (MHA_BUILD_FLAGS not set by the build)"
#endif

void results_context(const results_machine *rm, const results_run_info *ri, results_kv_fn emit,
                     void *user) {
    char buf[1024];
#define EMITF(key, ...)                                                                            \
    do {                                                                                           \
        snprintf(buf, sizeof buf, __VA_ARGS__);                                                    \
        emit(key, buf, user);                                                                      \
    } while (0)
    const machine_info *m = &rm->m;
    emit("mha_cpu_model", m->model[0] ? m->model : "unknown", user);
    emit("mha_cpu_vendor", m->vendor[0] ? m->vendor : "unknown", user);
    EMITF("mha_cpu_family", "%d", m->family);
    EMITF("mha_cpu_model_id", "%d", m->model_id);
    EMITF("mha_cpu_stepping", "%d", m->stepping);
    emit("mha_isa_flags", m->flags, user);
    emit("mha_isa_detected", mha_isa_name(mha_isa_detected()), user);
    const char *cap = getenv("MHA_ISA");
    emit("mha_isa_cap", cap && *cap ? cap : "none", user);
    emit("mha_isa_active", mha_isa_name(mha_isa_active()), user);
    EMITF("mha_cores", "%d", m->cores);
    EMITF("mha_pus", "%d", m->pus);
    EMITF("mha_cores_machine", "%d", m->cores_machine);
    EMITF("mha_l1d", "%llu", (unsigned long long)m->l1d);
    EMITF("mha_l2", "%llu", (unsigned long long)m->l2);
    EMITF("mha_l3", "%llu", (unsigned long long)m->l3);
    EMITF("mha_l1d_raw", "%llu", (unsigned long long)m->l1d_raw);
    EMITF("mha_l2_raw", "%llu", (unsigned long long)m->l2_raw);
    EMITF("mha_l3_raw", "%llu", (unsigned long long)m->l3_raw);
    /* each level's measured units under their rows' keys (kernels/ops.c):
     * mha_peak_gflops_<isa> the FMA, mha_peak_gflops_bf16_<isa> vdpbf16ps,
     * mha_peak_gflops_tile_<isa> the tiles, mha_peak_gexps_<isa> exp */
    for (int i = 0; i < MHA_ISA_COUNT; i++) {
        const mha_isa_ops *ops = mha_ops_for((mha_isa)i);
        for (int u = 0; u < ops->nunits; u++) {
            const mha_unit *unit = &ops->units[u];
            const double rate = results_unit_rate(rm, (mha_isa)i, unit);
            if (rate <= 0) continue;
            char key[96];
            snprintf(key, sizeof key, "%s%s", unit->context_key, mha_isa_name((mha_isa)i));
            /* FLOP rates in the hundreds, exp rates near one */
            EMITF(key, "%.*f", strcmp(unit->work, "FLOP") == 0 ? 2 : 3, rate);
        }
    }
    /* every core's FMA loop at once vs cores x one: multi-thread rows' peak */
    EMITF("mha_fma_ceiling_all", "%.3f", rm->fma_ceiling_all > 0 ? rm->fma_ceiling_all : 1);
    /* the page policy of the buffers (mha_alloc) and what the kernel allows */
    {
        char thp[32] = "unknown";
        FILE *tf = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
        char line[128];
        if (tf && fgets(line, sizeof line, tf)) {
            const char *a = strchr(line, '['), *b = a ? strchr(a, ']') : NULL;
            if (a && b && b - a - 1 < (ptrdiff_t)sizeof thp)
                snprintf(thp, sizeof thp, "%.*s", (int)(b - a - 1), a + 1);
        }
        if (tf) fclose(tf);
        EMITF("mha_hugepages", "%s (transparent_hugepage: %s)",
              mha_hugepages() ? "advised from 2 MiB" : "off (MHA_HUGEPAGES=0)", thp);
    }
    /* how many times the figures above were measured (retaken when disturbed),
     * and whether the last still looked disturbed */
    EMITF("mha_machine_measured", "%d%s", rm->measure_tries > 0 ? rm->measure_tries : 1,
          rm->disturbed ? " (disturbed)" : "");
    EMITF("mha_read_bw_gbs_1t", "%.2f", rm->read_bw_1t); /* DRAM */
    EMITF("mha_read_bw_gbs_all", "%.2f", rm->read_bw_all);
    for (int l = MACH_L1; l < MACH_DRAM; l++)
        for (int a = 0; a < 2; a++) {
            char key[64];
            snprintf(key, sizeof key, "mha_read_bw_gbs_l%d_%s", l + 1, a ? "all" : "1t");
            EMITF(key, "%.2f", rm->level_bw[l][a]);
        }
#if defined(__clang__)
    EMITF("mha_compiler", "clang %s", __clang_version__);
#elif defined(__GNUC__)
    EMITF("mha_compiler", "gcc %s", __VERSION__);
#else
    emit("mha_compiler", "unknown", user);
#endif
    emit("mha_cflags", MHA_BUILD_FLAGS, user);
    results_git_revision(buf, sizeof buf);
    emit("mha_git_revision", buf, user);
    EMITF("mha_threads_max", "%d", ri->threads_max);
    emit("mha_binding", ri->binding ? ri->binding : "none", user);
    static const char *const omp_prefixes[] = {"OMP_", "GOMP_", NULL};
    env_joined(omp_prefixes, buf, sizeof buf);
    emit("mha_omp_env", buf, user);
    static const char *const blas_prefixes[] = {"OPENBLAS_", NULL};
    env_joined(blas_prefixes, buf, sizeof buf);
    emit("mha_blas_env", buf, user);
    emit("mha_cpu_key", rm->cpu_key, user);
    emit("mha_preset", ri->preset ? ri->preset : "none", user);
#ifdef MHA_VERSION
    emit("mha_version", MHA_VERSION, user);
#else
    emit("mha_version", "unknown", user);
#endif
    emit("mha_repetition_order", ri->repetition_order ? ri->repetition_order : "grouped", user);
    EMITF("mha_seed", "%llu", (unsigned long long)ri->seed);
#undef EMITF
}

void results_git_revision(char *out, size_t len) {
    snprintf(out, len, "%s", MHA_BUILD_REV);
}

int results_run_path(const char *dir, time_t t, int attempt, char *out, size_t len) {
    char host[256] = "host";
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "host");
    host[sizeof host - 1] = '\0';
    for (char *c = host; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '-' || *c == '_' || *c == '.'))
            *c = '_';
    if (!host[0]) snprintf(host, sizeof host, "host");
    struct tm tm;
    gmtime_r(&t, &tm);
    char stamp[32], suffix[16] = "";
    strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
    if (attempt > 0) snprintf(suffix, sizeof suffix, "-%d", attempt + 1);
    const int n =
        snprintf(out, len, "%s/%s-%s%s.json", dir ? dir : "results/runs", host, stamp, suffix);
    return n > 0 && (size_t)n < len;
}

mha_status results_commit_run(mha_out *w, const char *dir, time_t t, char *why, size_t len) {
    char path[4096];
    for (int attempt = 0; attempt < 10000; attempt++) {
        if (attempt > 0) {
            mha_status st = MHA_EINVAL;
            if (!results_run_path(dir, t, attempt, path, sizeof path) ||
                (st = mha_out_retarget(w, path, why, len)) != MHA_OK) {
                mha_out_abort(w);
                return st;
            }
        }
        const mha_status st = mha_out_commit(w, why, len);
        if (st == MHA_OK || !w->exists) return st;
    }
    mha_out_abort(w);
    snprintf(why, len, "no free run-file name in '%s'", dir ? dir : "results/runs");
    return MHA_EIO;
}

/* The whole unnamed file of w (read back from its start) as a
 * NUL-terminated string of *n bytes; NULL with the reason in why. */
char *results_out_read(const mha_out *w, size_t *n, char *why, size_t len) {
    struct stat sb;
    if (fstat(w->fd, &sb) != 0) {
        snprintf(why, len, "cannot stat the result file: %s", strerror(errno));
        return NULL;
    }
    *n = (size_t)sb.st_size;
    char *in = malloc(*n + 1);
    if (!in) {
        snprintf(why, len, "out of memory reading the result file (%zu bytes)", *n);
        return NULL;
    }
    size_t got = 0;
    while (got < *n) {
        const ssize_t k = pread(w->fd, in + got, *n - got, (off_t)got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        got += (size_t)k;
    }
    if (got != *n) {
        snprintf(why, len, "cannot read back the result file: short read");
        free(in);
        return NULL;
    }
    in[*n] = '\0';
    return in;
}

mha_status results_json_fix_nonfinite(mha_out *w, char *why, size_t len) {
    const int fd = w->fd;
    size_t n;
    char *in = results_out_read(w, &n, why, len);
    if (!in) return MHA_EIO;
    /* null is one byte longer than NaN or inf: at most 4/3 of the input. */
    char *out = malloc(n + n / 3 + 8);
    if (!out) {
        free(in);
        snprintf(why, len, "out of memory reading the result file (%zu bytes)", n);
        return MHA_ENOMEM;
    }
    /* Outside strings, a bare NaN / Infinity token (any sign, any case of
     * nan/inf) becomes null. */
    static const char *const words[] = {"-Infinity", "Infinity", "-NaN", "NaN",
                                        "-inf",      "inf",      "-nan", "nan"};
    size_t o = 0;
    int in_str = 0, changed = 0;
    for (size_t i = 0; i < n;) {
        const char c = in[i];
        if (in_str) {
            out[o++] = c;
            i++;
            if (c == '\\' && i < n)
                out[o++] = in[i++];
            else if (c == '"')
                in_str = 0;
            continue;
        }
        if (c == '"') in_str = 1;
        size_t wl = 0;
        const int boundary = i == 0 || !isalnum((unsigned char)in[i - 1]);
        for (size_t k = 0; boundary && k < sizeof words / sizeof *words && !wl; k++) {
            const size_t l = strlen(words[k]);
            if (l <= n - i && memcmp(in + i, words[k], l) == 0 &&
                (i + l == n || !isalnum((unsigned char)in[i + l])))
                wl = l;
        }
        if (wl) {
            memcpy(out + o, "null", 4);
            o += 4;
            i += wl;
            changed = 1;
            continue;
        }
        out[o++] = c;
        i++;
    }
    mha_status st = MHA_OK;
    if (changed) { /* null is shorter than Infinity: truncate after the rewrite */
        if (lseek(fd, 0, SEEK_SET) != 0 || (st = mha_out_write(w, out, o, why, len)) != MHA_OK ||
            ftruncate(fd, (off_t)o) != 0) {
            if (st == MHA_OK)
                snprintf(why, len, "cannot rewrite the result file: %s", strerror(errno));
            st = MHA_EIO;
        }
    }
    free(in);
    free(out);
    return st;
}

json_object *results_json_double(double v) {
    return isfinite(v) ? json_object_new_double(v) : NULL;
}

char *results_read_file(const char *path, size_t *len, char *why, size_t wlen) {
    const int fd = mha_open_input(path, why, wlen);
    if (fd < 0) return NULL;
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (cap - n < 65536) {
            cap = cap ? 2 * cap : 65536;
            buf = xrealloc_or_exit(buf, cap + 1, 1, "results");
        }
        const ssize_t got = read(fd, buf + n, cap - n);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            snprintf(why, wlen, "read error: %s", strerror(errno));
            close(fd);
            free(buf);
            return NULL;
        }
        if (got == 0) break;
        n += (size_t)got;
    }
    close(fd);
    buf[n] = '\0';
    *len = n;
    return buf;
}

json_object *results_load_json(const char *who, const char *path) {
    size_t len = 0;
    char why[512];
    char *text = results_read_file(path, &len, why, sizeof why);
    if (!text) {
        errorf_esc("%s: cannot read %s: %s", who, path, why);
        return NULL;
    }
    json_tokener *tok = json_tokener_new();
    if (!tok) exit_out_of_memory(who);
    json_object *root = json_tokener_parse_ex(tok, text, (int)len);
    const enum json_tokener_error jerr = json_tokener_get_error(tok);
    size_t end = json_tokener_get_parse_end(tok);
    const char *bad = NULL;
    if (!root && jerr == json_tokener_continue) {
        bad = "unexpected end of file";
        end = len;
    } else if (!root) {
        bad = json_tokener_error_desc(jerr);
    } else {
        while (end < len && strchr(" \t\r\n", text[end])) end++;
        if (end < len) bad = "unexpected data after the JSON value";
    }
    json_tokener_free(tok);
    if (bad) {
        json_object_put(root);
        root = NULL;
        int line = 1, col = 1;
        for (size_t i = 0; i < end && i < len; i++) {
            if (text[i] == '\n') {
                line++;
                col = 1;
            } else {
                col++;
            }
        }
        errorf_esc("%s: %s: not valid JSON: %s at line %d, column %d (json-c)", who, path, bad,
                   line, col);
    }
    free(text);
    return root;
}

const char *results_row_str(json_object *row, const char *key) {
    json_object *v;
    if (!json_object_object_get_ex(row, key, &v) || !json_object_is_type(v, json_type_string))
        return NULL;
    return json_object_get_string(v);
}

double results_row_num(json_object *row, const char *key, double dflt) {
    json_object *v;
    if (!json_object_object_get_ex(row, key, &v) ||
        !(json_object_is_type(v, json_type_double) || json_object_is_type(v, json_type_int)))
        return dflt;
    return json_object_get_double(v);
}

int results_background_steady(json_object *ctx) {
    json_object *bg;
    return ctx && json_object_is_type(ctx, json_type_object) &&
           json_object_object_get_ex(ctx, "mha_background", &bg) &&
           json_object_is_type(bg, json_type_string) &&
           strncmp(json_object_get_string(bg), "steady", 6) == 0;
}

int results_row_is_iteration(json_object *row) {
    const char *type = results_row_str(row, "run_type");
    return type ? strcmp(type, "iteration") == 0
                : !json_object_object_get_ex(row, "aggregate_name", NULL);
}

double results_unit_ns(const char *unit) {
    if (!unit || strcmp(unit, "ns") == 0) return 1;
    if (strcmp(unit, "us") == 0) return 1e3;
    if (strcmp(unit, "ms") == 0) return 1e6;
    if (strcmp(unit, "s") == 0) return 1e9;
    return 0;
}
