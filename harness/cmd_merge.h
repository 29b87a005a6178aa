/* cmd_merge.h - the one piece of harness/merge/ that is reached from outside the
 * `merge` command: its result-file reader, for the fuzz target
 * tests/fuzz/fuzz_merge.c. */
#ifndef MHA_HARNESS_MERGE_H
#define MHA_HARNESS_MERGE_H

/* Loads the result file at path as merge's input (context, fingerprint,
 * shard keys, rows and their times), checks its shard list (partial allowed)
 * and builds its merge in memory without writing it; then, when it holds
 * rows, loads it a second time and aborts unless the two copies are refused
 * as the same run. Returns 0, or EXIT_USAGE after printing why to stderr. */
int merge_load_for_fuzz(const char *path);

#endif
