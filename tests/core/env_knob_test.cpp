// The tuning-variable reader (src/kernels/common/env_knob.hpp, docs/kernels/knobs.md): unset and empty mean
// the default, a listed value is taken, anything else is refused naming the variable, the value
// and what it accepts.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "kernels/common/env_knob.hpp"

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
