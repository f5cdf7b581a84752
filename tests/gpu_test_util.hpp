// Helpers for GPU tests: skip visibly without a device, check CUDA calls, own device memory.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace latte::testing {

inline bool has_cuda_device() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

#define LATTE_SKIP_WITHOUT_GPU()                                                          \
  do {                                                                                    \
    if (!::latte::testing::has_cuda_device())                                             \
      GTEST_SKIP() << "skipped: no CUDA device (GPU tests run on the H200: scripts/gpu-check)"; \
  } while (0)

#define LATTE_CUDA_CHECK(expr)                                                               \
  do {                                                                                       \
    cudaError_t latte_err_ = (expr);                                                         \
    if (latte_err_ != cudaSuccess)                                                           \
      throw std::runtime_error(std::string(#expr) + ": " + cudaGetErrorString(latte_err_));  \
  } while (0)

// Owning device buffer for tests.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
    if (bytes) LATTE_CUDA_CHECK(cudaMalloc(&ptr_, bytes));
  }
  ~DeviceBuffer() { if (ptr_) cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr; o.bytes_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_); std::swap(bytes_, o.bytes_); return *this;
  }
  void* get() const { return ptr_; }
  template <typename T> T* as() const { return static_cast<T*>(ptr_); }
  std::size_t bytes() const { return bytes_; }
  void upload(const void* host, std::size_t n) { LATTE_CUDA_CHECK(cudaMemcpy(ptr_, host, n, cudaMemcpyHostToDevice)); }
  void download(void* host, std::size_t n) const { LATTE_CUDA_CHECK(cudaMemcpy(host, ptr_, n, cudaMemcpyDeviceToHost)); }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

// Sets an environment variable for the scope (test hooks read when a kernel is made or per
// call), unset again however the scope ends (a failed ASSERT included).
struct ScopedEnv {
  const char* name;
  ScopedEnv(const char* n, const char* v) : name(n) { setenv(n, v, 1); }
  ~ScopedEnv() { unsetenv(name); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
};

}  // namespace latte::testing
