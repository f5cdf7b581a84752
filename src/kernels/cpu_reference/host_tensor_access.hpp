// Reading and writing strided host tensors element by element, and decoding cache tokens.
// Everything the reference computes goes through these few helpers.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>

#include "latte/formats.hpp"
#include "latte/ops.hpp"
#include "latte/tensor.hpp"

namespace latte::cpu_reference {

// Pointer to the element at `index` (leading coordinates; missing trailing ones are 0).
template <typename T>
T* at(const TensorView& t, std::initializer_list<int64_t> index) {
  int64_t offset = 0;
  int d = 0;
  for (int64_t i : index) offset += i * t.stride(d++);
  return static_cast<T*>(t.data) + offset;
}

inline int32_t read_i32(const TensorView& t, std::initializer_list<int64_t> index) {
  return *at<const int32_t>(t, index);
}

// Reads `n` contiguous bf16 values (a row: last-dim stride is 1) as doubles.
void read_bf16_row(const uint16_t* row, int n, double* out);
// Writes `n` doubles as bf16 (float64 -> float32 -> bf16, each round to nearest even).
void write_bf16_row(const double* values, int n, uint16_t* row);

// One token of an MLA cache in float64: [latent 512 ; rope 64] (rope zero for rows without).
using CacheToken = std::array<double, kQkDim>;

// Decodes slot `slot` of a validated MLA cache whose rows have `rope_dim` rope values (64 or
// 0). fp8 values are e4m3 * scale computed in float64 (exact), so the oracle adds no
// dequantization rounding of its own. A row without rope is read from its first 528 bytes
// (fp8) or 512 values (bf16) only: a 656-byte row's reserved tail is never read.
void read_mla_token(const TensorView& cache, CacheFormat format, int rope_dim, int64_t block_size,
                    int64_t slot, CacheToken& out);

// The indexer K of one token in float64: e4m3 * scale (exact).
void read_indexer_token(const TensorView& k_cache, int64_t block_size, int64_t slot,
                        std::array<double, kIndexDim>& out);

// Start of the page (block) `block` of a paged cache.
inline uint8_t* page_bytes(const TensorView& cache, int64_t block) {
  return static_cast<uint8_t*>(cache.data) +
         block * cache.stride(0) * static_cast<int64_t>(dtype_size(cache.dtype));
}

}  // namespace latte::cpu_reference
