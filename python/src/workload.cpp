// latte.run_dsa_step: one DSA decode step of a model's shape on random data through the selected
// backends, verified (tools/workload, the code behind `latte run`; not part of liblatte).
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "context_scope.hpp"
#include "latte/error.hpp"
#include "latte_workload/dsa_step.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace latte::python {
namespace {

using workload::DsaStepConfig;
using workload::DsaStepReport;

DsaStepReport run_step(const std::string& model, int tp, const std::string& kv_cache, int block_size,
                       int batch, int context, const std::string& device, uint64_t seed, int repeats,
                       const std::vector<std::string>& force, const std::vector<std::string>& exclude,
                       const std::optional<std::string>& policy_path,
                       const std::optional<std::string>& policy_json, nb::object progress) {
  DsaStepConfig config;
  config.model = model;
  config.tp = tp;
  const auto format = parse_cache_format(kv_cache);
  if (!format) {
    throw Error(ErrorCode::invalid_argument,
                "kv_cache '" + kv_cache + "' is not a cache format: use bf16 or fp8_ds_mla");
  }
  config.kv_cache = *format;
  config.block_size = block_size;
  config.batch = batch;
  config.context = context;
  config.device = device;
  config.seed = seed;
  config.repeats = repeats;
  config.select.force = force;
  config.select.exclude = exclude;
  const ScopedContext scope(PolicySource{policy_path, policy_json});
  // Progress lines go to the Python callable with the GIL held; a failing callable is reported
  // as unraisable and does not stop the run.
  std::function<void(std::string_view)> report_line;
  if (!progress.is_none()) {
    report_line = [&progress](std::string_view line) {
      nb::gil_scoped_acquire gil;
      try {
        progress(nb::str(line.data(), line.size()));
      } catch (nb::python_error& e) {
        e.discard_as_unraisable("latte.run_dsa_step progress callback");
      }
    };
  }
  nb::gil_scoped_release release;
  return workload::run_dsa_step(config, report_line, &scope.get());
}

}  // namespace

void bind_workload(nb::module_& m) {
  nb::class_<DsaStepReport>(m, "DsaStepReport", "What run_dsa_step measured and checked, per stage.")
      .def_prop_ro("passed", [](const DsaStepReport& r) { return r.passed; },
                   "True when every stage passed its check.")
      .def("to_text", &DsaStepReport::to_text, "The table `latte run` prints.")
      .def("to_json", &DsaStepReport::to_json, "The report as JSON (`latte run --json`).")
      .def("to_dict", [](const DsaStepReport& r) {
        return nb::module_::import_("json").attr("loads")(r.to_json());
      }, "to_json() parsed into dicts and lists.")
      .def("__str__", &DsaStepReport::to_text)
      .def("__repr__", [](const DsaStepReport& r) {
        return std::string("<latte.DsaStepReport ") + (r.passed ? "PASSED" : "FAILED") + ", " +
               std::to_string(r.stages.size()) + " stages>";
      });

  m.def("run_dsa_step", &run_step, "model"_a = "glm-5", nb::kw_only(), "tp"_a = 1,
        "kv_cache"_a = "bf16", "block_size"_a = 64, "batch"_a = 4, "context"_a = 2048,
        "device"_a = "cpu", "seed"_a = 1, "repeats"_a = 0, "force"_a = std::vector<std::string>{},
        "exclude"_a = std::vector<std::string>{}, "policy_path"_a.none() = nb::none(),
        "policy_json"_a.none() = nb::none(), "progress"_a.none() = nb::none());
}

}  // namespace latte::python
