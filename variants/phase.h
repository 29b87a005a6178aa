/* phase.h - optional per-phase cycle counters for the kernels (meson option
 * phase_timing): where the time goes, split into packing/output, Q.K^T,
 * softmax and P.V. Compiled out entirely by default. */
#ifndef MHA_VARIANTS_PHASE_H
#define MHA_VARIANTS_PHASE_H
#include <stdint.h>

enum { PHASE_PACK = 0, PHASE_QK = 1, PHASE_SOFTMAX = 2, PHASE_PV = 3, PHASE_COUNT = 4 };

#ifdef MHA_PHASE_TIMING
#include <omp.h>
#include <x86intrin.h>
enum { PHASE_MAX_THREADS = 256 };
/* One cache line per thread: no false sharing between counters. */
extern struct mha_phase_slot {
    _Alignas(64) uint64_t cycles[8];
} mha_phase_slots[PHASE_MAX_THREADS];
#define PHASE_START() uint64_t phase_t_ = __rdtsc()
/* the clock restarted where the cycles since the last PHASE belong to no phase
 * (they were counted elsewhere, e.g. by a callee's own PHASE_START) */
#define PHASE_RESTART() (phase_t_ = __rdtsc())
#define PHASE(id)                                                                                  \
    do {                                                                                           \
        const uint64_t phase_n_ = __rdtsc();                                                       \
        mha_phase_slots[omp_get_thread_num() % PHASE_MAX_THREADS].cycles[id] +=                    \
            phase_n_ - phase_t_;                                                                   \
        phase_t_ = phase_n_;                                                                       \
    } while (0)
#else
#define PHASE_START() ((void)0)
#define PHASE_RESTART() ((void)0)
#define PHASE(id) ((void)0)
#endif
#endif
