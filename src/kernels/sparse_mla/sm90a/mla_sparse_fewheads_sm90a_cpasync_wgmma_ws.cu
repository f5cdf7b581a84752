// Sparse MLA over the fp8_ds_mla cache on sm_90a for few heads per token (GLM-5 at TP8 / TP4,
// DeepSeek-V3.2 at TP8), and for more heads in small calls: the heads are wgmma's N dimension (8
// or 16) and the cache rows its M dimension, so no tensor-core lane computes a padded head row
// (the 64-row kernel, mla_sparse_sm90a_cpasync_wgmma_ws.cu, pads the heads to 64). One CTA per
// (token, tile of N heads, split), stages of 64 list entries, 384 threads (a token's head tiles
// each copy and widen its rows: the plan takes tiles only where the calls are small):
//
// - Producer warpgroups 0 and 1 (8 warps). Warp w owns rows w, w + 8, w + 16, w + 24 of every
//   32-row sub-stage: copies them with cp.async (41 16-byte chunks a row, zero-filled for entries
//   that are -1, outside the cache, past topk_lens or past the split) one sub-stage ahead into a
//   raw ring of two sub-stages, then widens the e4m3 codes to f16 exactly (no scale applied) and
//   the bf16 rope to f16 into half of an operand stage once the consumers released it, and copies
//   the four f32 group scales beside. Operand stages (two): nine 64-dim blocks of 64 rows x 128
//   bytes in the 128-byte swizzle, read K-major for S and MN-major for P V.
// - Consumer warpgroup 2. S^T (64 rows x N heads) = K Q^T by wgmma m64nNk16 (A: the stage, B: Q,
//   N rows of 576 f16 staged once), one accumulator per scale group and one for the rope, the
//   row's group scales folded in f32; the online softmax per head (a column: the maximum over the
//   stage's rows through shuffles and a 4-warp exchange in shared memory); (P x scale_g)^T in f16
//   to shared memory, one N x 64 tile per group; O^T (512 dims x N) += V^T (P x scale_g)^T by
//   wgmma m64nNk16 over eight 64-dim tiles (A: the stage read MN-major), waited for before the
//   next stage's S, so the stage goes back to the producers early.
//
// With nsplit > 1 the CTA writes its normalized partial (f32, the 64-row kernel's layout: a
// tile's heads are rows of their 64-row group's part) and log2-sum-exp, and the 64-row kernel's
// combine writes out and lse. Every sum has a fixed order and nothing depends on the other tokens
// of the call: bitwise deterministic and batch invariant. Design notes and measurements:
// docs/kernels/hopper_mla.md, "Few heads".
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <atomic>
#include <cstdint>

#include "kernels/common/cp_async.cuh"
#include "kernels/common/ldmatrix.cuh"
#include "kernels/common/pdl.cuh"
#include "kernels/common/sm90a_tma.cuh"
#include "kernels/common/sm90a_wgmma.cuh"
#include "kernels/common/sm90a_wgmma_16bit.cuh"
#include "kernels/common/smem_limit.hpp"
#include "kernels/sparse_mla/sm90a/mla_sm90a_rows.cuh"

namespace latte::hopper_mla {
namespace {

constexpr int kRows = 64;         // list entries per stage: wgmma's m
constexpr int kRowBytes = 656;
constexpr int kBlockBytes = kRows * 128;  // one 64-dim block of a stage
constexpr int kStageBytes = kKBlocks * kBlockBytes;
constexpr int kStages = 2;
constexpr int kScaleRowBytes = kGroups * 4;

constexpr int kProducerWarps = 8;
constexpr int kThreads = 32 * kProducerWarps + 128;  // + the consumer warpgroup
// The raw ring: two sub-stages of 32 list entries (the copies run one sub-stage ahead); producer
// warp w owns rows w + 8 i (i < 4) of each.
constexpr int kSubRows = kTileRows;
constexpr int kRawStages = 2;
constexpr int kAhead = kRawStages - 1;
constexpr int kRowsPerWarp = kSubRows / kProducerWarps;
constexpr int kRawBytes = kSubRows * kRowBytes;
constexpr int kSubsPerStage = kRows / kSubRows;

// Shared memory (from a 1024-byte aligned base): Q (N rows, K-major) | operand stages | (P x
// scale_g)^T per group (N rows of 64 f16, K-major) | raw ring | the stages' valid rows (u8) |
// scales [stage][row][group] f32 | column maxima and sums [warp][head] | full[2], empty[2].
template <int NH>
struct Layout {
  static_assert(NH == 8 || NH == 16, "wgmma n8 or n16");
  static constexpr int kQBlockBytes = NH * 128;
  static constexpr int kPBytes = NH * 128;
  static constexpr int kOffQ = 0;
  static constexpr int kOffKv = kKBlocks * kQBlockBytes;
  static constexpr int kOffP = kOffKv + kStages * kStageBytes;
  static constexpr int kOffRaw = kOffP + kGroups * kPBytes;
  static constexpr int kOffValid = kOffRaw + kRawStages * kRawBytes;
  static constexpr int kOffScale = kOffValid + kStages * kRows;
  static constexpr int kOffMax = kOffScale + kStages * kRows * kScaleRowBytes;
  static constexpr int kOffSum = kOffMax + 4 * NH * 4;
  static constexpr int kOffBars = kOffSum + 4 * NH * 4;
  static constexpr int kSmemBytes = kOffBars + 2 * kStages * 8 + 1024;  // + room to align the base
  static_assert(kOffKv % 1024 == 0 && kOffP % 1024 == 0, "swizzled operands start 1024-byte aligned");
  static_assert(kOffRaw % 16 == 0 && kOffScale % 16 == 0 && kOffBars % 8 == 0, "alignment");
  static_assert(kSmemBytes <= 227 * 1024, "one CTA per SM");
};

__device__ __forceinline__ void consumer_sync() { asm volatile("bar.sync 1, 128;\n" ::: "memory"); }

// Starts warp w's copies of sub-stage rows w + 8 i into the raw sub-stage at `dst0`, zero-filled
// for rows that are -1 or outside the cache; `slot` (lane i < kRowsPerWarp: row w + 8 i) from
// stage_slot. Lane l copies chunks l and 32 + l of each row. Returns the valid rows as bits.
__device__ __forceinline__ uint32_t start_copies(const MlaParams& p, int slot, uint32_t dst0, int w, int lane) {
  const bool ok = lane < kRowsPerWarp && slot >= 0 && slot < p.num_blocks * p.block_size;
  const uint32_t mask = __ballot_sync(0xffffffffu, ok);
  const auto row_addr = reinterpret_cast<unsigned long long>(slot_row(p, slot, ok));
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const auto* src = reinterpret_cast<const uint8_t*>(__shfl_sync(0xffffffffu, row_addr, i));
    copy_fp8_row(dst0 + (w + kProducerWarps * i) * kRowBytes, src, lane, (mask >> i) & 1u);
  }
  return mask;
}

// Widens warp w's landed rows of a sub-stage (raw rows at `raw`) into the operand stage rows at
// `tile` (the sub-stage's first row): the codes row by row (widen_codes_row); then lane l < 32
// converts rope chunk l % 8 of row w + 8 (l / 8) and lane l < 16 copies scale l % 4 of row
// w + 8 (l / 4).
__device__ __forceinline__ void widen_rows(uint32_t raw, uint32_t tile, uint32_t scales, int w, int lane) {
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int row = w + kProducerWarps * i;
    widen_codes_row(raw + row * kRowBytes, tile, row, kBlockBytes, lane);
  }
  if (lane < 8 * kRowsPerWarp) {
    const int row = w + kProducerWarps * (lane >> 3), c = lane & 7;
    st_shared16(tile + tile_chunk(row, 64 + c, kBlockBytes),
                bf16x8_to_f16x8(ld_shared16(raw + row * kRowBytes + kLatent + 16 + 16 * c)));
  }
  if (lane < 4 * kRowsPerWarp) {
    const int row = w + kProducerWarps * (lane >> 2), q = lane & 3;
    uint32_t sc;
    asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(sc) : "r"(raw + row * kRowBytes + kLatent + 4 * q));
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(scales + row * kScaleRowBytes + 4 * q), "r"(sc) : "memory");
  }
}

// The producer warpgroups: sub-stage u (list entries kSubRows u .., rows kSubRows (u %
// kSubsPerStage) .. of stage u / kSubsPerStage) is copied kAhead sub-stages ahead into raw stage
// u % kRawStages and widened into its operand stage once the consumers released it; a stage is
// full once every producer thread has widened all its sub-stages.
template <int NH>
__device__ __forceinline__ void produce(const MlaParams& p, int g, const Span& span, int tiles, uint8_t* base,
                                        int tid) {
  using L = Layout<NH>;
  constexpr int kA = kAhead, kRpw = kRowsPerWarp;
  const int w = tid >> 5, lane = tid & 31;
  const uint32_t sb = cuda::smem_addr(base);
  const uint32_t full = sb + L::kOffBars, empty = full + 8 * kStages;
  // Slots in batches of kPer sub-stages, a batch ahead: lane i holds the slot of row
  // w + 8 (i % kRpw) of sub-stage kPer b + i / kRpw; one load per lane covers kPer sub-stages, so
  // a slot's load latency is hidden behind a whole batch of copies and widening.
  constexpr int kPer = 32 / kRpw;
  const auto batch = [&](int b) {
    return stage_slot<false>(p, g, span, 0, (kPer * b + lane / kRpw) * kSubRows + w + kProducerWarps * (lane % kRpw));
  };
  const auto raw_at = [&](int u) { return sb + L::kOffRaw + (u % kRawStages) * kRawBytes; };
  const int subs = kSubsPerStage * tiles;
  int cur = batch(0), nxt = batch(1);
  // Starts sub-stage v's copies (v < subs; v ascending, so the batches move forward).
  const auto start = [&](int v) {
    if (v % kPer == 0 && v > 0) {
      cur = nxt;
      nxt = batch(v / kPer + 1);
    }
    const int slot = __shfl_sync(0xffffffffu, cur, kRpw * (v % kPer) + (lane % kRpw));
    return start_copies(p, slot, raw_at(v), w, lane);
  };
  uint32_t masks = 0;  // bits kRpw k ..: the valid rows of sub-stage u + k
#pragma unroll
  for (int k = 0; k < kA; ++k) {
    if (k < subs) masks |= start(k) << (kRpw * k);
    cuda::cp_async_commit();
  }
  for (int u = 0; u < subs; ++u) {
    if (u + kA < subs) masks |= start(u + kA) << (kRpw * kA);
    cuda::cp_async_commit();
    cuda::cp_async_wait<kA>();  // sub-stage u's copies (this thread's)
    __syncwarp();               // ... and the other lanes'
    const int t = u / kSubsPerStage, part = u % kSubsPerStage, s = t % kStages;
    if (part == 0) wg::mbarrier_wait(empty + 8 * s, ((t / kStages) & 1u) ^ 1u);
    widen_rows(raw_at(u), sb + L::kOffKv + s * kStageBytes + part * kSubRows * 128,
               sb + L::kOffScale + (s * kRows + part * kSubRows) * kScaleRowBytes, w, lane);
    if (lane < kRpw) base[L::kOffValid + s * kRows + part * kSubRows + w + kProducerWarps * lane] = (masks >> lane) & 1u;
    masks >>= kRpw;
    __syncwarp();  // every lane's reads of raw stage u before this warp's next copies into it
    if (part == kSubsPerStage - 1) {  // this thread's stores of the stage, then its arrival
      wg::fence_proxy_async_smem();
      wg::mbarrier_arrive(full + 8 * s);
    }
  }
}

// Element i of a thread's m64nN accumulator: row 16 w + l / 4 + 8 ((i >> 1) & 1), column
// 8 (i >> 2) + 2 (l % 4) + (i & 1); the thread's columns are indexed ci = 2 (i >> 2) + (i & 1).
__device__ __forceinline__ int col_of(int ci, int l) { return 8 * (ci >> 1) + 2 * (l & 3) + (ci & 1); }
__device__ __forceinline__ int ci_of(int i) { return 2 * (i >> 2) + (i & 1); }

// The consumer warpgroup: O^T for heads h0 .. h0 + N - 1 of the CTA's token, written (or its
// partial: rows of part `part`, the 64-row group of h0) for heads < p.heads.
template <int NH>
__device__ __forceinline__ void consume(const MlaParams& p, int g, int h0, int tiles, uint8_t* base, uint32_t sb,
                                        int ctid, const Grid& grid, int64_t part) {
  using L = Layout<NH>;
  constexpr int NA = NH / 2;  // accumulator registers of an m64nN tile
  constexpr int NC = NH / 4;  // columns (heads) a thread holds
  const int w = ctid >> 5, l = ctid & 31;
  const uint32_t full = sb + L::kOffBars, empty = full + 8 * kStages;
  const float scale2 = p.scale * 1.4426950408889634f;
  float* const smax = reinterpret_cast<float*>(base + L::kOffMax);
  float* const ssum = reinterpret_cast<float*>(base + L::kOffSum);
  float m[NC], lsum[NC];
#pragma unroll
  for (int c = 0; c < NC; ++c) m[c] = -INFINITY, lsum[c] = 0.f;
  float o[8][NA];
#pragma unroll
  for (int d = 0; d < 8; ++d)
#pragma unroll
    for (int i = 0; i < NA; ++i) o[d][i] = 0.f;
  const uint64_t q_desc = wg::sw128_kmajor_desc(sb + L::kOffQ);
  const int r0 = 16 * w + (l >> 2);  // the thread's stage rows r0, r0 + 8
  if (tiles > 0) {
#pragma unroll
    for (int d = 0; d < 8; ++d) wg::fence_accumulators(o[d]);
    for (int t = 0; t < tiles; ++t) {
      const int s = t % kStages;
      wg::mbarrier_wait(full + 8 * s, (t / kStages) & 1u);
      const uint32_t st = sb + L::kOffKv + s * kStageBytes;
      const uint64_t kv_desc = wg::sw128_kmajor_desc(st);
      float acc[kGroups + 1][NA];  // the latent's scale groups, the rope
      wg::wgmma_fence();
#pragma unroll
      for (int a = 0; a <= kGroups; ++a) {
#pragma unroll
        for (int kb = 2 * a; kb < 2 * a + (a < kGroups ? 2 : 1); ++kb)
#pragma unroll
          for (int ks = 0; ks < 4; ++ks)
            wg::WgmmaSs<wg::Half16::f16, NH>::mma(acc[a], wg::desc_advance(kv_desc, kb * kBlockBytes + 32 * ks),
                                                  wg::desc_advance(q_desc, kb * L::kQBlockBytes + 32 * ks),
                                                  kb > 2 * a || ks > 0);
      }
      wg::wgmma_commit();
      wg::wgmma_wait<0>();  // S_t
#pragma unroll
      for (int a = 0; a <= kGroups; ++a) wg::fence_accumulators(acc[a]);
#pragma unroll
      for (int d = 0; d < 8; ++d) wg::fence_accumulators(o[d]);
      const float4* scl = reinterpret_cast<const float4*>(base + L::kOffScale) + s * kRows;
      const uint8_t* valid = base + L::kOffValid + s * kRows;
      const float4 sc[2] = {scl[r0], scl[r0 + 8]};
      const bool ok[2] = {valid[r0] != 0, valid[r0 + 8] != 0};
      float sv[NA], cmax[NC];
#pragma unroll
      for (int c = 0; c < NC; ++c) cmax[c] = -INFINITY;
#pragma unroll
      for (int i = 0; i < NA; ++i) {
        const int h = (i >> 1) & 1;
        float x = acc[0][i] * sc[h].x;
        x = fmaf(acc[1][i], sc[h].y, x);
        x = fmaf(acc[2][i], sc[h].z, x);
        x = fmaf(acc[3][i], sc[h].w, x);
        sv[i] = ok[h] ? (x + acc[kGroups][i]) * scale2 : -INFINITY;
        cmax[ci_of(i)] = fmaxf(cmax[ci_of(i)], sv[i]);
      }
      // A head's maximum over the stage's 64 rows: the 8 lanes of a column, then the 4 warps.
#pragma unroll
      for (int c = 0; c < NC; ++c) {
#pragma unroll
        for (int off = 4; off < 32; off <<= 1) cmax[c] = fmaxf(cmax[c], __shfl_xor_sync(0xffffffffu, cmax[c], off));
        if (l < 4) smax[w * NH + col_of(c, l)] = cmax[c];
      }
      consumer_sync();
      float alpha[NC], mb[NC], rs[NC];
      bool unit = true;
#pragma unroll
      for (int c = 0; c < NC; ++c) {
        const int col = col_of(c, l);
        const float tm = fmaxf(fmaxf(smax[col], smax[NH + col]), fmaxf(smax[2 * NH + col], smax[3 * NH + col]));
        const float mn = fmaxf(m[c], tm);
        alpha[c] = mn == -INFINITY ? 1.f : cuda::sm80::fast_exp2(m[c] - mn);
        unit = unit && alpha[c] == 1.f;
        m[c] = mn;
        mb[c] = mn == -INFINITY ? 0.f : mn;
        rs[c] = 0.f;
      }
      // (P x scale_g)^T: head row col, stage row r (K-major, 128-byte swizzle), one tile per group.
#pragma unroll
      for (int i = 0; i < NA; ++i) {
        const int h = (i >> 1) & 1, c = ci_of(i), r = r0 + 8 * h;
        const float pv = cuda::sm80::fast_exp2(sv[i] - mb[c]);
        rs[c] += pv;
        const uint32_t at = sb + L::kOffP + wg::sw128_offset(col_of(c, l), r >> 3) + 2 * (r & 7);
        const float sg[kGroups] = {sc[h].x, sc[h].y, sc[h].z, sc[h].w};
#pragma unroll
        for (int gi = 0; gi < kGroups; ++gi) {
          const __half v = __float2half_rn(pv * sg[gi]);
          asm volatile("st.shared.b16 [%0], %1;\n" ::"r"(at + gi * L::kPBytes), "h"(__half_as_ushort(v)) : "memory");
        }
      }
#pragma unroll
      for (int c = 0; c < NC; ++c) lsum[c] = lsum[c] * alpha[c] + rs[c];
      if (!__all_sync(0xffffffffu, unit)) {
#pragma unroll
        for (int d = 0; d < 8; ++d)
#pragma unroll
          for (int i = 0; i < NA; ++i) o[d][i] *= alpha[ci_of(i)];
      }
      wg::fence_proxy_async_smem();
      consumer_sync();  // every (P x scale_g)^T element in, every column maximum read
      // O^T[64 d .. 64 d + 63] += V^T (P x scale_{d / 2})^T, 4 k16 steps of 16 stage rows.
      wg::wgmma_fence();
#pragma unroll
      for (int d = 0; d < 8; ++d)
#pragma unroll
        for (int kk = 0; kk < kRows / 16; ++kk)
          wg::WgmmaSs<wg::Half16::f16, NH, true>::mma(
              o[d], wg::sw128_mnmajor_desc(st + d * kBlockBytes + kk * 16 * 128, kBlockBytes, 1024),
              wg::desc_advance(wg::sw128_kmajor_desc(sb + L::kOffP + (d >> 1) * L::kPBytes), 32 * kk), 1);
      wg::wgmma_commit();
      // P V_t waited for here, so stage t goes back to the producers before S_{t+1} (the widening
      // of stage t + 2 is what the consumers wait for next; H200: -1-3 % against keeping P V_t in
      // flight behind S_{t+1}).
      wg::wgmma_wait<0>();
#pragma unroll
      for (int d = 0; d < 8; ++d) wg::fence_accumulators(o[d]);
      wg::mbarrier_arrive(empty + 8 * s);
    }
  }
  // Each head's sum: the 8 lanes of a column, then the 4 warps in order.
#pragma unroll
  for (int c = 0; c < NC; ++c) {
#pragma unroll
    for (int off = 4; off < 32; off <<= 1) lsum[c] += __shfl_xor_sync(0xffffffffu, lsum[c], off);
    if (l < 4) ssum[w * NH + col_of(c, l)] = lsum[c];
  }
  consumer_sync();
  float inv[NC], lse2[NC];
#pragma unroll
  for (int c = 0; c < NC; ++c) {
    const int col = col_of(c, l);
    const float tot = ((ssum[col] + ssum[NH + col]) + ssum[2 * NH + col]) + ssum[3 * NH + col];
    inv[c] = tot > 0.f ? 1.f / tot : 0.f;
    lse2[c] = tot > 0.f ? m[c] + log2f(tot) : -INFINITY;
  }
#pragma unroll
  for (int c = 0; c < NC; ++c) {
    const int head = h0 + col_of(c, l), row = head % kHeadsPerCta;
    if (head >= p.heads) continue;
#pragma unroll
    for (int d = 0; d < 8; ++d)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int i = 4 * (c >> 1) + 2 * h + (c & 1);
        const int dim = 64 * d + r0 + 8 * h;
        if (grid.part_o == nullptr) {
          p.out[g * p.o_sg + head * p.o_sh + dim] = __float2bfloat16_rn(o[d][i] * inv[c]);
        } else {
          grid.part_o[(part * kHeadsPerCta + row) * kLatent + dim] = o[d][i] * inv[c];
        }
      }
    if (w == 0 && l < 4) {
      if (grid.part_o == nullptr) {
        if (p.lse != nullptr) p.lse[g * p.l_sg + head * p.l_sh] = lse2[c] * 0.6931471805599453f;
      } else {
        grid.part_lse[part * kHeadsPerCta + row] = lse2[c];
      }
    }
  }
}

// Q's N rows (heads h0 ..; past p.heads: zeros) by the consumer warpgroup (thread ctid), bf16 ->
// f16 (exact in range), K-major: every load issued before the first store.
template <int NH>
__device__ __forceinline__ void stage_q(const MlaParams& p, int g, int h0, bool q_aligned, uint32_t sbase, int ctid) {
  using L = Layout<NH>;
  constexpr int kChunks = NH * (kDims / 8), kPer = (kChunks + 127) / 128;
  uint4 v[kPer];
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int i = ctid + 128 * k, r = i / (kDims / 8), c = i % (kDims / 8), h = h0 + r;
    v[k] = make_uint4(0, 0, 0, 0);
    if (i < kChunks && h < p.heads) {
      v[k] = load_q8(c < kLatent / 8 ? p.q + g * p.q_sg + h * p.q_sh + 8 * c
                                     : p.q_rope + g * p.qr_sg + h * p.qr_sh + 8 * (c - kLatent / 8),
                     q_aligned);
    }
  }
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int i = ctid + 128 * k;
    if (i < kChunks)
      st_shared16(sbase + L::kOffQ + tile_chunk(i / (kDims / 8), i % (kDims / 8), L::kQBlockBytes), bf16x8_to_f16x8(v[k]));
  }
}

template <int NH>
__global__ void __launch_bounds__(kThreads, 1) mla_sparse_fewheads_sm90a_kernel(const MlaParams p, const Grid grid,
                                                                                const bool q_aligned) {
  using L = Layout<NH>;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t sbase = (cuda::smem_addr(smem_raw) + 1023u) & ~1023u;
  uint8_t* base = smem_raw + (sbase - cuda::smem_addr(smem_raw));
  // blockIdx.x = (launch group * head tiles + tile) * nsplit + split
  const int htiles = (p.heads + NH - 1) / NH;
  const int split = static_cast<int>(blockIdx.x % grid.nsplit);
  const int ht = static_cast<int>((blockIdx.x / grid.nsplit) % htiles);
  const int gl = static_cast<int>(blockIdx.x / (static_cast<int64_t>(grid.nsplit) * htiles));
  const int g = grid.g_begin + gl, h0 = ht * NH;
  // The partial of (group, 64-row group of h0, split): NH divides 64, so one part holds the tile.
  const int64_t part = (static_cast<int64_t>(gl) * grid.rgroups + h0 / kHeadsPerCta) * grid.nsplit + split;
  const int tid = threadIdx.x;
  const Span span = split_span(list_len<false>(p, g), split, grid.chunk);
  if (split > 0 && span.end == span.begin) return;
  const int tiles = (span.end - span.begin + kRows - 1) / kRows;
  if (tid == 0) {
    const uint32_t full = sbase + L::kOffBars;
    for (int s = 0; s < kStages; ++s) {
      wg::mbarrier_init(full + 8 * s, kProducerWarps * 32);  // every producer thread
      wg::mbarrier_init(full + 8 * (kStages + s), 128);      // every consumer thread
    }
    wg::mbarrier_init_fence();
  }
  __syncthreads();  // the barriers initialized
  // The combine (launched dependent) may start once every CTA is here; it waits for this grid's
  // completion before it reads a partial.
  cuda::pdl_launch_dependents();
  if (tid < kProducerWarps * 32) {
    produce<NH>(p, g, span, tiles, base, tid);
  } else {
    // The consumers stage Q while the producers' first slots and copies are in flight.
    const int ctid = tid - kProducerWarps * 32;
    stage_q<NH>(p, g, h0, q_aligned, sbase, ctid);
    wg::fence_proxy_async_smem();
    consumer_sync();
    consume<NH>(p, g, h0, tiles, base, sbase, ctid, grid, part);
  }
}

template <int NH>
void launch_nh(const MlaParams& p, const Grid& grid, int64_t ctas, bool q_aligned, int device, cudaStream_t stream) {
  using L = Layout<NH>;
  static std::atomic<uint64_t> smem_set{0};  // the shared-memory opt-in, once per device
  cuda::allow_dynamic_smem(mla_sparse_fewheads_sm90a_kernel<NH>, L::kSmemBytes, device, smem_set);
  mla_sparse_fewheads_sm90a_kernel<NH><<<static_cast<unsigned>(ctas), kThreads, L::kSmemBytes, stream>>>(p, grid, q_aligned);
}

}  // namespace

void launch_fewheads_sm90a(const MlaParams& p, const Grid& grid, int head_tile, int64_t ctas, bool q_aligned,
                           int device, cudaStream_t stream) {
  (head_tile == 8 ? launch_nh<8> : launch_nh<16>)(p, grid, ctas, q_aligned, device, stream);
}

}  // namespace latte::hopper_mla
