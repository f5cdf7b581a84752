// Declared capabilities -> structured reasons, IntRule, and the capabilities JSON form.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "latte/backend.hpp"
#include "latte/error.hpp"
#include "test_backends.hpp"

namespace latte {
namespace {

using ::testing::HasSubstr;
using testing::glm5_sparse;
using testing::mla_caps;

const Reason* find_reason(const std::vector<Reason>& reasons, const std::string& code) {
  for (const Reason& r : reasons) {
    if (r.code == code) return &r;
  }
  return nullptr;
}

std::vector<std::string> codes(const std::vector<Reason>& reasons) {
  std::vector<std::string> out;
  for (const Reason& r : reasons) out.push_back(r.code);
  return out;
}

TEST(IntRule, AcceptsEveryPartThatIsPresent) {
  IntRule rule{1, 128, 8, {}};
  EXPECT_TRUE(rule.accepts(8));
  EXPECT_TRUE(rule.accepts(128));
  EXPECT_FALSE(rule.accepts(0));
  EXPECT_FALSE(rule.accepts(12));   // not a multiple of 8
  EXPECT_FALSE(rule.accepts(136));  // above max
  EXPECT_TRUE(IntRule::any().accepts(-5));
  EXPECT_TRUE(IntRule::list({64, 128}).accepts(64));
  EXPECT_FALSE(IntRule::list({64, 128}).accepts(8));
  EXPECT_TRUE(IntRule::at_least(80).accepts(120));
  EXPECT_FALSE(IntRule::at_least(80).accepts(75));
}

TEST(IntRule, DescribesItselfReadably) {
  EXPECT_EQ(IntRule::any().describe(), "any");
  EXPECT_EQ(IntRule::list({64, 128}).describe(), "one of {64, 128}");
  EXPECT_EQ(IntRule::list({576}).describe(), "576");
  EXPECT_EQ((IntRule{1, 128, 8, {}}).describe(), "1..128, a multiple of 8");
  EXPECT_EQ(IntRule::at_least(1).describe(), ">= 1");
  EXPECT_EQ(IntRule::at_least(89).describe_with([](int64_t a) { return arch_name(static_cast<int>(a)); }),
            ">= sm_89");
}

TEST(CheckDeclared, AcceptsAMatchingSpec) {
  Capabilities caps = mla_caps({DeviceKind::cuda}, IntRule::at_least(80));
  EXPECT_TRUE(check_declared(caps, glm5_sparse(), describe_device("sm_120")).empty());
}

TEST(CheckDeclared, WrongOpIsReportedAlone) {
  Capabilities caps = mla_caps({DeviceKind::cuda}, IntRule::list({90}));
  caps.ops = {Op::mla_decode};
  caps.heads = IntRule::list({64, 128});
  const auto reasons = check_declared(caps, glm5_sparse(), describe_device("cpu"));
  ASSERT_EQ(reasons.size(), 1u);
  EXPECT_EQ(reasons[0].code, "op");
  EXPECT_EQ(reasons[0].got, "sparse_mla");
  EXPECT_EQ(reasons[0].wanted, "{mla_decode}");
  EXPECT_THAT(reasons[0].text, HasSubstr("does not implement sparse_mla"));
}

TEST(CheckDeclared, DeviceKindAndArch) {
  Capabilities caps = mla_caps({DeviceKind::cuda}, IntRule::list({90, 100}));
  auto on_cpu = check_declared(caps, glm5_sparse(), describe_device("cpu"));
  EXPECT_EQ(codes(on_cpu), std::vector<std::string>{"device_kind"});
  EXPECT_EQ(on_cpu[0].wanted, "{cuda}");
  EXPECT_EQ(on_cpu[0].got, "cpu");

  auto on_86 = check_declared(caps, glm5_sparse(), describe_device("sm_86"));
  const Reason* arch = find_reason(on_86, "arch");
  ASSERT_NE(arch, nullptr);
  EXPECT_EQ(arch->field, "device.arch");
  EXPECT_EQ(arch->wanted, "one of {sm_90, sm_100}");
  EXPECT_EQ(arch->got, "sm_86");
  EXPECT_EQ(arch->text, "needs one of {sm_90, sm_100}; this device is sm_86");
  EXPECT_TRUE(check_declared(caps, glm5_sparse(), describe_device("sm_100")).empty());
}

TEST(CheckDeclared, ArchIsIgnoredOnTheCpu) {
  Capabilities caps = mla_caps({DeviceKind::cpu, DeviceKind::cuda}, IntRule::at_least(89));
  EXPECT_TRUE(check_declared(caps, glm5_sparse(), describe_device("cpu")).empty());
  const auto on_80 = check_declared(caps, glm5_sparse(), describe_device("sm_80"));
  EXPECT_EQ(codes(on_80), std::vector<std::string>{"arch"});
  EXPECT_EQ(on_80[0].text, "needs sm_89 or newer; this device is sm_80");
}

TEST(CheckDeclared, HeadsNamesTheTensorParallelSplit) {
  Capabilities caps = mla_caps({DeviceKind::cuda});
  caps.heads = IntRule::list({64, 128});
  const auto reasons = check_declared(caps, glm5_sparse(8), describe_device("sm_90"));
  ASSERT_EQ(reasons.size(), 1u);
  EXPECT_EQ(reasons[0].code, "heads");
  EXPECT_EQ(reasons[0].field, "num_heads");
  EXPECT_EQ(reasons[0].wanted, "one of {64, 128}");
  EXPECT_EQ(reasons[0].got, "8");
  EXPECT_EQ(reasons[0].text, "needs heads per rank one of {64, 128}; this spec has 8 (64 heads / tp 8)");
}

TEST(CheckDeclared, EveryFieldHasItsCode) {
  Capabilities caps = mla_caps({DeviceKind::cuda});
  caps.q_dtypes = {DType::e4m3};
  caps.kv_caches = {CacheFormat::fp8_ds_mla};
  caps.heads = IntRule::list({128});
  caps.head_dim = IntRule::list({512});
  caps.block_size = IntRule::list({1});
  caps.topk = IntRule::multiple(4096);
  caps.max_tokens = IntRule::range(1, 16);
  AttentionSpec spec = glm5_sparse(8);
  spec.max_tokens = 64;
  const auto reasons = check_declared(caps, spec, describe_device("sm_90"));
  EXPECT_EQ(codes(reasons), (std::vector<std::string>{"q_dtype", "kv_cache", "heads", "head_dim", "block_size",
                                                      "topk", "tokens"}));
  EXPECT_EQ(find_reason(reasons, "kv_cache")->text, "reads the fp8_ds_mla KV cache only; this spec uses bf16");
  EXPECT_EQ(find_reason(reasons, "q_dtype")->text, "takes e4m3 queries; this spec has bf16 queries");
  EXPECT_EQ(find_reason(reasons, "topk")->wanted, "a multiple of 4096");
  EXPECT_EQ(find_reason(reasons, "topk")->got, "2048");
  EXPECT_EQ(find_reason(reasons, "block_size")->got, "64");
  EXPECT_EQ(find_reason(reasons, "tokens")->text, "needs tokens per call 1..16; this spec has 64");
}

TEST(CheckDeclared, FieldsThatDoNotApplyToTheOpAreNotChecked) {
  Capabilities caps;
  caps.ops = {Op::mla_decode, Op::indexer_topk, Op::kv_store};
  caps.devices = {DeviceKind::cpu};
  caps.topk = IntRule::list({1});          // mla_decode has no topk
  caps.kv_caches = {CacheFormat::fp8_ds_mla};  // the indexer has no MLA cache
  caps.s_q = IntRule::list({2});           // only mla_decode has s_q
  caps.heads = IntRule::list({3});         // kv_store has no heads
  const DeviceInfo cpu = describe_device("cpu");

  const ModelSpec dsa = load_model("deepseek-v3.2");
  AttentionSpec decode = attention_spec(dsa, Op::mla_decode);
  EXPECT_EQ(codes(check_declared(caps, decode, cpu)), (std::vector<std::string>{"kv_cache", "heads", "s_q"}));
  AttentionSpec indexer = attention_spec(dsa, Op::indexer_topk);
  EXPECT_EQ(codes(check_declared(caps, indexer, cpu)), (std::vector<std::string>{"heads", "topk"}));
  AttentionSpec store = attention_spec(dsa, Op::kv_store);
  EXPECT_EQ(codes(check_declared(caps, store, cpu)), (std::vector<std::string>{"kv_cache"}));
}

TEST(CheckDeclared, UnknownTokenCountIsNotRefused) {
  Capabilities caps = mla_caps({DeviceKind::cpu});
  caps.max_tokens = IntRule::range(1, 16);
  AttentionSpec spec = glm5_sparse();
  spec.max_tokens = 0;
  EXPECT_TRUE(check_declared(caps, spec, describe_device("cpu")).empty());
  spec.max_tokens = 17;
  EXPECT_EQ(codes(check_declared(caps, spec, describe_device("cpu"))), std::vector<std::string>{"tokens"});
}

TEST(CheckDeclared, ABackendDeclaringNoOpsOrDevicesAcceptsNothing) {
  Capabilities none;
  const auto reasons = check_declared(none, glm5_sparse(), describe_device("cpu"));
  ASSERT_EQ(reasons.size(), 1u);
  EXPECT_EQ(reasons[0].wanted, "none declared");
  Capabilities no_devices = mla_caps({});
  EXPECT_EQ(codes(check_declared(no_devices, glm5_sparse(), describe_device("cpu"))),
            std::vector<std::string>{"device_kind"});
}

TEST(CheckDeclared, DeclaredAcceptsAgreesWithTheReasons) {
  std::vector<Capabilities> all;
  for (int arch : {80, 89, 90}) {
    Capabilities caps = mla_caps({DeviceKind::cuda}, IntRule::at_least(arch));
    caps.kv_caches = {CacheFormat::bf16};
    all.push_back(caps);
    caps.heads = IntRule::list({64, 128});
    caps.kv_caches = {};
    all.push_back(caps);
  }
  all.push_back(mla_caps({DeviceKind::cpu}));
  int accepted = 0, refused = 0;
  for (const Capabilities& caps : all) {
    for (int tp : {1, 8}) {
      for (CacheFormat cache : {CacheFormat::bf16, CacheFormat::fp8_ds_mla}) {
        for (const char* device : {"cpu", "sm_80", "sm_90", "sm_120"}) {
          const AttentionSpec spec = glm5_sparse(tp, cache);
          const DeviceInfo d = describe_device(device);
          const bool empty = check_declared(caps, spec, d).empty();
          EXPECT_EQ(declared_accepts(caps, spec, d), empty) << device << " tp " << tp;
          (empty ? accepted : refused) += 1;
        }
      }
    }
  }
  EXPECT_GT(accepted, 0);
  EXPECT_GT(refused, 0);
}

TEST(Check, CustomReasonsFollowDeclaredOnesAndAreSkippedWhenMoot) {
  auto backend = testing::make_backend("test.fp8", mla_caps({DeviceKind::cuda}), [](const AttentionSpec& spec, const DeviceInfo& d) {
    std::vector<Reason> out;
    if (spec.kv_cache == CacheFormat::fp8_ds_mla && d.arch() < 89) {
      out.push_back({"arch", "device.arch", ">= sm_89", arch_name(d.arch()),
                     "needs sm_89 or newer (fp8 e4m3 mma); this device is " + arch_name(d.arch())});
    }
    return out;
  });
  const auto reasons = check(*backend, glm5_sparse(8, CacheFormat::fp8_ds_mla), describe_device("sm_86"));
  ASSERT_EQ(reasons.size(), 1u);
  EXPECT_EQ(reasons[0].text, "needs sm_89 or newer (fp8 e4m3 mma); this device is sm_86");
  EXPECT_EQ(backend->custom_calls.load(), 1);
  // On the CPU the device kind already refuses: the custom rule is not asked.
  EXPECT_EQ(codes(check(*backend, glm5_sparse(8, CacheFormat::fp8_ds_mla), describe_device("cpu"))),
            std::vector<std::string>{"device_kind"});
  EXPECT_EQ(backend->custom_calls.load(), 1);
}

TEST(CapabilitiesJson, RoundTrips) {
  Capabilities caps = mla_caps({DeviceKind::cuda}, IntRule::at_least(80));
  caps.kv_caches = {CacheFormat::bf16, CacheFormat::fp8_ds_mla};
  caps.heads = IntRule{1, 128, 1, {}};
  caps.topk = IntRule::list({512, 1024, 2048});
  caps.workspace = "T * H * 4 bytes";
  caps.notes = "note";
  const std::string text = capabilities_to_json(caps);
  EXPECT_EQ(capabilities_from_json(text, "test"), caps);
  EXPECT_THAT(text, HasSubstr("\"arch\":{\"min\":80}"));
  EXPECT_THAT(text, HasSubstr("\"block_size\":\"any\""));
}

TEST(CapabilitiesJson, AcceptsShorthandRules) {
  const Capabilities caps = capabilities_from_json(
      R"({"ops": ["sparse_mla"], "devices": ["cpu"], "heads": [64, 128], "head_dim": 576, "topk": "any"})", "t");
  EXPECT_EQ(caps.heads, IntRule::list({64, 128}));
  EXPECT_EQ(caps.head_dim, IntRule::list({576}));
  EXPECT_TRUE(caps.topk.is_any());
}

struct BadCaps {
  const char* json;
  const char* fragment;
};
void PrintTo(const BadCaps& c, std::ostream* os) { *os << c.json; }

class CapabilitiesJsonErrors : public ::testing::TestWithParam<BadCaps> {};

TEST_P(CapabilitiesJsonErrors, NameTheSourceKeyAndValue) {
  try {
    (void)capabilities_from_json(GetParam().json, "libacme.so (backend acme.x)");
    FAIL() << "accepted: " << GetParam().json;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::plugin_error);
    EXPECT_THAT(e.what(), HasSubstr("libacme.so (backend acme.x)"));
    EXPECT_THAT(e.what(), HasSubstr(GetParam().fragment));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Table, CapabilitiesJsonErrors,
    ::testing::Values(BadCaps{"{ops: [", "not valid JSON"},
                      BadCaps{R"({"ops": ["sparse_mla"], "devices": ["cpu"], "heads": 1e99999})", "not valid JSON"},
                      BadCaps{"[1]", "must be a JSON object"},
                      BadCaps{R"({"devices": ["cpu"]})", "\"ops\" = null: is required"},
                      BadCaps{R"({"ops": [], "devices": ["cpu"]})", "must list at least one op"},
                      BadCaps{R"({"ops": ["sparse"], "devices": ["cpu"]})", "\"sparse\": is not one of sparse_mla"},
                      BadCaps{R"({"ops": ["sparse_mla"]})", "\"devices\" = null"},
                      BadCaps{R"({"ops": ["sparse_mla"], "devices": ["gpu"]})", "is not one of cpu, cuda"},
                      BadCaps{R"({"ops": ["sparse_mla"], "devices": ["cpu"], "heads": "64"})", "\"heads\" = \"64\""},
                      BadCaps{R"({"ops": ["sparse_mla"], "devices": ["cpu"], "heads": {"min": 9, "max": 1}})", "min 9 is above max 1"},
                      BadCaps{R"({"ops": ["sparse_mla"], "devices": ["cpu"], "topk": {"multiple_of": 0}})", "\"topk.multiple_of\" = 0"},
                      BadCaps{R"({"ops": ["sparse_mla"], "devices": ["cpu"], "topk": {"step": 64}})", "\"topk.step\""},
                      BadCaps{R"({"ops": ["sparse_mla"], "devices": ["cpu"], "kv_caches": ["fp8"]})", "bf16, fp8_ds_mla"},
                      BadCaps{R"({"ops": ["sparse_mla"], "devices": ["cpu"], "heads": []})", "an empty list accepts nothing"},
                      BadCaps{R"({"ops": ["sparse_mla"], "devices": ["cpu"], "speed": 9})", "\"speed\" = 9: unknown key"}));

// The shared refusals of the MLA kernels: a latent output other than 512 dims, and a device with
// less shared memory per block than a kernel needs (CUDA only; a device reporting none passes).
TEST(SharedRefusals, LatentOutputAndSharedMemory) {
  AttentionSpec spec = glm5_sparse();
  EXPECT_FALSE(latent_output_refusal("acme.mla", spec));
  spec.head_dim_v = 128;
  const auto latent = latent_output_refusal("acme.mla", spec);
  ASSERT_TRUE(latent);
  EXPECT_EQ(latent->code, "head_dim_v");
  EXPECT_EQ(latent->got, "128");
  EXPECT_THAT(latent->text, HasSubstr("acme.mla computes the 512-dim MLA latent output"));
  const DeviceInfo h100 = describe_device("sm_90"), rtx = describe_device("sm_120"), cpu = describe_device("cpu");
  ASSERT_GT(rtx.max_smem_per_block, 0);
  EXPECT_FALSE(smem_refusal("acme.mla", rtx.max_smem_per_block, rtx));
  const auto smem = smem_refusal("acme.mla", rtx.max_smem_per_block + 1, rtx);
  ASSERT_TRUE(smem);
  EXPECT_EQ(smem->code, "smem");
  EXPECT_EQ(smem->got, std::to_string(rtx.max_smem_per_block));
  EXPECT_THAT(smem->text, HasSubstr("acme.mla needs"));
  EXPECT_FALSE(smem_refusal("acme.mla", h100.max_smem_per_block, h100));
  EXPECT_FALSE(smem_refusal("acme.mla", int64_t{1} << 40, cpu));
}

}  // namespace
}  // namespace latte
