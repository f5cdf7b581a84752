// hopper.mla: sparse MLA over the fp8_ds_mla or bf16 cache on H100 / H200 (sm_90a), 64 or 128
// heads per rank, with a producer warpgroup copying (fp8: and widening) the cache rows into the
// wgmma layout. Kernel: src/kernels/sparse_mla/sm90a/mla_sparse_sm90a_cpasync_wgmma_ws.cu; design
// notes and measurements: docs/kernels/hopper_mla.md. Everything else (other head counts, rows
// without rope, mla_decode, other GPUs): cuda.sparse_mla, which the policy ranks next.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <memory>
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
  caps.ops = {Op::sparse_mla};
  caps.devices = {DeviceKind::cuda};
  caps.arch = IntRule::list({90});
  caps.q_dtypes = {DType::bf16};
  caps.kv_caches = {CacheFormat::fp8_ds_mla, CacheFormat::bf16};
  caps.heads = IntRule::list({64, 128});
  caps.head_dim = IntRule::list({latte::kQkDim});
  caps.block_size = IntRule::at_least(1);
  caps.topk = IntRule::range(1, cuda_sparse_mla::kMaxTopk);  // the limits of the shared parameter block
  caps.max_tokens = IntRule::range(1, cuda_sparse_mla::kMaxTokens);
  caps.workspace =
      "split partials when the plan splits the list (kernels for few tokens x 64-head groups against the SM "
      "count): tokens x heads x splits x 2052 B; 0 otherwise";
  caps.notes =
      "wgmma (sm_90a instructions: H100 / H200 only); 64 heads per CTA; a producer warpgroup copies the rows with "
      "16-byte cp.async (the cache, its block and row strides 16-byte aligned): fp8_ds_mla rows widened to f16 "
      "exactly (the group scales applied to S and P in f32), bf16 rows straight into the wgmma layout (bf16 "
      "wgmma); rows with rope only; other head counts, rows without rope and mla_decode: cuda.sparse_mla";
  return caps;
}

class HopperMlaKernel final : public Kernel {
 public:
  HopperMlaKernel(const AttentionSpec& spec, const DeviceInfo& device)
      : Kernel(spec, device.handle()),
        sm_count_(device.probed && device.sm_count > 0 ? device.sm_count : kDefaultSms),
        max_groups_(spec.max_tokens),
        plan_(plan_sm90a(spec.max_tokens, spec.num_heads, std::max(1, spec.topk), sm_count_)),
        workspace_(workspace_bytes_sm90a(plan_, spec.max_tokens, spec.num_heads)) {}

  [[nodiscard]] std::size_t workspace_bytes() const override { return workspace_; }
  [[nodiscard]] std::string describe() const override {
    return describe_sm90a(plan_, spec().kv_cache, max_groups_, spec().num_heads, sm_count_);
  }

 protected:
  void compute(const Problem& problem, const RunContext& ctx) override {
    const auto& s = std::get<SparseMlaProblem>(problem);
    const cuda_sparse_mla::MlaParams p = cuda_sparse_mla::mla_params(s);
    const std::size_t need = workspace_bytes_sm90a(plan_, p.groups, p.heads);
    if (need > ctx.workspace_bytes) {
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("hopper.mla: a call of {} tokens needs {} bytes of workspace for its split partials "
                              "and got {}; make the kernel with spec.max_tokens >= the call's tokens and give it "
                              "workspace_bytes()",
                              p.groups, need, ctx.workspace_bytes));
    }
    launch_sparse_sm90a(p, plan_, ctx.workspace, static_cast<cudaStream_t>(ctx.stream));
  }

 private:
  int sm_count_;
  int64_t max_groups_;
  Sm90aPlan plan_;
  std::size_t workspace_;
};

class HopperMlaBackend final : public Backend {
 public:
  HopperMlaBackend()
      : info_{"hopper.mla",
              "sparse MLA on H100 / H200 (sm_90a): fp8_ds_mla or bf16 cache, 64 or 128 heads, wgmma on rows a "
              "producer warpgroup copies (and for fp8 widens) into the wgmma layout",
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
