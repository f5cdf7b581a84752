// A kernel launch with programmatic dependent launch optional (host side).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "kernels/common/cuda_check.cuh"

namespace latte::cuda {

// kernel<<<grid, threads, smem, stream>>>(args...), with the programmatic stream
// serialization attribute when `pdl` (on the same stream, so stream capture keeps it), and as a
// cooperative launch when `cooperative` (every CTA resident at once, or the launch fails:
// kernels whose CTAs wait for each other).
template <typename... Params, typename... Args>
void launch_kernel(void (*kernel)(Params...), unsigned grid, unsigned threads, std::size_t smem, bool pdl,
                   bool cooperative, cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[2];
  unsigned n = 0;
  if (pdl) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  if (cooperative) {
    attr[n].id = cudaLaunchAttributeCooperative;
    attr[n].val.cooperative = 1;
    ++n;
  }
  cfg.attrs = n > 0 ? attr : nullptr;
  cfg.numAttrs = n;
  LATTE_CUDA_TRY(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

template <typename... Params, typename... Args>
void launch_ex(void (*kernel)(Params...), unsigned grid, unsigned threads, std::size_t smem, bool pdl,
               cudaStream_t stream, Args&&... args) {
  launch_kernel(kernel, grid, threads, smem, pdl, false, stream, std::forward<Args>(args)...);
}

}  // namespace latte::cuda
