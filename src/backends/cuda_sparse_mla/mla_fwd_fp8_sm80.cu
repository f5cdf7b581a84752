// Instantiations of the forward kernel for the fp8 cache: row tiles 16 / 32, sparse / decode,
// 4 or 8 warps per CTA (default 8; LATTE_CUDA_SPARSE_MLA_WARPS=4|8 overrides it, for tuning:
// every configuration computes bitwise the same result).
#include <cstdlib>
#include <mutex>

#include "backends/cuda_sparse_mla/mla_fwd_dispatch.hpp"
#include "backends/cuda_sparse_mla/mla_fwd_sm80.cuh"
#include "cuda/check.cuh"

namespace latte::cuda_sparse_mla {
namespace {

constexpr int kDefaultWarps = 8;

template <int R, bool DECODE, int NW>
void launch_one(int64_t grid, const MlaParams& p, const LaunchArgs& la, cudaStream_t stream) {
  constexpr int smem = KCfg<true, R, NW>::SMEM;
  auto* kernel = &mla_fwd_sm80_kernel<true, R, DECODE, NW>;
  static std::once_flag once;
  std::call_once(once, [&] {
    LATTE_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  });
  kernel<<<static_cast<unsigned>(grid), NW * 32, smem, stream>>>(p, la);
  LATTE_CUDA_CHECK_LAUNCH("mla_fwd_sm80_kernel");
}

template <int NW>
void launch_nw(int row_tile, bool decode, int64_t grid, const MlaParams& p, const LaunchArgs& la,
               cudaStream_t stream) {
  if (row_tile == 16) {
    decode ? launch_one<16, true, NW>(grid, p, la, stream)
           : launch_one<16, false, NW>(grid, p, la, stream);
  } else {
    decode ? launch_one<32, true, NW>(grid, p, la, stream)
           : launch_one<32, false, NW>(grid, p, la, stream);
  }
}

}  // namespace

void launch_fwd_fp8(int row_tile, bool decode, int64_t grid, const MlaParams& p,
                     const LaunchArgs& la, cudaStream_t stream) {
  int nw = kDefaultWarps;
  if (const char* env = std::getenv("LATTE_CUDA_SPARSE_MLA_WARPS")) {
    const int v = std::atoi(env);
    if (v == 4 || v == 8) nw = v;
  }
  if (nw == 4) {
    launch_nw<4>(row_tile, decode, grid, p, la, stream);
  } else {
    launch_nw<8>(row_tile, decode, grid, p, la, stream);
  }
}

}  // namespace latte::cuda_sparse_mla
