/* fuzz_merge.c - libFuzzer target for the shard-file reader of `mhabench
 * merge` (harness/merge/, through merge_load_for_fuzz): Google Benchmark
 * JSON through json-c, the context's fingerprint and shard keys (mha_shard
 * I/N, whose N must cost nothing per shard), the rows' names and times, the
 * shard check, and the merged file built in memory. Beyond the sanitizers
 * the entry itself checks that a file with rows, given twice, is refused as
 * the same run. Its error messages go to stderr (-close_fd_mask=2). */
#include <stdint.h>
#include <stdlib.h>

#include "cmd_merge.h"
#include "fuzz_file.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const int rc = merge_load_for_fuzz(fuzz_file(data, size));
    if (rc != 0 && rc != EXIT_USAGE) abort(); /* merged, or rejected with a message */
    return 0;
}
