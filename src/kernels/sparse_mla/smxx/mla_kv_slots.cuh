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

// The splits of `chunk` items a group's list of `len` items has (dense decode: a request's
// positions; sparse with topk_lens: its row's length). An empty list keeps one split, which
// writes its zero rows and -inf lse.
__device__ __forceinline__ int list_nsplit(int len, int chunk) { return len > 0 ? (len + chunk - 1) / chunk : 1; }

// Sparse: the columns of indices group grp uses, topk_lens[grp] clamped to 0 .. topk (topk
// without topk_lens), as the validation layer and cpu.reference read it.
__device__ __forceinline__ int sparse_list_len(const MlaParams& p, int64_t grp) {
  if (p.topk_lens == nullptr) return p.topk;
  const int len = p.topk_lens[grp * p.tl_s];
  return len < 0 ? 0 : (len > p.topk ? p.topk : len);
}

// The splits of group grp's list that hold work, and its length (`len`): a sparse group
// without topk_lens has all `nsplit` of the plan; with topk_lens (and in dense decode) the splits
// past its length exit at once and the split combine waits for and sums the group's own only.
__device__ __forceinline__ int sparse_nsplit(const MlaParams& p, int len, int chunk, int nsplit) {
  return p.topk_lens == nullptr ? nsplit : list_nsplit(len, chunk);
}

}  // namespace latte::cuda_sparse_mla
