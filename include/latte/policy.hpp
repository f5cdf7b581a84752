// Priority policy as data: ordered rules "when {conditions} -> order [id patterns]".
// Format and layering: docs/architecture.md ("Policy").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "latte/capabilities.hpp"
#include "latte/device.hpp"
#include "latte/spec.hpp"

namespace latte {

// Later layers win: a user rule outranks a plugin rule, which outranks a default rule.
enum class PolicyLayer : uint8_t { defaults, plugin, user };
[[nodiscard]] std::string_view to_string(PolicyLayer layer);

// One condition of a rule's "when": key (device, arch, op, kv_cache, q_dtype, heads, head_dim,
// block_size, topk, s_q, tokens, model) and the values that match (any of them).
struct PolicyCondition {
  std::string key;
  std::vector<std::string> words;  // for device, op, kv_cache, q_dtype, model (glob)
  std::vector<IntRule> numbers;    // for arch and the integer keys
  std::string text;                // as written, for explanations: "arch >= 89"
  [[nodiscard]] bool matches(const AttentionSpec& spec, const DeviceInfo& device) const;
};

struct PolicyRule {
  std::string name;
  std::vector<PolicyCondition> when;   // all must hold; empty = always
  std::vector<std::string> order;      // backend id globs, best first
  PolicyLayer layer = PolicyLayer::defaults;
  std::string source;                  // file path, "built-in", or the plugin's path
  [[nodiscard]] bool matches(const AttentionSpec& spec, const DeviceInfo& device) const;
  [[nodiscard]] std::string label() const;  // "user:/etc/latte.json#prefer-cuda"
};

class Policy {
 public:
  // Throws latte::Error(policy_error) naming the source, the key (a JSON path such as
  // rules[2].when.arch) and the offending value.
  [[nodiscard]] static Policy parse(std::string_view json_text, std::string_view source,
                                    PolicyLayer layer);
  [[nodiscard]] static Policy load_file(const std::string& path, PolicyLayer layer);
  // The default policy shipped with latte (configs/policy/default.json, compiled in).
  [[nodiscard]] static const Policy& builtin();

  [[nodiscard]] const std::vector<PolicyRule>& rules() const { return rules_; }
  // Canonical form, parseable again to the same rules: keys in a fixed order, single values
  // unwrapped, comparisons normalised ("<16" -> "<=15"), descriptions dropped.
  [[nodiscard]] std::string to_json() const;
  [[nodiscard]] uint64_t fingerprint() const;  // for cache keys

  std::vector<PolicyRule> rules_;
  PolicyLayer layer = PolicyLayer::defaults;  // the layer parse() was given (rules carry it too)
  std::string source;                         // the source parse() was given
};

inline constexpr const char* kNoRuleLabel = "(no rule: ranked last by id)";

// A backend's place in the ranking and the rule that put it there.
struct Ranking {
  std::string id;
  int rank = 0;                // 1 = best
  std::string rule;            // PolicyRule::label(), or kNoRuleLabel
  int pattern_index = -1;      // index into that rule's order
};

// The layers in force, lowest precedence first.
class PolicyStack {
 public:
  void add(Policy policy);     // appended to its layer
  void clear(PolicyLayer layer);
  [[nodiscard]] std::vector<const PolicyRule*> rules_by_precedence() const;  // user first
  // Rank `ids`: walk matching rules by precedence; within a rule, by pattern order and then
  // id; ids no rule names come last in id order. Precedence: the user layer, then plugins,
  // then defaults; within a layer, policies in the order added; within a policy, file order.
  [[nodiscard]] std::vector<Ranking> rank(const std::vector<std::string>& ids,
                                          const AttentionSpec& spec,
                                          const DeviceInfo& device) const;
  [[nodiscard]] uint64_t fingerprint() const;
  [[nodiscard]] const std::vector<Policy>& policies() const { return policies_; }

 private:
  std::vector<Policy> policies_;
};

}  // namespace latte
