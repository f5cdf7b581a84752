// The cache-write kernels' host side: latte's validated problems to raw parameters, and the
// one-line description of each kernel.
#include <cstdint>

#include <fmt/format.h>

#include "kernels/kv_store/kv_store_run.hpp"
#include "latte/error.hpp"

namespace latte::cuda_kv_store {
namespace {

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

}  // namespace

void launch(const KvStoreProblem& s, void* stream) {
  const KvStoreArgs& a = *s.args;
  KvStoreParams p;
  p.latent = a.latent.data;
  p.lat_st = a.latent.stride(0);
  // Rows without rope (rope_dim 0): no rope tensor, the row ends with the latent (and its scales).
  const bool rope = s.rope_dim == kRopeDim;
  p.rope = rope ? a.rope.data : nullptr;
  p.rope_st = rope ? a.rope.stride(0) : 0;
  p.slot_mapping = a.slot_mapping.ptr<const int32_t>();
  p.sm_s = a.slot_mapping.stride(0);
  p.cache = a.kv_cache.data;
  p.cache_sb = a.kv_cache.stride(0);
  p.cache_st = a.kv_cache.stride(1);
  p.num_blocks = static_cast<int>(s.num_blocks);
  p.block_size = static_cast<int>(s.block_size);
  p.tokens = s.tokens;
  p.fp8 = s.format == CacheFormat::fp8_ds_mla;
  p.pow2 = a.scale_kind == Fp8ScaleKind::pow2 ? 1 : 0;
  const int64_t esz = p.fp8 ? 1 : 2;
  p.vec = aligned16(p.latent) && (!rope || aligned16(p.rope)) && aligned16(p.cache) && (p.lat_st * 2) % 16 == 0 &&
          (p.rope_st * 2) % 16 == 0 && (p.cache_sb * esz) % 16 == 0 && (p.cache_st * esz) % 16 == 0;
  launch_kv_store(p, stream);
}

void launch(const IndexerKStoreProblem& s, void* stream) {
  const IndexerKStoreArgs& k = *s.args;
  IndexerKStoreParams p;
  p.k = k.k.data;
  p.k_st = k.k.stride(0);
  p.slot_mapping = k.slot_mapping.ptr<const int32_t>();
  p.sm_s = k.slot_mapping.stride(0);
  p.k_cache = k.k_cache.ptr<uint8_t>();
  p.page_stride = k.k_cache.stride(0);
  p.num_blocks = static_cast<int>(s.num_blocks);
  p.block_size = static_cast<int>(s.block_size);
  p.tokens = s.tokens;
  p.pow2 = k.scale_kind == Fp8ScaleKind::pow2 ? 1 : 0;
  launch_indexer_k_store(p, stream);
}

void launch(const LogicalToSlotsProblem& s, void* stream) {
  const LogicalToSlotsArgs& l = *s.args;
  LogicalToSlotsParams p;
  p.positions = l.positions.ptr<const int32_t>();
  p.pos_st = l.positions.stride(0);
  p.pos_sc = l.positions.stride(1);
  p.block_table = l.block_table.ptr<const int32_t>();
  p.bt_sr = l.block_table.stride(0);
  p.bt_sc = l.block_table.stride(1);
  p.batch = static_cast<int>(s.batch);
  p.max_blocks = static_cast<int>(s.max_blocks);
  if (l.token_request.defined()) {
    p.token_request = l.token_request.ptr<const int32_t>();
    p.tr_s = l.token_request.stride(0);
  }
  p.slots = l.slots.ptr<int32_t>();
  p.out_st = l.slots.stride(0);
  p.out_sc = l.slots.stride(1);
  p.tokens = s.tokens;
  p.width = s.width;
  p.block_size = l.block_size;
  launch_logical_to_slots(p, stream);
}

void launch(const IndexerPoolStoreProblem& s, void* workspace, std::size_t workspace_bytes, void* stream) {
  if (s.tokens <= 0) return;
  const std::size_t need = pool_store_workspace_bytes(s.tokens);
  if (workspace == nullptr || workspace_bytes < need || !aligned16(workspace)) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("indexer_pool_store: a call of {} tokens needs {} bytes of 16-byte aligned workspace "
                            "(its hash tables) but the context gives {} bytes at {}. Make the kernel for at least "
                            "{} tokens (AttentionSpec::max_tokens; latte::run does) and pass "
                            "Kernel::workspace_bytes() of workspace.",
                            s.tokens, need, workspace_bytes, workspace, s.tokens));
  }
  const IndexerPoolStoreArgs& a = *s.args;
  IndexerPoolStoreParams p;
  p.k = a.k.data;
  p.k_st = a.k.stride(0);
  p.gate = a.gate.data;
  p.gate_st = a.gate.stride(0);
  p.gate_f32 = a.gate.dtype == DType::f32;
  p.ape = a.ape.data;
  p.ape_st = a.ape.stride(0);
  p.ape_f32 = a.ape.dtype == DType::f32;
  p.positions = a.positions.ptr<const int32_t>();
  p.pos_s = a.positions.stride(0);
  if (a.token_request.defined()) {
    p.token_request = a.token_request.ptr<const int32_t>();
    p.tr_s = a.token_request.stride(0);
  }
  p.block_table = a.block_table.ptr<const int32_t>();
  p.bt_sr = a.block_table.stride(0);
  p.bt_sc = a.block_table.stride(1);
  p.k_cache = a.k_cache.ptr<uint8_t>();
  p.page_stride = a.k_cache.stride(0);
  p.pool_state = a.pool_state.ptr<float>();
  p.ps_sr = a.pool_state.stride(0);
  p.ps_ss = a.pool_state.stride(1);
  p.ps_sk = a.pool_state.stride(2);
  p.tokens = s.tokens;
  p.batch = s.batch;
  p.max_blocks = s.max_blocks;
  p.num_blocks = s.num_blocks;
  p.kpool = static_cast<int>(s.kpool);
  p.pool_rows = static_cast<int>(s.pool_rows);
  p.pow2 = a.scale_kind == Fp8ScaleKind::pow2 ? 1 : 0;
  p.hadamard = a.hadamard;
  p.workspace = workspace;
  launch_indexer_pool_store(p, stream);
}

std::string describe_cache_write(Op op, CacheFormat format, int head_dim) {
  const bool rope = head_dim != kLatentDim;
  switch (op) {
    case Op::kv_store:
      if (format == CacheFormat::fp8_ds_mla) {
        return std::string("one warp per token: 4 groups of 128 latent values to e4m3 with an f32 scale each (amax / "
                           "448, or the power of two at or above it when the call asks for pow2 scales)") +
               (rope ? ", the 64 rope values kept bf16: one 656-byte row per slot"
                     : ", no rope: the first 528 bytes of the slot's row (bytes 528..655 of a 656-byte row left as "
                       "they are)") +
               ", bit-identical to formats.hpp; slot -1 or outside the cache skips the token";
      }
      return std::string("one warp per token: the ") + (rope ? "576" : "512 (no rope)") +
             " bf16 values copied into the slot's row (16-byte stores when every row is 16-byte aligned); slot -1 "
             "or outside the cache skips the token";
    case Op::indexer_k_store:
      return "one warp per token: 128 values to e4m3 with one f32 scale (amax / 448, or the power of two at or "
             "above it when the call asks for pow2 scales) in the page's scale area, bit-identical to formats.hpp; "
             "slot -1 or outside the cache skips the token";
    case Op::indexer_pool_store:
      return "two hash tables in the workspace ((request, position) and (request, slot) -> the call's last live "
             "token, atomicCAS + atomicMax), then one warp per completing token: the pool's slots from the call or "
             "the state, the gated mix in float64, bf16, the optional Hadamard-128 in float64, bf16, quantized "
             "like indexer_k_store (one f32 scale per pool row); then the state's (k, gate) per (request, slot); "
             "no host synchronization, bit-identical to cpu.reference";
    case Op::logical_to_slots:
      return "one thread per (token, position): the block table's entry times block_size plus the offset; -1 for "
             "negative positions, positions past the table, negative blocks and slots past int32";
    default:
      return {};
  }
}

}  // namespace latte::cuda_kv_store
