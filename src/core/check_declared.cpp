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
  return fmt::format("{{{}}}",
                     detail::join(items, ", ", [](const T& item) { return std::string(to_string(item)); }));
}

std::string int_text(int64_t v) { return fmt::format("{}", v); }

// A reason for an integer field refused by `rule`.
Reason int_reason(const char* code, const char* field, const char* what, const IntRule& rule,
                  int64_t value, const std::string& got_detail = {}) {
  const std::string wanted = rule.describe();
  const std::string got = int_text(value);
  return Reason{code, field, wanted, got,
                fmt::format("needs {} {}; this spec has {}{}", what, wanted, got, got_detail)};
}

}  // namespace

std::vector<Reason> check_declared(const Capabilities& caps, const AttentionSpec& spec,
                                   const DeviceInfo& device) {
  std::vector<Reason> reasons;
  const Op op = spec.op;

  if (!contains(caps.ops, op)) {
    const std::string wanted = caps.ops.empty() ? "none declared" : set_of(caps.ops);
    reasons.push_back({"op", "op", wanted, std::string(to_string(op)),
                       caps.ops.empty()
                           ? fmt::format("declares no ops, so it cannot run {}", to_string(op))
                           : fmt::format("does not implement {}; it implements {}", to_string(op),
                                         detail::join(caps.ops, ", ", [](Op o) {
                                           return std::string(to_string(o));
                                         }))});
    return reasons;  // the other fields describe a different operation
  }

  if (!contains(caps.devices, device.kind)) {
    const std::string wanted = caps.devices.empty() ? "none declared" : set_of(caps.devices);
    reasons.push_back({"device_kind", "device.kind", wanted, std::string(to_string(device.kind)),
                       fmt::format("runs on {} devices only; this device is {}",
                                   caps.devices.empty() ? std::string("no")
                                                        : detail::join(caps.devices, " and ", [](DeviceKind k) {
                                                            return std::string(to_string(k));
                                                          }),
                                   device.label())});
  } else if (device.kind == DeviceKind::cuda && !caps.arch.accepts(device.arch())) {
    const std::string wanted = caps.arch.describe_with([](int64_t a) { return arch_name(static_cast<int>(a)); });
    const std::string got = arch_name(device.arch());
    reasons.push_back({"arch", "device.arch", wanted, got,
                       fmt::format("needs {}; this device is {}", wanted, got)});
  }

  if (detail::op_has_query(op) && !caps.q_dtypes.empty() && !contains(caps.q_dtypes, spec.q_dtype)) {
    reasons.push_back({"q_dtype", "q_dtype", set_of(caps.q_dtypes), std::string(to_string(spec.q_dtype)),
                       fmt::format("takes {} queries; this spec has {} queries",
                                   detail::join(caps.q_dtypes, " or ", [](DType d) { return std::string(to_string(d)); }),
                                   to_string(spec.q_dtype))});
  }

  if (detail::op_uses_mla_cache(op) && !caps.kv_caches.empty() &&
      !contains(caps.kv_caches, spec.kv_cache)) {
    reasons.push_back({"kv_cache", "kv_cache", set_of(caps.kv_caches), std::string(to_string(spec.kv_cache)),
                       fmt::format("reads the {} KV cache only; this spec uses {}",
                                   detail::join(caps.kv_caches, " or ", [](CacheFormat f) { return std::string(to_string(f)); }),
                                   to_string(spec.kv_cache))});
  }

  if (detail::op_has_heads(op) && !caps.heads.accepts(spec.num_heads)) {
    std::string detail_text;
    if (detail::op_heads_split_by_tp(op) && spec.tp > 1) {
      detail_text = fmt::format(" ({} heads / tp {})", int64_t{spec.num_heads} * spec.tp, spec.tp);
    }
    reasons.push_back(int_reason("heads", "num_heads",
                                 detail::op_is_indexer(op) ? "index heads" : "heads per rank",
                                 caps.heads, spec.num_heads, detail_text));
  }
  if (detail::op_has_head_dim(op) && !caps.head_dim.accepts(spec.head_dim)) {
    reasons.push_back(int_reason("head_dim", "head_dim", "head_dim", caps.head_dim, spec.head_dim));
  }
  if (!caps.block_size.accepts(spec.block_size)) {
    reasons.push_back(int_reason("block_size", "block_size", "cache block size", caps.block_size,
                                 spec.block_size));
  }
  if (detail::op_has_topk(op) && !caps.topk.accepts(spec.topk)) {
    reasons.push_back(int_reason("topk", "topk", "topk", caps.topk, spec.topk));
  }
  if (detail::op_has_s_q(op) && !caps.s_q.accepts(spec.s_q)) {
    reasons.push_back(int_reason("s_q", "s_q", "query tokens per request (s_q)", caps.s_q, spec.s_q));
  }
  // 0 = not known yet (a spec derived from a model before the engine fixes its batch size).
  if (spec.max_tokens > 0 && !caps.max_tokens.accepts(spec.max_tokens)) {
    reasons.push_back(int_reason("tokens", "max_tokens", "tokens per call", caps.max_tokens,
                                 spec.max_tokens));
  }
  return reasons;
}

}  // namespace latte
