// cuda.kv_store: kv_store (bf16 and fp8_ds_mla caches, with or without rope, amax or power-of-two scales),
// indexer_k_store, indexer_pool_store (the pooled indexer's keys) and logical_to_slots on CUDA
// GPUs from sm_80. Bytes written are identical to latte/formats.hpp's host packing and to
// cpu.reference.

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <variant>

#include "kernels/kv_store/kv_store_run.hpp"
#include "latte/backend.hpp"
#include "latte/registry.hpp"
#include "latte/spec.hpp"

namespace latte::cuda_kv_store {
namespace {

Capabilities kv_store_capabilities() {
  Capabilities caps;
  caps.ops = {Op::kv_store, Op::indexer_k_store, Op::logical_to_slots, Op::indexer_pool_store};
  caps.devices = {DeviceKind::cuda};
  caps.arch = IntRule::at_least(80);
  caps.kv_caches = {CacheFormat::bf16, CacheFormat::fp8_ds_mla};
  caps.head_dim = IntRule::list({kQkDim, kLatentDim, kIndexDim});  // 512: MLA rows without rope
  caps.block_size = IntRule::at_least(1);
  caps.workspace = "none, except indexer_pool_store: two hash tables of bit_ceil(2 x max_tokens) 16-byte "
                   "entries (32 x bit_ceil(2 x max_tokens) bytes)";
  caps.notes = "cache writes through slot_mapping (-1 skips), bit-identical to formats.hpp; "
               "logical -> physical slots; the pooled indexer's keys and state (indexer_pool_store, "
               "kpool 2..16), bit-identical to cpu.reference";
  return caps;
}

class KvStoreKernel final : public Kernel {
 public:
  KvStoreKernel(const AttentionSpec& spec, Device device)
      : Kernel(spec, device),
        workspace_(spec.op == Op::indexer_pool_store
                       ? pool_store_workspace_bytes(std::max<int64_t>(1, spec.max_tokens))
                       : 0) {}
  // indexer_pool_store: its hash tables for spec.max_tokens tokens (1 when unknown); a larger
  // call is refused (invalid_argument) unless the context gives it more.
  [[nodiscard]] std::size_t workspace_bytes() const override { return workspace_; }
  [[nodiscard]] std::string describe() const override {
    return describe_cache_write(spec().op, spec().kv_cache, spec().head_dim);
  }

 protected:
  void compute(const Problem& problem, const RunContext& ctx) override {
    std::visit(
        [&](const auto& p) {
          using P = std::decay_t<decltype(p)>;
          if constexpr (std::is_same_v<P, KvStoreProblem> || std::is_same_v<P, IndexerKStoreProblem> ||
                        std::is_same_v<P, LogicalToSlotsProblem>) {
            launch(p, ctx.stream);
          } else if constexpr (std::is_same_v<P, IndexerPoolStoreProblem>) {
            launch(p, ctx.workspace, ctx.workspace_bytes, ctx.stream);
          }
        },
        problem);
  }

 private:
  std::size_t workspace_;
};

class CudaKvStoreBackend final : public Backend {
 public:
  CudaKvStoreBackend()
      : info_{"cuda.kv_store",
              "KV-cache and indexer-K-cache writes and slot mapping on CUDA (sm_80+)",
              kv_store_capabilities(), "built-in"} {}
  [[nodiscard]] const BackendInfo& info() const override { return info_; }
  [[nodiscard]] std::unique_ptr<Kernel> make(const AttentionSpec& spec, const DeviceInfo& device) const override {
    return std::make_unique<KvStoreKernel>(spec, device.handle());
  }

 private:
  BackendInfo info_;
};

LATTE_REGISTER_BACKEND(CudaKvStoreBackend);

}  // namespace
}  // namespace latte::cuda_kv_store
