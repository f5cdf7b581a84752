// Sparse MLA and dense MLA decode on sm_90a over the fp8_ds_mla or the bf16 cache: 64 (query,
// head) rows of one group (a query token, or a decode request's s_q x heads rows) per CTA, warp
// specialized, stages of 32 list entries (sparse: the token's slots; decode: the request's
// positions through its block table), 16-bit wgmma (f16 for fp8 codes, bf16 for a bf16 cache).
//
// - Producer warpgroup (warps 0-3). Each warp owns rows w, w + 4, ... of every stage and copies
//   them with cp.async (16 bytes a lane, zero-filled for entries that are -1, outside the cache,
//   past topk_lens or past the split), two stages ahead. fp8_ds_mla: into a raw ring of three
//   stages; once the consumers release an operand stage it widens the e4m3 codes to f16 exactly
//   (f16 holds every e4m3 value; no scale applied), the bf16 rope to f16, the four f32 group
//   scales beside (two operand stages). bf16: straight into the operand stage (three of them), no
//   widening. Operand stages: nine 64-dim blocks of 32 rows x 128 bytes in the 128-byte swizzle,
//   read K-major for S and MN-major for P V.
// - Two consumer warpgroups split S = Q K^T by dimension over all 32 rows (wgmma m64n32k16, Q
//   staged once in the operand type): consumer 0 dims 0-255, consumer 1 dims 256-511 and the
//   rope (fp8: each folds its scale groups' scales into its partial, in f32); the partials meet
//   through shared memory and both run the same online softmax (base 2). Consumer c owns output
//   dims 256c .. 256c + 255 (fp8: scale groups 2c, 2c + 1): O += P V (fp8: (P x scale_g) V_codes
//   per group), wgmma m64n128k16 with P as the register A operand.
//
// With nsplit > 1 each CTA writes its normalized partial (f32) and log2-sum-exp to the
// workspace and a combine kernel writes out and lse; otherwise the CTA writes them itself.
// Design notes and measurements: docs/kernels/hopper_mla.md.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>

#include "kernels/common/cp_async.cuh"
#include "kernels/common/cuda_check.cuh"
#include "kernels/common/launch.hpp"
#include "kernels/common/ldmatrix.cuh"
#include "kernels/common/mma_sync.cuh"
#include "kernels/common/pdl.cuh"
#include "kernels/common/smem_limit.hpp"
#include "kernels/common/sm90a_tma.cuh"
#include "kernels/common/sm90a_wgmma.cuh"
#include "kernels/common/sm90a_wgmma_16bit.cuh"
#include "kernels/sparse_mla/sm90a/mla_sm90a.hpp"
#include "kernels/sparse_mla/sm90a/mla_sm90a_rows.cuh"
#include "kernels/sparse_mla/smxx/mla_kv_slots.cuh"
#include "latte/error.hpp"

namespace latte::hopper_mla {
namespace {

constexpr int kThreads = 384;
constexpr int kProducerRegs = 56, kConsumerRegs = 224;
static_assert(128 * kProducerRegs + 256 * kConsumerRegs <= kThreads * 168,
              "the consumers take what the producers give");
constexpr int kQBlockBytes = kHeadsPerCta * 128;  // one 64-dim block of Q's 64 rows
constexpr int kBlockBytes = kTileRows * 128;      // one 64-dim block of a stage's rows
constexpr int kTileBytes = kKBlocks * kBlockBytes;
constexpr int kXTileBytes = kHeadsPerCta * kTileRows * 4;  // a consumer's partial S (64 x 32 f32)
static_assert(kTileRows == 32, "a consumer's S is m64n32 over the stage's rows; a producer warp owns 8 of them");

// What differs between the caches: the operand type, the row, the stages and the shared-memory
// layout (from a 1024-byte aligned base): Q | operand stages | exchange tiles | raw ring (fp8) |
// the stages' valid rows (u8) | scales (fp8: [stage][row][group] f32) | full[kStages], empty[kStages].
template <bool kFp8>
struct Cache {
  static constexpr wg::Half16 kType = kFp8 ? wg::Half16::f16 : wg::Half16::bf16;
  static constexpr int kRowBytes = kFp8 ? 656 : 2 * kDims;
  static constexpr int kStages = kFp8 ? 2 : 3;     // operand stages
  static constexpr int kRawStages = kFp8 ? 3 : 0;  // raw 656-byte row stages (fp8: the copies run two ahead)
  static constexpr int kRawBytes = kTileRows * kRowBytes;
  static constexpr int kOffQ = 0;
  static constexpr int kOffKv = kOffQ + kKBlocks * kQBlockBytes;
  static constexpr int kOffX = kOffKv + kStages * kTileBytes;
  static constexpr int kOffRaw = kOffX + 2 * kXTileBytes;
  static constexpr int kOffValid = kOffRaw + kRawStages * kRawBytes;
  static constexpr int kOffScale = (kOffValid + kStages * kTileRows + 15) / 16 * 16;
  static constexpr int kOffBars = kOffScale + (kFp8 ? kStages * kTileRows * kGroups * 4 : 0);
  static constexpr int kSmemBytes = kOffBars + 2 * kStages * 8 + 1024;  // + room to align the base
  static_assert(kRowBytes % 16 == 0 && kOffRaw % 16 == 0, "16-byte copies");
  static_assert(kSmemBytes <= 227 * 1024, "one CTA per SM");
};

__device__ __forceinline__ void consumer_sync() { asm volatile("bar.sync 1, 256;\n" ::: "memory"); }

// Row r of a group (r < s_q x heads): query r / heads, head r % heads. Sparse groups hold one
// query (row = head). Decode: the quotient from a float reciprocal, corrected by one either way
// (r < 512): an integer division per staged query chunk is a prologue cost every CTA pays
// (docs/kernels/hopper_mla.md).
struct RowAt {
  int i, h;
};
template <bool kDecode>
__device__ __forceinline__ RowAt row_at(const MlaParams& p, int r) {
  if constexpr (!kDecode) {
    return {0, r};
  } else {
    int i = __float2int_rz(__fdividef(static_cast<float>(r) + 0.5f, static_cast<float>(p.heads)));
    int h = r - i * p.heads;
    if (h < 0) --i, h += p.heads;
    if (h >= p.heads) ++i, h -= p.heads;
    return {i, h};
  }
}

constexpr int kQChunks = kHeadsPerCta * (kDims / 8);  // 8-dim chunks of the CTA's 64 query rows
static_assert(kQChunks % kThreads == 0, "every thread stages the same number of query chunks");

// Chunk i of the CTA's query rows (row r0 + i / 72 of group g), null past the group's rows.
template <bool kDecode>
__device__ __forceinline__ const __nv_bfloat16* q_chunk(const MlaParams& p, int g, int r0, int rows, int i) {
  const int r = r0 + i / (kDims / 8), c = i % (kDims / 8);
  if (r >= rows) return nullptr;
  const RowAt at = row_at<kDecode>(p, r);
  return c < kLatent / 8 ? p.q + g * p.q_sg + at.i * p.q_si + at.h * p.q_sh + 8 * c
                         : p.q_rope + g * p.qr_sg + at.i * p.qr_si + at.h * p.qr_sh + 8 * (c - kLatent / 8);
}

// The CTA's 64 query rows into the operand layout (fp8 rows: bf16 -> f16, exact in range); rows
// past the group's are zeros (computed, never written out). All loads are issued before the first
// store (one memory latency, not one per chunk); `q_aligned` (host-checked) picks 16-byte loads.
template <bool kFp8, bool kDecode>
__device__ __forceinline__ void stage_q(const MlaParams& p, int g, int r0, int rows, bool q_aligned, uint8_t* base,
                                        int tid) {
  constexpr int kPer = kQChunks / kThreads;
  uint4 v[kPer];
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const __nv_bfloat16* src = q_chunk<kDecode>(p, g, r0, rows, tid + k * kThreads);
    v[k] = src == nullptr ? make_uint4(0, 0, 0, 0) : load_q8(src, q_aligned);
  }
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int i = tid + k * kThreads;
    st_shared16(cuda::smem_addr(base + Cache<kFp8>::kOffQ) + tile_chunk(i / (kDims / 8), i % (kDims / 8), kQBlockBytes),
                kFp8 ? bf16x8_to_f16x8(v[k]) : v[k]);
  }
}

// A producer warp's rows of a stage: w, w + 4, ..., w + 28 (kRowsPerWarp of them).
constexpr int kRowsPerWarp = kTileRows / 4;

// Starts warp w's copies of stage t, zero-filled for rows that are -1, outside the cache or past
// the list; `slot` (lane i < 8: row w + 4 i) comes from stage_slot. fp8: into raw stage
// t % kRawStages, 41 16-byte copies per row (lane l copies chunks l and 32 + l). bf16: into
// operand stage t % kStages in the operand layout, 72 per row (chunks l, 32 + l, 64 + l; the eight
// lanes of a phase write one 128-byte row of a block). Returns the valid rows as bits 0-7.
template <bool kFp8>
__device__ __forceinline__ uint32_t start_copies(const MlaParams& p, int slot, int t, uint8_t* base, int w, int lane) {
  using C = Cache<kFp8>;
  const bool ok = lane < kRowsPerWarp && slot >= 0 && slot < p.num_blocks * p.block_size;
  const uint32_t mask = __ballot_sync(0xffffffffu, ok);
  const uint32_t dst0 = kFp8 ? cuda::smem_addr(base + C::kOffRaw + (t % C::kRawStages) * C::kRawBytes)
                             : cuda::smem_addr(base + C::kOffKv + (t % C::kStages) * kTileBytes);
  // Lane i's row address, computed once (the slot's block and offset) and handed round.
  const auto row_addr = reinterpret_cast<unsigned long long>(slot_row(p, slot, ok));
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const bool v = (mask >> i) & 1u;
    const auto* src = reinterpret_cast<const uint8_t*>(__shfl_sync(0xffffffffu, row_addr, i));
    if constexpr (kFp8) {
      copy_fp8_row(dst0 + (w + 4 * i) * C::kRowBytes, src, lane, v);
    } else {
      const int row = w + 4 * i;
      cuda::cp_async_16_s(dst0 + tile_chunk(row, lane, kBlockBytes), src + 16 * lane, v);
      cuda::cp_async_16_s(dst0 + tile_chunk(row, 32 + lane, kBlockBytes), src + 16 * (32 + lane), v);
      if (lane < kDims / 8 - 64) cuda::cp_async_16_s(dst0 + tile_chunk(row, 64 + lane, kBlockBytes), src + 16 * (64 + lane), v);
    }
  }
  return mask;
}

// Widens a producer warp's eight landed rows of a stage (raw rows at `raw`, shared addresses):
// the codes row by row (widen_codes_row); then every lane converts two of the 64 rope chunks (row
// w + 4 (l / 4), chunks 2 (l % 4) and 2 (l % 4) + 1) and copies one of the 32 scales (group
// l % 4). Rows not copied were zero-filled and widen to zeros.
__device__ __forceinline__ void widen_rows(uint32_t raw, uint32_t tile, uint32_t scales, int w, int lane) {
  constexpr int kRow = Cache<true>::kRowBytes;
#pragma unroll 4
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int row = w + 4 * i;
    widen_codes_row(raw + row * kRow, tile, row, kBlockBytes, lane);
  }
  const int row = w + 4 * (lane >> 2), q = lane & 3;
  const uint32_t src = raw + row * kRow + kLatent;  // the scales, then the rope
#pragma unroll
  for (int k = 0; k < 2; ++k)
    st_shared16(tile + tile_chunk(row, 64 + 2 * q + k, kBlockBytes), bf16x8_to_f16x8(ld_shared16(src + 16 + 16 * (2 * q + k))));
  uint32_t sc;
  asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(sc) : "r"(src + 4 * q));
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(scales + 4 * (kGroups * row + q)), "r"(sc) : "memory");
}

// The producer warpgroup. Each warp copies (and for fp8 widens) its own rows of every stage, no
// barrier between producer warps. fp8: its copies run two stages ahead into the raw ring
// (cp.async groups); it widens stage t into operand stage t % kStages once the consumers have
// released it. bf16: stage t is full when its copies have landed; then the copies of stage t + 2
// start once the consumers have released that operand stage (stage t - 1's, released once they
// have S_t).
template <bool kFp8, bool kDecode>
__device__ __forceinline__ void produce(const MlaParams& p, int g, const Span& span, int tiles, uint8_t* base,
                                        int tid) {
  using C = Cache<kFp8>;
  constexpr int kAhead = 2;  // stages whose copies are in flight behind the one being completed
  const int w = tid >> 5, lane = tid & 31;
  const uint32_t full = cuda::smem_addr(base + C::kOffBars), empty = full + 8 * C::kStages;
  const int my_row = w + 4 * lane;  // lanes 0-7: the rows whose slots they load
  uint32_t masks = 0;               // bits 8k .. 8k + 7: the valid rows of stage t + k
  const auto slot_of = [&](int u) { return lane < kRowsPerWarp ? stage_slot<kDecode>(p, g, span, u, my_row) : -1; };
#pragma unroll
  for (int k = 0; k < kAhead; ++k) {
    if (k < tiles) masks |= start_copies<kFp8>(p, slot_of(k), k, base, w, lane) << (8 * k);
    cuda::cp_async_commit();
  }
  // The slots of the next two stages to start, loaded two stages ahead: a load issued behind a
  // stage's copies returns late, and the copies of the stage after wait for it.
  int next_slot = slot_of(kAhead), after_slot = slot_of(kAhead + 1);
  // Starts stage u's copies (u < tiles), their valid rows at bits `at` of masks.
  const auto start = [&](int u, int at) {
    masks |= start_copies<kFp8>(p, next_slot, u, base, w, lane) << at;
    next_slot = after_slot;
    after_slot = slot_of(u + 2);
  };
  for (int t = 0; t < tiles; ++t) {
    const int u = t + kAhead;  // the stage whose copies start in this step
    if constexpr (kFp8) {      // into the raw stage that stage t - 1 was widened from
      if (u < tiles) start(u, 8 * kAhead);
      cuda::cp_async_commit();
    }
    cuda::cp_async_wait<kFp8 ? kAhead : kAhead - 1>();  // stage t's copies (this thread's)
    __syncwarp();                                       // ... and the other lanes'
    const int s = t % C::kStages;
    if constexpr (kFp8) {
      wg::mbarrier_wait(empty + 8 * s, ((t / C::kStages) & 1u) ^ 1u);
      const uint32_t sb = cuda::smem_addr(base);
      widen_rows(sb + C::kOffRaw + (t % C::kRawStages) * C::kRawBytes, sb + C::kOffKv + s * kTileBytes,
                 sb + C::kOffScale + s * kTileRows * kGroups * 4, w, lane);
    }
    if (lane < kRowsPerWarp) base[C::kOffValid + s * kTileRows + my_row] = (masks >> lane) & 1u;
    masks >>= 8;
    __syncwarp();  // fp8: every lane's reads of raw stage t before this warp's next copies into it
    wg::fence_proxy_async_smem();
    wg::mbarrier_arrive(full + 8 * s);
    if constexpr (!kFp8) {  // into operand stage u % 3 once its consumers (of stage t - 1) released it
      if (u < tiles) {
        wg::mbarrier_wait(empty + 8 * (u % C::kStages), ((u / C::kStages) & 1u) ^ 1u);
        start(u, 8 * (kAhead - 1));
      }
      cuda::cp_async_commit();
    }
  }
}

// S = Q K^T is split by dimension between the consumers, over all 32 rows of a stage (wgmma
// m64n32k16: Q is read from shared memory once per stage, not once per consumer): consumer 0
// takes 64-dim blocks 0-3 (fp8: scale groups 0 and 1), consumer 1 blocks 4-7 (groups 2 and 3)
// and the rope (block 8). Each folds its groups' scales into its partial S (fp8), the two
// exchange partials through their exchange tiles, and both then hold the whole S and run the
// same softmax. P (fp8: P_g = P x scale_g for groups 2c, 2c + 1, the ones its O dims need) stays
// in consumer c's registers: no P exchange.

// Two 64-dim blocks starting at `kb0` into `acc` (fresh): issued and committed.
template <wg::Half16 E, int kb0>
__device__ __forceinline__ void issue_group(float (&acc)[16], uint64_t q_desc, uint64_t kv_desc, int nblocks = 2) {
  wg::wgmma_fence();
#pragma unroll
  for (int kb = kb0; kb < kb0 + 2; ++kb) {
    if (kb - kb0 >= nblocks) break;
#pragma unroll
    for (int ks = 0; ks < 4; ++ks)
      wg::WgmmaSs<E, 32>::mma(acc, wg::desc_advance(q_desc, kb * kQBlockBytes + 32 * ks),
                              wg::desc_advance(kv_desc, kb * kBlockBytes + 32 * ks), kb > kb0 || ks > 0);
  }
  wg::wgmma_commit();
}

// A consumer warpgroup's running state: the row maxima and sums (log2 domain) of its thread's
// two rows (the same in both consumers), and where things are. Decode: the list position of the
// split's first entry and the last position each of the two rows sees (its query's causal window).
struct Consumer {
  uint32_t sbase, full, empty;
  float scale2;
  int w, l, tiles;
  int pos0, last[2];
  float m[2], lsum[2];
};

// Element i of a thread's m64n32 accumulator: head row 16 w + l / 4 + 8 h, stage row (column)
// 8 j + 2 (l % 4) + e, i = 4 j + 2 h + e.
__device__ __forceinline__ int acc_col(int i, int l) { return 8 * (i >> 2) + 2 * (l & 3) + (i & 1); }

// Byte offset of S(head, col) (f32) in an exchange tile: rows of 32
// floats, column bits 3-4 flipped by the head's low bits (fewer bank conflicts).
__device__ __forceinline__ uint32_t spart_offset(int head, int col) {
  return static_cast<uint32_t>(head * 32 + (col ^ ((head & 3) << 3))) * 4;
}

// Named barriers 2 + c (256 threads: the 128 of consumer c wait, the other 128 arrive without
// waiting): consumer c's exchange tile has been read by the other consumer.
__device__ __forceinline__ void named_sync(int id) { asm volatile("bar.sync %0, 256;\n" ::"r"(id) : "memory"); }
__device__ __forceinline__ void named_arrive(int id) { asm volatile("bar.arrive %0, 256;\n" ::"r"(id) : "memory"); }

// Stage t (operand stage s = t % kStages): S_t's partial is issued behind P V_{t-1}, folded with
// the scales (fp8), exchanged; the softmax runs; P V_t is issued and left in flight.
template <bool kFp8, bool kDecode, int C>
__device__ __forceinline__ void consume_stage(Consumer& k, float (&o)[128], int t, int s, uint8_t* base) {
  using L = Cache<kFp8>;
  constexpr wg::Half16 E = L::kType;
  wg::mbarrier_wait(k.full + 8 * s, (t / L::kStages) & 1u);
  // Descriptors from the (warp-uniform) shared base: they stay in uniform registers.
  const uint64_t q_desc = wg::sw128_kmajor_desc(k.sbase + L::kOffQ);
  const uint64_t kv_desc = wg::sw128_kmajor_desc(k.sbase + L::kOffKv + s * kTileBytes);
  float acc_a[16], acc_b[16], acc_r[16];
  issue_group<E, 4 * C>(acc_a, q_desc, kv_desc);
  issue_group<E, 4 * C + 2>(acc_b, q_desc, kv_desc);
  if (C == 1) issue_group<E, 8>(acc_r, q_desc, kv_desc, 1);  // the rope block
  // fp8: the scales of groups 2C, 2C + 1 per stage row
  const float2* scl = reinterpret_cast<const float2*>(base + L::kOffScale) + s * kTileRows * 2 + C;
  const uint8_t* valid = base + L::kOffValid + s * kTileRows;
  wg::wgmma_wait<0>();  // P V_{t-1} and S_t's parts
  wg::fence_accumulators(acc_a);
  wg::fence_accumulators(acc_b);
  if (C == 1) wg::fence_accumulators(acc_r);
  wg::fence_accumulators(o);
  if (t > 0) wg::mbarrier_arrive(k.empty + 8 * ((s + L::kStages - 1) % L::kStages));  // stage t - 1
  float sv[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    if constexpr (kFp8) {
      const float2 sc = scl[2 * acc_col(i, k.l)];
      sv[i] = sc.x * acc_a[i] + sc.y * acc_b[i];
    } else {
      sv[i] = acc_a[i] + acc_b[i];
    }
    if (C == 1) sv[i] += acc_r[i];
  }
  // Exchange the partials through the exchange tiles: this consumer's own tile is free once the
  // other consumer has read its previous partial (it arrived on barrier 2 + C right after).
  const uint32_t own = k.sbase + L::kOffX + C * kXTileBytes, other = k.sbase + L::kOffX + (1 - C) * kXTileBytes;
  if (t > 0) named_sync(2 + C);
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int head = 16 * k.w + (k.l >> 2) + 8 * h, col = 8 * j + 2 * (k.l & 3);
      asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(own + spart_offset(head, col)), "f"(sv[4 * j + 2 * h]),
                   "f"(sv[4 * j + 2 * h + 1])
                   : "memory");
    }
  consumer_sync();  // both partials are in
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int head = 16 * k.w + (k.l >> 2) + 8 * h, col = 8 * j + 2 * (k.l & 3);
      float2 v;
      asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(other + spart_offset(head, col)));
      // own + other in consumer 0 order (partial 0 first) in both: the two hold the same S.
      const int i = 4 * j + 2 * h;
      sv[i] = C == 0 ? sv[i] + v.x : v.x + sv[i];
      sv[i + 1] = C == 0 ? sv[i + 1] + v.y : v.y + sv[i + 1];
    }
  if (t + 1 < k.tiles) named_arrive(2 + (1 - C));  // the other's partial is read (none comes after the last)
  float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const int col = acc_col(i, k.l);
    bool seen = valid[col] != 0;
    if constexpr (kDecode) seen = seen && k.pos0 + t * kTileRows + col <= k.last[(i >> 1) & 1];
    sv[i] = seen ? sv[i] * k.scale2 : -INFINITY;
    mx[(i >> 1) & 1] = fmaxf(mx[(i >> 1) & 1], sv[i]);
  }
  // mb: the maximum to subtract, 0 for a row with no valid entry yet (its scores are all -inf
  // and ex2.approx(-inf) = 0: no select per element).
  float alpha[2], mb[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
    const float mn = fmaxf(k.m[h], mx[h]);
    alpha[h] = mn == -INFINITY ? 1.f : cuda::sm80::fast_exp2(k.m[h] - mn);
    k.m[h] = mn;
    mb[h] = mn == -INFINITY ? 0.f : mn;
  }
  // P (f32) for the row sums; into the A fragments of P V (fp8: P x scale_g in f16 for this
  // consumer's groups 2C + sub; bf16: P in bf16, one for both): element (h, j) of the m64n32
  // accumulator is fragment register (j % 2) * 2 + h of k step j / 2.
  float rs[2] = {0.f, 0.f};
  uint32_t pa[kFp8 ? 2 : 1][kTileRows / 16][4];  // [sub][k step][register]
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int col = 8 * j + 2 * (k.l & 3);
      const float p0 = cuda::sm80::fast_exp2(sv[4 * j + 2 * h] - mb[h]);
      const float p1 = cuda::sm80::fast_exp2(sv[4 * j + 2 * h + 1] - mb[h]);
      rs[h] += p0 + p1;
      if constexpr (kFp8) {
        const float2 s0 = scl[2 * col], s1 = scl[2 * col + 2];
        pa[0][j >> 1][(j & 1) * 2 + h] = f16x2(p0 * s0.x, p1 * s1.x);
        pa[1][j >> 1][(j & 1) * 2 + h] = f16x2(p0 * s0.y, p1 * s1.y);
      } else {
        pa[0][j >> 1][(j & 1) * 2 + h] = cuda::sm80::pack_bf16x2(p0, p1);
      }
    }
    k.lsum[h] = k.lsum[h] * alpha[h] + rs[h];
  }
  if (!__all_sync(0xffffffffu, alpha[0] == 1.f && alpha[1] == 1.f)) {  // the maxima rarely move late in a list
#pragma unroll
    for (int j = 0; j < 32; ++j) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        o[4 * j + 2 * h] *= alpha[h];
        o[4 * j + 2 * h + 1] *= alpha[h];
      }
    }
  }
  // O[:, 256C + 128 sub ..] += P_{2C+sub} V: 2 k16 steps over the stage's 32 rows per 128 dims, A
  // from registers (no P tile, no fence, no warpgroup barrier).
  const uint64_t v_desc = wg::sw128_mnmajor_desc(k.sbase + L::kOffKv + s * kTileBytes, kBlockBytes, 1024);
  wg::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < kTileRows / 16; ++kk) {
#pragma unroll
    for (int sub = 0; sub < 2; ++sub)
      wg::WgmmaRsTn<E, 128>::mma(*reinterpret_cast<float(*)[64]>(o + 64 * sub), pa[kFp8 ? sub : 0][kk],
                                 wg::desc_advance(v_desc, (4 * C + 2 * sub) * kBlockBytes + kk * 16 * 128));
  }
  wg::wgmma_commit();
}

template <int R>
__device__ __forceinline__ void zero(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) d[i] = 0.f;
}

// A consumer warpgroup c (0 or 1): O for dims 256c .. 256c + 255 of the CTA's rows r0 .. r0 + 63
// (those below `rows` written).
template <bool kFp8, bool kDecode, int c>
__device__ __forceinline__ void consume(const MlaParams& p, int g, int r0, int rows, const Span& span, int tiles,
                                        uint8_t* base, uint32_t sbase, int ctid, const Grid& grid, int64_t part) {
  using L = Cache<kFp8>;
  Consumer k;
  k.w = ctid >> 5;
  k.l = ctid & 31;
  k.tiles = tiles;
  k.sbase = sbase;
  k.full = sbase + L::kOffBars;
  k.empty = k.full + 8 * L::kStages;
  k.scale2 = p.scale * 1.4426950408889634f;
  k.m[0] = k.m[1] = -INFINITY;
  k.lsum[0] = k.lsum[1] = 0.f;
  const int w = k.w, l = k.l;
  k.pos0 = span.begin;
  k.last[0] = k.last[1] = 0;
  if constexpr (kDecode) {  // query i sees positions up to window end - s_q + i
    const int end = cuda_sparse_mla::decode_window_end(p, g) - p.s_q;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = r0 + 16 * w + (l >> 2) + 8 * h;
      k.last[h] = end + (r < rows ? row_at<kDecode>(p, r).i : 0);
    }
  }
  float(&m)[2] = k.m;
  float(&lsum)[2] = k.lsum;
  float o[128];
  zero(o);
  if (tiles > 0) {
    // Materialized here: a non-wgmma write of an accumulator while a wgmma is in flight makes
    // ptxas serialize every wgmma of the kernel.
    wg::fence_accumulators(o);
    // One stage per iteration, the operand stage computed (warp-uniform): unrolled by the
    // stages, the code outgrows the instruction cache and, for three bf16 stages, ptxas runs out
    // of registers and serializes every wgmma of the kernel (C7512).
    for (int t = 0; t < tiles; ++t) consume_stage<kFp8, kDecode, c>(k, o, t, t % L::kStages, base);
    wg::wgmma_wait<0>();
    wg::fence_accumulators(o);
  }
  // The row sums over the row's four threads (both consumers hold the same).
  float inv[2], lse2[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    lsum[h] += __shfl_xor_sync(0xffffffffu, lsum[h], 1);
    lsum[h] += __shfl_xor_sync(0xffffffffu, lsum[h], 2);
    const bool any = lsum[h] > 0.f;
    inv[h] = any ? 1.f / lsum[h] : 0.f;
    lse2[h] = any ? m[h] + log2f(lsum[h]) : -INFINITY;
  }
  if (grid.part_o == nullptr) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = r0 + 16 * w + (l >> 2) + 8 * h;
      if (r >= rows) continue;
      const RowAt at = row_at<kDecode>(p, r);
      __nv_bfloat16* out = p.out + g * p.o_sg + at.i * p.o_si + at.h * p.o_sh + 256 * c + 2 * (l & 3);
#pragma unroll
      for (int j = 0; j < 32; ++j)
        *reinterpret_cast<__nv_bfloat162*>(out + 8 * j) =
            __floats2bfloat162_rn(o[4 * j + 2 * h] * inv[h], o[4 * j + 2 * h + 1] * inv[h]);
      if (c == 0 && (l & 3) == 0 && p.lse != nullptr)
        p.lse[g * p.l_sg + at.i * p.l_si + at.h * p.l_sh] = lse2[h] * 0.6931471805599453f;
    }
  } else {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = 16 * w + (l >> 2) + 8 * h;
      float* out = grid.part_o + (part * 64 + row) * kLatent + 256 * c + 2 * (l & 3);
#pragma unroll
      for (int j = 0; j < 32; ++j)
        *reinterpret_cast<float2*>(out + 8 * j) = make_float2(o[4 * j + 2 * h] * inv[h], o[4 * j + 2 * h + 1] * inv[h]);
      if (c == 0 && (l & 3) == 0) grid.part_lse[part * 64 + row] = lse2[h];
    }
  }
}

template <bool kFp8, bool kDecode>
__global__ void __launch_bounds__(kThreads, 1) mla_sparse_sm90a_kernel(const MlaParams p, const Grid grid,
                                                                       const bool q_aligned) {
  using L = Cache<kFp8>;
  extern __shared__ uint8_t smem_raw[];
  // The 1024-byte aligned base, as a shared address (warp-uniform: the descriptors built from it
  // stay in uniform registers) and as a pointer.
  const uint32_t sbase = (cuda::smem_addr(smem_raw) + 1023u) & ~1023u;
  uint8_t* base = smem_raw + (sbase - cuda::smem_addr(smem_raw));
  const int64_t part = blockIdx.x;  // (launch group * rgroups + row group) * nsplit + split
  const int split = static_cast<int>(part % grid.nsplit);
  const int rg = static_cast<int>((part / grid.nsplit) % grid.rgroups);
  const int g = grid.g_begin + static_cast<int>(part / (static_cast<int64_t>(grid.nsplit) * grid.rgroups));
  const int rows = p.s_q * p.heads, r0 = rg * kHeadsPerCta;
  const int tid = threadIdx.x;
  const Span span = split_span(list_len<kDecode>(p, g), split, grid.chunk);
  // A split past the group's list (topk_lens, a decode request shorter than its table) does no
  // work and is not combined; split 0 always runs (an empty list writes 0 and -inf).
  if (split > 0 && span.end == span.begin) return;
  const int tiles = (span.end - span.begin + kTileRows - 1) / kTileRows;
  if (tid == 0) {
    const uint32_t full = cuda::smem_addr(base + L::kOffBars);
    for (int s = 0; s < L::kStages; ++s) {
      wg::mbarrier_init(full + 8 * s, 128);                 // every producer thread
      wg::mbarrier_init(full + 8 * (L::kStages + s), 256);  // every consumer thread
    }
    wg::mbarrier_init_fence();
  }
  stage_q<kFp8, kDecode>(p, g, r0, rows, q_aligned, base, tid);
  wg::fence_proxy_async_smem();
  __syncthreads();
  // The combine (launched dependent) may start once every CTA is here; it waits for this grid's
  // completion before reading a partial, so only its launch and index math overlap this kernel.
  cuda::pdl_launch_dependents();
  // Registers: 384 threads launch with 168 each; the producers keep 56, the consumers take 224
  // (128 x 56 + 256 x 224 = 384 x 168).
  if (tid < 128) {
    wg::setmaxnreg_dec<kProducerRegs>();
    produce<kFp8, kDecode>(p, g, span, tiles, base, tid);
  } else {
    wg::setmaxnreg_inc<kConsumerRegs>();
    const int ctid = tid - 128;
    if (ctid < 128)
      consume<kFp8, kDecode, 0>(p, g, r0, rows, span, tiles, base, sbase, ctid, grid, part);
    else
      consume<kFp8, kDecode, 1>(p, g, r0, rows, span, tiles, base, sbase, ctid - 128, grid, part);
  }
}

// One warp per (group, row, kParts-th of the 512 dims) of the launch: the weighted sum of the
// group's own splits' partials (those its list reaches). Latency bounds it: the first splits'
// partials and the splits' lse are loaded before the maximum is known, later ones a batch at a
// time (16-byte loads in flight per lane: sixteen for calls of at most 512 rows, where one
// batch takes 16 splits, else eight); lane l holds the weight of split l of each batch of 32.
// kParts (1, 2, 4) only spreads a call's rows over more warps (few rows: more loads in flight;
// many rows: every warp resident at once); per element the sums run in split order, so every
// kParts gives the same bits.
template <bool kDecode, int kParts>
__global__ void __launch_bounds__(256) mla_sm90a_combine_kernel(const MlaParams p, const int groups, const Grid grid) {
  constexpr int kVec = 4 / kParts;      // float4 per lane and split
  constexpr int kBatch = (kParts == 4 ? 16 : 8) / kVec;  // splits per batch of loads
  constexpr int64_t kSplitStride = int64_t{kHeadsPerCta} * kLatent;
  const int warp = blockIdx.x * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  const int rows = p.s_q * p.heads;
  if (warp >= groups * rows * kParts) return;
  const int part = warp % kParts, gr = warp / kParts;
  const int gl = gr / rows, r = gr % rows, g = grid.g_begin + gl;
  const int rg = r / kHeadsPerCta, row = r % kHeadsPerCta;
  const int64_t first = (static_cast<int64_t>(gl) * grid.rgroups + rg) * grid.nsplit;
  const int nsplit = min(grid.nsplit, cuda_sparse_mla::list_nsplit(list_len<kDecode>(p, g), grid.chunk));
  const float* lse = grid.part_lse + first * 64 + row;
  cuda::pdl_wait();  // the partials: written by the kernel this one overlaps
  const int d0 = part * (kLatent / kParts) + 4 * lane;  // + 128 j: this lane's dims
  const float* src = grid.part_o + (first * 64 + row) * kLatent + d0;
  float4 v[kBatch][kVec];
  const auto load_batch = [&](int s) {
#pragma unroll
    for (int k = 0; k < kBatch; ++k)
#pragma unroll
      for (int j = 0; j < kVec; ++j)
        v[k][j] = s + k < nsplit ? *reinterpret_cast<const float4*>(src + (s + k) * kSplitStride + 128 * j)
                                 : make_float4(0, 0, 0, 0);
  };
  const float lse_first = lane < nsplit ? lse[lane * 64] : -INFINITY;
  load_batch(0);
  float mx = lse_first;
  for (int s = lane + 32; s < nsplit; s += 32) mx = fmaxf(mx, lse[s * 64]);
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, d));
  float acc[kVec][4] = {};
  float wsum = 0.f;
  if (mx != -INFINITY) {
    for (int s0 = 0; s0 < nsplit; s0 += 32) {
      const int n = min(32, nsplit - s0);
      const float l2 = s0 == 0 ? lse_first : lane < n ? lse[(s0 + lane) * 64] : -INFINITY;
      const float mine = lane < n ? exp2f(l2 - mx) : 0.f;
      for (int s = 0; s < n; s += kBatch) {
        if (s0 + s > 0) load_batch(s0 + s);
#pragma unroll
        for (int k = 0; k < kBatch; ++k) {
          const float wgt = __shfl_sync(0xffffffffu, mine, (s + k) & 31);
          if (s + k < n) {
            wsum += wgt;
#pragma unroll
            for (int j = 0; j < kVec; ++j) {
              acc[j][0] += wgt * v[k][j].x;
              acc[j][1] += wgt * v[k][j].y;
              acc[j][2] += wgt * v[k][j].z;
              acc[j][3] += wgt * v[k][j].w;
            }
          }
        }
      }
    }
  }
  const float inv = wsum > 0.f ? 1.f / wsum : 0.f;
  const RowAt at = row_at<kDecode>(p, r);
  __nv_bfloat16* out = p.out + g * p.o_sg + at.i * p.o_si + at.h * p.o_sh + d0;
#pragma unroll
  for (int j = 0; j < kVec; ++j) {
    *reinterpret_cast<__nv_bfloat162*>(out + 128 * j) = __floats2bfloat162_rn(acc[j][0] * inv, acc[j][1] * inv);
    *reinterpret_cast<__nv_bfloat162*>(out + 128 * j + 2) = __floats2bfloat162_rn(acc[j][2] * inv, acc[j][3] * inv);
  }
  if (part == 0 && lane == 0 && p.lse != nullptr)
    p.lse[g * p.l_sg + at.i * p.l_si + at.h * p.l_sh] = wsum > 0.f ? (mx + log2f(wsum)) * 0.6931471805599453f : -INFINITY;
}

// The combine's warps per row: 4 for calls of at most 512 rows, 2 up to 2048, else 1 (H200
// figures: docs/kernels/hopper_mla.md, "Splits"). A combine of no more CTAs than SMs puts one on
// each SM: launched early (PDL) while the attention grid holds most SMs, its CTAs would otherwise
// pile onto the few SMs left free (up to eight on each) and sum all the partials there, so each
// asks for more than half an SM's shared memory, unused.
constexpr int kCombineSpreadSmem = 120 * 1024;

template <bool kDecode>
void launch_combine(const MlaParams& p, int groups, const Grid& grid, int device, cudaStream_t stream) {
  const int64_t rows = static_cast<int64_t>(groups) * p.s_q * p.heads;
  const int parts = rows <= 512 ? 4 : rows <= 2048 ? 2 : 1;
  const auto kernel = parts == 4   ? mla_sm90a_combine_kernel<kDecode, 4>
                      : parts == 2 ? mla_sm90a_combine_kernel<kDecode, 2>
                                   : mla_sm90a_combine_kernel<kDecode, 1>;
  const auto ctas = static_cast<unsigned>((rows * parts + 7) / 8);
  int sms = 0;
  LATTE_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const bool spread = static_cast<int64_t>(ctas) <= sms;
  static std::atomic<uint64_t> smem_set[3] = {};  // per kParts
  if (spread) cuda::allow_dynamic_smem(kernel, kCombineSpreadSmem, device, smem_set[parts >> 1]);
  // Programmatic dependent launch: the combine's launch overlaps the attention kernel's tail.
  cuda::launch_ex(kernel, ctas, 256, spread ? kCombineSpreadSmem : 0, true, stream, p, groups, grid);
}

bool aligned16(int64_t v) { return v % 16 == 0; }

}  // namespace

int row_groups_sm90a(int rows) { return std::max(1, (rows + kHeadsPerCta - 1) / kHeadsPerCta); }

namespace {
// The split model's costs, in units of the kernel's stage: a CTA's fixed cost per wave, the
// combine's launch and the combine per split of a token. Fitted to H200 measurements
// (docs/kernels/hopper_mla.md, "Splits"): the few-heads kernel (one stage = 64 entries) takes the
// split of fewest stages per CTA that keeps one wave (one token's single head tile: 32 splits of
// one stage; 4 / 8 tiles: 32 / 16).
struct SplitCosts {
  double cta_fixed, combine_launch, combine_per_split;
};
constexpr SplitCosts kRowKernelCosts{3.0, 2.0, 0.1};
constexpr SplitCosts kFewHeadsCosts{3.0, 2.0, 0.0};

// The split of a kernel whose unsplit grid has `ctas` CTAs (0: not known) over lists of `topk`
// entries in stages of `stage_rows`. A grid that leaves SMs idle splits the list: the count with
// the least modeled time, waves x (stages per split + a CTA's fixed cost) + the combine's. A grid
// that fills the SMs is never split (the workspace stays bounded by the SMs).
Sm90aPlan split_plan(int64_t ctas, int topk, int sm_count, int stage_rows, const SplitCosts& k) {
  Sm90aPlan plan;
  const int tiles = std::max(1, (topk + stage_rows - 1) / stage_rows);
  int best = 1;
  if (ctas > 0 && ctas < sm_count) {
    double best_cost = 0;
    for (int n = 1; n <= std::min(tiles, 4 * sm_count); ++n) {
      const int per = (tiles + n - 1) / n;
      if (n > 1 && (tiles + per - 1) / per != n) continue;  // the same split as a smaller n
      const double waves = static_cast<double>((ctas * n + sm_count - 1) / sm_count);
      const double cost = waves * (per + k.cta_fixed) + (n > 1 ? k.combine_launch + k.combine_per_split * n : 0.0);
      if (n == 1 || cost < best_cost) {
        best = n;
        best_cost = cost;
      }
    }
  }
  const int tiles_per = (tiles + best - 1) / best;
  plan.chunk = tiles_per * stage_rows;
  plan.nsplit = (tiles + tiles_per - 1) / tiles_per;
  return plan;
}
}  // namespace

int fewheads_tile_sm90a(CacheFormat format, bool decode, int heads, int64_t max_groups) {
  if (format != CacheFormat::fp8_ds_mla || decode) return 0;
  if (heads <= 8) return 8;
  if (heads <= kFewHeadsMax) return kFewHeadsMax;
  const int64_t tiles = (heads + kFewHeadsMax - 1) / kFewHeadsMax;
  return max_groups > 0 && max_groups * tiles <= kFewHeadsTiledCtas ? kFewHeadsMax : 0;
}

int ctas_per_group_sm90a(const Sm90aPlan& plan, int rows) {
  return plan.head_tile > 0 ? (rows + plan.head_tile - 1) / plan.head_tile : row_groups_sm90a(rows);
}

Sm90aPlan plan_sm90a(CacheFormat format, int64_t max_groups, int heads, int topk, int sm_count) {
  Sm90aPlan kernel;  // which kernel first: it sets the CTAs per token and the stage
  kernel.head_tile = fewheads_tile_sm90a(format, false, heads, max_groups);
  const int64_t ctas = max_groups <= 0 ? 0 : max_groups * ctas_per_group_sm90a(kernel, heads);
  Sm90aPlan plan = kernel.head_tile > 0 ? split_plan(ctas, topk, sm_count, kFewHeadsStageRows, kFewHeadsCosts)
                                         : split_plan(ctas, topk, sm_count, kTileRows, kRowKernelCosts);
  plan.head_tile = kernel.head_tile;
  return plan;
}

Sm90aPlan plan_decode_sm90a(int64_t max_groups, int rows, int sm_count) {
  Sm90aPlan plan = split_plan(max_groups <= 0 ? 0 : max_groups * row_groups_sm90a(rows), kDecodeModelContext,
                              sm_count, kTileRows, kRowKernelCosts);
  plan.decode = true;
  if (plan.nsplit == 1) {
    plan.chunk = kWholeList;
  } else {
    plan.chunk = std::max(plan.chunk, kDecodeMinChunk);
    plan.nsplit = (kDecodeModelContext + plan.chunk - 1) / plan.chunk;
  }
  return plan;
}

int call_nsplit_sm90a(const Sm90aPlan& plan, const MlaParams& p) {
  if (!plan.decode) return plan.nsplit;
  // A request's length is an i32 (seq_lens): no split starts past INT32_MAX positions, whatever
  // the table spans (and split x chunk stays in int).
  const int64_t positions = std::min<int64_t>(static_cast<int64_t>(p.max_blocks) * p.block_size, INT32_MAX);
  return static_cast<int>(std::max<int64_t>(1, (positions + plan.chunk - 1) / plan.chunk));
}

namespace {
constexpr std::size_t kPartBytes = std::size_t{kHeadsPerCta} * (kLatent + 1) * sizeof(float);
constexpr std::size_t kDecodeWorkspaceCap = std::size_t{256} << 20;

std::size_t group_part_bytes(int rows, int nsplit) {
  return nsplit <= 1 ? 0 : static_cast<std::size_t>(row_groups_sm90a(rows)) * nsplit * kPartBytes;
}
}  // namespace

std::size_t workspace_bytes_sm90a(const Sm90aPlan& plan, int64_t groups, int rows) {
  if (!plan.decode) return groups <= 0 ? 0 : static_cast<std::size_t>(groups) * group_part_bytes(rows, plan.nsplit);
  if (plan.chunk == kWholeList) return 0;
  // Decode: a request may span the longest context (kWorkspaceContext); the groups of a call
  // whose partials do not fit run in several launches.
  const int nsplit = (cuda_sparse_mla::kWorkspaceContext + plan.chunk - 1) / plan.chunk;
  const std::size_t per = group_part_bytes(rows, nsplit);
  return std::max(per, std::min(per * static_cast<std::size_t>(std::max<int64_t>(1, groups)), kDecodeWorkspaceCap));
}

std::size_t smem_bytes_sm90a(CacheFormat format) {
  return format == CacheFormat::bf16 ? Cache<false>::kSmemBytes : Cache<true>::kSmemBytes;
}

std::string describe_sm90a(const Sm90aPlan& plan, CacheFormat format, int64_t max_groups, int rows, int sm_count) {
  const int64_t ctas = std::max<int64_t>(1, max_groups) * ctas_per_group_sm90a(plan, rows) * plan.nsplit;
  const std::string pipeline =
      format == CacheFormat::bf16
          ? "a producer warpgroup copies 32-row stages of the list (cp.async) straight into the wgmma layout "
            "(3 operand stages); two consumer warpgroups split S by dimension (wgmma m64n32k16 bf16) and own 256 "
            "output dims each (wgmma m64n128k16, P from registers)"
          : "a producer warpgroup copies 32-row stages of the list (cp.async, 3 raw stages) and widens the e4m3 "
            "codes to f16 exactly in the wgmma layout (2 operand stages); two consumer warpgroups split S by "
            "dimension (wgmma m64n32k16 f16, group scales applied in f32) and own 256 output dims each (wgmma "
            "m64n128k16 per scale group, P x scale from registers)";
  const std::string cut =
      !plan.decode ? std::to_string(plan.nsplit) + (plan.nsplit == 1 ? " split" : " splits") + " of " +
                         std::to_string(plan.chunk) + " list entries" + (plan.nsplit > 1 ? " and a combine kernel" : "")
      : plan.chunk == kWholeList
          ? std::string("a request's positions in one split")
          : "splits of " + std::to_string(plan.chunk) +
                " positions, as many as a request's block table spans, and a combine kernel";
  const bool one = max_groups <= 1;
  const std::string unit = plan.decode ? (one ? " request: " : " requests: ") : (one ? " token: " : " tokens: ");
  if (plan.head_tile > 0) {
    const int n = plan.head_tile, tiles = ctas_per_group_sm90a(plan, rows);
    const int pad = tiles * n - rows;
    return "sm_90a kernel (mla_sparse_fewheads_sm90a_cpasync_wgmma_ws, fp8_ds_mla cache): the " + std::to_string(rows) +
           " heads on wgmma's N dimension (" +
           (tiles > 1 ? std::to_string(tiles) + " CTAs of n" + std::to_string(n) + " per token, each copying its rows"
                      : "n" + std::to_string(n)) +
           (pad > 0 ? ", " + std::to_string(pad) + " zero query columns" : std::string()) +
           "), 64 list entries per stage on its M dimension; two producer warpgroups copy 32-row sub-stages "
           "(cp.async, 2 raw sub-stages) and widen the e4m3 codes to f16 exactly in the wgmma layout (2 operand "
           "stages); a consumer warpgroup computes S^T (wgmma m64n" + std::to_string(n) +
           "k16 f16, group scales in f32), the per-head softmax, and O^T += V^T (P x scale)^T (wgmma, V read "
           "MN-major); " + cut + "; a call of " + std::to_string(std::max<int64_t>(1, max_groups)) + unit +
           std::to_string(ctas) + " CTAs on " + std::to_string(sm_count) + " SMs";
  }
  return "sm_90a kernel (mla_sparse_sm90a_cpasync_wgmma_ws, " +
         std::string(format == CacheFormat::bf16 ? "bf16" : "fp8_ds_mla") + " cache" +
         (plan.decode ? ", dense decode through the block table" : "") + "): 64 (query, head) rows per CTA" +
         (rows % kHeadsPerCta != 0 ? " (" + std::to_string(rows) + " rows: the last CTA's padded with zero queries)"
                                   : std::string()) +
         "; " + pipeline + "; " + cut + "; a call of " + std::to_string(std::max<int64_t>(1, max_groups)) + unit +
         std::to_string(ctas) + " CTAs on " + std::to_string(sm_count) + " SMs" +
         (plan.decode && plan.chunk != kWholeList
              ? " at " + std::to_string(kDecodeModelContext) + " positions"
              : std::string());
}

bool q_vector_loads_sm90a(const MlaParams& p) {
  const auto step8 = [](int64_t stride, int64_t extent) { return extent <= 1 || stride % 8 == 0; };
  const auto q8 = [&](const void* ptr, int64_t sg, int64_t si, int64_t sh) {
    return aligned16(reinterpret_cast<uintptr_t>(ptr)) && step8(sg, p.groups) && step8(si, p.s_q) &&
           step8(sh, p.heads);
  };
  return q8(p.q, p.q_sg, p.q_si, p.q_sh) && (p.q_rope == nullptr || q8(p.q_rope, p.qr_sg, p.qr_si, p.qr_sh));
}

void launch_sm90a(const MlaParams& p, const Sm90aPlan& plan, void* workspace, std::size_t workspace_bytes,
                  cudaStream_t stream) {
  if (p.groups <= 0) return;
  const bool fp8 = p.format == CacheFormat::fp8_ds_mla;
  if (!aligned16(reinterpret_cast<uintptr_t>(p.kv)) || !aligned16(p.kv_sblock) || !aligned16(p.kv_stok)) {
    throw Error(ErrorCode::unsupported,
                std::string("hopper.mla reads ") + (fp8 ? "fp8_ds_mla" : "bf16") +
                    " rows with 16-byte loads: the cache's base, block stride (" + std::to_string(p.kv_sblock) +
                    " B) and row stride (" + std::to_string(p.kv_stok) +
                    " B) must be multiples of 16; select cuda.sparse_mla for this cache");
  }
  const int rows = p.s_q * p.heads;
  Grid grid;
  grid.chunk = plan.chunk;
  grid.nsplit = call_nsplit_sm90a(plan, p);
  grid.rgroups = row_groups_sm90a(rows);
  // Groups per launch: all of them unsplit, else as many as the workspace holds the partials of.
  int64_t slab = p.groups;
  if (grid.nsplit > 1) {
    const std::size_t per = group_part_bytes(rows, grid.nsplit);
    slab = workspace == nullptr ? 0 : std::min<int64_t>(p.groups, static_cast<int64_t>(workspace_bytes / per));
    if (slab < 1) {
      throw Error(ErrorCode::invalid_argument,
                  "hopper.mla: this call cuts each " + std::string(p.decode ? "request's positions" : "token's list") +
                      " into " + std::to_string(grid.nsplit) + " splits whose partials need " + std::to_string(per) +
                      " bytes of workspace per " + (p.decode ? "request" : "token") + " and got " +
                      std::to_string(workspace == nullptr ? 0 : workspace_bytes) +
                      "; make the kernel with spec.max_tokens >= the call's tokens and pass ctx.workspace of "
                      "Kernel::workspace_bytes()");
    }
  }
  // The grid of a launch stays within gridDim.x's limit.
  const int64_t ctas_per_group = static_cast<int64_t>(ctas_per_group_sm90a(plan, rows)) * grid.nsplit;
  slab = std::min<int64_t>(slab, INT32_MAX / ctas_per_group);
  if (slab < 1) {
    throw Error(ErrorCode::unsupported,
                "hopper.mla: a request's " + std::to_string(grid.nsplit) + " splits of " + std::to_string(grid.chunk) +
                    " positions (the block table's " + std::to_string(p.max_blocks) +
                    " columns) exceed one launch's grid; pass a block table no wider than the longest request");
  }
  int device = 0;
  LATTE_CUDA_TRY(cudaGetDevice(&device));
  static std::atomic<uint64_t> smem_set[4] = {};  // the shared-memory opt-in, once per device and kernel
  const int which = (fp8 ? 1 : 0) + (p.decode ? 2 : 0);
  const auto kernel = fp8 ? (p.decode ? mla_sparse_sm90a_kernel<true, true> : mla_sparse_sm90a_kernel<true, false>)
                          : (p.decode ? mla_sparse_sm90a_kernel<false, true> : mla_sparse_sm90a_kernel<false, false>);
  const int smem = static_cast<int>(smem_bytes_sm90a(p.format));
  const bool fewheads = plan.head_tile > 0;
  if (!fewheads) cuda::allow_dynamic_smem(kernel, smem, device, smem_set[which]);
  const bool q_aligned = q_vector_loads_sm90a(p);
  for (int64_t g0 = 0; g0 < p.groups; g0 += slab) {
    const int64_t n = std::min<int64_t>(slab, p.groups - g0);
    grid.g_begin = static_cast<int>(g0);
    if (grid.nsplit > 1) {
      grid.part_o = static_cast<float*>(workspace);
      grid.part_lse = grid.part_o + static_cast<std::size_t>(n) * grid.rgroups * grid.nsplit * kHeadsPerCta * kLatent;
    }
    const int64_t ctas = n * ctas_per_group;
    if (fewheads) {
      launch_fewheads_sm90a(p, grid, plan.head_tile, ctas, q_aligned, device, stream);
    } else {
      kernel<<<static_cast<unsigned>(ctas), kThreads, smem, stream>>>(p, grid, q_aligned);
    }
    LATTE_CUDA_TRY(cudaGetLastError());
    if (grid.nsplit > 1) {
      (p.decode ? launch_combine<true> : launch_combine<false>)(p, static_cast<int>(n), grid, device, stream);
      LATTE_CUDA_TRY(cudaGetLastError());
    }
  }
}

}  // namespace latte::hopper_mla
