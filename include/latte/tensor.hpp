// TensorView: a non-owning view of memory owned by the caller (torch, numpy, cudaMalloc).
// Strides are in elements, as in DLPack and PyTorch.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "latte/device.hpp"
#include "latte/dtype.hpp"

namespace latte {

inline constexpr int kMaxRank = 6;

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::f32;
  int rank = 0;
  std::array<int64_t, kMaxRank> shape{};
  std::array<int64_t, kMaxRank> strides{};
  Device device{};

  // A contiguous (row-major) view.
  [[nodiscard]] static TensorView contiguous(void* data, DType dtype,
                                             std::initializer_list<int64_t> shape,
                                             Device device = {});

  // False for a default-constructed view: optional arguments (lse, q_scale, ...) are absent.
  [[nodiscard]] bool defined() const { return rank > 0 || data != nullptr; }
  [[nodiscard]] int64_t size(int dim) const { return shape[static_cast<std::size_t>(dim)]; }
  [[nodiscard]] int64_t stride(int dim) const { return strides[static_cast<std::size_t>(dim)]; }
  [[nodiscard]] int64_t numel() const;
  [[nodiscard]] int64_t nbytes() const;  // numel * element size
  [[nodiscard]] bool is_contiguous() const;
  // True when the last dimension has stride 1 (rows may be padded).
  [[nodiscard]] bool rows_contiguous() const;
  template <typename T>
  [[nodiscard]] T* ptr() const { return static_cast<T*>(data); }

  // "bf16[4, 64, 576] strides [36864, 576, 1] on cuda:0", for error messages.
  [[nodiscard]] std::string describe() const;
};

}  // namespace latte
