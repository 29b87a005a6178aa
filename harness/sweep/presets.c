/* presets.c - the sweep's presets as data: `--preset NAME` is a row of PRESETS. */
#include "sweep.h"

/* An axis of a preset: the values and their count (field and n<field>). */
#define AXIS(field, ...)                                                                           \
    .field = {__VA_ARGS__}, .n##field = (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t))

#define DECODE                                                                                     \
    { 1, 32, 32, 1, 4096, 128, 0, 0 }
/* The layer shapes of issue 6: BERT-base and GPT-2 (causal), d_model 768. */
#define BERT                                                                                       \
    { 1, 12, 12, 512, 512, 64, 0, 1 }
#define GPT2                                                                                       \
    { 1, 12, 12, 1024, 1024, 64, 1, 1 }

/* The presets, as data: `--preset NAME` is a row of this table. */
static const preset PRESETS[] = {
    {
        .name = "quick",
        .help = "(default) seq 128,512,2048; heads 8,12; head-dim 64,128; causal 0,1;\n"
                "threads 1,all; plus decode Nq=1 Nkv=4096 H=32 d=128 and the layer\n"
                "(mha_forward) of BERT-base (N=512) and GPT-2 (N=1024 causal), d_model 768;\n"
                "3 repetitions of 0.02 s shuffled within each shape (1 for naive and the\n"
                "*.scalar kernels), one follow-up pass",
        AXIS(seq, 128, 512, 2048),
        AXIS(heads, 8, 12),
        AXIS(dims, 64, 128),
        AXIS(batch, 1),
        AXIS(causal, 0, 1),
        .extra = {DECODE, BERT, GPT2},
        .nextra = 3,
        /* Three repetitions of 0.02 s, shuffled within each shape, so every
         * row has a median interval and the summary can call ties (issue 13:
         * with one repetition two runs disagreed on close kernels); the
         * baseline-ISA kernels once (they are never the fastest, and their
         * long calls would triple the time); one follow-up pass at most. */
        .min_time = 0.02,
        .repetitions = 3,
        .baseline_reps = 1,
        .passes = 2,
        .interleaved = 1,
        .by_shape = 1,
    },
    {
        .name = "full",
        .help = "seq 64..8192 (powers of two) and 197; heads 1,4,8,12,16,32; head-dim\n"
                "32,64,80,128; batch 1,4; causal 0,1; threads 1..all; plus decode shapes",
        AXIS(seq, 64, 128, 197, 256, 512, 1024, 2048, 4096, 8192),
        AXIS(heads, 1, 4, 8, 12, 16, 32),
        AXIS(dims, 32, 64, 80, 128),
        AXIS(batch, 1, 4),
        AXIS(causal, 0, 1),
        .threads_full_range = 1,
        .extra = {DECODE,
                  {1, 32, 8, 1, 4096, 128, 0, 0},
                  {1, 32, 32, 1, 16384, 128, 0, 0},
                  {4, 32, 8, 1, 16384, 128, 0, 0},
                  BERT,
                  GPT2},
        .nextra = 6,
        .min_time = 0.2,
        .repetitions = 1,
    },
    {
        /* The shapes of the roofline targets (issue 6): prefill, decode with
         * MHA and GQA caches, and the BERT-base / GPT-2 layers. */
        .name = "roofline",
        .help = "the roofline targets' shapes (prefill, decode MHA/GQA, BERT/GPT-2 layers),\n"
                "5 repetitions of 0.3 s, shuffled within each shape; threads 1,all",
        AXIS(batch, 1),
        AXIS(causal, 0, 1),
        .extra = {{1, 8, 8, 4096, 4096, 64, 0, 0},
                  {1, 12, 12, 512, 512, 64, 0, 0},
                  {1, 8, 8, 512, 512, 64, 0, 0},
                  {1, 32, 32, 2048, 2048, 128, 0, 0},
                  {1, 32, 32, 2048, 2048, 128, 1, 0},
                  {1, 12, 12, 1024, 1024, 64, 1, 0},
                  {1, 12, 12, 197, 197, 64, 0, 0},
                  {1, 12, 12, 128, 128, 64, 0, 0},
                  DECODE,
                  {1, 32, 8, 1, 4096, 128, 0, 0},
                  BERT,
                  GPT2},
        .nextra = 12,
        .extra_only = 1,
        .min_time = 0.3,
        .repetitions = 5,
        .interleaved = 1, /* a burst of host load hits every kernel of a shape alike */
        .by_shape = 1,
    },
    {
        .name = "ci",
        .help = "the SIMD flash.* and tiled.* on B1 H8 N512 d64 and B1 H12 N1024 d64 causal,\n"
                "the SIMD decode.* on decode Nq=1 Nkv=4096 H=32 d=128; threads 1,all; 9\n"
                "repetitions in a seeded random interleaved order (for mhabench compare)",
        AXIS(batch, 1),
        AXIS(causal, 0, 1),
        .extra = {{1, 8, 8, 512, 512, 64, 0, 0}, {1, 12, 12, 1024, 1024, 64, 1, 0}, DECODE},
        .nextra = 3,
        .extra_only = 1,
        .min_time = 0.05,
        .repetitions = 9,
        .interleaved = 1,
        .ci_kernels = 1,
    },
    {
        /* This year's attention shapes (issue 30), each with the variants
         * its model uses, and a paged ragged decode batch. */
        .name = "llm",
        .help = "this year's LLM attention: Llama-3-8B H32 KV8 d128 causal prefill N=2048 and\n"
                "decode Nkv=8192; Mistral-7B window 4096:0 causal N=8192; Gemma-2 H8 KV4 d256\n"
                "softcap 50 with window 4096:0 causal N=8192; gpt-oss H64 KV8 d64 sinks with\n"
                "window 128:0 causal N=4096; DeepSeek MLA H16 d_qk 192 d_v 128 causal N=2048;\n"
                "a serving decode step: 16 sequences of 1k-32k keys (Llama-3-8B's heads) in a\n"
                "paged cache of 16-key blocks; fp32 and bf16; threads 1,all; 3 repetitions of\n"
                "0.05 s within each shape (1 for naive and *.scalar); calls estimated over 5 s\n"
                "skipped (--max-seconds); about 150 rows (not in CI)",
        AXIS(batch, 1),
        AXIS(causal, 0, 1),
        .extra = {{.b = 1, .h = 32, .kv = 8, .nq = 2048, .nkv = 2048, .d = 128, .causal = 1},
                  {.b = 1, .h = 32, .kv = 8, .nq = 1, .nkv = 8192, .d = 128},
                  {.b = 1,
                   .h = 32,
                   .kv = 8,
                   .nq = 8192,
                   .nkv = 8192,
                   .d = 128,
                   .causal = 1,
                   .window = 1,
                   .window_left = 4096},
                  {.b = 1,
                   .h = 8,
                   .kv = 4,
                   .nq = 8192,
                   .nkv = 8192,
                   .d = 256,
                   .causal = 1,
                   .window = 1,
                   .window_left = 4096,
                   .softcap = 50},
                  {.b = 1,
                   .h = 64,
                   .kv = 8,
                   .nq = 4096,
                   .nkv = 4096,
                   .d = 64,
                   .causal = 1,
                   .window = 1,
                   .window_left = 128,
                   .sinks = 1},
                  {.b = 1,
                   .h = 16,
                   .kv = 16,
                   .nq = 2048,
                   .nkv = 2048,
                   .d = 192,
                   .causal = 1,
                   .head_dim_v = 128},
                  /* a serving engine's decode step: 16 sequences of 1k-32k keys
                   * (log-uniform, seeded by the shape) in a paged cache of
                   * 16-key blocks shuffled across the pool (vLLM's default) */
                  {.b = 16,
                   .h = 32,
                   .kv = 8,
                   .nq = 1,
                   .nkv = 32768,
                   .d = 128,
                   .page = 16,
                   .ragged = 1024}},
        .nextra = 7,
        .extra_only = 1,
        .dtypes = MHA_DTYPE_BIT(MHA_F32) | MHA_DTYPE_BIT(MHA_BF16),
        /* the windowed N=8192 rows take seconds a call on the SIMD kernels */
        .max_seconds = 5,
        .min_time = 0.05,
        .repetitions = 3,
        .baseline_reps = 1,
        .passes = 2,
        .interleaved = 1,
        .by_shape = 1,
    },
};

#undef AXIS
#undef DECODE
#undef BERT
#undef GPT2

/* The preset called name, or NULL. */
const preset *preset_find(const char *name) {
    for (size_t i = 0; i < sizeof PRESETS / sizeof PRESETS[0]; i++)
        if (strcmp(PRESETS[i].name, name) == 0) return &PRESETS[i];
    return NULL;
}

enum { NPRESETS = (int)(sizeof PRESETS / sizeof PRESETS[0]) };

static void join(char *buf, size_t len, const char *const *names, int n, const char *sep,
                 const char *last) {
    size_t o = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && o < len; i++) {
        const char *s = i == 0 ? "" : (last && i == n - 1 ? last : sep);
        o += (size_t)snprintf(buf + o, len - o, "%s%s", s, names[i]);
    }
}

void presets_join(char *buf, size_t len, const char *sep, const char *last) {
    const char *names[NPRESETS];
    for (int i = 0; i < NPRESETS; i++) names[i] = PRESETS[i].name;
    join(buf, len, names, NPRESETS, sep, last);
}

void peers_join(char *buf, size_t len, const char *sep, const char *last) {
    int n;
    const char *const *names = peer_names(&n);
    join(buf, len, names, n, sep, last);
}

void presets_print(FILE *f) {
    for (int i = 0; i < NPRESETS; i++) fprintf(f, "%s\n", PRESETS[i].name);
}

void presets_help(FILE *f) {
    for (int i = 0; i < NPRESETS; i++) {
        const char *h = PRESETS[i].help;
        fprintf(f, "  %-9s", PRESETS[i].name);
        for (int first = 1; *h; first = 0) { /* each line indented under the first */
            const size_t n = strcspn(h, "\n");
            fprintf(f, "%s%.*s\n", first ? "" : "           ", (int)n, h);
            h += n + (h[n] == '\n');
        }
    }
}

void presets_say_unknown(const char *name) {
    const char *names[NPRESETS];
    for (int i = 0; i < NPRESETS; i++) names[i] = PRESETS[i].name;
    say_unknown("sweep: --preset", "preset", name, names, NPRESETS, NULL);
}
