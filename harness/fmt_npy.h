/* fmt_npy.h - NumPy .npy read/write for C-order arrays (format 1.0/2.0) of
 * the element types mhabench knows: '<f4' fp32, '<f2' fp16, '<u2' holding
 * bf16 bits (NumPy has no bf16) and '|i1' int8; '<i4' int32 index arrays
 * are read (npy_read_i32).
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
    size_t count;    /* product of shape */
    mha_dtype dtype; /* the file's element type */
    void *raw;       /* mha_alloc'ed, count elements of dtype (NULL when count == 0) */
    float *data;     /* = raw when dtype is fp32, else NULL */
    int32_t *i32;    /* = raw for an '<i4' file read by npy_read_i32 (dtype is then
                        MHA_DTYPE_COUNT: no mha_dtype is int32), else NULL */
} npy_array;

/* Reads PATH, a '<f4' file. Returns MHA_OK, MHA_EIO (cannot open/read) or
 * MHA_EFORMAT (malformed) with a one-line message in err ("x.npy: dtype
 * '<f8' is not supported, expected '<f4' (float32)"). */
mha_status npy_read(const char *path, npy_array *out, char *err, size_t errlen);
/* The same for a file of any dtype in `accept` (MHA_DTYPE_BIT mask); a dtype
 * outside it is MHA_EFORMAT naming the file, its descr and what was accepted
 * ("x.npy: dtype '<u2' (bf16 bits) is not accepted here, expected '<f4'
 * (float32)"). */
mha_status npy_read_typed(const char *path, unsigned accept, npy_array *out, char *err,
                          size_t errlen);
/* Reads PATH, an '<i4' (int32) file: the index arrays of attend's packed and
 * paged layouts (cu_seqlens, block table, sequence lengths). Any other dtype
 * is MHA_EFORMAT naming the file and its descr (int64, numpy's default int,
 * with the conversion that fixes it). */
mha_status npy_read_i32(const char *path, npy_array *out, char *err, size_t errlen);
/* The descr of a dtype ("<f4", "<f2", "<u2", "|i1") and its reading. */
const char *npy_descr(mha_dtype t);
/* Writes a '<f4' C-order array atomically (unnamed temp file + fsync + rename).
 * A symlink is followed and its target replaced; a target that is not a
 * regular file (folder, FIFO, device, socket) is refused with MHA_EIO. */
mha_status npy_write(const char *path, const float *data, const int64_t *shape, int ndim, char *err,
                     size_t errlen);
/* The same for data of dtype t (bf16 written as '<u2'). */
mha_status npy_write_typed(const char *path, mha_dtype t, const void *data, const int64_t *shape,
                           int ndim, char *err, size_t errlen);
void npy_free(npy_array *a);

#endif
