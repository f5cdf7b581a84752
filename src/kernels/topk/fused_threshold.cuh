// The fused path's admission rule (docs/kernels/indexer.md, "Fused path"): a token's scores at
// 1024 or 2048 evenly spaced positions (cuda.indexer's fused_samples) give a threshold
// tau, computed by each admission CTA (sampled_threshold), expected to admit a few thousand
// candidates, never fewer than topk unless the sample is far off; the candidates above tau
// are the exact top-k's superset when at least topk were admitted (or tau admits everything)
// and none was dropped for lack of room. Rows where that fails are recomputed by the
// compaction kernel (the repair pass).
#pragma once

#include <cstdint>

#include "kernels/topk/radix_select.cuh"

namespace latte::cuda {

constexpr int kFusedSamples = 2048;      // the most sampled positions per token (the workspace's row)
constexpr int kFusedSampleChunk = 128;   // the fewest sampled positions per CTA of the sample pass

// Rank (1 = largest) of the sampled key used as tau, or 0: admit every visible position.
// mu samples are expected above the token's topk-th score; taking the sample 4 standard
// deviations (+4) further down makes too few admissions a > 4-sigma event.
// debug & 4: the largest sample (too few admissions: exercises the repair pass);
// debug & 8: the smallest (too many for long rows: exercises the overflow repair).
// `samples`: the token's sampled positions (a multiple of 512, at most kFusedSamples).
__device__ __forceinline__ int fused_sample_rank(int64_t visible, int topk, int debug, int samples) {
  if (visible <= topk) return 0;
  if (debug & 4) return 1;
  if (debug & 8) return samples;
  const double mu = static_cast<double>(samples) * topk / static_cast<double>(visible);
  const double m = ceil(mu + 4.0 * sqrt(mu) + 4.0);
  return m >= samples ? 0 : static_cast<int>(m);
}

// The admission threshold of a token from its n sampled keys, computed by every
// thread of a CTA of THREADS threads (all must call it): the m-th largest sampled key with its
// low 16 bits cleared, i.e. a key at most 2^-7 relative below it (a few more candidates, never
// fewer). A binary search on the top 16 bits, each step counting the keys at or above the
// midpoint (a warp reduction and one barrier): no histogram, whose shared atomics serialized on
// the sampled keys' nearly equal top digits (docs/kernels/indexer.md, "Fused path").
// `red`: 2 * THREADS / 32 ints of shared memory. `keys`: n of them (a multiple of 4 * THREADS,
// at most kFusedSamples), 16-byte aligned. Returns >= 1. BAR: the barrier of the THREADS
// threads (block_barrier: 0 = the whole CTA, else a named barrier).
template <int THREADS, int BAR = 0>
__device__ uint32_t sampled_threshold(const uint32_t* keys, int n, int m, int* red) {
  constexpr int kPer = kFusedSamples / THREADS;
  constexpr int kWarps = THREADS / 32;
  static_assert(kPer % 4 == 0, "16-byte loads");
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int loads = n / (4 * THREADS);
  uint32_t k[kPer];
  uint32_t lo = 0xFFFFu, hi = 0u;
#pragma unroll
  for (int j = 0; j < kPer / 4; ++j) {
    uint4 v = make_uint4(0u, 0u, 0u, 0u);  // past n: 0, below every midpoint (>= 1)
    if (j < loads) v = reinterpret_cast<const uint4*>(keys)[tid + THREADS * j];
    k[4 * j] = v.x >> 16;
    k[4 * j + 1] = v.y >> 16;
    k[4 * j + 2] = v.z >> 16;
    k[4 * j + 3] = v.w >> 16;
    if (j < loads) {
#pragma unroll
      for (int e = 4 * j; e < 4 * j + 4; ++e) {
        lo = k[e] < lo ? k[e] : lo;
        hi = k[e] > hi ? k[e] : hi;
      }
    }
  }
  cuda::block_key_range<THREADS, BAR>(lo, hi, red);
  // Invariant: at least m keys are >= lo (lo is the minimum, m <= kFusedSamples); the answer
  // is the largest x in [lo, hi] with at least m keys >= x. Buffers alternate, so one barrier
  // per step suffices.
  int buf = 0;
  while (lo < hi) {
    const uint32_t mid = lo + (hi - lo + 1) / 2;
    int c = 0;
#pragma unroll
    for (int e = 0; e < kPer; ++e) c += k[e] >= mid ? 1 : 0;
    c = __reduce_add_sync(0xffffffffu, c);
    if (lane == 0) red[buf * kWarps + warp] = c;
    cuda::block_barrier<THREADS, BAR>();
    int total = 0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) total += red[buf * kWarps + w];
    if (total >= m) lo = mid;
    else hi = mid - 1;
    buf ^= 1;
  }
  const uint32_t tau = lo << 16;
  return tau < 1u ? 1u : tau;
}

// Whether token t's candidate list may miss part of its top-k.
__device__ __forceinline__ bool fused_needs_repair(int total, uint32_t tau, int list_cap, int topk) {
  return total > list_cap || (total < topk && tau > 1u);
}

}  // namespace latte::cuda
