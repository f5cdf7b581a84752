// What the call pipeline derives from a validated problem: its op, device and cache format, the
// AttentionSpec selection sees, and whether it fits a kernel made for some spec.
#include "ops/problem_fit.hpp"

#include <fmt/format.h>

#include <bit>

#include "core/op_traits.hpp"
#include "latte/error.hpp"

namespace latte {

Op op_of(const Problem& problem) { return static_cast<Op>(problem.index()); }

Device device_of(const Problem& problem) {
  return std::visit([](const auto& p) { return p.device; }, problem);
}

const CacheFormat* cache_format_of(const Problem& problem) {
  if (const auto* p = std::get_if<SparseMlaProblem>(&problem)) return &p->format;
  if (const auto* p = std::get_if<MlaDecodeProblem>(&problem)) return &p->format;
  if (const auto* p = std::get_if<KvStoreProblem>(&problem)) return &p->format;
  return nullptr;
}

namespace detail {
namespace {

// Kernels are made for a token capacity; rounding it up to a power of two lets calls of
// similar size share one kernel (and one selection).
int64_t token_capacity(int64_t tokens) {
  return tokens <= 1 ? 1 : static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(tokens)));
}

// The fields every op's spec has; head dims follow the op (576/512 for MLA, 128 for the indexer).
AttentionSpec base_spec(Op op, int64_t heads, int64_t block_size, int64_t tokens) {
  AttentionSpec spec;
  spec.op = op;
  spec.num_heads = static_cast<int>(heads);
  spec.block_size = static_cast<int>(block_size);
  spec.max_tokens = token_capacity(tokens);
  if (op_is_indexer(op)) {
    spec.head_dim = kIndexDim;
    spec.head_dim_v = 0;
  }
  return spec;
}

struct SpecOf {
  AttentionSpec operator()(const SparseMlaProblem& p) const {
    AttentionSpec spec = base_spec(Op::sparse_mla, p.heads, p.block_size, p.tokens);
    spec.kv_cache = p.format;
    spec.head_dim = p.qk_dim();
    spec.topk = static_cast<int>(p.topk);
    spec.scale = p.args->scale;
    spec.split_q = p.args->q_rope.defined();
    spec.topk_lens = p.args->topk_lens.defined();
    return spec;
  }
  AttentionSpec operator()(const MlaDecodeProblem& p) const {
    AttentionSpec spec = base_spec(Op::mla_decode, p.heads, p.block_size, p.batch * p.s_q);
    spec.kv_cache = p.format;
    spec.s_q = static_cast<int>(p.s_q);
    spec.scale = p.args->scale;
    return spec;
  }
  static AttentionSpec indexer(Op op, const IndexerShape& p, int64_t topk) {
    AttentionSpec spec = base_spec(op, p.heads, p.block_size, p.tokens);
    spec.q_dtype = p.q_dtype;
    spec.topk = static_cast<int>(topk);
    spec.kpool = static_cast<int>(p.kpool);
    return spec;
  }
  AttentionSpec operator()(const IndexerTopkProblem& p) const { return indexer(Op::indexer_topk, p, p.topk); }
  AttentionSpec operator()(const IndexerLogitsProblem& p) const { return indexer(Op::indexer_logits, p, 0); }
  AttentionSpec operator()(const KvStoreProblem& p) const {
    AttentionSpec spec = base_spec(Op::kv_store, 1, p.block_size, p.tokens);
    spec.kv_cache = p.format;
    spec.head_dim = kLatentDim + p.rope_dim;
    return spec;
  }
  AttentionSpec operator()(const IndexerKStoreProblem& p) const {
    return base_spec(Op::indexer_k_store, 1, p.block_size, p.tokens);
  }
  AttentionSpec operator()(const LogicalToSlotsProblem& p) const {
    return base_spec(Op::logical_to_slots, 1, p.args->block_size, p.tokens);
  }
  AttentionSpec operator()(const IndexerPoolStoreProblem& p) const {
    AttentionSpec spec = base_spec(Op::indexer_pool_store, 1, p.block_size(), p.tokens);
    spec.kpool = static_cast<int>(p.kpool);
    return spec;
  }
};

[[noreturn]] void mismatch(Op op, std::string_view what, std::string_view kernel, std::string_view call) {
  throw Error(ErrorCode::invalid_argument,
              fmt::format("{}: this kernel was made for {} {} but the call has {} {}. Make a kernel "
                          "for the call's spec (latte::run does).",
                          to_string(op), what, kernel, what, call));
}

void require_equal(Op op, std::string_view what, int64_t kernel, int64_t call) {
  if (kernel > 0 && kernel != call) mismatch(op, what, std::to_string(kernel), std::to_string(call));
}

}  // namespace

AttentionSpec spec_of(const Problem& problem) { return std::visit(SpecOf{}, problem); }

void check_fits(const Problem& problem, const AttentionSpec& spec, Device device) {
  const Op op = op_of(problem);
  if (op != spec.op) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("this kernel was made for {} but was given {} arguments; make a kernel "
                            "for {}.",
                            to_string(spec.op), to_string(op), to_string(op)));
  }
  const Device on = device_of(problem);
  if (on.kind != device.kind) {
    const std::string where = on.kind == DeviceKind::cpu ? "cpu" : fmt::format("cuda:{}", on.index);
    throw Error(ErrorCode::invalid_argument,
                fmt::format("{}: this kernel runs on {} but the tensors are on {}. Copy the tensors "
                            "to the kernel's device, or make a kernel for {} (latte::run selects "
                            "one).",
                            to_string(op), to_string(device.kind), where, where));
  }
  if (const CacheFormat* format = cache_format_of(problem); format && *format != spec.kv_cache) {
    mismatch(op, "cache format", to_string(spec.kv_cache), to_string(*format));
  }
  const AttentionSpec call = spec_of(problem);
  if (op == Op::indexer_topk || op == Op::indexer_logits) {
    if (call.q_dtype != spec.q_dtype) mismatch(op, "query dtype", to_string(spec.q_dtype), to_string(call.q_dtype));
  }
  if (op == Op::sparse_mla || op == Op::mla_decode || op == Op::indexer_topk || op == Op::indexer_logits) {
    require_equal(op, "heads", spec.num_heads, call.num_heads);
  }
  // A kernel computes the rows it was made for: with rope (576) or without (512).
  if (op == Op::sparse_mla || op == Op::mla_decode || op == Op::kv_store) {
    require_equal(op, "head_dim", spec.head_dim, call.head_dim);
  }
  // A kernel scores pools of the size it was made for, or single tokens (kpool 0).
  if (op_is_indexer(op) && call.kpool != spec.kpool) {
    mismatch(op, "kpool", std::to_string(spec.kpool), std::to_string(call.kpool));
  }
  if (call.topk_lens && !spec.topk_lens) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("{}: this kernel was made for calls without topk_lens but the call has them. "
                            "Make a kernel for the call's spec (latte::run does).",
                            to_string(op)));
  }
  // topk: a kernel made for topk k takes calls of up to k columns (its workspace is sized for k).
  if ((op == Op::sparse_mla || op == Op::indexer_topk) && spec.topk > 0 && call.topk > spec.topk) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("{}: this kernel was made for topk up to {} but the call has topk {}. "
                            "Make a kernel for the call's spec (latte::run does).",
                            to_string(op), spec.topk, call.topk));
  }
}

}  // namespace detail
}  // namespace latte
