// hopper.mla's kernels (sm_90a), device side: what the 64-row kernel
// (mla_sparse_sm90a_cpasync_wgmma_ws.cu) and the few-heads kernel
// (mla_sparse_fewheads_sm90a_cpasync_wgmma_ws.cu) share: the row's dims, how a launch is cut,
// a list's splits and slots, the e4m3 / bf16 -> f16 widening and the 128-byte-swizzled operand
// layout. Only for sm_90a translation units.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstddef>
#include <cstdint>

#include "kernels/common/cp_async.cuh"
#include "kernels/common/mma_sync.cuh"
#include "kernels/common/sm90a_wgmma.cuh"
#include "kernels/sparse_mla/sm90a/mla_sm90a.hpp"
#include "kernels/sparse_mla/smxx/mla_kv_slots.cuh"

namespace latte::hopper_mla {

namespace wg = cuda::sm90a;

constexpr int kDims = 576;
constexpr int kLatent = 512;
constexpr int kKBlocks = kDims / 64;              // 64-dim blocks of an operand row
constexpr int kGroups = 4;                        // 128-dim scale groups of the latent (fp8_ds_mla)

// How a launch is cut: groups [g_begin, g_begin + gridDim / (rgroups * nsplit)) of the call,
// `rgroups` CTAs of 64 rows per group, `nsplit` splits of `chunk` list entries per (group, row
// group). With nsplit > 1 the partials go to part_o / part_lse (indexed from the launch's first
// group), and the combine kernel writes out and lse.
struct Grid {
  int chunk = 0, nsplit = 1, rgroups = 1, g_begin = 0;
  float* part_o = nullptr;    // [launch groups * rgroups * nsplit][64][512]
  float* part_lse = nullptr;  // [launch groups * rgroups * nsplit][64], log2 domain
};

// The few-heads kernel (mla_sparse_fewheads_sm90a_cpasync_wgmma_ws.cu): sparse MLA over the
// fp8_ds_mla cache with rope, one CTA per (token, tile of `head_tile` heads, split) of `grid`,
// partials in the 64-row kernel's layout (a tile's heads are rows of their 64-row group's part).
void launch_fewheads_sm90a(const MlaParams& p, const Grid& grid, int head_tile, int64_t ctas, bool q_aligned,
                           int device, cudaStream_t stream);

// Widened values past the largest finite f16 (65504) saturate (a latent cache holds none).
__device__ __forceinline__ uint32_t f16x2(float a, float b) {
  uint32_t r;
  asm("cvt.rn.satfinite.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(b), "f"(a));  // a in the low half
  return r;
}

// 16 e4m3 codes -> two 16-byte chunks of 8 f16 each: exact (f16 holds every e4m3 value). The
// group scale is applied to S and P, in f32, by the consumers.
__device__ __forceinline__ void widen16(const uint4& c, uint4& lo, uint4& hi) {
  lo = make_uint4(cuda::e4m3x2_to_f16x2(c.x), cuda::e4m3x2_hi_to_f16x2(c.x), cuda::e4m3x2_to_f16x2(c.y),
                  cuda::e4m3x2_hi_to_f16x2(c.y));
  hi = make_uint4(cuda::e4m3x2_to_f16x2(c.z), cuda::e4m3x2_hi_to_f16x2(c.z), cuda::e4m3x2_to_f16x2(c.w),
                  cuda::e4m3x2_hi_to_f16x2(c.w));
}

// 8 bf16 -> 8 f16 (the fp8 rows' rope and, for them, the query).
__device__ __forceinline__ uint4 bf16x8_to_f16x8(const uint4& v) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
  uint32_t o[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w[i]));
    o[i] = f16x2(f.x, f.y);
  }
  return make_uint4(o[0], o[1], o[2], o[3]);
}

// 8 bf16 of a query row at `src`: one 16-byte load when the query's rows are 16-byte aligned
// (`aligned`), else element by element.
__device__ __forceinline__ uint4 load_q8(const __nv_bfloat16* src, bool aligned) {
  if (aligned) return *reinterpret_cast<const uint4*>(src);
  uint16_t e[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) e[j] = reinterpret_cast<const uint16_t*>(src)[j];
  return make_uint4(e[0] | (uint32_t{e[1]} << 16), e[2] | (uint32_t{e[3]} << 16), e[4] | (uint32_t{e[5]} << 16),
                    e[6] | (uint32_t{e[7]} << 16));
}

__device__ __forceinline__ void st_shared16(uint32_t addr, const uint4& v) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}

__device__ __forceinline__ uint4 ld_shared16(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr));
  return v;
}

// Byte offset of dims [8 c, 8 c + 8) of operand row `row` (c < 72) in a 9-block tile whose
// 64-dim blocks are `block_bytes` apart.
__device__ __forceinline__ uint32_t tile_chunk(int row, int c, int block_bytes) {
  return static_cast<uint32_t>((c >> 3) * block_bytes) + wg::sw128_offset(row, c & 7);
}

// The cache row of `slot` (`ok`: a slot inside the cache; otherwise the cache's base, a valid
// address for zero-filled copies). A power-of-two block size (every serving engine's) needs no
// integer division.
__device__ __forceinline__ const uint8_t* slot_row(const MlaParams& p, int slot, bool ok) {
  const int bs = p.block_size;
  const int blk = (bs & (bs - 1)) == 0 ? slot >> (__ffs(bs) - 1) : slot / bs;
  return ok ? p.kv + blk * p.kv_sblock + static_cast<int64_t>(slot - blk * bs) * p.kv_stok : p.kv;
}

// One 656-byte fp8_ds_mla row from global `src` to shared `dst` by a warp (zero-filled unless
// `valid`): lane l copies 16-byte chunks l and 32 + l.
__device__ __forceinline__ void copy_fp8_row(uint32_t dst, const uint8_t* src, int lane, bool valid) {
  constexpr int kChunks = 656 / 16;
  cuda::cp_async_16_s(dst + 16 * lane, src + 16 * lane, valid);
  if (lane < kChunks - 32) cuda::cp_async_16_s(dst + 16 * (32 + lane), src + 16 * (32 + lane), valid);
}

// A warp widens the 512 e4m3 codes of one raw row (shared address `src`) into operand row `row`
// of `tile` (64-dim blocks `block_bytes` apart): lane l turns codes 16 l .. 16 l + 15 into f16
// chunks 2 l and 2 l + 1; odd lane quads store them in the other order, so the eight lanes of a
// store phase hit eight different 16-byte bank groups.
__device__ __forceinline__ void widen_codes_row(uint32_t src, uint32_t tile, int row, int block_bytes, int lane) {
  const bool swap = (lane >> 2) & 1;
  uint4 a, b;
  widen16(ld_shared16(src + 16 * lane), a, b);
  st_shared16(tile + tile_chunk(row, 2 * lane + (swap ? 1 : 0), block_bytes), swap ? b : a);
  st_shared16(tile + tile_chunk(row, 2 * lane + (swap ? 0 : 1), block_bytes), swap ? a : b);
}

// The length of group g's list: sparse, its slots (topk, or topk_lens[g] clamped); decode, the
// request's positions (its length clamped to what its block table addresses).
template <bool kDecode>
__device__ __forceinline__ int list_len(const MlaParams& p, int g) {
  return kDecode ? cuda_sparse_mla::decode_seq_len(p, g) : cuda_sparse_mla::sparse_list_len(p, g);
}

// Entries [begin, end) of group g's list that split `split` runs (empty past the list).
struct Span {
  int begin, end;
};

__device__ __forceinline__ Span split_span(int len, int split, int chunk) {
  const int b = split * chunk;
  const int e = min(b + chunk, len);
  return {b, e > b ? e : b};
}

// The cache slot of row `row` of stage t (-1: none). Sparse: the list's entry. Decode: position
// j of the request through its block table (a block that is not one of the cache's: none).
template <bool kDecode>
__device__ __forceinline__ int stage_slot(const MlaParams& p, int g, const Span& span, int t, int row) {
  const int j = span.begin + t * kTileRows + row;
  if (j >= span.end) return -1;
  if constexpr (kDecode) {
    const int bs = p.block_size;
    const bool pow2 = (bs & (bs - 1)) == 0;
    const int col = pow2 ? j >> (__ffs(bs) - 1) : j / bs;
    const int blk = p.block_table[static_cast<int64_t>(g) * p.bt_s + col];
    return blk >= 0 && blk < p.num_blocks ? blk * bs + (j - col * bs) : -1;
  } else {
    return p.indices[static_cast<int64_t>(g) * p.idx_s + j];
  }
}

}  // namespace latte::hopper_mla
