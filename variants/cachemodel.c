/* cachemodel.c - the cache model: default block sizes per block model, ISA
 * and thread count from the per-core cache sizes (cpuinfo.c), used whenever
 * block_q / block_kv are left at 0 and no tuning table decides. Built without
 * SIMD flags. */
#include <stdint.h>

#include "internal.h"
#include "select.h"

int mha_tile_width(mha_isa isa) { /* 4 zmm x 16 lanes, 3 ymm x 8, 4 scalar columns */
    const mha_isa_ops *ops = mha_ops_for(isa);
    return ops ? ops->tile_width : 1;
}

/* The decode cache against the L3 (select.h): K and V at their storage
 * width over every (batch, KV head). */
double mha_decode_cache_per_l3(const mha_problem *p) {
    mha_caches c;
    mha_caches_get(&c);
    const double bytes = 2.0 * (double)(p->batch * p->kv_heads) * (double)p->seq_kv *
                         (double)p->head_dim * (double)mha_dtype_size(mha_problem_kv_dtype(p));
    return bytes / (double)(c.l3 > 0 ? c.l3 : 1);
}

/* ---- the cache model ----------------------------------------------------------------
 * Both algorithms compute S^T = K Q^T and O = P V with one micro-kernel:
 * for S^T its loaded operand is a panel of tile-width query columns, Q^T
 * (d x w), while K rows stream past; for O the P^T block (bk x w) is
 * broadcast element by element while V rows stream past.
 *  - block_kv: the P^T panel (bk x 64 floats) may take up to 3/4 of the L1d
 *    (the accumulators live in registers, so little else competes); larger
 *    blocks amortise flash's
 *    per-block softmax and rescale. A power of two in [32, 256].
 *  - flash block_q: the per-thread working set Q^T + S^T + O = (2d + bk) bq
 *    floats within the L1d (it is touched every KV block), as a multiple of
 *    the tile width, at least one tile; with the streamed K and V blocks
 *    (2 bk d floats) within half the L2, shrinking bk first.
 *  - tiled block_q: S^T is materialised whole (Nkv x Nq: the L2/L3's problem,
 *    not the blocks'); per query block the Q^T and O panels (2 d bq floats)
 *    are reused across every KV block, so they get the L1d. Small query
 *    blocks also skip more of the causal triangle.
 * Measured on the reference machine (Zen 5: 48 KiB L1d, 1 MiB L2; `mhabench
 * tune` logs in results/tuning/log): this gives 64 x 128 for both at d = 64
 * and 128, where bk = 128 beat the earlier fixed 64 by 2-5% and tiled's bq 64
 * beat its fixed 256 by up to 40% under a causal mask. */
/* Bytes of a flash block's working set as the model above counts it: Q^T,
 * S^T and O ((2 d + bk) bq floats) and the streamed K and V blocks (2 bk d
 * floats). */
static uint64_t flash_ws(uint64_t d, uint64_t bq, uint64_t bk) {
    return ((2 * d + bk) * bq + 2 * bk * d) * sizeof(float);
}

static int pow2_floor(uint64_t v) {
    int r = 1;
    while ((uint64_t)r * 2 <= v && r < (1 << 20)) r *= 2;
    return r;
}

void mha_default_blocks(const mha_problem *p, unsigned traits, mha_isa isa, int threads,
                        int *block_q, int *block_kv) {
    const int tiled = (traits & MHA_KT_MATERIALISED) != 0;
    mha_caches c;
    mha_caches_get(&c);
    const uint64_t l1 = c.l1d, l2 = c.l2;
    const uint64_t w = (uint64_t)mha_tile_width(isa), f = sizeof(float);
    const mha_isa_ops *ops = mha_ops_for(isa);
    const uint64_t lanes = ops ? (uint64_t)ops->lanes : 1;
    const uint64_t d = p && p->head_dim > 0 ? (uint64_t)p->head_dim : 64;
    /* the vector flash kernels: neither the tiles nor decode */
    const int vflash = !tiled && !(traits & (MHA_KT_TILES | MHA_KT_DECODE));
    uint64_t bk = (uint64_t)pow2_floor(l1 * 3 / 4 / (64 * f));
    bk = bk < 32 ? 32 : bk > 256 ? 256 : bk;
    uint64_t bq;
    if (tiled) {
        bq = l1 / (2 * d * f) / w * w;
    } else {
        while (bk > 16 && flash_ws(d, w, bk) > l2 / 2) bk /= 2;
        bq = l1 / ((2 * d + bk) * f) / w * w;
    }
    if (bq < w) bq = w;
    if (bq > 512) bq = 512 / w * w;
    /* Measured on Zen 5 (AVX-512, 1 MiB L2): at head_dim <= 64 flash runs
     * 1-4% faster with 1.5-tile query blocks and 256-key blocks than with the
     * L1 fit above ((1,8,512,64) 215.7 -> 223.1 GFLOP/s, (1,12,512,64) 214.2
     * -> 222.4, (1,8,4096,64) 212.1 -> 216.4; equal at d = 128): S^T then
     * lives in the L2, which feeds the tile loads fast enough, and the per-
     * block softmax and rescale are amortised over twice the keys. Used where
     * the L2 holds that working set four times over. The coordinate-descent
     * tuner cannot reach this point from 64 x 128 (neither move alone pays). */
    if (!tiled && w >= 64 && d <= 64 && (2 * d + 256) * (w * 3 / 2) * f * 4 <= l2) {
        bq = w * 3 / 2;
        bk = 256;
    }
    /* The fp32 flash on AVX-512 at 64 < d <= 128: 256-key blocks where the
     * working set above stays within half the L2 (the L1 fit gives 64 at a
     * 32 KiB L1d). Measured on the Zen 4 VM (32 KiB L1d, 1 MiB L2), best of
     * 3, flash.avx512 at 64 x 64 (the model before) / 64 x 128 / 64 x 256:
     * (1,32,2048,128) 101.3 / 105.4 / 107.6 GFLOP/s, causal 99.1 / 102.5 /
     * 104.4, H32 KV8 causal 99.9 / 102.6 / 105.4, 2 threads 202.0 / 209.0 /
     * 214.8; (1,16,2048,80) 100.4 / 104.0 / 105.4, d 96 99.8 / 103.4 /
     * 105.7. The tuner did not find it: 64 -> 128 alone gains less than
     * its move margin. */
    if (vflash && isa == MHA_ISA_AVX512 && d > 64 && d <= 128 && flash_ws(d, bq, 256) <= l2 / 2 &&
        bk < 256)
        bk = 256;
    /* The bf16 dot product's flash (flash.avx512bf16: MHA_ISA_AVX512BF16 on
     * this model, not the tiles) reads K and V from packs made once per
     * (batch, KV head) and thread (flash_bf16.c), so a larger KV block costs
     * no packing and amortises the rescale of O: 256-key blocks at d = 128
     * too. Measured on the Zen 4 VM (32 KiB L1d, 1 MiB L2), 1 thread,
     * (1,32,2048,128) bf16 64 x 64 -> 64 x 256: 183.5 -> 194.6 GFLOP/s,
     * causal 177.9 -> 187.2; bq 96 or 128 within 1% of 64 there. (Since
     * stop 58 the next rule lengthens the block to 1,024 keys wherever
     * the L2 holds its P; this one's 256 is left for smaller L2s.) */
    if (vflash && isa == MHA_ISA_AVX512BF16 && d > 64 && d <= 128 &&
        (2 * d + 256) * w * f * 4 <= l2) {
        bq = w;
        bk = 256;
    }
    /* Since its score tile writes P as bf16 key pairs itself (no fp32 S^T,
     * flash_bf16.c), a KV block of flash.avx512bf16 costs bk / 2 x bq words
     * of P and nothing else per key but the packs' rows it reads; longer
     * blocks amortise P.V's loads and stores of O and the rescale over more
     * keys. 1,024 where those words take at most a quarter of the L2.
     * Measured on the Zen 4 VM (1 MiB L2), best of 3-5, bk 256 / 512 /
     * 1,024: (1,8,4096,64) at 96 x bk 200.9 / 201.9 / 204.4 (64 x 2,048
     * 205.5), 2 threads 387.8 / 399.0 / 402.4; (1,32,2048,128) at 64 x bk
     * 208.5 / 211.9 / 212.8, 2 threads 405.2 / 414.7 / 419.2; causal
     * (1,12,1024,64) 183.2 / 187.3 / 187.9, (1,32,2048,128) 201.8 / 205.2
     * / 206.5; (1,8,8192,128) window 4096:0 207.5 / 210.6 / 212.0. The
     * short-window rules below set their own blocks after this one. */
    if (vflash && isa == MHA_ISA_AVX512BF16 && d <= 128 && 512 * bq * f <= l2 / 4) bk = 1024;
    /* flash.avx512bf16 under a short window (at d <= 64, where the 1.5-tile
     * rule above gives 96 x 256): a query block's rows see the keys [first
     * row's begin, last row's end), and the band's two edges, bq - 1 keys
     * each, go through masked tiles, which compute scores no row sees. With
     * the window's span (left + right + 1) at most 1,024 keys, two vectors
     * of queries per block cut that waste, for more blocks. Measured on the
     * Zen 4 VM (32 KiB L1d, 1 MiB L2), bf16 causal d 64, best of 5 samples,
     * binaries alternated in 3 rounds: H8 N8192 window 128, 96 x 256 ->
     * 32 x 256, 1.065x at 1 and 2 threads (121 -> 129, 233 -> 248
     * GFLOP/s); gpt-oss's heads (H64 KV8 N4096, sinks, window 128) 1.056x.
     * Single runs: window 256 1.04x, 512 and 1,024 1.01x, 128:128 not
     * causal 1.04x; at d 128 (64 x 256) and under a window of 4,096,
     * 32-query blocks were level or slower, and on flash.avx512 (fp32)
     * within 2%: so not there. */
    if (vflash && isa == MHA_ISA_AVX512BF16 && p && d <= 64 && mha_window_local(p)) {
        int64_t left, right;
        mha_kv_band(p, &left, &right);
        if (left + right + 1 <= 1024) {
            bq = 2 * lanes;
            bk = 256;
        }
    }
    /* The tiles (flash.amx and flash.amxemu: MHA_KT_TILES): 256-key
     * blocks. Their S (32 x bk fp32) and P (32 x bk bf16) fill the L1d at
     * 256, and the per-row softmax and the P.V step's load and store of O
     * are amortised over twice the keys of 128: measured on the AMX VM
     * (docs/amx.md), (1,32,2048,128) bf16 at 1 thread, bq x bk 64 x 128 /
     * 64 x 256 / 64 x 512 ran 714 / 808 / 789 GFLOP/s, and bq 64..256
     * within 2% at bk 256. */
    if (!tiled && (traits & MHA_KT_TILES)) {
        bq = 64;
        bk = 256;
    }
    /* Load balance: flash's tasks are (batch, head, query block); with fewer
     * than 32 per thread the last ones leave threads idle (measured: (1,12,
     * 197,64) on 2 threads scales 1.78x at bq 64, 1.96x at 32). Halve bq down
     * to two vectors of queries, below which the tiles lose more than that. */
    if (p && threads > 1 && !tiled) {
        const uint64_t bh = (uint64_t)(p->batch * p->heads), nq = (uint64_t)p->seq_q;
        while (bq > 2 * lanes && bh * ((nq + bq - 1) / bq) < 32 * (uint64_t)threads)
            bq = (bq / 2 + lanes - 1) / lanes * lanes;
    }
    /* A dense flash kernel under a short window bounded on the left: a KV
     * block as long as a query block's band (span + bq - 1 keys, in 32s),
     * so the band runs as one masked block (flash.c, flash_bf16.c: the
     * tiles wholly inside it take the unmasked epilogue) instead of two
     * masked edges and the run between them, each with its own pass over
     * S^T, rescale and P.V call per row tile. Where S^T (bk x bq floats)
     * stays within half the L2, on the AVX-512 levels (flash.avx512bf16
     * keeps no S^T: its P, bf16 key pairs, is half that; the fp32 bound is
     * kept for both, and every window of up to 1,024 keys meets it there).
     * Measured on the Zen 4 VM (1 MiB L2), H8 N8192 causal, 3 alternated
     * rounds, 1 thread: flash.avx512bf16 d64 window 256 (32 x 256 -> 32 x
     * 288) 1.037x, 512 1.025x, 1,024 (96 x 1,120) 1.025x (1.028x at 2
     * threads), d128 1.024-1.026x; flash.avx512 d64 256 1.025x, 512 1.008x,
     * 1,024 1.017x, d128 256 1.030x; not causal 128:128 bf16 1.026x,
     * 256:256 fp32 1.019x. flash.avx2 lost 1-3% (window 256 and 512), so
     * not there. */
    if (p && vflash && lanes >= 16 && mha_window_local(p)) {
        int64_t left, right;
        mha_kv_band(p, &left, &right);
        if (left + right < 65536) {
            const uint64_t band = ((uint64_t)(left + right) + bq + 31) / 32 * 32;
            if (band > bk && band * bq * f <= l2 / 2) bk = band;
        }
    }
    /* Tiny problems: no block larger than the problem (the kernels clamp the
     * same way, so workspace sizes and runs agree either way). */
    if (p && p->seq_q > 0 && (int64_t)bq > p->seq_q) bq = (uint64_t)p->seq_q;
    if (p && p->seq_kv > 0 && (int64_t)bk > p->seq_kv) bk = (uint64_t)p->seq_kv;
    *block_q = bq < 1 ? 1 : (int)bq;
    *block_kv = bk < 1 ? 1 : (int)bk;
}
