/* run.c - the classes in turn: each one's share of the budget, search,
 * final round, entry and line; then the confirmation of the departures from
 * the default. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stats.h"
#include "util.h"
#include "tune.h"

/* The class's line: winner, runner-up, the default with the gain over it, and
 * the time spent (search + final round) against the class's share. */
static void print_class_line(const tune_run *r, int wi, int ri, const point *dp) {
    const kernel_result *w = &r->kr[wi];
    printf("%-27s %-13s bq %3d bk %4d split %d %8.1f GFLOP/s", r->tx.cls, mha_kernel_name(w->k),
           w->best.bq, w->best.bk, w->best.split, w->best.gflops);
    if (ri >= 0)
        printf("  |%s %-13s %8.1f", winner_ties(r, wi, ri) ? " tie" : "",
               mha_kernel_name(r->kr[ri].k), r->kr[ri].best.gflops);
    if (dp->status == 1)
        printf("  | default bq %3d bk %4d %8.1f (%+.1f%%)", dp->bq, dp->bk, dp->gflops,
               dp->gflops > 0 ? (w->best.gflops / dp->gflops - 1) * 100 : 0.0);
    printf("  | %.1f+%.1f s of %.1f\n", r->t_search, r->t_final, r->share);
    fflush(stdout);
}

/* Tunes class ci with its share of the budget left: search, final round,
 * table entry and printed line. Returns TUNE_OK, TUNE_CHECK_FAILED when no
 * kernel passed (the run goes on), or TUNE_BAD_INPUT when the class's data
 * could not be prepared (the run stops); messages printed. */
static tune_status tune_class(tune_run *r, int ci) {
    const mha_shape_class *cl = &r->classes[ci];
    mha_class_name(cl, r->cls_name, sizeof r->cls_name);
    r->tx.cls = r->cls_name;
    r->tx.threads = cl->threads == 1 ? 1 : r->tall;
    /* The class begins here: preparing its data (the oracle's output, seconds
     * in a sanitizer build) is part of its cost and of its share, and the
     * share a started class takes is what was left before it began (a first
     * class whose preparation outlasted a 1 s budget was recorded with a share
     * of 0: the ASan run of test_cli on the Emerald Rapids VM). */
    const double t0 = now_s();
    if (!class_data_prepare(&r->cd, cl, (uint64_t)r->a.seed)) {
        errorf("tune: cannot prepare the data of class %s (out of memory?)", r->cls_name);
        return TUNE_BAD_INPUT;
    }
    /* per class: what mha_select would run without a table */
    const mha_kernel *dkern = mha_default_kernel(&r->cd.p);
    r->tx.cost = class_cost(cl, r->tall);
    /* What is left of the budget, shared by the classes left: each gets its
     * floor (class_floor, as far as known) and an equal part of the rest, so
     * a class that overran shrinks the others' shares rather than the run
     * growing, and the dear classes at the end still find their floors. */
    const double remaining = r->a.budget * (1 - CONFIRM_FRACTION) - (t0 - r->t_begin);
    double floors = 0;
    for (int j = ci; j < r->ncls; j++) floors += class_floor(r, &r->classes[j]);
    const double own = class_floor(r, cl), pool = remaining - floors;
    double share = own + (pool > 0 ? pool / (r->ncls - ci) : 0);
    if (share > remaining) share = remaining > 0 ? remaining : 0;
    const double class_end = t0 + share;
    meas_load class_m0, class_m1;
    meas_load_mark(&class_m0);
    search_class(r, cl, t0 + 0.75 * share); /* a quarter for the final round */
    const double t1 = now_s();
    const double other = final_round(r, dkern, class_end);
    meas_load_mark(&class_m1);
    const double class_other = meas_load_share(&class_m0, &class_m1);
    if (other > MEAS_POLICY.contended_share || class_other > MEAS_POLICY.contended_share)
        r->contended++;
    keep_moves_that_held(r);
    int wi, ri;
    rank_kernels(r, &wi, &ri);
    keep_default_kernel(r, dkern, &wi, &ri);
    if (wi < 0) {
        errorf("tune: no kernel passed verification and timing on class %s", r->cls_name);
        return TUNE_CHECK_FAILED;
    }
    const point dp = default_point(r, dkern);
    r->share = share;
    r->t_search = t1 - t0;
    r->t_final = now_s() - t1;
    json_object *entry = class_entry(r, cl, class_other, wi, ri, dkern, &dp);
    json_object_array_add(r->jclasses, entry);
    print_class_line(r, wi, ri, &dp);
    r->tuned++;
    const kernel_result *w = &r->kr[wi];
    if (dkern && dp.status == 1 && (w->k != dkern || !same_knobs(&w->best, &dp)) &&
        r->npend < MHA_CLASS_MAX)
        r->pend[r->npend++] = (departure){.cl = *cl,
                                          .wk = w->k,
                                          .dk = dkern,
                                          .wp = w->best,
                                          .dp = dp,
                                          .final_s = r->t_final,
                                          .entry = entry};
    return TUNE_OK;
}

/* A departure from the default (another kernel or other knobs than what
 * mha_select runs without a table) won one final round; a burst of other
 * load in that moment can favour one configuration over another (2-thread
 * classes of sub-millisecond calls whose default knobs ran 17% slower for a
 * stretch of the run than in the next run), so at the end of the run, seconds
 * to a minute later, the winner and the default are timed again, round-robin
 * as long as the class's final round took. The entry stands only if the
 * winner again wins by REPLACE_MARGIN beyond the interval; otherwise the
 * default becomes the winner and the two a tie. "confirmed" in the entry:
 * "held", "reverted", or "no time" (the budget left could not hold it; the
 * entry stands as measured once). */
static void confirm_departures(tune_run *r) {
    const double end = r->t_begin + r->a.budget; /* optional work: not into the slack */
    int held = 0, reverted = 0, no_time = 0;
    for (int i = 0; i < r->npend; i++) {
        departure *pd = &r->pend[i];
        mha_class_name(&pd->cl, r->cls_name, sizeof r->cls_name);
        r->tx.cls = r->cls_name;
        r->tx.threads = pd->cl.threads == 1 ? 1 : r->tall;
        const double cap = pd->final_s > 0.05 ? pd->final_s : 0.05;
        if (now_s() + cap > end || !class_data_prepare(&r->cd, &pd->cl, (uint64_t)r->a.seed)) {
            json_object_object_add(pd->entry, "confirmed", json_object_new_string("no time"));
            no_time++;
            continue;
        }
        point wp = pd->wp, dp = pd->dp;
        wp.hi = dp.hi = 0; /* no interval unless timed now (else: reverted) */
        const mha_kernel *ks[2] = {pd->wk, pd->dk};
        point *ps[2] = {&wp, &dp};
        interleave(&r->tx, &r->cd, ks, ps, 2, cap, "confirm");
        const int holds = wp.hi > 0 && dp.hi > 0 && wp.gflops > dp.gflops * REPLACE_MARGIN &&
                          intervals_order(wp.lo, wp.hi, dp.lo, dp.hi) == STATS_A_LARGER;
        printf("tune: confirm %-27s %s bq %d bk %d split %d %.1f vs default %s bq %d bk %d "
               "%.1f (%+.1f%%): %s\n",
               r->cls_name, mha_kernel_name(pd->wk), wp.bq, wp.bk, wp.split, wp.gflops,
               mha_kernel_name(pd->dk), dp.bq, dp.bk, dp.gflops,
               dp.gflops > 0 ? (wp.gflops / dp.gflops - 1) * 100 : 0.0,
               holds ? "held" : "not held, the default stays");
        if (holds) {
            json_object_object_add(pd->entry, "confirmed", json_object_new_string("held"));
            held++;
            continue;
        }
        json_object_object_add(pd->entry, "winner", choice_json(pd->dk, &dp));
        json_object_object_add(pd->entry, "runner_up", choice_json(pd->wk, &wp));
        json_object_object_add(pd->entry, "tie", json_object_new_boolean(1));
        json_object_object_add(pd->entry, "confirmed", json_object_new_string("reverted"));
        reverted++;
    }
    if (r->npend)
        printf("tune: %d departures from the default confirmed: %d held, %d reverted to the "
               "default, %d not timed again (no time left)\n",
               r->npend, held, reverted, no_time);
}

/* Tunes every class in turn, within the budget. Returns TUNE_OK, else the
 * last class's failure; the run stops at a TUNE_BAD_INPUT. */
tune_status tune_classes(tune_run *r) {
    char tall[16] = ""; /* "1", "2", "1,2": the thread counts tuned */
    if (r->tall) snprintf(tall, sizeof tall, "%d", r->tall);
    printf("tune: %d classes (%s), %d kernels, budget %g s, threads %s%s%s, cpu %s\n", r->ncls,
           r->a.set, r->nk, (double)r->a.budget, r->t1 ? "1" : "", r->t1 && r->tall ? "," : "",
           tall, r->key);
    printf("tune: log %s (named when the run ends)\n", r->log_path);
    r->jclasses = json_object_new_array();
    r->t_begin = now_s();
    getloadavg(r->load0, 3);
    if (r->load0[0] > 0.5)
        printf("tune: load average %.2f at the start: other processes compete for the cores; "
               "their share is measured and flagged per class (other_load)\n",
               r->load0[0]);
    tune_status st = TUNE_OK;
    char skipped[512] = "";
    int nskip = 0;
    for (int ci = 0; ci < r->ncls && st != TUNE_BAD_INPUT; ci++) {
        /* A class costs its kernels' first measurements and a final round
         * of MIN_REPS whatever its share: one whose estimate does not fit in
         * what is left of the budget (and BUDGET_SLACK) is not started. It
         * keeps the cache model, or the entry of the table at --out. */
        const double elapsed = now_s() - r->t_begin, budget = r->a.budget * (1 - CONFIRM_FRACTION);
        if (ci > 0 && (elapsed >= budget || elapsed + class_floor(r, &r->classes[ci]) >
                                                budget + r->a.budget * BUDGET_SLACK)) {
            char name[64];
            mha_class_name(&r->classes[ci], name, sizeof name);
            const size_t n = strlen(skipped);
            if (nskip < 6)
                snprintf(skipped + n, sizeof skipped - n, "%s%s", nskip ? ", " : "", name);
            else if (nskip == 6)
                snprintf(skipped + n, sizeof skipped - n, ", ...");
            nskip++;
            continue;
        }
        const tune_status cs = tune_class(r, ci);
        if (cs != TUNE_OK) st = cs;
    }
    if (nskip)
        printf("tune: %d of %d classes not tuned: what is left of the budget cannot hold their "
               "first measurements (%s); a larger --budget covers them\n",
               nskip, r->ncls, skipped);
    if (st != TUNE_BAD_INPUT) confirm_departures(r);
    return st;
}
