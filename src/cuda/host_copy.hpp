// Host copies of small device index tensors for check mode (RunContext::check_indices),
// shared by the CUDA backends. Synchronizes the stream: check mode only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "cuda/check.cuh"
#include "latte/tensor.hpp"

namespace latte::cuda {

// A strided int32 vector [n] or matrix [rows, cols] copied to a dense host array.
inline std::vector<int32_t> download_i32(const TensorView& t, cudaStream_t stream) {
  const int64_t rows = t.rank >= 1 ? t.size(0) : 0;
  const int64_t cols = t.rank >= 2 ? t.size(1) : 1;
  std::vector<int32_t> host(static_cast<std::size_t>(rows * cols));
  if (rows == 0 || cols == 0) return host;
  const int64_t sr = t.stride(0), sc = t.rank >= 2 ? t.stride(1) : 1;
  if (sc == 1) {
    LATTE_CUDA_TRY(cudaMemcpy2DAsync(host.data(), static_cast<std::size_t>(cols) * 4, t.data,
                                     static_cast<std::size_t>(sr) * 4, static_cast<std::size_t>(cols) * 4,
                                     static_cast<std::size_t>(rows), cudaMemcpyDeviceToHost, stream));
  } else {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        LATTE_CUDA_TRY(cudaMemcpyAsync(&host[static_cast<std::size_t>(r * cols + c)],
                                       t.ptr<const int32_t>() + r * sr + c * sc, 4,
                                       cudaMemcpyDeviceToHost, stream));
  }
  LATTE_CUDA_TRY(cudaStreamSynchronize(stream));
  return host;
}

}  // namespace latte::cuda
