/* fuzz_npy.c - libFuzzer target for the .npy reader (harness/fmt_npy.c, npy_read):
 * magic, version, header length, the header dict, dtype/order/shape checks and
 * the data size. Beyond the sanitizers it checks the reader's contract: a
 * failure says why, a success has count = product of shape and every element
 * readable. */
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_file.h"
#include "fmt_npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file(data, size);
    npy_array a;
    char err[256];
    const mha_status st = npy_read(path, &a, err, sizeof err);
    if (st != MHA_OK) {
        if (!err[0] || a.data || a.count) abort(); /* a failure names its reason, holds nothing */
        return 0;
    }
    if (a.ndim < 0 || a.ndim > NPY_MAX_DIMS) abort();
    size_t count = 1;
    for (int i = 0; i < a.ndim; i++) {
        if (a.shape[i] < 0) abort();
        count *= (size_t)a.shape[i];
    }
    if (count != a.count || (count > 0) != (a.data != NULL)) abort();
    /* Read every element: ASan reports a buffer shorter than count. */
    volatile float sink = 0;
    for (size_t i = 0; i < a.count; i++) sink += a.data[i];
    (void)sink;
    npy_free(&a);
    return 0;
}
