// Devices: a small handle (Device) and a full description (DeviceInfo) that is either
// probed from a real device or described by name for "what if" questions (sm_120, ...).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace latte {

enum class DeviceKind : uint8_t { cpu, cuda };

[[nodiscard]] std::string_view to_string(DeviceKind kind);

struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;
  friend bool operator==(const Device&, const Device&) = default;
};

struct DeviceInfo {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;                       // cuda:N; 0 for the CPU and for described archs
  std::string name;                    // "NVIDIA H200", "cpu", "sm_120 (described)"
  int arch_major = 0;                  // compute capability; 0 for the CPU
  int arch_minor = 0;
  int sm_count = 0;                    // CPU: logical cores
  int64_t max_smem_per_block = 0;      // opt-in shared memory per block, bytes
  int64_t memory_bytes = 0;            // device memory (CPU: 0 = not probed)
  bool probed = false;                 // true: read from a real device; false: described by name

  [[nodiscard]] int arch() const { return arch_major * 10 + arch_minor; }  // 90 for sm_90
  [[nodiscard]] Device handle() const { return Device{kind, index}; }
  [[nodiscard]] std::string label() const;  // "cuda:0 NVIDIA H200 (sm_90)", "sm_120 (described)"
  friend bool operator==(const DeviceInfo&, const DeviceInfo&) = default;
};

// "cpu", "cuda", "cuda:N" (probed; error if absent), "sm_80" ... "sm_120" (described with the
// limits of docs/design.md, section 8). Throws latte::Error(not_found) naming the accepted forms.
[[nodiscard]] DeviceInfo describe_device(std::string_view name);

// The CPU followed by every CUDA device the runtime reports (none in a build without CUDA).
[[nodiscard]] std::vector<DeviceInfo> probe_devices();

[[nodiscard]] int cuda_device_count();  // 0 without CUDA or without a GPU
[[nodiscard]] bool built_with_cuda();

// The architectures described by name, in ascending order: 80, 86, 89, 90, 100, 120.
[[nodiscard]] const std::vector<int>& described_archs();
// The GPU whose limits a described architecture uses ("A100" for 80, "RTX PRO 6000" for 120);
// empty for an architecture that is not described.
[[nodiscard]] std::string_view described_arch_example(int arch);

// "sm_90" for 90, "sm_120" for 120; "cpu" for 0.
[[nodiscard]] std::string arch_name(int arch);

}  // namespace latte
