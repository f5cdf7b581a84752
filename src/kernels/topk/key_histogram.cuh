// The spread top-k's first pass, counted by the pass that writes the keys (both indexers' score
// kernels): per row, how many valid keys have each top-11-bit digit (key >> kSpreadFirstShift),
// in the zeroed histogram prepare_keys_topk hands out (topk_launch.hpp). The spread kernel then
// starts at its second digit, one grid barrier fewer (topk_spread_grid_barrier.cuh).
#pragma once

#include <cstdint>

#include "kernels/topk/topk_args.hpp"

namespace latte::cuda {

// Counts `key` (when `has` and nonzero) in row_hist: one atomic per distinct digit per warp call
// (scores cluster in few digits; same-address atomics serialize in L2). Every lane of the warp
// calls it.
__device__ __forceinline__ void key_hist_add(int* row_hist, bool has, uint32_t key) {
  has = has && key != 0u;
  const unsigned act = __ballot_sync(0xffffffffu, has);
  if (!has) return;
  const uint32_t digit = key >> kSpreadFirstShift;
  const unsigned peers = __match_any_sync(act, digit);
  if ((threadIdx.x & 31) == __ffs(peers) - 1) atomicAdd(&row_hist[digit], __popc(peers));
}

}  // namespace latte::cuda
