// `latte`: choose, explain and run MLA / DSA attention backends from the command line.
#include <fmt/format.h>

#include <cstdio>
#include <functional>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include "commands.hpp"
#include "latte/error.hpp"
#include "latte/version.hpp"

namespace {

// Exit codes: 0 ok, 1 a check failed or nothing is valid, 2 bad input (a usage error, or a
// request larger than the memory there is), 3 internal/CUDA error.
int exit_code_for(latte::ErrorCode code) {
  switch (code) {
    case latte::ErrorCode::no_valid_backend: return 1;
    case latte::ErrorCode::invalid_argument:
    case latte::ErrorCode::not_found:
    case latte::ErrorCode::config_error:
    case latte::ErrorCode::policy_error:
    case latte::ErrorCode::plugin_error:
    case latte::ErrorCode::unsupported:
    case latte::ErrorCode::out_of_memory: return 2;
    case latte::ErrorCode::cuda_error:
    case latte::ErrorCode::internal: return 3;
  }
  return 3;
}

std::vector<CLI::App*> commands_of(CLI::App& app) {
  return app.get_subcommands(std::function<bool(CLI::App*)>([](CLI::App* c) { return !c->get_name().empty(); }));
}

std::string names_of(const std::vector<CLI::App*>& commands) {
  std::string names;
  for (const CLI::App* c : commands) names += fmt::format("{}{}", names.empty() ? "" : ", ", c->get_name());
  return names;
}

// CLI11 words an unknown command as "A subcommand is required": name it and list the commands
// (python -m latte says the same). Empty when the failure is not about the command.
std::string command_error(CLI::App& app, int argc, char** argv) {
  CLI::App* at = &app;
  std::string level;  // "" at the top, "policy " below it
  bool option_seen = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view token = argv[i];
    const std::vector<CLI::App*> commands = commands_of(*at);
    if (commands.empty()) return {};
    if (token.substr(0, 1) == "-") {
      option_seen = true;
      continue;
    }
    CLI::App* next = nullptr;
    for (CLI::App* c : commands) next = c->get_name() == token ? c : next;
    if (!next) return fmt::format("unknown {}command '{}'; the {}commands are: {}", level, token, level, names_of(commands));
    at = next;
    level += next->get_name() + " ";
    option_seen = false;
  }
  const std::vector<CLI::App*> commands = commands_of(*at);
  if (commands.empty() || option_seen) return {};
  return fmt::format("no {}command given; the {}commands are: {}", level, level, names_of(commands));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"latte: the attention layer for MLA and DeepSeek-Sparse-Attention models"};
  app.set_version_flag("--version", latte::kVersion);
  app.require_subcommand(1);
  // Inherited by the subcommands added below: every usage error reads "latte: ...".
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return fmt::format("latte: {}\nRun with --help for more information.\n", e.what());
  });
  latte::cli::add_devices(app);
  latte::cli::add_backends(app);
  latte::cli::add_select(app);
  latte::cli::add_policy(app);
  latte::cli::add_run(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::RuntimeError& e) {  // a command's answer: 1 for "nothing valid"
    return e.get_exit_code();
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    // Every usage error exits 2, whatever CLI11's own code for it.
    if (const std::string why = command_error(app, argc, argv); !why.empty()) {
      std::fprintf(stderr, "latte: %s\n", why.c_str());
    } else {
      (void)app.exit(e);
    }
    return 2;
  } catch (const latte::Error& e) {
    std::fprintf(stderr, "latte: %s\n", e.what());
    return exit_code_for(e.code());
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "latte: out of memory: an allocation failed (std::bad_alloc); free memory, "
                         "or ask for less (latte run: lower --batch or --context)\n");
    return exit_code_for(latte::ErrorCode::out_of_memory);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "latte: internal error: %s\n", e.what());
    return 3;
  }
  return 0;
}
