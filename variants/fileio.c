/* fileio.c - safe opening of user-named files (see fileio.h). Inputs: regular
 * files only, refused without blocking. Outputs: an O_TMPFILE inode in the
 * target's folder, linked (never replaces) or renamed (replaces a regular
 * file, keeping its mode and owner) into place at commit; a named hidden
 * temp file where O_TMPFILE is unsupported. Symlinked targets are followed
 * to the file they name. */
#include "fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Test hook: 1 makes mha_out_begin use the named-temp fallback even where
 * O_TMPFILE works, so both paths can be tested on one machine. */
int mha_fileio_force_named_temp = 0;

static void say(char *why, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void say(char *why, size_t len, const char *fmt, ...) {
    if (!why || len == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, len, fmt, ap);
    va_end(ap);
}

const char *mha_file_kind(mode_t mode) {
    if (S_ISREG(mode)) return "a regular file";
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    if (S_ISLNK(mode)) return "a symbolic link";
    return "a special file";
}

int mha_open_input(const char *path, char *why, size_t len) {
    if (!path || !*path) {
        say(why, len, "empty path");
        return -1;
    }
    /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer. */
    const int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        say(why, len, "cannot open: %s", strerror(errno));
        return -1;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        say(why, len, "cannot stat: %s", strerror(errno));
        close(fd);
        return -1;
    }
    if (!S_ISREG(sb.st_mode)) {
        say(why, len, "is %s, not a regular file", mha_file_kind(sb.st_mode));
        close(fd);
        return -1;
    }
    const int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        say(why, len, "cannot clear O_NONBLOCK: %s", strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

FILE *mha_fopen_input(const char *path, char *why, size_t len) {
    const int fd = mha_open_input(path, why, len);
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        say(why, len, "cannot open: %s", strerror(errno));
        close(fd);
    }
    return f;
}

static int mkdir_one(const char *dir, char *why, size_t len) {
    if (mkdir(dir, 0777) == 0) return 0;
    const int e = errno;
    struct stat sb;
    if (e == EEXIST && stat(dir, &sb) == 0) {
        if (S_ISDIR(sb.st_mode)) return 0;
        say(why, len, "cannot create folder '%s': it exists and is %s", dir,
            mha_file_kind(sb.st_mode));
        return -1;
    }
    say(why, len, "cannot create folder '%s': %s", dir, strerror(e));
    return -1;
}

int mha_mkdir_p(const char *dir, char *why, size_t len) {
    char buf[4096];
    if (!dir || !*dir) return 0;
    if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf) {
        say(why, len, "path too long: '%.64s...'", dir);
        return -1;
    }
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/' || p[-1] == '/') continue;
        *p = '\0';
        const int r = mkdir_one(buf, why, len);
        *p = '/';
        if (r != 0) return -1;
    }
    return mkdir_one(buf, why, len);
}

/* Splits path into its folder ("." when none) and last component. */
static void split_path(const char *path, char *dir, size_t dlen, const char **base) {
    const char *slash = strrchr(path, '/');
    if (!slash) {
        snprintf(dir, dlen, ".");
        *base = path;
    } else if (slash == path) {
        snprintf(dir, dlen, "/");
        *base = slash + 1;
    } else {
        snprintf(dir, dlen, "%.*s", (int)(slash - path), path);
        *base = slash + 1;
    }
}

/* Follows symlinks from path to the file they name (which may not exist yet).
 * The result must be absent or a regular file. */
static mha_status resolve_target(const char *path, int follow, char *out, size_t outlen, char *why,
                                 size_t len) {
    char cur[4096], link[4096];
    if (snprintf(cur, sizeof cur, "%s", path) >= (int)sizeof cur) {
        say(why, len, "'%.64s...': path too long", path);
        return MHA_EINVAL;
    }
    for (int hops = 0;; hops++) {
        if (hops > 40) {
            say(why, len, "'%s': too many levels of symbolic links", path);
            return MHA_EINVAL;
        }
        struct stat sb;
        if (lstat(cur, &sb) != 0) {
            if (errno == ENOENT) break;
            say(why, len, "'%s': %s", cur, strerror(errno));
            return MHA_EIO;
        }
        if (S_ISLNK(sb.st_mode) && follow) {
            const ssize_t n = readlink(cur, link, sizeof link - 1);
            if (n < 0) {
                say(why, len, "'%s': cannot read the symlink: %s", cur, strerror(errno));
                return MHA_EIO;
            }
            link[n] = '\0';
            if (link[0] == '/') {
                snprintf(cur, sizeof cur, "%s", link);
            } else {
                char dir[4096];
                const char *base;
                split_path(cur, dir, sizeof dir, &base);
                if (snprintf(cur, sizeof cur, "%s/%s", dir, link) >= (int)sizeof cur) {
                    say(why, len, "'%s': symlink target path too long", path);
                    return MHA_EINVAL;
                }
            }
            continue;
        }
        if (S_ISREG(sb.st_mode) || S_ISLNK(sb.st_mode)) break; /* a link only when !follow */
        if (strcmp(cur, path) == 0)
            say(why, len, "'%s' is %s, not a regular file: refusing to replace it", path,
                mha_file_kind(sb.st_mode));
        else
            say(why, len,
                "'%s' (where the symlink '%s' leads) is %s, not a regular file: refusing "
                "to replace it",
                cur, path, mha_file_kind(sb.st_mode));
        return MHA_EINVAL;
    }
    const size_t n = strlen(cur);
    if (n == 0 || cur[n - 1] == '/') {
        say(why, len, "'%s' names a folder, not a file", path);
        return MHA_EINVAL;
    }
    snprintf(out, outlen, "%s", cur);
    return MHA_OK;
}

/* The file a REPLACE write will replace hands its owner and permission bits
 * to the new one, so a private (0600) result stays private, also while it is
 * written; the set-id bits are not carried (new content is not what they were
 * given to). Best effort: giving a file away needs root, a group one's own.
 * Where the group could not be kept, the group bits would open the file to
 * another group: it gets no more than others do. */
static void take_over(int fd, const char *target) {
    struct stat sb, now;
    if (lstat(target, &sb) != 0 || !S_ISREG(sb.st_mode)) return;
    if (fchown(fd, sb.st_uid, sb.st_gid) != 0) (void)!fchown(fd, (uid_t)-1, sb.st_gid);
    mode_t mode = sb.st_mode & 0777;
    if (fstat(fd, &now) == 0 && now.st_gid != sb.st_gid) mode &= ~(070 & ~((mode & 07) << 3));
    (void)fchmod(fd, mode);
}

mha_status mha_out_begin(mha_out *w, const char *path, int flags, char *why, size_t len) {
    memset(w, 0, sizeof *w);
    w->fd = -1;
    w->flags = flags;
    if (!path || !*path) {
        say(why, len, "empty output path");
        return MHA_EINVAL;
    }
    /* A never-replace name is taken as given: any entry there, a symlink
     * included, means the name is taken. */
    mha_status st =
        resolve_target(path, !(flags & MHA_OUT_NOREPLACE), w->target, sizeof w->target, why, len);
    if (st != MHA_OK) return st;
    char dir[4096];
    const char *base;
    split_path(w->target, dir, sizeof dir, &base);
    if ((flags & MHA_OUT_MKDIRS) && mha_mkdir_p(dir, why, len) != 0) return MHA_EIO;
    int e = EOPNOTSUPP;
    if (!mha_fileio_force_named_temp) {
        w->fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0666);
        e = errno;
    }
    if (w->fd >= 0) {
        w->anonymous = 1;
        snprintf(w->name, sizeof w->name, "/proc/self/fd/%d", w->fd);
        /* Without /proc the name cannot reach the inode: use a named file. */
        struct stat a, b;
        if (stat(w->name, &a) == 0 && fstat(w->fd, &b) == 0 && a.st_ino == b.st_ino &&
            a.st_dev == b.st_dev) {
            if (!(flags & MHA_OUT_NOREPLACE)) take_over(w->fd, w->target);
            return MHA_OK;
        }
        close(w->fd);
        w->fd = -1;
        w->anonymous = 0;
    } else if (e != EOPNOTSUPP && e != EISDIR && e != EINVAL) {
        say(why, len, "cannot create '%s': %s", w->target, strerror(e));
        return MHA_EIO;
    }
    /* No O_TMPFILE here: a hidden name beside the target, ignored by git. */
    if (snprintf(w->tmp, sizeof w->tmp, "%s/.%s.tmp.%ld.XXXXXX", dir, base, (long)getpid()) >=
        (int)sizeof w->tmp) {
        say(why, len, "'%s': path too long", w->target);
        return MHA_EINVAL;
    }
    w->fd = mkstemp(w->tmp);
    if (w->fd < 0) {
        say(why, len, "cannot create a temporary file in '%s': %s", dir, strerror(errno));
        w->tmp[0] = '\0';
        return MHA_EIO;
    }
    /* mkstemp makes the file 0600; give it what open(2) would have. */
    const mode_t mask = umask(0);
    umask(mask);
    (void)fchmod(w->fd, 0666 & ~mask);
    if (!(flags & MHA_OUT_NOREPLACE)) take_over(w->fd, w->target);
    snprintf(w->name, sizeof w->name, "%s", w->tmp);
    return MHA_OK;
}

FILE *mha_out_stream(mha_out *w) {
    if (w->stream || w->fd < 0) return w->stream;
    const int d = dup(w->fd);
    if (d < 0) return NULL;
    w->stream = fdopen(d, "wb");
    if (!w->stream) close(d);
    return w->stream;
}

mha_status mha_out_write(mha_out *w, const void *buf, size_t n, char *why, size_t len) {
    const char *p = buf;
    while (n > 0) {
        const ssize_t k = write(w->fd, p, n > (1u << 30) ? (1u << 30) : n);
        if (k < 0) {
            if (errno == EINTR) continue;
            say(why, len, "cannot write '%s': %s", w->target, strerror(errno));
            return MHA_EIO;
        }
        p += k;
        n -= (size_t)k;
    }
    return MHA_OK;
}

mha_status mha_out_retarget(mha_out *w, const char *path, char *why, size_t len) {
    char dir[4096], ndir[4096];
    const char *base, *nbase;
    split_path(w->target, dir, sizeof dir, &base);
    split_path(path, ndir, sizeof ndir, &nbase);
    if (strcmp(dir, ndir) != 0 || !*nbase) {
        say(why, len, "'%s' is not a file name in the folder '%s'", path, dir);
        return MHA_EINVAL;
    }
    snprintf(w->target, sizeof w->target, "%s", path);
    w->exists = 0;
    return MHA_OK;
}

static void sync_dir_of(const char *path) {
    char dir[4096];
    const char *base;
    split_path(path, dir, sizeof dir, &base);
    const int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) { /* best effort: makes the new name durable */
        fsync(fd);
        close(fd);
    }
}

/* Links the unnamed inode at to; 0 or -1 with errno. */
static int link_anonymous(const mha_out *w, const char *to) {
    if (linkat(AT_FDCWD, w->name, AT_FDCWD, to, AT_SYMLINK_FOLLOW) == 0) return 0;
    const int e = errno;
    if (e == EEXIST) return -1;
    if (linkat(w->fd, "", AT_FDCWD, to, AT_EMPTY_PATH) == 0) return 0;
    if (errno != EEXIST) errno = e;
    return -1;
}

mha_status mha_out_commit(mha_out *w, char *why, size_t len) {
    if (w->fd < 0) {
        say(why, len, "'%s': nothing to commit", w->target);
        return MHA_EINVAL;
    }
    w->exists = 0;
    if (w->stream) {
        const int bad = fflush(w->stream) != 0 || ferror(w->stream);
        const int e = errno;
        fclose(w->stream);
        w->stream = NULL;
        if (bad) {
            say(why, len, "cannot write '%s': %s", w->target, strerror(e));
            mha_out_abort(w);
            return MHA_EIO;
        }
    }
    if (fsync(w->fd) != 0 && errno != EINVAL) {
        say(why, len, "cannot write '%s' (fsync): %s", w->target, strerror(errno));
        mha_out_abort(w);
        return MHA_EIO;
    }
    if (w->flags & MHA_OUT_NOREPLACE) {
        int r;
        if (w->anonymous) {
            r = link_anonymous(w, w->target);
        } else {
            r = renameat2(AT_FDCWD, w->tmp, AT_FDCWD, w->target, RENAME_NOREPLACE);
            if (r != 0 && (errno == EINVAL || errno == ENOSYS)) {
                r = link(w->tmp, w->target);
                if (r == 0) unlink(w->tmp);
            }
        }
        if (r != 0) {
            if (errno == EEXIST) {
                w->exists = 1;
                say(why, len, "'%s' exists (never replaced)", w->target);
                return MHA_EIO;
            }
            say(why, len, "cannot create '%s': %s", w->target, strerror(errno));
            mha_out_abort(w);
            return MHA_EIO;
        }
    } else {
        /* The target may have changed since begin: still only a regular file
         * is replaced. */
        struct stat sb;
        if (lstat(w->target, &sb) == 0 && !S_ISREG(sb.st_mode)) {
            say(why, len, "'%s' is %s, not a regular file: refusing to replace it", w->target,
                mha_file_kind(sb.st_mode));
            mha_out_abort(w);
            return MHA_EINVAL;
        }
        take_over(w->fd, w->target); /* the file replaced now, if it changed */
        if (w->anonymous) {
            /* Give the inode a hidden name beside the target, then rename:
             * rename is the only atomic replace. */
            char dir[4096];
            const char *base;
            split_path(w->target, dir, sizeof dir, &base);
            int r = -1;
            for (int i = 0; i < 100 && r != 0; i++) {
                const int n = snprintf(w->tmp, sizeof w->tmp, "%s/.%s.tmp.%ld.%d", dir, base,
                                       (long)getpid(), i);
                if (n < 0 || (size_t)n >= sizeof w->tmp) {
                    errno = ENAMETOOLONG;
                    break;
                }
                r = link_anonymous(w, w->tmp);
                if (r != 0 && errno != EEXIST) break;
            }
            if (r != 0) {
                say(why, len, "cannot create a temporary name for '%s': %s", w->target,
                    strerror(errno));
                w->tmp[0] = '\0';
                mha_out_abort(w);
                return MHA_EIO;
            }
            w->anonymous = 0; /* abort now unlinks w->tmp */
        }
        if (rename(w->tmp, w->target) != 0) {
            say(why, len, "cannot rename into '%s': %s", w->target, strerror(errno));
            mha_out_abort(w);
            return MHA_EIO;
        }
        w->tmp[0] = '\0';
    }
    sync_dir_of(w->target);
    close(w->fd);
    w->fd = -1;
    w->tmp[0] = '\0';
    return MHA_OK;
}

void mha_out_abort(mha_out *w) {
    if (w->stream) {
        fclose(w->stream);
        w->stream = NULL;
    }
    if (w->fd >= 0) {
        close(w->fd);
        w->fd = -1;
    }
    if (!w->anonymous && w->tmp[0]) unlink(w->tmp);
    w->tmp[0] = '\0';
}

void mha_escape(const char *in, size_t n, char *out, size_t outlen) {
    if (!out || outlen == 0) return;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)in[i];
        char tmp[8];
        if (c == '\\')
            snprintf(tmp, sizeof tmp, "\\\\");
        else if (c >= 0x20 && c < 0x7f)
            snprintf(tmp, sizeof tmp, "%c", c);
        else if (c == '\n')
            snprintf(tmp, sizeof tmp, "\\n");
        else if (c == '\t')
            snprintf(tmp, sizeof tmp, "\\t");
        else if (c == '\r')
            snprintf(tmp, sizeof tmp, "\\r");
        else
            snprintf(tmp, sizeof tmp, "\\x%02x", c);
        const size_t k = strlen(tmp);
        if (o + k + 1 > outlen) {
            /* Cut short: end with "..." where it fits. */
            const size_t dots = outlen >= 4 ? 3 : 0;
            if (o > outlen - 1 - dots) o = outlen - 1 - dots;
            memcpy(out + o, "...", dots);
            o += dots;
            break;
        }
        memcpy(out + o, tmp, k);
        o += k;
    }
    out[o] = '\0';
}
