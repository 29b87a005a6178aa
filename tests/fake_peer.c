/* fake_peer.c - a stand-in for scripts/peers/mha_peer.py that speaks its
 * protocol (harness/peers/peer_py_helper.c) with no Python: test_peer_fake starts it
 * as MHA_PEERS_PYTHON. Honest by default (fp32 attention computed here, in
 * double, and the time of that computation claimed); MHA_FAKE_PEER_MODE, a
 * comma-separated list, makes it lie:
 *   seconds=X  every run claims X seconds (and computes nothing)
 *   lie_after=N  ... but the first N runs are honest (an oracle check passes)
 *   shrink=N   output writes the output, then truncates the shared memfd to
 *              N bytes (bare: 0)
 *   hang=OP    never answers the request OP (hello, prepare, run, output)
 *   ctrl       version and settings full of terminal controls
 *   refuse     prepare fails with an error full of terminal controls
 *   garbage    run answers a line that is not JSON */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

enum { MAX_INST = 64, SHM_FD = 3 };

typedef struct {
    int used;
    int64_t b, h, g, nq, nkv, d;
    int causal, window;
    int64_t left, right; /* the window (mha.h), when window */
    double scale;
    float *q, *k, *v, *o;
} inst;

static inst INSTS[MAX_INST];
static const char *g_mode = "";

/* The value of flag name in the mode list ("" for a bare flag), or NULL. */
static const char *mode(const char *name) {
    static char val[64];
    const size_t n = strlen(name);
    for (const char *p = g_mode; p && *p;) {
        const char *end = strchr(p, ',');
        const size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len >= n && strncmp(p, name, n) == 0 && (len == n || p[n] == '=')) {
            const size_t vl = len > n ? len - n - 1 : 0;
            snprintf(val, sizeof val, "%.*s", (int)(vl < sizeof val ? vl : sizeof val - 1),
                     p + n + 1);
            return len > n ? val : "";
        }
        p = end ? end + 1 : NULL;
    }
    return NULL;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void reply(json_object *o) {
    const char *s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);
    const size_t n = strlen(s);
    char *line = malloc(n + 1);
    if (!line) exit(3);
    memcpy(line, s, n);
    line[n] = '\n';
    for (size_t done = 0; done < n + 1;) {
        const ssize_t w = write(0, line + done, n + 1 - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) exit(0); /* mhabench has gone */
        done += (size_t)w;
    }
    free(line);
    json_object_put(o);
}

static json_object *ok_reply(void) {
    json_object *o = json_object_new_object();
    json_object_object_add(o, "ok", json_object_new_boolean(1));
    return o;
}

static void fail_reply(const char *msg) {
    json_object *o = json_object_new_object();
    json_object_object_add(o, "ok", json_object_new_boolean(0));
    json_object_object_add(o, "error", json_object_new_string(msg));
    reply(o);
}

static int64_t field(json_object *req, const char *key) {
    json_object *v;
    return json_object_object_get_ex(req, key, &v) ? json_object_get_int64(v) : 0;
}

static float *shm_floats(int64_t off, int64_t n) {
    float *x = malloc((size_t)(n > 0 ? n : 1) * sizeof *x);
    if (!x) exit(3);
    const size_t want = (size_t)n * sizeof *x;
    if (pread(SHM_FD, x, want, (off_t)off) != (ssize_t)want) {
        free(x);
        return NULL;
    }
    return x;
}

/* Whether key j is visible to query i: causal and the window bottom-right
 * aligned (mha.h's contract, as the torch adapter's mask). */
static int visible(const inst *in, int64_t i, int64_t j) {
    const int64_t c = i + (in->nkv - in->nq);
    if (in->causal && j > c) return 0;
    if (in->window && in->left >= 0 && j < c - in->left) return 0;
    if (in->window && in->right >= 0 && j > c + in->right) return 0;
    return 1;
}

/* Attention of in into in->o: double accumulation, causal and the window
 * bottom-right. */
static void attend(inst *in) {
    const int64_t d = in->d, grp = in->h / in->g;
    double *p = malloc((size_t)in->nkv * sizeof *p);
    if (!p) exit(3);
    for (int64_t b = 0; b < in->b; b++)
        for (int64_t h = 0; h < in->h; h++) {
            const int64_t kh = b * in->g + h / grp;
            const float *K = in->k + kh * in->nkv * d, *V = in->v + kh * in->nkv * d;
            for (int64_t i = 0; i < in->nq; i++) {
                const float *q = in->q + ((b * in->h + h) * in->nq + i) * d;
                float *o = in->o + ((b * in->h + h) * in->nq + i) * d;
                double mx = -INFINITY, sum = 0;
                for (int64_t j = 0; j < in->nkv; j++) {
                    double s = 0;
                    for (int64_t e = 0; e < d; e++) s += (double)q[e] * K[j * d + e];
                    p[j] = visible(in, i, j) ? s * in->scale : -INFINITY;
                    mx = p[j] > mx ? p[j] : mx;
                }
                for (int64_t j = 0; j < in->nkv; j++)
                    sum += p[j] = p[j] == -INFINITY ? 0 : exp(p[j] - mx);
                for (int64_t e = 0; e < d; e++) {
                    double acc = 0;
                    for (int64_t j = 0; j < in->nkv; j++) acc += p[j] * V[j * d + e];
                    o[e] = sum > 0 ? (float)(acc / sum) : 0.0f;
                }
            }
        }
    free(p);
}

static void op_prepare(json_object *req) {
    if (mode("refuse")) {
        fail_reply("\x1b[31mno\x1b[0m \x1b]0;pwned\x07\rsorry");
        return;
    }
    json_object *dt;
    if (!json_object_object_get_ex(req, "dtype", &dt) ||
        strcmp(json_object_get_string(dt), "fp32") != 0) {
        fail_reply("the fake peer takes fp32 only");
        return;
    }
    int slot = 0;
    while (slot < MAX_INST && INSTS[slot].used) slot++;
    if (slot == MAX_INST) {
        fail_reply("the fake peer holds 64 instances at most");
        return;
    }
    inst *in = &INSTS[slot];
    *in = (inst){.b = field(req, "batch"),
                 .h = field(req, "heads"),
                 .g = field(req, "kv_heads"),
                 .nq = field(req, "seq_q"),
                 .nkv = field(req, "seq_kv"),
                 .d = field(req, "head_dim"),
                 .causal = (int)field(req, "causal"),
                 .window = (int)field(req, "window"),
                 .left = field(req, "window_left"),
                 .right = field(req, "window_right")};
    json_object *sc;
    in->scale = json_object_object_get_ex(req, "scale", &sc) ? json_object_get_double(sc) : 1;
    const int64_t nq = in->b * in->h * in->nq * in->d, nk = in->b * in->g * in->nkv * in->d;
    in->q = shm_floats(field(req, "q"), nq);
    in->k = shm_floats(field(req, "k"), nk);
    in->v = shm_floats(field(req, "v"), nk);
    in->o = calloc((size_t)(nq > 0 ? nq : 1), sizeof *in->o);
    if (!in->q || !in->k || !in->v || !in->o) {
        free(in->q), free(in->k), free(in->v), free(in->o);
        fail_reply("the fake peer could not read its inputs from the shared memory");
        return;
    }
    in->used = 1;
    attend(in); /* the untimed warm-up call */
    json_object *o = ok_reply();
    json_object_object_add(o, "id", json_object_new_int64(slot));
    json_object_object_add(
        o, "settings",
        json_object_new_string(mode("ctrl") ? "threads=1\x1b[2J\x1b]0;title\x07\r\nfake" : "fake"));
    reply(o);
}

static inst *inst_of(json_object *req) {
    const int64_t id = field(req, "id");
    return id >= 0 && id < MAX_INST && INSTS[id].used ? &INSTS[id] : NULL;
}

static void op_run(json_object *req) {
    inst *in = inst_of(req);
    if (!in) {
        fail_reply("no such instance");
        return;
    }
    if (mode("garbage")) {
        static const char junk[] = "seconds: soon\x1b[2J\n";
        if (write(0, junk, sizeof junk - 1) < 0) exit(0);
        return;
    }
    static long runs;
    const char *after = mode("lie_after");
    const int honest = after && runs++ < strtol(after, NULL, 10);
    const char *claim = honest ? NULL : mode("seconds");
    double s;
    if (claim) {
        s = strtod(claim, NULL);
    } else {
        const double t0 = now_s();
        attend(in);
        s = now_s() - t0;
    }
    json_object *o = ok_reply();
    json_object_object_add(o, "seconds", json_object_new_double(s));
    reply(o);
}

static void op_output(json_object *req) {
    inst *in = inst_of(req);
    if (!in) {
        fail_reply("no such instance");
        return;
    }
    const size_t n = (size_t)(in->b * in->h * in->nq * in->d) * sizeof(float);
    if (pwrite(SHM_FD, in->o, n, (off_t)field(req, "offset")) != (ssize_t)n) {
        fail_reply("the fake peer could not write its output");
        return;
    }
    const char *shrink = mode("shrink");
    if (shrink && ftruncate(SHM_FD, (off_t)strtoll(shrink, NULL, 10)) != 0) exit(4);
    reply(ok_reply());
}

int main(void) {
    const char *m = getenv("MHA_FAKE_PEER_MODE");
    g_mode = m ? m : "";
    static char buf[1 << 20];
    size_t len = 0;
    for (;;) {
        char *nl;
        while (!(nl = memchr(buf, '\n', len))) {
            if (len == sizeof buf) return 2;
            const ssize_t r = read(0, buf + len, sizeof buf - len);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) return 0; /* EOF: mhabench has gone */
            len += (size_t)r;
        }
        *nl = 0;
        json_object *req = json_tokener_parse(buf);
        const size_t used = (size_t)(nl - buf) + 1;
        memmove(buf, buf + used, len - used);
        len -= used;
        json_object *opv;
        const char *op =
            req && json_object_object_get_ex(req, "op", &opv) ? json_object_get_string(opv) : "";
        const char *hang = mode("hang");
        if (hang && strcmp(hang, op) == 0)
            for (;;) pause(); /* alive and silent */
        if (strcmp(op, "hello") == 0) {
            json_object *o = ok_reply();
            json_object_object_add(
                o, "version",
                json_object_new_string(mode("ctrl") ? "fake 1.0\x1b[31m red\x1b[0m\x1b]0;title\x07"
                                                      "\r overwritten"
                                                    : "fake 1.0"));
            reply(o);
        } else if (strcmp(op, "prepare") == 0) {
            op_prepare(req);
        } else if (strcmp(op, "run") == 0) {
            op_run(req);
        } else if (strcmp(op, "output") == 0) {
            op_output(req);
        } else if (strcmp(op, "release") == 0) {
            inst *in = inst_of(req);
            if (in) {
                free(in->q), free(in->k), free(in->v), free(in->o);
                in->used = 0;
            }
            reply(ok_reply());
        } else if (strcmp(op, "quit") == 0) {
            reply(ok_reply());
            json_object_put(req);
            return 0;
        } else {
            fail_reply("unknown op");
        }
        json_object_put(req);
    }
}
