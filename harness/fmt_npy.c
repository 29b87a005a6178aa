/* fmt_npy.c - NumPy .npy reader/writer for little-endian C-order arrays of
 * fp32 ('<f4'), fp16 ('<f2'), bf16 (its bits as '<u2') and int8 ('|i1'), and
 * a reader of int32 ('<i4') index arrays.
 * Reads format 1.0/2.0 (and 3.0, whose header is UTF-8 but here plain ASCII),
 * rejects everything else with one line naming the file and the problem (file
 * text escaped); writes 1.0 headers padded to 64 bytes through fileio's
 * atomic writer (symlinks followed, only a regular file is replaced). */
#include "fmt_npy.h"

#include "mha_private.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LEN 6
#define NPY_ALIGN 64

static mha_status fail(char *err, size_t errlen, mha_status st, const char *path, const char *fmt,
                       ...) __attribute__((format(printf, 5, 6)));

/* The message quotes header text, which may hold any byte: it is escaped
 * (mha_escape) so a file cannot put newlines or terminal controls on stderr. */
static mha_status fail(char *err, size_t errlen, mha_status st, const char *path, const char *fmt,
                       ...) {
    if (err && errlen > 0) {
        char raw[1024];
        int n = snprintf(raw, sizeof raw, "%s: ", path);
        if (n < 0) n = 0;
        if ((size_t)n < sizeof raw) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(raw + n, sizeof raw - (size_t)n, fmt, ap);
            va_end(ap);
        }
        mha_escape(raw, strlen(raw), err, errlen);
    }
    return st;
}

/* ---- header dict parser ---------------------------------------------------------- */

typedef struct {
    const char *s; /* NUL-terminated header text */
    size_t pos;
    const char *path;
    char *err;
    size_t errlen;
} hparser;

static void skip_ws(hparser *p) {
    while (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' || p->s[p->pos] == '\n' ||
           p->s[p->pos] == '\r')
        p->pos++;
}

static int accept_ch(hparser *p, char c) {
    skip_ws(p);
    if (p->s[p->pos] == c) {
        p->pos++;
        return 1;
    }
    return 0;
}

/* Quoted Python string ('...' or "..."), no escapes (none occur in valid headers). */
static mha_status parse_str(hparser *p, char *out, size_t outlen, const char *what) {
    skip_ws(p);
    char q = p->s[p->pos];
    if (q != '\'' && q != '"')
        return fail(p->err, p->errlen, MHA_EFORMAT, p->path,
                    "malformed header: expected a quoted %s at offset %zu", what, p->pos);
    size_t start = ++p->pos;
    while (p->s[p->pos] && p->s[p->pos] != q) {
        if (p->s[p->pos] == '\\')
            return fail(p->err, p->errlen, MHA_EFORMAT, p->path,
                        "malformed header: escape sequence in %s", what);
        p->pos++;
    }
    if (!p->s[p->pos])
        return fail(p->err, p->errlen, MHA_EFORMAT, p->path,
                    "malformed header: unterminated %s string", what);
    size_t n = p->pos - start;
    p->pos++;
    if (n >= outlen)
        return fail(p->err, p->errlen, MHA_EFORMAT, p->path, "malformed header: %s too long", what);
    memcpy(out, p->s + start, n);
    out[n] = '\0';
    return MHA_OK;
}

static int match_word(hparser *p, const char *w) {
    skip_ws(p);
    size_t n = strlen(w);
    if (strncmp(p->s + p->pos, w, n) != 0) return 0;
    char c = p->s[p->pos + n];
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')
        return 0;
    p->pos += n;
    return 1;
}

/* "(d0, d1, ...)" with optional trailing comma; "()" is a scalar. */
static mha_status parse_shape(hparser *p, int *ndim, int64_t *shape) {
    if (!accept_ch(p, '('))
        return fail(p->err, p->errlen, MHA_EFORMAT, p->path,
                    "malformed header: 'shape' is not a tuple");
    int n = 0;
    for (;;) {
        if (accept_ch(p, ')')) break;
        skip_ws(p);
        int neg = 0;
        if (p->s[p->pos] == '-') {
            neg = 1;
            p->pos++;
        } else if (p->s[p->pos] == '+') {
            p->pos++;
        }
        if (p->s[p->pos] < '0' || p->s[p->pos] > '9')
            return fail(p->err, p->errlen, MHA_EFORMAT, p->path,
                        "malformed header: 'shape' entry at offset %zu is not an integer", p->pos);
        uint64_t v = 0;
        int overflow = 0;
        while (p->s[p->pos] >= '0' && p->s[p->pos] <= '9') {
            unsigned d = (unsigned)(p->s[p->pos] - '0');
            if (v > (UINT64_MAX - d) / 10)
                overflow = 1;
            else
                v = v * 10 + d;
            p->pos++;
        }
        if (p->s[p->pos] == 'L' || p->s[p->pos] == 'l') p->pos++; /* Python 2 long */
        if (neg && (v != 0 || overflow))
            return fail(p->err, p->errlen, MHA_EFORMAT, p->path,
                        "negative dimension -%llu in 'shape' (dimension %d)", (unsigned long long)v,
                        n);
        if (overflow || v > (uint64_t)INT64_MAX)
            return fail(p->err, p->errlen, MHA_EFORMAT, p->path,
                        "dimension %d of 'shape' overflows a 64-bit integer", n);
        if (n >= NPY_MAX_DIMS)
            return fail(p->err, p->errlen, MHA_EFORMAT, p->path,
                        "too many dimensions in 'shape' (more than %d)", NPY_MAX_DIMS);
        shape[n++] = (int64_t)v;
        if (accept_ch(p, ',')) continue;
        if (accept_ch(p, ')')) break;
        return fail(p->err, p->errlen, MHA_EFORMAT, p->path,
                    "malformed header: expected ',' or ')' in 'shape' at offset %zu", p->pos);
    }
    *ndim = n;
    return MHA_OK;
}

typedef struct {
    char descr[32];
    int fortran;
    int ndim;
    int64_t shape[NPY_MAX_DIMS];
} npy_header;

static mha_status parse_header(const char *text, const char *path, npy_header *h, char *err,
                               size_t errlen) {
    hparser p = {text, 0, path, err, errlen};
    int have_descr = 0, have_fortran = 0, have_shape = 0;
    mha_status st;
    if (!accept_ch(&p, '{'))
        return fail(err, errlen, MHA_EFORMAT, path, "malformed header: not a dict (no '{')");
    for (;;) {
        if (accept_ch(&p, '}')) break;
        char key[32];
        if ((st = parse_str(&p, key, sizeof key, "key")) != MHA_OK) return st;
        if (!accept_ch(&p, ':'))
            return fail(err, errlen, MHA_EFORMAT, path,
                        "malformed header: expected ':' after key '%s'", key);
        if (strcmp(key, "descr") == 0) {
            if (have_descr++)
                return fail(err, errlen, MHA_EFORMAT, path, "malformed header: duplicate 'descr'");
            skip_ws(&p);
            if (p.s[p.pos] == '[')
                return fail(err, errlen, MHA_EFORMAT, path,
                            "structured dtype is not supported, expected '<f4' (float32)");
            if ((st = parse_str(&p, h->descr, sizeof h->descr, "'descr'")) != MHA_OK) return st;
        } else if (strcmp(key, "fortran_order") == 0) {
            if (have_fortran++)
                return fail(err, errlen, MHA_EFORMAT, path,
                            "malformed header: duplicate 'fortran_order'");
            if (match_word(&p, "True"))
                h->fortran = 1;
            else if (match_word(&p, "False"))
                h->fortran = 0;
            else
                return fail(err, errlen, MHA_EFORMAT, path,
                            "malformed header: 'fortran_order' is not True or False");
        } else if (strcmp(key, "shape") == 0) {
            if (have_shape++)
                return fail(err, errlen, MHA_EFORMAT, path, "malformed header: duplicate 'shape'");
            if ((st = parse_shape(&p, &h->ndim, h->shape)) != MHA_OK) return st;
        } else {
            return fail(err, errlen, MHA_EFORMAT, path, "malformed header: unexpected key '%s'",
                        key);
        }
        if (accept_ch(&p, ',')) continue;
        if (accept_ch(&p, '}')) break;
        return fail(err, errlen, MHA_EFORMAT, path,
                    "malformed header: expected ',' or '}' at offset %zu", p.pos);
    }
    skip_ws(&p);
    if (p.s[p.pos] != '\0')
        return fail(err, errlen, MHA_EFORMAT, path,
                    "malformed header: unexpected text after the dict at offset %zu", p.pos);
    const char *missing = !have_descr     ? "descr"
                          : !have_fortran ? "fortran_order"
                          : !have_shape   ? "shape"
                                          : NULL;
    if (missing)
        return fail(err, errlen, MHA_EFORMAT, path, "malformed header: missing key '%s'", missing);
    return MHA_OK;
}

static const char *const DESCR[MHA_DTYPE_COUNT] = {
    [MHA_F32] = "<f4", [MHA_BF16] = "<u2", [MHA_F16] = "<f2", [MHA_I8] = "|i1"};
static const char *const DESCR_MEANS[MHA_DTYPE_COUNT] = {
    [MHA_F32] = "float32", [MHA_BF16] = "bf16 bits", [MHA_F16] = "float16", [MHA_I8] = "int8"};

const char *npy_descr(mha_dtype t) {
    return (unsigned)t < MHA_DTYPE_COUNT ? DESCR[t] : "?";
}

/* An accept bit beside the dtype bits: '<i4' (int32), read by npy_read_i32
 * only (no mha_dtype is int32: the index arrays are not tensors). */
#define NPY_ACCEPT_I32 (1u << 16)

/* "'<f4' (float32)" or "'<f4' (float32), '<u2' (bf16 bits) or '<f2' (float16)" */
static void accepted_list(unsigned accept, char *buf, size_t len) {
    const char *descr[MHA_DTYPE_COUNT + 1], *means[MHA_DTYPE_COUNT + 1];
    int total = 0;
    for (int t = 0; t < MHA_DTYPE_COUNT; t++)
        if (accept & MHA_DTYPE_BIT(t)) {
            descr[total] = DESCR[t];
            means[total++] = DESCR_MEANS[t];
        }
    if (accept & NPY_ACCEPT_I32) {
        descr[total] = "<i4";
        means[total++] = "int32";
    }
    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; i < total && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, "%s'%s' (%s)",
                              i == 0           ? ""
                              : i == total - 1 ? " or "
                                               : ", ",
                              descr[i], means[i]);
}

/* The file's descr to a dtype in accept: MHA_OK, or MHA_EFORMAT naming it. A
 * big-endian or unknown type is named as such. */
static mha_status check_descr(const char *d, unsigned accept, mha_dtype *t, const char *path,
                              char *err, size_t errlen) {
    char want[160];
    accepted_list(accept, want, sizeof want);
    if ((accept & NPY_ACCEPT_I32) && strcmp(d, "<i4") == 0) {
        *t = (mha_dtype)MHA_DTYPE_COUNT; /* int32: no mha_dtype */
        return MHA_OK;
    }
    if ((accept & NPY_ACCEPT_I32) && strcmp(d, "<i8") == 0) /* numpy's default int */
        return fail(err, errlen, MHA_EFORMAT, path,
                    "dtype '%s' (int64) is not supported, expected %s: save it as int32 "
                    "(numpy: a.astype(np.int32); torch: t.to(torch.int32).numpy())",
                    d, want);
    for (int i = 0; i < MHA_DTYPE_COUNT; i++)
        if (strcmp(d, DESCR[i]) == 0 || (i == MHA_I8 && strcmp(d, "i1") == 0)) {
            if (accept & MHA_DTYPE_BIT(i)) {
                *t = (mha_dtype)i;
                return MHA_OK;
            }
            return fail(err, errlen, MHA_EFORMAT, path,
                        "dtype '%s' (%s) is not accepted here, expected %s", d, DESCR_MEANS[i],
                        want);
        }
    if (d[0] == '>' && d[1] != '\0' && strcmp(d + 1, "i1") != 0 && strcmp(d + 1, "u1") != 0)
        return fail(err, errlen, MHA_EFORMAT, path,
                    "dtype '%s' (big-endian) is not supported, expected %s", d, want);
    /* torch has no uint16 before 2.3: bf16 bits exported as int16 */
    if (strcmp(d, "<i2") == 0 && (accept & MHA_DTYPE_BIT(MHA_BF16)))
        return fail(err, errlen, MHA_EFORMAT, path,
                    "dtype '%s' is not supported, expected %s; bf16 bits saved as int16? "
                    "save them as uint16 (numpy: a.view(np.uint16); torch: "
                    "t.view(torch.int16).numpy().view(np.uint16))",
                    d, want);
    return fail(err, errlen, MHA_EFORMAT, path, "dtype '%s' is not supported, expected %s", d,
                want);
}

/* ---- reading ------------------------------------------------------------------------ */

static int read_full(FILE *f, void *buf, size_t n) {
    return fread(buf, 1, n, f) == n;
}

void npy_free(npy_array *a) {
    if (!a) return;
    mha_free(a->raw);
    a->raw = NULL;
    a->data = NULL;
    a->i32 = NULL;
    a->count = 0;
    a->ndim = 0;
}

mha_status npy_read(const char *path, npy_array *out, char *err, size_t errlen) {
    return npy_read_typed(path, MHA_DTYPE_BIT(MHA_F32), out, err, errlen);
}

mha_status npy_read_i32(const char *path, npy_array *out, char *err, size_t errlen) {
    return npy_read_typed(path, NPY_ACCEPT_I32, out, err, errlen);
}

mha_status npy_read_typed(const char *path, unsigned accept, npy_array *out, char *err,
                          size_t errlen) {
    if (err && errlen) err[0] = '\0';
    if (!out) return MHA_EINVAL;
    memset(out, 0, sizeof *out);
    if (!path) return fail(err, errlen, MHA_EINVAL, "(null)", "no path given");

    char why[256];
    FILE *f = mha_fopen_input(path, why, sizeof why);
    if (!f) return fail(err, errlen, MHA_EIO, path, "%s", why);
    mha_status st = MHA_OK;
    char *text = NULL;
    void *data = NULL;
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0) {
        st = fail(err, errlen, MHA_EIO, path, "cannot stat: %s", strerror(errno));
        goto done;
    }
    uint64_t fsize = (uint64_t)sb.st_size;

    unsigned char pre[NPY_MAGIC_LEN + 2];
    if (fsize < sizeof pre) {
        st = fail(err, errlen, MHA_EFORMAT, path,
                  "not a .npy file (bad magic: only %llu bytes, too short)",
                  (unsigned long long)fsize);
        goto done;
    }
    if (!read_full(f, pre, sizeof pre)) {
        st = fail(err, errlen, MHA_EIO, path, "read error: %s",
                  ferror(f) ? strerror(errno) : "unexpected end of file");
        goto done;
    }
    if (memcmp(pre, NPY_MAGIC, NPY_MAGIC_LEN) != 0) {
        st = fail(err, errlen, MHA_EFORMAT, path, "not a .npy file (bad magic)");
        goto done;
    }
    int major = pre[6], minor = pre[7];
    size_t lenbytes;
    if (major == 1 && minor == 0)
        lenbytes = 2;
    else if ((major == 2 || major == 3) && minor == 0)
        lenbytes = 4;
    else {
        st = fail(err, errlen, MHA_EFORMAT, path,
                  "unsupported .npy format version %d.%d (supported: 1.0, 2.0, 3.0)", major, minor);
        goto done;
    }
    unsigned char lb[4];
    if (!read_full(f, lb, lenbytes)) {
        st = ferror(f) ? fail(err, errlen, MHA_EIO, path, "read error: %s", strerror(errno))
                       : fail(err, errlen, MHA_EFORMAT, path, "truncated header length field");
        goto done;
    }
    uint64_t hlen = lenbytes == 2 ? (uint64_t)lb[0] | (uint64_t)lb[1] << 8
                                  : (uint64_t)lb[0] | (uint64_t)lb[1] << 8 | (uint64_t)lb[2] << 16 |
                                        (uint64_t)lb[3] << 24;
    uint64_t hstart = NPY_MAGIC_LEN + 2 + lenbytes;
    if (hlen > fsize - hstart) {
        st = fail(err, errlen, MHA_EFORMAT, path,
                  "header length %llu goes beyond the end of the file (%llu bytes)",
                  (unsigned long long)hlen, (unsigned long long)fsize);
        goto done;
    }
    text = malloc((size_t)hlen + 1);
    if (!text) {
        st = fail(err, errlen, MHA_ENOMEM, path, "cannot allocate %llu bytes for the header",
                  (unsigned long long)hlen + 1);
        goto done;
    }
    if (!read_full(f, text, (size_t)hlen)) {
        st = fail(err, errlen, MHA_EIO, path, "read error in header: %s",
                  ferror(f) ? strerror(errno) : "unexpected end of file");
        goto done;
    }
    text[hlen] = '\0';
    if (memchr(text, '\0', (size_t)hlen)) {
        st = fail(err, errlen, MHA_EFORMAT, path, "malformed header: contains a NUL byte");
        goto done;
    }

    npy_header h;
    memset(&h, 0, sizeof h);
    if ((st = parse_header(text, path, &h, err, errlen)) != MHA_OK) goto done;
    mha_dtype dt = MHA_F32;
    if ((st = check_descr(h.descr, accept, &dt, path, err, errlen)) != MHA_OK) goto done;
    const size_t esize = dt == (mha_dtype)MHA_DTYPE_COUNT ? sizeof(int32_t) : mha_dtype_size(dt);
    if (h.fortran) {
        st = fail(err, errlen, MHA_EFORMAT, path,
                  "fortran_order True is not supported, expected C order");
        goto done;
    }

    /* Element count and bytes; a zero dimension makes any product valid. */
    size_t count = 1;
    int zero = 0;
    for (int i = 0; i < h.ndim; i++)
        if (h.shape[i] == 0) zero = 1;
    if (zero)
        count = 0;
    else
        for (int i = 0; i < h.ndim; i++) {
            uint64_t d = (uint64_t)h.shape[i];
            if (d > (SIZE_MAX / esize) / count) {
                st = fail(err, errlen, MHA_EFORMAT, path,
                          "shape overflows: the byte count does not fit in size_t");
                goto done;
            }
            count *= (size_t)d;
        }
    uint64_t bytes = (uint64_t)count * esize;
    uint64_t avail = fsize - hstart - hlen;
    if (avail < bytes) {
        st = fail(err, errlen, MHA_EFORMAT, path,
                  "truncated data: expected %llu bytes of data, found %llu",
                  (unsigned long long)bytes, (unsigned long long)avail);
        goto done;
    }
    if (avail > bytes) {
        st = fail(err, errlen, MHA_EFORMAT, path,
                  "trailing garbage: expected %llu bytes of data, found %llu",
                  (unsigned long long)bytes, (unsigned long long)avail);
        goto done;
    }
    if (count > 0) {
        data = mha_alloc((size_t)bytes);
        if (!data) {
            st = fail(err, errlen, MHA_ENOMEM, path, "cannot allocate %llu bytes for the data",
                      (unsigned long long)bytes);
            goto done;
        }
        if (!read_full(f, data, (size_t)bytes)) {
            st = fail(err, errlen, MHA_EIO, path, "read error in data: %s",
                      ferror(f) ? strerror(errno) : "unexpected end of file");
            goto done;
        }
    }
    out->ndim = h.ndim;
    for (int i = 0; i < h.ndim; i++) out->shape[i] = h.shape[i];
    out->count = count;
    out->dtype = dt;
    out->raw = data;
    out->data = dt == MHA_F32 ? data : NULL;
    out->i32 = dt == (mha_dtype)MHA_DTYPE_COUNT ? data : NULL;
    data = NULL;

done:
    mha_free(data);
    free(text);
    fclose(f);
    return st;
}

/* ---- writing ------------------------------------------------------------------------ */

mha_status npy_write(const char *path, const float *data, const int64_t *shape, int ndim, char *err,
                     size_t errlen) {
    return npy_write_typed(path, MHA_F32, data, shape, ndim, err, errlen);
}

mha_status npy_write_typed(const char *path, mha_dtype t, const void *data, const int64_t *shape,
                           int ndim, char *err, size_t errlen) {
    if (err && errlen) err[0] = '\0';
    if (!path) return fail(err, errlen, MHA_EINVAL, "(null)", "no path given");
    if (ndim < 0 || ndim > NPY_MAX_DIMS)
        return fail(err, errlen, MHA_EINVAL, path, "ndim = %d: must be in 0..%d", ndim,
                    NPY_MAX_DIMS);
    if (ndim > 0 && !shape) return fail(err, errlen, MHA_EINVAL, path, "no shape given");
    const size_t esize = mha_dtype_size(t);
    if (esize == 0) return fail(err, errlen, MHA_EINVAL, path, "unknown dtype %d", (int)t);
    size_t count = 1;
    int zero = 0;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return fail(err, errlen, MHA_EINVAL, path, "shape[%d] = %lld: must be >= 0", i,
                        (long long)shape[i]);
        if (shape[i] == 0) zero = 1;
    }
    if (zero)
        count = 0;
    else
        for (int i = 0; i < ndim; i++) {
            if ((uint64_t)shape[i] > (SIZE_MAX / esize) / count)
                return fail(err, errlen, MHA_EINVAL, path, "shape overflows size_t bytes");
            count *= (size_t)shape[i];
        }
    if (count > 0 && !data) return fail(err, errlen, MHA_EINVAL, path, "no data given");

    /* Header: dict, spaces, '\n'; magic+version+len+header is a multiple of 64. */
    char hdr[512];
    int n =
        snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': (", DESCR[t]);
    for (int i = 0; i < ndim; i++)
        n +=
            snprintf(hdr + n, sizeof hdr - (size_t)n, "%s%lld", i ? ", " : "", (long long)shape[i]);
    n += snprintf(hdr + n, sizeof hdr - (size_t)n, "%s), }", ndim == 1 ? "," : "");
    size_t pre = NPY_MAGIC_LEN + 2 + 2;
    size_t total = ((pre + (size_t)n + 1 + NPY_ALIGN - 1) / NPY_ALIGN) * NPY_ALIGN;
    size_t hlen = total - pre;
    if (total > sizeof hdr) return fail(err, errlen, MHA_EINVAL, path, "header too long");
    unsigned char head[512];
    memcpy(head, NPY_MAGIC, NPY_MAGIC_LEN);
    head[6] = 1;
    head[7] = 0;
    head[8] = (unsigned char)(hlen & 0xff);
    head[9] = (unsigned char)(hlen >> 8);
    memcpy(head + pre, hdr, (size_t)n);
    memset(head + pre + n, ' ', hlen - (size_t)n - 1);
    head[total - 1] = '\n';

    mha_out w;
    char why[512];
    if (mha_out_begin(&w, path, MHA_OUT_REPLACE, why, sizeof why) != MHA_OK)
        return fail(err, errlen, MHA_EIO, path, "cannot write: %s", why);
    if (mha_out_write(&w, head, total, why, sizeof why) != MHA_OK ||
        (count > 0 && mha_out_write(&w, data, count * esize, why, sizeof why) != MHA_OK)) {
        mha_out_abort(&w);
        return fail(err, errlen, MHA_EIO, path, "%s", why);
    }
    if (mha_out_commit(&w, why, sizeof why) != MHA_OK)
        return fail(err, errlen, MHA_EIO, path, "%s", why);
    return MHA_OK;
}
