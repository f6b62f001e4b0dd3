// Shared CUDA error-check macros for onnx-fuse kernels.
//
// Every launch function in plugins/kernels/*.cu returns a cudaError_t cast to int
// (0 = success) instead of aborting, so a host (a TensorRT plugin, a ctypes test)
// can report the failure its own way. Route every CUDA runtime call through
// OF_CUDA_TRY, and check the launch itself with OF_CUDA_CHECK_LAUNCH.
#pragma once

#include <cuda_runtime.h>
#include <cstdio>

#ifndef OF_CUDA_VERBOSE
#define OF_CUDA_VERBOSE 1
#endif

#define OF_CUDA_TRY(expr)                                                          \
  do {                                                                             \
    cudaError_t of_err_ = (expr);                                                  \
    if (of_err_ != cudaSuccess) {                                                  \
      if (OF_CUDA_VERBOSE)                                                         \
        std::fprintf(stderr, "onnx-fuse CUDA error %s (%d) at %s:%d: %s\n",        \
                     cudaGetErrorName(of_err_), static_cast<int>(of_err_),         \
                     __FILE__, __LINE__, #expr);                                   \
      return static_cast<int>(of_err_);                                            \
    }                                                                              \
  } while (0)

// Checks the most recent launch (configuration errors surface here; errors raised
// while the kernel runs surface at the next synchronizing call).
#define OF_CUDA_CHECK_LAUNCH() OF_CUDA_TRY(cudaGetLastError())

// Argument validation inside launch functions: returns cudaErrorInvalidValue.
#define OF_REQUIRE(cond)                                                           \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      if (OF_CUDA_VERBOSE)                                                         \
        std::fprintf(stderr, "onnx-fuse: invalid argument at %s:%d: %s\n",        \
                     __FILE__, __LINE__, #cond);                                   \
      return static_cast<int>(cudaErrorInvalidValue);                              \
    }                                                                              \
  } while (0)
