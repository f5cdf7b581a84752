// Exact top-k of few rows, each spread over many CTAs that meet at grid barriers (sm_80+): the
// decode path of one to a few query tokens, where one CTA per row leaves the GPU idle and the
// row's selection, not its reading, is the time (docs/kernels/indexer.md, "Batch 1").
//
// Grid rows x S, launched cooperatively (every CTA resident: the barriers spin). CTA (r, s)
// holds slice s of row r (positions [s L, s L + L)) in shared memory. Then, over the keys'
// 11 / 11 / 10-bit digits, highest first:
//   1. each CTA counts its keys under the prefix found so far into the row's global histogram
//      of the pass (the first pass may come counted by the kernel that wrote the keys:
//      key_histogram.cuh); the row's CTAs meet (a row barrier);
//   2. every CTA reads the same histogram and finds the same bin holding the row's topk-th key,
//      so they all take the same branch;
//   3. the passes stop once that bin holds at most kSpreadListCap keys, or exactly the keys
//      still needed, or the key is complete.
// Then every CTA publishes its count of keys above the bin and of the bin's keys, and appends
// the bin's (key, position) composites to the row's list; a last row barrier; each CTA ranks the
// list (ties to the smaller position: composites are unique), sums the counts of the slices
// before it, and writes its winners in ascending position order at that offset (each warp a
// contiguous run of the slice, lanes interleaved). The last slice pads with -1. No atomic
// decides an output place, so the output is the same in every run.
//
// The barrier / list counters and the first two passes' global histograms must be zero when
// the kernel starts (the launcher clears them before the pass that writes the rows, which may
// count the first); each CTA clears its share of the last pass's before its first barrier.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/pdl.cuh"
#include "kernels/topk/radix_select.cuh"
#include "kernels/topk/topk_args.hpp"
#include "kernels/topk/topk_kernel.cuh"

namespace latte::cuda {

constexpr int kSpreadWarps = kSpreadThreads / 32;
constexpr int kSpreadPrefetchBlocks = 256;

struct SpreadShared {
  int hist[kSpreadBins];
  int scan[40];
  uint64_t list[kSpreadListCap];
  int warp_a[kSpreadWarps], warp_b[kSpreadWarps];
  int blocks[kSpreadPrefetchBlocks];  // the slice's block_table entries (physical output)
  uint64_t tau;
  int bin, above, bin_count;
};

static_assert(kSpreadBins == 4 * kSpreadThreads, "four bins per thread");
static_assert(kSpreadListCap <= kSpreadThreads, "one list entry per thread");

// The row's CTAs meet: every CTA's earlier global writes and atomics are visible to every CTA
// after it. `target`: S times the barriers this CTA has reached, this one included.
__device__ __forceinline__ void spread_row_barrier(unsigned* counter, unsigned target,
                                                   unsigned long long* prof = nullptr) {
  __syncthreads();
  if (threadIdx.x == 0) {
    if (prof != nullptr) {  // measurements: the first and last arrival at this barrier (slot 7)
      unsigned long long t;
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
      atomicMin(prof + 14, t);
      atomicMax(prof + 15, t);
    }
    asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(counter) : "memory");
    unsigned v = 0;
    do {  // relaxed polls, one acquire fence after the last
      asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(counter) : "memory");
    } while (v < target);
    __threadfence();
  }
  __syncthreads();
}

// Block bi of block_table row brow, -1 where it is missing.
__device__ __forceinline__ int spread_block(const TopkArgs& a, int brow, int64_t bi) {
  if (brow < 0 || bi >= a.max_blocks) return -1;
  const int blk = a.bt[static_cast<int64_t>(brow) * a.bt_sr + bi * a.bt_sc];
  return blk < 0 || blk >= a.num_blocks ? -1 : blk;
}

// The output value of row position p: p, or its physical slot (-1 where the block is missing)
// through the slice's prefetched blocks (first block b0, nblk of them) or block_table row brow.
__device__ __forceinline__ int32_t spread_out_value(const TopkArgs& a, int brow, int64_t p, const int* blocks,
                                                    int64_t b0, int nblk) {
  if (!a.physical) return static_cast<int32_t>(p);
  const int64_t bi = p / a.block_size;
  const int blk = bi - b0 < nblk ? blocks[bi - b0] : spread_block(a, brow, bi);
  if (blk < 0) return -1;
  return static_cast<int32_t>(static_cast<int64_t>(blk) * a.block_size + (p - bi * a.block_size));
}

// Sums v over the block (every thread gets the sum); sh.warp_a is the scratch.
__device__ __forceinline__ int spread_block_sum(int v, SpreadShared& sh) {
  v = __reduce_add_sync(0xffffffffu, v);
  if ((threadIdx.x & 31) == 0) sh.warp_a[threadIdx.x >> 5] = v;
  __syncthreads();
  int t = 0;
#pragma unroll
  for (int w = 0; w < kSpreadWarps; ++w) t += sh.warp_a[w];
  __syncthreads();
  return t;
}

// CTA blockIdx.x's slice of its row: positions [s0, s0 + cnt) of the row's n, block_table row
// brow; with physical output the kernel puts the slice's blocks blk0 .. blk0 + nblk - 1 into
// sh.blocks (spread_select's writes read them).
struct SpreadSlice {
  int row, s, S;
  int64_t n, s0;
  int cnt, brow;
  int64_t blk0;
  int nblk;
};

template <int SRC>
__device__ __forceinline__ SpreadSlice spread_slice(const TopkArgs& a, const SpreadArgs& g) {
  SpreadSlice sl{};
  sl.S = g.slices;
  sl.row = blockIdx.x / sl.S;
  sl.s = blockIdx.x % sl.S;
  int64_t npos = 0;
  row_extent<SRC>(a, sl.row, sl.n, npos, sl.brow);
  sl.s0 = static_cast<int64_t>(sl.s) * g.slice_len;
  sl.cnt = static_cast<int>(sl.n > sl.s0 ? (sl.n - sl.s0 < g.slice_len ? sl.n - sl.s0 : g.slice_len) : 0);
  sl.blk0 = a.physical ? sl.s0 / a.block_size : 0;
  sl.nblk = a.physical && sl.cnt > 0
                ? static_cast<int>(min(static_cast<int64_t>(kSpreadPrefetchBlocks), (sl.s0 + sl.cnt - 1) / a.block_size - sl.blk0 + 1))
                : 0;
  return sl;
}

__device__ __forceinline__ int* spread_pass_hist(const SpreadArgs& g, int pass, int row) {
  return g.hist + (static_cast<int64_t>(pass) * g.rows + row) * kSpreadBins;
}

// Every spread kernel, before its first barrier: clear this CTA's share of the last pass's
// histogram (counted into only after a barrier).
__device__ __forceinline__ void spread_clear_last_pass(const SpreadArgs& g, const SpreadSlice& sl) {
  int* last = spread_pass_hist(g, kSpreadPasses - 1, sl.row);
  for (int i = sl.s * kSpreadThreads + threadIdx.x; i < kSpreadBins; i += sl.S * kSpreadThreads) last[i] = 0;
}

// What the digit passes found, the same in every CTA of the row. Modes: kSpreadAll (every
// valid key: the row has at most topk), kSpreadGe (every key whose digits >= prefix: the bin's
// keys are exactly the ones still needed), kSpreadList (the bin's few keys ranked from the row's
// list), kSpreadEq (the bin is one key value: its keys go by position).
enum SpreadMode : int { kSpreadAll, kSpreadGe, kSpreadList, kSpreadEq };

struct SpreadChoice {
  int mode = kSpreadEq, need = 0, shift = 32;
  uint32_t prefix = 0;
  uint64_t tau = 0;  // kSpreadList: the need-th largest composite of the row's list
  // `sure` keys are taken; `member` keys are the bin's (kSpreadList / kSpreadEq: some taken).
  __device__ __forceinline__ bool sure(uint32_t k) const {
    if (k == 0u) return false;
    if (mode == kSpreadAll) return true;
    if (mode == kSpreadGe) return (k >> shift) >= prefix;
    return (k >> shift) > prefix;
  }
  __device__ __forceinline__ bool member(uint32_t k) const {
    return (mode == kSpreadList || mode == kSpreadEq) && k != 0u && (k >> shift) == prefix;
  }
  __device__ __forceinline__ bool taken(uint32_t k, int64_t p) const {
    return sure(k) || (mode == kSpreadList && member(k) && composite_key(k, static_cast<uint32_t>(p)) >= tau);
  }
};

// The digit width of pass `pass` (11 / 11 / 10 bits).
__device__ __forceinline__ int spread_digit_width(int pass) { return pass < kSpreadPasses - 1 ? 11 : 10; }

// This CTA's counts of the pass's digit over the slice's keys under c's prefix, into sh.hist
// (bins 0 .. 2^width - 1), visible to the block when it returns.
__device__ __forceinline__ void spread_slice_hist(const uint32_t* ks, int cnt, int pass, const SpreadChoice& c,
                                                  SpreadShared& sh) {
  const int tid = threadIdx.x, width = spread_digit_width(pass), shift = c.shift - width;
  const uint32_t mask = (1u << width) - 1u;
  for (int b = tid; b < kSpreadBins; b += kSpreadThreads) sh.hist[b] = 0;
  __syncthreads();
  for (int i = tid; i < (cnt + 31) / 32 * 32; i += kSpreadThreads) {
    const uint32_t k = i < cnt ? ks[i] : 0u;
    const bool hit = k != 0u && (pass == 0 || (k >> c.shift) == c.prefix);
    cuda::warp_hist_add_direct(sh.hist, hit, (k >> shift) & mask);
  }
  __syncthreads();
}

// One pass's choice from the row's histogram, of which thread t holds the four bins below
// 2^width - 4t, highest first, in v. Updates c (need, prefix, shift, mode) and returns whether
// the passes stop. The same in every CTA of the row (they all read the same histogram).
__device__ __forceinline__ bool spread_choose(const int (&v)[4], int pass, SpreadChoice& c, SpreadShared& sh) {
  const int tid = threadIdx.x, width = spread_digit_width(pass), nb = 1 << width;
  const int sum = v[0] + v[1] + v[2] + v[3];
  int total = 0;
  const int above = cuda::block_exclusive_scan<kSpreadThreads>(sum, sh.scan, &total);
  if (pass == 0 && total <= c.need) {
    c.mode = kSpreadAll;
    return true;
  }
  if (above < c.need && c.need <= above + sum) {
    int acc = above;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (acc + v[j] >= c.need) {
        sh.bin = nb - 1 - 4 * tid - j;
        sh.above = acc;
        sh.bin_count = v[j];
        break;
      }
      acc += v[j];
    }
  }
  __syncthreads();
  const int bin = sh.bin, bin_count = sh.bin_count;
  c.need -= sh.above;
  c.shift -= width;
  c.prefix = (c.prefix << width) | static_cast<uint32_t>(bin);
  __syncthreads();  // sh is rewritten by the next pass
  if (bin_count == c.need) {
    c.mode = kSpreadGe;
    return true;
  }
  if (bin_count <= kSpreadListCap) {
    c.mode = kSpreadList;
    return true;
  }
  return false;
}

// Warp w's contiguous run of the slice, [w0, w1), which its lanes read interleaved.
struct SpreadWarpRun {
  int w0, w1;
  __device__ __forceinline__ explicit SpreadWarpRun(int cnt) {
    const int wlen = (cnt + 32 * kSpreadWarps - 1) / (32 * kSpreadWarps) * 32;
    w0 = (threadIdx.x >> 5) * wlen;
    w1 = min(cnt, w0 + wlen);
  }
  __device__ __forceinline__ int end() const { return w0 < w1 ? (w1 + 31) / 32 * 32 : w0; }
};

// This slice's counts of sure and bin keys (thread 0 gets them), its bin keys' composites handed
// to append(ballot, composite, is_member) in kSpreadList mode (every lane of a warp whose ballot
// is not zero calls it).
template <typename Append>
__device__ __forceinline__ void spread_slice_counts(const SpreadSlice& sl, const uint32_t* ks, const SpreadChoice& c,
                                                    SpreadShared& sh, int& sure_count, int& member_count,
                                                    Append&& append) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const SpreadWarpRun run(sl.cnt);
  int my_sure = 0, my_member = 0;
  for (int i = run.w0; i < run.end(); i += 32) {
    const int j = i + lane;
    const uint32_t k = j < run.w1 ? ks[j] : 0u;
    my_sure += c.sure(k) ? 1 : 0;
    const bool m = c.member(k);
    my_member += m ? 1 : 0;
    if (c.mode == kSpreadList) {
      const unsigned mb = __ballot_sync(0xffffffffu, m);
      if (mb != 0u) append(mb, composite_key(k, static_cast<uint32_t>(sl.s0 + j)), m);
    }
  }
  my_sure = __reduce_add_sync(0xffffffffu, my_sure);
  my_member = __reduce_add_sync(0xffffffffu, my_member);
  if (lane == 0) {
    sh.warp_a[warp] = my_sure;
    sh.warp_b[warp] = my_member;
  }
  __syncthreads();
  sure_count = member_count = 0;
  if (threadIdx.x == 0)
    for (int w = 0; w < kSpreadWarps; ++w) sure_count += sh.warp_a[w], member_count += sh.warp_b[w];
}

// kSpreadList: every CTA ranks the row's list (c entries, this thread's entry x if tid < c) and
// finds tau, the need-th largest composite; returns the list's taken composites below position
// s0 (the bin keys taken before this slice). Every thread must call it.
__device__ __forceinline__ int spread_rank_list(SpreadChoice& ch, int c, uint64_t x, int64_t s0, SpreadShared& sh) {
  const int tid = threadIdx.x;
  if (tid < c) sh.list[tid] = x;
  __syncthreads();
  bool before = false;
  if (tid < c) {
    int rank = 0;
    for (int j = 0; j < c; ++j) rank += sh.list[j] > x ? 1 : 0;
    if (rank == ch.need - 1) sh.tau = x;
    before = rank < ch.need && static_cast<int64_t>(~static_cast<uint32_t>(x)) < s0;
  }
  const int taken_before = spread_block_sum(before ? 1 : 0, sh);  // its barriers publish sh.tau
  ch.tau = sh.tau;
  return taken_before;
}

// The slice's winners written in position order at offset sure_before + taken_before of the
// row's output (kSpreadEq: the first `quota` bin keys of the slice go too); the last slice pads
// with -1.
__device__ __forceinline__ void spread_write_winners(const TopkArgs& a, const SpreadSlice& sl, const uint32_t* ks,
                                                     const SpreadChoice& c, int base, int quota, SpreadShared& sh) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const SpreadWarpRun run(sl.cnt);
  // Winners per warp (taken keys; kSpreadEq: bin keys), the warps' prefixes, then the writes.
  int wt = 0, we = 0;
  for (int i = run.w0; i < run.end(); i += 32) {
    const int j = i + lane;
    const uint32_t k = j < run.w1 ? ks[j] : 0u;
    wt += __popc(__ballot_sync(0xffffffffu, c.taken(k, sl.s0 + j)));
    if (c.mode == kSpreadEq) we += __popc(__ballot_sync(0xffffffffu, c.member(k)));
  }
  if (lane == 0) {
    sh.warp_a[warp] = wt;
    sh.warp_b[warp] = we;
  }
  __syncthreads();
  int rt = 0, re = 0, ct = 0, ce = 0;
#pragma unroll
  for (int w = 0; w < kSpreadWarps; ++w) {
    if (w < warp) rt += sh.warp_a[w], re += sh.warp_b[w];
    ct += sh.warp_a[w];
    ce += sh.warp_b[w];
  }
  int32_t* out = a.out + static_cast<int64_t>(sl.row) * a.out_sr;
  for (int i = run.w0; i < run.end(); i += 32) {
    const int j = i + lane;
    const int64_t p = sl.s0 + j;
    const uint32_t k = j < run.w1 ? ks[j] : 0u;
    const bool t = c.taken(k, p), e = c.mode == kSpreadEq && c.member(k);
    const unsigned bt = __ballot_sync(0xffffffffu, t), be = __ballot_sync(0xffffffffu, e);
    const int t_at = rt + __popc(bt & lanemask_lt()), e_at = re + __popc(be & lanemask_lt());
    int at = -1;
    if (t) at = base + t_at + (e_at < quota ? e_at : quota);
    else if (e && e_at < quota) at = base + t_at + e_at;
    if (at >= 0 && at < a.topk) {
      if (a.expand > 0) pooled_write_pool(a, out, sl.brow, at, p);
      else out[static_cast<int64_t>(at) * a.out_sc] = spread_out_value(a, sl.brow, p, sh.blocks, sl.blk0, sl.nblk);
    }
    rt += __popc(bt);
    re += __popc(be);
  }
  if (sl.s == sl.S - 1) {
    const int written = base + ct + (ce < quota ? ce : quota);
    if (a.expand > 0) pooled_write_rest(a, out, sl.row, sl.brow, written, tid, kSpreadThreads);
    else for (int i = written + tid; i < a.topk; i += kSpreadThreads) out[static_cast<int64_t>(i) * a.out_sc] = -1;
  }
}

// The selection of the slice's keys `ks` (shared memory, written by the caller and visible after
// a __syncthreads the caller made or the first pass makes) by the row's CTAs together, meeting at
// grid barriers through global memory. first_ready: the first pass's histogram came counted
// (key_histogram.cuh); this thread's four bins of it in v0 (bins kSpreadBins - 1 - 4 tid - j).
__device__ __forceinline__ void spread_select(const TopkArgs& a, const SpreadArgs& g, const SpreadSlice& sl,
                                              const uint32_t* ks, SpreadShared& sh, bool first_ready,
                                              const int (&v0)[4]) {
  const int tid = threadIdx.x, lane = tid & 31;
  const int S = sl.S, row = sl.row, s = sl.s;
  unsigned* state = g.state + static_cast<int64_t>(row) * kSpreadStateWords;
  int* counts = g.counts + static_cast<int64_t>(row) * S * 2;
  uint64_t* glist = g.list + static_cast<int64_t>(row) * kSpreadListCap;

  SpreadChoice c;
  c.need = a.topk;
  unsigned arrivals = 0;
  for (int pass = 0; pass < kSpreadPasses; ++pass) {
    const int nb = 1 << spread_digit_width(pass);
    int* gh = spread_pass_hist(g, pass, row);
    if (pass > 0 || !first_ready) {
      spread_slice_hist(ks, sl.cnt, pass, c, sh);
      for (int b = tid; b < nb; b += kSpreadThreads)
        if (sh.hist[b] != 0) atomicAdd(&gh[b], sh.hist[b]);
      spread_row_barrier(state, ++arrivals * static_cast<unsigned>(S), arrivals == 1 ? a.prof : nullptr);
    } else {
      __syncthreads();  // the slice is in shared memory
    }
    int v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int b = nb - 1 - 4 * tid - j;
      v[j] = pass == 0 && first_ready ? v0[j] : b >= 0 ? __ldcg(&gh[b]) : 0;
    }
    if (spread_choose(v, pass, c, sh)) break;
  }
  prof_mark(a.prof, blockIdx.x, 2);
  if (a.prof != nullptr && blockIdx.x == 0 && tid == 0) a.prof[12] = arrivals, a.prof[13] = c.mode;

  // Counts of this slice, and its bin keys into the row's list (kSpreadList: at most
  // kSpreadListCap in the row).
  int my_sure = 0, my_member = 0;
  spread_slice_counts(sl, ks, c, sh, my_sure, my_member, [&](unsigned mb, uint64_t comp, bool m) {
    unsigned at = 0;
    if (lane == __ffs(mb) - 1) at = atomicAdd(&state[1], static_cast<unsigned>(__popc(mb)));
    at = __shfl_sync(0xffffffffu, at, __ffs(mb) - 1);
    if (m) glist[at + __popc(mb & lanemask_lt())] = comp;
  });
  if (tid == 0) {
    __stcg(&counts[2 * s], my_sure);
    __stcg(&counts[2 * s + 1], my_member);
  }
  spread_row_barrier(state, ++arrivals * static_cast<unsigned>(S));
  prof_mark(a.prof, blockIdx.x, 3);

  // The slices before this one (their sure keys, their bin keys) and the row's list, read at once.
  int sb = 0, mb = 0;
  for (int j = tid; j < s; j += kSpreadThreads) {
    sb += __ldcg(&counts[2 * j]);
    mb += __ldcg(&counts[2 * j + 1]);
  }
  const int nlist = c.mode == kSpreadList ? static_cast<int>(__ldcg(&state[1])) : 0;
  uint64_t x = 0;
  if (c.mode == kSpreadList && tid < kSpreadListCap) x = __ldcg(&glist[tid]);
  const int sure_before = spread_block_sum(sb, sh);
  const int member_before = c.mode == kSpreadEq ? spread_block_sum(mb, sh) : 0;
  int taken_before = 0;
  if (c.mode == kSpreadList) taken_before = spread_rank_list(c, nlist, x, sl.s0, sh);
  else if (c.mode == kSpreadEq) taken_before = member_before < c.need ? member_before : c.need;
  const int quota = c.mode == kSpreadEq ? (c.need - taken_before > 0 ? c.need - taken_before : 0) : 0;
  spread_write_winners(a, sl, ks, c, sure_before + taken_before, quota, sh);
  prof_mark(a.prof, blockIdx.x, 5);
}

template <int SRC>
__global__ void __launch_bounds__(kSpreadThreads) topk_spread_kernel(const TopkArgs a, const SpreadArgs g) {
  static_assert(SRC == kSrcF32 || SRC == kSrcKeys, "rows of scores or keys");
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ SpreadShared sh;
  uint32_t* ks = reinterpret_cast<uint32_t*>(smem);
  const int tid = threadIdx.x;
  const cuda::SpanStart span_t0 = cuda::span_begin(spans_of(a.prof), kSpanTopk);
  const SpreadSlice sl = spread_slice<SRC>(a, g);

  pdl_wait();  // the rows and the cleared state come from the kernels before this one
  pdl_launch_dependents();
  prof_mark(a.prof, blockIdx.x, 0);
  spread_clear_last_pass(g, sl);
  // The slice's blocks (physical output), read now rather than at the writes.
  for (int i = tid; i < sl.nblk; i += kSpreadThreads) sh.blocks[i] = spread_block(a, sl.brow, sl.blk0 + i);
  // The first pass's counts, when the keys' pass made them, load with the slice.
  int v0[4] = {0, 0, 0, 0};
  if (g.first_ready) {
#pragma unroll
    for (int j = 0; j < 4; ++j) v0[j] = __ldcg(&spread_pass_hist(g, 0, sl.row)[kSpreadBins - 1 - 4 * tid - j]);
  }
  // The slice into shared memory (16-byte loads where the row allows: s0 is a multiple of 4).
  const int64_t row_off = static_cast<int64_t>(sl.row) * a.ld;
  for (int i = 4 * tid; i < sl.cnt; i += 4 * kSpreadThreads) {
    uint32_t k[4];
    load_key4<SRC>(a, row_off, sl.n, sl.s0 + i, k);
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if (i + e < sl.cnt) ks[i + e] = k[e];
  }
  prof_mark(a.prof, blockIdx.x, 1);
  spread_select(a, g, sl, ks, sh, g.first_ready != 0, v0);
  cuda::span_end(spans_of(a.prof), kSpanTopk, span_t0);
}

}  // namespace latte::cuda
