// The `latte` subcommands. Each add_* registers its CLI11 subcommand; the work is done by
// the library, these only parse, call and print.
#pragma once

#include <CLI/CLI.hpp>

namespace latte::cli {

void add_devices(CLI::App& app);
void add_backends(CLI::App& app);
void add_select(CLI::App& app);
void add_policy(CLI::App& app);
void add_run(CLI::App& app);

// Loads --plugin paths into the global context (errors propagate).
void load_plugins(const std::vector<std::string>& paths);

// Why each plugin on LATTE_PLUGIN_PATH did not load (Context::plugin_load_results), one
// message per plugin; empty when all loaded. A refused plugin is skipped, never silently:
// `backends` lists these, the other commands print them on stderr.
[[nodiscard]] std::vector<std::string> plugin_path_failures();
void warn_plugin_path_failures();

}  // namespace latte::cli
