// Devices: probed through the CUDA runtime (when built with CUDA) or described by name with
// the limits of a representative GPU of each architecture (docs/design.md, section 8).
#include "latte/device.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <charconv>
#include <optional>
#include <thread>

#include "core/text.hpp"
#include "latte/error.hpp"

#ifdef LATTE_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace latte {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

// One representative GPU per architecture. SM counts and memory are those of the named part;
// the shared-memory limit is cudaDevAttrMaxSharedMemoryPerBlockOptin of the architecture.
// sm_86 uses the A10 (72 SMs, 24 GB); an RTX 3090 has 82 SMs and an A40 84 — selection does
// not depend on the SM count, only explanations and occupancy estimates do.
struct ArchLimits {
  int arch;
  const char* example;
  int sm_count;
  int64_t max_smem_per_block;
  int64_t memory_bytes;
};

constexpr ArchLimits kDescribedArchs[] = {
    {80, "A100", 108, 166912, 80 * kGiB},
    {86, "A10", 72, 101376, 24 * kGiB},
    {89, "L40S", 142, 101376, 48 * kGiB},
    {90, "H100/H200", 132, 232448, 80 * kGiB},
    {100, "B200", 148, 232448, 180 * kGiB},
    {120, "RTX PRO 6000", 188, 101376, 96 * kGiB},
};

const ArchLimits* find_arch(int arch) {
  for (const ArchLimits& limits : kDescribedArchs) {
    if (limits.arch == arch) return &limits;
  }
  return nullptr;
}

std::string accepted_forms() {
  return fmt::format("cpu, cuda, cuda:N, or a described architecture ({})",
                     detail::join(described_archs(), ", ", [](int a) { return arch_name(a); }));
}

DeviceInfo cpu_info() {
  DeviceInfo info;
  info.kind = DeviceKind::cpu;
  info.name = "cpu";
  info.sm_count = static_cast<int>(std::thread::hardware_concurrency());
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  info.memory_bytes = pages > 0 && page_size > 0 ? int64_t{pages} * page_size : 0;
  info.probed = true;
  return info;
}

DeviceInfo described_info(const ArchLimits& limits) {
  DeviceInfo info;
  info.kind = DeviceKind::cuda;
  info.index = 0;
  info.name = arch_name(limits.arch) + " (described)";
  info.arch_major = limits.arch / 10;
  info.arch_minor = limits.arch % 10;
  info.sm_count = limits.sm_count;
  info.max_smem_per_block = limits.max_smem_per_block;
  info.memory_bytes = limits.memory_bytes;
  info.probed = false;
  return info;
}

DeviceInfo probe_cuda(int index) {
#ifdef LATTE_WITH_CUDA
  const int count = cuda_device_count();
  if (index < 0 || index >= count) {
    throw Error(ErrorCode::not_found,
                count == 0 ? fmt::format("device cuda:{} is not present: the CUDA runtime reports no "
                                         "GPU; use 'cpu' or describe an architecture (sm_90)",
                                         index)
                           : fmt::format("device cuda:{} is not present: this machine has {} CUDA "
                                         "device{} (cuda:0..cuda:{})",
                                         index, count, count == 1 ? "" : "s", count - 1));
  }
  cudaDeviceProp prop{};
  const cudaError_t err = cudaGetDeviceProperties(&prop, index);
  if (err != cudaSuccess) {
    throw Error(ErrorCode::cuda_error, fmt::format("cudaGetDeviceProperties(cuda:{}) failed: {}",
                                                   index, cudaGetErrorString(err)));
  }
  DeviceInfo info;
  info.kind = DeviceKind::cuda;
  info.index = index;
  info.name = prop.name;
  info.arch_major = prop.major;
  info.arch_minor = prop.minor;
  info.sm_count = prop.multiProcessorCount;
  info.max_smem_per_block = static_cast<int64_t>(prop.sharedMemPerBlockOptin);
  info.memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  info.probed = true;
  return info;
#else
  throw Error(ErrorCode::not_found,
              fmt::format("device cuda:{} is not available: this latte was built without CUDA "
                          "(rebuild with -DLATTE_CUDA=ON), or describe an architecture instead "
                          "(sm_80 ... sm_120)",
                          index));
#endif
}

std::optional<int> parse_non_negative(std::string_view digits) {
  if (digits.empty() || digits.size() > 6) return std::nullopt;
  int value = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec != std::errc{} || end != digits.data() + digits.size()) return std::nullopt;
  return value;
}

}  // namespace

std::string arch_name(int arch) { return arch == 0 ? "cpu" : fmt::format("sm_{}", arch); }

std::string DeviceInfo::label() const {
  if (kind == DeviceKind::cpu) return "cpu";
  if (!probed) return name;
  return fmt::format("cuda:{} {} ({})", index, name, arch_name(arch()));
}

const std::vector<int>& described_archs() {
  static const std::vector<int> archs = [] {
    std::vector<int> out;
    for (const ArchLimits& limits : kDescribedArchs) out.push_back(limits.arch);
    return out;
  }();
  return archs;
}

std::string_view described_arch_example(int arch) {
  const ArchLimits* limits = find_arch(arch);
  return limits ? std::string_view(limits->example) : std::string_view();
}

bool built_with_cuda() {
#ifdef LATTE_WITH_CUDA
  return true;
#else
  return false;
#endif
}

int cuda_device_count() {
#ifdef LATTE_WITH_CUDA
  int count = 0;
  // No driver or no GPU is not an error here: the answer is simply "none".
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
#else
  return 0;
#endif
}

DeviceInfo describe_device(std::string_view name_in) {
  const std::string name = detail::lower(name_in);
  if (name == "cpu") return cpu_info();
  if (name == "cuda") return probe_cuda(0);
  if (name.rfind("cuda:", 0) == 0) {
    if (const auto index = parse_non_negative(std::string_view(name).substr(5))) {
      return probe_cuda(*index);
    }
    throw Error(ErrorCode::not_found,
                fmt::format("unknown device '{}': after 'cuda:' write a device index such as "
                            "cuda:0; accepted forms: {}",
                            name_in, accepted_forms()));
  }
  if (name.rfind("sm_", 0) == 0) {
    const auto arch = parse_non_negative(std::string_view(name).substr(3));
    if (arch) {
      if (const ArchLimits* limits = find_arch(*arch)) return described_info(*limits);
    }
    throw Error(ErrorCode::not_found,
                fmt::format("unknown architecture '{}': latte describes {}; for another GPU use "
                            "cuda:N on the machine that has it",
                            name_in,
                            detail::join(described_archs(), ", ",
                                         [](int a) { return arch_name(a); })));
  }
  throw Error(ErrorCode::not_found,
              fmt::format("unknown device '{}'; accepted forms: {}", name_in, accepted_forms()));
}

std::vector<DeviceInfo> probe_devices() {
  std::vector<DeviceInfo> devices{cpu_info()};
  const int count = cuda_device_count();
  for (int i = 0; i < count; ++i) devices.push_back(probe_cuda(i));
  return devices;
}

}  // namespace latte
