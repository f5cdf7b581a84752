#include "workload_buffers.hpp"

#include <fmt/format.h>

#include <chrono>

#include "latte/error.hpp"

#ifdef LATTE_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace latte::detail {
namespace {

#ifdef LATTE_WITH_CUDA
void cuda_try(cudaError_t err, const char* what) {
  if (err != cudaSuccess)
    throw Error(ErrorCode::cuda_error, fmt::format("{} failed: {}", what, cudaGetErrorString(err)));
}
#endif

[[noreturn, maybe_unused]] void no_cuda() {
  throw Error(ErrorCode::unsupported,
              "this latte was built without CUDA: rebuild with -DLATTE_CUDA=ON or use --device cpu");
}

double now_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

}  // namespace

WorkBuffer::WorkBuffer(std::size_t bytes, Device device)
    : host_(static_cast<unsigned char*>(::operator new[](bytes ? bytes : 1, std::align_val_t{64}))),
      bytes_(bytes),
      device_(device) {
  std::memset(host_.get(), 0, bytes_);
  if (device.kind == DeviceKind::cuda && bytes > 0) {
#ifdef LATTE_WITH_CUDA
    cuda_try(cudaMalloc(&device_ptr_, bytes), "cudaMalloc of a workload buffer");
#else
    no_cuda();
#endif
  }
}

WorkBuffer::~WorkBuffer() {
#ifdef LATTE_WITH_CUDA
  if (device_ptr_) cudaFree(device_ptr_);
#endif
}

TensorView WorkBuffer::view(DType dtype, std::initializer_list<int64_t> shape) {
  void* data = device_.kind == DeviceKind::cuda ? device_ptr_ : static_cast<void*>(host_.get());
  return TensorView::contiguous(data, dtype, shape, device_);
}

TensorView WorkBuffer::host_view(DType dtype, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(host_.get(), dtype, shape, Device{});
}

void WorkBuffer::upload() {
  if (device_.kind != DeviceKind::cuda || bytes_ == 0) return;
#ifdef LATTE_WITH_CUDA
  cuda_try(cudaMemcpy(device_ptr_, host_.get(), bytes_, cudaMemcpyHostToDevice), "upload");
#endif
}

void WorkBuffer::download() {
  if (device_.kind != DeviceKind::cuda || bytes_ == 0) return;
#ifdef LATTE_WITH_CUDA
  cuda_try(cudaMemcpy(host_.get(), device_ptr_, bytes_, cudaMemcpyDeviceToHost), "download");
#endif
}

void WorkBuffer::fill_device(unsigned char byte) {
  if (device_.kind != DeviceKind::cuda) {
    std::memset(host_.get(), byte, bytes_);
    return;
  }
#ifdef LATTE_WITH_CUDA
  cuda_try(cudaMemset(device_ptr_, byte, bytes_), "cudaMemset");
#endif
}

StageTimer::StageTimer(Device device) : device_(device) {
#ifdef LATTE_WITH_CUDA
  if (device.kind == DeviceKind::cuda) {
    cudaEvent_t a = nullptr, b = nullptr;
    cuda_try(cudaEventCreate(&a), "cudaEventCreate");
    cuda_try(cudaEventCreate(&b), "cudaEventCreate");
    begin_ = a;
    end_ = b;
  }
#endif
}

StageTimer::~StageTimer() {
#ifdef LATTE_WITH_CUDA
  if (begin_) cudaEventDestroy(static_cast<cudaEvent_t>(begin_));
  if (end_) cudaEventDestroy(static_cast<cudaEvent_t>(end_));
#endif
}

void StageTimer::start() {
#ifdef LATTE_WITH_CUDA
  if (device_.kind == DeviceKind::cuda) {
    cuda_try(cudaEventRecord(static_cast<cudaEvent_t>(begin_), nullptr), "cudaEventRecord");
    return;
  }
#endif
  host_start_ = now_ms();
}

double StageTimer::stop_ms() {
#ifdef LATTE_WITH_CUDA
  if (device_.kind == DeviceKind::cuda) {
    auto end = static_cast<cudaEvent_t>(end_);
    cuda_try(cudaEventRecord(end, nullptr), "cudaEventRecord");
    cuda_try(cudaEventSynchronize(end), "cudaEventSynchronize");
    float ms = 0;
    cuda_try(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(begin_), end), "cudaEventElapsedTime");
    return ms;
  }
#endif
  return now_ms() - host_start_;
}

void StageTimer::synchronize(Device device) {
#ifdef LATTE_WITH_CUDA
  if (device.kind == DeviceKind::cuda) cuda_try(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
#else
  (void)device;
#endif
}

}  // namespace latte::detail
