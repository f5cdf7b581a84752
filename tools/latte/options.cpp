#include "options.hpp"

#include <fmt/format.h>

#include <cstdio>

#include "commands.hpp"
#include "latte/context.hpp"
#include "latte/error.hpp"

namespace latte::cli {

void add_model_options(CLI::App* cmd, ModelOptions& o) {
  cmd->add_option("--model", o.model, "Preset (glm-5, glm-5.3-flash, deepseek-v3.2, deepseek-v3, kimi-k2) or a config.json path")
      ->required();
  cmd->add_option("--tp", o.tp, "Tensor-parallel size (must divide the attention heads)");
  cmd->add_option("--kv-cache", o.kv_cache, "KV-cache format: bf16 or fp8_ds_mla");
  cmd->add_option("--block-size", o.block_size, "KV-cache page size in tokens");
}

void add_choice_options(CLI::App* cmd, ChoiceOptions& o) {
  cmd->add_option("--force", o.force, "Force a backend: [op=]ID-GLOB (repeatable)")->delimiter(',');
  cmd->add_option("--exclude", o.exclude, "Exclude backends: [op=]ID-GLOB,... ")->delimiter(',');
  cmd->add_option("--policy", o.policy, "A policy file for the user layer (as LATTE_POLICY)");
  cmd->add_option("--plugin", o.plugins, "Load a plugin .so first (repeatable; see also LATTE_PLUGIN_PATH)");
}

Deployment to_deployment(const ModelOptions& o) {
  Deployment d;
  d.tp = o.tp;
  d.block_size = o.block_size;
  const auto format = parse_cache_format(o.kv_cache);
  if (!format)
    throw Error(ErrorCode::invalid_argument,
                fmt::format("--kv-cache '{}' is not a cache format: use bf16 or fp8_ds_mla", o.kv_cache));
  d.kv_cache = *format;
  if (o.tp < 1) throw Error(ErrorCode::invalid_argument, fmt::format("--tp {} must be 1 or more", o.tp));
  if (o.block_size < 1)
    throw Error(ErrorCode::invalid_argument, fmt::format("--block-size {} must be 1 or more", o.block_size));
  return d;
}

SelectOptions apply_choice_options(const ChoiceOptions& o) {
  load_plugins(o.plugins);
  if (!o.policy.empty()) Context::global().load_user_policy(o.policy);
  SelectOptions s;
  s.force = o.force;
  s.exclude = o.exclude;
  return s;
}

void load_plugins(const std::vector<std::string>& paths) {
  for (const std::string& path : paths) (void)Context::global().load_plugin(path);
}

std::vector<std::string> plugin_path_failures() {
  std::vector<std::string> out;
  for (const PluginLoadResult& r : Context::global().plugin_load_results()) {
    if (!r.loaded) out.push_back(r.error);
  }
  return out;
}

void warn_plugin_path_failures() {
  for (const std::string& failure : plugin_path_failures()) {
    std::fprintf(stderr, "latte: LATTE_PLUGIN_PATH: %s\n", failure.c_str());
  }
}

}  // namespace latte::cli
