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
#include "latte/problem.hpp"
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
  // `spec`: what make() was asked for; `device`: where the kernel runs.
  Kernel(const AttentionSpec& spec, Device device) : spec_(spec), device_(device) {}
  virtual ~Kernel() = default;
  [[nodiscard]] const AttentionSpec& spec() const { return spec_; }
  [[nodiscard]] Device device() const { return device_; }
  // Device bytes run() needs in RunContext::workspace for up to spec.max_tokens tokens.
  [[nodiscard]] virtual std::size_t workspace_bytes() const = 0;
  // Validates `args` once (make_problem), then runs the problem. Throws latte::Error.
  void run(const OpArgs& args, const RunContext& ctx);
  // Runs a validated problem: checks it against spec() and device() (op, cache format, query
  // dtype, heads, head_dim, topk, topk_lens, device kind: a mismatch is invalid_argument naming
  // both), runs check
  // mode when asked (RunContext::check_indices), makes the problem's device current, then
  // compute(). Asynchronous on CUDA streams unless check mode is on.
  void run(const Problem& problem, const RunContext& ctx);
  // OPTIONAL: one line on how this kernel computes a call of spec.max_tokens tokens (the kernel
  // variant, its splits, what chose them), for `latte select` and `latte run`; empty when the
  // backend has nothing to add.
  [[nodiscard]] virtual std::string describe() const { return {}; }

 protected:
  // The computation of a problem that fits this kernel (run() checked it); launches on
  // ctx.stream on CUDA.
  virtual void compute(const Problem& problem, const RunContext& ctx) = 0;

 private:
  AttentionSpec spec_;
  Device device_;
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
