// latte.select: model + deployment + device -> the Context's decision, as a Selection whose
// explain() is the table `latte select` prints and whose to_json() is `latte select --json`.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <optional>
#include <string>
#include <vector>

#include "context_scope.hpp"
#include "errors.hpp"
#include "latte/context.hpp"
#include "latte/device.hpp"
#include "latte/spec.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace latte::python {
namespace {

CacheFormat parse_kv_cache(const std::string& name) {
  const auto format = parse_cache_format(name);
  if (!format) {
    throw Error(ErrorCode::invalid_argument,
                "kv_cache '" + name + "' is not a cache format: use bf16 or fp8_ds_mla");
  }
  return *format;
}

// As `latte select`: without an op, the attention op of the model (sparse_mla for a DSA model,
// mla_decode for a dense one).
Op op_for(const std::optional<std::string>& name, const ModelSpec& model) {
  if (!name) return model.is_dsa() ? Op::sparse_mla : Op::mla_decode;
  if (const auto op = parse_op(*name)) return *op;
  std::string names;
  for (Op o : all_ops()) names += (names.empty() ? "" : ", ") + std::string(to_string(o));
  throw Error(ErrorCode::invalid_argument, "op '" + *name + "' is not an operation: use one of " + names);
}

// A preset name or config.json path, or (model_json) the config's fields as JSON text, which
// `source` names in messages: what an engine holding a parsed config passes.
ModelSpec model_for(const std::string& model_name, const std::optional<std::string>& model_json,
                    int tp, const std::string& kv_cache, int block_size) {
  Deployment deployment;
  deployment.tp = tp;
  deployment.kv_cache = parse_kv_cache(kv_cache);
  deployment.block_size = block_size;
  if (model_json) return parse_model_config(*model_json, model_name, deployment);
  return load_model(model_name, deployment);
}

Selection select(const std::string& model_name, const std::optional<std::string>& model_json, int tp,
                 const std::string& kv_cache, int block_size, const std::string& device_name,
                 const std::optional<std::string>& op_name, int64_t tokens,
                 const std::vector<std::string>& force, const std::vector<std::string>& exclude,
                 const std::optional<std::string>& policy_path,
                 const std::optional<std::string>& policy_json, bool strict) {
  const ModelSpec model = model_for(model_name, model_json, tp, kv_cache, block_size);
  const DeviceInfo device = describe_device(device_name);
  AttentionOptions attention;
  attention.max_tokens = tokens;
  const AttentionSpec spec = attention_spec(model, op_for(op_name, model), attention);
  SelectOptions options;
  options.force = force;
  options.exclude = exclude;
  const ScopedContext context(PolicySource{policy_path, policy_json});
  Selection selection = context.get().explain(spec, device, options);
  if (strict && !selection.ok()) {
    // Context::select words the failure (nothing valid, or a forced backend refusing).
    try {
      (void)context.get().select(spec, device, options);
    } catch (const Error& e) {
      throw NoValidBackend(e, std::move(selection));
    }
  }
  return selection;
}

nb::dict model_dict(const ModelSpec& m) {
  nb::dict out;
  out["name"] = m.name;
  out["model_type"] = m.model_type;
  out["num_heads"] = m.num_heads;
  out["q_lora_rank"] = m.q_lora_rank;
  out["kv_lora_rank"] = m.kv_lora_rank;
  out["qk_nope_head_dim"] = m.qk_nope_head_dim;
  out["qk_rope_head_dim"] = m.qk_rope_head_dim;
  out["v_head_dim"] = m.v_head_dim;
  out["max_position_embeddings"] = m.max_position_embeddings;
  out["softmax_scale"] = m.softmax_scale;
  out["rope_type"] = m.rope_type;
  out["rope_factor"] = m.rope_factor;
  out["is_dsa"] = m.is_dsa();
  out["nope"] = m.nope;
  out["rope_dim"] = m.rope_dim();
  out["num_layers"] = m.num_layers;
  out["mla_layers"] = nb::cast(m.mla_layers);
  out["mtp_layers"] = m.mtp_layers;
  out["coverage"] = m.coverage();
  nb::list layer_ops;
  for (Op op : m.layer_ops()) {
    const std::string_view name = to_string(op);
    layer_ops.append(nb::str(name.data(), name.size()));
  }
  out["layer_ops"] = layer_ops;
  if (m.indexer) {
    nb::dict indexer;
    indexer["num_heads"] = m.indexer->num_heads;
    indexer["head_dim"] = m.indexer->head_dim;
    indexer["topk"] = m.indexer->topk;
    indexer["kpool"] = m.indexer->kpool;
    indexer["kpool_compress"] = m.indexer->kpool_compress;
    indexer["kpool_always_select_tail"] = m.indexer->kpool_always_select_tail;
    indexer["attended_tokens"] = m.indexer->attended_tokens();
    out["indexer"] = indexer;
  } else {
    out["indexer"] = nb::none();
  }
  out["tp"] = m.tp;
  out["heads_per_rank"] = m.heads_per_rank;
  const std::string_view format = to_string(m.kv_cache);
  out["kv_cache"] = nb::str(format.data(), format.size());
  out["block_size"] = m.block_size;
  return out;
}

nb::object json_loads(const std::string& text) {
  return nb::module_::import_("json").attr("loads")(text);
}

}  // namespace

void bind_selection(nb::module_& m) {
  nb::class_<Selection>(m, "Selection", "The backend chosen for one operation, and why.")
      .def_prop_ro("backend", [](const Selection& s) -> std::optional<std::string> {
            if (!s.ok()) return std::nullopt;
            return s.chosen;
          }, "The chosen backend's id, or None when no backend is valid.")
      .def_prop_ro("ok", &Selection::ok, "True when a backend was chosen.")
      .def_prop_ro("rule", [](const Selection& s) -> std::optional<std::string> {
            if (s.valid.empty()) return std::nullopt;
            return s.valid.front().rule;
          }, "The policy rule that ranked the chosen backend first.")
      .def_prop_ro("spec", [](const Selection& s) { return s.spec.summary(); },
                   "The operation as the selector saw it, in one line.")
      .def_prop_ro("device", [](const Selection& s) { return s.device.label(); },
                   "The device it was chosen for.")
      .def("explain", &Selection::explain,
           "The decision and a table of every backend: chosen, its rank and rule, or its reasons "
           "for refusing; then the nearest changes that would work when nothing is valid. The "
           "same text `latte select` prints.")
      .def("to_json", &Selection::to_json, "The decision as JSON (`latte select --json`).")
      .def("describe_kernel", &Selection::describe_kernel,
           "What the chosen backend would run (Kernel::describe() of a kernel made for this spec "
           "and device: the kernel variant and its splits), the `kernel:` line of `latte select`; "
           "'' when the backend has nothing to add.")
      .def("to_dict", [](const Selection& s) { return json_loads(s.to_json()); },
           "to_json() parsed into dicts and lists.")
      .def("__str__", &Selection::explain)
      .def("__repr__", [](const Selection& s) {
        return "<latte.Selection " + (s.ok() ? s.chosen : std::string("(none valid)")) + " for " +
               s.spec.summary() + " on " + s.device.label() + ">";
      });

  m.def(
      "model_spec",
      [](const std::string& model, const std::optional<std::string>& model_json, int tp,
         const std::string& kv_cache, int block_size) {
        return model_dict(model_for(model, model_json, tp, kv_cache, block_size));
      },
      "model"_a, nb::kw_only(), "model_json"_a.none() = nb::none(), "tp"_a = 1, "kv_cache"_a = "bf16",
      "block_size"_a = 64);

  m.def("select", &select, "model"_a, nb::kw_only(), "model_json"_a.none() = nb::none(), "tp"_a = 1,
        "kv_cache"_a = "bf16",
        "block_size"_a = 64, "device"_a = "cpu", "op"_a.none() = nb::none(), "tokens"_a = 0,
        "force"_a = std::vector<std::string>{}, "exclude"_a = std::vector<std::string>{},
        "policy_path"_a.none() = nb::none(), "policy_json"_a.none() = nb::none(),
        "strict"_a = true);
}

}  // namespace latte::python
