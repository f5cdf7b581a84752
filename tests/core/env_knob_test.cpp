// The tuning-variable reader (src/kernels/common/env_knob.hpp, docs/kernels/knobs.md): unset and empty mean
// the default, a listed value is taken, anything else is refused naming the variable, the value
// and what it accepts.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "kernels/common/env_knob.hpp"
#include "latte/error.hpp"

namespace {

using latte::Error;
using latte::ErrorCode;
using latte::cuda::env_knob_choice;
using latte::cuda::env_knob_int;

constexpr const char* kVar = "LATTE_TEST_ENV_KNOB";

struct Scoped {
  explicit Scoped(const char* value) { setenv(kVar, value, 1); }
  ~Scoped() { unsetenv(kVar); }
};

std::string refusal(void (*call)()) {
  try {
    call();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return {};
}

TEST(EnvKnob, ChoiceUnsetEmptyAndListed) {
  unsetenv(kVar);
  EXPECT_EQ(env_knob_choice("owner", kVar, {"a", "b"}), -1);
  {
    const Scoped empty("");
    EXPECT_EQ(env_knob_choice("owner", kVar, {"a", "b"}), -1);
  }
  const Scoped b("b");
  EXPECT_EQ(env_knob_choice("owner", kVar, {"a", "b"}), 1);
}

TEST(EnvKnob, ChoiceTypoIsRefusedWithTheAcceptedValues) {
  const Scoped typo("fusd");
  const std::string text = refusal([] { (void)env_knob_choice("cuda.indexer", kVar, {"automatic", "fused", "unfused"}); });
  EXPECT_NE(text.find("cuda.indexer: LATTE_TEST_ENV_KNOB=fusd is not accepted (one of automatic, fused, unfused)"),
            std::string::npos)
      << text;
}

TEST(EnvKnob, IntegerRules) {
  auto multiple_of_32 = [](int v) { return v >= 32 && v % 32 == 0; };
  unsetenv(kVar);
  EXPECT_EQ(env_knob_int("o", kVar, multiple_of_32, "a positive multiple of 32"), 0);
  {
    const Scoped ok("96");
    EXPECT_EQ(env_knob_int("o", kVar, multiple_of_32, "a positive multiple of 32"), 96);
  }
  for (const char* bad : {"100", "-32", "32x", "x", "99999999999"}) {
    const Scoped b(bad);
    try {
      (void)env_knob_int("o", kVar, multiple_of_32, "a positive multiple of 32");
      ADD_FAILURE() << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string(kVar) + "=" + bad + " is not accepted (a positive multiple of 32)"),
                std::string::npos)
          << e.what();
    }
  }
}

}  // namespace

namespace {

// Kernels read the tuning variables at make(): inside a ScopedTuning of a capture, reads return
// the captured values whatever the environment says now; outside, the environment. The kernel
// cache's key changes with any tuning variable, so a changed variable makes a new kernel.
TEST(EnvKnob, AScopeReadsTheCaptureAndTheKeyFollowsTheEnvironment) {
  constexpr const char* kTuning = "LATTE_CUDA_TEST_KNOB";
  unsetenv(kTuning);
  const std::string unset_key = latte::cuda::tuning_env_key();
  setenv(kTuning, "b", 1);
  const latte::cuda::TuningEnv at_make = latte::cuda::TuningEnv::capture();
  const std::string set_key = latte::cuda::tuning_env_key();
  EXPECT_NE(set_key, unset_key);
  EXPECT_NE(set_key.find("LATTE_CUDA_TEST_KNOB=b"), std::string::npos);
  setenv(kTuning, "a", 1);
  EXPECT_NE(latte::cuda::tuning_env_key(), set_key);
  EXPECT_EQ(env_knob_choice("owner", kTuning, {"a", "b"}), 0);  // no scope: the environment
  {
    const latte::cuda::ScopedTuning scope(at_make);
    EXPECT_EQ(env_knob_choice("owner", kTuning, {"a", "b"}), 1);  // the value at make()
    unsetenv(kTuning);
    EXPECT_EQ(env_knob_choice("owner", kTuning, {"a", "b"}), 1);
  }
  EXPECT_EQ(env_knob_choice("owner", kTuning, {"a", "b"}), -1);
  EXPECT_EQ(latte::cuda::tuning_env_key(), unset_key);
  // Variables of other prefixes are not tuning variables.
  setenv("LATTE_BACKEND_TEST_NOT_TUNING", "x", 1);
  EXPECT_EQ(latte::cuda::tuning_env_key(), unset_key);
  unsetenv("LATTE_BACKEND_TEST_NOT_TUNING");
}

}  // namespace
