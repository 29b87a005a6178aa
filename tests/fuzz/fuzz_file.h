/* fuzz_file.h - the readers under test take a path, libFuzzer hands out bytes:
 * fuzz_file writes the bytes to one in-memory file per process and returns a
 * path that opens it. */
#ifndef MHA_FUZZ_FILE_H
#define MHA_FUZZ_FILE_H

#include <stddef.h>
#include <stdint.h>

/* Replaces the file's contents with data[0..size) and returns its path
 * ("/proc/self/fd/N"), valid until the next call. Aborts if it cannot. */
const char *fuzz_file(const uint8_t *data, size_t size);

#endif
