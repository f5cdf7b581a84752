// The selector's decision as a pure function of (backends, policies, spec, device, force,
// exclude): Context adds the cache, the locks and the environment around it.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "latte/backend.hpp"
#include "latte/policy.hpp"
#include "latte/selector.hpp"

namespace latte::detail {

// One "[op=]id-glob" entry of a force or exclude list, and where it came from.
struct ChoiceEntry {
  std::optional<Op> op;  // absent: force applies to the ops the backend declares; exclude to all
  std::string glob;
  std::string origin;    // "SelectOptions.force", "LATTE_BACKEND", ...
  [[nodiscard]] std::string text() const;  // "LATTE_BACKEND=sparse_mla=cuda.*"
};

// Splits `raw` on ',' and parses each entry; throws Error(invalid_argument) for an unknown op
// prefix or an empty glob.
[[nodiscard]] std::vector<ChoiceEntry> parse_choice_entries(const std::vector<std::string>& raw,
                                                            const std::string& origin);

struct Decision {
  Selection selection;
  // Non-empty when the forced backends all refuse: select() throws it (never a fallback).
  std::string forced_error;
};

// Throws Error(not_found) for a forced or excluded glob that matches no registered id, and
// Error(invalid_argument) for a backend both forced and excluded.
[[nodiscard]] Decision decide(const std::vector<std::shared_ptr<const Backend>>& backends,
                              const PolicyStack& policies, const AttentionSpec& spec,
                              const DeviceInfo& device, const std::vector<ChoiceEntry>& force,
                              const std::vector<ChoiceEntry>& exclude);

// check() that turns an exception from a backend's custom rule into a reason, so that one
// broken backend cannot take selection down.
[[nodiscard]] std::vector<Reason> safe_check(const Backend& backend, const AttentionSpec& spec,
                                             const DeviceInfo& device);

// A backend the selector did not consider: excluded, or not among the forced ones.
struct HeldBack {
  std::shared_ptr<const Backend> backend;
  std::string field;  // "exclude" or "force"
  std::string why;    // "excluded by LATTE_EXCLUDE=cuda.*"
};

// The single changes (cache format, query dtype, block size, s_q, TP, device) under which some
// of `candidates` would accept; then held-back backends that would accept as is.
[[nodiscard]] std::vector<Suggestion> suggest(
    const std::vector<std::shared_ptr<const Backend>>& candidates,
    const std::vector<HeldBack>& held_back, const AttentionSpec& spec, const DeviceInfo& device);

// The selection variables (LATTE_BACKEND, LATTE_EXCLUDE, ...) as set, "" when unset: read here and
// in context.cpp only (tuning variables have their own reader, src/kernels/common/env_knob.hpp). No
// allocation: the per-call cache keys on them.
[[nodiscard]] const char* selection_env(const char* name);

}  // namespace latte::detail
