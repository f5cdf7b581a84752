// hopper.indexer's logits kernel for any block size: K pages through a cp.async pipeline.
// One warpgroup (128 threads) per CTA; per stage of 64 positions the thread pair (2 r, 2 r + 1)
// copies row r into the 128-byte-swizzled tile, then one wgmma batch and the epilogue
// (logits_wgmma_common.cuh). The TMA kernel (logits_wgmma_tma_warpspecialized.cuh) takes the block sizes it can copy a
// page piece at a time; this one takes the rest (block sizes below 8 or not dividing 64 or
// divisible by it), at a higher instruction cost per position, and the fused path's sample
// pass (kOutSample: the rows of a stage are sampled positions, not consecutive ones) and repair
// pass (kOutRepair: a running top-k buffer per CTA, whose every thread takes part in each
// stage's barrier).
#pragma once

#include "kernels/indexer/sm90a/logits_wgmma_common.cuh"

namespace latte::hopper_indexer {

constexpr int kCpAsyncThreads = 128;
constexpr int kCpAsyncStages = 3;  // 3, 4 and 6 measured: 3 fastest (B = 32 x 32K, H_i 32 / 64)

// Shared memory: queries, the stages' K tiles, scales, validity flags, block ids and offsets,
// coef per column; kOutRepair: the running buffer's state and its repair_cap entries; plus 1024
// bytes of alignment.
__host__ __device__ constexpr int cpasync_smem_bytes(int columns, int repair_cap = 0) {
  return 1024 + columns * 128 + kCpAsyncStages * (kTileBytes + kTileTokens * (4 + 1 + 4 + 4)) + columns * 4 +
         (repair_cap > 0 ? static_cast<int>(sizeof(cuda::RunningTopk)) + repair_cap * 8 : 0);
}

template <int OUT, int NI, int NR>
__global__ void __launch_bounds__(kCpAsyncThreads) logits_cpasync_kernel(const LogitsArgs a) {
  static_assert(OUT != kOutAdmit, "the admission pass runs in the TMA kernel");
  constexpr int NC = NI * NR, S = kCpAsyncStages;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw_s = cuda::smem_addr(smem_raw);
  uint8_t* smem = smem_raw + (((raw_s + 1023u) & ~1023u) - raw_s);
  uint8_t* sq = smem;
  uint8_t* stiles = sq + NC * 128;
  float* sscale = reinterpret_cast<float*>(stiles + S * kTileBytes);
  uint8_t* sok = reinterpret_cast<uint8_t*>(sscale + S * kTileTokens);
  int* sbt = reinterpret_cast<int*>(sok + S * kTileTokens);  // block id ring
  int* sbo = sbt + S * kTileTokens;                            // offset in the block
  float* scoef = reinterpret_cast<float*>(sbo + S * kTileTokens);
  // kOutRepair: the running buffer (16-byte aligned: everything before it is a multiple of 32 bytes).
  cuda::RunningTopk& run = *reinterpret_cast<cuda::RunningTopk*>(scoef + NC);
  uint32_t* run_keys = reinterpret_cast<uint32_t*>(&run + 1);
  int32_t* run_pos = reinterpret_cast<int32_t*>(run_keys + a.repair_cap);
  const uint32_t sq_s = cuda::smem_addr(sq), stiles_s = cuda::smem_addr(stiles);
  const cuda::IndexerParams& p = a.p;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  __shared__ cuda::SpanStart span_t0;  // thread 0's (measurements): no registers held for it
  if (a.spans != nullptr && threadIdx.x == 0) span_t0 = cuda::span_begin(a.spans, a.span);
  const TokenChunk w = token_chunk<OUT>(a);
  const int s_end = w.s_end, nst = w.nst;
  if constexpr (OUT == kOutRepair) {
    // Only the tokens whose admission failed (every thread takes the same branch). Launched
    // dependent on the admission pass: its counts and thresholds after the wait.
    cuda::pdl_wait();
    if (!cuda::fused_needs_repair(a.row_count[w.t], a.row_tau[w.t], a.list_cap, a.topk)) {
      if (a.spans != nullptr && threadIdx.x == 0) cuda::span_end(a.spans, a.span, span_t0);
      return;
    }
    cuda::running_topk_clear(run);  // published by the barrier after the query staging
  }
  // The spread top-k after the keys may start at once (it reads them after its pdl_wait).
  if constexpr (OUT == kOutKeys) cuda::pdl_launch_dependents();
  if constexpr (OUT == kOutSample) {
    // The admission pass after it may start at once (its producers copy K, its consumers wait
    // for this grid before reading the samples). The token's candidate count is cleared here.
    cuda::pdl_launch_dependents();
    if (tid == 0 && blockIdx.x < static_cast<unsigned>(p.tokens)) a.row_count[w.t] = 0;
  }

  stage_queries<NC>(a, w.t, tid, kCpAsyncThreads, sq, scoef);
  wg::fence_proxy_async_smem();
  __syncthreads();

  if (nst > 0) {
    const int bs = p.block_size;
    const int crow = tid >> 1, half = tid & 1;  // the K row this thread copies, and which half
    const int32_t* btrow = p.block_table + static_cast<int64_t>(w.row) * p.bt_sr;
    // Thread pair (2 r, 2 r + 1) copies row r of every stage: chunks 2 k + half, k < 4, so each
    // copy instruction of a warp reads 16 rows x 32 contiguous bytes (whole sectors). The row's
    // block ids travel through the same pipeline, S - 1 stages ahead of its K bytes; the half-0
    // thread walks the row's position by 64 a stage as (block index, offset), without a division.
    int bi = (w.c0 + crow) / bs;
    int off = w.c0 + crow - bi * bs;
    const int step_blocks = kTileTokens / bs, step_off = kTileTokens % bs;
    // Stage st's block id (-1: none) and offset of row crow into ring slot st % S. Every lane
    // calls it: the warp barrier orders the pair's earlier reads of the slot.
    auto fetch_ids = [&](int st) {
      __syncwarp();
      if (half != 0 || st >= nst) return;
      const int pos = w.c0 + st * kTileTokens + crow;
      int* id = sbt + (st % S) * kTileTokens + crow;
      if (OUT == kOutSample) {  // row crow of the stage is a sampled position
        const int sp = sample_position(pos, w.span, a.samples);
        bi = sp / bs;
        off = sp - bi * bs;
      }
      if (pos < s_end && bi < p.max_blocks) cuda::cp_async_4(id, btrow + static_cast<int64_t>(bi) * p.bt_sc, true);
      else *id = -1;
      sbo[(st % S) * kTileTokens + crow] = off;
      off += step_off;
      bi += step_blocks;
      if (off >= bs) {
        off -= bs;
        ++bi;
      }
    };
    // One cp.async group: stage st's K rows into its slot (swizzled; the half-0 thread also
    // copies the row's scale and sets its flag; unreadable rows are zero-filled), and the
    // block ids of stage st + S - 1.
    auto issue = [&](int st) {
      if (st < nst) {
        const int slot = st % S;
        const int nb = sbt[slot * kTileTokens + crow], noff = sbo[slot * kTileTokens + crow];
        const bool ok = nb >= 0 && nb < p.num_blocks;
        const uint8_t* src = p.k_cache + (ok ? static_cast<int64_t>(nb) * p.page_stride : 0);
        const uint32_t dst = stiles_s + slot * kTileBytes;
#pragma unroll
        for (int k = 0; k < 4; ++k)
          cuda::cp_async_16_s(dst + wg::sw128_offset(crow, 2 * k + half), src + noff * 128 + 16 * (2 * k + half), ok);
        if (half == 0) {
          cuda::cp_async_4(sscale + slot * kTileTokens + crow, src + static_cast<int64_t>(bs) * 128 + noff * 4, ok);
          sok[slot * kTileTokens + crow] = ok ? 1 : 0;
        }
      }
      fetch_ids(st + S - 1);
      cuda::cp_async_commit();
    };

    // The first S - 1 stages' block ids, then their K rows.
#pragma unroll 1
    for (int st = 0; st < S - 1; ++st) fetch_ids(st);
    cuda::cp_async_commit();
    cuda::cp_async_wait<0>();
    __syncthreads();
#pragma unroll 1
    for (int st = 0; st < S - 1; ++st) issue(st);

    float acc[NR][NI / 2] = {};
    const SharedCoef coef{scoef, lane & 3};
    const int ra = warp * 16 + (lane >> 2);
#pragma unroll 1
    for (int it = 0; it < nst; ++it) {
      cuda::cp_async_wait<S - 2>();
      wg::fence_proxy_async_smem();
      __syncthreads();  // stage it landed for every thread; stage it - 1's slot is free
      issue(it + S - 1);
      // The barrier above ordered the previous stage's offers: room for this stage's 64.
      if constexpr (OUT == kOutRepair)
        cuda::running_topk_keep_room<kCpAsyncThreads>(run, run_keys, run_pos, a.repair_cap, kTileTokens, a.topk);
      const int slot = it % S;
      tile_scores<NI, NR>(acc, stiles_s + slot * kTileBytes, sq_s);
      const int pos_a = w.c0 + it * kTileTokens + ra;
      const float sc_a = sscale[slot * kTileTokens + ra], sc_b = sscale[slot * kTileTokens + ra + 8];
      const bool ok_a = sok[slot * kTileTokens + ra] != 0, ok_b = sok[slot * kTileTokens + ra + 8] != 0;
      if constexpr (OUT == kOutRepair) offer_scores<NI, NR>(acc, coef, w, pos_a, sc_a, sc_b, ok_a, ok_b, lane, run, run_keys, run_pos);
      else write_scores<OUT, NI, NR>(acc, a, coef, w, pos_a, sc_a, sc_b, ok_a, ok_b, lane);
    }
    cuda::cp_async_wait<0>();
  }
  if constexpr (OUT == kOutRepair) {
    // The CTA's topk best into its slot of the token's row [chunks, topk] (gridDim.x = T x chunks).
    __syncthreads();
    const int chunks = static_cast<int>(gridDim.x / static_cast<unsigned>(p.tokens));
    const int64_t base = (static_cast<int64_t>(w.t) * chunks + blockIdx.x / static_cast<unsigned>(p.tokens)) * a.topk;
    cuda::running_topk_write<kCpAsyncThreads>(run, run_keys, run_pos, a.topk, a.cand_keys + base, a.cand_pos + base);
  }
  fill_invisible<OUT>(a, w, w.c0 + nst * kTileTokens, tid, kCpAsyncThreads);
  if (a.spans != nullptr && threadIdx.x == 0) cuda::span_end(a.spans, a.span, span_t0);
}

}  // namespace latte::hopper_indexer
