// Instantiations of the forward kernel for the bf16 cache: row tiles 16 / 32, sparse / decode,
// 4 or 8 warps per CTA (default 4; LATTE_CUDA_SPARSE_MLA_WARPS=4|8, read when the Kernel is
// made, overrides it, for tuning: every configuration computes bitwise the same result).
#include <atomic>
#include <cstdint>

#include "backends/cuda_sparse_mla/mla_fwd_dispatch.hpp"
#include "backends/cuda_sparse_mla/mla_fwd_sm80.cuh"
#include "cuda/check.cuh"

namespace latte::cuda_sparse_mla {
namespace {

constexpr int kDefaultWarps = 4;

template <int R, bool DECODE, int NW>
void launch_one(int device, int64_t grid, const MlaParams& p, const LaunchArgs& la,
                cudaStream_t stream) {
  constexpr int smem = KCfg<false, R, NW>::SMEM;
  auto* kernel = &mla_fwd_sm80_kernel<false, R, DECODE, NW>;
  // the shared-memory attribute is set once per device (bit `device` of `done`; devices past
  // 63 set it on every launch)
  static std::atomic<uint64_t> done{0};
  const uint64_t bit = device >= 0 && device < 64 ? uint64_t{1} << device : 0;
  if (bit == 0 || (done.load(std::memory_order_acquire) & bit) == 0) {
    LATTE_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    done.fetch_or(bit, std::memory_order_acq_rel);
  }
  kernel<<<static_cast<unsigned>(grid), NW * 32, smem, stream>>>(p, la);
  LATTE_CUDA_CHECK_LAUNCH("mla_fwd_sm80_kernel");
}

template <int NW>
void launch_nw(int device, int row_tile, bool decode, int64_t grid, const MlaParams& p,
               const LaunchArgs& la, cudaStream_t stream) {
  if (row_tile == 16) {
    decode ? launch_one<16, true, NW>(device, grid, p, la, stream)
           : launch_one<16, false, NW>(device, grid, p, la, stream);
  } else {
    decode ? launch_one<32, true, NW>(device, grid, p, la, stream)
           : launch_one<32, false, NW>(device, grid, p, la, stream);
  }
}

}  // namespace

void launch_fwd_bf16(int device, int row_tile, int warps, bool decode, int64_t grid, const MlaParams& p,
                     const LaunchArgs& la, cudaStream_t stream) {
  const int nw = warps == 4 || warps == 8 ? warps : kDefaultWarps;
  if (nw == 4) {
    launch_nw<4>(device, row_tile, decode, grid, p, la, stream);
  } else {
    launch_nw<8>(device, row_tile, decode, grid, p, la, stream);
  }
}

}  // namespace latte::cuda_sparse_mla
