// Exact top-k of few rows, each spread over the CTAs of one thread-block cluster (sm_90+): the
// same selection as topk_spread_grid_barrier.cuh (its passes, modes, list ranking and ordered
// writes), but the row's CTAs meet at the cluster barrier and add their histograms, counts and
// bin keys in each other's shared memory instead of in global memory behind a grid barrier.
// Why: at batch 1 the grid barrier's round trips through L2 were most of each digit pass
// (docs/kernels/indexer.md, "Batch 1").
//
// Grid rows x C with clusters of C CTAs (one row per cluster; C = 8 or 16 where the GPU fits
// the row count's clusters at once). The row histogram of each pass is spread over the
// cluster: the four bins 4g .. 4g + 3 live in the CTA of rank g mod C, so each CTA adds its
// non-zero bins there and every thread later reads its own four bins with one 16-byte load.
// Each CTA keeps its slice's counts and bin keys in its own shared memory; the others read them
// after the barrier that follows. A CTA leaves only after every CTA has read what it holds.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/pdl.cuh"
#include "kernels/common/sm90_cluster.cuh"
#include "kernels/topk/topk_spread_grid_barrier.cuh"

namespace latte::cuda {

constexpr int kSpreadMaxCluster = 16;

// What the other CTAs of the cluster read or add to.
struct SpreadClusterShared {
  __align__(16) int row_hist[kSpreadPasses][kSpreadBins];  // this CTA's groups of each pass
  uint64_t list[kSpreadListCap];                           // this slice's bin keys (kSpreadList)
  int counts[2];                                           // this slice's sure and bin keys
  unsigned list_n;
  int peer_sure[kSpreadMaxCluster], peer_member[kSpreadMaxCluster];  // read back, local only
};

// The selection of the slice's keys `ks` by the row's cluster (see spread_select for the
// arguments). The caller cleared csh.row_hist and csh.list_n and made the cluster barrier that
// publishes the clears.
__device__ __forceinline__ void spread_select_cluster(const TopkArgs& a, const SpreadArgs& g, const SpreadSlice& sl,
                                                      const uint32_t* ks, SpreadShared& sh, SpreadClusterShared& csh,
                                                      bool first_ready, const int (&v0)[4]) {
  const int tid = threadIdx.x, lane = tid & 31;
  const unsigned C = static_cast<unsigned>(sl.S);
  SpreadChoice c;
  c.need = a.topk;
  int barriers = 0;
  for (int pass = 0; pass < kSpreadPasses; ++pass) {
    const int nb = 1 << spread_digit_width(pass);
    if (pass > 0 || !first_ready) {
      spread_slice_hist(ks, sl.cnt, pass, c, sh);
      for (int b = tid; b < nb; b += kSpreadThreads)
        if (sh.hist[b] != 0) cluster_red_add(cluster_smem_addr(&csh.row_hist[pass][b], (b >> 2) % C), sh.hist[b]);
      if (a.prof != nullptr && barriers == 0) {  // measurements: the first and last arrival (slot 7)
        __syncthreads();
        if (tid == 0) {
          unsigned long long t;
          asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
          atomicMin(a.prof + 14, t);
          atomicMax(a.prof + 15, t);
        }
      }
      cluster_sync();
      ++barriers;
    } else {
      __syncthreads();  // the slice is in shared memory
    }
    // Thread t's four bins, nb - 1 - 4t - j (j = 0..3), are group g = nb / 4 - 1 - t.
    int v[4] = {0, 0, 0, 0};
    if (pass == 0 && first_ready) {
#pragma unroll
      for (int j = 0; j < 4; ++j) v[j] = v0[j];
    } else if (tid < nb / 4) {
      const int grp = nb / 4 - 1 - tid;
      int w[4];
      cluster_ld4(cluster_smem_addr(&csh.row_hist[pass][4 * grp], static_cast<unsigned>(grp) % C), w);
#pragma unroll
      for (int j = 0; j < 4; ++j) v[j] = w[3 - j];
    }
    if (spread_choose(v, pass, c, sh)) break;
  }
  prof_mark(a.prof, blockIdx.x, 2);
  if (a.prof != nullptr && blockIdx.x == 0 && tid == 0) a.prof[12] = barriers, a.prof[13] = c.mode;

  // This slice's counts and bin keys, in its own shared memory for the others to read.
  int my_sure = 0, my_member = 0;
  spread_slice_counts(sl, ks, c, sh, my_sure, my_member, [&](unsigned mb, uint64_t comp, bool m) {
    unsigned at = 0;
    if (lane == __ffs(mb) - 1) at = atomicAdd(&csh.list_n, static_cast<unsigned>(__popc(mb)));
    at = __shfl_sync(0xffffffffu, at, __ffs(mb) - 1);
    if (m) csh.list[at + __popc(mb & lanemask_lt())] = comp;
  });
  if (tid == 0) {
    csh.counts[0] = my_sure;
    csh.counts[1] = my_member;
  }
  cluster_sync();
  prof_mark(a.prof, blockIdx.x, 3);

  // Every slice's counts, then (kSpreadList) the row's list gathered from the slices' lists.
  if (tid < static_cast<int>(C)) {
    csh.peer_sure[tid] = cluster_ld(cluster_smem_addr(&csh.counts[0], tid));
    csh.peer_member[tid] = cluster_ld(cluster_smem_addr(&csh.counts[1], tid));
  }
  __syncthreads();
  int sure_before = 0, member_before = 0, nlist = 0, owner = -1, at = 0;
  for (int j = 0; j < static_cast<int>(C); ++j) {
    if (j < sl.s) sure_before += csh.peer_sure[j], member_before += csh.peer_member[j];
    if (owner < 0 && tid < nlist + csh.peer_member[j]) owner = j, at = tid - nlist;
    nlist += csh.peer_member[j];
  }
  uint64_t x = 0;
  if (c.mode == kSpreadList && owner >= 0) x = cluster_ld64(cluster_smem_addr(&csh.list[at], owner));
  prof_mark(a.prof, blockIdx.x, 4);
  cluster_arrive();  // done with the other CTAs' shared memory; waited for before leaving
  int taken_before = 0;
  if (c.mode == kSpreadList) taken_before = spread_rank_list(c, nlist, x, sl.s0, sh);
  else if (c.mode == kSpreadEq) taken_before = member_before < c.need ? member_before : c.need;
  const int quota = c.mode == kSpreadEq ? (c.need - taken_before > 0 ? c.need - taken_before : 0) : 0;
  spread_write_winners(a, sl, ks, c, sure_before + taken_before, quota, sh);
  prof_mark(a.prof, blockIdx.x, 5);
  cluster_wait();
}

template <int SRC>
__global__ void __launch_bounds__(kSpreadThreads) topk_spread_cluster_kernel(const TopkArgs a, const SpreadArgs g) {
  static_assert(SRC == kSrcF32 || SRC == kSrcKeys, "rows of scores or keys");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ SpreadShared sh;
  __shared__ SpreadClusterShared csh;
  uint32_t* ks = reinterpret_cast<uint32_t*>(smem);
  const int tid = threadIdx.x;
  const cuda::SpanStart span_t0 = cuda::span_begin(spans_of(a.prof), kSpanTopk);
  const SpreadSlice sl = spread_slice<SRC>(a, g);
  for (int i = tid; i < kSpreadPasses * kSpreadBins; i += kSpreadThreads) (&csh.row_hist[0][0])[i] = 0;
  if (tid == 0) csh.list_n = 0;
  cluster_arrive();  // the clears, before any CTA adds here; waited for once the slice is in

  pdl_wait();  // the rows (and the first pass's counts) come from the kernels before this one
  pdl_launch_dependents();
  prof_mark(a.prof, blockIdx.x, 0);
  for (int i = tid; i < sl.nblk; i += kSpreadThreads) sh.blocks[i] = spread_block(a, sl.brow, sl.blk0 + i);
  int v0[4] = {0, 0, 0, 0};
  if (g.first_ready) {
#pragma unroll
    for (int j = 0; j < 4; ++j) v0[j] = __ldcg(&spread_pass_hist(g, 0, sl.row)[kSpreadBins - 1 - 4 * tid - j]);
  }
  const int64_t row_off = static_cast<int64_t>(sl.row) * a.ld;
  for (int i = 4 * tid; i < sl.cnt; i += 4 * kSpreadThreads) {
    uint32_t k[4];
    load_key4<SRC>(a, row_off, sl.n, sl.s0 + i, k);
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if (i + e < sl.cnt) ks[i + e] = k[e];
  }
  prof_mark(a.prof, blockIdx.x, 1);
  cluster_wait();
  spread_select_cluster(a, g, sl, ks, sh, csh, g.first_ready != 0, v0);
  cuda::span_end(spans_of(a.prof), kSpanTopk, span_t0);
#endif
}

}  // namespace latte::cuda
