// What hopper.indexer's two logits kernels share (logits_tma.cuh, logits_cpasync.cuh): the
// arguments, the CTA's token group (rows, visible lengths), the queries staged as the wgmma B
// operand, the per-stage wgmma batch, and the epilogue that turns accumulators into logits.
//
// A CTA = (a group of G query tokens that share one block_table row) x (a chunk of positions).
// Column n = g * hp + h of the B operand is token t0 + g, head h (hp: heads padded to a power
// of two >= 8); K is the A operand, 64 positions per wgmma. The epilogue adds coef * ReLU(acc)
// per column (coef = w * |q_scale|; the queries of heads with a negative q_scale are staged
// negated), sums a token's heads over the 4 lanes of a quad, multiplies by k_scale.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/async_copy.cuh"
#include "cuda/indexer_problem.hpp"
#include "cuda/sm90a_wgmma.cuh"

namespace latte::hopper_indexer {

namespace wg = cuda::sm90a;

constexpr int kTileTokens = 64;  // positions per stage: wgmma m
constexpr int kTileBytes = kTileTokens * 128;
constexpr int kMaxColumns = 256;  // wgmma n of one CTA (G x padded heads), 4 x n64 at most
constexpr int kMaxGroup = 32;

struct LogitsArgs {
  cuda::IndexerProblem p;
  float* logits;
  int64_t lg_st, lg_ss, logits_len;
  int64_t vis_cap;  // min(max_len, logits_len)
  int hp, group, num_groups, chunk_len;
  int q_vec;        // q rows are 16-byte aligned
  int hp8_shift;    // log2(hp / 8)
  int piece_rows;   // TMA kernel: rows of one copy, min(block_size, 64)
  int piece_shift;  // log2(piece_rows)
};

__device__ __forceinline__ int token_row(const cuda::IndexerProblem& p, int t) {
  const int row = p.token_request ? p.token_request[static_cast<int64_t>(t) * p.tr_s] : t;
  return row < 0 || row >= p.batch ? -1 : row;
}

// The CTA's tokens: stok[g] = block_table row (-1: none, -2: past the last token),
// stok[kMaxGroup + g] = visible positions (threads tid < group).
__device__ __forceinline__ void stage_tokens(const LogitsArgs& a, int t0, int tid, int* stok) {
  const cuda::IndexerProblem& p = a.p;
  if (tid < a.group) {
    const int t = t0 + tid;
    int row = -2, vis = 0;
    if (t < p.tokens) {
      row = token_row(p, t);
      const int64_t v = row < 0 ? 0 : p.visible_lens[static_cast<int64_t>(t) * p.vl_s];
      vis = static_cast<int>(v < 0 ? 0 : (v < a.vis_cap ? v : a.vis_cap));
    }
    stok[tid] = row;
    stok[kMaxGroup + tid] = vis;
  }
}

// The queries into sq (NC rows of 128 bytes, swizzled) and coef per column into scoef;
// threads tid < nthreads share the work.
template <int NC>
__device__ __forceinline__ void stage_queries(const LogitsArgs& a, int t0, int tid, int nthreads, uint8_t* sq,
                                              float* scoef) {
  const cuda::IndexerProblem& p = a.p;
  for (int u = tid; u < NC * 8; u += nthreads) {
    const int n = u >> 3, j = u & 7;
    const int g = n / a.hp, h = n % a.hp, t = t0 + g;
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (g < a.group && t < p.tokens && h < p.heads) {
      const uint8_t* src = static_cast<const uint8_t*>(p.q) + static_cast<int64_t>(t) * p.q_st +
                           static_cast<int64_t>(h) * p.q_sh + 16 * j;
      if (a.q_vec) {
        v = *reinterpret_cast<const uint4*>(src);
      } else {
        uint32_t w[4];
#pragma unroll
        for (int i = 0; i < 4; ++i)
          w[i] = src[4 * i] | (src[4 * i + 1] << 8) | (src[4 * i + 2] << 16) | (static_cast<uint32_t>(src[4 * i + 3]) << 24);
        v = make_uint4(w[0], w[1], w[2], w[3]);
      }
      const float qs = p.q_scale ? p.q_scale[static_cast<int64_t>(t) * p.qs_st + static_cast<int64_t>(h) * p.qs_sh] : 1.0f;
      if (qs < 0.0f) {
        v.x ^= 0x80808080u;
        v.y ^= 0x80808080u;
        v.z ^= 0x80808080u;
        v.w ^= 0x80808080u;
      }
    }
    *reinterpret_cast<uint4*>(sq + wg::sw128_offset(n, j)) = v;
  }
  for (int n = tid; n < NC; n += nthreads) {
    const int g = n / a.hp, h = n % a.hp, t = t0 + g;
    float f = 0.0f;
    if (g < a.group && t < p.tokens && h < p.heads) {
      const float qs = p.q_scale ? p.q_scale[static_cast<int64_t>(t) * p.qs_st + static_cast<int64_t>(h) * p.qs_sh] : 1.0f;
      f = p.weights[static_cast<int64_t>(t) * p.w_st + static_cast<int64_t>(h) * p.w_sh] * fabsf(qs);
    }
    scoef[n] = f;
  }
}

// The tokens of the group that share row stok[gi] (active, a bit per token) and the most
// positions any of them sees; false when an earlier token already had this row (its pass ran).
__device__ __forceinline__ bool row_class(const int* stok, int group, int gi, uint32_t& active, int& maxvis) {
  const int row = stok[gi];
  for (int gj = 0; gj < gi; ++gj)
    if (stok[gj] == row) return false;
  active = 0;
  maxvis = 0;
  for (int gj = gi; gj < group; ++gj) {
    if (stok[gj] == row) {
      active |= 1u << gj;
      maxvis = max(maxvis, stok[kMaxGroup + gj]);
    }
  }
  return true;
}

// Starts acc = the 64 x NC dot products of the K tile at tile_s with the queries at sq_s, as
// one committed wgmma group (wgmma_wait, then fence_accumulators, before reading acc).
template <int NI, int NR>
__device__ __forceinline__ void start_tile_scores(float (&acc)[NR][NI / 2], uint32_t tile_s, uint32_t sq_s) {
  // k step kk: both start addresses 32 * kk bytes on, + 2 * kk in the descriptors' address
  // field (in 16-byte units; no carry out of it below 256 KB of shared memory).
  const uint64_t da = wg::sw128_kmajor_desc(tile_s), db = wg::sw128_kmajor_desc(sq_s);
  wg::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
    for (int r = 0; r < NR; ++r) wg::WgmmaE4m3<NI>::mma(acc[r], da + 2 * kk, db + r * NI * 8 + 2 * kk, kk > 0);
  }
  wg::wgmma_commit();
#pragma unroll
  for (int r = 0; r < NR; ++r) wg::fence_accumulators(acc[r]);
}

template <int NI, int NR>
__device__ __forceinline__ void fence_all(float (&acc)[NR][NI / 2]) {
#pragma unroll
  for (int r = 0; r < NR; ++r) wg::fence_accumulators(acc[r]);
}

// acc = the 64 x NC dot products of the K tile at tile_s with the queries at sq_s.
template <int NI, int NR>
__device__ __forceinline__ void tile_scores(float (&acc)[NR][NI / 2], uint32_t tile_s, uint32_t sq_s) {
  start_tile_scores<NI, NR>(acc, tile_s, sq_s);
  wg::wgmma_wait<0>();
  fence_all<NI, NR>(acc);
}

// coef of this lane's columns 8 jg + 2 (lane % 4) + {0, 1}, from shared memory.
struct SharedCoef {
  const float* scoef;
  int c;
  __device__ __forceinline__ float2 operator()(int jg) const {
    return *reinterpret_cast<const float2*>(scoef + jg * 8 + 2 * c);
  }
};

// The same held in registers (one CTA of at most 64 columns: 16 registers), loaded once.
template <int NI>
struct RegisterCoef {
  float2 v[NI / 8];
  __device__ __forceinline__ RegisterCoef(const float* scoef, int c) {
#pragma unroll
    for (int jg = 0; jg < NI / 8; ++jg) v[jg] = *reinterpret_cast<const float2*>(scoef + jg * 8 + 2 * c);
  }
  __device__ __forceinline__ float2 operator()(int jg) const { return v[jg]; }
};

// This thread's rows of the tile (pos_a and pos_a + 8; their k_scale and readability) into
// the logits of the active tokens: -inf where not visible, nothing past c1. ONE: the CTA has
// one token (every column is one of its heads; decode), summed in one pass with one flush;
// else a token's heads end at every hp / 8-th column block (a runtime check per block).
template <int NI, int NR, bool ONE, typename Coef>
__device__ __forceinline__ void write_logits(const float (&acc)[NR][NI / 2], const LogitsArgs& a, const Coef& coef,
                                             const int* stok, uint32_t active, int t0, int pos_a, int c1,
                                             float sc_a, float sc_b, bool ok_a, bool ok_b, int lane) {
  constexpr int kBlocks = NI / 8;  // 8-column blocks per wgmma
  const int c = lane & 3, hp8 = a.hp >> 3;  // hp8 = 1 << hp8_shift
  const int pos_b = pos_a + 8;
  float run_a = 0.0f, run_b = 0.0f;
#pragma unroll
  for (int r = 0; r < NR; ++r) {
#pragma unroll
    for (int jb = 0; jb < kBlocks; ++jb) {
      const int jg = r * kBlocks + jb;
      const float2 cf = coef(jg);
      run_a = fmaf(cf.x, fmaxf(acc[r][4 * jb + 0], 0.0f), run_a);
      run_a = fmaf(cf.y, fmaxf(acc[r][4 * jb + 1], 0.0f), run_a);
      run_b = fmaf(cf.x, fmaxf(acc[r][4 * jb + 2], 0.0f), run_b);
      run_b = fmaf(cf.y, fmaxf(acc[r][4 * jb + 3], 0.0f), run_b);
      const bool last = ONE ? jg == NR * kBlocks - 1 : ((jg + 1) & (hp8 - 1)) == 0;
      if (last) {  // the last block of token g: uniform over the CTA
        const int g = ONE ? 0 : jg >> a.hp8_shift;
        run_a += __shfl_xor_sync(0xffffffffu, run_a, 1);
        run_a += __shfl_xor_sync(0xffffffffu, run_a, 2);
        run_b += __shfl_xor_sync(0xffffffffu, run_b, 1);
        run_b += __shfl_xor_sync(0xffffffffu, run_b, 2);
        if ((active >> g) & 1u) {
          const int vis = stok[kMaxGroup + g];
          float* out = a.logits + static_cast<int64_t>(t0 + g) * a.lg_st;
          if (c == 0 && pos_a < c1) out[static_cast<int64_t>(pos_a) * a.lg_ss] = ok_a && pos_a < vis ? run_a * sc_a : -INFINITY;
          if (c == 1 && pos_b < c1) out[static_cast<int64_t>(pos_b) * a.lg_ss] = ok_b && pos_b < vis ? run_b * sc_b : -INFINITY;
        }
        run_a = 0.0f;
        run_b = 0.0f;
      }
    }
  }
}

// -inf for the active tokens at positions [from, c1) (past the stages a pass computed).
__device__ __forceinline__ void fill_invisible(const LogitsArgs& a, uint32_t active, int t0, int64_t from, int64_t c1,
                                               int tid, int nthreads) {
  for (int g = 0; g < a.group; ++g) {
    if (!((active >> g) & 1u)) continue;
    float* out = a.logits + static_cast<int64_t>(t0 + g) * a.lg_st;
    for (int64_t s = from + tid; s < c1; s += nthreads) out[s * a.lg_ss] = -INFINITY;
  }
}

}  // namespace latte::hopper_indexer
