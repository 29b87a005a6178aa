/* select.c - which kernel and knobs to run: the cache model behind
 * mha_default_blocks (hwloc's L1d/L2, clamped), the shape classes shared with
 * `mhabench tune`, the per-CPU tuning table (json-c) and mha_select's fallback
 * chain: MHA_KERNEL, then the table matching this CPU, then cache-model
 * defaults for the best kernel the CPU runs. Built without SIMD flags. */
#include <cpuid.h>
#include <ctype.h>
#include <errno.h>
#include <hwloc.h>
#include <json-c/json.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "fileio.h"
#include "internal.h"
#include "select.h"

#ifndef MHA_SOURCE_DIR
#define MHA_SOURCE_DIR "."
#endif
#ifndef MHA_DATA_DIR
#define MHA_DATA_DIR MHA_SOURCE_DIR "/results"
#endif

#define KIB ((uint64_t)1024)
#define MIB (1024 * KIB)

/* ---- shape classes ---------------------------------------------------------------- */

/* The one table of classes. head_dims: the sizes models use, exact; anything
 * else is "other" (represented by 96). Buckets bound seq_kv (the length that
 * sets the work per query); each has the length and head count tune measures. */
static const int class_dims[MHA_CLASS_DIMS] = {32, 64, 80, 128, 0};
#define OTHER_DIM_REP 96
static const struct {
    int64_t bound; /* seq_kv <= bound; 0: no bound */
    const char *name;
    int64_t rep_seq, rep_heads;
} class_buckets[MHA_CLASS_BUCKETS] = {
    {256, "kv256", 128, 8},
    {1024, "kv1024", 512, 8},
    {4096, "kv4096", 2048, 4},
    {0, "kvlong", 8192, 1},
};
#define DECODE_HEADS 32
#define DECODE_GROUP 4 /* query heads per KV head of the GQA decode classes (Llama-style 32/8) */
#define VERIFY_SEQ_CAP 579 /* odd: every block size leaves a tail */

void mha_class_of(const mha_problem *p, int threads, mha_shape_class *c) {
    memset(c, 0, sizeof *c);
    c->dim = MHA_CLASS_DIMS - 1;
    for (int i = 0; i < MHA_CLASS_DIMS - 1; i++)
        if (p->head_dim == class_dims[i]) c->dim = i;
    c->bucket = MHA_CLASS_BUCKETS - 1;
    for (int i = 0; i < MHA_CLASS_BUCKETS - 1; i++)
        if (p->seq_kv <= class_buckets[i].bound) {
            c->bucket = i;
            break;
        }
    c->decode = p->seq_q == 1;
    c->gqa = c->decode && p->heads > p->kv_heads;
    c->causal = !c->decode && p->causal;
    c->threads = threads > 1 ? 0 : 1;
}

void mha_class_name(const mha_shape_class *c, char *buf, size_t len) {
    char d[16];
    if (class_dims[c->dim])
        snprintf(d, sizeof d, "d%d", class_dims[c->dim]);
    else
        snprintf(d, sizeof d, "dother");
    snprintf(buf, len, "%s%s%s-%s%s-%s", c->decode ? "decode-" : "", c->gqa ? "gqa-" : "", d,
             class_buckets[c->bucket].name, c->causal ? "-causal" : "",
             c->threads == 1 ? "t1" : "tall");
}

int mha_class_head_dim(const mha_shape_class *c) {
    return class_dims[c->dim];
}

int64_t mha_class_seq_bound(const mha_shape_class *c) {
    return class_buckets[c->bucket].bound;
}

int mha_class_list(const char *set, mha_shape_class *out, int max) {
    int full;
    if (set && strcmp(set, "quick") == 0)
        full = 0;
    else if (set && strcmp(set, "full") == 0)
        full = 1;
    else
        return -1;
    /* quick: the head dims and lengths most models run (those of `mhabench
     * sweep --preset quick`), both thread counts, and decode against a 4K cache. */
    static const int quick_dims[] = {1, 3}, quick_buckets[] = {0, 1, 2};
    int n = 0;
    for (int decode = 0; decode <= 1; decode++)
        for (int di = 0; di < (full ? MHA_CLASS_DIMS : 2); di++)
            for (int bi = 0; bi < (full ? MHA_CLASS_BUCKETS : (decode ? 1 : 3)); bi++)
                /* decode: the second pass is the GQA family (causal is moot) */
                for (int causal = 0; causal <= 1; causal++)
                    for (int t = 1; t >= 0; t--) {
                        mha_shape_class c = {
                            .dim = full ? di : quick_dims[di],
                            .bucket = full ? bi : (decode ? 2 : quick_buckets[bi]),
                            .causal = decode ? 0 : causal,
                            .threads = t,
                            .decode = decode,
                            .gqa = decode && causal,
                        };
                        if (n < max) out[n] = c;
                        n++;
                    }
    return n < max ? n : max;
}

void mha_class_problem(const mha_shape_class *c, mha_problem *p) {
    const int d = class_dims[c->dim] ? class_dims[c->dim] : OTHER_DIM_REP;
    /* decode: a cache as long as the bucket allows (the sweep's 4096) */
    const int64_t bound = class_buckets[c->bucket].bound;
    const int64_t n = c->decode ? (bound ? bound : 16384) : class_buckets[c->bucket].rep_seq;
    const int64_t h = c->decode ? DECODE_HEADS : class_buckets[c->bucket].rep_heads;
    *p = (mha_problem){.batch = 1,
                       .heads = h,
                       .kv_heads = c->gqa ? h / DECODE_GROUP : h,
                       .seq_q = c->decode ? 1 : n,
                       .seq_kv = n,
                       .head_dim = d,
                       .causal = c->causal,
                       .scale = 0.0f};
}

void mha_class_verify_problem(const mha_shape_class *c, mha_problem *p) {
    mha_class_problem(c, p);
    p->heads = 2;
    /* grouped KV (the head mapping is exercised too), except for the decode
     * family of one query row per KV head */
    p->kv_heads = c->decode && !c->gqa ? 2 : 1;
    if (p->seq_kv > VERIFY_SEQ_CAP) p->seq_kv = VERIFY_SEQ_CAP;
    if (p->seq_q > VERIFY_SEQ_CAP) p->seq_q = VERIFY_SEQ_CAP;
    p->seq_kv |= 1; /* odd lengths: the last block of every size is a tail */
    if (p->seq_q > 1) p->seq_q = p->seq_kv;
}

/* ---- cache sizes (hwloc, once) ------------------------------------------------------
 * Clamped (reasoning in harness/machine.c, which reports these same values):
 * L1d to [16 KiB, 256 KiB] (unknown: 32 KiB), L2 to [128 KiB, 8 MiB]
 * (unknown: 1 MiB).
 * The model needs only the order of magnitude; a VM's odd report must not
 * produce absurd blocks. */
static pthread_once_t cache_once = PTHREAD_ONCE_INIT;
static uint64_t cache_l1d, cache_l2, cache_l1d_raw, cache_l2_raw;

static uint64_t clamp_cache(uint64_t raw, uint64_t lo, uint64_t hi, uint64_t unknown) {
    return raw == 0 ? unknown : raw < lo ? lo : raw > hi ? hi : raw;
}

uint64_t mha_hwloc_cache_size(hwloc_topology_t topo, hwloc_obj_type_t type) {
    const int n = hwloc_get_nbobjs_by_type(topo, type);
    for (int i = 0; i < n; i++) {
        hwloc_obj_t o = hwloc_get_obj_by_type(topo, type, (unsigned)i);
        if (!o || !o->attr) continue;
        if (o->attr->cache.type == HWLOC_OBJ_CACHE_INSTRUCTION) continue;
        if (o->attr->cache.size) return (uint64_t)o->attr->cache.size;
    }
    return 0;
}

static void cache_init(void) {
    hwloc_topology_t topo;
    if (hwloc_topology_init(&topo) == 0) {
        if (hwloc_topology_load(topo) == 0) {
            cache_l1d_raw = mha_hwloc_cache_size(topo, HWLOC_OBJ_L1CACHE);
            cache_l2_raw = mha_hwloc_cache_size(topo, HWLOC_OBJ_L2CACHE);
        }
        hwloc_topology_destroy(topo);
    }
    cache_l1d = clamp_cache(cache_l1d_raw, 16 * KIB, 256 * KIB, 32 * KIB);
    cache_l2 = clamp_cache(cache_l2_raw, 128 * KIB, 8 * MIB, 1 * MIB);
}

void mha_cache_sizes(uint64_t *l1d, uint64_t *l2, uint64_t *l1d_raw, uint64_t *l2_raw) {
    pthread_once(&cache_once, cache_init);
    if (l1d) *l1d = cache_l1d;
    if (l2) *l2 = cache_l2;
    if (l1d_raw) *l1d_raw = cache_l1d_raw;
    if (l2_raw) *l2_raw = cache_l2_raw;
}

int mha_tile_width(mha_isa isa) { /* 4 zmm x 16 lanes, 3 ymm x 8, 4 scalar columns */
    const mha_isa_ops *ops = mha_ops_for(isa);
    return ops ? ops->tile_width : 1;
}

/* ---- the cache model ----------------------------------------------------------------
 * Both algorithms compute S^T = K Q^T and O = P V with one micro-kernel:
 * for S^T its loaded operand is a panel of tile-width query columns, Q^T
 * (d x w), while K rows stream past; for O the P^T block (bk x w) is
 * broadcast element by element while V rows stream past.
 *  - block_kv: the P^T panel (bk x 64 floats) may take up to 3/4 of the L1d
 *    (the accumulators live in registers, so little else competes); larger
 *    blocks amortise flash's
 *    per-block softmax and rescale. A power of two in [32, 256].
 *  - flash block_q: the per-thread working set Q^T + S^T + O = (2d + bk) bq
 *    floats within the L1d (it is touched every KV block), as a multiple of
 *    the tile width, at least one tile; with the streamed K and V blocks
 *    (2 bk d floats) within half the L2, shrinking bk first.
 *  - tiled block_q: S^T is materialised whole (Nkv x Nq: the L2/L3's problem,
 *    not the blocks'); per query block the Q^T and O panels (2 d bq floats)
 *    are reused across every KV block, so they get the L1d. Small query
 *    blocks also skip more of the causal triangle.
 * Measured on the reference machine (Zen 5: 48 KiB L1d, 1 MiB L2; `mhabench
 * tune` logs in results/tuning/log): this gives 64 x 128 for both at d = 64
 * and 128, where bk = 128 beat the earlier fixed 64 by 2-5% and tiled's bq 64
 * beat its fixed 256 by up to 40% under a causal mask. */
static int pow2_floor(uint64_t v) {
    int r = 1;
    while ((uint64_t)r * 2 <= v && r < (1 << 20)) r *= 2;
    return r;
}

void mha_default_blocks(const mha_problem *p, unsigned traits, mha_isa isa, int threads,
                        int *block_q, int *block_kv) {
    const int tiled = (traits & MHA_KT_MATERIALISED) != 0;
    uint64_t l1, l2;
    mha_cache_sizes(&l1, &l2, NULL, NULL);
    const uint64_t w = (uint64_t)mha_tile_width(isa), f = sizeof(float);
    const uint64_t d = p && p->head_dim > 0 ? (uint64_t)p->head_dim : 64;
    uint64_t bk = (uint64_t)pow2_floor(l1 * 3 / 4 / (64 * f));
    bk = bk < 32 ? 32 : bk > 256 ? 256 : bk;
    uint64_t bq;
    if (tiled) {
        bq = l1 / (2 * d * f) / w * w;
    } else {
        while (bk > 16 && (2 * d + bk) * w * f + 2 * bk * d * f > l2 / 2) bk /= 2;
        bq = l1 / ((2 * d + bk) * f) / w * w;
    }
    if (bq < w) bq = w;
    if (bq > 512) bq = 512 / w * w;
    /* Measured on Zen 5 (AVX-512, 1 MiB L2): at head_dim <= 64 flash runs
     * 1-4% faster with 1.5-tile query blocks and 256-key blocks than with the
     * L1 fit above ((1,8,512,64) 215.7 -> 223.1 GFLOP/s, (1,12,512,64) 214.2
     * -> 222.4, (1,8,4096,64) 212.1 -> 216.4; equal at d = 128): S^T then
     * lives in the L2, which feeds the tile loads fast enough, and the per-
     * block softmax and rescale are amortised over twice the keys. Used where
     * the L2 holds that working set four times over. The coordinate-descent
     * tuner cannot reach this point from 64 x 128 (neither move alone pays). */
    if (!tiled && w >= 64 && d <= 64 && (2 * d + 256) * (w * 3 / 2) * f * 4 <= l2) {
        bq = w * 3 / 2;
        bk = 256;
    }
    /* Load balance: flash's tasks are (batch, head, query block); with fewer
     * than 32 per thread the last ones leave threads idle (measured: (1,12,
     * 197,64) on 2 threads scales 1.78x at bq 64, 1.96x at 32). Halve bq down
     * to two vectors of queries, below which the tiles lose more than that. */
    const mha_isa_ops *ops = mha_ops_for(isa);
    const uint64_t lanes = ops ? (uint64_t)ops->lanes : 1;
    if (p && threads > 1 && !tiled) {
        const uint64_t bh = (uint64_t)(p->batch * p->heads), nq = (uint64_t)p->seq_q;
        while (bq > 2 * lanes && bh * ((nq + bq - 1) / bq) < 32 * (uint64_t)threads)
            bq = (bq / 2 + lanes - 1) / lanes * lanes;
    }
    /* Tiny problems: no block larger than the problem (the kernels clamp the
     * same way, so workspace sizes and runs agree either way). */
    if (p && p->seq_q > 0 && (int64_t)bq > p->seq_q) bq = (uint64_t)p->seq_q;
    if (p && p->seq_kv > 0 && (int64_t)bk > p->seq_kv) bk = (uint64_t)p->seq_kv;
    *block_q = bq < 1 ? 1 : (int)bq;
    *block_kv = bk < 1 ? 1 : (int)bk;
}

/* ---- CPU key --------------------------------------------------------------------------
 * vendor, up to four brand-string words without marks and noise,
 * family/model, detected ISA; harness/machine.c's machine_cpu_key builds it
 * with mha_cpu_key_from too. */
void mha_copy_trimmed(char *dst, size_t len, const char *s) {
    size_t o = 0;
    int pending_space = 0;
    for (; *s && o + 1 < len; s++) {
        if (isspace((unsigned char)*s)) {
            pending_space = o > 0;
            continue;
        }
        if (pending_space && o + 2 < len) dst[o++] = ' ';
        pending_space = 0;
        dst[o++] = *s;
    }
    dst[o] = '\0';
}

static void key_append(char *out, size_t len, size_t *o, const char *word) {
    if (!*word) return;
    if (*o > 0 && *o + 1 < len && out[*o - 1] != '-') out[(*o)++] = '-';
    for (const char *s = word; *s && *o + 1 < len; s++) {
        const char c = (char)tolower((unsigned char)*s);
        const int ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
        if (ok)
            out[(*o)++] = c;
        else if (*o > 0 && out[*o - 1] != '-')
            out[(*o)++] = '-';
    }
    while (*o > 0 && out[*o - 1] == '-') (*o)--;
    out[*o] = '\0';
}

static int is_noise_word(const char *w) {
    static const char *const noise[] = {"amd", "intel", "cpu", "processor", "(r)", "(tm)"};
    char lw[64];
    size_t n = 0;
    for (; w[n] && n + 1 < sizeof lw; n++) lw[n] = (char)tolower((unsigned char)w[n]);
    lw[n] = '\0';
    for (size_t i = 0; i < sizeof noise / sizeof noise[0]; i++)
        if (strcmp(lw, noise[i]) == 0) return 1;
    if (lw[0] == '@' || (n > 3 && strcmp(lw + n - 3, "ghz") == 0)) return 1;
    if (n > 5 && strcmp(lw + n - 5, "-core") == 0) return 1;
    return 0;
}

static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static char cpu_key[96];

void mha_cpu_identity(mha_cpu_id *id) {
    memset(id, 0, sizeof *id);
    unsigned r[4];
    if (!__get_cpuid(0, &r[0], &r[1], &r[2], &r[3])) return;
    const unsigned max_leaf = r[0];
    memcpy(id->vendor, &r[1], 4);
    memcpy(id->vendor + 4, &r[3], 4);
    memcpy(id->vendor + 8, &r[2], 4);
    id->vendor[12] = '\0';
    if (max_leaf >= 1 && __get_cpuid(1, &r[0], &r[1], &r[2], &r[3])) {
        const unsigned base_family = (r[0] >> 8) & 0xf, base_model = (r[0] >> 4) & 0xf;
        id->stepping = (int)(r[0] & 0xf);
        id->family = (int)base_family;
        if (base_family == 0xf) id->family += (int)((r[0] >> 20) & 0xff);
        id->model_id = (int)base_model;
        if (base_family == 0x6 || base_family == 0xf)
            id->model_id += (int)(((r[0] >> 16) & 0xf) << 4);
    }
    unsigned ext[4];
    if (__get_cpuid(0x80000000u, &ext[0], &ext[1], &ext[2], &ext[3]) && ext[0] >= 0x80000004u) {
        char brand[49];
        for (unsigned i = 0; i < 3; i++) {
            __get_cpuid(0x80000002u + i, &r[0], &r[1], &r[2], &r[3]);
            memcpy(brand + 16 * i, r, 16);
        }
        brand[48] = '\0';
        mha_copy_trimmed(id->model, sizeof id->model, brand);
    }
}

static void key_init(void) {
    mha_cpu_id id;
    mha_cpu_identity(&id);
    mha_cpu_key_from(id.vendor, id.model, id.family, id.model_id, cpu_key, sizeof cpu_key);
}

void mha_cpu_key_from(const char *vendor, const char *model, int family, int model_id, char *out,
                      size_t len) {
    if (!out || len == 0) return;
    size_t o = 0;
    out[0] = '\0';
    const char *v = strcmp(vendor, "AuthenticAMD") == 0   ? "amd"
                    : strcmp(vendor, "GenuineIntel") == 0 ? "intel"
                    : vendor[0]                           ? vendor
                                                          : "unknown";
    key_append(out, len, &o, v);
    /* Model words: the brand string without marks, noise words or anything
     * after "with" or "w/" ("w/ Radeon 780M Graphics"), at most four words. */
    char brand[64];
    snprintf(brand, sizeof brand, "%s", model);
    for (char *p; (p = strstr(brand, "(R)")) || (p = strstr(brand, "(TM)")) ||
                  (p = strstr(brand, "(tm)")) || (p = strstr(brand, "(r)"));)
        memset(p, ' ', strchr(p, ')') - p + 1);
    int words = 0;
    char *save = NULL;
    for (char *w = strtok_r(brand, " \t", &save); w && words < 4;
         w = strtok_r(NULL, " \t", &save)) {
        if (strcasecmp(w, "with") == 0 || strcasecmp(w, "w/") == 0) break;
        if (is_noise_word(w)) continue;
        key_append(out, len, &o, w);
        words++;
    }
    char fm[32];
    snprintf(fm, sizeof fm, "f%dm%d", family, model_id);
    key_append(out, len, &o, fm);
    key_append(out, len, &o, mha_isa_name(mha_isa_detected()));
}

void mha_cpu_key(char *out, size_t len) {
    pthread_once(&key_once, key_init);
    if (out && len) snprintf(out, len, "%s", cpu_key);
}

/* ---- tuning tables ------------------------------------------------------------------------ */

static int is_dir(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

const char *mha_table_dir(void) {
    const char *dir = getenv("MHA_TUNING_DIR");
    if (dir && *dir) return dir;
    /* An installed library reads the tables meson installed; a build that
     * was never installed reads the source tree's. */
    return is_dir(MHA_DATA_DIR "/tuning") ? MHA_DATA_DIR "/tuning"
                                          : MHA_SOURCE_DIR "/results/tuning";
}

const char *mha_table_write_dir(void) {
    const char *dir = getenv("MHA_TUNING_DIR");
    return dir && *dir ? dir : MHA_SOURCE_DIR "/results/tuning";
}

void mha_table_cpu_path(const char *dir, char *out, size_t len) {
    char key[96];
    mha_cpu_key(key, sizeof key);
    const mha_isa act = mha_isa_active();
    if (act == mha_isa_detected())
        snprintf(out, len, "%s/%s.json", dir, key);
    else /* a table tuned under an MHA_ISA cap must not replace the native one */
        snprintf(out, len, "%s/%s-cap-%s.json", dir, key, mha_isa_name(act));
}

void mha_table_default_path(char *out, size_t len) {
    const char *file = getenv("MHA_TUNING");
    if (file && *file)
        snprintf(out, len, "%s", file);
    else
        mha_table_cpu_path(mha_table_dir(), out, len);
}

void mha_table_free(mha_table *t) {
    free(t->entries);
    memset(t, 0, sizeof *t);
}

#define TABLE_MAX_BYTES (16 * MIB)

static mha_status fmt_error(char *why, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static mha_status fmt_error(char *why, size_t len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, len, fmt, ap);
    va_end(ap);
    return MHA_EFORMAT;
}

/* An integer member (json-c accepts "64" as an int; a table must not). */
static int get_int(json_object *o, const char *key, int required, int *out) {
    json_object *v;
    if (!json_object_object_get_ex(o, key, &v) || !v) return required ? -1 : 0;
    if (!json_object_is_type(v, json_type_int)) return -2;
    const int64_t x = json_object_get_int64(v);
    *out = x < -1000000 ? -1000000 : x > 1000000 ? 1000000 : (int)x;
    return 0;
}

static mha_status parse_choice(json_object *o, const char *where, mha_table_choice *c, char *why,
                               size_t len) {
    memset(c, 0, sizeof *c);
    if (!o || json_object_is_type(o, json_type_null)) return MHA_OK;
    if (!json_object_is_type(o, json_type_object))
        return fmt_error(why, len, "%s is not an object", where);
    json_object *k;
    if (!json_object_object_get_ex(o, "kernel", &k) || !json_object_is_type(k, json_type_string))
        return fmt_error(why, len, "%s.kernel is missing or not a string", where);
    snprintf(c->kernel, sizeof c->kernel, "%s", json_object_get_string(k));
    static const char *const knobs[] = {"block_q", "block_kv", "split"};
    int *dst[] = {&c->block_q, &c->block_kv, &c->split};
    for (int i = 0; i < 3; i++) {
        const int r = get_int(o, knobs[i], i < 2, dst[i]);
        if (r == -1) return fmt_error(why, len, "%s.%s is missing", where, knobs[i]);
        if (r == -2) return fmt_error(why, len, "%s.%s is not an integer", where, knobs[i]);
    }
    json_object *g;
    if (json_object_object_get_ex(o, "gflops", &g) && g) {
        if (!json_object_is_type(g, json_type_double) && !json_object_is_type(g, json_type_int))
            return fmt_error(why, len, "%s.gflops is not a number", where);
        c->gflops = json_object_get_double(g);
    }
    c->present = 1;
    return MHA_OK;
}

static mha_status parse_table(json_object *root, mha_table *t, char *why, size_t len) {
    if (!json_object_is_type(root, json_type_object))
        return fmt_error(why, len, "the top level is not an object");
    json_object *fp, *v, *classes;
    if (!json_object_object_get_ex(root, "fingerprint", &fp) ||
        !json_object_is_type(fp, json_type_object))
        return fmt_error(why, len, "\"fingerprint\" is missing or not an object");
    if (!json_object_object_get_ex(fp, "cpu_key", &v) || !json_object_is_type(v, json_type_string))
        return fmt_error(why, len, "fingerprint.cpu_key is missing or not a string");
    snprintf(t->cpu_key, sizeof t->cpu_key, "%s", json_object_get_string(v));
    if (!json_object_object_get_ex(fp, "isa_active", &v) ||
        !json_object_is_type(v, json_type_string))
        return fmt_error(why, len, "fingerprint.isa_active is missing or not a string");
    snprintf(t->isa_active, sizeof t->isa_active, "%s", json_object_get_string(v));
    if (!json_object_object_get_ex(root, "classes", &classes) ||
        !json_object_is_type(classes, json_type_array))
        return fmt_error(why, len, "\"classes\" is missing or not an array");
    const size_t n = json_object_array_length(classes);
    if (n > 100000) return fmt_error(why, len, "\"classes\" has %zu entries (too many)", n);
    t->entries = calloc(n ? n : 1, sizeof *t->entries);
    if (!t->entries) return fmt_error(why, len, "out of memory for %zu classes", n);
    for (size_t i = 0; i < n; i++) {
        json_object *e = json_object_array_get_idx(classes, i), *cls, *w, *r = NULL;
        char where[64];
        if (!json_object_is_type(e, json_type_object))
            return fmt_error(why, len, "classes[%zu] is not an object", i);
        if (!json_object_object_get_ex(e, "class", &cls) ||
            !json_object_is_type(cls, json_type_string))
            return fmt_error(why, len, "classes[%zu].class is missing or not a string", i);
        mha_table_entry *te = &t->entries[t->count];
        snprintf(te->cls, sizeof te->cls, "%s", json_object_get_string(cls));
        if (!json_object_object_get_ex(e, "winner", &w) || !w)
            return fmt_error(why, len, "classes[%zu].winner is missing", i);
        snprintf(where, sizeof where, "classes[%zu].winner", i);
        mha_status st = parse_choice(w, where, &te->winner, why, len);
        if (st != MHA_OK) return st;
        if (!te->winner.present) return fmt_error(why, len, "classes[%zu].winner is null", i);
        json_object_object_get_ex(e, "runner_up", &r);
        snprintf(where, sizeof where, "classes[%zu].runner_up", i);
        if ((st = parse_choice(r, where, &te->runner_up, why, len)) != MHA_OK) return st;
        t->count++;
    }
    return MHA_OK;
}

mha_status mha_table_load(const char *path, mha_table *t, char *why, size_t len) {
    memset(t, 0, sizeof *t);
    why[0] = '\0';
    /* A FIFO or device named by MHA_TUNING is refused, never waited on. */
    FILE *f = mha_fopen_input(path, why, len);
    if (!f) return MHA_EIO;
    /* The buffer grows with the file (tables are kilobytes): one 16 MiB
     * allocation per load is what ASan made cost 3 ms in the fuzz target. */
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            if (cap > TABLE_MAX_BYTES) break;
            cap = cap ? 2 * cap : 65536;
            if (cap > TABLE_MAX_BYTES + 1) cap = TABLE_MAX_BYTES + 1;
            char *grown = realloc(buf, cap);
            if (!grown) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = grown;
        }
        const size_t got = fread(buf + n, 1, cap - n, f);
        if (got == 0) break;
        n += got;
    }
    const int rerr = ferror(f);
    fclose(f);
    if (!buf || rerr) {
        free(buf);
        snprintf(why, len, "%s", buf ? "read error" : "out of memory");
        return MHA_EIO;
    }
    if (n > TABLE_MAX_BYTES) {
        free(buf);
        return fmt_error(why, len, "larger than %llu bytes", (unsigned long long)TABLE_MAX_BYTES);
    }
    size_t start = 0;
    while (start < n && isspace((unsigned char)buf[start])) start++;
    if (start == n) {
        free(buf);
        return fmt_error(why, len, "empty file");
    }
    json_tokener *tok = json_tokener_new();
    if (!tok) {
        free(buf);
        snprintf(why, len, "out of memory");
        return MHA_EIO;
    }
    json_object *root = json_tokener_parse_ex(tok, buf, (int)n);
    const enum json_tokener_error jerr = json_tokener_get_error(tok);
    size_t end = json_tokener_get_parse_end(tok);
    json_tokener_free(tok);
    mha_status st = MHA_OK;
    if (jerr == json_tokener_continue) {
        st = fmt_error(why, len, "truncated JSON (ends inside a value after %zu bytes)", n);
    } else if (jerr != json_tokener_success || !root) {
        st = fmt_error(why, len, "malformed JSON: %s", json_tokener_error_desc(jerr));
    } else {
        while (end < n && isspace((unsigned char)buf[end])) end++;
        if (end < n)
            st = fmt_error(why, len, "trailing data after the JSON value at byte %zu", end);
        else
            st = parse_table(root, t, why, len);
    }
    json_object_put(root);
    free(buf);
    if (st != MHA_OK) mha_table_free(t);
    return st;
}

/* One parsed table kept per process, keyed by path and file identity, so
 * repeated mha_select calls do not re-read it; a changed file is re-read. */
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    int valid;
    char path[1024];
    struct stat sb;
    mha_status st;
    char why[192];
    mha_table t;
} table_cache;

static int same_file(const struct stat *a, const struct stat *b) {
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

/* Copies the entry for class name cls (and the table's fingerprint) out of the
 * cached table at path. Returns MHA_OK and *found = 0/1, or the load status. */
static mha_status table_lookup(const char *path, const char *const *names, int nnames,
                               mha_table_entry *entry, int *found, char *key, size_t keylen,
                               char *isa, size_t isalen, char *why, size_t len) {
    *found = 0;
    struct stat sb;
    if (stat(path, &sb) != 0) {
        snprintf(why, len, "cannot open: %s", strerror(errno));
        return MHA_EIO;
    }
    pthread_mutex_lock(&table_lock);
    if (!table_cache.valid || strcmp(table_cache.path, path) != 0 ||
        !same_file(&table_cache.sb, &sb)) {
        if (table_cache.valid) mha_table_free(&table_cache.t);
        table_cache.valid = 1;
        snprintf(table_cache.path, sizeof table_cache.path, "%s", path);
        table_cache.sb = sb;
        table_cache.st =
            mha_table_load(path, &table_cache.t, table_cache.why, sizeof table_cache.why);
    }
    const mha_status st = table_cache.st;
    if (st != MHA_OK) {
        snprintf(why, len, "%s", table_cache.why);
    } else {
        snprintf(key, keylen, "%s", table_cache.t.cpu_key);
        snprintf(isa, isalen, "%s", table_cache.t.isa_active);
        for (int n = 0; n < nnames && !*found; n++)
            for (int i = 0; i < table_cache.t.count; i++)
                if (strcmp(table_cache.t.entries[i].cls, names[n]) == 0) {
                    *entry = table_cache.t.entries[i];
                    *found = 1;
                    break;
                }
    }
    pthread_mutex_unlock(&table_lock);
    return st;
}

/* ---- mha_select ---------------------------------------------------------------------------- */

/* snprintf for messages that may be cut short: a long table path only
 * truncates the reason, which is fine. */
static void put(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void put(char *buf, size_t len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
}

static int verbose(void) {
    const char *v = getenv("MHA_VERBOSE");
    return v && *v && strcmp(v, "0") != 0;
}

/* A table choice usable here: the kernel exists and runs, the knobs are in
 * range. Otherwise writes why. */
static int choice_usable(const mha_table_choice *c, const mha_kernel **k, char *why, size_t len) {
    if (!c->present) {
        put(why, len, "no entry");
        return 0;
    }
    const mha_kernel *kk = mha_kernel_find(c->kernel);
    if (!kk) {
        put(why, len, "unknown kernel '%s'", c->kernel);
        return 0;
    }
    if (mha_kernel_supported(kk) != MHA_OK) {
        put(why, len, "kernel %s does not run here", c->kernel);
        return 0;
    }
    if (c->block_q < 0 || c->block_q > 4096 || c->block_kv < 0 || c->block_kv > 4096) {
        put(why, len, "%s knobs out of range (block_q %d, block_kv %d; expected 0..4096)",
            c->kernel, c->block_q, c->block_kv);
        return 0;
    }
    if (c->split < MHA_SPLIT_AUTO || c->split > MHA_SPLIT_QBLOCKS) {
        put(why, len, "%s split %d out of range (expected 0..2)", c->kernel, c->split);
        return 0;
    }
    *k = kk;
    return 1;
}

/* Fills block_q / block_kv left at 0 from the cache model. */
static void fill_blocks(const mha_problem *p, const mha_kernel *k, mha_options *o) {
    int bq, bk;
    mha_default_blocks(p, k->traits, k->isa, mha_resolve_threads(o), &bq, &bk);
    if (o->block_q == 0) o->block_q = bq;
    if (o->block_kv == 0) o->block_kv = bk;
}

/* The best kernel the CPU runs without a table, by algorithm: decode for a
 * few query rows per KV head (Nq = 1 decode steps: memory-bound, split-KV),
 * else flash. */
const mha_kernel *mha_default_kernel(const mha_problem *p) {
    const int few_rows = p->seq_q * (p->heads / p->kv_heads) <= 8;
    const mha_kernel *best = NULL, *reference = NULL;
    for (int i = 0; i < mha_kernel_count(); i++) {
        const mha_kernel *k = mha_kernel_at(i);
        if (mha_kernel_supported(k) != MHA_OK) continue;
        if (k->traits & MHA_KT_REFERENCE) {
            if (!reference) reference = k;
            continue;
        }
        if (((k->traits & MHA_KT_DECODE) != 0) != few_rows) continue;
        if (!best || k->rank < best->rank || (k->rank == best->rank && k->isa > best->isa))
            best = k;
    }
    mha_clear_error();
    return best ? best : reference;
}

/* The table step; returns 1 and fills out when the table decides, else 0
 * with the reason in why. */
static int select_from_table(const mha_problem *p, const mha_options *req, mha_selection *out,
                             char *why, size_t len) {
    char path[1024];
    mha_table_default_path(path, sizeof path);
    const int threads = mha_resolve_threads(req);
    mha_shape_class c;
    mha_class_of(p, threads, &c);
    /* This class, then the same class in the nearest seq bucket. */
    char names[MHA_CLASS_BUCKETS][64];
    const char *ptrs[MHA_CLASS_BUCKETS];
    int n = 0;
    for (int dist = 0; dist < MHA_CLASS_BUCKETS; dist++)
        for (int sgn = -1; sgn <= 1; sgn += 2) {
            if (dist == 0 && sgn > 0) continue;
            const int b = c.bucket + sgn * dist;
            if (b < 0 || b >= MHA_CLASS_BUCKETS) continue;
            mha_shape_class cc = c;
            cc.bucket = b;
            mha_class_name(&cc, names[n], sizeof names[n]);
            ptrs[n] = names[n];
            n++;
        }
    mha_table_entry e;
    int found = 0;
    char tkey[96] = "", tisa[16] = "", lwhy[192] = "";
    mha_status st = table_lookup(path, ptrs, n, &e, &found, tkey, sizeof tkey, tisa, sizeof tisa,
                                 lwhy, sizeof lwhy);
    if (st == MHA_EIO) {
        put(why, len, "no tuning table %s (%s)", path, lwhy);
        return 0;
    }
    if (st != MHA_OK) {
        put(why, len, "tuning table %s ignored: %s", path, lwhy);
        return 0;
    }
    char key[96];
    mha_cpu_key(key, sizeof key);
    const char *isa = mha_isa_name(mha_isa_active());
    if (strcmp(tkey, key) != 0 || strcmp(tisa, isa) != 0) {
        put(why, len,
            "tuning table %s not used: it is for CPU %s (isa %s), this CPU is %s (isa %s)", path,
            tkey, tisa, key, isa);
        return 0;
    }
    if (!found) {
        put(why, len, "tuning table %s has no entry for class %s", path, names[0]);
        return 0;
    }
    const mha_kernel *k = NULL;
    char w1[160], w2[160];
    const mha_table_choice *ch = NULL;
    if (choice_usable(&e.winner, &k, w1, sizeof w1))
        ch = &e.winner;
    else if (choice_usable(&e.runner_up, &k, w2, sizeof w2))
        ch = &e.runner_up;
    if (!ch) {
        put(why, len, "tuning table %s, class %s: winner skipped (%s), runner-up skipped (%s)",
            path, e.cls, w1, w2);
        return 0;
    }
    out->kernel = k;
    out->options = *req;
    if (out->options.block_q == 0) out->options.block_q = ch->block_q;
    if (out->options.block_kv == 0) out->options.block_kv = ch->block_kv;
    if (out->options.split == 0) out->options.split = ch->split;
    fill_blocks(p, k, &out->options);
    out->source = MHA_CHOICE_TABLE;
    out->expected_gflops = ch->gflops;
    char near[80] = "", skipped[200] = "";
    if (strcmp(e.cls, names[0]) != 0) put(near, sizeof near, " (nearest to %s)", names[0]);
    if (ch == &e.runner_up) put(skipped, sizeof skipped, ", runner-up (winner: %s)", w1);
    put(out->reason, sizeof out->reason, "tuning table %s, class %s%s%s", path, e.cls, near,
        skipped);
    return 1;
}

mha_status mha_select(const mha_problem *p, const mha_options *o, mha_selection *out) {
    if (!out) return mha_set_error(MHA_EINVAL, "mha_select: out is NULL");
    memset(out, 0, sizeof *out);
    mha_status st;
    if ((st = mha_problem_validate(p)) != MHA_OK) return st;
    const mha_options req = o ? *o : (mha_options){0};
    if (req.threads < 0 || req.block_q < 0 || req.block_kv < 0 || req.block_q > 4096 ||
        req.block_kv > 4096 || req.split < 0 || req.split > MHA_SPLIT_QBLOCKS)
        return mha_set_error(MHA_EINVAL,
                             "mha_select: options out of range (threads %d, block_q %d, "
                             "block_kv %d, split %d)",
                             req.threads, req.block_q, req.block_kv, req.split);

    const char *forced = getenv("MHA_KERNEL");
    if (forced && *forced && strcmp(forced, "auto") != 0) {
        const mha_kernel *k = mha_kernel_find(forced);
        if (!k)
            return mha_set_error(MHA_EINVAL,
                                 "MHA_KERNEL='%s' is not a kernel (see `mhabench list`)", forced);
        if ((st = mha_kernel_supported(k)) != MHA_OK)
            return mha_set_error(st, "MHA_KERNEL='%s': %s", forced, mha_last_error());
        out->kernel = k;
        out->options = req;
        fill_blocks(p, k, &out->options);
        out->source = MHA_CHOICE_FORCED;
        put(out->reason, sizeof out->reason, "forced by MHA_KERNEL=%s", forced);
    } else {
        char why[sizeof out->reason];
        if (!select_from_table(p, &req, out, why, sizeof why)) {
            const mha_kernel *k = mha_default_kernel(p);
            out->kernel = k;
            out->options = req;
            fill_blocks(p, k, &out->options);
            out->source = MHA_CHOICE_DEFAULT;
            out->expected_gflops = 0;
            put(out->reason, sizeof out->reason, "cache-model defaults; %s", why);
        }
    }
    if (verbose())
        fprintf(stderr, "mha_select: %s block_q=%d block_kv=%d split=%d threads=%d (%s): %s\n",
                out->kernel->name, out->options.block_q, out->options.block_kv, out->options.split,
                mha_resolve_threads(&out->options),
                out->source == MHA_CHOICE_FORCED  ? "forced"
                : out->source == MHA_CHOICE_TABLE ? "table"
                                                  : "default",
                out->reason);
    mha_clear_error();
    return MHA_OK;
}
