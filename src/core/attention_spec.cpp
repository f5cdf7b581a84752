// ModelSpec -> the AttentionSpec of one operation, and its one-line summary.
#include <fmt/format.h>

#include "core/op_traits.hpp"
#include "core/spec_fields.hpp"
#include "latte/error.hpp"
#include "latte/spec.hpp"

namespace latte {

AttentionSpec attention_spec(const ModelSpec& model, Op op, const AttentionOptions& options) {
  const bool needs_dsa = op == Op::sparse_mla || detail::op_is_indexer(op);
  if (needs_dsa && !model.is_dsa()) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("op {} needs a DeepSeek-Sparse-Attention model (a config with "
                            "index_topk); {} is dense MLA: use mla_decode for its attention",
                            to_string(op), model.name));
  }
  if (detail::op_is_indexer(op)) {
    const IndexerSpec& indexer = *model.indexer;
    if (op == Op::indexer_k_store && indexer.pooled()) {
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("op indexer_k_store writes one key per token; {} has a pooled indexer (index_kpool "
                              "{}): its keys are written per pool by indexer_pool_store",
                              model.name, indexer.kpool));
    }
    if (op == Op::indexer_pool_store && !indexer.pooled()) {
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("op indexer_pool_store writes the keys of a pooled indexer (index_kpool > 1); {} "
                              "scores single tokens: its keys are written by indexer_k_store",
                              model.name));
    }
    if (indexer.pooled() && !indexer.pooled_in_latte()) {
      throw Error(ErrorCode::unsupported,
                  fmt::format("op {}: {} pools index_kpool {} tokens{}; latte's pooled indexer computes the gated "
                              "mix of index_kpool_compress (docs/operations.md, indexer_pool_store) over {}..{} "
                              "tokens; latte serves this model's kv_store and sparse_mla",
                              to_string(op), model.name, indexer.kpool,
                              indexer.kpool_compress ? "" : " without index_kpool_compress", kMinKpool, kMaxKpool));
    }
  }
  if (op == Op::mla_decode && model.nope) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("op mla_decode computes MLA with rope (d_qk 576); {} has no rope (qk_rope_head_dim "
                            "0): its attention is sparse_mla",
                            model.name));
  }
  if (options.s_q < 1) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("s_q = {} is not valid: use the number of query tokens per request "
                            "(1 for plain decode, 2..4 with speculative decoding)",
                            options.s_q));
  }
  if (options.max_tokens < 0) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("max_tokens = {} is not valid: use the most tokens per call, or 0 "
                            "when not known",
                            options.max_tokens));
  }
  if (detail::op_is_indexer(op) && op != Op::indexer_k_store && options.index_q_dtype != DType::e4m3 &&
      options.index_q_dtype != DType::bf16) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("indexer queries are e4m3 or bf16, not {}", to_string(options.index_q_dtype)));
  }

  AttentionSpec spec;
  spec.op = op;
  spec.model = model.name;
  spec.kv_cache = model.kv_cache;
  spec.block_size = model.block_size;
  spec.max_tokens = options.max_tokens;
  spec.s_q = op == Op::mla_decode ? options.s_q : 1;
  switch (op) {
    case Op::sparse_mla:
    case Op::mla_decode:
      spec.num_heads = model.heads_per_rank;
      spec.tp = model.tp;
      spec.head_dim = model.kv_lora_rank + model.qk_rope_head_dim;
      spec.head_dim_v = model.kv_lora_rank;
      spec.q_dtype = DType::bf16;
      spec.topk = op == Op::sparse_mla ? model.indexer->attended_tokens() : 0;
      spec.scale = static_cast<float>(model.softmax_scale);
      break;
    case Op::indexer_topk:
    case Op::indexer_logits:
      // Index heads are replicated on every rank (engines do not split the indexer by TP).
      spec.num_heads = model.indexer->num_heads;
      spec.head_dim = model.indexer->head_dim;
      spec.head_dim_v = 0;
      spec.q_dtype = options.index_q_dtype;
      // Pooled: the token columns of the result, the chosen pools' tokens and the tail (2051).
      spec.topk = op != Op::indexer_topk ? 0 : model.indexer->pooled() ? model.indexer->attended_tokens()
                                                                          : model.indexer->topk;
      spec.kpool = model.indexer->pooled() ? model.indexer->kpool : 0;
      break;
    case Op::kv_store:
      spec.num_heads = 0;
      spec.head_dim = model.kv_lora_rank + model.qk_rope_head_dim;
      spec.head_dim_v = model.kv_lora_rank;
      break;
    case Op::indexer_k_store:
    case Op::indexer_pool_store:
      spec.num_heads = 0;
      spec.head_dim = model.indexer->head_dim;
      spec.head_dim_v = 0;
      spec.kpool = op == Op::indexer_pool_store ? model.indexer->kpool : 0;
      break;
    case Op::logical_to_slots:
      spec.num_heads = 0;
      spec.head_dim = 0;
      spec.head_dim_v = 0;
      spec.topk = model.is_dsa() ? model.indexer->attended_tokens() : 0;
      break;
  }
  return spec;
}

std::string AttentionSpec::summary() const {
  const auto applies = [this](int AttentionSpec::*m) { return detail::spec_int_field(m).applies(op); };
  std::string out(to_string(op));
  if (applies(&AttentionSpec::num_heads)) {
    out += fmt::format(" H={}", num_heads);
    if (tp > 1) out += fmt::format(" (tp {})", tp);
  }
  if (applies(&AttentionSpec::head_dim)) {
    out += head_dim_v > 0 && head_dim_v != head_dim ? fmt::format(" d={}/{}", head_dim, head_dim_v)
                                                    : fmt::format(" d={}", head_dim);
  }
  if (applies(&AttentionSpec::head_dim) && detail::op_uses_mla_cache(op) && head_dim == kLatentDim) out += " (no rope)";
  if (detail::op_has_query(op)) out += fmt::format(" q={}{}", to_string(q_dtype), split_q ? "+rope" : "");
  if (detail::op_uses_mla_cache(op)) out += fmt::format(" cache={}", to_string(kv_cache));
  out += fmt::format(" block={}", block_size);
  if (applies(&AttentionSpec::topk)) out += fmt::format(" topk={}{}", topk, topk_lens ? " (+topk_lens)" : "");
  if (applies(&AttentionSpec::s_q)) out += fmt::format(" s_q={}", s_q);
  if (kpool > 0) out += fmt::format(" kpool={}", kpool);
  if (max_tokens > 0) out += fmt::format(" tokens<={}", max_tokens);
  if (op == Op::sparse_mla || op == Op::mla_decode) out += fmt::format(" scale={:.6g}", scale);
  if (!model.empty()) out += fmt::format(" model={}", model);
  return out;
}

}  // namespace latte
