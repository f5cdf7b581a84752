// What this process has: devices, registered backends, plugins, and the global policy layers.
// The dicts use the keys of `latte devices --json` and `latte backends --json`.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <vector>

#include "context_scope.hpp"
#include "latte/capabilities.hpp"
#include "latte/context.hpp"
#include "latte/device.hpp"
#include "latte/problem.hpp"
#include "latte/spec.hpp"
#include "latte/version.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace latte::python {
namespace {

nb::str str(std::string_view text) { return nb::str(text.data(), text.size()); }

nb::dict device_dict(const DeviceInfo& d) {
  nb::dict out;
  out["label"] = d.label();
  out["kind"] = str(to_string(d.kind));
  out["index"] = d.index;
  out["name"] = d.name;
  out["arch"] = d.arch();
  out["sm_count"] = d.sm_count;
  out["max_smem_per_block"] = d.max_smem_per_block;
  out["memory_bytes"] = d.memory_bytes;
  out["probed"] = d.probed;
  return out;
}

nb::list devices(bool described) {
  nb::list out;
  if (described) {
    for (int arch : described_archs()) out.append(device_dict(describe_device(arch_name(arch))));
  } else {
    for (const DeviceInfo& d : probe_devices()) out.append(device_dict(d));
  }
  return out;
}

// Each integer rule in words ("1..128", "one of {64, 128}"), as `latte backends` prints them.
nb::dict limits_dict(const Capabilities& c) {
  bool cuda = false;
  for (DeviceKind k : c.devices) cuda = cuda || k == DeviceKind::cuda;
  nb::dict out;
  out["arch"] = cuda ? c.arch.describe() : std::string("-");
  out["heads"] = c.heads.describe();
  out["head_dim"] = c.head_dim.describe();
  out["block_size"] = c.block_size.describe();
  out["topk"] = c.topk.describe();
  out["s_q"] = c.s_q.describe();
  out["tokens"] = c.max_tokens.describe();
  return out;
}

nb::list backends() {
  const nb::object loads = nb::module_::import_("json").attr("loads");
  nb::list out;
  for (const BackendInfo& info : Context::global().registry().infos()) {
    nb::dict b;
    b["id"] = info.id;
    b["description"] = info.description;
    b["source"] = info.source;
    b["capabilities"] = loads(capabilities_to_json(info.caps));
    b["limits"] = limits_dict(info.caps);
    out.append(b);
  }
  return out;
}

nb::dict plugin_dict(const PluginInfo& p) {
  nb::dict out;
  out["path"] = p.path;
  out["name"] = p.name;
  out["backend_ids"] = p.backend_ids;
  out["policy_rules"] = p.policy_rules;
  return out;
}

nb::list plugin_load_results() {
  nb::list out;
  for (const PluginLoadResult& r : Context::global().plugin_load_results()) {
    nb::dict d;
    d["path"] = r.path;
    d["loaded"] = r.loaded;
    d["error"] = r.error;
    d["plugin"] = r.loaded ? nb::object(plugin_dict(r.info)) : nb::none();
    out.append(d);
  }
  return out;
}

// The rules in force, highest precedence first (`latte policy show`).
nb::list policy_rules(const std::optional<std::string>& path, const std::optional<std::string>& json) {
  const ScopedContext context(PolicySource{path, json});
  const PolicyStack stack = context.get().policies();
  nb::list out;
  for (const PolicyRule* rule : stack.rules_by_precedence()) {
    nb::dict r;
    r["label"] = rule->label();
    r["name"] = rule->name;
    r["layer"] = str(to_string(rule->layer));
    r["source"] = rule->source;
    std::vector<std::string> when;
    for (const PolicyCondition& c : rule->when) when.push_back(c.text);
    r["when"] = when;
    r["order"] = rule->order;
    out.append(r);
  }
  return out;
}

// Each layer's policy in canonical JSON (`latte policy show --json`), lowest precedence first.
std::vector<std::string> policies_json(const std::optional<std::string>& path,
                                       const std::optional<std::string>& json) {
  const ScopedContext context(PolicySource{path, json});
  const PolicyStack stack = context.get().policies();
  std::vector<std::string> out;
  for (const Policy& p : stack.policies()) out.push_back(p.to_json());
  return out;
}

void set_policy(const std::optional<std::string>& path, const std::optional<std::string>& json) {
  Context& context = Context::global();
  const PolicySource source{path, json};
  if (!source.given()) {
    context.clear_policy_layer(PolicyLayer::user);
    return;
  }
  Policy policy = source.load();  // parse first: a bad policy leaves the layer as it was
  context.clear_policy_layer(PolicyLayer::user);
  context.add_policy(std::move(policy));
}

}  // namespace

void bind_system(nb::module_& m) {
  m.attr("__version__") = kVersion;
  m.def("devices", &devices, nb::kw_only(), "described"_a = false);
  m.def("built_with_cuda", &built_with_cuda);
  // Validations run so far in this process (tests check that one call validates once).
  m.def("_validation_count", [] { return detail::validation_count(); });
  m.def("cuda_device_count", &cuda_device_count);
  m.def("backends", &backends);
  m.def("load_plugin", [](const std::string& path) { return plugin_dict(Context::global().load_plugin(path)); },
        "path"_a);
  m.def("plugin_load_results", &plugin_load_results);
  m.def("policy_rules", &policy_rules, nb::kw_only(), "policy_path"_a.none() = nb::none(),
        "policy_json"_a.none() = nb::none());
  m.def("policies_json", &policies_json, nb::kw_only(), "policy_path"_a.none() = nb::none(),
        "policy_json"_a.none() = nb::none());
  m.def("set_policy", &set_policy, nb::kw_only(), "policy_path"_a.none() = nb::none(),
        "policy_json"_a.none() = nb::none());
  m.def("check_policy", [](const std::string& path) {
        return Policy::load_file(path, PolicyLayer::user).rules().size();
      }, "path"_a);
  m.def("model_presets", &model_preset_names);
}

}  // namespace latte::python
