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
