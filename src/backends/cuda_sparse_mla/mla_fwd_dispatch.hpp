// Per-format entry points of the forward kernel (one translation unit per cache format, so the
// eight kernel variants compile in parallel).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backends/cuda_sparse_mla/mla_params.hpp"

namespace latte::cuda_sparse_mla {

struct LaunchArgs;

// `device`: the current CUDA device; `warps`: 4 or 8 warps per CTA, 0 = the format's default
// (bf16 4, fp8 8).
void launch_fwd_bf16(int device, int row_tile, int warps, bool decode, int64_t grid, const MlaParams& p,
                     const LaunchArgs& la, cudaStream_t stream);
void launch_fwd_fp8(int device, int row_tile, int warps, bool decode, int64_t grid, const MlaParams& p,
                    const LaunchArgs& la, cudaStream_t stream);
std::size_t fwd_smem_bytes(bool fp8, int row_tile);

}  // namespace latte::cuda_sparse_mla
