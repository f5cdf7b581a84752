// hopper.indexer's score launchers: the indexer score with e4m3 queries on sm_90 by wgmma (sm_90a),
// as f32 logits or as u32 score keys. Raw device pointers in (kernels/indexer/indexer_params.hpp), one kernel
// launched on a stream, no host synchronization. Semantics as cuda.indexer's (docs/design.md,
// section 4.1, cpu.reference's indexer.cpp):
//   I[t, p] = sum_j w[t, j] * ReLU(q_scale[t, j] * dot(q[t, j], k[p])) * k_scale[p]
// for visible positions p < visible_lens[t] in a valid block, -inf elsewhere.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "kernels/indexer/indexer_params.hpp"

namespace latte::hopper_indexer {

constexpr int kMaxHeads = 128;
constexpr int kMaxTopk = 4096;  // indexer_topk's largest topk (the repair pass's buffer in shared memory)

// logits [T, logits_len] f32 with strides (ld_t, ld_s). Needs e4m3 queries (p.q_fp8) and an
// sm_90 device; throws latte::Error otherwise.
void launch_logits_sm90a(const cuda::IndexerParams& p, float* logits, int64_t ld_t, int64_t ld_s,
                         int64_t logits_len, int sm_count, void* stream);

// Score keys [T, keys_ld] (kernels/topk/radix_select.cuh score_key of the logit; 0 where not visible)
// for positions below the token's visible length; entries past it are not written. keys_ld >=
// p.max_len(). The exact top-k's input (topk_launch.hpp); `key_hist` (non-null: what
// cuda::prepare_keys_topk returned) gets each token's first-digit counts.
void launch_keys_sm90a(const cuda::IndexerParams& p, uint32_t* keys, int64_t keys_ld, int* key_hist, int sm_count,
                       void* stream);

// The most sampled positions per token of the fused path (cuda::kFusedSamples).
constexpr int kMaxSamples = 2048;

// The fused path's buffers (indexer_topk_sm90a.cpp): per token `samples` sampled score keys, the
// admission threshold tau, the candidate count and the candidate list (key, position).
struct FusedBuffers {
  uint32_t* sample_keys = nullptr;  // [T, samples], 16-byte aligned
  int samples = 1024;               // a multiple of 512, at most kMaxSamples
  uint32_t* tau = nullptr;          // [T]
  int* count = nullptr;             // [T]
  uint32_t* list_keys = nullptr;    // [T, list_cap]
  int32_t* list_pos = nullptr;      // [T, list_cap]
  int list_cap = 0;
  uint32_t* cand_keys = nullptr;    // [T, repair_split(...).chunks, topk]: the repair pass's output
  int32_t* cand_pos = nullptr;
  int topk = 0;
  int debug = 0;  // 4 / 8: force the repair (LATTE_HOPPER_INDEXER_DEBUG, tests)
  // Programmatic dependent launches: the admission pass on the sample pass (pdl_admit), the
  // repair pass on the admission and the final select on the repair (pdl).
  bool pdl_admit = true;
  bool pdl = true;
};

// The sample pass's grid for p (launch_sample_sm90a): its CTAs and the stages of 64 sampled
// positions each runs.
struct SampleGrid {
  int64_t ctas = 0;
  int stages = 0;
};
[[nodiscard]] SampleGrid sample_grid(const cuda::IndexerParams& p, int samples, int sm_count);

// Whether the fused path runs for this block size: its admission pass is the TMA kernel's.
[[nodiscard]] bool fused_block_size(int block_size);
// The sample pass (cp.async kernel): each token's keys at `samples` positions spread evenly over
// its visible range; clears its count.
void launch_sample_sm90a(const cuda::IndexerParams& p, const FusedBuffers& f, int sm_count, void* stream);
// The admission pass (TMA kernel, launched dependent on the sample pass): tau per token from its
// samples (into f.tau), the scores at or above it into the token's list (f.count past
// f.list_cap: the list overflowed).
void launch_admit_sm90a(const cuda::IndexerParams& p, const FusedBuffers& f, int sm_count, void* stream);
// The repair pass's cut: each token's positions in `chunks` chunks of chunk_len (a multiple of
// 64) positions, a CTA each; about kRepairCtasPerSm CTAs per SM over all tokens (one wave
// where no admission failed: its CTAs only read their token's count and leave), each chunk at
// least 2 * topk positions. Its output, [T, chunks, topk] candidates, is O(T * topk + SMs * topk).
constexpr int kRepairCtasPerSm = 1;
// The most chunks per token that cut gives: ceil(kRepairCtasPerSm * SMs / T).
[[nodiscard]] inline int64_t repair_chunks_bound(int64_t tokens, int sm_count) {
  const int64_t t = std::max<int64_t>(1, tokens);
  return (kRepairCtasPerSm * static_cast<int64_t>(std::max(1, sm_count)) + t - 1) / t;
}
struct RepairSplit {
  int chunk_len = 0;
  int chunks = 0;
};
[[nodiscard]] RepairSplit repair_split(int64_t tokens, int64_t max_len, int topk, int sm_count);
// A repair CTA's running buffer (shared memory): the cp.async kernel compacts it to topk
// before a stage could overflow it.
[[nodiscard]] constexpr int repair_cap(int topk) { return (2 * topk + 1024 + 31) / 32 * 32; }

// The repair pass (the cp.async kernel, launched dependent on the admission pass): for the tokens
// whose admission failed (cuda::fused_needs_repair) only, each CTA's topk best candidates of its
// chunk (a running top-k buffer in shared memory, kernels/topk/running_topk.cuh) into f.cand_keys /
// f.cand_pos; no [T, L] keys.
void launch_repair_sm90a(const cuda::IndexerParams& p, const FusedBuffers& f, int sm_count, void* stream);

// Kernel::describe() text: the matrix path, the kernel and its copies for this block size, the
// columns of a CTA, the output (keys: u32 score keys, else f32 logits).
[[nodiscard]] std::string describe_scores(int heads, int block_size, bool keys);

}  // namespace latte::hopper_indexer
