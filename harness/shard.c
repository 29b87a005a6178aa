/* shard.c - the partition of a sweep into shards (shard.h). */
#include "shard.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

int shard_parse(const char *text, shard_spec *out) {
    char *end;
    if (!text || !*text) goto bad;
    const long i = strtol(text, &end, 10);
    if (end == text || *end != '/') goto bad;
    const char *ns = end + 1;
    const long n = strtol(ns, &end, 10);
    if (end == ns || *end != '\0') goto bad;
    if (n < 1 || n > SHARD_MAX || i < 1 || i > n) {
        errorf("--shard '%s': needs 1 <= I <= N <= %d", text, SHARD_MAX);
        return -1;
    }
    out->index = (int)i;
    out->count = (int)n;
    return 0;
bad:
    errorf("--shard '%s': expected I/N, e.g. 2/8 (the second of eight shards)", text ? text : "");
    return -1;
}

typedef struct {
    double cost;
    const char *name;
    int i;
} item;

static int by_cost_desc(const void *pa, const void *pb) {
    const item *a = pa, *b = pb;
    if (a->cost != b->cost) return a->cost > b->cost ? -1 : 1;
    const int c = strcmp(a->name, b->name);
    return c ? c : (a->i > b->i) - (a->i < b->i);
}

void shard_partition(const double *cost, const char *const *names, int n, int count, int *out) {
    item *it = xrealloc_or_exit(NULL, (size_t)(n ? n : 1), sizeof *it, "shard");
    double *load = xrealloc_or_exit(NULL, (size_t)count, sizeof *load, "shard");
    for (int i = 0; i < n; i++) it[i] = (item){cost[i] > 0 ? cost[i] : 0, names[i], i};
    for (int s = 0; s < count; s++) load[s] = 0;
    qsort(it, (size_t)n, sizeof *it, by_cost_desc);
    for (int j = 0; j < n; j++) {
        int best = 0;
        for (int s = 1; s < count; s++)
            if (load[s] < load[best]) best = s;
        load[best] += it[j].cost;
        out[it[j].i] = best + 1;
    }
    free(it);
    free(load);
}

static int by_name(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

uint64_t shard_list_hash(const char *const *names, int n) {
    const char **s = xrealloc_or_exit(NULL, (size_t)(n ? n : 1), sizeof *s, "shard");
    for (int i = 0; i < n; i++) s[i] = names[i];
    qsort(s, (size_t)n, sizeof *s, by_name);
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < n; i++)
        for (const unsigned char *p = (const unsigned char *)s[i];; p++) {
            h = (h ^ *p) * 0x100000001b3ull;
            if (!*p) break;
        }
    free(s);
    return h;
}
