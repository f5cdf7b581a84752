// A CTA's running top-k candidate buffer: the fused indexer paths' repair passes (cuda.indexer's
// score kernel in its fused mode, hopper.indexer's cp.async kernel in kOutRepair) keep the topk
// best (key, position) pairs of the CTA's positions in O(topk) memory. Pairs whose composite
// (key, position) (kernels/topk/radix_select.cuh: higher key first, then the smaller position) is at or
// above a running threshold are appended; when the buffer nears its capacity it is compacted to
// the topk best and the topk-th composite becomes the threshold. The kept set is exactly what
// the final selection would take from these positions. The threshold is the whole composite,
// not its key alone: where many scores tie (a zeroed cache), a key threshold would admit every
// later position of the tied key and compact again and again; the composite rejects the ones
// ranked below the topk already kept.
#pragma once

#include <cstdint>

#include "kernels/topk/radix_select.cuh"

namespace latte::cuda {

// The compaction's select: digits of 10 bits, boundary bins of up to 256 entries gathered
// and ranked directly, 8 buffer entries per thread per compaction round.
constexpr int kCompactDigit = 10;
constexpr int kCompactGather = 256;
constexpr int kCompactPer = 8;

// Shared state of a running buffer (the entries themselves live where the caller puts them).
struct alignas(16) RunningTopk {
  SelectScratch sel;
  int hist[1 << kCompactDigit];
  int count;     // entries in the buffer
  uint64_t thr;  // composites below it are not among the topk best seen so far (0: take any)
};

// Compaction of a candidate buffer: keeps the `keep` best (key, position) pairs of the first n
// entries, in place and in their buffer order, so that the buffer can take new candidates
// behind them. Every thread of the block calls it; 1 <= keep <= n. Returns the threshold
// composite (the keep-th largest) and writes the number kept (== keep) to *kept on every
// thread. The buffer may be in shared or global memory; `sc` and `hist` are
// block_select_threshold's scratch. (tests/cuda_indexer/select_stress_test.cu runs exactly this
// code on adversarial buffers.)
template <int THREADS, int DIGIT, int LCAP, int PER>
__device__ uint64_t compact_candidates(uint32_t* keys, int32_t* pos, int n, int keep, SelectScratch& sc, int* hist,
                                       int* kept) {
  const int tid = threadIdx.x;
  const uint64_t thr = block_select_threshold<THREADS, DIGIT, LCAP>(keys, pos, n, keep, sc, hist);
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
        if (composite_key(k[e], static_cast<uint32_t>(p[e])) >= thr) {
          selm |= 1u << e;
          ++cnt;
        }
      }
    }
    int total = 0;
    int off = block_exclusive_scan<THREADS>(cnt, sc.scan, &total);
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

// An empty buffer (thread 0; the caller's barrier publishes it).
__device__ __forceinline__ void running_topk_clear(RunningTopk& r) {
  if (threadIdx.x == 0) {
    r.count = 0;
    r.thr = 0u;
  }
}

// Appends (key, position) of the warp's lanes whose key is non-zero (0: not visible) and whose
// composite is at or above the threshold: one shared atomic per warp. Every lane of the warp
// calls it; the caller keeps room for a warp's worth per call (running_topk_keep_room).
__device__ __forceinline__ void running_topk_offer(RunningTopk& r, uint32_t* keys, int32_t* pos, uint32_t key,
                                                   int32_t position) {
  const bool pass = key != 0u && composite_key(key, static_cast<uint32_t>(position)) >= r.thr;
  const unsigned m = __ballot_sync(0xffffffffu, pass);
  if (m == 0u) return;
  const int lane = static_cast<int>(threadIdx.x & 31);
  int base = 0;
  if (lane == __ffs(m) - 1) base = atomicAdd(&r.count, __popc(m));
  base = __shfl_sync(0xffffffffu, base, __ffs(m) - 1);
  if (pass) {
    const int at = base + __popc(m & lanemask_lt());
    keys[at] = key;
    pos[at] = position;
  }
}

// Keeps the `keep` best of the buffer and raises the threshold to the keep-th composite. Every
// thread of the block calls it, after a barrier that ordered the appends.
template <int THREADS>
__device__ __forceinline__ void running_topk_compact(RunningTopk& r, uint32_t* keys, int32_t* pos, int keep) {
  int kept = 0;
  const uint64_t thr = compact_candidates<THREADS, kCompactDigit, kCompactGather, kCompactPer>(
      keys, pos, r.count, keep, r.sel, r.hist, &kept);
  if (threadIdx.x == 0) {
    r.count = kept;
    r.thr = thr;
  }
  __syncthreads();
}

// Compacts to `keep` when fewer than `room` entries of `cap` are free. Every thread of the block
// calls it, after a barrier that ordered the appends; the decision is uniform.
template <int THREADS>
__device__ __forceinline__ void running_topk_keep_room(RunningTopk& r, uint32_t* keys, int32_t* pos, int cap, int room,
                                                       int keep) {
  const bool full = r.count > cap - room;
  __syncthreads();  // every thread read the count before it changes
  if (full) running_topk_compact<THREADS>(r, keys, pos, keep);
}

// The CTA's final topk best into out_keys / out_pos [topk] (key 0 and position -1 past the
// entries). Every thread of the block calls it, after a barrier that ordered the appends.
template <int THREADS>
__device__ __forceinline__ void running_topk_write(RunningTopk& r, uint32_t* keys, int32_t* pos, int topk,
                                                   uint32_t* out_keys, int32_t* out_pos) {
  if (r.count > topk) running_topk_compact<THREADS>(r, keys, pos, topk);
  const int n = r.count;
  for (int i = threadIdx.x; i < topk; i += THREADS) {
    out_keys[i] = i < n ? keys[i] : 0u;
    out_pos[i] = i < n ? pos[i] : -1;
  }
}

}  // namespace latte::cuda
