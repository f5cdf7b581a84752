// Helpers for the ops tests: owned, 64-byte aligned host tensors, random bf16 data, and a way
// to run the cpu.reference backend on a call.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <random>
#include <vector>

#include "latte/api.hpp"
#include "latte/backend.hpp"
#include "latte/error.hpp"
#include "latte/formats.hpp"
#include "latte/ops.hpp"
#include "latte/registry.hpp"
#include "latte/spec.hpp"
#include "latte/tensor.hpp"

namespace latte::testing {

// A contiguous host tensor that owns its memory (zero-filled, 64-byte aligned).
class HostTensor {
 public:
  HostTensor() = default;
  HostTensor(DType dtype, std::initializer_list<int64_t> shape) {
    view_ = TensorView::contiguous(nullptr, dtype, shape);
    const auto bytes = static_cast<std::size_t>(view_.nbytes());
    const std::size_t rounded = (bytes + 63) / 64 * 64 + 64;
    memory_.reset(static_cast<unsigned char*>(std::aligned_alloc(64, rounded)));
    std::memset(memory_.get(), 0, rounded);
    view_.data = memory_.get();
  }
  [[nodiscard]] const TensorView& view() const { return view_; }
  operator const TensorView&() const { return view_; }  // NOLINT: pass where a view is wanted
  template <typename T>
  T* data() const { return static_cast<T*>(view_.data); }
  template <typename T>
  T& at(int64_t flat) const { return data<T>()[flat]; }
  [[nodiscard]] int64_t numel() const { return view_.numel(); }

 private:
  struct Free {
    void operator()(unsigned char* p) const { std::free(p); }
  };
  std::unique_ptr<unsigned char, Free> memory_;
  TensorView view_;
};

// Fills a bf16 tensor with values drawn uniformly from [lo, hi), rounded to bf16.
inline void fill_bf16(const HostTensor& t, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.at<uint16_t>(i) = float_to_bf16(dist(rng));
}

inline double bf16_at(const HostTensor& t, int64_t flat) {
  return bf16_to_float(t.at<uint16_t>(flat));
}

// Runs `args` on cpu.reference, found in the global registry as an engine would.
inline void run_reference(const OpArgs& args, bool check_indices = false) {
  const auto backend = Registry::global().get("cpu.reference");
  const std::unique_ptr<Kernel> kernel = backend->make(spec_from_args(args), DeviceInfo{});
  RunContext ctx;
  ctx.check_indices = check_indices;
  kernel->run(args, ctx);
}

}  // namespace latte::testing
