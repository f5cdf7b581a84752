// The pooled indexer (GLM-5.3-Flash) on CUDA, around the per-token indexer: a pool row is
// scored exactly as a token row, so indexer_topk over pools is the token indexer's top-k over a
// derived problem (pool rows, block_size / kpool rows per block, floor(visible / kpool) visible
// pools: IndexerParams::vl_div) whose output rows the top-k kernels write in token form: each
// kept pool as its kpool positions, then the tail, the padding and the counts
// (kernels/topk/topk_pooled_output.cuh). Semantics: docs/operations.md, "The pooled indexer".
// Host side.
#pragma once

#include <cstdint>

#include "kernels/indexer/indexer_params.hpp"
#include "kernels/topk/topk_launch.hpp"

namespace latte::cuda {

// The problem in pool geometry: what the per-token indexer scores (k_cache rows are pools,
// block_size = pool rows per block, visible lengths counted in pools: vl_div = kpool).
[[nodiscard]] IndexerParams pooled_problem(const IndexerParams& token_problem, int kpool);

// The top-k output of the pooled problem: the best pool_topk pools of each row, written into
// `token_out` (its topk = the row's token columns) as their kpool positions each, then the tail
// with select_tail, then -1; lens (optional, stride lens_s) gets each row's count.
[[nodiscard]] TopkOutput pooled_output(const TopkOutput& token_out, int kpool, int pool_topk, bool select_tail,
                                       int32_t* lens, int64_t lens_s);

}  // namespace latte::cuda
