/* fmt_npy.h - NumPy .npy read/write for float32 C-order arrays (format 1.0/2.0).
 * Every failure gives a message naming the file and the problem; inputs must
 * be regular files (a FIFO is refused, never waited on); writes go through
 * variants/fileio.h (an unnamed file renamed into place). */
#ifndef MHA_HARNESS_NPY_H
#define MHA_HARNESS_NPY_H

#include <stddef.h>
#include <stdint.h>
#include "mha.h"

#define NPY_MAX_DIMS 8

typedef struct {
    int ndim;
    int64_t shape[NPY_MAX_DIMS];
    size_t count; /* product of shape */
    float *data;  /* mha_alloc'ed, count floats (NULL when count == 0) */
} npy_array;

/* Reads PATH. Returns MHA_OK, MHA_EIO (cannot open/read) or MHA_EFORMAT
 * (malformed) with a one-line message in err ("x.npy: dtype '<f8' is not
 * supported, expected '<f4'"). */
mha_status npy_read(const char *path, npy_array *out, char *err, size_t errlen);
/* Writes a '<f4' C-order array atomically (unnamed temp file + fsync + rename).
 * A symlink is followed and its target replaced; a target that is not a
 * regular file (folder, FIFO, device, socket) is refused with MHA_EIO. */
mha_status npy_write(const char *path, const float *data, const int64_t *shape, int ndim, char *err,
                     size_t errlen);
void npy_free(npy_array *a);

#endif
