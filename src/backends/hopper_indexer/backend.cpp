// hopper.indexer: the DSA lightning indexer's logits (indexer_logits) with e4m3 queries on
// sm_90 by wgmma e4m3. Kernel: logits_sm90a.cu; design notes: docs/kernels/indexer.md.
// indexer_topk stays with cuda.indexer (its selection kernels), which the policy ranks next.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <memory>

#include "cuda/check.cuh"
#include "cuda/indexer_inputs.hpp"
#include "latte/backend.hpp"
#include "latte/error.hpp"
#include "latte/registry.hpp"
#include "latte/spec.hpp"
#include "latte/validate.hpp"
#include "logits_launch.hpp"

namespace latte::hopper_indexer {
namespace {

Capabilities logits_capabilities() {
  Capabilities caps;
  caps.ops = {Op::indexer_logits};
  caps.devices = {DeviceKind::cuda};
  caps.arch = IntRule::list({90});
  caps.q_dtypes = {DType::e4m3};
  caps.heads = IntRule::range(1, kMaxHeads);
  caps.head_dim = IntRule::list({kIndexDim});
  caps.block_size = IntRule::at_least(1);
  caps.workspace = "none";
  caps.notes =
      "wgmma e4m3 (sm_90a instructions: H100 / H200 only); index heads padded to a power of two "
      ">= 8, one query token per CTA; K pages by TMA for block sizes 8, 16, 32 and multiples of 64, "
      "by cp.async otherwise; indexer_topk and bf16 queries: cuda.indexer";
  return caps;
}

// SMs of the current device (the one run() launches on; a described device's count may differ).
int current_sm_count() {
  int dev = 0, sms = 0;
  LATTE_CUDA_TRY(cudaGetDevice(&dev));
  LATTE_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  return sms;
}

class LogitsKernel final : public Kernel {
 public:
  LogitsKernel(const AttentionSpec& spec, const DeviceInfo& device)
      : heads_(spec.num_heads), block_size_(spec.block_size), sm_count_(device.probed ? device.sm_count : 0) {}

  [[nodiscard]] std::size_t workspace_bytes() const override { return 0; }
  [[nodiscard]] std::string describe() const override { return describe_logits(heads_, block_size_); }

  void run(const OpArgs& args, const RunContext& ctx) override {
    const auto* l = std::get_if<IndexerLogitsArgs>(&args);
    if (l == nullptr) {
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("hopper.indexer: this kernel computes indexer_logits but was given {} "
                              "arguments; make a kernel for that op with another backend (cuda.indexer).",
                              to_string(op_of(args))));
    }
    const IndexerShape s = validate(*l);
    if (common_device(args).kind != DeviceKind::cuda) {
      throw Error(ErrorCode::invalid_argument,
                  "hopper.indexer: indexer_logits was given host tensors; this backend reads CUDA device "
                  "memory. Move the tensors to the GPU, or select cpu.reference.");
    }
    const auto stream = static_cast<cudaStream_t>(ctx.stream);
    if (ctx.check_indices) cuda::check_indexer_indices(l->in, s, "indexer_logits", stream);
    if (sm_count_ <= 0) sm_count_ = current_sm_count();
    launch_logits_sm90a(cuda::indexer_problem(l->in, s), l->logits.ptr<float>(), l->logits.stride(0),
                        l->logits.stride(1), s.logits_len, sm_count_, ctx.stream);
    if (ctx.check_indices) LATTE_CUDA_TRY(cudaStreamSynchronize(stream));
  }

 private:
  int heads_;
  int block_size_;
  int sm_count_;
};

class HopperIndexerBackend final : public Backend {
 public:
  HopperIndexerBackend()
      : info_{"hopper.indexer",
              "DSA lightning indexer logits on H100 / H200 (sm_90a): wgmma e4m3, paged e4m3 K",
              logits_capabilities(), "built-in"} {}

  [[nodiscard]] const BackendInfo& info() const override { return info_; }

  [[nodiscard]] std::unique_ptr<Kernel> make(const AttentionSpec& spec, const DeviceInfo& device) const override {
    return std::make_unique<LogitsKernel>(spec, device);
  }

 private:
  BackendInfo info_;
};

LATTE_REGISTER_BACKEND(HopperIndexerBackend);

}  // namespace
}  // namespace latte::hopper_indexer
