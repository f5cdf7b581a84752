// Makes a CUDA device current for a scope and puts the caller's back after (cudaGetDevice is a
// thread-local read; the device is set only on a change). Nothing for host tensors.
#pragma once

#include "latte/device.hpp"

#ifdef LATTE_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace latte::detail {

class DeviceGuard {
 public:
  explicit DeviceGuard(Device device) {
#ifdef LATTE_WITH_CUDA
    if (device.kind != DeviceKind::cuda) return;
    int current = -1;
    const bool known = cudaGetDevice(&current) == cudaSuccess;
    if (!known || current != device.index) {
      cudaSetDevice(device.index);
      if (known) previous_ = current;
    }
#else
    (void)device;
#endif
  }
  ~DeviceGuard() {
#ifdef LATTE_WITH_CUDA
    if (previous_ >= 0) cudaSetDevice(previous_);
#endif
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

}  // namespace latte::detail
