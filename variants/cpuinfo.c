/* cpuinfo.c - what the library knows of the machine it runs on: the per-core
 * cache sizes from hwloc (raw and clamped, read once) and the CPU identity
 * from cpuid with the stable CPU key the tuning tables are named by. The
 * harness's `mhabench info` reports these same values. Built without SIMD
 * flags. */
#include <cpuid.h>
#include <ctype.h>
#include <hwloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "internal.h"
#include "select.h"

#define KIB ((uint64_t)1024)
#define MIB (1024 * KIB)

/* ---- cache sizes (hwloc, once) ------------------------------------------------------
 * Plausible per-object cache sizes. hwloc reports what the (virtual) firmware
 * says, and VMs say odd things: L3 = 0, an L3 of the whole host or smaller than
 * the L2, L2 = 0 or 16 MiB. The cache model needs only the right order of
 * magnitude, so out-of-range values are clamped to the nearest bound and
 * unknown (0) ones get a typical size; the raw value is kept for the record
 * (`mhabench info` and every result file report both).
 *   L1d [16 KiB, 256 KiB]: 16 KiB (Bulldozer) is the smallest x86 L1d since
 *     2011; today's cores have 32-48 KiB, Apple-class cores 128 KiB; 256 KiB
 *     leaves headroom. Unknown -> 32 KiB.
 *   L2 [128 KiB, 8 MiB]: per-core L2s run 256 KiB - 3 MiB and the shared L2 of
 *     an Atom cluster 4 MiB; below 128 KiB or above 8 MiB is a misreport.
 *     Unknown -> 1 MiB.
 *   L3 [1 MiB, 1 GiB] and >= L2: one L3 object (one CCD on AMD, one socket's
 *     mesh on Intel) is 2 MiB - 128 MiB (96 MiB on V-Cache parts; 1 GiB is far
 *     above anything shipped), and an L3 smaller than the L2 it backs is a
 *     misreport. Unknown -> 8 MiB (or the L2 when larger). */
#define GIB (1024 * MIB)
static pthread_once_t cache_once = PTHREAD_ONCE_INIT;
static mha_caches caches;

static uint64_t clamp_cache(uint64_t raw, uint64_t lo, uint64_t hi, uint64_t unknown) {
    return raw == 0 ? unknown : raw < lo ? lo : raw > hi ? hi : raw;
}

/* Size of the first data or unified cache object of this type (0 if none). */
static uint64_t hwloc_cache_size(hwloc_topology_t topo, hwloc_obj_type_t type) {
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
            caches.l1d_raw = hwloc_cache_size(topo, HWLOC_OBJ_L1CACHE);
            caches.l2_raw = hwloc_cache_size(topo, HWLOC_OBJ_L2CACHE);
            caches.l3_raw = hwloc_cache_size(topo, HWLOC_OBJ_L3CACHE);
        }
        hwloc_topology_destroy(topo);
    }
    caches.l1d = clamp_cache(caches.l1d_raw, 16 * KIB, 256 * KIB, 32 * KIB);
    caches.l2 = clamp_cache(caches.l2_raw, 128 * KIB, 8 * MIB, 1 * MIB);
    caches.l3 = clamp_cache(caches.l3_raw, 1 * MIB, 1 * GIB, 8 * MIB);
    if (caches.l3 < caches.l2) caches.l3 = caches.l2;
}

void mha_caches_get(mha_caches *c) {
    pthread_once(&cache_once, cache_init);
    *c = caches;
}

typedef struct {
    unsigned leaf, subleaf;
    int reg; /* 0 eax, 1 ebx, 2 ecx, 3 edx */
    int bit;
    const char *name;
} cpu_flag;

/* The flags that matter to attention kernels and their fast paths, in the
 * names Linux's /proc/cpuinfo uses. All of them fit machine_info.flags. */
static const cpu_flag cpu_flags[] = {
    {1, 0, 3, 26, "sse2"},        {1, 0, 2, 0, "sse3"},        {1, 0, 2, 9, "ssse3"},
    {1, 0, 2, 19, "sse4_1"},      {1, 0, 2, 20, "sse4_2"},     {1, 0, 2, 28, "avx"},
    {7, 0, 1, 5, "avx2"},         {1, 0, 2, 12, "fma"},        {1, 0, 2, 29, "f16c"},
    {7, 0, 1, 8, "bmi2"},         {7, 0, 1, 16, "avx512f"},    {7, 0, 1, 17, "avx512dq"},
    {7, 0, 1, 28, "avx512cd"},    {7, 0, 1, 30, "avx512bw"},   {7, 0, 1, 31, "avx512vl"},
    {7, 0, 1, 21, "avx512ifma"},  {7, 0, 2, 1, "avx512_vbmi"}, {7, 0, 2, 6, "avx512_vbmi2"},
    {7, 0, 2, 11, "avx512_vnni"}, {7, 1, 0, 5, "avx512_bf16"}, {7, 0, 3, 23, "avx512_fp16"},
    {7, 1, 0, 4, "avx_vnni"},     {7, 0, 3, 24, "amx_tile"},   {7, 0, 3, 22, "amx_bf16"},
    {7, 0, 3, 25, "amx_int8"},
};

/* ---- CPU key --------------------------------------------------------------------------
 * vendor, up to four brand-string words without marks and noise,
 * family/model, detected ISA; harness/mach_info.c's machine_cpu_key builds it
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
    /* The three leaves the flags live in; absent leaves read as all zero
     * (leaf 7 subleaf 1 exists only when subleaf 0's eax says so). */
    unsigned l1[4] = {0}, l70[4] = {0}, l71[4] = {0};
    if (max_leaf >= 1) __get_cpuid(1, &l1[0], &l1[1], &l1[2], &l1[3]);
    if (max_leaf >= 7) __get_cpuid_count(7, 0, &l70[0], &l70[1], &l70[2], &l70[3]);
    if (max_leaf >= 7 && l70[0] >= 1) __get_cpuid_count(7, 1, &l71[0], &l71[1], &l71[2], &l71[3]);
    size_t o = 0;
    for (size_t i = 0; i < sizeof cpu_flags / sizeof cpu_flags[0]; i++) {
        const cpu_flag *f = &cpu_flags[i];
        const unsigned *regs = f->leaf == 1 ? l1 : f->subleaf == 0 ? l70 : l71;
        if (!((regs[f->reg] >> f->bit) & 1)) continue;
        const size_t n = strlen(f->name);
        if (o + n + 2 > sizeof id->flags) break;
        if (o) id->flags[o++] = ' ';
        memcpy(id->flags + o, f->name, n);
        o += n;
    }
    id->flags[o] = '\0';
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
