/* fuzz_file.c - the fuzz input as a file: a memfd (a regular file, so readers
 * that refuse FIFOs and devices still open it, and nothing touches the disk)
 * named by /proc/self/fd/N, truncated and rewritten for every input. Where
 * memfd_create is refused, an unlinked temporary file serves the same way. */
#include "fuzz_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static int fuzz_fd = -1;
static char fuzz_path[64];

static void die(const char *what) {
    fprintf(stderr, "fuzz_file: %s: %s\n", what, strerror(errno));
    abort();
}

static int open_scratch(void) {
    int fd = memfd_create("mha-fuzz-input", MFD_CLOEXEC);
    if (fd >= 0) return fd;
    const char *dir = getenv("TMPDIR");
    char tmpl[4096];
    snprintf(tmpl, sizeof tmpl, "%s/mha-fuzz-XXXXXX", dir && *dir ? dir : "/tmp");
    fd = mkstemp(tmpl);
    if (fd < 0) die("neither memfd_create nor mkstemp works");
    unlink(tmpl); /* /proc/self/fd/N still opens it; nothing is left behind */
    return fd;
}

const char *fuzz_file(const uint8_t *data, size_t size) {
    if (fuzz_fd < 0) {
        fuzz_fd = open_scratch();
        snprintf(fuzz_path, sizeof fuzz_path, "/proc/self/fd/%d", fuzz_fd);
    }
    if (ftruncate(fuzz_fd, 0) != 0) die("ftruncate");
    size_t done = 0;
    while (done < size) {
        const ssize_t w = pwrite(fuzz_fd, data + done, size - done, (off_t)done);
        if (w < 0) {
            if (errno == EINTR) continue;
            die("pwrite");
        }
        done += (size_t)w;
    }
    return fuzz_path;
}
