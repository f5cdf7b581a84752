// Random-fill kernels of the cuda.sparse_mla benchmark (device code kept apart from the C++20
// host code, which nvcc compiles as C++17 here).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "bench_fill.hpp"

namespace {

__device__ __forceinline__ uint32_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return static_cast<uint32_t>(x);
}

// bf16 values uniform in [-amp, amp)
__global__ void fill_bf16(__nv_bfloat16* p, int64_t n, uint64_t seed, float amp) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float u = (mix(seed * 0x9E3779B97F4A7C15ULL + i) >> 8) * (1.f / 16777216.f);
    p[i] = __float2bfloat16((2.f * u - 1.f) * amp);
  }
}

// fp8_ds_mla tokens of row_bytes (656, or 528 without rope): random finite e4m3 codes, scales in
// [0.002, 0.02), bf16 rope (or, in a 656-byte row without rope, random bf16 in the unread bytes)
__global__ void fill_fp8_cache(uint8_t* p, int64_t tokens, uint64_t seed, int row_bytes) {
  for (int64_t t = blockIdx.x; t < tokens; t += gridDim.x) {
    uint8_t* row = p + t * row_bytes;
    for (int i = threadIdx.x; i < row_bytes / 4; i += blockDim.x) {
      const uint32_t h = mix(seed * 0x9E3779B97F4A7C15ULL + t * 164 + i);
      uint32_t w;
      if (i < 128) {  // e4m3 codes; avoid 0x7f / 0xff (NaN)
        w = h & 0xF7F7F7F7u;
      } else if (i < 132) {
        const float s = 0.002f + 0.018f * ((h >> 8) * (1.f / 16777216.f));
        w = __float_as_uint(s);
      } else {
        const float a = ((h & 0xFFFF) * (1.f / 65536.f)) * 2.f - 1.f;
        const float b = ((h >> 16) * (1.f / 65536.f)) * 2.f - 1.f;
        const __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
        w = *reinterpret_cast<const uint32_t*>(&v);
      }
      reinterpret_cast<uint32_t*>(row)[i] = w;
    }
  }
}

}  // namespace

void bench_fill_bf16(void* p, int64_t n, uint64_t seed, float amp, cudaStream_t s) {
  fill_bf16<<<8192, 256, 0, s>>>(static_cast<__nv_bfloat16*>(p), n, seed, amp);
}

void bench_fill_fp8_cache(void* p, int64_t tokens, uint64_t seed, cudaStream_t s, int row_bytes) {
  fill_fp8_cache<<<8192, 128, 0, s>>>(static_cast<uint8_t*>(p), tokens, seed, row_bytes);
}
