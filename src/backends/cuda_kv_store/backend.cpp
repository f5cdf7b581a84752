// cuda.kv_store: kv_store (bf16 and fp8_ds_mla caches, amax or power-of-two scales),
// indexer_k_store and logical_to_slots on CUDA GPUs from sm_80. Bytes written are identical to
// latte/formats.hpp's host packing.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "cuda/check.cuh"
#include "cuda/host_copy.hpp"
#include "kv_store_launch.hpp"
#include "latte/backend.hpp"
#include "latte/error.hpp"
#include "latte/registry.hpp"
#include "latte/spec.hpp"
#include "latte/validate.hpp"

namespace latte::cuda_kv_store {
namespace {

Capabilities kv_store_capabilities() {
  Capabilities caps;
  caps.ops = {Op::kv_store, Op::indexer_k_store, Op::logical_to_slots};
  caps.devices = {DeviceKind::cuda};
  caps.arch = IntRule::at_least(80);
  caps.kv_caches = {CacheFormat::bf16, CacheFormat::fp8_ds_mla};
  caps.head_dim = IntRule::list({kQkDim, kIndexDim});
  caps.block_size = IntRule::at_least(1);
  caps.workspace = "none";
  caps.notes = "cache writes through slot_mapping (-1 skips), bit-identical to formats.hpp; "
               "logical -> physical slots";
  return caps;
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }


void check_slot_mapping(const TensorView& sm, int64_t tokens, int64_t num_slots, const char* what,
                        cudaStream_t stream) {
  const std::vector<int32_t> host = cuda::download_i32(sm, stream);
  check_values_in_range(host.data(), tokens, 1, -1, num_slots - 1, what, "-1 (skip) or a slot of the cache");
}

// Kernel::describe(): what the kernel made for `op` (and, for kv_store, the cache format) writes
// and how (kv_store_kernels.cu).
std::string describe_cache_write(Op op, CacheFormat format) {
  switch (op) {
    case Op::kv_store:
      return format == CacheFormat::fp8_ds_mla
                 ? "one warp per token: 4 groups of 128 latent values to e4m3 with an f32 scale each (amax / "
                   "448, or the power of two at or above it when the call asks for pow2 scales), the 64 rope "
                   "values kept bf16: one 656-byte row per slot, bit-identical to formats.hpp; slot -1 or outside "
                   "the cache skips the token"
                 : "one warp per token: the 576 bf16 values copied into the slot's row (16-byte stores when every "
                   "row is 16-byte aligned); slot -1 or outside the cache skips the token";
    case Op::indexer_k_store:
      return "one warp per token: 128 values to e4m3 with one f32 scale (amax / 448, or the power of two at or "
             "above it when the call asks for pow2 scales) in the page's scale area, bit-identical to formats.hpp; "
             "slot -1 or outside the cache skips the token";
    case Op::logical_to_slots:
      return "one thread per (token, position): the block table's entry times block_size plus the offset; -1 for "
             "negative positions, positions past the table, negative blocks and slots past int32";
    default:
      return {};
  }
}

class KvStoreKernel final : public Kernel {
 public:
  KvStoreKernel(Op op, CacheFormat format) : op_(op), format_(format) {}
  [[nodiscard]] std::size_t workspace_bytes() const override { return 0; }
  [[nodiscard]] std::string describe() const override { return describe_cache_write(op_, format_); }

  void run(const OpArgs& args, const RunContext& ctx) override {
    const Op op = op_of(args);
    if (op != op_) {
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("cuda.kv_store: this kernel was made for {} but was given {} "
                              "arguments; make a kernel for {}.",
                              to_string(op_), to_string(op), to_string(op)));
    }
    const auto stream = static_cast<cudaStream_t>(ctx.stream);
    if (const auto* a = std::get_if<KvStoreArgs>(&args)) {
      const KvStoreShape s = validate(*a);
      require_cuda(args, op);
      if (ctx.check_indices)
        check_slot_mapping(a->slot_mapping, s.tokens, s.num_blocks * s.block_size, "kv_store: slot_mapping", stream);
      KvStoreProblem p;
      p.latent = a->latent.data;
      p.lat_st = a->latent.stride(0);
      p.rope = a->rope.data;
      p.rope_st = a->rope.stride(0);
      p.slot_mapping = a->slot_mapping.ptr<const int32_t>();
      p.sm_s = a->slot_mapping.stride(0);
      p.cache = a->kv_cache.data;
      p.cache_sb = a->kv_cache.stride(0);
      p.cache_st = a->kv_cache.stride(1);
      p.num_blocks = static_cast<int>(s.num_blocks);
      p.block_size = static_cast<int>(s.block_size);
      p.tokens = s.tokens;
      p.fp8 = s.format == CacheFormat::fp8_ds_mla;
      p.pow2 = a->scale_kind == Fp8ScaleKind::pow2 ? 1 : 0;
      const int64_t esz = p.fp8 ? 1 : 2;
      p.vec = aligned16(p.latent) && aligned16(p.rope) && aligned16(p.cache) && (p.lat_st * 2) % 16 == 0 &&
              (p.rope_st * 2) % 16 == 0 && (p.cache_sb * esz) % 16 == 0 && (p.cache_st * esz) % 16 == 0;
      launch_kv_store(p, ctx.stream);
    } else if (const auto* k = std::get_if<IndexerKStoreArgs>(&args)) {
      const KvStoreShape s = validate(*k);
      require_cuda(args, op);
      if (ctx.check_indices)
        check_slot_mapping(k->slot_mapping, s.tokens, s.num_blocks * s.block_size, "indexer_k_store: slot_mapping",
                           stream);
      IndexerKStoreProblem p;
      p.k = k->k.data;
      p.k_st = k->k.stride(0);
      p.slot_mapping = k->slot_mapping.ptr<const int32_t>();
      p.sm_s = k->slot_mapping.stride(0);
      p.k_cache = k->k_cache.ptr<uint8_t>();
      p.page_stride = k->k_cache.stride(0);
      p.num_blocks = static_cast<int>(s.num_blocks);
      p.block_size = static_cast<int>(s.block_size);
      p.tokens = s.tokens;
      p.pow2 = k->scale_kind == Fp8ScaleKind::pow2 ? 1 : 0;
      launch_indexer_k_store(p, ctx.stream);
    } else if (const auto* l = std::get_if<LogicalToSlotsArgs>(&args)) {
      const LogicalToSlotsShape s = validate(*l);
      require_cuda(args, op);
      if (ctx.check_indices) check_logical(*l, s, stream);
      LogicalToSlotsProblem p;
      p.positions = l->positions.ptr<const int32_t>();
      p.pos_st = l->positions.stride(0);
      p.pos_sc = l->positions.stride(1);
      p.block_table = l->block_table.ptr<const int32_t>();
      p.bt_sr = l->block_table.stride(0);
      p.bt_sc = l->block_table.stride(1);
      p.batch = static_cast<int>(s.batch);
      p.max_blocks = static_cast<int>(s.max_blocks);
      if (l->token_request.defined()) {
        p.token_request = l->token_request.ptr<const int32_t>();
        p.tr_s = l->token_request.stride(0);
      }
      p.slots = l->slots.ptr<int32_t>();
      p.out_st = l->slots.stride(0);
      p.out_sc = l->slots.stride(1);
      p.tokens = s.tokens;
      p.width = s.width;
      p.block_size = l->block_size;
      launch_logical_to_slots(p, ctx.stream);
    } else {
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("cuda.kv_store: {} is not a cache-write op", to_string(op)));
    }
    if (ctx.check_indices) LATTE_CUDA_TRY(cudaStreamSynchronize(stream));
  }

 private:
  static void require_cuda(const OpArgs& args, Op op) {
    if (common_device(args).kind != DeviceKind::cuda) {
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("cuda.kv_store: {} was given host tensors; this backend writes CUDA "
                              "device memory. Move the tensors to the GPU, or select cpu.reference.",
                              to_string(op)));
    }
  }

  // cpu.reference's check mode for logical_to_slots.
  static void check_logical(const LogicalToSlotsArgs& a, const LogicalToSlotsShape& s, cudaStream_t stream) {
    const int64_t bs = a.block_size;
    std::vector<int32_t> rows;
    if (a.token_request.defined()) {
      rows = cuda::download_i32(a.token_request, stream);
      check_values_in_range(rows.data(), s.tokens, 1, 0, s.batch - 1, "logical_to_slots: token_request",
                            "rows of block_table");
    }
    const std::vector<int32_t> pos = cuda::download_i32(a.positions, stream);
    check_slot_indices(pos.data(), s.tokens, s.width, s.width, s.max_blocks * bs, "logical_to_slots: positions");
    std::vector<int64_t> used(static_cast<std::size_t>(s.batch), 0);
    for (int64_t t = 0; t < s.tokens; ++t) {
      const int32_t* r = pos.data() + t * s.width;
      const int64_t highest = s.width > 0 ? *std::max_element(r, r + s.width) : -1;
      const int64_t row = rows.empty() ? t : rows[static_cast<std::size_t>(t)];
      auto& u = used[static_cast<std::size_t>(row)];
      u = std::max<int64_t>(u, highest < 0 ? 0 : highest / bs + 1);
    }
    const std::vector<int32_t> table = cuda::download_i32(a.block_table, stream);
    const int64_t max_slot = std::numeric_limits<int32_t>::max();
    check_block_table_prefix(table.data(), s.batch, s.max_blocks, used.data(), (max_slot + 1) / bs,
                             "logical_to_slots: block_table");
  }

  Op op_;
  CacheFormat format_;
};

class CudaKvStoreBackend final : public Backend {
 public:
  CudaKvStoreBackend()
      : info_{"cuda.kv_store",
              "KV-cache and indexer-K-cache writes and slot mapping on CUDA (sm_80+)",
              kv_store_capabilities(), "built-in"} {}
  [[nodiscard]] const BackendInfo& info() const override { return info_; }
  [[nodiscard]] std::unique_ptr<Kernel> make(const AttentionSpec& spec, const DeviceInfo& device) const override {
    (void)device;
    return std::make_unique<KvStoreKernel>(spec.op, spec.kv_cache);
  }

 private:
  BackendInfo info_;
};

LATTE_REGISTER_BACKEND(CudaKvStoreBackend);

}  // namespace
}  // namespace latte::cuda_kv_store
