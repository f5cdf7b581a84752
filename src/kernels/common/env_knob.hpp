// The one reader of latte's tuning variables (LATTE_CUDA_*, LATTE_HOPPER_*): switches of the
// CUDA launchers for measurements and tests, each listed with its values and default in
// docs/kernels/knobs.md. A value that is set but not accepted throws invalid_argument naming
// the variable, the value and the accepted ones: a typo must never fall back to the default
// silently. Host code.
#pragma once

#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>

#include "latte/error.hpp"

namespace latte::cuda {

// Which of `choices` variable `name` holds: its index, or -1 when unset or empty. `owner`
// (e.g. "cuda.indexer") starts the error text.
inline int env_knob_choice(const char* owner, const char* name, std::initializer_list<const char*> choices) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return -1;
  int i = 0;
  std::string accepted;
  for (const char* c : choices) {
    if (std::strcmp(value, c) == 0) return i;
    accepted += (i++ ? ", " : "") + std::string(c);
  }
  throw Error(ErrorCode::invalid_argument, std::string(owner) + ": " + name + "=" + value +
                                               " is not accepted (one of " + accepted +
                                               "); unset it for the default");
}

// Variable `name` as a non-negative integer that `accepts` takes (`accepted` describes them),
// or 0 when unset or empty.
inline int env_knob_int(const char* owner, const char* name, bool (*accepts)(int), const char* accepted) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return 0;
  char* end = nullptr;
  const long v = std::strtol(value, &end, 10);
  const bool number = value[0] >= '0' && value[0] <= '9' && *end == '\0' && v <= (1L << 30);
  if (!number || !accepts(static_cast<int>(v))) {
    throw Error(ErrorCode::invalid_argument, std::string(owner) + ": " + name + "=" + value +
                                                 " is not accepted (" + accepted +
                                                 "); unset it for the default");
  }
  return static_cast<int>(v);
}

}  // namespace latte::cuda
