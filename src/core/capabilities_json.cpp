// Capabilities <-> JSON: how plugins declare what they support, and `latte backends --json`.
// Format (docs/architecture.md, "Declaring capabilities"):
//   {"ops": ["sparse_mla"], "devices": ["cuda"], "arch": {"min": 80},
//    "q_dtypes": ["bf16"], "kv_caches": ["bf16", "fp8_ds_mla"], "heads": {"min": 1, "max": 128},
//    "head_dim": 576, "block_size": {"multiple_of": 16}, "topk": [512, 1024, 2048],
//    "s_q": "any", "max_tokens": "any", "workspace": "...", "notes": "..."}
// An integer rule is "any", an integer (exactly that), a list of integers (one of them) or an
// object with any of min, max, multiple_of, one_of. Absent rules and lists mean "any".
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "core/json_text.hpp"
#include "core/spec_fields.hpp"
#include "latte/capabilities.hpp"
#include "latte/error.hpp"

namespace latte {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

[[noreturn]] void fail(const std::string& source, const std::string& key, const json& value,
                       const std::string& what) {
  throw Error(ErrorCode::plugin_error,
              fmt::format("capabilities of {}: key \"{}\" = {}: {}", source, key, detail::show_json(value), what));
}

int64_t to_int(const std::string& source, const std::string& key, const json& value) {
  if (value.is_number_integer()) return value.get<int64_t>();
  fail(source, key, value, "must be an integer");
}

IntRule parse_rule(const std::string& source, const std::string& key, const json& value) {
  if (value.is_string()) {
    if (value.get<std::string>() == "any") return IntRule::any();
    fail(source, key, value, "a string rule must be \"any\"; otherwise write an integer, a list "
                             "or {\"min\", \"max\", \"multiple_of\", \"one_of\"}");
  }
  if (value.is_number_integer()) return IntRule::list({value.get<int64_t>()});
  if (value.is_array()) {
    if (value.empty()) fail(source, key, value, "an empty list accepts nothing; write \"any\" or list values");
    std::vector<int64_t> values;
    for (const json& item : value) values.push_back(to_int(source, key + "[]", item));
    return IntRule::list(std::move(values));
  }
  if (!value.is_object()) {
    fail(source, key, value, "must be \"any\", an integer, a list of integers or an object "
                             "{\"min\", \"max\", \"multiple_of\", \"one_of\"}");
  }
  IntRule rule;
  for (const auto& [name, item] : value.items()) {
    const std::string path = key + "." + name;
    if (name == "min") {
      rule.min = to_int(source, path, item);
    } else if (name == "max") {
      rule.max = to_int(source, path, item);
    } else if (name == "multiple_of") {
      rule.multiple_of = to_int(source, path, item);
      if (*rule.multiple_of <= 0) fail(source, path, item, "must be a positive integer");
    } else if (name == "one_of") {
      if (!item.is_array() || item.empty()) fail(source, path, item, "must be a non-empty list of integers");
      for (const json& v : item) rule.one_of.push_back(to_int(source, path + "[]", v));
    } else {
      fail(source, path, item, "unknown key; an integer rule has min, max, multiple_of, one_of");
    }
  }
  if (rule.min && rule.max && *rule.min > *rule.max) {
    fail(source, key, value, fmt::format("min {} is above max {}", *rule.min, *rule.max));
  }
  return rule;
}

template <typename T, typename Parse>
std::vector<T> parse_names(const std::string& source, const std::string& key, const json& value,
                           Parse parse, const std::string& accepted) {
  if (!value.is_array()) fail(source, key, value, "must be a list of strings, e.g. [" + accepted + "]");
  std::vector<T> out;
  for (const json& item : value) {
    if (!item.is_string()) fail(source, key, item, "must be a string, one of " + accepted);
    const auto parsed = parse(item.get<std::string>());
    if (!parsed) fail(source, key, item, "is not one of " + accepted);
    out.push_back(*parsed);
  }
  return out;
}

std::optional<DeviceKind> parse_device_kind(std::string_view name) {
  if (name == "cpu") return DeviceKind::cpu;
  if (name == "cuda") return DeviceKind::cuda;
  return std::nullopt;
}

std::string op_names() {
  std::string out;
  for (Op op : all_ops()) out += (out.empty() ? "" : ", ") + std::string(to_string(op));
  return out;
}

ordered_json rule_json(const IntRule& rule) {
  if (rule.is_any()) return "any";
  ordered_json out = ordered_json::object();
  if (rule.min) out["min"] = *rule.min;
  if (rule.max) out["max"] = *rule.max;
  if (rule.multiple_of) out["multiple_of"] = *rule.multiple_of;
  if (!rule.one_of.empty()) out["one_of"] = rule.one_of;
  return out;
}

template <typename T>
ordered_json names_json(const std::vector<T>& items) {
  ordered_json out = ordered_json::array();
  for (const T& item : items) out.push_back(std::string(to_string(item)));
  return out;
}

}  // namespace

std::string capabilities_to_json(const Capabilities& caps) {
  ordered_json out;
  out["ops"] = names_json(caps.ops);
  out["devices"] = names_json(caps.devices);
  out["arch"] = rule_json(caps.arch);
  out["q_dtypes"] = names_json(caps.q_dtypes);
  out["kv_caches"] = names_json(caps.kv_caches);
  for (const detail::SpecIntField& f : detail::spec_int_fields()) {
    if (f.rule) out[std::string(f.caps_key)] = rule_json(caps.*f.rule);
  }
  out["workspace"] = caps.workspace;
  out["notes"] = caps.notes;
  return out.dump();
}

Capabilities capabilities_from_json(const std::string& json_text, const std::string& source) {
  const json root =
      detail::parse_json_input(json_text, fmt::format("capabilities of {}", source), ErrorCode::plugin_error);
  if (!root.is_object()) {
    fail(source, "(top level)", root, "must be a JSON object such as {\"ops\": [\"sparse_mla\"], \"devices\": [\"cpu\"]}");
  }
  Capabilities caps;
  bool has_ops = false, has_devices = false;
  for (const auto& [key, value] : root.items()) {
    if (key == "ops") {
      caps.ops = parse_names<Op>(source, key, value, parse_op, op_names());
      has_ops = true;
    } else if (key == "devices") {
      caps.devices = parse_names<DeviceKind>(source, key, value, parse_device_kind, "cpu, cuda");
      has_devices = true;
    } else if (key == "q_dtypes") {
      caps.q_dtypes = parse_names<DType>(source, key, value, parse_dtype, "f32, f16, bf16, e4m3, i32, u8");
    } else if (key == "kv_caches") {
      caps.kv_caches = parse_names<CacheFormat>(source, key, value, parse_cache_format, "bf16, fp8_ds_mla");
    } else if (key == "arch") {
      caps.arch = parse_rule(source, key, value);
    } else if (const detail::SpecIntField* f = detail::caps_int_field(key)) {
      caps.*f->rule = parse_rule(source, key, value);
    } else if (key == "workspace" || key == "notes") {
      if (!value.is_string()) fail(source, key, value, "must be a string");
      (key == "workspace" ? caps.workspace : caps.notes) = value.get<std::string>();
    } else {
      fail(source, key, value,
           "unknown key; capabilities have ops, devices, arch, q_dtypes, kv_caches, " + detail::caps_int_keys() +
               ", workspace, notes");
    }
  }
  if (!has_ops || caps.ops.empty()) {
    fail(source, "ops", has_ops ? root["ops"] : json(nullptr),
         "is required and must list at least one op (" + op_names() + ")");
  }
  if (!has_devices || caps.devices.empty()) {
    fail(source, "devices", has_devices ? root["devices"] : json(nullptr),
         "is required and must list \"cpu\" and/or \"cuda\"");
  }
  return caps;
}

}  // namespace latte
