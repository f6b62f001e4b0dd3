// Device side of the TMA loads shared by the fused-attention, paged-prefill and paged-decode
// kernels (the host side, cuTensorMapEncodeTiled, is tensor_map.cuh). Tensor copies are plain
// sm_90 (not only sm_90a); elsewhere the helper traps (the launchers never reach it there).
#pragma once

#include <cstdint>

namespace onnx_fuse {

// One tensor copy global -> shared of the box at coordinates (c0, c1, c2) of the 3-D map tmap
// (the address of a __grid_constant__ CUtensorMap), completing on the mbarrier at mbar
// (complete_tx of the box's bytes).
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const void* tmap, int c0, int c1, int c2,
                                            uint32_t mbar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n"
      ::"r"(dst), "l"(reinterpret_cast<uint64_t>(tmap)), "r"(c0), "r"(c1), "r"(c2), "r"(mbar)
      : "memory");
#else
  __trap();
#endif
}

}  // namespace onnx_fuse
