/* suggest.h - "did you mean" for a name the user typed: the closest of a
 * list of valid names by edit distance, and the one message every unknown
 * name (kernel, dtype, peer, preset, ISA) is reported with. */
#ifndef MHA_HARNESS_SUGGEST_H
#define MHA_HARNESS_SUGGEST_H

#include <stddef.h>

/* Edit distance between a and b, case-insensitive, counting an insertion,
 * deletion, substitution or swap of two adjacent characters as 1 (the
 * optimal string alignment form of Damerau-Levenshtein). Names longer than
 * SUGGEST_MAX_LEN are compared by their first SUGGEST_MAX_LEN characters
 * plus the difference in length. */
#define SUGGEST_MAX_LEN 63
int suggest_distance(const char *a, const char *b);

/* The candidate closest to name when it is close enough to be a typo of it:
 * at most max(1, strlen(name) / 3) edits, and fewer edits than the
 * candidate has characters (so "x" does not suggest "amx"). Ties go to the
 * earlier candidate. NULL when none is close, or name or cands is NULL. */
const char *suggest_closest(const char *name, const char *const *cands, int n);

/* Writes "unknown WHAT 'NAME' (did you mean X?)" into buf, or without a
 * close candidate "unknown WHAT 'NAME' (OTHERWISE)", OTHERWISE NULL listing
 * the candidates: "expected a, b or c". Returns buf (always terminated,
 * truncated to len). */
const char *suggest_unknown(char *buf, size_t len, const char *what, const char *name,
                            const char *const *cands, int n, const char *otherwise);

#endif
