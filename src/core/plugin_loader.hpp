// Loading a plugin shared library through the C ABI of latte/plugin.h. Everything is checked
// before anything is registered, so a refused plugin leaves the host exactly as it was.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "latte/backend.hpp"
#include "latte/context.hpp"
#include "latte/plugin.h"
#include "latte/policy.hpp"

namespace latte::detail {

// An open plugin library; closed when the last backend or kernel using it is gone.
struct PluginLibrary {
  void* handle = nullptr;
  std::string path;
  PluginLibrary(void* h, std::string p) : handle(h), path(std::move(p)) {}
  ~PluginLibrary();
  PluginLibrary(const PluginLibrary&) = delete;
  PluginLibrary& operator=(const PluginLibrary&) = delete;
};

struct OpenedPlugin {
  std::shared_ptr<PluginLibrary> library;
  PluginInfo info;
  std::vector<std::shared_ptr<const Backend>> backends;
  std::optional<Policy> policy;  // the plugin layer's rules it ships
};

// dlopen, the entry point, the ABI version, every backend's description and capabilities
// and the shipped policy. Throws Error(plugin_error) naming the path and what is wrong.
// `path` should be absolute (Context::load_plugin makes it so).
[[nodiscard]] OpenedPlugin open_plugin(const std::string& path);

// The spec as ABI v1 hands it to a plugin's check() and make() (plugin_backend.cpp). It points
// into `spec` (model). Integer fields the ABI lacks are not passed: the plugin's declared
// capabilities still check them.
[[nodiscard]] latte_spec_v1 spec_to_c(const AttentionSpec& spec);

// Adapts one latte_backend_v1 to latte::Backend (plugin_backend.cpp).
[[nodiscard]] std::shared_ptr<const Backend> make_plugin_backend(std::shared_ptr<PluginLibrary> library,
                                                                 const latte_backend_v1* desc,
                                                                 BackendInfo info);

}  // namespace latte::detail
