// Exact top-k building blocks: order-preserving keys for float scores, block-wide scans and
// reductions, and a block-level radix select over (key, position) pairs held in memory that
// the whole block can read (shared or global).
//
// Ranking order (cpu.reference's): a higher score first, equal scores to the smaller position,
// NaN last. Scores map to 32-bit keys whose unsigned order is that order; a (key, position) pair
// maps to a 64-bit composite (key << 32 | ~position) that is unique per position, so "the k
// largest composites" is exactly the top-k with the tie rule, and a radix select over
// composites needs no special tie handling.
#pragma once

#include <cstdint>

namespace latte::cuda {

// Key 0 means "no element" (excluded); NaN -> 1 (below every number); -0 and +0 are equal.
__device__ __forceinline__ uint32_t score_key(float f) {
  if (f != f) return 1u;
  const uint32_t u = __float_as_uint(f == 0.0f ? 0.0f : f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// The lowest float of key's rank: for every non-NaN f, score_key(f) >= key exactly when
// f >= key_floor(key) (key >= 2: 1 is NaN's key and 0 no element), so a threshold on keys
// becomes one float comparison.
__device__ __forceinline__ float key_floor(uint32_t key) {
  if (key <= 0x007FFFFFu) return -__int_as_float(0x7f800000);  // at or below -inf's key
  return __uint_as_float((key & 0x80000000u) ? (key & 0x7FFFFFFFu) : ~key);
}

__device__ __forceinline__ uint64_t composite_key(uint32_t key, uint32_t pos) {
  return (static_cast<uint64_t>(key) << 32) | static_cast<uint32_t>(~pos);
}

// x >> s for s in 0..64 (a shift by 64 gives 0 instead of undefined behaviour).
__device__ __forceinline__ uint64_t shr64(uint64_t x, int s) { return s >= 64 ? 0 : x >> s; }

// Bits of the lanes below this one.
__device__ __forceinline__ unsigned lanemask_lt() { return (1u << (threadIdx.x & 31)) - 1u; }

// Exclusive prefix sum over the block in thread order; `scratch` holds >= 33 ints of shared
// memory. Returns the prefix and writes the block total to *total (every thread). Contains
// __syncthreads() and must be reached by every thread.
template <int THREADS>
__device__ int block_exclusive_scan(int v, int* scratch, int* total) {
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "block size");
  constexpr int kWarps = THREADS / 32;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int x = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x += y;
  }
  if (lane == 31) scratch[warp] = x;
  __syncthreads();
  if (warp == 0) {
    int w = lane < kWarps ? scratch[lane] : 0;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += y;
    }
    if (lane < kWarps) scratch[lane] = w;  // inclusive warp totals
    if (lane == 31) scratch[32] = w;
  }
  __syncthreads();
  const int before = warp > 0 ? scratch[warp - 1] : 0;
  *total = scratch[32];
  __syncthreads();  // scratch may be reused right after
  return before + x - v;
}

// Min and max over the block; `scratch` holds >= 2 * 32 uint64 of shared memory. The warp
// partials are combined by warp 0 with shuffles and broadcast through scratch[0] / [32].
// (An earlier version had every thread fold the 32 partials in a loop. Inlined into
// block_select_threshold at 1024 threads, it lost warp 26's minimum on the inputs
// tests/cuda_indexer/select_stress_test.cu found, deterministically per input, while the same
// function alone was right; the PTX loop reads every partial, so ptxas's unrolled fold is the
// suspect. That was the "lost lowest-scoring position" and the fused path's nondeterminism.)
template <int THREADS>
__device__ void block_min_max(uint64_t& lo, uint64_t& hi, uint64_t* scratch) {
  constexpr int kWarps = THREADS / 32;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const uint64_t a = __shfl_xor_sync(0xffffffffu, lo, o);
    const uint64_t b = __shfl_xor_sync(0xffffffffu, hi, o);
    lo = a < lo ? a : lo;
    hi = b > hi ? b : hi;
  }
  if (lane == 0) {
    scratch[warp] = lo;
    scratch[32 + warp] = hi;
  }
  __syncthreads();
  if (warp == 0) {
    lo = lane < kWarps ? scratch[lane] : ~uint64_t{0};
    hi = lane < kWarps ? scratch[32 + lane] : uint64_t{0};
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const uint64_t a = __shfl_xor_sync(0xffffffffu, lo, o);
      const uint64_t b = __shfl_xor_sync(0xffffffffu, hi, o);
      lo = a < lo ? a : lo;
      hi = b > hi ? b : hi;
    }
    __syncwarp();
    if (lane == 0) {
      scratch[0] = lo;
      scratch[32] = hi;
    }
  }
  __syncthreads();
  lo = scratch[0];
  hi = scratch[32];
  __syncthreads();
}

// The barrier of the THREADS threads that run a block-wide helper: __syncthreads() (BAR 0, the
// whole CTA) or named barrier BAR of THREADS threads (the consumer warps of a warp-specialized
// CTA, whose producer warp does not take part).
template <int THREADS, int BAR>
__device__ __forceinline__ void block_barrier() {
  if constexpr (BAR == 0) {
    __syncthreads();
  } else {
    asm volatile("bar.sync %0, %1;" ::"n"(BAR), "n"(THREADS) : "memory");
  }
}

// Min and max of 32-bit keys over the block (every thread gets both); `scratch` holds >= 2 *
// THREADS / 32 ints of shared memory. Warp reductions (redux.sync, sm_80+), then warp 0.
// Every thread of the block (or of barrier BAR's THREADS threads, block_barrier) must call it.
template <int THREADS, int BAR = 0>
__device__ void block_key_range(uint32_t& lo, uint32_t& hi, int* scratch) {
  constexpr int kWarps = THREADS / 32;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  lo = __reduce_min_sync(0xffffffffu, lo);
  hi = __reduce_max_sync(0xffffffffu, hi);
  if (lane == 0) {
    scratch[warp] = static_cast<int>(lo);
    scratch[kWarps + warp] = static_cast<int>(hi);
  }
  block_barrier<THREADS, BAR>();
  if (warp == 0) {
    uint32_t l = lane < kWarps ? static_cast<uint32_t>(scratch[lane]) : 0xFFFFFFFFu;
    uint32_t h = lane < kWarps ? static_cast<uint32_t>(scratch[kWarps + lane]) : 0u;
    l = __reduce_min_sync(0xffffffffu, l);
    h = __reduce_max_sync(0xffffffffu, h);
    __syncwarp();
    if (lane == 0) {
      scratch[0] = static_cast<int>(l);
      scratch[1] = static_cast<int>(h);
    }
  }
  block_barrier<THREADS, BAR>();
  lo = static_cast<uint32_t>(scratch[0]);
  hi = static_cast<uint32_t>(scratch[1]);
  block_barrier<THREADS, BAR>();  // scratch may be reused right after
}

// Shared scratch of block_select_threshold (the histogram is passed separately).
struct SelectScratch {
  uint64_t minmax[64];
  uint64_t result;
  int scan[40];
  int bin;         // chosen digit
  int need;        // still to take inside the chosen bin
  int bin_count;   // elements in the chosen bin
  int list_count;  // members of the chosen bin collected so far
};

// Adds 1 to hist[digit] for every lane of the warp with `hit`, one atomic per distinct digit
// (lanes with equal digits are combined: scores cluster, and same-address shared atomics
// serialize). Every lane of the warp must call it.
__device__ __forceinline__ void warp_hist_add(int* hist, bool hit, uint32_t digit) {
  const unsigned act = __ballot_sync(0xffffffffu, hit);
  if (hit) {
    const unsigned peers = __match_any_sync(act, digit);
    if ((threadIdx.x & 31) == __ffs(peers) - 1) atomicAdd(&hist[digit], __popc(peers));
  }
}

// The same count without match.any (measured on the H200: a 1024-thread CTA spends about 60
// SM cycles per warp call of warp_hist_add, which dominated the top-k kernel's selects): a warp
// whose hits all share one digit adds once (ties, all-equal rows); otherwise every hit lane
// adds 1 with a shared atomic (equal digits among the lanes serialize, which only partly tied
// data sees). Every lane of the warp must call it.
__device__ __forceinline__ void warp_hist_add_direct(int* hist, bool hit, uint32_t digit) {
  const unsigned act = __ballot_sync(0xffffffffu, hit);
  if (act == 0u) return;
  const int first = __ffs(act) - 1;
  const uint32_t d0 = __shfl_sync(0xffffffffu, digit, first);
  if (__all_sync(0xffffffffu, !hit || digit == d0)) {
    if ((threadIdx.x & 31) == first) atomicAdd(&hist[d0], __popc(act));
  } else if (hit) {
    atomicAdd(&hist[digit], 1);
  }
}

// Given n (key, position) pairs (pos == nullptr: the position of pair i is i) and
// 1 <= need <= n, returns the composite T such that exactly `need` pairs have
// composite_key(key, pos) >= T. Positions must be distinct. Every thread of the block calls it
// and gets the same T. `hist` holds 1 << DIGIT ints of shared memory (at least THREADS bins);
// it is reused as a list of up to LCAP composites (LCAP * 8 <= 4 << DIGIT).
// Cost: one min/max pass, then histogram passes until the bin holding the boundary has at
// most LCAP members; those are gathered and ranked directly (one more pass). The first pass
// bins the keys by key >> s relative to min >> s, with the smallest s whose bins cover the
// keys' range, so that every bin is used however narrow the range is (bins of the DIGIT bits
// below the common prefix of min and max may use a handful: scores between 1 and 8 fill 24 of
// 2048, and the boundary bin then needed two more passes). Later passes take DIGIT bits of
// the composite below the prefix found so far.
// DIRECT_HIST: histograms with warp_hist_add_direct instead of warp_hist_add.
// `marks` (measurements, thread 0 writes): clock64 at entry [0], after the min/max [1], after the
// first histogram pass [2], after the last [3], after the gather [4], after the ranking [5];
// the number of passes [6] and the gathered bin's size [7].
template <int THREADS, int DIGIT, int LCAP, bool DIRECT_HIST = false>
__device__ uint64_t block_select_threshold(const uint32_t* keys, const int32_t* pos, int n,
                                           int need, SelectScratch& sc, int* hist,
                                           unsigned long long* marks = nullptr) {
  // The clock is read only when measuring (clock64 is a volatile read the compiler keeps).
  auto stamp = [&](int i) {
    if (marks != nullptr && threadIdx.x == 0) marks[i] = static_cast<unsigned long long>(clock64());
  };
  auto mark = [&](int i, unsigned long long v) {
    if (marks != nullptr && threadIdx.x == 0) marks[i] = v;
  };
  stamp(0);
  constexpr int kBins = 1 << DIGIT;
  constexpr int kPer = kBins / THREADS;
  static_assert(kBins % THREADS == 0, "at least one bin per thread");
  static_assert(LCAP * 8 <= kBins * 4, "the bin list must fit in the histogram");
  const int tid = threadIdx.x;
  auto comp = [&](int i) {
    return composite_key(keys[i], pos ? static_cast<uint32_t>(pos[i]) : static_cast<uint32_t>(i));
  };
  // The keys' range first, with 32-bit warp reductions: when the keys differ, the composites'
  // highest differing bit is the keys' (the composite min / max need not be known). Only when
  // every key is equal (or need == n, whose answer is the minimum composite) the composites'
  // range is reduced (64-bit, several times the cost).
  uint32_t klo = 0xFFFFFFFFu, khi = 0u;
  for (int i = tid; i < n; i += THREADS) {
    const uint32_t k = keys[i];
    klo = k < klo ? k : klo;
    khi = k > khi ? k : khi;
  }
  block_key_range<THREADS>(klo, khi, reinterpret_cast<int*>(sc.minmax));
  int shift = 0;
  uint64_t prefix = 0;
  // The first pass's window over the keys (offset_pass): bins (key >> s0) - base0.
  bool offset_pass = false;
  int s0 = 0;
  uint32_t base0 = 0;
  if (klo != khi && need < n) {
    s0 = 32 - __clz(static_cast<int>(khi - klo)) - DIGIT;  // khi - klo >= 1
    s0 = s0 > 0 ? s0 : 0;
    if ((khi >> s0) - (klo >> s0) >= static_cast<uint32_t>(kBins)) ++s0;
    base0 = klo >> s0;
    offset_pass = true;
    shift = 32 + s0;  // after that pass the prefix (base0 + bin) covers the composite bits >= shift
  } else {
    uint64_t lo = ~uint64_t{0}, hi = 0;
    for (int i = tid; i < n; i += THREADS) {
      const uint64_t c = comp(i);
      lo = c < lo ? c : lo;
      hi = c > hi ? c : hi;
    }
    block_min_max<THREADS>(lo, hi, sc.minmax);
    if (need >= n) return lo;
    // Every pair shares the bits above the highest bit where lo and hi differ.
    shift = 64 - __clzll(static_cast<long long>(lo ^ hi));  // lo != hi since n >= 2
    prefix = shr64(hi, shift);
  }
  stamp(1);
  int remaining = need;
  int passes = 0;
  while (true) {
    const bool first_offset = offset_pass && passes == 0;
    const int d = first_offset ? 0 : shift < DIGIT ? shift : DIGIT;
    shift -= d;
    for (int b = tid; b < kBins; b += THREADS) hist[b] = 0;
    if (tid == 0) sc.list_count = 0;
    __syncthreads();
    const uint64_t mask = (uint64_t{1} << d) - 1u;
    for (int base = 0; base < n; base += THREADS) {
      const int i = base + tid;
      bool hit = false;
      uint32_t digit = 0;
      if (i < n && first_offset) {
        hit = true;  // every key lies in [klo, khi]
        digit = (keys[i] >> s0) - base0;
      } else if (i < n) {
        const uint64_t c = comp(i);
        hit = shr64(c, shift + d) == prefix;
        digit = static_cast<uint32_t>((c >> shift) & mask);
      }
      if (DIRECT_HIST) warp_hist_add_direct(hist, hit, digit);
      else warp_hist_add(hist, hit, digit);
    }
    __syncthreads();
    // Thread t owns bins [kBins - kPer (t + 1), kBins - kPer t), highest first.
    int h[kPer];
    int mine = 0;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      h[j] = hist[kBins - 1 - kPer * tid - j];
      mine += h[j];
    }
    int total = 0;
    int above = block_exclusive_scan<THREADS>(mine, sc.scan, &total);
    if (above < remaining && above + mine >= remaining) {
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        if (above < remaining && above + h[j] >= remaining) {
          sc.bin = kBins - 1 - kPer * tid - j;
          sc.need = remaining - above;
          sc.bin_count = h[j];
        }
        above += h[j];
      }
    }
    __syncthreads();
    const int bin = sc.bin;
    remaining = sc.need;
    const int bin_count = sc.bin_count;
    prefix = first_offset ? static_cast<uint64_t>(base0) + static_cast<uint64_t>(bin)
                          : (prefix << d) | static_cast<uint64_t>(bin);
    if (++passes == 1) stamp(2);
    stamp(3);
    mark(6, passes);
    mark(7, bin_count);
    if (bin_count == remaining || shift == 0) return prefix << shift;
    if (bin_count <= LCAP) {
      // Gather the bin's members (the histogram is free now) and rank them directly.
      uint64_t* list = reinterpret_cast<uint64_t*>(hist);
      for (int base = 0; base < n; base += THREADS) {
        const int i = base + tid;
        uint64_t c = 0;
        bool hit = false;
        if (i < n) {
          c = comp(i);
          hit = shr64(c, shift) == prefix;
        }
        const unsigned m = __ballot_sync(0xffffffffu, hit);
        if (m) {
          int at = 0;
          if ((tid & 31) == __ffs(m) - 1) at = atomicAdd(&sc.list_count, __popc(m));
          at = __shfl_sync(0xffffffffu, at, __ffs(m) - 1);
          if (hit) list[at + __popc(m & lanemask_lt())] = c;
        }
      }
      __syncthreads();
      stamp(4);
      for (int e = tid; e < bin_count; e += THREADS) {
        const uint64_t x = list[e];
        int larger = 0;
        for (int j = 0; j < bin_count; ++j) larger += list[j] > x ? 1 : 0;
        if (larger == remaining - 1) sc.result = x;
      }
      __syncthreads();
      stamp(5);
      const uint64_t r = sc.result;
      __syncthreads();  // hist / sc may be reused by the caller right away
      return r;
    }
  }
}

}  // namespace latte::cuda
