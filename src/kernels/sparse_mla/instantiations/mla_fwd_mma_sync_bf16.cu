// Instantiations of the forward kernel for the bf16 cache, rows with rope (mla_fwd_launch.cuh).
#include "kernels/sparse_mla/smxx/mla_fwd_launch.cuh"

namespace latte::cuda_sparse_mla {

void launch_fwd_bf16(int device, const FwdConfig& c, int64_t grid, const MlaParams& p, const LaunchArgs& la,
                     cudaStream_t stream) {
  detail::launch_fwd<false, true>(device, c, grid, p, la, stream);
}

}  // namespace latte::cuda_sparse_mla
