// Selection -> a table for terminals, and JSON with stable keys for tools.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/spec_fields.hpp"
#include "latte/device.hpp"
#include "latte/error.hpp"
#include "latte/selector.hpp"

namespace latte {
namespace {

struct Row {
  std::string id;
  std::string status;
  std::vector<std::string> notes;  // rule, or one line per reason
};

}  // namespace

std::string Selection::explain() const {
  std::string out = fmt::format("spec:   {}\ndevice: {}\n", spec.summary(), device.label());
  if (!forced.empty()) out += fmt::format("forced: {}\n", fmt::join(forced, ", "));
  if (!excluded.empty()) out += fmt::format("excluded: {}\n", fmt::join(excluded, ", "));
  if (ok()) {
    out += fmt::format("chosen: {} (ranked by {})\n", chosen, valid.front().rule);
  } else {
    out += "chosen: none - no backend accepts this spec on this device\n";
  }

  std::vector<Row> rows;
  for (const Ranking& r : valid) {
    rows.push_back({r.id, r.rank == 1 ? "chosen" : fmt::format("#{}", r.rank), {r.rule}});
  }
  for (const RejectedBackend& r : rejected) {
    Row row{r.id, "rejected", {}};
    for (const Reason& reason : r.reasons) row.notes.push_back(fmt::format("{}: {}", reason.code, reason.text));
    rows.push_back(std::move(row));
  }
  std::size_t id_width = std::string_view("backend").size();
  std::size_t status_width = std::string_view("status").size();
  for (const Row& row : rows) {
    id_width = std::max(id_width, row.id.size());
    status_width = std::max(status_width, row.status.size());
  }
  out += "\n";
  if (rows.empty()) {
    out += "no backends are registered (load a plugin, or build latte with its backends)\n";
  } else {
    out += fmt::format("{:<{}}  {:<{}}  {}\n", "backend", id_width, "status", status_width, "rule / reasons");
    for (const Row& row : rows) {
      for (std::size_t i = 0; i < std::max<std::size_t>(row.notes.size(), 1); ++i) {
        out += fmt::format("{:<{}}  {:<{}}  {}\n", i == 0 ? row.id : "", id_width,
                           i == 0 ? row.status : "", status_width, i < row.notes.size() ? row.notes[i] : "");
      }
    }
  }
  if (!suggestions.empty()) {
    out += "\nwhat would work (one change each):\n";
    for (const Suggestion& s : suggestions) out += fmt::format("  - {}\n", s.text);
  } else if (!ok() && !rows.empty()) {
    out += "\nno single change of cache format, query dtype, block size, s_q, TP size or device "
           "makes any backend accept; a backend for this spec is missing (see docs/architecture.md, "
           "\"Adding a backend out of tree\")\n";
  }
  if (!ok() && device.kind == DeviceKind::cuda && !built_with_cuda()) {
    out += fmt::format("\nthis latte was built without CUDA, so none of its own backends runs on {}: "
                       "install a CUDA build (`pip install .` from the source tree with the CUDA "
                       "toolkit's nvcc on PATH; for the C++ library and CLI, cmake -DLATTE_CUDA=ON)\n",
                       device.label());
  }
  return out;
}

std::string Selection::to_json() const {
  using nlohmann::ordered_json;
  ordered_json root;
  root["chosen"] = ok() ? ordered_json(chosen) : ordered_json(nullptr);
  ordered_json s;
  s["op"] = std::string(to_string(spec.op));
  s["model"] = spec.model;
  s["q_dtype"] = std::string(to_string(spec.q_dtype));
  s["kv_cache"] = std::string(to_string(spec.kv_cache));
  for (const detail::SpecIntField& f : detail::spec_int_fields()) s[std::string(f.name)] = f.spec.get(spec);
  s["scale"] = spec.scale;
  s["split_q"] = spec.split_q;
  s["topk_lens"] = spec.topk_lens;
  s["summary"] = spec.summary();
  root["spec"] = s;
  ordered_json d;
  d["kind"] = std::string(to_string(device.kind));
  d["index"] = device.index;
  d["name"] = device.name;
  d["arch"] = device.arch();
  d["sm_count"] = device.sm_count;
  d["max_smem_per_block"] = device.max_smem_per_block;
  d["memory_bytes"] = device.memory_bytes;
  d["probed"] = device.probed;
  d["label"] = device.label();
  root["device"] = d;
  root["valid"] = ordered_json::array();
  for (const Ranking& r : valid) {
    root["valid"].push_back({{"id", r.id}, {"rank", r.rank}, {"rule", r.rule}, {"pattern_index", r.pattern_index}});
  }
  root["rejected"] = ordered_json::array();
  for (const RejectedBackend& r : rejected) {
    ordered_json reasons = ordered_json::array();
    for (const Reason& reason : r.reasons) {
      reasons.push_back({{"code", reason.code}, {"field", reason.field}, {"wanted", reason.wanted},
                         {"got", reason.got}, {"text", reason.text}});
    }
    root["rejected"].push_back({{"id", r.id}, {"reasons", reasons}});
  }
  root["forced"] = forced;
  root["excluded"] = excluded;
  root["suggestions"] = ordered_json::array();
  for (const Suggestion& sug : suggestions) {
    root["suggestions"].push_back(
        {{"field", sug.field}, {"value", sug.value}, {"backends", sug.backends}, {"text", sug.text}});
  }
  return root.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::string Selection::describe_kernel() const {
  if (!ok() || !backend) return {};
  try {
    return backend->make(spec, device)->describe();
  } catch (const Error& e) {
    return fmt::format("(not made for {}: {})", device.label(), e.what());
  }
}

}  // namespace latte
