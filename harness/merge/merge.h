/* merge.h - the parts of `mhabench merge` (harness/merge/): reading each
 * result file and the checks across files (inputs.c: the shard lists, one
 * run given twice), building and writing one fingerprint's merged file
 * (write.c), and the command (cmd.c). Internal to the command; the fuzz
 * target reaches it through cmd_merge.h. */
#ifndef MHA_HARNESS_MERGE_MERGE_H
#define MHA_HARNESS_MERGE_MERGE_H

#include <stdint.h>

#include <json-c/json.h>

/* The context keys that name a machine: files are merged per fingerprint. */
static const char *const FP_KEYS[] = {"mha_cpu_key", "mha_isa_active", "mha_cores"};
enum { FP_COUNT = 3 };

typedef enum { DUP_REFUSE, DUP_POOL, DUP_FIRST } dup_rule;

typedef struct {
    const char *path;
    json_object *root, *ctx, *rows;
    const char *fp[FP_COUNT];
    const char *git;
    int shard_i, shard_n; /* 0, 0: not a shard */
    const char *list;     /* mha_sweep_list of a shard */
    int group;
    uint64_t rows_hash; /* json_hash(rows): files holding the same rows */
} input;

/* ---- inputs.c ---- */

/* A context value as a string; NULL when absent or an object / array. */
const char *ctx_str(json_object *ctx, const char *key);
/* FNV-1a 64 of a JSON value's text as json-c writes it. */
uint64_t json_hash(json_object *v);
/* Loads one file and its facts. Returns 0, or EXIT_USAGE after a message. */
int load_input(input *in);
/* The shards of one list in a group: every index 1..N exactly once. Returns
 * 0 when complete (or missing allowed and nothing doubled), else EXIT_USAGE. */
int check_shards(input *in, int n, int group, const char *list, int allow_partial, dup_rule dup);
/* Two files of a group holding the same rows, every field alike: EXIT_USAGE
 * after naming both; else 0. */
int check_same_runs(input *in, int n, int group);

/* ---- write.c ---- */

/* Builds and writes the merged file of one group (out_path NULL: builds it
 * only). Returns 0 or EXIT_USAGE. */
int write_group(input *in, int n, int group, const char *out_path, dup_rule dup);

#endif
