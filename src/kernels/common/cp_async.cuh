// cp.async (sm_80+) global -> shared copies with zero fill, for multi-stage pipelines.
#pragma once

#include <cstdint>

namespace latte::cuda {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Copies 16 bytes to a shared-memory address, or writes 16 zero bytes (and reads nothing)
// when `valid` is false. `src` must be a valid address even when !valid (pass any mapped
// pointer). Taking the address as a number lets a caller convert one base for many copies.
__device__ __forceinline__ void cp_async_16_s(uint32_t dst_smem, const void* src, bool valid) {
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst_smem), "l"(src), "r"(n) : "memory");
}

// The same with an L2 prefetch-size hint (PTX `.L2::64B|128B|256B`, sm_80+): the L2 fetches
// PREFETCH bytes around the copied 16 from DRAM, for rows longer than a sector read by several
// copies. PREFETCH 0: no hint (cp_async_16_s).
template <int PREFETCH>
__device__ __forceinline__ void cp_async_16_s_l2(uint32_t dst_smem, const void* src, bool valid) {
  static_assert(PREFETCH == 0 || PREFETCH == 64 || PREFETCH == 128 || PREFETCH == 256, "L2 prefetch: 0, 64, 128 or 256 bytes");
  const int n = valid ? 16 : 0;
  if constexpr (PREFETCH == 0)
    cp_async_16_s(dst_smem, src, valid);
  else if constexpr (PREFETCH == 64)
    asm volatile("cp.async.cg.shared.global.L2::64B [%0], [%1], 16, %2;\n" ::"r"(dst_smem), "l"(src), "r"(n) : "memory");
  else if constexpr (PREFETCH == 128)
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(dst_smem), "l"(src), "r"(n) : "memory");
  else
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n" ::"r"(dst_smem), "l"(src), "r"(n) : "memory");
}

__device__ __forceinline__ void cp_async_16(void* dst_smem, const void* src, bool valid) {
  cp_async_16_s(smem_addr(dst_smem), src, valid);
}

// Copies 4 bytes, or writes zeros when `valid` is false.
__device__ __forceinline__ void cp_async_4(void* dst_smem, const void* src, bool valid) {
  const int n = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst_smem)),
               "l"(src), "r"(n) : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// Waits until at most N committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

}  // namespace latte::cuda
