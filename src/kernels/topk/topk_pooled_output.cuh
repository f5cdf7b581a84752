// The pooled indexer's output, written by the top-k kernels themselves (TopkArgs::expand > 0):
// the selected positions are pools of `expand` tokens; each is written as its tokens (in
// ascending order, at columns expand * rank + s), then the row's incomplete pool (exp_tail),
// then -1 up to exp_width columns, and the count to exp_lens. Semantics: docs/operations.md,
// "The pooled indexer". Device code.
#pragma once

#include <cstdint>

#include "kernels/topk/topk_args.hpp"

namespace latte::cuda {

// Token position pos of block_table row brow as the output holds it: pos, or its slot (token
// geometry: block_size * expand tokens per block); -1 where its block is missing.
__device__ __forceinline__ int32_t pooled_out_value(const TopkArgs& a, int brow, int64_t pos) {
  const int64_t bs = static_cast<int64_t>(a.block_size) * a.expand;
  const int64_t bi = pos / bs;
  if (brow < 0 || brow >= a.batch || bi >= a.max_blocks) return -1;
  const int blk = a.bt[static_cast<int64_t>(brow) * a.bt_sr + bi * a.bt_sc];
  if (blk < 0 || blk >= a.num_blocks) return -1;
  return static_cast<int32_t>(a.physical ? static_cast<int64_t>(blk) * bs + (pos - bi * bs) : pos);
}

// Kept pool `pool` at rank `rank` of its row.
__device__ __forceinline__ void pooled_write_pool(const TopkArgs& a, int32_t* out, int brow, int rank, int64_t pool) {
  for (int s = 0; s < a.expand; ++s)
    out[(static_cast<int64_t>(rank) * a.expand + s) * a.out_sc] = pooled_out_value(a, brow, pool * a.expand + s);
}

// After the `kept` pools of row `row`: the tail, the padding and the count, by the threads
// tid = 0 .. nthreads - 1 of one CTA (each finds the same tail: at most expand - 1 positions).
__device__ __forceinline__ void pooled_write_rest(const TopkArgs& a, int32_t* out, int row, int brow, int kept,
                                                  int tid, int nthreads) {
  const int64_t from = static_cast<int64_t>(kept) * a.expand;
  int64_t tail = 0;
  if (a.exp_tail && a.vl != nullptr && brow >= 0 && brow < a.batch) {
    const int64_t max_v = static_cast<int64_t>(a.max_blocks) * a.block_size * a.expand;
    int64_t v = a.vl[static_cast<int64_t>(row) * a.vl_s];
    v = v < 0 ? 0 : (v > max_v ? max_v : v);
    for (int64_t pos = v / a.expand * a.expand; pos < v; ++pos) {
      const int32_t x = pooled_out_value(a, brow, pos);
      if (x < 0) continue;
      if (tid == 0) out[(from + tail) * a.out_sc] = x;
      ++tail;
    }
  }
  for (int64_t i = from + tail + tid; i < a.exp_width; i += nthreads) out[i * a.out_sc] = -1;
  if (tid == 0 && a.exp_lens != nullptr) a.exp_lens[static_cast<int64_t>(row) * a.exp_lens_s] = static_cast<int32_t>(from + tail);
}

}  // namespace latte::cuda
