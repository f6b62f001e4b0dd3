// Device helpers shared by fused_attention.cu and paged_attention.cu:
// tensor-core mma.sync (m16n8k16, fp16/bf16 in, fp32 accumulate; sm_80+),
// ldmatrix, cp.async with zero fill, and the swizzled shared-memory tile layout.
#pragma once

#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cstdint>

namespace onnx_fuse {

// dtype codes used by every extern "C" launch function.
enum DType : int { kFloat16 = 0, kBFloat16 = 1 };

template <typename T> struct MmaTraits;
template <> struct MmaTraits<__half> {
  static __device__ __forceinline__ uint32_t pack(float a, float b) {
    __half2 h = __floats2half2_rn(a, b);
    return *reinterpret_cast<uint32_t*>(&h);
  }
  static __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4],
                                             uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  static __device__ __forceinline__ __half from_float(float x) { return __float2half_rn(x); }
  static __device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
};
template <> struct MmaTraits<__nv_bfloat16> {
  static __device__ __forceinline__ uint32_t pack(float a, float b) {
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<uint32_t*>(&h);
  }
  static __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4],
                                             uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  static __device__ __forceinline__ __nv_bfloat16 from_float(float x) { return __float2bfloat16_rn(x); }
  static __device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
};

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// 16-byte global->shared copy; when !valid the 16 bytes are zero-filled and
// nothing is read (src must still be a mapped address).
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// Swizzled [rows][D] tile of 16-bit elements: the 16-byte chunk index within a row
// is XORed with (row & 7), so ldmatrix over 8 consecutive rows hits 8 distinct
// bank groups. Needs D >= 64 (8 chunks per row).
template <int D>
__device__ __forceinline__ int swz(int row, int col) {
  return row * D + ((((col >> 3) ^ (row & 7))) << 3) + (col & 7);
}

// [rows][D] tile for any D that is a multiple of 16: swizzled when D % 64 == 0, otherwise rows
// padded by 16 bytes (D = 80, 96: an odd number of 16-byte chunks per row, so 8 consecutive
// rows of one chunk column still land in 8 distinct bank groups). tile_row<D> is the row pitch.
template <int D>
__host__ __device__ constexpr int tile_row() { return D % 64 == 0 ? D : D + 8; }
template <int D>
__device__ __forceinline__ int tile_off(int row, int col) {
  if constexpr (D % 64 == 0) {
    return swz<D>(row, col);
  } else {
    return row * (D + 8) + col;
  }
}

// mbarrier + bulk async copy (Hopper copy engine, sm_90+). On older targets they trap; the
// host launchers never pick a bulk variant there.
__device__ __forceinline__ void mbar_init(uint32_t addr, int count) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(addr), "r"(count));
#else
  __trap();
#endif
}
__device__ __forceinline__ void mbar_fence_init() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t addr, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(addr), "r"(bytes) : "memory");
#else
  __trap();
#endif
}
__device__ __forceinline__ void mbar_wait_parity(uint32_t addr, uint32_t parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "{\n"
      ".reg .pred P1;\n"
      "LAB_WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
      "@P1 bra DONE;\n"
      "bra LAB_WAIT;\n"
      "DONE:\n"
      "}\n" ::"r"(addr), "r"(parity) : "memory");
#else
  __trap();
#endif
}
// bytes: multiple of 16; dst and src 16-byte aligned. Completes on the mbarrier at mbar.
__device__ __forceinline__ void bulk_copy_g2s(uint32_t dst, const void* src, uint32_t bytes, uint32_t mbar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
               ::"r"(dst), "l"(src), "r"(bytes), "r"(mbar) : "memory");
#else
  __trap();
#endif
}

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
  return x;
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  x += __shfl_xor_sync(0xffffffffu, x, 2);
  return x;
}

constexpr float kLog2e = 1.4426950408889634f;

// Attention sinks (GPT-OSS; PagedAttention's optional `sinks` input): a learned logit per query head
// joins each softmax row as one more score whose value row is zero, so it only adds to the
// denominator. sink_log2: the logit in the kernels' log2 units (-inf: no sink).
__device__ __forceinline__ float sink_log2(const float* sinks, int hq) {
  return sinks != nullptr ? sinks[hq] * kLog2e : -INFINITY;
}
// 1 / denominator of a finished row (running max m, sum l in log2 units) with the sink folded in
// once: the max taken over the sink too, l' = l 2^(m - m') + 2^(s - m'), and O's 2^(m - m')
// rescale in the result. s = -inf gives 1 / l; a row with no key (l = 0) gives 0 (a zero row).
__device__ __forceinline__ float sink_row_inv(float l, float m, float s) {
  if (!(l > 0.f)) return 0.f;
  const float m2 = fmaxf(m, s);
  const float a = exp2f(m - m2);
  return a / (l * a + exp2f(s - m2));
}

}  // namespace onnx_fuse
