// cuda.kv_store's host side: latte's validated problems launched (kv_store_run.cpp).
#pragma once

#include <string>

#include "kernels/kv_store/kv_store_launch.hpp"
#include "latte/problem.hpp"

namespace latte::cuda_kv_store {

// Validated problems on CUDA tensors: their parameters filled and the kernel launched.
void launch(const KvStoreProblem& problem, void* stream);
void launch(const IndexerKStoreProblem& problem, void* stream);
void launch(const LogicalToSlotsProblem& problem, void* stream);

// What the kernel for `op` (and, for kv_store, the cache format and head_dim: 512 = rows without
// rope) writes and how, in one line.
std::string describe_cache_write(Op op, CacheFormat format, int head_dim);

}  // namespace latte::cuda_kv_store
