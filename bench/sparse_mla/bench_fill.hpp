// Random-fill helpers of the cuda.sparse_mla benchmark.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

// bf16 values uniform in [-amp, amp)
void bench_fill_bf16(void* p, int64_t n, uint64_t seed, float amp, cudaStream_t s);
// fp8_ds_mla tokens: random finite e4m3 codes, scales in [0.002, 0.02), bf16 rope in [-1, 1);
// row_bytes 656, or 528 (rows without rope, compact)
void bench_fill_fp8_cache(void* p, int64_t tokens, uint64_t seed, cudaStream_t s, int row_bytes = 656);
