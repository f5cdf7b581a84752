// The Context a select() or run_dsa_step() call uses. Without a policy of its own that is
// Context::global() (the one the ops use). With one, it is a private Context over the same
// registry holding the global plugin rules and that policy as the user layer: the CLI's
// --policy, without the call changing the policy later calls see (latte.set_policy does that).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "latte/context.hpp"

namespace latte::python {

struct PolicySource {
  std::optional<std::string> path;  // a policy JSON file
  std::optional<std::string> json;  // or its text (Python passes a dict as json.dumps)
  [[nodiscard]] bool given() const { return path.has_value() || json.has_value(); }
  [[nodiscard]] Policy load() const;  // the user-layer Policy; throws policy_error / not_found
};

class ScopedContext {
 public:
  explicit ScopedContext(const PolicySource& policy);
  [[nodiscard]] Context& get() const { return own_ ? *own_ : Context::global(); }

 private:
  std::unique_ptr<Context> own_;
};

}  // namespace latte::python
