// The table of AttentionSpec's integer fields (spec_fields.hpp) and the cache key of a spec.
#include "core/spec_fields.hpp"

#include <fmt/format.h>

#include <array>
#include <cstring>
#include <iterator>
#include <type_traits>

#include "core/text.hpp"
#include "latte/error.hpp"

namespace latte::detail {
namespace {

static_assert(std::is_same_v<int32_t, int>, "latte_spec_v1's int32_t fields are read as int members");

// " (64 heads / tp 8)": heads per rank come from splitting the model's heads.
std::string heads_split(const AttentionSpec& spec) {
  if (!op_heads_split_by_tp(spec.op) || spec.tp <= 1) return {};
  return fmt::format(" ({} heads / tp {})", int64_t{spec.num_heads} * spec.tp, spec.tp);
}

// " (MLA without rope: q and cache rows are the 512 latent values)": why an MLA head_dim is 512.
std::string head_dim_meaning(const AttentionSpec& spec) {
  if (!op_uses_mla_cache(spec.op) || spec.head_dim != kLatentDim) return {};
  return " (MLA without rope: q and cache rows are the 512 latent values, rope_dim 0)";
}

// The block sizes "what would work" always tries, besides those the backends list.
constexpr int64_t kBlockSizes[] = {1, 16, 64};
// mla_decode takes 1..kMaxDecodeSq query tokens per request.
constexpr auto kDecodeSqs = [] {
  std::array<int64_t, kMaxDecodeSq> values{};
  for (int i = 0; i < kMaxDecodeSq; ++i) values[static_cast<std::size_t>(i)] = i + 1;
  return values;
}();

using S = AttentionSpec;
using C = latte_spec_v1;

constexpr SpecIntField kFields[] = {
    {.name = "num_heads", .spec = member(&S::num_heads), .c_abi = member(&C::num_heads),
     .rule = &Capabilities::heads, .caps_key = "heads", .policy_key = "heads", .reason_code = "heads",
     .words = "heads per rank", .indexer_words = "index heads", .ops = kQueryOps, .got_detail = heads_split},
    {.name = "tp", .spec = member(&S::tp)},
    {.name = "head_dim", .spec = member(&S::head_dim), .c_abi = member(&C::head_dim),
     .rule = &Capabilities::head_dim, .caps_key = "head_dim", .policy_key = "head_dim", .reason_code = "head_dim",
     .words = "head_dim", .ops = kAllOps & ~op_bit(Op::logical_to_slots), .got_detail = head_dim_meaning},
    {.name = "head_dim_v", .spec = member(&S::head_dim_v), .c_abi = member(&C::head_dim_v)},
    {.name = "block_size", .spec = member(&S::block_size), .c_abi = member(&C::block_size),
     .rule = &Capabilities::block_size, .caps_key = "block_size", .policy_key = "block_size",
     .reason_code = "block_size", .words = "cache block size", .alternatives = kBlockSizes,
     .alternatives_from_caps = true},
    {.name = "topk", .spec = member(&S::topk), .c_abi = member(&C::topk), .rule = &Capabilities::topk,
     .caps_key = "topk", .policy_key = "topk", .reason_code = "topk", .words = "topk",
     .ops = op_bit(Op::sparse_mla) | op_bit(Op::indexer_topk)},
    {.name = "s_q", .spec = member(&S::s_q), .c_abi = member(&C::s_q), .rule = &Capabilities::s_q,
     .caps_key = "s_q", .policy_key = "s_q", .reason_code = "s_q", .words = "query tokens per request (s_q)",
     .ops = op_bit(Op::mla_decode), .alternatives = kDecodeSqs},
    // The pooled indexer's tokens per pool: no backend declares it (plugins, which score single
    // tokens, refuse kpool > 0: pooled_indexer_refusal).
    {.name = "kpool", .spec = member(&S::kpool)},
    // 0 = not known yet (a spec derived from a model before the engine fixes its batch size).
    {.name = "max_tokens", .spec = member(&S::max_tokens), .c_abi = member(&C::max_tokens),
     .rule = &Capabilities::max_tokens, .caps_key = "max_tokens", .policy_key = "tokens",
     .reason_code = "tokens", .words = "tokens per call", .zero_is_unknown = true},
};

template <typename Key>
std::string declared_keys(Key key) {
  std::string out;
  for (const SpecIntField& f : kFields) {
    if (f.rule) out += (out.empty() ? "" : ", ") + std::string(f.*key);
  }
  return out;
}

template <typename Key>
const SpecIntField* find_declared(Key key, std::string_view value) {
  for (const SpecIntField& f : kFields) {
    if (f.rule && f.*key == value) return &f;
  }
  return nullptr;
}

}  // namespace

std::span<const SpecIntField> spec_int_fields() { return kFields; }

const SpecIntField& spec_int_field(int AttentionSpec::*m) {
  for (const SpecIntField& f : kFields) {
    if (f.spec.narrow == m) return f;
  }
  throw Error(ErrorCode::internal, "an int member of AttentionSpec has no row in src/core/spec_fields.cpp");
}

const SpecIntField* policy_int_field(std::string_view key) { return find_declared(&SpecIntField::policy_key, key); }
const SpecIntField* caps_int_field(std::string_view key) { return find_declared(&SpecIntField::caps_key, key); }
std::string policy_int_keys() { return declared_keys(&SpecIntField::policy_key); }
std::string caps_int_keys() { return declared_keys(&SpecIntField::caps_key); }

void append_spec_key(std::string& key, const AttentionSpec& s) {
  uint32_t scale_bits = 0;
  std::memcpy(&scale_bits, &s.scale, sizeof scale_bits);
  // The model name is length-prefixed, so no name can pass for the fields after it.
  fmt::format_to(std::back_inserter(key), "{}|{}:{}|{}|{}|{}|{}|{}|", static_cast<int>(s.op), s.model.size(), s.model,
                 static_cast<int>(s.q_dtype), static_cast<int>(s.kv_cache), scale_bits, s.split_q, s.topk_lens);
  for (const SpecIntField& f : kFields) fmt::format_to(std::back_inserter(key), "{}|", f.spec.get(s));
}

}  // namespace latte::detail
