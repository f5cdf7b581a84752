// Facts about ops: which hand-written AttentionSpec fields mean something for each op, and sets
// of ops. The integer fields carry their own op set (core/spec_fields.hpp); the declared-capability
// check, the suggestions and the summary all ask these, so that they agree on what "applies" means.
#pragma once

#include <cstdint>

#include "latte/ops.hpp"

namespace latte::detail {

// A set of ops, one bit per Op.
using OpSet = uint32_t;
constexpr OpSet op_bit(Op op) { return OpSet{1} << static_cast<unsigned>(op); }
inline constexpr OpSet kAllOps = (op_bit(Op::indexer_pool_store) << 1) - 1;  // the last Op
// Ops that take a query tensor (and so a query dtype and a head count).
inline constexpr OpSet kQueryOps =
    op_bit(Op::sparse_mla) | op_bit(Op::mla_decode) | op_bit(Op::indexer_topk) | op_bit(Op::indexer_logits);

inline bool op_has_query(Op op) { return (kQueryOps & op_bit(op)) != 0; }
// Ops that read or write the MLA KV cache, whose format (bf16 | fp8_ds_mla) matters.
inline bool op_uses_mla_cache(Op op) {
  return op == Op::sparse_mla || op == Op::mla_decode || op == Op::kv_store;
}
// Attention ops whose heads are split by tensor parallelism (indexer heads are replicated).
inline bool op_heads_split_by_tp(Op op) { return op == Op::sparse_mla || op == Op::mla_decode; }
inline bool op_is_indexer(Op op) {
  return op == Op::indexer_topk || op == Op::indexer_logits || op == Op::indexer_k_store ||
         op == Op::indexer_pool_store;
}
// Indexer ops with a pooled form (AttentionSpec::kpool applies to them).
inline constexpr OpSet kPoolOps =
    op_bit(Op::indexer_topk) | op_bit(Op::indexer_logits) | op_bit(Op::indexer_pool_store);

}  // namespace latte::detail
