/* test_peer_py.c - the Python peers (harness/peers/peer_py.c and its helper
 * scripts/peers/mha_peer.py): each peer's output against the float64 oracle
 * with the written-down tolerance of its dtype, over shapes that catch tails
 * and layout bugs (N = 1, 7, 33, 197; d = 64, 80; causal and not; cross with
 * Nq = 1 and Nq < Nkv causal; GQA 8/2; batch 2; bf16 and fp16 where taken).
 * A peer whose helper does not start here (no peer Python: CI) is a visible
 * skip with its why, never a failure. Also: takes() refuses int8 KV with a
 * message, a killed helper gives an error (not a hang or a crash) and the next
 * prepare starts a fresh one, a missing Python or script is a clear why, each
 * peer runs under its own interpreter (zentorch: MHA_PEERS_PYTHON_ZENTORCH;
 * vllm: MHA_PEERS_PYTHON_VLLM),
 * and the C and Python lists of peers agree. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "check.h"
#include "peers/peer.h"

#define SEED 20261130ull
enum { THREADS = 2 };

/* Every Python peer, from the one list. */
static const peer_ops *const PY[] = {
#define PY(name, env, venv, setup) &peer_##name,
#include "peers/peers_py.inc"
#undef PY
};
enum { NPY = sizeof PY / sizeof PY[0] };

typedef struct {
    int64_t b, h, g, nq, nkv, d;
    int causal;
} shape;

static const shape SHAPES[] = {
    {1, 2, 2, 1, 1, 64, 0},     /* N = 1 */
    {1, 2, 2, 7, 7, 64, 1},     /* a tail, causal square */
    {2, 3, 3, 33, 33, 80, 0},   /* batch 2, d = 80 */
    {1, 2, 2, 197, 197, 64, 1}, /* long tail, causal */
    {1, 8, 2, 33, 33, 64, 1},   /* GQA 8 / 2, causal */
    {2, 8, 2, 7, 197, 80, 1},   /* cross Nq < Nkv causal (bottom-right), GQA, batch 2 */
    {1, 4, 4, 1, 197, 64, 1},   /* decode: one query row sees the whole cache */
    {2, 4, 1, 7, 33, 80, 0},    /* cross, MQA */
    {1, 2, 2, 197, 7, 64, 0},   /* Nq > Nkv, not causal */
    {1, 8, 2, 197, 197, 80, 0}, /* GQA, long, d = 80 */
};
enum { NSHAPES = sizeof SHAPES / sizeof SHAPES[0] };

static mha_problem problem_of(const shape *s, mha_dtype dt) {
    return (mha_problem){.batch = s->b,
                         .heads = s->h,
                         .kv_heads = s->g,
                         .seq_q = s->nq,
                         .seq_kv = s->nkv,
                         .head_dim = s->d,
                         .causal = s->causal,
                         .dtype = dt};
}

/* Windows for the peers whose adapter takes one (torch, ONNX Runtime,
 * OpenVINO: an explicit mask; zentorch: its own window sizes where Nq ==
 * Nkv, else a mask): causal and not, both edges, a window of 0, cross Nq <
 * Nkv with GQA. */
typedef struct {
    shape s;
    int64_t left, right; /* mha.h's window, -1 unbounded */
} window_case;
static const window_case WINDOWS[] = {
    {{1, 2, 2, 7, 7, 64, 1}, 2, -1},     /* causal, 2 keys back */
    {{1, 2, 2, 197, 197, 64, 0}, 16, 3}, /* both edges, not causal */
    {{1, 2, 2, 33, 33, 80, 1}, 0, 0},    /* a window of 0: the diagonal only */
    {{2, 8, 2, 7, 197, 64, 1}, 32, -1},  /* cross, bottom-right, GQA, batch 2 */
    {{1, 4, 4, 1, 197, 64, 0}, 64, 0},   /* decode: the last 65 keys */
    {{1, 2, 2, 33, 7, 64, 0}, 2, 0},     /* Nq > Nkv: rows that see no key (refused) */
};
enum { NWINDOWS = sizeof WINDOWS / sizeof WINDOWS[0] };

static mha_problem window_problem(const window_case *w, mha_dtype dt) {
    mha_problem p = problem_of(&w->s, dt);
    p.window = 1;
    p.window_left = w->left;
    p.window_right = w->right;
    return p;
}

/* 1 when peer runs here; else a visible skip naming why. */
static int probe_or_skip(const peer_ops *peer) {
    char why[1024] = "";
    if (peer->probe(why, sizeof why)) {
        printf("[ peer     ] %s: %s\n", peer->name, peer->version());
        return 1;
    }
    printf("[ SKIPPED  ] peer %s: %s\n", peer->name, why);
    return 0;
}

static int check_one_sinks(const peer_ops *peer, const mha_problem *p, mha_dtype dt, mha_dtype kvdt,
                           int index, int sinks);

/* Prepares, runs and checks one case; returns 1 when the peer took it. */
static int check_one(const peer_ops *peer, const mha_problem *p, mha_dtype dt, mha_dtype kvdt,
                     int index) {
    return check_one_sinks(peer, p, dt, kvdt, index, 0);
}

/* As check_one, with the sink logits drawn as `sinks` (SINKS_*) when p->sinks. */
static int check_one_sinks(const peer_ops *peer, const mha_problem *p, mha_dtype dt, mha_dtype kvdt,
                           int index, int sinks) {
    check_case c = {
        .p = *p, .input = INPUT_UNIFORM, .layout = LAYOUT_BHND, .sinks = sinks, .tag = "peer"};
    check_case_set_dtypes(&c, dt, kvdt);
    char why[1024] = "", desc[256];
    check_describe(&c, desc, sizeof desc);
    if (!peer->takes(&c.p, why, sizeof why)) {
        assert_true(why[0] != 0);
        static char last[1024];
        if (strcmp(last, why) != 0) /* once per reason, not per shape */
            printf("[ refused  ] %s %s kv %s: %s\n", peer->name, mha_dtype_name(dt),
                   mha_dtype_name(kvdt), why);
        snprintf(last, sizeof last, "%s", why);
        return 0;
    }
    check_data d;
    assert_int_equal(check_prepare(&c, check_case_seed(SEED, index), &d), MHA_OK);
    peer_inst *pi = peer->prepare(&c.p, THREADS, d.qv.data, d.kv.data, d.vv.data,
                                  &(mha_extras){.sinks = d.sinks}, why, sizeof why);
    if (!pi) fprintf(stderr, "%s %s %s: prepare: %s\n", peer->name, mha_dtype_name(dt), desc, why);
    assert_non_null(pi);
    double seconds = 0;
    if (peer->run(pi, &seconds, why, sizeof why) != 0)
        fprintf(stderr, "%s %s: run: %s\n", peer->name, desc, why);
    assert_true(seconds > 0);
    check_out o;
    assert_true(check_out_alloc(&d, &o));
    if (peer->output(pi, o.view.data, why, sizeof why) != 0)
        fprintf(stderr, "%s %s: output: %s\n", peer->name, desc, why);
    check_report r;
    const int res = check_out_compare(&d, &o, &r);
    printf("[ %-8s ] %s %s %s: max err %.3g, %.1f us; %s\n", res == CHECK_PASS ? "ok" : "FAIL",
           peer->name, mha_dtype_name(dt), desc, r.max_err, seconds * 1e6, peer->settings(pi));
    if (res != CHECK_PASS)
        fprintf(stderr, "%s: %s (seed %llu)\n", desc, r.detail, (unsigned long long)SEED);
    check_out_free(&o);
    peer->release(pi);
    check_release(&d);
    assert_int_equal(res, CHECK_PASS);
    return 1;
}

static void check_peer(const peer_ops *peer) {
    if (!probe_or_skip(peer)) skip();
    mha_problem probs[NSHAPES];
    for (int i = 0; i < NSHAPES; i++) probs[i] = problem_of(&SHAPES[i], MHA_F32);
    static const mha_dtype dts[] = {MHA_F32, MHA_BF16, MHA_F16};
    int taken = 0, index = 0;
    for (size_t t = 0; t < sizeof dts / sizeof dts[0]; t++)
        for (int i = 0; i < NSHAPES; i++)
            taken += check_one(peer, &probs[i], dts[t], dts[t], index++);
    /* every peer takes fp32 of every shape above */
    assert_true(taken >= NSHAPES);
    /* a 16-bit KV cache under fp32 queries (ggml's f16 cache), where taken */
    for (size_t t = 1; t < sizeof dts / sizeof dts[0]; t++)
        for (int i = 0; i < NSHAPES; i++)
            (void)check_one(peer, &probs[i], MHA_F32, dts[t], index++);
}

/* V of its own head dim (d_v != d), against the oracle: narrower, wider, and
 * DeepSeek's MLA-shaped 192 / 128 with GQA, causal and cross; fp32 and, where
 * the peer takes it, bf16. */
static void check_head_dim_v(const peer_ops *peer, int bf16) {
    static const struct {
        shape s;
        int64_t dv;
    } cases[] = {{{1, 2, 2, 33, 33, 64, 1}, 32},
                 {{2, 4, 2, 7, 197, 64, 0}, 80},
                 {{1, 8, 2, 64, 64, 192, 1}, 128}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mha_problem p = problem_of(&cases[i].s, MHA_F32);
        p.head_dim_v = cases[i].dv;
        assert_true(check_one(peer, &p, MHA_F32, MHA_F32, 1400 + (int)i));
        assert_int_equal(check_one(peer, &p, MHA_BF16, MHA_BF16, 1500 + (int)i), bf16);
    }
}

/* The windows, against the oracle (a mask that ignored one fails here), in
 * fp32 and, where the peer takes bf16, bf16. */
static void check_windows(const peer_ops *peer, int bf16) {
    for (int i = 0; i < NWINDOWS - 1; i++) {
        const mha_problem p = window_problem(&WINDOWS[i], MHA_F32);
        assert_true(check_one(peer, &p, MHA_F32, MHA_F32, 1000 + i));
        assert_int_equal(check_one(peer, &p, MHA_BF16, MHA_BF16, 1100 + i), bf16);
    }
}

/* The packed and paged layouts (check_data's: B sequences packed
 * token-major; paged, blocks of 5 or 16 keys shuffled across the pool, two
 * blocks nobody owns and the slots past each sequence's end NaN), for the
 * peers that take them: decode (one query per sequence, GQA, MHA) and causal
 * chunked prefill (several queries at the end of each sequence, and a whole
 * sequence), and windows L:0, against the oracle. Returns how many cases the
 * peer took. */
static int check_layout(const peer_ops *peer, mha_dtype dt, int layout) {
    static const struct {
        shape s;
        int64_t left; /* a window L:0, or -1 */
    } cases[] = {
        {{2, 8, 2, 1, 197, 64, 0}, -1}, /* decode, GQA 8/2, blocks of 5 */
        {{1, 4, 4, 1, 32, 80, 1}, -1},  /* decode, MHA, d 80, blocks of 16 */
        {{2, 8, 2, 7, 197, 64, 1}, -1}, /* chunked prefill: 7 queries after 190 keys */
        {{1, 2, 2, 33, 33, 64, 1}, -1}, /* a whole sequence, causal */
        {{2, 8, 2, 7, 197, 64, 1}, 31}, /* chunked prefill in a window of 31:0 */
        {{2, 8, 2, 1, 197, 64, 0}, 0},  /* decode seeing its own key only */
    };
    const int paged = layout == LAYOUT_PAGED;
    const char *name = paged ? "paged" : "packed";
    int taken = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mha_problem p = problem_of(&cases[i].s, dt);
        if (cases[i].left >= 0) {
            p.window = 1;
            p.window_left = cases[i].left;
            p.window_right = 0;
        }
        check_case c = {.p = p, .input = INPUT_UNIFORM, .layout = layout, .tag = "peer layout"};
        check_case_set_dtypes(&c, dt, dt);
        const mha_problem kp = check_layout_problem(&c);
        char why[1024] = "", desc[256];
        check_describe(&c, desc, sizeof desc);
        if (!peer->takes(&kp, why, sizeof why)) {
            printf("[ refused  ] %s %s %s %s: %s\n", peer->name, mha_dtype_name(dt), name, desc,
                   why);
            continue;
        }
        check_data d;
        assert_int_equal(check_prepare(&c, check_case_seed(SEED, 1600 + (int)i), &d), MHA_OK);
        const mha_extras x = check_layout_extras(&d);
        peer_inst *pi =
            peer->prepare(&d.kp, THREADS, d.lq.data, d.lk.data, d.lv.data, &x, why, sizeof why);
        if (!pi) fprintf(stderr, "%s %s %s: prepare: %s\n", peer->name, name, desc, why);
        assert_non_null(pi);
        double seconds = 0;
        if (peer->run(pi, &seconds, why, sizeof why) != 0)
            fprintf(stderr, "%s %s %s: run: %s\n", peer->name, name, desc, why);
        assert_true(seconds > 0);
        check_out o;
        assert_true(check_out_alloc(&d, &o));
        if (peer->output(pi, o.view.data, why, sizeof why) != 0)
            fprintf(stderr, "%s %s %s: output: %s\n", peer->name, name, desc, why);
        check_report r;
        const int res = check_out_compare(&d, &o, &r);
        printf("[ %-8s ] %s %s %s %s: max err %.3g; %s\n", res == CHECK_PASS ? "ok" : "FAIL",
               peer->name, mha_dtype_name(dt), name, desc, r.max_err, peer->settings(pi));
        if (res != CHECK_PASS) fprintf(stderr, "%s: %s\n", desc, r.detail);
        check_out_free(&o);
        peer->release(pi);
        check_release(&d);
        assert_int_equal(res, CHECK_PASS);
        taken++;
    }
    return taken;
}

/* A row of the sinks and softcap tables: a shape, its sink logits drawn as
 * SINKS_* (NO_SINKS: a problem without), a window left:0 (left < 0: none)
 * and a logit softcap (0: none). */
enum { NO_SINKS = -1 };
typedef struct {
    shape s;
    int sinks;
    int64_t left;
    float cap;
} sink_case;

/* check_one_sinks on the problem of c, in dt with K/V of kvdt. */
static int check_sink_case(const peer_ops *peer, const sink_case *c, mha_dtype dt, mha_dtype kvdt,
                           int index) {
    mha_problem p = problem_of(&c->s, MHA_F32);
    p.sinks = c->sinks != NO_SINKS;
    p.softcap = c->cap;
    if (c->left >= 0) {
        p.window = 1;
        p.window_left = c->left;
        p.window_right = 0;
    }
    return check_one_sinks(peer, &p, dt, kvdt, index, p.sinks ? c->sinks : SINKS_UNIFORM);
}

static void test_torch(void **state) {
    (void)state;
    check_peer(&peer_torch);
    check_windows(&peer_torch, 1);
    check_head_dim_v(&peer_torch, 1);
}
static void test_onnxruntime(void **state) {
    (void)state;
    check_peer(&peer_onnxruntime);
    check_windows(&peer_onnxruntime, 0);
}
static void test_openvino(void **state) {
    (void)state;
    check_peer(&peer_openvino);
    char why[256];
    mha_problem b = window_problem(&WINDOWS[0], MHA_BF16);
    const int bf16 = peer_openvino.takes(&b, why, sizeof why);
    check_windows(&peer_openvino, bf16);
    /* its PagedAttention takes every packed and paged case, bf16 where it
     * takes bf16 */
    for (int layout = LAYOUT_PACKED; layout <= LAYOUT_PAGED; layout++) {
        assert_int_equal(check_layout(&peer_openvino, MHA_F32, layout), 6);
        assert_int_equal(check_layout(&peer_openvino, MHA_BF16, layout), bf16 ? 6 : 0);
    }
    /* sinks through the same op, dense problems run as B sequences: logits
     * uniform, +large, mixed per head, -inf; GQA, cross, decode, gpt-oss's
     * sinks in a window, a window of 0 */
    static const sink_case sk[] = {{{1, 4, 2, 33, 33, 64, 1}, SINKS_UNIFORM, -1, 0},
                                   {{1, 2, 2, 64, 64, 64, 1}, SINKS_LARGE, -1, 0},
                                   {{1, 8, 8, 12, 197, 80, 1}, SINKS_MIXED, -1, 0},
                                   {{2, 8, 2, 1, 197, 64, 0}, SINKS_MIXED, -1, 0},
                                   {{1, 8, 2, 197, 197, 64, 1}, SINKS_UNIFORM, 31, 0},
                                   {{1, 4, 2, 33, 33, 64, 1}, SINKS_NINF, 0, 0}};
    for (size_t i = 0; i < sizeof sk / sizeof sk[0]; i++) {
        assert_true(check_sink_case(&peer_openvino, &sk[i], MHA_F32, MHA_F32, 1800 + (int)i));
        assert_int_equal(check_sink_case(&peer_openvino, &sk[i], MHA_BF16, MHA_BF16, 1900 + (int)i),
                         bf16);
    }
    /* and refused with the reason: several non-causal queries, a softcap */
    mha_problem p = problem_of(&(shape){2, 3, 1, 16, 16, 64, 0}, MHA_F32);
    p.sinks = 1;
    assert_false(peer_openvino.takes(&p, why, sizeof why));
    assert_non_null(strstr(why, "not causal"));
    p.causal = 1;
    p.softcap = 30;
    assert_false(peer_openvino.takes(&p, why, sizeof why));
    assert_non_null(strstr(why, "softcap"));
}
/* Runs under its own interpreter (MHA_PEERS_PYTHON_ZENTORCH or
 * .venv-zentorch): fp32 and bf16, GQA natively, our bottom-right causal as a
 * mask where its flag (top-left) differs. */
static void test_zentorch(void **state) {
    (void)state;
    check_peer(&peer_zentorch);
    check_windows(&peer_zentorch, 1);
}

/* llama.cpp's ggml through llama-cpp-python's libraries
 * (MHA_PEERS_PYTHON_GGML or .venv-ggml): fp32 queries with f32, f16 or bf16
 * K/V; GQA as its broadcast; causal as an f16 mask. */
static void test_ggml(void **state) {
    (void)state;
    check_peer(&peer_ggml);
    check_windows(&peer_ggml, 0);
    check_head_dim_v(&peer_ggml, 0);
    /* its logit_softcap against the oracle: a cap that saturates (1.5 against
     * scores up to about 8), one that barely bends them, with a window, GQA */
    static const struct {
        shape s;
        float cap;
        int64_t left;
    } caps[] = {{{1, 2, 2, 33, 33, 64, 1}, 1.5f, -1},
                {{2, 8, 2, 7, 197, 64, 0}, 30.0f, -1},
                {{1, 4, 2, 64, 64, 80, 1}, 2.0f, 16}};
    for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++) {
        mha_problem p = problem_of(&caps[i].s, MHA_F32);
        p.softcap = caps[i].cap;
        if (caps[i].left >= 0) {
            p.window = 1;
            p.window_left = caps[i].left;
            p.window_right = -1;
        }
        assert_true(check_one(&peer_ggml, &p, MHA_F32, MHA_F32, 1200 + (int)i));
        assert_true(check_one(&peer_ggml, &p, MHA_F32, MHA_F16, 1300 + (int)i));
    }
    /* its sinks (ggml_flash_attn_ext_add_sinks) against the oracle: logits
     * uniform, -inf (no mass), +large (a sink that takes nearly all of it) and
     * mixed per head; GQA, cross, decode, gpt-oss's sinks with a window, and
     * with a softcap */
    static const sink_case sk[] = {{{1, 4, 2, 33, 33, 64, 1}, SINKS_UNIFORM, -1, 0},
                                   {{2, 3, 1, 16, 16, 64, 0}, SINKS_NINF, -1, 0},
                                   {{1, 2, 2, 64, 64, 64, 1}, SINKS_LARGE, -1, 0},
                                   {{1, 8, 8, 12, 197, 80, 1}, SINKS_MIXED, -1, 0},
                                   {{1, 8, 2, 1, 197, 64, 0}, SINKS_MIXED, -1, 0},
                                   {{1, 8, 2, 197, 197, 64, 1}, SINKS_UNIFORM, 31, 0},
                                   {{1, 4, 2, 33, 33, 64, 1}, SINKS_MIXED, -1, 2.0f}};
    for (size_t i = 0; i < sizeof sk / sizeof sk[0]; i++) {
        assert_true(check_sink_case(&peer_ggml, &sk[i], MHA_F32, MHA_F32, 1600 + (int)i));
        assert_true(check_sink_case(&peer_ggml, &sk[i], MHA_F32, MHA_F16, 1700 + (int)i));
    }
    char why[512] = "";
    mha_problem p = problem_of(&SHAPES[1], MHA_F32);
    p.kv_dtype = MHA_F16;
    assert_true(peer_ggml.takes(&p, why, sizeof why));
    p.kv_dtype = MHA_I8;
    assert_false(peer_ggml.takes(&p, why, sizeof why));
    assert_non_null(strstr(why, "q8_0 is another format"));
}

/* vLLM's CPU attention (MHA_PEERS_PYTHON_VLLM or .venv-vllm): every dtype,
 * dense problems as B sequences, the packed and paged layouts re-paged into
 * its blocks (bf16 on AMX where the CPU has it), its sliding window under
 * causal (and decode), the softcap and sinks, against the oracle. */
static void test_vllm(void **state) {
    (void)state;
    check_peer(&peer_vllm);
    /* the windows it maps (L:0 or L:-1 under causal, decode) and not the
     * others (a window without causal over several queries: refused, why) */
    for (int i = 0; i < NWINDOWS - 1; i++) {
        const mha_problem p = window_problem(&WINDOWS[i], MHA_F32);
        const int maps = p.causal || p.seq_q == 1;
        assert_int_equal(check_one(&peer_vllm, &p, MHA_F32, MHA_F32, 1000 + i), maps);
        assert_int_equal(check_one(&peer_vllm, &p, MHA_BF16, MHA_BF16, 1100 + i), maps);
    }
    for (int layout = LAYOUT_PACKED; layout <= LAYOUT_PAGED; layout++) {
        assert_int_equal(check_layout(&peer_vllm, MHA_F32, layout), 6);
        assert_int_equal(check_layout(&peer_vllm, MHA_BF16, layout), 6);
        assert_int_equal(check_layout(&peer_vllm, MHA_F16, layout), 6);
    }
    /* sinks (s_aux) and the softcap, alone and together, with GQA, cross,
     * decode and gpt-oss's sinks in a window */
    static const sink_case sk[] = {{{1, 4, 2, 33, 33, 64, 1}, SINKS_UNIFORM, -1, 0},
                                   {{2, 3, 1, 16, 16, 64, 0}, SINKS_NINF, -1, 0},
                                   {{1, 2, 2, 64, 64, 64, 1}, SINKS_LARGE, -1, 0},
                                   {{1, 8, 8, 12, 197, 80, 1}, SINKS_MIXED, -1, 0},
                                   {{2, 8, 2, 1, 197, 64, 0}, SINKS_MIXED, -1, 0},
                                   {{1, 8, 2, 197, 197, 64, 1}, SINKS_UNIFORM, 31, 0},
                                   {{1, 2, 2, 33, 33, 64, 1}, NO_SINKS, -1, 1.5f},
                                   {{2, 8, 2, 7, 197, 64, 0}, NO_SINKS, -1, 30.0f},
                                   {{1, 4, 2, 33, 33, 64, 1}, SINKS_MIXED, -1, 2.0f}};
    for (size_t i = 0; i < sizeof sk / sizeof sk[0]; i++) {
        assert_true(check_sink_case(&peer_vllm, &sk[i], MHA_F32, MHA_F32, 2000 + (int)i));
        assert_true(check_sink_case(&peer_vllm, &sk[i], MHA_BF16, MHA_BF16, 2100 + (int)i));
    }
    /* refused with the reason: a head size it is not built for, more queries
     * than keys, a window it cannot express, d_v != d */
    char why[512] = "";
    mha_problem p = problem_of(&(shape){1, 2, 2, 7, 7, 72, 1}, MHA_F32);
    assert_false(peer_vllm.takes(&p, why, sizeof why));
    assert_non_null(strstr(why, "head_dim 72"));
    p = problem_of(&SHAPES[8], MHA_F32);
    assert_false(peer_vllm.takes(&p, why, sizeof why));
    assert_non_null(strstr(why, "newest keys"));
    p = window_problem(&WINDOWS[1], MHA_F32);
    assert_false(peer_vllm.takes(&p, why, sizeof why));
    assert_non_null(strstr(why, "without causal"));
    p = problem_of(&SHAPES[1], MHA_F32);
    p.head_dim_v = 32;
    assert_false(peer_vllm.takes(&p, why, sizeof why));
    assert_non_null(strstr(why, "head_dim_v"));
}

/* The C list (peers_py.inc, through peer_names) and the helper's PEERS dict
 * (mha_peer.py --list, stdlib only: any python3 runs it) name the same Python
 * peers in the same order; each Python peer names its interpreter. */
static void test_lists_agree(void **state) {
    (void)state;
    const char *src = getenv("MHA_SOURCE_DIR");
    if (!src || !*src) {
        printf("[ SKIPPED  ] MHA_SOURCE_DIR not set (meson test sets it)\n");
        skip();
    }
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "python3 '%s/scripts/peers/mha_peer.py' --list", src);
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    char line[128];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        assert_true(n < NPY);
        printf("[ list     ] %s / %s\n", line, PY[n]->name);
        assert_string_equal(line, PY[n]->name);
        n++;
    }
    assert_int_equal(pclose(f), 0);
    assert_int_equal(n, NPY);
    int nn;
    const char *const *names = peer_names(&nn);
    for (int i = 0; i < NPY; i++) {
        assert_true(i < nn);
        assert_string_equal(names[i], PY[i]->name);
        assert_non_null(peer_python_env(PY[i]->name));
        assert_non_null(peer_python_venv(PY[i]->name));
    }
    assert_null(peer_python_env("onednn"));
    assert_string_equal(peer_python_env("zentorch"), "MHA_PEERS_PYTHON_ZENTORCH");
    assert_string_equal(peer_python_venv("zentorch"), ".venv-zentorch");
    assert_string_equal(peer_python_env("torch"), "MHA_PEERS_PYTHON");
}

/* Decided in C, no helper needed: int8 KV, mixed dtypes and causal rows that
 * see no key are refused with a message; the plain problem is taken. */
static void test_takes(void **state) {
    (void)state;
    for (size_t i = 0; i < NPY; i++) {
        char why[512] = "";
        mha_problem p = problem_of(&SHAPES[1], MHA_F32);
        assert_true(PY[i]->takes(&p, why, sizeof why));
        p.kv_dtype = MHA_I8;
        assert_false(PY[i]->takes(&p, why, sizeof why));
        assert_non_null(strstr(why, "int8 KV cache: "));
        if (PY[i] != &peer_ggml) assert_non_null(strstr(why, "SDPA input"));
        /* a 16-bit cache under fp32 queries: ggml's form only */
        p.kv_dtype = MHA_BF16;
        why[0] = 0;
        assert_int_equal(PY[i]->takes(&p, why, sizeof why), PY[i] == &peer_ggml);
        assert_true(PY[i] == &peer_ggml || why[0] != 0);
        p.dtype = MHA_BF16;
        p.kv_dtype = MHA_F16;
        why[0] = 0;
        assert_false(PY[i]->takes(&p, why, sizeof why));
        assert_true(why[0] != 0);
        p = problem_of(&(shape){1, 2, 2, 33, 7, 64, 1}, MHA_F32);
        why[0] = 0;
        assert_false(PY[i]->takes(&p, why, sizeof why));
        assert_non_null(strstr(why, "see no key"));
    }
    char why[512] = "";
    mha_problem p = problem_of(&SHAPES[1], MHA_BF16);
    assert_false(peer_onnxruntime.takes(&p, why, sizeof why));
    assert_true(why[0] != 0);
    p.dtype = MHA_F16;
    assert_true(peer_torch.takes(&p, why, sizeof why));
    assert_false(peer_openvino.takes(&p, why, sizeof why));
    assert_false(peer_zentorch.takes(&p, why, sizeof why));
    assert_false(peer_ggml.takes(&p, why, sizeof why));
    assert_non_null(strstr(why, "f32 queries"));
    /* the variants: every peer takes a window (where every row sees a key),
     * ggml and vLLM a softcap, ggml, OpenVINO (its PagedAttention) and vLLM
     * sinks, torch and ggml d_v != d */
    for (size_t i = 0; i < NPY; i++) {
        p = window_problem(&WINDOWS[0], MHA_F32);
        assert_true(PY[i]->takes(&p, why, sizeof why));
        p = window_problem(&WINDOWS[NWINDOWS - 1], MHA_F32);
        assert_false(PY[i]->takes(&p, why, sizeof why));
        p = problem_of(&SHAPES[1], MHA_F32);
        p.softcap = 30;
        why[0] = 0;
        const int caps = PY[i] == &peer_ggml || PY[i] == &peer_vllm;
        assert_int_equal(PY[i]->takes(&p, why, sizeof why), caps);
        if (!caps) assert_non_null(strstr(why, "takes no logit softcap"));
        p.softcap = 0;
        p.sinks = 1;
        why[0] = 0;
        const int sinks = PY[i] == &peer_ggml || PY[i] == &peer_openvino || PY[i] == &peer_vllm;
        assert_int_equal(PY[i]->takes(&p, why, sizeof why), sinks);
        if (!sinks) assert_non_null(strstr(why, "takes no attention sinks"));
        p.sinks = 0;
        p.head_dim_v = 32;
        why[0] = 0;
        assert_int_equal(PY[i]->takes(&p, why, sizeof why),
                         PY[i] == &peer_torch || PY[i] == &peer_ggml);
        if (PY[i] != &peer_torch && PY[i] != &peer_ggml) assert_non_null(strstr(why, "head_dim_v"));
    }
    p = window_problem(&WINDOWS[NWINDOWS - 1], MHA_F32);
    assert_false(peer_torch.takes(&p, why, sizeof why));
    assert_non_null(strstr(why, "see no key"));
}

/* The pid of this process's child running `mha_peer.py --peer name`, or 0. */
static pid_t helper_pid(const char *name) {
    DIR *dir = opendir("/proc");
    pid_t found = 0;
    struct dirent *e;
    while (dir && !found && (e = readdir(dir))) {
        if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
        char path[300], buf[4096] = "";
        snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        const size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = 0;
        const char *rp = strrchr(buf, ')');
        char state;
        long ppid;
        if (!rp || sscanf(rp + 1, " %c %ld", &state, &ppid) != 2 || ppid != (long)getpid())
            continue;
        snprintf(path, sizeof path, "/proc/%s/cmdline", e->d_name);
        f = fopen(path, "r");
        if (!f) continue;
        const size_t m = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        for (size_t i = 0; i + 1 < m; i++)
            if (buf[i] == 0) buf[i] = ' ';
        buf[m] = 0;
        char want[64];
        snprintf(want, sizeof want, "--peer %s", name);
        if (strstr(buf, want)) found = (pid_t)atol(e->d_name);
    }
    if (dir) closedir(dir);
    return found;
}

/* A helper killed between prepare and run: run and output fail with a why
 * naming what happened, release is safe, and the next prepare works on a
 * fresh helper. */
/* The first Python peer that runs here (else the test skips, saying why),
 * prepared on a small case (causal or not) of inputs d; its helper's pid. */
static peer_inst *small_on_first_peer(const peer_ops **peer, int causal, int index, check_case *c,
                                      check_data *d, pid_t *pid, char *why, size_t len) {
    *peer = NULL;
    for (size_t i = 0; i < NPY && !*peer; i++)
        if (PY[i]->probe(why, len)) *peer = PY[i];
    if (!*peer) {
        printf("[ SKIPPED  ] no Python peer runs here: %s\n", why);
        skip();
    }
    const shape s = {1, 2, 2, 7, 7, 64, causal};
    *c = (check_case){.p = problem_of(&s, MHA_F32), .layout = LAYOUT_BHND, .tag = "peer"};
    assert_int_equal(check_prepare(c, check_case_seed(SEED, index), d), MHA_OK);
    peer_inst *pi = (*peer)->prepare(&c->p, 1, d->qv.data, d->kv.data, d->vv.data, NULL, why, len);
    assert_non_null(pi);
    *pid = helper_pid((*peer)->name);
    assert_true(*pid > 0);
    return pi;
}

static void test_killed_helper(void **state) {
    (void)state;
    const peer_ops *peer;
    char why[1024] = "";
    check_case c;
    check_data d;
    pid_t pid;
    peer_inst *pi = small_on_first_peer(&peer, 1, 999, &c, &d, &pid, why, sizeof why);
    assert_int_equal(kill(pid, SIGKILL), 0);
    double seconds = 0;
    why[0] = 0;
    assert_int_equal(peer->run(pi, &seconds, why, sizeof why), -1);
    printf("[ killed   ] %s run: %s\n", peer->name, why);
    assert_non_null(strstr(why, "signal 9"));
    check_out o;
    assert_true(check_out_alloc(&d, &o));
    why[0] = 0;
    assert_int_equal(peer->output(pi, o.view.data, why, sizeof why), -1);
    assert_true(why[0] != 0);
    peer->release(pi);
    /* a fresh helper for the next prepare */
    pi = peer->prepare(&c.p, 1, d.qv.data, d.kv.data, d.vv.data, NULL, why, sizeof why);
    assert_non_null(pi);
    assert_int_equal(peer->run(pi, &seconds, why, sizeof why), 0);
    assert_int_equal(peer->output(pi, o.view.data, why, sizeof why), 0);
    check_report r;
    assert_int_equal(check_out_compare(&d, &o, &r), CHECK_PASS);
    /* an instance of the dead helper stays dead */
    peer->release(pi);
    check_out_free(&o);
    check_release(&d);
}

/* A helper that stops answering (SIGSTOP: alive, silent) is given up after
 * the deadline (MHA_PEERS_WAIT_S shortens it here), killed and reaped; the
 * why says so, and the next prepare works on a fresh helper. */
static void test_stuck_helper(void **state) {
    (void)state;
    const peer_ops *peer;
    char why[1024] = "";
    check_case c;
    check_data d;
    pid_t pid;
    peer_inst *pi = small_on_first_peer(&peer, 0, 998, &c, &d, &pid, why, sizeof why);
    assert_int_equal(kill(pid, SIGSTOP), 0);
    setenv("MHA_PEERS_WAIT_S", "1", 1);
    double seconds = 0;
    assert_int_equal(peer->run(pi, &seconds, why, sizeof why), -1);
    unsetenv("MHA_PEERS_WAIT_S");
    printf("[ stuck    ] %s run: %s\n", peer->name, why);
    assert_non_null(strstr(why, "no answer within 1 s"));
    assert_int_equal(helper_pid(peer->name), 0); /* reaped: no zombie, no stopped child */
    peer->release(pi);
    pi = peer->prepare(&c.p, 1, d.qv.data, d.kv.data, d.vv.data, NULL, why, sizeof why);
    assert_non_null(pi);
    assert_int_equal(peer->run(pi, &seconds, why, sizeof why), 0);
    peer->release(pi);
    check_release(&d);
}

/* A helper started from a thread pinned to one CPU (as the sweep pins its
 * main thread) may still use every CPU: its library places its own threads
 * (a 2-thread peer on one core measured as its 1-thread self). */
static void test_helper_not_pinned(void **state) {
    (void)state;
    const long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (ncpu < 2) {
        printf("[ SKIPPED  ] one CPU: nothing to pin away\n");
        skip();
    }
    for (size_t i = 0; i < NPY; i++)
        if (PY[i]->shutdown) PY[i]->shutdown();
    cpu_set_t saved, one;
    assert_int_equal(sched_getaffinity(0, sizeof saved, &saved), 0);
    CPU_ZERO(&one);
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &saved)) {
            CPU_SET(c, &one);
            break;
        }
    assert_int_equal(sched_setaffinity(0, sizeof one, &one), 0);
    const peer_ops *peer = NULL;
    char why[1024] = "";
    for (size_t i = 0; i < NPY && !peer; i++)
        if (PY[i]->probe(why, sizeof why)) peer = PY[i];
    assert_int_equal(sched_setaffinity(0, sizeof saved, &saved), 0);
    if (!peer) {
        printf("[ SKIPPED  ] no Python peer runs here: %s\n", why);
        skip();
    }
    const pid_t pid = helper_pid(peer->name);
    assert_true(pid > 0);
    cpu_set_t got;
    assert_int_equal(sched_getaffinity(pid, sizeof got, &got), 0);
    printf("[ cpus     ] %s helper: %d CPUs (this thread was pinned to 1)\n", peer->name,
           CPU_COUNT(&got));
    assert_true(CPU_COUNT(&got) >= 2);
    assert_int_equal(CPU_COUNT(&got), CPU_COUNT(&saved));
}

/* No Python, or no script: a probe that fails with a why naming it. Runs
 * after shutdown (which forgets the probes) and shuts down again after. */
static void test_missing_python(void **state) {
    (void)state;
    for (size_t i = 0; i < NPY; i++)
        if (PY[i]->shutdown) PY[i]->shutdown();
    char *saved = getenv("MHA_PEERS_PYTHON") ? strdup(getenv("MHA_PEERS_PYTHON")) : NULL;
    char why[1024] = "";
    setenv("MHA_PEERS_PYTHON", "/nonexistent/mha/python3", 1);
    assert_false(peer_torch.probe(why, sizeof why));
    printf("[ why      ] %s\n", why);
    assert_non_null(strstr(why, "/nonexistent/mha/python3"));
    peer_torch.shutdown();
    setenv("MHA_PEERS_PYTHON", "/bin/sh", 1);
    setenv("MHA_PEERS_SCRIPT", "/nonexistent/mha_peer.py", 1);
    assert_false(peer_openvino.probe(why, sizeof why));
    printf("[ why      ] %s\n", why);
    assert_non_null(strstr(why, "/nonexistent/mha_peer.py"));
    peer_openvino.shutdown();
    unsetenv("MHA_PEERS_SCRIPT");
    /* zentorch's interpreter is its own variable's, not MHA_PEERS_PYTHON's */
    char *zsaved =
        getenv("MHA_PEERS_PYTHON_ZENTORCH") ? strdup(getenv("MHA_PEERS_PYTHON_ZENTORCH")) : NULL;
    setenv("MHA_PEERS_PYTHON_ZENTORCH", "/nonexistent/zentorch/python3", 1);
    assert_false(peer_zentorch.probe(why, sizeof why));
    printf("[ why      ] %s\n", why);
    assert_non_null(strstr(why, "/nonexistent/zentorch/python3"));
    peer_zentorch.shutdown();
    if (zsaved)
        setenv("MHA_PEERS_PYTHON_ZENTORCH", zsaved, 1);
    else
        unsetenv("MHA_PEERS_PYTHON_ZENTORCH");
    free(zsaved);
    if (saved)
        setenv("MHA_PEERS_PYTHON", saved, 1);
    else
        unsetenv("MHA_PEERS_PYTHON");
    free(saved);
}

static int shutdown_all(void **state) {
    (void)state;
    for (size_t i = 0; i < NPY; i++)
        if (PY[i]->shutdown) PY[i]->shutdown();
    return 0;
}

int main(void) {
    printf("[ seed     ] %llu\n", (unsigned long long)SEED);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_takes),
        cmocka_unit_test(test_torch),
        cmocka_unit_test(test_onnxruntime),
        cmocka_unit_test(test_openvino),
        cmocka_unit_test(test_zentorch),
        cmocka_unit_test(test_ggml),
        cmocka_unit_test(test_vllm),
        cmocka_unit_test(test_lists_agree),
        cmocka_unit_test(test_killed_helper),
        cmocka_unit_test(test_stuck_helper),
        cmocka_unit_test(test_helper_not_pinned),
        cmocka_unit_test(test_missing_python),
    };
    return cmocka_run_group_tests(tests, NULL, shutdown_all);
}
