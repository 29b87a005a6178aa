/* shard.h - splitting one sweep across N machines (fleet mode): a shard
 * spec "I/N", a deterministic partition of the benchmark list into N parts
 * of about equal estimated time, and a hash that names the list so shards of
 * different lists are never merged as one. */
#ifndef MHA_HARNESS_SHARD_H
#define MHA_HARNESS_SHARD_H

#include <stdint.h>

typedef struct {
    int index; /* 1..count */
    int count;
} shard_spec;

/* Parses "I/N" (1 <= I <= N <= SHARD_MAX). Returns 0, or -1 after a message
 * naming the text. */
enum { SHARD_MAX = 100000 };
int shard_parse(const char *text, shard_spec *out);

/* Assigns each of n benchmarks to a shard 1..count in out[]: longest first
 * (cost descending, then name ascending) onto the shard with the least total
 * so far (the lowest index on a tie). The same names and costs give the same
 * partition on every machine; the largest part is at most the mean plus the
 * largest single cost. */
void shard_partition(const double *cost, const char *const *names, int n, int count, int *out);

/* FNV-1a 64 over the names in ascending order, each with a terminating NUL:
 * the identity of a benchmark list, whatever order it was built in. */
uint64_t shard_list_hash(const char *const *names, int n);

#endif
