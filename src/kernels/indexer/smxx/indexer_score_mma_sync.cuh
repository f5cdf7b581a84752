// The indexer score kernel: I[t, p] for a group of query tokens over a chunk of positions.
//
// One CTA = 4 warps = (a group of G query tokens that share one block_table row) x (a chunk
// of positions). K pages stream through a 3-stage cp.async pipeline of 128 positions per stage
// (16 KB of e4m3 + 512 B of scales, XOR-swizzled so fragment reads are conflict-free). Each
// warp owns 32 positions of every stage: it locates them (block ids loaded a stage ahead, no
// division), copies their rows, and reads only them, so outside the fused repair mode a warp
// barrier orders a stage and the warps drift apart, overlapping each other's phases. K is the
// A operand (two 16-row m-tiles per warp); the warp loops over the n-tiles of the queries
// (8 columns = 8 (token, head) pairs each, the B operand, kept in shared memory in fragment
// order). The epilogue adds coef * ReLU(acc) per element (coef = w * |q_scale|), reduces over
// the 4 lanes of a quad and multiplies by k_scale.
//
// k permutation: lane (g, c) of a fragment reads the 32 bytes [32c, 32c + 32) of its rows; the
// same logical -> physical k map is applied to q, so the dot products are unchanged.
//
// Modes: logits (f32 out, -inf where not visible), keys (orderable u32 keys for the top-k
// kernel, 0 where not visible), and the fused path's passes (kernels/topk/fused_threshold.cuh): sample
// (keys at evenly spread positions per token), admit (the token's threshold from those keys,
// then the keys >= it into the token's candidate list) and fused = the repair pass (a running top-k candidate buffer per
// CTA with compactions, for tokens whose admission failed; at most topk candidates per CTA).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/common/cp_async.cuh"
#include "kernels/common/mma_sync.cuh"
#include "kernels/topk/key_histogram.cuh"
#include "kernels/topk/fused_threshold.cuh"
#include "kernels/topk/running_topk.cuh"
#include "kernels/common/kernel_span.cuh"
#include "kernels/common/pdl.cuh"
#include "kernels/topk/radix_select.cuh"
#include "kernels/common/smem_limit.hpp"

namespace latte::cuda_indexer {

constexpr int kThreads = 128;
constexpr int kStageTokens = 128;
constexpr int kStages = 3;  // 4 measured the same on the H200 (docs/performance.md)
constexpr int kKStageBytes = kStageTokens * 128;  // 16384
constexpr int kScaleStageBytes = kStageTokens * 4;
constexpr int kValidStageBytes = 16;
constexpr int kOffStageBytes = kStageTokens * 8;  // byte offset of each position's K row (-1: none)
// Bytes of one pipeline stage in shared memory: K, scales, valid masks, K-row and scale offsets.
constexpr int kStageBytes = kKStageBytes + kScaleStageBytes + kValidStageBytes + 2 * kOffStageBytes;
constexpr int kMaxGroup = 32;
constexpr int kSmemLimit = cuda::kPortableSmemBytes;

// kModeSample / kModeAdmit / kModeFused: the fused path's sample pass, admission pass and
// repair pass (kernels/topk/fused_threshold.cuh).
enum ScoreMode : int { kModeLogits = 0, kModeKeys = 1, kModeFused = 2, kModeSample = 3, kModeAdmit = 4 };
// fp8: mma.sync e4m3 (sm_89+). f16: e4m3 K and q widened to f16 by the hardware conversion
// (sm_89+, exact) and mma.sync f16, K converted once per stage for all head tiles; faster than
// e4m3 mma.sync on the H200 (sm_90), whose fp8 matrix units are wgmma's.
// bf16: K widened to bf16 by integer ops (sm_80 / sm_86, and bf16 queries).
enum MathKind : int { kMathFp8 = 0, kMathBf16 = 1, kMathF16 = 2 };

struct ScoreArgs {
  // inputs
  const uint8_t* q;  // bytes; element size 1 (e4m3) or 2 (bf16)
  int q_fp8;
  int q_vec;         // 16-byte (fp8) / 16-byte (bf16) vector loads of q rows are aligned
  int64_t q_st, q_sh;  // in elements
  const float* q_scale;
  int64_t qs_st, qs_sh;
  const float* w;
  int64_t w_st, w_sh;
  const uint8_t* k_cache;
  int64_t page_stride;
  int num_blocks, block_size;
  const int32_t* bt;
  int64_t bt_sr, bt_sc;
  int batch, max_blocks;
  const int32_t* tr;
  int64_t tr_s;
  const int32_t* vl;
  int64_t vl_s;
  int vl_div;  // IndexerParams::vl_div
  int tokens, heads, hp;
  int64_t max_len;
  // grid
  int group, num_groups, chunk_len, num_chunks;
  // shared memory layout
  int off_q, off_coef, off_tok, off_misc, off_buf, smem_bytes;
  int debug;  // LATTE_CUDA_INDEXER_DEBUG: 1 = skip the math (loads only), 2 = skip the loads
              // (math only); 4 / 8 = force the fused path's repair (fused_sample_rank)
  // logits mode
  float* logits;
  int64_t lg_st, lg_ss, logits_len;
  // keys mode
  uint32_t* keys;
  int64_t keys_ld;
  int* key_hist;  // non-null: the spread top-k's first pass, counted per token (key_histogram.cuh)
  // fused mode
  int topk, capb;
  uint32_t* gbuf_keys;  // non-null: candidate buffers in global memory, capb per CTA
  int32_t* gbuf_pos;
  uint32_t* cand_keys;  // [T, num_chunks, topk]
  int32_t* cand_pos;
  int repair;           // fused mode: only tokens whose admission pass failed (fused_needs_repair)
  // sample / admit modes (and the repair check)
  uint32_t* sample_keys;  // [T, kFusedSamples], the first `samples` of each row used
  int samples;            // sampled positions per token (fused_sample_rank)
  uint32_t* row_tau;      // [T]
  int* row_total;         // [T] candidates admitted
  uint32_t* list_keys;    // [T, list_cap]
  int32_t* list_pos;
  int list_cap;
  // measurements (LATTE_CUDA_TOPK_PROF=1): kernel spans (kernels/common/kernel_span.cuh), else null
  unsigned long long* spans;
  int span;  // this pass's slot
};

// Admit mode: candidates each warp gathers in shared memory before it reserves room in the
// token's list (one global atomic per flush: an atomic's round trip per stage costs more).
// A stage adds at most 32 per warp (one token per CTA, one score per lane), so the buffer holds
// two stages' worth and is flushed after a stage that leaves it more than half full: the
// per-score path is one compare and one vote, the flush outside the score loop, half as many
// atomics as a 32-entry buffer (measured: end to end within 1 %). 128 entries per warp would cost
// the 64-head admission kernel its third CTA per SM on the H200 (914 vs 818 us at 128 x 128K); 64
// still fit three. Two halves, a half's atomic result used only when the other half filled,
// measured the same (interleaved A/B; docs/kernels/indexer.md, "Fused path").
constexpr int kAdmitWarpBuf = 64;
constexpr int kAdmitBufBytes = kThreads / 32 * 2 * kAdmitWarpBuf * 4;


// Token t's block_table row, or -1 when it has none (a row outside the batch).
__device__ __forceinline__ int token_row(const ScoreArgs& a, int t) {
  const int row = a.tr ? a.tr[static_cast<int64_t>(t) * a.tr_s] : t;
  return row < 0 || row >= a.batch ? -1 : row;
}

// The positions token t (block_table row `row`) sees, at most `lim`: none without a row.
__device__ __forceinline__ int64_t token_visible(const ScoreArgs& a, int t, int row, int64_t lim) {
  if (row < 0) return 0;
  int64_t v = a.vl[static_cast<int64_t>(t) * a.vl_s];
  if (a.vl_div > 1 && v > 0) v /= a.vl_div;
  return v < 0 ? 0 : (v > lim ? lim : v);
}

// w * ReLU(acc * q_scale) as coef * ReLU(acc) with coef = w * |q_scale|: the queries of heads
// with a negative q_scale are staged negated, so the sign goes into the dot product.
// Accumulates into sum (one FMNMX + one FFMA per element).
__device__ __forceinline__ float add_relu_coef(float sum, float acc, float coef) { return fmaf(coef, fmaxf(acc, 0.0f), sum); }

// The queries of tokens [t0, t0 + group) (fp8: [nt][half][lane][16 B]; bf16 / f16:
// [nt][quarter][lane][16 B]) into sq, and their coefficients into scoef: NT = group * hp / 8
// n-tiles. One unit = (n-tile, lane): lane (g, c) holds k range [32c, 32c + 32) of column
// 8 nt + g, loaded at once (the prologue's latency is on every CTA's critical path). Every
// thread of a CTA of THREADS calls it.
template <int MATH, int THREADS>
__device__ __forceinline__ void stage_query_fragments(const ScoreArgs& a, int t0, int group, uint8_t* sq,
                                                      float2* scoef) {
  const int tid = threadIdx.x;
  const int NT = group * a.hp / 8;
  constexpr int kParts = MATH == kMathFp8 ? 2 : 4;
  // coef = w * |q_scale| of the two columns (2c, 2c + 1) of n-tile u / 4 (c = u % 4); 0 for
  // padding. The first unit's loads go out with the queries' (one unit per thread in practice).
  auto coef_of = [&](int u) {
    const int nt = u / 4, cc = u % 4;
    float f[2];
    for (int e = 0; e < 2; ++e) {
      const int col = nt * 8 + 2 * cc + e;
      const int gq = col / a.hp, h = col % a.hp, t = t0 + gq;
      float qs = 0.0f, w = 0.0f;
      if (t < a.tokens && h < a.heads) {
        qs = a.q_scale ? a.q_scale[static_cast<int64_t>(t) * a.qs_st + static_cast<int64_t>(h) * a.qs_sh] : 1.0f;
        w = a.w[static_cast<int64_t>(t) * a.w_st + static_cast<int64_t>(h) * a.w_sh];
      }
      f[e] = w * fabsf(qs);
    }
    return make_float2(f[0], f[1]);
  };
  const float2 cf0 = tid < NT * 4 ? coef_of(tid) : make_float2(0.0f, 0.0f);
  for (int u = tid; u < NT * 32; u += THREADS) {
    const int nt = u / 32, ln = u % 32;
    const int col = nt * 8 + (ln >> 2), cc = ln & 3;
    const int gq = col / a.hp, h = col % a.hp, t = t0 + gq;
    uint32_t x[16] = {};  // the lane's 32 e4m3 codes (words 0-7) or 32 bf16 (words 0-15)
    bool neg = false;
    if (t < a.tokens && h < a.heads) {
      const int64_t row_off = static_cast<int64_t>(t) * a.q_st + static_cast<int64_t>(h) * a.q_sh;
      const float qs = a.q_scale ? a.q_scale[static_cast<int64_t>(t) * a.qs_st + static_cast<int64_t>(h) * a.qs_sh] : 1.0f;
      const int words = a.q_fp8 ? 8 : 16;
      const uint8_t* src = a.q + (a.q_fp8 ? 1 : 2) * (row_off + 32 * cc);
      if (a.q_vec && a.q_fp8 && MATH == kMathFp8) {
        const uint4 v0 = reinterpret_cast<const uint4*>(src)[0], v1 = reinterpret_cast<const uint4*>(src)[1];
        x[0] = v0.x; x[1] = v0.y; x[2] = v0.z; x[3] = v0.w;
        x[4] = v1.x; x[5] = v1.y; x[6] = v1.z; x[7] = v1.w;
      } else if (a.q_vec && a.q_fp8) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const uint2 v = reinterpret_cast<const uint2*>(src)[i];
          x[2 * i] = v.x;
          x[2 * i + 1] = v.y;
        }
      } else if (a.q_vec) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const uint4 v = reinterpret_cast<const uint4*>(src)[i];
          x[4 * i] = v.x; x[4 * i + 1] = v.y; x[4 * i + 2] = v.z; x[4 * i + 3] = v.w;
        }
      } else {
#pragma unroll
        for (int i = 0; i < 16; ++i)  // constant bound: x stays in registers
          if (i < words)
            x[i] = src[4 * i] | (src[4 * i + 1] << 8) | (src[4 * i + 2] << 16) | (static_cast<uint32_t>(src[4 * i + 3]) << 24);
      }
      neg = qs < 0.0f;  // read after the query loads are issued
    }
    // A negative q_scale: the head's query is staged negated (add_relu_coef).
    const uint32_t flip = !neg ? 0u : a.q_fp8 ? 0x80808080u : 0x80008000u;
#pragma unroll
    for (int i = 0; i < 16; ++i) x[i] ^= flip;
#pragma unroll
    for (int j = 0; j < kParts; ++j) {
      uint4 v;
      if (MATH == kMathFp8) {
        v = make_uint4(x[4 * j], x[4 * j + 1], x[4 * j + 2], x[4 * j + 3]);
      } else if (a.q_fp8) {
        // 8 e4m3 codes -> 8 bf16 / f16 (exact).
        const uint32_t lo = x[2 * j], hi = x[2 * j + 1];
        if (MATH == kMathF16) {
          v = make_uint4(cuda::e4m3x2_to_f16x2(lo & 0xFFFFu), cuda::e4m3x2_to_f16x2(lo >> 16),
                         cuda::e4m3x2_to_f16x2(hi & 0xFFFFu), cuda::e4m3x2_to_f16x2(hi >> 16));
        } else {
          v = make_uint4(cuda::e4m3x2_to_bf16x2(lo & 0xFFFFu), cuda::e4m3x2_to_bf16x2(lo >> 16),
                         cuda::e4m3x2_to_bf16x2(hi & 0xFFFFu), cuda::e4m3x2_to_bf16x2(hi >> 16));
        }
      } else {
        v = make_uint4(x[4 * j], x[4 * j + 1], x[4 * j + 2], x[4 * j + 3]);
      }
      *reinterpret_cast<uint4*>(sq + (static_cast<int64_t>(nt) * kParts + j) * 512 + ln * 16) = v;
    }
  }
  if (tid < NT * 4) scoef[tid] = cf0;
  for (int u = tid + THREADS; u < NT * 4; u += THREADS) scoef[u] = coef_of(u);
}

template <int MODE, int MATH>
__global__ void __launch_bounds__(kThreads, 3) indexer_score_kernel(const ScoreArgs a) {
  extern __shared__ __align__(16) uint8_t smem[];
  constexpr int S = kStages;
  uint8_t* sk = smem;
  float* ssc = reinterpret_cast<float*>(smem + S * kKStageBytes);
  uint32_t* svalid = reinterpret_cast<uint32_t*>(smem + S * (kKStageBytes + kScaleStageBytes));
  int64_t* srow = reinterpret_cast<int64_t*>(smem + S * (kKStageBytes + kScaleStageBytes + kValidStageBytes));
  int64_t* sscl = srow + S * kStageTokens;
  uint8_t* sq = smem + a.off_q;
  float2* scoef = reinterpret_cast<float2*>(smem + a.off_coef);
  int* stok = reinterpret_cast<int*>(smem + a.off_tok);  // [0, 32): row, [32, 64): visible
  cuda::RunningTopk& misc = *reinterpret_cast<cuda::RunningTopk*>(smem + a.off_misc);  // fused mode

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, c = lane & 3;
  const int grp = static_cast<int>(blockIdx.x % static_cast<unsigned>(a.num_groups));
  const int chunk = static_cast<int>(blockIdx.x / static_cast<unsigned>(a.num_groups));
  const int t0 = grp * a.group;
  const int64_t c0 = static_cast<int64_t>(chunk) * a.chunk_len;
  const int64_t c1 = c0 + a.chunk_len;
  const int bs = a.block_size;
  const cuda::SpanStart span_t0 = cuda::span_begin(a.spans, a.span);

  // Token rows and visible lengths. Row -1: no valid block_table row (nothing visible);
  // -2: past the last token.
  if (tid < a.group) {
    const int t = t0 + tid;
    int row = -2, vis = 0;
    if (t < a.tokens) {
      row = token_row(a, t);
      int64_t lim = a.max_len;
      if (MODE == kModeLogits && a.logits_len < lim) lim = a.logits_len;
      vis = static_cast<int>(token_visible(a, t, row, lim));
    }
    stok[tid] = row;
    stok[kMaxGroup + tid] = vis;
  }
  if (MODE == kModeFused) cuda::running_topk_clear(misc);
  if (MODE == kModeSample && chunk == 0 && tid == 0 && t0 < a.tokens) a.row_total[t0] = 0;  // for the admission pass
  // The fused path's passes follow each other with programmatic dependent launch: the next
  // pass may start now; it reads this one's output after its pdl_wait. So does the spread
  // top-k after the keys (topk_spread_grid_barrier.cuh).
  if (MODE == kModeSample || MODE == kModeAdmit || MODE == kModeFused || MODE == kModeKeys) cuda::pdl_launch_dependents();
  __syncthreads();
  if (MODE == kModeFused && a.repair) {
    // The repair pass runs only for tokens whose admission pass failed (group == 1: uniform).
    cuda::pdl_wait();
    if (t0 >= a.tokens || !cuda::fused_needs_repair(a.row_total[t0], a.row_tau[t0], a.list_cap, a.topk)) {
      cuda::span_end(a.spans, a.span, span_t0);
      return;
    }
  }

  auto stage_q = [&]() { stage_query_fragments<MATH, kThreads>(a, t0, a.group, sq, scoef); };
  bool q_ready = false;

  uint32_t* bkeys = nullptr;
  int32_t* bpos = nullptr;
  if (MODE == kModeFused) {
    if (a.gbuf_keys) {
      bkeys = a.gbuf_keys + static_cast<int64_t>(blockIdx.x) * a.capb;
      bpos = a.gbuf_pos + static_cast<int64_t>(blockIdx.x) * a.capb;
    } else {
      bkeys = reinterpret_cast<uint32_t*>(smem + a.off_buf);
      bpos = reinterpret_cast<int32_t*>(smem + a.off_buf + 4 * a.capb);
    }
  }

  // Admit mode: token t0's admission threshold (sampled_threshold, after the sample pass).
  uint32_t admit_tau = 1;
  // Admit mode: this warp's buffer of admitted (score, position) and its flush into token t's
  // list (room reserved by one atomic; entries past the list's capacity are counted, not
  // stored: the repair pass sees it). The buffer holds raw scores; their keys are made at the
  // flush, a lane per entry, not by the whole warp in the score loop whenever one lane admits
  // (at 128K two thirds of the warps' stages admit something; docs/kernels/indexer.md).
  float* wbuf_score = reinterpret_cast<float*>(smem + a.off_buf) + warp * 2 * kAdmitWarpBuf;
  int32_t* wbuf_pos = reinterpret_cast<int32_t*>(wbuf_score + kAdmitWarpBuf);
  int wbuf_n = 0;
  auto flush_admitted = [&](int t) {
    __syncwarp();
    int base = 0;
    if (lane == 0 && wbuf_n > 0) base = atomicAdd(a.row_total + t, wbuf_n);
    base = __shfl_sync(0xffffffffu, base, 0);
    const int64_t row = static_cast<int64_t>(t) * a.list_cap;
    for (int i = lane; i < wbuf_n; i += 32) {
      if (base + i < a.list_cap) {
        a.list_keys[row + base + i] = cuda::score_key(wbuf_score[i]);
        a.list_pos[row + base + i] = wbuf_pos[i];
      }
    }
    __syncwarp();
    wbuf_n = 0;
  };
  float tau_floor = 0.0f;   // the lowest float of tau's key rank
  bool admit_all = true;    // tau 1: every visible position, NaN included
  // The token's tau, after the sample pass (pdl_wait: its keys and zeroed counts). Every
  // thread of the CTA calls it once, at the first admission (group == 1).
  auto take_tau = [&]() {
    cuda::pdl_wait();
    // Every CTA of the token computes the same tau from the token's samples.
    const int m = cuda::fused_sample_rank(stok[kMaxGroup], a.topk, a.debug, a.samples);
    admit_tau = m == 0 ? 1u
                       : cuda::sampled_threshold<kThreads>(a.sample_keys + static_cast<int64_t>(t0) * cuda::kFusedSamples,
                                                     a.samples, m, reinterpret_cast<int*>(smem + a.off_misc));
    if (chunk == 0 && tid == 0) a.row_tau[t0] = admit_tau;  // for the repair pass and the selection
    tau_floor = cuda::key_floor(admit_tau);
    admit_all = admit_tau <= 1u;
  };
  // Admits the score of visible position s if its key is >= tau, compared as
  // floats (tau_floor; tau 1 admits every visible position, NaN included). Every lane of the
  // warp calls it.
  auto admit_score = [&](float score, bool vis, int64_t s) {
    const bool pass = vis & (admit_all | (score >= tau_floor));  // bitwise: no branches
    const unsigned m = __ballot_sync(0xffffffffu, pass);
    if (m == 0u) return;  // warp-uniform: nothing admitted
    if (pass) {
      const int at = wbuf_n + __popc(m & cuda::lanemask_lt());
      wbuf_score[at] = score;
      wbuf_pos[at] = static_cast<int32_t>(s);
    }
    wbuf_n += __popc(m);
  };


  for (int gi = 0; gi < a.group; ++gi) {
    const int row = stok[gi];
    if (row == -2) break;
    bool first = true;
    for (int gj = 0; gj < gi; ++gj) first = first && stok[gj] != row;
    if (!first) continue;
    uint32_t active = 0;
    int maxvis = 0;
    for (int gj = gi; gj < a.group; ++gj) {
      if (stok[gj] == row) {
        active |= 1u << gj;
        maxvis = max(maxvis, stok[kMaxGroup + gj]);
      }
    }
    // Sample mode: [s_begin, s_end) are sample indices, sample i reads position i * maxvis /
    // samples.
    const int64_t s_begin = c0;
    const int64_t s_end = MODE == kModeSample ? (maxvis > 0 ? (c1 < a.samples ? c1 : a.samples) : c0)
                                              : (c1 < maxvis ? c1 : maxvis);
    const int nst = s_end > s_begin ? static_cast<int>((s_end - s_begin + kStageTokens - 1) / kStageTokens) : 0;

    if (nst > 0) {
      const int32_t* btrow = a.bt + static_cast<int64_t>(row) * a.bt_sr;
      // This thread's position of the next stage to locate, s_begin + 128 st + tid, as (block
      // index bi, offset off), advanced by 128 per stage without a division; the block id of
      // that position is loaded one stage ahead (b_next) so its latency hides behind a stage.
      int64_t bi = (s_begin + tid) / bs;
      int off = static_cast<int>(s_begin + tid - bi * bs);
      const int step_blocks = kStageTokens / bs, step_off = kStageTokens % bs;
      auto advance = [&]() {
        off += step_off;
        bi += step_blocks;
        if (off >= bs) {
          off -= bs;
          ++bi;
        }
      };
      auto load_block = [&]() -> int { return bi < a.max_blocks ? btrow[bi * a.bt_sc] : -1; };
      // Byte offsets of stage st's K row and scale for this thread's position (block b, offset
      // o) into `slot` (0 when not readable) and the warp's mask of readable positions.
      auto locate = [&](int st, int slot, int b, int o) {
        const int64_t s = s_begin + static_cast<int64_t>(st) * kStageTokens + tid;
        const bool ok = st < nst && s < s_end && b >= 0 && b < a.num_blocks;
        const int64_t page = ok ? static_cast<int64_t>(b) * a.page_stride : 0;
        srow[slot * kStageTokens + tid] = ok ? page + o * 128 : 0;
        sscl[slot * kStageTokens + tid] = ok ? page + static_cast<int64_t>(bs) * 128 + o * 4 : 0;
        const unsigned m = __ballot_sync(0xffffffffu, ok);
        if (lane == 0) svalid[slot * 4 + warp] = m;
      };
      // Stage st: 8 lanes copy one 128-byte row (coalesced); this thread copies 16-byte chunk
      // j of rows 32 warp + 8 (lane / 8) + p, XOR-swizzled by p (= row % 8), and the scale of
      // position tid. Unreadable rows are zero-filled.
      auto issue = [&](int slot) {
        const int64_t* ro = srow + slot * kStageTokens + 8 * (tid >> 3);
        uint8_t* kdst = sk + slot * kKStageBytes + 8 * (tid >> 3) * 128;
        const uint32_t m = svalid[slot * 4 + warp];
        const uint32_t rows_ok = (a.debug & 2) ? 0u : m >> (8 * (lane >> 3));
        const int j = tid & 7;
        int64_t o[8];
#pragma unroll
        for (int p = 0; p < 8; p += 2) {
          const longlong2 two = *reinterpret_cast<const longlong2*>(ro + p);
          o[p] = two.x;
          o[p + 1] = two.y;
        }
        const uint32_t kdst_s = cuda::smem_addr(kdst);
#pragma unroll
        for (int p = 0; p < 8; ++p)
          cuda::cp_async_16_s(kdst_s + p * 128 + ((j ^ p) * 16), a.k_cache + o[p] + 16 * j, (rows_ok >> p) & 1u);
        cuda::cp_async_4(ssc + slot * kStageTokens + tid, a.k_cache + sscl[slot * kStageTokens + tid], (m >> lane) & 1u);
      };

      // Sample mode: sample i = s_begin + 128 st + tid of stage st reads position
      // i * maxvis / samples, in block b at offset o.
      auto sample_at = [&](int st, int& b, int& o) {
        const int64_t pos = (s_begin + static_cast<int64_t>(st) * kStageTokens + tid) * maxvis / a.samples;
        const int64_t pb = pos / bs;
        o = static_cast<int>(pos - pb * bs);
        b = pb < a.max_blocks ? btrow[pb * a.bt_sc] : -1;
      };
      int b_next, o_next = 0;
      {
        // The first S stages' block ids (and stage S's) in one round trip.
        int b0[S], o0[S];
#pragma unroll
        for (int st = 0; st < S; ++st) {
          if (MODE == kModeSample) {
            sample_at(st, b0[st], o0[st]);
          } else {
            o0[st] = off;
            b0[st] = load_block();
            advance();
          }
        }
        if (MODE == kModeSample) sample_at(S, b_next, o_next);
        else b_next = load_block();
#pragma unroll
        for (int st = 0; st < S; ++st) locate(st, st, b0[st], o0[st]);
      }
      __syncthreads();
#pragma unroll
      for (int st = 0; st < S - 1; ++st) {
        issue(st);
        cuda::cp_async_commit();
      }
      if (!q_ready) {
        stage_q();  // overlaps the first stages' loads
        __syncthreads();
        q_ready = true;
      }

      // Admit mode: stage 0 is scored before tau is known (while the sample pass ends); its
      // scores are held and admitted after it, with the wait and tau.
      float held_score = 0.0f;
      bool held_vis = false;
      int64_t held_s = 0;
      const int64_t admit_vis_end = stok[kMaxGroup];  // admit mode: one token (group == 1)
      int slot = 0, issue_slot = S - 1;  // slots of stages it and it + S - 1
      // One stage (`held`: admit mode's stage 0, scored before tau is known).
      auto stage = [&](const int it, auto held) {
        cuda::cp_async_wait<S - 2>();
        // Each warp copies, locates and reads only its own 32 positions of a stage, so a warp
        // barrier orders the stage; warps drift apart and overlap each other's phases. The
        // fused mode's shared candidate buffer needs the block barrier.
        if (MODE == kModeFused) __syncthreads();
        else __syncwarp();
        issue(issue_slot);
        cuda::cp_async_commit();
        if (MODE == kModeFused) cuda::running_topk_keep_room<kThreads>(misc, bkeys, bpos, a.capb, kStageTokens, a.topk);

        const int64_t sbase = s_begin + static_cast<int64_t>(it) * kStageTokens;
        const uint8_t* kt = sk + slot * kKStageBytes;
        const uint32_t vmask = svalid[slot * 4 + warp];
        float ks[2][2];
        constexpr int KSTEPS = MATH == kMathFp8 ? 4 : 8;
        uint32_t af[2][KSTEPS][4];
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          const int r0 = 32 * warp + 16 * mt + g;
          const uint4 x0 = *reinterpret_cast<const uint4*>(kt + r0 * 128 + (((2 * c) ^ g) * 16));
          const uint4 x1 = *reinterpret_cast<const uint4*>(kt + r0 * 128 + (((2 * c + 1) ^ g) * 16));
          const uint4 y0 = *reinterpret_cast<const uint4*>(kt + (r0 + 8) * 128 + (((2 * c) ^ g) * 16));
          const uint4 y1 = *reinterpret_cast<const uint4*>(kt + (r0 + 8) * 128 + (((2 * c + 1) ^ g) * 16));
          const uint32_t wr[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
          const uint32_t vr[8] = {y0.x, y0.y, y0.z, y0.w, y1.x, y1.y, y1.z, y1.w};
          if (MATH == kMathFp8) {
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) {
              af[mt][kk][0] = wr[2 * kk];
              af[mt][kk][1] = vr[2 * kk];
              af[mt][kk][2] = wr[2 * kk + 1];
              af[mt][kk][3] = vr[2 * kk + 1];
            }
          } else {
#pragma unroll
            for (int kk = 0; kk < KSTEPS; ++kk) {
              const uint32_t w4 = wr[kk & 7], v4 = vr[kk & 7];
              if (MATH == kMathF16) {
                af[mt][kk][0] = cuda::e4m3x2_to_f16x2(w4 & 0xFFFFu);
                af[mt][kk][1] = cuda::e4m3x2_to_f16x2(v4 & 0xFFFFu);
                af[mt][kk][2] = cuda::e4m3x2_hi_to_f16x2(w4);
                af[mt][kk][3] = cuda::e4m3x2_hi_to_f16x2(v4);
              } else {
                af[mt][kk][0] = cuda::e4m3x2_to_bf16x2(w4 & 0xFFFFu);
                af[mt][kk][1] = cuda::e4m3x2_to_bf16x2(v4 & 0xFFFFu);
                af[mt][kk][2] = cuda::e4m3x2_to_bf16x2(w4 >> 16);
                af[mt][kk][3] = cuda::e4m3x2_to_bf16x2(v4 >> 16);
              }
            }
          }
          ks[mt][0] = ssc[slot * kStageTokens + r0];
          ks[mt][1] = ssc[slot * kStageTokens + r0 + 8];
        }
        // This lane's output row: (mt, half) = (c >> 1, c & 1).
        const int my_r = 32 * warp + 16 * (c >> 1) + 8 * (c & 1) + g;
        const bool my_ok = (vmask >> (my_r - 32 * warp)) & 1u;
        const int64_t my_s = sbase + my_r;
        const int ntq = a.hp / 8;

        for (int gq = 0; gq < a.group; ++gq) {
          if (!((active >> gq) & 1u)) continue;
          float p[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
#pragma unroll 2
          for (int ntl = 0; ntl < (a.debug & 1 ? 0 : ntq); ++ntl) {
            const int nt = gq * ntq + ntl;
            uint32_t qb[2 * KSTEPS];
            if (MATH == kMathFp8) {
              const uint4 b0 = *reinterpret_cast<const uint4*>(sq + (nt * 2 + 0) * 512 + lane * 16);
              const uint4 b1 = *reinterpret_cast<const uint4*>(sq + (nt * 2 + 1) * 512 + lane * 16);
              qb[0] = b0.x; qb[1] = b0.y; qb[2] = b0.z; qb[3] = b0.w;
              qb[4] = b1.x; qb[5] = b1.y; qb[6] = b1.z; qb[7] = b1.w;
            } else {
#pragma unroll
              for (int j = 0; j < 4; ++j) {
                const uint4 b = *reinterpret_cast<const uint4*>(sq + (nt * 4 + j) * 512 + lane * 16);
                qb[4 * j + 0] = b.x; qb[4 * j + 1] = b.y; qb[4 * j + 2] = b.z; qb[4 * j + 3] = b.w;
              }
            }
            const float2 cf = scoef[nt * 4 + c];
#pragma unroll
            for (int mt = 0; mt < 2; ++mt) {
              float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
              for (int kk = 0; kk < KSTEPS; ++kk) {
                if (MATH == kMathFp8) cuda::mma_e4m3_m16n8k32(acc, af[mt][kk], qb[2 * kk], qb[2 * kk + 1]);
                else if (MATH == kMathF16) cuda::mma_f16_m16n8k16(acc, af[mt][kk], qb[2 * kk], qb[2 * kk + 1]);
                else cuda::mma_bf16_m16n8k16(acc, af[mt][kk], qb[2 * kk], qb[2 * kk + 1]);
              }
              p[mt][0] = add_relu_coef(add_relu_coef(p[mt][0], acc[0], cf.x), acc[1], cf.y);
              p[mt][1] = add_relu_coef(add_relu_coef(p[mt][1], acc[2], cf.x), acc[3], cf.y);
            }
          }
#pragma unroll
          for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              p[mt][h] += __shfl_xor_sync(0xffffffffu, p[mt][h], 1);
              p[mt][h] += __shfl_xor_sync(0xffffffffu, p[mt][h], 2);
              p[mt][h] *= ks[mt][h];
            }
          }
          const float score = c == 0 ? p[0][0] : c == 1 ? p[0][1] : c == 2 ? p[1][0] : p[1][1];
          const int t = t0 + gq;
          const bool vis = my_ok && (MODE == kModeSample ||
                                     my_s < (MODE == kModeAdmit ? admit_vis_end : stok[kMaxGroup + gq]));
          if (MODE == kModeSample) {
            a.sample_keys[static_cast<int64_t>(t) * cuda::kFusedSamples + my_s] = vis ? cuda::score_key(score) : 0u;
          } else if (MODE == kModeAdmit) {
            // Candidates at or above tau gather in the warp's buffer (stage 0's: held).
            if (decltype(held)::value) {
              held_score = score;
              held_vis = vis;
              held_s = my_s;
            } else {
              admit_score(score, vis, my_s);
            }
          } else if (MODE == kModeLogits) {
            if (my_s < a.logits_len)
              a.logits[static_cast<int64_t>(t) * a.lg_st + my_s * a.lg_ss] = vis ? score : -INFINITY;
          } else if (MODE == kModeKeys) {
            const uint32_t key = vis ? cuda::score_key(score) : 0u;
            a.keys[static_cast<int64_t>(t) * a.keys_ld + my_s] = key;
            if (a.key_hist != nullptr) cuda::key_hist_add(a.key_hist + static_cast<int64_t>(t) * cuda::kSpreadBins, vis, key);
          } else {
            cuda::running_topk_offer(misc, bkeys, bpos, vis ? cuda::score_key(score) : 0u, static_cast<int32_t>(my_s));
          }
        }
        // Room for the next stage's admissions (group == 1: token t0).
        if (MODE == kModeAdmit && wbuf_n > kAdmitWarpBuf - 32) flush_admitted(t0);
        // Stage it + S reuses this slot; its offsets are read after the next barrier. The warp
        // barrier orders this stage's reads of the slot's mask before lane 0 rewrites it.
        __syncwarp();
        if (MODE == kModeSample) {
          locate(it + S, slot, b_next, o_next);
          sample_at(it + S + 1, b_next, o_next);
        } else {
          locate(it + S, slot, b_next, off);
          advance();
          b_next = load_block();
        }
        slot = slot + 1 == S ? 0 : slot + 1;
        issue_slot = issue_slot + 1 == S ? 0 : issue_slot + 1;
      };
      if constexpr (MODE == kModeAdmit) {
        // Stage 0 out of the loop, then the wait and tau: inside the loop, the inlined tau
        // cost every admission 2-4 % (its registers; H200, B >= 8 at 128K).
        stage(0, std::true_type{});
        take_tau();
        admit_score(held_score, held_vis, held_s);
        for (int it = 1; it < nst; ++it) stage(it, std::false_type{});
        flush_admitted(t0);  // group == 1
      } else {
        for (int it = 0; it < nst; ++it) stage(it, std::false_type{});
      }
      cuda::cp_async_wait<0>();
      __syncthreads();
    }

    if (MODE == kModeLogits) {
      // Positions of this chunk the stages did not cover: -inf.
      int64_t from = s_begin + static_cast<int64_t>(nst) * kStageTokens;
      const int64_t to = c1 < a.logits_len ? c1 : a.logits_len;
      for (int gq = 0; gq < a.group; ++gq) {
        if (!((active >> gq) & 1u)) continue;
        const int t = t0 + gq;
        for (int64_t s = from + tid; s < to; s += kThreads)
          a.logits[static_cast<int64_t>(t) * a.lg_st + s * a.lg_ss] = -INFINITY;
      }
    }
  }

  if (MODE == kModeFused) {
    __syncthreads();
    const int64_t base = (static_cast<int64_t>(t0) * a.num_chunks + chunk) * a.topk;  // group == 1
    if (t0 < a.tokens) cuda::running_topk_write<kThreads>(misc, bkeys, bpos, a.topk, a.cand_keys + base, a.cand_pos + base);
  }
  cuda::span_end(a.spans, a.span, span_t0);
}

}  // namespace latte::cuda_indexer
