// The launch of the forward kernel for one cache format (FP8 or bf16), shared by the two
// per-format translation units (mla_fwd_{bf16,fp8}_sm80.cu), which compile in parallel.
// Configurations: row tile 16 / 32, 4 or 8 warps, sparse / decode, and for 16-row tiles a
// second occupancy (3 CTAs per SM: 2 pipeline stages, registers capped by the launch bound) and
// for 16-row tiles at 2 CTAs per SM the output dims split over two CTAs (calls far below one
// wave). Every configuration computes bitwise the same result. ROPE: rows with rope (576 dims; sparse
// and decode) or without (512, sparse only), one translation unit per format and rope-ness.
#pragma once

#include <atomic>
#include <cstdint>

#include "kernels/sparse_mla/smxx/mla_fwd_dispatch.hpp"
#include "kernels/sparse_mla/smxx/mla_fwd_mma_sync_cpasync.cuh"
#include "kernels/common/cuda_check.cuh"
#include "kernels/common/smem_limit.hpp"

namespace latte::cuda_sparse_mla::detail {

template <bool FP8, bool ROPE, int R, bool DECODE, int NW, int CTAS, int DS = 1>
void launch_config(int device, int64_t grid, const MlaParams& p, const LaunchArgs& la,
                   cudaStream_t stream) {
  constexpr int smem = KCfg<FP8, R, NW, CTAS, DS, ROPE>::SMEM;
  auto* kernel = &mla_fwd_sm80_kernel<FP8, R, DECODE, NW, CTAS, DS, ROPE>;
  static std::atomic<uint64_t> done{0};
  cuda::allow_dynamic_smem(kernel, smem, device, done);
  kernel<<<static_cast<unsigned>(grid * DS), NW * 32, smem, stream>>>(p, la);
  LATTE_CUDA_CHECK_LAUNCH("mla_fwd_sm80_kernel");
}

template <bool FP8, bool ROPE, int NW, bool DECODE>
void launch_tile(int device, const FwdConfig& c, int64_t grid, const MlaParams& p, const LaunchArgs& la,
                   cudaStream_t stream) {
  if (c.row_tile == 32) {
    launch_config<FP8, ROPE, 32, DECODE, NW, 2>(device, grid, p, la, stream);
  } else if (c.ctas_per_sm == 3) {
    launch_config<FP8, ROPE, 16, DECODE, NW, 3>(device, grid, p, la, stream);
  } else if (c.dim_split == 2) {
    launch_config<FP8, ROPE, 16, DECODE, NW, 2, 2>(device, grid, p, la, stream);
  } else {
    launch_config<FP8, ROPE, 16, DECODE, NW, 2>(device, grid, p, la, stream);
  }
}

template <bool FP8, bool ROPE, int NW>
void launch_warps(int device, const FwdConfig& c, int64_t grid, const MlaParams& p, const LaunchArgs& la,
                  cudaStream_t stream) {
  if constexpr (!ROPE) {
    launch_tile<FP8, false, NW, false>(device, c, grid, p, la, stream);  // without rope: sparse only
  } else if (c.decode) {
    launch_tile<FP8, true, NW, true>(device, c, grid, p, la, stream);
  } else {
    launch_tile<FP8, true, NW, false>(device, c, grid, p, la, stream);
  }
}

template <bool FP8, bool ROPE>
void launch_fwd(int device, const FwdConfig& c, int64_t grid, const MlaParams& p, const LaunchArgs& la,
                cudaStream_t stream) {
  if (fwd_warps(FP8, c.warps) == 4) {
    launch_warps<FP8, ROPE, 4>(device, c, grid, p, la, stream);
  } else {
    launch_warps<FP8, ROPE, 8>(device, c, grid, p, la, stream);
  }
}

}  // namespace latte::cuda_sparse_mla::detail
