// Environment switches of the CUDA launchers (measurements and tests), read on the host.
#pragma once

#include <cstdlib>
#include <cstring>

namespace latte::cuda {

// Whether environment variable `name` is set to `value`.
inline bool env_is(const char* name, const char* value) {
  const char* e = std::getenv(name);
  return e != nullptr && std::strcmp(e, value) == 0;
}

}  // namespace latte::cuda
