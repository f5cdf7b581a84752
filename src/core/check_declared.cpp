// Declared capabilities -> structured reasons, with no per-backend code. Each reason names the
// field, what the backend accepts, what the spec or device has, and one readable sentence.
#include <fmt/format.h>

#include <algorithm>

#include "core/op_traits.hpp"
#include "core/text.hpp"
#include "latte/capabilities.hpp"
#include "latte/spec.hpp"

namespace latte {
namespace {

template <typename T>
bool contains(const std::vector<T>& items, const T& value) {
  return std::find(items.begin(), items.end(), value) != items.end();
}

template <typename T>
std::string set_of(const std::vector<T>& items) {
  if (items.empty()) return "none declared";
  return fmt::format("{{{}}}", detail::join(items, ", ", [](const T& item) { return std::string(to_string(item)); }));
}

template <typename T>
std::string listed(const std::vector<T>& items, std::string_view separator) {
  return detail::join(items, separator, [](const T& item) { return std::string(to_string(item)); });
}

// "sm_89 or newer", "sm_90 or older", "sm_80..sm_89", "one of {sm_90, sm_100}".
std::string describe_arch(const IntRule& rule) {
  const bool plain = !rule.multiple_of && rule.one_of.empty();
  if (plain && rule.min && !rule.max) return arch_name(static_cast<int>(*rule.min)) + " or newer";
  if (plain && rule.max && !rule.min) return arch_name(static_cast<int>(*rule.max)) + " or older";
  return rule.describe_with([](int64_t a) { return arch_name(static_cast<int>(a)); });
}

// A reason for an integer field refused by `rule`.
Reason int_reason(const char* code, const char* field, const char* what, const IntRule& rule, int64_t value,
                  const std::string& got_detail = {}) {
  const std::string wanted = rule.describe();
  const std::string got = std::to_string(value);
  return Reason{code, field, wanted, got, fmt::format("needs {} {}; this spec has {}{}", what, wanted, got, got_detail)};
}

// Walks the declared rules and calls refuse(make) for each refusal, where make() builds the
// Reason. refuse returns false to stop. Strings are built only when a caller asks for them,
// so "does it accept?" (declared_accepts) allocates nothing.
template <typename Refuse>
void walk_declared(const Capabilities& caps, const AttentionSpec& spec, const DeviceInfo& device, Refuse&& refuse) {
  const Op op = spec.op;

  if (!contains(caps.ops, op)) {
    refuse([&] {
      return Reason{"op", "op", set_of(caps.ops), std::string(to_string(op)),
                    caps.ops.empty() ? fmt::format("declares no ops, so it cannot run {}", to_string(op))
                                     : fmt::format("does not implement {}; it implements {}", to_string(op),
                                                   listed(caps.ops, ", "))};
    });
    return;  // the other fields describe a different operation
  }

  if (!contains(caps.devices, device.kind)) {
    if (!refuse([&] {
          return Reason{"device_kind", "device.kind", set_of(caps.devices), std::string(to_string(device.kind)),
                        fmt::format("runs on {} devices only; this device is {}",
                                    caps.devices.empty() ? std::string("no") : listed(caps.devices, " and "),
                                    device.label())};
        })) {
      return;
    }
  } else if (device.kind == DeviceKind::cuda && !caps.arch.accepts(device.arch())) {
    if (!refuse([&] {
          const std::string wanted = describe_arch(caps.arch);
          const std::string got = arch_name(device.arch());
          return Reason{"arch", "device.arch", wanted, got, fmt::format("needs {}; this device is {}", wanted, got)};
        })) {
      return;
    }
  }

  if (detail::op_has_query(op) && !caps.q_dtypes.empty() && !contains(caps.q_dtypes, spec.q_dtype)) {
    if (!refuse([&] {
          return Reason{"q_dtype", "q_dtype", set_of(caps.q_dtypes), std::string(to_string(spec.q_dtype)),
                        fmt::format("takes {} queries; this spec has {} queries", listed(caps.q_dtypes, " or "),
                                    to_string(spec.q_dtype))};
        })) {
      return;
    }
  }

  if (detail::op_uses_mla_cache(op) && !caps.kv_caches.empty() && !contains(caps.kv_caches, spec.kv_cache)) {
    if (!refuse([&] {
          return Reason{"kv_cache", "kv_cache", set_of(caps.kv_caches), std::string(to_string(spec.kv_cache)),
                        fmt::format("reads the {} KV cache only; this spec uses {}", listed(caps.kv_caches, " or "),
                                    to_string(spec.kv_cache))};
        })) {
      return;
    }
  }

  if (detail::op_has_heads(op) && !caps.heads.accepts(spec.num_heads)) {
    if (!refuse([&] {
          std::string split;
          if (detail::op_heads_split_by_tp(op) && spec.tp > 1) {
            split = fmt::format(" ({} heads / tp {})", int64_t{spec.num_heads} * spec.tp, spec.tp);
          }
          return int_reason("heads", "num_heads", detail::op_is_indexer(op) ? "index heads" : "heads per rank",
                            caps.heads, spec.num_heads, split);
        })) {
      return;
    }
  }
  if (detail::op_has_head_dim(op) && !caps.head_dim.accepts(spec.head_dim)) {
    if (!refuse([&] { return int_reason("head_dim", "head_dim", "head_dim", caps.head_dim, spec.head_dim); })) return;
  }
  if (!caps.block_size.accepts(spec.block_size)) {
    if (!refuse([&] {
          return int_reason("block_size", "block_size", "cache block size", caps.block_size, spec.block_size);
        })) {
      return;
    }
  }
  if (detail::op_has_topk(op) && !caps.topk.accepts(spec.topk)) {
    if (!refuse([&] { return int_reason("topk", "topk", "topk", caps.topk, spec.topk); })) return;
  }
  if (detail::op_has_s_q(op) && !caps.s_q.accepts(spec.s_q)) {
    if (!refuse([&] { return int_reason("s_q", "s_q", "query tokens per request (s_q)", caps.s_q, spec.s_q); })) {
      return;
    }
  }
  // 0 = not known yet (a spec derived from a model before the engine fixes its batch size).
  if (spec.max_tokens > 0 && !caps.max_tokens.accepts(spec.max_tokens)) {
    refuse([&] { return int_reason("tokens", "max_tokens", "tokens per call", caps.max_tokens, spec.max_tokens); });
  }
}

}  // namespace

std::vector<Reason> check_declared(const Capabilities& caps, const AttentionSpec& spec, const DeviceInfo& device) {
  std::vector<Reason> reasons;
  walk_declared(caps, spec, device, [&](auto&& make) {
    reasons.push_back(make());
    return true;
  });
  return reasons;
}

bool declared_accepts(const Capabilities& caps, const AttentionSpec& spec, const DeviceInfo& device) {
  bool accepted = true;
  walk_declared(caps, spec, device, [&](auto&&) { return accepted = false; });
  return accepted;
}

}  // namespace latte
