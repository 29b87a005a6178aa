/* fuzz_results.c - libFuzzer target for the result-file reader of `mhabench
 * compare` (harness/compare/results.c, load_results through compare_load_for_fuzz):
 * Google Benchmark JSON through json-c, the context's fingerprint, the
 * iteration rows, time units and name folding. Its error messages go to
 * stderr (run with -close_fd_mask=2 to silence them). */
#include <stdint.h>
#include <stdlib.h>

#include "cmd_compare.h"
#include "fuzz_file.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const int rc = compare_load_for_fuzz(fuzz_file(data, size));
    if (rc != 0 && rc != EXIT_USAGE) abort(); /* loaded, or rejected with a message */
    return 0;
}
