/* attend.h - what the two files of `mhabench attend` share: its inputs as
 * read, and the packed and paged layouts' steps (attend_layout.c: which
 * layout the flags ask for, the int32 index files, the shapes, the problem's
 * layout fields and the views). Internal to harness/io/. */
#ifndef MHA_HARNESS_IO_ATTEND_H
#define MHA_HARNESS_IO_ATTEND_H

#include <stdint.h>

#include "fmt_npy.h"
#include "mha.h"

/* attend's tensors: q, k and v, in the order they are read. */
static const char *const ATTEND_NAME[3] = {"q", "k", "v"};

typedef struct {
    const char *path[3];       /* --q, --k, --v */
    const char *scale_path[2]; /* --k-scale, --v-scale */
    const char *kv_dtype_s;    /* --kv-dtype */
    const char *window_s;      /* --window L,R */
    const char *softcap_s;     /* --softcap C */
    const char *sinks_path;    /* --sinks S.npy */
    int window;                /* parsed: a window given, its edges */
    int64_t window_lr[2];
    float softcap;
    npy_array sinks;  /* '<f4' [H] */
    mha_dtype dt, kv; /* the problem's dtype and K/V storage */
    npy_array a[3];   /* as read */
    npy_array sc[2];  /* int8 scales as read */
    void *conv[3];    /* data converted on load, else NULL */
    float *qsc[2];    /* int8 scales made on load, else NULL */
    /* the layout: --cu-seqlens-q, --cu-seqlens-kv, --block-table, --seq-lens-kv
     * (IX_*), and --k-cache / --v-cache (in path[1], path[2] once chosen) */
    const char *ix_path[4], *cache_path[2];
    npy_array ix[4]; /* '<i4' */
    int layout;      /* mha_layout */
} attend_inputs;
enum { IX_CU_Q, IX_CU_KV, IX_TABLE, IX_LENS };

/* The data of tensor i as the kernel reads it, and its int8 scales. */
static inline const void *attend_data(const attend_inputs *in, int i) {
    return in->conv[i] ? in->conv[i] : in->a[i].raw;
}
static inline const float *attend_scales(const attend_inputs *in, int i) {
    if (i == 0 || in->kv != MHA_I8) return NULL;
    return in->qsc[i - 1] ? in->qsc[i - 1] : in->sc[i - 1].data;
}

/* The steps of attend_layout.c; those returning int give 0, or -1 after a
 * message naming the flag or file at fault.
 * The layout the flags ask for; k and v come from --k/--v or --k-cache/--v-cache. */
int attend_choose_layout(attend_inputs *in);
/* The '<i4' index files, their lengths against each other. */
int attend_load_index_files(attend_inputs *in);
/* q [Tq,H,d]; k, v [Tkv,G,d] or pools [NB,BS,G,d] alike but for d_v. */
int attend_check_layout_shapes(const attend_inputs *in);
/* The index values against p (the library's checks), naming the flag. */
int attend_check_index_values(const attend_inputs *in, const mha_problem *p, const mha_extras *x);
/* p's layout fields and x's index arrays from the checked inputs. */
void attend_layout_problem(const attend_inputs *in, mha_problem *p, mha_extras *x);
/* q, k, v and out as views of a packed or paged p. */
void attend_layout_views(const attend_inputs *in, const mha_problem *p, void *out, mha_tensor t[3],
                         mha_tensor_mut *to);

#endif
