#include "kernels/cpu_reference/host_tensor_access.hpp"

#include <cstring>

namespace latte::cpu_reference {

void read_bf16_row(const uint16_t* row, int n, double* out) {
  for (int i = 0; i < n; ++i) out[i] = bf16_to_float(row[i]);
}

void write_bf16_row(const double* values, int n, uint16_t* row) {
  for (int i = 0; i < n; ++i) row[i] = float_to_bf16(static_cast<float>(values[i]));
}

void read_mla_token(const TensorView& cache, CacheFormat format, int rope_dim, int64_t block_size,
                    int64_t slot, CacheToken& out) {
  const int64_t block = slot / block_size;
  const int64_t offset = slot % block_size;
  out.fill(0.0);
  if (format == CacheFormat::bf16) {
    read_bf16_row(at<const uint16_t>(cache, {block, offset}), kLatentDim + rope_dim, out.data());
    return;
  }
  const uint8_t* token = at<const uint8_t>(cache, {block, offset});
  for (int g = 0; g < kLatentDim / kFp8GroupSize; ++g) {
    float scale = 0.0f;
    std::memcpy(&scale, token + kFp8DsMlaScaleOffset + 4 * g, 4);
    for (int i = g * kFp8GroupSize; i < (g + 1) * kFp8GroupSize; ++i) {
      out[static_cast<std::size_t>(i)] =
          static_cast<double>(e4m3_to_float(token[i])) * static_cast<double>(scale);
    }
  }
  for (int i = 0; i < rope_dim; ++i) {
    uint16_t bits = 0;
    std::memcpy(&bits, token + kFp8DsMlaRopeOffset + 2 * i, 2);
    out[static_cast<std::size_t>(kLatentDim + i)] = bf16_to_float(bits);
  }
}

void read_indexer_token(const TensorView& k_cache, int64_t block_size, int64_t slot,
                        std::array<double, kIndexDim>& out) {
  const int64_t block = slot / block_size;
  const int64_t offset = slot % block_size;
  const uint8_t* page = page_bytes(k_cache, block);
  float scale = 0.0f;
  std::memcpy(&scale, page + block_size * kIndexDim + offset * 4, 4);
  const uint8_t* codes = page + offset * kIndexDim;
  for (int i = 0; i < kIndexDim; ++i) {
    out[static_cast<std::size_t>(i)] =
        static_cast<double>(e4m3_to_float(codes[i])) * static_cast<double>(scale);
  }
}

}  // namespace latte::cpu_reference
