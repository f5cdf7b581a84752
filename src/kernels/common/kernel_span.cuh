// Measurement spans (LATTE_CUDA_TOPK_PROF=1): each kernel's first-CTA start and last-CTA end in
// %globaltimer nanoseconds, so that a chain of kernels started early by programmatic dependent
// launch shows its real overlap (Nsight Compute serializes kernels; nsys is not available on
// the lent H200). The buffer holds five arrays of kSpanSlots: the first CTA start (set to all
// ones before the call), the last CTA end, the last CTA start, the longest CTA and the longest
// CTA in SM cycles (set to 0; with the longest CTA in ns it gives the kernel's SM clock).
// A null buffer makes both calls no-ops.
#pragma once

namespace latte::cuda {

constexpr int kSpanSlots = 8;

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

struct SpanStart {
  unsigned long long ns = 0, cycles = 0;
};

// Returns this CTA's start (thread 0; zeros when not measuring), for span_end.
__device__ __forceinline__ SpanStart span_begin(unsigned long long* spans, int slot) {
  if (spans == nullptr || threadIdx.x != 0) return {};
  const SpanStart s{global_ns(), static_cast<unsigned long long>(clock64())};
  atomicMin(spans + slot, s.ns);
  atomicMax(spans + 2 * kSpanSlots + slot, s.ns);
  return s;
}

__device__ __forceinline__ void span_end(unsigned long long* spans, int slot, SpanStart start) {
  if (spans == nullptr || threadIdx.x != 0) return;
  const unsigned long long t = global_ns();
  const auto c = static_cast<unsigned long long>(clock64());
  atomicMax(spans + kSpanSlots + slot, t);
  atomicMax(spans + 3 * kSpanSlots + slot, t - start.ns);
  atomicMax(spans + 4 * kSpanSlots + slot, c - start.cycles);
}

}  // namespace latte::cuda
