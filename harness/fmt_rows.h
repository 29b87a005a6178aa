/* fmt_rows.h - the sweep's result file after Google Benchmark wrote it:
 * the rows of follow-up passes (retakes of disturbed repetitions, extra
 * repetitions where the median's interval was still wide) appended to their
 * benchmarks, and one summary per benchmark for a reader to judge it by. */
#ifndef MHA_HARNESS_FMT_ROWS_H
#define MHA_HARNESS_FMT_ROWS_H

#include <stddef.h>

#include "mha_private.h"

/* Appends the iteration rows of the pass files (Google Benchmark JSON in
 * the unnamed files of passes[0..npasses)) to the result file of main,
 * renumbers repetition_index / repetitions per name over all of them, and
 * adds a top-level "mha_rows" array: per benchmark name its repetitions,
 * disturbed (rows with counter disturbed = 1, which the statistics leave out
 * while a clean row remains), used, median_ns, interval_ns (95%, order
 * statistics), min_ns, cv (over the used rows), and the same for GFLOPS
 * (gflops_median, gflops_interval). Rewrites main from its start. Returns
 * MHA_OK, or MHA_EIO / MHA_EFORMAT / MHA_ENOMEM with a reason. */
mha_status rows_finish(mha_out *main, mha_out *passes, int npasses, char *why, size_t len);

#endif
