// A Context ties a registry, the policy layers, the plugins and a selection cache together.
// Context::global() is what the CLI, the Python module and the functional API use.
#pragma once

#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "latte/policy.hpp"
#include "latte/registry.hpp"
#include "latte/selector.hpp"

namespace latte {

namespace detail {
struct Decision;
}  // namespace detail

struct PluginInfo {
  std::string path;          // absolute; the `source` of its backends and policy rules
  std::string name;
  std::string version;
  std::vector<std::string> backend_ids;
  int policy_rules = 0;
};

// One entry of a search-path load: either loaded or refused with a message.
struct PluginLoadResult {
  std::string path;
  bool loaded = false;
  PluginInfo info;
  std::string error;
};

class Context {
 public:
  // A context over `registry` with the built-in default policy. `registry` must outlive it.
  explicit Context(Registry& registry);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // Registry::global(), default policy, then LATTE_POLICY (user layer) and the plugins on
  // LATTE_PLUGIN_PATH, read once on first use. A bad LATTE_POLICY throws on first use; a bad
  // plugin on the path is reported (plugin_load_results) and skipped.
  static Context& global();

  [[nodiscard]] Registry& registry() const { return registry_; }
  [[nodiscard]] PolicyStack policies() const;   // a copy of the layers in force
  void add_policy(Policy policy);               // invalidates the selection cache
  void load_user_policy(const std::string& path);  // replaces the user layer
  void clear_policy_layer(PolicyLayer layer);

  // Loads one plugin .so; on any failure throws latte::Error(plugin_error) and leaves the
  // registry and policies as they were. Loading the same file again returns its info.
  PluginInfo load_plugin(const std::string& path);
  // Loads every lib*.so in each directory of a ':'-separated path list (LATTE_PLUGIN_PATH form).
  std::vector<PluginLoadResult> load_plugin_path(const std::string& search_path);
  [[nodiscard]] std::vector<PluginLoadResult> plugin_load_results() const;
  [[nodiscard]] std::vector<PluginInfo> plugins() const;  // loaded, in load order

  // The best valid backend. Throws latte::Error(no_valid_backend) whose message is the full
  // explanation with suggestions, or (a forced backend refusing) its reasons. Cached per
  // (spec, device, policy, registry, options); thread-safe.
  [[nodiscard]] Selection select(const AttentionSpec& spec, const DeviceInfo& device,
                                 const SelectOptions& options = {}) const;
  // The same decision without throwing when nothing is valid (chosen is then empty and
  // suggestions are filled). Still throws for a forced backend that is unknown.
  [[nodiscard]] Selection explain(const AttentionSpec& spec, const DeviceInfo& device,
                                  const SelectOptions& options = {}) const;

  // Drops every cached decision (they are also dropped on every policy or plugin change and
  // keyed by the registry's generation, so this is only needed by benchmarks).
  void clear_cache() const;

  // A counter that moves on every change of the policy layers or the plugins (and on
  // clear_cache); it never returns to an earlier value. With registry().generation() it stamps
  // everything inside the context that select() depends on, so a cache keyed by (epoch,
  // generation, spec, device, options, environment) agrees with select() without rebuilding its
  // key. The functional API keeps such a per-call cache (src/core/api.cpp).
  [[nodiscard]] uint64_t epoch() const;
  // Unique in the process and never reused (unlike the object's address, which a context made
  // after this one is destroyed may get): what caches outside the context key it by.
  [[nodiscard]] uint64_t id() const;

 private:
  [[nodiscard]] std::shared_ptr<const detail::Decision> decision(const AttentionSpec& spec,
                                                                 const DeviceInfo& device,
                                                                 const SelectOptions& options) const;
  struct Impl;
  Registry& registry_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace latte
