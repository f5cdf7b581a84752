// cuda.kv_store kernels: MLA cache writes (bf16, fp8_ds_mla), indexer K writes (e4m3 + f32
// scale pages) and logical -> physical slot mapping. One warp per token for the stores; the
// quantization is formats.cpp's, bit for bit (indexer_k_row.cuh, shared with
// indexer_pool_store): scale = fp8_group_scale(amax), code = e4m3(x / scale) with the division
// in f32 (IEEE, round to nearest).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/cuda_check.cuh"
#include "kernels/common/conversions.cuh"
#include "kernels/kv_store/indexer_k_row.cuh"
#include "kernels/kv_store/kv_store_launch.hpp"

namespace latte::cuda_kv_store {
namespace {

constexpr int kWarpsPerBlock = 8;

// Slot of token t or -1 (skip): -1, negative or past the cache.
__device__ __forceinline__ int64_t slot_of(const int32_t* sm, int64_t sm_s, int64_t t, int64_t num_slots) {
  const int64_t slot = sm[t * sm_s];
  return (slot >= 0 && slot < num_slots) ? slot : -1;
}

__global__ void kv_store_bf16_kernel(KvStoreParams p) {
  const int lane = threadIdx.x & 31;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (t >= p.tokens) return;
  const int64_t slot = slot_of(p.slot_mapping, p.sm_s, t, static_cast<int64_t>(p.num_blocks) * p.block_size);
  if (slot < 0) return;
  const int64_t blk = slot / p.block_size, off = slot % p.block_size;
  auto* dst = reinterpret_cast<uint16_t*>(p.cache) + blk * p.cache_sb + off * p.cache_st;
  const auto* lat = reinterpret_cast<const uint16_t*>(p.latent) + t * p.lat_st;
  const auto* rope = reinterpret_cast<const uint16_t*>(p.rope) + t * p.rope_st;
  const int dims = p.rope != nullptr ? 576 : 512;  // rows without rope: the latent alone
  if (p.vec) {
    // 512 latent = 64 x 16 B, 64 rope = 8 x 16 B: 72 vectors (64 without rope).
    for (int v = lane; v < dims / 8; v += 32) {
      const uint4 x = v < 64 ? reinterpret_cast<const uint4*>(lat)[v] : reinterpret_cast<const uint4*>(rope)[v - 64];
      reinterpret_cast<uint4*>(dst)[v] = x;
    }
  } else {
    for (int i = lane; i < dims; i += 32) dst[i] = i < 512 ? lat[i] : rope[i - 512];
  }
}

__global__ void kv_store_fp8_kernel(KvStoreParams p) {
  const int lane = threadIdx.x & 31;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (t >= p.tokens) return;
  const int64_t slot = slot_of(p.slot_mapping, p.sm_s, t, static_cast<int64_t>(p.num_blocks) * p.block_size);
  if (slot < 0) return;
  const int64_t blk = slot / p.block_size, off = slot % p.block_size;
  uint8_t* dst = static_cast<uint8_t*>(p.cache) + blk * p.cache_sb + off * p.cache_st;
  const auto* lat = reinterpret_cast<const uint16_t*>(p.latent) + t * p.lat_st;
  const auto* rope = reinterpret_cast<const uint16_t*>(p.rope) + t * p.rope_st;
  // Lane l holds latent values [16 l, 16 l + 16): group l / 8.
  float x[16];
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    x[i] = cuda::bf16_bits_to_float(lat[16 * lane + i]);
    amax = nan_max(amax, fabsf(x[i]));
  }
#pragma unroll
  for (int o = 1; o < 8; o <<= 1) amax = nan_max(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float scale = group_scale(amax, p.pow2);
  uint32_t w[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    w[j] = 0;
#pragma unroll
    for (int e = 0; e < 4; ++e)
      w[j] |= static_cast<uint32_t>(cuda::float_to_e4m3(x[4 * j + e] / scale)) << (8 * e);
  }
  // Rows without rope end at byte 528 (the rest of a 656-byte row is reserved: left as it is).
  const bool has_rope = p.rope != nullptr;
  const uint32_t r = has_rope ? (static_cast<uint32_t>(rope[2 * lane]) | (static_cast<uint32_t>(rope[2 * lane + 1]) << 16)) : 0;
  if (p.vec) {
    reinterpret_cast<uint4*>(dst)[lane] = make_uint4(w[0], w[1], w[2], w[3]);
    if ((lane & 7) == 0) reinterpret_cast<float*>(dst + 512)[lane >> 3] = scale;
    if (has_rope) reinterpret_cast<uint32_t*>(dst + 528)[lane] = r;
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j)
      for (int e = 0; e < 4; ++e) dst[16 * lane + 4 * j + e] = static_cast<uint8_t>(w[j] >> (8 * e));
    if ((lane & 7) == 0) {
      const uint32_t sb = __float_as_uint(scale);
      for (int e = 0; e < 4; ++e) dst[512 + 4 * (lane >> 3) + e] = static_cast<uint8_t>(sb >> (8 * e));
    }
    if (has_rope)
      for (int e = 0; e < 4; ++e) dst[528 + 4 * lane + e] = static_cast<uint8_t>(r >> (8 * e));
  }
}

__global__ void indexer_k_store_kernel(IndexerKStoreParams p) {
  const int lane = threadIdx.x & 31;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (t >= p.tokens) return;
  const int64_t slot = slot_of(p.slot_mapping, p.sm_s, t, static_cast<int64_t>(p.num_blocks) * p.block_size);
  if (slot < 0) return;
  const int64_t blk = slot / p.block_size, off = slot % p.block_size;
  uint8_t* page = p.k_cache + blk * p.page_stride;
  const auto* k = reinterpret_cast<const uint16_t*>(p.k) + t * p.k_st;
  float x[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) x[i] = cuda::bf16_bits_to_float(k[4 * lane + i]);
  store_indexer_k_row(x, page, p.block_size, off, p.pow2);
}

__global__ void logical_to_slots_kernel(LogicalToSlotsParams p) {
  const int64_t total = p.tokens * p.width;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / p.width, k = i % p.width;
    const int64_t row = p.token_request ? p.token_request[t * p.tr_s] : t;
    const int64_t pos = p.positions[t * p.pos_st + k * p.pos_sc];
    int64_t slot = -1;
    const int64_t capacity = static_cast<int64_t>(p.max_blocks) * p.block_size;
    if (row >= 0 && row < p.batch && pos >= 0 && pos < capacity) {
      const int64_t blk = p.block_table[row * p.bt_sr + (pos / p.block_size) * p.bt_sc];
      const int64_t cand = blk * p.block_size + pos % p.block_size;
      if (blk >= 0 && cand <= 0x7fffffffLL) slot = cand;
    }
    p.slots[t * p.out_st + k * p.out_sc] = static_cast<int32_t>(slot);
  }
}

unsigned blocks_for(int64_t tokens) {
  return static_cast<unsigned>((tokens + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

}  // namespace

void launch_kv_store(const KvStoreParams& p, void* stream) {
  if (p.tokens <= 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  if (p.fp8) {
    kv_store_fp8_kernel<<<blocks_for(p.tokens), 32 * kWarpsPerBlock, 0, s>>>(p);
  } else {
    kv_store_bf16_kernel<<<blocks_for(p.tokens), 32 * kWarpsPerBlock, 0, s>>>(p);
  }
  LATTE_CUDA_CHECK_LAUNCH("kv_store");
}

void launch_indexer_k_store(const IndexerKStoreParams& p, void* stream) {
  if (p.tokens <= 0) return;
  indexer_k_store_kernel<<<blocks_for(p.tokens), 32 * kWarpsPerBlock, 0, static_cast<cudaStream_t>(stream)>>>(p);
  LATTE_CUDA_CHECK_LAUNCH("indexer_k_store");
}

void launch_logical_to_slots(const LogicalToSlotsParams& p, void* stream) {
  const int64_t total = p.tokens * p.width;
  if (total <= 0) return;
  const int64_t blocks = (total + 255) / 256;
  logical_to_slots_kernel<<<static_cast<unsigned>(blocks < 65536 ? blocks : 65536), 256, 0,
                            static_cast<cudaStream_t>(stream)>>>(p);
  LATTE_CUDA_CHECK_LAUNCH("logical_to_slots");
}

}  // namespace latte::cuda_kv_store
