// hopper.mla: sparse MLA and dense MLA decode over the fp8_ds_mla or bf16 cache on H100 / H200
// (sm_90a), with a producer warpgroup copying (fp8: and widening) the cache rows into the wgmma
// layout. Kernel: src/kernels/sparse_mla/sm90a/mla_sparse_sm90a_cpasync_wgmma_ws.cu; design notes
// and measurements: docs/kernels/hopper_mla.md. Rows without rope and other GPUs:
// cuda.sparse_mla; the policy ranks hopper.mla first only where it measured faster.
#include <cuda_runtime.h>

#include <algorithm>
#include <memory>
#include <string>
#include <variant>

#include "kernels/common/cuda_check.cuh"
#include "kernels/sparse_mla/mla_run.hpp"
#include "kernels/sparse_mla/sm90a/mla_sm90a.hpp"
#include "latte/backend.hpp"
#include "latte/error.hpp"
#include "latte/ops.hpp"
#include "latte/registry.hpp"
#include "latte/spec.hpp"

namespace latte::hopper_mla {
namespace {

constexpr int kDefaultSms = 132;  // a described H100 / H200 without a probed count

Capabilities declared() {
  Capabilities caps;
  caps.ops = {Op::sparse_mla, Op::mla_decode};
  caps.devices = {DeviceKind::cuda};
  caps.arch = IntRule::list({90});
  caps.q_dtypes = {DType::bf16};
  caps.kv_caches = {CacheFormat::fp8_ds_mla, CacheFormat::bf16};
  caps.heads = IntRule::range(1, cuda_sparse_mla::kMaxHeads);
  caps.head_dim = IntRule::list({latte::kQkDim});
  caps.block_size = IntRule::at_least(1);
  caps.topk = IntRule::range(1, cuda_sparse_mla::kMaxTopk);  // the limits of the shared parameter block
  caps.s_q = IntRule::range(1, kMaxDecodeSq);
  caps.max_tokens = IntRule::range(1, cuda_sparse_mla::kMaxTokens);
  caps.workspace =
      "split partials when the plan splits the list (kernels whose tokens x 64-row groups leave SMs idle): "
      "tokens x 64-row groups x splits x 131328 B; dense decode: as many splits as a request of 163840 positions "
      "needs, capped at 256 MiB (larger calls run in several launches); 0 otherwise";
  caps.notes =
      "wgmma (sm_90a instructions: H100 / H200 only); 64 (query, head) rows per CTA (fewer heads: the rows past "
      "them are computed on zero queries), except sparse MLA over the fp8_ds_mla cache at 1-16 heads, and at more "
      "heads in calls of at most " +
      std::to_string(kFewHeadsTiledCtas) + " tiles of " + std::to_string(kFewHeadsMax) +
      " heads x tokens: the heads on wgmma's N dimension (8 or 16), 64 cache rows per stage; producer warpgroups "
      "copy the rows with 16-byte cp.async (the cache, its block and row strides 16-byte aligned): fp8_ds_mla rows "
      "widened to f16 exactly (the group scales applied to S and P in f32), bf16 rows straight into the wgmma "
      "layout (bf16 wgmma); dense decode reads the positions through the block table; rows with rope only "
      "(without: cuda.sparse_mla)";
  return caps;
}

class HopperMlaKernel final : public Kernel {
 public:
  HopperMlaKernel(const AttentionSpec& spec, const DeviceInfo& device)
      : Kernel(spec, device.handle()),
        sm_count_(device.probed && device.sm_count > 0 ? device.sm_count : kDefaultSms),
        rows_(cuda_sparse_mla::rows_per_group(spec)),
        max_groups_(cuda_sparse_mla::max_groups_of(spec)),
        plan_(spec.op == Op::mla_decode ? plan_decode_sm90a(max_groups_, rows_, sm_count_)
                                        : plan_sm90a(spec.kv_cache, max_groups_, rows_, std::max(1, spec.topk),
                                                     sm_count_)),
        workspace_(workspace_bytes_sm90a(plan_, max_groups_, rows_)) {}

  [[nodiscard]] std::size_t workspace_bytes() const override { return workspace_; }
  [[nodiscard]] std::string describe() const override {
    return describe_sm90a(plan_, spec().kv_cache, max_groups_, rows_, sm_count_);
  }

 protected:
  void compute(const Problem& problem, const RunContext& ctx) override {
    const cuda_sparse_mla::MlaParams p = std::holds_alternative<SparseMlaProblem>(problem)
                                             ? cuda_sparse_mla::mla_params(std::get<SparseMlaProblem>(problem))
                                             : cuda_sparse_mla::mla_params(std::get<MlaDecodeProblem>(problem));
    launch_sm90a(p, plan_, ctx.workspace, ctx.workspace_bytes, static_cast<cudaStream_t>(ctx.stream));
  }

 private:
  int sm_count_;
  int rows_;            // (query, head) rows per group
  int64_t max_groups_;  // groups of the kernel's largest call (0: not known)
  Sm90aPlan plan_;
  std::size_t workspace_;
};

class HopperMlaBackend final : public Backend {
 public:
  HopperMlaBackend()
      : info_{"hopper.mla",
              "sparse MLA and dense MLA decode on H100 / H200 (sm_90a): fp8_ds_mla or bf16 cache, heads 1..128, "
              "wgmma on rows a producer warpgroup copies (and for fp8 widens) into the wgmma layout",
              declared(), "built-in"} {}

  [[nodiscard]] const BackendInfo& info() const override { return info_; }

  [[nodiscard]] std::vector<Reason> custom_checks(const AttentionSpec& spec, const DeviceInfo& device) const override {
    std::vector<Reason> out;
    if (auto r = latent_output_refusal(info_.id, spec)) out.push_back(std::move(*r));
    if (auto r = smem_refusal(info_.id, static_cast<int64_t>(smem_bytes_sm90a(spec.kv_cache)), device))
      out.push_back(std::move(*r));
    return out;
  }

  [[nodiscard]] std::unique_ptr<Kernel> make(const AttentionSpec& spec, const DeviceInfo& device) const override {
    return std::make_unique<HopperMlaKernel>(spec, device);
  }

 private:
  BackendInfo info_;
};

LATTE_REGISTER_BACKEND(HopperMlaBackend);

}  // namespace
}  // namespace latte::hopper_mla
