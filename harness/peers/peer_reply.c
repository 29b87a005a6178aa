/* peer_reply.c - a peer helper's reply line and claimed times, checked
 * (peer_reply.h). */
#include "peer_reply.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include <json-c/json.h>

#include "mha_private.h"

static void say(peer_reply *r, const char *what) {
    snprintf(r->text, sizeof r->text, "%s", what);
}

/* The string field key of o, escaped into r->text ("" when absent); 0, or
 * -1 when it is there but not a string. */
static int text_field(json_object *o, const char *key, peer_reply *r) {
    json_object *v;
    r->text[0] = 0;
    if (!json_object_object_get_ex(o, key, &v) || json_object_is_type(v, json_type_null)) return 0;
    if (!json_object_is_type(v, json_type_string)) return -1;
    mha_escape(json_object_get_string(v), (size_t)json_object_get_string_len(v), r->text,
               sizeof r->text);
    return 0;
}

static peer_reply_status check_object(const char *op, json_object *o, peer_reply *r) {
    json_object *ok, *v;
    if (!json_object_object_get_ex(o, "ok", &ok) || !json_object_is_type(ok, json_type_boolean)) {
        say(r, "a reply without a boolean \"ok\"");
        return PEER_REPLY_BAD;
    }
    if (!json_object_get_boolean(ok)) {
        if (text_field(o, "error", r) != 0) {
            say(r, "a refusal whose \"error\" is not a string");
            return PEER_REPLY_BAD;
        }
        if (!r->text[0]) say(r, "failed (no message)");
        return PEER_REPLY_REFUSED;
    }
    if (strcmp(op, "hello") == 0 || strcmp(op, "prepare") == 0) {
        const char *key = op[0] == 'h' ? "version" : "settings";
        if (text_field(o, key, r) != 0) {
            snprintf(r->text, sizeof r->text, "a %s reply whose \"%s\" is not a string", op, key);
            return PEER_REPLY_BAD;
        }
    }
    if (strcmp(op, "prepare") == 0) {
        if (!json_object_object_get_ex(o, "id", &v) || !json_object_is_type(v, json_type_int)) {
            say(r, "a prepare reply without an integer \"id\"");
            return PEER_REPLY_BAD;
        }
        r->id = json_object_get_int64(v);
    }
    if (strcmp(op, "run") == 0) {
        if (!json_object_object_get_ex(o, "seconds", &v) ||
            !(json_object_is_type(v, json_type_double) || json_object_is_type(v, json_type_int)) ||
            !isfinite(json_object_get_double(v))) {
            say(r, "a run reply without a finite number \"seconds\"");
            return PEER_REPLY_BAD;
        }
        r->seconds = json_object_get_double(v);
    }
    return PEER_REPLY_OK;
}

peer_reply_status peer_reply_parse(const char *op, const char *line, size_t n, peer_reply *r) {
    memset(r, 0, sizeof *r);
    if (n > (size_t)INT32_MAX) {
        say(r, "a reply line too long to parse");
        return PEER_REPLY_BAD;
    }
    json_tokener *tok = json_tokener_new();
    if (!tok) {
        say(r, "out of memory parsing a reply");
        return PEER_REPLY_BAD;
    }
    json_object *o = json_tokener_parse_ex(tok, line, (int)n);
    size_t end = json_tokener_get_parse_end(tok);
    const int complete = json_tokener_get_error(tok) == json_tokener_success;
    json_tokener_free(tok);
    while (end < n && (line[end] == ' ' || line[end] == '\t' || line[end] == '\r')) end++;
    peer_reply_status st;
    if (!o || !complete || end != n || !json_object_is_type(o, json_type_object)) {
        say(r, "a reply that is not one JSON object");
        st = PEER_REPLY_BAD;
    } else {
        st = check_object(op, o, r);
    }
    json_object_put(o);
    return st;
}

/* ---- claimed times ---------------------------------------------------------------- */

/* GFLOP/s per thread per dtype; 0: the default */
static double g_peak[MHA_DTYPE_COUNT];
#define DEFAULT_PEAK_GFLOPS 1000.0 /* fp32, one core: Zen 5 at 5.7 GHz does ~365 */
#define RATE_MARGIN 10.0
#define AMX_FACTOR 16.0 /* 16-bit dtypes: a tile unit's work per cycle over FMA's, at most */

void peer_set_peak(mha_dtype t, double gflops) {
    if ((unsigned)t < MHA_DTYPE_COUNT) g_peak[t] = gflops > 0 && isfinite(gflops) ? gflops : 0;
}

double peer_max_rate(mha_dtype t, int threads) {
    const double f32 = g_peak[MHA_F32] > 0 ? g_peak[MHA_F32] : DEFAULT_PEAK_GFLOPS;
    double peak = (unsigned)t < MHA_DTYPE_COUNT && g_peak[t] > 0 ? g_peak[t] : f32;
    if ((t == MHA_BF16 || t == MHA_F16) && peak < AMX_FACTOR * f32) peak = AMX_FACTOR * f32;
    return RATE_MARGIN * peak * 1e9 * (threads > 1 ? threads : 1);
}

int peer_claim_check(double claimed, double flops, double max_rate, double wall, char *why,
                     size_t len) {
    const double floor = max_rate > 0 ? flops / max_rate : 0;
    /* the helper's perf_counter runs inside our round trip; the slack covers
     * the two clocks' reading granularity */
    const double ceiling = wall * 1.01 + 1e-4;
    if (!isfinite(claimed) || !(claimed > 0) || claimed < floor) {
        snprintf(why, len,
                 "claimed %.3g s for one call, faster than possible: its %.4g FLOPs take at least "
                 "%.3g s at %.3g GFLOP/s (10x this machine's peak)",
                 claimed, flops, floor, max_rate * 1e-9);
        return -1;
    }
    if (wall >= 0 && claimed > ceiling) {
        snprintf(why, len,
                 "claimed %.3g s for one call, longer than the %.3g s its whole request took here",
                 claimed, wall);
        return -1;
    }
    return 0;
}
