// Declared capabilities -> structured reasons, with no per-backend code. Each reason names the
// field, what the backend accepts, what the spec or device has, and one readable sentence.
#include <fmt/format.h>

#include <algorithm>

#include "core/op_traits.hpp"
#include "core/spec_fields.hpp"
#include "core/text.hpp"
#include "latte/capabilities.hpp"
#include "latte/ops.hpp"
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
Reason int_reason(const detail::SpecIntField& f, Op op, const IntRule& rule, const AttentionSpec& spec) {
  const std::string wanted = rule.describe();
  const std::string got = std::to_string(f.spec.get(spec));
  return Reason{std::string(f.reason_code), std::string(f.name), wanted, got,
                fmt::format("needs {} {}; this spec has {}{}", f.words_for(op), wanted, got,
                            f.got_detail ? f.got_detail(spec) : std::string())};
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

  for (const detail::SpecIntField& f : detail::spec_int_fields()) {
    if (!f.rule || !f.applies(op)) continue;
    const int64_t value = f.spec.get(spec);
    const IntRule& rule = caps.*f.rule;
    if (!f.known(value) || rule.accepts(value)) continue;
    if (!refuse([&] { return int_reason(f, op, rule, spec); })) return;
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

std::optional<Reason> pooled_indexer_refusal(std::string_view who, const AttentionSpec& spec) {
  if (spec.kpool <= 0 || !(detail::kPoolOps & detail::op_bit(spec.op))) return std::nullopt;
  return Reason{"kpool", "kpool", "0 (the per-token indexer)", std::to_string(spec.kpool),
                fmt::format("{} scores single tokens; the pooled indexer ({}, pools of {} tokens: "
                            "GLM-5.3-Flash) runs on cpu.reference, cuda.indexer and hopper.indexer",
                            who, to_string(spec.op), spec.kpool)};
}

std::optional<Reason> latent_output_refusal(std::string_view who, const AttentionSpec& spec) {
  if (spec.head_dim_v == kLatentDim) return std::nullopt;
  return Reason{"head_dim_v", "head_dim_v", std::to_string(kLatentDim), std::to_string(spec.head_dim_v),
                fmt::format("{} computes the 512-dim MLA latent output; this spec has head_dim_v {}.", who,
                            spec.head_dim_v)};
}

std::optional<Reason> smem_refusal(std::string_view who, int64_t need_bytes, const DeviceInfo& device) {
  if (device.kind != DeviceKind::cuda || device.max_smem_per_block <= 0 || device.max_smem_per_block >= need_bytes)
    return std::nullopt;
  return Reason{"smem", "max_smem_per_block", fmt::format(">= {} bytes", need_bytes),
                std::to_string(device.max_smem_per_block),
                fmt::format("{} needs {} bytes of shared memory per block; {} offers {}.", who, need_bytes,
                            device.label(), device.max_smem_per_block)};
}

}  // namespace latte
