#include <fmt/format.h>

#include <cstdio>

#include "commands.hpp"
#include "latte/error.hpp"
#include "latte_workload/dsa_step.hpp"
#include "options.hpp"

namespace latte::cli {
namespace {

using workload::DsaStepConfig;
using workload::DsaStepReport;

struct RunArgs {
  ModelOptions model;
  ChoiceOptions choice;
  DsaStepConfig config;
  bool json = false;
  bool quiet = false;
};

}  // namespace

void add_run(CLI::App& app) {
  auto a = std::make_shared<RunArgs>();
  auto* cmd = app.add_subcommand(
      "run", "Run one DSA decode step of a model's shape on random data through the selected backends, verified");
  add_model_options(cmd, a->model);
  cmd->add_option("--batch", a->config.batch, "Requests (one decode token each)");
  cmd->add_option("--context", a->config.context, "Tokens of KV per request");
  cmd->add_option("--device", a->config.device, "cpu or cuda:N");
  cmd->add_option("--seed", a->config.seed, "Random seed");
  cmd->add_option("--repeats", a->config.repeats, "Timed runs per stage (default 1 on the CPU, 20 on CUDA)");
  add_choice_options(cmd, a->choice);
  cmd->add_flag("--json", a->json, "Print JSON");
  cmd->add_flag("--quiet", a->quiet, "No progress lines");
  cmd->callback([a] {
    warn_plugin_path_failures();
    const Deployment d = to_deployment(a->model);
    DsaStepConfig config = a->config;
    config.model = a->model.model;
    config.tp = d.tp;
    config.kv_cache = d.kv_cache;
    config.block_size = d.block_size;
    config.select = apply_choice_options(a->choice);
    const bool show_progress = !a->quiet;
    const DsaStepReport report = workload::run_dsa_step(config, [show_progress](std::string_view line) {
      if (show_progress) std::fprintf(stderr, "... %.*s\n", static_cast<int>(line.size()), line.data());
    });
    fmt::print("{}\n", a->json ? report.to_json() : report.to_text());
    if (!report.passed) throw CLI::RuntimeError(1);
  });
}

}  // namespace latte::cli
