/* fileio.h - the one way mhabench and libmha touch a user-named path: inputs
 * are opened without blocking and must be regular files; outputs are written
 * to an unnamed file next to their final target and linked or renamed into
 * place at the end, so a killed process leaves nothing behind and a reader
 * never sees half a file. Shared by the library (tuning tables) and the
 * harness (.npy, result files, tuning tables and logs, baselines). */
#ifndef MHA_FILEIO_H
#define MHA_FILEIO_H

#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

#include "mha.h"

/* What a file type is called in messages: "a FIFO", "a directory", ... */
const char *mha_file_kind(mode_t mode);

/* Opens path read-only. It must be a regular file: a FIFO, device, socket or
 * directory is refused without blocking (opened O_NONBLOCK, checked with
 * fstat, then O_NONBLOCK cleared). Returns the fd, or -1 with a reason in why
 * that does not repeat the path ("is a FIFO, not a regular file"). */
int mha_open_input(const char *path, char *why, size_t len);
/* The same as a stdio stream ("rb"). */
FILE *mha_fopen_input(const char *path, char *why, size_t len);

/* mkdir -p dir. Returns 0, or -1 with a reason naming the component. */
int mha_mkdir_p(const char *dir, char *why, size_t len);

enum {
    MHA_OUT_REPLACE = 0,   /* commit renames over an existing regular file */
    MHA_OUT_NOREPLACE = 1, /* commit fails (exists = 1) when the target exists */
    MHA_OUT_MKDIRS = 2,    /* begin creates the target's missing parent folders */
};

/* One output file being written. The target is the path given, or for a
 * symlink the file it points to (followed to the end, the link is kept); an
 * existing target must be a regular file. The data goes to an O_TMPFILE inode
 * in the target's folder (or, where the file system has none, a hidden
 * `.<name>.tmp.<pid>.XXXXXX` there), visible under no name until commit. */
typedef struct {
    int fd;            /* write here, or through name / stream */
    int flags;         /* MHA_OUT_* */
    int anonymous;     /* 1: O_TMPFILE inode; 0: named temp file in tmp */
    int exists;        /* set by a NOREPLACE commit that found the target */
    FILE *stream;      /* from mha_out_stream, closed by commit/abort */
    char target[4096]; /* the resolved final path */
    char tmp[4200];    /* the named temp file, when not anonymous */
    char name[4200];   /* a path that opens the unnamed file (/proc/self/fd/N or tmp) */
} mha_out;

/* Resolves path and creates the unnamed file. Returns MHA_OK, MHA_EINVAL (empty
 * path, a target that is not a regular file) or MHA_EIO, with a reason in why
 * that names the path (and the target when a symlink led there). */
mha_status mha_out_begin(mha_out *w, const char *path, int flags, char *why, size_t len);
/* A stdio stream on the file (created once; owned by w). NULL on failure. */
FILE *mha_out_stream(mha_out *w);
/* Writes all of buf. MHA_OK or MHA_EIO with a reason. */
mha_status mha_out_write(mha_out *w, const void *buf, size_t n, char *why, size_t len);
/* Another final name in the same folder as the current target (used to retry
 * a NOREPLACE commit under a new name). */
mha_status mha_out_retarget(mha_out *w, const char *path, char *why, size_t len);
/* Flushes, fsyncs and gives the file its name: NOREPLACE links it (atomic,
 * never replaces; on an existing target returns MHA_EIO with w->exists = 1
 * and leaves w open for mha_out_retarget + another commit or mha_out_abort);
 * REPLACE renames it over the target, which must still be a regular file or
 * absent, and gives it the replaced file's permission bits (not set-id) and,
 * where allowed, owner. Closes w on success and on every error but `exists`. */
mha_status mha_out_commit(mha_out *w, char *why, size_t len);
/* Drops the file (nothing is left on disk). Safe to call twice. */
void mha_out_abort(mha_out *w);

/* Copies n bytes of in (file content) into out for a message: printable ASCII
 * as is, a backslash doubled, everything else as \n, \t, \r or \xNN; always
 * NUL-terminated, cut short (with "...") when out is too small. */
void mha_escape(const char *in, size_t n, char *out, size_t outlen);

/* Tests only: non-zero makes mha_out_begin take the named-temp fallback. */
extern int mha_fileio_force_named_temp;

#endif
