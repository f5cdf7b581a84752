#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "latte/context.hpp"
#include "latte/error.hpp"
#include "options.hpp"

namespace latte::cli {
namespace {

struct SelectArgs {
  ModelOptions model;
  ChoiceOptions choice;
  std::string device = "cpu";
  std::string op;
  int64_t tokens = 0;
  bool json = false;
};

std::vector<Op> ops_to_select(const SelectArgs& a, const ModelSpec& model) {
  if (a.op.empty()) return {model.is_dsa() ? Op::sparse_mla : Op::mla_decode};
  if (a.op == "all") return model.layer_ops();
  const auto op = parse_op(a.op);
  if (!op) {
    std::string names;
    for (Op o : all_ops()) names += fmt::format("{}{}", names.empty() ? "" : ", ", to_string(o));
    throw Error(ErrorCode::invalid_argument, fmt::format("--op '{}' is not an operation: use one of {}, or all", a.op, names));
  }
  return {*op};
}

}  // namespace

void add_select(CLI::App& app) {
  auto a = std::make_shared<SelectArgs>();
  auto* cmd = app.add_subcommand("select", "Choose a backend for a model's operation and explain the choice");
  add_model_options(cmd, a->model);
  cmd->add_option("--device", a->device, "cpu, cuda:N, or an architecture sm_80 ... sm_120");
  cmd->add_option("--op", a->op, "Operation (default: sparse_mla for DSA models, mla_decode for dense), or all");
  cmd->add_option("--tokens", a->tokens, "Tokens per call (matches policy 'tokens' conditions)");
  add_choice_options(cmd, a->choice);
  cmd->add_flag("--json", a->json, "Print JSON");
  cmd->callback([a] {
    warn_plugin_path_failures();
    const ModelSpec model = load_model(a->model.model, to_deployment(a->model));
    const DeviceInfo device = describe_device(a->device);
    const SelectOptions options = apply_choice_options(a->choice);
    AttentionOptions attention;
    attention.max_tokens = a->tokens;
    bool all_valid = true;
    nlohmann::json selections = nlohmann::json::array();
    // What of the model latte serves (a hybrid model's other layers, a missing pooled indexer).
    const std::string coverage = model.coverage();
    if (!coverage.empty() && !a->json) fmt::print("model: {}\n\n", coverage);
    for (Op op : ops_to_select(*a, model)) {
      const Selection selection = Context::global().explain(attention_spec(model, op, attention), device, options);
      all_valid = all_valid && !selection.chosen.empty();
      const std::string kernel = selection.describe_kernel();
      if (a->json) {
        nlohmann::json j = nlohmann::json::parse(selection.to_json());
        j["kernel"] = kernel;
        if (!coverage.empty()) j["coverage"] = coverage;
        selections.push_back(std::move(j));
      } else {
        fmt::print("{}\n", selection.explain());
        if (!kernel.empty()) fmt::print("kernel: {}\n\n", kernel);
      }
    }
    if (a->json) fmt::print("{}\n", (selections.size() == 1 ? selections[0] : selections).dump(2));
    if (!all_valid) throw CLI::RuntimeError(1);
  });
}

}  // namespace latte::cli
