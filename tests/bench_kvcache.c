/* bench_kvcache.c - decode over a KV cache stored as fp32, bf16, fp16 and
 * int8, timed in one interleaved run (issue 14's target: Nq = 1, Nkv = 4096,
 * H = 32, KV heads 32 and 8, d = 128). Each cache is allocated and filled
 * once; every repetition runs each dtype once in turn, so machine noise hits
 * all alike and each call finds its cache evicted by the others (a serving
 * step reads each layer's cache once). Bytes are counted at the storage
 * width: K + V elements x dtype size + int8 scales + Q and O. The read
 * bandwidth of the level the working set fits is measured before and after
 * (harness/mach_info.c's probe). Pin the threads (README: unpinned, both
 * threads of a call sometimes share a vCPU). --also K adds K's rows to the
 * same rotation. Each kernel gets each cache dtype it takes, with Q/O fp32 if
 * it takes that, else in the cache's dtype (decode.avx512bf16: bf16
 * Q/K/V/O), so a kernel that takes only half types is timed against the
 * fp32 row it must beat.
 * A benchmark, not a test:
 *   OMP_PROC_BIND=true build/tests/bench_kvcache [--kernel decode.avx512] [--threads 2] [--reps 21]
 *                             [--kv-heads 32,8] [--seq-kv 4096] [--also decode.avx512bf16] */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mach_info.h"
#include "mha.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static const mha_dtype KVT[] = {MHA_F32, MHA_BF16, MHA_F16, MHA_I8};
enum { NT = 4, MAX_REPS = 201 };

typedef struct {
    const mha_kernel *kern;
    mha_tensor qt;
    mha_tensor_mut ot;
    mha_problem p;
    void *k, *v;
    float *ks, *vs;
    mha_tensor kt, vt;
    void *ws;
    size_t wsz;
    double bytes;
    double t[MAX_REPS];
} bench_case;

static int run_shape(const mha_kernel *kern, const mha_kernel *also, int64_t H, int64_t G,
                     int64_t N, int64_t d, int threads, int reps, const machine_info *mi) {
    const size_t nkv = (size_t)(G * N * d);
    float *q = malloc((size_t)(H * d) * sizeof(float)),
          *o = malloc((size_t)(H * d) * sizeof(float));
    float *src = malloc(nkv * sizeof(float));
    uint64_t r = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < nkv; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        src[i] = (float)((double)(r >> 11) * 0x1p-52 - 1.0);
    }
    for (int64_t i = 0; i < H * d; i++) q[i] = src[i];
    const mha_options opt = {.threads = threads};
    /* Q in each dtype (bf16/fp16 rounded from the fp32 values) */
    uint16_t *qh[2] = {malloc((size_t)(H * d) * 2), malloc((size_t)(H * d) * 2)};
    mha_convert_from_f32(MHA_BF16, q, qh[0], (size_t)(H * d));
    mha_convert_from_f32(MHA_F16, q, qh[1], (size_t)(H * d));
    bench_case c[2 * NT];
    int nc = 0;
    for (int t = 0; t < 2 * NT; t++) {
        const mha_dtype kt = KVT[t % NT];
        const mha_kernel *kk = t < NT ? kern : also;
        if (!kk) break;
        mha_problem pr = {.batch = 1,
                          .heads = H,
                          .kv_heads = G,
                          .seq_q = 1,
                          .seq_kv = N,
                          .head_dim = d,
                          .causal = 0,
                          .scale = 0.0f,
                          .dtype = MHA_F32,
                          .kv_dtype = kt};
        if (mha_kernel_takes(kk, &pr) != MHA_OK) {
            pr.dtype = kt, pr.kv_dtype = MHA_F32; /* Q/O in the cache's dtype */
            if (kt == MHA_I8 || mha_kernel_takes(kk, &pr) != MHA_OK) continue;
        }
        const int qi = pr.dtype == MHA_BF16 ? 0 : 1;
        bench_case *cc = &c[nc];
        cc->kern = kk;
        cc->qt = pr.dtype == MHA_F32 ? mha_view_bhnd(q, H, 1, d)
                                     : mha_view_typed(qh[qi], pr.dtype, NULL, H, 1, d);
        cc->ot = mha_view_typed_mut(o, pr.dtype, H, 1, d);
        cc->p = pr;
        nc++;
    }
    for (int t = 0; t < nc; t++) {
        const mha_dtype kt = mha_problem_kv_dtype(&c[t].p);
        c[t].k = mha_alloc(nkv * mha_dtype_size(kt));
        c[t].v = mha_alloc(nkv * mha_dtype_size(kt));
        c[t].ks = c[t].vs = NULL;
        if (!c[t].k || !c[t].v) {
            fprintf(stderr, "bench_kvcache: cannot allocate the %s cache\n", mha_dtype_name(kt));
            return 1;
        }
        if (kt == MHA_I8) {
            c[t].ks = malloc((size_t)(G * N) * sizeof(float));
            c[t].vs = malloc((size_t)(G * N) * sizeof(float));
            mha_quantize_rows_i8(src, G * N, d, d, c[t].k, d, c[t].ks);
            mha_quantize_rows_i8(src, G * N, d, d, c[t].v, d, c[t].vs);
        } else {
            mha_convert_from_f32(kt, src, c[t].k, nkv);
            mha_convert_from_f32(kt, src, c[t].v, nkv);
        }
        c[t].kt = mha_view_typed(c[t].k, kt, c[t].ks, G, N, d);
        c[t].vt = mha_view_typed(c[t].v, kt, c[t].vs, G, N, d);
        if (mha_workspace_size(c[t].kern, &c[t].p, &opt, &c[t].wsz) != MHA_OK) {
            fprintf(stderr, "bench_kvcache: %s\n", mha_last_error());
            return 1;
        }
        c[t].ws = mha_alloc(c[t].wsz);
        c[t].bytes = 2.0 * (double)nkv * (double)mha_dtype_size(kt) +
                     (kt == MHA_I8 ? 2.0 * (double)(G * N) * sizeof(float) : 0.0) +
                     2.0 * (double)(H * d) * (double)mha_dtype_size(c[t].p.dtype);
    }
    free(src);
    /* warm-up: every dtype twice (page faults, OpenMP pool, clocks) */
    for (int w = 0; w < 2; w++)
        for (int t = 0; t < nc; t++)
            if (mha_attend(c[t].kern, &c[t].p, &opt, &c[t].qt, &c[t].kt, &c[t].vt, &c[t].ot,
                           c[t].ws, c[t].wsz) != MHA_OK) {
                fprintf(stderr, "bench_kvcache: %s: %s\n", mha_kernel_name(c[t].kern),
                        mha_last_error());
                return 1;
            }
    /* the levels the working sets fit, and their bandwidth before the run */
    double bw0[MACH_LEVELS] = {0}, bw1[MACH_LEVELS] = {0};
    for (int t = 0; t < nc; t++) {
        const machine_level l = machine_level_of(mi, c[t].bytes, threads);
        if (bw0[l] == 0)
            bw0[l] = machine_read_bandwidth_bytes(threads,
                                                  machine_level_probe_bytes(mi, l, threads), 0.3);
    }
    for (int rep = 0; rep < reps; rep++)
        for (int t = 0; t < nc; t++) {
            const int tt = (t + rep) % nc; /* rotate who follows whom */
            const double t0 = now();
            mha_attend(c[tt].kern, &c[tt].p, &opt, &c[tt].qt, &c[tt].kt, &c[tt].vt, &c[tt].ot,
                       c[tt].ws, c[tt].wsz);
            c[tt].t[rep] = now() - t0;
        }
    for (int t = 0; t < nc; t++) {
        const machine_level l = machine_level_of(mi, c[t].bytes, threads);
        if (bw1[l] == 0)
            bw1[l] = machine_read_bandwidth_bytes(threads,
                                                  machine_level_probe_bytes(mi, l, threads), 0.3);
    }
    double med[2 * NT];
    for (int t = 0; t < nc; t++) {
        qsort(c[t].t, (size_t)reps, sizeof(double), cmp_double);
        med[t] = c[t].t[reps / 2];
    }
    printf("\n%s  H=%lld kv_heads=%lld Nq=1 Nkv=%lld d=%lld threads=%d reps=%d\n",
           mha_kernel_name(kern), (long long)H, (long long)G, (long long)N, (long long)d, threads,
           reps);
    printf("%-22s %-5s %9s %5s %9s %9s %8s %9s %6s %8s %8s\n", "kernel", "q/kv", "MiB", "level",
           "ms(med)", "ms(min)", "GB/s", "level GB/s", "%bw", "x fp32", "GFLOP/s");
    for (int t = 0; t < nc; t++) {
        const machine_level l = machine_level_of(mi, c[t].bytes, threads);
        char qkv[16];
        snprintf(qkv, sizeof qkv, "%s/%s", c[t].p.dtype == MHA_F32 ? "f32" : "=",
                 mha_dtype_name(mha_problem_kv_dtype(&c[t].p)));
        const double gbs = c[t].bytes / med[t] * 1e-9, lbw = 0.5 * (bw0[l] + bw1[l]);
        printf("%-22s %-5s %9.1f %5s %9.3f %9.3f %8.1f %5.1f-%-4.1f %5.0f%% %7.2fx %8.1f\n",
               mha_kernel_name(c[t].kern), qkv, c[t].bytes / 1048576.0, machine_level_name(l),
               med[t] * 1e3, c[t].t[0] * 1e3, gbs, bw0[l], bw1[l], 100.0 * gbs / lbw,
               med[0] / med[t], 4.0 * (double)(H * N * d) / med[t] * 1e-9);
    }
    for (int t = 0; t < nc; t++) {
        mha_free(c[t].k);
        mha_free(c[t].v);
        mha_free(c[t].ws);
        free(c[t].ks);
        free(c[t].vs);
    }
    free(q);
    free(o);
    free(qh[0]);
    free(qh[1]);
    return 0;
}

int main(int argc, char **argv) {
    const char *kname = NULL, *kvh = "32,8", *aname = NULL;
    int threads = 0, reps = 21;
    int64_t N = 4096;
    static const struct option longopts[] = {{"kernel", required_argument, 0, 'k'},
                                             {"threads", required_argument, 0, 't'},
                                             {"reps", required_argument, 0, 'r'},
                                             {"kv-heads", required_argument, 0, 'g'},
                                             {"seq-kv", required_argument, 0, 'n'},
                                             {"also", required_argument, 0, 'a'},
                                             {0, 0, 0, 0}};
    int ch;
    while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (ch) {
        case 'k':
            kname = optarg;
            break;
        case 't':
            threads = atoi(optarg);
            break;
        case 'r':
            reps = atoi(optarg);
            break;
        case 'g':
            kvh = optarg;
            break;
        case 'n':
            N = atoll(optarg);
            break;
        case 'a':
            aname = optarg;
            break;
        default:
            fprintf(stderr,
                    "usage: %s [--kernel K] [--threads T] [--reps N] [--kv-heads 32,8] "
                    "[--seq-kv N] [--also K]\n",
                    argv[0]);
            return 2;
        }
    }
    if (reps < 1 || reps > MAX_REPS || N < 1) {
        fprintf(stderr, "bench_kvcache: --reps must be 1..%d and --seq-kv >= 1\n", MAX_REPS);
        return 2;
    }
    /* default: the decode kernel of the highest ISA that runs here and takes
     * fp32 Q/O, so every cache dtype has its row (decode.avx512bf16, bf16
     * only, was the default on AVX512-BF16 CPUs and failed on the fp32 row) */
    const mha_kernel *kern = NULL;
    if (kname) {
        kern = mha_kernel_find(kname);
    } else {
        for (int i = 0; i < mha_kernel_count(); i++) {
            const mha_kernel *k = mha_kernel_at(i);
            if ((mha_kernel_traits(k) & MHA_KT_DECODE) && mha_kernel_supported(k) == MHA_OK &&
                (mha_kernel_dtypes(k) & MHA_DTYPE_BIT(MHA_F32)) &&
                (!kern || mha_kernel_isa(k) > mha_kernel_isa(kern)))
                kern = k;
        }
    }
    if (!kern || mha_kernel_supported(kern) != MHA_OK) {
        fprintf(stderr, "bench_kvcache: kernel %s: %s\n", kname ? kname : "(decode)",
                mha_last_error());
        return 2;
    }
    const mha_kernel *also = aname ? mha_kernel_find(aname) : NULL;
    if (aname && (!also || mha_kernel_supported(also) != MHA_OK)) {
        fprintf(stderr, "bench_kvcache: --also %s: %s\n", aname, mha_last_error());
        return 2;
    }
    if (threads <= 0) threads = mha_resolve_threads(NULL);
    if (threads > 1 && !getenv("OMP_PROC_BIND"))
        fprintf(stderr, "bench_kvcache: OMP_PROC_BIND is unset: threads may share a vCPU "
                        "(set OMP_PROC_BIND=true)\n");
    machine_info mi;
    machine_describe(&mi);
    printf("bench_kvcache: %s, L3 %llu MiB; bytes at storage width (K+V + int8 scales + Q/O)\n",
           mi.model, (unsigned long long)(mi.l3 >> 20));
    for (const char *s = kvh; *s;) {
        char *e;
        const long g = strtol(s, &e, 10);
        if (e == s || g < 1 || 32 % g) {
            fprintf(stderr, "bench_kvcache: --kv-heads %s: each must divide 32\n", kvh);
            return 2;
        }
        if (run_shape(kern, also, 32, g, N, 128, threads, reps, &mi)) return 1;
        s = *e == ',' ? e + 1 : e;
    }
    return 0;
}
