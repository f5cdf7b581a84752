// Instantiations of the forward kernel for the fp8 cache: row tiles 16 / 32, sparse / decode.
#include <mutex>

#include "backends/cuda_sparse_mla/mla_fwd_dispatch.hpp"
#include "backends/cuda_sparse_mla/mla_fwd_sm80.cuh"
#include "cuda/check.cuh"

namespace latte::cuda_sparse_mla {
namespace {

template <int R, bool DECODE>
void launch_one(int64_t grid, const MlaParams& p, const LaunchArgs& la, cudaStream_t stream) {
  constexpr int smem = KCfg<true, R>::SMEM;
  auto* kernel = &mla_fwd_sm80_kernel<true, R, DECODE>;
  static std::once_flag once;
  std::call_once(once, [&] {
    LATTE_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  });
  kernel<<<static_cast<unsigned>(grid), kThreads, smem, stream>>>(p, la);
  LATTE_CUDA_CHECK_LAUNCH("mla_fwd_sm80_kernel");
}

}  // namespace

void launch_fwd_fp8(int row_tile, bool decode, int64_t grid, const MlaParams& p,
                     const LaunchArgs& la, cudaStream_t stream) {
  if (row_tile == 16) {
    decode ? launch_one<16, true>(grid, p, la, stream) : launch_one<16, false>(grid, p, la, stream);
  } else {
    decode ? launch_one<32, true>(grid, p, la, stream) : launch_one<32, false>(grid, p, la, stream);
  }
}

}  // namespace latte::cuda_sparse_mla
