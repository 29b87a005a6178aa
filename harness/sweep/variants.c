/* variants.c - the sweep's attention-variant axes (--window, --softcap,
 * --sinks, --head-dim-v: docs/attention-variants.md): their lists, the grid
 * shapes they multiply, and how a variant row says what it is (its name's
 * suffix, its progress text, its row fields). A row without variants is
 * named and written exactly as before. */
#include "sweep.h"

int build_variant_axes(const sweep_args *a, sweep_axes *x) {
    x->windows[0] = (window_spec){0, 0, 0};
    x->softcaps[0] = 0;
    x->sinks[0] = 0;
    x->dims_v[0] = 0;
    x->pages[0] = 0;
    x->rags[0] = 0;
    x->nwindows = x->nsoftcaps = x->nsinks = x->ndims_v = x->npages = x->nrags = 1;
    if ((a->window && (x->nwindows = parse_window_list("sweep: --window", a->window, x->windows,
                                                       MAX_LIST)) < 0) ||
        (a->softcap && (x->nsoftcaps = parse_double_list("sweep: --softcap", a->softcap, 0, 1e30,
                                                         x->softcaps, MAX_LIST)) < 0) ||
        (a->sinks &&
         (x->nsinks = parse_i64_list("sweep: --sinks", a->sinks, 0, 1, x->sinks, MAX_LIST)) < 0) ||
        (a->dims_v && (x->ndims_v = parse_i64_list("sweep: --head-dim-v", a->dims_v, 0, 65536,
                                                   x->dims_v, MAX_LIST)) < 0) ||
        (a->page_size && (x->npages = parse_i64_list("sweep: --page-size", a->page_size, 0, 1 << 20,
                                                     x->pages, MAX_LIST)) < 0) ||
        (a->ragged && (x->nrags = parse_i64_list("sweep: --ragged", a->ragged, 0, 1 << 30, x->rags,
                                                 MAX_LIST)) < 0))
        return -1;
    x->nsinks = dedupe(x->sinks, x->nsinks);
    x->npages = dedupe(x->pages, x->npages);
    x->nrags = dedupe(x->rags, x->nrags);
    x->variant_axes_given =
        a->window || a->softcap || a->sinks || a->dims_v || a->page_size || a->ragged;
    return 0;
}

/* Appends base once per combination of the variant axes to *shapes (n
 * so far, *cap allocated); a d_v equal to d is the default (0), so
 * `--head-dim 64 --head-dim-v 0,64` makes one shape, not two of one name.
 * Returns the new count. */
int add_grid_shape(shape **shapes, int n, int *cap, const shape *base, const sweep_axes *x) {
    const int first = n;
    for (int iw = 0; iw < x->nwindows; iw++)
        for (int ic = 0; ic < x->nsoftcaps; ic++)
            for (int is = 0; is < x->nsinks; is++)
                for (int iv = 0; iv < x->ndims_v * x->npages * x->nrags; iv++) {
                    shape s = *base;
                    s.page = x->pages[iv / x->ndims_v % x->npages];
                    s.ragged = x->rags[iv / (x->ndims_v * x->npages)];
                    s.window = x->windows[iw].on;
                    s.window_left = x->windows[iw].left;
                    s.window_right = x->windows[iw].right;
                    s.softcap = x->softcaps[ic];
                    s.sinks = (int)x->sinks[is];
                    s.head_dim_v =
                        x->dims_v[iv % x->ndims_v] == s.d ? 0 : x->dims_v[iv % x->ndims_v];
                    int dup = 0;
                    for (int j = first; j < n && !dup; j++)
                        dup = memcmp(&(*shapes)[j], &s, sizeof s) == 0;
                    if (dup) continue;
                    if (n == *cap) {
                        *cap *= 2;
                        *shapes = sweep_realloc(*shapes, (size_t)*cap, sizeof **shapes);
                    }
                    (*shapes)[n++] = s;
                }
    return n;
}

/* The variant part of a row's name: "" without variants (every name as
 * before), else "/w<L>:<R>", "/cap<C>", "/sinks", "/dv<D>", "/ragged<L>",
 * "/page<BS>" in that order. */
const char *variant_part(const shape *s, const mha_problem *p, char *buf, size_t len) {
    size_t n = 0;
    buf[0] = '\0';
    if (p->window && n < len)
        n += (size_t)snprintf(buf + n, len - n, "/w%lld:%lld", (long long)p->window_left,
                              (long long)p->window_right);
    if (p->softcap != 0 && n < len) n += (size_t)snprintf(buf + n, len - n, "/cap%g", p->softcap);
    if (p->sinks && n < len) n += (size_t)snprintf(buf + n, len - n, "/sinks");
    const int64_t dv = mha_problem_head_dim_v(p);
    if (dv != p->head_dim && n < len)
        n += (size_t)snprintf(buf + n, len - n, "/dv%lld", (long long)dv);
    if (s->ragged > 0 && n < len)
        n += (size_t)snprintf(buf + n, len - n, "/ragged%lld", (long long)s->ragged);
    if (p->layout == MHA_LAYOUT_PAGED && n < len)
        snprintf(buf + n, len - n, "/page%lld", (long long)p->block_size);
    return buf;
}

/* A variant row's fields for the result file (fmt_rows.h), or NULL for a
 * row without variants (its fields as before: tests/data/sweep_keys.txt). */
const mha_problem *variant_fields(const shape *s, mha_problem *p) {
    if (s->layer || !meas_has_variant(s)) return NULL;
    *p = meas_problem(s);
    return p;
}
