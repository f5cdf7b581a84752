// The dynamic shared-memory limit of a kernel, raised once per device (host side).
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "kernels/common/cuda_check.cuh"

namespace latte::cuda {

// The opt-in shared memory per block of sm_86 / sm_89 / sm_120 (the portable kernels' bound).
constexpr int kPortableSmemBytes = 101376;

// Sets `kernel`'s dynamic shared-memory limit to `bytes` on `device` (the current one), once
// per device: `done` (one per kernel, a static of the caller) remembers devices 0 .. 63; devices
// past 63 set it on every call.
template <typename KernelPtr>
void allow_dynamic_smem(KernelPtr kernel, int bytes, int device, std::atomic<uint64_t>& done) {
  const uint64_t bit = device >= 0 && device < 64 ? uint64_t{1} << device : 0;
  if (bit != 0 && (done.load(std::memory_order_acquire) & bit) != 0) return;
  LATTE_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  done.fetch_or(bit, std::memory_order_acq_rel);
}

}  // namespace latte::cuda
