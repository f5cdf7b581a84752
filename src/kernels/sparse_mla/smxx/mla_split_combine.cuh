// The split combine shared by the forward kernels (mla_fwd_mma_sync_cpasync.cuh, the row-tile kernel, and
// mla_sparse_fp8_fewheads_mma_sync.cu): every split CTA of a (group, row tile) writes its
// normalized partial O (bf16) and lse (log2) to the workspace; the last CTA to arrive (a
// counter, not part of any sum) combines the splits in split order and drops the partials from
// L2 without a write-back. Included by CUDA translation units only.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/sparse_mla/mla_params.hpp"
#include "kernels/common/ldmatrix.cuh"

namespace latte::cuda_sparse_mla {

// A launch's split bookkeeping (the same for every kernel of the backend).
struct LaunchArgs {
  int row_tiles;
  int nsplit;
  int chunk;
  int64_t group_begin;
  __nv_bfloat16* part_o;
  float* part_lse;
  int* counters;  // [groups in slab][row_tiles], zero at launch
  int chunks_per_cta = 1;  // the row-group kernel: consecutive splits run by one CTA (the others: 1)
};

// Called by every thread of the CTA after its partial is written: true in every thread of the
// CTA that arrives last of the `expected` CTAs counting on `counter` (whose writes are then
// visible to it). `flag`: one int of shared memory.
__device__ __forceinline__ bool last_to_arrive(int* counter, int expected, int* flag) {
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    const int done = atomicAdd(counter, 1);
    *flag = done == expected - 1 ? 1 : 0;  // every split's every dim part is written
  }
  __syncthreads();
  if (*flag == 0) return false;
  __threadfence();
  return true;
}

// The combine of the rows [row0, row0 + kWarps * kWarpRows) of group g_local (rows past `rows`
// skipped): warp w takes rows w, w + kWarps, ... kLowRegs: the kernel's register cap is tight
// (3 CTAs per SM), so fewer splits are unrolled.
template <int kWarps, int kWarpRows, bool kLowRegs>
__device__ __forceinline__ void combine_splits(const MlaParams& p, const LaunchArgs& la, int64_t g_local,
                                               int64_t grp, int row0, int rows, int nsplit_g) {
  using namespace latte::cuda::sm80;
  constexpr int kRowBatch = kWarpRows < 4 ? kWarpRows : 4;
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  // A warp's rows (warp, warp + kWarps, ...) in batches of up to four live rows whose loads
  // are in flight together; each row's sums run over the splits in split order (bitwise the
  // same result as one row at a time). A batch with rows past `rows` (the last row tile of a
  // call whose rows are not a multiple of R, e.g. 8 heads) goes one live row at a time.
  auto combine_rows = [&](auto nb, int r_first) {
    constexpr int NB = decltype(nb)::value;
    int64_t base[NB];
    float mx[NB];
#pragma unroll
    for (int j = 0; j < NB; ++j) {
      base[j] = (g_local * rows + row0 + r_first + j * kWarps) * la.nsplit;
      mx[j] = -INFINITY;
    }
    for (int s2 = lane; s2 < nsplit_g; s2 += 32) {
#pragma unroll
      for (int j = 0; j < NB; ++j) mx[j] = fmaxf(mx[j], __ldcg(la.part_lse + base[j] + s2));
    }
    bool any[NB];  // false: no split saw a visible token (the row's output is zeros)
    float accv[NB][16];
    float wsum[NB];
#pragma unroll
    for (int j = 0; j < NB; ++j) {
#pragma unroll
      for (int off = 16; off >= 1; off >>= 1) mx[j] = fmaxf(mx[j], __shfl_xor_sync(0xffffffffu, mx[j], off));
      any[j] = mx[j] != -INFINITY;
      wsum[j] = 0.f;
#pragma unroll
      for (int d = 0; d < 16; ++d) accv[j][d] = 0.f;
    }
    // Splits unrolled so that about eight (row, split) loads are in flight for one or two rows
    // (16-row tiles of small calls, where the combine ends the call); one split at a time for
    // four rows (more spills) and, mostly, under the 3-CTA register cap.
    constexpr int kSplitUnroll = kLowRegs ? (NB == 1 ? 2 : 1) : (NB >= 4 ? 1 : 8 / NB);
#pragma unroll kSplitUnroll
    for (int s2 = 0; s2 < nsplit_g; ++s2) {
#pragma unroll
      for (int j = 0; j < NB; ++j) {
        const float lse2 = __ldcg(la.part_lse + base[j] + s2);
        const uint4* src = reinterpret_cast<const uint4*>(la.part_o + (base[j] + s2) * 512 + lane * 16);
        const uint4 v0 = __ldcg(src), v1 = __ldcg(src + 1);
        const float w = any[j] ? exp2f(lse2 - mx[j]) : 0.f;
        wsum[j] += w;
        const uint32_t u[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
#pragma unroll
        for (int d = 0; d < 8; ++d) {
          accv[j][2 * d] += w * __uint_as_float(u[d] << 16);
          accv[j][2 * d + 1] += w * __uint_as_float(u[d] & 0xFFFF0000u);
        }
      }
    }
#pragma unroll
    for (int j = 0; j < NB; ++j) {
      const int row = row0 + r_first + j * kWarps;
      const float inv = wsum[j] > 0.f ? 1.f / wsum[j] : 0.f;
      const int i = row / p.heads, h = row - (row / p.heads) * p.heads;
      __nv_bfloat16* const dst = p.out + grp * p.o_sg + i * p.o_si + h * p.o_sh + lane * 16;
      uint32_t o[8];
#pragma unroll
      for (int d = 0; d < 8; ++d) o[d] = any[j] ? pack_bf16x2(accv[j][2 * d] * inv, accv[j][2 * d + 1] * inv) : 0u;
      reinterpret_cast<uint4*>(dst)[0] = make_uint4(o[0], o[1], o[2], o[3]);
      reinterpret_cast<uint4*>(dst)[1] = make_uint4(o[4], o[5], o[6], o[7]);
      if (lane == 0 && p.lse != nullptr) {
        p.lse[grp * p.l_sg + i * p.l_si + h * p.l_sh] =
            any[j] ? (mx[j] + log2f(wsum[j])) * 0.6931471805599453f : -INFINITY;
      }
      // the partials of this row are consumed: drop them from L2 without a write-back
      __syncwarp();
      const int lines = nsplit_g * 8;  // 1024 B per split = 8 lines of 128 B
      for (int ln = lane; ln < lines; ln += 32)
        discard_l2_line(reinterpret_cast<const uint8_t*>(la.part_o + base[j] * 512) + ln * 128);
    }
  };
#pragma unroll 1
  for (int b = 0; b < kWarpRows / kRowBatch; ++b) {
    const int r_first = warp + b * kRowBatch * kWarps;
    const int live = min(kRowBatch, max(0, (rows - row0 - r_first + kWarps - 1) / kWarps));
    if (live == kRowBatch) {
      combine_rows(std::integral_constant<int, kRowBatch>{}, r_first);
    } else {
      for (int j = 0; j < live; ++j) combine_rows(std::integral_constant<int, 1>{}, r_first + j * kWarps);
    }
  }
}

}  // namespace latte::cuda_sparse_mla
