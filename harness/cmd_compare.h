/* cmd_compare.h - the one piece of `compare` (harness/compare/) that is reached from outside the
 * `compare` command: its result-file reader, for the fuzz target
 * tests/fuzz/fuzz_results.c. */
#ifndef MHA_HARNESS_COMPARE_H
#define MHA_HARNESS_COMPARE_H

/* Loads the Google Benchmark result file at path into a fresh result set and
 * frees it again. Returns 0, or EXIT_USAGE after printing why to stderr. */
int compare_load_for_fuzz(const char *path);

#endif
