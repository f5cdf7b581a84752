// The backend contract (docs/architecture.md, "The backend contract"): an open string id, declared
// capabilities, optional custom checks, and make() returning a Kernel that reports its workspace
// and runs on a stream.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "latte/capabilities.hpp"
#include "latte/device.hpp"
#include "latte/ops.hpp"
#include "latte/spec.hpp"

namespace latte {

struct BackendInfo {
  std::string id;            // dotted, open: "cpu.reference", "cuda.sparse_mla", "acme.fast_mla"
  std::string description;   // one line
  Capabilities caps;
  std::string source;        // "built-in" or the plugin's path; filled by the registry
};

class Kernel {
 public:
  virtual ~Kernel() = default;
  // Device bytes run() needs in RunContext::workspace for up to spec.max_tokens tokens.
  [[nodiscard]] virtual std::size_t workspace_bytes() const = 0;
  // Validates `args` (latte/validate.hpp), then computes. Asynchronous on CUDA streams unless
  // RunContext::check_indices is set. Throws latte::Error.
  virtual void run(const OpArgs& args, const RunContext& ctx) = 0;
  // OPTIONAL: one line on how this kernel computes a call of spec.max_tokens tokens (the kernel
  // variant, its splits, what chose them), for `latte select` and `latte run`; empty when the
  // backend has nothing to add.
  [[nodiscard]] virtual std::string describe() const { return {}; }
};

class Backend {
 public:
  virtual ~Backend() = default;
  [[nodiscard]] virtual const BackendInfo& info() const = 0;
  // Rules the declared capabilities cannot express ("fp8 e4m3 math needs sm_89+").
  [[nodiscard]] virtual std::vector<Reason> custom_checks(const AttentionSpec& spec,
                                                          const DeviceInfo& device) const {
    (void)spec;
    (void)device;
    return {};
  }
  // Called only for a spec that check() accepts.
  [[nodiscard]] virtual std::unique_ptr<Kernel> make(const AttentionSpec& spec,
                                                     const DeviceInfo& device) const = 0;
};

// Declared reasons followed by custom ones; empty = the backend accepts (spec, device).
// custom_checks() is not called when the op or the device kind is already refused.
[[nodiscard]] std::vector<Reason> check(const Backend& backend, const AttentionSpec& spec,
                                        const DeviceInfo& device);

}  // namespace latte
