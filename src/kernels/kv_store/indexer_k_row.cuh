// The one device-side copy of formats.cpp's fp8 scale and of the indexer-K row quantization
// (pack_indexer_k_token), shared by indexer_k_store (a token's row) and indexer_pool_store (a
// pool's row): scale = fp8_group_scale(amax), code = e4m3(x / scale) with the division in f32
// (IEEE, round to nearest), bit for bit.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/conversions.cuh"

namespace latte::cuda_kv_store {

constexpr float kE4m3MaxF = 448.0f;

// |x| max where NaN wins (formats.cpp group_amax).
__device__ __forceinline__ float nan_max(float a, float b) {
  if (a != a) return a;
  if (b != b) return b;
  return a > b ? a : b;
}

// formats.cpp fp8_group_scale.
__device__ __forceinline__ float group_scale(float amax, int pow2) {
  if (amax == 0.0f) return 1.0f;
  const float scale = amax / kE4m3MaxF;
  if (!pow2 || !isfinite(scale) || scale == 0.0f) return scale;
  int e2 = 0;
  const float frac = frexpf(scale, &e2);
  return frac == 0.5f ? scale : ldexpf(1.0f, e2);
}

// One warp (all 32 lanes, converged) quantizes a 128-value row and stores it as row `row` of an
// indexer-K page of `rows` rows (formats.hpp pack_indexer_k_token: `rows` x 128 codes, then
// `rows` f32 scales). Lane l holds values 4 l .. 4 l + 3 in x. The page is 16-byte aligned
// (validated), rows are 128 bytes: the 4-byte stores are aligned.
__device__ __forceinline__ void store_indexer_k_row(const float (&x)[4], uint8_t* page, int64_t rows, int64_t row,
                                                    int pow2) {
  const int lane = threadIdx.x & 31;
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) amax = nan_max(amax, fabsf(x[i]));
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) amax = nan_max(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float scale = group_scale(amax, pow2);
  uint32_t w = 0;
#pragma unroll
  for (int e = 0; e < 4; ++e) w |= static_cast<uint32_t>(cuda::float_to_e4m3(x[e] / scale)) << (8 * e);
  reinterpret_cast<uint32_t*>(page + row * 128)[lane] = w;
  if (lane == 0) *reinterpret_cast<float*>(page + rows * 128 + row * 4) = scale;
}

}  // namespace latte::cuda_kv_store
