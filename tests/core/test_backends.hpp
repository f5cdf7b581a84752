// Backends defined inside the tests: they exercise the registry and the selector without any
// placeholder backend in the product.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "latte/backend.hpp"
#include "latte/spec.hpp"

namespace latte::testing {

class CountingKernel final : public Kernel {
 public:
  CountingKernel(const AttentionSpec& spec, Device device, std::atomic<int>* runs)
      : Kernel(spec, device), runs_(runs) {}
  std::size_t workspace_bytes() const override { return 0; }

 protected:
  void compute(const Problem&, const RunContext&) override { ++*runs_; }

 private:
 private:
  std::atomic<int>* runs_;
};

class TestBackend final : public Backend {
 public:
  using CustomCheck = std::function<std::vector<Reason>(const AttentionSpec&, const DeviceInfo&)>;

  TestBackend(std::string id, Capabilities caps, CustomCheck custom = {}) : custom_(std::move(custom)) {
    info_.id = std::move(id);
    info_.description = "test backend";
    info_.caps = std::move(caps);
  }
  const BackendInfo& info() const override { return info_; }
  std::vector<Reason> custom_checks(const AttentionSpec& spec, const DeviceInfo& device) const override {
    ++custom_calls;
    return custom_ ? custom_(spec, device) : std::vector<Reason>{};
  }
  std::unique_ptr<Kernel> make(const AttentionSpec& spec, const DeviceInfo& device) const override {
    return std::make_unique<CountingKernel>(spec, device.handle(), &runs);
  }

  mutable std::atomic<int> custom_calls{0};
  mutable std::atomic<int> runs{0};

 private:
  BackendInfo info_;
  CustomCheck custom_;
};

// Capabilities of a sparse/dense MLA attention backend: bf16 queries, 576-wide heads.
inline Capabilities mla_caps(std::vector<DeviceKind> devices, IntRule arch = IntRule::any()) {
  Capabilities caps;
  caps.ops = {Op::sparse_mla, Op::mla_decode};
  caps.devices = std::move(devices);
  caps.arch = std::move(arch);
  caps.q_dtypes = {DType::bf16};
  caps.head_dim = IntRule::list({576});
  return caps;
}

inline std::shared_ptr<TestBackend> make_backend(std::string id, Capabilities caps,
                                                 TestBackend::CustomCheck custom = {}) {
  return std::make_shared<TestBackend>(std::move(id), std::move(caps), std::move(custom));
}

// GLM-5's sparse attention at a given TP, as attention_spec() derives it.
inline AttentionSpec glm5_sparse(int tp = 8, CacheFormat cache = CacheFormat::bf16, int block_size = 64) {
  Deployment deployment;
  deployment.tp = tp;
  deployment.kv_cache = cache;
  deployment.block_size = block_size;
  return attention_spec(load_model("glm-5", deployment), Op::sparse_mla);
}

// GLM-5 at TP1 (64 heads per rank) over the fp8 cache, kernels made for `max_tokens` tokens per
// call: from 8 tokens the built-in policy ranks the Hopper kernels first on sm_90.
inline AttentionSpec glm5_tp1_fp8(int64_t max_tokens = 128) {
  AttentionSpec spec = glm5_sparse(1, CacheFormat::fp8_ds_mla);
  spec.max_tokens = max_tokens;
  return spec;
}

}  // namespace latte::testing
