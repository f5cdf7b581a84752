// Kernel::run: the one path from a call to a backend's compute(), for latte::run and for
// callers holding a kernel alike. Validation (make_problem) happens once, before it.
#include "latte/backend.hpp"
#include "ops/check_mode.hpp"
#include "ops/device_guard.hpp"
#include "ops/problem_fit.hpp"

#ifdef LATTE_WITH_CUDA
#include "kernels/common/cuda_check.cuh"
#endif

namespace latte {

void Kernel::run(const OpArgs& args, const RunContext& ctx) { run(make_problem(args), ctx); }

void Kernel::run(const Problem& problem, const RunContext& ctx) {
  detail::check_fits(problem, spec_, device_);
  const Device device = device_of(problem);
  const detail::DeviceGuard guard(device);
  if (ctx.check_indices) detail::check_index_values(problem, ctx.stream);
  compute(problem, ctx);
#ifdef LATTE_WITH_CUDA
  // Check mode is synchronous: a kernel's fault is reported by this call.
  if (ctx.check_indices && device.kind == DeviceKind::cuda) {
    LATTE_CUDA_TRY(cudaStreamSynchronize(static_cast<cudaStream_t>(ctx.stream)));
  }
#endif
}

}  // namespace latte
