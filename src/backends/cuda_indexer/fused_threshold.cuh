// The fused path's admission rule (docs/kernels/indexer.md, "Fused path"): a token's scores at
// kFusedSamples evenly spaced positions give a threshold tau expected to admit a few thousand
// candidates, never fewer than topk unless the sample is far off; the candidates above tau
// are the exact top-k's superset when at least topk were admitted (or tau admits everything)
// and none was dropped for lack of room. Rows where that fails are recomputed by the
// compaction kernel (the repair pass).
#pragma once

#include <cstdint>

namespace latte::cuda_indexer {

constexpr int kFusedSamples = 2048;      // sampled positions per token
constexpr int kFusedSampleChunk = 128;   // the fewest sampled positions per CTA of the sample pass

// Rank (1 = largest) of the sampled key used as tau, or 0: admit every visible position.
// mu samples are expected above the token's topk-th score; taking the sample 4 standard
// deviations (+4) further down makes too few admissions a > 4-sigma event.
// debug & 4: the largest sample (too few admissions: exercises the repair pass);
// debug & 8: the smallest (too many for long rows: exercises the overflow repair).
__device__ __forceinline__ int fused_sample_rank(int64_t visible, int topk, int debug) {
  if (visible <= topk) return 0;
  if (debug & 4) return 1;
  if (debug & 8) return kFusedSamples;
  const double mu = static_cast<double>(kFusedSamples) * topk / static_cast<double>(visible);
  const double m = ceil(mu + 4.0 * sqrt(mu) + 4.0);
  return m >= kFusedSamples ? 0 : static_cast<int>(m);
}

// Whether token t's candidate list may miss part of its top-k.
__device__ __forceinline__ bool fused_needs_repair(int total, uint32_t tau, int list_cap, int topk) {
  return total > list_cap || (total < topk && tau > 1u);
}

}  // namespace latte::cuda_indexer
