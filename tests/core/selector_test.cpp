// The selector through Context: ranking with rule labels, rejections with reasons, force and
// exclude (API and environment), no-valid errors with suggestions, explanations, the cache.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "latte/context.hpp"
#include "latte/error.hpp"
#include "test_backends.hpp"

namespace latte {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::glm5_sparse;
using testing::glm5_tp1_fp8;
using testing::make_backend;
using testing::mla_caps;

// Three CUDA attention backends of different reach plus a CPU one, like a real build:
//   hopper.sparse_mla  sm_90 only, 64/128 heads, both caches
//   cuda.sparse_mla    sm_80+, any heads, bf16 cache; fp8 needs sm_89+ (a custom rule)
//   cuda.wide_block    sm_80+, block size 1 only
//   cpu.reference      the CPU, bf16 cache
class SelectorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv("LATTE_BACKEND");
    unsetenv("LATTE_EXCLUDE");
    Capabilities hopper = mla_caps({DeviceKind::cuda}, IntRule::list({90}));
    hopper.heads = IntRule::list({64, 128});
    hopper.topk = IntRule::multiple(64);
    registry.add(make_backend("hopper.sparse_mla", hopper));

    Capabilities cuda = mla_caps({DeviceKind::cuda}, IntRule::at_least(80));
    cuda.kv_caches = {CacheFormat::bf16, CacheFormat::fp8_ds_mla};
    registry.add(make_backend("cuda.sparse_mla", cuda, [](const AttentionSpec& s, const DeviceInfo& d) {
      std::vector<Reason> out;
      if (s.kv_cache == CacheFormat::fp8_ds_mla && d.arch() < 89) {
        out.push_back({"arch", "device.arch", ">= sm_89", arch_name(d.arch()),
                       "fp8_ds_mla needs sm_89 or newer (fp8 e4m3 mma); this device is " + arch_name(d.arch())});
      }
      return out;
    }));

    Capabilities block = mla_caps({DeviceKind::cuda}, IntRule::at_least(80));
    block.kv_caches = {CacheFormat::bf16};
    block.block_size = IntRule::list({1});
    registry.add(make_backend("cuda.wide_block", block));

    Capabilities cpu = mla_caps({DeviceKind::cpu});
    cpu.kv_caches = {CacheFormat::bf16};
    registry.add(make_backend("cpu.reference", cpu));
  }
  void TearDown() override {
    unsetenv("LATTE_BACKEND");
    unsetenv("LATTE_EXCLUDE");
  }

  static SelectOptions no_env() {
    SelectOptions o;
    o.use_environment = false;
    return o;
  }

  const RejectedBackend* rejected(const Selection& s, const std::string& id) {
    for (const auto& r : s.rejected) {
      if (r.id == id) return &r;
    }
    return nullptr;
  }

  Registry registry;
  Context context{registry};
};

TEST_F(SelectorTest, ChoosesByPolicyAndExplainsEveryBackend) {
  const Selection s = context.select(glm5_tp1_fp8(), describe_device("sm_90"), no_env());
  EXPECT_EQ(s.chosen, "hopper.sparse_mla");
  ASSERT_NE(s.backend, nullptr);
  EXPECT_EQ(s.backend->info().id, "hopper.sparse_mla");
  ASSERT_EQ(s.valid.size(), 2u);
  EXPECT_EQ(s.valid[0].rule, "defaults:built-in#hopper-sparse-mla-fp8");
  EXPECT_EQ(s.valid[1].id, "cuda.sparse_mla");
  ASSERT_EQ(s.rejected.size(), 2u);
  EXPECT_EQ(s.rejected[0].id, "cpu.reference");  // id order
  EXPECT_EQ(s.rejected[0].reasons[0].code, "device_kind");
  // cuda.wide_block: bf16 caches of block size 1 only; this spec is fp8 with pages of 64.
  ASSERT_EQ(rejected(s, "cuda.wide_block")->reasons.size(), 2u);
  EXPECT_EQ(rejected(s, "cuda.wide_block")->reasons[0].code, "kv_cache");
  EXPECT_EQ(rejected(s, "cuda.wide_block")->reasons[1].code, "block_size");
  EXPECT_TRUE(s.suggestions.empty());

  // GLM-5 at TP8 on sm_90: 8 heads per rank, the Hopper kernel refuses, the portable one runs.
  const Selection tp8 = context.select(glm5_sparse(8), describe_device("sm_90"), no_env());
  EXPECT_EQ(tp8.chosen, "cuda.sparse_mla");
  EXPECT_EQ(tp8.valid[0].rule, "defaults:built-in#cuda-attention");
  EXPECT_EQ(rejected(tp8, "hopper.sparse_mla")->reasons[0].text,
            "needs heads per rank one of {64, 128}; this spec has 8 (64 heads / tp 8)");
}

TEST_F(SelectorTest, ExplanationTableAndJson) {
  const Selection s = context.select(glm5_sparse(8), describe_device("sm_90"), no_env());
  const std::string table = s.explain();
  EXPECT_THAT(table, HasSubstr("spec:   sparse_mla H=8 (tp 8)"));
  EXPECT_THAT(table, HasSubstr("device: sm_90 (described)"));
  EXPECT_THAT(table, HasSubstr("chosen: cuda.sparse_mla (ranked by defaults:built-in#cuda-attention)"));
  EXPECT_THAT(table, ::testing::ContainsRegex("cuda.sparse_mla +chosen +defaults:built-in#cuda-attention"));
  EXPECT_THAT(table, ::testing::ContainsRegex("hopper.sparse_mla +rejected +heads: needs heads per rank"));
  EXPECT_THAT(table, ::testing::ContainsRegex("cpu.reference +rejected +device_kind: runs on cpu devices only"));

  const auto json = nlohmann::json::parse(s.to_json());
  EXPECT_EQ(json["chosen"], "cuda.sparse_mla");
  EXPECT_EQ(json["spec"]["op"], "sparse_mla");
  EXPECT_EQ(json["spec"]["num_heads"], 8);
  EXPECT_EQ(json["spec"]["tp"], 8);
  EXPECT_EQ(json["device"]["arch"], 90);
  EXPECT_EQ(json["valid"][0]["rank"], 1);
  EXPECT_EQ(json["valid"][0]["rule"], "defaults:built-in#cuda-attention");
  ASSERT_EQ(json["rejected"].size(), 3u);
  EXPECT_EQ(json["rejected"][0]["id"], "cpu.reference");
  EXPECT_EQ(json["rejected"][0]["reasons"][0]["code"], "device_kind");
  for (const char* key : {"field", "wanted", "got", "text"}) EXPECT_TRUE(json["rejected"][0]["reasons"][0].contains(key));
  EXPECT_TRUE(json["forced"].empty());
  EXPECT_TRUE(json["suggestions"].empty());
}

TEST_F(SelectorTest, NothingValidListsEveryBackendAndTheNearestChanges) {
  // fp8 cache on an A10: cuda.sparse_mla wants sm_89+ for fp8; the others refuse fp8 or sm_86.
  const AttentionSpec spec = glm5_sparse(8, CacheFormat::fp8_ds_mla);
  try {
    (void)context.select(spec, describe_device("sm_86"), no_env());
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::no_valid_backend);
    const std::string msg = e.what();
    EXPECT_THAT(msg, HasSubstr("no valid attention backend for sparse_mla H=8"));
    for (const char* id : {"cpu.reference", "cuda.sparse_mla", "cuda.wide_block", "hopper.sparse_mla"}) {
      EXPECT_THAT(msg, HasSubstr(id));
    }
    EXPECT_THAT(msg, HasSubstr("fp8_ds_mla needs sm_89 or newer (fp8 e4m3 mma); this device is sm_86"));
    EXPECT_THAT(msg, HasSubstr("kv_cache=bf16 would be accepted by cuda.sparse_mla"));
    EXPECT_THAT(msg, HasSubstr("device sm_89 would be accepted by cuda.sparse_mla"));
  }
  const Selection s = context.explain(spec, describe_device("sm_86"), no_env());
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(s.valid.empty());
  EXPECT_EQ(s.rejected.size(), 4u);
  std::vector<std::string> fields;
  for (const Suggestion& sug : s.suggestions) fields.push_back(sug.field + "=" + sug.value);
  EXPECT_THAT(fields, ::testing::Contains("kv_cache=bf16"));
  EXPECT_THAT(fields, ::testing::Contains("device=sm_89"));
  EXPECT_THAT(fields, ::testing::Contains("device=sm_90"));
  EXPECT_THAT(fields, ::testing::Not(::testing::Contains("device=sm_80")));
  const auto& bf16 = *std::find_if(s.suggestions.begin(), s.suggestions.end(),
                                   [](const Suggestion& x) { return x.field == "kv_cache"; });
  EXPECT_EQ(bf16.backends, (std::vector<std::string>{"cuda.sparse_mla"}));
  EXPECT_THAT(bf16.text, HasSubstr("today cuda.sparse_mla refuses: fp8_ds_mla needs sm_89"));
}

TEST_F(SelectorTest, SuggestsTensorParallelSizesAndBlockSizes) {
  Registry only_hopper;
  Capabilities hopper = mla_caps({DeviceKind::cuda}, IntRule::list({90}));
  hopper.heads = IntRule::list({64, 128});
  hopper.block_size = IntRule::list({64});
  only_hopper.add(make_backend("hopper.sparse_mla", hopper));
  Context ctx(only_hopper);
  const Selection s = ctx.explain(glm5_sparse(8, CacheFormat::bf16, 16), describe_device("sm_90"), no_env());
  ASSERT_FALSE(s.ok());
  // Two changes are needed (heads and block size): no single change works...
  EXPECT_TRUE(s.suggestions.empty());
  EXPECT_THAT(s.explain(), HasSubstr("no single change"));
  // ...with block size 64, TP 1 (64 heads per rank) is the one change.
  const Selection t = ctx.explain(glm5_sparse(8, CacheFormat::bf16, 64), describe_device("sm_90"), no_env());
  ASSERT_EQ(t.suggestions.size(), 1u);
  EXPECT_EQ(t.suggestions[0].field, "tp");
  EXPECT_EQ(t.suggestions[0].value, "1");
  EXPECT_THAT(t.suggestions[0].text, HasSubstr("tp=1 (64 heads per rank) would be accepted by hopper.sparse_mla"));
  const Selection u = ctx.explain(glm5_sparse(1, CacheFormat::bf16, 16), describe_device("sm_90"), no_env());
  ASSERT_EQ(u.suggestions.size(), 1u);
  EXPECT_EQ(u.suggestions[0].field, "block_size");
  EXPECT_EQ(u.suggestions[0].value, "64");
}

// topk_lens refused by a backend that reads every column: the nearest change is to drop them
// (rows padded with -1 say the same).
TEST_F(SelectorTest, SuggestsDroppingTopkLensWhereTheyAreRefused) {
  Registry reg;
  reg.add(make_backend("cuda.all_columns", mla_caps({DeviceKind::cuda}), [](const AttentionSpec& s, const DeviceInfo&) {
    std::vector<Reason> out;
    if (s.topk_lens) out.push_back({"topk_lens", "topk_lens", "absent", "[T] i32", "reads every column of indices"});
    return out;
  }));
  Context ctx(reg);
  AttentionSpec spec = glm5_sparse(8);
  spec.topk_lens = true;
  const Selection s = ctx.explain(spec, describe_device("sm_90"), no_env());
  ASSERT_FALSE(s.ok());
  ASSERT_EQ(s.suggestions.size(), 1u);
  EXPECT_EQ(s.suggestions[0].field, "topk_lens");
  EXPECT_EQ(s.suggestions[0].value, "absent");
  EXPECT_THAT(s.suggestions[0].text,
              HasSubstr("without topk_lens (rows padded with -1 past their length) would be accepted by "
                        "cuda.all_columns; today cuda.all_columns refuses: reads every column of indices"));
  EXPECT_THAT(s.spec.summary(), HasSubstr("topk=2048 (+topk_lens)"));
  EXPECT_EQ(nlohmann::json::parse(s.to_json())["spec"]["topk_lens"], true);
}

// A spec without rope (head_dim 512) refused by a 576-only backend says what 512 means.
TEST_F(SelectorTest, ARefusedHeadDim512IsExplainedAsMlaWithoutRope) {
  AttentionSpec spec = glm5_sparse(8);
  spec.head_dim = kLatentDim;
  const Selection s = context.explain(spec, describe_device("sm_90"), no_env());
  ASSERT_FALSE(s.ok());
  const RejectedBackend* r = rejected(s, "cuda.sparse_mla");
  ASSERT_NE(r, nullptr);
  ASSERT_EQ(r->reasons.size(), 1u);
  EXPECT_EQ(r->reasons[0].code, "head_dim");
  EXPECT_EQ(r->reasons[0].text,
            "needs head_dim 576; this spec has 512 (MLA without rope: q and cache rows are the "
            "512 latent values, rope_dim 0)");
  EXPECT_THAT(s.spec.summary(), HasSubstr("d=512 (no rope)"));
}

TEST_F(SelectorTest, ForcingAValidBackendOverridesThePolicy) {
  SelectOptions o = no_env();
  o.force = {"cuda.sparse_mla"};
  const Selection s = context.select(glm5_tp1_fp8(), describe_device("sm_90"), o);
  EXPECT_EQ(s.chosen, "cuda.sparse_mla");
  EXPECT_EQ(s.forced, std::vector<std::string>{"force=cuda.sparse_mla"});
  EXPECT_EQ(rejected(s, "hopper.sparse_mla")->reasons[0].code, "not_forced");
}

TEST_F(SelectorTest, ForcingAnInvalidBackendIsAnErrorNeverAFallback) {
  SelectOptions o = no_env();
  o.force = {"hopper.sparse_mla"};
  try {
    (void)context.select(glm5_sparse(8), describe_device("sm_120"), o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::no_valid_backend);
    EXPECT_THAT(e.what(), HasSubstr("the forced backend (force=hopper.sparse_mla) refuses sparse_mla H=8"));
    EXPECT_THAT(e.what(), HasSubstr("hopper.sparse_mla: arch: needs sm_90; this device is sm_120"));
    EXPECT_THAT(e.what(), HasSubstr("hopper.sparse_mla: heads: needs heads per rank one of {64, 128}"));
    EXPECT_THAT(e.what(), HasSubstr("cuda.sparse_mla accepts this spec but it is not among the forced backends"));
  }
  const Selection s = context.explain(glm5_sparse(8), describe_device("sm_120"), o);
  EXPECT_FALSE(s.ok());
}

TEST_F(SelectorTest, ForcingAnUnknownIdListsTheRegisteredOnes) {
  SelectOptions o = no_env();
  o.force = {"cuda.sparse_mlaa"};
  try {
    (void)context.select(glm5_sparse(8), describe_device("sm_90"), o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::not_found);
    EXPECT_THAT(e.what(), HasSubstr("'cuda.sparse_mlaa'"));
    EXPECT_THAT(e.what(), HasSubstr("registered: cpu.reference, cuda.sparse_mla, cuda.wide_block, hopper.sparse_mla"));
  }
  EXPECT_THROW((void)context.explain(glm5_sparse(8), describe_device("sm_90"), o), Error);
  o.force = {"attention=cuda.sparse_mla"};
  try {
    (void)context.select(glm5_sparse(8), describe_device("sm_90"), o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_THAT(e.what(), HasSubstr("'attention' is not an op"));
  }
}

TEST_F(SelectorTest, ExcludingAnUnknownIdIsAnErrorLikeForcingOne) {
  // A typo in an exclude list used to be ignored while the same typo in a force list was an error.
  const auto refusal = [&](const SelectOptions& o) {
    try {
      (void)context.explain(glm5_sparse(8), describe_device("sm_90"), o);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::not_found);
      return std::string(e.what());
    }
    ADD_FAILURE() << "accepted";
    return std::string();
  };
  SelectOptions o = no_env();
  o.exclude = {"hopper.*", "sparse_mla=cuda.sparse_mlaa"};
  EXPECT_THAT(refusal(o), HasSubstr("excluded backend 'cuda.sparse_mlaa' (exclude=sparse_mla=cuda.sparse_mlaa) "
                                    "matches no registered backend; registered: cpu.reference, cuda.sparse_mla, "
                                    "cuda.wide_block, hopper.sparse_mla; fix the id or drop the entry"));
  SelectOptions env;
  setenv("LATTE_EXCLUDE", "cpu.refrence", 1);
  EXPECT_THAT(refusal(env), HasSubstr("excluded backend 'cpu.refrence' (LATTE_EXCLUDE=cpu.refrence)"));
  // A backend registered later (a plugin's) makes the same entry valid.
  registry.add(make_backend("cpu.refrence", mla_caps({DeviceKind::cpu})));
  EXPECT_EQ(context.explain(glm5_sparse(8), describe_device("sm_90"), env).excluded,
            std::vector<std::string>{"LATTE_EXCLUDE=cpu.refrence"});
}

TEST_F(SelectorTest, APlainForceAppliesOnlyToTheOpsItsBackendDeclares) {
  Capabilities store;
  store.ops = {Op::kv_store};
  store.devices = {DeviceKind::cuda};
  registry.add(make_backend("cuda.kv_store", store));
  SelectOptions o = no_env();
  o.force = {"hopper.sparse_mla"};
  const AttentionSpec kv = attention_spec(load_model("glm-5"), Op::kv_store);
  const Selection s = context.select(kv, describe_device("sm_90"), o);
  EXPECT_EQ(s.chosen, "cuda.kv_store");
  EXPECT_TRUE(s.forced.empty());
  // With an op prefix the force applies to that op only.
  o.force = {"mla_decode=cuda.sparse_mla"};
  EXPECT_EQ(context.select(glm5_tp1_fp8(), describe_device("sm_90"), o).chosen, "hopper.sparse_mla");
  AttentionSpec decode = glm5_tp1_fp8();
  decode.op = Op::mla_decode;
  decode.topk = 0;
  EXPECT_EQ(context.select(decode, describe_device("sm_90"), o).chosen, "cuda.sparse_mla");
  // An op prefix on a backend that does not implement the op: forced, and refused with "op".
  o.force = {"sparse_mla=cuda.kv_store"};
  try {
    (void)context.select(glm5_tp1_fp8(), describe_device("sm_90"), o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("cuda.kv_store: op: does not implement sparse_mla"));
  }
}

TEST_F(SelectorTest, ExcludeRemovesWithReasonExcluded) {
  SelectOptions o = no_env();
  o.exclude = {"hopper.*"};
  const Selection s = context.select(glm5_tp1_fp8(), describe_device("sm_90"), o);
  EXPECT_EQ(s.chosen, "cuda.sparse_mla");
  EXPECT_EQ(s.excluded, std::vector<std::string>{"exclude=hopper.*"});
  const RejectedBackend* h = rejected(s, "hopper.sparse_mla");
  ASSERT_NE(h, nullptr);
  ASSERT_EQ(h->reasons.size(), 1u);
  EXPECT_EQ(h->reasons[0].code, "excluded");
  EXPECT_EQ(h->reasons[0].text, "excluded by exclude=hopper.*");
  // Excluding everything that works names the excluded backend that would.
  o.exclude = {"hopper.*", "cuda.sparse_mla"};
  const Selection none = context.explain(glm5_tp1_fp8(), describe_device("sm_90"), o);
  ASSERT_FALSE(none.ok());
  std::vector<std::string> values;
  for (const auto& sug : none.suggestions) values.push_back(sug.field + ":" + sug.value);
  EXPECT_THAT(values, ::testing::Contains("exclude:hopper.sparse_mla"));
  EXPECT_THAT(values, ::testing::Contains("exclude:cuda.sparse_mla"));
  // Forced and excluded at once is a contradiction.
  o.force = {"cuda.sparse_mla"};
  o.exclude = {"cuda.*"};
  EXPECT_THROW((void)context.select(glm5_tp1_fp8(), describe_device("sm_90"), o), Error);
}

TEST_F(SelectorTest, EnvironmentForcesAndExcludes) {
  setenv("LATTE_BACKEND", "cuda.sparse_mla", 1);
  SelectOptions o;
  EXPECT_EQ(context.select(glm5_tp1_fp8(), describe_device("sm_90"), o).chosen, "cuda.sparse_mla");
  EXPECT_EQ(context.select(glm5_tp1_fp8(), describe_device("sm_90"), o).forced,
            std::vector<std::string>{"LATTE_BACKEND=cuda.sparse_mla"});
  // The environment is part of the cache key: changing it changes the decision.
  setenv("LATTE_BACKEND", "", 1);
  setenv("LATTE_EXCLUDE", "hopper.sparse_mla, cuda.wide_block", 1);
  const Selection s = context.select(glm5_tp1_fp8(), describe_device("sm_90"), o);
  EXPECT_EQ(s.chosen, "cuda.sparse_mla");
  EXPECT_EQ(s.excluded.size(), 2u);
  EXPECT_EQ(rejected(s, "hopper.sparse_mla")->reasons[0].text, "excluded by LATTE_EXCLUDE=hopper.sparse_mla");
  // ...and ignored when asked to.
  EXPECT_EQ(context.select(glm5_tp1_fp8(), describe_device("sm_90"), no_env()).chosen, "hopper.sparse_mla");
  setenv("LATTE_BACKEND", "hopper.sparse_mla", 1);
  unsetenv("LATTE_EXCLUDE");
  EXPECT_THROW((void)context.select(glm5_sparse(8), describe_device("sm_90"), o), Error);
}

TEST_F(SelectorTest, UserPolicyOutranksDefaultsAndIsExplained) {
  context.add_policy(Policy::parse(R"({"latte_policy": 1, "rules": [
      {"name": "prefer-portable", "when": {"arch": ">=90"}, "order": ["cuda.sparse_mla"]}]})",
                                   "/home/me/latte.json", PolicyLayer::user));
  const Selection s = context.select(glm5_tp1_fp8(), describe_device("sm_90"), no_env());
  EXPECT_EQ(s.chosen, "cuda.sparse_mla");
  EXPECT_EQ(s.valid[0].rule, "user:/home/me/latte.json#prefer-portable");
  EXPECT_EQ(s.valid[1].rule, "defaults:built-in#hopper-sparse-mla-fp8");
  context.clear_policy_layer(PolicyLayer::user);
  EXPECT_EQ(context.select(glm5_tp1_fp8(), describe_device("sm_90"), no_env()).chosen, "hopper.sparse_mla");
}

TEST_F(SelectorTest, LoadUserPolicyReplacesTheUserLayerAndKeepsItOnError) {
  const std::string good = ::testing::TempDir() + "latte_user_policy.json";
  const std::string bad = ::testing::TempDir() + "latte_user_policy_bad.json";
  std::ofstream(good) << R"({"latte_policy": 1, "rules": [{"name": "p", "order": ["cuda.sparse_mla"]}]})";
  std::ofstream(bad) << R"({"latte_policy": 1, "rules": [{"name": "p", "when": {"arch": "sm9"}, "order": ["x.*"]}]})";
  context.load_user_policy(good);
  EXPECT_EQ(context.select(glm5_tp1_fp8(), describe_device("sm_90"), no_env()).chosen, "cuda.sparse_mla");
  EXPECT_THROW(context.load_user_policy(bad), Error);
  EXPECT_EQ(context.select(glm5_tp1_fp8(), describe_device("sm_90"), no_env()).chosen, "cuda.sparse_mla");
  context.load_user_policy(good);  // replaces, does not stack
  int user_policies = 0;
  for (const Policy& p : context.policies().policies()) user_policies += p.layer == PolicyLayer::user;
  EXPECT_EQ(user_policies, 1);
}

TEST_F(SelectorTest, CacheFollowsRegistryAndPolicyChanges) {
  const Selection a = context.select(glm5_sparse(8), describe_device("sm_120"), no_env());
  EXPECT_EQ(a.chosen, "cuda.sparse_mla");
  Capabilities better = mla_caps({DeviceKind::cuda}, IntRule::list({120}));
  registry.add(make_backend("blackwell.sparse_mla", better));
  const Selection b = context.select(glm5_sparse(8), describe_device("sm_120"), no_env());
  EXPECT_EQ(b.valid.size(), a.valid.size() + 1);
  context.add_policy(Policy::parse(R"({"latte_policy": 1, "rules": [{"name": "bw", "order": ["blackwell.*"]}]})", "p",
                                   PolicyLayer::user));
  EXPECT_EQ(context.select(glm5_sparse(8), describe_device("sm_120"), no_env()).chosen, "blackwell.sparse_mla");
}

TEST_F(SelectorTest, ACheckThatThrowsIsARefusalNotACrash) {
  registry.add(make_backend("broken.check", mla_caps({DeviceKind::cuda}), [](const AttentionSpec&, const DeviceInfo&)
                                -> std::vector<Reason> { throw std::runtime_error("table lookup failed"); }));
  const Selection s = context.select(glm5_sparse(8), describe_device("sm_90"), no_env());
  EXPECT_EQ(s.chosen, "cuda.sparse_mla");
  EXPECT_EQ(rejected(s, "broken.check")->reasons[0].code, "check_error");
  EXPECT_THAT(rejected(s, "broken.check")->reasons[0].text, HasSubstr("table lookup failed"));
}

TEST_F(SelectorTest, ConcurrentSelectionsWhilePoliciesChange) {
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 300; ++i) {
        const int tp = (i + t) % 2 ? 8 : 1;
        const Selection s = context.select(glm5_sparse(tp), describe_device(i % 3 ? "sm_90" : "cpu"), no_env());
        const bool ok = s.chosen == "cpu.reference" || s.chosen == "cuda.sparse_mla" || s.chosen == "hopper.sparse_mla";
        if (!ok) ++failures;
      }
    });
  }
  std::thread writer([&] {
    for (int i = 0; !stop && i < 200; ++i) {
      context.add_policy(Policy::parse(R"({"latte_policy": 1, "rules": [{"name": "n", "order": ["cuda.*"]}]})", "p",
                                       PolicyLayer::plugin));
      context.clear_policy_layer(PolicyLayer::plugin);
    }
  });
  for (auto& th : threads) th.join();
  stop = true;
  writer.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(Context, EmptyRegistryExplainsItself) {
  Registry empty;
  Context ctx(empty);
  SelectOptions o;
  o.use_environment = false;
  const Selection s = ctx.explain(glm5_sparse(8), describe_device("sm_120"), o);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.explain(), HasSubstr("no backends are registered"));
  EXPECT_THROW((void)ctx.select(glm5_sparse(8), describe_device("sm_120"), o), Error);
}

}  // namespace
}  // namespace latte
