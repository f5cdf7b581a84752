// check(): the declared capabilities first, then the backend's own rules.
#include "latte/backend.hpp"

#include <algorithm>

namespace latte {

std::vector<Reason> check(const Backend& backend, const AttentionSpec& spec,
                          const DeviceInfo& device) {
  std::vector<Reason> reasons = check_declared(backend.info().caps, spec, device);
  // Custom rules are written for the ops and device kinds a backend declares: do not ask them
  // about anything else.
  const bool moot = std::any_of(reasons.begin(), reasons.end(), [](const Reason& r) {
    return r.code == "op" || r.code == "device_kind";
  });
  if (!moot) {
    std::vector<Reason> custom = backend.custom_checks(spec, device);
    reasons.insert(reasons.end(), std::make_move_iterator(custom.begin()),
                   std::make_move_iterator(custom.end()));
  }
  return reasons;
}

}  // namespace latte
