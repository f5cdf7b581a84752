// hopper.indexer's logits kernel for block sizes 8, 16, 32 and multiples of 64: K pages
// copied by the TMA, a warp-specialized pipeline.
//
// CTA = one consumer warpgroup (warps 0-3: wgmma and the epilogue, logits_wgmma_common.cuh) + one
// producer warp (warp 4). A stage = 64 positions = 64 / R pieces of R = min(block_size, 64)
// rows, each inside one page: the piece's K rows arrive by one TMA copy (a 3-D tensor map over
// (128 bytes, rows of a page, pages), written in the 128-byte swizzle wgmma reads) and its
// scales by one bulk copy, both completing the stage's `full` barrier; the consumers release
// the slot through its `empty` barrier once their wgmma has read it. The producer lanes load
// the block ids of up to 32 pieces with one coalesced read, a batch ahead, so the block_table
// latency stays off the pipeline. A piece without a readable page (past the visible end, an
// invalid block id) gets marker scales by a bulk copy too (kUnreadableScales), so everything a
// consumer reads of a stage arrives through its `full` barrier; every consumer thread arrives
// on `empty` after its own reads. (Validity flags stored by the producer's threads, ordered by
// the same barriers, made racecheck report a hazard in one run of three.) Per position the
// consumers execute only the wgmma batch and the epilogue: no address arithmetic, no copy
// instructions (a cp.async-only design measured about 420 instructions per warp per stage,
// which set its pace; docs/kernels/indexer.md, "hopper.indexer").
#pragma once

#include <cuda.h>

#include "kernels/common/sm90a_tma.cuh"
#include "kernels/indexer/sm90a/logits_wgmma_common.cuh"

namespace latte::hopper_indexer {

constexpr int kTmaThreads = 160;  // 4 consumer warps + 1 producer warp

// Shared memory: queries, the stages' K tiles and scales, full and empty barriers, coef per
// column, and for the admission pass the 4 warps' candidate buffers and the threshold's
// scratch; plus 1024 bytes of alignment.
__host__ __device__ constexpr int tma_smem_bytes(int columns, int stages, int out) {
  return 1024 + columns * 128 + stages * (kTileBytes + kTileTokens * 4 + 16) + columns * 4 +
         (out == kOutAdmit ? 4 * kAdmitBuffer * 8 + 64 : 0);
}

// The scales a piece without a readable page gets instead of its page's (a NaN payload no
// k_scale written by indexer_k_store has): everything the consumers read of a stage arrives
// through the stage's barrier, no flag written by the producer's threads.
constexpr uint32_t kUnreadableBits = 0x7FBADBADu;
#define LATTE_UNREADABLE_8 kUnreadableBits, kUnreadableBits, kUnreadableBits, kUnreadableBits, \
                           kUnreadableBits, kUnreadableBits, kUnreadableBits, kUnreadableBits
__device__ __align__(16) const uint32_t kUnreadableScales[kTileTokens] = {
    LATTE_UNREADABLE_8, LATTE_UNREADABLE_8, LATTE_UNREADABLE_8, LATTE_UNREADABLE_8,
    LATTE_UNREADABLE_8, LATTE_UNREADABLE_8, LATTE_UNREADABLE_8, LATTE_UNREADABLE_8};
#undef LATTE_UNREADABLE_8

template <int OUT, int NI, int NR, int S>
__global__ void __launch_bounds__(kTmaThreads) logits_tma_kernel(const LogitsArgs a, const __grid_constant__ CUtensorMap tmk) {
  static_assert(OUT != kOutSample, "the sample pass runs in the cp.async kernel");
  constexpr int NC = NI * NR;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw_s = cuda::smem_addr(smem_raw);
  uint8_t* smem = smem_raw + (((raw_s + 1023u) & ~1023u) - raw_s);
  uint8_t* sq = smem;
  uint8_t* stiles = sq + NC * 128;
  float* sscale = reinterpret_cast<float*>(stiles + S * kTileBytes);
  uint64_t* sbar = reinterpret_cast<uint64_t*>(sscale + S * kTileTokens);  // full[S], empty[S]
  float* scoef = reinterpret_cast<float*>(sbar + 2 * S);
  const uint32_t sq_s = cuda::smem_addr(sq), stiles_s = cuda::smem_addr(stiles);
  const uint32_t sscale_s = cuda::smem_addr(sscale), full_s = cuda::smem_addr(sbar), empty_s = full_s + 8 * S;
  const cuda::IndexerParams& p = a.p;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  __shared__ cuda::SpanStart span_t0;  // thread 0's (measurements): no registers held for it
  if (a.spans != nullptr && threadIdx.x == 0) span_t0 = cuda::span_begin(a.spans, a.span);
  const TokenChunk w = token_chunk(a);
  // The spread top-k after the keys may start at once (it reads them after its pdl_wait).
  if constexpr (OUT == kOutKeys) cuda::pdl_launch_dependents();
  const int s_end = w.s_end, nst = w.nst;

  if (tid == 32) {
    for (int s = 0; s < S; ++s) {
      wg::mbarrier_init(full_s + 8 * s, 1);
      wg::mbarrier_init(empty_s + 8 * s, 128);  // every consumer thread, after its reads of the slot
    }
    wg::mbarrier_init_fence();
  }
  __syncthreads();

  if (warp == 4) {
    // The producer starts copying at once; the consumers stage the queries meanwhile (the CTA's
    // first copies and its query loads overlap: a few microseconds of each CTA's start).
    if (nst == 0) return;
    const int bs = p.block_size, rows = a.piece_rows, pieces = kTileTokens / rows;
    const int stages_per_batch = 32 / pieces;  // stages whose block ids one read covers
    const int32_t* btrow = p.block_table + static_cast<int64_t>(w.row) * p.bt_sr;
    // Lane l of batch k: piece l % pieces of stage k * stages_per_batch + l / pieces, as
    // (block id or -1, row offset in the page).
    auto load_batch = [&](int k, int& b, int& off) {
      const int st = k * stages_per_batch + lane / pieces;
      const int pos = w.c0 + st * kTileTokens + (lane % pieces) * rows;
      const int bi = pos / bs;
      off = pos - bi * bs;
      b = st < nst && pos < s_end && bi < p.max_blocks ? btrow[static_cast<int64_t>(bi) * p.bt_sc] : -1;
    };
    int cur_b = -1, cur_off = 0, next_b, next_off;
    load_batch(0, next_b, next_off);
#pragma unroll 1
    for (int st = 0; st < nst; ++st) {
      const int in_batch = st % stages_per_batch;
      if (in_batch == 0) {
        cur_b = next_b;
        cur_off = next_off;
        load_batch(st / stages_per_batch + 1, next_b, next_off);
      }
      const int src = in_batch * pieces + (lane < pieces ? lane : 0);
      const int b = __shfl_sync(0xffffffffu, cur_b, src), off = __shfl_sync(0xffffffffu, cur_off, src);
      const bool ok = lane < pieces && b >= 0 && b < p.num_blocks;
      const unsigned mask = __ballot_sync(0xffffffffu, ok);
      const uint32_t slot = st % S;
      wg::mbarrier_wait(empty_s + 8 * slot, ((st / S) & 1u) ^ 1u);
      if (lane == 0) wg::mbarrier_arrive_expect_tx(full_s + 8 * slot, (__popc(mask) * 128 + pieces * 4) * rows);
      __syncwarp();
      const uint32_t scale_dst = sscale_s + (slot * kTileTokens + lane * rows) * 4;
      if (ok) {
        wg::tma_load_3d(stiles_s + slot * kTileBytes + lane * rows * 128, &tmk, 0, off, b, full_s + 8 * slot);
        wg::bulk_load(scale_dst, p.k_cache + static_cast<int64_t>(b) * p.page_stride + static_cast<int64_t>(bs) * 128 + off * 4,
                      rows * 4, full_s + 8 * slot);
      } else if (lane < pieces) {
        wg::bulk_load(scale_dst, kUnreadableScales, rows * 4, full_s + 8 * slot);
      }
    }
    return;
  }

  stage_queries<NC>(a, w.t, tid, 128, sq, scoef);
  wg::fence_proxy_async_smem();
  asm volatile("bar.sync 1, 128;\n" ::: "memory");  // the consumer warpgroup only

  // The admission pass: the token's threshold from its samples (launched dependent on the
  // sample pass; the producer's copies are under way meanwhile), computed by the 128 consumer
  // threads of every CTA of the token; chunk 0 records it for the repair and select passes.
  Admission ad{};
  if constexpr (OUT == kOutAdmit) {
    auto* abuf = reinterpret_cast<uint32_t*>(scoef + NC);
    int* sred = reinterpret_cast<int*>(abuf + 4 * kAdmitBuffer * 2);
    cuda::pdl_wait();
    const int m = cuda::fused_sample_rank(w.vis, a.topk, a.debug, a.samples);
    const uint32_t tau =
        m > 0 ? cuda::sampled_threshold<128, 1>(a.sample_keys + static_cast<int64_t>(w.t) * a.samples, a.samples, m, sred)
              : 1u;
    if (tid == 0 && blockIdx.x < static_cast<unsigned>(p.tokens)) a.row_tau[w.t] = tau;
    ad.all = tau <= 1u;
    ad.tau_floor = cuda::key_floor(tau);
    ad.keys = abuf + warp * kAdmitBuffer * 2;
    ad.pos = reinterpret_cast<int32_t*>(ad.keys + kAdmitBuffer);
    ad.fill = 0;
  }

  const int ra = warp * 16 + (lane >> 2);
  auto wait_full = [&](int st) {
    wg::mbarrier_wait(full_s + 8 * (st % S), (st / S) & 1u);
    return stiles_s + (st % S) * kTileBytes;
  };
  // Stage st's scores in acc (its wgmma complete) into the output; the slot is released as soon
  // as its scales are read.
  auto finish = [&](int st, const float (&acc)[NR][NI / 2], const auto& coef) {
    const uint32_t slot = st % S;
    const float sc_a = sscale[slot * kTileTokens + ra], sc_b = sscale[slot * kTileTokens + ra + 8];
    wg::mbarrier_arrive(empty_s + 8 * slot);
    const bool ok_a = __float_as_uint(sc_a) != kUnreadableBits, ok_b = __float_as_uint(sc_b) != kUnreadableBits;
    if constexpr (OUT == kOutAdmit) {
      admit_scores<NI, NR>(acc, a, coef, w, w.c0 + st * kTileTokens + ra, sc_a, sc_b, ok_a, ok_b, lane, ad);
    } else {
      write_scores<OUT, NI, NR>(acc, a, coef, w, w.c0 + st * kTileTokens + ra, sc_a, sc_b, ok_a, ok_b, lane);
    }
  };
  if constexpr (NR == 1) {
    // At most 64 heads: coef in registers, and stage st + 1's wgmma issued before stage st's
    // epilogue, into the other of two accumulator sets (ping-pong: stages alternate between
    // acc0 and acc1, so the epilogue never reads registers a wgmma in flight writes; a copy of
    // one set into the other let ptxas alias them and serialize the wgmma, C7514). The wgmma is
    // issued in every half-iteration, the last one on stage st's tile again (result unused), so no
    // wgmma sits on a conditional path (ptxas serializes those, C7518). H200: logits 0-12 % faster
    // in decode, 64-head prefill logits 5 % slower; keys 0-11 % faster (docs/kernels/indexer.md,
    // "The TMA kernel").
    const RegisterCoef<NI> coef(scoef, lane & 3);
    float acc0[1][NI / 2] = {}, acc1[1][NI / 2] = {};
    auto tile_after = [&](int st) { return st + 1 < nst ? wait_full(st + 1) : stiles_s + (st % S) * kTileBytes; };
    if (nst > 0) start_tile_scores<NI, 1>(acc0, wait_full(0), sq_s);
#pragma unroll 1
    for (int st = 0; st < nst; st += 2) {
      // Stage st in flight in acc0.
      const uint32_t t1 = tile_after(st);
      wg::wgmma_wait<0>();
      fence_all<NI, 1>(acc0);
      start_tile_scores<NI, 1>(acc1, t1, sq_s);
      finish(st, acc0, coef);
      if (st + 1 >= nst) break;
      // Stage st + 1 in flight in acc1.
      const uint32_t t2 = tile_after(st + 1);
      wg::wgmma_wait<0>();
      fence_all<NI, 1>(acc1);
      start_tile_scores<NI, 1>(acc0, t2, sq_s);
      finish(st + 1, acc1, coef);
    }
    wg::wgmma_wait<0>();
    fence_all<NI, 1>(acc0);
    fence_all<NI, 1>(acc1);
  } else {
    const SharedCoef coef{scoef, lane & 3};
    float acc[NR][NI / 2] = {};
#pragma unroll 1
    for (int st = 0; st < nst; ++st) {
      tile_scores<NI, NR>(acc, wait_full(st), sq_s);
      finish(st, acc, coef);
    }
  }
  if constexpr (OUT == kOutAdmit) {
    if (ad.fill > 0) flush_candidates(a, w.t, ad, lane);
  }
  fill_invisible<OUT>(a, w, w.c0 + nst * kTileTokens, tid, 128);
  if (a.spans != nullptr && threadIdx.x == 0) cuda::span_end(a.spans, a.span, span_t0);
}

}  // namespace latte::hopper_indexer
