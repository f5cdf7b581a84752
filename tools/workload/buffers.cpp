#include "latte_workload/buffers.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <optional>
#include <sstream>

#include "latte/error.hpp"

#ifdef LATTE_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace latte::workload {
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

[[noreturn]] void allocation_failed(std::size_t bytes, const std::string& where, const std::string& why) {
  throw Error(ErrorCode::out_of_memory,
              fmt::format("could not allocate {} ({} bytes) of {} memory for a workload buffer ({}); "
                          "free memory, or ask for less (latte run: lower --batch or --context)",
                          format_bytes(bytes), bytes, where, why));
}

unsigned char* allocate_host(std::size_t bytes) {
  try {
    return static_cast<unsigned char*>(::operator new[](bytes ? bytes : 1, std::align_val_t{64}));
  } catch (const std::bad_alloc&) {
    allocation_failed(bytes, "host", "std::bad_alloc");
  }
}

// The first number of the line of /proc/meminfo that starts with `key`, in bytes.
std::optional<uint64_t> meminfo_bytes(const std::string& key) {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) != 0) continue;
    std::istringstream fields(line.substr(key.size()));
    uint64_t kib = 0;
    if (fields >> kib) return kib * 1024;
  }
  return std::nullopt;
}

std::optional<uint64_t> file_number(const char* path) {
  std::ifstream in(path);
  uint64_t value = 0;
  if (in >> value) return value;
  return std::nullopt;  // absent, or "max"
}

thread_local MemoryTally* current_tally = nullptr;

double now_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

}  // namespace

std::string format_bytes(uint64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (bytes >= (uint64_t{1} << 30)) return fmt::format("{:.2f} GiB", b / (1 << 30));
  if (bytes >= (uint64_t{1} << 20)) return fmt::format("{:.1f} MiB", b / (1 << 20));
  if (bytes >= (uint64_t{1} << 10)) return fmt::format("{:.1f} KiB", b / (1 << 10));
  return fmt::format("{} B", bytes);
}

AvailableMemory available_memory(Device device) {
  if (device.kind == DeviceKind::cuda) {
#ifdef LATTE_WITH_CUDA
    int previous = 0;
    cuda_try(cudaGetDevice(&previous), "cudaGetDevice");
    cuda_try(cudaSetDevice(device.index), "cudaSetDevice");
    std::size_t free = 0, total = 0;
    const cudaError_t err = cudaMemGetInfo(&free, &total);
    (void)cudaSetDevice(previous);
    cuda_try(err, "cudaMemGetInfo");
    return {free, fmt::format("free on cuda:{}", device.index)};
#else
    no_cuda();
#endif
  }
  AvailableMemory out;
  if (const auto available = meminfo_bytes("MemAvailable:")) {
    out = {*available, "MemAvailable"};
  } else {
    const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    out = {pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0,
           "free pages"};
  }
  // In a container /proc/meminfo is the machine's; the cgroup's limit may leave less.
  const auto limit = file_number("/sys/fs/cgroup/memory.max");
  const auto used = file_number("/sys/fs/cgroup/memory.current");
  if (limit && used) {
    const uint64_t left = *limit > *used ? *limit - *used : 0;
    if (left < out.bytes) out = {left, "the cgroup's memory.max less memory.current"};
  }
  return out;
}

MemoryTally::MemoryTally() : previous_(current_tally) { current_tally = this; }
MemoryTally::~MemoryTally() { current_tally = previous_; }

void MemoryTally::change(int64_t host, int64_t device) {
  MemoryTally* t = current_tally;
  if (!t) return;
  t->host_ = static_cast<uint64_t>(static_cast<int64_t>(t->host_) + host);
  t->device_ = static_cast<uint64_t>(static_cast<int64_t>(t->device_) + device);
  t->host_peak_ = std::max(t->host_peak_, t->host_);
  t->device_peak_ = std::max(t->device_peak_, t->device_);
}

WorkBuffer::WorkBuffer(std::size_t bytes, Device device)
    : host_(allocate_host(bytes)), bytes_(bytes), device_(device) {
  std::memset(host_.get(), 0, bytes_);
  if (device.kind == DeviceKind::cuda && bytes > 0) {
#ifdef LATTE_WITH_CUDA
    const cudaError_t err = cudaMalloc(&device_ptr_, bytes);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // clear it: the process goes on
      allocation_failed(bytes, fmt::format("cuda:{}", device.index), cudaGetErrorString(err));
    }
    cuda_try(err, "cudaMalloc of a workload buffer");
#else
    no_cuda();
#endif
  }
  MemoryTally::change(static_cast<int64_t>(bytes_), device_ptr_ ? static_cast<int64_t>(bytes_) : 0);
}

WorkBuffer::~WorkBuffer() {
  MemoryTally::change(-static_cast<int64_t>(bytes_), device_ptr_ ? -static_cast<int64_t>(bytes_) : 0);
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

}  // namespace latte::workload
