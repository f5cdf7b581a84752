// A tensor with a host copy and a device copy of the same shape, for tests that run one call on
// cpu.reference (host) and on a CUDA backend (device) and compare.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <stdexcept>
#include <string>

#include "gpu_test_util.hpp"
#include "latte/tensor.hpp"

namespace latte::testing {

class MirrorTensor {
 public:
  MirrorTensor() = default;
  MirrorTensor(DType dtype, std::initializer_list<int64_t> shape) {
    view_ = TensorView::contiguous(nullptr, dtype, shape);
    bytes_ = static_cast<std::size_t>(view_.nbytes());
    const std::size_t rounded = (bytes_ + 63) / 64 * 64 + 64;
    host_.reset(static_cast<unsigned char*>(std::aligned_alloc(64, rounded)));
    std::memset(host_.get(), 0, rounded);
    dev_ = DeviceBuffer(rounded);
  }
  template <typename T>
  T* host() const { return reinterpret_cast<T*>(host_.get()); }
  void* device() const { return dev_.get(); }
  std::size_t bytes() const { return bytes_; }
  void upload() { if (bytes_) dev_.upload(host_.get(), bytes_); }
  void download() { if (bytes_) dev_.download(host_.get(), bytes_); }
  // Fills the device copy with a byte pattern (poison) without touching the host copy.
  void poison_device(int byte) { if (bytes_) LATTE_CUDA_CHECK(cudaMemset(dev_.get(), byte, bytes_)); }
  TensorView host_view() const {
    TensorView v = view_;
    v.data = host_.get();
    v.device = Device{DeviceKind::cpu, 0};
    return v;
  }
  TensorView dev_view() const {
    TensorView v = view_;
    v.data = dev_.get();
    v.device = Device{DeviceKind::cuda, 0};
    return v;
  }
  int64_t numel() const { return view_.numel(); }

 private:
  struct Free {
    void operator()(unsigned char* p) const { std::free(p); }
  };
  TensorView view_;
  std::size_t bytes_ = 0;
  std::unique_ptr<unsigned char, Free> host_;
  DeviceBuffer dev_;
};

}  // namespace latte::testing
