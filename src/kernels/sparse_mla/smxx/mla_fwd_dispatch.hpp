// Per-format entry points of the forward kernel (one translation unit per cache format, so the
// kernel variants compile in parallel).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/sparse_mla/mla_params.hpp"

namespace latte::cuda_sparse_mla {

struct LaunchArgs;

// One launch configuration; none changes a result bit.
struct FwdConfig {
  int row_tile = 32;    // 16 or 32 rows per CTA
  int warps = 0;        // 4 or 8 warps per CTA, 0 = the format's default (fwd_warps)
  int ctas_per_sm = 2;  // 3: 16-row tiles only, 2 pipeline stages (MlaPlan::ctas_per_sm)
  int dim_split = 1;    // 2: 16-row tiles at 2 CTAs per SM only (MlaPlan::dim_split)
  bool decode = false;
};

// Warps per CTA: `warps` when 4 or 8, else the format's default (bf16 4, fp8 8).
constexpr int fwd_warps(bool fp8, int warps) { return warps == 4 || warps == 8 ? warps : fp8 ? 8 : 4; }

// The few-heads kernel (mla_sparse_fp8_fewheads_mma_sync.cu, see few_heads_kernel): sparse MLA over
// the fp8_ds_mla cache for at most kFewHeadsMax heads, the heads on the mma's N dimension (one n8
// tile up to 8 heads, two up to 16); one row tile per group. Rows with or without rope (p.rope).
// `grid`: (groups of the launch) x splits.
void launch_sparse_fp8_fewheads(int device, int64_t grid, const MlaParams& p, const LaunchArgs& la,
                                cudaStream_t stream);
// Its shared memory per CTA for calls of `heads` heads (with rope, the larger configuration).
std::size_t sparse_fp8_fewheads_smem_bytes(int heads);

// The row-group kernel (mla_bf16_rowgroups_mma_sync.cu, see row_groups_kernel): sparse MLA and
// dense decode over the bf16 cache in tiles of kRowGroupsRows rows. `grid`: (groups of the
// launch) x row tiles x splits. Rows with or without rope (p.rope; without: sparse only).
void launch_bf16_rowgroups(int device, int64_t grid, const MlaParams& p, const LaunchArgs& la, cudaStream_t stream);
std::size_t bf16_rowgroups_smem_bytes();

// `grid`: the CTAs of one dim part, (groups of the launch) x row tiles x splits.
// `device`: the current CUDA device.
void launch_fwd_bf16(int device, const FwdConfig& c, int64_t grid, const MlaParams& p, const LaunchArgs& la,
                     cudaStream_t stream);
void launch_fwd_fp8(int device, const FwdConfig& c, int64_t grid, const MlaParams& p, const LaunchArgs& la,
                    cudaStream_t stream);
// The same for sparse rows without rope (MlaParams::rope false; their own translation units).
void launch_fwd_bf16_nope(int device, const FwdConfig& c, int64_t grid, const MlaParams& p, const LaunchArgs& la,
                          cudaStream_t stream);
void launch_fwd_fp8_nope(int device, const FwdConfig& c, int64_t grid, const MlaParams& p, const LaunchArgs& la,
                         cudaStream_t stream);

}  // namespace latte::cuda_sparse_mla
