// The table of AttentionSpec's integer fields (src/core/spec_fields.cpp), row by row, through
// every place that iterates it: capabilities JSON, the declared check, policy conditions, the
// selection cache key, a selection's JSON, suggestions and the plugin adapter. A row added to
// the table is exercised here; only the key lists of UnknownKeyErrorsListTheKeysAsBefore, which
// pin today's messages word for word, need the new key.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/plugin_loader.hpp"
#include "core/spec_fields.hpp"
#include "latte/capabilities.hpp"
#include "latte/context.hpp"
#include "latte/error.hpp"
#include "latte/policy.hpp"
#include "test_backends.hpp"

namespace latte {
namespace {

using detail::SpecIntField;
using detail::spec_int_fields;
using ::testing::HasSubstr;

// Converts to any type: counts the members of an aggregate by how many initialisers it takes.
struct AnyMember {
  template <typename T>
  operator T() const;  // NOLINT(google-explicit-constructor): only named in unevaluated contexts
};

template <typename T, typename... Members>
constexpr std::size_t member_count() {
  if constexpr (requires { T{Members{}..., AnyMember{}}; }) {
    return member_count<T, Members..., AnyMember>();
  } else {
    return sizeof...(Members);
  }
}

// The members of AttentionSpec that are not integers of the table, each given a value other
// than its default. They are written out by hand in append_spec_key, Selection::to_json and
// spec_to_c.
const std::vector<std::pair<std::string, std::function<void(AttentionSpec&)>>>& other_fields() {
  static const std::vector<std::pair<std::string, std::function<void(AttentionSpec&)>>> fields = {
      {"op", [](AttentionSpec& s) { s.op = Op::mla_decode; }},
      {"model", [](AttentionSpec& s) { s.model = "other-model"; }},
      {"q_dtype", [](AttentionSpec& s) { s.q_dtype = DType::e4m3; }},
      {"kv_cache", [](AttentionSpec& s) { s.kv_cache = CacheFormat::fp8_ds_mla; }},
      {"scale", [](AttentionSpec& s) { s.scale = 0.125f; }},
      {"split_q", [](AttentionSpec& s) { s.split_q = true; }},
      {"topk_lens", [](AttentionSpec& s) { s.topk_lens = true; }},
  };
  return fields;
}

// The first op the row's declared rule is checked for.
Op applicable_op(const SpecIntField& f) {
  for (Op op : all_ops()) {
    if (f.applies(op)) return op;
  }
  ADD_FAILURE() << f.name << " applies to no op";
  return Op::sparse_mla;
}

AttentionSpec with(const SpecIntField& f, int64_t value, AttentionSpec spec = {}) {
  f.spec.set(spec, value);
  return spec;
}

const DeviceInfo& cpu() {
  static const DeviceInfo device = describe_device("cpu");
  return device;
}

// Accepts every op on the CPU, declaring nothing else.
Capabilities open_caps() {
  Capabilities caps;
  caps.ops = all_ops();
  caps.devices = {DeviceKind::cpu};
  return caps;
}

TEST(SpecFields, EveryMemberOfAttentionSpecIsInTheTableOrWrittenOutByHand) {
  EXPECT_EQ(member_count<AttentionSpec>(), spec_int_fields().size() + other_fields().size())
      << "AttentionSpec gained or lost a member: an integer needs a row in src/core/spec_fields.cpp; "
         "anything else is written out in append_spec_key, Selection::to_json, spec_to_c and other_fields() here";
}

TEST(SpecFields, RowsNameDistinctMembersAndKeys) {
  std::set<std::string> names, caps_keys, policy_keys, codes;
  for (const SpecIntField& f : spec_int_fields()) {
    SCOPED_TRACE(std::string(f.name));
    ASSERT_TRUE(f.spec.present());
    EXPECT_TRUE(names.insert(std::string(f.name)).second);
    // Setting this row's member moves no other row's member.
    const AttentionSpec spec = with(f, 77);
    for (const SpecIntField& g : spec_int_fields()) {
      if (&g != &f) EXPECT_EQ(g.spec.get(spec), g.spec.get(AttentionSpec{})) << g.name;
    }
    if (!f.rule) {
      EXPECT_TRUE(f.caps_key.empty() && f.policy_key.empty() && f.reason_code.empty());
      continue;
    }
    EXPECT_FALSE(f.words.empty());
    EXPECT_TRUE(caps_keys.insert(std::string(f.caps_key)).second);
    EXPECT_TRUE(policy_keys.insert(std::string(f.policy_key)).second);
    EXPECT_TRUE(codes.insert(std::string(f.reason_code)).second);
    EXPECT_EQ(detail::caps_int_field(f.caps_key), &f);
    EXPECT_EQ(detail::policy_int_field(f.policy_key), &f);
  }
}

TEST(SpecFields, DeclaredRulesRoundTripThroughCapabilitiesJson) {
  IntRule rule;
  rule.min = 2;
  rule.max = 4096;
  rule.multiple_of = 2;
  rule.one_of = {8, 64};
  for (const SpecIntField& f : spec_int_fields()) {
    if (!f.rule) continue;
    SCOPED_TRACE(std::string(f.caps_key));
    Capabilities caps = open_caps();
    caps.*f.rule = rule;
    const std::string text = capabilities_to_json(caps);
    EXPECT_THAT(text, HasSubstr(fmt::format(R"("{}":{{"min":2,"max":4096,"multiple_of":2,"one_of":[8,64]}})",
                                            f.caps_key)));
    const Capabilities back = capabilities_from_json(text, "test");
    EXPECT_EQ(back.*f.rule, rule);
    EXPECT_EQ(back, caps);
  }
}

TEST(SpecFields, UnknownKeyErrorsListTheKeysAsBefore) {
  try {
    (void)capabilities_from_json(R"({"ops": ["sparse_mla"], "devices": ["cpu"], "heads_per_rank": 8})", "test");
    ADD_FAILURE() << "an unknown capabilities key was accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("unknown key; capabilities have ops, devices, arch, q_dtypes, kv_caches, "
                                    "heads, head_dim, block_size, topk, s_q, max_tokens, workspace, notes"));
  }
  try {
    (void)Policy::parse(R"({"latte_policy": 1, "rules": [{"name": "r", "when": {"gpu": 1}, "order": ["x.*"]}]})",
                        "test", PolicyLayer::user);
    ADD_FAILURE() << "an unknown policy condition was accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("unknown condition; conditions are device, arch, op, kv_cache, q_dtype, "
                                    "heads, head_dim, block_size, topk, s_q, tokens, model"));
  }
}

TEST(SpecFields, CheckDeclaredRefusesAValueOutsideTheRuleWithTheFieldsReason) {
  for (const SpecIntField& f : spec_int_fields()) {
    if (!f.rule) continue;
    SCOPED_TRACE(std::string(f.name));
    Capabilities caps = open_caps();
    caps.*f.rule = IntRule::list({8});
    AttentionSpec spec;
    spec.op = applicable_op(f);

    f.spec.set(spec, 4);
    const std::vector<Reason> reasons = check_declared(caps, spec, cpu());
    ASSERT_EQ(reasons.size(), 1u);
    EXPECT_EQ(reasons[0].code, f.reason_code);
    EXPECT_EQ(reasons[0].field, f.name);
    EXPECT_EQ(reasons[0].wanted, "8");
    EXPECT_EQ(reasons[0].got, "4");
    EXPECT_EQ(reasons[0].text, fmt::format("needs {} 8; this spec has 4", f.words_for(spec.op)));
    EXPECT_FALSE(declared_accepts(caps, spec, cpu()));

    f.spec.set(spec, 8);
    EXPECT_TRUE(check_declared(caps, spec, cpu()).empty());
    EXPECT_TRUE(declared_accepts(caps, spec, cpu()));

    // Not checked for the ops it does not apply to; an unknown value (0) is never refused.
    f.spec.set(spec, 4);
    for (Op op : all_ops()) {
      spec.op = op;
      EXPECT_EQ(declared_accepts(caps, spec, cpu()), !f.applies(op)) << to_string(op);
    }
    if (f.zero_is_unknown) {
      spec.op = applicable_op(f);
      f.spec.set(spec, 0);
      EXPECT_TRUE(declared_accepts(caps, spec, cpu()));
    }
  }
}

TEST(SpecFields, PolicyConditionsMatchTheField) {
  for (const SpecIntField& f : spec_int_fields()) {
    if (!f.rule) continue;
    SCOPED_TRACE(std::string(f.policy_key));
    const std::string text = fmt::format(
        R"({{"latte_policy": 1, "rules": [{{"name": "r", "when": {{"{}": "2..8"}}, "order": ["x.*"]}}]}})",
        f.policy_key);
    const Policy policy = Policy::parse(text, "test", PolicyLayer::user);
    const PolicyRule& rule = policy.rules().front();
    for (Op op : all_ops()) {  // conditions look at the field whatever the op
      AttentionSpec spec;
      spec.op = op;
      EXPECT_TRUE(rule.matches(with(f, 4, spec), cpu())) << to_string(op);
      EXPECT_FALSE(rule.matches(with(f, 9, spec), cpu())) << to_string(op);
    }
    const Policy at_most = Policy::parse(
        fmt::format(R"({{"latte_policy": 1, "rules": [{{"name": "r", "when": {{"{}": "<=8"}}, "order": ["x.*"]}}]}})",
                    f.policy_key),
        "test", PolicyLayer::user);
    EXPECT_EQ(at_most.rules().front().matches(with(f, 0), cpu()), !f.zero_is_unknown);
  }
}

TEST(SpecFields, TheCacheKeyTellsEveryFieldApart) {
  const AttentionSpec base = testing::glm5_sparse();
  std::string base_key;
  detail::append_spec_key(base_key, base);
  std::set<std::string> keys = {base_key};
  for (const SpecIntField& f : spec_int_fields()) {
    std::string key;
    detail::append_spec_key(key, with(f, f.spec.get(base) + 1, base));
    EXPECT_TRUE(keys.insert(key).second) << f.name;
  }
  for (const auto& [name, change] : other_fields()) {
    AttentionSpec spec = base;
    change(spec);
    ASSERT_NE(spec, base) << name;
    std::string key;
    detail::append_spec_key(key, spec);
    EXPECT_TRUE(keys.insert(key).second) << name;
  }
  // A model name cannot pass for the fields after it.
  AttentionSpec a = base, b = base;
  a.model = "m|1";
  b.model = "m";
  std::string key_a, key_b;
  detail::append_spec_key(key_a, a);
  detail::append_spec_key(key_b, b);
  EXPECT_NE(key_a, key_b);
}

// Through Context: a backend that accepts one spec only. Were a field missing from the cache
// key, the second question would get the first answer back from the cache.
TEST(SpecFields, ContextCachesPerFieldAndSelectionJsonCarriesIt) {
  for (const SpecIntField& f : spec_int_fields()) {
    SCOPED_TRACE(std::string(f.name));
    const AttentionSpec wanted = with(f, 8, testing::glm5_sparse());
    Registry registry;
    registry.add(testing::make_backend("test.one_spec", open_caps(), [wanted](const AttentionSpec& s, const DeviceInfo&) {
      return s == wanted ? std::vector<Reason>{} : std::vector<Reason>{{"custom", "spec", "one spec", "another", "no"}};
    }));
    Context context(registry);
    SelectOptions options;
    options.use_environment = false;
    const Selection ok = context.explain(wanted, cpu(), options);
    ASSERT_TRUE(ok.ok());
    EXPECT_EQ(nlohmann::json::parse(ok.to_json())["spec"][std::string(f.name)], 8);
    EXPECT_FALSE(context.explain(with(f, 9, wanted), cpu(), options).ok());
    EXPECT_TRUE(context.explain(wanted, cpu(), options).ok());
  }
}

TEST(SpecFields, SuggestionsTryTheAlternatives) {
  for (const SpecIntField& f : spec_int_fields()) {
    if (f.alternatives.empty()) continue;
    SCOPED_TRACE(std::string(f.name));
    AttentionSpec spec;
    spec.op = applicable_op(f);
    // A listed alternative, and (for fields that also try the backends' values) one of those.
    std::vector<int64_t> values = {f.alternatives.back()};
    if (f.alternatives_from_caps) values.push_back(f.alternatives.back() + 1000);
    for (int64_t value : values) {
      f.spec.set(spec, value == 1 ? 2 : 1);
      Capabilities caps = open_caps();
      caps.*f.rule = IntRule::list({value});
      Registry registry;
      registry.add(testing::make_backend("test.other_value", caps));
      Context context(registry);
      SelectOptions options;
      options.use_environment = false;
      const Selection s = context.explain(spec, cpu(), options);
      ASSERT_FALSE(s.ok());
      const auto it = std::find_if(s.suggestions.begin(), s.suggestions.end(), [&](const Suggestion& sug) {
        return sug.field == f.name && sug.value == std::to_string(value);
      });
      ASSERT_NE(it, s.suggestions.end()) << s.explain();
      EXPECT_THAT(it->text, HasSubstr(fmt::format("{}={} would be accepted by test.other_value; today test.other_value "
                                                  "refuses: needs {} {}",
                                                  f.name, value, f.words_for(spec.op), value)));
    }
  }
}

// The C struct's integer fields (plugin ABI v1), to see which one a spec field lands in.
std::vector<int64_t> c_ints(const latte_spec_v1& c) {
  return {c.num_heads, c.head_dim, c.head_dim_v, c.block_size, c.topk, c.s_q, c.max_tokens};
}

TEST(SpecFields, ThePluginAdapterCarriesEveryFieldTheAbiHas) {
  const AttentionSpec base = testing::glm5_sparse();
  const std::vector<int64_t> before = c_ints(detail::spec_to_c(base));
  std::size_t carried = 0;
  for (const SpecIntField& f : spec_int_fields()) {
    SCOPED_TRACE(std::string(f.name));
    const int64_t value = f.spec.get(base) + 1000;
    const latte_spec_v1 c = detail::spec_to_c(with(f, value, base));
    const std::vector<int64_t> after = c_ints(c);
    std::size_t moved = 0;
    for (std::size_t i = 0; i < after.size(); ++i) moved += after[i] != before[i];
    if (!f.c_abi.present()) {
      EXPECT_EQ(moved, 0u);  // ABI v1 has no place for it
      continue;
    }
    ++carried;
    EXPECT_EQ(moved, 1u);
    EXPECT_EQ(f.c_abi.get(c), value);
  }
  EXPECT_EQ(carried, before.size()) << "an integer field of latte_spec_v1 is fed by no row";
}

}  // namespace
}  // namespace latte
