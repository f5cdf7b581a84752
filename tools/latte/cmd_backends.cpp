#include <fmt/format.h>
#include <fmt/ranges.h>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "latte/context.hpp"

namespace latte::cli {
namespace {

template <typename T>
std::string join_names(const std::vector<T>& items, const char* if_empty = "any") {
  if (items.empty()) return if_empty;
  std::string out;
  for (const T& item : items) out += fmt::format("{}{}", out.empty() ? "" : ",", to_string(item));
  return out;
}

std::string arch_text(const Capabilities& caps) {
  bool cuda = false;
  for (DeviceKind k : caps.devices) cuda = cuda || k == DeviceKind::cuda;
  return cuda ? caps.arch.describe() : "-";
}

}  // namespace

void add_backends(CLI::App& app) {
  auto* cmd = app.add_subcommand("backends", "List the registered backends and what each declares it supports");
  auto json = std::make_shared<bool>(false);
  auto plugins = std::make_shared<std::vector<std::string>>();
  cmd->add_flag("--json", *json, "Print JSON");
  cmd->add_option("--plugin", *plugins, "Load a plugin .so first (repeatable)");
  cmd->callback([json, plugins] {
    load_plugins(*plugins);
    const auto backends = Context::global().registry().all();
    if (*json) {
      warn_plugin_path_failures();  // stdout stays the JSON array
      nlohmann::json j = nlohmann::json::array();
      for (const auto& b : backends) {
        const BackendInfo& info = b->info();
        j.push_back({{"id", info.id},
                     {"description", info.description},
                     {"source", info.source},
                     {"capabilities", nlohmann::json::parse(capabilities_to_json(info.caps))}});
      }
      fmt::print("{}\n", j.dump(2));
      return;
    }
    if (backends.empty()) fmt::print("no backends registered\n");
    else fmt::print("{} backends\n\n", backends.size());
    for (const auto& b : backends) {
      const BackendInfo& info = b->info();
      const Capabilities& c = info.caps;
      fmt::print("{}  ({})\n  {}\n", info.id, info.source, info.description);
      fmt::print("  ops: {}\n  devices: {}   arch: {}\n", join_names(c.ops), join_names(c.devices), arch_text(c));
      fmt::print("  heads: {}   head_dim: {}   q dtypes: {}   kv caches: {}\n", c.heads.describe(),
                 c.head_dim.describe(), join_names(c.q_dtypes), join_names(c.kv_caches));
      fmt::print("  block size: {}   topk: {}   s_q: {}   tokens: {}\n", c.block_size.describe(),
                 c.topk.describe(), c.s_q.describe(), c.max_tokens.describe());
      if (!c.workspace.empty()) fmt::print("  workspace: {}\n", c.workspace);
      if (!c.notes.empty()) fmt::print("  notes: {}\n", c.notes);
      fmt::print("\n");
    }
    const std::vector<std::string> failures = plugin_path_failures();
    if (!failures.empty()) fmt::print("not loaded from LATTE_PLUGIN_PATH:\n");
    for (const std::string& failure : failures) fmt::print("  {}\n", failure);
  });
}

}  // namespace latte::cli
