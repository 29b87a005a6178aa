/* util.c - helpers shared by the mhabench subcommands: messages, strict
 * number parsing (the whole string, in range, else a message naming the
 * option), kernel lookup with a clear reason, and the MHA_ISA check. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mha_private.h"
#include "util.h"
#include "suggest.h"

void errorf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("mhabench: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

void *xrealloc_or_exit(void *p, size_t n, size_t size, const char *who) {
    void *q = NULL;
    if (size == 0 || n <= SIZE_MAX / size) q = realloc(p, n && size ? n * size : 1);
    if (!q) {
        errorf("%s: out of memory (%zu x %zu bytes)", who, n, size);
        exit(EXIT_USAGE);
    }
    return q;
}

void exit_out_of_memory(const char *who) {
    errorf("%s: out of memory", who);
    exit(EXIT_USAGE);
}

char *xstrdup_or_exit(const char *s, const char *who) {
    const size_t n = strlen(s) + 1;
    return memcpy(xrealloc_or_exit(NULL, n, 1, who), s, n);
}

int parse_i64(const char *opt, const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long v = s ? strtoll(s, &end, 10) : 0;
    if (!s || !*s || *end || errno == ERANGE) {
        errorf("%s: '%s' is not an integer", opt, s ? s : "");
        return 0;
    }
    if (v < lo || v > hi) {
        errorf("%s: %lld is out of range [%lld, %lld]", opt, v, (long long)lo, (long long)hi);
        return 0;
    }
    *out = v;
    return 1;
}

int parse_float(const char *opt, const char *s, float *out) {
    char *end;
    errno = 0;
    float v = s ? strtof(s, &end) : 0;
    if (!s || !*s || *end || errno == ERANGE || !isfinite(v)) {
        errorf("%s: '%s' is not a finite number", opt, s ? s : "");
        return 0;
    }
    *out = v;
    return 1;
}

int parse_double(const char *opt, const char *s, double lo, double hi, int open_lo, double *out) {
    char *end;
    errno = 0;
    const double v = s ? strtod(s, &end) : 0;
    if (!s || !*s || *end || errno == ERANGE || !isfinite(v)) {
        errorf("%s: '%s' is not a finite number", opt, s ? s : "");
        return 0;
    }
    if (v > hi || v < lo || (open_lo && v == lo)) {
        errorf("%s: %g is out of range %c%g, %g]", opt, v, open_lo ? '(' : '[', lo, hi);
        return 0;
    }
    *out = v;
    return 1;
}

/* The one comma-list splitter: calls item(ctx, text) for each item of s in
 * order (text NUL-terminated, at most 127 bytes). An empty list ("<opt>:
 * empty <list>"), an empty or overlong item ("... <what> at position N of
 * '<s>'") is an error; so is an item that item() rejects (it prints its own
 * message). Returns 0 or -1. */
static int each_item(const char *opt, const char *s, const char *list, const char *what,
                     int (*item)(void *ctx, const char *text), void *ctx) {
    if (!s || !*s) {
        errorf("%s: empty %s", opt, list);
        return -1;
    }
    for (const char *p = s, *comma;; p = comma + 1) {
        comma = strchr(p, ',');
        const size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char text[128];
        if (len == 0 || len >= sizeof text) {
            int pos = 1;
            for (const char *q = s; q < p; q++) pos += *q == ',';
            errorf("%s: %s %s at position %d of '%s'", opt, len ? "overlong" : "empty", what, pos,
                   s);
            return -1;
        }
        memcpy(text, p, len);
        text[len] = '\0';
        if (item(ctx, text) != 0) return -1;
        if (!comma) return 0;
    }
}

typedef struct {
    const char *opt, *s;
    int64_t lo, hi, all; /* all < 0: no "all" item */
    int64_t *out;
    int n, max;
} i64_list;

static int i64_item(void *ctx, const char *text) {
    i64_list *l = ctx;
    if (l->n == l->max) {
        errorf("%s: more than %d values in '%s'", l->opt, l->max, l->s);
        return -1;
    }
    if (l->all >= 0 && strcmp(text, "all") == 0) {
        l->out[l->n++] = l->all;
        return 0;
    }
    if (!parse_i64(l->opt, text, l->lo, l->hi, &l->out[l->n])) return -1;
    l->n++;
    return 0;
}

int parse_i64_list(const char *opt, const char *s, int64_t lo, int64_t hi, int64_t *out, int max) {
    return parse_i64_list_all(opt, s, lo, hi, -1, out, max);
}

int parse_i64_list_all(const char *opt, const char *s, int64_t lo, int64_t hi, int64_t all,
                       int64_t *out, int max) {
    i64_list l = {opt, s, lo, hi, all, out, 0, max};
    return each_item(opt, s, "list", "value", i64_item, &l) == 0 ? l.n : -1;
}

typedef struct {
    const char *opt, *s;
    double lo, hi;
    double *out;
    int n, max;
} double_list;

static int double_item(void *ctx, const char *text) {
    double_list *l = ctx;
    if (l->n == l->max) {
        errorf("%s: more than %d values in '%s'", l->opt, l->max, l->s);
        return -1;
    }
    if (!parse_double(l->opt, text, l->lo, l->hi, 0, &l->out[l->n])) return -1;
    l->n++;
    return 0;
}

int parse_double_list(const char *opt, const char *s, double lo, double hi, double *out, int max) {
    double_list l = {opt, s, lo, hi, out, 0, max};
    return each_item(opt, s, "list", "value", double_item, &l) == 0 ? l.n : -1;
}

int parse_window(const char *opt, const char *s, char sep, window_spec *out) {
    /* 2^40 keys: past any sequence, so an edge that large is unbounded */
    const int64_t big = (int64_t)1 << 40;
    const char *mid = strchr(s, sep);
    char left[64];
    if (!mid || mid == s || (size_t)(mid - s) >= sizeof left || strchr(mid + 1, sep)) {
        errorf("%s '%s': expected L%cR (L keys before the diagonal, R after; -1 = unbounded)", opt,
               s, sep);
        return 0;
    }
    snprintf(left, sizeof left, "%.*s", (int)(mid - s), s);
    int64_t lr[2];
    char what[200];
    for (int i = 0; i < 2; i++) {
        snprintf(what, sizeof what, "%s '%s': %s", opt, s, i ? "R" : "L");
        if (!parse_i64(what, i ? mid + 1 : left, -big, big, &lr[i])) return 0;
        if (lr[i] < -1) {
            errorf("%s '%s': %s = %lld is below -1 (-1 = unbounded, else keys)", opt, s,
                   i ? "R" : "L", (long long)lr[i]);
            return 0;
        }
    }
    *out = (window_spec){1, lr[0], lr[1]};
    return 1;
}

typedef struct {
    const char *opt, *s;
    window_spec *out;
    int n, max;
} window_list;

static int window_item(void *ctx, const char *text) {
    window_list *l = ctx;
    if (l->n == l->max) {
        errorf("%s: more than %d windows in '%s'", l->opt, l->max, l->s);
        return -1;
    }
    if (strcmp(text, "none") == 0)
        l->out[l->n] = (window_spec){0, 0, 0};
    else if (!parse_window(l->opt, text, ':', &l->out[l->n]))
        return -1;
    l->n++;
    return 0;
}

int parse_window_list(const char *opt, const char *s, window_spec *out, int max) {
    window_list l = {opt, s, out, 0, max};
    return each_item(opt, s, "list", "window", window_item, &l) == 0 ? l.n : -1;
}

int variant_arg(const char *cmd, int id, const char *arg, variant_args *v) {
    char opt[64];
    switch (id) {
    case 'W':
        snprintf(opt, sizeof opt, "%s: --window", cmd);
        return parse_window(opt, arg, ',', &v->window);
    case 'C':
        snprintf(opt, sizeof opt, "%s: --softcap", cmd);
        return parse_double(opt, arg, 0.0, 1e30, 1, &v->softcap);
    case 'Z':
        v->sinks = 1;
        return 1;
    case 'V':
        snprintf(opt, sizeof opt, "%s: --head-dim-v", cmd);
        return parse_i64(opt, arg, 1, 1 << 16, &v->dv);
    default:
        return -1;
    }
}

int variant_any(const variant_args *v) {
    return v->window.on || v->softcap > 0 || v->sinks || v->dv;
}

void variant_apply(const variant_args *v, mha_problem *p) {
    p->window = v->window.on;
    p->window_left = v->window.left;
    p->window_right = v->window.right;
    p->softcap = (float)v->softcap;
    p->sinks = v->sinks;
    p->head_dim_v = v->dv;
}

void say_unknown(const char *opt, const char *what, const char *name, const char *const *cands,
                 int n, const char *otherwise) {
    char msg[2048];
    errorf_esc("%s: %s", opt, suggest_unknown(msg, sizeof msg, what, name, cands, n, otherwise));
}

int name_index_or_say(const char *opt, const char *what, const char *name, const char *const *cands,
                      int n, const char *otherwise) {
    for (int i = 0; name && i < n; i++)
        if (cands[i] && strcmp(cands[i], name) == 0) return i;
    say_unknown(opt, what, name, cands, n, otherwise);
    return -1;
}

enum { MAX_NAMES = 128 };

const mha_kernel *find_kernel_or_say(const char *opt, const char *name, int with_auto) {
    const mha_kernel *k = mha_kernel_find(name);
    if (k) return k;
    const int nk = mha_kernel_count() < MAX_NAMES - 1 ? mha_kernel_count() : MAX_NAMES - 1;
    /* an algorithm's name (flash, decode): the kernels it has, from the registry */
    char list[1024] = "";
    for (int i = 0; name && i < nk; i++)
        if (strcmp(mha_kernel_algorithm(mha_kernel_at(i)), name) == 0)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", list[0] ? ", " : "",
                     mha_kernel_name(mha_kernel_at(i)));
    if (list[0]) {
        errorf("%s: '%s' is an algorithm, not a kernel; its kernels: %s", opt, name, list);
        return NULL;
    }
    const char *names[MAX_NAMES];
    int n = 0;
    if (with_auto) names[n++] = "auto";
    for (int i = 0; i < nk; i++) names[n++] = mha_kernel_name(mha_kernel_at(i));
    say_unknown(opt, "kernel", name, names, n, "see `mhabench list`");
    return NULL;
}

int dtype_named(const char *opt, const char *s, int allow_i8, mha_dtype *out) {
    if (mha_dtype_parse(s, out) == MHA_OK) {
        if (*out != MHA_I8 || allow_i8) return 1;
        errorf("%s: dtype '%s' is a K/V dtype only (expected fp32, bf16 or fp16)", opt, s);
        return 0;
    }
    const char *names[MHA_DTYPE_COUNT];
    int n = 0;
    for (int t = 0; t < MHA_DTYPE_COUNT; t++)
        if (t != MHA_I8 || allow_i8) names[n++] = mha_dtype_name((mha_dtype)t);
    say_unknown(opt, "dtype", s, names, n,
                allow_i8 ? NULL : "expected fp32, bf16 or fp16; int8 is a K/V dtype");
    return 0;
}

typedef struct {
    const char *opt, *s;
    int flags, n, max;
    const mha_kernel **out;
} kernel_list;

static int kernel_item(void *ctx, const char *name) {
    kernel_list *l = ctx;
    const mha_kernel *k = NULL;
    if (!((l->flags & KL_AUTO) && strcmp(name, "auto") == 0)) {
        if (!(k = find_kernel_or_say(l->opt, name, l->flags & KL_AUTO))) return -1;
        if ((l->flags & KL_TIMED) && (mha_kernel_traits(k) & MHA_KT_EMULATED)) {
            errorf("%s: %s runs emulated instructions: a verification kernel, never timed "
                   "(mhabench verify --kernels %s)",
                   l->opt, name, name);
            return -1;
        }
        if ((l->flags & KL_SUPPORTED) && mha_kernel_supported(k) != MHA_OK) {
            errorf("%s: %s", l->opt, mha_last_error());
            return -1;
        }
    }
    for (int i = 0; i < l->n; i++)
        if (l->out[i] == k) return 0; /* a repeated name is measured once */
    if (l->n == l->max) {
        errorf("%s: more than %d kernels in '%s'", l->opt, l->max, l->s);
        return -1;
    }
    l->out[l->n++] = k;
    return 0;
}

int parse_kernel_list(const char *opt, const char *s, int flags, const mha_kernel **out, int max) {
    kernel_list l = {opt, s, flags, 0, max, out};
    return each_item(opt, s, "kernel list (expected names from `mhabench list`, comma separated)",
                     "name", kernel_item, &l) == 0
               ? l.n
               : -1;
}

typedef struct {
    const char *opt;
    int allow_i8;
    unsigned mask;
} dtype_list;

static int dtype_item(void *ctx, const char *text) {
    dtype_list *l = ctx;
    mha_dtype t;
    if (!dtype_named(l->opt, text, l->allow_i8, &t)) return -1;
    l->mask |= MHA_DTYPE_BIT(t);
    return 0;
}

unsigned parse_dtype_list(const char *opt, const char *s, int allow_i8) {
    dtype_list l = {opt, allow_i8, 0};
    return each_item(opt, s, "dtype list (fp32, bf16, fp16, int8, comma separated)", "dtype",
                     dtype_item, &l) == 0
               ? l.mask
               : 0;
}

const mha_kernel *lookup_kernel(const char *name) {
    const mha_kernel *k = find_kernel_or_say("--kernel", name, 1);
    if (!k) return NULL;
    if (mha_kernel_supported(k) != MHA_OK) {
        errorf("%s", mha_last_error());
        return NULL;
    }
    return k;
}

const mha_kernel *resolve_kernel(const char *name, const mha_problem *p, mha_options *o) {
    if (name && strcmp(name, "auto") == 0) {
        mha_selection sel;
        if (mha_select(p, o, &sel) != MHA_OK) {
            errorf("--kernel auto: %s", mha_last_error());
            return NULL;
        }
        if (sel.source == MHA_CHOICE_DEFAULT) note_no_tuning_table(stderr);
        *o = sel.options;
        return sel.kernel;
    }
    const mha_kernel *k = lookup_kernel(name);
    const mha_options req = *o;
    if (k && mha_resolve_options(k, p, &req, o) != MHA_OK) {
        errorf("%s", mha_last_error());
        return NULL;
    }
    return k;
}

int check_isa_env(void) {
    if (mha_isa_env_status() != MHA_OK) {
        const char *names[MHA_ISA_COUNT];
        for (int i = 0; i < MHA_ISA_COUNT; i++) names[i] = mha_isa_name((mha_isa)i);
        say_unknown("MHA_ISA", "ISA", getenv("MHA_ISA"), names, MHA_ISA_COUNT, NULL);
        return 0;
    }
    return 1;
}

void errorf_esc(const char *fmt, ...) {
    char raw[4096], esc[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    mha_escape(raw, strlen(raw), esc, sizeof esc);
    errorf("%s", esc);
}

/* How long `mhabench tune` takes at its default budget (harness/tune/tune.h's
 * DEFAULT_BUDGET_S, 120 s): the run keeps it within about 5%, verification
 * included. */
#define TUNE_MINUTES "2"

int note_no_tuning_table(FILE *f) {
    static int said;
    char path[4096], key[96];
    mha_table_default_path(path, sizeof path);
    if (said || access(path, R_OK) == 0) return 0;
    said = 1;
    mha_cpu_key(key, sizeof key);
    fprintf(f,
            "note: no tuning table for %s (%s): auto uses the cache model; `mhabench tune` "
            "makes one in about " TUNE_MINUTES " minutes\n",
            key, path);
    return 1;
}

int file_name_part_ok(const char *s) {
    if (!*s || *s == '.') return 0;
    for (const char *p = s; *p; p++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._+-", *p))
            return 0;
    return 1;
}

int split_at_dashes(int argc, char **argv, char ***rest, int *nrest) {
    *rest = NULL;
    *nrest = 0;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--") == 0) {
            *rest = argv + i + 1;
            *nrest = argc - i - 1;
            return i;
        }
    return argc;
}
