/* cmd_info.c - `mhabench info`: this machine's CPU identity, ISA flags, hwloc
 * topology and caches (raw and clamped), the single-thread rate of each
 * level's compute units (the ops table's rows: FMA against its nominal
 * figure, the bf16 dot product, the tiles, the exp), memory read bandwidth,
 * and with --tiles the AMX machine's tile comparison. Text for people,
 * --json for scripts; the facts come from mach_info.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mha_private.h"

#include "commands.h"
#include "mach_info.h"
#include "opts.h"
#include "util.h"

static const opt_row ROWS[] = {
    {"quick", no_argument, 'q', 0, NULL, 0,
     "short measurements (about 0.05 s per figure instead of 0.4 s)"},
    {"json", no_argument, 'j', 0, NULL, 0, "print the same facts as one JSON object"},
    {"tiles", required_argument, 't', 0, "N", 0,
     "only compare N seeded random tile products on the AMX instructions with the emulation, "
     "bit for bit (exit 1 when any differs, 2 where AMX does not run); no peaks"},
    {"seed", required_argument, 's', 0, "S", 0, "the seed of --tiles (default 1)"},
    OPTS_HELP,
};
enum { NROWS = sizeof ROWS / sizeof ROWS[0] };

static void usage(FILE *f) {
    opts_usage(f, "info", NULL, ROWS, NROWS, NULL);
    fputs("\n"
          "Prints the CPU model, vendor/family/model/stepping, ISA flags, the detected\n"
          "and active ISA (MHA_ISA caps it), cores and caches from hwloc (raw and\n"
          "clamped), the measured single-thread rate of each level's compute units\n"
          "(the FP32 FMA against nominal: 2 FMA pipes x lanes x 2 FLOP x measured GHz;\n"
          "the bf16 dot product, the AMX tiles, the exp in Gexp/s), and memory read\n"
          "bandwidth with 1 thread and with all cores.\n"
          "\n",
          f);
    opts_print(f, ROWS, NROWS);
}

/* --tiles: the real tile products against the emulation (the AMX machine's
 * check, scripts/amx-check.sh); 0 when all agree, 1 when one differs, 2
 * where the amx level does not run (why named). */
static int tiles_compare(long count, uint64_t seed) {
    const char *why;
    if (!mha_amx_status(&why)) {
        errorf("info: --tiles: the amx level %s", why);
        return EXIT_USAGE;
    }
    const mha_isa_ops *ops = mha_ops_for(MHA_ISA_AMX);
    if (!ops || !ops->tile_compare) {
        errorf("info: --tiles: this build has no tile code");
        return EXIT_USAGE;
    }
    char first[256];
    long differ = 0;
    const long ran = ops->tile_compare(seed, count, &differ, first, sizeof first);
    printf("tile products  %ld seeded random ones (seed %llu), real vs emulated: %ld differ\n", ran,
           (unsigned long long)seed, differ);
    if (differ) printf("first          %s\n", first);
    return differ ? 1 : 0;
}

/* One ISA's line of the peak table. */
typedef struct {
    mha_status status; /* MHA_OK, or why it was not measured */
    const char *why;   /* "not on this CPU", "above the MHA_ISA cap" */
    machine_peak peak;
} isa_peak;

typedef struct {
    machine_level level;
    int threads;
    double gbs;
} bw_point;

/* "48 KiB", "1 MiB", "32 MiB", "unknown". */
static const char *fmt_bytes(uint64_t b, char *buf, size_t len) {
    if (b == 0)
        snprintf(buf, len, "unknown");
    else if (b % (1024 * 1024) == 0)
        snprintf(buf, len, "%llu MiB", (unsigned long long)(b >> 20));
    else if (b % 1024 == 0)
        snprintf(buf, len, "%llu KiB", (unsigned long long)(b >> 10));
    else
        snprintf(buf, len, "%llu B", (unsigned long long)b);
    return buf;
}

/* Every core's FMA loop at once, as a share of cores x one core (top ISA). */
typedef struct {
    mha_isa isa;
    int threads;
    double ratio; /* 0: not measured (one core) */
} fma_ceiling;

static void print_text(const machine_info *m, const char *key, const isa_peak *peaks,
                       const fma_ceiling *ceil, const bw_point *bw, int nbw) {
    const char *env = getenv("MHA_ISA");
    printf("cpu        %s\n", m->model[0] ? m->model : "unknown");
    printf("vendor     %s  family %d  model %d  stepping %d\n",
           m->vendor[0] ? m->vendor : "unknown", m->family, m->model_id, m->stepping);
    printf("cpu key    %s\n", key);
    printf("isa flags  %s\n", m->flags[0] ? m->flags : "(none)");
    printf("isa        detected %s, active %s (MHA_ISA %s%s)\n", mha_isa_name(mha_isa_detected()),
           mha_isa_name(mha_isa_active()), env && *env ? "=" : "unset", env && *env ? env : "");
    const char *amx_why;
    mha_amx_status(&amx_why);
    printf("amx tiles  %s\n", amx_why);
    printf("topology   %d package(s), %d NUMA node(s), %d cores, %d PUs", m->packages,
           m->numa_nodes, m->cores, m->pus);
    if (m->cores_machine > m->cores)
        printf(" (this process may use %d of the machine's %d cores: taskset or a cpuset)",
               m->cores, m->cores_machine);
    printf("\n");

    const struct {
        const char *name;
        uint64_t raw, used;
        int clamped;
    } caches[3] = {{"L1d", m->l1d_raw, m->l1d, m->l1d_clamped},
                   {"L2", m->l2_raw, m->l2, m->l2_clamped},
                   {"L3", m->l3_raw, m->l3, m->l3_clamped}};
    printf("\ncache  hwloc (raw)  used\n");
    for (int i = 0; i < 3; i++) {
        char a[32], b[32];
        printf("%-6s %-12s %s%s\n", caches[i].name, fmt_bytes(caches[i].raw, a, sizeof a),
               fmt_bytes(caches[i].used, b, sizeof b),
               caches[i].clamped ? "  (clamped: implausible or unknown)" : "");
    }

    printf("\ncompute units per ISA level, single thread (the ops table's rows; nominal: "
           "work per cycle x GHz)\n");
    printf("%-10s %-10s %10s %-8s %7s %9s %9s  %s\n", "isa", "unit", "rate", "", "GHz", "nominal",
           "measured", "serves");
    for (int i = 0; i < MHA_ISA_COUNT; i++) {
        const isa_peak *p = &peaks[i];
        const mha_isa_ops *ops = mha_ops_for((mha_isa)i);
        if (p->status != MHA_OK) { /* the rows it would have measured */
            printf("%-10s", mha_isa_name((mha_isa)i));
            for (int u = 0; u < ops->nunits; u++)
                printf("%s%s", u ? ", " : " ", ops->units[u].name);
            printf(": %s\n", p->why);
            continue;
        }
        for (int u = 0; u < p->peak.nunits; u++) {
            const machine_unit_peak *q = &p->peak.units[u];
            char unit[24];
            snprintf(unit, sizeof unit, "G%s/s", q->unit->work);
            printf("%-10s %-10s %10.*f %-8s %7.3f", mha_isa_name((mha_isa)i), q->unit->name,
                   strcmp(q->unit->work, "FLOP") == 0 ? 1 : 3, q->rate, unit, q->ghz);
            if (q->nominal > 0)
                printf(" %9.1f %8.1f%%", q->nominal, 100.0 * q->rate / q->nominal);
            else
                printf(" %9s %9s", "-", "-");
            printf("  %s\n", q->unit->serves);
        }
    }
    if (ceil->ratio > 0)
        printf("every core at once (%d threads, %s loop): %.3f x %d x one core "
               "(multi-thread rows' peak)\n",
               ceil->threads, mha_isa_name(ceil->isa), ceil->ratio, ceil->threads);

    printf("\nread bandwidth per level (working set: half of each level; DRAM: >= 4 x L3)\n");
    for (int i = 0; i < nbw; i++)
        printf("  %-5s %3d thread%s %8.1f GB/s\n", machine_level_name(bw[i].level), bw[i].threads,
               bw[i].threads == 1 ? " " : "s", bw[i].gbs);
}

/* A JSON string: quotes, backslashes and control characters escaped. */
static void json_str(const char *s) {
    putchar('"');
    for (; *s; s++) {
        const unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20)
            printf("\\u%04x", c);
        else
            putchar(c);
    }
    putchar('"');
}

static void print_json(const machine_info *m, const char *key, const isa_peak *peaks,
                       const fma_ceiling *ceil, const bw_point *bw, int nbw) {
    const char *env = getenv("MHA_ISA");
    printf("{\n  \"model\": ");
    json_str(m->model);
    printf(",\n  \"vendor\": ");
    json_str(m->vendor);
    printf(",\n  \"family\": %d,\n  \"model_id\": %d,\n  \"stepping\": %d,\n  \"cpu_key\": ",
           m->family, m->model_id, m->stepping);
    json_str(key);
    printf(",\n  \"flags\": [");
    char flags[sizeof m->flags];
    snprintf(flags, sizeof flags, "%s", m->flags);
    int first = 1;
    char *save = NULL;
    for (char *f = strtok_r(flags, " ", &save); f; f = strtok_r(NULL, " ", &save)) {
        if (!first) fputs(", ", stdout);
        json_str(f);
        first = 0;
    }
    printf("],\n  \"isa_detected\": \"%s\",\n  \"isa_active\": \"%s\",\n  \"mha_isa_env\": ",
           mha_isa_name(mha_isa_detected()), mha_isa_name(mha_isa_active()));
    if (env && *env)
        json_str(env);
    else
        printf("null");
    const char *amx_why;
    const int amx = mha_amx_status(&amx_why);
    printf(",\n  \"amx\": {\"runs\": %s, \"reason\": ", amx ? "true" : "false");
    json_str(amx_why);
    printf("}");
    printf(",\n  \"packages\": %d,\n  \"numa_nodes\": %d,\n  \"cores\": %d,\n  \"pus\": %d,\n"
           "  \"cores_machine\": %d,\n",
           m->packages, m->numa_nodes, m->cores, m->pus, m->cores_machine);
    printf("  \"caches\": {\n");
    const struct {
        const char *name;
        uint64_t raw, used;
        int clamped;
    } caches[3] = {{"l1d", m->l1d_raw, m->l1d, m->l1d_clamped},
                   {"l2", m->l2_raw, m->l2, m->l2_clamped},
                   {"l3", m->l3_raw, m->l3, m->l3_clamped}};
    for (int i = 0; i < 3; i++)
        printf("    \"%s\": {\"raw_bytes\": %llu, \"bytes\": %llu, \"clamped\": %s}%s\n",
               caches[i].name, (unsigned long long)caches[i].raw,
               (unsigned long long)caches[i].used, caches[i].clamped ? "true" : "false",
               i < 2 ? "," : "");
    printf("  },\n  \"fma_ceiling_all\": %.4f,\n  \"fma_peak\": [\n",
           ceil->ratio > 0 ? ceil->ratio : 1.0);
    for (int i = 0; i < MHA_ISA_COUNT; i++) {
        const isa_peak *p = &peaks[i];
        printf("    {\"isa\": \"%s\", ", mha_isa_name((mha_isa)i));
        if (p->status != MHA_OK) {
            printf("\"measured\": false, \"reason\": ");
            json_str(p->why);
            putchar('}');
        } else
            printf("\"measured\": true, \"gflops\": %.2f, \"ghz\": %.3f, \"nominal_gflops\": %.2f, "
                   "\"pct_nominal\": %.1f, \"bf16_gflops\": %.2f}",
                   p->peak.gflops, p->peak.ghz, p->peak.nominal_gflops,
                   p->peak.nominal_gflops > 0 ? 100.0 * p->peak.gflops / p->peak.nominal_gflops
                                              : 0.0,
                   p->peak.bf16_gflops);
        printf("%s\n", i + 1 < MHA_ISA_COUNT ? "," : "");
    }
    /* every unit of every level's table, one object each */
    printf("  ],\n  \"units\": [\n");
    int nu = 0;
    for (int i = 0; i < MHA_ISA_COUNT; i++) {
        const isa_peak *p = &peaks[i];
        const mha_isa_ops *ops = mha_ops_for((mha_isa)i);
        for (int u = 0; u < ops->nunits; u++) {
            const mha_unit *unit = &ops->units[u];
            printf("%s    {\"isa\": \"%s\", \"unit\": ", nu++ ? ",\n" : "",
                   mha_isa_name((mha_isa)i));
            json_str(unit->name);
            printf(", \"serves\": ");
            json_str(unit->serves);
            printf(", \"dtypes\": [");
            for (int t = 0, n = 0; t < 32; t++)
                if (unit->dtypes & (1u << t))
                    printf("%s\"%s\"", n++ ? ", " : "", mha_dtype_name((mha_dtype)t));
            printf("], \"rate_unit\": \"G%s/s\", \"context_key\": \"%s%s\", ", unit->work,
                   unit->context_key, mha_isa_name((mha_isa)i));
            const machine_unit_peak *q =
                p->status == MHA_OK && u < p->peak.nunits ? &p->peak.units[u] : NULL;
            if (!q) {
                printf("\"measured\": false, \"reason\": ");
                json_str(p->why ? p->why : "not measured");
                putchar('}');
                continue;
            }
            printf("\"measured\": true, \"rate\": %.4f, \"ghz\": %.3f, ", q->rate, q->ghz);
            if (q->nominal > 0)
                printf("\"nominal\": %.2f, \"pct_nominal\": %.1f}", q->nominal,
                       100.0 * q->rate / q->nominal);
            else
                printf("\"nominal\": null, \"pct_nominal\": null}");
        }
    }
    printf("\n  ],\n  \"read_bandwidth\": [");
    for (int i = 0; i < nbw; i++)
        printf("%s{\"level\": \"%s\", \"threads\": %d, \"gbs\": %.2f}", i ? ", " : "",
               machine_level_name(bw[i].level), bw[i].threads, bw[i].gbs);
    printf("]\n}\n");
}

int cmd_info(int argc, char **argv) {
    int quick = 0, json = 0;
    int64_t tiles = -1, seed = 1;
    int seed_given = 0;
    opts_parser op;
    opts_init(&op, "info", ROWS, NROWS);
    for (int c; (c = opts_next(&op, argc, argv)) != -1;) {
        switch (c) {
        case 'h':
            usage(stdout);
            return 0;
        case 'q':
            quick = 1;
            break;
        case 'j':
            json = 1;
            break;
        case 't':
            if (!parse_i64("--tiles", optarg, 1, 100000000, &tiles)) return EXIT_USAGE;
            break;
        case 's':
            if (!parse_i64("--seed", optarg, 0, INT64_MAX, &seed)) return EXIT_USAGE;
            seed_given = 1;
            break;
        default:
            usage(stderr);
            return EXIT_USAGE;
        }
    }
    if (optind < argc) {
        errorf("info: unexpected argument '%s' (info takes only options)", argv[optind]);
        usage(stderr);
        return EXIT_USAGE;
    }
    if (!check_isa_env()) return EXIT_USAGE;
    if (seed_given && tiles < 0) {
        errorf("info: --seed is the seed of --tiles, which is not given");
        return EXIT_USAGE;
    }
    if (tiles > 0) return tiles_compare((long)tiles, (uint64_t)seed);

    const double budget = quick ? 0.05 : 0.4;
    machine_info m;
    machine_describe(&m);
    char key[128];
    machine_cpu_key(&m, key, sizeof key);

    isa_peak peaks[MHA_ISA_COUNT];
    for (int i = 0; i < MHA_ISA_COUNT; i++) {
        isa_peak *p = &peaks[i];
        memset(p, 0, sizeof *p);
        if ((mha_isa)i > mha_isa_detected()) {
            p->status = MHA_EUNSUPPORTED;
            p->why = "not on this CPU";
        } else if ((mha_isa)i > mha_isa_active()) {
            p->status = MHA_EUNSUPPORTED;
            p->why = "above the MHA_ISA cap";
        } else {
            p->status = machine_unit_peaks((mha_isa)i, budget, &p->peak);
            if (p->status != MHA_OK) p->why = mha_status_str(p->status);
        }
    }

    fma_ceiling ceil = {MHA_ISA_SCALAR, m.cores, 0};
    for (int i = MHA_ISA_COUNT - 1; i >= 0 && m.cores > 1; i--)
        if (peaks[i].status == MHA_OK) {
            ceil.isa = (mha_isa)i;
            ceil.ratio = machine_fma_ceiling((mha_isa)i, m.cores, budget);
            break;
        }

    bw_point bw[2 * MACH_LEVELS];
    int nbw = 0;
    for (int l = 0; l < MACH_LEVELS; l++)
        for (int t = 1; t <= m.cores && t <= 2; t++) { /* 1 thread, then every core */
            const int threads = t == 1 ? 1 : m.cores;
            bw[nbw] = (bw_point){
                (machine_level)l, threads,
                machine_read_bandwidth_bytes(
                    threads, machine_level_probe_bytes(&m, (machine_level)l, threads), budget)};
            nbw++;
        }

    if (json)
        print_json(&m, key, peaks, &ceil, bw, nbw);
    else
        print_text(&m, key, peaks, &ceil, bw, nbw);
    return 0;
}
