// The pooled indexer (GLM-5.3-Flash) on CUDA, around the per-token indexer: a pool row is
// scored exactly as a token row, so indexer_topk over pools is the token indexer's top-k over a
// derived problem (pool rows, block_size / kpool rows per block, floor(visible / kpool) visible
// pools: IndexerParams::vl_div), followed by one expansion kernel that turns each kept pool into
// its kpool positions and appends the tail. Semantics: docs/operations.md, "The pooled
// indexer". Host side.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <utility>

#include "kernels/indexer/indexer_params.hpp"
#include "kernels/topk/topk_launch.hpp"

namespace latte::cuda {

// The problem in pool geometry: what the per-token indexer scores (k_cache rows are pools,
// block_size = pool rows per block, visible lengths counted in pools: vl_div = kpool).
[[nodiscard]] IndexerParams pooled_problem(const IndexerParams& token_problem, int kpool);

// The expansion: pools [T, pool_topk] (logical pool indices, valid first, -1 after) to token
// positions or slots in out [T, width] (the kept pools' kpool positions each, then the tail with
// select_tail, then -1), and the valid count per row in out_lens (optional). p in token geometry.
struct PooledExpand {
  const int32_t* pools = nullptr;
  int64_t pools_ld = 0;
  int pool_topk = 0;
  int kpool = 0;
  bool select_tail = false;
  bool physical = false;
  int32_t* out = nullptr;
  int64_t out_sr = 0, out_sc = 1;
  int width = 0;
  int32_t* out_lens = nullptr;  // optional
  int64_t ol_s = 1;
  bool pdl = false;  // launched with programmatic dependent launch (sm_90+): starts while the top-k ends
};
void launch_pooled_expand(const IndexerParams& p, const PooledExpand& e, cudaStream_t stream);

// Workspace the pooled top-k takes before the per-token indexer's own: the kept pools
// [T, pool_topk], 256-byte aligned.
[[nodiscard]] std::size_t pooled_workspace_bytes(int64_t tokens, int pool_topk);

// Throws invalid_argument (the bytes needed, the fix) when the workspace is short of `need`.
void require_pooled_workspace(std::size_t need, std::size_t workspace_bytes, int64_t tokens);

// indexer_topk over pools: the per-token top-k `inner(problem, output, workspace, bytes)` of the
// backend over the derived problem into the kept pools (the first pooled_workspace_bytes of
// `workspace`; it gets the rest), then the expansion into out.
// p in token geometry; pdl: the device runs programmatic dependent launch (sm_90+). No host
// synchronization: graph-capturable as the inner top-k is.
template <typename InnerTopk>
void run_pooled_topk(const IndexerParams& p, int kpool, int pool_topk, bool select_tail, const TopkOutput& out,
                     int32_t* out_lens, int64_t ol_s, void* workspace, std::size_t workspace_bytes, bool pdl,
                     cudaStream_t stream, InnerTopk&& inner) {
  if (p.tokens <= 0) return;
  auto* ws = static_cast<uint8_t*>(workspace);
  const std::size_t head = pooled_workspace_bytes(p.tokens, pool_topk);
  require_pooled_workspace(head, workspace_bytes, p.tokens);
  auto* pools = reinterpret_cast<int32_t*>(ws);
  TopkOutput kept;
  kept.indices = pools;
  kept.st = pool_topk;
  kept.sc = 1;
  kept.topk = pool_topk;
  kept.physical = false;
  inner(pooled_problem(p, kpool), kept, ws + head, workspace_bytes - head);
  PooledExpand e;
  e.pools = pools;
  e.pools_ld = pool_topk;
  e.pool_topk = pool_topk;
  e.kpool = kpool;
  e.select_tail = select_tail;
  e.physical = out.physical;
  e.out = out.indices;
  e.out_sr = out.st;
  e.out_sc = out.sc;
  e.width = out.topk;
  e.out_lens = out_lens;
  e.ol_s = ol_s;
  e.pdl = pdl;
  launch_pooled_expand(p, e, stream);
}

}  // namespace latte::cuda
