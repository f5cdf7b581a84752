// hopper.indexer: the DSA lightning indexer (indexer_logits) and indexer + exact top-k
// (indexer_topk) with e4m3 queries on sm_90, the scores by wgmma e4m3. Kernels: logits_sm90a.cu
// (scores), indexer_topk_sm90a.cpp (keys, then the top-k shared with cuda.indexer); design notes:
// docs/kernels/indexer.md. bf16 queries and other GPUs: cuda.indexer, which the policy ranks next.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <memory>

#include "kernels/common/cuda_check.cuh"
#include "kernels/common/env_knob.hpp"
#include "kernels/indexer/indexer_params_from_args.hpp"
#include "latte/backend.hpp"
#include "latte/error.hpp"
#include "latte/registry.hpp"
#include "latte/spec.hpp"
#include "latte/validate.hpp"
#include "kernels/indexer/sm90a/logits_launch_sm90a.hpp"
#include "kernels/indexer/sm90a/indexer_topk_sm90a.hpp"

namespace latte::hopper_indexer {
namespace {

Capabilities indexer_capabilities() {
  Capabilities caps;
  caps.ops = {Op::indexer_logits, Op::indexer_topk};
  caps.devices = {DeviceKind::cuda};
  caps.arch = IntRule::list({90});
  caps.q_dtypes = {DType::e4m3};
  caps.heads = IntRule::range(1, kMaxHeads);
  caps.head_dim = IntRule::list({kIndexDim});
  caps.block_size = IntRule::at_least(1);
  caps.topk = IntRule::range(1, kMaxTopk);
  caps.workspace =
      "indexer_logits: none; indexer_topk: the larger of the unfused path's u32 keys for min(T * "
      "131072, 64M) positions (at least 524288) plus the split top-k's candidate lists (T <= SMs / 8), "
      "and the fused path's samples and candidate lists (72 KB per token, up to 512 tokens) plus its "
      "repair pass's topk candidates per CTA (about one CTA per SM; no [T, L] keys)";
  caps.notes =
      "wgmma e4m3 (sm_90a instructions: H100 / H200 only); index heads padded to a power of two "
      ">= 8, one query token per CTA; K pages by TMA for block sizes 8, 16, 32 and multiples of 64, "
      "by cp.async otherwise; indexer_topk: fused (sample, admission, repair by running top-k buffers, exact "
      "top-k of the candidates; O(T * topk) memory) at 128K+ positions, at 64K+ for up to 24 query tokens and 32K+ for up to 8, else unfused (score "
      "keys in the workspace, then the exact radix top-k; tokens in slices when the workspace is short); "
      "bf16 queries: cuda.indexer";
  return caps;
}

// SMs of the current device (the one run() launches on; a described device's count may differ).
int current_sm_count() {
  int dev = 0, sms = 0;
  LATTE_CUDA_TRY(cudaGetDevice(&dev));
  LATTE_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  return sms;
}

class IndexerKernel final : public Kernel {
 public:
  IndexerKernel(const AttentionSpec& spec, const DeviceInfo& device)
      : Kernel(spec, device.handle()),
        op_(spec.op),
        heads_(spec.num_heads),
        block_size_(spec.block_size),
        topk_(std::max(1, spec.topk)),
        sm_count_(device.probed ? device.sm_count : 0) {
    if (op_ == Op::indexer_topk) {
      workspace_ = topk_workspace_bound(std::max<int64_t>(1, spec.max_tokens), topk_,
                                        device.sm_count > 0 ? device.sm_count : 132);
    }
  }

  [[nodiscard]] std::size_t workspace_bytes() const override { return workspace_; }
  [[nodiscard]] std::string describe() const override {
    const cuda::ScopedTuning tuning(tuning_);
    return op_ == Op::indexer_topk ? describe_topk(heads_, block_size_, topk_)
                                   : describe_scores(heads_, block_size_, false);
  }

 protected:
  void compute(const Problem& problem, const RunContext& ctx) override {
    const cuda::ScopedTuning tuning(tuning_);
    if (sm_count_ <= 0) sm_count_ = current_sm_count();
    if (const auto* a = std::get_if<IndexerTopkProblem>(&problem)) {
      cuda::run_indexer_topk(*a, ctx.workspace, ctx.workspace_bytes,
                             [&](const cuda::IndexerParams& p, const cuda::TopkOutput& out, void* ws, std::size_t bytes) {
                               launch_topk_sm90a(p, out, TopkPath::automatic, ws, bytes, sm_count_, ctx.stream);
                             });
    } else if (const auto* l = std::get_if<IndexerLogitsProblem>(&problem)) {
      cuda::run_indexer_logits(*l,
                               [&](const cuda::IndexerParams& p, float* out, int64_t sr, int64_t sc, int64_t len) {
                                 launch_logits_sm90a(p, out, sr, sc, len, sm_count_, ctx.stream);
                               });
    }
  }

 private:
  Op op_;
  int heads_;
  int block_size_;
  int topk_;
  int sm_count_;
  std::size_t workspace_ = 0;
  cuda::TuningEnv tuning_ = cuda::TuningEnv::capture();  // the tuning variables at make()
};

class HopperIndexerBackend final : public Backend {
 public:
  HopperIndexerBackend()
      : info_{"hopper.indexer",
              "DSA lightning indexer and exact top-k on H100 / H200 (sm_90a): wgmma e4m3 scores, paged e4m3 K",
              indexer_capabilities(), "built-in"} {}

  [[nodiscard]] const BackendInfo& info() const override { return info_; }

  [[nodiscard]] std::unique_ptr<Kernel> make(const AttentionSpec& spec, const DeviceInfo& device) const override {
    return std::make_unique<IndexerKernel>(spec, device);
  }

 private:
  BackendInfo info_;
};

LATTE_REGISTER_BACKEND(HopperIndexerBackend);

}  // namespace
}  // namespace latte::hopper_indexer
