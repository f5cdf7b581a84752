// Which AttentionSpec fields mean something for each op. The declared-capability check, the
// suggestions and the docs all ask here, so that they agree on what "applies" means.
#pragma once

#include "latte/ops.hpp"

namespace latte::detail {

// Ops that take a query tensor (and so a query dtype and a head count).
inline bool op_has_query(Op op) {
  return op == Op::sparse_mla || op == Op::mla_decode || op == Op::indexer_topk ||
         op == Op::indexer_logits;
}
inline bool op_has_heads(Op op) { return op_has_query(op); }
// Ops that read or write the MLA KV cache, whose format (bf16 | fp8_ds_mla) matters.
inline bool op_uses_mla_cache(Op op) {
  return op == Op::sparse_mla || op == Op::mla_decode || op == Op::kv_store;
}
// Ops with a per-token vector width (576 for MLA, 128 for the indexer).
inline bool op_has_head_dim(Op op) { return op != Op::logical_to_slots; }
inline bool op_has_topk(Op op) { return op == Op::sparse_mla || op == Op::indexer_topk; }
inline bool op_has_s_q(Op op) { return op == Op::mla_decode; }
// Attention ops whose heads are split by tensor parallelism (indexer heads are replicated).
inline bool op_heads_split_by_tp(Op op) { return op == Op::sparse_mla || op == Op::mla_decode; }
inline bool op_is_indexer(Op op) {
  return op == Op::indexer_topk || op == Op::indexer_logits || op == Op::indexer_k_store;
}

}  // namespace latte::detail
