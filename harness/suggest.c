/* suggest.c - "did you mean": an edit distance over short names (kernel,
 * dtype, peer, preset and ISA names are a few dozen characters at most) and
 * the message built from it. */
#include "suggest.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

static int imin(int a, int b) {
    return a < b ? a : b;
}

int suggest_distance(const char *a, const char *b) {
    const int la0 = (int)strlen(a), lb0 = (int)strlen(b);
    const int la = imin(la0, SUGGEST_MAX_LEN), lb = imin(lb0, SUGGEST_MAX_LEN);
    /* d[i][j]: distance between the first i characters of a and j of b */
    int d[SUGGEST_MAX_LEN + 1][SUGGEST_MAX_LEN + 1];
    for (int i = 0; i <= la; i++) d[i][0] = i;
    for (int j = 0; j <= lb; j++) d[0][j] = j;
    for (int i = 1; i <= la; i++)
        for (int j = 1; j <= lb; j++) {
            const int ca = tolower((unsigned char)a[i - 1]), cb = tolower((unsigned char)b[j - 1]);
            int v = imin(d[i - 1][j] + 1, d[i][j - 1] + 1);
            v = imin(v, d[i - 1][j - 1] + (ca != cb));
            if (i > 1 && j > 1 && ca == tolower((unsigned char)b[j - 2]) &&
                tolower((unsigned char)a[i - 2]) == cb)
                v = imin(v, d[i - 2][j - 2] + 1); /* two adjacent characters swapped */
            d[i][j] = v;
        }
    const int rest = (la0 - la) - (lb0 - lb);
    return d[la][lb] + (rest < 0 ? -rest : rest);
}

const char *suggest_closest(const char *name, const char *const *cands, int n) {
    if (!name || !cands) return NULL;
    /* a third of the name may be wrong: "flash.avx51" (1 of 11), "fp23" (a
     * swap), "pytorch" for torch (2 of 7); "no_such_kernel" is near nothing */
    int limit = (int)strlen(name) / 3;
    if (limit < 1) limit = 1;
    const char *best = NULL;
    int best_d = limit + 1;
    for (int i = 0; i < n; i++) {
        if (!cands[i]) continue;
        const int dist = suggest_distance(name, cands[i]);
        if (dist < best_d && dist < (int)strlen(cands[i])) {
            best = cands[i];
            best_d = dist;
        }
    }
    return best;
}

/* Appends to buf (used k of len), keeping it terminated when full. */
static void put(char *buf, size_t len, size_t *k, const char *fmt, const char *a, const char *b) {
    if (*k >= len) return;
    const int w = snprintf(buf + *k, len - *k, fmt, a, b);
    *k = w < 0 ? len : *k + (size_t)w;
}

const char *suggest_unknown(char *buf, size_t len, const char *what, const char *name,
                            const char *const *cands, int n, const char *otherwise) {
    if (!len) return buf;
    const char *close = suggest_closest(name, cands, n);
    size_t k = 0;
    put(buf, len, &k, "unknown %s '%s' (", what, name ? name : "(null)");
    if (close)
        put(buf, len, &k, "did you mean %s%s?", close, "");
    else if (otherwise)
        put(buf, len, &k, "%s%s", otherwise, "");
    else {
        int left = 0; /* candidates still to write, so the last gets "or" */
        for (int i = 0; i < n; i++) left += cands[i] != NULL;
        put(buf, len, &k, "%s%s", left ? "expected" : "nothing is", left ? "" : " accepted");
        for (int i = 0, shown = 0; i < n; i++)
            if (cands[i]) {
                put(buf, len, &k, "%s%s", shown == 0 ? " " : left == 1 ? " or " : ", ", cands[i]);
                shown++;
                left--;
            }
    }
    put(buf, len, &k, "%s%s", ")", "");
    return buf;
}
