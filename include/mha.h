/* mha.h - the public API of mhabench's multi-head attention kernels.
 * One problem description, strided tensor views, one kernel signature behind a
 * registry, caller-provided workspace, and the full MHA layer built on top. */
#ifndef MHA_H
#define MHA_H

#include <stddef.h>
#include <stdint.h>

/* What libmha.so exports: exactly the functions declared MHA_API here (the
 * library is built with -fvisibility=hidden; tests/check_exports.sh checks
 * the list). Internals the harness and tests use are reached through the
 * static mha_internal library and variants/mha_private.h, never through the
 * shared library. */
#if defined(__GNUC__)
#define MHA_API __attribute__((visibility("default")))
#else
#define MHA_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- status ------------------------------------------------------------ */
typedef enum {
    MHA_OK = 0,
    MHA_EINVAL = 1,       /* invalid argument (bad dims, mismatched shapes, NULL, ...) */
    MHA_EUNSUPPORTED = 2, /* the kernel's ISA is not available on this CPU / under MHA_ISA */
    MHA_ENOMEM = 3,       /* out of memory, or a size whose byte count overflows */
    MHA_EIO = 4,          /* I/O error reading or writing a file */
    MHA_EFORMAT = 5,      /* malformed file (bad .npy header, bad JSON, ...) */
} mha_status;

/* Short generic text for a status ("invalid argument"). */
MHA_API const char *mha_status_str(mha_status s);
/* The detailed message of the last failing call on this thread, naming the
 * bad value ("problem.seq_q = 0: must be >= 1"). Empty when none. */
MHA_API const char *mha_last_error(void);

/* ---- instruction sets ---------------------------------------------------- */
/* Each level includes the ones below it. AVX512BF16 is AVX-512 plus the bf16
 * dot product (vdpbf16ps) and conversions (Zen 4, Cooper Lake, Sapphire
 * Rapids): the fp32 kernels are AVX-512's, the bf16 ones use it. AMX is
 * AVX512BF16 plus the tiles (AMX-TILE, AMX-BF16: Sapphire Rapids and later),
 * detected only when the OS grants the tile state to this process and the
 * tile products agree with the emulation (kernels/cpu.c). */
typedef enum {
    MHA_ISA_SCALAR = 0,
    MHA_ISA_AVX2 = 1,
    MHA_ISA_AVX512 = 2,
    MHA_ISA_AVX512BF16 = 3,
    MHA_ISA_AMX = 4
} mha_isa;
#define MHA_ISA_COUNT 5

MHA_API const char *mha_isa_name(mha_isa isa); /* "scalar", "avx2", ..., "avx512bf16", "amx" */
MHA_API mha_status mha_isa_parse(const char *s, mha_isa *out);
MHA_API mha_isa mha_isa_detected(void); /* best ISA the CPU + OS support */
/* The active level: min(detected, MHA_ISA cap). A malformed MHA_ISA value caps
 * to scalar (the safe choice) and mha_isa_env_status() reports it. */
MHA_API mha_isa mha_isa_active(void);
MHA_API mha_status mha_isa_env_status(void);

/* ---- element types ---------------------------------------------------------- */
/* What a tensor's elements are. Q, K, V and O are fp32, bf16 or fp16 (the
 * problem's dtype); a KV cache may also be stored as int8 with one fp32 scale
 * per (batch, KV head, token) row: value = int8 * scale (the symmetric
 * per-token quantisation serving engines use). Whatever the storage, kernels
 * accumulate and run the softmax in fp32. MHA_F32 is 0, so zero-initialised
 * problems and views are fp32. */
typedef enum { MHA_F32 = 0, MHA_BF16 = 1, MHA_F16 = 2, MHA_I8 = 3 } mha_dtype;
#define MHA_DTYPE_COUNT 4
#define MHA_DTYPE_BIT(t) (1u << (t))

MHA_API const char *mha_dtype_name(mha_dtype t); /* "fp32", "bf16", "fp16", "int8" */
/* Accepts the names above and the aliases f32, float32, float16, f16, i8. */
MHA_API mha_status mha_dtype_parse(const char *s, mha_dtype *out);
MHA_API size_t mha_dtype_size(mha_dtype t); /* bytes per element: 4, 2, 2, 1; 0 if unknown */

/* Conversions of n contiguous elements. To fp32 is exact (int8 takes one
 * scale for all n); from fp32 rounds to nearest even (NaN stays NaN, overflow
 * gives Inf as IEEE conversion does). Used by the file readers, the CLI and
 * tests; the kernels convert in their own loops. A dtype outside mha_dtype
 * or a NULL buffer (n > 0) converts nothing and is MHA_EINVAL. */
MHA_API mha_status mha_convert_to_f32(mha_dtype t, const void *src, float *dst, size_t n);
MHA_API mha_status mha_convert_from_f32(mha_dtype t, const float *src, void *dst, size_t n);
/* Symmetric per-row int8 quantisation: for each of rows rows of n floats
 * (row stride ld_src), scale = max|x| / 127 (1 for an all-zero row) and
 * q = round(x / scale) clamped to [-127, 127]; a non-finite row max makes
 * that row's scale NaN (it propagates like NaN data would). */
MHA_API mha_status mha_quantize_rows_i8(const float *src, int64_t rows, int64_t n, int64_t ld_src,
                                        int8_t *dst, int64_t ld_dst,
                                        float *scales); /* MHA_EINVAL: NULL, n < 0, ld < n */

/* ---- problem and tensors --------------------------------------------------- */
/* How the tensors of a problem hold their sequences (mha_problem.layout; the
 * index arrays come with the call in mha_extras). */
typedef enum {
    MHA_LAYOUT_DENSE = 0,  /* q [B,H,Nq,d], k [B,G,Nkv,d], v [B,G,Nkv,d_v] strided views */
    MHA_LAYOUT_PACKED = 1, /* a ragged batch packed token by token (FlashAttention's varlen):
                              q [Tq,H,d], k [Tkv,G,d], v [Tkv,G,d_v], out [Tq,H,d_v]; sequence
                              b is rows [cu_seqlens_q[b], cu_seqlens_q[b+1]) of q and out and
                              [cu_seqlens_kv[b], cu_seqlens_kv[b+1]) of k and v */
    MHA_LAYOUT_PAGED = 2,  /* a paged KV cache (vLLM's): q and out packed as above; k and v
                              pools of blocks, k [NB,BS,G,d], v [NB,BS,G,d_v]; key t of sequence
                              b (t < seq_lens_kv[b]) is slot t % BS of block
                              block_table[b][t / BS] */
} mha_layout;
#define MHA_LAYOUT_COUNT 3
MHA_API const char *mha_layout_name(int layout); /* "dense", "packed", "paged"; "?" otherwise */

typedef struct {
    int64_t batch;
    int64_t heads;    /* query heads */
    int64_t kv_heads; /* divides heads; query head h uses KV head h / (heads / kv_heads) */
    int64_t seq_q;
    int64_t seq_kv;
    int64_t head_dim;
    int causal;         /* bottom-right aligned: query i sees key j iff j <= i + (seq_kv - seq_q) */
    float scale;        /* 0 means 1/sqrt(head_dim) */
    mha_dtype dtype;    /* Q and O (and K/V unless kv_dtype says otherwise): fp32, bf16, fp16 */
    mha_dtype kv_dtype; /* K and V storage; 0 (MHA_F32) = the problem's dtype, else bf16,
                           fp16 or int8 (an fp32 cache under bf16 queries is not offered) */
    /* The attention variants of current models (issue 30). Each field's 0 is
     * the attention above, so zero-initialised problems ({0}, or the first
     * fields given positionally) mean what they always meant. A kernel takes
     * only the variants its traits name (MHA_KT_WINDOW ...); mha_attend
     * refuses the others with MHA_EUNSUPPORTED, and mha_select picks a kernel
     * that takes them. With off = seq_kv - seq_q (bottom-right alignment),
     * key j is visible to query i iff
     *   (!causal || j <= i + off) && (!window || window_left < 0 ||
     *   j >= i + off - window_left) && (!window || window_right < 0 ||
     *   j <= i + off + window_right). */
    int window;           /* 0 = no sliding window (window_left/right must be 0); 1 = a window */
    int64_t window_left;  /* keys before the diagonal a query sees: -1 = unbounded, else >= 0 */
    int64_t window_right; /* keys after the diagonal: -1 = unbounded, else >= 0 (0 with causal) */
    float softcap;        /* 0 = none; c > 0: s = c * tanh(s / c) on the scaled score, before
                             the mask (Gemma 2) */
    int sinks;            /* 0 = none; 1 = one fp32 logit per query head, passed with the call
                             (mha_extras.sinks): a softmax column with no value, out =
                             sum_j e^(s_j-m) v_j / (sum_j e^(s_j-m) + e^(sink_h-m)),
                             m = max(max_j s_j, sink_h) */
    int64_t head_dim_v;   /* V's and O's head dim; 0 = head_dim. scale stays 1/sqrt(head_dim) */
    /* The layout (issue 30, phase 2): 0 (MHA_LAYOUT_DENSE) is the views above.
     * In the packed and paged layouts batch is the number of sequences B,
     * each of its own length (the index arrays of mha_extras), and seq_q and
     * seq_kv are the longest a sequence may be (bounds, as FlashAttention's
     * max_seqlen: workspaces are sized by them, a longer sequence is
     * MHA_EINVAL). Causal and the window align bottom-right per sequence:
     * off = Nkv_b - Nq_b. Each size below is 0 in the layouts that have no
     * use for it (a value there is refused, not ignored); all fit int32, as
     * the index arrays do. */
    int layout;         /* mha_layout */
    int64_t total_q;    /* packed, paged: Tq >= 0, the rows of q and out (every query) */
    int64_t total_kv;   /* packed: Tkv >= 0, the rows of k and v (every key) */
    int64_t num_blocks; /* paged: NB >= 1, the blocks of the k and v pools */
    int64_t block_size; /* paged: BS >= 1, the tokens (slots) per block */
    int64_t max_blocks; /* paged: MB >= 1, the columns of block_table (a sequence has at
                           most MB * BS keys) */
} mha_problem;

/* A strided 4-D view [batch][head][seq][head_dim]; head_dim is contiguous and
 * the strides are in elements of the view's dtype. [B,H,N,d] and [B,N,H*d]
 * are both views. An int8 view also points at its scales: one float per
 * (b, h, n) row at scale + b*scale_stride_b + h*scale_stride_h +
 * n*scale_stride_n. Views made by the constructors below are fp32; set
 * .dtype (and the scales) for others, or use mha_view_typed.
 * In the packed and paged layouts q and out hold token t of head h at
 * t*stride_n + h*stride_h (stride_b is not used: set it >= 0): the contiguous
 * [Tq,H,d] is mha_view_bnhd(q, H, Tq, d); packed k and v likewise
 * (mha_view_bnhd(k, G, Tkv, d)), int8 scales [Tkv,G] at t*scale_stride_n +
 * g*scale_stride_h. Paged k and v hold slot s of block nb at nb*stride_b +
 * s*stride_n + g*stride_h: the pool [NB,BS,G,d] is mha_view_bnhd(k, G, BS,
 * d); int8 scales [NB,BS,G] at nb*scale_stride_b + s*scale_stride_n +
 * g*scale_stride_h (strides BS*G, G, 1). */
typedef struct {
    const void *data;
    int64_t stride_b, stride_h, stride_n;
    mha_dtype dtype;
    const float *scale; /* MHA_I8 only */
    int64_t scale_stride_b, scale_stride_h, scale_stride_n;
} mha_tensor;

typedef struct {
    void *data;
    int64_t stride_b, stride_h, stride_n;
    mha_dtype dtype; /* fp32, bf16 or fp16: the problem's dtype */
} mha_tensor_mut;

/* Contiguous [B,H,N,d] and interleaved [B,N,H,d] (= [B,N,H*d]) views. */
MHA_API mha_tensor mha_view_bhnd(const float *data, int64_t heads, int64_t seq, int64_t head_dim);
MHA_API mha_tensor mha_view_bnhd(const float *data, int64_t heads, int64_t seq, int64_t head_dim);
MHA_API mha_tensor_mut mha_view_bhnd_mut(float *data, int64_t heads, int64_t seq, int64_t head_dim);
MHA_API mha_tensor_mut mha_view_bnhd_mut(float *data, int64_t heads, int64_t seq, int64_t head_dim);
/* A contiguous [B,H,N,d] view of another dtype; scale (int8 only, else NULL)
 * is a contiguous [B,H,N] array. */
MHA_API mha_tensor mha_view_typed(const void *data, mha_dtype t, const float *scale, int64_t heads,
                                  int64_t seq, int64_t head_dim);
MHA_API mha_tensor_mut mha_view_typed_mut(void *data, mha_dtype t, int64_t heads, int64_t seq,
                                          int64_t head_dim);
/* V's and O's head dim: head_dim_v, or head_dim when it is 0; -1 for NULL. */
MHA_API int64_t mha_problem_head_dim_v(const mha_problem *p);
/* The storage type of K and V (kv_dtype, or dtype when kv_dtype is 0);
 * (mha_dtype)MHA_DTYPE_COUNT, which no dtype function takes, for NULL. */
MHA_API mha_dtype mha_problem_kv_dtype(const mha_problem *p);

/* Effective scale (resolves scale == 0); NaN for NULL. These three return a
 * value, not a status: the value that cannot be mistaken for one, with
 * mha_last_error() saying why. */
MHA_API float mha_problem_scale(const mha_problem *p);
/* Rejects dims <= 0, kv_heads not dividing heads, non-finite scale, a dtype
 * that is not fp32/bf16/fp16 (int8 is a kv_dtype only), element or byte
 * counts that overflow, and malformed variants: window not 0 or 1, a
 * window_left/right below -1 (or non-zero without window), softcap < 0 or
 * non-finite, sinks not 0 or 1, head_dim_v < 0, a layout outside
 * mha_layout, and a layout's size out of range or set in a layout without
 * it. Each message names the field. The index arrays of the packed and
 * paged layouts are checked with the call (mha_attend_ex). */
MHA_API mha_status mha_problem_validate(const mha_problem *p);
/* FLOPs by the DESIGN convention: 2*(head_dim + head_dim_v) (= 4*d when
 * they are equal) per (query, key) pair the causal mask and the window
 * allow; NaN for a problem mha_problem_validate refuses (and NULL). The
 * packed and paged layouts count per sequence, so they need the lengths:
 * mha_problem_flops_ex (below); here they are NaN. */
MHA_API double mha_problem_flops(const mha_problem *p);

/* ---- options ----------------------------------------------------------------- */
typedef enum { MHA_SPLIT_AUTO = 0, MHA_SPLIT_HEADS = 1, MHA_SPLIT_QBLOCKS = 2 } mha_split;

typedef struct {
    int threads; /* 0 = all cores */
    /* Blocks: 0 = tuned or default, else 1..4096. Every kernel runs
     * correctly with any value; a kernel may round it to its granule
     * (tiled.<isa> rounds block_q up to the vector width) or clamp it to the
     * sequence, and kernels without blocks (naive, decode, blas) ignore it. */
    int block_q;
    int block_kv;
    int split; /* mha_split; 0 = kernel's choice */
} mha_options;

/* Threads a call will use: options->threads, or every processor when 0. */
MHA_API int mha_resolve_threads(const mha_options *o);

/* ---- kernels ------------------------------------------------------------------ */
typedef struct mha_kernel mha_kernel;

MHA_API int mha_kernel_count(void);
MHA_API const mha_kernel *mha_kernel_at(int index);
MHA_API const mha_kernel *mha_kernel_find(const char *name); /* NULL (and last_error) if unknown */
MHA_API const char *mha_kernel_name(const mha_kernel *k);    /* "flash.avx512" */
MHA_API const char *mha_kernel_algorithm(const mha_kernel *k); /* "flash" */
MHA_API mha_isa mha_kernel_isa(const mha_kernel *k);
MHA_API const char *mha_kernel_summary(const mha_kernel *k);
/* MHA_OK if the kernel runs here (its ISA <= mha_isa_active()), else
 * MHA_EUNSUPPORTED with a message naming the missing ISA. */
MHA_API mha_status mha_kernel_supported(const mha_kernel *k);
/* The element types a kernel takes (the dtype columns of the kernel list), as
 * MHA_DTYPE_BIT masks: for Q/O (the problem's dtype) and for the K/V storage.
 * Any combination of one from each runs. */
MHA_API unsigned mha_kernel_dtypes(const mha_kernel *k);
MHA_API unsigned mha_kernel_kv_dtypes(const mha_kernel *k);
/* MHA_OK if k takes p's dtypes, variants (window, softcap, sinks,
 * head_dim_v) and layout (packed, paged): its MHA_KT_* traits; else
 * MHA_EUNSUPPORTED naming them. */
MHA_API mha_status mha_kernel_takes(const mha_kernel *k, const mha_problem *p);

/* What a kernel can do: the traits column of the kernel list
 * (variants/kernels.inc). Code outside the registry asks these; it never
 * compares algorithm names. */
enum {
    MHA_KT_BLOCKS = 1 << 0,       /* block_q / block_kv change how it runs: worth tuning */
    MHA_KT_SPLIT = 1 << 1,        /* options.split picks per-head or (head, query block) tasks */
    MHA_KT_DECODE = 1 << 2,       /* made for a few query rows per KV head over a long cache */
    MHA_KT_MATERIALISED = 1 << 3, /* block model: tiled's (blocks tile a materialised score
                                     matrix); else flash's streamed one */
    MHA_KT_BASELINE = 1 << 4,     /* a library's attention (BLAS): the baseline to beat; its
                                     code follows the active ISA whatever its row's ISA */
    MHA_KT_REFERENCE = 1 << 5,    /* the seed's math: a yardstick, never selected or tuned */
    MHA_KT_EMULATED = 1 << 6,     /* runs emulated instructions (flash.amxemu): a verification
                                     kernel, listed and callable, never swept, tuned, selected
                                     or anyone's twin */
    /* The variants of mha_problem a kernel takes (mha_kernel_takes refuses
     * the others, naming the variant and the kernel): */
    MHA_KT_WINDOW = 1 << 7,      /* problem.window (a sliding window) */
    MHA_KT_SOFTCAP = 1 << 8,     /* problem.softcap > 0 */
    MHA_KT_SINKS = 1 << 9,       /* problem.sinks (mha_extras.sinks) */
    MHA_KT_HEAD_DIM_V = 1 << 10, /* head_dim_v != head_dim */
    MHA_KT_PACKED = 1 << 11,     /* problem.layout = MHA_LAYOUT_PACKED (cu_seqlens) */
    MHA_KT_PAGED = 1 << 12,      /* problem.layout = MHA_LAYOUT_PAGED (block_table) */
    MHA_KT_TILES = 1 << 13       /* block model: AMX tiles' (flash.amx and its emulated twin
                                    flash.amxemu, which must get the same default blocks to
                                    give the same bits) */
};
MHA_API unsigned mha_kernel_traits(const mha_kernel *k);
/* Preference among kernels that fit a shape (lower first; ties: higher ISA). */
MHA_API int mha_kernel_rank(const mha_kernel *k);
/* The ISA whose code k runs now: its own, or the active one (MHA_KT_BASELINE). */
MHA_API mha_isa mha_kernel_run_isa(const mha_kernel *k);
/* The kernel of k's algorithm that takes the same dtypes at ISA level isa, or
 * NULL (flash.avx512bf16 is no twin of the fp32 flash.avx512). */
MHA_API const mha_kernel *mha_kernel_twin(const mha_kernel *k, mha_isa isa);

/* The options k runs with for p: o validated (MHA_EINVAL naming a bad
 * value), threads kept as given, block_q / block_kv left at 0 filled from the
 * cache model (mha_default_blocks for k's block model and ISA). The one
 * resolution mha_workspace_size, mha_attend, mha_select and mhabench use, so
 * what a report names is what runs (a kernel may still round a block to its
 * granule: see mha_options). */
MHA_API mha_status mha_resolve_options(const mha_kernel *k, const mha_problem *p,
                                       const mha_options *o, mha_options *out);

#define MHA_WORKSPACE_ALIGN 64
/* Bytes of workspace a call needs (0 is possible). */
MHA_API mha_status mha_workspace_size(const mha_kernel *k, const mha_problem *p,
                                      const mha_options *o, size_t *bytes);
/* 64-byte aligned allocation for workspace, inputs and KV caches; NULL on
 * failure. Free with mha_free. From MHA_HUGE_PAGE bytes up the buffer is 2
 * MiB aligned, its size rounded up to 2 MiB, and advised onto transparent huge
 * pages (madvise MADV_HUGEPAGE; Linux, unless the environment sets
 * MHA_HUGEPAGES=0). Callers with their own allocator: see README "Huge pages". */
#define MHA_HUGE_PAGE ((size_t)2 << 20)
MHA_API void *mha_alloc(size_t bytes);
/* 1 unless MHA_HUGEPAGES=0: whether mha_alloc advises large buffers onto huge pages. */
MHA_API int mha_hugepages(void);
MHA_API void mha_free(void *ptr);

/* The attention core: out = softmax(scale * q k^T + mask) v per (batch, head).
 * q: [B,H,Nq,d], k/v: [B,kv_heads,Nkv,d], out: [B,H,Nq,d], all as views;
 * q and out of the problem's dtype, k and v of its kv dtype (a view of
 * another dtype is MHA_EINVAL, a dtype the kernel does not take
 * MHA_EUNSUPPORTED).
 * workspace: MHA_WORKSPACE_ALIGN aligned, at least mha_workspace_size bytes.
 * Aliasing: out may be exactly q's view (same data and strides: in place,
 * every kernel reads a query row before it writes that row's output); any
 * other byte out shares with q, k, v or an int8 view's scales, and any byte
 * the workspace's first mha_workspace_size bytes share with a view, is
 * MHA_EINVAL naming the two (views that share a buffer without sharing
 * bytes, such as q, k, v and out slots of one fused [B,N,4,H,d] buffer, are
 * fine; a view with a zero or interleaved stride whose address range meets
 * out's is refused as "may share memory").
 * Never allocates, prints or locks. */
MHA_API mha_status mha_attend(const mha_kernel *k, const mha_problem *p, const mha_options *o,
                              const mha_tensor *q, const mha_tensor *kt, const mha_tensor *v,
                              const mha_tensor_mut *out, void *workspace, size_t workspace_size);

/* The data of a call beyond q, k and v that a problem's variants need: like
 * the tensors it is passed with the call, not stored in the problem (which
 * only says it is there). Zero-initialise it; fields a problem does not ask
 * for are not read. */
typedef struct {
    const float *sinks; /* problem.sinks: [heads] fp32 logits, sinks[h] for query head h
                           (natural-log units, as the scaled scores); -inf = no sink */
    /* The index arrays of the packed and paged layouts (int32, as
     * FlashAttention's and vLLM's). Checked with every call, each bad value
     * named (MHA_EINVAL): a cu_seqlens that does not start at 0, decreases,
     * or does not end at its total; a sequence longer than its bound
     * (problem.seq_q / seq_kv) or than its blocks (max_blocks * block_size);
     * a block index outside [0, num_blocks) among the entries read. A
     * sequence may have no queries or no keys; a query that sees no key is
     * zeros, with a sink or without. */
    const int32_t *cu_seqlens_q;  /* packed, paged: [batch + 1] row offsets into q and out:
                                     0 first, non-decreasing, total_q last */
    const int32_t *cu_seqlens_kv; /* packed: [batch + 1] row offsets into k and v: 0 first,
                                     non-decreasing, total_kv last */
    const int32_t *seq_lens_kv;   /* paged: [batch] keys per sequence, 0..max_blocks*block_size */
    const int32_t *block_table;   /* paged: [batch][max_blocks] row-major block indices;
                                     sequence b reads its first ceil(seq_lens_kv[b] /
                                     block_size) entries, the rest are never read (any value) */
} mha_extras;

/* mha_problem_flops counting the visible pairs of each sequence of a packed
 * or paged problem by x's lengths (checked as mha_attend_ex checks them);
 * for a dense problem x is not read. NaN when p or x is refused, with
 * mha_last_error() naming the value. */
MHA_API double mha_problem_flops_ex(const mha_problem *p, const mha_extras *x);

/* mha_attend with the extras: x may be NULL when the problem asks for none
 * (mha_attend is this with x = NULL); a problem with sinks and no
 * x->sinks, or a packed or paged one without its index arrays, is
 * MHA_EINVAL. The heads of v and out are head_dim_v wide:
 * v [B,kv_heads,Nkv,d_v], out [B,H,Nq,d_v] (packed, paged: the layout's
 * shapes, mha_layout). The sinks and the index arrays may share memory
 * with the inputs, never with out or the workspace. */
MHA_API mha_status mha_attend_ex(const mha_kernel *k, const mha_problem *p, const mha_options *o,
                                 const mha_tensor *q, const mha_tensor *kt, const mha_tensor *v,
                                 const mha_extras *x, const mha_tensor_mut *out, void *workspace,
                                 size_t workspace_size);

/* The float64 oracle: the same math in double, never optimised, on the
 * inputs exactly as stored (bf16/fp16 values, int8 * scale), with every
 * variant of the problem computed as its definition reads. out is a
 * contiguous [B,H,Nq,d_v] double array ([Tq,H,d_v] in the packed and paged
 * layouts, in q's row order). Allocates its own scratch.
 * mha_reference is mha_reference_ex with x = NULL. */
MHA_API mha_status mha_reference(const mha_problem *p, const mha_tensor *q, const mha_tensor *k,
                                 const mha_tensor *v, double *out);
MHA_API mha_status mha_reference_ex(const mha_problem *p, const mha_tensor *q, const mha_tensor *k,
                                    const mha_tensor *v, const mha_extras *x, double *out);

/* ---- selection ------------------------------------------------------------------ */
typedef enum {
    MHA_CHOICE_FORCED = 0,  /* MHA_KERNEL or an explicit kernel */
    MHA_CHOICE_TABLE = 1,   /* the tuning table for this CPU */
    MHA_CHOICE_DEFAULT = 2, /* cache-model defaults for the best kernel the CPU runs */
} mha_choice_source;

typedef struct {
    const mha_kernel *kernel;
    mha_options options; /* the knobs to run with (threads as requested) */
    mha_choice_source source;
    double expected_gflops; /* from the table; 0 when unknown */
    char reason[256];       /* where the choice came from, for MHA_VERBOSE and reports */
} mha_selection;

/* Picks the kernel and knobs for p: MHA_KERNEL if set, else the tuning table
 * matching this CPU (MHA_TUNING path, else the committed table for this CPU
 * key), else cache-model defaults. MHA_VERBOSE=1 prints the choice and why. */
MHA_API mha_status mha_select(const mha_problem *p, const mha_options *o, mha_selection *out);

/* Cache-model default block sizes (from hwloc's L1/L2, clamped) for a block
 * model (traits: MHA_KT_MATERIALISED = tiled's, else the streamed one of
 * flash) at an ISA and thread count (with several threads and few (batch,
 * head, query block) tasks, the streamed model gets smaller query blocks so
 * the threads stay balanced). mha_attend and mha_workspace_size resolve
 * options left at 0 through this. */
MHA_API void mha_default_blocks(const mha_problem *p, unsigned traits, mha_isa isa, int threads,
                                int *block_q, int *block_kv);

/* ---- instrumentation ------------------------------------------------------------ */
/* With the meson option phase_timing, the SIMD kernels count cycles per phase:
 * out[0] packing and output, out[1] Q.K^T, out[2] softmax (mask, max, exp,
 * sum), out[3] P.V, summed over threads since the last reset. Returns 0 (and
 * zeros) in normal builds. */
MHA_API int mha_phase_cycles(uint64_t out[4], int reset);

/* ---- the full layer ------------------------------------------------------------- */
/* nn.Linear layout: weight [out_features, in_features], y = x W^T + b.
 * w_q, w_o: [d_model, d_model]; w_k, w_v: [kv_heads * head_dim, d_model] with
 * head_dim = d_model / heads. Biases may be NULL.
 * dtype says how the weights, the biases, the query/key/value inputs and the
 * output are stored: MHA_F32 (0, so zero-initialised layers are fp32), or
 * MHA_BF16 / MHA_F16 (16-bit patterns). A bf16/fp16 layer accumulates in
 * fp32, rounds the projected Q, K and V to its dtype (RNE), runs an
 * attention kernel that takes that dtype (mha_kernel_takes; else
 * MHA_EUNSUPPORTED naming kernel and dtype), feeds the concatenated heads to
 * W_o in that dtype and rounds the output to it. The softmax is fp32. */
typedef struct {
    int64_t d_model;
    int64_t heads;
    int64_t kv_heads; /* 0 means heads */
    const void *w_q, *w_k, *w_v, *w_o;
    const void *b_q, *b_k, *b_v, *b_o;
    mha_dtype dtype; /* of everything above and of the inputs and output: fp32, bf16, fp16 */
} mha_layer;

typedef struct {
    int64_t batch, seq_q, seq_kv;
    int causal;
    float scale; /* 0 = 1/sqrt(head_dim) */
} mha_layer_shape;

/* Bytes of workspace mha_forward needs: the projected Q, K, V and the heads
 * in the layer's dtype, the weight packing, and the attention kernel's. */
MHA_API mha_status mha_forward_workspace_size(const mha_kernel *k, const mha_layer *L,
                                              const mha_layer_shape *s, const mha_options *o,
                                              size_t *bytes);
/* query [B,Nq,d_model]; key, value [B,Nkv,d_model] (may be the same pointer as
 * query for self-attention); out [B,Nq,d_model]; all of the layer's dtype.
 * out is written last, so it may share memory with query, key, value and
 * W_q/W_k/W_v and their biases (out == query runs in place), never with W_o
 * or b_o; the workspace shares memory with nothing (MHA_EINVAL naming both). */
MHA_API mha_status mha_forward(const mha_kernel *k, const mha_layer *L, const mha_layer_shape *s,
                               const mha_options *o, const void *query, const void *key,
                               const void *value, void *out, void *workspace,
                               size_t workspace_size);
/* FLOPs of the layer: attention core plus 2*B*(Nq + 2*Nkv + Nq)*d_model^2. */
MHA_API double mha_forward_flops(const mha_layer *L, const mha_layer_shape *s);

#ifdef __cplusplus
}
#endif
#endif
