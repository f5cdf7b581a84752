// Policy as data: conditions, ranking, layering, the canonical form, and a table of malformed
// policies each with the file, the JSON path and the value in its message.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "latte/error.hpp"
#include "latte/policy.hpp"
#include "test_backends.hpp"

namespace latte {
namespace {

using ::testing::HasSubstr;
using testing::glm5_sparse;
using testing::glm5_tp1_fp8;

Policy parse(const std::string& text, PolicyLayer layer = PolicyLayer::user, const std::string& source = "test.json") {
  return Policy::parse(text, source, layer);
}

bool rule_matches(const std::string& when, const AttentionSpec& spec, const DeviceInfo& device) {
  const Policy p = parse(R"({"latte_policy": 1, "rules": [{"name": "r", "when": )" + when + R"(, "order": ["x.*"]}]})");
  return p.rules().at(0).matches(spec, device);
}

std::vector<std::string> ids_of(const std::vector<Ranking>& ranking) {
  std::vector<std::string> out;
  for (const Ranking& r : ranking) out.push_back(r.id);
  return out;
}

TEST(Policy, BuiltinParsesAndSendsCpuToCpuBackends) {
  const Policy& p = Policy::builtin();
  ASSERT_FALSE(p.rules().empty());
  EXPECT_EQ(p.layer, PolicyLayer::defaults);
  PolicyStack stack;
  stack.add(p);
  const auto on_cpu = stack.rank({"cuda.sparse_mla", "cpu.reference", "hopper.sparse_mla"}, glm5_tp1_fp8(),
                                 describe_device("cpu"));
  EXPECT_EQ(on_cpu.front().id, "cpu.reference");
  EXPECT_EQ(on_cpu.front().rule, "defaults:built-in#cpu");
  // Hopper first on sm_90 with 64 heads per rank, the portable kernel first with 8.
  const auto h64 = stack.rank({"cuda.sparse_mla", "hopper.sparse_mla"}, glm5_tp1_fp8(), describe_device("sm_90"));
  EXPECT_EQ(ids_of(h64), (std::vector<std::string>{"hopper.sparse_mla", "cuda.sparse_mla"}));
  const auto h8 = stack.rank({"cuda.sparse_mla", "hopper.sparse_mla"}, glm5_sparse(8), describe_device("sm_90"));
  EXPECT_EQ(ids_of(h8), (std::vector<std::string>{"cuda.sparse_mla", "hopper.sparse_mla"}));
  EXPECT_EQ(h8.front().rule, "defaults:built-in#cuda-attention");
  // Where hopper.mla measured faster: both caches at every token count (one fp8 token through the
  // few-heads kernel in head tiles), at 64 and 128 heads; the rules carry no tokens condition, so
  // an unknown count (0) matches them too.
  const std::vector<std::string> both = {"cuda.sparse_mla", "hopper.sparse_mla"};
  for (const int heads : {64, 128}) {
    AttentionSpec fp8 = glm5_tp1_fp8(2), bf16 = glm5_sparse(1, CacheFormat::bf16);
    bf16.max_tokens = 4;
    fp8.num_heads = bf16.num_heads = heads;
    EXPECT_EQ(stack.rank(both, fp8, describe_device("sm_90")).front().rule, "defaults:built-in#hopper-sparse-mla-fp8")
        << heads;
    EXPECT_EQ(stack.rank(both, bf16, describe_device("sm_90")).front().rule,
              "defaults:built-in#hopper-sparse-mla-bf16")
        << heads;
    for (const int64_t tokens : {int64_t{0}, int64_t{1}}) {
      fp8.max_tokens = tokens;
      const auto one = stack.rank(both, fp8, describe_device("sm_90"));
      EXPECT_EQ(ids_of(one), (std::vector<std::string>{"hopper.sparse_mla", "cuda.sparse_mla"})) << tokens;
      EXPECT_EQ(one.front().rule, "defaults:built-in#hopper-sparse-mla-fp8") << tokens;
    }
    for (const int64_t tokens : {int64_t{0}, int64_t{1}, int64_t{3}}) {
      bf16.max_tokens = tokens;
      EXPECT_EQ(stack.rank(both, bf16, describe_device("sm_90")).front().rule,
                "defaults:built-in#hopper-sparse-mla-bf16")
          << tokens;
    }
  }
  AttentionSpec h16 = glm5_tp1_fp8(128);
  h16.num_heads = 16;
  EXPECT_EQ(stack.rank(both, h16, describe_device("sm_90")).front().id, "cuda.sparse_mla");
  // 16 heads over the bf16 cache: hopper.mla up to 4 tokens per call, the portable kernel beyond
  // (and for an unknown count, and over the fp8 cache).
  AttentionSpec h16_bf16 = glm5_sparse(1, CacheFormat::bf16);
  h16_bf16.num_heads = 16;
  for (const int64_t tokens : {int64_t{1}, int64_t{4}}) {
    h16_bf16.max_tokens = tokens;
    EXPECT_EQ(stack.rank(both, h16_bf16, describe_device("sm_90")).front().rule,
              "defaults:built-in#hopper-sparse-mla-bf16-16-heads")
        << tokens;
  }
  for (const int64_t tokens : {int64_t{0}, int64_t{8}, int64_t{128}}) {
    h16_bf16.max_tokens = tokens;
    EXPECT_EQ(stack.rank(both, h16_bf16, describe_device("sm_90")).front().id, "cuda.sparse_mla") << tokens;
  }
  // Few heads over the fp8 cache: hopper.mla's few-heads kernel up to 16 tokens per call at 1-8
  // heads, up to 32 at 9-16; the portable few-heads kernel beyond (and for an unknown count).
  for (const int heads : {1, 4, 8, 9, 12, 16}) {
    const int64_t last = heads <= 8 ? 16 : 32;
    const std::string rule = heads <= 8 ? "hopper-sparse-mla-fp8-8-heads" : "hopper-sparse-mla-fp8-16-heads";
    h16.num_heads = heads;
    for (const int64_t tokens : {int64_t{1}, last}) {
      h16.max_tokens = tokens;
      EXPECT_EQ(stack.rank(both, h16, describe_device("sm_90")).front().rule, "defaults:built-in#" + rule)
          << heads << " heads, " << tokens << " tokens";
    }
    for (const int64_t tokens : {int64_t{0}, last + 1, int64_t{128}}) {
      h16.max_tokens = tokens;
      EXPECT_EQ(stack.rank(both, h16, describe_device("sm_90")).front().id, "cuda.sparse_mla")
          << heads << " heads, " << tokens << " tokens";
    }
  }
  h16.num_heads = 16;
  // Dense decode: hopper.mla first at 64 and 128 heads on sm_90 (any s_q, any request count), the
  // portable kernel at 16 heads and off sm_90.
  AttentionSpec dec = glm5_tp1_fp8(32);
  dec.op = Op::mla_decode;
  dec.topk = 0;
  dec.kv_cache = CacheFormat::bf16;
  for (const int heads : {64, 128}) {
    dec.num_heads = heads;
    for (const int s_q : {1, 2}) {
      dec.s_q = s_q;
      EXPECT_EQ(stack.rank(both, dec, describe_device("sm_90")).front().rule, "defaults:built-in#hopper-mla-decode")
          << heads << " " << s_q;
    }
  }
  dec.s_q = 1;
  EXPECT_EQ(stack.rank(both, dec, describe_device("sm_100")).front().id, "cuda.sparse_mla");
  dec.num_heads = 16;
  EXPECT_EQ(stack.rank(both, dec, describe_device("sm_90")).front().rule, "defaults:built-in#cuda-attention");
  EXPECT_EQ(stack.rank(both, glm5_tp1_fp8(), describe_device("sm_100")).front().id, "cuda.sparse_mla");
}

TEST(PolicyCondition, DeviceArchAndWords) {
  const DeviceInfo cpu = describe_device("cpu"), a100 = describe_device("sm_80"), h100 = describe_device("sm_90"),
                   b200 = describe_device("sm_100"), rtx = describe_device("sm_120");
  const AttentionSpec s = glm5_sparse(8, CacheFormat::fp8_ds_mla);
  EXPECT_TRUE(rule_matches(R"({"device": "cpu"})", s, cpu));
  EXPECT_FALSE(rule_matches(R"({"device": "cpu"})", s, h100));
  EXPECT_TRUE(rule_matches(R"({"arch": 90})", s, h100));
  EXPECT_TRUE(rule_matches(R"({"arch": "sm_90"})", s, h100));
  EXPECT_FALSE(rule_matches(R"({"arch": 90})", s, b200));
  EXPECT_TRUE(rule_matches(R"({"arch": ">=89"})", s, rtx));
  EXPECT_FALSE(rule_matches(R"({"arch": ">=89"})", s, a100));
  EXPECT_FALSE(rule_matches(R"({"arch": ">=0"})", s, cpu));  // the CPU has no arch
  EXPECT_TRUE(rule_matches(R"({"arch": "80..89"})", s, a100));
  EXPECT_FALSE(rule_matches(R"({"arch": "80..89"})", s, h100));
  EXPECT_TRUE(rule_matches(R"({"arch": "<sm_100"})", s, h100));
  EXPECT_FALSE(rule_matches(R"({"arch": "<sm_100"})", s, b200));
  EXPECT_TRUE(rule_matches(R"({"arch": [80, "sm_120"]})", s, rtx));
  EXPECT_TRUE(rule_matches(R"({"op": ["mla_decode", "sparse_mla"]})", s, h100));
  EXPECT_FALSE(rule_matches(R"({"op": "mla_decode"})", s, h100));
  EXPECT_TRUE(rule_matches(R"({"kv_cache": "fp8_ds_mla"})", s, h100));
  EXPECT_FALSE(rule_matches(R"({"kv_cache": "bf16"})", s, h100));
  EXPECT_TRUE(rule_matches(R"({"q_dtype": "bfloat16"})", s, h100));
  EXPECT_TRUE(rule_matches(R"({"model": "glm-*"})", s, h100));
  EXPECT_FALSE(rule_matches(R"({"model": "deepseek-*"})", s, h100));
  EXPECT_TRUE(rule_matches(R"({})", s, h100));
}

TEST(PolicyCondition, NumericKeys) {
  AttentionSpec s = glm5_sparse(8);  // 8 heads, topk 2048, block 64
  const DeviceInfo d = describe_device("sm_90");
  EXPECT_TRUE(rule_matches(R"({"heads": "<=16"})", s, d));
  EXPECT_FALSE(rule_matches(R"({"heads": ">=64"})", s, d));
  EXPECT_TRUE(rule_matches(R"({"heads": [8, 16]})", s, d));
  EXPECT_TRUE(rule_matches(R"({"heads": "1..8"})", s, d));
  EXPECT_FALSE(rule_matches(R"({"heads": "<8"})", s, d));
  EXPECT_TRUE(rule_matches(R"({"heads": ">7"})", s, d));
  EXPECT_TRUE(rule_matches(R"({"head_dim": 576})", s, d));
  EXPECT_TRUE(rule_matches(R"({"block_size": 64, "topk": ">= 2048"})", s, d));
  EXPECT_FALSE(rule_matches(R"({"block_size": 64, "topk": ">4096"})", s, d));
  EXPECT_TRUE(rule_matches(R"({"s_q": 1})", s, d));
  // tokens = max_tokens; unknown (0) matches no tokens condition.
  EXPECT_FALSE(rule_matches(R"({"tokens": "<=16"})", s, d));
  s.max_tokens = 12;
  EXPECT_TRUE(rule_matches(R"({"tokens": "<=16"})", s, d));
  EXPECT_FALSE(rule_matches(R"({"tokens": ">=64"})", s, d));
}

TEST(PolicyStack, RanksByRuleThenPatternThenId) {
  PolicyStack stack;
  stack.add(parse(R"({"latte_policy": 1, "rules": [
      {"name": "fast-first", "when": {"device": "cuda"}, "order": ["fast.*", "cuda.b", "cuda.*"]}]})",
                  PolicyLayer::defaults, "built-in"));
  const auto ranking = stack.rank({"cuda.c", "zzz.other", "cuda.a", "fast.y", "cuda.b", "fast.x"}, glm5_sparse(),
                                  describe_device("sm_90"));
  EXPECT_EQ(ids_of(ranking), (std::vector<std::string>{"fast.x", "fast.y", "cuda.b", "cuda.a", "cuda.c", "zzz.other"}));
  EXPECT_EQ(ranking[0].rank, 1);
  EXPECT_EQ(ranking[5].rank, 6);
  EXPECT_EQ(ranking[2].pattern_index, 1);
  EXPECT_EQ(ranking[3].pattern_index, 2);
  EXPECT_EQ(ranking[0].rule, "defaults:built-in#fast-first");
  EXPECT_EQ(ranking[5].rule, kNoRuleLabel);
  EXPECT_EQ(ranking[5].pattern_index, -1);
}

TEST(PolicyStack, UserOutranksPluginOutranksDefaults) {
  PolicyStack stack;
  const std::string tmpl = R"({"latte_policy": 1, "rules": [{"name": "n", "when": {"op": "sparse_mla"}, "order": ["ID"]}]})";
  const auto with = [&](const std::string& id) {
    std::string t = tmpl;
    return t.replace(t.find("ID"), 2, id);
  };
  stack.add(parse(with("d.backend"), PolicyLayer::defaults, "built-in"));
  stack.add(parse(with("u.backend"), PolicyLayer::user, "/home/me/latte.json"));
  stack.add(parse(with("p.backend"), PolicyLayer::plugin, "/plugins/libp.so"));
  const std::vector<std::string> ids = {"d.backend", "p.backend", "u.backend"};
  const auto ranking = stack.rank(ids, glm5_sparse(), describe_device("cpu"));
  EXPECT_EQ(ids_of(ranking), (std::vector<std::string>{"u.backend", "p.backend", "d.backend"}));
  EXPECT_EQ(ranking[0].rule, "user:/home/me/latte.json#n");
  EXPECT_EQ(ranking[1].rule, "plugin:/plugins/libp.so#n");
  EXPECT_EQ(ranking[2].rule, "defaults:built-in#n");
  const auto rules = stack.rules_by_precedence();
  ASSERT_EQ(rules.size(), 3u);
  EXPECT_EQ(rules[0]->layer, PolicyLayer::user);
  EXPECT_EQ(rules[2]->layer, PolicyLayer::defaults);

  const uint64_t fp = stack.fingerprint();
  stack.clear(PolicyLayer::user);
  EXPECT_NE(stack.fingerprint(), fp);
  EXPECT_EQ(ids_of(stack.rank(ids, glm5_sparse(), describe_device("cpu"))).front(), "p.backend");
}

TEST(PolicyStack, NonMatchingRulesDoNotRank) {
  PolicyStack stack;
  stack.add(parse(R"({"latte_policy": 1, "rules": [
      {"name": "fp8-only", "when": {"kv_cache": "fp8_ds_mla"}, "order": ["b.*"]},
      {"name": "all", "order": ["a.*", "b.*"]}]})"));
  EXPECT_EQ(ids_of(stack.rank({"a.x", "b.x"}, glm5_sparse(8, CacheFormat::bf16), describe_device("cpu"))),
            (std::vector<std::string>{"a.x", "b.x"}));
  const auto fp8 = stack.rank({"a.x", "b.x"}, glm5_sparse(8, CacheFormat::fp8_ds_mla), describe_device("cpu"));
  EXPECT_EQ(ids_of(fp8), (std::vector<std::string>{"b.x", "a.x"}));
  EXPECT_EQ(fp8[0].rule, "user:test.json#fp8-only");
  EXPECT_EQ(fp8[1].rule, "user:test.json#all");
}

TEST(Policy, CanonicalJsonRoundTrips) {
  const Policy p = parse(R"({
    // comments are allowed in policy files
    "latte_policy": 1, "description": "mine",
    "rules": [{"name": "a", "description": "why", "when": {"arch": ["sm_90", ">=100", "<89", "80..86"], "heads": ">64",
               "op": "sparse_mla", "model": "glm*"}, "order": ["x.*", "y.z"]},
              {"name": "b", "order": ["*"]}]})");
  const std::string canonical = p.to_json();
  const Policy again = Policy::parse(canonical, "test.json", PolicyLayer::user);
  EXPECT_EQ(again.to_json(), canonical);
  EXPECT_EQ(again.fingerprint(), p.fingerprint());
  EXPECT_THAT(canonical, HasSubstr(R"("arch": [
          90,
          ">=100",
          "<=88",
          "80..86"
        ])"));
  EXPECT_THAT(canonical, HasSubstr(R"("heads": ">=65")"));
  // The fingerprint follows the source and the layer too.
  EXPECT_NE(Policy::parse(canonical, "other.json", PolicyLayer::user).fingerprint(), p.fingerprint());
}

TEST(Policy, LoadFileNamesAMissingFile) {
  try {
    (void)Policy::load_file("/nonexistent/latte-policy.json", PolicyLayer::user);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::not_found);
    EXPECT_THAT(e.what(), HasSubstr("/nonexistent/latte-policy.json"));
  }
  const std::string path = ::testing::TempDir() + "latte_policy_bad.json";
  std::ofstream(path) << R"({"latte_policy": 1, "rules": [{"name": "x", "order": []}]})";
  try {
    (void)Policy::load_file(path, PolicyLayer::user);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::policy_error);
    EXPECT_THAT(e.what(), HasSubstr("policy error in " + path + ": rules[0].order = []"));
  }
}

// ---- Malformed policies ------------------------------------------------------------------

struct BadPolicy {
  const char* name;
  std::string json;
  const char* fragment;
};
void PrintTo(const BadPolicy& p, std::ostream* os) { *os << p.name; }

std::string rule_with(const std::string& rule) { return R"({"latte_policy": 1, "rules": [)" + rule + "]}"; }
std::string when_with(const std::string& when) {
  return rule_with(R"({"name": "ok", "order": ["a.*"]}, {"name": "r", "when": {)" + when + R"(}, "order": ["x.*"]})");
}

class MalformedPolicies : public ::testing::TestWithParam<BadPolicy> {};

TEST_P(MalformedPolicies, NameTheFileThePathAndTheValue) {
  try {
    (void)Policy::parse(GetParam().json, "/etc/latte/policy.json", PolicyLayer::user);
    FAIL() << "accepted: " << GetParam().json;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::policy_error);
    EXPECT_THAT(e.what(), HasSubstr("policy error in /etc/latte/policy.json"));
    EXPECT_THAT(e.what(), HasSubstr(GetParam().fragment));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Table, MalformedPolicies,
    ::testing::Values(
        BadPolicy{"NotJson", R"({"latte_policy": 1, "rules": [)", "not valid JSON"},
        BadPolicy{"TopLevelList", "[]", "(top level) = []"},
        BadPolicy{"NumberOverflow", R"({"latte_policy": 1e99999, "rules": []})", "not valid JSON"},
        BadPolicy{"NoVersion", R"({"rules": []})", "latte_policy: missing"},
        BadPolicy{"WrongVersion", R"({"latte_policy": 2, "rules": []})", "latte_policy = 2: unsupported format version"},
        BadPolicy{"VersionString", R"({"latte_policy": "1", "rules": []})", "latte_policy = \"1\""},
        BadPolicy{"UnknownTopKey", R"({"latte_policy": 1, "rules": [], "rulez": []})", "rulez = []: unknown key"},
        BadPolicy{"NoRules", R"({"latte_policy": 1})", "rules: missing"},
        BadPolicy{"RulesObject", R"({"latte_policy": 1, "rules": {}})", "rules = {}: must be a list"},
        BadPolicy{"RuleNotObject", rule_with("\"fast\""), "rules[0] = \"fast\": a rule is an object"},
        BadPolicy{"RuleWithoutName", rule_with(R"({"order": ["a.*"]})"), "rules[0].name: missing"},
        BadPolicy{"RuleNameEmpty", rule_with(R"({"name": "", "order": ["a.*"]})"), "rules[0].name = \"\": must be a non-empty string"},
        BadPolicy{"RuleNameHash", rule_with(R"({"name": "a#b", "order": ["a.*"]})"), "without '#'"},
        BadPolicy{"DuplicateNames", rule_with(R"({"name": "a", "order": ["a.*"]}, {"name": "a", "order": ["b.*"]})"), "rules[1].name = \"a\": another rule"},
        BadPolicy{"UnknownRuleKey", rule_with(R"({"name": "a", "order": ["a.*"], "priority": 3})"), "rules[0].priority = 3: unknown key"},
        BadPolicy{"NoOrder", rule_with(R"({"name": "a"})"), "rules[0].order: missing"},
        BadPolicy{"EmptyOrder", rule_with(R"({"name": "a", "order": []})"), "rules[0].order = []: is empty"},
        BadPolicy{"OrderString", rule_with(R"({"name": "a", "order": "cuda.*"})"), "rules[0].order = \"cuda.*\": must be a list"},
        BadPolicy{"OrderItemNumber", rule_with(R"({"name": "a", "order": ["a.*", 5]})"), "rules[0].order[1] = 5"},
        BadPolicy{"OrderItemSpace", rule_with(R"({"name": "a", "order": ["cuda sparse"]})"), "rules[0].order[0] = \"cuda sparse\": has a character"},
        BadPolicy{"WhenList", rule_with(R"({"name": "a", "when": ["arch"], "order": ["a.*"]})"), "rules[0].when = [\"arch\"]: must be an object"},
        BadPolicy{"UnknownCondition", when_with(R"("gpu": "h100")"), "rules[1].when.gpu = \"h100\": unknown condition"},
        BadPolicy{"ArchNoUnderscore", when_with(R"("arch": "sm90")"), "rules[1].when.arch = \"sm90\": write an integer (90)"},
        BadPolicy{"ArchBadComparator", when_with(R"("arch": "=>89")"), "rules[1].when.arch = \"=>89\""},
        BadPolicy{"ArchFloat", when_with(R"("arch": 8.9)"), "rules[1].when.arch = 8.9"},
        BadPolicy{"ArchEmptyList", when_with(R"("arch": [])"), "rules[1].when.arch = []: an empty list matches nothing"},
        BadPolicy{"ArchInListBad", when_with(R"("arch": [90, "hopper"])"), "rules[1].when.arch = \"hopper\""},
        BadPolicy{"HeadsEmptyRange", when_with(R"("heads": "64..8")"), "rules[1].when.heads = \"64..8\": the range is empty"},
        BadPolicy{"HeadsNegative", when_with(R"("heads": -1)"), "rules[1].when.heads = -1: must be a non-negative integer"},
        BadPolicy{"HeadsBelowZero", when_with(R"("heads": "<0")"), "matches nothing"},
        BadPolicy{"TokensWord", when_with(R"("tokens": "small")"), "rules[1].when.tokens = \"small\""},
        BadPolicy{"DeviceGpu", when_with(R"("device": "gpu")"), "rules[1].when.device = \"gpu\": a device condition is \"cpu\" or \"cuda\""},
        BadPolicy{"DeviceNumber", when_with(R"("device": 0)"), "rules[1].when.device = 0: device values are strings"},
        BadPolicy{"OpUnknown", when_with(R"("op": "attention")"), "rules[1].when.op = \"attention\": not an op"},
        BadPolicy{"CacheUnknown", when_with(R"("kv_cache": "fp8")"), "rules[1].when.kv_cache = \"fp8\": not a cache format"},
        BadPolicy{"QDtypeUnknown", when_with(R"("q_dtype": "int4")"), "rules[1].when.q_dtype = \"int4\": not a query dtype"},
        BadPolicy{"ModelEmpty", when_with(R"("model": "")"), "rules[1].when.model = \"\": a model pattern must not be empty"}),
    [](const ::testing::TestParamInfo<BadPolicy>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace latte
