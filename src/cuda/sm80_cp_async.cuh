// cp.async (sm_80+) global -> shared 16-byte copies with zero fill, for multi-stage gather
// pipelines. Header-only; portable sm_80 ... sm_120.
#pragma once

#include <cstdint>

namespace latte::cuda::sm80 {

// Copies 16 bytes (L2 only, .cg), or writes 16 zero bytes and reads nothing when !valid.
// `src` must be a mapped address even when !valid.
__device__ __forceinline__ void cp_async_16_zfill(uint32_t dst_smem, const void* src, bool valid) {
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst_smem), "l"(src), "r"(n)
               : "memory");
}

__device__ __forceinline__ void cp_async_commit_group() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Waits until at most N committed groups of this thread are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait_group() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

}  // namespace latte::cuda::sm80
