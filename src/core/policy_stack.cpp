// The policy layers in force and the ranking they produce.
#include <algorithm>

#include "core/text.hpp"
#include "latte/policy.hpp"
#include "latte/registry.hpp"

namespace latte {

void PolicyStack::add(Policy policy) { policies_.push_back(std::move(policy)); }

void PolicyStack::clear(PolicyLayer layer) {
  std::erase_if(policies_, [&](const Policy& p) { return p.layer == layer; });
}

std::vector<const PolicyRule*> PolicyStack::rules_by_precedence() const {
  std::vector<const PolicyRule*> out;
  for (PolicyLayer layer : {PolicyLayer::user, PolicyLayer::plugin, PolicyLayer::defaults}) {
    for (const Policy& policy : policies_) {
      if (policy.layer != layer) continue;
      for (const PolicyRule& rule : policy.rules()) out.push_back(&rule);
    }
  }
  return out;
}

std::vector<Ranking> PolicyStack::rank(const std::vector<std::string>& ids, const AttentionSpec& spec,
                                       const DeviceInfo& device) const {
  std::vector<std::string> sorted = ids;
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  std::vector<bool> placed(sorted.size(), false);
  std::vector<Ranking> out;
  out.reserve(sorted.size());

  for (const PolicyRule* rule : rules_by_precedence()) {
    if (out.size() == sorted.size()) break;
    if (!rule->matches(spec, device)) continue;
    std::string label;
    for (std::size_t p = 0; p < rule->order.size(); ++p) {
      for (std::size_t i = 0; i < sorted.size(); ++i) {
        if (placed[i] || !glob_match(rule->order[p], sorted[i])) continue;
        if (label.empty()) label = rule->label();
        placed[i] = true;
        out.push_back(Ranking{sorted[i], static_cast<int>(out.size()) + 1, label, static_cast<int>(p)});
      }
    }
  }
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    if (!placed[i]) out.push_back(Ranking{sorted[i], static_cast<int>(out.size()) + 1, kNoRuleLabel, -1});
  }
  return out;
}

uint64_t PolicyStack::fingerprint() const {
  uint64_t hash = detail::fnv1a("latte-policy-stack");
  for (const Policy& policy : policies_) {
    const uint64_t fp = policy.fingerprint();
    hash = detail::fnv1a(std::string_view(reinterpret_cast<const char*>(&fp), sizeof fp), hash);
    hash = detail::fnv1a(to_string(policy.layer), hash);
  }
  return hash;
}

}  // namespace latte
