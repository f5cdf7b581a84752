// Options shared by `latte select` and `latte run`, parsed into library types.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "latte/selector.hpp"
#include "latte/spec.hpp"

namespace latte::cli {

struct ModelOptions {
  std::string model;
  int tp = 1;
  std::string kv_cache = "bf16";
  int block_size = 64;
};

struct ChoiceOptions {
  std::vector<std::string> force;
  std::vector<std::string> exclude;
  std::string policy;
  std::vector<std::string> plugins;
};

void add_model_options(CLI::App* cmd, ModelOptions& options);
void add_choice_options(CLI::App* cmd, ChoiceOptions& options);

// Throws latte::Error naming the bad value and the accepted ones.
[[nodiscard]] Deployment to_deployment(const ModelOptions& options);
// Loads --plugin and --policy into Context::global() and returns the force/exclude options.
[[nodiscard]] SelectOptions apply_choice_options(const ChoiceOptions& options);

}  // namespace latte::cli
