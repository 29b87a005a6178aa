/* select.h - the internals of kernel selection that `mhabench tune` and the
 * tests share with the library: the shape classes (classes.c), the machine's
 * caches and CPU key (cpuinfo.c), the cache model (cachemodel.c), the
 * tuning-table reader (tables.c) and mha_select's default (select.c).
 * Not installed; the public side is mha_select / mha_default_blocks. */
#ifndef MHA_VARIANTS_SELECT_H
#define MHA_VARIANTS_SELECT_H

#include <stddef.h>
#include <stdint.h>

#include <hwloc.h>

#include "cachemodel.h"
#include "mha.h"

/* ---- shape classes ------------------------------------------------------------
 * head_dim (32, 64, 80, 128 exactly, else "other") x seq_kv bucket (<= 256,
 * <= 1024, <= 4096, longer) x causal x threads (1 or "all": more than one), and
 * decode (seq_q == 1) as its own family (causal is meaningless there: a decode
 * query sees the whole cache), split by GQA: one query row per KV head is a
 * pure stream, a group of rows per KV head does several times the work per
 * byte read, and the best kernel differs. One table in select.c defines them. */
typedef struct {
    int dim;         /* index into the head_dim list; MHA_CLASS_DIMS - 1 is "other" */
    int bucket;      /* index into the seq_kv buckets */
    int causal;      /* 0 or 1; always 0 for decode */
    int threads;     /* 1, or 0 for "all" (any count > 1) */
    int decode;      /* seq_q == 1 */
    int gqa;         /* decode with several query heads per KV head (compute shared per K/V load) */
    mha_dtype dtype; /* the problem's Q/O dtype (fp32 = 0) */
    mha_dtype kv_dtype; /* K/V storage as stored (mha_problem_kv_dtype), fp32 = 0 */
} mha_shape_class;

#define MHA_CLASS_DIMS 5
#define MHA_CLASS_BUCKETS 4
/* decode and prefill, each in two dtypes: (2 + 2) x dims x buckets x causal (or GQA) x threads */
#define MHA_CLASS_MAX (4 * MHA_CLASS_DIMS * MHA_CLASS_BUCKETS * 2 * 2)

void mha_class_of(const mha_problem *p, int threads, mha_shape_class *c);
/* "d64-kv1024-causal-t1", "decode-d128-kv4096-tall", "decode-gqa-d128-kv4096-t1",
 * "dother-kvlong-tall"; fp32 classes have no dtype part (the names committed
 * tables use), others end in "-<dtype>" when Q/O is not fp32 and
 * "-kv_<dtype>" when K/V is stored otherwise: "d64-kv1024-t1-bf16",
 * "decode-gqa-d128-kv4096-t1-kv_int8", "decode-d128-kv4096-t1-bf16-kv_int8". */
void mha_class_name(const mha_shape_class *c, char *buf, size_t len);
/* head_dim of the class (0 for "other") and its bucket's bound on seq_kv (0: unbounded). */
int mha_class_head_dim(const mha_shape_class *c);
int64_t mha_class_seq_bound(const mha_shape_class *c);
/* The classes `mhabench tune --classes quick|full` searches: prefill in fp32
 * and bf16, decode in fp32 (tune leaves out the dtypes no kernel with block
 * knobs takes here). Returns the count, or -1 when set is neither. */
int mha_class_list(const char *set, mha_shape_class *out, int max);
/* A representative problem of the class (B=1, a few heads, the bucket's
 * typical length), and a smaller one of the same class for verification
 * against the float64 oracle (one batch, two heads sharing one KV head, seq
 * capped with an odd tail). */
void mha_class_problem(const mha_shape_class *c, mha_problem *p);
void mha_class_verify_problem(const mha_shape_class *c, mha_problem *p);

/* ---- the cache model's inputs: cachemodel.h ---------------------------------------- */

/* ---- CPU key ----------------------------------------------------------------------- */
/* What cpuid says the CPU is: vendor ("AuthenticAMD"), the brand string
 * trimmed, display family / model (extended fields folded in) and stepping;
 * empty or 0 where a leaf is absent. The one reading of these leaves, for the
 * key below and for harness/mach_info.c. */
typedef struct {
    char vendor[16];
    char model[64];
    int family, model_id, stepping;
    char flags[256]; /* the ISA flags that matter here, /proc/cpuinfo names: "sse2 avx ..." */
} mha_cpu_id;
void mha_cpu_identity(mha_cpu_id *id);
/* The stable per-CPU key, computed exactly as harness/mach_info.c's
 * machine_cpu_key ("amd-epyc-f26m2-avx512"); tests check they agree. */
void mha_cpu_key(char *out, size_t len);
/* The key from given identity fields (what mha_cpu_key does with cpuid's;
 * harness/mach_info.c's machine_cpu_key calls this too). */
/* Copies s into dst (len bytes) without leading/trailing blanks and with inner
 * runs of blanks collapsed to one space (cpuid brand strings are padded). */
void mha_copy_trimmed(char *dst, size_t len, const char *s);
void mha_cpu_key_from(const char *vendor, const char *model, int family, int model_id, char *out,
                      size_t len);

/* ---- tuning tables ----------------------------------------------------------------- */
typedef struct {
    int present;
    char kernel[48];
    int block_q, block_kv, split; /* as written; checked when used */
    double gflops;
} mha_table_choice;

/* dtype / kv_dtype: the element types the class was measured in ("dtype",
 * "kv_dtype" in the file; a table without them, as every table before bf16
 * classes were tuned, is fp32, and kv_dtype defaults to dtype). */
typedef struct {
    char cls[64];
    mha_dtype dtype, kv_dtype;
    mha_table_choice winner, runner_up;
} mha_table_entry;

typedef struct {
    char cpu_key[96];
    char isa_active[16];
    int count;
    mha_table_entry *entries;
} mha_table;

/* Reads and validates a tuning table. On failure returns MHA_EIO (cannot
 * read) or MHA_EFORMAT (malformed, truncated, wrong types) and writes why
 * into why. Free with mha_table_free. */
mha_status mha_table_load(const char *path, mha_table *t, char *why, size_t len);
void mha_table_free(mha_table *t);
/* The entry for the first of the class names names[0..nnames) found in the
 * table at path (parsed once per process and re-read when the file changes)
 * that was measured in dtype / kv_dtype (an entry of other dtypes is never
 * returned, whatever its name), with the table's CPU key and active ISA.
 * Returns MHA_OK with *found = 0/1, or the load status with why. */
mha_status mha_table_lookup(const char *path, const char *const *names, int nnames, mha_dtype dtype,
                            mha_dtype kv_dtype, mha_table_entry *entry, int *found, char *key,
                            size_t keylen, char *isa, size_t isalen, char *why, size_t len);
/* This CPU's table in dir: the newest of <base>.json and
 * <base>-<UTC stamp>[-n].json (tune adds tables beside, never over, one that
 * is there), where <base> (mha_table_cpu_base) is <dir>/<cpu key>, or
 * <dir>/<cpu key>-cap-<isa> when MHA_ISA caps the active ISA below the
 * detected one (the fingerprint holds both, so the capped table never
 * stands in for the native one). <base>.json when there is none. */
void mha_table_cpu_path(const char *dir, char *out, size_t len);
void mha_table_cpu_base(const char *dir, char *out, size_t len);
/* The table mha_select consults: MHA_TUNING, else mha_table_cpu_path in
 * mha_table_dir. */
void mha_table_default_path(char *out, size_t len);
/* mha_table_default_path, and how that file was found, in words (either why
 * may be NULL): in dir_why the folder and why that one (mha_table_dir_why),
 * or the MHA_TUNING override; in file_why which of this CPU's tables there
 * (the newest; the MHA_ISA cap's name), or that there is none. */
void mha_table_locate(char *out, size_t len, char *dir_why, size_t dlen, char *file_why,
                      size_t flen);
/* Where mha_select reads tables: MHA_TUNING_DIR, else the installed
 * <datadir>/mhabench/tuning when it exists, else the source's results/tuning. */
const char *mha_table_dir(void);
/* Why mha_table_dir is that folder, in words. */
void mha_table_dir_why(char *why, size_t len);
/* Where `mhabench tune` writes: where mha_select reads (mha_table_dir), so
 * an installed tune feeds the installed library and a build in the tree
 * the tree's tables (committed there; `meson install` ships them). */
const char *mha_table_write_dir(void);
/* What path would replace when it is in a folder of shipped tables (this
 * build's installed tables, the source tree's results/tuning), else NULL:
 * tune replaces those only with --force. */
const char *mha_table_shipped(const char *path);

/* The kernel mha_select falls back to without a table (tune's "default"):
 * the best-ranked kernel that runs here and takes p's dtypes, of the decode
 * family for a few query rows per KV head, else of the others (when none of
 * the shape's family takes the dtypes, the best of any that does). NULL when
 * no kernel here takes them. */
const mha_kernel *mha_default_kernel(const mha_problem *p);

#endif
