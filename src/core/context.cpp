// Context: the registry, the policy layers, the plugins and a thread-safe selection cache.
#include "latte/context.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>

#include "core/plugin_loader.hpp"
#include "core/selector_impl.hpp"
#include "core/spec_fields.hpp"
#include "core/text.hpp"
#include "latte/error.hpp"

namespace latte {

namespace {

std::string env(const char* name) { return detail::selection_env(name); }

// Everything a decision depends on, as one string: the spec, the device, the policy and
// registry versions, the options and the environment they pull in.
std::string cache_key(const AttentionSpec& s, const DeviceInfo& d, uint64_t policy_fp, uint64_t generation,
                      const SelectOptions& o, const std::string& env_force, const std::string& env_exclude) {
  std::string key;
  key.reserve(256);
  detail::append_spec_key(key, s);
  fmt::format_to(std::back_inserter(key), "{}|{}|{}|{}|{}|{}|{}|{}|{}|", static_cast<int>(d.kind), d.index, d.name,
                 d.arch_major, d.arch_minor, d.sm_count, d.max_smem_per_block, d.memory_bytes, d.probed);
  fmt::format_to(std::back_inserter(key), "{}|{}|", policy_fp, generation);
  for (const std::string& f : o.force) key += "F" + f + "\x1f";
  for (const std::string& x : o.exclude) key += "X" + x + "\x1f";
  if (o.use_environment) key += "E" + env_force + "\x1f" + env_exclude;
  return key;
}

constexpr std::size_t kMaxCacheEntries = 4096;

}  // namespace

struct Context::Impl {
  mutable std::mutex state_mutex;  // policies, plugins
  std::shared_ptr<const PolicyStack> policies;
  uint64_t policy_fingerprint = 0;
  std::vector<PluginInfo> plugins;
  std::vector<PluginLoadResult> load_results;
  std::mutex load_mutex;  // one plugin load at a time

  mutable std::shared_mutex cache_mutex;
  mutable std::unordered_map<std::string, std::shared_ptr<const detail::Decision>> cache;
  // Bumped after every state change (clear_cache runs after each), so a reader that sees the
  // new value also sees the new state; see Context::epoch.
  mutable std::atomic<uint64_t> epoch{0};
  const uint64_t id = [] {
    static std::atomic<uint64_t> next{1};
    return next.fetch_add(1, std::memory_order_relaxed);
  }();

  void set_policies(PolicyStack stack) {  // state_mutex held
    policy_fingerprint = stack.fingerprint();
    policies = std::make_shared<const PolicyStack>(std::move(stack));
  }
  void clear_cache() const {
    {
      std::unique_lock lock(cache_mutex);
      cache.clear();
    }
    epoch.fetch_add(1, std::memory_order_acq_rel);
  }
};

Context::Context(Registry& registry) : registry_(registry), impl_(std::make_unique<Impl>()) {
  PolicyStack stack;
  stack.add(Policy::builtin());
  impl_->set_policies(std::move(stack));
}

Context::~Context() = default;

Context& Context::global() {
  static Context* context = [] {
    const std::vector<std::string> errors = registration_errors();
    if (!errors.empty()) {
      throw Error(ErrorCode::internal,
                  fmt::format("latte's built-in backends failed to register: {}", detail::join(errors, "; ")));
    }
    auto ctx = std::make_unique<Context>(Registry::global());
    if (const std::string policy = env("LATTE_POLICY"); !policy.empty()) {
      try {
        ctx->load_user_policy(policy);
      } catch (const Error& e) {
        throw Error(e.code(), fmt::format("LATTE_POLICY={}: {}", policy, e.what()));
      }
    }
    if (const std::string path = env("LATTE_PLUGIN_PATH"); !path.empty()) {
      (void)ctx->load_plugin_path(path);  // failures are kept in plugin_load_results()
    }
    // Never destroyed: backends and kernels from plugins may outlive static destruction order.
    return ctx.release();
  }();
  return *context;
}

PolicyStack Context::policies() const {
  std::lock_guard lock(impl_->state_mutex);
  return *impl_->policies;
}

void Context::add_policy(Policy policy) {
  {
    std::lock_guard lock(impl_->state_mutex);
    PolicyStack stack = *impl_->policies;
    stack.add(std::move(policy));
    impl_->set_policies(std::move(stack));
  }
  impl_->clear_cache();
}

void Context::load_user_policy(const std::string& path) {
  Policy policy = Policy::load_file(path, PolicyLayer::user);  // throws before anything changes
  {
    std::lock_guard lock(impl_->state_mutex);
    PolicyStack stack = *impl_->policies;
    stack.clear(PolicyLayer::user);
    stack.add(std::move(policy));
    impl_->set_policies(std::move(stack));
  }
  impl_->clear_cache();
}

void Context::clear_policy_layer(PolicyLayer layer) {
  {
    std::lock_guard lock(impl_->state_mutex);
    PolicyStack stack = *impl_->policies;
    stack.clear(layer);
    impl_->set_policies(std::move(stack));
  }
  impl_->clear_cache();
}

PluginInfo Context::load_plugin(const std::string& path_in) {
  std::lock_guard load_lock(impl_->load_mutex);
  std::error_code ec;
  std::filesystem::path fs_path = std::filesystem::absolute(path_in, ec);
  if (!ec) fs_path = std::filesystem::weakly_canonical(fs_path, ec);
  const std::string path = ec ? path_in : fs_path.string();
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw Error(ErrorCode::plugin_error,
                fmt::format("plugin {} refused: no such file; pass the path of the plugin's .so "
                            "(or put its directory on LATTE_PLUGIN_PATH)",
                            path_in));
  }
  {
    std::lock_guard lock(impl_->state_mutex);
    for (const PluginInfo& loaded : impl_->plugins) {
      if (loaded.path == path) return loaded;  // loading twice is a no-op
    }
  }

  detail::OpenedPlugin opened = detail::open_plugin(path);

  // Id clashes with what is registered already (built-in or another plugin): refuse the whole
  // plugin, naming both sources.
  for (const auto& backend : opened.backends) {
    const std::string& id = backend->info().id;
    if (registry_.find(id)) {
      throw Error(ErrorCode::plugin_error,
                  fmt::format("plugin {} refused: its backend id '{}' is already registered from {}; "
                              "backend ids must be unique (rename the plugin's backend, or do not "
                              "load both)",
                              path, id, registry_.source_of(id)));
    }
  }
  try {
    for (const auto& backend : opened.backends) registry_.add(backend, path);
  } catch (const Error& e) {
    registry_.remove_source(path);  // a clash that raced in: undo the half that was added
    throw Error(ErrorCode::plugin_error, fmt::format("plugin {} refused: {}", path, e.what()));
  }
  {
    std::lock_guard lock(impl_->state_mutex);
    if (opened.policy) {
      PolicyStack stack = *impl_->policies;
      stack.add(std::move(*opened.policy));
      impl_->set_policies(std::move(stack));
    }
    impl_->plugins.push_back(opened.info);
  }
  impl_->clear_cache();
  return opened.info;
}

std::vector<PluginLoadResult> Context::load_plugin_path(const std::string& search_path) {
  std::vector<PluginLoadResult> results;
  std::size_t start = 0;
  while (start <= search_path.size()) {
    const std::size_t colon = std::min(search_path.find(':', start), search_path.size());
    const std::string dir = search_path.substr(start, colon - start);
    start = colon + 1;
    if (dir.empty()) continue;
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec)) {
      results.push_back({dir, false, {}, fmt::format("plugin directory {} does not exist (from the plugin path '{}')", dir, search_path)});
      continue;
    }
    std::vector<std::string> files;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("lib", 0) == 0 && name.size() > 6 && name.substr(name.size() - 3) == ".so") {
        files.push_back(entry.path().string());
      }
    }
    std::sort(files.begin(), files.end());  // a stable load order, so plugin rules rank stably
    for (const std::string& file : files) {
      PluginLoadResult result;
      result.path = file;
      try {
        result.info = load_plugin(file);
        result.loaded = true;
      } catch (const Error& e) {
        result.error = e.what();
      }
      results.push_back(std::move(result));
    }
  }
  std::lock_guard lock(impl_->state_mutex);
  impl_->load_results.insert(impl_->load_results.end(), results.begin(), results.end());
  return results;
}

std::vector<PluginLoadResult> Context::plugin_load_results() const {
  std::lock_guard lock(impl_->state_mutex);
  return impl_->load_results;
}

std::vector<PluginInfo> Context::plugins() const {
  std::lock_guard lock(impl_->state_mutex);
  return impl_->plugins;
}

namespace {

std::shared_ptr<const detail::Decision> decide_now(const Registry& registry,
                                                      const std::shared_ptr<const PolicyStack>& policies,
                                                      const AttentionSpec& spec, const DeviceInfo& device,
                                                      const SelectOptions& options, const std::string& env_force,
                                                      const std::string& env_exclude) {
  std::vector<detail::ChoiceEntry> force = detail::parse_choice_entries(options.force, "force");
  std::vector<detail::ChoiceEntry> exclude = detail::parse_choice_entries(options.exclude, "exclude");
  if (options.use_environment) {
    auto f = detail::parse_choice_entries({env_force}, "LATTE_BACKEND");
    auto x = detail::parse_choice_entries({env_exclude}, "LATTE_EXCLUDE");
    force.insert(force.end(), f.begin(), f.end());
    exclude.insert(exclude.end(), x.begin(), x.end());
  }
  return std::make_shared<const detail::Decision>(
      detail::decide(registry.all(), *policies, spec, device, force, exclude));
}

}  // namespace

Selection Context::explain(const AttentionSpec& spec, const DeviceInfo& device, const SelectOptions& options) const {
  return decision(spec, device, options)->selection;
}

Selection Context::select(const AttentionSpec& spec, const DeviceInfo& device, const SelectOptions& options) const {
  const auto d = decision(spec, device, options);
  if (!d->forced_error.empty()) throw Error(ErrorCode::no_valid_backend, d->forced_error);
  if (!d->selection.ok()) {
    throw Error(ErrorCode::no_valid_backend,
                fmt::format("no valid attention backend for {} on {}\n{}", spec.summary(), device.label(),
                            d->selection.explain()));
  }
  return d->selection;
}

std::shared_ptr<const detail::Decision> Context::decision(const AttentionSpec& spec, const DeviceInfo& device,
                                                          const SelectOptions& options) const {
  std::shared_ptr<const PolicyStack> policies;
  uint64_t policy_fp = 0;
  {
    std::lock_guard lock(impl_->state_mutex);
    policies = impl_->policies;
    policy_fp = impl_->policy_fingerprint;
  }
  const std::string env_force = options.use_environment ? env("LATTE_BACKEND") : std::string();
  const std::string env_exclude = options.use_environment ? env("LATTE_EXCLUDE") : std::string();
  const uint64_t generation = registry_.generation();
  std::string key = cache_key(spec, device, policy_fp, generation, options, env_force, env_exclude);
  {
    std::shared_lock lock(impl_->cache_mutex);
    if (auto it = impl_->cache.find(key); it != impl_->cache.end()) return it->second;
  }
  auto d = decide_now(registry_, policies, spec, device, options, env_force, env_exclude);
  std::unique_lock lock(impl_->cache_mutex);
  if (impl_->cache.size() >= kMaxCacheEntries) impl_->cache.clear();  // a bound, not an LRU: keys rarely vary
  impl_->cache.emplace(std::move(key), d);
  return d;
}

void Context::clear_cache() const { impl_->clear_cache(); }

uint64_t Context::epoch() const { return impl_->epoch.load(std::memory_order_acquire); }

uint64_t Context::id() const { return impl_->id; }

namespace detail {

const char* selection_env(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

}  // namespace detail

}  // namespace latte
