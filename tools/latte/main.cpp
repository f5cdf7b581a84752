// `latte`: choose, explain and run MLA / DSA attention backends from the command line.
#include <fmt/format.h>

#include <cstdio>

#include "commands.hpp"
#include "latte/error.hpp"
#include "latte/version.hpp"

namespace {

// Exit codes: 0 ok, 1 a check failed or nothing is valid, 2 bad input, 3 internal/CUDA error.
int exit_code_for(latte::ErrorCode code) {
  switch (code) {
    case latte::ErrorCode::no_valid_backend: return 1;
    case latte::ErrorCode::invalid_argument:
    case latte::ErrorCode::not_found:
    case latte::ErrorCode::config_error:
    case latte::ErrorCode::policy_error:
    case latte::ErrorCode::plugin_error:
    case latte::ErrorCode::unsupported: return 2;
    case latte::ErrorCode::cuda_error:
    case latte::ErrorCode::internal: return 3;
  }
  return 3;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"latte: the attention layer for MLA and DeepSeek-Sparse-Attention models"};
  app.set_version_flag("--version", latte::kVersion);
  app.require_subcommand(1);
  latte::cli::add_devices(app);
  latte::cli::add_backends(app);
  latte::cli::add_select(app);
  latte::cli::add_policy(app);
  latte::cli::add_run(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const latte::Error& e) {
    std::fprintf(stderr, "latte: %s\n", e.what());
    return exit_code_for(e.code());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "latte: internal error: %s\n", e.what());
    return 3;
  }
  return 0;
}
