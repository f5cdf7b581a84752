// Host side of the CUDA indexer backends (cuda.indexer, hopper.indexer): the raw view of
// latte's IndexerInputs, and check mode's index rules (the same as cpu.reference's).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda/host_copy.hpp"
#include "cuda/indexer_problem.hpp"
#include "latte/ops.hpp"
#include "latte/validate.hpp"

namespace latte::cuda {

inline IndexerProblem indexer_problem(const IndexerInputs& in, const IndexerShape& s) {
  IndexerProblem p;
  p.q = in.q.data;
  p.q_fp8 = s.q_dtype == DType::e4m3;
  p.q_st = in.q.stride(0);
  p.q_sh = in.q.stride(1);
  if (p.q_fp8) {
    p.q_scale = in.q_scale.ptr<const float>();
    p.qs_st = in.q_scale.stride(0);
    p.qs_sh = in.q_scale.stride(1);
  }
  p.weights = in.weights.ptr<const float>();
  p.w_st = in.weights.stride(0);
  p.w_sh = in.weights.stride(1);
  p.k_cache = in.k_cache.ptr<const uint8_t>();
  p.page_stride = in.k_cache.stride(0);
  p.num_blocks = static_cast<int>(s.num_blocks);
  p.block_size = static_cast<int>(s.block_size);
  p.block_table = in.block_table.ptr<const int32_t>();
  p.bt_sr = in.block_table.stride(0);
  p.bt_sc = in.block_table.stride(1);
  p.batch = static_cast<int>(s.batch);
  p.max_blocks = static_cast<int>(s.max_blocks);
  if (in.token_request.defined()) {
    p.token_request = in.token_request.ptr<const int32_t>();
    p.tr_s = in.token_request.stride(0);
  }
  p.visible_lens = in.visible_lens.ptr<const int32_t>();
  p.vl_s = in.visible_lens.stride(0);
  p.tokens = static_cast<int>(s.tokens);
  p.heads = static_cast<int>(s.heads);
  return p;
}

// Check mode: the same index rules as cpu.reference (token_request rows, visible lengths and
// the blocks they cover). Synchronizes the stream.
inline void check_indexer_indices(const IndexerInputs& in, const IndexerShape& s, const char* op,
                                  cudaStream_t stream) {
  const std::string prefix(op);
  std::vector<int32_t> rows;
  if (in.token_request.defined()) {
    rows = download_i32(in.token_request, stream);
    check_values_in_range(rows.data(), s.tokens, 1, 0, s.batch - 1, (prefix + ": token_request").c_str(),
                          "rows of block_table");
  }
  const std::vector<int32_t> lens = download_i32(in.visible_lens, stream);
  check_values_in_range(lens.data(), s.tokens, 1, 0, s.max_len(), (prefix + ": visible_lens").c_str(),
                        "max_blocks * block_size positions of block_table");
  std::vector<int64_t> used(static_cast<std::size_t>(s.batch), 0);
  for (int64_t t = 0; t < s.tokens; ++t) {
    const int64_t row = rows.empty() ? t : rows[static_cast<std::size_t>(t)];
    auto& u = used[static_cast<std::size_t>(row)];
    u = std::max<int64_t>(u, (lens[static_cast<std::size_t>(t)] + s.block_size - 1) / s.block_size);
  }
  const std::vector<int32_t> table = download_i32(in.block_table, stream);
  check_block_table_prefix(table.data(), s.batch, s.max_blocks, used.data(), s.num_blocks,
                           (prefix + ": block_table").c_str());
}

}  // namespace latte::cuda
