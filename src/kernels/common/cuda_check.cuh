// CUDA error handling for backends: a failed runtime call becomes latte::Error(cuda_error)
// naming the call, the CUDA error and where it happened.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "latte/error.hpp"

namespace latte::cuda {

[[noreturn]] inline void throw_cuda_error(cudaError_t err, const char* what, const char* file, int line) {
  throw Error(ErrorCode::cuda_error, std::string(what) + " failed: " + cudaGetErrorName(err) + " (" +
                                         cudaGetErrorString(err) + ") at " + file + ":" +
                                         std::to_string(line));
}

}  // namespace latte::cuda

#define LATTE_CUDA_TRY(expr)                                                          \
  do {                                                                                \
    cudaError_t latte_status_ = (expr);                                               \
    if (latte_status_ != cudaSuccess)                                                 \
      ::latte::cuda::throw_cuda_error(latte_status_, #expr, __FILE__, __LINE__);      \
  } while (0)

// After a kernel launch: launch-configuration errors surface here without a device sync.
#define LATTE_CUDA_CHECK_LAUNCH(name) LATTE_CUDA_TRY(cudaPeekAtLastError())
