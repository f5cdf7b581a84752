// The selector: valid backends ranked by the policy, rejected ones with their reasons,
// and, when nothing is valid, the nearest changes that would make something valid.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "latte/backend.hpp"
#include "latte/policy.hpp"

namespace latte {

struct SelectOptions {
  // Force: "[op=]id-glob" entries (each may be a comma-separated list); a plain glob applies to
  // the ops its backends declare. A forced backend that refuses the spec is an error listing
  // its reasons; a glob that matches no registered backend is Error(not_found). The other
  // backends are rejected with reason code "not_forced".
  std::vector<std::string> force;
  // "[op=]id-glob" entries, removed with reason code "excluded"; a plain glob excludes from
  // every op. A backend both forced and excluded is Error(invalid_argument).
  std::vector<std::string> exclude;
  // Also read LATTE_BACKEND (force) and LATTE_EXCLUDE (exclude), same syntax, added to the above.
  bool use_environment = true;
};

struct RejectedBackend {
  std::string id;
  std::vector<Reason> reasons;
};

// "fp8_ds_mla needs sm_89+ on X; bf16 would be accepted by Y"
struct Suggestion {
  std::string field;    // "kv_cache", "device", "tp", "block_size", ...
  std::string value;    // the value that would work
  std::vector<std::string> backends;  // the backends that would then accept
  std::string text;
};

struct Selection {
  std::string chosen;                        // id of the best valid backend
  std::shared_ptr<const Backend> backend;
  AttentionSpec spec;
  DeviceInfo device;
  std::vector<Ranking> valid;                // best first
  std::vector<RejectedBackend> rejected;     // in id order
  std::vector<std::string> forced;           // the force entries that applied
  std::vector<std::string> excluded;         // the exclude entries that applied
  std::vector<Suggestion> suggestions;       // filled when nothing is valid

  [[nodiscard]] bool ok() const { return !chosen.empty(); }
  // The decision and a table of every backend (id | chosen / #rank / rejected | rule or
  // reasons), then the suggestions when nothing is valid. For a terminal; not for parsing.
  [[nodiscard]] std::string explain() const;
  // The same as JSON with stable keys (docs/architecture.md, "Selection JSON").
  [[nodiscard]] std::string to_json() const;
};

}  // namespace latte
