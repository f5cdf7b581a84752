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
  // Force: "[op=]id-glob" entries; a plain glob applies to the ops its backends declare.
  // A forced backend that refuses the spec is an error listing its reasons.
  std::vector<std::string> force;
  std::vector<std::string> exclude;   // "[op=]id-glob" entries, removed with reason "excluded"
  bool use_environment = true;        // read LATTE_BACKEND and LATTE_EXCLUDE
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

  [[nodiscard]] std::string explain() const;  // the decision and a table of every backend
  [[nodiscard]] std::string to_json() const;  // stable keys, see docs/cli.md
};

}  // namespace latte
