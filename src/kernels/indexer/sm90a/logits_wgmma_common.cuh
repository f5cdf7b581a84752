// What hopper.indexer's two score kernels share (logits_wgmma_tma_warpspecialized.cuh, logits_wgmma_cpasync.cuh): the
// arguments, the token's row and visible length, its queries staged as the wgmma B operand, the
// per-stage wgmma batch, and the epilogues that turn accumulators into what a kernel's OUT
// mode writes: f32 logits, u32 score keys for the exact top-k (kernels/topk/topk_launch.hpp), the fused
// path's sampled keys, or its admitted candidates (indexer_topk_sm90a.cpp, "fused path").
//
// A CTA = one query token x a chunk of positions. Column h of the B operand is head h (heads
// padded with zeros to hp, a power of two >= 8); K is the A operand, 64 positions per wgmma. The
// epilogue adds coef * ReLU(acc) per column (coef = w * |q_scale|; the queries of heads with a
// negative q_scale are staged negated), sums the heads over the 4 lanes of a quad, multiplies
// by k_scale. (Query tokens of one request sharing a CTA's K reads, up to 256 columns, measured
// slower: prefill 4096 x 32K at 64 heads 5990 us with four tokens per CTA, 4179 with two, 3930
// with one, H200.)
#pragma once

#include "kernels/topk/key_histogram.cuh"
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/common/cp_async.cuh"
#include "kernels/topk/fused_threshold.cuh"
#include "kernels/indexer/indexer_params.hpp"
#include "kernels/common/kernel_span.cuh"
#include "kernels/common/pdl.cuh"
#include "kernels/topk/radix_select.cuh"
#include "kernels/topk/running_topk.cuh"
#include "kernels/common/sm90a_wgmma.cuh"

namespace latte::hopper_indexer {

namespace wg = cuda::sm90a;

constexpr int kTileTokens = 64;  // positions per stage: wgmma m
constexpr int kTileBytes = kTileTokens * 128;

// What a score kernel writes (its OUT template parameter).
enum ScoreOut : int {
  kOutLogits = 0,  // f32 logits (indexer_logits)
  kOutKeys = 1,    // u32 score keys (indexer_topk's unfused path)
  kOutSample = 2,  // the fused path's sample pass: keys at `samples` evenly spaced positions (cp.async kernel)
  kOutAdmit = 3,   // the fused path's admission: candidates >= the token's threshold into its list (TMA kernel)
  kOutRepair = 4,  // the fused path's repair: each CTA's topk best candidates, for failed tokens (cp.async kernel)
};

// The per-warp candidate buffer of the admission epilogue: a stage adds at most 16 per warp
// (one per quad and row), flushed to the token's list once it holds more than 48.
constexpr int kAdmitBuffer = 64;

struct LogitsArgs {
  cuda::IndexerParams p;
  float* logits;    // logits [T, logits_len] (strides lg_st, lg_ss); or
  uint32_t* keys;   // kOutKeys / kOutSample: score keys [T, lg_st] (0 = not visible), contiguous
  int* key_hist;    // kOutKeys, non-null: the spread top-k's first pass per token (key_histogram.cuh)
  int64_t lg_st, lg_ss;
  int logits_len;   // < 2^31 (the launcher refuses more): positions are ints
  int vis_cap;      // min(max_len, logits_len)
  int chunk_len;
  int q_vec;        // q rows are 16-byte aligned
  int piece_rows;   // TMA kernel: rows of one copy, min(block_size, 64)
  // The fused path (indexer_topk_sm90a.cpp). kOutSample: `samples` keys per token into keys (lg_st =
  // samples), the token's count zeroed. kOutAdmit: tau from those keys (written to row_tau),
  // candidates into list_keys / list_pos (list_cap per token), row_count incremented.
  // kOutRepair: only tokens whose admission failed (row_count, row_tau); each CTA keeps a running
  // buffer of repair_cap candidates in shared memory and writes its topk best to
  // cand_keys / cand_pos [T, chunks, topk].
  int samples;
  int topk;
  int debug;  // LATTE_HOPPER_INDEXER_DEBUG: 4 / 8 force the repair (cuda::fused_sample_rank)
  const uint32_t* sample_keys;
  uint32_t* row_tau;
  int* row_count;
  uint32_t* list_keys;
  int32_t* list_pos;
  int list_cap;
  int repair_cap;
  uint32_t* cand_keys;
  int32_t* cand_pos;
  unsigned long long* spans;  // LATTE_CUDA_TOPK_PROF=1: kernel spans (kernels/common/kernel_span.cuh), else null
  int span;                   // the span slot of this pass
};

// The CTA's work: token t (blockIdx.x % T) over positions [c0, c1) (chunk blockIdx.x / T), its
// block_table row (-1: none), the positions it sees, the stages of 64 positions that hold
// visible ones (nst, up to s_end = min(c1, vis)) and its logits or keys row.
struct TokenChunk {
  int t, row, c0, c1, vis, s_end, nst;
  int span;  // kOutSample: the visible positions the samples spread over (vis is then `samples`)
  float* out;
  uint32_t* keys;
};

template <int OUT = kOutLogits>
__device__ __forceinline__ TokenChunk token_chunk(const LogitsArgs& a) {
  const cuda::IndexerParams& p = a.p;
  TokenChunk w;
  w.t = static_cast<int>(blockIdx.x % static_cast<unsigned>(p.tokens));
  const int chunk = static_cast<int>(blockIdx.x / static_cast<unsigned>(p.tokens));
  w.c0 = chunk * a.chunk_len;
  w.c1 = w.c0 + a.chunk_len < a.logits_len ? w.c0 + a.chunk_len : a.logits_len;
  const int row = p.token_request ? p.token_request[static_cast<int64_t>(w.t) * p.tr_s] : w.t;
  w.row = row < 0 || row >= p.batch ? -1 : row;
  int64_t v = w.row < 0 ? 0 : p.visible_lens[static_cast<int64_t>(w.t) * p.vl_s];
  if (p.vl_div > 1 && v > 0) v /= p.vl_div;
  w.vis = static_cast<int>(v < 0 ? 0 : (v < a.vis_cap ? v : a.vis_cap));
  if (OUT == kOutSample) {
    // Sample space: index i < samples stands for position i * vis / samples (position_of).
    w.span = w.vis;
    w.vis = w.vis > 0 ? a.samples : 0;
  }
  w.s_end = w.c1 < w.vis ? w.c1 : w.vis;
  w.nst = w.s_end > w.c0 ? (w.s_end - w.c0 + kTileTokens - 1) / kTileTokens : 0;
  w.out = a.logits ? a.logits + static_cast<int64_t>(w.t) * a.lg_st : nullptr;
  w.keys = a.keys ? a.keys + static_cast<int64_t>(w.t) * a.lg_st : nullptr;
  return w;
}

// Sample i's position: i * span / samples (span < 2^31, samples <= 2048).
__device__ __forceinline__ int sample_position(int i, int span, int samples) {
  return static_cast<int>(static_cast<int64_t>(i) * span / samples);
}

// Token t's queries into sq (NC rows of 128 bytes, swizzled) and coef per column into scoef;
// threads tid < nthreads share the work.
template <int NC>
__device__ __forceinline__ void stage_queries(const LogitsArgs& a, int t, int tid, int nthreads, uint8_t* sq,
                                              float* scoef) {
  const cuda::IndexerParams& p = a.p;
  for (int u = tid; u < NC * 8; u += nthreads) {
    const int h = u >> 3, j = u & 7;
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (h < p.heads) {
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
    *reinterpret_cast<uint4*>(sq + wg::sw128_offset(h, j)) = v;
  }
  for (int h = tid; h < NC; h += nthreads) {
    float f = 0.0f;
    if (h < p.heads) {
      const float qs = p.q_scale ? p.q_scale[static_cast<int64_t>(t) * p.qs_st + static_cast<int64_t>(h) * p.qs_sh] : 1.0f;
      f = p.weights[static_cast<int64_t>(t) * p.w_st + static_cast<int64_t>(h) * p.w_sh] * fabsf(qs);
    }
    scoef[h] = f;
  }
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

// The token's scores of this thread's rows of the tile (pos_a and pos_a + 8), summed over the
// heads: every lane of a quad gets both.
template <int NI, int NR, typename Coef>
__device__ __forceinline__ float2 head_sums(const float (&acc)[NR][NI / 2], const Coef& coef) {
  float run_a = 0.0f, run_b = 0.0f;
#pragma unroll
  for (int r = 0; r < NR; ++r) {
#pragma unroll
    for (int jb = 0; jb < NI / 8; ++jb) {
      const float2 cf = coef(r * (NI / 8) + jb);
      run_a = fmaf(cf.x, fmaxf(acc[r][4 * jb + 0], 0.0f), run_a);
      run_a = fmaf(cf.y, fmaxf(acc[r][4 * jb + 1], 0.0f), run_a);
      run_b = fmaf(cf.x, fmaxf(acc[r][4 * jb + 2], 0.0f), run_b);
      run_b = fmaf(cf.y, fmaxf(acc[r][4 * jb + 3], 0.0f), run_b);
    }
  }
  run_a += __shfl_xor_sync(0xffffffffu, run_a, 1);
  run_a += __shfl_xor_sync(0xffffffffu, run_a, 2);
  run_b += __shfl_xor_sync(0xffffffffu, run_b, 1);
  run_b += __shfl_xor_sync(0xffffffffu, run_b, 2);
  return make_float2(run_a, run_b);
}

// This thread's rows of the tile (pos_a and pos_a + 8; their k_scale and readability) into the
// token's row: logits (-inf where not visible) or score keys (0 where not visible); nothing
// past c1.
template <int OUT, int NI, int NR, typename Coef>
__device__ __forceinline__ void write_scores(const float (&acc)[NR][NI / 2], const LogitsArgs& a, const Coef& coef,
                                             const TokenChunk& w, int pos_a, float sc_a, float sc_b, bool ok_a,
                                             bool ok_b, int lane) {
  const float2 run = head_sums<NI, NR>(acc, coef);
  const int c = lane & 3, pos_b = pos_a + 8;
  const bool vis_a = ok_a && pos_a < w.vis, vis_b = ok_b && pos_b < w.vis;
  if constexpr (OUT == kOutKeys || OUT == kOutSample) {
    const uint32_t key_a = vis_a ? cuda::score_key(run.x * sc_a) : 0u, key_b = vis_b ? cuda::score_key(run.y * sc_b) : 0u;
    const bool wa = c == 0 && pos_a < w.c1, wb = c == 1 && pos_b < w.c1;
    if (wa) w.keys[pos_a] = key_a;
    if (wb) w.keys[pos_b] = key_b;
    if (OUT == kOutKeys && a.key_hist != nullptr)
      cuda::key_hist_add(a.key_hist + static_cast<int64_t>(w.t) * cuda::kSpreadBins, wa || wb, wa ? key_a : key_b);
  } else {
    if (c == 0 && pos_a < w.c1) w.out[static_cast<int64_t>(pos_a) * a.lg_ss] = vis_a ? run.x * sc_a : -INFINITY;
    if (c == 1 && pos_b < w.c1) w.out[static_cast<int64_t>(pos_b) * a.lg_ss] = vis_b ? run.y * sc_b : -INFINITY;
  }
}

// The admission state of a consumer warp: its token's threshold and its candidate buffer.
struct Admission {
  float tau_floor;  // the lowest score admitted (cuda::key_floor of tau)
  bool all;         // tau 1: every visible position, NaN included
  uint32_t* keys;   // the warp's kAdmitBuffer entries in shared memory
  int32_t* pos;
  int fill;
};

// The warp's buffered candidates into token t's list (one atomic for the warp); entries past
// list_cap are dropped, and the count past list_cap makes the token's repair run.
__device__ __forceinline__ void flush_candidates(const LogitsArgs& a, int t, Admission& ad, int lane) {
  __syncwarp();
  int base = 0;
  if (lane == 0) base = atomicAdd(a.row_count + t, ad.fill);
  base = __shfl_sync(0xffffffffu, base, 0);
  uint32_t* lk = a.list_keys + static_cast<int64_t>(t) * a.list_cap;
  int32_t* lp = a.list_pos + static_cast<int64_t>(t) * a.list_cap;
  for (int i = lane; i < ad.fill; i += 32) {
    if (base + i < a.list_cap) {
      lk[base + i] = ad.keys[i];
      lp[base + i] = ad.pos[i];
    }
  }
  __syncwarp();
  ad.fill = 0;
}

// The admission epilogue: this thread's rows of the tile that are visible, before c1 and at or
// above tau join the warp's buffer as (key, position); the buffer is flushed once it holds more
// than kAdmitBuffer - 16 (a stage adds at most 16).
template <int NI, int NR, typename Coef>
__device__ __forceinline__ void admit_scores(const float (&acc)[NR][NI / 2], const LogitsArgs& a, const Coef& coef,
                                             const TokenChunk& w, int pos_a, float sc_a, float sc_b, bool ok_a,
                                             bool ok_b, int lane, Admission& ad) {
  const float2 run = head_sums<NI, NR>(acc, coef);
  const int c = lane & 3;
  const int pos = c == 0 ? pos_a : pos_a + 8;
  const float score = c == 0 ? run.x * sc_a : run.y * sc_b;
  const bool ok = c == 0 ? ok_a : ok_b;
  const bool cand = c < 2 && ok && pos < w.vis && pos < w.c1 && (ad.all || score >= ad.tau_floor);
  const unsigned mask = __ballot_sync(0xffffffffu, cand);
  if (mask != 0u) {
    if (cand) {
      const int at = ad.fill + __popc(mask & ((1u << lane) - 1u));
      ad.keys[at] = cuda::score_key(score);
      ad.pos[at] = pos;
    }
    ad.fill += __popc(mask);
    if (ad.fill > kAdmitBuffer - 16) flush_candidates(a, w.t, ad, lane);
  }
}

// The repair epilogue: this thread's rows of the tile that are visible and before c1 are offered
// to the CTA's running top-k buffer (keys, pos; kernels/topk/running_topk.cuh). A stage offers at most 64.
template <int NI, int NR, typename Coef>
__device__ __forceinline__ void offer_scores(const float (&acc)[NR][NI / 2], const Coef& coef, const TokenChunk& w,
                                             int pos_a, float sc_a, float sc_b, bool ok_a, bool ok_b, int lane,
                                             cuda::RunningTopk& run, uint32_t* keys, int32_t* pos) {
  const float2 sums = head_sums<NI, NR>(acc, coef);
  const int c = lane & 3;
  const int at = c == 0 ? pos_a : pos_a + 8;
  const float score = c == 0 ? sums.x * sc_a : sums.y * sc_b;
  const bool vis = c < 2 && (c == 0 ? ok_a : ok_b) && at < w.vis && at < w.c1;
  cuda::running_topk_offer(run, keys, pos, vis ? cuda::score_key(score) : 0u, at);
}

// -inf at positions [from, c1) of the token's logits row (past the stages computed). Other
// outputs need nothing there: the top-k reads a keys row up to its visible length only.
template <int OUT>
__device__ __forceinline__ void fill_invisible(const LogitsArgs& a, const TokenChunk& w, int from, int tid, int nthreads) {
  if constexpr (OUT == kOutLogits) {
    for (int s = from + tid; s < w.c1; s += nthreads) w.out[static_cast<int64_t>(s) * a.lg_ss] = -INFINITY;
  }
}

}  // namespace latte::hopper_indexer
