// indexer_topk of a few query tokens in one cooperative kernel (sm_80+): each CTA scores its
// slice of one token's row with mma.sync straight from the K pages into shared memory, then
// the row's CTAs select the row's top-k together (topk_spread_grid_barrier.cuh's spread_select).
// For one to a few tokens the separate keys pass and the launch between it and the top-k were
// a third of the call (docs/kernels/indexer.md, "Batch 1"); here the keys never leave the SM.
//
// Grid rows x S of kSpreadThreads, launched cooperatively: CTA (r, s) holds positions
// [s L, s L + L) of token r. Each warp scores chunks of 32 positions: lane i locates position
// i of the chunk (its block, -1 where missing or past the row) and loads its scale; each lane
// then loads its fragment bytes of four rows (two m-tiles of 16: rows g, g + 8) straight from
// the page, 2 x 16 bytes a row, the chunk's loads all in flight before any math. The first
// chunk's loads go out before the queries are staged (the kernel's start is a chain of global
// round trips: block ids, then K; the queries overlap them). The math is
// indexer_score_mma_sync.cuh's: the same k permutation (lane (g, c) reads bytes [32c, 32c + 32)
// of its rows), the same query fragments (stage_query_fragments), the same epilogue, so the keys
// equal cuda.indexer's keys pass bit for bit for the same MATH.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/kernel_span.cuh"
#include "kernels/common/mma_sync.cuh"
#include "kernels/common/pdl.cuh"
#include "kernels/indexer/smxx/indexer_score_mma_sync.cuh"
#include "kernels/topk/radix_select.cuh"
#include "kernels/topk/topk_spread_grid_barrier.cuh"

namespace latte::cuda_indexer {

// The longest slice (positions per CTA) the kernel takes: its keys sit in shared memory beside
// the queries (128 heads: 32 KB) within the portable limit.
constexpr int kScoredSpreadMaxSlice = 4096;

// Shared memory: the slice's keys, then the queries' fragments and coefficients.
__host__ __device__ constexpr int scored_spread_q_offset(int slice_len) { return (slice_len * 4 + 15) / 16 * 16; }
__host__ __device__ constexpr int scored_spread_smem(int slice_len, int hp) {
  return scored_spread_q_offset(slice_len) + hp / 8 * (2048 + 4 * 8);
}

template <int MATH>
__global__ void __launch_bounds__(cuda::kSpreadThreads) indexer_topk_scored_spread_kernel(const ScoreArgs sa,
                                                                                         const cuda::TopkArgs a,
                                                                                         const cuda::SpreadArgs g) {
  static_assert(MATH == kMathF16 || MATH == kMathBf16, "the 16-bit paths (e4m3 widened exactly)");
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ cuda::SpreadShared sh;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g4 = lane >> 2, c = lane & 3;
  const cuda::SpanStart span_t0 = cuda::span_begin(cuda::spans_of(a.prof), cuda::kSpanTopk);
  const cuda::SpreadSlice sl = cuda::spread_slice<cuda::kSrcKeys>(a, g);
  uint32_t* ks = reinterpret_cast<uint32_t*>(smem);
  uint8_t* sq = smem + scored_spread_q_offset(g.slice_len);
  const int NT = sa.hp / 8;
  auto* scoef = reinterpret_cast<float2*>(sq + NT * 2048);

  cuda::pdl_wait();  // q, K and the cleared state come from the work before this kernel
  cuda::pdl_launch_dependents();
  cuda::prof_mark(a.prof, blockIdx.x, 0);

  const int bs = sa.block_size;
  const uint8_t* kc = sa.k_cache;
  // Lane i of a warp's chunk at `base`: position i's K row byte offset (-1: not scored) and
  // scale; the lane holding a block's first position of the slice records the block for the
  // writes (physical output).
  auto locate = [&](int base, int64_t& off, float& scale) {
    const int64_t p = sl.s0 + base + lane;
    off = -1;
    scale = 0.0f;
    if (base + lane >= sl.cnt) return;
    const int64_t bi = p / bs;
    const int blk = cuda::spread_block(a, sl.brow, bi);
    if (a.physical && (p % bs == 0 || base + lane == 0) && bi - sl.blk0 < sl.nblk) sh.blocks[bi - sl.blk0] = blk;
    if (blk < 0) return;
    const int64_t page = static_cast<int64_t>(blk) * sa.page_stride;
    const int o = static_cast<int>(p % bs);
    off = page + static_cast<int64_t>(o) * 128;
    scale = __ldg(reinterpret_cast<const float*>(kc + page + static_cast<int64_t>(bs) * 128) + o);
  };
  // This lane's fragment bytes of rows (mt, h): chunk row 16 mt + 8 h + g4, bytes [32c, 32c + 32).
  auto fetch = [&](int64_t off, uint4 (&x)[2][2][2]) {
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t o = __shfl_sync(0xffffffffu, off, 16 * mt + 8 * h + g4);
        if (o >= 0) {
          const uint4* src = reinterpret_cast<const uint4*>(kc + o + 32 * c);
          x[mt][h][0] = __ldg(src);
          x[mt][h][1] = __ldg(src + 1);
        } else {
          x[mt][h][0] = x[mt][h][1] = make_uint4(0u, 0u, 0u, 0u);
        }
      }
  };
  // The warp's first chunk goes out before the queries are staged: the two latencies overlap.
  int base = 32 * warp;
  int64_t off = -1;
  float scale = 0.0f;
  uint4 x[2][2][2];
  if (base < sl.cnt) {
    locate(base, off, scale);
    fetch(off, x);
  }
  stage_query_fragments<MATH, cuda::kSpreadThreads>(sa, sl.row, 1, sq, scoef);
  cuda::spread_clear_last_pass(g, sl);
  __syncthreads();

  for (; base < sl.cnt; base += cuda::kSpreadThreads) {
    if (base != 32 * warp) {
      locate(base, off, scale);
      fetch(off, x);
    }
    float part[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
      const uint32_t wr[8] = {x[mt][0][0].x, x[mt][0][0].y, x[mt][0][0].z, x[mt][0][0].w,
                              x[mt][0][1].x, x[mt][0][1].y, x[mt][0][1].z, x[mt][0][1].w};
      const uint32_t vr[8] = {x[mt][1][0].x, x[mt][1][0].y, x[mt][1][0].z, x[mt][1][0].w,
                              x[mt][1][1].x, x[mt][1][1].y, x[mt][1][1].z, x[mt][1][1].w};
      uint32_t af[8][4];
#pragma unroll
      for (int kk = 0; kk < 8; ++kk) {
        if (MATH == kMathF16) {
          af[kk][0] = cuda::e4m3x2_to_f16x2(wr[kk] & 0xFFFFu);
          af[kk][1] = cuda::e4m3x2_to_f16x2(vr[kk] & 0xFFFFu);
          af[kk][2] = cuda::e4m3x2_hi_to_f16x2(wr[kk]);
          af[kk][3] = cuda::e4m3x2_hi_to_f16x2(vr[kk]);
        } else {
          af[kk][0] = cuda::e4m3x2_to_bf16x2(wr[kk] & 0xFFFFu);
          af[kk][1] = cuda::e4m3x2_to_bf16x2(vr[kk] & 0xFFFFu);
          af[kk][2] = cuda::e4m3x2_to_bf16x2(wr[kk] >> 16);
          af[kk][3] = cuda::e4m3x2_to_bf16x2(vr[kk] >> 16);
        }
      }
      for (int nt = 0; nt < NT; ++nt) {
        uint32_t qb[16];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const uint4 b = *reinterpret_cast<const uint4*>(sq + (nt * 4 + j) * 512 + lane * 16);
          qb[4 * j + 0] = b.x; qb[4 * j + 1] = b.y; qb[4 * j + 2] = b.z; qb[4 * j + 3] = b.w;
        }
        const float2 cf = scoef[nt * 4 + c];
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int kk = 0; kk < 8; ++kk) {
          if (MATH == kMathF16) cuda::mma_f16_m16n8k16(acc, af[kk], qb[2 * kk], qb[2 * kk + 1]);
          else cuda::mma_bf16_m16n8k16(acc, af[kk], qb[2 * kk], qb[2 * kk + 1]);
        }
        part[mt][0] = add_relu_coef(add_relu_coef(part[mt][0], acc[0], cf.x), acc[1], cf.y);
        part[mt][1] = add_relu_coef(add_relu_coef(part[mt][1], acc[2], cf.x), acc[3], cf.y);
      }
    }
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        part[mt][h] += __shfl_xor_sync(0xffffffffu, part[mt][h], 1);
        part[mt][h] += __shfl_xor_sync(0xffffffffu, part[mt][h], 2);
        part[mt][h] *= __shfl_sync(0xffffffffu, scale, 16 * mt + 8 * h + g4);
      }
    // This lane's row of the chunk: (mt, h) = (c >> 1, c & 1).
    const int r = 16 * (c >> 1) + 8 * (c & 1) + g4;
    const bool scored = __shfl_sync(0xffffffffu, off, r) >= 0;
    const float score = c == 0 ? part[0][0] : c == 1 ? part[0][1] : c == 2 ? part[1][0] : part[1][1];
    if (base + r < sl.cnt) ks[base + r] = scored ? cuda::score_key(score) : 0u;
  }
  cuda::prof_mark(a.prof, blockIdx.x, 1);
  const int none[4] = {0, 0, 0, 0};
  cuda::spread_select(a, g, sl, ks, sh, false, none);
  cuda::span_end(cuda::spans_of(a.prof), cuda::kSpanTopk, span_t0);
}

}  // namespace latte::cuda_indexer
