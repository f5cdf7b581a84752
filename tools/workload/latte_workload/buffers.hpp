// The workload's memory: host bytes with an optional device copy (cudaMalloc'd here, not by
// liblatte), viewed as TensorViews; what memory there is; a tally of what is alive; a timer.
#pragma once

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <new>
#include <string>

#include "latte/device.hpp"
#include "latte/tensor.hpp"

namespace latte::workload {

// "1.50 GiB", "12.0 MiB", "512 B".
[[nodiscard]] std::string format_bytes(uint64_t bytes);

// Memory that can be had now, and where the figure comes from. Host: MemAvailable of
// /proc/meminfo (sysconf's free pages where there is none), less where a cgroup v2 limit
// leaves less; CUDA: cudaMemGetInfo's free bytes on the device.
struct AvailableMemory {
  uint64_t bytes = 0;
  std::string source;
};
[[nodiscard]] AvailableMemory available_memory(Device device);

// The host and device bytes of the WorkBuffers alive on this thread while a tally is in scope,
// and the most alive at once: what a workload's memory estimate is checked against.
class MemoryTally {
 public:
  MemoryTally();  // the thread's tally until destroyed
  ~MemoryTally();
  MemoryTally(const MemoryTally&) = delete;
  MemoryTally& operator=(const MemoryTally&) = delete;
  [[nodiscard]] uint64_t host_peak() const { return host_peak_; }
  [[nodiscard]] uint64_t device_peak() const { return device_peak_; }
  static void change(int64_t host, int64_t device);  // no-op without a tally

 private:
  uint64_t host_ = 0, device_ = 0, host_peak_ = 0, device_peak_ = 0;
  MemoryTally* previous_;
};

// Host bytes, and on CUDA as many device bytes (the run copy). An allocation that fails is a
// latte::Error(out_of_memory) naming the bytes.
class WorkBuffer {
 public:
  WorkBuffer(std::size_t bytes, Device device);
  ~WorkBuffer();
  WorkBuffer(const WorkBuffer&) = delete;
  WorkBuffer& operator=(const WorkBuffer&) = delete;

  [[nodiscard]] unsigned char* host() { return host_.get(); }
  [[nodiscard]] const unsigned char* host() const { return host_.get(); }
  template <typename T>
  [[nodiscard]] T* host_as() { return reinterpret_cast<T*>(host_.get()); }
  template <typename T>
  [[nodiscard]] const T* host_as() const { return reinterpret_cast<const T*>(host_.get()); }
  [[nodiscard]] std::size_t bytes() const { return bytes_; }

  // A view of the run copy (device memory on CUDA, the host bytes on the CPU).
  [[nodiscard]] TensorView view(DType dtype, std::initializer_list<int64_t> shape);
  // A view of the host bytes, for the reference.
  [[nodiscard]] TensorView host_view(DType dtype, std::initializer_list<int64_t> shape);

  void upload();     // host -> device (no-op on the CPU)
  void download();   // device -> host (no-op on the CPU)
  void fill_device(unsigned char byte);  // poison the run copy

 private:
  struct AlignedDelete {
    void operator()(unsigned char* p) const { ::operator delete[](p, std::align_val_t{64}); }
  };
  // 64-byte aligned: the validation layer requires 16-byte-aligned tensors.
  std::unique_ptr<unsigned char[], AlignedDelete> host_;
  std::size_t bytes_ = 0;
  Device device_;
  void* device_ptr_ = nullptr;
};

// Timing of a region of work on a device: CUDA events on CUDA, the steady clock on the CPU.
class StageTimer {
 public:
  explicit StageTimer(Device device);
  ~StageTimer();
  StageTimer(const StageTimer&) = delete;
  StageTimer& operator=(const StageTimer&) = delete;
  void start();
  double stop_ms();  // waits for the device
  static void synchronize(Device device);

 private:
  Device device_;
  void* begin_ = nullptr;
  void* end_ = nullptr;
  double host_start_ = 0;
};

}  // namespace latte::workload
