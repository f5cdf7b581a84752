// What a backend declares it supports, and the structured reasons a spec is refused.
// The declared part is checked by core (check_declared): a backend writes no code for it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "latte/device.hpp"
#include "latte/dtype.hpp"
#include "latte/ops.hpp"

namespace latte {

struct AttentionSpec;

// One reason a backend refuses a spec.
struct Reason {
  std::string code;    // stable: "op", "device_kind", "arch", "q_dtype", "kv_cache", "heads", ...
  std::string field;   // the spec or device field: "op", "arch", "num_heads", ...
  std::string wanted;  // what the backend accepts: ">= sm_80", "one of {64, 128}", ...
  std::string got;     // what the spec has: "sm_75", "8", ...
  std::string text;    // one readable sentence
  friend bool operator==(const Reason&, const Reason&) = default;
};

// A rule on an integer: every present part must hold. Empty = any value.
struct IntRule {
  std::optional<int64_t> min;
  std::optional<int64_t> max;
  std::optional<int64_t> multiple_of;
  std::vector<int64_t> one_of;

  [[nodiscard]] bool accepts(int64_t value) const;
  [[nodiscard]] bool is_any() const;
  [[nodiscard]] std::string describe() const;  // "any", "one of {64, 128}", "1..128, a multiple of 8"
  // The same with each value spelled by `name` (arch rules: "sm_80..sm_89").
  [[nodiscard]] std::string describe_with(const std::function<std::string(int64_t)>& name) const;

  static IntRule any() { return {}; }
  static IntRule range(int64_t lo, int64_t hi) { return IntRule{lo, hi, std::nullopt, {}}; }
  static IntRule at_least(int64_t lo) { return IntRule{lo, std::nullopt, std::nullopt, {}}; }
  static IntRule list(std::vector<int64_t> values) { return IntRule{{}, {}, {}, std::move(values)}; }
  static IntRule multiple(int64_t m) { return IntRule{{}, {}, m, {}}; }
  friend bool operator==(const IntRule&, const IntRule&) = default;
};

// Fields that do not apply to an op are not checked (no topk for mla_decode, no cache format
// for the indexer, no heads for kv_store; src/core/spec_fields.cpp, op_traits.hpp). `ops` and
// `devices` must be listed: a backend that declares none of them accepts nothing.
struct Capabilities {
  std::vector<Op> ops;
  std::vector<DeviceKind> devices;       // cpu, cuda
  IntRule arch;                          // CUDA compute capability as 80, 86, 89, 90, 100, 120
  std::vector<DType> q_dtypes;           // empty = any
  std::vector<CacheFormat> kv_caches;    // empty = any (ops without a cache ignore it)
  IntRule heads;                         // heads per rank (index heads for indexer ops)
  IntRule head_dim;                      // 576 for MLA, 128 for the indexer
  IntRule block_size;
  IntRule topk;
  IntRule s_q;
  IntRule max_tokens;                    // tokens per call
  std::string workspace;                 // how the workspace scales, for documentation
  std::string notes;                     // one line for `latte backends`
  friend bool operator==(const Capabilities&, const Capabilities&) = default;
};

// The reasons the declared capabilities refuse (spec, device); empty = accepted. Reason codes:
// op, device_kind, arch, q_dtype, kv_cache, heads, head_dim, block_size, topk, s_q, tokens.
// An op mismatch is reported alone (the other fields are then moot); the arch is checked only
// on CUDA devices of an accepted kind.
[[nodiscard]] std::vector<Reason> check_declared(const Capabilities& caps,
                                                 const AttentionSpec& spec,
                                                 const DeviceInfo& device);
// check_declared(...).empty() without building any reason text (for searches over many specs).
[[nodiscard]] bool declared_accepts(const Capabilities& caps, const AttentionSpec& spec,
                                    const DeviceInfo& device);

// The reason a backend that scores single tokens refuses a spec of the pooled indexer
// (AttentionSpec::kpool > 0, GLM-5.3-Flash), with the nearest fix; none for other specs. `who`
// names the backend in the sentence. Backends call it from their custom checks.
[[nodiscard]] std::optional<Reason> pooled_indexer_refusal(std::string_view who, const AttentionSpec& spec);
// The reason a backend that computes the 512-dim MLA latent output refuses a spec with another
// head_dim_v; none for the others.
[[nodiscard]] std::optional<Reason> latent_output_refusal(std::string_view who, const AttentionSpec& spec);
// The reason a CUDA device with less shared memory per block than `need_bytes` refuses a kernel;
// none when it has enough, is not a CUDA device, or reports no limit.
[[nodiscard]] std::optional<Reason> smem_refusal(std::string_view who, int64_t need_bytes, const DeviceInfo& device);

// JSON form (used by plugins to declare capabilities and by `latte backends --json`).
// parse throws latte::Error(plugin_error) naming `source`, the key and the value.
[[nodiscard]] std::string capabilities_to_json(const Capabilities& caps);
[[nodiscard]] Capabilities capabilities_from_json(const std::string& json_text,
                                                  const std::string& source);

}  // namespace latte
