#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "latte/device.hpp"

namespace latte::cli {
namespace {

nlohmann::json device_json(const DeviceInfo& d) {
  return {{"label", d.label()},        {"kind", std::string(to_string(d.kind))},
          {"index", d.index},          {"name", d.name},
          {"arch", d.arch()},          {"sm_count", d.sm_count},
          {"max_smem_per_block", d.max_smem_per_block},
          {"memory_bytes", d.memory_bytes}, {"probed", d.probed}};
}

void print_table(const std::vector<DeviceInfo>& devices, const char* title) {
  fmt::print("{}\n", title);
  fmt::print("  {:<8} {:<28} {:>7} {:>6} {:>14} {:>12}\n", "device", "name", "arch", "SMs",
             "smem/block", "memory");
  for (const DeviceInfo& d : devices) {
    const std::string handle = d.kind == DeviceKind::cpu ? std::string("cpu")
                               : d.probed ? fmt::format("cuda:{}", d.index)
                                          : fmt::format("sm_{}", d.arch());
    fmt::print("  {:<8} {:<28} {:>7} {:>6} {:>14} {:>12}\n", handle, d.name,
               d.kind == DeviceKind::cpu ? std::string("-") : fmt::format("sm_{}", d.arch()),
               d.sm_count, d.max_smem_per_block ? fmt::format("{} B", d.max_smem_per_block) : "-",
               d.memory_bytes ? fmt::format("{:.1f} GiB", static_cast<double>(d.memory_bytes) / (1 << 30))
                              : "-");
  }
}

}  // namespace

void add_devices(CLI::App& app) {
  auto* cmd = app.add_subcommand("devices", "List this machine's devices and the architectures latte can describe");
  auto json = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json, "Print JSON");
  cmd->callback([json] {
    const std::vector<DeviceInfo> probed = probe_devices();
    std::vector<DeviceInfo> described;
    for (int arch : described_archs()) described.push_back(describe_device(fmt::format("sm_{}", arch)));
    if (*json) {
      nlohmann::json j;
      j["devices"] = nlohmann::json::array();
      for (const DeviceInfo& d : probed) j["devices"].push_back(device_json(d));
      j["described"] = nlohmann::json::array();
      for (const DeviceInfo& d : described) j["described"].push_back(device_json(d));
      j["built_with_cuda"] = built_with_cuda();
      fmt::print("{}\n", j.dump(2));
      return;
    }
    print_table(probed, "devices on this machine:");
    if (!built_with_cuda()) fmt::print("  (this latte was built without CUDA)\n");
    else if (cuda_device_count() == 0) fmt::print("  (no CUDA device found)\n");
    fmt::print("\n");
    print_table(described, "architectures for --device sm_XY (what-if questions):");
  });
}

}  // namespace latte::cli
