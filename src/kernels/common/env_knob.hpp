// The one reader of latte's tuning variables (LATTE_CUDA_*, LATTE_HOPPER_*): switches of the
// CUDA launchers for measurements and tests, each listed with its values and default in
// docs/kernels/knobs.md. A value that is set but not accepted throws invalid_argument naming
// the variable, the value and the accepted ones: a typo must never fall back to the default
// silently. Host code.
//
// Kernels read the variables when they are made: a kernel captures a TuningEnv in make() and
// computes inside a ScopedTuning of it, so every knob its launchers read has the value it had
// at make(); the kernel cache keys kernels by tuning_env_key(), so a changed variable makes a
// new kernel. Launchers called outside a kernel (tests, benchmarks) read the environment.
#pragma once

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

namespace latte::cuda {

// The tuning variables set in the environment, captured at one moment.
class TuningEnv {
 public:
  static TuningEnv capture();
  // The captured value of `name`, or null when it was unset.
  [[nodiscard]] const char* get(const char* name) const;

 private:
  std::vector<std::pair<std::string, std::string>> values_;
};

// Makes `env` the source of every knob read on this thread for the scope.
class ScopedTuning {
 public:
  explicit ScopedTuning(const TuningEnv& env);
  ~ScopedTuning();
  ScopedTuning(const ScopedTuning&) = delete;
  ScopedTuning& operator=(const ScopedTuning&) = delete;

 private:
  const TuningEnv* previous_;
};

// Every tuning variable set now, as one string ("NAME=value\x1f..."; empty when none is set):
// part of the kernel cache's key.
[[nodiscard]] std::string tuning_env_key();

// Which of `choices` variable `name` holds: its index, or -1 when unset or empty. `owner`
// (e.g. "cuda.indexer") starts the error text.
int env_knob_choice(const char* owner, const char* name, std::initializer_list<const char*> choices);

// Variable `name` as a non-negative integer that `accepts` takes (`accepted` describes them),
// or 0 when unset or empty.
int env_knob_int(const char* owner, const char* name, bool (*accepts)(int), const char* accepted);

}  // namespace latte::cuda
