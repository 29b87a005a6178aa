/* search.c - the knob search of one class (coordinate descent from the
 * cache model's prior), its final round, and the choice of the winner
 * against mha_select's default. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "stats.h"
#include "util.h"
#include "tune.h"

/* ---- the search ------------------------------------------------------------------------- */

static int add_value(int *v, int n, int x) {
    for (int i = 0; i < n; i++)
        if (v[i] == x) return n;
    if (n < MAX_VALUES) v[n++] = x;
    return n;
}

static int cmp_int(const void *a, const void *b) {
    const int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* Candidate values in [lo, hi]: powers of two, multiples of the tile width up
 * to four tiles, 1.5 and 3 tiles, power-of-two numbers of tiles, and the prior itself; values
 * past the problem's extent (the kernels clamp to it) collapse to one. */
static int axis_values(int *v, int lo, int hi, int w, int prior, int64_t extent) {
    int n = 0;
    for (int x = 1; x <= hi; x *= 2)
        if (x >= lo) n = add_value(v, n, x);
    for (int m = 1; m <= 4; m++)
        if (m * w >= lo && m * w <= hi) n = add_value(v, n, m * w);
    /* one and a half and three tiles: 96 x 256 beat 64 x 128 by 2-5% for
     * d = 64 on this machine, and 96 is neither a power of two nor a tile */
    if (w % 2 == 0)
        for (int m = 3; m <= 6; m += 3)
            if (m * w / 2 >= lo && m * w / 2 <= hi) n = add_value(v, n, m * w / 2);
    for (int m = 8; m * w <= hi; m *= 2)
        if (m * w >= lo) n = add_value(v, n, m * w);
    n = add_value(v, n, prior);
    qsort(v, (size_t)n, sizeof *v, cmp_int);
    int out = 0, past = 0;
    for (int i = 0; i < n; i++) {
        if (v[i] >= extent) {
            if (past) continue;
            past = 1;
        }
        v[out++] = v[i];
    }
    return out;
}

typedef struct {
    point pts[MAX_POINTS];
    int n;
} point_set;

static point *find_point(point_set *s, int bq, int bk, int split) {
    for (int i = 0; i < s->n; i++)
        if (s->pts[i].bq == bq && s->pts[i].bk == bk && s->pts[i].split == split) return &s->pts[i];
    return NULL;
}

/* A descent takes about this many measurements (it sizes each one's time). */
#define DESCENT_EST 12

/* The time one measurement of the search may take when `taken` were taken
 * before it: its part of what is left until the deadline. It bounds the whole
 * measurement (meas_core starts no round past it, probes and retakes
 * counted); only MIN_REPS are taken regardless. */
static double measure_cap(double deadline, int taken) {
    const int left = DESCENT_EST - taken > 4 ? DESCENT_EST - taken : 4;
    const double t = deadline - now_s();
    return t > 0 ? t / left : 0;
}

/* Coordinate descent for one kernel: from the prior, along each axis step
 * while it improves by MOVE_MARGIN, until a pass over the axes changes
 * nothing or the kernel's share of the budget is spent. */
static void search_kernel(tune_ctx *tx, class_data *cd, kernel_result *kr, double deadline,
                          int use_split) {
    const mha_kernel *k = kr->k;
    const int w = mha_tile_width(mha_kernel_isa(k));
    mha_options def = {.threads = tx->threads}; /* the cache model's blocks */
    (void)mha_resolve_options(k, &cd->p, &def, &def);
    /* knob-less kernels are recorded with 0 (= default) knobs */
    kr->prior =
        kr->tunable ? (point){.bq = def.block_q, .bk = def.block_kv, .split = 0} : (point){0};
    point_set set = {.n = 0};
    set.pts[set.n] = kr->prior;
    measure(tx, cd, k, &set.pts[set.n], 0, measure_cap(deadline, 0), "prior");
    kr->prior = set.pts[set.n];
    point cur = set.pts[set.n++];
    kr->best = cur;
    if (!kr->tunable || cur.status != 1) return;

    int vq[MAX_VALUES], vk[MAX_VALUES];
    const int nq = axis_values(vq, w, 512, w, def.block_q, cd->p.seq_q);
    const int nk = axis_values(vk, 16, 1024, w, def.block_kv, cd->p.seq_kv);
    const int vs[3] = {0, MHA_SPLIT_HEADS, MHA_SPLIT_QBLOCKS};
    const int ns = use_split ? 3 : 1;
    int improved = 1;
    while (improved && now_s() < deadline) {
        improved = 0;
        for (int axis = 0; axis < 3 && now_s() < deadline; axis++) {
            const int *vals = axis == 0 ? vq : axis == 1 ? vk : vs;
            const int nvals = axis == 0 ? nq : axis == 1 ? nk : ns;
            if (nvals <= 1) continue;
            int idx = 0;
            const int curv = axis == 0 ? cur.bq : axis == 1 ? cur.bk : cur.split;
            for (int i = 0; i < nvals; i++)
                if (vals[i] == curv) idx = i;
            for (int dir = 1; dir >= -1; dir -= 2) {
                int moved = 0;
                for (int j = idx + dir; j >= 0 && j < nvals && now_s() < deadline; j += dir) {
                    point cand = cur;
                    if (axis == 0) cand.bq = vals[j];
                    if (axis == 1) cand.bk = vals[j];
                    if (axis == 2) cand.split = vals[j];
                    point *seen = find_point(&set, cand.bq, cand.bk, cand.split);
                    if (!seen) {
                        if (set.n == MAX_POINTS) break;
                        set.pts[set.n] = cand;
                        measure(tx, cd, k, &set.pts[set.n], 0, measure_cap(deadline, set.n),
                                "search");
                        seen = &set.pts[set.n++];
                    }
                    if (seen->status == 1 && seen->gflops > cur.gflops * MOVE_MARGIN) {
                        cur = *seen;
                        moved = improved = 1;
                        idx = j;
                    } else {
                        break;
                    }
                }
                if (moved) break; /* no need to try the other direction */
            }
        }
    }
    kr->best = cur;
}

/* The search of one class until search_end: knob-less kernels take one
 * measurement each; the tunable ones share the rest of the time. Kernels not
 * in the class keep status 0 (never ranked). */
void search_class(tune_run *r, const mha_shape_class *cl, double search_end) {
    int ntun = 0;
    for (int i = 0; i < r->nk; i++) {
        kernel_result *kres = &r->kr[i];
        kres->prior = kres->best = (point){0};
        kres->in_class = kernel_in_class(r, kres->k, cl, &r->cd.p);
        ntun += kres->tunable && kres->in_class;
    }
    for (int i = 0; i < r->nk; i++) {
        if (r->kr[i].tunable || !r->kr[i].in_class) continue;
        search_kernel(&r->tx, &r->cd, &r->kr[i], search_end, 0);
    }
    int done_tun = 0;
    for (int i = 0; i < r->nk; i++) {
        if (!r->kr[i].tunable || !r->kr[i].in_class) continue;
        const double left = search_end - now_s();
        const double end = now_s() + (left > 0 ? left / (ntun - done_tun) : 0);
        done_tun++;
        search_kernel(&r->tx, &r->cd, &r->kr[i], end, split_searched(r->kr[i].k, cl));
    }
}

/* The final round: every contender's prior and best (and the no-table
 * default dkern), timed round-robin until class_end so a burst of other load
 * hits them alike (rounds past MIN_REPS only while the next one fits);
 * repeated once when other processes held the machine and the class's time
 * left holds another round as long. Returns their share during the last pass
 * (-1 unknown). */
double final_round(tune_run *r, const mha_kernel *dkern, double class_end) {
    double top = 0;
    for (int i = 0; i < r->nk; i++)
        if (r->kr[i].best.status == 1 && r->kr[i].best.gflops > top) top = r->kr[i].best.gflops;
    const mha_kernel *fk[2 * 32];
    point *fp[2 * 32];
    int nf = 0;
    for (int i = 0; i < r->nk; i++) {
        kernel_result *kres = &r->kr[i];
        if (kres->best.status != 1) continue;
        if (kres->best.gflops < FINAL_FRACTION * top && kres->k != dkern) continue;
        fk[nf] = kres->k;
        fp[nf++] = &kres->best;
        if (kres->prior.status == 1 && !same_knobs(&kres->prior, &kres->best)) {
            fk[nf] = kres->k;
            fp[nf++] = &kres->prior;
        }
    }
    const double t0 = now_s();
    double other = interleave(&r->tx, &r->cd, fk, fp, nf, class_end - t0, "final");
    if (other > MEAS_POLICY.contended_share) {
        const double took = now_s() - t0;
        if (now_s() + took <= class_end) {
            printf("tune: %s: other processes used %.0f%% of the machine; repeating the final "
                   "round\n",
                   r->tx.cls, other * 100);
            other = interleave(&r->tx, &r->cd, fk, fp, nf, class_end - now_s(), "final");
        } else {
            printf("tune: %s: other processes used %.0f%% of the machine; no time left in the "
                   "class's share to repeat the final round (flagged)\n",
                   r->tx.cls, other * 100);
        }
    }
    return other;
}

/* The search's best is the maximum of noisy samples, so a move away from the
 * prior (the cache model's knobs) stands only if, in the final round, it wins
 * by REPLACE_MARGIN and its interval lies wholly above the prior's: a tie keeps
 * the default. */
void keep_moves_that_held(tune_run *r) {
    for (int i = 0; i < r->nk; i++) {
        kernel_result *kres = &r->kr[i];
        if (kres->best.status != 1 || kres->prior.status != 1 ||
            same_knobs(&kres->prior, &kres->best))
            continue;
        const point *b = &kres->best, *p = &kres->prior;
        const int beyond = intervals_order(b->lo, b->hi, p->lo, p->hi) == STATS_A_LARGER;
        if (!(b->gflops > p->gflops * REPLACE_MARGIN) || !beyond) kres->best = kres->prior;
    }
}

/* Whether kernel result a ranks above b: a kernel timed in the final round
 * above one that was not (a search's number is the maximum of noisy
 * medians, and one in an earlier moment; it once beat the final round's
 * median of the kernel that had put it out of the round), then the rate. */
static int ranks_above(const kernel_result *a, const kernel_result *b) {
    const int fa = a->best.hi > 0, fb = b->best.hi > 0;
    return fa != fb ? fa : a->best.gflops > b->best.gflops;
}

/* The indices of the fastest measured kernel and the next one (-1: none). */
void rank_kernels(const tune_run *r, int *wi, int *ri) {
    *wi = *ri = -1;
    for (int i = 0; i < r->nk; i++) {
        if (r->kr[i].best.status != 1) continue;
        if (*wi < 0 || ranks_above(&r->kr[i], &r->kr[*wi])) {
            *ri = *wi;
            *wi = i;
        } else if (*ri < 0 || ranks_above(&r->kr[i], &r->kr[*ri])) {
            *ri = i;
        }
    }
}

/* The kernel mha_select runs without a table (dkern) keeps the class unless
 * the fastest beats it as a move must beat the cache model's knobs: by
 * REPLACE_MARGIN and with its interval wholly above; otherwise dkern wins and
 * the fastest is the runner-up (the two tie: winner_ties). */
void keep_default_kernel(const tune_run *r, const mha_kernel *dkern, int *wi, int *ri) {
    if (*wi < 0 || r->kr[*wi].k == dkern) return;
    int di = -1;
    for (int i = 0; i < r->nk; i++)
        if (r->kr[i].k == dkern && r->kr[i].best.status == 1 && r->kr[i].best.hi > 0) di = i;
    if (di < 0) return;
    const point *w = &r->kr[*wi].best, *d = &r->kr[di].best;
    if (w->hi > 0 && w->gflops > d->gflops * REPLACE_MARGIN &&
        intervals_order(w->lo, w->hi, d->lo, d->hi) == STATS_A_LARGER)
        return;
    *ri = *wi;
    *wi = di;
}

/* What mha_select would run without a table: dkern (flash at the active ISA)
 * with cache-model blocks; its measured prior when it was searched, else
 * measured now. status is 1 when there is a number. */
point default_point(tune_run *r, const mha_kernel *dkern) {
    const kernel_result *dres = NULL;
    for (int i = 0; i < r->nk; i++)
        if (r->kr[i].k == dkern && r->kr[i].prior.status == 1) dres = &r->kr[i];
    point dp = {0};
    if (dres) {
        dp = dres->prior;
        if (same_knobs(&dres->best, &dp)) dp = dres->best; /* its latest measurement */
    } else if (dkern) {
        mha_options def = {.threads = r->tx.threads};
        (void)mha_resolve_options(dkern, &r->cd.p, &def, &def);
        dp.bq = def.block_q;
        dp.bk = def.block_kv;
        measure(&r->tx, &r->cd, dkern, &dp, 0, 0, "default");
    }
    return dp;
}

/* The winner and the runner-up tie when both were measured in the final
 * round and their intervals overlap (stats.h) or their rates are within
 * REPLACE_MARGIN (what would not move the table off a default): the table says
 * so. */
int winner_ties(const tune_run *r, int wi, int ri) {
    if (ri < 0) return 0;
    const point *w = &r->kr[wi].best, *u = &r->kr[ri].best;
    if (!(w->hi > 0 && u->hi > 0)) return 0;
    const double a = w->gflops > u->gflops ? w->gflops : u->gflops,
                 b = w->gflops > u->gflops ? u->gflops : w->gflops;
    return intervals_order(w->lo, w->hi, u->lo, u->hi) == STATS_TIE || a <= b * REPLACE_MARGIN;
}
