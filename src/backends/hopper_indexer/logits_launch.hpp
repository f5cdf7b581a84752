// hopper.indexer's score launchers: the indexer score with e4m3 queries on sm_90 by wgmma
// (sm_90a), as f32 logits or as u32 score keys. Raw device pointers in
// (cuda/indexer_problem.hpp), one kernel launched on a stream, no host synchronization. Semantics as cuda.indexer's (DESIGN.md 2.2, cpu.reference's indexer.cpp):
//   I[t, p] = sum_j w[t, j] * ReLU(q_scale[t, j] * dot(q[t, j], k[p])) * k_scale[p]
// for visible positions p < visible_lens[t] in a valid block, -inf elsewhere.
#pragma once

#include <cstdint>
#include <string>

#include "cuda/indexer_problem.hpp"

namespace latte::hopper_indexer {

constexpr int kMaxHeads = 128;

// logits [T, logits_len] f32 with strides (ld_t, ld_s). Needs e4m3 queries (p.q_fp8) and an
// sm_90 device; throws latte::Error otherwise.
void launch_logits_sm90a(const cuda::IndexerProblem& p, float* logits, int64_t ld_t, int64_t ld_s,
                         int64_t logits_len, int sm_count, void* stream);

// Score keys [T, keys_ld] (cuda/radix_select.cuh score_key of the logit; 0 where not visible)
// for positions below the token's visible length; entries past it are not written. keys_ld >=
// p.max_len(). The exact top-k's input (topk_launch.hpp).
void launch_keys_sm90a(const cuda::IndexerProblem& p, uint32_t* keys, int64_t keys_ld, int sm_count, void* stream);

// Kernel::describe() text: the matrix path, the kernel and its copies for this block size, the
// columns of a CTA, the output (keys: u32 score keys, else f32 logits).
[[nodiscard]] std::string describe_scores(int heads, int block_size, bool keys);

}  // namespace latte::hopper_indexer
