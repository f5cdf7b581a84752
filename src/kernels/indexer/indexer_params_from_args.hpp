// Host side of the CUDA indexer backends (cuda.indexer, hopper.indexer): the raw view of a
// validated indexer problem and of indexer_topk's output.
#pragma once

#include <cstdint>

#include "kernels/indexer/indexer_params.hpp"
#include "kernels/indexer/pooled_topk.hpp"
#include "latte/ops.hpp"
#include "kernels/topk/topk_launch.hpp"
#include "latte/problem.hpp"
#include "latte/spec.hpp"

namespace latte::cuda {

inline IndexerParams indexer_params(const IndexerInputs& in, const IndexerShape& s) {
  IndexerParams p;
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

// indexer_topk's output as the top-k launchers take it.
inline TopkOutput topk_output(const IndexerTopkProblem& s) {
  TopkOutput out;
  out.indices = s.args->indices.ptr<int32_t>();
  out.st = s.args->indices.stride(0);
  out.sc = s.args->indices.stride(1);
  out.topk = static_cast<int>(s.topk);
  out.physical = s.args->kind == IndexKind::physical;
  return out;
}

// indexer_topk of a validated problem through a backend's per-token top-k
// `topk(params, output, workspace, workspace_bytes)`; a pooled problem (GLM-5.3-Flash) runs it
// over the pools, its kernels writing the kept pools' positions (pooled_topk.hpp).
template <typename Topk>
void run_indexer_topk(const IndexerTopkProblem& a, void* workspace, std::size_t workspace_bytes, Topk&& topk) {
  const IndexerParams p = indexer_params(a.args->in, a);
  if (!a.pooled()) {
    topk(p, topk_output(a), workspace, workspace_bytes);
    return;
  }
  const TensorView& lens = a.args->out_lens;
  const int kpool = static_cast<int>(a.kpool);
  topk(pooled_problem(p, kpool),
       pooled_output(topk_output(a), kpool, static_cast<int>(a.pool_topk), a.select_tail,
                     lens.defined() ? lens.ptr<int32_t>() : nullptr, lens.defined() ? lens.stride(0) : 0),
       workspace, workspace_bytes);
}

// indexer_logits of a validated problem through a backend's `logits(params, out, row stride,
// column stride, columns)`; pooled: per pool.
template <typename Logits>
void run_indexer_logits(const IndexerLogitsProblem& l, Logits&& logits) {
  const TensorView& out = l.args->logits;
  IndexerParams p = indexer_params(l.args->in, l);
  if (l.pooled()) p = pooled_problem(p, static_cast<int>(l.kpool));
  logits(p, out.ptr<float>(), out.stride(0), out.stride(1), l.logits_len);
}

}  // namespace latte::cuda
