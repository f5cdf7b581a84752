// Policy files: parsing with errors that name the file, the JSON path and the value; the
// canonical JSON form; the built-in default policy.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <nlohmann/json.hpp>
#include <set>

#include "core/json_text.hpp"
#include "core/spec_fields.hpp"
#include "core/text.hpp"
#include "latte/error.hpp"
#include "latte/policy.hpp"

namespace latte::detail {
extern const std::string_view kDefaultPolicyJson;
}  // namespace latte::detail

namespace latte {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

constexpr const char* kWordKeys[] = {"device", "op", "kv_cache", "q_dtype", "model"};


// How every error about a policy starts.
std::string policy_subject(std::string_view source) { return fmt::format("policy error in {}", source); }

class PolicyParser {
 public:
  PolicyParser(std::string_view source, PolicyLayer layer) : source_(source), layer_(layer) {}

  [[noreturn]] void fail(const std::string& path, const json* value, const std::string& what) const {
    throw Error(ErrorCode::policy_error,
                value ? fmt::format("{}: {} = {}: {}", policy_subject(source_), path, detail::show_json(*value), what)
                      : fmt::format("{}: {}: {}", policy_subject(source_), path, what));
  }

  Policy parse(std::string_view text) {
    const json root = detail::parse_json_input(text, policy_subject(source_),
                                               ErrorCode::policy_error, /*comments=*/true);
    if (!root.is_object()) {
      fail("(top level)", &root, "a policy is a JSON object {\"latte_policy\": 1, \"rules\": [...]}");
    }
    for (const auto& [key, value] : root.items()) {
      if (key != "latte_policy" && key != "rules" && key != "description") {
        fail(key, &value, "unknown key; a policy has latte_policy, rules and an optional description");
      }
    }
    const auto version = root.find("latte_policy");
    if (version == root.end()) {
      fail("latte_policy", nullptr, "missing; a policy starts with \"latte_policy\": 1 (the format version)");
    }
    if (!version->is_number_integer() || version->get<int64_t>() != 1) {
      fail("latte_policy", &*version, "unsupported format version; this latte reads version 1");
    }
    if (auto d = root.find("description"); d != root.end() && !d->is_string()) {
      fail("description", &*d, "must be a string");
    }
    const auto rules = root.find("rules");
    if (rules == root.end()) fail("rules", nullptr, "missing; write \"rules\": [ {\"name\", \"when\", \"order\"}, ... ]");
    if (!rules->is_array()) fail("rules", &*rules, "must be a list of rules");

    Policy policy;
    policy.layer = layer_;
    policy.source = std::string(source_);
    std::set<std::string> names;
    for (std::size_t i = 0; i < rules->size(); ++i) {
      PolicyRule rule = parse_rule((*rules)[i], fmt::format("rules[{}]", i));
      if (!names.insert(rule.name).second) {
        const json name = rule.name;
        fail(fmt::format("rules[{}].name", i), &name, "another rule of this file has the same name; names label rules in explanations, make them unique");
      }
      policy.rules_.push_back(std::move(rule));
    }
    return policy;
  }

 private:
  PolicyRule parse_rule(const json& value, const std::string& path) {
    if (!value.is_object()) fail(path, &value, "a rule is an object {\"name\", \"when\", \"order\"}");
    for (const auto& [key, item] : value.items()) {
      if (key != "name" && key != "when" && key != "order" && key != "description") {
        fail(path + "." + key, &item, "unknown key; a rule has name, when, order and an optional description");
      }
    }
    PolicyRule rule;
    rule.layer = layer_;
    rule.source = std::string(source_);

    const auto name = value.find("name");
    if (name == value.end()) fail(path + ".name", nullptr, "missing; every rule needs a name for explanations");
    if (!name->is_string() || name->get<std::string>().empty()) {
      fail(path + ".name", &*name, "must be a non-empty string");
    }
    rule.name = name->get<std::string>();
    const bool printable = std::all_of(rule.name.begin(), rule.name.end(), [](char c) {
      return static_cast<unsigned char>(c) >= 0x20 && c != '#' && c != 0x7f;
    });
    if (!printable || rule.name.size() > 100) {
      fail(path + ".name", &*name, "must be at most 100 printable characters without '#'");
    }

    if (const auto when = value.find("when"); when != value.end()) {
      if (!when->is_object()) fail(path + ".when", &*when, "must be an object of conditions such as {\"arch\": \">=89\", \"op\": \"sparse_mla\"}");
      for (const auto& [key, cond] : when->items()) {
        rule.when.push_back(parse_condition(key, cond, path + ".when." + key));
      }
    }

    const auto order = value.find("order");
    if (order == value.end()) fail(path + ".order", nullptr, "missing; list backend id patterns best first, e.g. [\"hopper.*\", \"cuda.*\"]");
    if (!order->is_array()) fail(path + ".order", &*order, "must be a list of backend id patterns");
    if (order->empty()) fail(path + ".order", &*order, "is empty; a rule must rank at least one backend id pattern");
    for (std::size_t i = 0; i < order->size(); ++i) {
      const json& item = (*order)[i];
      const std::string item_path = fmt::format("{}.order[{}]", path, i);
      if (!item.is_string() || item.get<std::string>().empty()) {
        fail(item_path, &item, "must be a non-empty backend id or glob such as \"cuda.*\"");
      }
      const std::string pattern = item.get<std::string>();
      const bool ok = std::all_of(pattern.begin(), pattern.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '_' || c == '-' || c == '.' || c == '*' || c == '?';
      });
      if (!ok) fail(item_path, &item, "has a character that no backend id has; ids use letters, digits, '_', '-', '.', and patterns add '*' and '?'");
      rule.order.push_back(pattern);
    }
    return rule;
  }

  PolicyCondition parse_condition(const std::string& key, const json& value, const std::string& path) {
    const bool words = std::find(std::begin(kWordKeys), std::end(kWordKeys), key) != std::end(kWordKeys);
    const bool numbers = key == "arch" || detail::policy_int_field(key) != nullptr;
    if (!words && !numbers) {
      fail(path, &value,
           "unknown condition; conditions are device, arch, op, kv_cache, q_dtype, " + detail::policy_int_keys() +
               ", model");
    }
    PolicyCondition cond;
    cond.key = key;
    cond.text = key + "=" + value.dump(-1, ' ', false, json::error_handler_t::replace);
    std::vector<const json*> items;
    if (value.is_array()) {
      if (value.empty()) fail(path, &value, "an empty list matches nothing; list at least one value or drop the condition");
      for (const json& item : value) items.push_back(&item);
    } else {
      items.push_back(&value);
    }
    for (const json* item : items) {
      if (words) {
        cond.words.push_back(parse_word(key, *item, path));
      } else {
        cond.numbers.push_back(parse_number(key, *item, path));
      }
    }
    return cond;
  }

  std::string parse_word(const std::string& key, const json& item, const std::string& path) const {
    if (!item.is_string()) fail(path, &item, fmt::format("{} values are strings", key));
    const std::string word = item.get<std::string>();
    if (key == "device" && word != "cpu" && word != "cuda") {
      fail(path, &item, "a device condition is \"cpu\" or \"cuda\" (use arch for the GPU generation)");
    }
    if (key == "op" && !parse_op(word)) {
      std::string ops;
      for (Op op : all_ops()) ops += (ops.empty() ? "" : ", ") + std::string(to_string(op));
      fail(path, &item, "not an op; ops are " + ops);
    }
    if (key == "kv_cache" && !parse_cache_format(word)) {
      fail(path, &item, "not a cache format; formats are bf16, fp8_ds_mla");
    }
    if (key == "q_dtype") {
      const auto dtype = parse_dtype(word);
      if (!dtype || !(*dtype == DType::bf16 || *dtype == DType::e4m3 || *dtype == DType::f16 || *dtype == DType::f32)) {
        fail(path, &item, "not a query dtype; write bf16, e4m3, f16 or f32");
      }
      return std::string(to_string(*dtype));  // spelled as the spec spells it
    }
    if (key == "model" && word.empty()) fail(path, &item, "a model pattern must not be empty; use \"*\" for any");
    return word;
  }

  static std::optional<int64_t> parse_int(std::string_view text, bool arch) {
    while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
    while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
    if (arch && text.rfind("sm_", 0) == 0) text.remove_prefix(3);
    if (text.empty() || text.size() > 15) return std::nullopt;
    int64_t value = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc{} || end != text.data() + text.size() || value < 0) return std::nullopt;
    return value;
  }

  IntRule parse_number(const std::string& key, const json& item, const std::string& path) const {
    const bool arch = key == "arch";
    const std::string forms =
        arch ? "write an integer (90), \"sm_90\", a comparison (\">=89\", \"<sm_100\") or a range (\"80..89\"), or a list of these"
             : "write an integer (64), a comparison (\"<=16\", \">=64\") or a range (\"1..16\"), or a list of these";
    if (item.is_number_integer()) {
      if (item.is_number_unsigned() ? item.get<uint64_t>() > (uint64_t{1} << 50) : item.get<int64_t>() < 0) {
        fail(path, &item, "must be a non-negative integer; " + forms);
      }
      return IntRule::list({item.get<int64_t>()});
    }
    if (!item.is_string()) fail(path, &item, forms);
    std::string_view text = item.get_ref<const std::string&>();
    while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
    const auto bad = [&]() { fail(path, &item, forms); };
    const auto number = [&](std::string_view t) {
      const auto v = parse_int(t, arch);
      if (!v) bad();
      return *v;
    };
    for (std::string_view op : {">=", "<=", "==", ">", "<"}) {
      if (text.rfind(op, 0) == 0) {
        const int64_t v = number(text.substr(op.size()));
        if (op == ">=") return IntRule::at_least(v);
        if (op == ">") return IntRule::at_least(v + 1);
        if (op == "==") return IntRule::list({v});
        IntRule rule;
        rule.max = op == "<=" ? v : v - 1;
        if (*rule.max < 0) fail(path, &item, "matches nothing (no value is below 0)");
        return rule;
      }
    }
    if (const auto dots = text.find(".."); dots != std::string_view::npos) {
      const int64_t lo = number(text.substr(0, dots));
      const int64_t hi = number(text.substr(dots + 2));
      if (lo > hi) fail(path, &item, fmt::format("the range is empty ({} > {}); write low..high", lo, hi));
      return IntRule::range(lo, hi);
    }
    return IntRule::list({number(text)});
  }

  std::string_view source_;
  PolicyLayer layer_;
};

ordered_json number_json(const IntRule& rule) {
  if (rule.one_of.size() == 1 && !rule.min && !rule.max) return rule.one_of.front();
  if (rule.min && rule.max) return fmt::format("{}..{}", *rule.min, *rule.max);
  if (rule.min) return fmt::format(">={}", *rule.min);
  if (rule.max) return fmt::format("<={}", *rule.max);
  return rule.describe();  // not produced by the parser
}

}  // namespace

Policy Policy::parse(std::string_view json_text, std::string_view source, PolicyLayer layer) {
  return PolicyParser(source, layer).parse(json_text);
}

Policy Policy::load_file(const std::string& path, PolicyLayer layer) {
  const auto text = detail::read_json_file(path, policy_subject(path), ErrorCode::policy_error);
  if (!text) {
    throw Error(ErrorCode::not_found,
                fmt::format("policy file {} does not exist or cannot be read; check the path "
                            "(LATTE_POLICY, --policy)",
                            path));
  }
  return parse(*text, path, layer);
}

const Policy& Policy::builtin() {
  static const Policy policy = [] {
    try {
      return parse(detail::kDefaultPolicyJson, "built-in", PolicyLayer::defaults);
    } catch (const Error& e) {
      throw Error(ErrorCode::internal,
                  fmt::format("latte's built-in policy (configs/policy/default.json) is broken: {}", e.what()));
    }
  }();
  return policy;
}

std::string Policy::to_json() const {
  ordered_json root;
  root["latte_policy"] = 1;
  root["rules"] = ordered_json::array();
  for (const PolicyRule& rule : rules_) {
    ordered_json r;
    r["name"] = rule.name;
    ordered_json when = ordered_json::object();
    for (const PolicyCondition& cond : rule.when) {
      ordered_json values = ordered_json::array();
      for (const std::string& w : cond.words) values.push_back(w);
      for (const IntRule& n : cond.numbers) values.push_back(number_json(n));
      when[cond.key] = values.size() == 1 ? values.front() : values;
    }
    r["when"] = when;
    r["order"] = rule.order;
    root["rules"].push_back(r);
  }
  return root.dump(2);
}

uint64_t Policy::fingerprint() const {
  uint64_t hash = detail::fnv1a(to_json());
  for (const PolicyRule& rule : rules_) {
    hash = detail::fnv1a(to_string(rule.layer), hash);
    hash = detail::fnv1a(rule.source, hash);
  }
  return hash;
}

}  // namespace latte
