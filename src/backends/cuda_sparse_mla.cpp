// The cuda.sparse_mla backend: declared capabilities, registration, and the Kernel that plans
// and launches a validated problem (src/kernels/sparse_mla) on the caller's stream.

#include <algorithm>
#include <memory>
#include <variant>
#include <vector>

#include "kernels/sparse_mla/mla_run.hpp"
#include "latte/backend.hpp"
#include "latte/registry.hpp"
#include "latte/spec.hpp"

namespace latte::cuda_sparse_mla {
namespace {

Capabilities declared() {
  Capabilities caps;
  caps.ops = {Op::sparse_mla, Op::mla_decode};
  caps.devices = {DeviceKind::cuda};
  caps.arch = IntRule::at_least(80);
  caps.q_dtypes = {DType::bf16};
  caps.kv_caches = {CacheFormat::bf16, CacheFormat::fp8_ds_mla};
  caps.heads = IntRule::range(1, kMaxHeads);
  caps.head_dim = IntRule::list({kQkDim, kLatentDim});  // 512: sparse_mla rows without rope (rope_dim 0)
  caps.block_size = IntRule::at_least(1);
  caps.topk = IntRule::range(1, kMaxTopk);
  caps.s_q = IntRule::range(1, kMaxDecodeSq);
  caps.max_tokens = IntRule::range(1, kMaxTokens);
  caps.workspace =
      "split partials: tokens x heads x ceil(topk/chunk) x 1028 B (chunk 128 ... 2048 tokens by "
      "rows and the kernel's max_tokens; decode: ceil(context/1024 ... 4096)), capped at 256 MiB; "
      "0 when unsplit";
  caps.notes =
      "portable mma.sync/ldmatrix/cp.async kernels for sm_80..sm_120 (<= 101376 B shared memory "
      "per block but for the 16-head few-heads kernel), bf16 / f16 math; fp8_ds_mla converted in the "
      "fragment path; fp8 sparse calls of <= 8 heads (9-16 in kernels for more than 16 tokens) on GPUs "
      "with two such blocks per SM: the heads on the mma's N dimension; sparse_mla "
      "without rope (head_dim 512: 1024-byte bf16 rows, the first 528 bytes of fp8 rows) and with "
      "topk_lens (the splits past a row's length do no work)";
  return caps;
}

class CudaSparseMlaKernel final : public Kernel {
 public:
  CudaSparseMlaKernel(const AttentionSpec& spec, const DeviceInfo& device)
      : Kernel(spec, device.handle()),
        device_{std::max(1, device.sm_count), device.max_smem_per_block + 1024},
        tuning_(tuning_from_env()) {
    const bool decode = spec.op == Op::mla_decode;
    // groups 0: a kernel made without spec.max_tokens (any call size; sized for kUnknownCallGroups)
    max_groups_ = max_groups_of(spec);
    const int work = decode ? kWorkspaceContext : std::max(1, spec.topk);
    workspace_ = workspace_bytes_for(decode, spec.kv_cache, rows_per_group(spec), work, max_groups_, tuning_, device_);
  }

  [[nodiscard]] std::size_t workspace_bytes() const override { return workspace_; }

  // The plan of a call of the kernel's size (a decode request spanning the workspace's context).
  [[nodiscard]] std::string describe() const override {
    const MlaParams p = nominal_params(spec(), max_groups_);
    return describe_plan(p, make_plan(p, device_, workspace_, tuning_, max_groups_), device_, max_groups_);
  }

 protected:
  void compute(const Problem& problem, const RunContext& ctx) override {
    const MlaParams p = std::holds_alternative<SparseMlaProblem>(problem)
                            ? mla_params(std::get<SparseMlaProblem>(problem))
                            : mla_params(std::get<MlaDecodeProblem>(problem));
    run_mla(p, device_, tuning_, max_groups_, ctx.workspace, ctx.workspace_bytes, workspace_, ctx.stream);
  }

 private:
  PlanDevice device_;  // SM count and shared memory per SM, for the launch plan
  Tuning tuning_;      // the environment's tuning variables, read once here
  int64_t max_groups_ = 0;  // groups of the largest call (spec.max_tokens; 0: not known): the split size
  std::size_t workspace_ = 0;
};

class CudaSparseMlaBackend final : public Backend {
 public:
  CudaSparseMlaBackend()
      : info_{"cuda.sparse_mla",
              "portable CUDA sparse MLA and dense paged MLA decode (sm_80..sm_120), bf16 or "
              "fp8_ds_mla cache, any heads 1..128, topk 1..32768, block size >= 1; sparse_mla with "
              "or without rope, with or without topk_lens",
              declared(), "built-in"} {}

  [[nodiscard]] const BackendInfo& info() const override { return info_; }

  [[nodiscard]] std::vector<Reason> custom_checks(const AttentionSpec& spec,
                                                  const DeviceInfo& device) const override {
    std::vector<Reason> out;
    if (spec.op == Op::mla_decode && spec.head_dim == kLatentDim) {
      out.push_back({"head_dim", "head_dim", "576 for mla_decode", "512",
                     "cuda.sparse_mla computes mla_decode with rope only (d_qk 576): its arguments have no "
                     "rope_dim; a model without rope runs sparse_mla"});
    }
    if (auto r = latent_output_refusal(info_.id, spec)) out.push_back(std::move(*r));
    if (spec.op == Op::mla_decode && spec.s_q * spec.num_heads > kMaxRows) {
      out.push_back({"rows", "s_q * num_heads", "<= 512",
                     std::to_string(spec.s_q * spec.num_heads),
                     "cuda.sparse_mla decodes at most 512 (query, head) rows per request."});
    }
    const int64_t need = static_cast<int64_t>(
        std::max(smem_bytes(CacheFormat::bf16, 32), smem_bytes(CacheFormat::fp8_ds_mla, 32)));
    if (auto r = smem_refusal(info_.id, need, device)) out.push_back(std::move(*r));
    return out;
  }

  [[nodiscard]] std::unique_ptr<Kernel> make(const AttentionSpec& spec,
                                             const DeviceInfo& device) const override {
    return std::make_unique<CudaSparseMlaKernel>(spec, device);
  }

 private:
  BackendInfo info_;
};

LATTE_REGISTER_BACKEND(CudaSparseMlaBackend);

}  // namespace
}  // namespace latte::cuda_sparse_mla
