// Exact top-k of one row per CTA (1024 threads), for rows up to 262144 positions and topk up to
// 4096. The row is a source of (key, position) pairs: f32 scores, the score kernel's u32 keys,
// or the fused path's candidates.
//
// 1. Threshold guess: if the row has more pairs than the candidate buffer holds, 4096 keys are
//    sampled at a fixed stride and the key ranked (topk + cap) / 2 * 4096 / n among them is a
//    lower bound tau that admits, with high probability, between topk and cap pairs.
// 2. One pass keeps the pairs with key >= tau in shared memory. If topk <= kept <= cap (or the
//    whole row was kept), an exact radix select over the kept (key, position) composites marks
//    the winners in a position bitmap.
// 3. Otherwise (a bad guess or many equal keys) an exact radix select over the whole row by
//    11/11/10-bit digit histograms finds the topk-th key; equal keys at the boundary go to the
//    smallest positions through a second bitmap.
// 4. The bitmap is ranked (popcount prefix sums), so each row's output is in ascending position
//    order and bit-identical between runs whatever the thread timing.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/topk/fused_threshold.cuh"
#include "kernels/common/kernel_span.cuh"
#include "kernels/common/pdl.cuh"
#include "kernels/topk/radix_select.cuh"
#include "kernels/topk/topk_args.hpp"
#include "kernels/topk/topk_launch.hpp"
#include "kernels/topk/topk_pooled_output.cuh"

namespace latte::cuda {

// Phase marks of row 0 (globaltimer ns, clock64) when a.prof is set; every thread of the block
// must reach it.
__device__ __forceinline__ void prof_mark(unsigned long long* prof, int row, int slot) {
  if (prof == nullptr) return;
  __syncthreads();
  if (row == 0 && threadIdx.x == 0) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    prof[2 * slot] = t;
    prof[2 * slot + 1] = static_cast<unsigned long long>(clock64());
  }
}

// Kernel spans (kernels/common/kernel_span.cuh) live behind the kTopkProfSpans phase marks of the prof
// buffer. Slots: kSpanScore / kSpanAdmit / kSpanRepair the score passes (topk_launch.hpp), 4 the
// top-k kernel (or the split histogram kernel), 5 the split collect kernel, 6 the split final kernel.
constexpr int kSpanTopk = 4, kSpanCollect = 5, kSpanSplitFinal = 6;
__device__ __forceinline__ unsigned long long* spans_of(unsigned long long* prof) {
  return prof ? prof + kTopkProfSpans : nullptr;
}

constexpr int kTopkDigit = 11;  // radix digit of the exact selects (2048 bins)

struct TopkShared {
  cuda::SelectScratch sel;
  int hist[1 << kTopkDigit];
  int scan[40];
  int count;
  int flag;
  int bin;
  int above;
  int bin_count;
};

template <int SRC>
__device__ __forceinline__ uint32_t topk_key(const TopkArgs& a, int64_t row_off, int64_t i) {
  if (SRC == kSrcF32) return cuda::score_key(a.f32[row_off + i]);
  return a.keys[row_off + i];
}

template <int SRC>
__device__ __forceinline__ uint32_t topk_pos(const TopkArgs& a, int64_t row_off, int64_t i) {
  if (SRC == kSrcCands) return static_cast<uint32_t>(a.cpos[row_off + i]);
  return static_cast<uint32_t>(i);
}

constexpr int kUnroll = 8;
constexpr int64_t kBatch = 4 * kTopkThreads * kUnroll;

// Keys i0 .. i0 + 3 of a row (0 past n): one 16-byte load when the row allows it.
template <int SRC>
__device__ __forceinline__ void load_key4(const TopkArgs& a, int64_t row_off, int64_t n, int64_t i0, uint32_t (&k)[4]) {
  if (a.vec && i0 + 3 < n) {
    if (SRC == kSrcF32) {
      const float4 v = *reinterpret_cast<const float4*>(a.f32 + row_off + i0);
      k[0] = cuda::score_key(v.x);
      k[1] = cuda::score_key(v.y);
      k[2] = cuda::score_key(v.z);
      k[3] = cuda::score_key(v.w);
    } else {
      const uint4 v = *reinterpret_cast<const uint4*>(a.keys + row_off + i0);
      k[0] = v.x;
      k[1] = v.y;
      k[2] = v.z;
      k[3] = v.w;
    }
  } else {
#pragma unroll
    for (int e = 0; e < 4; ++e) k[e] = i0 + e < n ? topk_key<SRC>(a, row_off, i0 + e) : 0u;
  }
}

// This thread's kUnroll x 4 keys of the batch starting at `base` (0 past n): 16-byte loads,
// consecutive threads on consecutive vectors.
template <int SRC>
__device__ __forceinline__ void load_batch(const TopkArgs& a, int64_t row_off, int64_t n, int64_t base,
                                           uint32_t (&k)[kUnroll][4]) {
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) load_key4<SRC>(a, row_off, n, base + (static_cast<int64_t>(u) * kTopkThreads + threadIdx.x) * 4, k[u]);
}

__device__ __forceinline__ int64_t batch_index(int64_t base, int u, int e) {
  return base + (static_cast<int64_t>(u) * kTopkThreads + threadIdx.x) * 4 + e;
}

// Visits the pairs of a row: f(i, key) for i < n, with every lane of every warp calling f the
// same number of times (invalid i get key 0), so f may use warp votes.
template <int SRC, typename F>
__device__ __forceinline__ void for_each_pair(const TopkArgs& a, int64_t row_off, int64_t n, F&& f) {
  for (int64_t base = 0; base < n; base += kBatch) {
    uint32_t k[kUnroll][4];
    load_batch<SRC>(a, row_off, n, base, k);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int e = 0; e < 4; ++e) f(batch_index(base, u, e), k[u][e]);
  }
}

// Positions at or past npos (never produced by the score kernel) are ignored.
__device__ __forceinline__ void bitmap_set(uint32_t* bm, uint32_t p, int64_t npos) {
  if (p < npos) atomicOr(&bm[p >> 5], 1u << (p & 31));
}

// The positions row `row` sees (npos) and its block_table row (brow, -1: none); kSrcKeys and
// kSrcCands sources. Without visible lengths every position below max_len counts.
__device__ __forceinline__ void row_positions(const TopkArgs& a, int row, int64_t& npos, int& brow) {
  npos = 0;
  brow = a.tr ? a.tr[static_cast<int64_t>(row) * a.tr_s] : row;
  if (brow >= 0 && brow < a.batch) {
    if (a.vl) {
      int64_t v = a.vl[static_cast<int64_t>(row) * a.vl_s];
      if (a.vl_div > 1 && v > 0) v /= a.vl_div;
      npos = v < 0 ? 0 : (v > a.max_len ? a.max_len : v);
    } else {
      npos = a.max_len;
    }
  }
}

// The candidate pairs of row `row` (kSrcCands).
__device__ __forceinline__ int64_t cand_pairs(const TopkArgs& a, int row, int64_t npos) {
  return npos > 0 ? (a.cand_count ? min(static_cast<int64_t>(a.cand_count[row]), a.ld) : a.n_fixed) : 0;
}

// Pairs in row `row` (n), the positions they can take (npos) and the block_table row (brow).
template <int SRC>
__device__ __forceinline__ void row_extent(const TopkArgs& a, int row, int64_t& n, int64_t& npos, int& brow) {
  n = 0;
  npos = 0;
  brow = -1;
  if (SRC == kSrcF32) {
    n = a.n_fixed;
    npos = n;
  } else {
    row_positions(a, row, npos, brow);
    n = SRC == kSrcKeys ? npos : cand_pairs(a, row, npos);
  }
}

// The whole selection of one row by the whole block (the kernel body). The exact selects rank
// bins of at most kTopkLcap pairs directly (block_select_threshold; 128 was faster than 1024 on
// the H200: the direct ranking is quadratic). DH: histograms without match.any
// (warp_hist_add_direct).
constexpr int kTopkLcap = 128;

// The position bitmap of a row of npos positions cleared (and the shared counters): every thread.
__device__ __forceinline__ void clear_row_state(const TopkArgs& a, int row, int64_t npos, uint8_t* smem) {
  TopkShared& sh = *reinterpret_cast<TopkShared*>(smem);
  uint32_t* bitmap = reinterpret_cast<uint32_t*>(smem + ((sizeof(TopkShared) + 15) / 16) * 16);
  prof_mark(a.prof, row, 0);
  const int words = static_cast<int>((npos + 31) / 32);
  for (int w = threadIdx.x; w < words; w += kTopkThreads) bitmap[w] = 0;
  if (threadIdx.x == 0) {
    sh.count = 0;
    sh.flag = 0;
  }
  __syncthreads();
  prof_mark(a.prof, row, 1);
}

// The selection of a row whose extent is known (n pairs over npos positions, block_table row
// brow) and whose state is cleared (clear_row_state).
template <int SRC, bool DH>
__device__ __forceinline__ void topk_row_body(const TopkArgs& a, int row, uint8_t* smem, int64_t n, int64_t npos, int brow) {
  TopkShared& sh = *reinterpret_cast<TopkShared*>(smem);
  uint32_t* bitmap = reinterpret_cast<uint32_t*>(smem + ((sizeof(TopkShared) + 15) / 16) * 16);
  uint32_t* ckeys = bitmap + ((a.bitmap_words + 3) / 4) * 4;
  int32_t* cpos = reinterpret_cast<int32_t*>(ckeys + a.cap);

  const int tid = threadIdx.x, lane = tid & 31;
  const int64_t row_off = static_cast<int64_t>(row) * a.ld;
  int32_t* out = a.out + static_cast<int64_t>(row) * a.out_sr;
  const int words = static_cast<int>((npos + 31) / 32);

  if (SRC != kSrcCands && n > 0 && n <= a.topk) {
    // At most topk pairs: every valid one is chosen, no threshold or select is needed.
    for_each_pair<SRC>(a, row_off, n, [&](int64_t i, uint32_t key) {
      if (key != 0u) bitmap_set(bitmap, topk_pos<SRC>(a, row_off, i), npos);
    });
  } else if (n > 0) {
    // 1. Admission threshold.
    uint32_t tau = 1;
    if (n > a.cap) {
      constexpr int kPer = kSamples / kTopkThreads;
      uint32_t sk[kPer];
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        const int i = j * kTopkThreads + tid;
        sk[j] = topk_key<SRC>(a, row_off, static_cast<int64_t>(i) * n / kSamples);
      }
#pragma unroll
      for (int j = 0; j < kPer; ++j) ckeys[j * kTopkThreads + tid] = sk[j];
      __syncthreads();
      const int64_t target = (static_cast<int64_t>(a.topk) + a.cap) / 2;
      int64_t j = (target * kSamples + n - 1) / n;
      j = j < 1 ? 1 : (j > kSamples ? kSamples : j);
      const uint64_t thr = cuda::block_select_threshold<kTopkThreads, kTopkDigit, kTopkLcap, DH>(
          ckeys, nullptr, kSamples, static_cast<int>(j), sh.sel, sh.hist);
      tau = static_cast<uint32_t>(thr >> 32);
      if (tau < 1) tau = 1;
      __syncthreads();
    }
    prof_mark(a.prof, row, 2);
    // 2. Keep pairs with key >= tau: per batch, each thread counts its kept pairs, a warp scan
    //    gives offsets and one atomic per warp reserves the slots. A dense candidate list that
    //    fits (tau == 1: every pair is kept) is copied as it is.
    if (SRC == kSrcCands && a.dense && n <= a.cap) {
      // All loads of a round issued before its stores: one round trip to L2 per 8 entries
      // per thread rather than one per entry.
      constexpr int kCopyUnroll = 8;
      for (int64_t base = 0; base < n; base += kCopyUnroll * kTopkThreads) {
        uint32_t kk[kCopyUnroll];
        int32_t pp[kCopyUnroll];
#pragma unroll
        for (int u = 0; u < kCopyUnroll; ++u) {
          const int64_t i = base + u * kTopkThreads + tid;
          kk[u] = i < n ? a.keys[row_off + i] : 0u;
          pp[u] = i < n ? a.cpos[row_off + i] : 0;
        }
#pragma unroll
        for (int u = 0; u < kCopyUnroll; ++u) {
          const int64_t i = base + u * kTopkThreads + tid;
          if (i < n) {
            ckeys[i] = kk[u];
            cpos[i] = pp[u];
          }
        }
      }
      if (tid == 0) sh.count = static_cast<int>(n);
    }
    for (int64_t base = 0; base < n && !(SRC == kSrcCands && a.dense && n <= a.cap); base += kBatch) {
      uint32_t k[kUnroll][4];
      load_batch<SRC>(a, row_off, n, base, k);
      int cnt = 0;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
#pragma unroll
        for (int e = 0; e < 4; ++e) cnt += (k[u][e] != 0u && k[u][e] >= tau) ? 1 : 0;
      int incl = cnt;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const int y = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += y;
      }
      const int wtotal = __shfl_sync(0xffffffffu, incl, 31);
      int wbase = 0;
      if (lane == 31 && wtotal > 0) wbase = atomicAdd(&sh.count, wtotal);
      wbase = __shfl_sync(0xffffffffu, wbase, 31);
      int slot = wbase + incl - cnt;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if (k[u][e] != 0u && k[u][e] >= tau) {
            if (slot < a.cap) {
              ckeys[slot] = k[u][e];
              cpos[slot] = static_cast<int32_t>(topk_pos<SRC>(a, row_off, batch_index(base, u, e)));
            }
            ++slot;
          }
        }
      }
    }
    __syncthreads();
    prof_mark(a.prof, row, 3);
    const int kept = sh.count;
    if (kept <= a.cap && (kept >= a.topk || tau == 1)) {
      const int need = kept < a.topk ? kept : a.topk;
      if (need > 0) {
        const uint64_t thr = cuda::block_select_threshold<kTopkThreads, kTopkDigit, kTopkLcap, DH>(
            ckeys, cpos, kept, need, sh.sel, sh.hist, a.prof && row == 0 ? a.prof + 24 : nullptr);
        for (int i = tid; i < kept; i += kTopkThreads) {
          const uint32_t p = static_cast<uint32_t>(cpos[i]);
          if (cuda::composite_key(ckeys[i], p) >= thr) bitmap_set(bitmap, p, npos);
        }
      }
    } else {
      // 3. Exact radix select over the whole row (the candidate region becomes the bitmap of
      //    boundary ties).
      int* hist = sh.hist;
      uint32_t prefix = 0;
      int pb = 0, need = a.topk;
      bool done = false;
      for (int pass = 0; pass < 3 && !done; ++pass) {
        const int D = pass < 2 ? 11 : 10;
        const int nb = 1 << D;
        for (int b = tid; b < nb; b += kTopkThreads) hist[b] = 0;
        __syncthreads();
        for_each_pair<SRC>(a, row_off, n, [&](int64_t, uint32_t key) {
          const bool hit = key != 0u && (pb == 0 || (key >> (32 - pb)) == prefix);
          const uint32_t d = (key >> (32 - pb - D)) & static_cast<uint32_t>(nb - 1);
          cuda::warp_hist_add(hist, hit, d);
        });
        __syncthreads();
        // Bins in descending order: thread t owns bins [nb - bpt (t + 1), nb - bpt t).
        const int bpt = nb / kTopkThreads;
        int mine = 0;
        for (int e = 0; e < bpt; ++e) mine += hist[nb - 1 - bpt * tid - e];
        int total = 0;
        int above = cuda::block_exclusive_scan<kTopkThreads>(mine, sh.scan, &total);
        if (pass == 0 && total <= need) {
          // Fewer valid pairs than topk: all of them.
          for_each_pair<SRC>(a, row_off, n, [&](int64_t i, uint32_t key) {
            if (key != 0u) bitmap_set(bitmap, topk_pos<SRC>(a, row_off, i), npos);
          });
          done = true;
          break;
        }
        if (above < need && above + mine >= need) {
          for (int e = 0; e < bpt; ++e) {
            const int b = nb - 1 - bpt * tid - e;
            if (above < need && above + hist[b] >= need) {
              sh.bin = b;
              sh.above = above;
              sh.bin_count = hist[b];
            }
            above += hist[b];
          }
        }
        __syncthreads();
        need -= sh.above;
        prefix = (prefix << D) | static_cast<uint32_t>(sh.bin);
        pb += D;
        const int bin_count = sh.bin_count;
        __syncthreads();
        if (bin_count == need) {
          const uint32_t pre = prefix;
          const int sh_bits = 32 - pb;
          for_each_pair<SRC>(a, row_off, n, [&](int64_t i, uint32_t key) {
            if (key != 0u && (key >> sh_bits) >= pre) bitmap_set(bitmap, topk_pos<SRC>(a, row_off, i), npos);
          });
          done = true;
        }
      }
      if (!done) {
        // prefix is the exact topk-th key; `need` of its equals go, smallest positions first.
        uint32_t* eq = ckeys;
        for (int w = tid; w < words; w += kTopkThreads) eq[w] = 0;
        __syncthreads();
        const uint32_t v = prefix;
        for_each_pair<SRC>(a, row_off, n, [&](int64_t i, uint32_t key) {
          if (key == 0u) return;
          if (key > v) bitmap_set(bitmap, topk_pos<SRC>(a, row_off, i), npos);
          else if (key == v) bitmap_set(eq, topk_pos<SRC>(a, row_off, i), npos);
        });
        __syncthreads();
        const int wpt = (words + kTopkThreads - 1) / kTopkThreads;
        const int w0 = tid * wpt, w1 = min(words, w0 + wpt);
        int mine = 0;
        for (int w = w0; w < w1; ++w) mine += __popc(eq[w]);
        int total = 0;
        int before = cuda::block_exclusive_scan<kTopkThreads>(mine, sh.scan, &total);
        for (int w = w0; w < w1 && before < need; ++w) {
          uint32_t bits = eq[w];
          while (bits && before < need) {
            const int b = __ffs(bits) - 1;
            bits &= bits - 1;
            bitmap[w] |= 1u << b;  // words are owned by this thread here
            ++before;
          }
        }
      }
    }
  }
  __syncthreads();
  prof_mark(a.prof, row, 4);

  // 4. Rank the bitmap: the chosen positions in ascending order into shared memory (the
  //    candidate region is free now: a.cap >= topk), then one output per thread and step, so
  //    the block_table reads of the physical translation are independent (a thread walking its
  //    own words, as before, read them one after another: ~8 us per row on the H200).
  const int wpt = (words + kTopkThreads - 1) / kTopkThreads;
  const int w0 = tid * wpt, w1 = min(words, w0 + wpt);
  int mine = 0;
  for (int w = w0; w < w1; ++w) mine += __popc(bitmap[w]);
  int total = 0;
  int rank = cuda::block_exclusive_scan<kTopkThreads>(mine, sh.scan, &total);
  int32_t* chosen = reinterpret_cast<int32_t*>(ckeys);
  for (int w = w0; w < w1 && rank < a.topk; ++w) {
    uint32_t bits = bitmap[w];
    while (bits && rank < a.topk) {
      chosen[rank++] = w * 32 + __ffs(bits) - 1;
      bits &= bits - 1;
    }
  }
  __syncthreads();
  const int written = total < a.topk ? total : a.topk;
  if (a.expand > 0) {
    for (int i = tid; i < written; i += kTopkThreads) pooled_write_pool(a, out, brow, i, chosen[i]);
    pooled_write_rest(a, out, row, brow, written, tid, kTopkThreads);
    prof_mark(a.prof, row, 5);
    return;
  }
  const int32_t* btrow = a.physical && brow >= 0 ? a.bt + static_cast<int64_t>(brow) * a.bt_sr : nullptr;
#pragma unroll 4
  for (int i = tid; i < a.topk; i += kTopkThreads) {
    int32_t value = -1;
    if (i < written) {
      const int p = chosen[i];
      value = p;
      if (a.physical) {
        value = -1;
        const int bi = p / a.block_size;
        if (btrow && bi < a.max_blocks) {
          const int blk = btrow[bi * a.bt_sc];
          if (blk >= 0 && blk < a.num_blocks) value = static_cast<int32_t>(static_cast<int64_t>(blk) * a.block_size + (p - bi * a.block_size));
        }
      }
    }
    out[static_cast<int64_t>(i) * a.out_sc] = value;
  }
  prof_mark(a.prof, row, 5);
}

template <int SRC, bool DH>
__device__ __forceinline__ void topk_row(const TopkArgs& a, int row, uint8_t* smem) {
  int64_t n = 0, npos = 0;
  int brow = -1;
  row_extent<SRC>(a, row, n, npos, brow);
  clear_row_state(a, row, npos, smem);
  topk_row_body<SRC, DH>(a, row, smem, n, npos, brow);
}

template <int SRC, bool DH>
__global__ void __launch_bounds__(kTopkThreads) topk_rows_kernel(const TopkArgs a) {
  extern __shared__ __align__(16) uint8_t smem[];
  const cuda::SpanStart span_t0 = cuda::span_begin(spans_of(a.prof), kSpanTopk);
  topk_row<SRC, DH>(a, blockIdx.x, smem);
  cuda::span_end(spans_of(a.prof), kSpanTopk, span_t0);
}


// ---- Rows split over several CTAs (few long rows) ----
//
// 1. topk_split_hist_kernel, grid rows x S: CTA (r, s) histograms the top 11 bits of the valid
//    keys of slice s of row r (positions [s L, s L + L)) and stores its 2048 counts.
// 2. topk_split_collect_kernel, same grid: every CTA of row r sums the row's S histograms, finds
//    the bin b holding the row's topk-th key, and copies its slice's pairs with key >> 21 >= b
//    (every pair that can be in the top-k, ties at the boundary included) to the row's
//    candidate list. The list offsets come from the histograms (slices in order, threads in
//    order inside a slice), so the list is the same in every run; no atomics. More than
//    list_cap candidates (a narrow or tied distribution): the row's count is -1.
// 3. topk_split_final_kernel, one CTA per row: the exact selection over the candidate list
//    (kSrcCands), or over the whole row when its count is -1.
// Programmatic dependent launch (sm_90+, src/kernels/common/pdl.cuh): the collect and final kernels
// start while the previous kernel still runs; they read the rows (written before the previous
// kernel started) early and the previous kernel's output after pdl_wait.

// The keys of slice [s0, s0 + L) that this thread holds (0 = invalid or past n).
template <int SRC>
__device__ __forceinline__ void load_slice(const TopkArgs& a, int64_t row_off, int64_t n, int64_t s0, int vecs,
                                           uint32_t (&k)[kSplitMaxVec][4]) {
#pragma unroll
  for (int u = 0; u < kSplitMaxVec; ++u) {
    if (u < vecs) {
      load_key4<SRC>(a, row_off, n, s0 + (static_cast<int64_t>(u) * kTopkThreads + threadIdx.x) * 4, k[u]);
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e) k[u][e] = 0u;
    }
  }
}

template <int SRC, bool DH>
__global__ void __launch_bounds__(kTopkThreads) topk_split_hist_kernel(const TopkArgs a, const SplitArgs sp) {
  __shared__ int hist[kSplitBins];
  const int tid = threadIdx.x;
  const cuda::SpanStart span_t0 = cuda::span_begin(spans_of(a.prof), kSpanTopk);
  pdl_launch_dependents();  // the collect kernel waits for this whole grid before reading hist
  const int row = blockIdx.x / sp.slices, s = blockIdx.x % sp.slices;
  int64_t n = 0, npos = 0;
  int brow = -1;
  row_extent<SRC>(a, row, n, npos, brow);
  prof_mark(a.prof, blockIdx.x, 8);
  for (int b = tid; b < kSplitBins; b += kTopkThreads) hist[b] = 0;
  __syncthreads();
  const int64_t s0 = static_cast<int64_t>(s) * sp.slice_len;
  if (s0 < n) {
    uint32_t k[kSplitMaxVec][4];
    load_slice<SRC>(a, static_cast<int64_t>(row) * a.ld, n, s0, sp.slice_len / kSplitChunk, k);
#pragma unroll
    for (int u = 0; u < kSplitMaxVec; ++u)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (DH) cuda::warp_hist_add_direct(hist, k[u][e] != 0u, k[u][e] >> kSplitShift);
        else cuda::warp_hist_add(hist, k[u][e] != 0u, k[u][e] >> kSplitShift);
      }
  }
  __syncthreads();
  int* dst = sp.hist + (static_cast<int64_t>(row) * sp.slices + s) * kSplitBins;
  for (int b = tid; b < kSplitBins; b += kTopkThreads) dst[b] = hist[b];
  prof_mark(a.prof, blockIdx.x, 9);
  cuda::span_end(spans_of(a.prof), kSpanTopk, span_t0);
}

template <int SRC>
__global__ void __launch_bounds__(kTopkThreads) topk_split_collect_kernel(const TopkArgs a, const SplitArgs sp) {
  __shared__ int scan[40];
  __shared__ int pick_bin, pick_count;
  static_assert(kSplitBins == 2 * kTopkThreads, "two bins per thread");
  const int tid = threadIdx.x;
  const cuda::SpanStart span_t0 = cuda::span_begin(spans_of(a.prof), kSpanCollect);
  const int row = blockIdx.x / sp.slices, s = blockIdx.x % sp.slices;
  int64_t n = 0, npos = 0;
  int brow = -1;
  row_extent<SRC>(a, row, n, npos, brow);
  pdl_launch_dependents();  // the final kernel waits for this whole grid before reading the lists
  prof_mark(a.prof, blockIdx.x, 10);
  // The slice's keys (the rows: written before the histogram kernel started) load while the
  // histogram kernel finishes; its histograms are read after pdl_wait.
  const int64_t s0 = static_cast<int64_t>(s) * sp.slice_len;
  uint32_t k[kSplitMaxVec][4];
  load_slice<SRC>(a, static_cast<int64_t>(row) * a.ld, n, s0 < n ? s0 : n, s0 < n ? sp.slice_len / kSplitChunk : 0, k);
  pdl_wait();
  // Thread t owns bins b1 = 2047 - 2t and b0 = b1 - 1 (highest first): row totals, and the
  // totals of the slices before this one.
  const int b1 = kSplitBins - 1 - 2 * tid, b0 = b1 - 1;
  const int* hrow = sp.hist + static_cast<int64_t>(row) * sp.slices * kSplitBins;
  int h1 = 0, h0 = 0, p1 = 0, p0 = 0;
  for (int j = 0; j < sp.slices; ++j) {
    const int x1 = hrow[j * kSplitBins + b1], x0 = hrow[j * kSplitBins + b0];
    if (j == s) {
      p1 = h1;
      p0 = h0;
    }
    h1 += x1;
    h0 += x0;
  }
  if (tid == 0) {
    pick_bin = 0;
    pick_count = 0;
  }
  int total = 0;
  const int above = cuda::block_exclusive_scan<kTopkThreads>(h1 + h0, scan, &total);
  if (total > a.topk && above < a.topk && above + h1 + h0 >= a.topk) {
    if (above + h1 >= a.topk) {
      pick_bin = b1;
      pick_count = above + h1;
    } else {
      pick_bin = b0;
      pick_count = above + h1 + h0;
    }
  }
  __syncthreads();
  // At most topk valid pairs: all of them (bin 0).
  const int bin = total > a.topk ? pick_bin : 0;
  const int count = total > a.topk ? pick_count : total;
  if (count > sp.list_cap) {
    if (s == 0 && tid == 0) sp.list_count[row] = -1;
    return;  // uniform over the block
  }
  int before_slice = 0;
  (void)cuda::block_exclusive_scan<kTopkThreads>((b1 >= bin ? p1 : 0) + (b0 >= bin ? p0 : 0), scan, &before_slice);
  const uint32_t lo = static_cast<uint32_t>(bin) << kSplitShift;
  int mine = 0;
#pragma unroll
  for (int u = 0; u < kSplitMaxVec; ++u)
#pragma unroll
    for (int e = 0; e < 4; ++e) mine += (k[u][e] != 0u && k[u][e] >= lo) ? 1 : 0;
  int in_slice = 0;
  int at = before_slice + cuda::block_exclusive_scan<kTopkThreads>(mine, scan, &in_slice);
  uint32_t* lk = sp.list_keys + static_cast<int64_t>(row) * sp.list_cap;
  int32_t* lp = sp.list_pos + static_cast<int64_t>(row) * sp.list_cap;
#pragma unroll
  for (int u = 0; u < kSplitMaxVec; ++u) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if (k[u][e] != 0u && k[u][e] >= lo) {
        lk[at] = k[u][e];
        lp[at] = static_cast<int32_t>(s0 + (static_cast<int64_t>(u) * kTopkThreads + tid) * 4 + e);
        ++at;
      }
    }
  }
  if (s == 0 && tid == 0) sp.list_count[row] = count;
  prof_mark(a.prof, blockIdx.x, 11);
  cuda::span_end(spans_of(a.prof), kSpanCollect, span_t0);
}

// `a`: the rows themselves (SRC); `c`: the candidate lists (kSrcCands with cand_count).
template <int SRC, bool DH>
__global__ void __launch_bounds__(kTopkThreads) topk_split_final_kernel(const TopkArgs a, const TopkArgs c) {
  extern __shared__ __align__(16) uint8_t smem[];
  const int row = blockIdx.x;
  const cuda::SpanStart span_t0 = cuda::span_begin(spans_of(a.prof), kSpanSplitFinal);
  pdl_wait();  // the candidate lists and counts of the collect kernel
  if (c.cand_count[row] >= 0) topk_row<kSrcCands, DH>(c, row, smem);
  else topk_row<SRC, DH>(a, row, smem);
  cuda::span_end(spans_of(a.prof), kSpanSplitFinal, span_t0);
}

// The fused path's last kernel, one CTA per row: the top-k of the row's admitted candidates
// (`list`), or of the repair pass's candidates (`repair`) where the admission pass failed.
template <bool DH>
__global__ void __launch_bounds__(kTopkThreads) topk_fused_final_kernel(const TopkArgs list, const TopkArgs repair) {
  extern __shared__ __align__(16) uint8_t smem[];
  const int row = blockIdx.x;
  const cuda::SpanStart span_t0 = cuda::span_begin(spans_of(list.prof), kSpanTopk);
  // The row's positions (inputs of the call) and the cleared bitmap before the wait.
  int64_t n = 0, npos = 0;
  int brow = -1;
  row_positions(list, row, npos, brow);
  clear_row_state(list, row, npos, smem);
  pdl_wait();  // the lists (admission pass) and the repair candidates
  if (fused_needs_repair(list.cand_count[row], repair.repair_tau[row], repair.repair_cap, list.topk)) {
    n = cand_pairs(repair, row, npos);
    topk_row_body<kSrcCands, DH>(repair, row, smem, n, npos, brow);
  } else {
    n = cand_pairs(list, row, npos);
    topk_row_body<kSrcCands, DH>(list, row, smem, n, npos, brow);
  }
  cuda::span_end(spans_of(list.prof), kSpanTopk, span_t0);
}

}  // namespace latte::cuda
