// hopper.indexer's indexer_topk over the wgmma score kernels (logits_launch_sm90a.hpp), by one of two
// paths: unfused (u32 score keys of every visible position into the workspace, then the
// shared exact top-k, kernels/topk/topk_launch.hpp; tokens in slices when their keys do not fit) and
// fused (sample, admission, repair and the exact top-k of each token's candidates).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/indexer/indexer_params.hpp"
#include "kernels/topk/topk_launch.hpp"

namespace latte::hopper_indexer {

using cuda::TopkPath;

// Workspace a kernel made for up to `tokens` query tokens reports: the larger of the unfused
// path's (keys for min(tokens * 131072, 64M) positions, at least one row of 524288, the top-k's
// longest, plus the split top-k's lists for rows up to 262144 positions) and the fused path's
// for up to 512 tokens (2048 samples and 8192 candidates each: 72 KB a token, plus the repair
// pass's topk candidates of about one CTA per SM; no keys).
[[nodiscard]] std::size_t topk_workspace_bound(int64_t tokens, int topk, int sm_count);
// Workspace this problem runs with in one pass by `path` (automatic: the larger of the two).
[[nodiscard]] std::size_t topk_workspace_bytes(const cuda::IndexerParams& p, int topk, TopkPath path, int sm_count);
// The path `automatic` takes: fused at >= 128K positions, at >= 64K for up to 24 query tokens
// and at >= 32K for up to 8 (where it measured faster) when the block size takes the TMA kernel
// and the workspace holds the fused buffers; unfused otherwise.
// LATTE_HOPPER_INDEXER_PATH=fused|unfused overrides it.
[[nodiscard]] TopkPath choose_topk_path(const cuda::IndexerParams& p, int topk, std::size_t workspace_bytes,
                                        int sm_count);

// Whether the fused path's admission pass is launched dependent on its sample pass (the
// measured rule in indexer_topk_sm90a.cpp; LATTE_HOPPER_INDEXER_ADMIT_PDL=on|off overrides).
[[nodiscard]] bool admission_pdl(const cuda::IndexerParams& p, int sm_count);

// indexer_topk: out gets each token's topk best positions (physical or logical), ascending,
// -1 padded, the same by either path. Throws latte::Error when the workspace holds less than
// one token's keys (unfused) or less than topk_workspace_bytes(fused) (fused).
void launch_topk_sm90a(const cuda::IndexerParams& p, const cuda::TopkOutput& out, TopkPath path, void* workspace,
                       std::size_t workspace_bytes, int sm_count, void* stream);

// Kernel::describe() text of indexer_topk.
[[nodiscard]] std::string describe_topk(int heads, int block_size, int topk);

}  // namespace latte::hopper_indexer
