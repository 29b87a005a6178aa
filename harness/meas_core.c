/* meas_core.c - the measurement core (meas_core.h): inputs and workspace owned
 * by a pool, prepared calls, and the harness's timing loops (the evidence
 * around them and the guarded loop: meas_evidence.c). */
#include "meas_core.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mha_private.h"
#include "stats.h"

void meas_pool_init(meas_pool *m, uint64_t seed) {
    memset(m, 0, sizeof *m);
    m->seed = seed;
}

static void inputs_free(meas_inputs *in) {
    mha_free(in->q);
    mha_free(in->k);
    mha_free(in->v);
    mha_free(in->o);
    mha_free(in->k_sc);
    mha_free(in->v_sc);
    mha_free(in->sinks);
    free(in->cu_q);
    free(in->cu_kv);
    free(in->lens);
    free(in->table);
    memset(in, 0, sizeof *in);
}

void meas_pool_release(meas_pool *m) {
    for (int i = 0; i < MEAS_PEER_CACHE; i++)
        if (m->peers[i].pi) m->peers[i].peer->release(m->peers[i].pi);
    memset(m->peers, 0, sizeof m->peers);
    for (int i = 0; i < MEAS_INPUT_CACHE; i++) inputs_free(&m->in[i]);
    mha_free(m->ws);
    m->ws = NULL;
    m->ws_size = 0;
}

void meas_ragged_len(const meas_shape *s, int64_t i, int64_t *nq, int64_t *nkv) {
    uint64_t st = 0x2545f4914f6cdd1dull ^ ((uint64_t)s->b * 1000003u + (uint64_t)s->nq) * 31u ^
                  (uint64_t)s->nkv * 7919u ^ (uint64_t)s->ragged * 104729u ^
                  (uint64_t)(i + 1) * 0x9e3779b97f4a7c15ull;
    const int64_t lo = s->ragged < s->nkv ? s->ragged : s->nkv;
    const double u = 0.5 * ((double)uniform_pm1(&st) + 1.0); /* [0, 1) */
    int64_t n =
        (int64_t)llround(exp(log((double)lo) + u * (log((double)s->nkv) - log((double)lo))));
    n = n < lo ? lo : (n > s->nkv ? s->nkv : n);
    *nkv = n;
    *nq = s->nq == s->nkv ? n : (s->nq < n ? s->nq : n);
}

/* Sequence i's lengths: its own (ragged) or the shape's. */
static void seq_len(const meas_shape *s, int64_t i, int64_t *nq, int64_t *nkv) {
    if (s->ragged > 0) {
        meas_ragged_len(s, i, nq, nkv);
        return;
    }
    *nq = s->nq;
    *nkv = s->nkv;
}

/* Totals of a packed or paged shape: query rows, key rows (packed), cache
 * blocks (paged). */
static void layout_totals(const meas_shape *s, int64_t *tq, int64_t *tkv, int64_t *nblocks) {
    *tq = *tkv = *nblocks = 0;
    for (int64_t i = 0; i < s->b; i++) {
        int64_t nq, nkv;
        seq_len(s, i, &nq, &nkv);
        *tq += nq;
        *tkv += nkv;
        if (s->page > 0) *nblocks += (nkv + s->page - 1) / s->page;
    }
    if (s->page > 0 && *nblocks < 1) *nblocks = 1;
}

mha_problem meas_problem(const meas_shape *s) {
    mha_problem p = {.batch = s->b,
                     .heads = s->h,
                     .kv_heads = s->kv,
                     .seq_q = s->nq,
                     .seq_kv = s->nkv,
                     .head_dim = s->d,
                     .causal = s->causal,
                     .scale = 0.0f,
                     .dtype = s->dtype,
                     .kv_dtype = MHA_F32,
                     .window = s->window,
                     .window_left = s->window_left,
                     .window_right = s->window_right,
                     .softcap = (float)s->softcap,
                     .sinks = s->sinks,
                     .head_dim_v = s->head_dim_v};
    if (s->kv_dtype != s->dtype) p.kv_dtype = s->kv_dtype;
    if (!s->kv_dtype) p.kv_dtype = MHA_F32; /* 0: the problem's dtype */
    if (s->page > 0 || s->ragged > 0) {
        int64_t tq, tkv, nb;
        layout_totals(s, &tq, &tkv, &nb);
        p.total_q = tq;
        if (s->page > 0) {
            p.layout = MHA_LAYOUT_PAGED;
            p.block_size = s->page;
            p.max_blocks = (s->nkv + s->page - 1) / s->page;
            if (p.max_blocks < 1) p.max_blocks = 1;
            p.num_blocks = nb;
        } else {
            p.layout = MHA_LAYOUT_PACKED;
            p.total_kv = tkv;
        }
    }
    return p;
}

double meas_flops(const meas_shape *s) {
    meas_shape dense = *s; /* the visible pairs of each sequence as a dense problem */
    dense.page = dense.ragged = 0;
    if (s->ragged <= 0) {
        const mha_problem p = meas_problem(&dense);
        return mha_problem_flops(&p);
    }
    double f = 0;
    dense.b = 1;
    for (int64_t i = 0; i < s->b; i++) {
        meas_ragged_len(s, i, &dense.nq, &dense.nkv);
        const mha_problem p = meas_problem(&dense);
        f += mha_problem_flops(&p);
    }
    return f;
}

meas_shape meas_shape_of(const mha_problem *p) {
    return (meas_shape){.b = p->batch,
                        .h = p->heads,
                        .kv = p->kv_heads,
                        .nq = p->seq_q,
                        .nkv = p->seq_kv,
                        .d = p->head_dim,
                        .causal = p->causal,
                        .dtype = p->dtype,
                        .kv_dtype = p->kv_dtype,
                        .window = p->window,
                        .sinks = p->sinks,
                        .window_left = p->window_left,
                        .window_right = p->window_right,
                        .head_dim_v = p->head_dim_v,
                        .softcap = p->softcap,
                        .page = p->layout == MHA_LAYOUT_PAGED ? p->block_size : 0};
}

int meas_has_variant(const meas_shape *s) {
    return s->window || s->softcap != 0 || s->sinks || (s->head_dim_v && s->head_dim_v != s->d) ||
           s->page > 0 || s->ragged > 0;
}

const char *meas_variant_text(const meas_shape *s, char *buf, size_t len) {
    size_t n = 0;
    buf[0] = '\0';
    if (s->window && n < len)
        n += (size_t)snprintf(buf + n, len - n, " window=%lld:%lld", (long long)s->window_left,
                              (long long)s->window_right);
    if (s->softcap != 0 && n < len)
        n += (size_t)snprintf(buf + n, len - n, " softcap=%g", (double)(float)s->softcap);
    if (s->sinks && n < len) n += (size_t)snprintf(buf + n, len - n, " sinks");
    if (s->head_dim_v && s->head_dim_v != s->d && n < len)
        n += (size_t)snprintf(buf + n, len - n, " d_v=%lld", (long long)s->head_dim_v);
    if (s->ragged > 0 && n < len)
        n += (size_t)snprintf(buf + n, len - n, " ragged=%lld", (long long)s->ragged);
    if (s->page > 0 && n < len) snprintf(buf + n, len - n, " page=%lld", (long long)s->page);
    return buf;
}

static mha_dtype kv_type(const meas_shape *s) {
    return s->kv_dtype ? s->kv_dtype : s->dtype;
}

static int64_t dim_v(const meas_shape *s) {
    return s->head_dim_v ? s->head_dim_v : s->d;
}

/* Query rows of the batch: b nq, or the ragged sequences' total. */
static int64_t q_rows(const meas_shape *s) {
    if (s->ragged <= 0) return s->b * s->nq;
    int64_t tq, tkv, nb;
    layout_totals(s, &tq, &tkv, &nb);
    return tq;
}

/* Key rows stored per KV head over the batch: b nkv, the ragged total
 * (packed), or a paged pool's slots. */
static int64_t kv_rows(const meas_shape *s) {
    if (s->page <= 0 && s->ragged <= 0) return s->b * s->nkv;
    int64_t tq, tkv, nb;
    layout_totals(s, &tq, &tkv, &nb);
    return s->page > 0 ? nb * s->page : tkv;
}

size_t meas_elems_q(const meas_shape *s) {
    return (size_t)(q_rows(s) * s->h * s->d);
}

size_t meas_elems_kv(const meas_shape *s) {
    return (size_t)(kv_rows(s) * s->kv * s->d);
}

size_t meas_elems_v(const meas_shape *s) {
    return (size_t)(kv_rows(s) * s->kv * dim_v(s));
}

size_t meas_elems_o(const meas_shape *s) {
    return (size_t)(q_rows(s) * s->h * dim_v(s));
}

/* The k buffer: K, or for a layer its four weights and four biases. */
static size_t elems_k(const meas_shape *s) {
    const size_t dm = (size_t)(s->h * s->d);
    return s->layer ? 4 * dm * dm + 4 * dm : meas_elems_kv(s);
}

size_t meas_input_bytes(const meas_shape *s) {
    if (s->layer) /* x, the weights and biases, out; v is unused (self-attention) */
        return mha_dtype_size(s->dtype) * (2 * meas_elems_q(s) + elems_k(s));
    const mha_dtype kv = kv_type(s);
    const size_t rows = kv == MHA_I8 ? (size_t)(kv_rows(s) * s->kv) : 0;
    return mha_dtype_size(s->dtype) * (meas_elems_q(s) + meas_elems_o(s)) +
           mha_dtype_size(kv) * (meas_elems_kv(s) + meas_elems_v(s)) + sizeof(float) * 2 * rows +
           (s->sinks ? sizeof(float) * (size_t)s->h : 0);
}

double meas_io_bytes(const meas_shape *s) {
    return (double)meas_input_bytes(s);
}

mha_layer meas_layer(const meas_shape *s, const void *w) {
    const int64_t dm = s->h * s->d, m2 = dm * dm;
    const size_t es = mha_dtype_size(s->dtype);
    mha_layer L = {.d_model = dm, .heads = s->h, .kv_heads = s->kv, .dtype = s->dtype};
    if (!w) return L;
    const char *c = w; /* element offsets in bytes of the dtype */
    L.w_q = c;
    L.w_k = c + es * (size_t)m2;
    L.w_v = c + es * (size_t)(2 * m2);
    L.w_o = c + es * (size_t)(3 * m2);
    L.b_q = c + es * (size_t)(4 * m2);
    L.b_k = c + es * (size_t)(4 * m2 + dm);
    L.b_v = c + es * (size_t)(4 * m2 + 2 * dm);
    L.b_o = c + es * (size_t)(4 * m2 + 3 * dm);
    return L;
}

/* Uniform [-1, 1), chunked so the fill runs in parallel and is the same for
 * any thread count. */
static void fill(float *p, size_t n, uint64_t seed) {
    const size_t chunk = (size_t)1 << 16;
    const long nchunks = (long)((n + chunk - 1) / chunk);
#pragma omp parallel for schedule(static)
    for (long c = 0; c < nchunks; c++) {
        uint64_t st = seed ^ ((uint64_t)c * 0xd1b54a32d192ed03ull);
        const size_t lo = (size_t)c * chunk, hi = lo + chunk < n ? lo + chunk : n;
        for (size_t i = lo; i < hi; i++) p[i] = uniform_pm1(&st);
    }
}

/* Replaces the fp32 buffer *buf of n elements by its values stored as t
 * (rounded to nearest even, or quantised per row of d with scales in
 * *scales). 0 when out of memory. */
static int to_dtype(void **buf, size_t n, mha_dtype t, int64_t d, float **scales) {
    if (t == MHA_F32) return 1;
    void *typed = mha_alloc(n * mha_dtype_size(t));
    float *sc = t == MHA_I8 ? mha_alloc(n / (size_t)d * sizeof(float)) : NULL;
    if (!typed || (t == MHA_I8 && !sc)) {
        mha_free(typed);
        mha_free(sc);
        return 0;
    }
    if (t == MHA_I8)
        mha_quantize_rows_i8(*buf, (int64_t)(n / (size_t)d), d, d, typed, d, sc);
    else
        mha_convert_from_f32(t, *buf, typed, n);
    mha_free(*buf);
    *buf = typed;
    if (scales) *scales = sc;
    return 1;
}

/* A packed or paged shape's index arrays: cu_seqlens by the sequences'
 * lengths, and paged, each sequence's blocks taken in turn from a seeded
 * shuffle of the whole pool (the table's unused entries 0). 0 when out of
 * memory. */
static int layout_tables(meas_inputs *in, const meas_shape *s, uint64_t seed) {
    const mha_problem p = meas_problem(s);
    in->cu_q = malloc((size_t)(s->b + 1) * sizeof(int32_t));
    in->cu_kv = malloc((size_t)(s->b + 1) * sizeof(int32_t));
    in->lens = malloc((size_t)(s->b + 1) * sizeof(int32_t));
    if (!in->cu_q || !in->cu_kv || !in->lens) return 0;
    in->cu_q[0] = in->cu_kv[0] = 0;
    for (int64_t b = 0; b < s->b; b++) {
        int64_t nq, nkv;
        seq_len(s, b, &nq, &nkv);
        in->cu_q[b + 1] = in->cu_q[b] + (int32_t)nq;
        in->cu_kv[b + 1] = in->cu_kv[b] + (int32_t)nkv;
        in->lens[b] = (int32_t)nkv;
    }
    if (s->page <= 0) return 1;
    const int64_t nb = p.num_blocks, mb = p.max_blocks;
    int32_t *perm = malloc((size_t)nb * sizeof(int32_t));
    in->table = calloc((size_t)(s->b * mb), sizeof(int32_t));
    if (!perm || !in->table) {
        free(perm);
        return 0;
    }
    for (int64_t i = 0; i < nb; i++) perm[i] = (int32_t)i;
    uint64_t st = seed;
    for (int64_t i = nb - 1; i > 0; i--) {
        const int64_t j = (int64_t)(splitmix64(&st) % (uint64_t)(i + 1));
        const int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    int64_t next = 0;
    for (int64_t b = 0; b < s->b; b++)
        for (int64_t m = 0; m < (in->lens[b] + s->page - 1) / s->page; m++)
            in->table[b * mb + m] = perm[next++];
    free(perm);
    return 1;
}

/* The inputs of a shape: cached (a few shapes, least recently used goes), so
 * grouped runs fill each shape once and interleaved ones do not refill. */
static meas_inputs *inputs_for(meas_pool *m, const meas_shape *s) {
    meas_inputs *slot = NULL;
    for (int i = 0; i < MEAS_INPUT_CACHE; i++)
        if (m->in[i].q && memcmp(&m->in[i].s, s, sizeof *s) == 0) {
            m->in[i].last_use = ++m->use_clock;
            return &m->in[i];
        }
    for (int i = 0; i < MEAS_INPUT_CACHE; i++)
        if (!slot || !m->in[i].q || (slot->q && m->in[i].last_use < slot->last_use))
            slot = &m->in[i];
    inputs_free(slot);
    const size_t nq = meas_elems_q(s), nv = meas_elems_v(s), no = meas_elems_o(s), nk = elems_k(s);
    slot->q = mha_alloc(nq * sizeof(float));
    slot->k = mha_alloc(nk * sizeof(float));
    slot->v = mha_alloc(nv * sizeof(float));
    slot->o = mha_alloc(no * mha_dtype_size(s->dtype));
    slot->sinks = s->sinks ? mha_alloc((size_t)s->h * sizeof(float)) : NULL;
    if (!slot->q || !slot->k || !slot->v || !slot->o || (s->sinks && !slot->sinks)) {
        inputs_free(slot);
        return NULL;
    }
    /* The seed from the dense shape: a variant row sees the Q and K (and,
     * for the same d_v, V) its dense row sees. */
    uint64_t h = m->seed;
    const int64_t dims[] = {s->b, s->h, s->kv, s->nq, s->nkv, s->d, s->causal, s->layer};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) h = h * 1000003u + (uint64_t)dims[i];
    fill(slot->q, nq, h ^ 1);
    fill(slot->k, nk, h ^ 2);
    if (s->layer) { /* weights ~ U(-1,1)/sqrt(d_model): activations stay O(1) */
        const float g = 1.0f / sqrtf((float)(s->h * s->d));
        for (size_t i = 0; i < nk; i++) ((float *)slot->k)[i] *= g;
    }
    fill(slot->v, nv, h ^ 3);
    if (slot->sinks) fill(slot->sinks, (size_t)s->h, h ^ 4); /* O(1): a sink takes real mass */
    if ((s->page > 0 || s->ragged > 0) && !layout_tables(slot, s, h ^ 5)) {
        inputs_free(slot);
        return NULL;
    }
    memset(slot->o, 0, no * mha_dtype_size(s->dtype));
    /* a layer's x and weights (in q and k) are of its dtype, v is unused */
    if (s->layer ? !to_dtype(&slot->q, nq, s->dtype, s->d, NULL) ||
                       !to_dtype(&slot->k, nk, s->dtype, s->d, NULL)
                 : !to_dtype(&slot->q, nq, s->dtype, s->d, NULL) ||
                       !to_dtype(&slot->k, nk, kv_type(s), s->d, &slot->k_sc) ||
                       !to_dtype(&slot->v, nv, kv_type(s), dim_v(s), &slot->v_sc)) {
        inputs_free(slot);
        return NULL;
    }
    slot->s = *s;
    slot->bytes = meas_input_bytes(s);
    slot->last_use = ++m->use_clock;
    return slot;
}

void *meas_workspace(meas_pool *m, size_t bytes) {
    if (bytes == 0) bytes = MHA_WORKSPACE_ALIGN;
    if (bytes <= m->ws_size) return m->ws;
    mha_free(m->ws);
    m->ws = mha_alloc(bytes);
    m->ws_size = m->ws ? bytes : 0;
    if (m->ws) memset(m->ws, 0, bytes); /* touched: no page faults in a timed call */
    return m->ws;
}

/* A [B, N, H, d] view (token-major: stride_n = H d) of dtype t. */
static mha_tensor token_major(const void *data, mha_dtype t, int64_t heads, int64_t n, int64_t d) {
    mha_tensor v = mha_view_bnhd((const float *)data, heads, n, d);
    v.dtype = t;
    return v;
}

const char *meas_prepare(meas_pool *m, const mha_kernel *k, const meas_shape *s,
                         const mha_options *o, meas_call *c) {
    static char msg[256];
    memset(c, 0, sizeof *c);
    c->kernel = k;
    c->p = meas_problem(s);
    c->o = *o;
    if (s->layer) {
        c->layer = 1;
        c->ls = (mha_layer_shape){s->b, s->nq, s->nkv, s->causal, 0.0f};
        c->L = meas_layer(s, NULL);
        if (mha_forward_workspace_size(k, &c->L, &c->ls, &c->o, &c->ws_size) != MHA_OK) {
            snprintf(msg, sizeof msg, "workspace size: %s", mha_last_error());
            return msg;
        }
    } else if (mha_workspace_size(k, &c->p, &c->o, &c->ws_size) != MHA_OK) {
        snprintf(msg, sizeof msg, "workspace size: %s", mha_last_error());
        return msg;
    }
    meas_inputs *in = inputs_for(m, s);
    if (!in) {
        snprintf(msg, sizeof msg, "cannot allocate %zu bytes of inputs", meas_input_bytes(s));
        return msg;
    }
    c->ws = meas_workspace(m, c->ws_size);
    if (!c->ws) {
        snprintf(msg, sizeof msg, "cannot allocate %zu bytes of workspace", c->ws_size);
        return msg;
    }
    c->out = mha_view_typed_mut(in->o, s->dtype, s->h, s->nq, dim_v(s));
    c->q = mha_view_typed(in->q, s->dtype, NULL, s->h, s->nq, s->d); /* a layer's x */
    if (s->layer) {
        c->L = meas_layer(s, in->k);
        c->k = c->v = c->q; /* self-attention */
        return NULL;
    }
    c->k = mha_view_typed(in->k, kv_type(s), in->k_sc, s->kv, s->nkv, s->d);
    c->v = mha_view_typed(in->v, kv_type(s), in->v_sc, s->kv, s->nkv, dim_v(s));
    c->x = meas_inputs_extras(in);
    if (s->page > 0 || s->ragged > 0) {
        /* q, out [T, h, .] packed; k, v packed [T, kv, .] or the pools [NB, page, kv, .];
         * int8 scales per row in the same order ([T, kv] or [NB, page, kv]) */
        const mha_problem p = meas_problem(s);
        const int64_t rows = s->page > 0 ? s->page : p.total_kv;
        c->q = token_major(in->q, s->dtype, s->h, p.total_q, s->d);
        const mha_tensor o = token_major(in->o, s->dtype, s->h, p.total_q, dim_v(s));
        c->out = (mha_tensor_mut){.data = in->o,
                                  .stride_b = o.stride_b,
                                  .stride_h = o.stride_h,
                                  .stride_n = o.stride_n,
                                  .dtype = o.dtype};
        c->k = token_major(in->k, kv_type(s), s->kv, rows, s->d);
        c->v = token_major(in->v, kv_type(s), s->kv, rows, dim_v(s));
        c->k.scale = in->k_sc;
        c->v.scale = in->v_sc;
        c->k.scale_stride_b = c->v.scale_stride_b = rows * s->kv;
        c->k.scale_stride_h = c->v.scale_stride_h = 1;
        c->k.scale_stride_n = c->v.scale_stride_n = s->kv;
    }
    return NULL;
}

const meas_inputs *meas_inputs_of(meas_pool *m, const meas_shape *s) {
    return inputs_for(m, s);
}

mha_extras meas_inputs_extras(const meas_inputs *in) {
    mha_extras x = {.sinks = in->sinks};
    if (in->s.page > 0 || in->s.ragged > 0) {
        x.cu_seqlens_q = in->cu_q;
        if (in->s.page > 0) {
            x.seq_lens_kv = in->lens;
            x.block_table = in->table;
        } else {
            x.cu_seqlens_kv = in->cu_kv;
        }
    }
    return x;
}

static char peer_err[512];

const char *meas_peer_error(void) {
    return peer_err;
}

const char *meas_prepare_peer(meas_pool *m, const peer_ops *peer, const meas_shape *s, int threads,
                              meas_call *c) {
    static char msg[600];
    memset(c, 0, sizeof *c);
    c->peer = peer;
    c->p = meas_problem(s);
    c->o = (mha_options){.threads = threads};
    if (s->layer) {
        snprintf(msg, sizeof msg, "peer %s: layer rows are not measured for peers", peer->name);
        return msg;
    }
    /* a variant or layout the adapter does not pass on: its prepare refuses
     * it (takes(): peer_takes_variants) */
    meas_peer_slot *slot = NULL;
    for (int i = 0; i < MEAS_PEER_CACHE; i++) {
        meas_peer_slot *e = &m->peers[i];
        if (e->pi && e->peer == peer && e->threads == threads && memcmp(&e->s, s, sizeof *s) == 0) {
            e->last_use = ++m->use_clock;
            c->pi = e->pi;
            return NULL;
        }
        if (!slot || !e->pi || (slot->pi && e->last_use < slot->last_use)) slot = e;
    }
    if (slot->pi) slot->peer->release(slot->pi);
    memset(slot, 0, sizeof *slot);
    const meas_inputs *in = inputs_for(m, s);
    if (!in) {
        snprintf(msg, sizeof msg, "cannot allocate %zu bytes of inputs", meas_input_bytes(s));
        return msg;
    }
    char why[512] = "";
    const mha_extras x = meas_inputs_extras(in);
    peer_inst *pi = peer->prepare(&c->p, threads, in->q, in->k, in->v, &x, why, sizeof why);
    if (!pi) {
        snprintf(msg, sizeof msg, "peer %s: %s", peer->name, why);
        return msg;
    }
    *slot = (meas_peer_slot){peer, *s, threads, pi, ++m->use_clock};
    c->pi = pi;
    return NULL;
}

meas_call meas_call_attend(const mha_kernel *k, const mha_problem *p, const mha_options *o,
                           const mha_tensor *q, const mha_tensor *kt, const mha_tensor *v,
                           const mha_tensor_mut *out, void *ws, size_t ws_size) {
    return (meas_call){.kernel = k,
                       .p = *p,
                       .o = *o,
                       .q = *q,
                       .k = *kt,
                       .v = *v,
                       .out = *out,
                       .ws = ws,
                       .ws_size = ws_size};
}

meas_call meas_call_forward(const mha_kernel *k, const mha_layer *L, const mha_layer_shape *ls,
                            const mha_options *o, const void *x, const void *key, const void *value,
                            void *out, void *ws, size_t ws_size) {
    return (meas_call){.kernel = k,
                       .o = *o,
                       .q = {.data = x},
                       .k = {.data = key},
                       .v = {.data = value},
                       .out = {.data = out},
                       .ws = ws,
                       .ws_size = ws_size,
                       .layer = 1,
                       .L = *L,
                       .ls = *ls};
}

/* A peer's call; *seconds its own time of it, or < 0. */
static mha_status peer_run(const meas_call *c, double *seconds) {
    if (c->peer->run(c->pi, seconds, peer_err, sizeof peer_err) != 0) return MHA_EIO;
    return MHA_OK;
}

mha_status meas_run(const meas_call *c) {
    double t;
    if (c->peer) return peer_run(c, &t);
    if (c->layer)
        return mha_forward(c->kernel, &c->L, &c->ls, &c->o, c->q.data, c->k.data, c->v.data,
                           c->out.data, c->ws, c->ws_size);
    return mha_attend_ex(c->kernel, &c->p, &c->o, &c->q, &c->k, &c->v, &c->x, &c->out, c->ws,
                         c->ws_size);
}

mha_status meas_sample(const meas_call *c, double *seconds) {
    const double t0 = now_s();
    double own = -1;
    const mha_status st = c->peer ? peer_run(c, &own) : meas_run(c);
    *seconds = now_s() - t0;
    if (own >= 0) *seconds = own;
    return st;
}

int meas_repeat(const meas_call *c, double *times, int min_reps, int max_reps, double time_cap,
                mha_status *status) {
    mha_status all = MHA_OK;
    int reps = 0;
    const double t_start = now_s();
    while (reps < max_reps && (reps < min_reps || now_s() - t_start < time_cap)) {
        const mha_status st = meas_sample(c, &times[reps++]);
        if (st != MHA_OK) all = st;
    }
    if (status) *status = all;
    return reps;
}

int meas_interleave(const meas_call *c, int n, double *times, int min_reps, int max_reps,
                    double time_cap) {
    int reps = 0;
    const double t_start = now_s();
    while (reps < max_reps && (reps < min_reps || now_s() - t_start < time_cap)) {
        for (int i = 0; i < n; i++) meas_sample(&c[i], &times[(size_t)i * max_reps + reps]);
        reps++;
    }
    return reps;
}

mha_status meas_for(const meas_call *c, double seconds, int *calls, double *elapsed) {
    mha_status all = MHA_OK;
    int n = 0;
    const double t0 = now_s();
    double t, own_sum = 0;
    do {
        double own = -1;
        const mha_status st = c->peer ? peer_run(c, &own) : meas_run(c);
        if (st != MHA_OK) all = st;
        own_sum += own;
        n++;
    } while ((t = now_s() - t0) < seconds);
    *calls = n;
    *elapsed = c->peer && own_sum > 0 ? own_sum : t; /* a peer's own clock when it has one */
    return all;
}

mha_status meas_gbench(mha_gbench_state *st, const meas_call *c) {
    mha_status status = MHA_OK;
    if (c->peer) { /* registered with manual time: each call's own time */
        while (mha_gbench_keep_running(st)) {
            double t;
            const mha_status s = meas_sample(c, &t);
            mha_gbench_set_iteration_time(st, t);
            if (s != MHA_OK) { /* a dead or lying helper: the loop ends after this iteration */
                status |= s;
                mha_gbench_skip_with_error(st, peer_err);
            }
        }
        return status;
    }
    while (mha_gbench_keep_running(st)) status |= meas_run(c);
    return status;
}
