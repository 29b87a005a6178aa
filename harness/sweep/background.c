/* background.c - a steady background told from bursts (issue 29): on a
 * runner whose cores are shared the whole run, the interference evidence's
 * absolute rule marks nearly every repetition disturbed, and a sweep (and a
 * comparison of two of them) would judge nothing. Such a background slows
 * both sides of a comparison alike; what still spoils a repetition is a
 * burst above it. The rule is the measurement core's (meas_core.h:
 * meas_background_steady, meas_burst); this file applies it to a run. */
#include "sweep.h"

#include "stats.h"

double background_rate(double preempted, double window_s, int threads) {
    return window_s > 0 ? preempted / window_s / (threads > 0 ? threads : 1) : 0;
}

/* The first pass's median preemption rate at this thread count (0 if none). */
static double median_rate(const run_state *rs, int threads) {
    for (int i = 0; i < rs->nmed; i++)
        if (rs->med_threads[i] == threads) return rs->med_rate[i];
    return 0;
}

int background_judge(const run_state *rs, int threads, double prate, double stolen,
                     int disturbed_abs) {
    if (!rs->steady) return disturbed_abs;
    return meas_burst(prate, median_rate(rs, threads), stolen);
}

void background_decide(run_state *rs, bench *benches, int nbench) {
    meas_load now;
    meas_load_mark(&now);
    rs->other_share = meas_load_share(&rs->load0, &now);
    int reps = 0, dist = 0;
    for (int i = 0; i < nbench; i++) {
        reps += benches[i].nres;
        for (int r = 0; r < benches[i].nres; r++) dist += benches[i].dist[r];
    }
    rs->abs_disturbed = reps ? (double)dist / reps : 0;
    if (!meas_background_steady(rs->other_share, rs->abs_disturbed)) return;
    /* The run's own level: the median rate per thread count. */
    double *x = sweep_realloc(NULL, (size_t)(reps ? reps : 1), sizeof *x);
    rs->nmed = 0;
    for (int i = 0; i < nbench; i++) {
        const int t = benches[i].threads;
        if (benches[i].nres == 0) continue;
        int seen = 0;
        for (int k = 0; k < rs->nmed; k++) seen |= rs->med_threads[k] == t;
        if (seen || rs->nmed == (int)(sizeof rs->med_threads / sizeof *rs->med_threads)) continue;
        int n = 0;
        for (int j = 0; j < nbench; j++)
            if (benches[j].threads == t)
                for (int r = 0; r < benches[j].nres; r++) x[n++] = benches[j].prate[r];
        rs->med_threads[rs->nmed] = t;
        rs->med_rate[rs->nmed++] = n ? median_inplace(x, n) : 0;
    }
    free(x);
    rs->steady = 1;
    for (int i = 0; i < nbench; i++)
        for (int r = 0; r < benches[i].nres; r++)
            benches[i].dist[r] = (unsigned char)background_judge(
                rs, benches[i].threads, benches[i].prate[r], benches[i].stolen[r], 1);
    if (rs->prog.mode != PROGRESS_QUIET) {
        printf("a steady background: other processes held %.0f%% of the cores over the first "
               "pass and the evidence marked %.0f%% of its repetitions; each is judged against "
               "the run's own level from here (a burst above it is retaken)\n",
               100 * rs->other_share, 100 * rs->abs_disturbed);
        fflush(stdout);
    }
}

void background_rows(run_state *rs) {
    const size_t n = json_object_array_length(rs->rows.rows);
    int reps = 0, bursts = 0;
    for (size_t i = 0; i < n; i++) {
        json_object *row = json_object_array_get_idx(rs->rows.rows, i);
        if (!json_object_object_get_ex(row, "disturbed", NULL) || !results_row_is_iteration(row))
            continue;
        const int abs = results_row_num(row, "disturbed", 0) > 0;
        json_object_object_add(row, "disturbed_abs", json_object_new_double(abs));
        if (!rs->steady) continue;
        const int threads = (int)results_row_num(row, "threads", 1);
        const double prate = background_rate(results_row_num(row, "preempted", 0),
                                             results_row_num(row, "window_s", 0), threads);
        const int burst =
            background_judge(rs, threads, prate, results_row_num(row, "stolen_ms", 0), abs);
        json_object_object_add(row, "disturbed", json_object_new_double(burst));
        reps++;
        bursts += burst;
    }
    char buf[400];
    if (rs->steady)
        snprintf(buf, sizeof buf,
                 "steady: other processes held %.0f%% of the cores over the first pass and the "
                 "evidence's absolute rule marked %.0f%% of its repetitions (disturbed_abs); "
                 "disturbed marks the bursts above the run's own level: %d of %d repetitions",
                 100 * rs->other_share, 100 * rs->abs_disturbed, bursts, reps);
    else if (rs->other_share >= 0)
        snprintf(buf, sizeof buf,
                 "none: other processes held %.0f%% of the cores over the first pass; disturbed "
                 "is the evidence's absolute rule (disturbed_abs the same)",
                 100 * rs->other_share);
    else
        snprintf(buf, sizeof buf,
                 "none: the first pass was too short to tell the load; disturbed is the "
                 "evidence's absolute rule (disturbed_abs the same)");
    rows_context(&rs->rows, "mha_background", buf);
}
