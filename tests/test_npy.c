/* test_npy.c - harness/fmt_npy.c: round trips (rank 0..8, v2.0 headers, loose header
 * syntax), every malformed file as raw bytes (status + message naming the file and
 * the problem), and atomic writes that never leave partial or temporary files. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fmt_npy.h"
#include "testutil.h"

static char g_dir[256];

static int setup(void **state) {
    (void)state;
    return tu_mkdtemp(g_dir, sizeof g_dir, "test_npy");
}

static int teardown(void **state) {
    (void)state;
    tu_rm_tree(g_dir);
    return 0;
}

static void path_in(char *out, size_t len, const char *name) {
    snprintf(out, len, "%s/%s", g_dir, name);
}

static void write_bytes(const char *path, const void *buf, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

/* Writes magic + version + length + header text (padded with spaces and '\n' to a
 * multiple of 64 when pad) + data_bytes bytes of data. */
static void write_npy_raw(const char *path, int major, const char *header, int pad,
                          size_t data_bytes) {
    size_t hl = strlen(header), lenbytes = major == 1 ? 2 : 4;
    size_t pre = 8 + lenbytes, total = pre + hl;
    if (pad) total = ((pre + hl + 1 + 63) / 64) * 64;
    size_t hlen = total - pre;
    unsigned char *buf = calloc(1, total + data_bytes);
    assert_non_null(buf);
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (unsigned char)major;
    buf[7] = 0;
    for (size_t i = 0; i < lenbytes; i++) buf[8 + i] = (unsigned char)(hlen >> (8 * i));
    memcpy(buf + pre, header, hl);
    if (pad) {
        memset(buf + pre + hl, ' ', hlen - hl - 1);
        buf[total - 1] = '\n';
    }
    for (size_t i = 0; i < data_bytes; i++) buf[total + i] = (unsigned char)(i * 7);
    write_bytes(path, buf, total + data_bytes);
    free(buf);
}

/* Reads path expecting failure with status want; the message must name the file and
 * contain every given keyword. */
static void expect_fail(const char *path, mha_status want, const char *kw1, const char *kw2) {
    npy_array a;
    char err[512];
    memset(err, 'x', sizeof err);
    mha_status st = npy_read(path, &a, err, sizeof err);
    print_message("  %s -> %s\n", strrchr(path, '/') + 1, err);
    assert_int_equal(st, want);
    assert_null(a.data);
    assert_non_null(memchr(err, '\0', sizeof err));
    assert_null(strchr(err, '\n'));
    assert_non_null(strstr(err, path));
    if (kw1) assert_non_null(strstr(err, kw1));
    if (kw2) assert_non_null(strstr(err, kw2));
}

/* ---- round trips ------------------------------------------------------------------- */

static void roundtrip(const char *name, const int64_t *shape, int ndim) {
    char path[512], err[512];
    path_in(path, sizeof path, name);
    size_t count = 1;
    for (int i = 0; i < ndim; i++) count *= (size_t)shape[i];
    float *data = malloc((count ? count : 1) * sizeof(float));
    assert_non_null(data);
    for (size_t i = 0; i < count; i++)
        data[i] = (float)((double)i * 0.37 - 11.5) * (i % 3 ? 1.0f : -1e-3f);
    if (count > 2) data[1] = -0.0f;
    assert_int_equal(npy_write(path, data, shape, ndim, err, sizeof err), MHA_OK);

    /* Header: v1.0, data at a multiple of 64, header ending in '\n'. */
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    unsigned char pre[10];
    assert_int_equal(fread(pre, 1, 10, f), 10);
    size_t hlen = pre[8] | (size_t)pre[9] << 8;
    assert_memory_equal(pre, "\x93NUMPY\x01\x00", 8);
    assert_int_equal((10 + hlen) % 64, 0);
    assert_int_equal(fseek(f, (long)(10 + hlen - 1), SEEK_SET), 0);
    assert_int_equal(fgetc(f), '\n');
    fclose(f);

    npy_array a;
    assert_int_equal(npy_read(path, &a, err, sizeof err), MHA_OK);
    assert_int_equal(a.ndim, ndim);
    for (int i = 0; i < ndim; i++) assert_int_equal(a.shape[i], shape[i]);
    assert_int_equal(a.count, count);
    if (count) {
        assert_non_null(a.data);
        assert_int_equal((uintptr_t)a.data % 64, 0);
        assert_memory_equal(a.data, data, count * sizeof(float)); /* bit exact, -0.0 too */
    } else {
        assert_null(a.data);
    }
    npy_free(&a);
    assert_null(a.data);
    free(data);
}

static void test_roundtrip_ranks(void **state) {
    (void)state;
    roundtrip("r0.npy", NULL, 0);
    const int64_t s1[] = {7};
    roundtrip("r1.npy", s1, 1);
    const int64_t s2[] = {3, 5};
    roundtrip("r2.npy", s2, 2);
    const int64_t s4[] = {2, 3, 4, 5};
    roundtrip("r4.npy", s4, 4);
    const int64_t s8[] = {2, 1, 2, 1, 3, 1, 2, 2};
    roundtrip("r8.npy", s8, 8);
    const int64_t sz[] = {3, 0, 4};
    roundtrip("empty.npy", sz, 3);
    const int64_t big[] = {1, 1000, 33};
    roundtrip("big.npy", big, 3);
    assert_int_equal(tu_count_entries(g_dir), 7); /* no temporary files left */
}

static void test_read_v2_and_loose_header(void **state) {
    (void)state;
    char path[512], err[512];
    npy_array a;
    /* Format 2.0, keys in another order, odd whitespace, trailing comma in the tuple. */
    path_in(path, sizeof path, "v2.npy");
    write_npy_raw(path, 2, "{ 'shape' : ( 2 ,3, ) ,\"fortran_order\":False,'descr':'<f4'}", 1, 24);
    assert_int_equal(npy_read(path, &a, err, sizeof err), MHA_OK);
    assert_int_equal(a.ndim, 2);
    assert_int_equal(a.shape[0], 2);
    assert_int_equal(a.shape[1], 3);
    assert_int_equal(a.count, 6);
    npy_free(&a);
    /* Unpadded 1.0 header, scalar shape. */
    path_in(path, sizeof path, "scalar.npy");
    write_npy_raw(path, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': ()}", 0, 4);
    assert_int_equal(npy_read(path, &a, err, sizeof err), MHA_OK);
    assert_int_equal(a.ndim, 0);
    assert_int_equal(a.count, 1);
    npy_free(&a);
    /* Format 3.0 (UTF-8 header) is accepted. */
    path_in(path, sizeof path, "v3.npy");
    write_npy_raw(path, 3, "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", 1, 16);
    assert_int_equal(npy_read(path, &a, err, sizeof err), MHA_OK);
    assert_int_equal(a.count, 4);
    npy_free(&a);
}

/* ---- malformed files ---------------------------------------------------------------- */

#define F4 "{'descr': '<f4', 'fortran_order': False, 'shape': "

static void test_missing_file(void **state) {
    (void)state;
    char path[512];
    path_in(path, sizeof path, "does_not_exist.npy");
    expect_fail(path, MHA_EIO, "No such file", NULL);
}

static void test_bad_magic(void **state) {
    (void)state;
    char path[512];
    path_in(path, sizeof path, "magic.npy");
    write_bytes(path, "\x93NUMPZ\x01\x00\x10\x00{}              ", 26);
    expect_fail(path, MHA_EFORMAT, "magic", NULL);
    path_in(path, sizeof path, "short.npy");
    write_bytes(path, "\x93NU", 3);
    expect_fail(path, MHA_EFORMAT, "magic", NULL);
    path_in(path, sizeof path, "empty.npy");
    write_bytes(path, "", 0);
    expect_fail(path, MHA_EFORMAT, "magic", NULL);
}

static void test_bad_version(void **state) {
    (void)state;
    char path[512];
    path_in(path, sizeof path, "v9.npy");
    write_npy_raw(path, 9, F4 "(2,), }", 1, 8);
    expect_fail(path, MHA_EFORMAT, "version", "9.0");
}

static void test_header_beyond_file(void **state) {
    (void)state;
    char path[512];
    path_in(path, sizeof path, "hlen.npy");
    unsigned char buf[10 + 20] = "\x93NUMPY\x01\x00\xff\x7f{'descr': '<f4'";
    write_bytes(path, buf, sizeof buf);
    expect_fail(path, MHA_EFORMAT, "header length", "beyond");
    /* The length field itself cut short. */
    path_in(path, sizeof path, "hlen2.npy");
    write_bytes(path, "\x93NUMPY\x02\x00\x10\x00", 10);
    expect_fail(path, MHA_EFORMAT, "header length", NULL);
}

static void test_bad_dtypes(void **state) {
    (void)state;
    char path[512];
    path_in(path, sizeof path, "f8.npy");
    write_npy_raw(path, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", 1, 16);
    expect_fail(path, MHA_EFORMAT, "'<f8'", "'<f4'");
    path_in(path, sizeof path, "bigendian.npy");
    write_npy_raw(path, 1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", 1, 8);
    expect_fail(path, MHA_EFORMAT, "'>f4'", "big-endian");
    path_in(path, sizeof path, "i4.npy");
    write_npy_raw(path, 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }", 1, 8);
    expect_fail(path, MHA_EFORMAT, "'<i4'", "dtype");
    path_in(path, sizeof path, "pipe.npy");
    write_npy_raw(path, 1, "{'descr': '|f4', 'fortran_order': False, 'shape': (2,), }", 1, 8);
    expect_fail(path, MHA_EFORMAT, "'|f4'", "dtype");
}

static void test_fortran_order(void **state) {
    (void)state;
    char path[512];
    path_in(path, sizeof path, "fortran.npy");
    write_npy_raw(path, 1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", 1, 24);
    expect_fail(path, MHA_EFORMAT, "fortran_order", NULL);
}

static void test_truncated_data(void **state) {
    (void)state;
    char path[512];
    path_in(path, sizeof path, "trunc.npy");
    write_npy_raw(path, 1, F4 "(2, 3), }", 1, 20);
    expect_fail(path, MHA_EFORMAT, "expected 24 bytes of data, found 20", NULL);
}

static void test_trailing_garbage(void **state) {
    (void)state;
    char path[512];
    path_in(path, sizeof path, "trailing.npy");
    write_npy_raw(path, 1, F4 "(2, 3), }", 1, 25);
    expect_fail(path, MHA_EFORMAT, "trailing", "found 25");
}

static void test_negative_dim(void **state) {
    (void)state;
    char path[512];
    path_in(path, sizeof path, "neg.npy");
    write_npy_raw(path, 1, F4 "(2, -3), }", 1, 0);
    expect_fail(path, MHA_EFORMAT, "negative", NULL);
}

static void test_overflowing_shape(void **state) {
    (void)state;
    char path[512];
    path_in(path, sizeof path, "overflow.npy");
    write_npy_raw(path, 1, F4 "(4611686018427387904, 8), }", 1, 0);
    expect_fail(path, MHA_EFORMAT, "overflow", NULL);
    path_in(path, sizeof path, "overflow2.npy");
    write_npy_raw(path, 1, F4 "(99999999999999999999999,), }", 1, 0);
    expect_fail(path, MHA_EFORMAT, "overflow", NULL);
}

static void test_too_many_dims(void **state) {
    (void)state;
    char path[512];
    path_in(path, sizeof path, "dims9.npy");
    write_npy_raw(path, 1, F4 "(1, 1, 1, 1, 1, 1, 1, 1, 1), }", 1, 4);
    expect_fail(path, MHA_EFORMAT, "too many dimensions", NULL);
}

static void test_missing_key(void **state) {
    (void)state;
    char path[512];
    path_in(path, sizeof path, "noshape.npy");
    write_npy_raw(path, 1, "{'descr': '<f4', 'fortran_order': False, }", 1, 0);
    expect_fail(path, MHA_EFORMAT, "missing", "'shape'");
    path_in(path, sizeof path, "extrakey.npy");
    write_npy_raw(path, 1, F4 "(1,), 'extra': 3}", 1, 4);
    expect_fail(path, MHA_EFORMAT, "unexpected key", "'extra'");
}

static void test_garbage_header(void **state) {
    (void)state;
    char path[512];
    path_in(path, sizeof path, "garbage.npy");
    write_npy_raw(path, 1, "this is not a python dict at all", 1, 0);
    expect_fail(path, MHA_EFORMAT, "header", "dict");
    path_in(path, sizeof path, "garbage2.npy");
    write_npy_raw(path, 1, "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (1,)}", 1, 4);
    expect_fail(path, MHA_EFORMAT, "header", "fortran_order");
    path_in(path, sizeof path, "garbage3.npy");
    write_npy_raw(path, 1, F4 "(1, 2 3), }", 1, 24);
    expect_fail(path, MHA_EFORMAT, "header", "shape");
    path_in(path, sizeof path, "garbage4.npy");
    write_npy_raw(path, 1, F4 "(2,)} junk", 1, 8);
    expect_fail(path, MHA_EFORMAT, "header", "after the dict");
}

static void test_read_directory(void **state) {
    (void)state;
    expect_fail(g_dir, MHA_EIO, "directory", NULL);
}

/* ---- writing ------------------------------------------------------------------------ */

static void test_write_nonexistent_dir(void **state) {
    (void)state;
    char path[512], err[512];
    const float x[2] = {1, 2};
    const int64_t shape[1] = {2};
    int before = tu_count_entries(g_dir);
    path_in(path, sizeof path, "no_such_dir/out.npy");
    assert_int_equal(npy_write(path, x, shape, 1, err, sizeof err), MHA_EIO);
    print_message("  %s\n", err);
    assert_non_null(strstr(err, path));
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(tu_count_entries(g_dir), before);
}

static void test_write_atomic_overwrite(void **state) {
    (void)state;
    char path[512], err[512];
    path_in(path, sizeof path, "atomic.npy");
    const float a[3] = {1, 2, 3}, b[4] = {-4, -5, -6, -7};
    const int64_t sa[1] = {3}, sb[2] = {2, 2};
    int before = tu_count_entries(g_dir);
    assert_int_equal(npy_write(path, a, sa, 1, err, sizeof err), MHA_OK);
    assert_int_equal(npy_write(path, b, sb, 2, err, sizeof err), MHA_OK);
    assert_int_equal(tu_count_entries(g_dir), before + 1);
    npy_array r;
    assert_int_equal(npy_read(path, &r, err, sizeof err), MHA_OK);
    assert_int_equal(r.ndim, 2);
    assert_memory_equal(r.data, b, sizeof b);
    npy_free(&r);
    /* Regular permissions, not mkstemp's 0600. */
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    mode_t mask = umask(0);
    umask(mask);
    assert_int_equal(st.st_mode & 0777, 0666 & ~mask);
}

static void test_write_failure_leaves_nothing(void **state) {
    (void)state;
    char path[512], inner[1024], err[512];
    const float x[2] = {1, 2};
    const int64_t shape[1] = {2};
    /* The target is a non-empty directory: the final rename fails. */
    path_in(path, sizeof path, "target_is_dir.npy");
    assert_int_equal(mkdir(path, 0755), 0);
    snprintf(inner, sizeof inner, "%s/keep", path);
    write_bytes(inner, "k", 1);
    int before = tu_count_entries(g_dir);
    assert_int_equal(npy_write(path, x, shape, 1, err, sizeof err), MHA_EIO);
    print_message("  %s\n", err);
    assert_non_null(strstr(err, path));
    assert_int_equal(tu_count_entries(g_dir), before); /* temp file removed */
    assert_int_equal(tu_count_entries(path), 1);
    /* Invalid arguments create nothing. */
    path_in(path, sizeof path, "invalid.npy");
    const int64_t neg[1] = {-1};
    assert_int_equal(npy_write(path, x, neg, 1, err, sizeof err), MHA_EINVAL);
    assert_int_equal(npy_write(path, x, shape, NPY_MAX_DIMS + 1, err, sizeof err), MHA_EINVAL);
    assert_int_equal(npy_write(path, NULL, shape, 1, err, sizeof err), MHA_EINVAL);
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(tu_count_entries(g_dir), before);
}

static void test_write_readonly_dir(void **state) {
    (void)state;
    if (geteuid() == 0) skip(); /* root ignores directory permissions */
    char dir[512], path[1024], err[512];
    path_in(dir, sizeof dir, "readonly");
    assert_int_equal(mkdir(dir, 0555), 0);
    snprintf(path, sizeof path, "%s/out.npy", dir);
    const float x[1] = {1};
    assert_int_equal(npy_write(path, x, NULL, 0, err, sizeof err), MHA_EIO);
    assert_non_null(strstr(err, path));
    assert_int_equal(tu_count_entries(dir), 0);
    chmod(dir, 0755);
}

static void on_alarm(int sig) {
    (void)sig;
    static const char msg[] = "blocked: npy_read on a FIFO did not return\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(3);
}

/* A FIFO as input is refused at once (it used to block in open forever). */
static void test_read_fifo(void **state) {
    (void)state;
    char path[512];
    path_in(path, sizeof path, "fifo.npy");
    assert_int_equal(mkfifo(path, 0644), 0);
    signal(SIGALRM, on_alarm);
    alarm(5);
    expect_fail(path, MHA_EIO, "FIFO", "not a regular file");
    alarm(0);
    unlink(path);
}

/* Header text is echoed escaped: no newline, escape or other control byte. */
static void test_header_control_bytes(void **state) {
    (void)state;
    char path[512], err[512];
    path_in(path, sizeof path, "escapes.npy");
    write_npy_raw(path, 1,
                  "{'descr': '<f4\x1b]0;pwned\x07\n\x1b[2J', 'fortran_order': False, "
                  "'shape': (1,), }",
                  1, 4);
    npy_array a;
    assert_int_equal(npy_read(path, &a, err, sizeof err), MHA_EFORMAT);
    print_message("  %s\n", err);
    for (const char *c = err; *c; c++) assert_true(*c >= 0x20 && *c < 0x7f);
    assert_non_null(strstr(err, "\\x1b]0;pwned"));
    path_in(path, sizeof path, "escapes2.npy");
    write_npy_raw(path, 1, "{'\x9b\r': 1}", 1, 0);
    assert_int_equal(npy_read(path, &a, err, sizeof err), MHA_EFORMAT);
    print_message("  %s\n", err);
    for (const char *c = err; *c; c++) assert_true(*c >= 0x20 && *c < 0x7f);
}

/* Writes follow a symlink (kept) to the file it names; a FIFO or a device is
 * refused and left as it was. */
static void test_write_special_targets(void **state) {
    (void)state;
    char path[512], link[512], err[512];
    const float x[2] = {1, 2};
    const int64_t shape[1] = {2};
    path_in(path, sizeof path, "real.npy");
    path_in(link, sizeof link, "link.npy");
    assert_int_equal(npy_write(path, x, shape, 1, err, sizeof err), MHA_OK);
    assert_int_equal(symlink("real.npy", link), 0);
    const float y[3] = {3, 4, 5};
    const int64_t sy[1] = {3};
    assert_int_equal(npy_write(link, y, sy, 1, err, sizeof err), MHA_OK);
    struct stat sb;
    assert_int_equal(lstat(link, &sb), 0);
    assert_true(S_ISLNK(sb.st_mode));
    npy_array r;
    assert_int_equal(npy_read(path, &r, err, sizeof err), MHA_OK);
    assert_int_equal(r.count, 3);
    npy_free(&r);

    path_in(path, sizeof path, "out-fifo.npy");
    assert_int_equal(mkfifo(path, 0644), 0);
    int before = tu_count_entries(g_dir);
    assert_int_equal(npy_write(path, x, shape, 1, err, sizeof err), MHA_EIO);
    print_message("  %s\n", err);
    assert_non_null(strstr(err, "FIFO"));
    assert_int_equal(lstat(path, &sb), 0);
    assert_true(S_ISFIFO(sb.st_mode));
    assert_int_equal(tu_count_entries(g_dir), before);
    unlink(path);
}

/* ---- element types ------------------------------------------------------------------- */

/* Each dtype round-trips bit for bit with its descr in the header. */
static void test_typed_roundtrip(void **state) {
    (void)state;
    static const struct {
        mha_dtype t;
        const char *descr;
    } types[] = {{MHA_F32, "'<f4'"}, {MHA_BF16, "'<u2'"}, {MHA_F16, "'<f2'"}, {MHA_I8, "'|i1'"}};
    const int64_t shape[4] = {2, 3, 5, 7};
    const size_t n = 2 * 3 * 5 * 7;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const size_t es = mha_dtype_size(types[ti].t);
        unsigned char *buf = malloc(n * es);
        for (size_t i = 0; i < n * es; i++) buf[i] = (unsigned char)(i * 37 + 11);
        char path[512], err[512], name[32];
        snprintf(name, sizeof name, "typed-%s.npy", mha_dtype_name(types[ti].t));
        path_in(path, sizeof path, name);
        assert_int_equal(npy_write_typed(path, types[ti].t, buf, shape, 4, err, sizeof err),
                         MHA_OK);
        char head[128];
        FILE *f = fopen(path, "rb");
        assert_non_null(f);
        assert_int_equal(fread(head, 1, sizeof head - 1, f), sizeof head - 1);
        fclose(f);
        head[sizeof head - 1] = 0;
        assert_non_null(strstr(head + 10, types[ti].descr));
        npy_array a;
        const unsigned all = MHA_DTYPE_BIT(MHA_F32) | MHA_DTYPE_BIT(MHA_BF16) |
                             MHA_DTYPE_BIT(MHA_F16) | MHA_DTYPE_BIT(MHA_I8);
        assert_int_equal(npy_read_typed(path, all, &a, err, sizeof err), MHA_OK);
        assert_int_equal(a.dtype, types[ti].t);
        assert_int_equal(a.count, n);
        assert_memory_equal(a.raw, buf, n * es);
        if (types[ti].t == MHA_F32)
            assert_ptr_equal(a.data, a.raw);
        else
            assert_null(a.data);
        npy_free(&a);
        /* The fp32-only reader refuses a typed file, naming it and its type. */
        if (types[ti].t != MHA_F32) {
            memset(&a, 0, sizeof a);
            assert_int_equal(npy_read(path, &a, err, sizeof err), MHA_EFORMAT);
            print_message("  %s\n", err);
            assert_non_null(strstr(err, path));
            assert_non_null(strstr(err, npy_descr(types[ti].t)));
            assert_non_null(strstr(err, "not accepted here"));
            assert_non_null(strstr(err, "'<f4' (float32)"));
        }
        free(buf);
    }
}

/* Typed descrs that are still wrong: big-endian fp16, int16, '<f8'; and a
 * typed file whose data is short by one element. */
static void test_typed_bad(void **state) {
    (void)state;
    char path[512], err[512];
    const unsigned half = MHA_DTYPE_BIT(MHA_BF16) | MHA_DTYPE_BIT(MHA_F16);
    static const struct {
        const char *header, *kw;
    } bad[] = {
        {"{'descr': '>f2', 'fortran_order': False, 'shape': (4,), }", "big-endian"},
        {"{'descr': '>u2', 'fortran_order': False, 'shape': (4,), }", "big-endian"},
        {"{'descr': '<i2', 'fortran_order': False, 'shape': (4,), }", "'<i2' is not supported"},
        {"{'descr': '<f8', 'fortran_order': False, 'shape': (4,), }", "'<f8' is not supported"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        path_in(path, sizeof path, "typed-bad.npy");
        write_npy_raw(path, 1, bad[i].header, 1, 8);
        npy_array a;
        assert_int_equal(npy_read_typed(path, half, &a, err, sizeof err), MHA_EFORMAT);
        print_message("  %s\n", err);
        assert_non_null(strstr(err, path));
        assert_non_null(strstr(err, bad[i].kw));
        assert_non_null(strstr(err, "'<u2' (bf16 bits) or '<f2' (float16)"));
    }
    path_in(path, sizeof path, "typed-short.npy");
    write_npy_raw(path, 1, "{'descr': '<f2', 'fortran_order': False, 'shape': (4,), }", 1, 6);
    npy_array a;
    assert_int_equal(npy_read_typed(path, half, &a, err, sizeof err), MHA_EFORMAT);
    assert_non_null(strstr(err, "expected 8 bytes"));
    path_in(path, sizeof path, "typed-i1.npy");
    write_npy_raw(path, 1, "{'descr': '|i1', 'fortran_order': False, 'shape': (3,), }", 1, 3);
    assert_int_equal(npy_read_typed(path, MHA_DTYPE_BIT(MHA_I8), &a, err, sizeof err), MHA_OK);
    assert_int_equal(a.dtype, MHA_I8);
    assert_int_equal(((int8_t *)a.raw)[1], 7);
    npy_free(&a);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_ranks),
        cmocka_unit_test(test_read_v2_and_loose_header),
        cmocka_unit_test(test_missing_file),
        cmocka_unit_test(test_bad_magic),
        cmocka_unit_test(test_bad_version),
        cmocka_unit_test(test_header_beyond_file),
        cmocka_unit_test(test_bad_dtypes),
        cmocka_unit_test(test_fortran_order),
        cmocka_unit_test(test_truncated_data),
        cmocka_unit_test(test_trailing_garbage),
        cmocka_unit_test(test_negative_dim),
        cmocka_unit_test(test_overflowing_shape),
        cmocka_unit_test(test_too_many_dims),
        cmocka_unit_test(test_missing_key),
        cmocka_unit_test(test_garbage_header),
        cmocka_unit_test(test_read_directory),
        cmocka_unit_test(test_write_nonexistent_dir),
        cmocka_unit_test(test_write_atomic_overwrite),
        cmocka_unit_test(test_write_failure_leaves_nothing),
        cmocka_unit_test(test_write_readonly_dir),
        cmocka_unit_test(test_read_fifo),
        cmocka_unit_test(test_header_control_bytes),
        cmocka_unit_test(test_write_special_targets),
        cmocka_unit_test(test_typed_roundtrip),
        cmocka_unit_test(test_typed_bad),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
