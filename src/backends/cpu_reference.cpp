// The cpu.reference backend: declares what it computes and runs the float64 reference of each
// op (src/kernels/cpu_reference) on host tensors.
#include <memory>
#include <vector>

#include "latte/backend.hpp"
#include "latte/registry.hpp"
#include "latte/spec.hpp"
#include "kernels/cpu_reference/reference_ops.hpp"

namespace latte::cpu_reference {
namespace {

Capabilities reference_capabilities() {
  Capabilities caps;
  caps.ops = all_ops();
  caps.devices = {DeviceKind::cpu};
  caps.q_dtypes = {DType::bf16, DType::e4m3};  // bf16 attention queries; e4m3 or bf16 index queries
  caps.kv_caches = {CacheFormat::bf16, CacheFormat::fp8_ds_mla};
  caps.heads = IntRule::range(1, 128);
  // MLA rows with rope (576) or without (512; sparse_mla and kv_store), the indexer's 128.
  caps.head_dim = IntRule::list({kLatentDim, kQkDim, kIndexDim});
  caps.block_size = IntRule::at_least(1);
  caps.topk = IntRule::range(1, kMaxTopk);
  caps.s_q = IntRule::range(1, kMaxDecodeSq);
  caps.workspace = "none (host memory of its own, O(topk * 576) doubles per token)";
  caps.notes = "float64 oracle, single-threaded; for checking and small runs, not for speed; takes MLA "
               "without rope (head_dim 512) and topk_lens";
  return caps;
}

class ReferenceKernel final : public Kernel {
 public:
  using Kernel::Kernel;
  [[nodiscard]] std::size_t workspace_bytes() const override { return 0; }

 protected:
  void compute(const Problem& problem, const RunContext&) override {
    std::visit([](const auto& p) { cpu_reference::compute(p); }, problem);
  }
};

class CpuReferenceBackend final : public Backend {
 public:
  CpuReferenceBackend()
      : info_{"cpu.reference",
              "float64 reference of every op on host tensors: the oracle other backends are "
              "checked against",
              reference_capabilities(), "built-in"} {}

  [[nodiscard]] const BackendInfo& info() const override { return info_; }

  [[nodiscard]] std::vector<Reason> custom_checks(const AttentionSpec& spec, const DeviceInfo&) const override {
    if (spec.op == Op::mla_decode && spec.head_dim == kLatentDim) {
      return {Reason{"head_dim", "head_dim", "576 for mla_decode", "512",
                     "computes mla_decode with rope only (d_qk 576): its arguments have no rope_dim; a "
                     "model without rope runs sparse_mla"}};
    }
    return {};
  }

  [[nodiscard]] std::unique_ptr<Kernel> make(const AttentionSpec& spec,
                                             const DeviceInfo& device) const override {
    return std::make_unique<ReferenceKernel>(spec, device.handle());
  }

 private:
  BackendInfo info_;
};

LATTE_REGISTER_BACKEND(CpuReferenceBackend);

}  // namespace
}  // namespace latte::cpu_reference
