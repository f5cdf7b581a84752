// Cache addressing shared by the forward kernels (device code; CUDA translation units only).
#pragma once

#include <cstdint>

#include "kernels/sparse_mla/mla_params.hpp"

namespace latte::cuda_sparse_mla {

// Byte offset of the row of cache slot `slot` (a valid one): slot x token stride when the blocks
// are contiguous (`linear`: block stride = block_size x token stride, as latte's caches are),
// else block x block stride + offset x token stride, by shifts when the block size is a power of
// two (`bs_shift` >= 0, `bs_mask` = block_size - 1).
__device__ __forceinline__ int64_t slot_row_offset(const MlaParams& p, int slot, bool linear, int bs_shift,
                                                   int bs_mask) {
  if (linear) return slot * p.kv_stok;
  if (bs_shift >= 0) return (slot >> bs_shift) * p.kv_sblock + (slot & bs_mask) * p.kv_stok;
  return (slot / p.block_size) * p.kv_sblock + (slot % p.block_size) * p.kv_stok;
}

// Dense decode: request grp's length, clamped to what its block table can address.
__device__ __forceinline__ int decode_seq_len(const MlaParams& p, int64_t grp) {
  const int64_t cap = static_cast<int64_t>(p.max_blocks) * p.block_size;
  const int64_t len = p.seq_lens[grp * p.sl_s];
  return static_cast<int>(len < 0 ? 0 : (len > cap ? cap : len));
}

// Dense decode: where request grp's causal window ends, from its length as given (query i sees
// positions up to this - s_q + i), before the clamp to the block table: a length past the table
// still shifts every query's window, whose positions past the table hold no token. Clamped to
// -1 .. the table's positions + s_q, which changes no window and keeps the sums in int.
__device__ __forceinline__ int decode_window_end(const MlaParams& p, int64_t grp) {
  const int64_t cap = static_cast<int64_t>(p.max_blocks) * p.block_size;
  const int64_t len = p.seq_lens[grp * p.sl_s];
  return static_cast<int>(len < -1 ? -1 : (len > cap + p.s_q ? cap + p.s_q : len));
}

// Dense decode: the splits of `chunk` positions a request of seq_len positions has (an empty
// request keeps one, which writes its zero rows and -inf lse).
__device__ __forceinline__ int decode_nsplit(int seq_len, int chunk) {
  return seq_len > 0 ? (seq_len + chunk - 1) / chunk : 1;
}

}  // namespace latte::cuda_sparse_mla
