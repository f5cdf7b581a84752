// Measurement spans (LATTE_CUDA_TOPK_PROF=1): each kernel's first-CTA start and last-CTA end in
// %globaltimer nanoseconds, so that a chain of kernels started early by programmatic dependent
// launch shows its real overlap (Nsight Compute serializes kernels; nsys is not available on
// the lent H200). The buffer holds four arrays of kSpanSlots: the first CTA start (set to all
// ones before the call), the last CTA end, the last CTA start and the longest CTA (set to 0).
// A null buffer makes both calls no-ops.
#pragma once

namespace latte::cuda {

constexpr int kSpanSlots = 8;

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Returns this CTA's start (thread 0; 0 when not measuring), for span_end.
__device__ __forceinline__ unsigned long long span_begin(unsigned long long* spans, int slot) {
  if (spans == nullptr || threadIdx.x != 0) return 0;
  const unsigned long long t = global_ns();
  atomicMin(spans + slot, t);
  atomicMax(spans + 2 * kSpanSlots + slot, t);
  return t;
}

__device__ __forceinline__ void span_end(unsigned long long* spans, int slot, unsigned long long start) {
  if (spans == nullptr || threadIdx.x != 0) return;
  const unsigned long long t = global_ns();
  atomicMax(spans + kSpanSlots + slot, t);
  atomicMax(spans + 3 * kSpanSlots + slot, t - start);
}

}  // namespace latte::cuda
