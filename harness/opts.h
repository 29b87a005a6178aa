/* opts.h - a command's options as one table: getopt_long's struct option[]
 * and short-option string, the usage synopsis and the options section of
 * --help are all made from the rows, so the help cannot drift from what the
 * parser accepts. Parse errors (unknown option, with a "did you mean";
 * missing or unwanted value) are reported here in one form. */
#ifndef MHA_HARNESS_OPTS_H
#define MHA_HARNESS_OPTS_H

#include <getopt.h>
#include <stdio.h>

/* Row flags. */
enum {
    OPT_REQUIRED = 1, /* shown without brackets in the synopsis */
    OPT_NO_USAGE = 2, /* left out of the synopsis (--help), still in the options section */
};

typedef struct {
    const char *name; /* long name without "--" */
    int has_arg;      /* no_argument or required_argument */
    int id;           /* what opts_next returns for it: a character or a number >= 256 */
    char short_name;  /* a short form "-x" too ('h' for help), or 0 */
    const char *arg;  /* the value's placeholder in the help ("LIST"), NULL without one */
    unsigned flags;   /* OPT_* */
    const char *help; /* wrapped to the terminal's 80 columns; '\n' starts a new line */
} opt_row;

/* The --help row every command has. */
#define OPTS_HELP                                                                                  \
    { "help", no_argument, 'h', 'h', NULL, OPT_NO_USAGE, "print this help and exit 0" }

/* The attention variants' rows of a one-shape command (util.h: variant_arg
 * takes their values). */
// clang-format off
#define OPTS_VARIANT_ROWS                                                                          \
    {"window", required_argument, 'W', 0, "L,R", 0,                                                \
     "sliding window: L keys before the diagonal, R after (-1 = unbounded), e.g. --window "       \
     "4096,0 --causal (docs/attention-variants.md)"},                                              \
    {"softcap", required_argument, 'C', 0, "C", 0,                                                 \
     "logit softcap C > 0: s = C tanh(s / C) on the scaled score"},                                \
    {"sinks", no_argument, 'Z', 0, NULL, 0,                                                        \
     "attention sinks: one fp32 logit per query head (profile: seeded, uniform in [-1, 1))"},      \
    {"head-dim-v", required_argument, 'V', 0, "D", 0, "V's and O's head dim (default: --head-dim)"}
// clang-format on

/* The most rows a table may have. */
#define OPTS_MAX 48

/* A table being parsed; opts_init sets it up and resets getopt's state. */
typedef struct {
    const char *cmd; /* "verify", for messages */
    const opt_row *rows;
    int n;
    struct option longopts[OPTS_MAX + 1];
    char shortopts[2 * OPTS_MAX + 2];
    unsigned char seen[OPTS_MAX]; /* rows given so far */
} opts_parser;

/* What opts_next returns after a message about a malformed option. */
#define OPTS_ERROR '?'

void opts_init(opts_parser *p, const char *cmd, const opt_row *rows, int n);
/* The next option's id (optarg set as getopt_long sets it), -1 at the end of
 * the options (optind: the first operand), or OPTS_ERROR after printing
 * "mhabench: CMD: unknown option '--x' (did you mean --y?)", "... option
 * '--x' needs a value" or "... option '--x' takes no value". */
int opts_next(opts_parser *p, int argc, char **argv);
/* The first OPT_REQUIRED row not given, or NULL. */
const opt_row *opts_missing(const opts_parser *p);

/* "usage: mhabench CMD BEFORE <the rows> AFTER", wrapped at 80 columns under
 * the command; BEFORE and AFTER (operands, "[-- sweep args]") may be NULL. */
void opts_usage(FILE *f, const char *cmd, const char *before, const opt_row *rows, int n,
                const char *after);
/* "options:" and a line per row: "  --name ARG  help" with the help wrapped
 * in a column. */
void opts_print(FILE *f, const opt_row *rows, int n);

#endif
