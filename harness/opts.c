/* opts.c - option tables (opts.h): the getopt_long arrays, the error
 * messages and the help text made from one list of rows. */
#include "opts.h"

#include <assert.h>
#include <string.h>

#include "suggest.h"
#include "util.h"

enum { COLUMNS = 80, HELP_COL_MAX = 24 };

void opts_init(opts_parser *p, const char *cmd, const opt_row *rows, int n) {
    assert(n <= OPTS_MAX);
    if (n > OPTS_MAX) n = OPTS_MAX; /* release builds: a longer table loses its tail rows */
    memset(p, 0, sizeof *p);
    p->cmd = cmd;
    p->rows = rows;
    p->n = n;
    /* ':' first: a missing value is ':', an unknown option '?' (opterr off) */
    size_t k = 0;
    p->shortopts[k++] = ':';
    for (int i = 0; i < n; i++) {
        p->longopts[i] = (struct option){rows[i].name, rows[i].has_arg, NULL, rows[i].id};
        if (rows[i].short_name) {
            p->shortopts[k++] = rows[i].short_name;
            if (rows[i].has_arg == required_argument) p->shortopts[k++] = ':';
        }
    }
    p->longopts[n] = (struct option){NULL, 0, NULL, 0};
    p->shortopts[k] = '\0';
    optind = 0; /* glibc: full re-initialisation (main.c or a test may have parsed already) */
    opterr = 0;
}

/* "--name" of an unknown or malformed long option: the argument up to '='. */
static void long_name(const char *arg, char *buf, size_t len) {
    const size_t n = strcspn(arg, "=");
    snprintf(buf, len, "%.*s", (int)n, arg);
}

/* The row of id, when arg ("--name" or "--name=value") names it or a
 * prefix of it, else NULL. */
static const opt_row *row_named(const opts_parser *p, int id, const char *arg) {
    if (strncmp(arg, "--", 2) != 0) return NULL;
    const size_t n = strcspn(arg + 2, "=");
    for (int i = 0; i < p->n; i++)
        if (p->rows[i].id == id && n && strncmp(p->rows[i].name, arg + 2, n) == 0)
            return &p->rows[i];
    return NULL;
}

/* The message for getopt_long's ':' or '?'. glibc sets optopt to the
 * option's id for a long option missing its value or given one it does not
 * take, to the character for a short one, and to 0 for an unknown or
 * ambiguous long one; argv[optind - 1] is the argument when getopt has
 * moved past it (not inside a group of short options, hence row_named). */
static void say_bad(const opts_parser *p, int c, int argc, char **argv) {
    const char *arg = optind >= 1 && optind - 1 < argc ? argv[optind - 1] : "";
    char name[256];
    long_name(arg, name, sizeof name);
    if (optopt) {
        const opt_row *r = row_named(p, optopt, arg);
        if (r && c == ':')
            errorf_esc("%s: option '%s' needs a value", p->cmd, name);
        else if (r && strchr(arg, '='))
            errorf_esc("%s: option '%s' takes no value", p->cmd, name);
        else if (c == ':')
            errorf_esc("%s: option '-%c' needs a value", p->cmd, optopt);
        else
            errorf_esc("%s: unknown option '-%c'", p->cmd, optopt);
        return;
    }
    /* a prefix of several names (getopt_long takes an unambiguous prefix) */
    char which[1024] = "";
    int nmatch = 0;
    for (int i = 0; i < p->n && name[0] == '-' && name[1] == '-' && name[2]; i++)
        if (strncmp(p->rows[i].name, name + 2, strlen(name + 2)) == 0) {
            snprintf(which + strlen(which), sizeof which - strlen(which), "%s--%s",
                     nmatch ? ", " : "", p->rows[i].name);
            nmatch++;
        }
    if (nmatch > 1) {
        errorf_esc("%s: option '%s' is ambiguous (%s)", p->cmd, name, which);
        return;
    }
    char cand[OPTS_MAX][64];
    const char *cands[OPTS_MAX];
    for (int i = 0; i < p->n; i++) {
        snprintf(cand[i], sizeof cand[i], "--%s", p->rows[i].name);
        cands[i] = cand[i];
    }
    char tail[128];
    snprintf(tail, sizeof tail, "see `mhabench %s --help`", p->cmd);
    say_unknown(p->cmd, "option", name, cands, p->n, tail);
}

int opts_next(opts_parser *p, int argc, char **argv) {
    const int c = getopt_long(argc, argv, p->shortopts, p->longopts, NULL);
    if (c == -1) return -1;
    for (int i = 0; i < p->n; i++)
        if (p->rows[i].id == c) {
            p->seen[i] = 1;
            return c;
        }
    say_bad(p, c, argc, argv);
    return OPTS_ERROR;
}

const opt_row *opts_missing(const opts_parser *p) {
    for (int i = 0; i < p->n; i++)
        if ((p->rows[i].flags & OPT_REQUIRED) && !p->seen[i]) return &p->rows[i];
    return NULL;
}

/* Writes the LEN characters of ITEM at column *col: after a space, or at the
 * start of a new line indented by INDENT when it would pass COLUMNS (never
 * before the first item, AT_START). */
static void put_item(FILE *f, const char *item, size_t len, int *col, int indent, int at_start) {
    if (!at_start && *col + 1 + (int)len > COLUMNS) {
        fprintf(f, "\n%*s", indent, "");
        *col = indent;
    } else if (!at_start) {
        fputc(' ', f);
        (*col)++;
    }
    fprintf(f, "%.*s", (int)len, item);
    *col += (int)len;
}

void opts_usage(FILE *f, const char *cmd, const char *before, const opt_row *rows, int n,
                const char *after) {
    int col = fprintf(f, "usage: mhabench %s", cmd);
    const int indent = col + 1;
    if (before) put_item(f, before, strlen(before), &col, indent, 0);
    for (int i = 0; i < n; i++) {
        if (rows[i].flags & OPT_NO_USAGE) continue;
        char item[128];
        const int req = rows[i].flags & OPT_REQUIRED;
        snprintf(item, sizeof item, "%s--%s%s%s%s", req ? "" : "[", rows[i].name,
                 rows[i].arg ? " " : "", rows[i].arg ? rows[i].arg : "", req ? "" : "]");
        put_item(f, item, strlen(item), &col, indent, 0);
    }
    if (after) put_item(f, after, strlen(after), &col, indent, 0);
    fputc('\n', f);
}

/* Writes TEXT from column col, wrapped at COLUMNS, continuation lines (and
 * those after a '\n' in it) indented by INDENT. */
static void wrap(FILE *f, const char *text, int col, int indent) {
    int at_start = 1;
    for (const char *s = text; *s;) {
        if (*s == '\n') {
            fprintf(f, "\n%*s", indent, "");
            col = indent;
            at_start = 1;
            s++;
            continue;
        }
        if (*s == ' ') {
            s++;
            continue;
        }
        const size_t len = strcspn(s, " \n");
        put_item(f, s, len, &col, indent, at_start);
        at_start = 0;
        s += len;
    }
    fputc('\n', f);
}

/* "-h, --help" or "--kernels LIST": the row's left column. */
static int label(const opt_row *r, char *buf, size_t len) {
    const char sh[5] = {'-', r->short_name, ',', ' ', '\0'};
    return snprintf(buf, len, "%s--%s%s%s", r->short_name ? sh : "", r->name, r->arg ? " " : "",
                    r->arg ? r->arg : "");
}

void opts_print(FILE *f, const opt_row *rows, int n) {
    int width = 0; /* the help column: after the longest label that fits */
    char buf[128];
    for (int i = 0; i < n; i++) {
        const int w = label(&rows[i], buf, sizeof buf);
        if (2 + w + 2 <= HELP_COL_MAX && 2 + w + 2 > width) width = 2 + w + 2;
    }
    fputs("options:\n", f);
    for (int i = 0; i < n; i++) {
        const int w = label(&rows[i], buf, sizeof buf);
        if (2 + w + 2 > width) { /* too long for the column: help on the next line */
            fprintf(f, "  %s\n%*s", buf, width, "");
        } else
            fprintf(f, "  %s%*s", buf, width - 2 - w, "");
        wrap(f, rows[i].help ? rows[i].help : "", width, width);
    }
}
