// Text and JSON forms of a DSA step report.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "latte_workload/dsa_step.hpp"

namespace latte::workload {
namespace {

std::string fmt_time(double ms) {
  if (ms >= 1000) return fmt::format("{:.2f} s", ms / 1000);
  if (ms >= 1) return fmt::format("{:.2f} ms", ms);
  return fmt::format("{:.1f} us", ms * 1000);
}

std::string fmt_error(const StageReport& s) {
  if (s.tolerance == 0 && s.error == 0 && s.check.rfind("none", 0) == 0) return "-";
  return fmt::format("{:.2e} (<= {:.0e})", s.error, s.tolerance);
}

}  // namespace

std::string DsaStepReport::to_text() const {
  // What the step's stages follow besides the heads: a pooled indexer's pools, rows without rope.
  std::string topk = fmt::format("{}", model.indexer ? model.indexer->topk : 0);
  if (model.indexer && model.indexer->pooled())
    topk += fmt::format(" in pools of {}{}", model.indexer->kpool,
                        model.indexer->kpool_always_select_tail ? " + the tail" : "");
  std::string out = fmt::format(
      "latte run: {} TP{} ({} heads/rank{}, {} index heads, topk {}), kv_cache {}, block {}\n"
      "device: {}\n"
      "workload: {} requests x {} tokens of context, one decode token each\n\n",
      model.name, model.tp, model.heads_per_rank, model.nope ? ", no rope" : "",
      model.indexer ? model.indexer->num_heads : 0, topk, to_string(model.kv_cache), model.block_size,
      device.label(), config.batch, config.context);
  std::size_t w_stage = 5, w_backend = 7, w_rule = 4, w_check = 5;
  for (const StageReport& s : stages) {
    w_stage = std::max(w_stage, s.name.size());
    w_backend = std::max(w_backend, s.backend.size());
    w_rule = std::max(w_rule, s.rule.size());
    w_check = std::max(w_check, s.check.size());
  }
  out += fmt::format("{:<{}}  {:<{}}  {:<{}}  {:>10}  {:>16}  {:<{}}  {:<20}  {}\n", "stage", w_stage,
                     "backend", w_backend, "chosen by", w_rule, "time", "rate", "check", w_check,
                     "rel. error", "result");
  for (const StageReport& s : stages) {
    out += fmt::format("{:<{}}  {:<{}}  {:<{}}  {:>10}  {:>16}  {:<{}}  {:<20}  {}\n", s.name, w_stage,
                       s.backend, w_backend, s.rule, w_rule, fmt_time(s.ms),
                       fmt::format("{:.3g} {}", s.rate, s.rate_unit), s.check, w_check, fmt_error(s),
                       s.passed ? "ok" : "FAILED");
  }
  bool any_kernel = false;
  for (const StageReport& s : stages) any_kernel = any_kernel || !s.kernel.empty();
  if (any_kernel) {
    out += "\nkernels (what each backend ran, from Kernel::describe()):\n";
    for (const StageReport& s : stages) {
      if (!s.kernel.empty()) out += fmt::format("  {:<{}}  {}\n", s.name, w_stage, s.kernel);
    }
  }
  std::size_t ok = 0;
  for (const StageReport& s : stages) ok += s.passed ? 1 : 0;
  out += fmt::format("\n{} ({}/{} stages passed their check)\n", passed ? "PASSED" : "FAILED", ok,
                     stages.size());
  return out;
}

std::string DsaStepReport::to_json() const {
  nlohmann::json j;
  j["model"] = {{"name", model.name},
                {"tp", model.tp},
                {"heads_per_rank", model.heads_per_rank},
                {"index_heads", model.indexer ? model.indexer->num_heads : 0},
                {"topk", model.indexer ? model.indexer->topk : 0},
                {"kv_cache", std::string(to_string(model.kv_cache))},
                {"block_size", model.block_size},
                {"softmax_scale", model.softmax_scale}};
  j["device"] = {{"label", device.label()}, {"kind", std::string(to_string(device.kind))},
                 {"arch", device.arch()}, {"name", device.name}};
  j["workload"] = {{"batch", config.batch}, {"context", config.context}, {"seed", config.seed}};
  j["stages"] = nlohmann::json::array();
  for (const StageReport& s : stages) {
    j["stages"].push_back({{"stage", s.name},
                           {"op", std::string(to_string(s.op))},
                           {"backend", s.backend},
                           {"rule", s.rule},
                           {"kernel", s.kernel},
                           {"time_ms", s.ms},
                           {"rate", s.rate},
                           {"rate_unit", s.rate_unit},
                           {"check", s.check},
                           {"error", s.error},
                           {"tolerance", s.tolerance},
                           {"passed", s.passed}});
  }
  j["passed"] = passed;
  return j.dump(2);
}

}  // namespace latte::workload
