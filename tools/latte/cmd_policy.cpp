#include <fmt/format.h>

#include <fstream>
#include <sstream>

#include "commands.hpp"
#include "latte/context.hpp"
#include "latte/error.hpp"

namespace latte::cli {

void add_policy(CLI::App& app) {
  auto* policy = app.add_subcommand("policy", "Show the policy in force or check a policy file");
  policy->require_subcommand(1);

  auto* show = policy->add_subcommand("show", "Print every rule in force, highest precedence first");
  auto json = std::make_shared<bool>(false);
  auto plugins = std::make_shared<std::vector<std::string>>();
  auto file = std::make_shared<std::string>();
  show->add_flag("--json", *json, "Print the layers as JSON");
  show->add_option("--policy", *file, "Add a user policy file first");
  show->add_option("--plugin", *plugins, "Load a plugin .so first (repeatable)");
  show->callback([json, plugins, file] {
    warn_plugin_path_failures();
    load_plugins(*plugins);
    if (!file->empty()) Context::global().load_user_policy(*file);
    const PolicyStack stack = Context::global().policies();
    if (*json) {
      std::string out = "[";
      bool first = true;
      for (const Policy& p : stack.policies()) {
        out += fmt::format("{}{}", first ? "\n" : ",\n", p.to_json());
        first = false;
      }
      fmt::print("{}\n]\n", out);
      return;
    }
    int n = 0;
    for (const PolicyRule* rule : stack.rules_by_precedence()) {
      std::string when;
      for (const PolicyCondition& c : rule->when) when += fmt::format("{}{}", when.empty() ? "" : ", ", c.text);
      std::string order;
      for (const std::string& o : rule->order) order += fmt::format("{}{}", order.empty() ? "" : " > ", o);
      fmt::print("{:>2}. {}\n    when: {}\n    order: {}\n", ++n, rule->label(),
                 when.empty() ? "always" : when, order);
    }
    fmt::print("\nlayers (highest first): force/exclude (--force, LATTE_BACKEND, LATTE_EXCLUDE) > user "
               "(--policy, LATTE_POLICY) > plugin > defaults\n");
  });

  auto* check = policy->add_subcommand("check", "Parse a policy file and report its first error");
  auto path = std::make_shared<std::string>();
  check->add_option("file", *path, "Policy JSON file")->required();
  check->callback([path] {
    const Policy p = Policy::load_file(*path, PolicyLayer::user);
    fmt::print("{}: ok, {} rule{}\n", *path, p.rules().size(), p.rules().size() == 1 ? "" : "s");
  });
}

}  // namespace latte::cli
