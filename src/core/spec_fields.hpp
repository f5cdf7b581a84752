// The integer fields of AttentionSpec, declared once. Capabilities JSON, the declared check,
// policy conditions, suggestions, the selection cache key, a selection's JSON and the plugin
// adapter all iterate this table, so that a new integer field is a member of AttentionSpec, a
// member of Capabilities and one row here (docs/architecture.md, "Adding a spec field").
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "core/op_traits.hpp"
#include "latte/capabilities.hpp"
#include "latte/plugin.h"
#include "latte/spec.hpp"

namespace latte::detail {

// An integer member of S, int or int64_t wide (absent when both are null).
template <typename S>
struct IntMember {
  int S::*narrow = nullptr;
  int64_t S::*wide = nullptr;

  [[nodiscard]] constexpr bool present() const { return narrow != nullptr || wide != nullptr; }
  [[nodiscard]] int64_t get(const S& s) const { return narrow ? int64_t{s.*narrow} : s.*wide; }
  void set(S& s, int64_t value) const {
    if (narrow) {
      s.*narrow = static_cast<int>(value);
    } else {
      s.*wide = value;
    }
  }
};

template <typename S>
constexpr IntMember<S> member(int S::*m) {
  return {m, nullptr};
}
template <typename S>
constexpr IntMember<S> member(int64_t S::*m) {
  return {nullptr, m};
}

struct SpecIntField {
  // The member's name: Reason::field, the key in a selection's JSON, a suggestion's field.
  std::string_view name;
  IntMember<AttentionSpec> spec;
  IntMember<latte_spec_v1> c_abi;  // absent: plugin ABI v1 has no such field
  // What a backend declares. Null for fields no backend declares (tp, head_dim_v): they then
  // have no capabilities key, reason or policy condition.
  IntRule Capabilities::*rule = nullptr;
  std::string_view caps_key;     // key in capabilities JSON
  std::string_view policy_key;   // key of a policy condition
  std::string_view reason_code;  // Reason::code of a refusal
  // The field in a refusal's sentence: "needs {words} {rule}; this spec has {value}".
  std::string_view words;
  std::string_view indexer_words;  // the same for indexer ops, when it differs
  OpSet ops = kAllOps;             // the ops the declared rule is checked for
  // 0 means "not known yet": never refused, and matched by no policy condition.
  bool zero_is_unknown = false;
  // Appended to the value in a refusal's sentence ("8 (64 heads / tp 8)"); null: nothing.
  std::string (*got_detail)(const AttentionSpec&) = nullptr;
  // Values "what would work" tries in place of the spec's, plus, when alternatives_from_caps,
  // the values the candidates' rules list (one_of). Empty: not varied.
  std::span<const int64_t> alternatives;
  bool alternatives_from_caps = false;

  [[nodiscard]] bool applies(Op op) const { return (ops & op_bit(op)) != 0; }
  [[nodiscard]] bool known(int64_t value) const { return !zero_is_unknown || value > 0; }
  [[nodiscard]] std::string_view words_for(Op op) const {
    return op_is_indexer(op) && !indexer_words.empty() ? indexer_words : words;
  }
};

// Every integer field of AttentionSpec, in the order capabilities JSON and reasons list them.
[[nodiscard]] std::span<const SpecIntField> spec_int_fields();
// The row of a member (for code that spells out one field, such as AttentionSpec::summary).
[[nodiscard]] const SpecIntField& spec_int_field(int AttentionSpec::*member);
// The row whose policy key / capabilities key is `key`; null when none is.
[[nodiscard]] const SpecIntField* policy_int_field(std::string_view key);
[[nodiscard]] const SpecIntField* caps_int_field(std::string_view key);
// The declared integer fields' keys, as error messages list them: "heads, head_dim, ...".
[[nodiscard]] std::string policy_int_keys();
[[nodiscard]] std::string caps_int_keys();

// Every field of the spec, appended to a cache key: two specs get the same text only when they
// are equal.
void append_spec_key(std::string& key, const AttentionSpec& spec);

}  // namespace latte::detail
