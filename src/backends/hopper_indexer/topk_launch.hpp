// hopper.indexer's indexer_topk: the wgmma score kernel writes u32 score keys into the
// workspace (launch_keys_sm90a), the shared exact top-k (cuda/topk_launch.hpp) selects from
// them. Tokens run in slices when their keys do not fit the workspace at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "cuda/indexer_problem.hpp"
#include "cuda/topk_launch.hpp"

namespace latte::hopper_indexer {

// Workspace a kernel made for up to `tokens` query tokens reports: keys for min(tokens *
// 131072, 64M) positions (at least one row of 524288, the top-k's longest), plus the split
// top-k's lists for rows up to 262144 positions.
[[nodiscard]] std::size_t topk_workspace_bound(int64_t tokens, int topk, int sm_count);
// Workspace this problem runs in one pass with (every token's keys, the split lists).
[[nodiscard]] std::size_t topk_workspace_bytes(const cuda::IndexerProblem& p, int topk, int sm_count);

// indexer_topk: out gets each token's topk best positions (physical or logical), ascending,
// -1 padded. Throws latte::Error when the workspace holds less than one token's keys.
void launch_topk_sm90a(const cuda::IndexerProblem& p, const cuda::TopkOutput& out, void* workspace,
                       std::size_t workspace_bytes, int sm_count, void* stream);

// Kernel::describe() text of indexer_topk.
[[nodiscard]] std::string describe_topk(int heads, int block_size, int topk);

}  // namespace latte::hopper_indexer
