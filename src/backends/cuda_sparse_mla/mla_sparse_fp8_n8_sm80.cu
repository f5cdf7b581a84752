// Sparse MLA over the fp8_ds_mla cache for at most 8 heads (GLM-5 at TP8, DeepSeek-V3.2 at
// TP16): the heads are the mma's N dimension (n8) and the KV tokens its M dimension, so no
// mma lane computes a padded head (the row-tile kernel pads 8 heads to a 16-row m tile).
// sm_80 ... sm_120: mma.sync bf16, ldmatrix, cp.async; design notes in
// docs/kernels/sparse_mla.md ("Few heads").
//
// One CTA = 4 warps = one query token x one split of its slot list, in tiles of 64 tokens
// (cp.async, 2 stages of 64 x 656 bytes). Per tile:
//   QK  warp w: S^T[16 tokens x 8 heads] for tokens 16w..16w+15, over all 576 dims: the e4m3
//       rows are the A operand (ldmatrix; even and odd bytes widened by bit moves give two
//       k16 fragments, Q's latent dims stored permuted to match), Q the B operand; one
//       accumulator per scale group (then times the token's group scale) and one for rope.
//   SM  per head: the tile max and sum over the 4 warps' tokens through shared memory, in
//       warp order; P (f32) to shared memory.
//   PV  warp w: O^T[128 dims (scale group w) x 8 heads] += V^T P^T, V^T by ldmatrix.trans on
//       the e4m3 rows (even / odd bytes: even / odd dims), P^T times the token's group-w scale.
// Every sum has a fixed order and nothing depends on the other tokens of the call, so results
// are bitwise deterministic and batch invariant (the kernel is chosen by the head count and
// format only, never by T).
#include <cuda_bf16.h>

#include <atomic>
#include <cstdint>

#include "backends/cuda_sparse_mla/mla_fwd_dispatch.hpp"
#include "backends/cuda_sparse_mla/mla_fwd_sm80.cuh"
#include "cuda/check.cuh"
#include "cuda/e4m3_bf16_bits.cuh"
#include "cuda/sm80_cp_async.cuh"
#include "cuda/sm80_mma.cuh"

namespace latte::cuda_sparse_mla {
namespace {

struct N8Cfg {
  static constexpr int kWarps = 4;
  static constexpr int kThreads = 128;
  static constexpr int BN = 64;          // tokens per tile (16 per warp)
  static constexpr int ROWB = 656;       // bytes per token: 512 e4m3, 4 f32 scales, 64 bf16 rope
  static constexpr int NSTAGE = 2;
  static constexpr int QROW = 1152;      // one head's Q row (bf16, permuted, swizzled)
  static constexpr int PSTRIDE = BN + 8;  // floats per head row of P
  static constexpr int Q_OFF = 0;
  static constexpr int ST_OFF = Q_OFF + kN8MaxHeads * QROW;
  static constexpr int P_OFF = ST_OFF + NSTAGE * BN * ROWB;
  static constexpr int VALID_OFF = P_OFF + kN8MaxHeads * PSTRIDE * 4;
  static constexpr int MAX_OFF = VALID_OFF + NSTAGE * BN * 4;   // [warp][head] tile maxima
  static constexpr int SUM_OFF = MAX_OFF + kWarps * 8 * 4;      // [warp][head] tile sums
  static constexpr int E_OFF = SUM_OFF + kWarps * 8 * 4;        // 2^E per head
  static constexpr int FIN_OFF = E_OFF + 8 * 4;                 // final m, l per head
  static constexpr int FLAG_OFF = FIN_OFF + 2 * 8 * 4;
  static constexpr int SMEM = FLAG_OFF + 16;
  static_assert(SMEM <= 101376, "shared memory over the sm_86/sm_89/sm_120 limit");
  static_assert(ST_OFF % 16 == 0 && P_OFF % 16 == 0, "alignment");
};

// Byte offset of 16-byte chunk `ch` (0..71) of head h's Q row: XOR-swizzled by h so that the 8
// heads' rows (1152 B apart, the same banks) are read by ldmatrix without conflicts.
__device__ __forceinline__ int q_chunk(int h, int ch) { return h * N8Cfg::QROW + ((ch ^ (h & 7)) << 4); }

__global__ void __launch_bounds__(N8Cfg::kThreads, 2)
    mla_sparse_fp8_n8_kernel(const MlaParams p, const LaunchArgs la) {
  using C = N8Cfg;
  using namespace latte::cuda::sm80;
  using latte::cuda::e4m3x4_even_to_bf16x2;
  using latte::cuda::e4m3x4_odd_to_bf16x2;
  constexpr int BN = C::BN, ROWB = C::ROWB, NSTAGE = C::NSTAGE, PSTRIDE = C::PSTRIDE;

  extern __shared__ __align__(16) uint8_t smem[];
  uint8_t* const sQ = smem + C::Q_OFF;
  uint8_t* const sST = smem + C::ST_OFF;
  float* const sP = reinterpret_cast<float*>(smem + C::P_OFF);
  int* const sValid = reinterpret_cast<int*>(smem + C::VALID_OFF);
  float* const sMax = reinterpret_cast<float*>(smem + C::MAX_OFF);
  float* const sSum = reinterpret_cast<float*>(smem + C::SUM_OFF);
  float* const sE = reinterpret_cast<float*>(smem + C::E_OFF);
  float* const sFin = reinterpret_cast<float*>(smem + C::FIN_OFF);
  int* const sFlag = reinterpret_cast<int*>(smem + C::FLAG_OFF);

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, c = lane & 3;

  const int split = static_cast<int>(blockIdx.x % static_cast<unsigned>(la.nsplit));
  const int64_t g_local = blockIdx.x / static_cast<unsigned>(la.nsplit);
  const int64_t grp = la.group_begin + g_local;
  const int heads = p.heads;
  const int nsplit_g = la.nsplit;
  const int k_begin = split * la.chunk;
  const int k_end = min(p.topk, k_begin + la.chunk);
  const int n_tiles = k_end > k_begin ? (k_end - k_begin + BN - 1) / BN : 0;
  const int64_t num_slots = p.num_blocks * static_cast<int64_t>(p.block_size);
  const int bs_mask = p.block_size - 1;
  const int bs_shift = (p.block_size & bs_mask) == 0 ? __ffs(p.block_size) - 1 : -1;

  // ---- gather: two threads per token, chunks [21 half, 21 half + 21) of its 41 ----
  const int ld_tok = tid >> 1, ld_half = tid & 1;
  auto fetch_index = [&](int tile) -> int {
    const int k = k_begin + tile * BN + ld_tok;
    return tile < n_tiles && k < k_end ? p.indices[grp * p.idx_s + k] : -1;
  };
  auto issue_tile = [&](int tile, int stage, int raw) {
    const int k = k_begin + tile * BN + ld_tok;
    const bool valid = k < k_end && raw >= 0 && raw < num_slots;
    const uint8_t* src = p.kv;
    if (valid) {
      int64_t blk, off;
      if (bs_shift >= 0) {
        blk = raw >> bs_shift;
        off = raw & bs_mask;
      } else {
        blk = raw / p.block_size;
        off = raw - blk * p.block_size;
      }
      src = p.kv + blk * p.kv_sblock + off * p.kv_stok;
    }
    const uint32_t dst = smem_u32(sST) + (stage * BN + ld_tok) * ROWB;
    const int c0 = 21 * ld_half, c1 = ld_half == 0 ? 21 : 41;
    for (int ch = c0; ch < c1; ++ch) cp_async_16_zfill(dst + ch * 16, valid ? src + ch * 16 : p.kv, valid);
    if (ld_half == 0) sValid[stage * BN + ld_tok] = valid ? 1 : 0;
  };

  // L2 prefetch of a tile's rows (6 lines of 128 B per 656-byte row; 3 per thread), one tile
  // ahead of its cp.async gather: two tiles in flight with one stage of shared memory.
  auto prefetch_tile = [&](int tile, int raw) {
    const int k = k_begin + tile * BN + ld_tok;
    if (k >= k_end || raw < 0 || raw >= num_slots) return;
    int64_t blk, off;
    if (bs_shift >= 0) {
      blk = raw >> bs_shift;
      off = raw & bs_mask;
    } else {
      blk = raw / p.block_size;
      off = raw - blk * p.block_size;
    }
    const uint8_t* row = p.kv + blk * p.kv_sblock + off * p.kv_stok;
    for (int i = 3 * ld_half; i < 3 * ld_half + 3; ++i) {
      const uint8_t* a = row + 128 * i;
      if (i == 5) a = row + ROWB - 1;  // the row's last line
      asm volatile("prefetch.global.L2 [%0];\n" ::"l"(a));
    }
  };
  int raw_pro = fetch_index(0);
  int raw_next = fetch_index(1);
  int raw_next2 = fetch_index(2);

  // ---- Q -> shared memory: warp w stages heads w and w + 4. Latent 32-dim block b (lane b)
  // as [16 even dims][16 odd dims] times 2^(120 - E) (E: exponent of the head's largest
  // latent |q|; the e4m3 bits are value * 2^-120), rope (lanes 16..23) as is. Heads past
  // `heads` are zero. ----
  for (int h = warp; h < kN8MaxHeads; h += C::kWarps) {
    uint4 ev[2] = {}, od[2] = {}, rope = {};
    float e_scale = 1.f;
    if (h < heads) {
      const __nv_bfloat16* src = p.q + grp * p.q_sg + h * p.q_sh;
      float f[32];
      float mx = 0.f;
      if (lane < 16) {
        const uint4* v = reinterpret_cast<const uint4*>(src + 32 * lane);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const uint4 x = v[j];
          const uint32_t w[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            f[8 * j + 2 * i] = __uint_as_float(w[i] << 16);
            f[8 * j + 2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
          }
        }
#pragma unroll
        for (int i = 0; i < 32; ++i) mx = fmaxf(mx, fabsf(f[i]));
      } else if (lane < 24) {
        rope = *reinterpret_cast<const uint4*>(src + 512 + 8 * (lane - 16));
      }
#pragma unroll
      for (int off = 16; off >= 1; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
      const int ebits = static_cast<int>((__float_as_uint(mx) >> 23) & 0xFF);
      const int E = ebits == 0 ? -126 : (ebits > 254 ? 127 : ebits - 127);
      e_scale = ldexpf(1.f, E);
      if (lane < 16) {
        uint32_t e[8], o[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          e[i] = pack_bf16x2(ldexpf(f[4 * i], 120 - E), ldexpf(f[4 * i + 2], 120 - E));
          o[i] = pack_bf16x2(ldexpf(f[4 * i + 1], 120 - E), ldexpf(f[4 * i + 3], 120 - E));
        }
        ev[0] = make_uint4(e[0], e[1], e[2], e[3]);
        ev[1] = make_uint4(e[4], e[5], e[6], e[7]);
        od[0] = make_uint4(o[0], o[1], o[2], o[3]);
        od[1] = make_uint4(o[4], o[5], o[6], o[7]);
      }
    }
    if (lane < 16) {
      *reinterpret_cast<uint4*>(sQ + q_chunk(h, 4 * lane + 0)) = ev[0];
      *reinterpret_cast<uint4*>(sQ + q_chunk(h, 4 * lane + 1)) = ev[1];
      *reinterpret_cast<uint4*>(sQ + q_chunk(h, 4 * lane + 2)) = od[0];
      *reinterpret_cast<uint4*>(sQ + q_chunk(h, 4 * lane + 3)) = od[1];
    } else if (lane < 24) {
      *reinterpret_cast<uint4*>(sQ + q_chunk(h, 64 + lane - 16)) = rope;
    }
    if (lane == 0) sE[h] = e_scale;
  }

  if (n_tiles > 0) issue_tile(0, 0, raw_pro);
  cp_async_commit_group();
  if (n_tiles > 1) prefetch_tile(1, raw_next);

  // per-thread softmax state of heads 2c, 2c+1 (the same in every thread with this c)
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};
  const float scale_log2 = p.scale * 1.4426950408889634f;
  float O[8][4];  // m tiles (block j, even / odd dims) x (rows g, g+8) x (heads 2c, 2c+1)
#pragma unroll
  for (int m = 0; m < 8; ++m)
#pragma unroll
    for (int e = 0; e < 4; ++e) O[m][e] = 0.f;

  const uint32_t q_base = smem_u32(sQ);
  // ldmatrix row addresses: B (Q) lane -> head lane & 7, chunk offset lane >> 3
  const int qb_head = lane & 7, qb_chunk = lane >> 3;
  for (int j = 0; j < n_tiles; ++j) {
    cp_async_wait_group<0>();
    __syncthreads();  // tile j landed; the previous tile's PV reads are done
    if (j + 1 < n_tiles) issue_tile(j + 1, (j + 1) % NSTAGE, raw_next);
    cp_async_commit_group();
    if (j + 2 < n_tiles) prefetch_tile(j + 2, raw_next2);
    raw_next = raw_next2;
    raw_next2 = fetch_index(j + 3);
    const int stage = j % NSTAGE;
    const uint8_t* const st = sST + stage * BN * ROWB;
    const uint32_t st_u32 = smem_u32(st);
    const float e_h0 = sE[2 * c], e_h1 = sE[2 * c + 1];

    // ---------------- QK: S^T for tokens 16w .. 16w+15 ----------------
    float acc[5][4];
#pragma unroll
    for (int a = 0; a < 5; ++a)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[a][e] = 0.f;
    // A rows: token 16w + (lane & 15), bytes + 16 (lane >> 4)
    const uint32_t a_base = st_u32 + (16 * warp + (lane & 15)) * ROWB + (lane >> 4) * 16;
    // Block b of each scale group per step: the four groups' accumulators alternate, so
    // consecutive mma.sync do not depend on each other (the even bytes' k16 step, then the odd).
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      uint32_t ae[4][4], ao[4][4], q[4][4];
#pragma unroll
      for (int grp4 = 0; grp4 < 4; ++grp4) {
        const int blk = 4 * grp4 + b;  // 32-byte block of the latent part (group grp4)
        uint32_t r[4];
        ldmatrix_x4(r, a_base + 32 * blk);
        ldmatrix_x4(q[grp4], q_base + q_chunk(qb_head, 4 * blk + qb_chunk));
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          ae[grp4][i] = e4m3x4_even_to_bf16x2(r[i]);
          ao[grp4][i] = e4m3x4_odd_to_bf16x2(r[i]);
        }
      }
#pragma unroll
      for (int grp4 = 0; grp4 < 4; ++grp4) mma_bf16_16816(acc[grp4], ae[grp4], q[grp4][0], q[grp4][1]);
#pragma unroll
      for (int grp4 = 0; grp4 < 4; ++grp4) mma_bf16_16816(acc[grp4], ao[grp4], q[grp4][2], q[grp4][3]);
    }
#pragma unroll
    for (int kk2 = 0; kk2 < 2; ++kk2) {  // rope: 4 k16 steps, two per Q ldmatrix
      uint32_t q[4];
      ldmatrix_x4(q, q_base + q_chunk(qb_head, 64 + 4 * kk2 + qb_chunk));
#pragma unroll
      for (int h2 = 0; h2 < 2; ++h2) {
        uint32_t r[4];
        ldmatrix_x4(r, a_base + 528 + 32 * (2 * kk2 + h2));
        mma_bf16_16816(acc[4], r, q[2 * h2], q[2 * h2 + 1]);
      }
    }
    // S (log2 domain) = (sum over groups of acc * token scale) * 2^E_head + rope; -inf where
    // the token's slot is invalid
    float x[4];
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int tok = 16 * warp + g + 8 * hr;
      const float4 s = *reinterpret_cast<const float4*>(st + tok * ROWB + 512);
      const bool ok = sValid[stage * BN + tok] != 0;
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int i = 2 * hr + e;
        float lat = acc[0][i] * s.x;
        lat = fmaf(acc[1][i], s.y, lat);
        lat = fmaf(acc[2][i], s.z, lat);
        lat = fmaf(acc[3][i], s.w, lat);
        const float v = fmaf(lat, e == 0 ? e_h0 : e_h1, acc[4][i]);
        x[i] = ok ? v * scale_log2 : -INFINITY;
      }
    }

    // ---------------- softmax over the tile's 64 tokens, per head ----------------
    float mx0 = fmaxf(x[0], x[2]), mx1 = fmaxf(x[1], x[3]);
#pragma unroll
    for (int off = 4; off < 32; off <<= 1) {
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, off));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, off));
    }
    if (g == 0) {
      sMax[warp * 8 + 2 * c] = mx0;
      sMax[warp * 8 + 2 * c + 1] = mx1;
    }
    __syncthreads();
    float alpha[2], m_use[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int h = 2 * c + e;
      float t = sMax[h];
#pragma unroll
      for (int w = 1; w < 4; ++w) t = fmaxf(t, sMax[w * 8 + h]);
      const float m_new = fmaxf(m_run[e], t);
      m_use[e] = m_new == -INFINITY ? 0.f : m_new;
      alpha[e] = fast_exp2(m_run[e] - m_use[e]);
      m_run[e] = m_new;
    }
    float pv[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) pv[i] = fast_exp2(x[i] - m_use[i & 1]);
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int tok = 16 * warp + g + 8 * hr;
      sP[(2 * c) * PSTRIDE + tok] = pv[2 * hr];
      sP[(2 * c + 1) * PSTRIDE + tok] = pv[2 * hr + 1];
    }
    float sm0 = pv[0] + pv[2], sm1 = pv[1] + pv[3];
#pragma unroll
    for (int off = 4; off < 32; off <<= 1) {
      sm0 += __shfl_xor_sync(0xffffffffu, sm0, off);
      sm1 += __shfl_xor_sync(0xffffffffu, sm1, off);
    }
    if (g == 0) {
      sSum[warp * 8 + 2 * c] = sm0;
      sSum[warp * 8 + 2 * c + 1] = sm1;
    }
    __syncthreads();
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int h = 2 * c + e;
      l_run[e] = l_run[e] * alpha[e] + ((sSum[h] + sSum[8 + h]) + (sSum[16 + h] + sSum[24 + h]));
    }

    // ---------------- PV: O^T[dims of group w] += V^T P^T ----------------
    if (!__all_sync(0xffffffffu, alpha[0] == 1.f && alpha[1] == 1.f)) {
#pragma unroll
      for (int m = 0; m < 8; ++m) {
        O[m][0] *= alpha[0];
        O[m][1] *= alpha[1];
        O[m][2] *= alpha[0];
        O[m][3] *= alpha[1];
      }
    }
    // V^T rows: lane -> token 16kk + (lane & 7) + 8 (lane >> 4), bytes + 16 ((lane >> 3) & 1)
    const uint32_t v_base = st_u32 + ((lane & 7) + ((lane >> 4) << 3)) * ROWB + 128 * warp + ((lane >> 3) & 1) * 16;
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      // B = P^T: tokens 16kk + 2c, +1, +8, +9 of head g, times their group-w scale * 2^112
      const int t0 = 16 * kk + 2 * c;
      const float2 p0 = *reinterpret_cast<const float2*>(&sP[g * PSTRIDE + t0]);
      const float2 p1 = *reinterpret_cast<const float2*>(&sP[g * PSTRIDE + t0 + 8]);
      const float* sc = reinterpret_cast<const float*>(st + 512 + 4 * warp);
      const uint32_t b0 = pack_bf16x2(p0.x * (sc[t0 * (ROWB / 4)] * 0x1p112f),
                                      p0.y * (sc[(t0 + 1) * (ROWB / 4)] * 0x1p112f));
      const uint32_t b1 = pack_bf16x2(p1.x * (sc[(t0 + 8) * (ROWB / 4)] * 0x1p112f),
                                      p1.y * (sc[(t0 + 9) * (ROWB / 4)] * 0x1p112f));
#pragma unroll
      for (int jb = 0; jb < 4; ++jb) {  // 32-dim block jb of the warp's 128 dims
        uint32_t r[4];
        ldmatrix_x4_trans(r, v_base + 16 * kk * ROWB + 32 * jb);
        const uint32_t ae[4] = {e4m3x4_even_to_bf16x2(r[0]), e4m3x4_even_to_bf16x2(r[1]),
                                e4m3x4_even_to_bf16x2(r[2]), e4m3x4_even_to_bf16x2(r[3])};
        const uint32_t ao[4] = {e4m3x4_odd_to_bf16x2(r[0]), e4m3x4_odd_to_bf16x2(r[1]),
                                e4m3x4_odd_to_bf16x2(r[2]), e4m3x4_odd_to_bf16x2(r[3])};
        mma_bf16_16816(O[2 * jb], ae, b0, b1);
        mma_bf16_16816(O[2 * jb + 1], ao, b0, b1);
      }
    }
  }
  cp_async_wait_group<0>();

  // ---------------- epilogue ----------------
  if (warp == 0 && g == 0) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      sFin[2 * c + e] = m_run[e];
      sFin[8 + 2 * c + e] = l_run[e];
    }
  }
  __syncthreads();
  const bool direct = nsplit_g == 1;
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const int h = 2 * c + e;
    if (h >= heads) continue;
    const float l = sFin[8 + h], mm = sFin[h];
    const float inv = l > 0.f ? 256.f / l : 0.f;  // P carried 2^112, V 2^-120
    __nv_bfloat16* const dst =
        direct ? p.out + grp * p.o_sg + h * p.o_sh : la.part_o + ((g_local * heads + h) * la.nsplit + split) * 512;
#pragma unroll
    for (int jb = 0; jb < 4; ++jb) {
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        // E tile: dim 128w + 32jb + 16hr + 2g, O tile: the next dim
        const int d = 128 * warp + 32 * jb + 16 * hr + 2 * g;
        *reinterpret_cast<uint32_t*>(dst + d) =
            pack_bf16x2(O[2 * jb][2 * hr + e] * inv, O[2 * jb + 1][2 * hr + e] * inv);
      }
    }
    if (warp == 0 && g == 0) {
      const float lse2 = l > 0.f ? mm + __log2f(l) : -INFINITY;
      if (direct) {
        if (p.lse != nullptr) p.lse[grp * p.l_sg + h * p.l_sh] = lse2 * 0.6931471805599453f;
      } else {
        la.part_lse[(g_local * heads + h) * la.nsplit + split] = lse2;
      }
    }
  }
  if (direct) return;
  combine_splits<C::kWarps>(p, la, g_local, grp, 0, 0, kN8MaxHeads, nsplit_g, sFlag);
}

}  // namespace

std::size_t sparse_fp8_n8_smem_bytes() { return N8Cfg::SMEM; }

void launch_sparse_fp8_n8(int device, int64_t grid, const MlaParams& p, const LaunchArgs& la, cudaStream_t stream) {
  auto* kernel = &mla_sparse_fp8_n8_kernel;
  static std::atomic<uint64_t> done{0};
  const uint64_t bit = device >= 0 && device < 64 ? uint64_t{1} << device : 0;
  if (bit == 0 || (done.load(std::memory_order_acquire) & bit) == 0) {
    LATTE_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, N8Cfg::SMEM));
    done.fetch_or(bit, std::memory_order_acq_rel);
  }
  kernel<<<static_cast<unsigned>(grid), N8Cfg::kThreads, N8Cfg::SMEM, stream>>>(p, la);
  LATTE_CUDA_CHECK_LAUNCH("mla_sparse_fp8_n8_kernel");
}

}  // namespace latte::cuda_sparse_mla
