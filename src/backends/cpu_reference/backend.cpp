// The cpu.reference backend: declares what it computes, validates every call with the shared
// validation layer and runs the float64 reference of each op on host tensors.
#include <fmt/format.h>

#include <memory>

#include "latte/backend.hpp"
#include "latte/error.hpp"
#include "latte/registry.hpp"
#include "latte/spec.hpp"
#include "latte/validate.hpp"
#include "reference_ops.hpp"

namespace latte::cpu_reference {
namespace {

Capabilities reference_capabilities() {
  Capabilities caps;
  caps.ops = all_ops();
  caps.devices = {DeviceKind::cpu};
  caps.q_dtypes = {DType::bf16, DType::e4m3};  // bf16 attention queries; e4m3 or bf16 index queries
  caps.kv_caches = {CacheFormat::bf16, CacheFormat::fp8_ds_mla};
  caps.heads = IntRule::range(1, 128);
  caps.head_dim = IntRule::list({kQkDim, kIndexDim});
  caps.block_size = IntRule::at_least(1);
  caps.topk = IntRule::range(1, kMaxTopk);
  caps.s_q = IntRule::range(1, kMaxDecodeSq);
  caps.workspace = "none (host memory of its own, O(topk * 576) doubles per token)";
  caps.notes = "float64 oracle, single-threaded; for checking and small runs, not for speed";
  return caps;
}

class ReferenceKernel final : public Kernel {
 public:
  explicit ReferenceKernel(Op op) : op_(op) {}

  [[nodiscard]] std::size_t workspace_bytes() const override { return 0; }

  void run(const OpArgs& args, const RunContext& ctx) override {
    const Op op = op_of(args);
    if (op != op_) {
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("cpu.reference: this kernel was made for {} but was given {} "
                              "arguments; make a kernel for {}.",
                              to_string(op_), to_string(op), to_string(op)));
    }
    const Device device = common_device(args);
    if (device.kind != DeviceKind::cpu) {
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("cpu.reference: {} was given tensors on cuda:{}; the reference "
                              "reads host memory. Copy the tensors to the CPU, or select a CUDA "
                              "backend.",
                              to_string(op), device.index));
    }
    const bool check = ctx.check_indices;
    std::visit(
        [check](const auto& a) {
          using T = std::decay_t<decltype(a)>;
          const auto shape = validate(a);
          if constexpr (std::is_same_v<T, SparseMlaArgs>) sparse_mla(a, shape, check);
          else if constexpr (std::is_same_v<T, MlaDecodeArgs>) mla_decode(a, shape, check);
          else if constexpr (std::is_same_v<T, IndexerTopkArgs>) indexer_topk(a, shape, check);
          else if constexpr (std::is_same_v<T, IndexerLogitsArgs>) indexer_logits(a, shape, check);
          else if constexpr (std::is_same_v<T, KvStoreArgs>) kv_store(a, shape, check);
          else if constexpr (std::is_same_v<T, IndexerKStoreArgs>) indexer_k_store(a, shape, check);
          else logical_to_slots(a, shape, check);
        },
        args);
  }

 private:
  Op op_;
};

class CpuReferenceBackend final : public Backend {
 public:
  CpuReferenceBackend()
      : info_{"cpu.reference",
              "float64 reference of every op on host tensors: the oracle other backends are "
              "checked against",
              reference_capabilities(), "built-in"} {}

  [[nodiscard]] const BackendInfo& info() const override { return info_; }

  [[nodiscard]] std::unique_ptr<Kernel> make(const AttentionSpec& spec,
                                             const DeviceInfo& device) const override {
    (void)device;
    return std::make_unique<ReferenceKernel>(spec.op);
  }

 private:
  BackendInfo info_;
};

LATTE_REGISTER_BACKEND(CpuReferenceBackend);

}  // namespace
}  // namespace latte::cpu_reference
