#include "kernels/common/env_knob.hpp"

#include <cstdlib>
#include <cstring>

#include "latte/error.hpp"

extern char** environ;  // POSIX

namespace latte::cuda {
namespace {

thread_local const TuningEnv* current = nullptr;

bool is_tuning(const char* entry) {
  return std::strncmp(entry, "LATTE_CUDA_", 11) == 0 || std::strncmp(entry, "LATTE_HOPPER_", 13) == 0;
}

// The value of `name`: the scope's capture inside a kernel, else the environment.
const char* knob_value(const char* name) {
  return current ? current->get(name) : std::getenv(name);
}

}  // namespace

TuningEnv TuningEnv::capture() {
  TuningEnv env;
  for (char** e = environ; e && *e; ++e) {
    if (!is_tuning(*e)) continue;
    const char* eq = std::strchr(*e, '=');
    if (eq) env.values_.emplace_back(std::string(*e, static_cast<std::size_t>(eq - *e)), std::string(eq + 1));
  }
  return env;
}

const char* TuningEnv::get(const char* name) const {
  for (const auto& [key, value] : values_) {
    if (key == name) return value.c_str();
  }
  return nullptr;
}

ScopedTuning::ScopedTuning(const TuningEnv& env) : previous_(current) { current = &env; }
ScopedTuning::~ScopedTuning() { current = previous_; }

std::string tuning_env_key() {
  std::string key;
  for (char** e = environ; e && *e; ++e) {
    if (is_tuning(*e)) (key += *e) += '\x1f';
  }
  return key;
}

int env_knob_choice(const char* owner, const char* name, std::initializer_list<const char*> choices) {
  const char* value = knob_value(name);
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

int env_knob_int(const char* owner, const char* name, bool (*accepts)(int), const char* accepted) {
  const char* value = knob_value(name);
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
