// The limits every JSON input shares (model config, policy, plugin capabilities; from text and
// from files): nesting depth, size and duplicate keys, each refused with a clear error instead
// of a crash; and show_json, which quotes values in errors, stays bounded.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "core/json_text.hpp"
#include "latte/capabilities.hpp"
#include "latte/error.hpp"
#include "latte/policy.hpp"
#include "latte/spec.hpp"

namespace latte {
namespace {

using ::testing::HasSubstr;

struct Parser {
  const char* name;
  std::function<void(const std::string&)> parse;
  ErrorCode code;
  std::string valid;  // a valid input as "{...}" around which the tests build bad ones
};
void PrintTo(const Parser& p, std::ostream* os) { *os << p.name; }

const std::string kConfig =
    R"({"num_attention_heads": 64, "q_lora_rank": 2048, "kv_lora_rank": 512, "qk_nope_head_dim": 192,
        "qk_rope_head_dim": 64, "v_head_dim": 256, "max_position_embeddings": 202752)";
const std::string kPolicy = R"({"latte_policy": 1, "rules": [{"name": "a", "order": ["cpu.*"]}])";
const std::string kCaps = R"({"ops": ["sparse_mla"], "devices": ["cpu"])";

std::vector<Parser> parsers() {
  return {
      {"ModelConfig", [](const std::string& t) { (void)parse_model_config(t, "cfg.json"); }, ErrorCode::config_error, kConfig},
      {"Policy", [](const std::string& t) { (void)Policy::parse(t, "pol.json", PolicyLayer::user); }, ErrorCode::policy_error, kPolicy},
      {"Capabilities", [](const std::string& t) { (void)capabilities_from_json(t, "plugin.so"); }, ErrorCode::plugin_error, kCaps},
  };
}

// The error text, or "" when the parser accepts the input.
std::string outcome(const Parser& p, const std::string& text) {
  try {
    p.parse(text);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), p.code) << e.what();
    return e.what();
  }
  return {};
}

std::string refusal(const Parser& p, const std::string& text) {
  std::string what = outcome(p, text);
  if (what.empty()) ADD_FAILURE() << p.name << " accepted the input";
  return what;
}

std::string nested(std::size_t depth, char open = '[', char close = ']') {
  return std::string(depth, open) + std::string(depth, close);
}

class JsonLimits : public ::testing::TestWithParam<Parser> {};

TEST_P(JsonLimits, ValidInputIsAccepted) { EXPECT_NO_THROW(GetParam().parse(GetParam().valid + "}")); }

TEST_P(JsonLimits, DeepNestingIsRefusedWithTheDepthAndTheLimit) {
  // 100000 levels overflowed the stack of every latte process before the limit.
  EXPECT_THAT(refusal(GetParam(), nested(100000)), HasSubstr("nested 100000 levels deep, over latte's limit of 64"));
  std::string objects;
  for (int i = 0; i < 50000; ++i) objects += R"({"a":)";
  objects += "1" + std::string(50000, '}');
  EXPECT_THAT(refusal(GetParam(), objects), HasSubstr("nested 50000 levels deep"));
  // Inside a valid input, under a known key.
  EXPECT_THAT(refusal(GetParam(), GetParam().valid + R"(, "notes": )" + nested(65) + "}"),
              HasSubstr("nested 66 levels deep"));
}

TEST_P(JsonLimits, DepthAtTheLimitIsNotADepthError) {
  // 64 levels parse; the parser then refuses the value for what it is, not for its depth.
  const std::string text = refusal(GetParam(), nested(detail::kMaxJsonDepth));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("levels deep")));
}

TEST_P(JsonLimits, OversizedInputIsRefusedWithTheSizeAndTheLimit) {
  const std::string big = GetParam().valid + R"(, "description": ")" + std::string(5 << 20, 'x') + "\"}";
  EXPECT_THAT(refusal(GetParam(), big), HasSubstr(std::to_string(big.size()) + " bytes of JSON, over latte's limit of 4194304 bytes"));
}

TEST_P(JsonLimits, DuplicateKeyIsRefusedNamingTheKey) {
  const std::string& v = GetParam().valid;
  const std::string first_key = v.substr(v.find('"'), v.find('"', v.find('"') + 1) - v.find('"') + 1);
  EXPECT_THAT(refusal(GetParam(), v + ", " + first_key + ": 1}"),
              HasSubstr("key " + first_key + " appears twice at the top level; JSON readers disagree"));
  // Nested, with the path of the object that holds it.
  EXPECT_THAT(refusal(GetParam(), v + R"(, "x": [0, {"y": {"k": 1, "k": 2}}]})"),
              HasSubstr(R"(key "k" appears twice in x[1].y;)"));
  // The same key in two different objects is fine for the JSON reader (the parser may still
  // refuse "x" as an unknown field, but not as a duplicate).
  EXPECT_THAT(outcome(GetParam(), v + R"(, "x": [{"k": 1}, {"k": 2}]})"), ::testing::Not(HasSubstr("appears twice")));
}

TEST_P(JsonLimits, NotJsonSaysSo) {
  EXPECT_THAT(refusal(GetParam(), GetParam().valid), HasSubstr("not valid JSON"));
  // A parse error quotes the token it stopped at: an unterminated 1 MB string is cut.
  EXPECT_LT(refusal(GetParam(), "\"" + std::string(1 << 20, 'x')).size(), 1000u);
}

INSTANTIATE_TEST_SUITE_P(EveryParser, JsonLimits, ::testing::ValuesIn(parsers()),
                         [](const auto& info) { return std::string(info.param.name); });

// ---- Files ------------------------------------------------------------------------------

std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

template <typename F>
std::string file_refusal(F&& load) {
  try {
    load();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "accepted";
  return {};
}

TEST(JsonFiles, DeepPolicyAndConfigFilesAreRefused) {
  const std::string deep = write_temp("latte_deep.json", nested(80000));
  EXPECT_THAT(file_refusal([&] { (void)Policy::load_file(deep, PolicyLayer::user); }),
              HasSubstr("policy error in " + deep + ": JSON nested 80000 levels deep"));
  EXPECT_THAT(file_refusal([&] { (void)load_model(deep); }),
              HasSubstr("model config " + deep + ": JSON nested 80000 levels deep"));
}

TEST(JsonFiles, HugeFilesAreRefusedBeforeBeingRead) {
  const std::string big = write_temp("latte_big.json", std::string((4 << 20) + 1, ' '));
  EXPECT_THAT(file_refusal([&] { (void)Policy::load_file(big, PolicyLayer::user); }),
              HasSubstr("4194305 bytes of JSON, over latte's limit"));
  EXPECT_THAT(file_refusal([&] { (void)load_model(big); }), HasSubstr("4194305 bytes of JSON"));
  // Not a regular file: an endless one is read only up to the limit.
  if (std::filesystem::exists("/dev/zero")) {
    EXPECT_THAT(file_refusal([&] { (void)Policy::load_file("/dev/zero", PolicyLayer::user); }),
                HasSubstr("more than 4194304 bytes of JSON"));
  }
}

// ---- show_json --------------------------------------------------------------------------

TEST(ShowJson, CutsLongValuesAndNeverRecursesDeeply) {
  EXPECT_EQ(detail::show_json(nlohmann::json::parse(R"({"b": [1, 2.5, "x"], "a": null})")),
            R"({"a":null,"b":[1,2.5,"x"]})");
  EXPECT_EQ(detail::show_json(std::string(200, 'y')), "\"" + std::string(76, 'y') + "...");
  // A value built in code (not parsed) can be any depth: show_json stops at the depth limit.
  nlohmann::json deep = nlohmann::json::array();
  nlohmann::json* tip = &deep;
  for (int i = 0; i < 100000; ++i) {
    tip->push_back(nlohmann::json::array());
    tip = &tip->back();
  }
  const std::string text = detail::show_json(deep);
  EXPECT_EQ(text.size(), 80u);
  EXPECT_EQ(text.substr(0, 4), "[[[[");
  nlohmann::json wide = nlohmann::json::array();
  for (int i = 0; i < 100000; ++i) wide.push_back(i);
  EXPECT_EQ(detail::show_json(wide).size(), 80u);
}

}  // namespace
}  // namespace latte
