// Fused multi-head attention forward (prefill / encoder), FlashAttention-2 style.
//
// Layouts (element strides are arguments, the last dim must be contiguous):
//   Q [B, S, Hq, D], K [B, S, Hkv, D], V [B, S, Hkv, D], O [B, S, Hq, D]
//   seq_lens int32 [B] (optional): the valid rows of each sequence, for queries and keys alike:
//   seq_lens[b] = L >= 0 -> rows [0, L) (right padding); seq_lens[b] = -L < 0 -> rows [S - L, S)
//   (left padding). Output rows outside them are written as zeros (fa_span, fa_zero_lead_rows).
// Semantics: O = softmax(scale * Q K^T + mask) V per (batch, query head), with query
// head h reading kv head h / (Hq / Hkv) (MHA when Hq == Hkv, GQA/MQA otherwise), the
// causal mask top-left aligned (key j visible to query i iff j <= i). Softcap entries (name suffix
// _sc, Gemma 2's logit softcap): O = softmax(cap * tanh(scale * Q K^T / cap) + mask) V.
// dtypes: fp16 or bf16 in and out, fp32 accumulation and softmax. D in {64, 80, 96, 128, 256}.
//
// Algorithm: one CTA per (query tile of 64 or 128 rows, query head, batch). Each warp
// owns 16 or 32 query rows (Q fragments in registers, or reloaded from shared memory), K/V tiles of 64 keys stream
// through a two-stage cp.async pipeline in swizzled shared memory; S = Q K^T and
// O += P V run on mma.sync m16n8k16 (sm_80+ tensor cores) with an online softmax in
// the exp2 domain. Rows and keys past seq_lens are zero-filled on load and masked.
//
// Prefill over a paged prefix (chunked prefill): onnx_fuse_paged_prefill_fwd runs the same
// warp-specialized body with K/V rows gathered from the PagedAttention block pool (see
// fa_paged_prefill_body and the launcher's comment).
//
// Entry points: extern "C" __global__ kernels named onnx_fuse_fa_fwd_<dt>_d<D>_w<W>_<mask>
// (for embedding as PTX/cubin, e.g. a TensorRT plugin) and the host launch function
// onnx_fuse_fused_attention_fwd (pointers, dims, stream), which picks the variant.

#include <cuda.h>  // CUtensorMap and its enums only (types; the driver is reached at run time)

#include "attention_common.cuh"
#include "cuda_check.cuh"
#include "tensor_map.cuh"
#include "wgmma.cuh"

namespace onnx_fuse {

// The valid rows of sequence b (docs/ops.md, FusedAttention's seq_lens): rows [row0, row0 + len).
// seq_lens[b] >= 0 counts them from row 0 (right padding); a negative value counts them back from
// the end (left padding, as batched generation pads prompts). The kernels run on the rows from
// row0 on (their Q/K/V/O bases moved by row0 rows, S - row0 rows in the tensor); the rows before
// row0 are zeroed by fa_zero_lead (fa_zero_lead_rows beside a library launch, the AOT twins' own
// blocks on TensorRT's path).
struct FaSpan {
  int row0, len;
};
__device__ __forceinline__ FaSpan fa_span(const int* __restrict__ seq_lens, int b, int S) {
  if (seq_lens == nullptr) return FaSpan{0, S};
  const int s = seq_lens[b];
  if (s >= 0) return FaSpan{0, min(s, S)};
  const int len = s < -S ? S : -s;  // never negates INT_MIN
  return FaSpan{S - len, len};
}

// Zeros of rows [row0 of fa_span, ...) in front of sequence b's span, head h, of an O with 16-bit
// elements: rows [r_lo, min(row0, r_hi)) as 16-byte chunks by nthr threads. fa_zero_lead_rows
// (library launches, rows [0, row0) per CTA) and the TensorRT AOT twins (which TensorRT launches
// alone: each CTA zeroes its own query block's share) call it; the attention bodies never do.
__device__ __forceinline__ void fa_zero_lead(void* __restrict__ o, const int* __restrict__ seq_lens,
                                             int b, int h, int S, int D, long long o_sb,
                                             long long o_ss, long long o_sh, int r_lo, int r_hi,
                                             int tid, int nthr) {
  const int rows = min(fa_span(seq_lens, b, S).row0, r_hi) - r_lo;
  const int cpr = D / 8;
  uint16_t* base = static_cast<uint16_t*>(o) + b * o_sb + h * o_sh + r_lo * o_ss;
  for (int c = tid; c < rows * cpr; c += nthr)
    *reinterpret_cast<uint4*>(base + (c / cpr) * o_ss + (c % cpr) * 8) = make_uint4(0, 0, 0, 0);
}

template <int D, int NWARPS, int MT, int BN>
constexpr int fa_smem_bytes() {
  return (16 * MT * NWARPS + 2 * 2 * BN) * tile_row<D>() * 2;
}

// Sliding window (runtime `window`, causal entries only; 0 = none): key n is visible to query row r
// iff r - window < n <= r (HF's sliding_window). fa_window_lo gives the band's width, a huge one
// without a window so the lower-bound tests below are never true and cost one compare per tile;
// fa_first_tile the first key tile any row of a query tile starting at row m0 can see: tiles
// wholly below the band are never loaded (the speed-up of a window), and only the tiles that
// straddle its lower edge are masked (a uniform per-tile flag, as the diagonal's).
constexpr int kFaNoWindow = 1 << 30;
template <bool CAUSAL>
__host__ __device__ __forceinline__ int fa_window_lo(int window) {
  return (CAUSAL && window > 0) ? window : kFaNoWindow;
}
template <bool CAUSAL>
__host__ __device__ __forceinline__ int fa_first_tile(int m0, int wlo, int bn) {
  return (CAUSAL && wlo < kFaNoWindow) ? max(m0 - wlo + 1, 0) / bn : 0;
}

// Logit softcap (the SC template flag of every body; entries with the _sc suffix): each raw
// score s of a tile becomes tanh(scale * s / cap) in place, before masking, and the launcher
// passes scale_log2 = cap * log2(e), so the unchanged online softmax exponentiates
// cap * tanh(scale * s / cap) in the exp2 domain. sc_k = 2 * log2(e) * scale / cap;
// tanh(x) = 1 - 2 / (e^(2x) + 1) on ex2 and a reciprocal: about 1e-6 absolute, where
// tanh.approx.f32 (~5e-4) times a cap of 50 would move the logits by ~0.03. Both are MUFU ops, as
// the softmax's exp2 is, so four scores share one reciprocal: 1/a = bcd / (abcd) and so on, the
// exp2 arguments clamped to +-30 so that abcd <= (2^30 + 1)^4 stays finite (and the fast
// reciprocal exact to an ulp: it flushes only above 2^126); tanh(15 ln 2) = 1 - 2e-9.
template <typename Frag>
__device__ __forceinline__ void fa_softcap(Frag& s, float sc_k) {
  float* x = reinterpret_cast<float*>(&s);
  constexpr int N = int(sizeof(Frag) / sizeof(float));
  static_assert(N % 4 == 0, "softcap: scores come in groups of four");
#pragma unroll
  for (int i = 0; i < N; i += 4) {
    float a[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) a[j] = exp2f(fminf(fmaxf(x[i + j] * sc_k, -30.f), 30.f)) + 1.f;
    const float ab = a[0] * a[1], cd = a[2] * a[3];
    const float r = __fdividef(1.f, ab * cd);
    const float r_ab = cd * r, r_cd = ab * r;  // 1 / (ab), 1 / (cd)
    x[i] = fmaf(-2.f * a[1], r_ab, 1.f);
    x[i + 1] = fmaf(-2.f * a[0], r_ab, 1.f);
    x[i + 2] = fmaf(-2.f * a[3], r_cd, 1.f);
    x[i + 3] = fmaf(-2.f * a[2], r_cd, 1.f);
  }
}

// MT: 16-row m-tiles per warp. MT == 1 keeps the warp's Q fragments in registers; MT == 2
// reloads them from shared memory each k-step but reuses every K/V fragment twice, which
// halves shared-memory traffic per FLOP (FlashAttention-2's choice for D = 128). At D = 256
// the Q fragments (64 registers) are reloaded from shared memory even with MT == 1.
template <typename T, int D, int NWARPS, int MT, int BN, bool CAUSAL, bool SC = false>
__device__ __forceinline__ void fa_fwd_body(
    const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, T* __restrict__ o,
    const int* __restrict__ seq_lens, int S, int Hq, int Hkv,
    long long q_sb, long long q_ss, long long q_sh, long long k_sb, long long k_ss, long long k_sh,
    long long v_sb, long long v_ss, long long v_sh, long long o_sb, long long o_ss, long long o_sh,
    float scale_log2, float sc_k = 0.f, int window = 0) {
  using Tr = MmaTraits<T>;
  constexpr int WM = 16 * MT;       // rows per warp
  constexpr int BM = WM * NWARPS;   // rows per CTA
  constexpr int NT = 32 * NWARPS;
  constexpr int CPR = D / 8;  // 16-byte chunks per row
  constexpr bool Q_IN_REGS = (MT == 1 && D <= 128);
  constexpr int RD = tile_row<D>();  // shared-memory row pitch (elements)
  static_assert(D % 16 == 0, "D must be a multiple of 16");

  extern __shared__ __align__(128) unsigned char fa_smem[];
  T* sQ = reinterpret_cast<T*>(fa_smem);
  T* sK = sQ + BM * RD;         // [2][BN][RD]
  T* sV = sK + 2 * BN * RD;     // [2][BN][RD]

  const int tid = threadIdx.x;
  const int warp = tid >> 5;
  const int lane = tid & 31;
  const int g = lane >> 2;
  const int t4 = lane & 3;

  // Heaviest causal tiles first.
  const int m_block = CAUSAL ? (gridDim.x - 1 - blockIdx.x) : blockIdx.x;
  const int hq = blockIdx.y;
  const int b = blockIdx.z;
  const int hkv = hq / (Hq / Hkv);
  const FaSpan sp = fa_span(seq_lens, b, S);
  const int L = sp.len;
  S -= sp.row0;  // rows from the span's first on (fa_span)
  const int m0 = m_block * BM;

  const T* qb = q + b * q_sb + hq * q_sh + sp.row0 * q_ss;
  const T* kb = k + b * k_sb + hkv * k_sh + sp.row0 * k_ss;
  const T* vb = v + b * v_sb + hkv * v_sh + sp.row0 * v_ss;
  T* ob = o + b * o_sb + hq * o_sh + sp.row0 * o_ss;  // rows in front: fa_zero_lead

  if (m0 >= L) {  // whole tile is padding: zeros
    for (int c = tid; c < BM * CPR; c += NT) {
      int r = c / CPR, cc = c % CPR;
      if (m0 + r < S) *reinterpret_cast<uint4*>(ob + (m0 + r) * o_ss + cc * 8) = make_uint4(0, 0, 0, 0);
    }
    return;
  }

  const int n_end = CAUSAL ? min(L, m0 + BM) : L;
  const int n_tiles = (n_end + BN - 1) / BN;
  const int wlo = fa_window_lo<CAUSAL>(window);
  const int j0 = fa_first_tile<CAUSAL>(m0, wlo, BN);

  auto load_kv = [&](int tile, int buf) {
    const int n0 = tile * BN;
    T* dk = sK + buf * BN * RD;
    T* dv = sV + buf * BN * RD;
#pragma unroll
    for (int i = 0; i < (BN * CPR + NT - 1) / NT; ++i) {
      int c = tid + i * NT;
      if ((BN * CPR) % NT != 0 && c >= BN * CPR) break;
      int r = c / CPR, cc = c % CPR;
      bool ok = (n0 + r) < L;
      int rr = ok ? (n0 + r) : 0;
      cp_async_16(smem_u32(dk + tile_off<D>(r, cc * 8)), kb + rr * k_ss + cc * 8, ok);
      cp_async_16(smem_u32(dv + tile_off<D>(r, cc * 8)), vb + rr * v_ss + cc * 8, ok);
    }
  };

  // Prologue: Q tile and first K/V tile.
#pragma unroll
  for (int i = 0; i < (BM * CPR + NT - 1) / NT; ++i) {
    int c = tid + i * NT;
    if (c < BM * CPR) {
      int r = c / CPR, cc = c % CPR;
      bool ok = (m0 + r) < L;
      int rr = ok ? (m0 + r) : 0;
      cp_async_16(smem_u32(sQ + tile_off<D>(r, cc * 8)), qb + rr * q_ss + cc * 8, ok);
    }
  }
  load_kv(j0, j0 & 1);
  cp_async_commit();

  float acc[MT][D / 8][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int i = 0; i < D / 8; ++i) acc[mt][i][0] = acc[mt][i][1] = acc[mt][i][2] = acc[mt][i][3] = 0.f;
  float row_m[MT][2], row_l[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    row_m[mt][0] = row_m[mt][1] = -INFINITY;
    row_l[mt][0] = row_l[mt][1] = 0.f;
  }
  uint32_t qf[Q_IN_REGS ? D / 16 : 1][4];

  const int wrow = warp * WM;           // first row of this warp within the tile
  const int row0 = m0 + wrow + g;       // rows row0 + 16*mt + {0, 8}

  for (int j = j0; j < n_tiles; ++j) {
    const int buf = j & 1;
    if (j + 1 < n_tiles) {
      load_kv(j + 1, buf ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if (Q_IN_REGS && j == j0) {
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        int r = wrow + (lane & 15);
        int c = kk * 16 + (lane >> 4) * 8;
        ldmatrix_x4(qf[Q_IN_REGS ? kk : 0], smem_u32(sQ + tile_off<D>(r, c)));
      }
    }
    const T* tk = sK + buf * BN * RD;
    const T* tv = sV + buf * BN * RD;

    // S = Q K^T for WM rows x 64 keys per warp.
    float s[MT][BN / 8][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int i = 0; i < BN / 8; ++i) s[mt][i][0] = s[mt][i][1] = s[mt][i][2] = s[mt][i][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t qa[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        if (Q_IN_REGS) {
#pragma unroll
          for (int e = 0; e < 4; ++e) qa[mt][e] = qf[Q_IN_REGS ? kk : 0][e];
        } else {
          int r = wrow + mt * 16 + (lane & 15);
          int c = kk * 16 + (lane >> 4) * 8;
          ldmatrix_x4(qa[mt], smem_u32(sQ + tile_off<D>(r, c)));
        }
      }
#pragma unroll
      for (int nn = 0; nn < BN / 16; ++nn) {
        uint32_t bf[4];
        int r = nn * 16 + (lane & 7) + ((lane >> 4) << 3);
        int c = kk * 16 + ((lane >> 3) & 1) * 8;
        ldmatrix_x4(bf, smem_u32(tk + tile_off<D>(r, c)));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          Tr::mma(s[mt][2 * nn], qa[mt], bf[0], bf[1]);
          Tr::mma(s[mt][2 * nn + 1], qa[mt], bf[2], bf[3]);
        }
      }
    }

    // Mask (only tiles that cross the diagonal or the sequence end) and online softmax in
    // the exp2 domain: p = exp2(s * scale_log2 - m).
    if constexpr (SC) fa_softcap(s, sc_k);
    const int n0 = j * BN;
    const bool need_mask = (n0 + BN > L) || (CAUSAL && n0 + BN - 1 > m0 + wrow) ||
                           (CAUSAL && n0 <= m0 + wrow + WM - 1 - wlo);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      if (need_mask) {
#pragma unroll
        for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            int col = n0 + nt * 8 + 2 * t4 + (e & 1);
            int row = row0 + mt * 16 + (e >> 1) * 8;
            if (col >= L || (CAUSAL && (col > row || col <= row - wlo))) s[mt][nt][e] = -INFINITY;
          }
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float mx = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < BN / 8; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * h], s[mt][nt][2 * h + 1]));
        mx = quad_max(mx) * scale_log2;  // scale_log2 > 0 keeps the max
        const float m_new = fmaxf(row_m[mt][h], mx);
        const float m_use = (m_new == -INFINITY) ? 0.f : m_new;
        const float alpha = exp2f(row_m[mt][h] - m_use);
        row_m[mt][h] = m_new;
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < BN / 8; ++nt) {
          float p0 = exp2f(fmaf(s[mt][nt][2 * h], scale_log2, -m_use));
          float p1 = exp2f(fmaf(s[mt][nt][2 * h + 1], scale_log2, -m_use));
          s[mt][nt][2 * h] = p0;
          s[mt][nt][2 * h + 1] = p1;
          sum += p0 + p1;
        }
        row_l[mt][h] = row_l[mt][h] * alpha + sum;
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt) {
          acc[mt][dt][2 * h] *= alpha;
          acc[mt][dt][2 * h + 1] *= alpha;
        }
      }
    }

    // O += P V.
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      uint32_t pa[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        pa[mt][0] = Tr::pack(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        pa[mt][1] = Tr::pack(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        pa[mt][2] = Tr::pack(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        pa[mt][3] = Tr::pack(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }
#pragma unroll
      for (int dd = 0; dd < D / 16; ++dd) {
        uint32_t bf[4];
        int r = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
        int c = dd * 16 + (lane >> 4) * 8;
        ldmatrix_x4_trans(bf, smem_u32(tv + tile_off<D>(r, c)));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          Tr::mma(acc[mt][2 * dd], pa[mt], bf[0], bf[1]);
          Tr::mma(acc[mt][2 * dd + 1], pa[mt], bf[2], bf[3]);
        }
      }
    }
    __syncthreads();  // buffer `buf` is refilled by the next iteration's prefetch
  }

  // Epilogue: normalize and store; rows past L are zeros.
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float l = quad_sum(row_l[mt][h]);
      const int row = row0 + mt * 16 + h * 8;
      const float inv = (l > 0.f && row < L) ? 1.f / l : 0.f;
      if (row < S) {
        T* orow = ob + row * o_ss;
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt) {
          uint32_t packed = Tr::pack(acc[mt][dt][2 * h] * inv, acc[mt][dt][2 * h + 1] * inv);
          *reinterpret_cast<uint32_t*>(orow + dt * 8 + 2 * t4) = packed;
        }
      }
    }
}


// ---------------------------------------------------------------------------------------
// Hopper path (sm_90a): two warpgroups per CTA, 64 query rows each (BM = 128), 128-key tiles.
// S = Q K^T runs as wgmma with Q and K from 128B-swizzled shared memory (K-major); the
// softmax runs on the fp32 accumulators in registers; O += P V runs as wgmma with P from
// registers and V from shared memory read transposed (MN-major). K/V tiles are double
// buffered with cp.async (the loads of tile j+1 overlap the math of tile j).
constexpr int kWgBM = 128;
constexpr int kWgBN = 128;

// Head sizes that are not a multiple of 64 (80, 96) are stored padded to the next multiple of 64
// (DP) in shared memory, in 64-column swizzled blocks: S = Q K^T runs exactly D/16 k-steps and
// O += P V runs m64nDk16 (N = 80 or 96 reads the second block in part), so no work is padded.
// D = 256 uses 64-key tiles (registers and shared memory).
template <int D>
__host__ __device__ constexpr int fa_wg_dp() { return (D + 63) / 64 * 64; }
template <int D>
__host__ __device__ constexpr int fa_wg_bn() { return D > 128 ? 64 : kWgBN; }
template <int D>
__host__ __device__ constexpr int fa_wgmma_smem_bytes() {  // + 1024 slack to align the base to 1024 B
  return 1024 + (kWgBM * fa_wg_dp<D>() + 2 * 2 * fa_wg_bn<D>() * fa_wg_dp<D>()) * 2;
}

// Byte offset of 16-byte chunk q of row r in a [R][D] tile stored as D/64 column blocks of
// [R][64] with the 128-byte swizzle (chunk ^= row % 8).
template <int R>
__device__ __forceinline__ uint32_t sw128_off(int r, int q) {
  return (uint32_t)((q >> 3) * R * 128 + r * 128 + (((q & 7) ^ (r & 7)) << 4));
}

// NWG = warpgroups per CTA (64 query rows each). NWG = 1 (m64n128w4 at D = 64, m64n64w4 at
// D <= 128) runs two or more CTAs per SM that are not tied by a CTA barrier, so one CTA's
// softmax can overlap another's wgmma. BNV: keys per tile (0 = fa_wg_bn<D>()).
template <typename T, int D, bool CAUSAL, int NWG = 2, int BNV = 0, bool SC = false>
__device__ __forceinline__ void fa_fwd_wgmma_body(
    const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, T* __restrict__ o,
    const int* __restrict__ seq_lens, int S, int Hq, int Hkv,
    long long q_sb, long long q_ss, long long q_sh, long long k_sb, long long k_ss, long long k_sh,
    long long v_sb, long long v_ss, long long v_sh, long long o_sb, long long o_ss, long long o_sh,
    float scale_log2, float sc_k = 0.f, int window = 0) {
#if OF_WGMMA_OK
  using Tr = MmaTraits<T>;
  constexpr int BM = 64 * NWG, BN = BNV ? BNV : fa_wg_bn<D>(), DP = fa_wg_dp<D>(), NT = 128 * NWG,
                CPR = D / 8;
  using WG = wg::Mma<T, BN>;
  using WGO = wg::Mma<T, D>;
  static_assert(D % 16 == 0 && D <= 256, "D must be a multiple of 16, at most 256");

  extern __shared__ unsigned char fa_smem[];
  const uint32_t sbase = (smem_u32(fa_smem) + 1023u) & ~1023u;
  const uint32_t sQ = sbase;
  const uint32_t sKV = sQ + BM * DP * 2;  // stage s: K at sKV + s*2*BN*D*2, V after it

  const int tid = threadIdx.x;
  const int wgi = tid >> 7;            // warpgroup 0/1: rows [64*wgi, 64*wgi + 64)
  const int warp = (tid >> 5) & 3;     // warp within the warpgroup: 16 rows each
  const int lane = tid & 31;
  const int g = lane >> 2;
  const int t4 = lane & 3;

  const int m_block = CAUSAL ? (gridDim.x - 1 - blockIdx.x) : blockIdx.x;
  const int hq = blockIdx.y;
  const int b = blockIdx.z;
  const int hkv = hq / (Hq / Hkv);
  const FaSpan sp = fa_span(seq_lens, b, S);
  const int L = sp.len;
  S -= sp.row0;  // rows from the span's first on (fa_span)
  const int m0 = m_block * BM;

  const T* qb = q + b * q_sb + hq * q_sh + sp.row0 * q_ss;
  const T* kb = k + b * k_sb + hkv * k_sh + sp.row0 * k_ss;
  const T* vb = v + b * v_sb + hkv * v_sh + sp.row0 * v_ss;
  T* ob = o + b * o_sb + hq * o_sh + sp.row0 * o_ss;

  if (m0 >= L) {
    for (int c = tid; c < BM * CPR; c += NT) {
      int r = c / CPR, cc = c % CPR;
      if (m0 + r < S) *reinterpret_cast<uint4*>(ob + (m0 + r) * o_ss + cc * 8) = make_uint4(0, 0, 0, 0);
    }
    return;
  }
  const int n_end = CAUSAL ? min(L, m0 + BM) : L;
  const int n_tiles = (n_end + BN - 1) / BN;
  const int wlo = fa_window_lo<CAUSAL>(window);
  const int j0 = fa_first_tile<CAUSAL>(m0, wlo, BN);

  auto load_kv = [&](int tile, int stage) {
    const int n0 = tile * BN;
    const uint32_t dk = sKV + stage * 2 * BN * DP * 2;
    const uint32_t dv = dk + BN * DP * 2;
#pragma unroll
    for (int i = 0; i < (BN * CPR + NT - 1) / NT; ++i) {
      int c = tid + i * NT;
      if ((BN * CPR) % NT != 0 && c >= BN * CPR) break;
      int r = c / CPR, cc = c % CPR;
      bool ok = (n0 + r) < L;
      int rr = ok ? (n0 + r) : 0;
      cp_async_16(dk + sw128_off<BN>(r, cc), kb + rr * k_ss + cc * 8, ok);
      cp_async_16(dv + sw128_off<BN>(r, cc), vb + rr * v_ss + cc * 8, ok);
    }
  };
#pragma unroll
  for (int i = 0; i < (BM * CPR) / NT; ++i) {
    int c = tid + i * NT;
    int r = c / CPR, cc = c % CPR;
    bool ok = (m0 + r) < L;
    int rr = ok ? (m0 + r) : 0;
    cp_async_16(sQ + sw128_off<BM>(r, cc), qb + rr * q_ss + cc * 8, ok);
  }
  load_kv(j0, j0 & 1);
  cp_async_commit();

  float acc[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
  float row_m[2] = {-INFINITY, -INFINITY};
  float row_l[2] = {0.f, 0.f};
  const int wrow = wgi * 64 + warp * 16;
  const int row0 = m0 + wrow + g;

  for (int j = j0; j < n_tiles; ++j) {
    const int stage = j & 1;
    if (j + 1 < n_tiles) {
      load_kv(j + 1, stage ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    wg::fence_proxy_async();
    __syncthreads();
    const uint32_t tk = sKV + stage * 2 * BN * DP * 2;
    const uint32_t tv = tk + BN * DP * 2;

    float s[BN / 8][4];
    wg::fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t koff = (kk & 3) * 32;  // 16 elements = 32 bytes within the 128 B row
      const uint64_t da = wg::desc_sw128(sQ + (kk >> 2) * BM * 128 + wgi * 64 * 128 + koff, 16, 1024);
      const uint64_t db = wg::desc_sw128(tk + (kk >> 2) * BN * 128 + koff, 16, 1024);
      WG::ss(s, da, db, kk > 0 ? 1 : 0);
    }
    wg::commit();
    wg::wait0();
    wg::fence_acc(s);
    if constexpr (SC) fa_softcap(s, sc_k);

    const int n0 = j * BN;
    const bool need_mask = (n0 + BN > L) || (CAUSAL && n0 + BN - 1 > m0 + wrow) ||
                           (CAUSAL && n0 <= m0 + wrow + 15 - wlo);
    if (need_mask) {
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          int col = n0 + nt * 8 + 2 * t4 + (e & 1);
          int row = row0 + (e >> 1) * 8;
          if (col >= L || (CAUSAL && (col > row || col <= row - wlo))) s[nt][e] = -INFINITY;
        }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt) mx = fmaxf(mx, fmaxf(s[nt][2 * h], s[nt][2 * h + 1]));
      mx = quad_max(mx) * scale_log2;
      const float m_new = fmaxf(row_m[h], mx);
      const float m_use = (m_new == -INFINITY) ? 0.f : m_new;
      const float alpha = exp2f(row_m[h] - m_use);
      row_m[h] = m_new;
      float sum = 0.f;
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt) {
        float p0 = exp2f(fmaf(s[nt][2 * h], scale_log2, -m_use));
        float p1 = exp2f(fmaf(s[nt][2 * h + 1], scale_log2, -m_use));
        s[nt][2 * h] = p0;
        s[nt][2 * h + 1] = p1;
        sum += p0 + p1;
      }
      row_l[h] = row_l[h] * alpha + sum;
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt) {
        acc[dt][2 * h] *= alpha;
        acc[dt][2 * h + 1] *= alpha;
      }
    }

    uint32_t pa[BN / 16][4];
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      pa[kk][0] = Tr::pack(s[2 * kk][0], s[2 * kk][1]);
      pa[kk][1] = Tr::pack(s[2 * kk][2], s[2 * kk][3]);
      pa[kk][2] = Tr::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      pa[kk][3] = Tr::pack(s[2 * kk + 1][2], s[2 * kk + 1][3]);
    }
    wg::fence_acc(acc);
    wg::fence();
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      // V tile rows kk*16.. (keys) as the K dimension, D columns as N (MN-major, transposed).
      const uint64_t db = wg::desc_sw128(tv + kk * 16 * 128, BN * 128, 1024);
      WGO::rs_tb(acc, pa[kk], db, 1);
    }
    wg::commit();
    wg::wait0();
    wg::fence_acc(acc);
    __syncthreads();  // stage is refilled by the next iteration's prefetch
  }

#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float l = quad_sum(row_l[h]);
    const int row = row0 + h * 8;
    const float inv = (l > 0.f && row < L) ? 1.f / l : 0.f;
    if (row < S) {
      T* orow = ob + row * o_ss;
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt) {
        uint32_t packed = Tr::pack(acc[dt][2 * h] * inv, acc[dt][2 * h + 1] * inv);
        *reinterpret_cast<uint32_t*>(orow + dt * 8 + 2 * t4) = packed;
      }
    }
  }
#else
  // Not an sm_90a build: same grid, block (256 threads, 128 rows) and a subset of the shared
  // memory, so run the mma.sync 128x64 8-warp body instead; results are identical in kind.
  fa_fwd_body<T, D, 4 * NWG, 1, 64, CAUSAL, SC>(q, k, v, o, seq_lens, S, Hq, Hkv, q_sb, q_ss,
                                                q_sh, k_sb, k_ss, k_sh, v_sb, v_ss, v_sh, o_sb,
                                                o_ss, o_sh, scale_log2, sc_k, window);
#endif
}


// Pipelined Hopper path (sm_90a), 64-key tiles, 3 K/V stages: each warpgroup issues the
// S = Q K^T wgmma of tile j+1 before it runs the softmax of tile j, so the tensor cores work
// on the next tile while the softmax runs (FlashAttention-3's intra-warpgroup overlap), then
// issues O += P V for tile j and waits for both. Loads of tile j+2 overlap tile j's math.
constexpr int kWpBN = 64;
constexpr int kWpStages = 3;

template <typename T, int D, bool CAUSAL>
__device__ __forceinline__ void fa_fwd_wgmma_pipe_body(
    const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, T* __restrict__ o,
    const int* __restrict__ seq_lens, int S, int Hq, int Hkv,
    long long q_sb, long long q_ss, long long q_sh, long long k_sb, long long k_ss, long long k_sh,
    long long v_sb, long long v_ss, long long v_sh, long long o_sb, long long o_ss, long long o_sh,
    float scale_log2, int window = 0) {
#if OF_WGMMA_OK
  using Tr = MmaTraits<T>;
  constexpr int DP = fa_wg_dp<D>();
  using WG = wg::Mma<T, kWpBN>;
  using WGO = wg::Mma<T, D>;
  constexpr int BM = kWgBM, BN = kWpBN, NT = 256, CPR = D / 8, ST = kWpStages;
  constexpr uint32_t TILE = BN * DP * 2;  // bytes of one K or V tile
  static_assert(D % 16 == 0 && D <= 128, "pipelined variant: D a multiple of 16, at most 128");

  extern __shared__ unsigned char fa_smem[];
  const uint32_t sbase = (smem_u32(fa_smem) + 1023u) & ~1023u;
  const uint32_t sQ = sbase;
  const uint32_t sKV = sQ + BM * DP * 2;  // stage s: K at sKV + s*2*TILE, V at + TILE

  const int tid = threadIdx.x;
  const int wgi = tid >> 7;
  const int warp = (tid >> 5) & 3;
  const int lane = tid & 31;
  const int g = lane >> 2;
  const int t4 = lane & 3;

  const int m_block = CAUSAL ? (gridDim.x - 1 - blockIdx.x) : blockIdx.x;
  const int hq = blockIdx.y;
  const int b = blockIdx.z;
  const int hkv = hq / (Hq / Hkv);
  const FaSpan sp = fa_span(seq_lens, b, S);
  const int L = sp.len;
  S -= sp.row0;  // rows from the span's first on (fa_span)
  const int m0 = m_block * BM;

  const T* qb = q + b * q_sb + hq * q_sh + sp.row0 * q_ss;
  const T* kb = k + b * k_sb + hkv * k_sh + sp.row0 * k_ss;
  const T* vb = v + b * v_sb + hkv * v_sh + sp.row0 * v_ss;
  T* ob = o + b * o_sb + hq * o_sh + sp.row0 * o_ss;

  if (m0 >= L) {
    for (int c = tid; c < BM * CPR; c += NT) {
      int r = c / CPR, cc = c % CPR;
      if (m0 + r < S) *reinterpret_cast<uint4*>(ob + (m0 + r) * o_ss + cc * 8) = make_uint4(0, 0, 0, 0);
    }
    return;
  }
  const int n_end = CAUSAL ? min(L, m0 + BM) : L;
  const int n_tiles = (n_end + BN - 1) / BN;
  const int wlo = fa_window_lo<CAUSAL>(window);
  const int j0 = fa_first_tile<CAUSAL>(m0, wlo, BN);

  auto load_kv = [&](int tile) {
    const int n0 = tile * BN;
    const uint32_t dk = sKV + (tile % ST) * 2 * TILE;
    const uint32_t dv = dk + TILE;
#pragma unroll
    for (int i = 0; i < (BN * CPR + NT - 1) / NT; ++i) {
      int c = tid + i * NT;
      if ((BN * CPR) % NT != 0 && c >= BN * CPR) break;
      int r = c / CPR, cc = c % CPR;
      bool ok = (n0 + r) < L;
      int rr = ok ? (n0 + r) : 0;
      cp_async_16(dk + sw128_off<BN>(r, cc), kb + rr * k_ss + cc * 8, ok);
      cp_async_16(dv + sw128_off<BN>(r, cc), vb + rr * v_ss + cc * 8, ok);
    }
  };
  auto issue_s = [&](float (&sacc)[BN / 8][4], int tile) {
    const uint32_t tk = sKV + (tile % ST) * 2 * TILE;
    wg::fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t koff = (kk & 3) * 32;
      const uint64_t da = wg::desc_sw128(sQ + (kk >> 2) * BM * 128 + wgi * 64 * 128 + koff, 16, 1024);
      const uint64_t db = wg::desc_sw128(tk + (kk >> 2) * BN * 128 + koff, 16, 1024);
      WG::ss(sacc, da, db, kk > 0 ? 1 : 0);
    }
    wg::commit();
    wg::fence_acc(sacc);
  };

#pragma unroll
  for (int i = 0; i < (BM * CPR) / NT; ++i) {
    int c = tid + i * NT;
    int r = c / CPR, cc = c % CPR;
    bool ok = (m0 + r) < L;
    int rr = ok ? (m0 + r) : 0;
    cp_async_16(sQ + sw128_off<BM>(r, cc), qb + rr * q_ss + cc * 8, ok);
  }
  load_kv(j0);
  cp_async_commit();
  if (j0 + 1 < n_tiles) load_kv(j0 + 1);
  cp_async_commit();

  float acc[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
  float row_m[2] = {-INFINITY, -INFINITY};
  float row_l[2] = {0.f, 0.f};
  const int wrow = wgi * 64 + warp * 16;
  const int row0 = m0 + wrow + g;

  float s_cur[BN / 8][4], s_nxt[BN / 8][4];
  cp_async_wait<1>();  // Q and tile 0
  wg::fence_proxy_async();
  __syncthreads();
  issue_s(s_cur, j0);
  wg::wait0();
  wg::fence_acc(s_cur);

  for (int j = j0; j < n_tiles; ++j) {
    const bool has_next = j + 1 < n_tiles;
    if (has_next) {
      cp_async_wait<0>();  // tile j+1
      wg::fence_proxy_async();
    }
    __syncthreads();  // tile j+1 visible to all; every warpgroup is done with tile j-1's stage
    if (j + 2 < n_tiles) load_kv(j + 2);  // into the stage of tile j-1
    cp_async_commit();
    if (has_next) issue_s(s_nxt, j + 1);

    // Softmax of tile j (overlaps the S wgmma of tile j+1).
    const int n0 = j * BN;
    const bool need_mask = (n0 + BN > L) || (CAUSAL && n0 + BN - 1 > m0 + wrow) ||
                           (CAUSAL && n0 <= m0 + wrow + 15 - wlo);
    if (need_mask) {
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          int col = n0 + nt * 8 + 2 * t4 + (e & 1);
          int row = row0 + (e >> 1) * 8;
          if (col >= L || (CAUSAL && (col > row || col <= row - wlo))) s_cur[nt][e] = -INFINITY;
        }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt) mx = fmaxf(mx, fmaxf(s_cur[nt][2 * h], s_cur[nt][2 * h + 1]));
      mx = quad_max(mx) * scale_log2;
      const float m_new = fmaxf(row_m[h], mx);
      const float m_use = (m_new == -INFINITY) ? 0.f : m_new;
      const float alpha = exp2f(row_m[h] - m_use);
      row_m[h] = m_new;
      float sum = 0.f;
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt) {
        float p0 = exp2f(fmaf(s_cur[nt][2 * h], scale_log2, -m_use));
        float p1 = exp2f(fmaf(s_cur[nt][2 * h + 1], scale_log2, -m_use));
        s_cur[nt][2 * h] = p0;
        s_cur[nt][2 * h + 1] = p1;
        sum += p0 + p1;
      }
      row_l[h] = row_l[h] * alpha + sum;
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt) {
        acc[dt][2 * h] *= alpha;
        acc[dt][2 * h + 1] *= alpha;
      }
    }
    uint32_t pa[BN / 16][4];
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      pa[kk][0] = Tr::pack(s_cur[2 * kk][0], s_cur[2 * kk][1]);
      pa[kk][1] = Tr::pack(s_cur[2 * kk][2], s_cur[2 * kk][3]);
      pa[kk][2] = Tr::pack(s_cur[2 * kk + 1][0], s_cur[2 * kk + 1][1]);
      pa[kk][3] = Tr::pack(s_cur[2 * kk + 1][2], s_cur[2 * kk + 1][3]);
    }
    const uint32_t tv = sKV + (j % ST) * 2 * TILE + TILE;
    wg::fence_acc(acc);
    wg::fence();
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      const uint64_t db = wg::desc_sw128(tv + kk * 16 * 128, BN * 128, 1024);
      WGO::rs_tb(acc, pa[kk], db, 1);
    }
    wg::commit();
    wg::wait0();  // S of tile j+1 and O of tile j
    wg::fence_acc(acc);
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk)
#pragma unroll
      for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(pa[kk][e])::"memory");  // live until the wait
    if (has_next) {
      wg::fence_acc(s_nxt);
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s_cur[nt][e] = s_nxt[nt][e];
    }
  }

#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float l = quad_sum(row_l[h]);
    const int row = row0 + h * 8;
    const float inv = (l > 0.f && row < L) ? 1.f / l : 0.f;
    if (row < S) {
      T* orow = ob + row * o_ss;
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt) {
        uint32_t packed = Tr::pack(acc[dt][2 * h] * inv, acc[dt][2 * h + 1] * inv);
        *reinterpret_cast<uint32_t*>(orow + dt * 8 + 2 * t4) = packed;
      }
    }
  }
#else
  fa_fwd_body<T, D, 8, 1, 64, CAUSAL>(q, k, v, o, seq_lens, S, Hq, Hkv, q_sb, q_ss, q_sh, k_sb,
                                      k_ss, k_sh, v_sb, v_ss, v_sh, o_sb, o_ss, o_sh, scale_log2,
                                      0.f, window);
#endif
}

// Warp-specialized Hopper path (sm_90a), m128n128w12: three warpgroups. Warpgroup 0 produces:
// its 128 threads issue the cp.async loads of Q and of the K/V tiles (128 keys) into
// kWsStages stages and, once a stage's copies have landed, fences them for the tensor cores and
// arrives on that stage's "full" mbarrier; the warpgroup gives its registers back (setmaxnreg).
// Warpgroups 1 and 2 own 64 query rows each and take turns on the tensor cores (named barriers
// 1 and 2, FlashAttention-3's ping-pong): in its turn a warpgroup issues S = Q K^T of tile j+1
// and O += P V of tile j back to back, then runs the softmax of tile j+1 (as soon as S is done,
// while its own PV and the other warpgroup's GEMMs still run) and rescales O once PV is done. A consumer frees a stage on its "empty" mbarrier once its PV is done.
constexpr int kWsStages = 3;
// fa_ws_core option kWsPinSoftmax (the m128n128w12t_ov entries, planned at D = 128): in the steady state the softmax
// of tile j+1 is meant to run while the warpgroup's own P V of tile j is still on the tensor cores
// (between wgmma.wait_group 1 and 0), but ptxas hoists the WARPGROUP.DEPBAR of wait_group 0 to the
// top of the softmax's basic block (every exp2 of the planned body's loop issues after it: SASS of
// the sm_90a build), so the softmax only starts once P V is done. A shared-memory store of the
// row sums (which depend on every exp2 of the tile) just before wait_group 0 pins the order:
// ptxas does not move the wait above a memory operation.
constexpr int kWsPinSoftmax = 1;
// kWsSmemEpilogue (with kWsPinSoftmax: the m128n128w12t_ove entries, D = 128, planned for bf16):
// each consumer stages its 64 output rows in its half of the Q tile (free once its last S is done)
// and writes them back as coalesced 16-byte rows instead of a 4-byte store per accumulator pair.
// (Run 14, H200: bf16 587 / 519 / 594-610 TFLOP/s full / causal / GQA against ov's 580 / 516-520 /
// 580; fp16 557-564 / 498-503 / 569-570 against 568 / 497 / 569-574. Dropped there: the O rescale
// moved under the next S GEMM (FlashAttention-3's order, 535 against 568 fp16), the pin at D = 64
// (385 against 399 for the unpinned body: the D = 64 softmax is the longer leg) and on the
// paged-prefill kernels (470-486 against 494-498 at block 16).)
constexpr int kWsSmemEpilogue = 2;
// kWsLeanDesc (the planned m128n128w12t_lde at D = 64 and _oved at D = 128, _ld, and the D = 64
// candidate _ldr): the wgmma descriptors of a tile are built once per operand and stepped
// by adding the k-step's byte offset / 16 to the address field (ws_desc_add), instead of masking
// and shifting every k-step's address (about five uniform instructions per HGMMA in the sm_90a
// SASS, many of them while the warp holds the tensor-core turn): the consumer loop issues 437
// instructions per tile and warp at D = 64 (493 without) and 481 at D = 128 (ov: 588). On the H200
// (run 17, B4 S4096): D = 128 ove + this (oved) fp16 580-588 / 503-504 / 582-588 TFLOP/s full /
// causal / GQA against the planned ov's 546-563 / 472-498 / 558-563, bf16 593-606 / 521-526 against
// ove's 576-593 / 516-518; D = 64 fp16 B8 S2048 397-398 against 385-388. (Tried and dropped there:
// a degree-3 FMA polynomial for 1 in 4 of the exponentials, 6-8 % slower at D = 64 with or without
// this: 8 issue slots per exponential where the consumer warps' issue slots are about as busy as
// MUFU; ov with this alone, at par with ov.)
constexpr int kWsLeanDesc = 8;
// kWsLptGroups (m128n128w12t_ovedg, planned at D = 128 causal in runs 18-19): longest first within
// groups of kWsLptGroup
// (head, sequence) pairs, the groups in order: CTAs running together are about 16 query blocks of
// 8 heads, so each head's K/V is still shared in L2 by the CTAs reading it at the same time, and
// the last group's heaviest blocks start about two waves before the end, with that group's lighter
// blocks (its 8 x 528 tile-times at S4096 over 132 SMs) left to fill in behind them.
constexpr int kWsLptGroups = 32;
constexpr int kWsLptGroup = 8;
// kWsFold (m128n128w12t_ovedf, planned at D = 128 causal fp16 from run 19): a CTA runs two query blocks
// of one (head, sequence), nm - 1 - x and then x, through fa_ws_core's persistent tile loop
// (FaWsFoldTiles). Causal, every CTA then weighs nm + 1 key tiles, and the per-CTA costs (launch,
// barrier set-up, the first Q and K/V loads, the pipeline's fill and drain), about 2.4 tile-times
// per CTA by the sliding-window runs, are paid once per two query blocks: the second block's Q
// (prefetched into L2 when the first starts) and first K/V tiles load while the first block's last
// P V and output stores run. On the H200 (B4 S4096 H32 causal) fp16 503-507 / 519-521 / 525-530
// TFLOP/s in runs 19a / 19b / 19c against ovedg's 494-498 / 509-510 / 525-526; bf16 at par with or
// behind oved (542-546 against 554-556 in 19c), which bf16 keeps; without a mask 1-5 % behind oved.
constexpr int kWsFold = 64;
// kWsMcast (m128n128w12t_ovedm, planned at D = 128 fp16 without a mask in run 20 only; no window, no
// seq_lens, S a multiple of 256): a cluster of two CTAs, adjacent query blocks of one head, shares
// each K/V tile: each producer loads one of the tile's two 64-column boxes of K and of V and
// multicasts it to both CTAs, so K/V's
// L2 -> SM traffic halves (FlashAttention-3 does the same at hdim 128 without a mask; the D = 128
// rows run at the 700 W limit, where bytes moved cost clock). Causal, the pair's longer CTA loads
// its last tile alone. A shared stage is reloaded only once both CTAs' consumers have released it:
// its empty barrier counts one arrival per consumer warp of either CTA. Each producer waits for the
// release of its last shared stages before it exits, so no CTA exits while the other may still
// arrive on or copy into it.
constexpr int kWsMcast = 128;
// kWsQRegs (m128n128w12t_ovedq: oved with it, D = 128, planned from run 21 except fp16 causal): each
// consumer warp loads its Q rows' fragments into registers once per query block (ldmatrix from the
// swizzled tile, 32 registers at D = 128) and issues S = Q K^T with A from registers (wgmma RS, B = K
// K-major), so the tensor cores read only K from shared memory for S: a fifth less of their
// shared-memory reads per tile. The gain is per clock, not more clock at the 700 W limit (run 21b:
// fp16 1575 MHz against ovedm's 1560, bf16 1635-1650 against 1650-1665). Run 21a (H200, B4 S4096): fp16 575-581 / GQA 588-593 TFLOP/s against oved's 563-564 / 577-579
// and ovedm's 570-577 / 570-586; bf16 604 / 611 / causal 532 against oved's 594-599 / 599-602 / 525-531.
// With ovedm (ovedmq) and ovedf (ovedfq) it measured at par with or behind ovedq and was dropped.
constexpr int kWsQRegs = 256;
// kWsChain (persistent schedules with kWsQRegs and kWsSmemEpilogue: the candidates ovedfc and tp_ovedc,
// session 18): a block hands on to the next without draining the software pipeline. Its last P V and the
// next block's first S = Q K^T go out as one turn, the next block's first softmax runs under that P V, and
// the block's output is staged in the Q tile (this warpgroup's rows, whose next Q is already in
// registers) before the next block's loop starts with its first P in registers. Without it each block
// pays a prologue (S and softmax of its first tile with no P V beside them) and a drain (its last P V
// alone), part of the about 2.4 tile-times per CTA the sliding-window runs measured, which a causal block
// of 16.5 tiles at S = 4096 feels twice as much as a full one. The Q tile's "Q empty" barrier then counts one arrival
// per consumer thread per block: after the Q load's ldmatrix for a block nothing chained into, else after
// the previous block's staged output is read back.
constexpr int kWsChain = 512;
// kWsLazyRescale (in the planned ovedq and ovedfc from session 20): a row's softmax keeps the maximum its P
// and O are scaled by (the frame) until a tile's maximum passes it by more than kWsLazyT (log2 units), so O
// is rescaled (D / 2 multiplies per thread) only on the tiles where a warp's frame moves: after the first
// tiles hardly ever. P = exp2(s - frame) is then at most 2^kWsLazyT (256: in range for fp16 / bf16 P and the
// fp32 sums), and O / l is the same quotient in the frame's units. (FlashAttention-4 rescales lazily the same
// way.) Run 30b (H200, B4 S4096 D128, medians of six interleaved passes): as candidates ovedql / ovedfcl,
// +1.2-2.4 % over ovedq / ovedfc on every row (fp16 full 601 against 591, causal 547 against 541; bf16 629
// against 615, causal 571 against 559 TFLOP/s), at the same clocks: the consumers' issue slots, about as busy
// as MUFU (run 17), shed the multiplies. (Run 11's lazy twin of ov, without a threshold, skipped only tiles
// where no row's maximum moved at all and measured behind.)
constexpr int kWsLazyRescale = 1024;
constexpr float kWsLazyT = 8.f;
// kWsPadD80 / kWsPadD96 (candidates ovedqp / ovedfcp, session 38, by name only): D = 80 / 96 heads run
// through the D = 128 body (template D = 128) with the head dim padded in shared memory only. The
// launcher's tensor maps keep the real inner dim, so TMA fills columns D..127 of every Q / K / V box
// with zeros (out of bounds) and fetches no extra bytes; the full box still counts towards the
// barrier's bytes. Q K^T over zero columns is exact and O's columns D..127 come out zero: they are
// not stored (fa_ws_out_d: every store of O stops at the real D). MMA work grows by 128 / D.
constexpr int kWsPadD80 = 2048;
constexpr int kWsPadD96 = 4096;
// D = 256 candidates (session 41, by name only): fa_ws_core at template D = 256 with 128 query rows (two
// consumer warpgroups x 64), K / V tiles of kWsH256BN keys (m128n64w12t_h256) or kWsH256WBN
// (m128n80w12t_h256w, FlashAttention-3's hdim-256 tile) in kWsH256Stages stages, TMA rows only: Q 64 KiB +
// 2 x (K + V) of 32 / 40 KiB = 192 / 224 KiB of shared memory; the consumers' O accumulator is 64 x 256
// fp32 (128 registers per thread) beside S (32 / 40) and P (16 / 20), so Q stays in shared memory (no
// kWsQRegs: its 64 registers do not fit) and the 24 / 240 register split is taken. The K / V tensor maps'
// boxes are kWsH256BN / kWsH256WBN rows (Q's stay 128). Options: oved's (pinned softmax, staged epilogue,
// stepped descriptors) and the lazy O rescale, which at D = 256 skips 128 multiplies per thread and tile.
constexpr int kWsH256BN = 64;
constexpr int kWsH256WBN = 80;
constexpr int kWsH256Stages = 2;
// kWsSplitKV (the D = 256 candidates m128n64w12t_h256s / m128n80w12t_h256ws, session 41): K and V of a stage on
// barriers of their own, as kWsMcast's (without the multicast): K is released once both consumers' S of it is
// done, V once their P V is. With one full / empty pair per stage and 2 stages, tile j + 1 could only load once
// the second consumer's P V of tile j - 1 was done, and the first consumer's next turn (S of j + 1) waited for
// that load's whole latency with the tensor cores idle; split, K of j + 1 loads once S of j - 1 is done (two turns
// earlier) and V of j + 1 once P V of j - 1 is (a turn before its P V needs it). FlashAttention-3 pipelines K and
// V apart the same way. Session 43 (split48, candidates by name only): the same barriers on the bodies planned at
// D = 64 (m128n128w12t_ldes / _ldesg: lde with them, _ldesg causal longest first within groups of 8 heads) and
// D = 128 (_ovedqs / _ovedqsg: ovedq with them; _ovedfcs: the chained two-block ovedfc with them, so on the
// persistent tile loop too: the chained hand-over waits for V of the block's last tile on V full and frees K of
// the next block's first tile after its S), and at D = 256 m128n64w12t_h256sg (h256s, causal grouped).
constexpr int kWsSplitKV = 8192;
// kWsNoTurn (the D = 256 candidates m128n80w12t_h256wsn / _h256wmn, session 42): the two consumer warpgroups issue
// their wgmma groups without taking turns (no named-barrier ping-pong: each issues S of j + 1 and P V of j as soon as
// its own softmax and the stage allow). At D = 256 the GEMMs of a tile (2 x 64 x 80 x 256 per warpgroup) are long
// beside its softmax (64 x 80 exponentials), so the turn order only serializes the issue; FlashAttention-3 runs its
// hdim-256 forward without the scheduler barrier (UseSchedulerBarrier is kHeadDim <= 128 for 16-bit types).
constexpr int kWsNoTurn = 16384;
// The head dim of the tensors (columns of O stored): the real one under kWsPadD*, else D.
template <int D, int OPT>
__host__ __device__ constexpr int fa_ws_out_d() {
  return (OPT & kWsPadD80) ? 80 : (OPT & kWsPadD96) ? 96 : D;
}
// (Session 34, run 42a, dropped: on ovedfc the causal diagonal tile masked by one compare per score against a
// per-thread limit (candidate ovedfcm) measured level with the general mask (fp16 / bf16 causal medians 550 / 565
// against 543 / 575 TFLOP/s under the zeroing flush, 623 / 644 against 627 / 645 under the read flush), and with
// the 16-key chunks no row of a warp sees left out by warp-uniform exits from the softmax's loops (ovedfcd)
// 4.5-8 % behind on every causal row: docs/PERF.md "Thirty-first round".)
// (query block, head, sequence) of this CTA for fa_ws_core's one-tile schedule.
template <bool CAUSAL, int OPT>
__device__ __forceinline__ int3 fa_ws_coords() {
  if constexpr (CAUSAL && (OPT & kWsLptGroups) != 0) {
    const int nm = gridDim.x, hb = gridDim.y * gridDim.z;
    const long long lin = blockIdx.x + gridDim.x * (blockIdx.y + (long long)gridDim.y * blockIdx.z);
    const int grp = (int)(lin / ((long long)kWsLptGroup * nm));
    const int rem = (int)(lin - (long long)grp * kWsLptGroup * nm);
    const int gsz = min(kWsLptGroup, hb - grp * kWsLptGroup);  // the last group may be smaller
    const int pair = grp * kWsLptGroup + rem % gsz;
    return make_int3(nm - 1 - rem / gsz, pair % (int)gridDim.y, pair / (int)gridDim.y);
  }
  return make_int3(CAUSAL ? gridDim.x - 1 - blockIdx.x : blockIdx.x, blockIdx.y, blockIdx.z);
}
// Adds a byte offset (a multiple of 16) to a shared-memory descriptor's start-address field. The
// field holds (address & 0x3FFFF) >> 4 in bits 0-13; shared addresses stay below 2^18, so the sum
// never carries out of it and the low word add is exact.
__device__ __forceinline__ uint64_t ws_desc_add(uint64_t d, uint32_t off) {
  return (d & 0xFFFFFFFF00000000ull) | (uint32_t)((uint32_t)d + (off >> 4));
}

// Where the rows of one (sequence, query head) live, for fa_ws_core. Both policies give:
// q_len valid query rows; kv_len valid keys; q_store rows written (rows in [q_len, q_store) get
// zeros); with CAUSAL, key n is visible to query row r iff n <= r + causal_off, and with a
// window > 0 (sliding window; 0 = none, the value brace-initializers that omit it give) also
// iff n > r + causal_off - window.
// Dense: Q/K/V/O [B, S, H, D] rows at a stride (causal_off = 0: top-left aligned).
template <typename T>
struct FaDenseRows {
  static constexpr bool kTma = false;  // the producer warpgroup issues 16-byte cp.async per row
  static constexpr bool kPagedTma = false;  // FaPagedTmaRows: K/V by TMA per block, Q by cp.async
  const T* q; const T* k; const T* v; T* o;
  long long q_ss, k_ss, v_ss, o_ss;
  int q_len, kv_len, q_store, causal_off;
  int window;
  __device__ __forceinline__ const T* q_row(int r) const { return q + r * q_ss; }
  __device__ __forceinline__ T* o_row(int r) const { return o + r * o_ss; }
  __device__ __forceinline__ void kv_rows(int n, const T*& kr, const T*& vr) const {
    kr = k + n * k_ss;
    vr = v + n * v_ss;
  }
};
// Paged (prefill over a paged prefix): Q/O rows of the new tokens at a stride; K/V of every
// cached token (prefix and new) in the block pool [num_blocks, 2^bs_shift, Hkv, D]: token n
// is row n % bs of block bt[n / bs]. k/v point at this kv head's columns of block 0; tok_ss
// is Hkv * D. causal_off = kv_len - q_len (bottom-right aligned: new token i is at position
// kv_len - q_len + i). sink: the query head's attention-sink logit in log2 units (-inf: none;
// fa_row_inv folds it into each finished row's denominator).
template <typename T>
struct FaPagedRows {
  static constexpr bool kTma = false;
  static constexpr bool kPagedTma = false;
  const T* q; const T* k; const T* v; T* o;
  long long q_ss, o_ss, tok_ss;
  const int* bt;
  int bs_shift;
  int q_len, kv_len, q_store, causal_off;
  int window;
  float sink;
  __device__ __forceinline__ const T* q_row(int r) const { return q + r * q_ss; }
  __device__ __forceinline__ T* o_row(int r) const { return o + r * o_ss; }
  __device__ __forceinline__ void kv_rows(int n, const T*& kr, const T*& vr) const {
    const long long blk = __ldg(bt + (n >> bs_shift));
    const long long off = ((blk << bs_shift) + (n & ((1 << bs_shift) - 1))) * tok_ss;
    kr = k + off;
    vr = v + off;
  }
};
// 1 / the denominator of a finished row (sum l, max m in log2 units): rows with a `sink` (the
// paged rows) fold it in (sink_row_inv), the others have none.
template <typename Rows>
__device__ __forceinline__ auto fa_row_inv(const Rows& rows, float l, float m, int) -> decltype(rows.sink, 0.f) {
  return sink_row_inv(l, m, rows.sink);
}
template <typename Rows>
__device__ __forceinline__ float fa_row_inv(const Rows&, float l, float, long) { return 1.f / l; }

// Dense rows loaded by TMA (m128n128w12t): one producer thread copies each Q/K/V tile as D/64
// boxes of 64 columns x 128 rows (128-byte swizzle, exactly the layout sw128_off describes)
// through tensor maps over [B, S, H, D]. Rows past S read as zeros; rows in [seq_len, S) are
// whatever the tensor holds there (see fa_ws_core: such V rows are zeroed, such Q rows not stored).
template <typename T>
struct FaDenseTmaRows : FaDenseRows<T> {
  static constexpr bool kTma = true;
  const void* tq; const void* tk; const void* tv;  // addresses of the __grid_constant__ maps
  int hq, hkv, b, s_len;  // coordinates; s_len = S - row0 (rows in the tensor from row0 on)
  int row0;               // fa_span's first row: every TMA row coordinate is moved by it
};

// Which (query tile, head, sequence) tiles a CTA of fa_ws_core runs. FaWsOneTile: its own
// (blockIdx), once. A persistent Tiles type (FaDenseTmaTiles) gives count tiles, the CTA's
// i-th in index(i) (past count: done), each one's rows and query block in at(t).
template <typename Rows>
struct FaWsTile {
  Rows rows;
  int m_block;
};
struct FaWsOneTile {
  static constexpr bool kPersistent = false;
  int count = 1;
  __device__ __forceinline__ int rounds() const { return 1; }
  __device__ __forceinline__ int index(int) const { return 0; }
};
// kWsFold: query block `first`, then `second` (count 1: `first` only), both of the rows' (head,
// sequence).
template <typename Rows>
struct FaWsFoldTiles {
  static constexpr bool kPersistent = true;
  Rows rows;
  int first, second, count;
  __device__ __forceinline__ int rounds() const { return count; }
  __device__ __forceinline__ int index(int i) const { return i; }
  __device__ __forceinline__ FaWsTile<Rows> at(int t) const {
    return FaWsTile<Rows>{rows, t == 0 ? first : second};
  }
};
// kWsFold's CTAs: (pair = b * Hq + h, first block, second block, blocks). Without a mask the grid is
// (ceil(nm / 2), Hq, B): blocks nm - 1 - x and x. Causal, the grid is 1-D: the pairs but the last
// kWsFoldSingles (head, sequence) pairs fold as above (each CTA nm + 1 key tiles), then those
// pairs' blocks one per CTA, longest first across them (as kWsLptGroups), so the last wave is
// filled with short blocks instead of leaving half the SMs idle behind equal folded CTAs.
constexpr int kWsFoldSingles = 8;
__host__ __device__ __forceinline__ int fa_fold_singles(int pairs) {
  return pairs < kWsFoldSingles ? pairs : kWsFoldSingles;
}
// Causal kWsFold grid size for `pairs` (head, sequence) pairs of nm query blocks, and back.
__host__ __device__ __forceinline__ long long fa_fold_ctas(int pairs, int nm) {
  const int g = fa_fold_singles(pairs);
  return (long long)(pairs - g) * ((nm + 1) / 2) + (long long)g * nm;
}
__host__ __device__ __forceinline__ int fa_fold_pairs(long long ctas, int nm) {
  const long long all_single = (long long)kWsFoldSingles * nm;  // grids of <= kWsFoldSingles pairs
  return ctas <= all_single ? (int)(ctas / nm) : (int)((ctas - all_single) / ((nm + 1) / 2)) + kWsFoldSingles;
}
template <bool CAUSAL>
__device__ __forceinline__ int4 fa_fold_coords(int nm, int pairs) {
  if constexpr (!CAUSAL) {
    const int x = blockIdx.x;
    return make_int4(blockIdx.z * gridDim.y + blockIdx.y, nm - 1 - x, x, 2 * x + 1 == nm ? 1 : 2);
  } else {
    const int h = (nm + 1) / 2, g = fa_fold_singles(pairs);
    const long long folded = (long long)(pairs - g) * h;
    const long long lin = blockIdx.x;
    if (lin < folded) {
      const int pair = (int)(lin / h), x = (int)(lin - (long long)pair * h);
      return make_int4(pair, nm - 1 - x, x, 2 * x + 1 == nm ? 1 : 2);
    }
    const int r = (int)(lin - folded);
    return make_int4(pairs - g + r % g, nm - 1 - r / g, 0, 1);
  }
}

// Persistent schedule of the experimental m128n128w12tp entries (grid = min(tiles, SMs)): tile t
// is query block t % nm of head (t / nm) % Hq of sequence t / (nm * Hq), the heaviest block
// first when causal; a head's query blocks are neighbours, so the CTAs running at one time share
// their K/V in L2. The CTA's i-th tile comes from round i of gridDim.x tiles, in snake order
// (CTA g takes position g in even rounds, gridDim.x - 1 - g in odd ones), which evens out the
// causal tiles' unequal work without a dynamic scheduler.
template <typename T, bool CAUSAL>
struct FaDenseTmaTiles {
  static constexpr bool kPersistent = true;
  const T* q; const T* k; const T* v; T* o;
  const int* seq_lens;
  long long q_sb, q_ss, q_sh, k_sb, k_ss, k_sh, v_sb, v_ss, v_sh, o_sb, o_ss, o_sh;
  const void* tq; const void* tk; const void* tv;
  int S, Hq, Hkv, nm, count;  // nm: query blocks per (sequence, head); count = nm * Hq * B
  __device__ __forceinline__ int rounds() const { return (count + (int)gridDim.x - 1) / (int)gridDim.x; }
  __device__ __forceinline__ int index(int i) const {
    const int G = gridDim.x, g = blockIdx.x;
    return i * G + ((i & 1) ? G - 1 - g : g);
  }
  __device__ __forceinline__ FaWsTile<FaDenseTmaRows<T>> at(int t) const {
    const int bh = t / nm, mi = t - bh * nm;
    const int hq = bh % Hq, b = bh / Hq;
    const int hkv = hq / (Hq / Hkv);
    const FaSpan sp = fa_span(seq_lens, b, S);
    const int L = sp.len, S1 = S - sp.row0;
    FaDenseTmaRows<T> rows{{q + b * q_sb + hq * q_sh + sp.row0 * q_ss, k + b * k_sb + hkv * k_sh + sp.row0 * k_ss,
                            v + b * v_sb + hkv * v_sh + sp.row0 * v_ss, o + b * o_sb + hq * o_sh + sp.row0 * o_ss,
                            q_ss, k_ss, v_ss, o_ss, L, L, S1, 0},
                           tq, tk, tv, hq, hkv, b, S1, sp.row0};
    return FaWsTile<FaDenseTmaRows<T>>{rows, CAUSAL ? nm - 1 - mi : mi};
  }
};

// Paged rows loaded by TMA (fa_paged_prefill_tma): K/V tiles gathered block by block through
// tensor maps over the pools viewed as (D, Hkv, num_blocks * block_size), one box of 64 columns
// x 1 head x block_size rows per block and 64-column piece (128-byte swizzle; a block's rows
// start at a multiple of 2 KiB in the tile, so the swizzle phase is the one sw128_off assumes).
// Q stays on cp.async (packed ragged rows; loaded once per CTA by producer warps 1-3). Blocks
// wholly past kv_len are not copied; V rows [kv_len, tile end) are zeroed before the stage is
// published, K rows there are masked.
template <typename T>
struct FaPagedTmaRows : FaPagedRows<T> {
  static constexpr bool kPagedTma = true;
  const void* tk; const void* tv;  // addresses of the __grid_constant__ maps
  int hkv;
};

// TMA producers' fix-up of the last K/V tile (warp-uniform, the whole producer warp): once the
// tile's V copy has landed on vtail (phase `parity`), zero V rows [r0, BN) (rows past kv_len: stale,
// never-written or non-finite data that P = 0 would still turn into NaN, as 0 * Inf), fence the
// generic stores for the tensor cores' async-proxy reads and publish the stage (lane 0 arrives on
// `full`, whose K bytes are already expected).
template <int BN, int CPR>
__device__ __forceinline__ void ws_zero_v_tail(uint32_t dv, int r0, uint32_t vtail, uint32_t parity,
                                               uint32_t full, int lane) {
  __syncwarp();
  mbar_wait_parity(vtail, parity);
#pragma unroll 1
  for (int c = lane; c < (BN - r0) * CPR; c += 32)
    wg::st_shared_zero16(dv + sw128_off<BN>(r0 + c / CPR, c % CPR));
  wg::fence_proxy_async();
  __syncwarp();
  if (lane == 0) wg::mbar_arrive(full);
}

// PREGS: the producer warpgroup's registers after setmaxnreg (40, consumers 232; or 24,
// consumers 240: FlashAttention-3's split, the experimental m128n128w12t_r24 entries). Either
// way the pool is the 384 x 168 registers the CTA starts with. BNT / STT: keys per K/V tile and
// stages (128 / 3; TMA rows may take others: 176-key tiles in 2 stages, FlashAttention-3's
// hdim-128 tile, measured 7-8 % below 128 / 3 on the first w12t body (run 6) and 20-22 % below
// ovedq on the oved body (run 23a; ovedq's Q registers do not fit beside them), docs/PERF.md).
//
// Tiles: FaWsOneTile, or a persistent schedule (the experimental m128n128w12tp entries, TMA rows
// only): the CTA loops over its tiles with one set of barriers; the stage ring and the
// consumers' turn order run on across tiles, and the producer loads the next tile's Q (once
// both consumers have issued their last S = Q K^T of the current one: the "Q empty" barrier)
// and K/V while the consumers finish the current tile's last P V and store its output.
//
// OPT: bench-candidate options (bit flags, kWs*; 0 = the planned body, unchanged).
template <typename T, int D, bool CAUSAL, typename Rows, int PREGS = 40, int BNT = 128,
           int STT = kWsStages, typename Tiles = FaWsOneTile, int OPT = 0, bool SC = false>
__device__ __forceinline__ void fa_ws_core(const Rows& rows, float scale_log2,
                                           const Tiles& tiles = Tiles{}, float sc_k = 0.f) {
#if OF_WGMMA_OK
  constexpr int CREGS = PREGS == 24 ? 240 : 232;
  static_assert((PREGS == 40 || PREGS == 24) && 128 * PREGS + 256 * CREGS == 384 * 168,
                "setmaxnreg split must use exactly the CTA's register pool");
  using Tr = MmaTraits<T>;
  constexpr int BM = 128, BN = BNT, ST = STT, NT = 384, CPR = D / 8;
  static_assert(BN == 128 || Rows::kTma, "wide key tiles: dense TMA rows only");
  static_assert(BN % 16 == 0 && BN <= 256 && ST >= 2, "tile shape");
  constexpr bool PERSIST = Tiles::kPersistent;
  static_assert(!PERSIST || Rows::kTma, "persistent schedule: dense TMA rows only");
  constexpr bool MCAST = (OPT & kWsMcast) != 0;
  constexpr bool SPLIT = (OPT & kWsSplitKV) != 0;  // K / V on barriers of their own (no multicast)
  constexpr bool KVB = MCAST || SPLIT;  // V full / V empty barriers; K released after its S
  static_assert(!SPLIT || (Rows::kTma && !MCAST), "split K/V barriers: dense TMA rows, no multicast");
  static_assert(!MCAST || (Rows::kTma && !PERSIST && ((D == 128 && BNT == 128) || (D == 256 && BNT == kWsH256WBN))),
                "K/V multicast: dense TMA rows, one tile per CTA, D = 128 (128-key tiles) or 256 (80-key tiles)");
  constexpr uint32_t TILE = BN * D * 2;  // bytes of one K or V tile
  using WG = wg::Mma<T, BN>;
  using WGO = wg::Mma<T, D>;
  static_assert(D == 64 || D == 128 || (D == 256 && Rows::kTma && !PERSIST && (OPT & kWsQRegs) == 0 &&
                                         (BN == kWsH256BN || BN == kWsH256WBN) && ST == kWsH256Stages),
                "warp-specialized variant: D = 64 or 128; D = 256 with dense TMA rows, 64- or 80-key tiles, 2 stages");
  constexpr int DO = fa_ws_out_d<D, OPT>(), CPRO = DO / 8;  // O's columns stored, as 16-byte chunks
  static_assert(DO == D || (D == 128 && Rows::kTma && !MCAST),
                "padded head dim: dense TMA rows (zero fill past the real D), D = 128 body");

  extern __shared__ unsigned char fa_smem[];
  // Q, full[ST], empty[ST], V tail (TMA), Q empty (persistent)
  // MCAST / SPLIT: V on barriers of its own (V full[ST], V empty[ST]); full / empty then hold K's
  __shared__ __align__(8) uint64_t ws_bars[2 + 2 * ST + (PERSIST ? 1 : 0) + (KVB ? 2 * ST : 0)];
  __shared__ float ws_pin[(OPT & kWsPinSoftmax) ? 256 : 1];  // kWsPinSoftmax: a slot per consumer thread
  const uint32_t sbase = (smem_u32(fa_smem) + 1023u) & ~1023u;
  const uint32_t sQ = sbase;
  const uint32_t sKV = sQ + BM * D * 2;  // stage s: K at sKV + s*2*TILE, V at + TILE
  const uint32_t qbar = smem_u32(&ws_bars[0]);
  const uint32_t full0 = smem_u32(&ws_bars[1]);
  const uint32_t empty0 = smem_u32(&ws_bars[1 + ST]);
  const uint32_t vtail = smem_u32(&ws_bars[1 + 2 * ST]);
  const uint32_t qempty = smem_u32(&ws_bars[1 + 2 * ST + (PERSIST ? 1 : 0)]);  // persistent only
  const uint32_t fullv0 = KVB ? smem_u32(&ws_bars[2 + 2 * ST + (PERSIST ? 1 : 0)]) : 0u;  // MCAST / SPLIT only
  const uint32_t emptyv0 = fullv0 + 8 * ST;

  const int tid = threadIdx.x;
  const int wgi = tid >> 7;
  const int m_block = fa_ws_coords<CAUSAL, OPT>().x;
  const int m0 = m_block * BM;
  const int QL = rows.q_len, KL = rows.kv_len, OFF = rows.causal_off;
  const int n_end = CAUSAL ? min(KL, m0 + BM + OFF) : KL;
  // sliding window: key tiles [j0, ...) only; the cp.async / paged producers and the consumers
  // count tiles from j0 (the stage ring counts loaded tiles)
  const int j0 = fa_first_tile<CAUSAL>(m0 + OFF, fa_window_lo<CAUSAL>(rows.window), BN);

  if (!PERSIST && (m0 >= QL || n_end <= j0 * BN)) {  // no valid row or visible key: zeros where we own rows
    for (int c = tid; c < BM * CPRO; c += NT) {
      int r = c / CPRO, cc = c % CPRO;
      if (m0 + r < rows.q_store)
        *reinterpret_cast<uint4*>(rows.o_row(m0 + r) + cc * 8) = make_uint4(0, 0, 0, 0);
    }
    return;
  }
  const int n_tiles = (n_end + BN - 1) / BN - j0;  // tiles this CTA loads
  // MCAST: the key tiles both CTAs of the cluster load (the pair's shorter count; the launcher
  // guarantees full query blocks and no window). Causal, the longer CTA's last tile is its own.
  int mc_shared = n_tiles;
  if constexpr (MCAST) {
    const int peer_x = (int)(blockIdx.x ^ 1u);
    const int pm0 = (CAUSAL ? (int)gridDim.x - 1 - peer_x : peer_x) * BM;
    const int pend = CAUSAL ? min(KL, pm0 + BM + OFF) : KL;
    mc_shared = min(n_tiles, (pend + BN - 1) / BN - j0);
  }

  // The tile loop (one pass unless PERSIST): geometry of the CTA's tile t.
  struct Geom {
    FaWsTile<Rows> tl;
    int m0, n_tiles, j0;  // n_tiles key tiles from tile j0 (keys j0 * BN ...)
    bool skip;  // no valid row or no visible key: the consumers store zeros (PERSIST only)
  };
  auto geom = [&](int t) -> Geom {
    if constexpr (PERSIST) {
      const FaWsTile<Rows> tl = tiles.at(t);
      const int gm0 = tl.m_block * BM, gql = tl.rows.q_len, gkl = tl.rows.kv_len;
      const int gend = CAUSAL ? min(gkl, gm0 + BM + tl.rows.causal_off) : gkl;
      const int gj0 = fa_first_tile<CAUSAL>(gm0 + tl.rows.causal_off,
                                            fa_window_lo<CAUSAL>(tl.rows.window), BN);
      const bool skip = gm0 >= gql || gend <= gj0 * BN;
      return Geom{tl, gm0, skip ? 0 : (gend + BN - 1) / BN - gj0, gj0, skip};
    } else {
      return Geom{FaWsTile<Rows>{rows, m_block}, m0, n_tiles, j0, false};
    }
  };
  const int n_rounds = tiles.rounds();

  // Q and full barriers: one arrival per producer thread (cp.async), or one arrival plus the
  // copies' byte count (TMA). Empty barriers: every consumer thread once its PV is done.
  constexpr int FULL_ARRIVALS = (Rows::kTma || Rows::kPagedTma) ? 1 : 128;
  constexpr int Q_ARRIVALS = Rows::kTma ? 1 : (Rows::kPagedTma ? 96 : 128);
  if (tid == 0) {
    mbar_init(qbar, Q_ARRIVALS);
    for (int s = 0; s < ST; ++s) {
      mbar_init(full0 + 8 * s, FULL_ARRIVALS);
      mbar_init(empty0 + 8 * s, MCAST ? 16 : 256);  // MCAST: a consumer warp of either CTA each
      if constexpr (KVB) {
        mbar_init(fullv0 + 8 * s, 1);
        mbar_init(emptyv0 + 8 * s, MCAST ? 16 : 256);
      }
    }
    mbar_init(vtail, 1);
    if constexpr (PERSIST) mbar_init(qempty, 256);
    mbar_fence_init();
  }
  if constexpr (MCAST)
    wg::cluster_sync_all();  // the other CTA's barriers exist before anything arrives on them
  else
    __syncthreads();

  if constexpr (Rows::kPagedTma) {
    if (wgi == 0) {  // ---------------------------------------- producer (paged K/V by TMA)
      wg::regs_dec<PREGS>();
      if (tid >= 32) {  // warps 1-3: Q by cp.async (rows past q_len zero-filled), then done
        for (int c = tid - 32; c < BM * CPR; c += 96) {
          const int r = c / CPR, cc = c % CPR;
          const bool ok = m0 + r < QL;
          cp_async_16(sQ + sw128_off<BM>(r, cc), rows.q_row(ok ? m0 + r : 0) + cc * 8, ok);
        }
        cp_async_commit();
        cp_async_wait<0>();
        wg::fence_proxy_async();
        wg::mbar_arrive(qbar);
        return;
      }
      // Warp 0: lane i < BN / block_size looks up block i of each tile and issues its copies
      // (D/64 boxes of K, then of V), the lanes in parallel: with small blocks one issuing lane
      // bound the producer (block 16: 32 serial copies per tile at D = 128). Lane 0 sets the
      // stage's byte counts first; the __syncwarp orders that before any lane's copy can
      // complete, so the full barrier keeps its 1 arrival + tx bytes. The host guarantees
      // 16 <= block_size <= 128.
      const int lane = tid;
      constexpr int NB = D / 64;
      const int shift = rows.bs_shift;
      const int bs = 1 << shift;
      const int nblk = BN >> shift;  // blocks per tile, 1..8
      const uint32_t blk_bytes = (uint32_t)bs * D * 2;
      const uint32_t lane_off = (uint32_t)lane * bs * 128;  // block `lane`'s rows in a tile box
      if (lane == 0) {
        wg::tma_prefetch_desc(rows.tk);
        wg::tma_prefetch_desc(rows.tv);
      }
      for (int j = 0; j < n_tiles; ++j) {
        const int n0 = (j0 + j) * BN;
        const uint32_t full = full0 + 8 * (j % ST);
        const uint32_t dk = sKV + (j % ST) * 2 * TILE;
        const uint32_t dv = dk + TILE;
        const int nvalid = min(nblk, (KL - n0 + bs - 1) >> shift);  // blocks holding keys < KL
        const bool tail = n0 + BN > KL;  // the last tile of the sequence, not full
        int row = 0;
        if (lane < nvalid) row = __ldg(rows.bt + (n0 >> shift) + lane) << shift;  // before the wait
        if (j >= ST) mbar_wait_parity(empty0 + 8 * (j % ST), ((j / ST) - 1) & 1);
        if (lane == 0) {
          const uint32_t bytes = (uint32_t)nvalid * blk_bytes;  // of K, and of V
          if (!tail) {
            mbar_arrive_expect_tx(full, 2 * bytes);
          } else {
            wg::mbar_expect_tx(full, bytes);  // K only; the arrival comes after the V fix-up
            mbar_arrive_expect_tx(vtail, bytes);
          }
        }
        __syncwarp();
        if (lane < nvalid) {
          const uint32_t vbar = tail ? vtail : full;
#pragma unroll
          for (int cb = 0; cb < NB; ++cb)
            wg::tma_load_3d(dk + lane_off + cb * BN * 128, rows.tk, cb * 64, rows.hkv, row, full);
#pragma unroll
          for (int cb = 0; cb < NB; ++cb)
            wg::tma_load_3d(dv + lane_off + cb * BN * 128, rows.tv, cb * 64, rows.hkv, row, vbar);
        }
        // V rows [KL, n0 + BN): past-the-end rows of the last block and stale or never-written
        // rows of uncopied blocks -> zeros (vtail is used once per CTA: phase 0; 0 < KL - n0 < BN)
        if (tail) ws_zero_v_tail<BN, CPR>(dv, KL - n0, vtail, 0, full, lane);  // warp-uniform
      }
      return;
    }
  } else if constexpr (Rows::kTma) {
    if (wgi == 0) {  // ------------------------------------------------------- producer (TMA)
      wg::regs_dec<PREGS>();
      if (tid >= 32) return;  // warp 0 stays: lane 0 issues, the warp fixes the last V tile
      const int lane = tid;
      constexpr int NB = D / 64;  // boxes (64 columns) per tile
      if (lane == 0) {
        wg::tma_prefetch_desc(rows.tq);
        wg::tma_prefetch_desc(rows.tk);
        wg::tma_prefetch_desc(rows.tv);
      }
      int kv_base = 0, it = 0, tails = 0;  // K/V tiles, tiles and tail fix-ups so far (PERSIST)
      for (int i = 0; i < n_rounds; ++i) {
        const int t = tiles.index(i);
        if (PERSIST && t >= tiles.count) break;
        const Geom gm = geom(t);
        if (gm.skip) continue;
        const Rows& rw = gm.tl.rows;
        const int KL = rw.kv_len, n_tiles = gm.n_tiles;
        if (lane == 0) {
          if (PERSIST && it > 0) mbar_wait_parity(qempty, (it - 1) & 1);
          mbar_arrive_expect_tx(qbar, BM * D * 2);
#pragma unroll
          for (int cb = 0; cb < NB; ++cb)
            wg::tma_load_4d(sQ + cb * BM * 128, rw.tq, cb * 64, rw.hq, gm.m0 + rw.row0, rw.b, qbar);
          if constexpr (PERSIST) {  // the next tile's Q into L2: its load after "Q empty" then hits
            const int tn = i + 1 < n_rounds ? tiles.index(i + 1) : tiles.count;
            if (tn < tiles.count) {
              const Geom gn = geom(tn);
              if (!gn.skip) {
#pragma unroll
                for (int cb = 0; cb < NB; ++cb)
                  wg::tma_prefetch_l2_4d(gn.tl.rows.tq, cb * 64, gn.tl.rows.hq, gn.m0 + gn.tl.rows.row0, gn.tl.rows.b);
              }
            }
          }
        }
        for (int j = 0; j < n_tiles; ++j) {
          const int c = kv_base + j;  // the stage ring counts K/V tiles across the CTA's tiles
          const int n0 = (gm.j0 + j) * BN;
          const uint32_t full = full0 + 8 * (c % ST);
          const uint32_t dk = sKV + (c % ST) * 2 * TILE;
          const uint32_t dv = dk + TILE;
          // Rows [KL, S) of the last tile hold real data (NaN / Inf possible) that the mask turns
          // into P = 0 but 0 * Inf = NaN in P V: that tile's V lands on its own barrier first and
          // the warp zeroes those rows before the stage is published. K needs nothing (S is masked).
          const bool tail = j == n_tiles - 1 && n0 + BN > KL && KL < rw.s_len;
          if constexpr (MCAST) {  // this CTA's box of K and of V, to both CTAs (no tail: launcher)
            if (lane == 0) {  // K on full / empty, V on its own pair: K is freed one S earlier
              const uint32_t fullv = fullv0 + 8 * (c % ST);
              const uint32_t rank = wg::cluster_rank();
              if (c >= ST) mbar_wait_parity(empty0 + 8 * (c % ST), ((c / ST) - 1) & 1);
              mbar_arrive_expect_tx(full, TILE);  // both boxes of K land here
              if (j < mc_shared) {  // rank r: boxes [r NB / 2, (r + 1) NB / 2) of the tile
#pragma unroll
                for (int hb = 0; hb < NB / 2; ++hb) {
                  const int cb = (int)rank * (NB / 2) + hb;
                  wg::tma_load_4d_mc(dk + cb * BN * 128, rw.tk, cb * 64, rw.hkv, n0 + rw.row0, rw.b, full, 3);
                }
              } else {  // causal: the longer CTA's last tile, both boxes here only
#pragma unroll
                for (int cb = 0; cb < NB; ++cb) wg::tma_load_4d(dk + cb * BN * 128, rw.tk, cb * 64, rw.hkv, n0 + rw.row0, rw.b, full);
              }
              if (c >= ST) mbar_wait_parity(emptyv0 + 8 * (c % ST), ((c / ST) - 1) & 1);
              mbar_arrive_expect_tx(fullv, TILE);
              if (j < mc_shared) {
#pragma unroll
                for (int hb = 0; hb < NB / 2; ++hb) {
                  const int cb = (int)rank * (NB / 2) + hb;
                  wg::tma_load_4d_mc(dv + cb * BN * 128, rw.tv, cb * 64, rw.hkv, n0 + rw.row0, rw.b, fullv, 3);
                }
              } else {
#pragma unroll
                for (int cb = 0; cb < NB; ++cb) wg::tma_load_4d(dv + cb * BN * 128, rw.tv, cb * 64, rw.hkv, n0 + rw.row0, rw.b, fullv);
              }
            }
            continue;
          }
          if constexpr (SPLIT) {  // K on full / empty, V on V full / V empty (its tail fix-up arrives there)
            if (lane == 0) {
              const uint32_t fullv = fullv0 + 8 * (c % ST);
              if (c >= ST) mbar_wait_parity(empty0 + 8 * (c % ST), ((c / ST) - 1) & 1);
              mbar_arrive_expect_tx(full, TILE);
#pragma unroll
              for (int cb = 0; cb < NB; ++cb)
                wg::tma_load_4d(dk + cb * BN * 128, rw.tk, cb * 64, rw.hkv, n0 + rw.row0, rw.b, full);
              if (c >= ST) mbar_wait_parity(emptyv0 + 8 * (c % ST), ((c / ST) - 1) & 1);
              mbar_arrive_expect_tx(tail ? vtail : fullv, TILE);
#pragma unroll
              for (int cb = 0; cb < NB; ++cb)
                wg::tma_load_4d(dv + cb * BN * 128, rw.tv, cb * 64, rw.hkv, n0 + rw.row0, rw.b, tail ? vtail : fullv);
            }
            if (tail) {  // warp-uniform; vtail: once per tile (PERSIST: each use waited for before the next)
              ws_zero_v_tail<BN, CPR>(dv, KL - n0, vtail, tails & 1, fullv0 + 8 * (c % ST), lane);
              ++tails;
            }
            continue;
          }
          if (lane == 0) {
            if (c >= ST) mbar_wait_parity(empty0 + 8 * (c % ST), ((c / ST) - 1) & 1);
            if (!tail) {
              mbar_arrive_expect_tx(full, 2 * TILE);
            } else {
              wg::mbar_expect_tx(full, TILE);  // K only; the arrival comes after the V fix-up
              mbar_arrive_expect_tx(vtail, TILE);
            }
#pragma unroll
            for (int cb = 0; cb < NB; ++cb)
              wg::tma_load_4d(dk + cb * BN * 128, rw.tk, cb * 64, rw.hkv, n0 + rw.row0, rw.b, full);
#pragma unroll
            for (int cb = 0; cb < NB; ++cb)
              wg::tma_load_4d(dv + cb * BN * 128, rw.tv, cb * 64, rw.hkv, n0 + rw.row0, rw.b,
                              tail ? vtail : full);
          }
          if (tail) {  // warp-uniform; vtail: once per CTA unless PERSIST; 0 < KL - n0 < BN
            ws_zero_v_tail<BN, CPR>(dv, KL - n0, vtail, tails & 1, full, lane);
            ++tails;
          }
        }
        kv_base += n_tiles;
        ++it;
      }
      if constexpr (MCAST) {  // stay until both CTAs' consumers have released every shared stage
        if (lane == 0)
          for (int c = max(0, mc_shared - ST); c < mc_shared; ++c) {
            mbar_wait_parity(empty0 + 8 * (c % ST), (c / ST) & 1);
            mbar_wait_parity(emptyv0 + 8 * (c % ST), (c / ST) & 1);
          }
      }
      return;
    }
  } else if (wgi == 0) {  // ----------------------------------------------- producer (cp.async)
    wg::regs_dec<PREGS>();
    // Thread t copies 16-byte chunk cc = t % CPR of rows r0 + (128 / CPR) * i: the swizzled
    // chunk position depends on the row only through row % 8, which is the same for all its rows.
    constexpr int RSTEP = 128 / CPR;  // rows per pass of the warpgroup (8 at D=128, 16 at D=64)
    const int cc = tid % CPR, r0 = tid / CPR;
    const uint32_t soff = sw128_off<BM>(r0, cc);  // BM == BN: same offset in Q, K and V tiles
#pragma unroll
    for (int i = 0; i < BM / RSTEP; ++i) {
      const int r = r0 + i * RSTEP;
      const bool ok = (m0 + r) < QL;
      cp_async_16(sQ + soff + i * RSTEP * 128, rows.q_row(ok ? (m0 + r) : 0) + cc * 8, ok);
    }
    cp_async_commit();
    auto load_kv = [&](int tile) {  // tile: counted from j0
      const int n0 = (j0 + tile) * BN;
      const uint32_t dk = sKV + (tile % ST) * 2 * TILE + soff;
      const uint32_t dv = dk + TILE;
#pragma unroll
      for (int i = 0; i < BN / RSTEP; ++i) {
        const int n = n0 + r0 + i * RSTEP;
        const bool ok = n < KL;
        const T* kr = rows.k;  // rows past kv_len: zero fill, the address is only mapped
        const T* vr = rows.v;
        if (ok) rows.kv_rows(n, kr, vr);
        cp_async_16(dk + i * RSTEP * 128, kr + cc * 8, ok);
        cp_async_16(dv + i * RSTEP * 128, vr + cc * 8, ok);
      }
      cp_async_commit();
    };
    load_kv(0);
    cp_async_wait<1>();  // Q has landed
    wg::fence_proxy_async();
    wg::mbar_arrive(qbar);
    for (int j = 1; j <= n_tiles; ++j) {
      if (j < n_tiles) {
        if (j >= ST) mbar_wait_parity(empty0 + 8 * (j % ST), ((j / ST) - 1) & 1);
        load_kv(j);
        cp_async_wait<1>();  // tile j-1 has landed
      } else {
        cp_async_wait<0>();
      }
      wg::fence_proxy_async();
      wg::mbar_arrive(full0 + 8 * ((j - 1) % ST));
    }
    return;
  }

  // ------------------------------------------------------------------------------- consumers
  wg::regs_inc<CREGS>();
  const int cw = wgi - 1;  // consumer warpgroup 0/1: rows [64*cw, 64*cw + 64)
  const int warp = (tid >> 5) & 3;
  const int lane = tid & 31;
  const int g = lane >> 2;
  const int t4 = lane & 3;
  const int wrow = cw * 64 + warp * 16;
  const int my_bar = 1 + cw, other_bar = 2 - cw;

  // Turn order: consumer 0 first. Barrier `my_bar` completes when this warpgroup syncs on it
  // and the other one has arrived; consumer 1 skips its last arrive so the counts match (with
  // PERSIST it never skips and consumer 0 syncs once more after its last tile). kWsNoTurn: no turns.
  constexpr bool TURN = (OPT & kWsNoTurn) == 0;
  static_assert(TURN || !PERSIST, "kWsNoTurn: one tile per CTA");
  if (TURN && cw == 1) wg::bar_arrive(1, 256);

  constexpr bool LEAN = (OPT & kWsLeanDesc) != 0;
  constexpr bool QREGS = (OPT & kWsQRegs) != 0;
  constexpr bool CHAIN = (OPT & kWsChain) != 0;
  constexpr bool LAZY = (OPT & kWsLazyRescale) != 0;
  static_assert(!QREGS || BN == 128, "kWsQRegs: S = Q K^T by the m64n128 RS wgmma");
  static_assert(!CHAIN || (PERSIST && QREGS && (OPT & kWsSmemEpilogue) != 0 && !MCAST),
                "kWsChain: a persistent schedule with Q in registers and the staged epilogue");
  // kWsLeanDesc: k-step 0 of Q; cw read back through a shuffle so ptxas keeps it in a uniform register
  const uint64_t da_q = wg::desc_sw128(sQ + (LEAN ? __shfl_sync(0xffffffffu, cw, 0) : cw) * 64 * 128, 16, 1024);
  // A block's accumulators, softmax state, P and (kWsQRegs) Q fragments; kWsChain carries them from the
  // block that ran this block's first S and softmax into this block's loop.
  float acc[D / 8][4];
  float row_m[2], row_l[2];
  uint32_t pa[BN / 16][4];
  uint32_t qf[QREGS ? D / 16 : 1][4];  // kWsQRegs: this warp's 16 Q rows as m16k16 A fragments
  // What the softmax's mask needs of a block.
  struct BlockG {
    int m0, j0, KL, OFF, wlo, row0;
  };
  auto block_g = [&](const Geom& b) {
    return BlockG{b.m0, b.j0, b.tl.rows.kv_len, b.tl.rows.causal_off, fa_window_lo<CAUSAL>(b.tl.rows.window),
                  b.m0 + wrow + g};
  };
  auto load_qf = [&]() {  // lanes 0-15: rows wrow + 0..15 at chunk 2 kk, lanes 16-31 the same rows at 2 kk + 1
    if constexpr (QREGS) {
      const int r = wrow + (lane & 7) + (lane & 8);
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) ldmatrix_x4(qf[QREGS ? kk : 0], sQ + sw128_off<BM>(r, 2 * kk + (lane >> 4)));
    }
  };
  int kv_base = 0, it = 0;  // K/V tiles and tiles so far (PERSIST)
  bool chained = false;  // kWsChain: the block before ran this block's first S, softmax and P
  for (int i = 0; i < n_rounds; ++i) {
  const int t = tiles.index(i);
  if (PERSIST && t >= tiles.count) break;
  // no tile after this one: the producer loads no other Q (kWsSmemEpilogue may stage there)
  const bool last_tile = i + 1 == n_rounds || tiles.index(i + 1) >= tiles.count;
  const Geom gm = geom(t);
  const Rows& rows = gm.tl.rows;
  const int m0 = gm.m0, n_tiles = gm.n_tiles;
  const int QL = rows.q_len;
  if (PERSIST && gm.skip) {  // no valid row or no visible key: zeros where we own rows
    for (int c = tid - 128; c < BM * CPRO; c += 256) {
      const int r = c / CPRO, cc = c % CPRO;
      if (m0 + r < rows.q_store)
        *reinterpret_cast<uint4*>(rows.o_row(m0 + r) + cc * 8) = make_uint4(0, 0, 0, 0);
    }
    continue;
  }
  const BlockG bg = block_g(gm);

  auto issue_s = [&](float (&sacc)[BN / 8][4], int tile) {
    const uint32_t tk = sKV + ((kv_base + tile) % ST) * 2 * TILE;
    const uint64_t db_k = wg::desc_sw128(tk, 16, 1024);
    wg::fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t koff = (kk & 3) * 32;
      const uint64_t db = LEAN ? ws_desc_add(db_k, (kk >> 2) * BN * 128 + koff)
                               : wg::desc_sw128(tk + (kk >> 2) * BN * 128 + koff, 16, 1024);
      if constexpr (QREGS) {
        wg::MmaRsK128<T>::rs(sacc, qf[QREGS ? kk : 0], db, kk > 0 ? 1 : 0);
      } else {
        const uint64_t da = LEAN ? ws_desc_add(da_q, (kk >> 2) * BM * 128 + koff)
                                 : wg::desc_sw128(sQ + (kk >> 2) * BM * 128 + cw * 64 * 128 + koff, 16, 1024);
        WG::ss(sacc, da, db, kk > 0 ? 1 : 0);
      }
    }
  };
  // Mask and online softmax of tile `tile` of block b (exp2 domain) in place; returns the O rescale
  // factors (applied by finish() once the previous PV is done: pa and acc belong to it until then).
  auto softmax = [&](float (&sv)[BN / 8][4], int tile, float (&alpha)[2], const BlockG& b) {
    if constexpr (SC) fa_softcap(sv, sc_k);
    const int n0 = (b.j0 + tile) * BN;
    const bool need_mask = (n0 + BN > b.KL) || (CAUSAL && n0 + BN - 1 > b.m0 + wrow + b.OFF) ||
                           (CAUSAL && n0 <= b.m0 + wrow + 15 + b.OFF - b.wlo);
    if (need_mask) {
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          int col = n0 + nt * 8 + 2 * t4 + (e & 1);
          int row = b.row0 + (e >> 1) * 8;
          if (col >= b.KL || (CAUSAL && (col > row + b.OFF || col <= row + b.OFF - b.wlo))) sv[nt][e] = -INFINITY;
        }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt) mx = fmaxf(mx, fmaxf(sv[nt][2 * h], sv[nt][2 * h + 1]));
      mx = quad_max(mx) * scale_log2;
      float m_use;
      if constexpr (LAZY) {  // the frame moves only past kWsLazyT (a first finite maximum always moves it)
        const bool move = mx > row_m[h] + kWsLazyT;
        const float frame = move ? mx : row_m[h];
        m_use = (frame == -INFINITY) ? 0.f : frame;
        alpha[h] = move ? exp2f(row_m[h] - m_use) : 1.f;
        row_m[h] = frame;
      } else {
        const float m_new = fmaxf(row_m[h], mx);
        m_use = (m_new == -INFINITY) ? 0.f : m_new;
        alpha[h] = exp2f(row_m[h] - m_use);
        row_m[h] = m_new;
      }
      float sum = 0.f;
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt) {
        float p0 = exp2f(fmaf(sv[nt][2 * h], scale_log2, -m_use));
        float p1 = exp2f(fmaf(sv[nt][2 * h + 1], scale_log2, -m_use));
        sv[nt][2 * h] = p0;
        sv[nt][2 * h + 1] = p1;
        sum += p0 + p1;
      }
      row_l[h] = row_l[h] * alpha[h] + sum;
    }
  };
  // Rescale O and pack P into pa.
  auto finish = [&](float (&sv)[BN / 8][4], const float (&alpha)[2]) {
    // kWsLazyRescale: only where some row of the warp moved its frame (a warp-uniform branch, no wgmma in it)
    if (!LAZY || __any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) {
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt) {
          acc[dt][2 * h] *= alpha[h];
          acc[dt][2 * h + 1] *= alpha[h];
        }
    }
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      pa[kk][0] = Tr::pack(sv[2 * kk][0], sv[2 * kk][1]);
      pa[kk][1] = Tr::pack(sv[2 * kk][2], sv[2 * kk][3]);
      pa[kk][2] = Tr::pack(sv[2 * kk + 1][0], sv[2 * kk + 1][1]);
      pa[kk][3] = Tr::pack(sv[2 * kk + 1][2], sv[2 * kk + 1][3]);
    }
  };

  // Tile j's stage is free again: every consumer thread here; MCAST: one arrival per warp on both
  // CTAs' barriers for a shared tile, none for the longer CTA's own last tile (nothing waits on it).
  // MCAST: K's stage (release(empty0, j)) after its S, V's (release(emptyv0, j)) after its P V.
  auto release = [&](uint32_t base, int j) {
    const uint32_t bar = base + 8 * ((kv_base + j) % ST);
    if constexpr (MCAST) {
      __syncwarp();
      if (lane == 0 && j < mc_shared) {
        wg::mbar_arrive_rank(bar, 0);
        wg::mbar_arrive_rank(bar, 1);
      }
    } else {
      wg::mbar_arrive(bar);
    }
  };
  auto pv = [&](int tile) {  // O += P V of `tile`, one wgmma group
    const uint32_t tv = sKV + ((kv_base + tile) % ST) * 2 * TILE + TILE;
    const uint64_t db_v = wg::desc_sw128(tv, BN * 128, 1024);  // kWsLeanDesc: k-step 0 of V
    wg::fence_acc(acc);
    wg::fence();
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      const uint64_t db = LEAN ? ws_desc_add(db_v, kk * 16 * 128) : wg::desc_sw128(tv + kk * 16 * 128, BN * 128, 1024);
      WGO::rs_tb(acc, pa[kk], db, 1);
    }
    wg::commit();
  };
  auto pv_done = [&]() {  // after wait0: acc is final, pa may be rewritten
    wg::fence_acc(acc);
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk)
#pragma unroll
      for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(pa[kk][e])::"memory");
  };
  // O / l of this block's rows (l, m: their final softmax sums and maxima): staged through this warpgroup's
  // rows of the Q tile (kWsSmemEpilogue) or stored from registers.
  auto store_out = [&](const float (&fl)[2], const float (&fm)[2], bool staged) {
    if (staged) {
      // This warpgroup's Q rows [64 cw, 64 cw + 64) are free: its last S = Q K^T is done and the
      // other consumer reads only its own rows. Same swizzle as Q: conflict-free both ways.
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float l = quad_sum(fl[h]);
        const int lr = wrow + g + h * 8;
        const bool live = l > 0.f && m0 + lr < QL;  // rows past q_len: zeros (see below)
        const float inv = live ? fa_row_inv(rows, l, fm[h], 0) : 0.f;
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt) {
          const uint32_t packed = Tr::pack(live ? acc[dt][2 * h] * inv : 0.f, live ? acc[dt][2 * h + 1] * inv : 0.f);
          asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(sQ + sw128_off<BM>(lr, dt) + 4 * t4), "r"(packed)
                       : "memory");
        }
      }
      wg::bar_sync(3 + cw, 128);  // this warpgroup's rows are staged
      for (int c = tid & 127; c < 64 * CPRO; c += 128) {  // the real D's columns only
        const int lr = cw * 64 + c / CPRO, cc = c % CPRO;
        if (m0 + lr < rows.q_store) {
          uint4 val;
          asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                       : "=r"(val.x), "=r"(val.y), "=r"(val.z), "=r"(val.w)
                       : "r"(sQ + sw128_off<BM>(lr, cc)) : "memory");
          *reinterpret_cast<uint4*>(rows.o_row(m0 + lr) + cc * 8) = val;
        }
      }
    } else {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float l = quad_sum(fl[h]);
        const int row = bg.row0 + h * 8;
        // Rows past q_len are zeros by selection: with TMA their Q rows are whatever the tensor holds
        // (NaN / Inf give NaN accumulators, and NaN * 0 is NaN).
        const bool live = l > 0.f && row < QL;
        const float inv = live ? fa_row_inv(rows, l, fm[h], 0) : 0.f;
        if (row < rows.q_store) {
          T* orow = rows.o_row(row);
#pragma unroll
          for (int dt = 0; dt < DO / 8; ++dt) {  // the real D's columns only
            uint32_t packed = Tr::pack(live ? acc[dt][2 * h] * inv : 0.f, live ? acc[dt][2 * h + 1] * inv : 0.f);
            *reinterpret_cast<uint32_t*>(orow + dt * 8 + 2 * t4) = packed;
          }
        }
      }
    }
  };

  if (!chained) {
#pragma unroll
    for (int i2 = 0; i2 < D / 8; ++i2) acc[i2][0] = acc[i2][1] = acc[i2][2] = acc[i2][3] = 0.f;
    row_m[0] = row_m[1] = -INFINITY;
    row_l[0] = row_l[1] = 0.f;
    mbar_wait_parity(qbar, it & 1);
    load_qf();
    // kWsChain: nothing reads this Q tile again before the block's output is stored (S takes Q from
    // registers; the output of a block that hands on to the next is staged at the next block's start):
    // "Q empty" now, so the next block's Q loads under this block
    if constexpr (CHAIN) wg::mbar_arrive(qempty);
    mbar_wait_parity(full0 + 8 * (kv_base % ST), (kv_base / ST) & 1);
    {
      float s0[BN / 8][4];
      if constexpr (TURN) wg::bar_sync(my_bar, 256);
      issue_s(s0, 0);
      wg::commit();
      if constexpr (TURN) wg::bar_arrive(other_bar, 256);
      wg::wait0();
      wg::fence_acc(s0);
      if constexpr (KVB) release(empty0, 0);  // K of the first tile is read
      // PERSIST: "Q empty" as soon as this warpgroup's last S = Q K^T is done (here with one key tile,
      // else in the loop below), so the next tile's Q loads under this one's last softmax and P V
      if constexpr (PERSIST && !QREGS) {
        if (n_tiles == 1) wg::mbar_arrive(qempty);
      }
      float alpha[2];
      softmax(s0, 0, alpha, bg);
      finish(s0, alpha);
    }
  }
  // Steady state: S of tile j+1 and PV of tile j as two wgmma groups; the exponentials of tile
  // j+1 run once S is done (wait_group 1) while PV still runs. No wgmma sits under a
  // data-dependent branch (the last tile is peeled): otherwise ptxas cannot tell which group
  // wait_group 1 leaves in flight and serializes every wgmma (warning C7514).
  for (int j = 0; j + 1 < n_tiles; ++j) {
    float s_nxt[BN / 8][4];
    const int c = kv_base + j + 1;
    mbar_wait_parity(full0 + 8 * (c % ST), (c / ST) & 1);
    if constexpr (TURN) wg::bar_sync(my_bar, 256);
    issue_s(s_nxt, j + 1);
    wg::commit();
    if constexpr (KVB) mbar_wait_parity(fullv0 + 8 * ((c - 1) % ST), ((c - 1) / ST) & 1);
    pv(j);
    if constexpr (TURN) wg::bar_arrive(other_bar, 256);
    float alpha[2];
    wg::wait1();
    wg::fence_acc(s_nxt);
    if constexpr (KVB) release(empty0, j + 1);  // K of tile j + 1 is read
    if constexpr (PERSIST && !QREGS) {
      if (j + 2 == n_tiles) wg::mbar_arrive(qempty);  // S of the last key tile is done
    }
    softmax(s_nxt, j + 1, alpha, bg);
    if constexpr ((OPT & kWsPinSoftmax) != 0)  // the store waits for every exp2; the wait for the store
      asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(smem_u32(&ws_pin[tid - 128])), "f"(row_l[0] + row_l[1])
                   : "memory");
    wg::wait0();
    pv_done();
    release(KVB ? emptyv0 : empty0, j);
    finish(s_nxt, alpha);
  }
  // kWsChain: the next block (not the last, not empty) starts here, its first S = Q K^T issued with this
  // block's last P V as one turn, its softmax under that P V, this block's output staged while the next
  // block's first P waits in registers (the pipeline does not drain and refill between blocks).
  bool chain_next = false;
  if constexpr (CHAIN) chain_next = !last_tile && !geom(tiles.index(i + 1)).skip;
  if (chain_next) {
  if constexpr (CHAIN) {
    const BlockG bn = block_g(geom(tiles.index(i + 1)));
    mbar_wait_parity(qbar, (it + 1) & 1);
    load_qf();
    const int c = kv_base + n_tiles;  // the next block's first K/V tile
    mbar_wait_parity(full0 + 8 * (c % ST), (c / ST) & 1);
    float s_nxt[BN / 8][4];
    wg::bar_sync(my_bar, 256);
    issue_s(s_nxt, n_tiles);
    wg::commit();
    if constexpr (KVB) mbar_wait_parity(fullv0 + 8 * ((c - 1) % ST), ((c - 1) / ST) & 1);
    pv(n_tiles - 1);
    wg::bar_arrive(other_bar, 256);
    wg::wait1();
    wg::fence_acc(s_nxt);
    if constexpr (KVB) release(empty0, n_tiles);  // K of the next block's first tile is read
    const float fm[2] = {row_m[0], row_m[1]}, fl[2] = {row_l[0], row_l[1]};
    row_m[0] = row_m[1] = -INFINITY;
    row_l[0] = row_l[1] = 0.f;
    float alpha[2];
    softmax(s_nxt, 0, alpha, bn);
    if constexpr ((OPT & kWsPinSoftmax) != 0)
      asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(smem_u32(&ws_pin[tid - 128])), "f"(row_l[0] + row_l[1])
                   : "memory");
    wg::wait0();
    pv_done();
    release(KVB ? emptyv0 : empty0, n_tiles - 1);
    // this warpgroup's rows of the Q tile hold the next block's Q, already in registers
    store_out(fl, fm, true);
    wg::mbar_arrive(qempty);  // the next block's "Q empty": the staged rows are read back
#pragma unroll
    for (int i2 = 0; i2 < D / 8; ++i2) acc[i2][0] = acc[i2][1] = acc[i2][2] = acc[i2][3] = 0.f;
    finish(s_nxt, alpha);
    chained = true;
  }  // CHAIN
  } else {
    {
      const int j = n_tiles - 1;
      if constexpr (TURN) wg::bar_sync(my_bar, 256);
      if constexpr (KVB) mbar_wait_parity(fullv0 + 8 * ((kv_base + j) % ST), ((kv_base + j) / ST) & 1);
      pv(j);
      if (TURN && (PERSIST || cw == 0)) wg::bar_arrive(other_bar, 256);  // consumer 1 skips its last arrive
      wg::wait0();
      pv_done();
      release(KVB ? emptyv0 : empty0, j);
    }
    // kWsSmemEpilogue stages through this warpgroup's Q rows; with PERSIST only on the CTA's last
    // tile (before another, the producer may already be loading that tile's Q there).
    bool staged = (OPT & kWsSmemEpilogue) != 0;
    if constexpr (PERSIST) staged = staged && last_tile;
    store_out(row_l, row_m, staged);
    chained = false;
  }
  kv_base += n_tiles;
  ++it;
  }  // tile loop
  if constexpr (PERSIST) {
    if (cw == 0) wg::bar_sync(1, 256);  // consumer 1's last arrive
  }
#endif
}

template <typename T, int D, bool CAUSAL, bool SC = false>
__device__ __forceinline__ void fa_fwd_ws_body(
    const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, T* __restrict__ o,
    const int* __restrict__ seq_lens, int S, int Hq, int Hkv,
    long long q_sb, long long q_ss, long long q_sh, long long k_sb, long long k_ss, long long k_sh,
    long long v_sb, long long v_ss, long long v_sh, long long o_sb, long long o_ss, long long o_sh,
    float scale_log2, float sc_k = 0.f, int window = 0) {
#if OF_WGMMA_OK
  const int hq = blockIdx.y, b = blockIdx.z;
  const int hkv = hq / (Hq / Hkv);
  const FaSpan sp = fa_span(seq_lens, b, S);
  FaDenseRows<T> rows{q + b * q_sb + hq * q_sh + sp.row0 * q_ss, k + b * k_sb + hkv * k_sh + sp.row0 * k_ss,
                      v + b * v_sb + hkv * v_sh + sp.row0 * v_ss, o + b * o_sb + hq * o_sh + sp.row0 * o_ss,
                      q_ss, k_ss, v_ss, o_ss, sp.len, sp.len, S - sp.row0, 0, window};
  fa_ws_core<T, D, CAUSAL, FaDenseRows<T>, 40, 128, kWsStages, FaWsOneTile, 0, SC>(rows, scale_log2,
                                                                             FaWsOneTile{}, sc_k);
#else
  // Not an sm_90a build: the first 256 threads run the mma.sync 128x64 8-warp body.
  if (threadIdx.x >= 256) return;
  fa_fwd_body<T, D, 8, 1, 64, CAUSAL, SC>(q, k, v, o, seq_lens, S, Hq, Hkv, q_sb, q_ss, q_sh,
                                          k_sb, k_ss, k_sh, v_sb, v_ss, v_sh, o_sb, o_ss, o_sh,
                                          scale_log2, sc_k, window);
#endif
}

// m128n128w12t: the warp-specialized body with a TMA producer. tq / tk / tv: tensor maps over Q,
// K, V (4-D: D, H, S, B; boxes 64 x 1 x 128 x 1, 128-byte swizzle; K / V boxes of BNT rows)
// built by the host launcher.
template <typename T, int D, bool CAUSAL, int PREGS = 40, int BNT = 128, int STT = kWsStages,
          int OPT = 0, bool SC = false>
__device__ __forceinline__ void fa_fwd_ws_tma_body(
    const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, T* __restrict__ o,
    const int* __restrict__ seq_lens, int S, int Hq, int Hkv,
    long long q_sb, long long q_ss, long long q_sh, long long k_sb, long long k_ss, long long k_sh,
    long long v_sb, long long v_ss, long long v_sh, long long o_sb, long long o_ss, long long o_sh,
    float scale_log2, const void* tq, const void* tk, const void* tv, float sc_k = 0.f,
    int window = 0) {
#if OF_WGMMA_OK
  const int3 cc = fa_ws_coords<CAUSAL, OPT>();
  const int nm = (S + 127) / 128;
  // kWsFold: the CTA's (head, sequence) pair and query blocks (B: the grid's z without a mask; causal,
  // seq_lens' length is not known here, so the pair count comes from the 1-D grid's size)
  const int4 fc = (OPT & kWsFold) != 0
                      ? fa_fold_coords<CAUSAL>(nm, CAUSAL ? fa_fold_pairs(gridDim.x, nm) : 0)
                      : make_int4(cc.z * Hq + cc.y, 0, 0, 1);
  const int hq = fc.x % Hq, b = fc.x / Hq;
  const int hkv = hq / (Hq / Hkv);
  const FaSpan sp = fa_span(seq_lens, b, S);
  const int S1 = S - sp.row0;
  FaDenseTmaRows<T> rows{{q + b * q_sb + hq * q_sh + sp.row0 * q_ss, k + b * k_sb + hkv * k_sh + sp.row0 * k_ss,
                          v + b * v_sb + hkv * v_sh + sp.row0 * v_ss, o + b * o_sb + hq * o_sh + sp.row0 * o_ss,
                          q_ss, k_ss, v_ss, o_ss, sp.len, sp.len, S1, 0, window},
                         tq, tk, tv, hq, hkv, b, S1, sp.row0};
  if constexpr ((OPT & kWsFold) != 0) {
    const FaWsFoldTiles<FaDenseTmaRows<T>> tiles{rows, fc.y, fc.z, fc.w};
    fa_ws_core<T, D, CAUSAL, FaDenseTmaRows<T>, PREGS, BNT, STT, FaWsFoldTiles<FaDenseTmaRows<T>>, OPT, SC>(
        rows, scale_log2, tiles, sc_k);
  } else {
    fa_ws_core<T, D, CAUSAL, FaDenseTmaRows<T>, PREGS, BNT, STT, FaWsOneTile, OPT, SC>(
        rows, scale_log2, FaWsOneTile{}, sc_k);
  }
#else
  // Not an sm_90a build (the launcher only takes this entry on compute capability 9.x): the
  // first 256 threads run the mma.sync 128x64 8-warp body, as fa_fwd_ws_body does (at the real D). The D = 256
  // candidates trap instead: that body spills at the 384-thread entry's 168 registers, and nothing launches it.
  if constexpr (D == 256) {
    __trap();
  } else {
    if (threadIdx.x >= 256) return;
    fa_fwd_body<T, fa_ws_out_d<D, OPT>(), 8, 1, 64, CAUSAL, SC>(q, k, v, o, seq_lens, S, Hq, Hkv, q_sb, q_ss, q_sh,
                                            k_sb, k_ss, k_sh, v_sb, v_ss, v_sh, o_sb, o_ss, o_sh,
                                            scale_log2, sc_k, window);
  }
#endif
}

// m128n128w12tp (experimental): the TMA body on a persistent grid (FaDenseTmaTiles); B: batch.
// PREGS / OPT as fa_ws_core's (the entries: the ov body with kWsLeanDesc, 24 producer registers, the pinned
// softmax and the stepped descriptors; until run 17 they ran the 40 / 232 split unpinned).
template <typename T, int D, bool CAUSAL, int PREGS = 24, int OPT = kWsPinSoftmax | kWsLeanDesc,
          int BNT = 128, int STT = kWsStages>
__device__ __forceinline__ void fa_fwd_ws_tma_persistent_body(
    const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, T* __restrict__ o,
    const int* __restrict__ seq_lens, int S, int Hq, int Hkv,
    long long q_sb, long long q_ss, long long q_sh, long long k_sb, long long k_ss, long long k_sh,
    long long v_sb, long long v_ss, long long v_sh, long long o_sb, long long o_ss, long long o_sh,
    float scale_log2, const void* tq, const void* tk, const void* tv, int B) {
#if OF_WGMMA_OK
  const int nm = (S + 127) / 128;
  const FaDenseTmaTiles<T, CAUSAL> tiles{q, k, v, o, seq_lens, q_sb, q_ss, q_sh, k_sb, k_ss, k_sh,
                                         v_sb, v_ss, v_sh, o_sb, o_ss, o_sh, tq, tk, tv, S, Hq,
                                         Hkv, nm, nm * Hq * B};
  // rows of tile 0: only its tensor-map addresses are read (the same for every tile)
  fa_ws_core<T, D, CAUSAL, FaDenseTmaRows<T>, PREGS, BNT, STT, FaDenseTmaTiles<T, CAUSAL>, OPT>(
      tiles.at(0).rows, scale_log2, tiles);
#else
  __trap();  // the launcher takes this entry on compute capability 9.x only
#endif
}

// Prefill over a paged prefix (chunked prefill, prefix caching) on the warp-specialized body:
// one CTA per (128 new tokens, query head, sequence). The new tokens' K/V must already be in
// the pool (onnx_fuse_append_kv); seq_lens[b] counts every cached token of sequence b, the new
// ones included. Queries / outputs: packed rows [total_q, Hq, D] from cu_q[b] to cu_q[b + 1]
// when cu_q is given, else [B, q_len, Hq, D] with batch strides q_sb / o_sb. sm_90a only: other
// builds trap (the launcher refuses devices other than compute capability 9.x).
template <typename T, int D, bool CAUSAL>
__device__ __forceinline__ void fa_paged_prefill_body(
    const T* __restrict__ q, long long q_sb, long long q_ts, long long q_hs,
    const int* __restrict__ cu_q, int q_len, const T* __restrict__ k_pool,
    const T* __restrict__ v_pool, const int* __restrict__ block_tables,
    const int* __restrict__ seq_lens, T* __restrict__ o, long long o_sb, long long o_ts,
    long long o_hs, int Hq, int Hkv, int bs_shift, int max_blocks, float scale_log2,
    int window = 0, const float* __restrict__ sinks = nullptr) {
#if OF_WGMMA_OK
  const int hq = blockIdx.y, b = blockIdx.z;
  const int hkv = hq / (Hq / Hkv);
  long long qs = (long long)b * q_sb, os = (long long)b * o_sb;
  if (cu_q) {
    const int c0 = cu_q[b];
    q_len = max(cu_q[b + 1] - c0, 0);
    qs = c0 * q_ts;
    os = c0 * o_ts;
  }
  const int kv_len = min(max(seq_lens[b], 0), max_blocks << bs_shift);
  FaPagedRows<T> rows{q + qs + hq * q_hs, k_pool + hkv * D, v_pool + hkv * D, o + os + hq * o_hs,
                      q_ts, o_ts, (long long)Hkv * D, block_tables + (long long)b * max_blocks,
                      bs_shift, q_len, kv_len, q_len, kv_len - q_len, window, sink_log2(sinks, hq)};
  fa_ws_core<T, D, CAUSAL>(rows, scale_log2);
#else
  __trap();
#endif
}

// The same with K/V loaded by TMA (tk / tv: maps over the pools viewed as (D, Hkv, rows), boxes
// 64 x 1 x block_size, 128-byte swizzle; built by onnx_fuse_paged_prefill_fwd_ex).
template <typename T, int D, bool CAUSAL>
__device__ __forceinline__ void fa_paged_prefill_tma_body(
    const T* __restrict__ q, long long q_sb, long long q_ts, long long q_hs,
    const int* __restrict__ cu_q, int q_len, const T* __restrict__ k_pool,
    const T* __restrict__ v_pool, const int* __restrict__ block_tables,
    const int* __restrict__ seq_lens, T* __restrict__ o, long long o_sb, long long o_ts,
    long long o_hs, int Hq, int Hkv, int bs_shift, int max_blocks, float scale_log2,
    const void* tk, const void* tv, int window = 0, const float* __restrict__ sinks = nullptr) {
#if OF_WGMMA_OK
  const int hq = blockIdx.y, b = blockIdx.z;
  const int hkv = hq / (Hq / Hkv);
  long long qs = (long long)b * q_sb, os = (long long)b * o_sb;
  if (cu_q) {
    const int c0 = cu_q[b];
    q_len = max(cu_q[b + 1] - c0, 0);
    qs = c0 * q_ts;
    os = c0 * o_ts;
  }
  const int kv_len = min(max(seq_lens[b], 0), max_blocks << bs_shift);
  FaPagedTmaRows<T> rows{{q + qs + hq * q_hs, k_pool + hkv * D, v_pool + hkv * D,
                          o + os + hq * o_hs, q_ts, o_ts, (long long)Hkv * D,
                          block_tables + (long long)b * max_blocks, bs_shift, q_len, kv_len,
                          q_len, kv_len - q_len, window, sink_log2(sinks, hq)},
                         tk, tv, hkv};
  fa_ws_core<T, D, CAUSAL>(rows, scale_log2);
#else
  __trap();
#endif
}

// Body of the mma.sync-named entries: in sm_90a builds the 64x64 4-warp variant at D <= 128 runs
// the one-warpgroup wgmma body (same tile geometry: 64 rows, 64-key tiles, 128 threads); every
// other variant, and every variant in other builds, runs fa_fwd_body.
template <typename T, int D, int W, int MT, int BN, bool CAUSAL, bool SC = false>
__device__ __forceinline__ void fa_fwd_entry(
    const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, T* __restrict__ o,
    const int* __restrict__ seq_lens, int S, int Hq, int Hkv,
    long long q_sb, long long q_ss, long long q_sh, long long k_sb, long long k_ss, long long k_sh,
    long long v_sb, long long v_ss, long long v_sh, long long o_sb, long long o_ss, long long o_sh,
    float scale_log2, float sc_k = 0.f, int window = 0) {
#if OF_WGMMA_OK
  if constexpr (W == 4 && MT == 1 && BN == 64 && D <= 128) {
    fa_fwd_wgmma_body<T, D, CAUSAL, 1, 64, SC>(q, k, v, o, seq_lens, S, Hq, Hkv, q_sb, q_ss, q_sh,
                                               k_sb, k_ss, k_sh, v_sb, v_ss, v_sh, o_sb, o_ss,
                                               o_sh, scale_log2, sc_k, window);
  } else {
    fa_fwd_body<T, D, W, MT, BN, CAUSAL, SC>(q, k, v, o, seq_lens, S, Hq, Hkv, q_sb, q_ss, q_sh,
                                             k_sb, k_ss, k_sh, v_sb, v_ss, v_sh, o_sb, o_ss, o_sh,
                                             scale_log2, sc_k, window);
  }
#else
  fa_fwd_body<T, D, W, MT, BN, CAUSAL, SC>(q, k, v, o, seq_lens, S, Hq, Hkv, q_sb, q_ss, q_sh,
                                           k_sb, k_ss, k_sh, v_sb, v_ss, v_sh, o_sb, o_ss, o_sh,
                                           scale_log2, sc_k, window);
#endif
}

}  // namespace onnx_fuse

using onnx_fuse::fa_fwd_body;
using onnx_fuse::fa_fwd_entry;
using onnx_fuse::fa_fwd_ws_body;
using onnx_fuse::fa_fwd_ws_tma_body;
using onnx_fuse::fa_fwd_ws_tma_persistent_body;
using onnx_fuse::fa_paged_prefill_body;
using onnx_fuse::fa_paged_prefill_tma_body;
using onnx_fuse::fa_fwd_wgmma_body;
using onnx_fuse::fa_fwd_wgmma_pipe_body;

// One entry macro per body serves the plain and the softcap (_sc) entries: SC = 0 or 1 (pasted,
// so a literal). The _sc entries take one more argument, sc_k (fa_softcap's), after the usual
// ones (after the tensor maps for TMA entries) and pass it on; the plain ones leave the body's
// default (0). Every entry but the persistent m128n128w12tp takes the sliding window last (`int
// window`, 0 = none; only the causal entries read it), after sc_k / the tensor maps.
#define OF_FA_SC_PARAM_0
#define OF_FA_SC_PARAM_1 , float sc_k
#define OF_FA_SC_ARG_0 , 0.f
#define OF_FA_SC_ARG_1 , sc_k
#define OF_FA_SC_BOOL_0 false
#define OF_FA_SC_BOOL_1 true

#define OF_FA_MMA_ENTRY(NAME, T, D, W, MT, BN, CAUSAL, SC)                                         \
  extern "C" __global__ void __launch_bounds__(32 * W) NAME(                                   \
      const T* q, const T* k, const T* v, T* o, const int* seq_lens, int S, int Hq, int Hkv,    \
      long long q_sb, long long q_ss, long long q_sh, long long k_sb, long long k_ss,          \
      long long k_sh, long long v_sb, long long v_ss, long long v_sh, long long o_sb,          \
      long long o_ss, long long o_sh, float scale_log2 OF_FA_SC_PARAM_##SC, int window) {                      \
    fa_fwd_entry<T, D, W, MT, BN, CAUSAL, OF_FA_SC_BOOL_##SC>(                                     \
        q, k, v, o, seq_lens, S, Hq, Hkv, q_sb, q_ss, q_sh, k_sb, k_ss, k_sh, v_sb, v_ss, v_sh,    \
        o_sb, o_ss, o_sh, scale_log2 OF_FA_SC_ARG_##SC, window);                                           \
  }
#define OF_FA_KERNEL(NAME, T, D, W, MT, BN, CAUSAL) OF_FA_MMA_ENTRY(NAME, T, D, W, MT, BN, CAUSAL, 0)

// Variant name: onnx_fuse_fa_fwd_<dt>_d<D>_m<rows per CTA>n<keys per tile>w<warps>_<full|causal>.
#define OF_FA_VARIANT(DTN, T, D, BMV, BNV, W, MT)                                                  \
  OF_FA_KERNEL(onnx_fuse_fa_fwd_##DTN##_d##D##_m##BMV##n##BNV##w##W##_full, T, D, W, MT, BNV, false) \
  OF_FA_KERNEL(onnx_fuse_fa_fwd_##DTN##_d##D##_m##BMV##n##BNV##w##W##_causal, T, D, W, MT, BNV, true)
#define OF_FA_KERNELS_D(DTN, T, D)          \
  OF_FA_VARIANT(DTN, T, D, 64, 64, 4, 1)    \
  OF_FA_VARIANT(DTN, T, D, 128, 64, 4, 2)   \
  OF_FA_VARIANT(DTN, T, D, 128, 32, 4, 2)

// wgmma variant (sm_90a): onnx_fuse_fa_fwd_<dt>_d<D>_m128n128w8_<mask>; in builds for other
// targets the same entry runs the mma.sync 128x64 8-warp body (same grid and block).
#define OF_FA_WG_ENTRY(NAME, T, D, CAUSAL, SC)                                                     \
  extern "C" __global__ void __launch_bounds__(256, 1) NAME(                                   \
      const T* q, const T* k, const T* v, T* o, const int* seq_lens, int S, int Hq, int Hkv,    \
      long long q_sb, long long q_ss, long long q_sh, long long k_sb, long long k_ss,          \
      long long k_sh, long long v_sb, long long v_ss, long long v_sh, long long o_sb,          \
      long long o_ss, long long o_sh, float scale_log2 OF_FA_SC_PARAM_##SC, int window) {                      \
    fa_fwd_wgmma_body<T, D, CAUSAL, 2, 0, OF_FA_SC_BOOL_##SC>(                                     \
        q, k, v, o, seq_lens, S, Hq, Hkv, q_sb, q_ss, q_sh, k_sb, k_ss, k_sh, v_sb, v_ss, v_sh,    \
        o_sb, o_ss, o_sh, scale_log2 OF_FA_SC_ARG_##SC, window);                                           \
  }
#define OF_FA_WG_KERNEL(NAME, T, D, CAUSAL) OF_FA_WG_ENTRY(NAME, T, D, CAUSAL, 0)
#define OF_FA_WGP_KERNEL(NAME, T, D, CAUSAL)                                                     \
  extern "C" __global__ void __launch_bounds__(256, 1) NAME(                                   \
      const T* q, const T* k, const T* v, T* o, const int* seq_lens, int S, int Hq, int Hkv,    \
      long long q_sb, long long q_ss, long long q_sh, long long k_sb, long long k_ss,          \
      long long k_sh, long long v_sb, long long v_ss, long long v_sh, long long o_sb,          \
      long long o_ss, long long o_sh, float scale_log2, int window) {                          \
    fa_fwd_wgmma_pipe_body<T, D, CAUSAL>(q, k, v, o, seq_lens, S, Hq, Hkv, q_sb, q_ss, q_sh,   \
                                         k_sb, k_ss, k_sh, v_sb, v_ss, v_sh, o_sb, o_ss, o_sh, \
                                         scale_log2, window);                                  \
  }
// m128n128w8: wgmma, 128-key tiles, 2 stages; m128n64w8: pipelined wgmma, 64-key tiles,
// 3 stages. Both fall back to the mma.sync 128x64 8-warp body outside sm_90a builds.
#define OF_FA_WG_KERNELS_D(DTN, T, D)                                                    \
  OF_FA_WG_KERNEL(onnx_fuse_fa_fwd_##DTN##_d##D##_m128n128w8_full, T, D, false)           \
  OF_FA_WG_KERNEL(onnx_fuse_fa_fwd_##DTN##_d##D##_m128n128w8_causal, T, D, true)          \
  OF_FA_WGP_KERNEL(onnx_fuse_fa_fwd_##DTN##_d##D##_m128n64w8_full, T, D, false)           \
  OF_FA_WGP_KERNEL(onnx_fuse_fa_fwd_##DTN##_d##D##_m128n64w8_causal, T, D, true)
// One warpgroup per CTA, two CTAs per SM (D = 64 only: its tiles leave room for two CTAs).
#define OF_FA_WG1_KERNEL(NAME, T, D, CAUSAL)                                                     \
  extern "C" __global__ void __launch_bounds__(128, 2) NAME(                                   \
      const T* q, const T* k, const T* v, T* o, const int* seq_lens, int S, int Hq, int Hkv,    \
      long long q_sb, long long q_ss, long long q_sh, long long k_sb, long long k_ss,          \
      long long k_sh, long long v_sb, long long v_ss, long long v_sh, long long o_sb,          \
      long long o_ss, long long o_sh, float scale_log2, int window) {                          \
    fa_fwd_wgmma_body<T, D, CAUSAL, 1>(q, k, v, o, seq_lens, S, Hq, Hkv, q_sb, q_ss, q_sh,     \
                                       k_sb, k_ss, k_sh, v_sb, v_ss, v_sh, o_sb, o_ss, o_sh,   \
                                       scale_log2, 0.f, window);                               \
  }
#define OF_FA_WG1_KERNELS_D64(DTN, T)                                              \
  OF_FA_WG1_KERNEL(onnx_fuse_fa_fwd_##DTN##_d64_m64n128w4_full, T, 64, false)       \
  OF_FA_WG1_KERNEL(onnx_fuse_fa_fwd_##DTN##_d64_m64n128w4_causal, T, 64, true)
// Warp-specialized (producer warpgroup + two ping-ponging consumer warpgroups), D = 64 and 128.
#define OF_FA_WS_ENTRY(NAME, T, D, CAUSAL, SC)                                                     \
  extern "C" __global__ void __launch_bounds__(384, 1) NAME(                                   \
      const T* q, const T* k, const T* v, T* o, const int* seq_lens, int S, int Hq, int Hkv,    \
      long long q_sb, long long q_ss, long long q_sh, long long k_sb, long long k_ss,          \
      long long k_sh, long long v_sb, long long v_ss, long long v_sh, long long o_sb,          \
      long long o_ss, long long o_sh, float scale_log2 OF_FA_SC_PARAM_##SC, int window) {                      \
    fa_fwd_ws_body<T, D, CAUSAL, OF_FA_SC_BOOL_##SC>(                                              \
        q, k, v, o, seq_lens, S, Hq, Hkv, q_sb, q_ss, q_sh, k_sb, k_ss, k_sh, v_sb, v_ss, v_sh,    \
        o_sb, o_ss, o_sh, scale_log2 OF_FA_SC_ARG_##SC, window);                                           \
  }
#define OF_FA_WS_KERNEL(NAME, T, D, CAUSAL) OF_FA_WS_ENTRY(NAME, T, D, CAUSAL, 0)
#define OF_FA_WS_KERNELS_D(DTN, T, D)                                                    \
  OF_FA_WS_KERNEL(onnx_fuse_fa_fwd_##DTN##_d##D##_m128n128w12_full, T, D, false)          \
  OF_FA_WS_KERNEL(onnx_fuse_fa_fwd_##DTN##_d##D##_m128n128w12_causal, T, D, true)
// The same with a TMA producer (name suffix t): three tensor maps follow the usual arguments.
// No TensorRT AOT twin (its launcher cannot build tensor maps).
#define OF_FA_WST_ENTRY(NAME, T, D, CAUSAL, PREGS, OPT, SC) OF_FA_WST_ENTRY_A(, NAME, T, D, CAUSAL, PREGS, OPT, SC)
// ATTR: extra kernel attributes (__cluster_dims__ for the K/V multicast entries)
#define OF_FA_WST_ENTRY_A(ATTR, NAME, T, D, CAUSAL, PREGS, OPT, SC) \
  OF_FA_WST_ENTRY_B(ATTR, NAME, T, D, CAUSAL, PREGS, OPT, SC, 128, onnx_fuse::kWsStages)
// BNT / STT: keys per K/V tile and stages (the D = 256 candidates: 64 or 80 keys, 2 stages)
#define OF_FA_WST_ENTRY_B(ATTR, NAME, T, D, CAUSAL, PREGS, OPT, SC, BNT, STT)                     \
  extern "C" __global__ void ATTR __launch_bounds__(384, 1) NAME(                              \
      const T* q, const T* k, const T* v, T* o, const int* seq_lens, int S, int Hq, int Hkv,    \
      long long q_sb, long long q_ss, long long q_sh, long long k_sb, long long k_ss,          \
      long long k_sh, long long v_sb, long long v_ss, long long v_sh, long long o_sb,          \
      long long o_ss, long long o_sh, float scale_log2, const __grid_constant__ CUtensorMap tq, \
      const __grid_constant__ CUtensorMap tk,                                                      \
      const __grid_constant__ CUtensorMap tv OF_FA_SC_PARAM_##SC, int window) {                                \
    fa_fwd_ws_tma_body<T, D, CAUSAL, PREGS, BNT, STT, OPT, OF_FA_SC_BOOL_##SC>(                    \
        q, k, v, o, seq_lens, S, Hq, Hkv, q_sb, q_ss, q_sh, k_sb, k_ss, k_sh, v_sb, v_ss, v_sh,    \
        o_sb, o_ss, o_sh, scale_log2, &tq, &tk, &tv OF_FA_SC_ARG_##SC, window);                            \
  }
#define OF_FA_WST_KERNEL(NAME, T, D, CAUSAL) OF_FA_WST_ENTRY(NAME, T, D, CAUSAL, 40, 0, 0)
#define OF_FA_WST_KERNELS_D(DTN, T, D)                                                   \
  OF_FA_WST_KERNEL(onnx_fuse_fa_fwd_##DTN##_d##D##_m128n128w12t_full, T, D, false)        \
  OF_FA_WST_KERNEL(onnx_fuse_fa_fwd_##DTN##_d##D##_m128n128w12t_causal, T, D, true)
// Experimental twin (launcher loads = 3; benchmarked beside m128n128w12t, never planned): the
// producer warpgroup keeps 24 registers and the consumers 240 (FlashAttention-3's split). OPT:
// fa_ws_core's options (0 for the r24 entries; the bench candidates below set them).
// OF_FA_WSTX_KERNEL: the same entry with the producer's registers PREGS (40 or 24) as well.
#define OF_FA_WSTX_KERNEL(NAME, T, D, CAUSAL, PREGS, OPT) OF_FA_WST_ENTRY(NAME, T, D, CAUSAL, PREGS, OPT, 0)
#define OF_FA_WSTR_KERNEL(NAME, T, D, CAUSAL, OPT) OF_FA_WSTX_KERNEL(NAME, T, D, CAUSAL, 24, OPT)
#define OF_FA_WSTR_KERNELS_D(DTN, T, D)                                                    \
  OF_FA_WSTR_KERNEL(onnx_fuse_fa_fwd_##DTN##_d##D##_m128n128w12t_r24_full, T, D, false, 0)  \
  OF_FA_WSTR_KERNEL(onnx_fuse_fa_fwd_##DTN##_d##D##_m128n128w12t_r24_causal, T, D, true, 0)
// m128n128w12t_ov (D = 128, planned there for fp16: launcher loads 7, 6 by name): the r24 entries
// with the softmax pinned between wait_group 1 and 0 (kWsPinSoftmax). (The lazy O rescale and the
// persistent grid on top of it measured behind it on the H200 and were dropped, docs/PERF.md.)
#define OF_FA_WSTO_KERNELS_D(DTN, T, D)                                                           \
  OF_FA_WSTR_KERNEL(onnx_fuse_fa_fwd_##DTN##_d##D##_m128n128w12t_ov_full, T, D, false,             \
                    onnx_fuse::kWsPinSoftmax)                                                      \
  OF_FA_WSTR_KERNEL(onnx_fuse_fa_fwd_##DTN##_d##D##_m128n128w12t_ov_causal, T, D, true,            \
                    onnx_fuse::kWsPinSoftmax)
// m128n128w12t_ove (D = 128, planned there for bf16: launcher loads 9, 8 by name): the ov entries
// with the output staged in shared memory and written as 16-byte rows (kWsSmemEpilogue).
#define OF_FA_WSTE_KERNELS_D(DTN, T, D)                                                           \
  OF_FA_WSTR_KERNEL(onnx_fuse_fa_fwd_##DTN##_d##D##_m128n128w12t_ove_full, T, D, false,            \
                    onnx_fuse::kWsPinSoftmax | onnx_fuse::kWsSmemEpilogue)                         \
  OF_FA_WSTR_KERNEL(onnx_fuse_fa_fwd_##DTN##_d##D##_m128n128w12t_ove_causal, T, D, true,           \
                    onnx_fuse::kWsPinSoftmax | onnx_fuse::kWsSmemEpilogue)
// m128n128w12t_ld (launcher loads 12 by name, 13 with the cp.async fallback): the m128n128w12t body
// (40 / 232 registers, softmax unpinned) with the stepped descriptors (kWsLeanDesc); _lde (14 / 15,
// planned at D = 64 on the H200 from run 17b: fp16 B8 S2048 412 TFLOP/s against ld's 388-392), the
// same with the output staged in shared memory (kWsSmemEpilogue); candidate _ldr (10 / 11), ld with
// 24 / 240 registers.
#define OF_FA_WSTLD_KERNELS_D(DTN, T, D)                                                          \
  OF_FA_WSTX_KERNEL(onnx_fuse_fa_fwd_##DTN##_d##D##_m128n128w12t_ld_full, T, D, false, 40,         \
                    onnx_fuse::kWsLeanDesc)                                                        \
  OF_FA_WSTX_KERNEL(onnx_fuse_fa_fwd_##DTN##_d##D##_m128n128w12t_ld_causal, T, D, true, 40,        \
                    onnx_fuse::kWsLeanDesc)                                                        \
  OF_FA_WSTR_KERNEL(onnx_fuse_fa_fwd_##DTN##_d##D##_m128n128w12t_ldr_full, T, D, false,            \
                    onnx_fuse::kWsLeanDesc)                                                        \
  OF_FA_WSTR_KERNEL(onnx_fuse_fa_fwd_##DTN##_d##D##_m128n128w12t_ldr_causal, T, D, true,           \
                    onnx_fuse::kWsLeanDesc)                                                        \
  OF_FA_WSTX_KERNEL(onnx_fuse_fa_fwd_##DTN##_d##D##_m128n128w12t_lde_full, T, D, false, 40,        \
                    onnx_fuse::kWsLeanDesc | onnx_fuse::kWsSmemEpilogue)                           \
  OF_FA_WSTX_KERNEL(onnx_fuse_fa_fwd_##DTN##_d##D##_m128n128w12t_lde_causal, T, D, true, 40,       \
                    onnx_fuse::kWsLeanDesc | onnx_fuse::kWsSmemEpilogue)
// m128n128w12t_oved (planned at D = 128 on the H200: launcher loads 18 by name, 19 with the
// fallback): the ove entries with the stepped descriptors (kWsLeanDesc).
#define OF_FA_WSTOD_KERNELS_D(DTN, T, D)                                                          \
  OF_FA_WSTR_KERNEL(onnx_fuse_fa_fwd_##DTN##_d##D##_m128n128w12t_oved_full, T, D, false,           \
                    onnx_fuse::kWsPinSoftmax | onnx_fuse::kWsSmemEpilogue | onnx_fuse::kWsLeanDesc) \
  OF_FA_WSTR_KERNEL(onnx_fuse_fa_fwd_##DTN##_d##D##_m128n128w12t_oved_causal, T, D, true,          \
                    onnx_fuse::kWsPinSoftmax | onnx_fuse::kWsSmemEpilogue | onnx_fuse::kWsLeanDesc)
// m128n128w12t_ovedg (loads 22 by name / 23 with the fallback; planned at D = 128 causal in runs 18-19,
// since then m128n128w12t_ovedf): oved longest first within groups of 8 (head, sequence) pairs
// (kWsLptGroups; the full entry is oved's body).
#define OF_FA_WSTODG_KERNELS_D(DTN, T, D)                                                         \
  OF_FA_WSTR_KERNEL(onnx_fuse_fa_fwd_##DTN##_d##D##_m128n128w12t_ovedg_full, T, D, false,          \
                    onnx_fuse::kWsPinSoftmax | onnx_fuse::kWsSmemEpilogue | onnx_fuse::kWsLeanDesc | \
                    onnx_fuse::kWsLptGroups)                                                       \
  OF_FA_WSTR_KERNEL(onnx_fuse_fa_fwd_##DTN##_d##D##_m128n128w12t_ovedg_causal, T, D, true,         \
                    onnx_fuse::kWsPinSoftmax | onnx_fuse::kWsSmemEpilogue | onnx_fuse::kWsLeanDesc | \
                    onnx_fuse::kWsLptGroups)
// m128n128w12t_ovedf (loads 24 by name / 25 with the fallback, D = 128; planned causal fp16 from run 19):
// oved with two query blocks per CTA, nm - 1 - x then x (kWsFold; without a mask grid.x = ceil(nm /
// 2), causal a 1-D grid whose last pairs run one block per CTA, fa_fold_ctas).
#define OF_FA_WSTODF_KERNELS_D(DTN, T, D)                                                         \
  OF_FA_WSTR_KERNEL(onnx_fuse_fa_fwd_##DTN##_d##D##_m128n128w12t_ovedf_full, T, D, false,          \
                    onnx_fuse::kWsPinSoftmax | onnx_fuse::kWsSmemEpilogue | onnx_fuse::kWsLeanDesc | \
                    onnx_fuse::kWsFold)                                                            \
  OF_FA_WSTR_KERNEL(onnx_fuse_fa_fwd_##DTN##_d##D##_m128n128w12t_ovedf_causal, T, D, true,         \
                    onnx_fuse::kWsPinSoftmax | onnx_fuse::kWsSmemEpilogue | onnx_fuse::kWsLeanDesc | \
                    onnx_fuse::kWsFold)
// m128n128w12t_ovedm (loads 28 by name / 29 planned with the fallback to oved, D = 128): oved in
// clusters of two CTAs that multicast each K/V tile to both (kWsMcast). The cluster shape is the
// entry's own (__cluster_dims__), in the sm_90 machine code only: other targets refuse the attribute
// and never launch the entry (the launcher needs compute capability 9 for TMA).
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
#define OF_FA_CLUSTER_PAIR __cluster_dims__(2, 1, 1)
#else
#define OF_FA_CLUSTER_PAIR
#endif
#define OF_FA_OVED_OPT (onnx_fuse::kWsPinSoftmax | onnx_fuse::kWsSmemEpilogue | onnx_fuse::kWsLeanDesc)
#define OF_FA_WSTODM_KERNEL(NAME, T, D, CAUSAL)                                                   \
  OF_FA_WST_ENTRY_A(OF_FA_CLUSTER_PAIR, NAME, T, D, CAUSAL, 24, OF_FA_OVED_OPT | onnx_fuse::kWsMcast, 0)
#define OF_FA_WSTODM_KERNELS_D(DTN, T, D)                                                         \
  OF_FA_WSTODM_KERNEL(onnx_fuse_fa_fwd_##DTN##_d##D##_m128n128w12t_ovedm_full, T, D, false)       \
  OF_FA_WSTODM_KERNEL(onnx_fuse_fa_fwd_##DTN##_d##D##_m128n128w12t_ovedm_causal, T, D, true)
// m128n128w12t_ovedq (loads 30 by name / 31 planned with the cp.async fallback, D = 128): oved with Q's
// fragments in registers (kWsQRegs) and, from session 20, the lazy O rescale (kWsLazyRescale).
#define OF_FA_WSTODQ_KERNELS_D(DTN, T, D)                                                         \
  OF_FA_WSTR_KERNEL(onnx_fuse_fa_fwd_##DTN##_d##D##_m128n128w12t_ovedq_full, T, D, false,          \
                    OF_FA_OVED_OPT | onnx_fuse::kWsQRegs | onnx_fuse::kWsLazyRescale)              \
  OF_FA_WSTR_KERNEL(onnx_fuse_fa_fwd_##DTN##_d##D##_m128n128w12t_ovedq_causal, T, D, true,         \
                    OF_FA_OVED_OPT | onnx_fuse::kWsQRegs | onnx_fuse::kWsLazyRescale)
// m128n128w12t_ovedfc (loads 38 by name / 39 planned, D = 128; planned causal without a window from run 29a):
// ovedf with Q's fragments in registers and its two blocks chained without draining the pipeline (kWsChain);
// the lazy O rescale (kWsLazyRescale) from session 20.
#define OF_FA_WSTODFC_KERNELS_D(DTN, T, D)                                                        \
  OF_FA_WSTR_KERNEL(onnx_fuse_fa_fwd_##DTN##_d##D##_m128n128w12t_ovedfc_full, T, D, false,         \
                    OF_FA_OVED_OPT | onnx_fuse::kWsFold | onnx_fuse::kWsQRegs | onnx_fuse::kWsChain |  \
                        onnx_fuse::kWsLazyRescale)                                                  \
  OF_FA_WSTR_KERNEL(onnx_fuse_fa_fwd_##DTN##_d##D##_m128n128w12t_ovedfc_causal, T, D, true,        \
                    OF_FA_OVED_OPT | onnx_fuse::kWsFold | onnx_fuse::kWsQRegs | onnx_fuse::kWsChain |  \
                        onnx_fuse::kWsLazyRescale)
// Candidates m128n128w12t_ovedqp / _ovedfcp at D = 80 / 96 (loads 42 / 44 by name, 43 / 45 with the
// fallback to w8 where TMA cannot address the tensors; session 38): the ovedq / ovedfc bodies at D = 128 with
// the head dim padded in shared memory (kWsPadD80 / kWsPadD96: TMA zero-fills the columns past the real D).
#define OF_FA_WSTPAD_KERNELS_D(DTN, T, D, PAD)                                                    \
  OF_FA_WSTR_KERNEL(onnx_fuse_fa_fwd_##DTN##_d##D##_m128n128w12t_ovedqp_full, T, 128, false,       \
                    OF_FA_OVED_OPT | onnx_fuse::kWsQRegs | onnx_fuse::kWsLazyRescale | PAD)        \
  OF_FA_WSTR_KERNEL(onnx_fuse_fa_fwd_##DTN##_d##D##_m128n128w12t_ovedqp_causal, T, 128, true,      \
                    OF_FA_OVED_OPT | onnx_fuse::kWsQRegs | onnx_fuse::kWsLazyRescale | PAD)        \
  OF_FA_WSTR_KERNEL(onnx_fuse_fa_fwd_##DTN##_d##D##_m128n128w12t_ovedfcp_full, T, 128, false,      \
                    OF_FA_OVED_OPT | onnx_fuse::kWsFold | onnx_fuse::kWsQRegs | onnx_fuse::kWsChain | \
                        onnx_fuse::kWsLazyRescale | PAD)                                            \
  OF_FA_WSTR_KERNEL(onnx_fuse_fa_fwd_##DTN##_d##D##_m128n128w12t_ovedfcp_causal, T, 128, true,     \
                    OF_FA_OVED_OPT | onnx_fuse::kWsFold | onnx_fuse::kWsQRegs | onnx_fuse::kWsChain | \
                        onnx_fuse::kWsLazyRescale | PAD)
// Candidates m128n64w12t_h256 / m128n80w12t_h256w at D = 256 (loads 46 / 48 by name, 47 / 49 with the fallback
// to m128n64w8 where TMA cannot address the tensors; session 41): the warp-specialized TMA body at D = 256 with
// 64- / 80-key K/V tiles in 2 stages (kWsH256BN, kWsH256WBN, kWsH256Stages), oved's options and the lazy rescale;
// m128n64w12t_h256s / m128n80w12t_h256ws (loads 50 / 52, 51 / 53) the same with K and V on barriers of their own
// (kWsSplitKV).
#define OF_FA_H256_OPT (OF_FA_OVED_OPT | onnx_fuse::kWsLazyRescale)
#define OF_FA_WSTH256_KERNEL(NAME, T, CAUSAL, BNT, OPT) \
  OF_FA_WST_ENTRY_B(, NAME, T, 256, CAUSAL, 24, OPT, 0, BNT, onnx_fuse::kWsH256Stages)
#define OF_FA_WSTH256_PAIR(DTN, T, BNV, TAG, BNT, OPT)                                              \
  OF_FA_WSTH256_KERNEL(onnx_fuse_fa_fwd_##DTN##_d256_m128n##BNV##w12t_##TAG##_full, T, false, BNT, OPT) \
  OF_FA_WSTH256_KERNEL(onnx_fuse_fa_fwd_##DTN##_d256_m128n##BNV##w12t_##TAG##_causal, T, true, BNT, OPT)
#define OF_FA_WSTH256_KERNELS(DTN, T)                                                                     \
  OF_FA_WSTH256_PAIR(DTN, T, 64, h256, onnx_fuse::kWsH256BN, OF_FA_H256_OPT)                              \
  OF_FA_WSTH256_PAIR(DTN, T, 80, h256w, onnx_fuse::kWsH256WBN, OF_FA_H256_OPT)                            \
  OF_FA_WSTH256_PAIR(DTN, T, 64, h256s, onnx_fuse::kWsH256BN, OF_FA_H256_OPT | onnx_fuse::kWsSplitKV)     \
  OF_FA_WSTH256_PAIR(DTN, T, 80, h256ws, onnx_fuse::kWsH256WBN, OF_FA_H256_OPT | onnx_fuse::kWsSplitKV)
// Candidates at D = 256 with 80-key tiles (session 42, by name only): m128n80w12t_h256wsn (loads 54 / 55) is h256ws
// without the consumers' turns (kWsNoTurn, FlashAttention-3's hdim-256 setting); m128n80w12t_h256wm (loads 56 / 57)
// is h256w in two-CTA clusters multicasting each K/V tile to both (kWsMcast: each producer loads two of a tile's four
// 64-column boxes; K / V on barriers of their own as kWsSplitKV's), which halves the L2 -> SM bytes of K / V: at D = 256
// a 128 x 80 tile's 80 KiB of K / V feed 10.5 MFLOP, 128 FLOP per byte; m128n80w12t_h256wmn (loads 58 / 59) is h256wm
// without turns. The cluster entries take no window, no seq_lens and S a multiple of 256: 56 / 58 refuse other
// launches, 57 / 59 run h256ws / h256wsn for them (the same barriers without the cluster). m128n80w12t_h256wsg (loads
// 60 / 61) is h256ws with the causal grid longest first within groups of 8 heads (kWsLptGroups, ovedg's order): the
// default order runs each head's blocks longest first, so the last wave still holds the last heads' longest blocks
// (B4 S4096 H16: 2048 CTAs of 7-52 key tiles at one CTA per SM); without a mask its entry is h256ws's body.
#define OF_FA_WSTH256B_PAIR(DTN, T, TAG, ATTR, OPT)                                                       \
  OF_FA_WST_ENTRY_B(ATTR, onnx_fuse_fa_fwd_##DTN##_d256_m128n80w12t_##TAG##_full, T, 256, false, 24, OPT, 0,    \
                    onnx_fuse::kWsH256WBN, onnx_fuse::kWsH256Stages)                                       \
  OF_FA_WST_ENTRY_B(ATTR, onnx_fuse_fa_fwd_##DTN##_d256_m128n80w12t_##TAG##_causal, T, 256, true, 24, OPT, 0,   \
                    onnx_fuse::kWsH256WBN, onnx_fuse::kWsH256Stages)
#define OF_FA_WSTH256B_KERNELS(DTN, T)                                                                    \
  OF_FA_WSTH256B_PAIR(DTN, T, h256wsn, , OF_FA_H256_OPT | onnx_fuse::kWsSplitKV | onnx_fuse::kWsNoTurn)    \
  OF_FA_WSTH256B_PAIR(DTN, T, h256wm, OF_FA_CLUSTER_PAIR, OF_FA_H256_OPT | onnx_fuse::kWsMcast)           \
  OF_FA_WSTH256B_PAIR(DTN, T, h256wmn, OF_FA_CLUSTER_PAIR, OF_FA_H256_OPT | onnx_fuse::kWsMcast | onnx_fuse::kWsNoTurn) \
  OF_FA_WSTH256B_PAIR(DTN, T, h256wsg, , OF_FA_H256_OPT | onnx_fuse::kWsSplitKV | onnx_fuse::kWsLptGroups)
// Session 43 candidates (split48, by name only): K / V on barriers of their own (kWsSplitKV) in the bodies planned at
// D = 64 / 128, and the causal grid longest first within groups of 8 heads (kWsLptGroups; the full entries of the
// ..g variants are their base bodies). D = 64: m128n128w12t_ldes (loads 62 / 63: lde + split), _ldesg (64 / 65);
// D = 128: _ovedqs (66 / 67: ovedq + split), _ovedqsg (68 / 69), _ovedfcs (70 / 71: ovedfc + split, two chained
// query blocks per CTA); D = 256: m128n64w12t_h256sg (72 / 73: h256s + grouped causal order, 64-key tiles).
#define OF_FA_LDE_OPT (onnx_fuse::kWsLeanDesc | onnx_fuse::kWsSmemEpilogue)
#define OF_FA_OVEDQ_OPT (OF_FA_OVED_OPT | onnx_fuse::kWsQRegs | onnx_fuse::kWsLazyRescale)
#define OF_FA_OVEDFC_OPT (OF_FA_OVED_OPT | onnx_fuse::kWsFold | onnx_fuse::kWsQRegs | onnx_fuse::kWsChain | \
                          onnx_fuse::kWsLazyRescale)
#define OF_FA_WSTSPLIT_PAIR(DTN, T, D, TAG, PREGS, OPT)                                                   \
  OF_FA_WSTX_KERNEL(onnx_fuse_fa_fwd_##DTN##_d##D##_m128n128w12t_##TAG##_full, T, D, false, PREGS, OPT)   \
  OF_FA_WSTX_KERNEL(onnx_fuse_fa_fwd_##DTN##_d##D##_m128n128w12t_##TAG##_causal, T, D, true, PREGS, OPT)
#define OF_FA_WSTSPLIT_KERNELS(DTN, T)                                                                    \
  OF_FA_WSTSPLIT_PAIR(DTN, T, 64, ldes, 40, OF_FA_LDE_OPT | onnx_fuse::kWsSplitKV)                         \
  OF_FA_WSTSPLIT_PAIR(DTN, T, 64, ldesg, 40, OF_FA_LDE_OPT | onnx_fuse::kWsSplitKV | onnx_fuse::kWsLptGroups) \
  OF_FA_WSTSPLIT_PAIR(DTN, T, 128, ovedqs, 24, OF_FA_OVEDQ_OPT | onnx_fuse::kWsSplitKV)                    \
  OF_FA_WSTSPLIT_PAIR(DTN, T, 128, ovedqsg, 24, OF_FA_OVEDQ_OPT | onnx_fuse::kWsSplitKV | onnx_fuse::kWsLptGroups) \
  OF_FA_WSTSPLIT_PAIR(DTN, T, 128, ovedfcs, 24, OF_FA_OVEDFC_OPT | onnx_fuse::kWsSplitKV)                  \
  OF_FA_WSTH256_PAIR(DTN, T, 64, h256sg, onnx_fuse::kWsH256BN,                                             \
                     OF_FA_H256_OPT | onnx_fuse::kWsSplitKV | onnx_fuse::kWsLptGroups)
// Experimental m128n128w12tp (launcher loads = 4; benchmarked beside oved, not planned), D = 128:
// the ov body with the stepped descriptors (r24, pinned softmax, kWsLeanDesc; the staged epilogue
// needs the Q tile the next tile loads) on a persistent grid of min(tiles, SMs) CTAs, which
// overlaps a tile's output store and the next tile's Q load and first K/V tiles (the per-CTA
// costs weigh double when causal); the batch size follows the maps. (At D = 64 it measured 3-6 %
// below m128n128w12t and was dropped; with the 40 / 232 split unpinned, run 4, at par with w12t;
// run 17: 531 / 472-499 fp16 full / causal against oved's 580-587 / 503-504, behind.)
#define OF_FA_WSTP_KERNEL(NAME, T, D, CAUSAL, OPT)                                               \
  extern "C" __global__ void __launch_bounds__(384, 1) NAME(                                   \
      const T* q, const T* k, const T* v, T* o, const int* seq_lens, int S, int Hq, int Hkv,    \
      long long q_sb, long long q_ss, long long q_sh, long long k_sb, long long k_ss,          \
      long long k_sh, long long v_sb, long long v_ss, long long v_sh, long long o_sb,          \
      long long o_ss, long long o_sh, float scale_log2, const __grid_constant__ CUtensorMap tq, \
      const __grid_constant__ CUtensorMap tk, const __grid_constant__ CUtensorMap tv, int B) {     \
    fa_fwd_ws_tma_persistent_body<T, D, CAUSAL, 24, OPT>(q, k, v, o, seq_lens, S, Hq, Hkv, q_sb, q_ss, \
                                                q_sh, k_sb, k_ss, k_sh, v_sb, v_ss, v_sh, o_sb, \
                                                o_ss, o_sh, scale_log2, &tq, &tk, &tv, B);     \
  }
#define OF_FA_WSTP_OPT (onnx_fuse::kWsPinSoftmax | onnx_fuse::kWsLeanDesc)
#define OF_FA_WSTP_KERNELS_D(DTN, T, D)                                                  \
  OF_FA_WSTP_KERNEL(onnx_fuse_fa_fwd_##DTN##_d##D##_m128n128w12tp_full, T, D, false, OF_FA_WSTP_OPT) \
  OF_FA_WSTP_KERNEL(onnx_fuse_fa_fwd_##DTN##_d##D##_m128n128w12tp_causal, T, D, true, OF_FA_WSTP_OPT)
// Candidate m128n128w12tp_ovedc (launcher loads 40, by name only, D = 128): the ovedq body (oved with Q's
// fragments in registers) on the persistent grid, blocks chained without draining the pipeline (kWsChain).
#define OF_FA_TPC_OPT (OF_FA_OVED_OPT | onnx_fuse::kWsQRegs | onnx_fuse::kWsChain)
#define OF_FA_WSTPC_KERNELS_D(DTN, T, D)                                                             \
  OF_FA_WSTP_KERNEL(onnx_fuse_fa_fwd_##DTN##_d##D##_m128n128w12tp_ovedc_full, T, D, false, OF_FA_TPC_OPT) \
  OF_FA_WSTP_KERNEL(onnx_fuse_fa_fwd_##DTN##_d##D##_m128n128w12tp_ovedc_causal, T, D, true, OF_FA_TPC_OPT)
// D = 256: m128n64w8 is the 2-stage wgmma body with 64-key tiles (no pipelined variant: three
// stages of 256-wide K/V tiles do not fit in shared memory).
#define OF_FA_WG_KERNELS_D256(DTN, T)                                               \
  OF_FA_WG_KERNEL(onnx_fuse_fa_fwd_##DTN##_d256_m128n64w8_full, T, 256, false)       \
  OF_FA_WG_KERNEL(onnx_fuse_fa_fwd_##DTN##_d256_m128n64w8_causal, T, 256, true)
// D = 256 with mma.sync: 64-row tiles only (two m-tiles per warp would need 256 accumulators).
#define OF_FA_KERNELS_D256(DTN, T) OF_FA_VARIANT(DTN, T, 256, 64, 64, 4, 1)

OF_FA_WG_KERNELS_D(f16, __half, 64)
OF_FA_WG_KERNELS_D(f16, __half, 80)
OF_FA_WG_KERNELS_D(f16, __half, 96)
OF_FA_WG_KERNELS_D(f16, __half, 128)
OF_FA_WG_KERNELS_D256(f16, __half)
OF_FA_WG1_KERNELS_D64(f16, __half)
OF_FA_WS_KERNELS_D(f16, __half, 64)
OF_FA_WS_KERNELS_D(f16, __half, 128)
OF_FA_WST_KERNELS_D(f16, __half, 64)
OF_FA_WST_KERNELS_D(f16, __half, 128)
OF_FA_WSTR_KERNELS_D(f16, __half, 64)
OF_FA_WSTR_KERNELS_D(f16, __half, 128)
OF_FA_WSTP_KERNELS_D(f16, __half, 128)
OF_FA_WSTO_KERNELS_D(f16, __half, 128)
OF_FA_WSTE_KERNELS_D(f16, __half, 128)
OF_FA_WSTLD_KERNELS_D(f16, __half, 64)
OF_FA_WSTOD_KERNELS_D(f16, __half, 128)
OF_FA_WSTODG_KERNELS_D(f16, __half, 128)
OF_FA_WSTODF_KERNELS_D(f16, __half, 128)
OF_FA_WSTODM_KERNELS_D(f16, __half, 128)
OF_FA_WSTODQ_KERNELS_D(f16, __half, 128)
OF_FA_WSTODFC_KERNELS_D(f16, __half, 128)
OF_FA_WSTPAD_KERNELS_D(f16, __half, 80, onnx_fuse::kWsPadD80)
OF_FA_WSTPAD_KERNELS_D(f16, __half, 96, onnx_fuse::kWsPadD96)
OF_FA_WSTPC_KERNELS_D(f16, __half, 128)
OF_FA_WSTH256_KERNELS(f16, __half)
OF_FA_WSTH256B_KERNELS(f16, __half)
OF_FA_WSTSPLIT_KERNELS(f16, __half)
OF_FA_WG_KERNELS_D(bf16, __nv_bfloat16, 64)
OF_FA_WG_KERNELS_D(bf16, __nv_bfloat16, 80)
OF_FA_WG_KERNELS_D(bf16, __nv_bfloat16, 96)
OF_FA_WG_KERNELS_D(bf16, __nv_bfloat16, 128)
OF_FA_WG_KERNELS_D256(bf16, __nv_bfloat16)
OF_FA_WG1_KERNELS_D64(bf16, __nv_bfloat16)
OF_FA_WS_KERNELS_D(bf16, __nv_bfloat16, 64)
OF_FA_WS_KERNELS_D(bf16, __nv_bfloat16, 128)
OF_FA_WST_KERNELS_D(bf16, __nv_bfloat16, 64)
OF_FA_WST_KERNELS_D(bf16, __nv_bfloat16, 128)
OF_FA_WSTR_KERNELS_D(bf16, __nv_bfloat16, 64)
OF_FA_WSTR_KERNELS_D(bf16, __nv_bfloat16, 128)
OF_FA_WSTP_KERNELS_D(bf16, __nv_bfloat16, 128)
OF_FA_WSTO_KERNELS_D(bf16, __nv_bfloat16, 128)
OF_FA_WSTE_KERNELS_D(bf16, __nv_bfloat16, 128)
OF_FA_WSTLD_KERNELS_D(bf16, __nv_bfloat16, 64)
OF_FA_WSTOD_KERNELS_D(bf16, __nv_bfloat16, 128)
OF_FA_WSTODG_KERNELS_D(bf16, __nv_bfloat16, 128)
OF_FA_WSTODF_KERNELS_D(bf16, __nv_bfloat16, 128)
OF_FA_WSTODM_KERNELS_D(bf16, __nv_bfloat16, 128)
OF_FA_WSTODQ_KERNELS_D(bf16, __nv_bfloat16, 128)
OF_FA_WSTODFC_KERNELS_D(bf16, __nv_bfloat16, 128)
OF_FA_WSTPAD_KERNELS_D(bf16, __nv_bfloat16, 80, onnx_fuse::kWsPadD80)
OF_FA_WSTPAD_KERNELS_D(bf16, __nv_bfloat16, 96, onnx_fuse::kWsPadD96)
OF_FA_WSTPC_KERNELS_D(bf16, __nv_bfloat16, 128)
OF_FA_WSTH256_KERNELS(bf16, __nv_bfloat16)
OF_FA_WSTH256B_KERNELS(bf16, __nv_bfloat16)
OF_FA_WSTSPLIT_KERNELS(bf16, __nv_bfloat16)

// Prefill over a paged prefix: onnx_fuse_fa_paged_prefill_<dt>_d<D>_<full|causal>, D = 64, 128.
#define OF_FA_PP_KERNEL(NAME, T, D, CAUSAL)                                                      \
  extern "C" __global__ void __launch_bounds__(384, 1) NAME(                                   \
      const T* q, long long q_sb, long long q_ts, long long q_hs, const int* cu_q, int q_len,   \
      const T* k_pool, const T* v_pool, const int* block_tables, const int* seq_lens, T* o,     \
      long long o_sb, long long o_ts, long long o_hs, int Hq, int Hkv, int bs_shift,            \
      int max_blocks, float scale_log2, int window, const float* sinks) {                      \
    fa_paged_prefill_body<T, D, CAUSAL>(q, q_sb, q_ts, q_hs, cu_q, q_len, k_pool, v_pool,      \
                                        block_tables, seq_lens, o, o_sb, o_ts, o_hs, Hq, Hkv,  \
                                        bs_shift, max_blocks, scale_log2, window, sinks);      \
  }
#define OF_FA_PP_KERNELS_D(DTN, T, D)                                          \
  OF_FA_PP_KERNEL(onnx_fuse_fa_paged_prefill_##DTN##_d##D##_full, T, D, false)  \
  OF_FA_PP_KERNEL(onnx_fuse_fa_paged_prefill_##DTN##_d##D##_causal, T, D, true)
OF_FA_PP_KERNELS_D(f16, __half, 64)
OF_FA_PP_KERNELS_D(f16, __half, 128)
OF_FA_PP_KERNELS_D(bf16, __nv_bfloat16, 64)
OF_FA_PP_KERNELS_D(bf16, __nv_bfloat16, 128)
// The same with K/V by TMA: onnx_fuse_fa_paged_prefill_tma_<dt>_d<D>_<full|causal>; two tensor
// maps (K pool, V pool) follow the usual arguments, then window and sinks. No TensorRT AOT twin.
#define OF_FA_PPT_KERNEL(NAME, T, D, CAUSAL)                                                     \
  extern "C" __global__ void __launch_bounds__(384, 1) NAME(                                   \
      const T* q, long long q_sb, long long q_ts, long long q_hs, const int* cu_q, int q_len,   \
      const T* k_pool, const T* v_pool, const int* block_tables, const int* seq_lens, T* o,     \
      long long o_sb, long long o_ts, long long o_hs, int Hq, int Hkv, int bs_shift,            \
      int max_blocks, float scale_log2, const __grid_constant__ CUtensorMap tk,                \
      const __grid_constant__ CUtensorMap tv, int window, const float* sinks) {                \
    fa_paged_prefill_tma_body<T, D, CAUSAL>(q, q_sb, q_ts, q_hs, cu_q, q_len, k_pool, v_pool,  \
                                            block_tables, seq_lens, o, o_sb, o_ts, o_hs, Hq,   \
                                            Hkv, bs_shift, max_blocks, scale_log2, &tk, &tv,   \
                                            window, sinks);                                    \
  }
#define OF_FA_PPT_KERNELS_D(DTN, T, D)                                              \
  OF_FA_PPT_KERNEL(onnx_fuse_fa_paged_prefill_tma_##DTN##_d##D##_full, T, D, false)  \
  OF_FA_PPT_KERNEL(onnx_fuse_fa_paged_prefill_tma_##DTN##_d##D##_causal, T, D, true)
OF_FA_PPT_KERNELS_D(f16, __half, 64)
OF_FA_PPT_KERNELS_D(f16, __half, 128)
OF_FA_PPT_KERNELS_D(bf16, __nv_bfloat16, 64)
OF_FA_PPT_KERNELS_D(bf16, __nv_bfloat16, 128)

OF_FA_KERNELS_D(f16, __half, 64)
OF_FA_KERNELS_D(f16, __half, 80)
OF_FA_KERNELS_D(f16, __half, 96)
OF_FA_KERNELS_D(f16, __half, 128)
OF_FA_KERNELS_D256(f16, __half)
OF_FA_KERNELS_D(bf16, __nv_bfloat16, 64)
OF_FA_KERNELS_D(bf16, __nv_bfloat16, 80)
OF_FA_KERNELS_D(bf16, __nv_bfloat16, 96)
OF_FA_KERNELS_D(bf16, __nv_bfloat16, 128)
OF_FA_KERNELS_D256(bf16, __nv_bfloat16)

// Softcap entries (SC = true, see fa_softcap): name suffix _sc before the mask; the usual
// arguments with scale_log2 = cap * log2(e), then sc_k = 2 * log2(e) * scale / cap (after the
// tensor maps for TMA entries). One per variant the planner can pick when softcap != 0
// (launch_plan.fa_softcap_variants): mma.sync 64x64 (one-warpgroup wgmma at D <= 128 in sm_90a
// builds) and 128x64 4-warp; wgmma m128n128w8 at D = 80 / 96 and m128n64w8 at D = 256; the
// warp-specialized body at D = 64 / 128 with cp.async and with TMA (the planned register split:
// 40 / 232 at D = 64, r24 at D = 128). The TensorRT AOT adapter replays OF_FA_SC_KERNELS* lines.
#define OF_FA_SC_KERNEL(NAME, T, D, W, MT, BN, CAUSAL) OF_FA_MMA_ENTRY(NAME, T, D, W, MT, BN, CAUSAL, 1)
#define OF_FA_SC_VARIANT(DTN, T, D, BMV, BNV, W, MT)                                               \
  OF_FA_SC_KERNEL(onnx_fuse_fa_fwd_##DTN##_d##D##_m##BMV##n##BNV##w##W##_sc_full, T, D, W, MT,     \
                  BNV, false)                                                                  \
  OF_FA_SC_KERNEL(onnx_fuse_fa_fwd_##DTN##_d##D##_m##BMV##n##BNV##w##W##_sc_causal, T, D, W, MT,   \
                  BNV, true)
#define OF_FA_SC_KERNELS_D(DTN, T, D)                                                              \
  OF_FA_SC_VARIANT(DTN, T, D, 64, 64, 4, 1) OF_FA_SC_VARIANT(DTN, T, D, 128, 64, 4, 2)
#define OF_FA_SC_KERNELS_D256(DTN, T) OF_FA_SC_VARIANT(DTN, T, 256, 64, 64, 4, 1)
#define OF_FA_SC_WG_KERNEL(NAME, T, D, CAUSAL) OF_FA_WG_ENTRY(NAME, T, D, CAUSAL, 1)
#define OF_FA_SC_WS_KERNEL(NAME, T, D, CAUSAL) OF_FA_WS_ENTRY(NAME, T, D, CAUSAL, 1)
#define OF_FA_SC_WST_KERNEL(NAME, T, D, PREGS, CAUSAL) OF_FA_WST_ENTRY(NAME, T, D, CAUSAL, PREGS, 0, 1)
#define OF_FA_SC_HOPPER_KERNELS(DTN, T)                                                         \
  OF_FA_SC_WG_KERNEL(onnx_fuse_fa_fwd_##DTN##_d80_m128n128w8_sc_full, T, 80, false)             \
  OF_FA_SC_WG_KERNEL(onnx_fuse_fa_fwd_##DTN##_d80_m128n128w8_sc_causal, T, 80, true)            \
  OF_FA_SC_WG_KERNEL(onnx_fuse_fa_fwd_##DTN##_d96_m128n128w8_sc_full, T, 96, false)             \
  OF_FA_SC_WG_KERNEL(onnx_fuse_fa_fwd_##DTN##_d96_m128n128w8_sc_causal, T, 96, true)            \
  OF_FA_SC_WG_KERNEL(onnx_fuse_fa_fwd_##DTN##_d256_m128n64w8_sc_full, T, 256, false)            \
  OF_FA_SC_WG_KERNEL(onnx_fuse_fa_fwd_##DTN##_d256_m128n64w8_sc_causal, T, 256, true)           \
  OF_FA_SC_WS_KERNEL(onnx_fuse_fa_fwd_##DTN##_d64_m128n128w12_sc_full, T, 64, false)            \
  OF_FA_SC_WS_KERNEL(onnx_fuse_fa_fwd_##DTN##_d64_m128n128w12_sc_causal, T, 64, true)           \
  OF_FA_SC_WS_KERNEL(onnx_fuse_fa_fwd_##DTN##_d128_m128n128w12_sc_full, T, 128, false)          \
  OF_FA_SC_WS_KERNEL(onnx_fuse_fa_fwd_##DTN##_d128_m128n128w12_sc_causal, T, 128, true)         \
  OF_FA_SC_WST_KERNEL(onnx_fuse_fa_fwd_##DTN##_d64_m128n128w12t_sc_full, T, 64, 40, false)      \
  OF_FA_SC_WST_KERNEL(onnx_fuse_fa_fwd_##DTN##_d64_m128n128w12t_sc_causal, T, 64, 40, true)     \
  OF_FA_SC_WST_KERNEL(onnx_fuse_fa_fwd_##DTN##_d128_m128n128w12t_r24_sc_full, T, 128, 24, false) \
  OF_FA_SC_WST_KERNEL(onnx_fuse_fa_fwd_##DTN##_d128_m128n128w12t_r24_sc_causal, T, 128, 24, true)
OF_FA_SC_HOPPER_KERNELS(f16, __half)
OF_FA_SC_HOPPER_KERNELS(bf16, __nv_bfloat16)
OF_FA_SC_KERNELS_D(f16, __half, 64)
OF_FA_SC_KERNELS_D(f16, __half, 80)
OF_FA_SC_KERNELS_D(f16, __half, 96)
OF_FA_SC_KERNELS_D(f16, __half, 128)
OF_FA_SC_KERNELS_D256(f16, __half)
OF_FA_SC_KERNELS_D(bf16, __nv_bfloat16, 64)
OF_FA_SC_KERNELS_D(bf16, __nv_bfloat16, 80)
OF_FA_SC_KERNELS_D(bf16, __nv_bfloat16, 96)
OF_FA_SC_KERNELS_D(bf16, __nv_bfloat16, 128)
OF_FA_SC_KERNELS_D256(bf16, __nv_bfloat16)

// ----------------------------------------------------------------------------------------
// Host launch function.

namespace {

using FaKernelFn = void (*)(const void*, const void*, const void*, void*, const int*, int, int,
                            int, long long, long long, long long, long long, long long,
                            long long, long long, long long, long long, long long, long long,
                            long long, float, int);  // ..., scale_log2, window

template <typename KFn>
FaKernelFn as_fn(KFn f) { return reinterpret_cast<FaKernelFn>(f); }

FaKernelFn pick(int dtype, int D, int block_m, int block_n, int warps, bool causal) {
#define OF_PICK(DTN, DD, BMV, BNV, W)                                                          \
  if (D == DD && block_m == BMV && block_n == BNV && warps == W)                               \
    return causal ? as_fn(onnx_fuse_fa_fwd_##DTN##_d##DD##_m##BMV##n##BNV##w##W##_causal)      \
                  : as_fn(onnx_fuse_fa_fwd_##DTN##_d##DD##_m##BMV##n##BNV##w##W##_full);
#define OF_PICK_D(DTN, DD)                                                                  \
  OF_PICK(DTN, DD, 64, 64, 4) OF_PICK(DTN, DD, 128, 64, 8) OF_PICK(DTN, DD, 128, 64, 4)     \
  OF_PICK(DTN, DD, 128, 32, 4) OF_PICK(DTN, DD, 128, 128, 8)
#define OF_PICK_ALL(DTN)                                                                    \
  OF_PICK_D(DTN, 64) OF_PICK_D(DTN, 80) OF_PICK_D(DTN, 96) OF_PICK_D(DTN, 128)              \
  OF_PICK(DTN, 256, 64, 64, 4) OF_PICK(DTN, 256, 128, 64, 8) OF_PICK(DTN, 64, 64, 128, 4)       \
  OF_PICK(DTN, 64, 128, 128, 12) OF_PICK(DTN, 128, 128, 128, 12)
  if (dtype == onnx_fuse::kFloat16) {
    OF_PICK_ALL(f16)
  } else if (dtype == onnx_fuse::kBFloat16) {
    OF_PICK_ALL(bf16)
  }
#undef OF_PICK_ALL
#undef OF_PICK_D
#undef OF_PICK
  return nullptr;
}

using FaTmaKernelFn = void (*)(const void*, const void*, const void*, void*, const int*, int, int,
                               int, long long, long long, long long, long long, long long,
                               long long, long long, long long, long long, long long, long long,
                               long long, float, CUtensorMap, CUtensorMap, CUtensorMap, int);

// kind: 0 m128n128w12t, 1 m128n128w12t_r24 (D = 64, 128); 2 m128n128w12t_ov, 3 _ove (D = 128);
// 4 m128n128w12t_ldr, 5 _ld, 6 _lde (D = 64); 8 m128n128w12t_oved, 10 _ovedg, 11 _ovedf, 13 _ovedm,
// 14 _ovedq, 18 _ovedfc (D = 128); 20 _ovedqp, 21 _ovedfcp (D = 80, 96: the D = 128 bodies, padded);
// 22 m128n64w12t_h256, 23 m128n80w12t_h256w, 24 _h256s, 25 _h256ws, 26 m128n80w12t_h256wsn, 27 _h256wm,
// 28 _h256wmn, 29 _h256wsg (D = 256); session 43: 30 _ldes, 31 _ldesg (D = 64), 32 _ovedqs, 33 _ovedqsg,
// 34 _ovedfcs (D = 128), 35 m128n64w12t_h256sg (D = 256).
FaTmaKernelFn pick_tma(int dtype, int D, bool causal, int kind) {
  if (dtype != onnx_fuse::kFloat16 && dtype != onnx_fuse::kBFloat16) return nullptr;
  const bool f16 = dtype == onnx_fuse::kFloat16;
#define OF_PICK_TK(DTN, DD, TAG)                                                            \
  return causal ? reinterpret_cast<FaTmaKernelFn>(onnx_fuse_fa_fwd_##DTN##_d##DD##_##TAG##_causal) \
                : reinterpret_cast<FaTmaKernelFn>(onnx_fuse_fa_fwd_##DTN##_d##DD##_##TAG##_full);
#define OF_PICK_TK2(DD, TAG)                                                                \
  {                                                                                         \
    if (f16) OF_PICK_TK(f16, DD, TAG)                                                       \
    OF_PICK_TK(bf16, DD, TAG)                                                               \
  }
  if (D == 64) {
    switch (kind) {
      case 0: OF_PICK_TK2(64, m128n128w12t)
      case 1: OF_PICK_TK2(64, m128n128w12t_r24)
      case 4: OF_PICK_TK2(64, m128n128w12t_ldr)
      case 5: OF_PICK_TK2(64, m128n128w12t_ld)
      case 6: OF_PICK_TK2(64, m128n128w12t_lde)
      case 30: OF_PICK_TK2(64, m128n128w12t_ldes)
      case 31: OF_PICK_TK2(64, m128n128w12t_ldesg)
      default: return nullptr;
    }
  }
  if (D == 128) {
    switch (kind) {
      case 0: OF_PICK_TK2(128, m128n128w12t)
      case 1: OF_PICK_TK2(128, m128n128w12t_r24)
      case 2: OF_PICK_TK2(128, m128n128w12t_ov)
      case 3: OF_PICK_TK2(128, m128n128w12t_ove)
      case 8: OF_PICK_TK2(128, m128n128w12t_oved)
      case 10: OF_PICK_TK2(128, m128n128w12t_ovedg)
      case 11: OF_PICK_TK2(128, m128n128w12t_ovedf)
      case 13: OF_PICK_TK2(128, m128n128w12t_ovedm)
      case 14: OF_PICK_TK2(128, m128n128w12t_ovedq)
      case 18: OF_PICK_TK2(128, m128n128w12t_ovedfc)
      case 32: OF_PICK_TK2(128, m128n128w12t_ovedqs)
      case 33: OF_PICK_TK2(128, m128n128w12t_ovedqsg)
      case 34: OF_PICK_TK2(128, m128n128w12t_ovedfcs)
      default: return nullptr;
    }
  }
  if (D == 80) {
    switch (kind) {
      case 20: OF_PICK_TK2(80, m128n128w12t_ovedqp)
      case 21: OF_PICK_TK2(80, m128n128w12t_ovedfcp)
      default: return nullptr;
    }
  }
  if (D == 96) {
    switch (kind) {
      case 20: OF_PICK_TK2(96, m128n128w12t_ovedqp)
      case 21: OF_PICK_TK2(96, m128n128w12t_ovedfcp)
      default: return nullptr;
    }
  }
  if (D == 256) {
    switch (kind) {
      case 22: OF_PICK_TK2(256, m128n64w12t_h256)
      case 23: OF_PICK_TK2(256, m128n80w12t_h256w)
      case 24: OF_PICK_TK2(256, m128n64w12t_h256s)
      case 25: OF_PICK_TK2(256, m128n80w12t_h256ws)
      case 26: OF_PICK_TK2(256, m128n80w12t_h256wsn)
      case 27: OF_PICK_TK2(256, m128n80w12t_h256wm)
      case 28: OF_PICK_TK2(256, m128n80w12t_h256wmn)
      case 29: OF_PICK_TK2(256, m128n80w12t_h256wsg)
      case 35: OF_PICK_TK2(256, m128n64w12t_h256sg)
      default: return nullptr;
    }
  }
#undef OF_PICK_TK2
#undef OF_PICK_TK
  return nullptr;
}

using FaTmaPKernelFn = void (*)(const void*, const void*, const void*, void*, const int*, int, int,
                                int, long long, long long, long long, long long, long long,
                                long long, long long, long long, long long, long long, long long,
                                long long, float, CUtensorMap, CUtensorMap, CUtensorMap, int);

// chain: the m128n128w12tp_ovedc entries (launcher loads 40), else m128n128w12tp (loads 4).
FaTmaPKernelFn pick_tma_persistent(int dtype, int D, bool causal, bool chain) {
#define OF_PICK_TP(DTN, DD)                                                                 \
  if (D == DD && chain)                                                                     \
    return causal ? reinterpret_cast<FaTmaPKernelFn>(onnx_fuse_fa_fwd_##DTN##_d##DD##_m128n128w12tp_ovedc_causal) \
                  : reinterpret_cast<FaTmaPKernelFn>(onnx_fuse_fa_fwd_##DTN##_d##DD##_m128n128w12tp_ovedc_full); \
  if (D == DD)                                                                              \
    return causal ? reinterpret_cast<FaTmaPKernelFn>(onnx_fuse_fa_fwd_##DTN##_d##DD##_m128n128w12tp_causal) \
                  : reinterpret_cast<FaTmaPKernelFn>(onnx_fuse_fa_fwd_##DTN##_d##DD##_m128n128w12tp_full);
  if (dtype == onnx_fuse::kFloat16) {
    OF_PICK_TP(f16, 128)
  } else if (dtype == onnx_fuse::kBFloat16) {
    OF_PICK_TP(bf16, 128)
  }
#undef OF_PICK_TP
  return nullptr;
}

using onnx_fuse::EncodeTiledFn;  // tensor_map.cuh
using onnx_fuse::encode_tiled;

// Tensor map of one [B, S, H, D] operand (element strides sb, ss, sh; D contiguous) for the
// m128n128w12t producer: 4-D (D, H, S, B), boxes of 64 columns x 1 head x 128 rows x 1 sequence,
// 128-byte swizzle, out-of-bounds rows (past S) read as zeros. False when TMA cannot address it:
// a base not 16-byte aligned, a stride that is not positive (a broadcast), a multiple of 16
// bytes and below 2^40 bytes (size-1 axes excepted), fewer rows than a box (S < 128: boxes
// larger than the tensor are reported to fault, and such problems are small), or the driver
// refusing the map. box_rows: rows per box (128; the D = 256 candidates' K / V tiles: 64 or 80).
bool fa_tensor_map(CUtensorMap* map, int dtype, const void* base, int B, int S, int H, int D,
                   long long sb, long long ss, long long sh, int box_rows = 128) {
  const EncodeTiledFn enc = encode_tiled();
  if (enc == nullptr || reinterpret_cast<uintptr_t>(base) % 16 != 0 || S < 128 || D < 64) return false;
  const long long dims[3] = {H, S, B}, strides[3] = {sh, ss, sb};
  cuuint64_t gdim[4] = {(cuuint64_t)D, (cuuint64_t)H, (cuuint64_t)S, (cuuint64_t)B};
  cuuint64_t gstride[3];
  long long natural = (long long)D * 2;  // bytes of the packed layout, used for size-1 axes
  for (int i = 0; i < 3; ++i) {
    const long long bytes = dims[i] == 1 ? natural : strides[i] * 2;
    if (bytes <= 0 || bytes % 16 != 0 || bytes >= (1ll << 40)) return false;
    gstride[i] = (cuuint64_t)bytes;
    natural = bytes * dims[i];
  }
  const cuuint32_t box[4] = {64, 1, (cuuint32_t)box_rows, 1}, elem[4] = {1, 1, 1, 1};
  const CUtensorMapDataType dt = dtype == onnx_fuse::kFloat16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                              : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  return enc(map, dt, 4, const_cast<void*>(base), gdim, gstride, box, elem,
             CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// Tensor map of a contiguous paged pool [num_blocks, block_size, Hkv, D] for the paged TMA
// producer: 3-D (D, Hkv, num_blocks * block_size), boxes of 64 columns x 1 head x block_size
// rows, 128-byte swizzle. False when TMA cannot take it: block_size not a power of two in
// [16, 128] (the tile holds whole blocks at 2 KiB-aligned offsets), a base not 16-byte aligned,
// more than 2^31 - 1 rows (coordinates are int32), or the driver refusing the map.
bool pool_tensor_map(CUtensorMap* map, int dtype, const void* base, int num_blocks,
                     int block_size, int Hkv, int D) {
  const EncodeTiledFn enc = encode_tiled();
  if (enc == nullptr || reinterpret_cast<uintptr_t>(base) % 16 != 0 || D % 64 != 0) return false;
  if (block_size < 16 || block_size > 128 || (block_size & (block_size - 1)) != 0) return false;
  const long long rows = (long long)num_blocks * block_size;
  if (num_blocks <= 0 || rows > 0x7fffffffll) return false;
  cuuint64_t gdim[3] = {(cuuint64_t)D, (cuuint64_t)Hkv, (cuuint64_t)rows};
  cuuint64_t gstride[2] = {(cuuint64_t)D * 2, (cuuint64_t)Hkv * D * 2};
  const cuuint32_t box[3] = {64, 1, (cuuint32_t)block_size}, elem[3] = {1, 1, 1};
  const CUtensorMapDataType dt = dtype == onnx_fuse::kFloat16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                              : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  return enc(map, dt, 3, const_cast<void*>(base), gdim, gstride, box, elem,
             CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace
extern "C" int onnx_fuse_fused_attention_smem_bytes(int head_dim, int block_m, int block_n,
                                                    int warps);
namespace {

using PpFn = void (*)(const void*, long long, long long, long long, const int*, int, const void*,
                      const void*, const int*, const int*, void*, long long, long long,
                      long long, int, int, int, int, float, int, const float*);
using PpTmaFn = void (*)(const void*, long long, long long, long long, const int*, int,
                         const void*, const void*, const int*, const int*, void*, long long,
                         long long, long long, int, int, int, int, float, CUtensorMap,
                         CUtensorMap, int, const float*);

// Shared by onnx_fuse_paged_prefill_fwd (loads 0) and onnx_fuse_paged_prefill_fwd_ex.
int paged_prefill_launch(int dtype, const void* q, long long q_sb, long long q_ts,
                         long long q_hs, const int* cu_seqlens_q, const void* k_pool,
                         const void* v_pool, const int* block_tables, const int* seq_lens,
                         void* o, long long o_sb, long long o_ts, long long o_hs, int B,
                         int max_q_len, int Hq, int Hkv, int D, int block_size, int max_blocks,
                         float scale, int causal, int num_blocks, int loads,
                         cudaStream_t stream, int window = 0, const float* sinks = nullptr) {
  OF_REQUIRE(scale > 0.f);
  OF_REQUIRE(window >= 0 && (window == 0 || causal));
  OF_REQUIRE(B > 0 && B <= 65535 && max_q_len > 0 && Hq > 0 && Hq <= 65535 && Hkv > 0 &&
             Hq % Hkv == 0);
  OF_REQUIRE(D == 64 || D == 128);
  OF_REQUIRE(block_size > 0 && (block_size & (block_size - 1)) == 0 && max_blocks > 0);
  OF_REQUIRE(q && k_pool && v_pool && o && block_tables && seq_lens);
  OF_REQUIRE(q_ts % 8 == 0 && q_hs % 8 == 0 && q_sb % 8 == 0 && o_ts % 8 == 0 && o_hs % 8 == 0 &&
             o_sb % 8 == 0);
  OF_REQUIRE(loads >= 0 && loads <= 2);
  int dev = 0, major = 0;
  OF_CUDA_TRY(cudaGetDevice(&dev));
  OF_CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  OF_REQUIRE(major == 9);
  int bs_shift = 0;
  while ((1 << bs_shift) < block_size) ++bs_shift;
  PpFn fn = nullptr;
  PpTmaFn tfn = nullptr;
#define OF_PP_PICK(DTN, DD)                                                                    \
  if (D == DD) {                                                                               \
    fn = causal ? reinterpret_cast<PpFn>(onnx_fuse_fa_paged_prefill_##DTN##_d##DD##_causal)    \
                : reinterpret_cast<PpFn>(onnx_fuse_fa_paged_prefill_##DTN##_d##DD##_full);     \
    tfn = causal ? reinterpret_cast<PpTmaFn>(onnx_fuse_fa_paged_prefill_tma_##DTN##_d##DD##_causal) \
                 : reinterpret_cast<PpTmaFn>(onnx_fuse_fa_paged_prefill_tma_##DTN##_d##DD##_full);  \
  }
  if (dtype == onnx_fuse::kFloat16) {
    OF_PP_PICK(f16, 64) OF_PP_PICK(f16, 128)
  } else if (dtype == onnx_fuse::kBFloat16) {
    OF_PP_PICK(bf16, 64) OF_PP_PICK(bf16, 128)
  }
#undef OF_PP_PICK
  OF_REQUIRE(fn != nullptr && tfn != nullptr);
  const int smem = onnx_fuse_fused_attention_smem_bytes(D, 128, 128, 12);
  dim3 grid((max_q_len + 127) / 128, Hq, B);
  if (loads != 0) {
    CUtensorMap tk, tv;
    const bool ok = pool_tensor_map(&tk, dtype, k_pool, num_blocks, block_size, Hkv, D) &&
                    pool_tensor_map(&tv, dtype, v_pool, num_blocks, block_size, Hkv, D);
    OF_REQUIRE(ok || loads == 2);  // 2: fall back to the cp.async producer below
    if (ok) {
      OF_CUDA_TRY(cudaFuncSetAttribute(reinterpret_cast<const void*>(tfn),
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
      tfn<<<grid, 384, smem, stream>>>(q, q_sb, q_ts, q_hs, cu_seqlens_q, max_q_len, k_pool,
                                       v_pool, block_tables, seq_lens, o, o_sb, o_ts, o_hs, Hq,
                                       Hkv, bs_shift, max_blocks, scale * onnx_fuse::kLog2e, tk,
                                       tv, window, sinks);
      OF_CUDA_CHECK_LAUNCH();
      return 0;
    }
  }
  OF_CUDA_TRY(cudaFuncSetAttribute(reinterpret_cast<const void*>(fn),
                                   cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  fn<<<grid, 384, smem, stream>>>(q, q_sb, q_ts, q_hs, cu_seqlens_q, max_q_len, k_pool, v_pool,
                                  block_tables, seq_lens, o, o_sb, o_ts, o_hs, Hq, Hkv, bs_shift,
                                  max_blocks, scale * onnx_fuse::kLog2e, window, sinks);
  OF_CUDA_CHECK_LAUNCH();
  return 0;
}

}  // namespace

extern "C" {

// Dynamic shared memory (bytes) of a variant (Q tile + double-buffered K and V tiles).
// wgmma variants (8 warps): tiles padded to a multiple of 64 columns, 1 KiB alignment slack, 3
// stages for the pipelined one (64-key tiles, D <= 128). mma.sync: rows padded to tile_row<D>.
int onnx_fuse_fused_attention_smem_bytes(int head_dim, int block_m, int block_n, int warps) {
  if (warps == 12)  // warp-specialized wgmma, 3 stages (D = 64, 128; the D = 256 candidates 2)
    return 1024 + (block_m * head_dim +
                   (head_dim == 256 ? onnx_fuse::kWsH256Stages : onnx_fuse::kWsStages) * 2 * block_n * head_dim) * 2;
  if (warps == 4 && block_m == 64 && block_n == 128)  // wgmma, one warpgroup (D = 64)
    return 1024 + (block_m * head_dim + 2 * 2 * block_n * head_dim) * 2;
  if (warps == 8 && block_m == onnx_fuse::kWgBM) {
    const int dp = (head_dim + 63) / 64 * 64;
    const int stages = (block_n == onnx_fuse::kWpBN && head_dim <= 128) ? onnx_fuse::kWpStages : 2;
    return 1024 + (block_m * dp + stages * 2 * block_n * dp) * 2;
  }
  const int rd = head_dim % 64 == 0 ? head_dim : head_dim + 8;
  const int mma = (block_m + 2 * 2 * block_n) * rd * 2;
  if (warps == 4 && block_m == 64 && block_n == 64 && head_dim <= 128) {  // wgmma in sm_90a builds
    const int dp = (head_dim + 63) / 64 * 64;
    const int wg = 1024 + (block_m * dp + 2 * 2 * block_n * dp) * 2;
    return wg > mma ? wg : mma;
  }
  return mma;
}

// Launches the fused attention forward. Strides are in elements; the last (head-dim)
// axis must be contiguous and every row 16-byte aligned. D in {64, 80, 96, 128, 256}. Variant
// (block_m, block_n, warps): (64, 64, 4), (128, 64, 4) or (128, 32, 4) with mma.sync (sm_80+),
// or (128, 128, 8) and (128, 64, 8) with wgmma (sm_90a machine code; other builds run the
// mma.sync 128x64 8-warp body inside the same entries); D = 256 has (64, 64, 4) and
// (128, 64, 8) only; D = 64 also has (64, 128, 4), wgmma with one warpgroup per CTA; D = 64
// and 128 also have (128, 128, 12), warp-specialized wgmma (producer + 2 consumer warpgroups); (0, 0, 0) = default (plan it with
// onnx_fuse.plugins.launch_plan). seq_lens may be null (all sequences full length S); scale
// must be > 0. loads (only with (128, 128, 12), D = 64 or 128; the codes below name other D / tiles): 0 = the
// producer warpgroup's cp.async (m128n128w12); 1 = TMA (m128n128w12t: tensor maps built here; needs compute
// capability 9.x, S >= 128, 16-byte-aligned Q/K/V bases and positive strides, else
// cudaErrorInvalidValue); 2 = TMA when those hold, else cp.async; 3 = as 1 with the
// m128n128w12t_r24 entries (24 producer / 240 consumer registers); 5 = as 2 with the r24 entries;
// 4 = the experimental m128n128w12tp (D = 128), the TMA body on a persistent grid of min(tiles,
// SMs) CTAs (TMA rules as loads 1); 6 / 7 = as 3 / 5 with the m128n128w12t_ov entries (D = 128: the
// r24 body with the softmax pinned under the warpgroup's own P V; 7 is planned at D = 128 for fp16);
// 8 / 9 = the same with the m128n128w12t_ove entries (ov with the output staged in shared memory
// and written as 16-byte rows; 9 is planned at D = 128 for bf16); the same pairs (by name / with
// the fallback): 12 / 13 m128n128w12t_ld (D = 64: wgmma descriptors stepped by adds; 13 planned),
// 10 / 11 _ldr and 14 / 15 _lde (D = 64 candidates: ld with 24 / 240 registers, with the staged
// output), 18 / 19 _oved (D = 128: ove with the stepped descriptors; 19 planned until run 21), 22 / 23
// _ovedg (oved with the grid longest first within groups of 8 heads; planned causal until run 19),
// 24 / 25 _ovedf (oved with two query blocks per CTA, nm - 1 - x and x; 25 planned causal fp16 from
// run 19); 28 / 29 _ovedm (oved in two-CTA clusters sharing each K/V
// tile by TMA multicast; no window, no seq_lens, S a multiple of 256: 28 refuses other launches,
// 29 runs oved for them); 30 / 31 _ovedq (oved with Q's fragments in registers; 31 planned at D = 128
// except fp16 causal); 32-35 (the dropped _ovedmq, _ovedfq) and 36 / 37 are refused; 38 / 39 _ovedfc
// (ovedf with Q's fragments in registers and its blocks chained, kWsChain); 40 m128n128w12tp_ovedc (the
// persistent grid of loads 4 with the ovedq body and chained blocks, by name only); 42 / 43 _ovedqp and
// 44 / 45 _ovedfcp (D = 80 / 96 only: the ovedq / ovedfc bodies at D = 128 with the head dim padded in shared
// memory, candidates by name; 43 / 45 run (128, 128, 8) where TMA cannot address the tensors); 46 / 47
// m128n64w12t_h256 and 48 / 49 m128n80w12t_h256w (D = 256 only, block_n 64 / 80: the warp-specialized TMA body
// with 64- / 80-key tiles in 2 stages, candidates by name; 47 / 49 run (128, 64, 8) where TMA cannot address
// the tensors), 50 / 51 _h256s and 52 / 53 _h256ws (the same with K / V on barriers of their own); 54 / 55
// m128n80w12t_h256wsn (h256ws without the consumers' turns), 56 / 57 _h256wm and 58 / 59 _h256wmn (h256w / h256wsn in
// two-CTA clusters multicasting K / V: no window, no seq_lens, S a multiple of 256, else 56 / 58 refuse and 57 / 59 run
// h256ws / h256wsn), 60 / 61 _h256wsg (h256ws with the causal grid longest first within groups of 8 heads; D = 256
// candidates by name, session 42); session 43's candidates (K / V on barriers of their own in the bodies planned at
// D = 64 / 128; by name, the odd codes with the planned codes' fallback): 62 / 63 _ldes and 64 / 65 _ldesg (D = 64:
// lde with them; ldesg causal longest first within groups of 8 heads), 66 / 67 _ovedqs, 68 / 69 _ovedqsg and 70 / 71
// _ovedfcs (D = 128: ovedq / ovedfc with them), 72 / 73 m128n64w12t_h256sg (D = 256, block_n 64: h256s, causal
// grouped); 41 is refused;
// 16 / 17 (the dropped _ovd), 20 / 21 (the dropped _ovedl) and
// 26 / 27 (the dropped _ovedh: ovedf with each consumer's Q half reloaded on its own barrier) are
// refused.
// Returns 0 or a cudaError_t code. (onnx_fuse_fused_attention_fwd_w adds the sliding window.)
// Zeros the rows in front of each sequence's span (fa_span: left padding; none for right
// padding or no seq_lens): the attention kernels start at the span's first row and never see
// them. One CTA per (query head, sequence); rows of D 2-byte elements as 16-byte chunks.
__global__ void fa_zero_lead_rows(void* __restrict__ o, const int* __restrict__ seq_lens, int S,
                                  int D, long long o_sb, long long o_ss, long long o_sh) {
  onnx_fuse::fa_zero_lead(o, seq_lens, blockIdx.y, blockIdx.x, S, D, o_sb, o_ss, o_sh, 0, S,
                          threadIdx.x, blockDim.x);
}

// fa_zero_lead_rows beside an attention launch that has seq_lens (left padding possible).
static int fa_launch_zero_lead(void* o, const int* seq_lens, int B, int S, int Hq, int D, long long o_sb,
                        long long o_ss, long long o_sh, cudaStream_t stream) {
  OF_REQUIRE(o_ss % 8 == 0 && o_sh % 8 == 0 && o_sb % 8 == 0);
  if (seq_lens == nullptr) return 0;
  fa_zero_lead_rows<<<dim3(Hq, B), 128, 0, stream>>>(o, seq_lens, S, D, o_sb, o_ss, o_sh);
  OF_CUDA_CHECK_LAUNCH();
  return 0;
}

static int fa_fwd_launch(int dtype, const void* q, const void* k, const void* v,
                                  void* o, const int* seq_lens, int B, int S, int Hq, int Hkv,
                                  int D, long long q_sb, long long q_ss, long long q_sh,
                                  long long k_sb, long long k_ss, long long k_sh,
                                  long long v_sb, long long v_ss, long long v_sh,
                                  long long o_sb, long long o_ss, long long o_sh, float scale,
                                  int causal, int window, int block_m, int block_n, int warps,
                                  int loads, cudaStream_t stream) {
  if (block_m == 0 && block_n == 0 && warps == 0) {
    block_m = D == 256 ? 64 : 128;
    block_n = 64;
    warps = 4;
  }
  OF_REQUIRE(loads >= 0 && loads <= 73);
  OF_REQUIRE(window >= 0 && (window == 0 || causal));
  // 42-45 (_ovedqp / _ovedfcp): D = 80 / 96 on the D = 128 TMA bodies, the head dim padded in shared
  // memory; where TMA cannot address the tensors, 43 / 45 run the w8 wgmma body (128, 128, 8) instead.
  const bool pad = loads >= 42 && loads <= 45;
  OF_REQUIRE(!pad || D == 80 || D == 96);
  // 46-61 (m128n64w12t_h256 / m128n80w12t_h256w / _h256s / _h256ws / _h256wsn / _h256wm / _h256wmn / _h256wsg): D = 256, K / V
  // tiles of block_n (64 / 80)
  // keys; where TMA cannot address the tensors, the odd codes run the w8 wgmma body (128, 64, 8) instead.
  // 72 / 73 (m128n64w12t_h256sg, session 43): D = 256, 64-key tiles; 62-71 are the D = 64 / 128 split candidates.
  const bool h256 = (loads >= 46 && loads <= 61) || loads >= 72;
  const int h256_bn = (loads >= 48 && loads <= 49) || (loads >= 52 && loads <= 61) ? onnx_fuse::kWsH256WBN : onnx_fuse::kWsH256BN;
  OF_REQUIRE(!h256 || D == 256);
  OF_REQUIRE(window == 0 || (loads != 4 && loads != 40));  // the persistent entries take no window
  OF_REQUIRE(loads == 0 || (block_m == 128 && warps == 12 && block_n == (h256 ? h256_bn : 128)));
  OF_REQUIRE(scale > 0.f);
  OF_REQUIRE(B > 0 && S > 0 && Hq > 0 && Hkv > 0 && Hq % Hkv == 0);
  OF_REQUIRE(B <= 65535 && Hq <= 65535);
  OF_REQUIRE(q && k && v && o);
  OF_REQUIRE(q_ss % 8 == 0 && q_sh % 8 == 0 && q_sb % 8 == 0 && k_ss % 8 == 0 && k_sh % 8 == 0 &&
             k_sb % 8 == 0 && v_ss % 8 == 0 && v_sh % 8 == 0 && v_sb % 8 == 0);
  const int tile_n = block_n;  // keys per K/V tile of the TMA entry (the h256 candidates: 64 / 80)
  if (pad || h256) warps = 8;  // the fallback (fn, smem) is w8; the TMA entry below keeps 384 threads
  if (h256) block_n = 64;      // the D = 256 fallback: (128, 64, 8)
  FaKernelFn fn = pick(dtype, D, block_m, block_n, warps, causal != 0);
  OF_REQUIRE(fn != nullptr);
  // left-padded sequences: their leading rows (the kernels start at each span's first row)
  if (const int err = fa_launch_zero_lead(o, seq_lens, B, S, Hq, D, o_sb, o_ss, o_sh, stream)) return err;
  const int smem = onnx_fuse_fused_attention_smem_bytes(D, block_m, block_n, warps);
  const int smem_tma = pad    ? onnx_fuse_fused_attention_smem_bytes(128, 128, 128, 12)
                       : h256 ? onnx_fuse_fused_attention_smem_bytes(256, 128, tile_n, 12)
                              : smem;
  dim3 grid((S + block_m - 1) / block_m, Hq, B);
  if (loads != 0) {
    // 1 / 2: w12t; 3 / 5: r24; 6 / 7: ov; 8 / 9: ove; 10 / 11: ldr; 12 / 13: ld; 14 / 15: lde; 18 / 19: oved;
    // 22 / 23: ovedg; 24 / 25: ovedf; 30 / 31: ovedq; 38 / 39: ovedfc; 40: tp_ovedc (persistent);
    // 42 / 43: ovedqp; 44 / 45: ovedfcp (D = 80 / 96); 46 / 47: h256; 48 / 49: h256w; 50 / 51: h256s;
    // 52 / 53: h256ws; 54 / 55: h256wsn; 56 / 57: h256wm; 58 / 59: h256wmn; 60 / 61: h256wsg (D = 256);
    // 62 / 63: ldes; 64 / 65: ldesg (D = 64); 66 / 67: ovedqs; 68 / 69: ovedqsg; 70 / 71: ovedfcs (D = 128);
    // 72 / 73: h256sg (D = 256)
    // (32-37, 26 / 27, 20 / 21, 16 / 17: refused by pick_tma)
    int kind = (loads == 3 || loads == 5) ? 1 : loads >= 6 ? (loads - 6) / 2 + 2 : 0;
    const bool persistent = loads == 4 || loads == 40;
    // 28 / 29 _ovedm: clusters of two full query blocks of one head (kWsMcast): no window, no
    // seq_lens, S a multiple of 256; else 29 runs oved.
    if (kind == 13 && (window != 0 || seq_lens != nullptr || S % 256 != 0 || D != 128)) {
      OF_REQUIRE(loads == 29);
      kind = 8;
    }
    // 56-59 _h256wm / _h256wmn: the same cluster rules; else 57 / 59 run h256ws / h256wsn (their barriers, no cluster)
    if ((kind == 27 || kind == 28) && (window != 0 || seq_lens != nullptr || S % 256 != 0)) {
      OF_REQUIRE(loads == 57 || loads == 59);
      kind -= 2;
    }
    const FaTmaKernelFn tfn = persistent ? nullptr : pick_tma(dtype, D, causal != 0, kind);
    const FaTmaPKernelFn pfn = persistent ? pick_tma_persistent(dtype, D, causal != 0, loads == 40) : nullptr;
    OF_REQUIRE(persistent ? pfn != nullptr : tfn != nullptr);
    int dev = 0, major = 0;
    OF_CUDA_TRY(cudaGetDevice(&dev));
    OF_CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    CUtensorMap tq, tk, tv;
    const bool tma_rules_met = major == 9 &&
                               fa_tensor_map(&tq, dtype, q, B, S, Hq, D, q_sb, q_ss, q_sh) &&
                               fa_tensor_map(&tk, dtype, k, B, S, Hkv, D, k_sb, k_ss, k_sh, tile_n) &&
                               fa_tensor_map(&tv, dtype, v, B, S, Hkv, D, v_sb, v_ss, v_sh, tile_n);
    const bool fallback = loads == 2 || loads == 5 || (loads >= 7 && loads % 2 == 1);  // planned: cp.async below
    OF_REQUIRE(tma_rules_met || fallback);
    if (tma_rules_met && pfn != nullptr) {
      int sms = 0;
      OF_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
      const long long tiles = (long long)grid.x * Hq * B;
      OF_REQUIRE(tiles < (1ll << 30));
      OF_CUDA_TRY(cudaFuncSetAttribute(reinterpret_cast<const void*>(pfn),
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
      pfn<<<(unsigned)(tiles < sms ? tiles : sms), 384, smem, stream>>>(
          q, k, v, o, seq_lens, S, Hq, Hkv, q_sb, q_ss, q_sh, k_sb, k_ss, k_sh, v_sb, v_ss, v_sh,
          o_sb, o_ss, o_sh, scale * onnx_fuse::kLog2e, tq, tk, tv, B);
      OF_CUDA_CHECK_LAUNCH();
      return 0;
    }
    if (tma_rules_met) {
      OF_CUDA_TRY(cudaFuncSetAttribute(reinterpret_cast<const void*>(tfn),
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, smem_tma));
      const bool fold = kind == 11 || kind == 18 || kind == 21 || kind == 34;  // _ovedf, _ovedfc, _ovedfcp, _ovedfcs (kWsFold)
      if (fold && causal) {  // folded pairs of query blocks, then single ones (1-D)
        OF_REQUIRE((long long)Hq * B * grid.x < (1ll << 31));
        grid = dim3((unsigned)onnx_fuse::fa_fold_ctas(Hq * B, grid.x), 1, 1);
      } else if (fold) {  // without a mask: query blocks nm - 1 - x and x per CTA
        grid.x = (grid.x + 1) / 2;
      }
      tfn<<<grid, 384, smem_tma, stream>>>(q, k, v, o, seq_lens, S, Hq, Hkv, q_sb, q_ss, q_sh, k_sb,
                                           k_ss, k_sh, v_sb, v_ss, v_sh, o_sb, o_ss, o_sh,
                                           scale * onnx_fuse::kLog2e, tq, tk, tv, window);
      OF_CUDA_CHECK_LAUNCH();
      return 0;
    }
  }
  OF_CUDA_TRY(cudaFuncSetAttribute(reinterpret_cast<const void*>(fn),
                                   cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  fn<<<grid, 32 * warps, smem, stream>>>(q, k, v, o, seq_lens, S, Hq, Hkv, q_sb, q_ss, q_sh,
                                         k_sb, k_ss, k_sh, v_sb, v_ss, v_sh, o_sb, o_ss, o_sh,
                                         scale * onnx_fuse::kLog2e, window);
  OF_CUDA_CHECK_LAUNCH();
  return 0;
}

int onnx_fuse_fused_attention_fwd(int dtype, const void* q, const void* k, const void* v,
                                  void* o, const int* seq_lens, int B, int S, int Hq, int Hkv,
                                  int D, long long q_sb, long long q_ss, long long q_sh,
                                  long long k_sb, long long k_ss, long long k_sh,
                                  long long v_sb, long long v_ss, long long v_sh,
                                  long long o_sb, long long o_ss, long long o_sh, float scale,
                                  int causal, int block_m, int block_n, int warps, int loads,
                                  cudaStream_t stream) {
  return fa_fwd_launch(dtype, q, k, v, o, seq_lens, B, S, Hq, Hkv, D, q_sb, q_ss, q_sh, k_sb,
                       k_ss, k_sh, v_sb, v_ss, v_sh, o_sb, o_ss, o_sh, scale, causal, 0, block_m,
                       block_n, warps, loads, stream);
}

// Prefill over a paged prefix (chunked prefill / prefix caching): the new tokens' queries
// attend to every cached token of their sequence (the prefix and the new tokens, whose K/V
// onnx_fuse_append_kv has already written into the pool), causal bottom-right aligned (new
// token i of sequence b sits at position seq_lens[b] - q_len_b + i). Layouts (element strides):
//   q / o: packed [total_q, Hq, D] rows cu_seqlens_q[b] .. cu_seqlens_q[b + 1] (int32 [B + 1])
//          when cu_seqlens_q is given, else [B, max_q_len, Hq, D] with batch strides q_sb / o_sb;
//          token stride q_ts / o_ts, head stride q_hs / o_hs, the last axis contiguous;
//   pools [num_blocks, block_size, Hkv, D] contiguous, block_size a power of two;
//   block_tables int32 [B, max_blocks]; seq_lens int32 [B] (cached tokens, new ones included).
// max_q_len bounds every q_len_b (rows past it are not computed). D in {64, 128}; fp16 / bf16.
// The kernel is the warp-specialized wgmma body: it needs the library's sm_90a machine code and
// a device of compute capability 9.x (cudaErrorInvalidValue otherwise). Output rows of
// sequences whose query has no visible key (q_len_b > seq_lens[b] at the first rows) are zeros.
int onnx_fuse_paged_prefill_fwd(int dtype, const void* q, long long q_sb, long long q_ts,
                                long long q_hs, const int* cu_seqlens_q, const void* k_pool,
                                const void* v_pool, const int* block_tables, const int* seq_lens,
                                void* o, long long o_sb, long long o_ts, long long o_hs, int B,
                                int max_q_len, int Hq, int Hkv, int D, int block_size,
                                int max_blocks, float scale, int causal, cudaStream_t stream) {
  return paged_prefill_launch(dtype, q, q_sb, q_ts, q_hs, cu_seqlens_q, k_pool, v_pool,
                              block_tables, seq_lens, o, o_sb, o_ts, o_hs, B, max_q_len, Hq, Hkv,
                              D, block_size, max_blocks, scale, causal, 0, 0, stream);
}

// The same with the K/V loads chosen: num_blocks = the pools' first dimension (the tensor maps'
// extent); loads 0 = the producer warpgroup's cp.async (as onnx_fuse_paged_prefill_fwd);
// 1 = TMA (K/V gathered block by block by one producer warp; needs block_size in [16, 128],
// 16-byte-aligned pools and num_blocks * block_size < 2^31, else cudaErrorInvalidValue);
// 2 = TMA when those hold, else cp.async. Returns 0 or a cudaError_t code.
int onnx_fuse_paged_prefill_fwd_ex(int dtype, const void* q, long long q_sb, long long q_ts,
                                   long long q_hs, const int* cu_seqlens_q, const void* k_pool,
                                   const void* v_pool, const int* block_tables,
                                   const int* seq_lens, void* o, long long o_sb, long long o_ts,
                                   long long o_hs, int B, int max_q_len, int Hq, int Hkv, int D,
                                   int block_size, int max_blocks, float scale, int causal,
                                   int num_blocks, int loads, cudaStream_t stream) {
  return paged_prefill_launch(dtype, q, q_sb, q_ts, q_hs, cu_seqlens_q, k_pool, v_pool,
                              block_tables, seq_lens, o, o_sb, o_ts, o_hs, B, max_q_len, Hq, Hkv,
                              D, block_size, max_blocks, scale, causal, num_blocks, loads, stream);
}

// onnx_fuse_paged_prefill_fwd_ex with a sliding window (window > 0 needs causal; 0 = none): new
// token i of sequence b (position p = seq_lens[b] - q_len_b + i) sees keys n with p - window < n
// <= p; key tiles wholly below every row's band are not loaded. sinks: float32 [Hq] attention-sink
// logits (GPT-OSS: one more score per row whose value is zero), or null for none.
int onnx_fuse_paged_prefill_fwd_w(int dtype, const void* q, long long q_sb, long long q_ts,
                                  long long q_hs, const int* cu_seqlens_q, const void* k_pool,
                                  const void* v_pool, const int* block_tables,
                                  const int* seq_lens, void* o, long long o_sb, long long o_ts,
                                  long long o_hs, int B, int max_q_len, int Hq, int Hkv, int D,
                                  int block_size, int max_blocks, float scale, int causal,
                                  int window, const float* sinks, int num_blocks, int loads,
                                  cudaStream_t stream) {
  return paged_prefill_launch(dtype, q, q_sb, q_ts, q_hs, cu_seqlens_q, k_pool, v_pool,
                              block_tables, seq_lens, o, o_sb, o_ts, o_hs, B, max_q_len, Hq, Hkv,
                              D, block_size, max_blocks, scale, causal, num_blocks, loads, stream,
                              window, sinks);
}

}  // extern "C"

// ----------------------------------------------------------------------------------------
// Softcap launch (onnx_fuse_fused_attention_fwd_ex): the OF_FA_SC_* entries.

namespace {

using FaScKernelFn = void (*)(const void*, const void*, const void*, void*, const int*, int, int,
                              int, long long, long long, long long, long long, long long,
                              long long, long long, long long, long long, long long, long long,
                              long long, float, float, int);
using FaScTmaKernelFn = void (*)(const void*, const void*, const void*, void*, const int*, int,
                                 int, int, long long, long long, long long, long long, long long,
                                 long long, long long, long long, long long, long long,
                                 long long, long long, float, CUtensorMap, CUtensorMap,
                                 CUtensorMap, float, int);

FaScKernelFn pick_sc(int dtype, int D, int block_m, int block_n, int warps, bool causal) {
#define OF_PICK_SC(DTN, DD, BMV, BNV, W)                                                        \
  if (D == DD && block_m == BMV && block_n == BNV && warps == W)                               \
    return causal                                                                              \
        ? reinterpret_cast<FaScKernelFn>(onnx_fuse_fa_fwd_##DTN##_d##DD##_m##BMV##n##BNV##w##W##_sc_causal) \
        : reinterpret_cast<FaScKernelFn>(onnx_fuse_fa_fwd_##DTN##_d##DD##_m##BMV##n##BNV##w##W##_sc_full);
#define OF_PICK_SC_ALL(DTN)                                                                     \
  OF_PICK_SC(DTN, 64, 64, 64, 4) OF_PICK_SC(DTN, 64, 128, 64, 4)                               \
  OF_PICK_SC(DTN, 64, 128, 128, 12) OF_PICK_SC(DTN, 80, 64, 64, 4)                             \
  OF_PICK_SC(DTN, 80, 128, 64, 4) OF_PICK_SC(DTN, 80, 128, 128, 8)                             \
  OF_PICK_SC(DTN, 96, 64, 64, 4) OF_PICK_SC(DTN, 96, 128, 64, 4)                               \
  OF_PICK_SC(DTN, 96, 128, 128, 8) OF_PICK_SC(DTN, 128, 64, 64, 4)                             \
  OF_PICK_SC(DTN, 128, 128, 64, 4) OF_PICK_SC(DTN, 128, 128, 128, 12)                          \
  OF_PICK_SC(DTN, 256, 64, 64, 4) OF_PICK_SC(DTN, 256, 128, 64, 8)
  if (dtype == onnx_fuse::kFloat16) {
    OF_PICK_SC_ALL(f16)
  } else if (dtype == onnx_fuse::kBFloat16) {
    OF_PICK_SC_ALL(bf16)
  }
#undef OF_PICK_SC_ALL
#undef OF_PICK_SC
  return nullptr;
}

// The TMA softcap entry of the planned register split: 40 / 232 at D = 64, r24 at D = 128.
FaScTmaKernelFn pick_sc_tma(int dtype, int D, bool causal, bool r24) {
#define OF_PICK_SC_T(DTN, DD, TAG)                                                              \
  return causal ? reinterpret_cast<FaScTmaKernelFn>(onnx_fuse_fa_fwd_##DTN##_d##DD##_##TAG##_sc_causal) \
                : reinterpret_cast<FaScTmaKernelFn>(onnx_fuse_fa_fwd_##DTN##_d##DD##_##TAG##_sc_full);
  const bool f16 = dtype == onnx_fuse::kFloat16;
  if (dtype != onnx_fuse::kFloat16 && dtype != onnx_fuse::kBFloat16) return nullptr;
  if (D == 64 && !r24) {
    if (f16) OF_PICK_SC_T(f16, 64, m128n128w12t)
    OF_PICK_SC_T(bf16, 64, m128n128w12t)
  }
  if (D == 128 && r24) {
    if (f16) OF_PICK_SC_T(f16, 128, m128n128w12t_r24)
    OF_PICK_SC_T(bf16, 128, m128n128w12t_r24)
  }
#undef OF_PICK_SC_T
  return nullptr;
}

}  // namespace

extern "C" {

// onnx_fuse_fused_attention_fwd with a logit softcap: O = softmax(softcap * tanh(scale * Q K^T /
// softcap) + mask) V (Gemma 2). softcap == 0 is exactly onnx_fuse_fused_attention_fwd (the same
// kernels); softcap > 0 runs the _sc twin of the variant, which exists for (64, 64, 4) and
// (128, 64, 4) at every D but 256, (128, 128, 8) at D = 80 / 96, (64, 64, 4) and (128, 64, 8) at
// D = 256, and (128, 128, 12) at D = 64 / 128 with loads 0, TMA loads 1 / 2 at D = 64 and 3 / 5 at
// D = 128 (launch_plan.fa_softcap_variants); any other variant, loads 4 or a softcap that is
// negative or not finite is cudaErrorInvalidValue. Returns 0 or a cudaError_t code.
// onnx_fuse_fused_attention_fwd_w: the same with a sliding window (window > 0 needs causal; 0 =
// none): query i sees keys j with i - window < j <= i. Every entry but the persistent
// m128n128w12tp (loads 4, refused) takes it.
int onnx_fuse_fused_attention_fwd_w(int dtype, const void* q, const void* k, const void* v,
                                    void* o, const int* seq_lens, int B, int S, int Hq, int Hkv,
                                    int D, long long q_sb, long long q_ss, long long q_sh,
                                    long long k_sb, long long k_ss, long long k_sh,
                                    long long v_sb, long long v_ss, long long v_sh,
                                    long long o_sb, long long o_ss, long long o_sh, float scale,
                                    float softcap, int causal, int window, int block_m,
                                    int block_n, int warps, int loads, cudaStream_t stream) {
  if (softcap == 0.f)
    return fa_fwd_launch(dtype, q, k, v, o, seq_lens, B, S, Hq, Hkv, D, q_sb, q_ss, q_sh, k_sb,
                         k_ss, k_sh, v_sb, v_ss, v_sh, o_sb, o_ss, o_sh, scale, causal, window,
                         block_m, block_n, warps, loads, stream);
  OF_REQUIRE(window >= 0 && (window == 0 || causal));
  if (block_m == 0 && block_n == 0 && warps == 0) {  // the same default as without a softcap
    block_m = D == 256 ? 64 : 128;
    block_n = 64;
    warps = 4;
  }
  // the argument rules of onnx_fuse_fused_attention_fwd
  OF_REQUIRE(softcap > 0.f && softcap < INFINITY);
  OF_REQUIRE(loads >= 0 && loads <= 5 && loads != 4);
  OF_REQUIRE(loads == 0 || (block_m == 128 && block_n == 128 && warps == 12));
  OF_REQUIRE(scale > 0.f);
  OF_REQUIRE(B > 0 && S > 0 && Hq > 0 && Hkv > 0 && Hq % Hkv == 0);
  OF_REQUIRE(B <= 65535 && Hq <= 65535);
  OF_REQUIRE(q && k && v && o);
  OF_REQUIRE(q_ss % 8 == 0 && q_sh % 8 == 0 && q_sb % 8 == 0 && k_ss % 8 == 0 && k_sh % 8 == 0 &&
             k_sb % 8 == 0 && v_ss % 8 == 0 && v_sh % 8 == 0 && v_sb % 8 == 0);
  const FaScKernelFn fn = pick_sc(dtype, D, block_m, block_n, warps, causal != 0);
  OF_REQUIRE(fn != nullptr);
  if (const int err = fa_launch_zero_lead(o, seq_lens, B, S, Hq, D, o_sb, o_ss, o_sh, stream)) return err;
  const float post = softcap * onnx_fuse::kLog2e;               // scale_log2 of the entries
  const float sc_k = 2.f * onnx_fuse::kLog2e * scale / softcap;  // fa_softcap's argument
  const int smem = onnx_fuse_fused_attention_smem_bytes(D, block_m, block_n, warps);
  dim3 grid((S + block_m - 1) / block_m, Hq, B);
  if (loads != 0) {
    const FaScTmaKernelFn tfn = pick_sc_tma(dtype, D, causal != 0, loads == 3 || loads == 5);
    OF_REQUIRE(tfn != nullptr);
    int dev = 0, major = 0;
    OF_CUDA_TRY(cudaGetDevice(&dev));
    OF_CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    CUtensorMap tq, tk, tv;
    const bool tma_rules_met = major == 9 &&
                               fa_tensor_map(&tq, dtype, q, B, S, Hq, D, q_sb, q_ss, q_sh) &&
                               fa_tensor_map(&tk, dtype, k, B, S, Hkv, D, k_sb, k_ss, k_sh) &&
                               fa_tensor_map(&tv, dtype, v, B, S, Hkv, D, v_sb, v_ss, v_sh);
    OF_REQUIRE(tma_rules_met || loads == 2 || loads == 5);  // 2, 5: fall back to cp.async below
    if (tma_rules_met) {
      OF_CUDA_TRY(cudaFuncSetAttribute(reinterpret_cast<const void*>(tfn),
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
      tfn<<<grid, 384, smem, stream>>>(q, k, v, o, seq_lens, S, Hq, Hkv, q_sb, q_ss, q_sh, k_sb,
                                       k_ss, k_sh, v_sb, v_ss, v_sh, o_sb, o_ss, o_sh, post, tq,
                                       tk, tv, sc_k, window);
      OF_CUDA_CHECK_LAUNCH();
      return 0;
    }
  }
  OF_CUDA_TRY(cudaFuncSetAttribute(reinterpret_cast<const void*>(fn),
                                   cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  fn<<<grid, 32 * warps, smem, stream>>>(q, k, v, o, seq_lens, S, Hq, Hkv, q_sb, q_ss, q_sh,
                                         k_sb, k_ss, k_sh, v_sb, v_ss, v_sh, o_sb, o_ss, o_sh,
                                         post, sc_k, window);
  OF_CUDA_CHECK_LAUNCH();
  return 0;
}

int onnx_fuse_fused_attention_fwd_ex(int dtype, const void* q, const void* k, const void* v,
                                     void* o, const int* seq_lens, int B, int S, int Hq, int Hkv,
                                     int D, long long q_sb, long long q_ss, long long q_sh,
                                     long long k_sb, long long k_ss, long long k_sh,
                                     long long v_sb, long long v_ss, long long v_sh,
                                     long long o_sb, long long o_ss, long long o_sh, float scale,
                                     float softcap, int causal, int block_m, int block_n,
                                     int warps, int loads, cudaStream_t stream) {
  return onnx_fuse_fused_attention_fwd_w(dtype, q, k, v, o, seq_lens, B, S, Hq, Hkv, D, q_sb,
                                         q_ss, q_sh, k_sb, k_ss, k_sh, v_sb, v_ss, v_sh, o_sb,
                                         o_ss, o_sh, scale, softcap, causal, 0, block_m, block_n,
                                         warps, loads, stream);
}

}  // extern "C"
