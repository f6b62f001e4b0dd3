// Paged attention for decode (one query token per sequence) over a block-paged KV pool,
// its split-K reduction, and the kernel that appends new K/V tokens into the pool.
//
// Layouts (contiguous unless a stride is given):
//   q            [B, Hq, D]                      (row stride q_sb elements)
//   k_pool/v_pool [num_blocks, block_size, Hkv, D]
//   block_tables int32 [B, max_blocks]: physical block of logical block i of sequence b
//   seq_lens     int32 [B]: tokens in the cache for sequence b (the new token included)
//   out          [B, Hq, D]                      (row stride o_sb elements)
// Query head h reads kv head h / G, G = Hq / Hkv in 1..16. fp16 or bf16, D in {64, 80, 96,
// 128, 256} (D = 256: 4-warp variants only, shared memory).
//
// Decode algorithm: one CTA (W warps) per (kv head, split, batch). The G query heads of
// a kv head form the 16 rows of one mma.sync tile (rows >= G are zero), so K/V bytes are
// read once per kv head. The split's tokens stream through an S-stage cp.async pipeline in
// tiles of 16*W tokens gathered through the block table; warp w handles tokens
// [16w, 16w + 16) of each tile with its own online softmax, and the warps merge at the
// end. With num_splits > 1 each CTA writes an fp32 partial (O, log2-sum-exp) to the
// workspace and onnx_fuse_pa_reduce_* combines them (FlashDecoding).
// Sliding window: every decode entry and launcher takes a runtime int `window` (0 = none); with
// window W > 0 the query (position seq_lens[b] - 1) sees the last W keys only, and the splits
// cover those (pa_window_lo): the blocks before them are not read.
// Attention sinks: every decode entry and launcher takes `const float* sinks` ([Hq] float32 logits,
// null = none; sink_row_inv): folded into the denominator once per row where the row is finished
// (one split: the body; split-K: the reduce or the cluster combine, never per split).
//
// Append: onnx_fuse_append_kv_* writes new tokens k_new/v_new [B, Sq, Hkv, D] at cache
// positions seq_lens[b] - Sq + i (i < Sq) of sequence b, in place.
//
// fp8 (e4m3) pool with per-kv-head scales: onnx_fuse_append_kv_fp8 / onnx_fuse_pa8_decode_*,
// in the section at the end of this file.

#include <cooperative_groups.h>  // cluster barrier and DSMEM (the cluster-reduce variants)
#include <cuda.h>  // CUtensorMap and its enums (types only; the driver is reached at run time)

#include "attention_common.cuh"
#include "cuda_check.cuh"
#include "tensor_map.cuh"
#include "tma.cuh"

namespace onnx_fuse {

namespace cg = cooperative_groups;

constexpr int kPaSplitAlign = 64;  // split lengths are multiples of this many tokens
constexpr int kPaBoxRows = 64;     // TMA box rows: min(block_size, 64) (64 divides every split start)

// Variant (W warps, S stages, BULK): tiles of 16 * W tokens, warp w handles tokens
// [16w, 16w + 16). BULK = 0 gathers token rows with cp.async into XOR-swizzled tiles;
// BULK = 1 (sm_90+) issues one bulk async copy (the Hopper copy engine) per token row into
// tiles whose rows are padded by 16 bytes, completing on one mbarrier per stage.
// Rows are also padded when D is not a multiple of 64 (80, 96: see tile_off).
// BULK = 2 (sm_90+, D % 64 == 0; kernel suffix "t"): lanes of warp 0 issue one tensor copy (TMA)
// per (block, kv head, 64-column slab) of a tile into dense 128-byte-swizzled slabs (see kv_off).
// (D = 80 / 96 as unswizzled boxes of D + 8 columns into padded rows measured 8-10 % behind the
// bulk path on the H200 and were dropped.) Rows past the split's end come from the pool and V's are zeroed before use; the tensor maps
// come from onnx_fuse_paged_attention_decode_tma.
// BULK = 3 (sm_90+, D in {64, 128}, block_size a power of two >= 16; suffix "h"): one CTA per
// (group of W kv heads, split, batch), warp w handles kv head W * blockIdx.x + w over every token
// of the split. A tile is 16 tokens of all W heads: lane 0 of warp 0 issues one tensor copy per
// 64-column slab and K / V from a map whose dimensions are (D, pool rows, Hkv), so the box (64,
// 16, W) lands head-major, [head][16 rows][64], the BULK = 2 slab layout with warp w's rows at
// 16w; at W = Hkv a tile is one contiguous read of 16 whole token rows. No cross-warp merge:
// each warp owns its query heads; Q fragments come straight from global memory.
__host__ __device__ constexpr int pa_row_elems(int D, int bulk) { return (bulk == 1 || D % 64 != 0) ? D + 8 : D; }
__host__ __device__ constexpr int pa_smem_bytes(int D, int W, int S, int bulk) {
  // [bulk: mbarriers (128 B)] + Q tile (16 rows) + [TMA: 1 KiB alignment slack] + stages x (K + V
  // tiles); the merge scratch reuses the stages.
  return (bulk ? 128 : 0) + (bulk >= 2 ? 1024 : 0) +
         (16 * (D % 64 == 0 ? D : D + 8) + S * 2 * 16 * W * pa_row_elems(D, bulk)) * 2;
}

// ---- Pieces shared by the 16-bit and the fp8 pool decode bodies (pa_decode_body,
// pa8_decode_body): the empty split, the TMA box rows, the online softmax of one warp's 16
// tokens, and the merge of the warps' partial results.

// A split with no tokens: its partial's log-sum-exp is -inf (num_splits > 1), else the output
// rows are zero.
template <typename T, int D>
__device__ __forceinline__ void pa_empty_split(T* __restrict__ out, long long o_sb,
                                               float* __restrict__ part_lse, int Hq, int G, int hkv,
                                               int b, int split, int num_splits) {
  if (num_splits > 1) {
    if (threadIdx.x < G) part_lse[((size_t)b * Hq + hkv * G + threadIdx.x) * num_splits + split] = -INFINITY;
    return;
  }
  for (int c = threadIdx.x; c < G * (D / 8); c += blockDim.x) {
    const int r = c / (D / 8), cc = c % (D / 8);
    *reinterpret_cast<uint4*>(out + b * o_sb + (hkv * G + r) * D + cc * 8) = make_uint4(0, 0, 0, 0);
  }
}

// TMA boxes of a tile of `tile_tokens` tokens (warp 0): lane i < nbox owns box i, tokens
// [t0 + iR, t0 + iR + R) of one block, R = min(block_size, 64): split and tile starts are
// multiples of R, so a box never crosses a block. Its block id is loaded one tile ahead (blk) and
// turned into the pool row at issue time (row); boxes wholly past the split's end copy box 0's
// rows again, so every stage receives the same byte count (the rows past the end are masked).
struct PaTmaBoxes {
  int R, nbox, bs_shift, block_size, t_begin, t_end, tile_tokens, lane;
  // block_size is a power of two on the TMA paths
  __device__ __forceinline__ int blk(const int* bt, int tile) const {
    const int tok = t_begin + tile * tile_tokens + lane * R;
    return (lane < nbox && tok < t_end) ? bt[tok >> bs_shift] : -1;
  }
  // All of warp 0: this lane's pool row for tile; lane 0 sets the stage's byte count first.
  __device__ __forceinline__ int row(int tile, int blk, uint32_t bar, uint32_t stage_bytes) const {
    const int tok = t_begin + tile * tile_tokens + lane * R;
    int r = blk >= 0 ? (blk << bs_shift) + (tok & (block_size - 1)) : 0;
    const int r0 = __shfl_sync(0xffffffffu, r, 0);
    if (blk < 0) r = r0;
    if (lane == 0) mbar_arrive_expect_tx(bar, stage_bytes);
    __syncwarp();
    return r;
  }
  // A block id of pa_prefetch_blocks masked as blk() masks: -1 past the tile's boxes or the split's end.
  __device__ __forceinline__ int masked(int tile, int pre) const {
    const int tok = t_begin + tile * tile_tokens + lane * R;
    return (lane < nbox && tok < t_end) ? pre : -1;
  }
};

// The block ids of a split's first S tiles (TMA paths, warp 0), loaded before the sequence length is
// known: the chain seq_lens -> block table -> first tensor copy put three dependent memory latencies at
// the start of every CTA. The table indices do not depend on the length, so they are clamped to the
// table and loaded at once (volatile asm: kept ahead of the branches on the length); the caller masks
// what the length rules out (PaTmaBoxes::masked; head groups: tile < n_tiles). Lane offset lane_tok:
// the lane's box (lane * R tokens) on the per-kv-head path, 0 for head groups (one box per tile).
template <int S>
__device__ __forceinline__ void pa_prefetch_blocks(int (&blk)[S], const int* bt, int max_blocks, int block_size,
                                                   int t_begin, int tile_tokens, int lane_tok, bool active) {
  const int shift = __ffs(block_size) - 1;  // block_size is a power of two on the TMA paths
#pragma unroll
  for (int st = 0; st < S; ++st) {
    blk[st] = -1;
    if (active) {
      const int* p = bt + min((t_begin + st * tile_tokens + lane_tok) >> shift, max_blocks - 1);
      asm volatile("ld.global.nc.b32 %0, [%1];\n" : "=r"(blk[st]) : "l"(p));
    }
  }
}
__device__ __forceinline__ PaTmaBoxes pa_tma_boxes(int block_size, int t_begin, int t_end, int tile_tokens,
                                                   int lane) {
  const int R = min(block_size, kPaBoxRows);
  return PaTmaBoxes{R, tile_tokens / R, __ffs(block_size) - 1, block_size, t_begin, t_end, tile_tokens, lane};
}

// Sliding window (window > 0, HF's sliding_window): the decode query sits at position L - 1 and sees
// keys j > L - 1 - window, i.e. from t_lo = max(L - window, 0). The splits then cover [base, L) from
// base = t_lo rounded down to `align` tokens, a power of two dividing the block size on the TMA paths
// (their boxes' rows), so the first tile starts in the block holding t_lo and no block wholly below the
// window is read (a block manager may have freed those); the tokens in [base, t_lo) are masked. The
// planner sizes the splits for the window (launch_plan.plan_paged_decode(window=...)). window <= 0: the
// whole cache, t_lo = base = 0.
__device__ __forceinline__ int pa_window_lo(int L, int window) { return window > 0 ? max(L - window, 0) : 0; }

// Online softmax over one warp's 16 tokens (scores s of the m16n8 C fragments, rows g and g + 8):
// scale into log2 units, mask tokens outside [t_lo, t_end) (one unsigned compare of the token's offset
// from t_lo, rel0 = tok0 - t_lo, against span = t_end - t_lo; t_lo is 0 without a window), update the
// running max / sum and turn s into P; alpha[h] is the factor the row's O accumulator must be rescaled by.
__device__ __forceinline__ void pa_softmax_step(float (&s)[2][4], float (&row_m)[2], float (&row_l)[2],
                                                float (&alpha)[2], int rel0, int t4, unsigned span,
                                                float scale_log2) {
  const int rel = rel0 + 2 * t4;
#pragma unroll
  for (int nt = 0; nt < 2; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const unsigned r = static_cast<unsigned>(rel + nt * 8 + (e & 1));
      s[nt][e] = r < span ? s[nt][e] * scale_log2 : -INFINITY;
    }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float mx = quad_max(fmaxf(fmaxf(s[0][2 * h], s[0][2 * h + 1]), fmaxf(s[1][2 * h], s[1][2 * h + 1])));
    const float m_new = fmaxf(row_m[h], mx);
    const float m_use = (m_new == -INFINITY) ? 0.f : m_new;
    alpha[h] = exp2f(row_m[h] - m_use);
    row_m[h] = m_new;
    float sum = 0.f;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      const float p0 = exp2f(s[nt][2 * h] - m_use), p1 = exp2f(s[nt][2 * h + 1] - m_use);
      s[nt][2 * h] = p0;
      s[nt][2 * h + 1] = p1;
      sum += p0 + p1;
    }
    row_l[h] = row_l[h] * alpha[h] + sum;
  }
}

// s += s_odd: the two halves of a score tile accumulated in separate mma chains.
__device__ __forceinline__ void pa_add_scores(float (&s)[2][4], const float (&s_odd)[2][4]) {
#pragma unroll
  for (int nt = 0; nt < 2; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[nt][e] += s_odd[nt][e];
}

template <int D>
__device__ __forceinline__ void pa_rescale(float (&acc)[D / 8][4], const float (&alpha)[2]) {
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) {
    acc[dt][0] *= alpha[0];
    acc[dt][1] *= alpha[0];
    acc[dt][2] *= alpha[1];
    acc[dt][3] *= alpha[1];
  }
}

// Merges the W warps' (m, l, O) for the G query rows through fp32 scratch over the drained stages and
// writes out (num_splits == 1) or the split's partial: the merge of the 16-bit TMA and cp.async kernels and of
// the fp8 pool's per-kv-head kernels (the 16-bit bulk kernels': pa_merge_out_flat, below; the head groups have
// no merge). Lanes r < 16 of warp 0 combine the W
// warps' (m, l) of row r once into its max and final scale (the sink folded in at one split; the
// partial's log2-sum-exp written at split-K); each warp then scales its own rows in registers by
// 2^(m_w - M) * scale * out_scale and stores them; the output is the plain sum over the warps.
// out_scale: the fp8 pool's v_scale (1 for the 16-bit pool). PERM: acc[nt] holds columns
// 32(nt / 4) + 4n + nt % 4 (the fp8 PV order) instead of 8nt + n.
// Row stride D + pa_merge_pad(PERM) floats, so that the stores meet no bank conflict at D % 32 == 0:
// !PERM stores float2 (a half-warp: rows g = 0..3 land 8 banks apart, t4 covers 8 banks); PERM
// stores float4 (four consecutive columns 32grp + 8t4 + 4e + jj; a quarter-warp: rows g, g + 1 land
// 4 banks apart, t4 8 banks apart). At a stride of D, rows g = 0..7 share banks: 4-way (float2) and
// 8-way (the old PERM's scalar stores). The old merge also took W exponentials per output column.
// Session 35 on an H100 (docs/PERF.md "Thirty-fourth round"), !PERM on the TMA kernels: MQA B128
// H16/1 D64 54.9 -> 51.7 us under ncu (196,608 store bank conflicts -> 0), GB/s +0.0 to +4.4 %. Session 36
// ("Thirty-fifth round"), PERM on the fp8 pool: MQA B128 D64 w4s3t 34.2 -> 30.5 us under ncu (476,886 -> 5,426
// store bank conflicts), GB/s +1.5 to +10.4 % (medians, ahead in every pass) at every fp8 shape timed. Session 37
// ("Thirty-sixth round"), !PERM on the 16-bit cp.async kernels: MQA B128 H16/1 D64 w4s3 s4 +1.2 % (5/5 passes),
// D128 B32 w4s3 s2 +0.5 % (3/3, session 36).
__host__ __device__ constexpr int pa_merge_pad(bool perm) { return perm ? 4 : 8; }
__host__ __device__ constexpr int pa_merge_floats(int D, int W, bool perm) {
  return W * 16 * (2 + D + pa_merge_pad(perm)) + 32;
}

template <typename T, int D, int W, bool PERM>
__device__ __forceinline__ void pa_merge_out(float* scratch, const float (&acc)[D / 8][4],
                                             const float (&row_m)[2], const float (&row_l)[2],
                                             float out_scale, T* __restrict__ out, long long o_sb,
                                             float* __restrict__ part_o, float* __restrict__ part_lse,
                                             int Hq, int G, int hkv, int b, int split, int num_splits,
                                             const float* __restrict__ sinks) {
  constexpr int OS = D + pa_merge_pad(PERM);  // scratch row stride (floats)
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
  float* sm = scratch;      // [W][16] the warps' row maxima
  float* sl = sm + W * 16;  // [W][16] their row sums
  float* rs = sl + W * 16;  // [16][2] per row: the max M (0 for an empty row) and the final scale
  float* so = rs + 32;      // [W][16][OS] the warps' scaled O rows (16-byte aligned: 32 (W + 1) floats in)
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float l = quad_sum(row_l[h]);
    if (t4 == 0) {
      sm[warp * 16 + g + 8 * h] = row_m[h];
      sl[warp * 16 + g + 8 * h] = l;
    }
  }
  __syncthreads();
  if (warp == 0 && lane < 16) {
    const int r = lane;
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < W; ++w) M = fmaxf(M, sm[w * 16 + r]);
    const float Mu = (M == -INFINITY) ? 0.f : M;
    float lsum = 0.f;
#pragma unroll
    for (int w = 0; w < W; ++w) lsum += sl[w * 16 + r] * exp2f(sm[w * 16 + r] - Mu);
    float inv = 0.f;
    if (r < G) {
      const int hq = hkv * G + r;
      // one split: the row is finished here, so its sink joins (split-K: in the reduce)
      inv = num_splits == 1 ? sink_row_inv(lsum, Mu, sink_log2(sinks, hq)) : (lsum > 0.f ? 1.f / lsum : 0.f);
      if (num_splits > 1)
        part_lse[((size_t)b * Hq + hq) * num_splits + split] = lsum > 0.f ? Mu + log2f(lsum) : -INFINITY;
    }
    rs[2 * r] = Mu;
    rs[2 * r + 1] = inv;
  }
  __syncthreads();
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = g + 8 * h;
    const float inv = rs[2 * r + 1];
    const bool live = inv > 0.f;  // an empty row (or r >= G) is zero, whatever its O holds
    const float f = live ? exp2f(row_m[h] - rs[2 * r]) * (inv * out_scale) : 0.f;
    float* row = so + (warp * 16 + r) * OS;
    if constexpr (PERM) {
#pragma unroll
      for (int grp = 0; grp < D / 32; ++grp)
#pragma unroll
        for (int e = 0; e < 2; ++e)
          *reinterpret_cast<float4*>(row + 32 * grp + 8 * t4 + 4 * e) =
              live ? make_float4(acc[4 * grp][2 * h + e] * f, acc[4 * grp + 1][2 * h + e] * f,
                                 acc[4 * grp + 2][2 * h + e] * f, acc[4 * grp + 3][2 * h + e] * f)
                   : make_float4(0.f, 0.f, 0.f, 0.f);
    } else {
#pragma unroll
      for (int nt = 0; nt < D / 8; ++nt)
        *reinterpret_cast<float2*>(row + nt * 8 + 2 * t4) =
            live ? make_float2(acc[nt][2 * h] * f, acc[nt][2 * h + 1] * f) : make_float2(0.f, 0.f);
    }
  }
  __syncthreads();
  for (int idx = tid; idx < G * D; idx += 32 * W) {
    const int r = idx / D, d = idx % D;
    float o = 0.f;
#pragma unroll
    for (int w = 0; w < W; ++w) o += so[(w * 16 + r) * OS + d];
    const int hq = hkv * G + r;
    if (num_splits == 1)
      out[b * o_sb + (size_t)hq * D + d] = MmaTraits<T>::from_float(o);
    else
      part_o[(((size_t)b * Hq + hq) * num_splits + split) * D + d] = o;
  }
}

// The merge of the 16-bit bulk kernels (pa_decode_body, BULK = 1): the warps' (m, l, O) through fp32 scratch at
// a stride of D floats, each output column combining the W warps (W exponentials per column). Its float2 stores
// conflict (4-way at D % 32 == 0, 2-way at D = 80), which pa_merge_out's padding removes (ncu, bulk D96 B32:
// 308,737 -> 10,182 store conflicts, 153.7 -> 149.8 us), but the bulk kernels read it level, not ahead in every
// pass: -0.4 % (D96) and -0.1 % (D80) in session 36, +0.7 % / level in session 35 (medians of 3 passes), D96 / D80
// B32 -0.1 to -0.7 %, B64 +0.1 to +0.2 % in session 37 (5 passes): several CTAs per SM hide a 4-warp merge.
template <typename T, int D, int W>
__device__ __forceinline__ void pa_merge_out_flat(float* scratch, const float (&acc)[D / 8][4],
                                                  const float (&row_m)[2], const float (&row_l)[2],
                                                  T* __restrict__ out, long long o_sb, float* __restrict__ part_o,
                                                  float* __restrict__ part_lse, int Hq, int G, int hkv, int b,
                                                  int split, int num_splits, const float* __restrict__ sinks) {
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
  float* sm = scratch;
  float* sl = sm + W * 16;
  float* so = sl + W * 16;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float l = quad_sum(row_l[h]);
    const int r = g + 8 * h;
    if (t4 == 0) {
      sm[warp * 16 + r] = row_m[h];
      sl[warp * 16 + r] = l;
    }
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt)
      *reinterpret_cast<float2*>(so + (warp * 16 + r) * D + nt * 8 + 2 * t4) =
          make_float2(acc[nt][2 * h], acc[nt][2 * h + 1]);
  }
  __syncthreads();
  for (int idx = tid; idx < G * D; idx += 32 * W) {
    const int r = idx / D, d = idx % D;
    const int hq = hkv * G + r;
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < W; ++w) M = fmaxf(M, sm[w * 16 + r]);
    const float Mu = (M == -INFINITY) ? 0.f : M;
    float lsum = 0.f, osum = 0.f;
#pragma unroll
    for (int w = 0; w < W; ++w) {
      const float f = exp2f(sm[w * 16 + r] - Mu);
      lsum += sl[w * 16 + r] * f;
      osum += so[(w * 16 + r) * D + d] * f;
    }
    // one split: the row is finished here, so its sink joins (split-K: in the reduce)
    const float inv = num_splits == 1 ? sink_row_inv(lsum, Mu, sink_log2(sinks, hq))
                                      : (lsum > 0.f ? 1.f / lsum : 0.f);
    const float o = lsum > 0.f ? osum * inv : 0.f;
    if (num_splits == 1) {
      out[b * o_sb + (size_t)hq * D + d] = MmaTraits<T>::from_float(o);
    } else {
      const size_t pidx = ((size_t)b * Hq + hq) * num_splits + split;
      part_o[pidx * D + d] = o;
      if (d == 0) part_lse[pidx] = lsum > 0.f ? Mu + log2f(lsum) : -INFINITY;
    }
  }
}

// Split-K reduce inside a thread-block cluster (the cluster-reduce head-group kernels of both pools,
// sm_90): the grid's cluster dimensions are (1, num_splits, 1), so the CTAs of one cluster are the
// splits of one (head group, sequence). Each has written its partial to its own shared memory, rows
// r = 16 * (kv head - head0) + (query head % G): o (normalized, v_scale applied) at cl[r * D + d],
// log2-sum-exp at lse_loc[r] (-inf for an empty split). After a cluster barrier every CTA combines a
// share of the rows' columns from all the CTAs' shared memory (DSMEM) and writes out; a second
// barrier keeps each CTA's shared memory alive until the others have read it. No workspace and
// no second kernel.
template <typename T, int D, int R16>
__device__ __forceinline__ void pa_cluster_combine(const float* cl, const float* lse_loc, T* __restrict__ out,
                                                   long long o_sb, int G, int head0, int b,
                                                   const float* __restrict__ sinks) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();  // release / acquire: every split's partial is visible cluster-wide
  const int ns = static_cast<int>(cluster.num_blocks()), rank = static_cast<int>(cluster.block_rank());
  const int nt = blockDim.x;
  for (int c = rank * nt + threadIdx.x; c < R16 * G * (D / 4); c += ns * nt) {
    const int rr = c / (D / 4), d = 4 * (c % (D / 4));
    const int r = (rr / G) * 16 + rr % G;
    const float sk = sink_log2(sinks, head0 * G + rr);  // the row's sink joins once, here
    float M = sk;
    for (int s = 0; s < ns; ++s) M = fmaxf(M, cluster.map_shared_rank(lse_loc, s)[r]);
    float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
    float wsum = M != -INFINITY ? exp2f(sk - M) : 0.f;
    if (M != -INFINITY) {
      for (int s = 0; s < ns; ++s) {
        const float lse = cluster.map_shared_rank(lse_loc, s)[r];
        if (lse == -INFINITY) continue;
        const float w = exp2f(lse - M);
        const float4 x = *reinterpret_cast<const float4*>(cluster.map_shared_rank(cl, s) + r * D + d);
        wsum += w;
        o.x += w * x.x;
        o.y += w * x.y;
        o.z += w * x.z;
        o.w += w * x.w;
      }
    }
    const float inv = wsum > 0.f ? 1.f / wsum : 0.f;
    T* dst = out + b * o_sb + (size_t)(head0 * G + rr) * D + d;  // rr = (kv head - head0) * G + query row
    dst[0] = MmaTraits<T>::from_float(o.x * inv);
    dst[1] = MmaTraits<T>::from_float(o.y * inv);
    dst[2] = MmaTraits<T>::from_float(o.z * inv);
    dst[3] = MmaTraits<T>::from_float(o.w * inv);
  }
  cluster.sync();
#else
  __trap();
#endif
}

// Append (append_kv_body, append_kv_fp8_body): one thread per 8 elements (chunk cc) of new token
// i of sequence b, kv head h, written at cache position seq_lens[b] - Sq + i; positions outside
// the block table are skipped. store(dst, src, h): pool element offset, k_new/v_new offset.
template <int D, typename Store>
__device__ __forceinline__ void pa_append_walk(long long n_sb, long long n_ss, const int* __restrict__ block_tables,
                                               const int* __restrict__ seq_lens, int B, int Sq, int Hkv,
                                               int block_size, int max_blocks, Store store) {
  constexpr int CPR = D / 8;
  const long long total = (long long)B * Sq * Hkv * CPR;
  for (long long c = blockIdx.x * (long long)blockDim.x + threadIdx.x; c < total;
       c += (long long)gridDim.x * blockDim.x) {
    const int cc = c % CPR;
    long long rest = c / CPR;
    const int h = rest % Hkv;
    rest /= Hkv;
    const int i = rest % Sq;
    const int b = rest / Sq;
    const int pos = seq_lens[b] - Sq + i;
    if (pos < 0 || pos >= max_blocks * block_size) continue;
    const int blk = block_tables[(size_t)b * max_blocks + pos / block_size];
    store((((long long)blk * block_size + pos % block_size) * Hkv + h) * D + cc * 8,
          b * n_sb + i * n_ss + (long long)h * D + cc * 8, h);
  }
}

template <typename T, int D, int kPaWarps, int kPaStages, int BULK = 0, bool CLUSTER = false>
__device__ __forceinline__ void pa_decode_body(
    const T* __restrict__ q, long long q_sb, const T* __restrict__ k_pool,
    const T* __restrict__ v_pool, const int* __restrict__ block_tables,
    const int* __restrict__ seq_lens, T* __restrict__ out, long long o_sb,
    float* __restrict__ part_o, float* __restrict__ part_lse, int Hq, int Hkv,
    int block_size, int max_blocks, int part_tokens, float scale_log2, int window,
    const float* __restrict__ sinks, const void* tmap_k = nullptr, const void* tmap_v = nullptr) {
  using Tr = MmaTraits<T>;
  static_assert(BULK < 2 || D % 64 == 0, "TMA tiles are 64-column slabs");
  static_assert(BULK != 3 || D == 64 || D == 128, "head-group tiles: 64-column slabs, Q in registers");
  constexpr bool TMA = BULK >= 2;
  constexpr bool HEADS = BULK == 3;
  constexpr int NT = 32 * kPaWarps;
  constexpr int kPaTile = 16 * kPaWarps;
  constexpr int CPR = D / 8;
  constexpr int RS = pa_row_elems(D, BULK);  // smem row stride (elements)
  static_assert((BULK == 1 ? kPaWarps * 16 * (D + 2) : pa_merge_floats(D, kPaWarps, false)) * 4 <=
                    kPaStages * 2 * kPaTile * RS * 2,
                "merge scratch must fit in the pipeline stages");
  // CLUSTER: the split's partial (pa_cluster_combine) over the drained stages
  static_assert(!CLUSTER || HEADS, "cluster reduce: the head-group kernels");
  static_assert(!CLUSTER || kPaWarps * 16 * (D + 1) * 4 <= kPaStages * 2 * kPaTile * RS * 2,
                "cluster partial must fit in the pipeline stages");
  constexpr int TILE_ELEMS = kPaTile * RS;
  // Element offset of (row, col) in a K/V tile: swizzled for cp.async, padded for bulk; TMA:
  // D / 64 slabs of kPaTile x 64 elements, 16-byte chunk c / 8 XOR row % 8 (SWIZZLE_128B on
  // 1 KiB-aligned slabs: ldmatrix's 8 rows of one chunk column hit 8 distinct bank groups).
  auto kv_off = [](int r, int c) {
    if constexpr (TMA) return (c / 64) * (kPaTile * 64) + r * 64 + ((c % 64) ^ ((r & 7) << 3));
    return (BULK || D % 64 != 0) ? r * RS + c : swz<D>(r, c);
  };
  // Q fragments stay in registers up to D = 128; at D = 256 they are reloaded per tile.
  constexpr bool QREG = D <= 128;

  extern __shared__ __align__(128) unsigned char pa_smem[];
  uint64_t* mbar = reinterpret_cast<uint64_t*>(pa_smem);  // [kPaStages], BULK only
  T* sQ = reinterpret_cast<T*>(pa_smem + (BULK ? 128 : 0));
  T* sKV = sQ + 16 * tile_row<D>();  // [stage][K|V][kPaTile][RS]
  if constexpr (TMA)  // 1 KiB-aligned stages (the swizzle period)
    sKV = reinterpret_cast<T*>(reinterpret_cast<unsigned char*>(sKV) +
                               ((1024u - (smem_u32(sKV) & 1023u)) & 1023u));

  const int tid = threadIdx.x;
  const int warp = tid >> 5;
  const int lane = tid & 31;
  const int t4 = lane & 3;
  const int hkv = HEADS ? blockIdx.x * kPaWarps + warp : blockIdx.x;
  const int split = blockIdx.y;
  const int num_splits = gridDim.y;
  const int b = blockIdx.z;
  const int G = Hq / Hkv;
  constexpr int TT = HEADS ? 16 : kPaTile;  // tokens per tile

  int t_begin = split * part_tokens;
  const int* bt = block_tables + (size_t)b * max_blocks;
  [[maybe_unused]] int pre_blk[kPaStages] = {};  // TMA: the first tiles' block ids, ahead of seq_lens
  auto prefetch = [&] {
    if constexpr (TMA) {
      const int R0 = HEADS ? 0 : min(block_size, kPaBoxRows);
      pa_prefetch_blocks<kPaStages>(pre_blk, bt, max_blocks, block_size, t_begin, TT, lane * R0,
                                    warp == 0 && (HEADS || lane * R0 < kPaTile));
    }
  };
  if (window <= 0) prefetch();  // a window moves the splits by the length: prefetch after it
  const int L = max(seq_lens[b], 0);
  const int t_lo = pa_window_lo(L, window);  // see pa_window_lo
  if (window > 0) {
    t_begin += t_lo & -((TMA && !HEADS) ? min(block_size, kPaBoxRows) : 16);
    prefetch();
  }
  const int t_end = min(L, t_begin + part_tokens);

  // nothing to do for this split (short sequence); CLUSTER: the empty split still joins its
  // cluster's reduce (no tiles, a partial of log-sum-exp -inf)
  if (!CLUSTER && t_begin >= t_end) {
    // HEADS: the CTA's W kv heads own the W * G consecutive query heads from blockIdx.x * W * G
    pa_empty_split<T, D>(out, o_sb, part_lse, Hq, HEADS ? G * kPaWarps : G, HEADS ? blockIdx.x : hkv, b,
                         split, num_splits);
    return;
  }
  const int n_tiles = (t_end - t_begin + TT - 1) / TT;
  const long long tok_stride = (long long)Hkv * D;

  // Q rows: query heads hkv*G .. hkv*G+G-1; rows >= G zero.
  const T* qb = q + b * q_sb + (size_t)hkv * G * D;
  for (int c = tid; c < 16 * CPR && !HEADS; c += NT) {
    int r = c / CPR, cc = c % CPR;
    cp_async_16(smem_u32(sQ + tile_off<D>(r, cc * 8)), qb + (r < G ? r : 0) * D + cc * 8, r < G);
  }

  if (BULK) {
    if (tid == 0) {
      for (int st = 0; st < kPaStages; ++st) mbar_init(smem_u32(mbar + st), 1);
      mbar_fence_init();
    }
    __syncthreads();
  }

  // cp.async path: 16-byte chunks, zero-filled past the end of the split.
  auto load_tile = [&](int tile, int stage) {
    const int t0 = t_begin + tile * kPaTile;
    T* dk = sKV + stage * 2 * TILE_ELEMS;
    T* dv = dk + TILE_ELEMS;
#pragma unroll
    for (int i = 0; i < (kPaTile * CPR + NT - 1) / NT; ++i) {
      int c = tid + i * NT;
      if ((kPaTile * CPR) % NT != 0 && c >= kPaTile * CPR) break;
      int r = c / CPR, cc = c % CPR;
      int tok = t0 + r;
      bool ok = static_cast<unsigned>(tok - t_lo) < static_cast<unsigned>(t_end - t_lo);  // in the window
      long long off = 0;
      if (ok) {
        int blk = bt[tok / block_size];
        off = ((long long)blk * block_size + tok % block_size) * tok_stride + (long long)hkv * D;
      }
      cp_async_16(smem_u32(dk + kv_off(r, cc * 8)), k_pool + off + cc * 8, ok);
      cp_async_16(smem_u32(dv + kv_off(r, cc * 8)), v_pool + off + cc * 8, ok);
    }
  };

  // Bulk path: thread tid copies row (tid % kPaTile) of K (tid < kPaTile) or V of every
  // tile, one bulk copy each; rows past the end re-read the last valid token (finite data
  // the softmax masks), so every stage receives the same byte count. The block-table lookup
  // for the next tile is done one iteration ahead, so its latency hides behind the math.
  static_assert(!BULK || 2 * kPaTile == NT, "bulk variants copy one row per thread");
  const int my_r = tid % kPaTile;
  const bool my_v = tid >= kPaTile;
  auto bulk_row_off = [&](int tile) -> long long {
    const int tok = min(max(t_begin + tile * kPaTile + my_r, t_lo), t_end - 1);
    const int blk = bt[tok / block_size];
    return ((long long)blk * block_size + tok % block_size) * tok_stride + (long long)hkv * D;
  };
  auto bulk_issue = [&](int tile, long long off) {
    const int stage = tile % kPaStages;
    const uint32_t bar = smem_u32(mbar + stage);
    if (tid == 0) mbar_arrive_expect_tx(bar, 2 * kPaTile * D * 2);
    T* dst = sKV + stage * 2 * TILE_ELEMS + (my_v ? TILE_ELEMS : 0) + my_r * RS;
    bulk_copy_g2s(smem_u32(dst), (my_v ? v_pool : k_pool) + off, D * 2, bar);
  };
  long long pending_off = 0;

  // TMA path (warp 0, see PaTmaBoxes).
  const PaTmaBoxes boxes = pa_tma_boxes(block_size, t_begin, t_end, kPaTile, lane);
  const int R = boxes.R, nbox = boxes.nbox;
  auto box_blk = [&](int tile) -> int {
    if constexpr (HEADS) return bt[(t_begin + tile * 16) >> boxes.bs_shift];  // tile < n_tiles
    return boxes.blk(bt, tile);
  };
  auto box_pre = [&](int tile) -> int {  // tile < kPaStages: the prefetched id, masked like box_blk's
    if constexpr (HEADS) return pre_blk[tile];  // tile < n_tiles
    return boxes.masked(tile, pre_blk[tile]);
  };
  auto tma_issue = [&](int tile, int blk) {  // all of warp 0
    const int stage = tile % kPaStages;
    const uint32_t bar = smem_u32(mbar + stage);
    if constexpr (HEADS) {  // lane 0: one (64, 16, W) box per slab, K and V
      if (lane == 0) {
        mbar_arrive_expect_tx(bar, 2 * TILE_ELEMS * 2);
        const int row = (blk << boxes.bs_shift) + ((t_begin + tile * 16) & (block_size - 1));
        T* dk = sKV + stage * 2 * TILE_ELEMS;
#pragma unroll
        for (int h = 0; h < D / 64; ++h) {
          tma_load_3d(smem_u32(dk + h * kPaTile * 64), tmap_k, h * 64, row, blockIdx.x * kPaWarps, bar);
          tma_load_3d(smem_u32(dk + TILE_ELEMS + h * kPaTile * 64), tmap_v, h * 64, row, blockIdx.x * kPaWarps, bar);
        }
      }
      return;
    }
    const int row = boxes.row(tile, blk, bar, 2 * TILE_ELEMS * 2);
    if (lane < nbox) {
      T* dk = sKV + stage * 2 * TILE_ELEMS + lane * R * 64;
#pragma unroll
      for (int h = 0; h < D / 64; ++h) {
        tma_load_3d(smem_u32(dk + h * kPaTile * 64), tmap_k, h * 64, hkv, row, bar);
        tma_load_3d(smem_u32(dk + TILE_ELEMS + h * kPaTile * 64), tmap_v, h * 64, hkv, row, bar);
      }
    }
  };
  int pending_blk = -1;

  // Prologue: Q joins the first group; fill kPaStages - 1 stages.
#pragma unroll
  for (int st = 0; st < kPaStages - 1; ++st) {
    if constexpr (TMA) {
      if (warp == 0 && st < n_tiles) tma_issue(st, box_pre(st));
    } else if constexpr (BULK != 0) {
      if (st < n_tiles) bulk_issue(st, bulk_row_off(st));
    } else {
      if (st < n_tiles) load_tile(st, st);
    }
    cp_async_commit();
  }
  if constexpr (TMA) {
    if (warp == 0 && (!HEADS || kPaStages - 1 < n_tiles)) pending_blk = box_pre(kPaStages - 1);
  } else if constexpr (BULK != 0) {
    pending_off = bulk_row_off(kPaStages - 1);
  }

  float acc[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
  float row_m[2] = {-INFINITY, -INFINITY};
  float row_l[2] = {0.f, 0.f};
  uint32_t qf[QREG ? D / 16 : 1][4];
  if constexpr (HEADS) {  // m16k16 A fragments of rows g, g + 8 (zero at >= G) from global memory
    const int g = lane >> 2;
    const T* q0 = qb + (g < G ? g : 0) * D + 2 * t4;
    const T* q1 = qb + (g + 8 < G ? g + 8 : 0) * D + 2 * t4;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      qf[kk][0] = g < G ? *reinterpret_cast<const uint32_t*>(q0 + kk * 16) : 0u;
      qf[kk][1] = g + 8 < G ? *reinterpret_cast<const uint32_t*>(q1 + kk * 16) : 0u;
      qf[kk][2] = g < G ? *reinterpret_cast<const uint32_t*>(q0 + kk * 16 + 8) : 0u;
      qf[kk][3] = g + 8 < G ? *reinterpret_cast<const uint32_t*>(q1 + kk * 16 + 8) : 0u;
    }
  }

  for (int j = 0; j < n_tiles; ++j) {
    // Keep kPaStages - 1 tiles in flight: issue tile j + kPaStages - 1 (maybe empty group).
    {
      int nxt = j + kPaStages - 1;
      if constexpr (TMA) {
        if (warp == 0 && nxt < n_tiles) {
          tma_issue(nxt, pending_blk);
          if (!HEADS || nxt + 1 < n_tiles) pending_blk = box_blk(nxt + 1);
        }
      } else if constexpr (BULK != 0) {
        if (nxt < n_tiles) {
          bulk_issue(nxt, pending_off);
          pending_off = bulk_row_off(nxt + 1);
        }
      } else {
        if (nxt < n_tiles) load_tile(nxt, nxt % kPaStages);
      }
      cp_async_commit();
    }
    if (BULK) {
      if (j == 0) cp_async_wait<0>();  // Q
      mbar_wait_parity(smem_u32(mbar + j % kPaStages), (j / kPaStages) & 1);
    } else {
      cp_async_wait<kPaStages - 1>();
    }
    __syncthreads();
    if (QREG && !HEADS && j == 0) {
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        int r = lane & 15;
        int c = kk * 16 + (lane >> 4) * 8;
        ldmatrix_x4(qf[QREG ? kk : 0], smem_u32(sQ + tile_off<D>(r, c)));
      }
    }
    const T* tk = sKV + (j % kPaStages) * 2 * TILE_ELEMS;
    const T* tv = tk + TILE_ELEMS;
    const int kr = warp * 16;  // this warp's 16 rows in the tile (HEADS: its head's)
    const int tok0 = t_begin + j * TT + (HEADS ? 0 : kr);  // their first token
    if constexpr (TMA) {
      // The last tile's rows past the end hold whatever the pool has there (maybe NaN): zero
      // this warp's V rows of them (P = 0 there, and 0 * NaN would poison O). K needs nothing:
      // their scores are replaced by -inf. The last tile's stage is not refilled afterwards.
      // Likewise the first tile's rows below a window's start (lo > 0).
      const int valid = t_end - tok0, lo = t_lo - tok0;
      if (valid < 16 || lo > 0) {
        for (int i = lane; i < 16 * (D / 8); i += 32) {
          const int r = i / (D / 8), c = (i % (D / 8)) * 8;
          if (r >= valid || r < lo)
            *reinterpret_cast<uint4*>(const_cast<T*>(tv) + kv_off(kr + r, c)) = make_uint4(0u, 0u, 0u, 0u);
        }
        __syncwarp();
      }
    }

    // QK^T: even and odd k-steps accumulate apart (four independent mma chains of D / 32, not two of
    // D / 16), summed once; on the TMA paths (on the cp.async ones at D = 96 the extra registers spilled)
    constexpr bool QK4 = TMA;
    float s[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
    float s_odd[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t bf[4];
      int r = kr + (lane & 7) + ((lane >> 4) << 3);
      int c = kk * 16 + ((lane >> 3) & 1) * 8;
      ldmatrix_x4(bf, smem_u32(tk + kv_off(r, c)));
      float(&sk)[2][4] = (QK4 && (kk & 1)) ? s_odd : s;
      if constexpr (QREG) {
        Tr::mma(sk[0], qf[QREG ? kk : 0], bf[0], bf[1]);
        Tr::mma(sk[1], qf[QREG ? kk : 0], bf[2], bf[3]);
      } else {
        uint32_t qa[4];
        ldmatrix_x4(qa, smem_u32(sQ + tile_off<D>(lane & 15, kk * 16 + (lane >> 4) * 8)));
        Tr::mma(sk[0], qa, bf[0], bf[1]);
        Tr::mma(sk[1], qa, bf[2], bf[3]);
      }
    }
    if constexpr (QK4) pa_add_scores(s, s_odd);
    float alpha[2];
    pa_softmax_step(s, row_m, row_l, alpha, tok0 - t_lo, t4, static_cast<unsigned>(t_end - t_lo), scale_log2);
    pa_rescale<D>(acc, alpha);
    uint32_t pa[4];
    pa[0] = Tr::pack(s[0][0], s[0][1]);
    pa[1] = Tr::pack(s[0][2], s[0][3]);
    pa[2] = Tr::pack(s[1][0], s[1][1]);
    pa[3] = Tr::pack(s[1][2], s[1][3]);
#pragma unroll
    for (int dd = 0; dd < D / 16; ++dd) {
      uint32_t bf[4];
      int r = kr + (lane & 7) + ((lane >> 3) & 1) * 8;
      int c = dd * 16 + (lane >> 4) * 8;
      ldmatrix_x4_trans(bf, smem_u32(tv + kv_off(r, c)));
      Tr::mma(acc[2 * dd], pa, bf[0], bf[1]);
      Tr::mma(acc[2 * dd + 1], pa, bf[2], bf[3]);
    }
    __syncthreads();  // stage j % kPaStages is refilled by a later iteration
  }
  cp_async_wait<0>();
  __syncthreads();

  if constexpr (HEADS) {  // each warp owns its query rows: no merge
    // CLUSTER: the split's partial in shared memory (pa_cluster_combine's layout), over the stages
    [[maybe_unused]] float* cl = reinterpret_cast<float*>(sKV);
    const int g = lane >> 2;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float l = quad_sum(row_l[h]);
      const int r = g + 8 * h;
      if (r >= G) continue;
      const int hq = hkv * G + r;
      // one split: the row is finished, its sink joins (split-K: the reduce / cluster combine)
      const float inv = (!CLUSTER && num_splits == 1) ? sink_row_inv(l, row_m[h], sink_log2(sinks, hq))
                                                      : (l > 0.f ? 1.f / l : 0.f);
      const size_t pidx = ((size_t)b * Hq + hq) * num_splits + split;
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt) {
        const int d = dt * 8 + 2 * t4;
        const float o0 = acc[dt][2 * h] * inv, o1 = acc[dt][2 * h + 1] * inv;
        if (CLUSTER)
          *reinterpret_cast<float2*>(cl + (warp * 16 + r) * D + d) = make_float2(o0, o1);
        else if (num_splits == 1)
          *reinterpret_cast<uint32_t*>(out + b * o_sb + (size_t)hq * D + d) = Tr::pack(o0, o1);
        else
          *reinterpret_cast<float2*>(part_o + pidx * D + d) = make_float2(o0, o1);
      }
      if constexpr (CLUSTER) {
        if (t4 == 0) cl[kPaWarps * 16 * D + warp * 16 + r] = l > 0.f ? row_m[h] + log2f(l) : -INFINITY;
      } else {
        if (num_splits > 1 && t4 == 0) part_lse[pidx] = l > 0.f ? row_m[h] + log2f(l) : -INFINITY;
      }
    }
    if constexpr (CLUSTER)
      pa_cluster_combine<T, D, kPaWarps>(cl, cl + kPaWarps * 16 * D, out, o_sb, G, blockIdx.x * kPaWarps, b,
                                         sinks);
    return;
  }
  if constexpr (BULK == 1)
    pa_merge_out_flat<T, D, kPaWarps>(reinterpret_cast<float*>(sKV), acc, row_m, row_l, out, o_sb, part_o, part_lse,
                                      Hq, G, hkv, b, split, num_splits, sinks);
  else
    pa_merge_out<T, D, kPaWarps, false>(reinterpret_cast<float*>(sKV), acc, row_m, row_l, 1.f, out, o_sb, part_o,
                                        part_lse, Hq, G, hkv, b, split, num_splits, sinks);
}

// Combines num_splits partials per (batch, query head): grid (Hq, B), D threads.
template <typename T, int D>
__device__ __forceinline__ void pa_reduce_body(const float* __restrict__ part_o,
                                               const float* __restrict__ part_lse,
                                               T* __restrict__ out, long long o_sb, int Hq,
                                               int num_splits, const float* __restrict__ sinks) {
  const int hq = blockIdx.x, b = blockIdx.y, d = threadIdx.x;
  const size_t base = ((size_t)b * Hq + hq) * num_splits;
  const float sk = sink_log2(sinks, hq);  // the row's sink joins once, here (no split has it)
  float M = sk;
  for (int s = 0; s < num_splits; ++s) M = fmaxf(M, part_lse[base + s]);
  float wsum = M != -INFINITY ? exp2f(sk - M) : 0.f, osum = 0.f;
  if (M != -INFINITY) {
    for (int s = 0; s < num_splits; ++s) {
      const float lse = part_lse[base + s];
      if (lse == -INFINITY) continue;
      const float w = exp2f(lse - M);
      wsum += w;
      osum += w * part_o[(base + s) * D + d];
    }
  }
  out[b * o_sb + (size_t)hq * D + d] = MmaTraits<T>::from_float(wsum > 0.f ? osum / wsum : 0.f);
}

// Append: one thread per 16-byte chunk of a new token row.
template <typename T, int D>
__device__ __forceinline__ void append_kv_body(
    const T* __restrict__ k_new, const T* __restrict__ v_new, long long n_sb, long long n_ss,
    T* __restrict__ k_pool, T* __restrict__ v_pool, const int* __restrict__ block_tables,
    const int* __restrict__ seq_lens, int B, int Sq, int Hkv, int block_size, int max_blocks) {
  pa_append_walk<D>(n_sb, n_ss, block_tables, seq_lens, B, Sq, Hkv, block_size, max_blocks,
                    [&](long long dst, long long src, int) {
                      *reinterpret_cast<uint4*>(k_pool + dst) = *reinterpret_cast<const uint4*>(k_new + src);
                      *reinterpret_cast<uint4*>(v_pool + dst) = *reinterpret_cast<const uint4*>(v_new + src);
                    });
}

}  // namespace onnx_fuse

using onnx_fuse::append_kv_body;
using onnx_fuse::pa_decode_body;
using onnx_fuse::pa_reduce_body;

// Decode variant name: onnx_fuse_pa_decode_<dt>_d<D>_w<warps>s<stages>[b] (b: bulk copies).
#define OF_PA_DECODE(DTN, T, D, W, ST, BULK, SUF)                                               \
  extern "C" __global__ void __launch_bounds__(32 * W)                                          \
      onnx_fuse_pa_decode_##DTN##_d##D##_w##W##s##ST##SUF(                                      \
          const T* q, long long q_sb, const T* k_pool, const T* v_pool,                         \
          const int* block_tables, const int* seq_lens, T* out, long long o_sb, float* part_o,  \
          float* part_lse, int Hq, int Hkv, int block_size, int max_blocks, int part_tokens,    \
          float scale_log2, int window, const float* sinks) {                                   \
    pa_decode_body<T, D, W, ST, BULK>(q, q_sb, k_pool, v_pool, block_tables, seq_lens, out,     \
                                      o_sb, part_o, part_lse, Hq, Hkv, block_size, max_blocks,  \
                                      part_tokens, scale_log2, window, sinks);                  \
  }

// The variant list; launch_plan.PA_VARIANTS mirrors it (warps, stages, bulk).
#define OF_PA_VARIANTS(X, DTN, T, D) \
  X(DTN, T, D, 4, 3, 0, )            \
  X(DTN, T, D, 8, 3, 0, )            \
  X(DTN, T, D, 4, 3, 1, b)           \
  X(DTN, T, D, 4, 2, 1, b)           \
  X(DTN, T, D, 8, 3, 1, b)

#define OF_PA_VARIANTS_ALL OF_PA_VARIANTS
#define OF_PA_KERNELS(DTN, T, D)                                                               \
  OF_PA_VARIANTS_ALL(OF_PA_DECODE, DTN, T, D)                                                  \
  extern "C" __global__ void __launch_bounds__(D) onnx_fuse_pa_reduce_##DTN##_d##D(          \
      const float* part_o, const float* part_lse, T* out, long long o_sb, int Hq,             \
      int num_splits, const float* sinks) {                                                    \
    pa_reduce_body<T, D>(part_o, part_lse, out, o_sb, Hq, num_splits, sinks);                  \
  }                                                                                            \
  extern "C" __global__ void __launch_bounds__(256) onnx_fuse_append_kv_##DTN##_d##D(        \
      const T* k_new, const T* v_new, long long n_sb, long long n_ss, T* k_pool, T* v_pool,   \
      const int* block_tables, const int* seq_lens, int B, int Sq, int Hkv, int block_size,   \
      int max_blocks) {                                                                        \
    append_kv_body<T, D>(k_new, v_new, n_sb, n_ss, k_pool, v_pool, block_tables, seq_lens, B, \
                         Sq, Hkv, block_size, max_blocks);                                     \
  }

// D = 256: the 4-warp variants (8 warps x 3 stages of 512-byte rows exceed shared memory).
#define OF_PA_VARIANTS_D256(X, DTN, T, D) \
  X(DTN, T, D, 4, 3, 0, )                 \
  X(DTN, T, D, 4, 3, 1, b)                \
  X(DTN, T, D, 4, 2, 1, b)

OF_PA_KERNELS(f16, __half, 64)
OF_PA_KERNELS(f16, __half, 80)
OF_PA_KERNELS(f16, __half, 96)
OF_PA_KERNELS(f16, __half, 128)
OF_PA_KERNELS(bf16, __nv_bfloat16, 64)
OF_PA_KERNELS(bf16, __nv_bfloat16, 80)
OF_PA_KERNELS(bf16, __nv_bfloat16, 96)
OF_PA_KERNELS(bf16, __nv_bfloat16, 128)
#undef OF_PA_VARIANTS_ALL
#define OF_PA_VARIANTS_ALL OF_PA_VARIANTS_D256
OF_PA_KERNELS(f16, __half, 256)
OF_PA_KERNELS(bf16, __nv_bfloat16, 256)

// TMA variants (BULK = 2): onnx_fuse_pa_decode_<dt>_d<D>_w<warps>s<stages>t, launched by
// onnx_fuse_paged_attention_decode_tma with the pools' tensor maps (not by the TensorRT AOT
// adapter, whose regex takes only the three-number X(...) lines of OF_PA_VARIANTS above).
#define OF_PA_TMA_DECODE(DTN, T, D, W, ST)                                                       \
  extern "C" __global__ void __launch_bounds__(32 * W)                                          \
      onnx_fuse_pa_decode_##DTN##_d##D##_w##W##s##ST##t(                                        \
          const T* q, long long q_sb, const T* k_pool, const T* v_pool,                         \
          const int* block_tables, const int* seq_lens, T* out, long long o_sb, float* part_o,  \
          float* part_lse, int Hq, int Hkv, int block_size, int max_blocks, int part_tokens,    \
          float scale_log2, int window, const float* sinks, const __grid_constant__ CUtensorMap tk, \
          const __grid_constant__ CUtensorMap tv) {                                             \
    pa_decode_body<T, D, W, ST, 2>(q, q_sb, k_pool, v_pool, block_tables, seq_lens, out, o_sb,  \
                                   part_o, part_lse, Hq, Hkv, block_size, max_blocks,           \
                                   part_tokens, scale_log2, window, sinks, &tk, &tv);           \
  }
// (warps, stages) lists; launch_plan.PA_TMA_VARIANTS mirrors them. D = 64, 128 and 256. D = 64 adds
// 8 warps x 3 / 4 stages (tiles of 128 tokens: 32 / 48 KiB more of K/V in flight per CTA for the
// MQA grid of one CTA per SM; 8 warps x 4 stages do not fit at D = 128) and 16 warps x 2 stages
// (tiles of 256 tokens, 134 KiB: planned for fp16 MQA, run 17: 2694-2697 GB/s against 2636-2645 for
// w8s3t; 16 warps x 3 stages measured behind and were dropped, again on the H100 in session 35: 2440-2447
// GB/s against w16s2t's 2475-2483 at B128, both with the padded pa_merge_out).
#define OF_PA_TMA_VARIANTS(X, DTN, T, D) \
  X(DTN, T, D, 4, 2)                     \
  X(DTN, T, D, 4, 3)                     \
  X(DTN, T, D, 4, 4)                     \
  X(DTN, T, D, 8, 2)
#define OF_PA_TMA_VARIANTS_D64(X, DTN, T, D) \
  OF_PA_TMA_VARIANTS(X, DTN, T, D)           \
  X(DTN, T, D, 8, 3)                         \
  X(DTN, T, D, 8, 4)                         \
  X(DTN, T, D, 16, 2)
#define OF_PA_TMA_VARIANTS_D256(X, DTN, T, D) \
  X(DTN, T, D, 4, 2)                          \
  X(DTN, T, D, 4, 3)

// Head-group variants (BULK = 3): onnx_fuse_pa_decode_<dt>_d<D>_w<warps>s<stages>h, launched by
// onnx_fuse_paged_attention_decode_tma_heads; launch_plan.PA_HEADS_VARIANTS mirrors the list.
#define OF_PA_HEADS_DECODE(DTN, T, D, W, ST)                                                     \
  extern "C" __global__ void __launch_bounds__(32 * W)                                          \
      onnx_fuse_pa_decode_##DTN##_d##D##_w##W##s##ST##h(                                        \
          const T* q, long long q_sb, const T* k_pool, const T* v_pool,                         \
          const int* block_tables, const int* seq_lens, T* out, long long o_sb, float* part_o,  \
          float* part_lse, int Hq, int Hkv, int block_size, int max_blocks, int part_tokens,    \
          float scale_log2, int window, const float* sinks, const __grid_constant__ CUtensorMap tk, \
          const __grid_constant__ CUtensorMap tv) {                                             \
    pa_decode_body<T, D, W, ST, 3>(q, q_sb, k_pool, v_pool, block_tables, seq_lens, out, o_sb,  \
                                   part_o, part_lse, Hq, Hkv, block_size, max_blocks,           \
                                   part_tokens, scale_log2, window, sinks, &tk, &tv);           \
  }
// w4s2h is planned at D = 128 where w8s2h would split within one wave (launch_plan.plan_paged_decode; H100
// run 36e: 0.3-3.3 % ahead of w8s2hc / w8s2h, w4s3h and w4s4h between them, w2s2h level with it and w2s3h
// behind, so those two and w4s4h are not compiled).
#define OF_PA_HEADS_VARIANTS(X, DTN, T, D) \
  X(DTN, T, D, 4, 2)                       \
  X(DTN, T, D, 4, 3)                       \
  X(DTN, T, D, 8, 2)                       \
  X(DTN, T, D, 8, 3)
OF_PA_HEADS_VARIANTS(OF_PA_HEADS_DECODE, f16, __half, 64)
OF_PA_HEADS_VARIANTS(OF_PA_HEADS_DECODE, f16, __half, 128)
OF_PA_HEADS_VARIANTS(OF_PA_HEADS_DECODE, bf16, __nv_bfloat16, 64)
OF_PA_HEADS_VARIANTS(OF_PA_HEADS_DECODE, bf16, __nv_bfloat16, 128)

OF_PA_TMA_VARIANTS_D64(OF_PA_TMA_DECODE, f16, __half, 64)
OF_PA_TMA_VARIANTS(OF_PA_TMA_DECODE, f16, __half, 128)
OF_PA_TMA_VARIANTS_D256(OF_PA_TMA_DECODE, f16, __half, 256)
OF_PA_TMA_VARIANTS_D64(OF_PA_TMA_DECODE, bf16, __nv_bfloat16, 64)
OF_PA_TMA_VARIANTS(OF_PA_TMA_DECODE, bf16, __nv_bfloat16, 128)
OF_PA_TMA_VARIANTS_D256(OF_PA_TMA_DECODE, bf16, __nv_bfloat16, 256)

// Cluster-reduce head-group variant (suffix "hc"; planned at D = 128 where the head-group grid of two
// splits fits one wave): the split-K reduce done inside a thread-block cluster of the num_splits splits
// (pa_cluster_combine) instead of the workspace and onnx_fuse_pa_reduce_*; launched by
// onnx_fuse_paged_attention_decode_cluster (cluster dims (1, num_splits, 1), num_splits <= 8).
// launch_plan.PA_CLUSTER_VARIANTS mirrors the list (bulk 3 -> 4). (The per-kv-head TMA form "tc" and
// w4s3hc measured behind and were dropped; so was w8s3hc, a third 64 KiB stage at one CTA per SM:
// run 18, 4253-4255 GB/s against w8s2hc's 4279-4289 at B64 H32/8 D128 block 16.)
#define OF_PA_CLUSTER_DECODE(DTN, T, D, W, ST, BULK, SUF)                                       \
  extern "C" __global__ void __launch_bounds__(32 * W)                                          \
      onnx_fuse_pa_decode_##DTN##_d##D##_w##W##s##ST##SUF(                                      \
          const T* q, long long q_sb, const T* k_pool, const T* v_pool,                         \
          const int* block_tables, const int* seq_lens, T* out, long long o_sb, float* part_o,  \
          float* part_lse, int Hq, int Hkv, int block_size, int max_blocks, int part_tokens,    \
          float scale_log2, int window, const float* sinks, const __grid_constant__ CUtensorMap tk, \
          const __grid_constant__ CUtensorMap tv) {                                             \
    pa_decode_body<T, D, W, ST, BULK, true>(q, q_sb, k_pool, v_pool, block_tables, seq_lens, out, \
                                            o_sb, part_o, part_lse, Hq, Hkv, block_size,         \
                                            max_blocks, part_tokens, scale_log2, window, sinks, &tk, &tv); \
  }
#define OF_PA_CLUSTER_VARIANTS(X, DTN, T, D) X(DTN, T, D, 8, 2, 3, hc)
OF_PA_CLUSTER_VARIANTS(OF_PA_CLUSTER_DECODE, f16, __half, 64)
OF_PA_CLUSTER_VARIANTS(OF_PA_CLUSTER_DECODE, f16, __half, 128)
OF_PA_CLUSTER_VARIANTS(OF_PA_CLUSTER_DECODE, bf16, __nv_bfloat16, 64)
OF_PA_CLUSTER_VARIANTS(OF_PA_CLUSTER_DECODE, bf16, __nv_bfloat16, 128)

// ----------------------------------------------------------------------------------------
// Host launch functions.

namespace {

// What every decode launcher checks alike: 0 or cudaErrorInvalidValue. The pools must be 16-byte
// aligned (docs/ops.md): every load path reads them in 16-byte pieces (cp.async chunks, bulk rows,
// tensor-map boxes), so a misaligned pool is refused here rather than run by some fallback.
// split_k_workspace: the splits are reduced through the workspace (all but the cluster-reduce kernels).
int pa_check_args(int B, int Hq, int Hkv, int block_size, int max_blocks, long long q_sb, int part_tokens,
                  int num_splits, const void* workspace, const void* k_pool, const void* v_pool,
                  bool split_k_workspace = true) {
  OF_REQUIRE(B > 0 && B <= 65535 && Hkv > 0 && Hkv <= 65535 && Hq % Hkv == 0 && Hq / Hkv <= 16);
  OF_REQUIRE(part_tokens > 0 && part_tokens % onnx_fuse::kPaSplitAlign == 0);
  OF_REQUIRE(num_splits >= 1 && num_splits <= 65535);
  OF_REQUIRE(block_size > 0 && max_blocks > 0 && q_sb % 8 == 0);
  OF_REQUIRE(num_splits == 1 || workspace != nullptr || !split_k_workspace);
  OF_REQUIRE(reinterpret_cast<uintptr_t>(k_pool) % 16 == 0 && reinterpret_cast<uintptr_t>(v_pool) % 16 == 0);
  return 0;
}

// The split-K workspace: fp32 partial outputs [B, Hq, num_splits, D], then their log2-sum-exps
// [B, Hq, num_splits] (null pointers when there is no workspace).
struct PaSplitK {
  float* part_o;
  float* part_lse;
  int num_splits;
};
PaSplitK pa_split_k(void* workspace, int B, int Hq, int D, int num_splits) {
  float* o = reinterpret_cast<float*>(workspace);
  return {o, o ? o + (size_t)B * Hq * num_splits * D : nullptr, num_splits};
}

template <typename T>
using PaReduceFn = void (*)(const float*, const float*, T*, long long, int, int, const float*);

// Launches a decode kernel (grid, 32 * warps threads, smem bytes of dynamic shared memory) and,
// with more than one split, the reduce of its dtype and head size D over grid (Hq, B).
template <typename T, typename... P, typename... A>
int pa_launch(void (*kernel)(P...), PaReduceFn<T> reduce, int D, dim3 grid, int warps, int smem,
              const PaSplitK& sk, void* out, long long o_sb, int Hq, const float* sinks, cudaStream_t stream,
              A... args) {
  OF_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  kernel<<<grid, 32 * warps, smem, stream>>>(args...);
  OF_CUDA_CHECK_LAUNCH();
  if (sk.num_splits > 1) {
    reduce<<<dim3(Hq, grid.z), D, 0, stream>>>(sk.part_o, sk.part_lse, static_cast<T*>(out), o_sb, Hq,
                                                sk.num_splits, sinks);
    OF_CUDA_CHECK_LAUNCH();
  }
  return 0;
}

// Launches a cluster-reduce decode kernel: clusters (1, grid.y, 1), the splits of one row.
template <typename... P, typename... A>
int pa_launch_cluster(void (*kernel)(P...), dim3 grid, int warps, int smem, cudaStream_t stream, A... args) {
  OF_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 1;
  attr[0].val.clusterDim.y = grid.y;
  attr[0].val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(32 * warps);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  OF_CUDA_TRY(cudaLaunchKernelEx(&cfg, kernel, args...));
  return 0;
}

}  // namespace

// BODY(DTN, T) for the launcher's dtype code: (f16, __half) or (bf16, __nv_bfloat16).
#define OF_PA_DTYPES(BODY)                  \
  if (dtype == onnx_fuse::kFloat16) {       \
    BODY(f16, __half)                       \
  } else if (dtype == onnx_fuse::kBFloat16) { \
    BODY(bf16, __nv_bfloat16)               \
  }
// The leading kernel arguments of the 16-bit pool decode (pa_decode_body) and of the fp8 pool's
// (pa8_decode_body); the launchers define q ... sl2, window, sinks and sk.
#define OF_PA16_ARGS(T)                                                                          \
  (const T*)q, q_sb, (const T*)k_pool, (const T*)v_pool, block_tables, seq_lens, (T*)out, o_sb, \
      sk.part_o, sk.part_lse, Hq, Hkv, block_size, max_blocks, part_tokens, sl2, window, sinks
#define OF_PA8_ARGS(T)                                                                            \
  (const T*)q, q_sb, (const unsigned char*)k_pool, (const unsigned char*)v_pool, k_scale, v_scale, \
      block_tables, seq_lens, (T*)out, o_sb, sk.part_o, sk.part_lse, Hq, Hkv, block_size,        \
      max_blocks, part_tokens, sl2, window, sinks
// One compiled variant: launch it (and the reduce) when (D, warps, stages[, bulk]) match.
#define OF_PA_LAUNCH_IF(COND, KERNEL, DTN, DD, W, ...)                                              \
  if (COND)                                                                                      \
    return pa_launch(KERNEL, onnx_fuse_pa_reduce_##DTN##_d##DD, DD, grid, W, smem, sk, out, o_sb, Hq, \
                     sinks, stream, __VA_ARGS__);

// The dispatch tail of the head-group launchers (D = 64, 128): LAUNCH(DTN, T, DD, ...) for each entry
// of the variant list LIST(X, DTN, T, DD) at the launcher's dtype; what none of them takes is refused.
#define OF_PA_HEAD_GROUP_DISPATCH(LIST, LAUNCH)                                 \
  if (dtype == onnx_fuse::kFloat16) {                                          \
    LIST(LAUNCH, f16, __half, 64) LIST(LAUNCH, f16, __half, 128)               \
  } else if (dtype == onnx_fuse::kBFloat16) {                                  \
    LIST(LAUNCH, bf16, __nv_bfloat16, 64) LIST(LAUNCH, bf16, __nv_bfloat16, 128) \
  }                                                                            \
  return static_cast<int>(cudaErrorInvalidValue);

extern "C" {

// Dynamic shared memory of decode variant (warps, stages, bulk).
int onnx_fuse_paged_attention_smem_bytes(int head_dim, int warps, int stages, int bulk) {
  return onnx_fuse::pa_smem_bytes(head_dim, warps, stages, bulk);
}

// fp32 workspace bytes for num_splits > 1 (0 when num_splits == 1).
long long onnx_fuse_paged_attention_workspace_bytes(int B, int Hq, int D, int num_splits) {
  if (num_splits <= 1) return 0;
  return (long long)B * Hq * num_splits * (D + 1) * 4;
}

// Decode attention over the paged pool. part_tokens (a multiple of 64) is the number of
// tokens one split covers; num_splits * part_tokens must cover the longest sequence
// (use onnx_fuse.plugins.launch_plan.plan_paged_decode). workspace: at least
// onnx_fuse_paged_attention_workspace_bytes(...) bytes, may be null when num_splits == 1.
// Variant (warps, stages, bulk): (4, 3, 0), (8, 3, 0), (4, 3, 1), (4, 2, 1), (8, 3, 1); D = 256:
// the three 4-warp ones. D in {64, 80, 96, 128, 256}. (0, 0, 0) = default; bulk variants need
// compute capability 9.0+. Pools must be 16-byte aligned (refused otherwise, as by every decode
// launcher).
int onnx_fuse_paged_attention_decode_ex(int dtype, const void* q, long long q_sb,
                                        const void* k_pool, const void* v_pool,
                                        const int* block_tables, const int* seq_lens, void* out,
                                        long long o_sb, void* workspace, int B, int Hq, int Hkv,
                                        int D, int block_size, int max_blocks, int part_tokens,
                                        int num_splits, float scale, int warps, int stages,
                                        int bulk, int window, const float* sinks, cudaStream_t stream) {
  if (warps == 0 && stages == 0) {
    warps = 4;
    stages = 3;
    bulk = 0;
  }
  if (const int rc = pa_check_args(B, Hq, Hkv, block_size, max_blocks, q_sb, part_tokens, num_splits, workspace,
                                   k_pool, v_pool))
    return rc;
  if (bulk) {
    int dev = 0, major = 0;
    OF_CUDA_TRY(cudaGetDevice(&dev));
    OF_CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    OF_REQUIRE(major >= 9);
  }
  const int smem = onnx_fuse::pa_smem_bytes(D, warps, stages, bulk);
  const PaSplitK sk = pa_split_k(workspace, B, Hq, D, num_splits);
  const float sl2 = scale * onnx_fuse::kLog2e;
  dim3 grid(Hkv, num_splits, B);
#define OF_LAUNCH(DTN, T, DD, W, ST, BULK, SUF)                                                      \
  OF_PA_LAUNCH_IF(D == DD && warps == W && stages == ST && bulk == BULK,                             \
                  onnx_fuse_pa_decode_##DTN##_d##DD##_w##W##s##ST##SUF, DTN, DD, W, OF_PA16_ARGS(T))
#define OF_HEAD_DIMS(DTN, T)                                                                      \
  OF_PA_VARIANTS(OF_LAUNCH, DTN, T, 64) OF_PA_VARIANTS(OF_LAUNCH, DTN, T, 80)                      \
  OF_PA_VARIANTS(OF_LAUNCH, DTN, T, 96) OF_PA_VARIANTS(OF_LAUNCH, DTN, T, 128)                     \
  OF_PA_VARIANTS_D256(OF_LAUNCH, DTN, T, 256)
  OF_PA_DTYPES(OF_HEAD_DIMS)
#undef OF_HEAD_DIMS
#undef OF_LAUNCH
  return static_cast<int>(cudaErrorInvalidValue);
}

// Same with the default variant.
int onnx_fuse_paged_attention_decode(int dtype, const void* q, long long q_sb,
                                     const void* k_pool, const void* v_pool,
                                     const int* block_tables, const int* seq_lens, void* out,
                                     long long o_sb, void* workspace, int B, int Hq, int Hkv,
                                     int D, int block_size, int max_blocks, int part_tokens,
                                     int num_splits, float scale, cudaStream_t stream) {
  return onnx_fuse_paged_attention_decode_ex(dtype, q, q_sb, k_pool, v_pool, block_tables,
                                             seq_lens, out, o_sb, workspace, B, Hq, Hkv, D,
                                             block_size, max_blocks, part_tokens, num_splits,
                                             scale, 0, 0, 0, 0, nullptr, stream);
}

// Writes k_new/v_new [B, Sq, Hkv, D] (strides n_sb, n_ss; head rows contiguous) into the
// pools at positions seq_lens[b] - Sq + i; positions outside the block table are skipped.
int onnx_fuse_append_kv(int dtype, const void* k_new, const void* v_new, long long n_sb,
                        long long n_ss, void* k_pool, void* v_pool, const int* block_tables,
                        const int* seq_lens, int B, int Sq, int Hkv, int D, int block_size,
                        int max_blocks, cudaStream_t stream) {
  OF_REQUIRE(B > 0 && Sq > 0 && Hkv > 0 && block_size > 0 && max_blocks > 0);
  OF_REQUIRE(n_sb % 8 == 0 && n_ss % 8 == 0);
  const long long chunks = (long long)B * Sq * Hkv * (D / 8);
  const int threads = 256;
  const long long want = (chunks + threads - 1) / threads;
  const int blocks = static_cast<int>(want < 65535 ? want : 65535);
#define OF_LAUNCH(DTN, T, DD)                                                                \
  if (D == DD) {                                                                             \
    onnx_fuse_append_kv_##DTN##_d##DD<<<blocks, threads, 0, stream>>>(                       \
        (const T*)k_new, (const T*)v_new, n_sb, n_ss, (T*)k_pool, (T*)v_pool, block_tables,  \
        seq_lens, B, Sq, Hkv, block_size, max_blocks);                                       \
    OF_CUDA_CHECK_LAUNCH();                                                                  \
    return 0;                                                                                \
  }
#define OF_HEAD_DIMS(DTN, T) \
  OF_LAUNCH(DTN, T, 64) OF_LAUNCH(DTN, T, 80) OF_LAUNCH(DTN, T, 96) OF_LAUNCH(DTN, T, 128) OF_LAUNCH(DTN, T, 256)
  OF_PA_DTYPES(OF_HEAD_DIMS)
#undef OF_HEAD_DIMS
#undef OF_LAUNCH
  return static_cast<int>(cudaErrorInvalidValue);
}

}  // extern "C"

// ----------------------------------------------------------------------------------------
// fp8 (e4m3) pool: uint8 k_pool/v_pool [num_blocks, block_size, Hkv, D] holding e4m3 bits,
// float32 k_scale/v_scale [Hkv] (dequantized value = e4m3 * scale, static per kv head).
//
// Append quantizes (x / scale, round to nearest even, saturated to +-448). Decode keeps the
// fp8 bytes in shared memory and converts them to fp16 in registers right before each mma:
// k_scale[hkv] is folded into the softmax scale and v_scale[hkv] into the final output, so the
// conversion is a plain e4m3 -> fp16 cvt (exact: every e4m3 value is an fp16 value). The math
// runs in fp16 for fp16 and bf16 queries alike (bf16 q is rounded to fp16 once when loaded,
// P is packed as fp16): e4m3 has no bf16 cvt, and fp16 P is finer than bf16 P.
//
// Fragments are read straight from the byte tiles (rows padded to D + 16 bytes, which makes
// both read patterns below free of bank conflicts for D in {64, 96, 128, 256}):
// - QK^T: the reduction index (d) may be permuted as long as Q and K agree. Thread (g, t4)
//   of k-step kk takes d = 16kk + 4t4 + {0,1} as its b0 pair and d = 16kk + 4t4 + {2,3} as
//   b1: one 32-bit load of K row g, two cvts; Q fragments are loaded from global memory in
//   the same order.
// - PV: V is the col-major B operand (pairs of tokens for one d), so thread (g, t4) loads the
//   32-bit words at d = 32grp + 4g .. +3 of token rows 2t4, 2t4+1, 2t4+8, 2t4+9 and pairs
//   bytes with prmt: n-tile (grp, jj) gets output column d = 32grp + 4n + jj for its n index
//   n. The output columns are thus permuted; the merge step writes them back in order.
//   This needs D % 32 == 0, so D = 80 has no fp8 decode.

#include <cuda_fp8.h>

namespace onnx_fuse {

__host__ __device__ constexpr int pa8_smem_bytes(int D, int W, int S) { return S * 2 * 16 * W * (D + 16); }
// TMA variants: dense swizzled stages (1 KiB aligned: 1 KiB slack) + S mbarriers (128 B).
__host__ __device__ constexpr int pa8t_smem_bytes(int D, int W, int S) { return S * 2 * 16 * W * D + 1024 + 128; }
// Cluster-reduce head groups: the TMA layout + the split's log-sum-exps (16 rows per warp) after the
// mbarriers (the stages hold o; at two stages of D = 128 they are exactly that).
__host__ __device__ constexpr int pa8hc_smem_bytes(int D, int W, int S) { return pa8t_smem_bytes(D, W, S) + W * 16 * 4; }

// Byte offset of (row r, byte c) in a TMA-loaded K or V tile of TILE rows: the tile is NH = D / CW
// column slabs of TILE x CW bytes (one box per slab and block), CW = 128 (SWIZZLE_128B: the 16-byte
// chunk index, address bits 4-6, is XORed with bits 7-9) or 64 at D = 64 (SWIZZLE_64B: bits 4-5
// with bits 7-8). Slab and box bases are multiples of the swizzle period (1 KiB / 512 B).
template <int D, int TILE>
__device__ __forceinline__ int pa8t_off(int r, int c) {
  constexpr int CW = D >= 128 ? 128 : 64;
  const int o = r * CW + (c % CW);
  const int sw = CW == 128 ? ((o >> 7) & 7) : ((o >> 7) & 3);
  return (c / CW) * (TILE * CW) + (o ^ (sw << 4));
}


// Two e4m3 bytes (low byte first) -> fp16x2 bits.
__device__ __forceinline__ uint32_t e4m3x2_to_h2(uint32_t x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint32_t r;
  const unsigned short s = static_cast<unsigned short>(x);
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(r) : "h"(s));
  return r;
#else
  __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(x & 0xffffu), __NV_E4M3);
  return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
#endif
}

// Two 16-bit T values (bits) -> fp16x2 bits.
template <typename T> __device__ __forceinline__ uint32_t to_h2(uint32_t x);
template <> __device__ __forceinline__ uint32_t to_h2<__half>(uint32_t x) { return x; }
template <> __device__ __forceinline__ uint32_t to_h2<__nv_bfloat16>(uint32_t x) {
  __nv_bfloat162 b = *reinterpret_cast<__nv_bfloat162*>(&x);
  __half2 h = __float22half2_rn(__bfloat1622float2(b));
  return *reinterpret_cast<uint32_t*>(&h);
}

// A fragment (m16n8k16, fp16) of the 16-row Q tile for k-step kk in the permuted d order:
// row g: d = 16kk + 4t4 .. +3, row g + 8 likewise; rows >= G are zero.
template <typename T>
__device__ __forceinline__ void pa8_q_frag(uint32_t (&a)[4], const T* q0, const T* q1, bool ok0, bool ok1,
                                           int kk, int t4) {
  const int c = kk * 16 + 4 * t4;
  const uint2 lo = ok0 ? *reinterpret_cast<const uint2*>(q0 + c) : make_uint2(0u, 0u);
  const uint2 hi = ok1 ? *reinterpret_cast<const uint2*>(q1 + c) : make_uint2(0u, 0u);
  a[0] = to_h2<T>(lo.x);
  a[1] = to_h2<T>(hi.x);
  a[2] = to_h2<T>(lo.y);
  a[3] = to_h2<T>(hi.y);
}

__device__ __forceinline__ uint32_t lds32(const unsigned char* p) { return *reinterpret_cast<const uint32_t*>(p); }
// 32-bit shared load at a shared-window address (volatile: stays after the mbarrier wait).
__device__ __forceinline__ uint32_t lds32_at(uint32_t a) {
  uint32_t v;
  asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(a));
  return v;
}

// Decode over the fp8 pool: same grid, split and workspace contract as pa_decode_body
// (tiles of 16 * W tokens, S stages). TMA = 0: cp.async gathers of 16-byte chunks into rows
// padded to D + 16 bytes. TMA = 1 (sm_90+, D % 64 == 0): lanes of warp 0 each issue the tensor
// copies of one box (min(block_size, 64) token rows of one block, K and V, per CW-byte slab) into
// dense swizzled tiles (pa8t_off), completing on the stage's mbarrier; tmap_k / tmap_v are the
// addresses of the __grid_constant__ tensor maps.
// TMA = 2 (head groups, kernel suffix "h"; D in {64, 128}, block_size a power of two >= 16): the
// BULK = 3 design of the 16-bit pool on fp8 bytes. One CTA per (group of W kv heads, split,
// batch); warp w owns kv head W * blockIdx.x + w (its k_scale / v_scale) over every token of the
// split. A tile is 16 tokens of all W heads: lane 0 of warp 0 issues one tensor copy per CW-byte
// slab from maps of dimensions (D, pool rows, Hkv), box (CW, 16, W), which lands head-major
// ([head][16 rows][CW]): the TMA = 1 tile layout with warp w's rows at 16w. At W = Hkv a copy
// reads 16 whole token rows of the pool. No cross-warp merge: each warp writes its own rows.
// CLUSTER (head groups only, kernel suffix "hc"): the splits of a row are combined inside a
// thread-block cluster (pa_cluster_combine) instead of the workspace and the reduce kernel: o over
// the drained stages, the log-sum-exps past the mbarriers (pa8hc_smem_bytes).
template <typename T, int D, int W, int S, int TMA = 0, bool CLUSTER = false>
__device__ __forceinline__ void pa8_decode_body(
    const T* __restrict__ q, long long q_sb, const unsigned char* __restrict__ k_pool,
    const unsigned char* __restrict__ v_pool, const float* __restrict__ k_scale,
    const float* __restrict__ v_scale, const int* __restrict__ block_tables,
    const int* __restrict__ seq_lens, T* __restrict__ out, long long o_sb,
    float* __restrict__ part_o, float* __restrict__ part_lse, int Hq, int Hkv, int block_size,
    int max_blocks, int part_tokens, float scale_log2, int window, const float* __restrict__ sinks,
    const void* tmap_k = nullptr, const void* tmap_v = nullptr) {
  using H = MmaTraits<__half>;
  static_assert(D % 32 == 0, "fp8 decode pairs V bytes in 32-byte groups");
  static_assert(!TMA || D % 64 == 0, "TMA tiles are slabs of 64 or 128 bytes");
  static_assert(TMA != 2 || D <= 128, "head-group tiles keep Q in registers");
  static_assert(!CLUSTER || TMA == 2, "cluster reduce: the head-group kernels");
  constexpr bool HEADS = TMA == 2;
  constexpr int NT = 32 * W;
  constexpr int TILE = 16 * W;
  constexpr int RB = D + 16;   // smem row pitch (bytes), cp.async path
  constexpr int CPR = D / 16;  // 16-byte chunks per row
  constexpr int TILE_BYTES = TMA ? TILE * D : TILE * RB;
  constexpr int CW = D >= 128 ? 128 : 64;  // TMA slab width (bytes)
  constexpr bool QREG = D <= 128;  // D = 256: Q fragments re-read (L1) per tile
  static_assert(HEADS || pa_merge_floats(D, W, true) * 4 <= S * 2 * TILE_BYTES,
                "merge scratch must fit in the pipeline stages");
  static_assert(!CLUSTER || W * 16 * D * 4 <= S * 2 * TILE_BYTES, "cluster partial must fit in the stages");

  extern __shared__ __align__(128) unsigned char pa8_smem[];
  unsigned char* sbase = pa8_smem;  // stages; TMA: rounded up to 1 KiB (swizzle period)
  if constexpr (TMA != 0) sbase = pa8_smem + ((1024u - (smem_u32(pa8_smem) & 1023u)) & 1023u);
  uint64_t* mbar = reinterpret_cast<uint64_t*>(sbase + S * 2 * TILE_BYTES);  // [S], TMA only

  const int tid = threadIdx.x;
  const int warp = tid >> 5;
  const int lane = tid & 31;
  const int g = lane >> 2;
  const int t4 = lane & 3;
  const int hkv = HEADS ? blockIdx.x * W + warp : blockIdx.x;
  const int split = blockIdx.y;
  const int num_splits = gridDim.y;
  const int b = blockIdx.z;
  const int G = Hq / Hkv;
  constexpr int TT = HEADS ? 16 : TILE;  // tokens per tile

  int t_begin = split * part_tokens;
  [[maybe_unused]] int pre_blk[S] = {};  // TMA: the first tiles' block ids, ahead of seq_lens
  auto prefetch = [&] {
    if constexpr (TMA != 0) {
      const int R0 = HEADS ? 0 : min(block_size, kPaBoxRows);
      pa_prefetch_blocks<S>(pre_blk, block_tables + (size_t)b * max_blocks, max_blocks, block_size, t_begin, TT,
                            lane * R0, warp == 0 && (HEADS || lane * R0 < TILE));
    }
  };
  if (window <= 0) prefetch();  // a window moves the splits by the length: prefetch after it
  const int L = max(seq_lens[b], 0);
  const int t_lo = pa_window_lo(L, window);  // see pa_window_lo
  if (window > 0) {
    t_begin += t_lo & -((TMA == 1) ? min(block_size, kPaBoxRows) : 16);
    prefetch();
  }
  const int t_end = min(L, t_begin + part_tokens);

  // CLUSTER: an empty split still joins its cluster's reduce (no tiles, log-sum-exp -inf)
  if (!CLUSTER && t_begin >= t_end) {  // HEADS: the group's W * G consecutive query heads from blockIdx.x * W * G
    pa_empty_split<T, D>(out, o_sb, part_lse, Hq, HEADS ? G * W : G, HEADS ? blockIdx.x : hkv, b, split,
                         num_splits);
    return;
  }
  const int n_tiles = (t_end - t_begin + TT - 1) / TT;
  const int* bt = block_tables + (size_t)b * max_blocks;
  const long long tok_stride = (long long)Hkv * D;  // bytes

  // Thread tid copies token row tid / 2 of every tile, K and V, 16-byte chunks 2j + tid % 2 (a
  // lane pair covers one 32-byte sector): one block-table lookup per thread and tile, done one
  // tile ahead so its latency hides behind the math. Rows past the split's end are zero-filled.
  static_assert(NT == 2 * TILE && CPR % 2 == 0, "two threads per token row");
  const int my_r = tid >> 1, my_h = tid & 1;
  auto row_off = [&](int tile) -> long long {  // byte offset of this thread's row, -1 past the end
    const int tok = t_begin + tile * TILE + my_r;
    if (static_cast<unsigned>(tok - t_lo) >= static_cast<unsigned>(t_end - t_lo)) return -1;  // outside the window
    const int blk = bt[tok / block_size];
    return ((long long)blk * block_size + tok % block_size) * tok_stride + (long long)hkv * D;
  };
  auto load_tile = [&](int stage, long long off) {
    const bool ok = off >= 0;
    const unsigned char* sk = k_pool + (ok ? off : 0);
    const unsigned char* sv = v_pool + (ok ? off : 0);
    unsigned char* dk = sbase + stage * 2 * TILE_BYTES + my_r * RB;
#pragma unroll
    for (int j = 0; j < CPR / 2; ++j) {
      const int cb = (2 * j + my_h) * 16;
      cp_async_16(smem_u32(dk + cb), sk + cb, ok);
      cp_async_16(smem_u32(dk + TILE_BYTES + cb), sv + cb, ok);
    }
  };

  // TMA path (warp 0, see PaTmaBoxes; the rows past the end are masked: s = -inf, V words zeroed).
  const PaTmaBoxes boxes = pa_tma_boxes(block_size, t_begin, t_end, TILE, lane);
  const int R = boxes.R, nbox = boxes.nbox;
  auto box_blk = [&](int tile) -> int {
    if constexpr (HEADS) return tile < n_tiles ? bt[(t_begin + tile * 16) >> boxes.bs_shift] : -1;
    return boxes.blk(bt, tile);
  };
  auto box_pre = [&](int tile) -> int {  // tile < S: the prefetched id, masked like box_blk's
    if constexpr (HEADS) return tile < n_tiles ? pre_blk[tile] : -1;
    return boxes.masked(tile, pre_blk[tile]);
  };
  auto tma_issue = [&](int tile, int blk) {  // all of warp 0
    const int stage = tile % S;
    const uint32_t bar = smem_u32(mbar + stage);
    if constexpr (HEADS) {  // lane 0: one (CW, 16, W) box per slab, K and V
      if (lane == 0) {
        mbar_arrive_expect_tx(bar, 2 * TILE_BYTES);
        const int row = (blk << boxes.bs_shift) + ((t_begin + tile * 16) & (block_size - 1));
        unsigned char* dk = sbase + stage * 2 * TILE_BYTES;
#pragma unroll
        for (int h = 0; h < D / CW; ++h) {
          tma_load_3d(smem_u32(dk + h * TILE * CW), tmap_k, h * CW, row, blockIdx.x * W, bar);
          tma_load_3d(smem_u32(dk + TILE_BYTES + h * TILE * CW), tmap_v, h * CW, row, blockIdx.x * W, bar);
        }
      }
      return;
    }
    const int row = boxes.row(tile, blk, bar, 2 * TILE_BYTES);
    if (lane < nbox) {
      unsigned char* dk = sbase + stage * 2 * TILE_BYTES + lane * R * CW;
#pragma unroll
      for (int h = 0; h < D / CW; ++h) {
        tma_load_3d(smem_u32(dk + h * TILE * CW), tmap_k, h * CW, hkv, row, bar);
        tma_load_3d(smem_u32(dk + TILE_BYTES + h * TILE * CW), tmap_v, h * CW, hkv, row, bar);
      }
    }
  };
  long long pending_off = 0;
  int pending_blk = -1;
  if constexpr (TMA != 0) {
    if (tid == 0) {
      for (int st = 0; st < S; ++st) mbar_init(smem_u32(mbar + st), 1);
      mbar_fence_init();
    }
    __syncthreads();
    if (warp == 0) {
#pragma unroll
      for (int st = 0; st < S - 1; ++st)
        if (st < n_tiles) tma_issue(st, box_pre(st));
      pending_blk = box_pre(S - 1);
    }
  } else {
#pragma unroll
    for (int st = 0; st < S - 1; ++st) {
      if (st < n_tiles) load_tile(st, row_off(st));
      cp_async_commit();
    }
    pending_off = row_off(S - 1);
  }

  // Q rows hkv*G + g and hkv*G + g + 8 (zero when >= G), straight from global memory.
  const T* qb = q + b * q_sb + (size_t)hkv * G * D;
  const bool ok0 = g < G, ok1 = g + 8 < G;
  const T* q0 = qb + (ok0 ? g : 0) * D;
  const T* q1 = qb + (ok1 ? g + 8 : 0) * D;
  uint32_t qf[QREG ? D / 16 : 1][4];
  if constexpr (QREG) {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) pa8_q_frag<T>(qf[kk], q0, q1, ok0, ok1, kk, t4);
  }
  const float sl2 = scale_log2 * k_scale[hkv];

  float acc[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
  float row_m[2] = {-INFINITY, -INFINITY};
  float row_l[2] = {0.f, 0.f};
  // TMA: this thread's tile offsets of its first K word (row kr + g, bytes 4t4) and V words
  // (rows kr + 2t4 and kr + 2t4 + 1, bytes 4g), swizzle included. Tile bases are multiples of
  // 1 KiB, so the other words of a row are these XOR the chunk (address bits 4-6; CW = 64 uses
  // 4-5) plus a slab offset; rows + 8 add 8 * CW and keep the same XOR (bits 7-9 move by 8 rows).
  const int kr = warp * 16;  // this warp's 16 tokens in the tile
  const uint32_t k_of = TMA ? pa8t_off<D, TILE>(kr + g, 4 * t4) : 0;
  const uint32_t v_of0 = TMA ? pa8t_off<D, TILE>(kr + 2 * t4, 4 * g) : 0;
  const uint32_t v_of1 = TMA ? pa8t_off<D, TILE>(kr + 2 * t4 + 1, 4 * g) : 0;
  const int rel_begin = t_begin - t_lo;  // tokens are masked by their offset from t_lo (pa_softmax_step)
  const unsigned span = static_cast<unsigned>(t_end - t_lo);

  for (int j = 0; j < n_tiles; ++j) {
    const int nxt = j + S - 1;
    if constexpr (TMA != 0) {
      // Stage nxt % S was last read in iteration j - 1, which ended with __syncthreads.
      if (warp == 0 && nxt < n_tiles) {
        tma_issue(nxt, pending_blk);
        pending_blk = box_blk(nxt + 1);
      }
      mbar_wait_parity(smem_u32(mbar + j % S), (j / S) & 1);
    } else {
      if (nxt < n_tiles) {
        load_tile(nxt % S, pending_off);
        pending_off = row_off(nxt + 1);
      }
      cp_async_commit();
      cp_async_wait<S - 1>();
      __syncthreads();
    }
    const unsigned char* tk = sbase + (j % S) * 2 * TILE_BYTES;
    const unsigned char* tv = tk + TILE_BYTES;
    const uint32_t tk_u = smem_u32(tk);

    // QK^T in four independent mma chains (even / odd k-steps apart, as the 16-bit body); head groups
    // only (the per-kv-head TMA kernels are held to 128 registers and spilled with it)
    constexpr bool QK4 = HEADS;
    float s[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
    float s_odd[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
    const unsigned char* k0 = tk + (kr + g) * RB + 4 * t4;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t w0, w1;
      if constexpr (TMA != 0) {
        const uint32_t a = ((tk_u + k_of) ^ ((kk % (CW / 16)) << 4)) + (16 * kk / CW) * (TILE * CW);
        w0 = lds32_at(a);
        w1 = lds32_at(a + 8 * CW);
      } else {
        w0 = lds32(k0 + 16 * kk);
        w1 = lds32(k0 + 8 * RB + 16 * kk);
      }
      uint32_t qa[4];
      if constexpr (QREG) {
#pragma unroll
        for (int i = 0; i < 4; ++i) qa[i] = qf[QREG ? kk : 0][i];
      } else {
        pa8_q_frag<T>(qa, q0, q1, ok0, ok1, kk, t4);
      }
      float(&sk)[2][4] = (QK4 && (kk & 1)) ? s_odd : s;
      H::mma(sk[0], qa, e4m3x2_to_h2(w0), e4m3x2_to_h2(w0 >> 16));
      H::mma(sk[1], qa, e4m3x2_to_h2(w1), e4m3x2_to_h2(w1 >> 16));
    }
    if constexpr (QK4) pa_add_scores(s, s_odd);
    const int rel0 = rel_begin + j * TT + (HEADS ? 0 : kr);  // first token's offset from t_lo
    float alpha[2];
    pa_softmax_step(s, row_m, row_l, alpha, rel0, t4, span, sl2);
    // Rescale O only when some row's running max moved (rare after the first tiles): saves
    // D / 2 multiplies per thread and tile, which matter at the fp8 pool's token rate.
    if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) pa_rescale<D>(acc, alpha);
    uint32_t pa[4];
    pa[0] = H::pack(s[0][0], s[0][1]);
    pa[1] = H::pack(s[0][2], s[0][3]);
    pa[2] = H::pack(s[1][0], s[1][1]);
    pa[3] = H::pack(s[1][2], s[1][3]);
    const unsigned char* v0 = tv + (kr + 2 * t4) * RB + 4 * g;
    // TMA tiles hold real pool rows past the end of the sequence (possibly NaN bytes), and below a
    // window's start: zero them so that P = 0 there gives 0, not NaN. (The cp.async path zero-fills
    // them.) Row x of the warp's 16 is kept iff rel0 + x < span (unsigned).
    const unsigned vspan = TMA ? span : 16u;
    const int v0r = 2 * t4 + (TMA ? rel0 : 0);
    const bool vk0 = static_cast<unsigned>(v0r) < vspan, vk1 = static_cast<unsigned>(v0r + 1) < vspan,
               vk8 = static_cast<unsigned>(v0r + 8) < vspan, vk9 = static_cast<unsigned>(v0r + 9) < vspan;
#pragma unroll
    for (int grp = 0; grp < D / 32; ++grp) {
      const unsigned char* p = v0 + 32 * grp;
      uint32_t r0, r1, r8, r9;
      if constexpr (TMA != 0) {
        const uint32_t x = (2 * (grp % (CW / 32))) << 4, slab = (32 * grp / CW) * (TILE * CW);
        const uint32_t a0 = ((tk_u + TILE_BYTES + v_of0) ^ x) + slab;
        const uint32_t a1 = ((tk_u + TILE_BYTES + v_of1) ^ x) + slab;
        r0 = lds32_at(a0);
        r1 = lds32_at(a1);
        r8 = lds32_at(a0 + 8 * CW);
        r9 = lds32_at(a1 + 8 * CW);
        r0 = vk0 ? r0 : 0u;
        r1 = vk1 ? r1 : 0u;
        r8 = vk8 ? r8 : 0u;
        r9 = vk9 ? r9 : 0u;
      } else {
        r0 = lds32(p), r1 = lds32(p + RB), r8 = lds32(p + 8 * RB), r9 = lds32(p + 9 * RB);
      }
      const uint32_t lo01 = __byte_perm(r0, r1, 0x5140), lo23 = __byte_perm(r0, r1, 0x7362);
      const uint32_t hi01 = __byte_perm(r8, r9, 0x5140), hi23 = __byte_perm(r8, r9, 0x7362);
      H::mma(acc[4 * grp + 0], pa, e4m3x2_to_h2(lo01), e4m3x2_to_h2(hi01));
      H::mma(acc[4 * grp + 1], pa, e4m3x2_to_h2(lo01 >> 16), e4m3x2_to_h2(hi01 >> 16));
      H::mma(acc[4 * grp + 2], pa, e4m3x2_to_h2(lo23), e4m3x2_to_h2(hi23));
      H::mma(acc[4 * grp + 3], pa, e4m3x2_to_h2(lo23 >> 16), e4m3x2_to_h2(hi23 >> 16));
    }
    __syncthreads();  // stage j % S is refilled by a later iteration
  }
  cp_async_wait<0>();
  __syncthreads();

  if constexpr (HEADS) {  // each warp owns its G query rows: no merge
    const float vs = v_scale[hkv];
    // CLUSTER: o over the drained stages, log-sum-exps past the mbarriers (pa8hc_smem_bytes)
    [[maybe_unused]] float* cl = reinterpret_cast<float*>(sbase);
    [[maybe_unused]] float* cl_lse = reinterpret_cast<float*>(sbase + S * 2 * TILE_BYTES + 128);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float l = quad_sum(row_l[h]);
      const int r = g + 8 * h;
      if (r >= G) continue;
      const int hq = hkv * G + r;
      // one split: the row is finished, its sink joins (split-K: the reduce / cluster combine)
      const float f = vs * ((!CLUSTER && num_splits == 1) ? sink_row_inv(l, row_m[h], sink_log2(sinks, hq))
                                                          : (l > 0.f ? 1.f / l : 0.f));
      const size_t pidx = ((size_t)b * Hq + hq) * num_splits + split;
      // acc[4grp + jj][2h + e] is column 32grp + 4(2t4 + e) + jj: four consecutive columns per (grp, e)
#pragma unroll
      for (int grp = 0; grp < D / 32; ++grp)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int d = 32 * grp + 8 * t4 + 4 * e;
          const float o0 = acc[4 * grp][2 * h + e] * f, o1 = acc[4 * grp + 1][2 * h + e] * f;
          const float o2 = acc[4 * grp + 2][2 * h + e] * f, o3 = acc[4 * grp + 3][2 * h + e] * f;
          if (CLUSTER)
            *reinterpret_cast<float4*>(cl + (warp * 16 + r) * D + d) = make_float4(o0, o1, o2, o3);
          else if (num_splits == 1)
            *reinterpret_cast<uint2*>(out + b * o_sb + (size_t)hq * D + d) =
                make_uint2(MmaTraits<T>::pack(o0, o1), MmaTraits<T>::pack(o2, o3));
          else
            *reinterpret_cast<float4*>(part_o + pidx * D + d) = make_float4(o0, o1, o2, o3);
        }
      if (CLUSTER) {
        if (t4 == 0) cl_lse[warp * 16 + r] = l > 0.f ? row_m[h] + log2f(l) : -INFINITY;
      } else if (num_splits > 1 && t4 == 0) {
        part_lse[pidx] = l > 0.f ? row_m[h] + log2f(l) : -INFINITY;
      }
    }
    if constexpr (CLUSTER) pa_cluster_combine<T, D, W>(cl, cl_lse, out, o_sb, G, blockIdx.x * W, b, sinks);
  } else {
    // Merge the warps (scratch over the stages); acc[4grp + jj][e] is column 32grp + 4n + jj.
    pa_merge_out<T, D, W, true>(reinterpret_cast<float*>(sbase), acc, row_m, row_l, v_scale[hkv], out, o_sb,
                                part_o, part_lse, Hq, G, hkv, b, split, num_splits, sinks);
  }
}

// 8 values of T (16 bytes) -> 8 e4m3 bytes of x / s (IEEE division, then RN + saturation).
template <typename T>
__device__ __forceinline__ uint2 quant8_e4m3(uint4 in, float s) {
  const T* e = reinterpret_cast<const T*>(&in);
  uint32_t w[2] = {0u, 0u};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = make_float2(__fdiv_rn(MmaTraits<T>::to_float(e[2 * i]), s),
                                 __fdiv_rn(MmaTraits<T>::to_float(e[2 * i + 1]), s));
    const uint32_t p = __nv_cvt_float2_to_fp8x2(f, __NV_SATFINITE, __NV_E4M3);
    w[i >> 1] |= p << (16 * (i & 1));
  }
  return make_uint2(w[0], w[1]);
}

// Append into the fp8 pool (pa_append_walk: one thread per 8 elements of a new token row).
template <typename T, int D>
__device__ __forceinline__ void append_kv_fp8_body(
    const T* __restrict__ k_new, const T* __restrict__ v_new, long long n_sb, long long n_ss,
    unsigned char* __restrict__ k_pool, unsigned char* __restrict__ v_pool,
    const float* __restrict__ k_scale, const float* __restrict__ v_scale,
    const int* __restrict__ block_tables, const int* __restrict__ seq_lens, int B, int Sq, int Hkv,
    int block_size, int max_blocks) {
  pa_append_walk<D>(n_sb, n_ss, block_tables, seq_lens, B, Sq, Hkv, block_size, max_blocks,
                    [&](long long dst, long long src, int h) {
                      *reinterpret_cast<uint2*>(k_pool + dst) =
                          quant8_e4m3<T>(*reinterpret_cast<const uint4*>(k_new + src), k_scale[h]);
                      *reinterpret_cast<uint2*>(v_pool + dst) =
                          quant8_e4m3<T>(*reinterpret_cast<const uint4*>(v_new + src), v_scale[h]);
                    });
}

}  // namespace onnx_fuse

using onnx_fuse::append_kv_fp8_body;
using onnx_fuse::pa8_decode_body;

// fp8-pool decode variant name: onnx_fuse_pa8_decode_<dt>_d<D>_w<warps>s<stages> (dt: q / out).
// Held to 128 registers: the 8-warp variants (two CTAs per SM; unbounded they took more at
// D = 128, which left one) and 4 warps x 3 stages up to D = 128 (four CTAs per SM, 55 KB of shared
// memory each at D = 128; 127 registers there, no spills).
#define OF_PA8_DECODE(DTN, T, D, W, ST)                                                           \
  extern "C" __global__ void __launch_bounds__(32 * W, W == 8 ? 2 : (ST == 3 && D <= 128 ? 4 : 1)) \
      onnx_fuse_pa8_decode_##DTN##_d##D##_w##W##s##ST(                                           \
      const T* q, long long q_sb, const unsigned char* k_pool, const unsigned char* v_pool,      \
      const float* k_scale, const float* v_scale, const int* block_tables, const int* seq_lens,  \
      T* out, long long o_sb, float* part_o, float* part_lse, int Hq, int Hkv, int block_size,   \
      int max_blocks, int part_tokens, float scale_log2, int window, const float* sinks) {       \
    pa8_decode_body<T, D, W, ST>(q, q_sb, k_pool, v_pool, k_scale, v_scale, block_tables,        \
                                 seq_lens, out, o_sb, part_o, part_lse, Hq, Hkv, block_size,     \
                                 max_blocks, part_tokens, scale_log2, window, sinks);            \
  }

// The fp8 variant list; launch_plan.PA8_VARIANTS mirrors it (warps, stages).
#define OF_PA8_VARIANTS(X, DTN, T, D) \
  X(DTN, T, D, 4, 3)                  \
  X(DTN, T, D, 4, 4)                  \
  X(DTN, T, D, 4, 6)                  \
  X(DTN, T, D, 8, 3)
#define OF_PA8_VARIANTS_D256(X, DTN, T, D) \
  X(DTN, T, D, 4, 3)                       \
  X(DTN, T, D, 4, 4)

#define OF_APPEND_FP8(DTN, T, D)                                                                 \
  extern "C" __global__ void __launch_bounds__(256) onnx_fuse_append_kv_fp8_##DTN##_d##D(        \
      const T* k_new, const T* v_new, long long n_sb, long long n_ss, unsigned char* k_pool,     \
      unsigned char* v_pool, const float* k_scale, const float* v_scale,                         \
      const int* block_tables, const int* seq_lens, int B, int Sq, int Hkv, int block_size,      \
      int max_blocks) {                                                                          \
    append_kv_fp8_body<T, D>(k_new, v_new, n_sb, n_ss, k_pool, v_pool, k_scale, v_scale,         \
                             block_tables, seq_lens, B, Sq, Hkv, block_size, max_blocks);        \
  }

OF_PA8_VARIANTS(OF_PA8_DECODE, f16, __half, 64)
OF_PA8_VARIANTS(OF_PA8_DECODE, f16, __half, 96)
OF_PA8_VARIANTS(OF_PA8_DECODE, f16, __half, 128)
OF_PA8_VARIANTS_D256(OF_PA8_DECODE, f16, __half, 256)
OF_PA8_VARIANTS(OF_PA8_DECODE, bf16, __nv_bfloat16, 64)
OF_PA8_VARIANTS(OF_PA8_DECODE, bf16, __nv_bfloat16, 96)
OF_PA8_VARIANTS(OF_PA8_DECODE, bf16, __nv_bfloat16, 128)
OF_PA8_VARIANTS_D256(OF_PA8_DECODE, bf16, __nv_bfloat16, 256)
OF_APPEND_FP8(f16, __half, 64)
OF_APPEND_FP8(f16, __half, 96)
OF_APPEND_FP8(f16, __half, 128)
OF_APPEND_FP8(f16, __half, 256)
OF_APPEND_FP8(bf16, __nv_bfloat16, 64)
OF_APPEND_FP8(bf16, __nv_bfloat16, 96)
OF_APPEND_FP8(bf16, __nv_bfloat16, 128)
OF_APPEND_FP8(bf16, __nv_bfloat16, 256)

// TMA variants of the fp8-pool decode: onnx_fuse_pa8_decode_<dt>_d<D>_w<warps>s<stages>t, same
// (warps, stages) lists, D in {64, 128, 256} (a multiple of 64 bytes per row). Register bounds
// follow the occupancy their shared memory allows at D <= 128 (4 / 3 / 2 CTAs per SM at 3 / 4 / 6
// stages of 4 warps; 2 for 8 warps).
#define OF_PA8T_DECODE(DTN, T, D, W, ST)                                                           \
  extern "C" __global__ void __launch_bounds__(                                                    \
      32 * W, W == 8 ? 2 : (D > 128 ? 1 : (ST == 3 ? 4 : (ST == 4 ? 3 : 2))))                      \
      onnx_fuse_pa8_decode_##DTN##_d##D##_w##W##s##ST##t(                                          \
      const T* q, long long q_sb, const unsigned char* k_pool, const unsigned char* v_pool,       \
      const float* k_scale, const float* v_scale, const int* block_tables, const int* seq_lens,   \
      T* out, long long o_sb, float* part_o, float* part_lse, int Hq, int Hkv, int block_size,    \
      int max_blocks, int part_tokens, float scale_log2, int window, const float* sinks,         \
      const __grid_constant__ CUtensorMap tk, const __grid_constant__ CUtensorMap tv) {           \
    pa8_decode_body<T, D, W, ST, 1>(q, q_sb, k_pool, v_pool, k_scale, v_scale, block_tables,      \
                                    seq_lens, out, o_sb, part_o, part_lse, Hq, Hkv, block_size,   \
                                    max_blocks, part_tokens, scale_log2, window, sinks, &tk, &tv); \
  }

OF_PA8_VARIANTS(OF_PA8T_DECODE, f16, __half, 64)
OF_PA8_VARIANTS(OF_PA8T_DECODE, f16, __half, 128)
OF_PA8_VARIANTS_D256(OF_PA8T_DECODE, f16, __half, 256)
OF_PA8_VARIANTS(OF_PA8T_DECODE, bf16, __nv_bfloat16, 64)
OF_PA8_VARIANTS(OF_PA8T_DECODE, bf16, __nv_bfloat16, 128)
OF_PA8_VARIANTS_D256(OF_PA8T_DECODE, bf16, __nv_bfloat16, 256)

// Head-group variants of the fp8-pool decode (TMA = 2): onnx_fuse_pa8_decode_<dt>_d<D>_w<warps>s<stages>h,
// launched by onnx_fuse_paged_attention_decode_fp8_tma_heads; launch_plan.PA8_HEADS_VARIANTS mirrors
// the list. Register bounds as the TMA variants' (shared memory: 4 / 3 CTAs per SM at 3 / 4 stages of
// 4 warps, D = 128; 8 warps held to 128 registers, two CTAs). OF_PA8H_ENTRY also makes the
// cluster-reduce entries below (suffix hc, CLUSTER true).
#define OF_PA8H_ENTRY(DTN, T, D, W, ST, SUF, CLUSTER)                                              \
  extern "C" __global__ void __launch_bounds__(32 * W, W == 8 ? 2 : (ST == 3 ? 4 : 3))             \
      onnx_fuse_pa8_decode_##DTN##_d##D##_w##W##s##ST##SUF(                                        \
      const T* q, long long q_sb, const unsigned char* k_pool, const unsigned char* v_pool,       \
      const float* k_scale, const float* v_scale, const int* block_tables, const int* seq_lens,   \
      T* out, long long o_sb, float* part_o, float* part_lse, int Hq, int Hkv, int block_size,    \
      int max_blocks, int part_tokens, float scale_log2, int window, const float* sinks,         \
      const __grid_constant__ CUtensorMap tk, const __grid_constant__ CUtensorMap tv) {           \
    pa8_decode_body<T, D, W, ST, 2, CLUSTER>(q, q_sb, k_pool, v_pool, k_scale, v_scale, block_tables,  \
                                             seq_lens, out, o_sb, part_o, part_lse, Hq, Hkv,           \
                                             block_size, max_blocks, part_tokens, scale_log2, window,  \
                                             sinks, &tk, &tv);                                         \
  }
#define OF_PA8H_DECODE(DTN, T, D, W, ST) OF_PA8H_ENTRY(DTN, T, D, W, ST, h, false)
#define OF_PA8_HEADS_VARIANTS(X, DTN, T, D) \
  X(DTN, T, D, 4, 3)                        \
  X(DTN, T, D, 4, 4)                        \
  X(DTN, T, D, 8, 2)                        \
  X(DTN, T, D, 8, 3)
OF_PA8_HEADS_VARIANTS(OF_PA8H_DECODE, f16, __half, 64)
OF_PA8_HEADS_VARIANTS(OF_PA8H_DECODE, f16, __half, 128)
OF_PA8_HEADS_VARIANTS(OF_PA8H_DECODE, bf16, __nv_bfloat16, 64)
OF_PA8_HEADS_VARIANTS(OF_PA8H_DECODE, bf16, __nv_bfloat16, 128)

// Cluster-reduce head groups of the fp8 pool (TMA = 2 with CLUSTER, suffix "hc"): the splits of each
// row combined inside a thread-block cluster (pa_cluster_combine, as the 16-bit w8s2hc) instead of
// the workspace and onnx_fuse_pa_reduce_*; launched by onnx_fuse_paged_attention_decode_fp8_cluster
// (cluster dims (1, num_splits, 1), num_splits <= 8); launch_plan.PA8_CLUSTER_VARIANTS mirrors the
// list. (Deeper 4-warp pipelines w4s5hc / w4s6hc and w4s4hc without the block-id prefetch measured
// behind w4s4hc in run 16 and were dropped; so were w4s3hc and w8s3hc, 3697-3719 GB/s against
// w4s4hc's 3799-3847 in run 14, which spilled at D = 128 under their 128-register bounds.)
#define OF_PA8HC_DECODE(DTN, T, D, W, ST) OF_PA8H_ENTRY(DTN, T, D, W, ST, hc, true)
#define OF_PA8_CLUSTER_VARIANTS(X, DTN, T, D) \
  X(DTN, T, D, 4, 4)                          \
  X(DTN, T, D, 8, 2)
OF_PA8_CLUSTER_VARIANTS(OF_PA8HC_DECODE, f16, __half, 64)
OF_PA8_CLUSTER_VARIANTS(OF_PA8HC_DECODE, f16, __half, 128)
OF_PA8_CLUSTER_VARIANTS(OF_PA8HC_DECODE, bf16, __nv_bfloat16, 64)
OF_PA8_CLUSTER_VARIANTS(OF_PA8HC_DECODE, bf16, __nv_bfloat16, 128)

extern "C" {

// Dynamic shared memory of fp8-pool decode variant (warps, stages).
int onnx_fuse_paged_attention_fp8_smem_bytes(int head_dim, int warps, int stages) {
  return onnx_fuse::pa8_smem_bytes(head_dim, warps, stages);
}

// Decode over the fp8 pool (see the section comment). dtype: q and out (fp16 or bf16); pools
// uint8 e4m3, k_scale/v_scale float32 [Hkv] on the device. Split/workspace contract as in
// onnx_fuse_paged_attention_decode_ex (same workspace size, reduced by pa_reduce). Variant
// (warps, stages): (4, 3), (4, 4), (4, 6), (8, 3); D = 256: (4, 3), (4, 4); (0, 0) = (4, 3).
// D in {64, 96, 128, 256}.
int onnx_fuse_paged_attention_decode_fp8(int dtype, const void* q, long long q_sb,
                                         const void* k_pool, const void* v_pool,
                                         const float* k_scale, const float* v_scale,
                                         const int* block_tables, const int* seq_lens, void* out,
                                         long long o_sb, void* workspace, int B, int Hq, int Hkv,
                                         int D, int block_size, int max_blocks, int part_tokens,
                                         int num_splits, float scale, int warps, int stages,
                                         int window, const float* sinks, cudaStream_t stream) {
  if (warps == 0 && stages == 0) {
    warps = 4;
    stages = 3;
  }
  if (const int rc = pa_check_args(B, Hq, Hkv, block_size, max_blocks, q_sb, part_tokens, num_splits, workspace,
                                   k_pool, v_pool))
    return rc;
  OF_REQUIRE(k_scale != nullptr && v_scale != nullptr);
  const int smem = onnx_fuse::pa8_smem_bytes(D, warps, stages);
  const PaSplitK sk = pa_split_k(workspace, B, Hq, D, num_splits);
  const float sl2 = scale * onnx_fuse::kLog2e;
  dim3 grid(Hkv, num_splits, B);
#define OF_LAUNCH(DTN, T, DD, W, ST)                                                             \
  OF_PA_LAUNCH_IF(D == DD && warps == W && stages == ST, onnx_fuse_pa8_decode_##DTN##_d##DD##_w##W##s##ST, \
                  DTN, DD, W, OF_PA8_ARGS(T))
#define OF_HEAD_DIMS(DTN, T)                                                                      \
  OF_PA8_VARIANTS(OF_LAUNCH, DTN, T, 64) OF_PA8_VARIANTS(OF_LAUNCH, DTN, T, 96)                    \
  OF_PA8_VARIANTS(OF_LAUNCH, DTN, T, 128) OF_PA8_VARIANTS_D256(OF_LAUNCH, DTN, T, 256)
  OF_PA_DTYPES(OF_HEAD_DIMS)
#undef OF_HEAD_DIMS
#undef OF_LAUNCH
  return static_cast<int>(cudaErrorInvalidValue);
}

// Quantizes k_new/v_new [B, Sq, Hkv, D] (fp16 or bf16; strides n_sb, n_ss; head rows
// contiguous) into the fp8 pools at positions seq_lens[b] - Sq + i: e4m3(x / scale[h]),
// round to nearest even, saturated to +-448. Positions outside the block table are skipped.
int onnx_fuse_append_kv_fp8(int dtype, const void* k_new, const void* v_new, long long n_sb,
                            long long n_ss, void* k_pool, void* v_pool, const float* k_scale,
                            const float* v_scale, const int* block_tables, const int* seq_lens,
                            int B, int Sq, int Hkv, int D, int block_size, int max_blocks,
                            cudaStream_t stream) {
  OF_REQUIRE(B > 0 && Sq > 0 && Hkv > 0 && block_size > 0 && max_blocks > 0);
  OF_REQUIRE(n_sb % 8 == 0 && n_ss % 8 == 0);
  OF_REQUIRE(k_scale != nullptr && v_scale != nullptr);
  const long long chunks = (long long)B * Sq * Hkv * (D / 8);
  const int threads = 256;
  const long long want = (chunks + threads - 1) / threads;
  const int blocks = static_cast<int>(want < 65535 ? want : 65535);
#define OF_LAUNCH(DTN, T, DD)                                                                   \
  if (D == DD) {                                                                                \
    onnx_fuse_append_kv_fp8_##DTN##_d##DD<<<blocks, threads, 0, stream>>>(                      \
        (const T*)k_new, (const T*)v_new, n_sb, n_ss, (unsigned char*)k_pool,                   \
        (unsigned char*)v_pool, k_scale, v_scale, block_tables, seq_lens, B, Sq, Hkv,           \
        block_size, max_blocks);                                                                \
    OF_CUDA_CHECK_LAUNCH();                                                                     \
    return 0;                                                                                   \
  }
#define OF_HEAD_DIMS(DTN, T) OF_LAUNCH(DTN, T, 64) OF_LAUNCH(DTN, T, 96) OF_LAUNCH(DTN, T, 128) OF_LAUNCH(DTN, T, 256)
  OF_PA_DTYPES(OF_HEAD_DIMS)
#undef OF_HEAD_DIMS
#undef OF_LAUNCH
  return static_cast<int>(cudaErrorInvalidValue);
}

}  // extern "C"

// ----------------------------------------------------------------------------------------
// fp8-pool decode with TMA loads: host side.

namespace {

using Pa8EncodeTiledFn = onnx_fuse::EncodeTiledFn;  // tensor_map.cuh
using onnx_fuse::encode_tiled;

bool pa8t_variant_compiled(int D, int warps, int stages) {
  if (D != 64 && D != 128 && D != 256) return false;
  if (warps == 4 && (stages == 3 || stages == 4)) return true;
  return D != 256 && ((warps == 4 && stages == 6) || (warps == 8 && stages == 3));
}

// What the TMA kernels address without the device: a compiled variant and a power-of-two block
// size >= 8 (boxes of min(block_size, 64) rows: >= 8 keeps box bases on the swizzle period, and
// a power of two makes every tile a whole number of boxes inside one block).
bool pa8t_shape_ok(int D, int block_size, int warps, int stages) {
  return pa8t_variant_compiled(D, warps, stages) && block_size >= 8 &&
         (block_size & (block_size - 1)) == 0;
}

bool pa8t_device_ok() {
  int dev = 0, major = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return major >= 9 && encode_tiled() != nullptr;
}

// The L2 promotion of every decode tensor map: each box row is a piece of at most 128 bytes. On the
// H200 the cluster head-group decode read 3.5 % faster with 128 B than with 256 B (run 11: 4186-4197
// against 4041-4051 GB/s), and with 256 B ncu showed the per-head MQA decode at the 25 % L2 hit rate
// the head-group decode had before. (The 16-bit cluster launcher takes its own as an argument,
// planned at this value: launch_plan.PA_CLUSTER_L2_PROMOTION.)
constexpr CUtensorMapL2promotion kPaL2Promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_128B;

CUtensorMapDataType pa16_map_dtype(int dtype) {
  return dtype == onnx_fuse::kFloat16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
}

// A pool [rows = num_blocks * block_size, Hkv, D] of esize-byte elements as a 3-D map (D, Hkv,
// rows), boxes of (cw_bytes / esize elements, 1 head, box_rows), swizzled over cw_bytes (128 or 64).
bool pa_tensor_map(CUtensorMap* map, CUtensorMapDataType dt, int esize, const void* base,
                   long long rows, int Hkv, int D, int box_rows, int cw_bytes,
                   CUtensorMapL2promotion prom = kPaL2Promotion) {
  const Pa8EncodeTiledFn enc = encode_tiled();
  if (enc == nullptr || reinterpret_cast<uintptr_t>(base) % 16 != 0) return false;
  const cuuint64_t gdim[3] = {(cuuint64_t)D, (cuuint64_t)Hkv, (cuuint64_t)rows};
  const cuuint64_t gstride[2] = {(cuuint64_t)D * esize, (cuuint64_t)Hkv * D * esize};
  const cuuint32_t box[3] = {(cuuint32_t)(cw_bytes / esize), 1, (cuuint32_t)box_rows}, elem[3] = {1, 1, 1};
  return enc(map, dt, 3, const_cast<void*>(base), gdim, gstride, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
             cw_bytes == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B, prom,
             CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// The uint8 pool: slabs of min(D, 128) bytes (128-byte swizzle; 64-byte at D = 64).
bool pa8_tensor_map(CUtensorMap* map, const void* base, long long rows, int Hkv, int D, int box_rows) {
  return pa_tensor_map(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, base, rows, Hkv, D, box_rows, D >= 128 ? 128 : 64);
}

// The 16-bit pool: 64-column slabs (128-byte swizzle).
bool pa16_tensor_map(CUtensorMap* map, int dtype, const void* base, long long rows, int Hkv, int D,
                     int box_rows, CUtensorMapL2promotion prom = kPaL2Promotion) {
  return pa_tensor_map(map, pa16_map_dtype(dtype), 2, base, rows, Hkv, D, box_rows, 128, prom);
}

// A launcher's l2_promotion argument (bytes: 256, 128 or 0 = none) as the tensor-map enum; false
// for any other value.
bool pa_l2_promotion(int bytes, CUtensorMapL2promotion* prom) {
  if (bytes != 256 && bytes != 128 && bytes != 0) return false;
  *prom = bytes == 256 ? CU_TENSOR_MAP_L2_PROMOTION_L2_256B
          : bytes == 128 ? CU_TENSOR_MAP_L2_PROMOTION_L2_128B : CU_TENSOR_MAP_L2_PROMOTION_NONE;
  return true;
}

bool pa_tma_variant_compiled(int D, int warps, int stages) {
  if (D != 64 && D != 128 && D != 256) return false;
  if (D == 256) return warps == 4 && (stages == 2 || stages == 3);
  if (D == 64 && warps == 16) return stages == 2;
  return (warps == 4 && stages >= 2 && stages <= 4) || (warps == 8 && (stages == 2 || (D == 64 && (stages == 3 || stages == 4))));
}

bool pa_heads_variant_compiled(int D, int warps, int stages) {
  return (D == 64 || D == 128) && ((warps == 4 && (stages == 2 || stages == 3)) || (warps == 8 && (stages == 2 || stages == 3)));
}

bool pa8_heads_variant_compiled(int D, int warps, int stages) {
  return (D == 64 || D == 128) && ((warps == 4 && (stages == 3 || stages == 4)) || (warps == 8 && (stages == 2 || stages == 3)));
}

bool pa8_cluster_variant_compiled(int D, int warps, int stages) {
  return (D == 64 || D == 128) && ((warps == 4 && stages == 4) || (warps == 8 && stages == 2));
}

bool pa_tma_shape_ok(int D, int block_size, int warps, int stages) {
  return pa_tma_variant_compiled(D, warps, stages) && block_size >= 8 && (block_size & (block_size - 1)) == 0;
}

// A pool [rows, Hkv, D] of esize-byte elements as a 3-D map (D, rows, Hkv) with boxes (cw_bytes /
// esize, 16, warps), swizzled over cw_bytes (128 or 64): a box lands head-major, [head][16 rows][cw]
// (the head-group kernels). False where the device, the driver, the base's alignment or the row
// count (>= 2^31) leave no map.
bool pa_head_group_map(CUtensorMap* map, CUtensorMapDataType dt, int esize, const void* base, long long rows,
                       int Hkv, int D, int warps, int cw_bytes, CUtensorMapL2promotion prom = kPaL2Promotion) {
  if (rows >= (1ll << 31) || !pa8t_device_ok() || reinterpret_cast<uintptr_t>(base) % 16 != 0) return false;
  const cuuint64_t gdim[3] = {(cuuint64_t)D, (cuuint64_t)rows, (cuuint64_t)Hkv};
  const cuuint64_t gstride[2] = {(cuuint64_t)Hkv * D * esize, (cuuint64_t)D * esize};
  const cuuint32_t box[3] = {(cuuint32_t)(cw_bytes / esize), 16, (cuuint32_t)warps}, elem[3] = {1, 1, 1};
  return encode_tiled()(map, dt, 3, const_cast<void*>(base), gdim, gstride, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
                        cw_bytes == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B, prom,
                        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// The 16-bit pool's head-group map: 64-column slabs (128-byte swizzle); prom: the cluster launcher's choice.
bool pa16h_tensor_map(CUtensorMap* map, int dtype, const void* base, long long rows, int Hkv, int D, int warps,
                      CUtensorMapL2promotion prom = kPaL2Promotion) {
  return pa_head_group_map(map, pa16_map_dtype(dtype), 2, base, rows, Hkv, D, warps, 128, prom);
}

// The uint8 pool's head-group map: slabs of min(D, 128) bytes (128-byte swizzle; 64-byte at D = 64).
bool pa8h_tensor_map(CUtensorMap* map, const void* base, long long rows, int Hkv, int D, int warps) {
  return pa_head_group_map(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, base, rows, Hkv, D, warps, D >= 128 ? 128 : 64);
}

// What both cluster-reduce launchers check alike (no fallback: the planner checks the shape):
// pa_check_args without a workspace, at most 8 splits (the portable cluster size), a 16-bit q,
// D in {64, 128}, a power-of-two block size >= 16.
int pa_cluster_check(int dtype, int B, int Hq, int Hkv, int D, int block_size, int max_blocks, int num_blocks,
                     long long q_sb, int part_tokens, int num_splits, const void* k_pool, const void* v_pool) {
  if (const int rc = pa_check_args(B, Hq, Hkv, block_size, max_blocks, q_sb, part_tokens, num_splits, nullptr,
                                   k_pool, v_pool, false))
    return rc;
  OF_REQUIRE(num_splits <= 8 && num_blocks > 0 && (dtype == onnx_fuse::kFloat16 || dtype == onnx_fuse::kBFloat16));
  OF_REQUIRE((D == 64 || D == 128) && (block_size & (block_size - 1)) == 0 && block_size >= 16);
  return 0;
}

}  // namespace

extern "C" {

// Dynamic shared memory of the TMA fp8-pool decode variant (warps, stages).
int onnx_fuse_paged_attention_fp8_tma_smem_bytes(int head_dim, int warps, int stages) {
  return onnx_fuse::pa8t_smem_bytes(head_dim, warps, stages);
}

// 1 when onnx_fuse_paged_attention_decode_fp8_tma runs the TMA kernel for these sizes on the
// current device (compute capability 9.0+, driver with cuTensorMapEncodeTiled, D in {64, 128,
// 256}, a compiled (warps, stages), block_size a power of two >= 8), else 0 (it then runs the
// cp.async variant of the same (warps, stages)). A pool of num_blocks * block_size >= 2^31 rows
// also runs cp.async; a pool whose base is not 16-byte aligned is refused (cudaErrorInvalidValue,
// as by every decode launcher: pa_check_args).
int onnx_fuse_paged_attention_fp8_tma_supported(int head_dim, int block_size, int warps, int stages) {
  return pa8t_shape_ok(head_dim, block_size, warps, stages) && pa8t_device_ok() ? 1 : 0;
}

// onnx_fuse_paged_attention_decode_fp8 with the K/V loads issued as tensor copies (see
// pa8_decode_body, TMA = 1); num_blocks: blocks in each pool (the tensor maps' extent). Falls
// back to the cp.async variant of the same (warps, stages) where TMA does not apply (see
// onnx_fuse_paged_attention_fp8_tma_supported). Variant (0, 0) = (4, 3).
int onnx_fuse_paged_attention_decode_fp8_tma(int dtype, const void* q, long long q_sb,
                                             const void* k_pool, const void* v_pool,
                                             const float* k_scale, const float* v_scale,
                                             const int* block_tables, const int* seq_lens,
                                             void* out, long long o_sb, void* workspace, int B,
                                             int Hq, int Hkv, int D, int block_size,
                                             int max_blocks, int num_blocks, int part_tokens,
                                             int num_splits, float scale, int warps, int stages,
                                             int window, const float* sinks, cudaStream_t stream) {
  if (warps == 0 && stages == 0) {
    warps = 4;
    stages = 3;
  }
  if (const int rc = pa_check_args(B, Hq, Hkv, block_size, max_blocks, q_sb, part_tokens, num_splits, workspace,
                                   k_pool, v_pool))
    return rc;
  OF_REQUIRE(num_blocks > 0 && k_scale != nullptr && v_scale != nullptr);
  const long long rows = (long long)num_blocks * block_size;
  CUtensorMap tk, tv;
  const int box_rows = block_size < onnx_fuse::kPaBoxRows ? block_size : onnx_fuse::kPaBoxRows;
  const bool tma = pa8t_shape_ok(D, block_size, warps, stages) && rows < (1ll << 31) &&
                   pa8t_device_ok() && pa8_tensor_map(&tk, k_pool, rows, Hkv, D, box_rows) &&
                   pa8_tensor_map(&tv, v_pool, rows, Hkv, D, box_rows);
  if (!tma)
    return onnx_fuse_paged_attention_decode_fp8(dtype, q, q_sb, k_pool, v_pool, k_scale, v_scale,
                                                block_tables, seq_lens, out, o_sb, workspace, B,
                                                Hq, Hkv, D, block_size, max_blocks, part_tokens,
                                                num_splits, scale, warps, stages, window, sinks, stream);
  const int smem = onnx_fuse::pa8t_smem_bytes(D, warps, stages);
  const PaSplitK sk = pa_split_k(workspace, B, Hq, D, num_splits);
  const float sl2 = scale * onnx_fuse::kLog2e;
  dim3 grid(Hkv, num_splits, B);
#define OF_LAUNCH(DTN, T, DD, W, ST)                                                             \
  OF_PA_LAUNCH_IF(D == DD && warps == W && stages == ST, onnx_fuse_pa8_decode_##DTN##_d##DD##_w##W##s##ST##t, \
                  DTN, DD, W, OF_PA8_ARGS(T), tk, tv)
#define OF_HEAD_DIMS(DTN, T)                                                                      \
  OF_PA8_VARIANTS(OF_LAUNCH, DTN, T, 64) OF_PA8_VARIANTS(OF_LAUNCH, DTN, T, 128)                   \
  OF_PA8_VARIANTS_D256(OF_LAUNCH, DTN, T, 256)
  OF_PA_DTYPES(OF_HEAD_DIMS)
#undef OF_HEAD_DIMS
#undef OF_LAUNCH
  return static_cast<int>(cudaErrorInvalidValue);
}

}  // extern "C"

// ----------------------------------------------------------------------------------------
// 16-bit pool decode with TMA loads (pa_decode_body, BULK = 2): host side.

extern "C" {

// 1 when onnx_fuse_paged_attention_decode_tma runs its TMA kernel for these sizes on the current
// device (compute capability 9.0+, driver with cuTensorMapEncodeTiled, D in {64, 128, 256}, a
// compiled (warps, stages): (4, 2), (4, 3), (4, 4), (8, 2), D = 64 also (8, 3), (8, 4), (16, 2),
// D = 256 (4, 2), (4, 3), block_size a power of two >= 8), else 0.
int onnx_fuse_paged_attention_tma_supported(int head_dim, int block_size, int warps, int stages) {
  return pa_tma_shape_ok(head_dim, block_size, warps, stages) && pa8t_device_ok() ? 1 : 0;
}

// 1 when the driver encodes the tensor map onnx_fuse_paged_attention_decode_tma builds over this
// 16-bit pool [num_blocks, block_size, Hkv, D] (its box included), else 0: the launcher then
// silently runs the bulk / cp.async form, so the GPU tests ask this to know the TMA kernel ran.
int onnx_fuse_paged_attention_tma_map_ok(int dtype, const void* pool, int num_blocks, int block_size,
                                         int Hkv, int D) {
  if (!pa8t_device_ok() || block_size <= 0 || num_blocks <= 0 || Hkv <= 0) return 0;
  CUtensorMap m;
  const int box_rows = block_size < onnx_fuse::kPaBoxRows ? block_size : onnx_fuse::kPaBoxRows;
  return pa16_tensor_map(&m, dtype, pool, (long long)num_blocks * block_size, Hkv, D, box_rows) ? 1 : 0;
}

// onnx_fuse_paged_attention_decode_ex with K/V loaded by tensor copies; num_blocks: blocks in each
// pool. Where TMA does not apply (see onnx_fuse_paged_attention_tma_supported; also a pool of
// num_blocks * block_size >= 2^31 rows) it runs the bulk-copy variant of the same (warps, stages)
// where one is compiled and the device has them, else (4, 3) cp.async. A pool base that is not
// 16-byte aligned is refused (cudaErrorInvalidValue; pa_check_args). Variant (0, 0) = (4, 3).
int onnx_fuse_paged_attention_decode_tma(int dtype, const void* q, long long q_sb,
                                         const void* k_pool, const void* v_pool,
                                         const int* block_tables, const int* seq_lens, void* out,
                                         long long o_sb, void* workspace, int B, int Hq, int Hkv,
                                         int D, int block_size, int max_blocks, int num_blocks,
                                         int part_tokens, int num_splits, float scale, int warps,
                                         int stages, int window, const float* sinks, cudaStream_t stream) {
  if (warps == 0 && stages == 0) {
    warps = 4;
    stages = 3;
  }
  if (const int rc = pa_check_args(B, Hq, Hkv, block_size, max_blocks, q_sb, part_tokens, num_splits, workspace,
                                   k_pool, v_pool))
    return rc;
  OF_REQUIRE(num_blocks > 0 && (dtype == onnx_fuse::kFloat16 || dtype == onnx_fuse::kBFloat16));
  const long long rows = (long long)num_blocks * block_size;
  CUtensorMap tk, tv;
  const int box_rows = block_size < onnx_fuse::kPaBoxRows ? block_size : onnx_fuse::kPaBoxRows;
  const bool dev_ok = pa8t_device_ok();
  const bool tma = pa_tma_shape_ok(D, block_size, warps, stages) && rows < (1ll << 31) && dev_ok &&
                   pa16_tensor_map(&tk, dtype, k_pool, rows, Hkv, D, box_rows) &&
                   pa16_tensor_map(&tv, dtype, v_pool, rows, Hkv, D, box_rows);
  if (!tma) {
    const bool bulk = dev_ok && warps == 4 && (stages == 2 || stages == 3);
    return onnx_fuse_paged_attention_decode_ex(dtype, q, q_sb, k_pool, v_pool, block_tables, seq_lens,
                                               out, o_sb, workspace, B, Hq, Hkv, D, block_size,
                                               max_blocks, part_tokens, num_splits, scale, 4,
                                               bulk ? stages : 3, bulk ? 1 : 0, window, sinks, stream);
  }
  const int smem = onnx_fuse::pa_smem_bytes(D, warps, stages, 2);
  const PaSplitK sk = pa_split_k(workspace, B, Hq, D, num_splits);
  const float sl2 = scale * onnx_fuse::kLog2e;
  dim3 grid(Hkv, num_splits, B);
#define OF_LAUNCH(DTN, T, DD, W, ST)                                                             \
  OF_PA_LAUNCH_IF(D == DD && warps == W && stages == ST, onnx_fuse_pa_decode_##DTN##_d##DD##_w##W##s##ST##t, \
                  DTN, DD, W, OF_PA16_ARGS(T), tk, tv)
#define OF_HEAD_DIMS(DTN, T)                                                                      \
  OF_PA_TMA_VARIANTS_D64(OF_LAUNCH, DTN, T, 64) OF_PA_TMA_VARIANTS(OF_LAUNCH, DTN, T, 128)         \
  OF_PA_TMA_VARIANTS_D256(OF_LAUNCH, DTN, T, 256)
  OF_PA_DTYPES(OF_HEAD_DIMS)
#undef OF_HEAD_DIMS
#undef OF_LAUNCH
  return static_cast<int>(cudaErrorInvalidValue);
}

}  // extern "C"

// ----------------------------------------------------------------------------------------
// 16-bit pool decode, head-group tiles (pa_decode_body, BULK = 3): host side.

extern "C" {

// onnx_fuse_paged_attention_decode_tma with one CTA per group of `warps` kv heads (see BULK = 3).
// Refuses (cudaErrorInvalidValue) unless D is 64 or 128, (warps, stages) is compiled ((4, 3),
// (8, 2), (8, 3)), Hkv % warps == 0 and block_size is a power of two >= 16 (what the planner
// checks), or where a pool is not 16-byte aligned (pa_check_args); where the device or the pool's
// size (>= 2^31 rows) leave no tensor map it runs onnx_fuse_paged_attention_decode_tma (4, 3) with
// the same splits.
int onnx_fuse_paged_attention_decode_tma_heads(int dtype, const void* q, long long q_sb,
                                               const void* k_pool, const void* v_pool,
                                               const int* block_tables, const int* seq_lens,
                                               void* out, long long o_sb, void* workspace, int B,
                                               int Hq, int Hkv, int D, int block_size,
                                               int max_blocks, int num_blocks, int part_tokens,
                                               int num_splits, float scale, int warps, int stages,
                                               int window, const float* sinks, cudaStream_t stream) {
  if (const int rc = pa_check_args(B, Hq, Hkv, block_size, max_blocks, q_sb, part_tokens, num_splits, workspace,
                                   k_pool, v_pool))
    return rc;
  OF_REQUIRE(block_size >= 16 && (block_size & (block_size - 1)) == 0 && num_blocks > 0);
  OF_REQUIRE(dtype == onnx_fuse::kFloat16 || dtype == onnx_fuse::kBFloat16);
  OF_REQUIRE(pa_heads_variant_compiled(D, warps, stages) && Hkv % warps == 0);
  const long long rows = (long long)num_blocks * block_size;
  CUtensorMap maps[2];
  const bool tma = pa16h_tensor_map(&maps[0], dtype, k_pool, rows, Hkv, D, warps) &&
                   pa16h_tensor_map(&maps[1], dtype, v_pool, rows, Hkv, D, warps);
  if (!tma)  // the per-kv-head TMA kernel (itself falling back to bulk / cp.async), same splits
    return onnx_fuse_paged_attention_decode_tma(dtype, q, q_sb, k_pool, v_pool, block_tables, seq_lens, out,
                                                o_sb, workspace, B, Hq, Hkv, D, block_size, max_blocks,
                                                num_blocks, part_tokens, num_splits, scale, 4, 3, window, sinks, stream);
  const int smem = onnx_fuse::pa_smem_bytes(D, warps, stages, 3);
  const PaSplitK sk = pa_split_k(workspace, B, Hq, D, num_splits);
  const float sl2 = scale * onnx_fuse::kLog2e;
  dim3 grid(Hkv / warps, num_splits, B);
#define OF_LAUNCH(DTN, T, DD, W, ST)                                                             \
  OF_PA_LAUNCH_IF(D == DD && warps == W && stages == ST, onnx_fuse_pa_decode_##DTN##_d##DD##_w##W##s##ST##h, \
                  DTN, DD, W, OF_PA16_ARGS(T), maps[0], maps[1])
  OF_PA_HEAD_GROUP_DISPATCH(OF_PA_HEADS_VARIANTS, OF_LAUNCH)
#undef OF_LAUNCH
}

}  // extern "C"

// ----------------------------------------------------------------------------------------
// fp8-pool decode, head-group tiles (pa8_decode_body, TMA = 2): host side.

extern "C" {

// 1 when onnx_fuse_paged_attention_decode_fp8_tma_heads runs its head-group kernel over this uint8
// pool [num_blocks, block_size, Hkv, D] with groups of `warps` kv heads (compiled variant for D,
// Hkv % warps == 0, power-of-two block_size >= 16, the tensor map encodes), else 0: the launcher then
// silently runs the per-kv-head TMA kernel, so the GPU tests ask this to know the head-group kernel ran.
int onnx_fuse_paged_attention_fp8_tma_heads_map_ok(const void* pool, int num_blocks, int block_size, int Hkv,
                                                   int D, int warps) {
  if (num_blocks <= 0 || block_size < 16 || (block_size & (block_size - 1)) != 0 || Hkv <= 0 ||
      warps <= 0 || Hkv % warps != 0 || !pa8_heads_variant_compiled(D, warps, warps == 8 ? 2 : 3))
    return 0;
  CUtensorMap m;
  return pa8h_tensor_map(&m, pool, (long long)num_blocks * block_size, Hkv, D, warps) ? 1 : 0;
}

// Dynamic shared memory of the head-group fp8-pool decode variant (warps, stages): the TMA layout's.
int onnx_fuse_paged_attention_fp8_tma_heads_smem_bytes(int head_dim, int warps, int stages) {
  return onnx_fuse::pa8t_smem_bytes(head_dim, warps, stages);
}

// onnx_fuse_paged_attention_decode_fp8_tma with one CTA per group of `warps` kv heads (see
// pa8_decode_body, TMA = 2). Refuses (cudaErrorInvalidValue) unless D is 64 or 128, (warps,
// stages) is compiled ((4, 3), (4, 4), (8, 2), (8, 3)), Hkv % warps == 0 and block_size is a power
// of two >= 16 (what the planner checks), or where a pool is not 16-byte aligned (pa_check_args);
// where the device or the pool's size (>= 2^31 rows) leave no tensor map (or o_sb is not a multiple
// of 4) it runs onnx_fuse_paged_attention_decode_fp8_tma (4, 3) with the same splits.
int onnx_fuse_paged_attention_decode_fp8_tma_heads(int dtype, const void* q, long long q_sb,
                                                   const void* k_pool, const void* v_pool,
                                                   const float* k_scale, const float* v_scale,
                                                   const int* block_tables, const int* seq_lens,
                                                   void* out, long long o_sb, void* workspace, int B,
                                                   int Hq, int Hkv, int D, int block_size,
                                                   int max_blocks, int num_blocks, int part_tokens,
                                                   int num_splits, float scale, int warps,
                                                   int stages, int window, const float* sinks, cudaStream_t stream) {
  if (const int rc = pa_check_args(B, Hq, Hkv, block_size, max_blocks, q_sb, part_tokens, num_splits, workspace,
                                   k_pool, v_pool))
    return rc;
  OF_REQUIRE(block_size >= 16 && (block_size & (block_size - 1)) == 0 && num_blocks > 0);
  OF_REQUIRE(k_scale != nullptr && v_scale != nullptr);
  OF_REQUIRE(dtype == onnx_fuse::kFloat16 || dtype == onnx_fuse::kBFloat16);
  OF_REQUIRE(pa8_heads_variant_compiled(D, warps, stages) && Hkv % warps == 0);
  const long long rows = (long long)num_blocks * block_size;
  CUtensorMap maps[2];
  const bool tma = o_sb % 4 == 0 &&  // the kernel stores 4 output columns at once
                   pa8h_tensor_map(&maps[0], k_pool, rows, Hkv, D, warps) &&
                   pa8h_tensor_map(&maps[1], v_pool, rows, Hkv, D, warps);
  if (!tma)  // the per-kv-head TMA kernel (itself falling back to cp.async), same splits
    return onnx_fuse_paged_attention_decode_fp8_tma(dtype, q, q_sb, k_pool, v_pool, k_scale, v_scale,
                                                    block_tables, seq_lens, out, o_sb, workspace, B, Hq,
                                                    Hkv, D, block_size, max_blocks, num_blocks,
                                                    part_tokens, num_splits, scale, 4, 3, window, sinks, stream);
  const int smem = onnx_fuse::pa8t_smem_bytes(D, warps, stages);
  const PaSplitK sk = pa_split_k(workspace, B, Hq, D, num_splits);
  const float sl2 = scale * onnx_fuse::kLog2e;
  dim3 grid(Hkv / warps, num_splits, B);
#define OF_LAUNCH(DTN, T, DD, W, ST)                                                             \
  OF_PA_LAUNCH_IF(D == DD && warps == W && stages == ST, onnx_fuse_pa8_decode_##DTN##_d##DD##_w##W##s##ST##h, \
                  DTN, DD, W, OF_PA8_ARGS(T), maps[0], maps[1])
  OF_PA_HEAD_GROUP_DISPATCH(OF_PA8_HEADS_VARIANTS, OF_LAUNCH)
#undef OF_LAUNCH
}

}  // extern "C"

// ----------------------------------------------------------------------------------------
// Cluster-reduce head groups (pa_decode_body / pa8_decode_body with CLUSTER, suffix "hc"): host side.

extern "C" {

// onnx_fuse_paged_attention_decode_tma_heads ((warps, stages) = (8, 2); Hkv % 8 == 0, block_size a power
// of two >= 16, D in {64, 128}) with the num_splits splits of each row reduced inside a thread-block
// cluster: no workspace (may be null), no reduce kernel; num_splits <= 8 (the portable cluster size).
// l2_promotion: the tensor maps' L2 promotion in bytes, 256, 128 or 0 (none); on the H200 128 and none
// read 3-4 % faster than 256 at B64 H32/8 D128 (docs/PERF.md; 128 B is every other launcher's setting).
// Refuses (cudaErrorInvalidValue) what it cannot run, a missing tensor map (device, driver, >= 2^31
// pool rows) included: no fallback (the planner checks the shape).
int onnx_fuse_paged_attention_decode_cluster(int dtype, const void* q, long long q_sb, const void* k_pool,
                                             const void* v_pool, const int* block_tables, const int* seq_lens,
                                             void* out, long long o_sb, void* workspace, int B, int Hq, int Hkv,
                                             int D, int block_size, int max_blocks, int num_blocks, int part_tokens,
                                             int num_splits, float scale, int warps, int stages,
                                             int l2_promotion, int window, const float* sinks, cudaStream_t stream) {
  (void)workspace;
  if (const int rc = pa_cluster_check(dtype, B, Hq, Hkv, D, block_size, max_blocks, num_blocks, q_sb, part_tokens,
                                      num_splits, k_pool, v_pool))
    return rc;
  OF_REQUIRE(Hkv % warps == 0 && warps == 8 && stages == 2);
  const long long rows = (long long)num_blocks * block_size;
  CUtensorMap tk, tv;
  CUtensorMapL2promotion prom;
  OF_REQUIRE(pa_l2_promotion(l2_promotion, &prom));
  OF_REQUIRE(pa16h_tensor_map(&tk, dtype, k_pool, rows, Hkv, D, warps, prom) &&
             pa16h_tensor_map(&tv, dtype, v_pool, rows, Hkv, D, warps, prom));
  const int smem = onnx_fuse::pa_smem_bytes(D, warps, stages, 3);
  const PaSplitK sk = pa_split_k(nullptr, B, Hq, D, num_splits);
  const float sl2 = scale * onnx_fuse::kLog2e;
  const dim3 grid(Hkv / warps, num_splits, B);
#define OF_LAUNCH(DTN, T, DD, W, ST, BULK, SUF)                                                    \
  if (D == DD && warps == W && stages == ST)                                                       \
    return pa_launch_cluster(onnx_fuse_pa_decode_##DTN##_d##DD##_w##W##s##ST##SUF, grid, W, smem, stream, \
                             OF_PA16_ARGS(T), tk, tv);
  OF_PA_HEAD_GROUP_DISPATCH(OF_PA_CLUSTER_VARIANTS, OF_LAUNCH)
#undef OF_LAUNCH
}

// Dynamic shared memory of the cluster-reduce fp8-pool decode variant (warps, stages).
int onnx_fuse_paged_attention_fp8_cluster_smem_bytes(int head_dim, int warps, int stages) {
  return onnx_fuse::pa8hc_smem_bytes(head_dim, warps, stages);
}

// onnx_fuse_paged_attention_decode_fp8_tma_heads with the num_splits splits of each row reduced inside
// a thread-block cluster (pa8_decode_body, TMA = 2 with CLUSTER): no workspace (may be null), no reduce
// kernel; num_splits <= 8. (warps, stages) in (4, 4), (8, 2) (OF_PA8_CLUSTER_VARIANTS); D in
// {64, 128}; Hkv % warps == 0, block_size a power of two >= 16; any output row stride. Refuses
// (cudaErrorInvalidValue) what it cannot run, a missing tensor map included: no fallback (the planner
// checks the shape). (An integer e4m3 -> fp16 dequant, w4s4hci, measured 9 % behind the cvt in run 17 and
// was dropped.)
int onnx_fuse_paged_attention_decode_fp8_cluster(int dtype, const void* q, long long q_sb, const void* k_pool,
                                                 const void* v_pool, const float* k_scale, const float* v_scale,
                                                 const int* block_tables, const int* seq_lens, void* out,
                                                 long long o_sb, void* workspace, int B, int Hq, int Hkv, int D,
                                                 int block_size, int max_blocks, int num_blocks, int part_tokens,
                                                 int num_splits, float scale, int warps, int stages,
                                                 int window, const float* sinks, cudaStream_t stream) {
  (void)workspace;
  if (const int rc = pa_cluster_check(dtype, B, Hq, Hkv, D, block_size, max_blocks, num_blocks, q_sb, part_tokens,
                                      num_splits, k_pool, v_pool))
    return rc;
  OF_REQUIRE(k_scale != nullptr && v_scale != nullptr);
  OF_REQUIRE(pa8_cluster_variant_compiled(D, warps, stages) && Hkv % warps == 0);
  const long long rows = (long long)num_blocks * block_size;
  CUtensorMap tk, tv;
  OF_REQUIRE(pa8h_tensor_map(&tk, k_pool, rows, Hkv, D, warps) && pa8h_tensor_map(&tv, v_pool, rows, Hkv, D, warps));
  const int smem = onnx_fuse::pa8hc_smem_bytes(D, warps, stages);
  const PaSplitK sk = pa_split_k(nullptr, B, Hq, D, num_splits);
  const float sl2 = scale * onnx_fuse::kLog2e;
  const dim3 grid(Hkv / warps, num_splits, B);
#define OF_LAUNCH(DTN, T, DD, W, ST)                                                               \
  if (D == DD && warps == W && stages == ST)                                                       \
    return pa_launch_cluster(onnx_fuse_pa8_decode_##DTN##_d##DD##_w##W##s##ST##hc, grid, W, smem, stream, \
                             OF_PA8_ARGS(T), tk, tv);
  OF_PA_HEAD_GROUP_DISPATCH(OF_PA8_CLUSTER_VARIANTS, OF_LAUNCH)
#undef OF_LAUNCH
}

}  // extern "C"
