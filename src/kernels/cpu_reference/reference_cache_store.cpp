// kv_store and indexer_k_store: one token per row of the input, written to the cache slot
// slot_mapping[t]; -1 (and, without check mode, any out-of-range slot) skips the token.
#include <array>
#include <cstring>

#include "kernels/cpu_reference/reference_ops.hpp"
#include "kernels/cpu_reference/host_tensor_access.hpp"

namespace latte::cpu_reference {
namespace {

// The slot of token t, or -1 when it is skipped.
int64_t slot_of(const TensorView& slot_mapping, int64_t t, int64_t num_slots) {
  const int64_t slot = read_i32(slot_mapping, {t});
  return slot >= 0 && slot < num_slots ? slot : -1;
}

void to_floats(const uint16_t* bf16_row, int n, float* out) {
  for (int i = 0; i < n; ++i) out[i] = bf16_to_float(bf16_row[i]);
}

}  // namespace

void compute(const KvStoreProblem& p) {
  const KvStoreArgs& a = *p.args;
  const KvStoreShape& s = p;
  const int64_t num_slots = s.num_blocks * s.block_size;
  for (int64_t t = 0; t < s.tokens; ++t) {
    const int64_t slot = slot_of(a.slot_mapping, t, num_slots);
    if (slot < 0) continue;
    const int64_t block = slot / s.block_size;
    const int64_t offset = slot % s.block_size;
    const auto* latent = at<const uint16_t>(a.latent, {t});
    // Rows without rope (rope_dim 0) have no rope values: a 656-byte fp8 row keeps its reserved
    // last 128 bytes as they are.
    const auto* rope = s.rope_dim == kRopeDim ? at<const uint16_t>(a.rope, {t}) : nullptr;
    if (s.format == CacheFormat::bf16) {
      // bf16 in, bf16 out: the bits are copied unchanged.
      auto* token = at<uint16_t>(a.kv_cache, {block, offset});
      std::memcpy(token, latent, kLatentDim * sizeof(uint16_t));
      if (rope) std::memcpy(token + kLatentDim, rope, kRopeDim * sizeof(uint16_t));
    } else {
      std::array<float, kLatentDim> latent_f{};
      to_floats(latent, kLatentDim, latent_f.data());
      uint8_t* token = at<uint8_t>(a.kv_cache, {block, offset});
      if (rope) {
        std::array<float, kRopeDim> rope_f{};
        to_floats(rope, kRopeDim, rope_f.data());
        pack_fp8_ds_mla_token(latent_f.data(), rope_f.data(), a.scale_kind, token);
      } else {
        pack_fp8_nope_token(latent_f.data(), a.scale_kind, token);
      }
    }
  }
}

void compute(const IndexerKStoreProblem& p) {
  const IndexerKStoreArgs& a = *p.args;
  const KvStoreShape& s = p;
  const int64_t num_slots = s.num_blocks * s.block_size;
  std::array<float, kIndexDim> k{};
  for (int64_t t = 0; t < s.tokens; ++t) {
    const int64_t slot = slot_of(a.slot_mapping, t, num_slots);
    if (slot < 0) continue;
    to_floats(at<const uint16_t>(a.k, {t}), kIndexDim, k.data());
    pack_indexer_k_token(k.data(), a.scale_kind, page_bytes(a.k_cache, slot / s.block_size),
                         static_cast<int>(s.block_size), static_cast<int>(slot % s.block_size));
  }
}

}  // namespace latte::cpu_reference
