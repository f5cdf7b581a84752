// The DSA-step workload (tools/workload). Every op of the step, the stages and the reference
// checks, runs through the functional API. DsaStepReport's text and JSON: the per-stage kernel
// descriptions (Kernel::describe()) appear under the stage table, and only for the stages whose
// backend described its kernel. The step's memory: estimated from the shapes it allocates,
// checked before allocating, and every failed allocation a latte error naming the bytes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <vector>

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

// GLM-5.3-Flash's step needs the pooled indexer, which latte lacks: refused before anything is
// planned or allocated, naming what is missing and what latte serves of the model. A model
// without rope but with a per-token indexer is refused too (the step writes rows with rope).
TEST(DsaStep, AModelLatteCannotStepIsRefusedNamingWhatIsMissing) {
  DsaStepConfig c = small_step(1, 64);
  c.model = "glm-5.3-flash";
  try {
    (void)run_dsa_step(c);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported);
    EXPECT_THAT(e.what(), ::testing::HasSubstr("cannot build a decode step of glm-5.3-flash: the step it builds has "
                                               "the per-token indexer's stages (indexer_k_store, indexer_topk)"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("its other 34 layers are linear attention, which is not latte's"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("latte select --model glm-5.3-flash --op all"));
  }
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
