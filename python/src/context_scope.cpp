#include "context_scope.hpp"

#include "latte/policy.hpp"
#include "latte/registry.hpp"

namespace latte::python {

Policy PolicySource::load() const {
  if (path) return Policy::load_file(*path, PolicyLayer::user);
  return Policy::parse(*json, "<policy dict>", PolicyLayer::user);
}

ScopedContext::ScopedContext(const PolicySource& policy) {
  if (!policy.given()) return;
  Context& global = Context::global();  // first use reads LATTE_PLUGIN_PATH: its rules count too
  own_ = std::make_unique<Context>(global.registry());
  const PolicyStack layers = global.policies();  // a copy: keep it alive while iterating
  for (const Policy& p : layers.policies()) {
    if (p.layer == PolicyLayer::plugin) own_->add_policy(p);
  }
  own_->add_policy(policy.load());
}

}  // namespace latte::python
