// cuda.indexer: the DSA lightning indexer (indexer_logits) and indexer + exact top-k
// (indexer_topk) on CUDA GPUs from sm_80. Kernels: score_kernel.cuh, cuda/topk_kernel.cuh;
// design notes: docs/kernels/indexer.md.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "cuda/check.cuh"
#include "cuda/indexer_inputs.hpp"
#include "indexer_launch.hpp"
#include "latte/backend.hpp"
#include "latte/error.hpp"
#include "latte/registry.hpp"
#include "latte/spec.hpp"
#include "latte/validate.hpp"

namespace latte::cuda_indexer {
namespace {

constexpr int kMaxTopkCuda = 4096;
constexpr int kMaxHeads = 128;
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
  caps.topk = IntRule::range(1, kMaxTopkCuda);
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

void require_cuda_tensors(const OpArgs& args, Op op) {
  const Device device = common_device(args);
  if (device.kind != DeviceKind::cuda) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("cuda.indexer: {} was given host tensors; this backend reads CUDA device "
                            "memory. Move the tensors to the GPU, or select cpu.reference.",
                            to_string(op)));
  }
}

void require_limits(const IndexerShape& s, const char* op) {
  if (s.heads > kMaxHeads) {
    throw Error(ErrorCode::unsupported,
                fmt::format("cuda.indexer: {} has {} index heads; this backend takes 1..{}. Split "
                            "the heads into several calls and add the logits, or use cpu.reference.",
                            op, s.heads, kMaxHeads));
  }
  if (s.topk > kMaxTopkCuda) {
    throw Error(ErrorCode::unsupported,
                fmt::format("cuda.indexer: indexer_topk with topk {} > {}; this backend selects at "
                            "most {} tokens per query. Use cpu.reference for larger topk.",
                            s.topk, kMaxTopkCuda, kMaxTopkCuda));
  }
}

class IndexerKernel final : public Kernel {
 public:
  IndexerKernel(const AttentionSpec& spec, const DeviceInfo& device)
      : op_(spec.op),
        traits_(traits_of(device)),
        q_fp8_(spec.q_dtype == DType::e4m3),
        topk_(std::max(1, spec.topk)),
        probed_(device.probed) {
    if (op_ == Op::indexer_topk) {
      const int64_t tokens = std::max<int64_t>(1, spec.max_tokens);
      const std::size_t fused = fused_workspace_bound(tokens, std::max(1, spec.topk),
                                                      std::max(1, spec.num_heads),
                                                      spec.q_dtype == DType::e4m3, traits_);
      // Plus the lists of the split top-k (few long rows over several CTAs each).
      const std::size_t unfused =
          std::min(kUnfusedWorkspaceCap, static_cast<std::size_t>(tokens * kUnfusedLenHint * 4)) +
          cuda::split_workspace_bound(tokens, 2 * kUnfusedLenHint, std::max(1, spec.topk), traits_.sm_count);
      workspace_ = std::max(fused, unfused);
    }
  }

  [[nodiscard]] std::size_t workspace_bytes() const override { return workspace_; }

  // The matrix path of the architecture the launchers will use (a probed device: the lower of
  // its arch and the kernels' compiled one; a described one: its arch), the top-k, the path rule.
  [[nodiscard]] std::string describe() const override {
    return describe_indexer(op_ == Op::indexer_topk, q_fp8_, probed_ ? path_arch(traits_) : traits_.arch, topk_);
  }

  void run(const OpArgs& args, const RunContext& ctx) override {
    const Op op = op_of(args);
    if (op != op_) {
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("cuda.indexer: this kernel was made for {} but was given {} arguments; "
                              "make a kernel for {}.",
                              to_string(op_), to_string(op), to_string(op)));
    }
    const auto stream = static_cast<cudaStream_t>(ctx.stream);
    if (const auto* a = std::get_if<IndexerTopkArgs>(&args)) {
      const IndexerShape s = validate(*a);
      require_cuda_tensors(args, op);
      require_limits(s, "indexer_topk");
      if (ctx.check_indices) cuda::check_indexer_indices(a->in, s, "indexer_topk", stream);
      TopkOutput out;
      out.indices = a->indices.ptr<int32_t>();
      out.st = a->indices.stride(0);
      out.sc = a->indices.stride(1);
      out.topk = static_cast<int>(s.topk);
      out.physical = a->kind == IndexKind::physical;
      launch_indexer_topk(cuda::indexer_problem(a->in, s), out, TopkPath::automatic, ctx.workspace,
                          ctx.workspace_bytes, traits_, ctx.stream);
    } else if (const auto* l = std::get_if<IndexerLogitsArgs>(&args)) {
      const IndexerShape s = validate(*l);
      require_cuda_tensors(args, op);
      require_limits(s, "indexer_logits");
      if (ctx.check_indices) cuda::check_indexer_indices(l->in, s, "indexer_logits", stream);
      launch_indexer_logits(cuda::indexer_problem(l->in, s), l->logits.ptr<float>(), l->logits.stride(0),
                            l->logits.stride(1), s.logits_len, traits_, ctx.stream);
    } else {
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("cuda.indexer: {} is not an indexer op", to_string(op)));
    }
    if (ctx.check_indices) LATTE_CUDA_TRY(cudaStreamSynchronize(stream));
  }

 private:
  Op op_;
  DeviceTraits traits_;
  bool q_fp8_;
  int topk_;
  bool probed_;
  std::size_t workspace_ = 0;
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
