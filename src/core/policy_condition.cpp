// Matching a policy rule's conditions against (spec, device), and rule labels.
#include <fmt/format.h>

#include <algorithm>

#include "core/spec_fields.hpp"
#include "latte/policy.hpp"
#include "latte/registry.hpp"

namespace latte {
namespace {

bool has_word(const std::vector<std::string>& words, std::string_view word) {
  return std::find(words.begin(), words.end(), word) != words.end();
}

bool any_accepts(const std::vector<IntRule>& rules, int64_t value) {
  return std::any_of(rules.begin(), rules.end(), [&](const IntRule& r) { return r.accepts(value); });
}

}  // namespace

std::string_view to_string(PolicyLayer layer) {
  switch (layer) {
    case PolicyLayer::defaults: return "defaults";
    case PolicyLayer::plugin: return "plugin";
    case PolicyLayer::user: return "user";
  }
  return "unknown";
}

bool PolicyCondition::matches(const AttentionSpec& spec, const DeviceInfo& device) const {
  if (key == "device") return has_word(words, to_string(device.kind));
  if (key == "arch") return device.kind == DeviceKind::cuda && any_accepts(numbers, device.arch());
  if (key == "op") return has_word(words, to_string(spec.op));
  if (key == "kv_cache") return has_word(words, to_string(spec.kv_cache));
  if (key == "q_dtype") return has_word(words, to_string(spec.q_dtype));
  // An unknown value (max_tokens 0) matches no condition: a rule for small batches should not
  // fire when the batch size is not known.
  if (const detail::SpecIntField* f = detail::policy_int_field(key)) {
    const int64_t value = f->spec.get(spec);
    return f->known(value) && any_accepts(numbers, value);
  }
  if (key == "model") {
    return std::any_of(words.begin(), words.end(),
                       [&](const std::string& pattern) { return glob_match(pattern, spec.model); });
  }
  return false;  // Policy::parse admits only the keys above
}

bool PolicyRule::matches(const AttentionSpec& spec, const DeviceInfo& device) const {
  return std::all_of(when.begin(), when.end(),
                     [&](const PolicyCondition& c) { return c.matches(spec, device); });
}

std::string PolicyRule::label() const {
  return fmt::format("{}:{}#{}", to_string(layer), source, name);
}

}  // namespace latte
