// cuda.indexer: the DSA lightning indexer (indexer_logits) and indexer + exact top-k
// (indexer_topk) on CUDA GPUs from sm_80. Kernels: indexer_score_mma_sync.cuh, kernels/topk/topk_kernel.cuh;
// design notes: docs/kernels/indexer.md.
#include <cuda_runtime.h>

#include <algorithm>
#include <memory>
#include <variant>

#include "kernels/common/cuda_check.cuh"
#include "kernels/common/env_knob.hpp"
#include "kernels/indexer/indexer_params_from_args.hpp"
#include "kernels/indexer/smxx/indexer_launch.hpp"
#include "latte/backend.hpp"
#include "latte/registry.hpp"
#include "latte/spec.hpp"

namespace latte::cuda_indexer {
namespace {

// The unfused path (u32 score keys materialized in the workspace, then top-k) is offered up to
// this much workspace (T * 131072 positions, at most 256 MiB); longer contexts and bigger
// batches take the fused path.
constexpr std::size_t kUnfusedWorkspaceCap = std::size_t{256} << 20;
constexpr int64_t kUnfusedLenHint = 131072;

Capabilities indexer_capabilities() {
  Capabilities caps;
  caps.ops = {Op::indexer_topk, Op::indexer_logits};
  caps.devices = {DeviceKind::cuda};
  caps.arch = IntRule::at_least(80);
  caps.q_dtypes = {DType::e4m3, DType::bf16};
  caps.heads = IntRule::range(1, kMaxHeads);
  caps.head_dim = IntRule::list({kIndexDim});
  caps.block_size = IntRule::at_least(1);
  caps.topk = IntRule::range(1, kMaxTopk);
  caps.workspace =
      "indexer_topk: max(fused: T * chunks * (3 * topk + 1024) * 8 B with chunks <= 4 * SMs / T, "
      "unfused: min(T * 131072 * 4 B, 256 MiB), plus the split top-k's candidate lists when "
      "T <= SMs / 8); indexer_logits: none";
  caps.notes =
      "e4m3 q: mma.sync e4m3 (sm_89, sm_120) or e4m3 widened to f16 (sm_90, sm_100); bf16 q and "
      "sm_80/86: mma.sync bf16 (e4m3 widened exactly), the arch being the lower of the device's "
      "and the one the kernels were compiled for; exact radix top-k, few long rows split "
      "over CTAs; fused (no [T, L] scores) for one query token and for up to 32 at contexts "
      "of 128K+, where it measured faster on the H200, or when the workspace holds no row of "
      "scores; unfused otherwise (LATTE_CUDA_INDEXER_PATH=fused|unfused forces one)";
  return caps;
}

DeviceTraits traits_of(const DeviceInfo& device) {
  DeviceTraits t;
  t.arch = device.arch();
  t.sm_count = device.sm_count;
  if (t.sm_count <= 0 || t.arch <= 0) {
    int dev = 0, sms = 0, major = 0, minor = 0;
    LATTE_CUDA_TRY(cudaGetDevice(&dev));
    LATTE_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    LATTE_CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    LATTE_CUDA_TRY(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    if (t.sm_count <= 0) t.sm_count = sms;
    if (t.arch <= 0) t.arch = major * 10 + minor;
  }
  return t;
}

class IndexerKernel final : public Kernel {
 public:
  IndexerKernel(const AttentionSpec& spec, const DeviceInfo& device)
      : Kernel(spec, device.handle()),
        op_(spec.op),
        traits_(traits_of(device)),
        q_fp8_(spec.q_dtype == DType::e4m3),
        topk_(std::max(1, spec.topk)),
        probed_(device.probed) {
    if (op_ == Op::indexer_topk) {
      const int64_t tokens = std::max<int64_t>(1, spec.max_tokens);
      const std::size_t fused = fused_workspace_bound(tokens, std::max(1, spec.topk),
                                                      std::max(1, spec.num_heads),
                                                      spec.q_dtype == DType::e4m3, traits_);
      // Plus the lists of the split top-k (few long rows over several CTAs each); at least one
      // token's keys over the longest row the spread top-k takes.
      const std::size_t unfused =
          std::min(kUnfusedWorkspaceCap, static_cast<std::size_t>(tokens * kUnfusedLenHint * 4)) +
          cuda::split_workspace_bound(tokens, 2 * kUnfusedLenHint, std::max(1, spec.topk), traits_.sm_count);
      workspace_ = std::max({fused, unfused, cuda::long_row_workspace_bytes(spec.topk, traits_.sm_count)});
    }
  }

  [[nodiscard]] std::size_t workspace_bytes() const override { return workspace_; }

  // The matrix path of the architecture the launchers will use (a probed device: the lower of
  // its arch and the kernels' compiled one; a described one: its arch), the top-k, the path rule.
  [[nodiscard]] std::string describe() const override {
    const cuda::ScopedTuning tuning(tuning_);
    return describe_indexer(op_ == Op::indexer_topk, q_fp8_, probed_ ? path_arch(traits_) : traits_.arch, topk_);
  }

 protected:
  void compute(const Problem& problem, const RunContext& ctx) override {
    const cuda::ScopedTuning tuning(tuning_);
    if (const auto* a = std::get_if<IndexerTopkProblem>(&problem)) {
      cuda::run_indexer_topk(*a, ctx.workspace, ctx.workspace_bytes,
                             [&](const cuda::IndexerParams& p, const cuda::TopkOutput& out, void* ws, std::size_t bytes) {
                               launch_indexer_topk(p, out, TopkPath::automatic, ws, bytes, traits_, ctx.stream);
                             });
    } else if (const auto* l = std::get_if<IndexerLogitsProblem>(&problem)) {
      cuda::run_indexer_logits(*l,
                               [&](const cuda::IndexerParams& p, float* out, int64_t sr, int64_t sc, int64_t len) {
                                 launch_indexer_logits(p, out, sr, sc, len, traits_, ctx.stream);
                               });
    }
  }

 private:
  Op op_;
  DeviceTraits traits_;
  bool q_fp8_;
  int topk_;
  bool probed_;
  std::size_t workspace_ = 0;
  cuda::TuningEnv tuning_ = cuda::TuningEnv::capture();  // the tuning variables at make()
};

class CudaIndexerBackend final : public Backend {
 public:
  CudaIndexerBackend()
      : info_{"cuda.indexer",
              "DSA lightning indexer and exact top-k on CUDA (sm_80+): mma.sync, paged e4m3 K, "
              "fused or unfused selection",
              indexer_capabilities(), "built-in"} {}

  [[nodiscard]] const BackendInfo& info() const override { return info_; }

  [[nodiscard]] std::unique_ptr<Kernel> make(const AttentionSpec& spec,
                                             const DeviceInfo& device) const override {
    return std::make_unique<IndexerKernel>(spec, device);
  }

 private:
  BackendInfo info_;
};

LATTE_REGISTER_BACKEND(CudaIndexerBackend);

}  // namespace
}  // namespace latte::cuda_indexer
