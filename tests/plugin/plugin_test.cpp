// Plugins: the example plugin is loaded, selected through the rule it ships and run against a
// float64 loop; every broken plugin is refused with a clear message and the host keeps working.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>

#include "core/test_backends.hpp"
#include "latte/context.hpp"
#include "latte/error.hpp"
#include "latte/registry.hpp"
#include "latte_workload/buffers.hpp"
#include "latte_workload/dsa_step.hpp"

namespace latte {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::glm5_sparse;
using testing::make_backend;
using testing::mla_caps;

const std::string kExample = std::filesystem::weakly_canonical(LATTE_EXAMPLE_PLUGIN).string();

std::string broken(const std::string& name) {
  return std::filesystem::weakly_canonical(std::string(LATTE_BROKEN_PLUGIN_DIR) + "/lib" + name + ".so").string();
}

uint16_t to_bf16(float value) {  // round to nearest even (finite inputs only here)
  uint32_t word;
  std::memcpy(&word, &value, sizeof word);
  word += 0x7fffu + ((word >> 16) & 1u);
  return static_cast<uint16_t>(word >> 16);
}
float from_bf16(uint16_t bits) {
  const uint32_t word = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &word, sizeof value);
  return value;
}

SelectOptions no_env() {
  SelectOptions o;
  o.use_environment = false;
  return o;
}

// A small random sparse-MLA problem, run through a kernel and checked against float64.
struct SparseCase {
  int64_t tokens = 3, heads = 8, topk = 40, num_blocks = 4, block_size = 16;
  float scale = 0.0625f;
  std::vector<uint16_t> q, cache, out;
  std::vector<int32_t> indices;
  std::vector<float> lse;

  explicit SparseCase(uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    q.resize(tokens * heads * 576);
    cache.resize(num_blocks * block_size * 576);
    for (auto& v : q) v = to_bf16(normal(rng));
    for (auto& v : cache) v = to_bf16(normal(rng));
    const int64_t slots = num_blocks * block_size;
    indices.assign(tokens * topk, -1);
    for (int64_t t = 0; t < tokens; ++t) {
      if (t == 1) continue;  // an empty row: out 0, lse -inf
      std::vector<int32_t> all(slots);
      for (int32_t s = 0; s < slots; ++s) all[s] = s;
      std::shuffle(all.begin(), all.end(), rng);
      const int64_t valid = topk - 5 * t;  // trailing -1 padding on later rows
      for (int64_t k = 0; k < valid; ++k) indices[t * topk + k] = all[k];
    }
    out.assign(tokens * heads * 512, 0x7fc0);  // NaN: every element must be written
    lse.assign(tokens * heads, 0.0f);
  }

  SparseMlaArgs args() {
    SparseMlaArgs a;
    a.q = TensorView::contiguous(q.data(), DType::bf16, {tokens, heads, 576});
    a.kv_cache = TensorView::contiguous(cache.data(), DType::bf16, {num_blocks, block_size, 576});
    a.indices = TensorView::contiguous(indices.data(), DType::i32, {tokens, topk});
    a.out = TensorView::contiguous(out.data(), DType::bf16, {tokens, heads, 512});
    a.lse = TensorView::contiguous(lse.data(), DType::f32, {tokens, heads});
    a.scale = scale;
    return a;
  }

  // Compares out and lse with a float64 evaluation of docs/design.md, section 2.
  void expect_matches_float64() const {
    const int64_t slots = num_blocks * block_size;
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t h = 0; h < heads; ++h) {
        std::vector<double> scores;
        std::vector<int32_t> used;
        for (int64_t k = 0; k < topk; ++k) {
          const int32_t s = indices[t * topk + k];
          if (s < 0 || s >= slots) continue;
          double dot = 0;
          for (int d = 0; d < 576; ++d) dot += double(from_bf16(q[(t * heads + h) * 576 + d])) * from_bf16(cache[s * 576 + d]);
          scores.push_back(double(scale) * dot);
          used.push_back(s);
        }
        const float got_lse = lse[t * heads + h];
        if (scores.empty()) {
          EXPECT_TRUE(std::isinf(got_lse) && got_lse < 0) << "t=" << t << " h=" << h;
          for (int d = 0; d < 512; ++d) ASSERT_EQ(from_bf16(out[(t * heads + h) * 512 + d]), 0.0f);
          continue;
        }
        const double m = *std::max_element(scores.begin(), scores.end());
        double sum = 0;
        for (double s : scores) sum += std::exp(s - m);
        const double ref_lse = m + std::log(sum);
        EXPECT_NEAR(got_lse, ref_lse, 1e-4 * std::max(1.0, std::abs(ref_lse))) << "t=" << t << " h=" << h;
        for (int d = 0; d < 512; ++d) {
          double ref = 0;
          for (std::size_t i = 0; i < used.size(); ++i) ref += std::exp(scores[i] - ref_lse) * from_bf16(cache[used[i] * 576 + d]);
          const float got = from_bf16(out[(t * heads + h) * 512 + d]);
          ASSERT_NEAR(got, ref, 1e-2 * std::abs(ref) + 1e-3) << "t=" << t << " h=" << h << " d=" << d;
        }
      }
    }
  }
};

class PluginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Capabilities cpu = mla_caps({DeviceKind::cpu});
    cpu.kv_caches = {CacheFormat::bf16};
    registry.add(make_backend("cpu.test_reference", cpu));
    registry.add(make_backend("test.builtin_backend", mla_caps({DeviceKind::cuda})));
  }

  // The host state a refused plugin must leave untouched.
  struct HostState {
    std::vector<std::string> ids;
    uint64_t policy_fingerprint;
    std::size_t plugins;
    friend bool operator==(const HostState&, const HostState&) = default;
  };
  HostState state() const { return {registry.ids(), context.policies().fingerprint(), context.plugins().size()}; }

  void expect_host_works() {
    const Selection s = context.select(glm5_sparse(8), describe_device("cpu"), no_env());
    EXPECT_TRUE(s.chosen == "cpu.test_reference" || s.chosen == "example.cpu_sparse_mla") << s.chosen;
    auto kernel = s.backend->make(s.spec, s.device);
    SparseCase c(7);
    kernel->run(c.args(), RunContext{});
  }

  Registry registry;
  Context context{registry};
};

TEST_F(PluginTest, ExamplePluginIsSelectedThroughItsShippedRuleAndComputesCorrectly) {
  const PluginInfo info = context.load_plugin(LATTE_EXAMPLE_PLUGIN);
  EXPECT_EQ(info.path, kExample);
  EXPECT_EQ(info.name, "latte-example");
  EXPECT_EQ(info.version, "1.0");
  EXPECT_EQ(info.backend_ids, std::vector<std::string>{"example.cpu_sparse_mla"});
  EXPECT_EQ(info.policy_rules, 1);
  EXPECT_EQ(registry.source_of("example.cpu_sparse_mla"), kExample);

  const Selection s = context.select(glm5_sparse(8), describe_device("cpu"), no_env());
  EXPECT_EQ(s.chosen, "example.cpu_sparse_mla");
  EXPECT_EQ(s.valid[0].rule, "plugin:" + kExample + "#example-cpu-sparse-mla");
  EXPECT_EQ(s.valid[1].id, "cpu.test_reference");  // the built-in cpu rule ranks it next
  EXPECT_EQ(s.valid[1].rule, "defaults:built-in#cpu");

  auto kernel = s.backend->make(s.spec, s.device);
  EXPECT_EQ(kernel->workspace_bytes(), 0u);
  EXPECT_EQ(kernel->describe(), "one host thread, 8 heads per token, float32 sums");  // OPTIONAL entry
  SparseCase c(1234);
  kernel->run(c.args(), RunContext{});
  c.expect_matches_float64();
}

TEST_F(PluginTest, ExamplePluginDeclaresWhatItRefuses) {
  context.load_plugin(LATTE_EXAMPLE_PLUGIN);
  // fp8 cache: the example plugin refuses with its declared kv_cache rule.
  const Selection fp8 = context.explain(glm5_sparse(8, CacheFormat::fp8_ds_mla), describe_device("cpu"), no_env());
  EXPECT_FALSE(fp8.ok());
  bool found = false;
  for (const auto& r : fp8.rejected) {
    if (r.id != "example.cpu_sparse_mla") continue;
    found = true;
    ASSERT_EQ(r.reasons.size(), 1u);
    EXPECT_EQ(r.reasons[0].code, "kv_cache");
  }
  EXPECT_TRUE(found);
  // Its custom check (through the C ABI's check callback) refuses a latent that is not 512 wide.
  AttentionSpec odd = glm5_sparse(8);
  odd.head_dim_v = 256;
  const auto reasons = check(*registry.get("example.cpu_sparse_mla"), odd, describe_device("cpu"));
  ASSERT_EQ(reasons.size(), 1u);
  EXPECT_EQ(reasons[0].code, "head_dim_v");
  EXPECT_EQ(reasons[0].got, "256");
}

TEST_F(PluginTest, ASplitQueryIsRefusedByPlugins) {
  // ABI v1 hands a plugin one q [T, H, 576]: a call with q_rope (AttentionSpec::split_q) is
  // refused with its reason, and the built-in reference takes it.
  context.load_plugin(LATTE_EXAMPLE_PLUGIN);
  AttentionSpec split = glm5_sparse(8);
  split.split_q = true;
  const auto reasons = check(*registry.get("example.cpu_sparse_mla"), split, describe_device("cpu"));
  ASSERT_EQ(reasons.size(), 1u);
  EXPECT_EQ(reasons[0].code, "split_q");
  EXPECT_NE(reasons[0].text.find("concatenate q and q_rope"), std::string::npos);
  const Selection s = context.select(split, describe_device("cpu"), no_env());
  EXPECT_EQ(s.chosen, "cpu.test_reference");
}

TEST_F(PluginTest, RowsWithoutRopeAndTopkLensAreRefusedByPlugins) {
  // ABI v1 has no rope_dim and no topk_lens: a plugin would read a row without rope as one with
  // rope, and every column of indices. Each spec is refused with its reason.
  context.load_plugin(LATTE_EXAMPLE_PLUGIN);
  const auto& plugin = *registry.get("example.cpu_sparse_mla");
  AttentionSpec nope = glm5_sparse(8);
  nope.head_dim = kLatentDim;
  const auto nope_reasons = check(plugin, nope, describe_device("cpu"));
  const auto rope_dim = std::find_if(nope_reasons.begin(), nope_reasons.end(),
                                     [](const Reason& r) { return r.code == "rope_dim"; });
  ASSERT_NE(rope_dim, nope_reasons.end());
  EXPECT_EQ(rope_dim->got, "512 (rope_dim 0: no rope)");
  EXPECT_NE(rope_dim->text.find("the ABI has no rope_dim"), std::string::npos);
  AttentionSpec lens = glm5_sparse(8);
  lens.topk_lens = true;
  const auto lens_reasons = check(plugin, lens, describe_device("cpu"));
  ASSERT_EQ(lens_reasons.size(), 1u);
  EXPECT_EQ(lens_reasons[0].code, "topk_lens");
  EXPECT_NE(lens_reasons[0].text.find("pad each row with -1 past its length"), std::string::npos);
  // The built-in reference (here a test backend with the same declared rules) takes topk_lens.
  EXPECT_EQ(context.select(lens, describe_device("cpu"), no_env()).chosen, "cpu.test_reference");
}

TEST_F(PluginTest, UserPolicyOutranksThePluginRule) {
  context.load_plugin(LATTE_EXAMPLE_PLUGIN);
  context.add_policy(Policy::parse(R"({"latte_policy": 1, "rules": [{"name": "mine", "order": ["cpu.test_*"]}]})",
                                   "/home/me/latte.json", PolicyLayer::user));
  EXPECT_EQ(context.select(glm5_sparse(8), describe_device("cpu"), no_env()).chosen, "cpu.test_reference");
}

TEST_F(PluginTest, ExampleKernelReportsBadArgumentsAndBadIndices) {
  context.load_plugin(LATTE_EXAMPLE_PLUGIN);
  const Selection s = context.select(glm5_sparse(8), describe_device("cpu"), no_env());
  auto kernel = s.backend->make(s.spec, s.device);

  SparseCase c(99);
  // The host's validation layer refuses malformed arguments before the plugin sees them...
  SparseMlaArgs a = c.args();
  a.q.dtype = DType::f16;
  try {
    kernel->run(a, RunContext{});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_THAT(e.what(), HasSubstr("q"));
    EXPECT_THAT(e.what(), Not(HasSubstr("example.cpu_sparse_mla")));
  }
  // A call that does not fit the kernel's spec (made for 8 heads per rank, the call has 16) is
  // refused by latte, naming both, before the plugin sees it...
  SparseCase wide(5);
  wide.heads = 16;
  wide.q.resize(wide.tokens * 16 * 576);
  wide.out.resize(wide.tokens * 16 * 512);
  wide.lse.resize(wide.tokens * 16);
  try {
    kernel->run(wide.args(), RunContext{});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_THAT(e.what(), HasSubstr("made for heads 8 but the call has heads 16"));
  }
  // ...and the plugin's own errors come back through the C ABI: a kernel made without a head
  // count (any, as far as latte is concerned) is the plugin's to refuse.
  AttentionSpec any_heads = s.spec;
  any_heads.num_heads = 0;
  const auto loose = s.backend->make(any_heads, s.device);
  try {
    loose->run(wide.args(), RunContext{});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_THAT(e.what(), HasSubstr("example.cpu_sparse_mla: sparse_mla: q dim 1 must be 0, got 16"));
  }

  // An out-of-range slot: an error naming it in check mode (latte checks every backend's
  // indices alike, before the kernel runs), skipped (treated as -1) otherwise.
  c.indices[2] = 100000;
  RunContext checked;
  checked.check_indices = true;
  try {
    kernel->run(c.args(), checked);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("sparse_mla: indices[0, 2] = 100000 is out of range; allowed -1 (none) or 0..63"));
  }
  kernel->run(c.args(), RunContext{});
  c.expect_matches_float64();

  // A kernel made for sparse_mla refuses other ops' arguments before calling the plugin.
  EXPECT_THROW(kernel->run(KvStoreArgs{}, RunContext{}), Error);
}

struct BrokenCase {
  const char* library;
  const char* fragment;
};
void PrintTo(const BrokenCase& c, std::ostream* os) { *os << c.library; }

class BrokenPlugins : public PluginTest, public ::testing::WithParamInterface<BrokenCase> {};

TEST_P(BrokenPlugins, AreRefusedAndTheHostKeepsWorking) {
  const HostState before = state();
  const std::string path = broken(GetParam().library);
  ASSERT_TRUE(std::filesystem::exists(path)) << path;
  try {
    context.load_plugin(path);
    FAIL() << "loaded " << path;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::plugin_error);
    EXPECT_THAT(e.what(), HasSubstr("plugin " + path + " refused"));
    EXPECT_THAT(e.what(), HasSubstr(GetParam().fragment));
  }
  EXPECT_EQ(state(), before);
  expect_host_works();
}

INSTANTIATE_TEST_SUITE_P(
    EveryFailure, BrokenPlugins,
    ::testing::Values(
        BrokenCase{"latte_broken_abi", "built for plugin ABI version 42, this latte speaks version 1"},
        BrokenCase{"latte_broken_no_entry", "does not export the entry point 'latte_plugin_entry'"},
        BrokenCase{"latte_broken_entry_error", "entry point failed with code 7: license file /opt/acme/license.key not found"},
        BrokenCase{"latte_broken_entry_throws", "entry point threw an exception (acme runtime could not initialise)"},
        BrokenCase{"latte_broken_caps_json", ": not valid JSON"},
        BrokenCase{"latte_broken_policy", "the policy it ships is malformed: policy error in"},
        BrokenCase{"latte_broken_null_run", "leaves a required function NULL"},
        BrokenCase{"latte_broken_twice", "declares backend id 'broken.backend' twice"},
        BrokenCase{"latte_broken_bad_id", "backend id 'no_namespace' is not valid"},
        BrokenCase{"latte_broken_dup_builtin", "'test.builtin_backend' is already registered from built-in"}),
    [](const ::testing::TestParamInfo<BrokenCase>& info) { return std::string(info.param.library).substr(13); });

// A plugin built before `describe` was appended: its array has the old stride, both backends
// load, and their kernels describe nothing.
TEST_F(PluginTest, PluginWithTheFirstVersion1LayoutLoadsWithoutDescribe) {
  const PluginInfo info = context.load_plugin(LATTE_V1_BASE_PLUGIN);
  EXPECT_EQ(info.backend_ids, (std::vector<std::string>{"old.first", "old.second"}));
  for (const char* id : {"old.first", "old.second"}) {
    const auto kernel = registry.get(id)->make(glm5_sparse(8), describe_device("cpu"));
    EXPECT_EQ(kernel->describe(), "") << id;
    EXPECT_EQ(kernel->workspace_bytes(), 0u) << id;
  }
  expect_host_works();
}

TEST_F(PluginTest, IdClashWithAnotherPluginNamesBothSources) {
  context.load_plugin(LATTE_EXAMPLE_PLUGIN);
  const HostState before = state();
  const std::string path = broken("latte_broken_dup_example");
  try {
    context.load_plugin(path);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::plugin_error);
    EXPECT_THAT(e.what(), HasSubstr("plugin " + path + " refused"));
    EXPECT_THAT(e.what(), HasSubstr("'example.cpu_sparse_mla' is already registered from " + kExample));
  }
  EXPECT_EQ(state(), before);
  expect_host_works();
  EXPECT_EQ(context.select(glm5_sparse(8), describe_device("cpu"), no_env()).chosen, "example.cpu_sparse_mla");
}

TEST_F(PluginTest, NotALibraryAndMissingFilesAreRefused) {
  const HostState before = state();
  const auto dir = std::filesystem::temp_directory_path() / ("latte_plugin_garbage_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string garbage = (dir / "libgarbage.so").string();
  std::ofstream(garbage) << "this is not an ELF file\n";
  try {
    context.load_plugin(garbage);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::plugin_error);
    EXPECT_THAT(e.what(), HasSubstr("it is not an ELF shared library: it starts with bytes 74 68 69 73"));
    EXPECT_THAT(e.what(), HasSubstr(garbage));
  }
  try {
    context.load_plugin((dir / "libmissing.so").string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::plugin_error);
    EXPECT_THAT(e.what(), HasSubstr("no such file"));
  }
  EXPECT_EQ(state(), before);
  expect_host_works();
  std::filesystem::remove_all(dir);
}

// A cut copy of a real plugin: dlopen would map its segments past the end of the file and die
// of SIGBUS touching them, so the file is checked first. Every cut is refused, naming the part
// that is missing, and the host keeps working; on the search path too.
TEST_F(PluginTest, TruncatedAndEmptyLibrariesAreRefusedBeforeDlopen) {
  const HostState before = state();
  const auto dir = std::filesystem::temp_directory_path() / ("latte_plugin_cut_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ifstream in(kExample, std::ios::binary);
  const std::string whole((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(whole.size(), 4096u);
  const std::vector<std::pair<std::size_t, std::string>> cuts = {
      {0, "the file is empty (0 bytes), not a shared library"},
      {3, "it is not an ELF shared library: it starts with bytes 7f 45 4c"},
      {40, "it is truncated: its ELF header spans bytes 0..64 but the file has 40 bytes"},
      {1000, "but the file has 1000 bytes (an interrupted copy or build?); rebuild or reinstall the plugin"},
      {whole.size() / 2, "it is truncated: its segment "},
      {whole.size() - 1, "it is truncated: its section header table spans bytes"}};
  for (const auto& [length, fragment] : cuts) {
    const std::string cut = (dir / ("libcut" + std::to_string(length) + ".so")).string();
    std::ofstream(cut, std::ios::binary).write(whole.data(), static_cast<std::streamsize>(length));
    try {
      context.load_plugin(cut);
      FAIL() << "loaded " << cut;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::plugin_error);
      EXPECT_THAT(e.what(), HasSubstr("plugin " + cut + " refused: "));
      EXPECT_THAT(e.what(), HasSubstr(fragment)) << length;
    }
  }
  EXPECT_EQ(state(), before);
  const auto results = context.load_plugin_path(dir.string());
  ASSERT_EQ(results.size(), cuts.size());
  for (const auto& r : results) {
    EXPECT_FALSE(r.loaded) << r.path;
    EXPECT_THAT(r.error, HasSubstr("refused: ")) << r.path;
  }
  EXPECT_EQ(state(), before);
  expect_host_works();
  std::filesystem::remove_all(dir);
}

TEST_F(PluginTest, LoadingTheSameFileTwiceIsANoOp) {
  const PluginInfo a = context.load_plugin(LATTE_EXAMPLE_PLUGIN);
  const uint64_t generation = registry.generation();
  const PluginInfo b = context.load_plugin(std::string(LATTE_EXAMPLE_PLUGIN_DIR) + "/../plugins/" +
                                           std::filesystem::path(LATTE_EXAMPLE_PLUGIN).filename().string());
  EXPECT_EQ(a.path, b.path);
  EXPECT_EQ(registry.generation(), generation);
  EXPECT_EQ(context.plugins().size(), 1u);
}

// latte run with a stage on a plugin backend: its check copies the output for the oracle, and
// the memory estimate counts that copy (the tally of what the step allocated stays within it).
TEST(PluginWorkload, TheMemoryEstimateCountsTheOracleCopyOfAPluginStage) {
  using namespace workload;
  Registry registry;
  registry.add(Registry::global().get("cpu.reference"));
  Context context(registry);
  context.load_plugin(LATTE_EXAMPLE_PLUGIN);
  DsaStepConfig c;
  c.model = "glm-5";
  c.batch = 1;       // 64 heads: the attention stage needs the most
  c.context = 2100;  // beyond topk 2048: the check is cpu.reference's alone
  c.block_size = 16;
  c.select.use_environment = false;
  c.select.force = {"sparse_mla=example.*"};
  const DsaStepMemory with_plugin = estimate_dsa_step_memory(c, &context);
  MemoryTally tally;
  const DsaStepReport report = run_dsa_step(c, {}, &context);
  ASSERT_EQ(report.stages.back().backend, "example.cpu_sparse_mla");
  EXPECT_EQ(report.stages.back().check, "cpu.reference");
  EXPECT_TRUE(report.passed) << report.to_text();
  EXPECT_GE(with_plugin.host_bytes, tally.host_peak());
  EXPECT_LE(with_plugin.host_bytes, tally.host_peak() + 2100 * 8 + 2048 * 8 + 263);  // + the top-k rows

  c.select.force.clear();
  c.select.exclude = {"sparse_mla=example.*"};  // all on cpu.reference: no copy for the oracle
  const uint64_t out_bytes = uint64_t(c.batch) * 64 * 512 * 2;
  EXPECT_EQ(estimate_dsa_step_memory(c, &context).host_bytes + out_bytes, with_plugin.host_bytes);
}

// The checks run cpu.reference through latte::run, to which LATTE_BACKEND adds its entries: a
// force there that would rank the plugin above cpu.reference for the check itself (its shipped
// rule does) is refused before the check runs, rather than the plugin checked against itself;
// the error names the way that works (--force).
TEST(PluginWorkload, ALatteBackendForceThatWouldTakeOverTheCheckIsRefused) {
  using namespace workload;
  Registry registry;
  registry.add(Registry::global().get("cpu.reference"));
  Context context(registry);
  context.load_plugin(LATTE_EXAMPLE_PLUGIN);
  DsaStepConfig c;
  c.model = "glm-5";
  c.tp = 8;
  c.batch = 1;
  c.context = 100;
  c.block_size = 16;
  c.select.force = {"sparse_mla=example.*"};
  c.select.use_environment = false;
  const DsaStepReport forced = run_dsa_step(c, {}, &context);
  EXPECT_TRUE(forced.passed) << forced.to_text();
  EXPECT_EQ(forced.stages.back().backend, "example.cpu_sparse_mla");
  EXPECT_EQ(forced.stages.back().check, "cpu.reference + dense MLA oracle");

  c.select.force.clear();
  c.select.use_environment = true;
  ASSERT_EQ(setenv("LATTE_BACKEND", "sparse_mla=example.*", 1), 0);
  try {
    (void)run_dsa_step(c, {}, &context);
    ADD_FAILURE() << "a step whose check would run on the plugin ran";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_THAT(e.what(), HasSubstr("the check of sparse_mla must run on cpu.reference, but latte::run "
                                    "would run example.cpu_sparse_mla (forced: "));
    EXPECT_THAT(e.what(), HasSubstr("with --force"));
  }
  unsetenv("LATTE_BACKEND");
}

TEST(PluginPath, LoadsWhatItCanAndReportsTheRest) {
  Registry registry;
  Context context(registry);
  const std::string path =
      std::string(LATTE_EXAMPLE_PLUGIN_DIR) + "::/nonexistent/latte/plugins:" + LATTE_BROKEN_PLUGIN_DIR;
  const auto results = context.load_plugin_path(path);
  std::vector<std::string> loaded;
  int refused = 0;
  bool missing_dir_reported = false;
  for (const auto& r : results) {
    if (r.loaded) loaded.push_back(std::filesystem::path(r.path).filename().string());
    else ++refused;
    if (r.path == "/nonexistent/latte/plugins") missing_dir_reported = r.error.find("does not exist") != std::string::npos;
  }
  // The example and the one broken plugin whose only fault is a clash that cannot happen here.
  EXPECT_EQ(loaded, (std::vector<std::string>{"liblatte_example.so", "liblatte_broken_dup_builtin.so"}));
  EXPECT_EQ(refused, 1 + 10);  // the missing directory and ten broken plugins
  EXPECT_TRUE(missing_dir_reported);
  EXPECT_EQ(context.plugin_load_results().size(), results.size());
  EXPECT_EQ(context.select(glm5_sparse(8), describe_device("cpu"), no_env()).chosen, "example.cpu_sparse_mla");
}

}  // namespace
}  // namespace latte

namespace latte {
namespace {

// Context::global() reads LATTE_POLICY and LATTE_PLUGIN_PATH once, on first use. Each case
// runs in a forked child (a gtest death test) so that the first use happens there.
TEST(GlobalContextDeathTest, ReadsThePluginPathAndThePolicyFromTheEnvironment) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("LATTE_PLUGIN_PATH", LATTE_EXAMPLE_PLUGIN_DIR ":/nonexistent/dir", 1);
        unsetenv("LATTE_POLICY");
        Context& ctx = Context::global();
        const bool loaded = ctx.plugins().size() == 1 && ctx.plugin_load_results().size() == 2;
        const Selection s = ctx.select(glm5_sparse(8), describe_device("cpu"), no_env());
        std::exit(loaded && s.chosen == "example.cpu_sparse_mla" ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(GlobalContextDeathTest, ABadUserPolicyThrowsOnFirstUseNamingTheVariable) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string bad = ::testing::TempDir() + "latte_bad_global_policy.json";
  std::ofstream(bad) << R"({"latte_policy": 1, "rules": [{"name": "x", "when": {"arch": "sm90"}, "order": ["a.*"]}]})";
  EXPECT_EXIT(
      {
        unsetenv("LATTE_PLUGIN_PATH");
        setenv("LATTE_POLICY", bad.c_str(), 1);
        try {
          (void)Context::global();
        } catch (const Error& e) {
          const std::string what = e.what();
          const bool clear = e.code() == ErrorCode::policy_error && what.find("LATTE_POLICY=" + bad) == 0 &&
                             what.find("rules[0].when.arch") != std::string::npos;
          std::exit(clear ? 3 : 4);
        }
        std::exit(5);
      },
      ::testing::ExitedWithCode(3), "");
}

}  // namespace
}  // namespace latte
