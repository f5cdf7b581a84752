// A kernel launch with programmatic dependent launch optional (host side).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "kernels/common/cuda_check.cuh"

namespace latte::cuda {

// kernel<<<grid, threads, smem, stream>>>(args...), with the programmatic stream
// serialization attribute when `pdl` (on the same stream, so stream capture keeps it).
template <typename... Params, typename... Args>
void launch_ex(void (*kernel)(Params...), unsigned grid, unsigned threads, std::size_t smem, bool pdl,
               cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = pdl ? attr : nullptr;
  cfg.numAttrs = pdl ? 1 : 0;
  LATTE_CUDA_TRY(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

}  // namespace latte::cuda
