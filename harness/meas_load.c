/* meas_load.c - the measurement core's load check (meas_core.h): other
 * processes' share of the machine over a window, from /proc/stat and
 * /proc/self/stat; tune's contended classes and the sweep's mha_load. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "stats.h"
#include "util.h"
#include "meas_core.h"

void meas_load_mark(meas_load *m) {
    m->wall = now_s();
    m->busy = m->self = 0;
    FILE *f = fopen("/proc/stat", "r");
    if (f) {
        unsigned long long v[8] = {0};
        if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                   &v[4], &v[5], &v[6], &v[7]) == 8)
            m->busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7]; /* not idle, iowait */
        fclose(f);
    }
    f = fopen("/proc/self/stat", "r");
    if (f) {
        char buf[1024];
        const size_t n = fread(buf, 1, sizeof buf - 1, f);
        buf[n] = '\0';
        const char *p = strrchr(buf, ')'); /* the command name may hold spaces */
        unsigned long long ut = 0, st = 0;
        if (p &&
            sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) == 2)
            m->self = ut + st;
        fclose(f);
    }
}

double meas_load_share(const meas_load *a, const meas_load *b) {
    const double wall = b->wall - a->wall;
    const long hz = sysconf(_SC_CLK_TCK), ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (wall < MEAS_MIN_LOAD_WINDOW || hz <= 0 || ncpu <= 0 || !a->busy || !b->busy) return -1;
    const double other = (double)(b->busy - a->busy) - (double)(b->self - a->self);
    const double share = other / (double)hz / (wall * (double)ncpu);
    return share < 0 ? 0 : share;
}
