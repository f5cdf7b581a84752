// Compaction of a running top-k candidate buffer (the fused indexer's): keeps the `keep` best
// (key, position) pairs of the first n entries, in place and in their buffer order, so that
// the buffer can take new candidates behind them. Split out of the score kernel so that
// tests/cuda_indexer/select_stress_test.cu can run exactly this code on adversarial buffers.
#pragma once

#include <cstdint>

#include "cuda/radix_select.cuh"

namespace latte::cuda_indexer {

// Every thread of the block calls it; 1 <= keep <= n. Returns the threshold composite (the
// keep-th largest) and writes the number kept (== keep) to *kept on every thread. The buffer
// may be in shared or global memory; `sc` and `hist` are block_select_threshold's scratch.
template <int THREADS, int DIGIT, int LCAP, int PER>
__device__ uint64_t compact_candidates(uint32_t* keys, int32_t* pos, int n, int keep, cuda::SelectScratch& sc,
                                       int* hist, int* kept) {
  const int tid = threadIdx.x;
  const uint64_t thr = cuda::block_select_threshold<THREADS, DIGIT, LCAP>(keys, pos, n, keep, sc, hist);
  int out = 0;
  // Rounds of THREADS * PER entries: every thread reads its PER entries, a block scan gives
  // the output offsets, then the survivors move down. Writes stay below the round's start
  // plus its survivors, so they never reach entries a later round still has to read.
  for (int base = 0; base < n; base += THREADS * PER) {
    uint32_t k[PER];
    int32_t p[PER];
    unsigned selm = 0;
    int cnt = 0;
#pragma unroll
    for (int e = 0; e < PER; ++e) {
      const int i = base + tid * PER + e;
      k[e] = 0;
      p[e] = 0;
      if (i < n) {
        k[e] = keys[i];
        p[e] = pos[i];
        if (cuda::composite_key(k[e], static_cast<uint32_t>(p[e])) >= thr) {
          selm |= 1u << e;
          ++cnt;
        }
      }
    }
    int total = 0;
    int off = cuda::block_exclusive_scan<THREADS>(cnt, sc.scan, &total);
#pragma unroll
    for (int e = 0; e < PER; ++e) {
      if ((selm >> e) & 1u) {
        keys[out + off] = k[e];
        pos[out + off] = p[e];
        ++off;
      }
    }
    out += total;
  }
  __syncthreads();
  *kept = out;
  return thr;
}

}  // namespace latte::cuda_indexer
