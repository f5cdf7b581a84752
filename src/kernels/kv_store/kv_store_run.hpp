// cuda.kv_store's host side: latte's validated problems launched (kv_store_run.cpp).
#pragma once

#include <cstddef>
#include <string>

#include "kernels/kv_store/kv_store_launch.hpp"
#include "latte/problem.hpp"

namespace latte::cuda_kv_store {

// Validated problems on CUDA tensors: their parameters filled and the kernel launched.
void launch(const KvStoreProblem& problem, void* stream);
void launch(const IndexerKStoreProblem& problem, void* stream);
void launch(const LogicalToSlotsProblem& problem, void* stream);
// indexer_pool_store needs pool_store_workspace_bytes(problem.tokens) bytes of `workspace`
// (16-byte aligned): a smaller one is invalid_argument, naming both sizes.
void launch(const IndexerPoolStoreProblem& problem, void* workspace, std::size_t workspace_bytes, void* stream);

// What the kernel for `op` (and, for kv_store, the cache format and head_dim: 512 = rows without
// rope) writes and how, in one line.
std::string describe_cache_write(Op op, CacheFormat format, int head_dim);

}  // namespace latte::cuda_kv_store
