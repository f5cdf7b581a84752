// "What would work": the single changes to the spec or the device under which some backend
// would accept, each with the backends that would then accept and why they refuse today.
#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "core/op_traits.hpp"
#include "core/selector_impl.hpp"
#include "core/spec_fields.hpp"
#include "core/text.hpp"

namespace latte::detail {
namespace {

struct Variation {
  std::string field;     // "kv_cache", "topk_lens", "q_dtype", "block_size", "s_q", "tp", "device"
  std::string value;     // "bf16", "sm_90", "2"
  std::string label;     // "kv_cache=bf16", "tp=2 (32 heads per rank)"
  std::string reason_code;  // the reason this change removes, for the "today" part
  AttentionSpec spec;
  DeviceInfo device;
};

std::vector<Variation> variations(const std::vector<std::shared_ptr<const Backend>>& candidates,
                                  const AttentionSpec& spec, const DeviceInfo& device) {
  std::vector<Variation> out;
  const auto add = [&](std::string field, std::string value, std::string label, std::string code,
                       AttentionSpec s, DeviceInfo d) {
    out.push_back({std::move(field), std::move(value), std::move(label), std::move(code), std::move(s), std::move(d)});
  };
  const Op op = spec.op;

  if (op_uses_mla_cache(op)) {
    for (CacheFormat f : {CacheFormat::bf16, CacheFormat::fp8_ds_mla}) {
      if (f == spec.kv_cache) continue;
      AttentionSpec s = spec;
      s.kv_cache = f;
      add("kv_cache", std::string(to_string(f)), fmt::format("kv_cache={}", to_string(f)), "kv_cache", s, device);
    }
  }
  if (spec.topk_lens) {
    // Rows padded with -1 past their length say the same without topk_lens.
    AttentionSpec s = spec;
    s.topk_lens = false;
    add("topk_lens", "absent", "without topk_lens (rows padded with -1 past their length)", "topk_lens", s, device);
  }
  if (op_has_query(op)) {
    std::set<DType> dtypes;
    for (const auto& b : candidates) dtypes.insert(b->info().caps.q_dtypes.begin(), b->info().caps.q_dtypes.end());
    for (DType d : dtypes) {
      if (d == spec.q_dtype) continue;
      AttentionSpec s = spec;
      s.q_dtype = d;
      add("q_dtype", std::string(to_string(d)), fmt::format("q_dtype={}", to_string(d)), "q_dtype", s, device);
    }
  }
  for (const SpecIntField& f : spec_int_fields()) {
    if (f.alternatives.empty() || !f.applies(op)) continue;
    std::set<int64_t> values(f.alternatives.begin(), f.alternatives.end());
    if (f.alternatives_from_caps) {
      for (const auto& b : candidates) {
        for (int64_t v : (b->info().caps.*f.rule).one_of) values.insert(v);
      }
    }
    const int64_t current = f.spec.get(spec);
    for (int64_t value : values) {
      if (value == current || value <= 0) continue;
      AttentionSpec s = spec;
      f.spec.set(s, value);
      add(std::string(f.name), std::to_string(value), fmt::format("{}={}", f.name, value), std::string(f.reason_code),
          s, device);
    }
  }
  if (op_heads_split_by_tp(op) && spec.tp >= 1 && spec.num_heads > 0) {
    const int64_t total = int64_t{spec.num_heads} * spec.tp;
    for (int64_t tp = 1; tp <= total; ++tp) {
      if (total % tp != 0 || tp == spec.tp) continue;
      AttentionSpec s = spec;
      s.tp = static_cast<int>(tp);
      s.num_heads = static_cast<int>(total / tp);
      add("tp", std::to_string(tp), fmt::format("tp={} ({} heads per rank)", tp, s.num_heads), "heads", s, device);
    }
  }
  {
    std::vector<DeviceInfo> devices;
    if (device.kind == DeviceKind::cuda) devices.push_back(describe_device("cpu"));
    for (int arch : described_archs()) {
      if (device.kind == DeviceKind::cuda && arch == device.arch()) continue;
      devices.push_back(describe_device(arch_name(arch)));
    }
    for (DeviceInfo& d : devices) {
      const std::string name = d.kind == DeviceKind::cpu ? "cpu" : arch_name(d.arch());
      add("device", name, fmt::format("device {}", name), d.kind == device.kind ? "arch" : "device_kind", spec, std::move(d));
    }
  }
  return out;
}

}  // namespace

std::vector<Suggestion> suggest(const std::vector<std::shared_ptr<const Backend>>& candidates,
                                const std::vector<HeldBack>& held_back,
                                const AttentionSpec& spec, const DeviceInfo& device) {
  std::vector<Suggestion> out;
  // Today's reasons per candidate, for the "now it refuses: ..." part.
  std::vector<std::vector<Reason>> today;
  today.reserve(candidates.size());
  for (const auto& b : candidates) today.push_back(safe_check(*b, spec, device));

  for (const Variation& v : variations(candidates, spec, device)) {
    Suggestion s;
    s.field = v.field;
    s.value = v.value;
    std::string because;
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      if (today[i].empty() || !declared_accepts(candidates[i]->info().caps, v.spec, v.device) ||
          !safe_check(*candidates[i], v.spec, v.device).empty()) {
        continue;
      }
      s.backends.push_back(candidates[i]->info().id);
      if (because.empty()) {
        const auto it = std::find_if(today[i].begin(), today[i].end(),
                                     [&](const Reason& r) { return r.code == v.reason_code; });
        const Reason& r = it != today[i].end() ? *it : today[i].front();
        because = fmt::format("; today {} refuses: {}", candidates[i]->info().id, r.text);
      }
    }
    if (s.backends.empty()) continue;
    s.text = fmt::format("{} would be accepted by {}{}", v.label, join(s.backends, ", "), because);
    out.push_back(std::move(s));
  }
  for (const HeldBack& held : held_back) {
    if (!safe_check(*held.backend, spec, device).empty()) continue;  // would not help
    const std::string& id = held.backend->info().id;
    Suggestion s;
    s.field = held.field;
    s.value = id;
    s.backends = {id};
    s.text = held.field == "exclude"
                 ? fmt::format("{} accepts this spec but {}: drop it from the exclusions", id, held.why)
                 : fmt::format("{} accepts this spec but {}: remove the force to let the policy choose", id, held.why);
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace latte::detail
