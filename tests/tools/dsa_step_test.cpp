// The DSA-step workload (tools/workload). Every op of the step, the stages and the reference
// checks, runs through the functional API. DsaStepReport's text and JSON: the per-stage kernel
// descriptions (Kernel::describe()) appear under the stage table, and only for the stages whose
// backend described its kernel. The step's memory: estimated from the shapes it allocates,
// checked before allocating, and every failed allocation a latte error naming the bytes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <set>
#include <mutex>
#include <nlohmann/json.hpp>
#include <vector>

#include <unistd.h>

#include "latte/api.hpp"
#include "latte/error.hpp"
#include "latte/registry.hpp"
#include "latte_workload/buffers.hpp"
#include "latte_workload/dsa_step.hpp"

namespace latte::workload {
namespace {

DsaStepReport report_with_kernels(const std::string& attention_kernel) {
  DsaStepReport r;
  r.device = describe_device("sm_90");
  StageReport store;
  store.name = "kv_store";
  store.backend = "cuda.kv_store";
  StageReport attention;
  attention.name = "sparse_mla";
  attention.backend = "cuda.sparse_mla";
  attention.kernel = attention_kernel;
  r.stages = {store, attention};
  return r;
}

TEST(WorkloadReport, ListsTheKernelsTheBackendsDescribed) {
  const DsaStepReport r = report_with_kernels("row-group kernel: 64 rows per CTA");
  const std::string text = r.to_text();
  EXPECT_NE(text.find("kernels (what each backend ran, from Kernel::describe()):\n"
                      "  sparse_mla  row-group kernel: 64 rows per CTA\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("  kv_store    \n"), std::string::npos) << text;  // no line for an empty one
  const auto json = nlohmann::json::parse(r.to_json());
  EXPECT_EQ(json["stages"][0]["kernel"], "");
  EXPECT_EQ(json["stages"][1]["kernel"], "row-group kernel: 64 rows per CTA");
}

TEST(WorkloadReport, NoKernelSectionWhenNoBackendDescribedOne) {
  EXPECT_EQ(report_with_kernels("").to_text().find("kernels ("), std::string::npos);
}

DsaStepConfig small_step(int batch, int context) {
  DsaStepConfig c;
  c.model = "glm-5";
  c.tp = 8;
  c.block_size = 16;
  c.batch = batch;
  c.context = context;
  return c;
}

// What ran: the op, whether the kernel was made for the spec the call's own tensors describe
// (what latte::run makes its kernels for), and the kernel's description.
struct RecordedRun {
  Op op;
  bool made_for_the_call = false;
  std::string kernel;
};

struct RunLog {
  std::mutex mutex;
  std::vector<RecordedRun> runs;
};

class RecordingKernel final : public Kernel {
 public:
  RecordingKernel(const AttentionSpec& spec, Device device, std::unique_ptr<Kernel> inner, RunLog* log)
      : Kernel(spec, device), inner_(std::move(inner)), log_(log) {}
  std::size_t workspace_bytes() const override { return inner_->workspace_bytes(); }
  std::string describe() const override { return "made for " + spec().summary(); }

 protected:
  void compute(const Problem& problem, const RunContext& ctx) override {
    {
      std::lock_guard lock(log_->mutex);
      const OpArgs args = std::visit([](const auto& p) { return OpArgs(*p.args); }, problem);
      log_->runs.push_back({spec().op, spec() == spec_from_args(args), describe()});
    }
    inner_->run(problem, ctx);
  }

 private:
  std::unique_ptr<Kernel> inner_;
  RunLog* log_;
};

// cpu.reference under its own id (so that the stages and the checks all reach it), recording
// every run.
class RecordingReference final : public Backend {
 public:
  explicit RecordingReference(std::shared_ptr<const Backend> inner) : inner_(std::move(inner)) {}
  const BackendInfo& info() const override { return inner_->info(); }
  std::vector<Reason> custom_checks(const AttentionSpec& spec, const DeviceInfo& device) const override {
    return inner_->custom_checks(spec, device);
  }
  std::unique_ptr<Kernel> make(const AttentionSpec& spec, const DeviceInfo& device) const override {
    return std::make_unique<RecordingKernel>(spec, device.handle(), inner_->make(spec, device), &log);
  }
  mutable RunLog log;

 private:
  std::shared_ptr<const Backend> inner_;
};

// The workload is no second way to execute: each op, the stages' and the checks', runs on a
// kernel that latte::run made for that call, and the report describes the kernel that ran.
TEST(DsaStep, EveryOpRunsThroughTheFunctionalApi) {
  Registry registry;
  const auto reference = std::make_shared<RecordingReference>(Registry::global().get("cpu.reference"));
  registry.add(reference);
  Context context(registry);
  DsaStepConfig c = small_step(3, 300);  // 900 tokens written, 3 decoded: neither a power of two
  c.select.use_environment = false;
  const DsaStepReport report = run_dsa_step(c, {}, &context);
  ASSERT_TRUE(report.passed) << report.to_text();

  const std::vector<RecordedRun>& runs = reference->log.runs;
  std::vector<Op> ops;
  for (const RecordedRun& r : runs) ops.push_back(r.op);
  // The four stages, the top-k check's logits and the dense oracle (the context fits in topk);
  // every stage on cpu.reference, so no stage has a reference run of its own.
  EXPECT_THAT(ops, ::testing::ElementsAre(Op::kv_store, Op::indexer_k_store, Op::indexer_topk,
                                          Op::indexer_logits, Op::sparse_mla, Op::mla_decode));
  for (const RecordedRun& r : runs)
    EXPECT_TRUE(r.made_for_the_call) << to_string(r.op) << ": " << r.kernel;
  ASSERT_EQ(report.stages.size(), 4u);
  const std::vector<std::string> stage_kernels = {runs[0].kernel, runs[1].kernel, runs[2].kernel, runs[4].kernel};
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(report.stages[i].backend, "cpu.reference");
    EXPECT_EQ(report.stages[i].kernel, stage_kernels[i]) << report.stages[i].name;
  }
}

// GLM-5.3-Flash at small shapes: its layer_ops() are the step's stages (the pooled indexer's
// key store, top-k over pools of 4 with the tail, sparse_mla without rope), on cpu.reference,
// each stage passing its check. At context 2100 > 2051 the top-k drops pools; at 300 it keeps
// every token. No dense oracle: mla_decode has rope only.
DsaStepConfig glm53_step(int batch, int context, CacheFormat format) {
  DsaStepConfig c = small_step(batch, context);
  c.model = "glm-5.3-flash";
  c.block_size = 64;
  c.kv_cache = format;
  return c;
}

std::vector<std::string> stage_names(const DsaStepReport& report) {
  std::vector<std::string> names;
  for (const StageReport& s : report.stages) names.push_back(s.name);
  return names;
}

TEST(DsaStep, GlmFiveThreeFlashRunsThePooledIndexerStep) {
  for (const CacheFormat format : {CacheFormat::fp8_ds_mla, CacheFormat::bf16}) {
    for (const int context : {300, 2100}) {
      const DsaStepReport report = run_dsa_step(glm53_step(2, context, format));
      SCOPED_TRACE(report.to_text());
      EXPECT_TRUE(report.passed);
      EXPECT_THAT(stage_names(report),
                  ::testing::ElementsAre("kv_store", "indexer_pool_store", "indexer_topk", "sparse_mla"));
      ASSERT_EQ(report.stages.size(), 4u);
      EXPECT_EQ(report.stages[1].op, Op::indexer_pool_store);
      for (const StageReport& s : report.stages) {
        EXPECT_EQ(s.backend, "cpu.reference") << s.name;
        EXPECT_TRUE(s.passed) << s.name;
      }
      EXPECT_EQ(report.stages[0].check, "round trip vs the inputs");
      EXPECT_EQ(report.stages[1].check, "none: cpu.reference is the oracle");
      EXPECT_EQ(report.stages[2].check, "chosen pools' scores vs cpu.reference top pools");
      EXPECT_THAT(report.stages[3].check, ::testing::HasSubstr("no dense oracle"));
      EXPECT_THAT(report.to_text(), ::testing::HasSubstr("(8 heads/rank, no rope, 32 index heads, topk 2048 in "
                                                         "pools of 4 + the tail)"));
    }
  }
}

// GLM-5.3-Flash's ops through the functional API: the four stages and the top-k check's pooled
// logits, each on a kernel made for its call; no dense oracle.
TEST(DsaStep, ThePooledStepsOpsRunThroughTheFunctionalApi) {
  Registry registry;
  const auto reference = std::make_shared<RecordingReference>(Registry::global().get("cpu.reference"));
  registry.add(reference);
  Context context(registry);
  DsaStepConfig c = glm53_step(3, 301, CacheFormat::fp8_ds_mla);  // 301: a tail of 1 token
  c.select.use_environment = false;
  const DsaStepReport report = run_dsa_step(c, {}, &context);
  ASSERT_TRUE(report.passed) << report.to_text();
  std::vector<Op> ops;
  for (const RecordedRun& r : reference->log.runs) ops.push_back(r.op);
  EXPECT_THAT(ops, ::testing::ElementsAre(Op::kv_store, Op::indexer_pool_store, Op::indexer_topk,
                                          Op::indexer_logits, Op::sparse_mla));
  for (const RecordedRun& r : reference->log.runs)
    EXPECT_TRUE(r.made_for_the_call) << to_string(r.op) << ": " << r.kernel;
}

// A kernel that runs cpu.reference's, then changes what it wrote (a test's corruption).
class AlteringKernel final : public Kernel {
 public:
  AlteringKernel(const AttentionSpec& spec, Device device, std::unique_ptr<Kernel> inner,
                 const std::function<void(const OpArgs&)>* alter)
      : Kernel(spec, device), inner_(std::move(inner)), alter_(alter) {}
  std::size_t workspace_bytes() const override { return inner_->workspace_bytes(); }

 protected:
  void compute(const Problem& problem, const RunContext& ctx) override {
    inner_->run(problem, ctx);
    if (*alter_) (*alter_)(std::visit([](const auto& p) { return OpArgs(*p.args); }, problem));
  }

 private:
  std::unique_ptr<Kernel> inner_;
  const std::function<void(const OpArgs&)>* alter_;
};

// cpu.reference under the id "test.copy": forced, every stage runs on it and is checked against
// cpu.reference as a stage off the oracle is (the checks that copy the inputs for the oracle).
class CopyOfReference final : public Backend {
 public:
  CopyOfReference(std::shared_ptr<const Backend> inner, const std::function<void(const OpArgs&)>* alter)
      : inner_(std::move(inner)), info_(inner_->info()), alter_(alter) {
    info_.id = "test.copy";
  }
  const BackendInfo& info() const override { return info_; }
  std::vector<Reason> custom_checks(const AttentionSpec& spec, const DeviceInfo& device) const override {
    return inner_->custom_checks(spec, device);
  }
  std::unique_ptr<Kernel> make(const AttentionSpec& spec, const DeviceInfo& device) const override {
    return std::make_unique<AlteringKernel>(spec, device.handle(), inner_->make(spec, device), alter_);
  }

 private:
  std::shared_ptr<const Backend> inner_;
  BackendInfo info_;
  const std::function<void(const OpArgs&)>* alter_;
};

// cpu.reference and test.copy, in one context alive to the end of the tests: latte::run keeps
// its kernels per context address, so a context made where a destroyed one was could be handed
// the destroyed one's kernels (and their alteration).
struct CopyContext {
  std::function<void(const OpArgs&)> alter;  // what test.copy's kernels change after computing
  Registry registry;
  std::unique_ptr<Context> context;
};

CopyContext& copy_context() {
  static CopyContext* copy = [] {
    auto* c = new CopyContext;
    c->registry.add(Registry::global().get("cpu.reference"));
    c->registry.add(std::make_shared<CopyOfReference>(Registry::global().get("cpu.reference"), &c->alter));
    c->context = std::make_unique<Context>(c->registry);
    return c;
  }();
  return *copy;
}

DsaStepConfig forced_to_the_copy(DsaStepConfig c) {
  c.select.use_environment = false;
  c.select.force = {"test.copy"};
  return c;
}

DsaStepReport run_on_a_copy(const DsaStepConfig& config, std::function<void(const OpArgs&)> alter = {}) {
  CopyContext& copy = copy_context();
  copy.alter = std::move(alter);
  DsaStepReport report = run_dsa_step(forced_to_the_copy(config), {}, copy.context.get());
  copy.alter = nullptr;
  return report;
}

TEST(DsaStep, APooledStepOffTheOracleIsCheckedAgainstIt) {
  for (const CacheFormat format : {CacheFormat::fp8_ds_mla, CacheFormat::bf16}) {
    const DsaStepReport report = run_on_a_copy(glm53_step(2, 2100, format));
    SCOPED_TRACE(report.to_text());
    EXPECT_TRUE(report.passed);
    ASSERT_EQ(report.stages.size(), 4u);
    for (const StageReport& s : report.stages) EXPECT_EQ(s.backend, "test.copy") << s.name;
    EXPECT_EQ(report.stages[0].check, "decoded cache vs cpu.reference");
    EXPECT_EQ(report.stages[1].check, "decoded pool pages + pool_state vs cpu.reference");
    EXPECT_EQ(report.stages[3].check, "cpu.reference");
  }
}

// What the checks catch: a stage whose output is changed after cpu.reference computed it fails
// its check, naming what is wrong.
TEST(DsaStep, AnAlteredPooledStageFailsItsCheck) {
  struct Case {
    Op op;
    std::function<void(const OpArgs&)> alter;
    int stage;
    std::string check;
  };
  const std::vector<Case> cases = {
      {Op::indexer_pool_store,
       [](const OpArgs& a) { std::get<IndexerPoolStoreArgs>(a).pool_state.ptr<float>()[5] += 1; }, 1,
       "pool_state differs in 1 of"},
      // A code of request 0's first pool key: an exponent bit flipped.
      {Op::indexer_pool_store,
       [](const OpArgs& a) {
         const auto& args = std::get<IndexerPoolStoreArgs>(a);
         const int64_t block = args.block_table.ptr<int32_t>()[0];
         args.k_cache.ptr<uint8_t>()[block * args.k_cache.size(1) * 132] ^= 0x40;
       },
       1, "decoded pool pages + pool_state vs cpu.reference"},
      // The best pool's first position dropped: a gap before the other entries, an incomplete pool.
      {Op::indexer_topk, [](const OpArgs& a) { std::get<IndexerTopkArgs>(a).indices.ptr<int32_t>()[0] = -1; }, 2,
       "row 0 column 1: slot"},
      {Op::indexer_topk, [](const OpArgs& a) { std::get<IndexerTopkArgs>(a).out_lens.ptr<int32_t>()[1] -= 1; }, 2,
       "row 1: out_lens 2047, 2048 entries"},
      // Request 0's best pool swapped for a pool it did not choose: complete pools, a worse score.
      {Op::indexer_topk,
       [](const OpArgs& a) {
         const auto& args = std::get<IndexerTopkArgs>(a);
         int32_t* row = args.indices.ptr<int32_t>();
         const int32_t* table = args.in.block_table.ptr<int32_t>();
         const int64_t bs = args.in.kpool * args.in.k_cache.size(1);
         const auto slot = [&](int64_t pos) { return static_cast<int32_t>(table[pos / bs] * bs + pos % bs); };
         const std::set<int32_t> chosen(row, row + 2048);
         int64_t pool = 0;
         while (chosen.count(slot(4 * pool))) ++pool;
         for (int i = 0; i < 4; ++i) row[i] = slot(4 * pool + i);
       },
       2, "chosen pools' scores vs cpu.reference top pools"},
      {Op::sparse_mla, [](const OpArgs& a) { std::get<SparseMlaArgs>(a).out.ptr<uint16_t>()[3] = 0x42C8; }, 3,
       "cpu.reference"},  // 100.0
  };
  for (const Case& c : cases) {
    const DsaStepReport report = run_on_a_copy(glm53_step(2, 2100, CacheFormat::fp8_ds_mla), [&c](const OpArgs& a) {
      if (op_of(a) == c.op) c.alter(a);
    });
    SCOPED_TRACE(report.to_text());
    EXPECT_FALSE(report.passed);
    ASSERT_EQ(report.stages.size(), 4u);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(report.stages[i].passed, i != c.stage) << report.stages[i].name;
    EXPECT_THAT(report.stages[c.stage].check, ::testing::HasSubstr(c.check));
  }
}

// A config of a preset with some of its text replaced, written to a temporary file.
std::string edited_config(const std::string& preset, const std::string& from, const std::string& to) {
  std::ifstream in(std::string(LATTE_SOURCE_DIR) + "/configs/models/" + preset + ".json");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  text.replace(at, from.size(), to);
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("latte_dsa_step_" + preset + "_" + std::to_string(::getpid()) + ".json");
  std::ofstream(path) << text;
  return path.string();
}

// Rope and the indexer are independent: a model without rope whose indexer scores single tokens
// steps through indexer_k_store and sparse_mla without rope.
TEST(DsaStep, AModelWithoutRopeAndAPerTokenIndexerSteps) {
  DsaStepConfig c = small_step(2, 300);
  c.model = edited_config("deepseek-v3.2", "\"qk_rope_head_dim\": 64,", "\"qk_rope_head_dim\": 0, \"mla_use_nope\": true,");
  for (const CacheFormat format : {CacheFormat::fp8_ds_mla, CacheFormat::bf16}) {
    c.kv_cache = format;
    const DsaStepReport report = run_dsa_step(c);
    SCOPED_TRACE(report.to_text());
    EXPECT_TRUE(report.passed);
    EXPECT_THAT(stage_names(report),
                ::testing::ElementsAre("kv_store", "indexer_k_store", "indexer_topk", "sparse_mla"));
    ASSERT_EQ(report.stages.size(), 4u);
    EXPECT_EQ(report.stages[2].check, "chosen scores vs cpu.reference top-k");
    EXPECT_THAT(report.stages[3].check, ::testing::HasSubstr("no dense oracle"));
  }
  std::filesystem::remove(c.model);
}

// A pooled indexer latte does not compute (pools without index_kpool_compress) leaves the indices
// to the engine: the step cannot select them, and is refused before anything is planned or
// allocated, naming what latte serves of the model.
TEST(DsaStep, AModelWhoseIndexerLatteDoesNotComputeIsRefused) {
  DsaStepConfig c = small_step(1, 64);
  c.model = edited_config("glm-5.3-flash", "\"index_kpool_compress\": true", "\"index_kpool_compress\": false");
  try {
    (void)run_dsa_step(c);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported);
    EXPECT_THAT(e.what(), ::testing::HasSubstr("cannot build a decode step of " + c.model +
                                               ": the step selects the tokens with latte's indexer, and latte "
                                               "computes no indexer of this model"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("latte serves its kv_store and sparse_mla"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("--op all"));
  }
  EXPECT_THROW((void)estimate_dsa_step_memory(c), Error);
  std::filesystem::remove(c.model);
}

TEST(DsaStep, APooledStepNeedsBlocksOfWholePools) {
  DsaStepConfig c = glm53_step(1, 64, CacheFormat::bf16);
  c.block_size = 30;
  EXPECT_THROW((void)estimate_dsa_step_memory(c), Error);
}

// The estimate adds up the buffers the step allocates: at least their peak, and above it by no
// more than the top-k check's per-row vectors (std::vectors, which the tally does not see).
TEST(DsaStepMemory, TheEstimateIsWhatTheStepAllocatesAtItsPeak) {
  for (const DsaStepConfig& c : {small_step(3, 300), small_step(2, 3000), small_step(5, 2048)}) {
    const DsaStepMemory estimate = estimate_dsa_step_memory(c);
    MemoryTally tally;
    const DsaStepReport report = run_dsa_step(c);
    ASSERT_TRUE(report.passed) << report.to_text();
    const uint64_t row_vectors = uint64_t(c.context) * 8 + 2048 * 8 + (c.context + 7) / 8;
    EXPECT_GE(estimate.host_bytes, tally.host_peak()) << c.batch << " x " << c.context;
    EXPECT_LE(estimate.host_bytes, tally.host_peak() + row_vectors) << c.batch << " x " << c.context;
    EXPECT_GT(tally.host_peak(), uint64_t(c.batch) * c.context * (512 + 64 + 128) * 2);  // inputs
    EXPECT_EQ(estimate.device_bytes, 0u);
    EXPECT_EQ(tally.device_peak(), 0u);
  }
}

// The same for GLM-5.3-Flash's step (pool pages, gates, pool state, out_lens, rows without rope),
// on the oracle and off it (the key store's check then copies the pool pages and the state).
TEST(DsaStepMemory, ThePooledStepsEstimateIsWhatItAllocatesAtItsPeak) {
  Context& context = *copy_context().context;
  for (const bool off_the_oracle : {false, true}) {
    for (DsaStepConfig c : {glm53_step(3, 300, CacheFormat::fp8_ds_mla), glm53_step(2, 2100, CacheFormat::bf16)}) {
      c.select.use_environment = false;
      if (off_the_oracle) c = forced_to_the_copy(c);
      const DsaStepMemory estimate = estimate_dsa_step_memory(c, &context);
      MemoryTally tally;
      const DsaStepReport report = run_dsa_step(c, {}, &context);
      ASSERT_TRUE(report.passed) << report.to_text();
      const uint64_t pools = (c.context + 3) / 4;
      const uint64_t row_vectors = pools * 8 + 512 * 8 + (c.context + 7) / 8;
      EXPECT_GE(estimate.host_bytes, tally.host_peak()) << c.batch << " x " << c.context;
      EXPECT_LE(estimate.host_bytes, tally.host_peak() + row_vectors) << c.batch << " x " << c.context;
      EXPECT_GT(tally.host_peak(), uint64_t(c.batch) * c.context * (512 + 128 + 128) * 2);  // latent, k, gate
    }
  }
}

TEST(DsaStepMemory, GrowsWithBatchAndContext) {
  const uint64_t base = estimate_dsa_step_memory(small_step(4, 1000)).host_bytes;
  EXPECT_LT(base, estimate_dsa_step_memory(small_step(5, 1000)).host_bytes);
  EXPECT_LT(base, estimate_dsa_step_memory(small_step(4, 1001)).host_bytes);
}

// `latte run --batch 64 --context 16384` once ran 42 s and died of std::bad_alloc: a step larger
// than the memory is refused at once, with the estimate and what fits.
TEST(DsaStepMemory, AStepLargerThanTheMemoryIsRefusedBeforeAllocating) {
  DsaStepConfig c = small_step(4096, 200000);
  c.tp = 1;
  const DsaStepMemory estimate = estimate_dsa_step_memory(c);
  EXPECT_GT(estimate.host_bytes, uint64_t{1} << 40);  // about 2 TiB: no test machine has it
  MemoryTally tally;
  try {
    (void)run_dsa_step(c);
    FAIL() << "a step of " << estimate.host_bytes << " bytes ran";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::out_of_memory);
    using ::testing::HasSubstr;
    EXPECT_THAT(e.what(), HasSubstr("--batch 4096 --context 200000 of glm-5 needs about " +
                                    format_bytes(estimate.host_bytes) + " of host memory; available: "));
    EXPECT_THAT(e.what(), HasSubstr("at --context 200000 at most --batch "));
    EXPECT_THAT(e.what(), HasSubstr("at --batch 4096 at most --context "));
    EXPECT_THAT(e.what(), HasSubstr("lower --batch or --context"));
  }
  EXPECT_EQ(tally.host_peak(), 0u);  // nothing was allocated
}

TEST(DsaStepMemory, AFailedAllocationIsAnOutOfMemoryErrorNamingTheBytes) {
  const std::size_t huge = std::size_t{1} << 52;  // 4 PiB
  try {
    WorkBuffer buffer(huge, Device{});
    FAIL() << "allocated " << huge << " bytes";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::out_of_memory);
    EXPECT_THAT(e.what(), ::testing::HasSubstr("could not allocate 4194304.00 GiB (4503599627370496 bytes) "
                                               "of host memory for a workload buffer"));
  }
}

TEST(DsaStepMemory, AvailableHostMemoryIsReadFromTheSystem) {
  const AvailableMemory host = available_memory(Device{});
  EXPECT_GT(host.bytes, 0u);
  EXPECT_FALSE(host.source.empty());
}

}  // namespace
}  // namespace latte::workload
