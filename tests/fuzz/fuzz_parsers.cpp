// libFuzzer harness for the two parsers that read user files: every input is fed to
// parse_model_config (config.json) and to Policy::parse (policy files). A latte::Error is the
// expected answer to bad input; anything else (another exception, a crash, a sanitizer report,
// a broken invariant) is a bug.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "latte/error.hpp"
#include "latte/policy.hpp"
#include "latte/spec.hpp"

namespace {

void fuzz_model_config(std::string_view text, uint8_t variant) {
  latte::Deployment deployment;
  deployment.tp = 1 << (variant % 4);  // 1, 2, 4, 8: also exercises the TP check
  deployment.kv_cache = variant & 4 ? latte::CacheFormat::fp8_ds_mla : latte::CacheFormat::bf16;
  latte::ModelSpec model;
  try {
    model = latte::parse_model_config(text, "fuzz", deployment);
  } catch (const latte::Error&) {
    return;
  }
  if (!(std::isfinite(model.softmax_scale) && model.softmax_scale > 0)) std::abort();
  if (model.heads_per_rank * model.tp != model.num_heads) std::abort();
  for (latte::Op op : latte::all_ops()) {
    try {
      const latte::AttentionSpec spec = latte::attention_spec(model, op);
      if (spec.summary().empty()) std::abort();
    } catch (const latte::Error&) {
    }
  }
}

void fuzz_policy(std::string_view text) {
  latte::Policy policy;
  try {
    policy = latte::Policy::parse(text, "fuzz", latte::PolicyLayer::user);
  } catch (const latte::Error&) {
    return;
  }
  // The canonical form must parse back to itself.
  const std::string canonical = policy.to_json();
  const latte::Policy again = latte::Policy::parse(canonical, "fuzz", latte::PolicyLayer::user);
  if (again.to_json() != canonical) std::abort();

  // Ranking is a permutation of the ids, whatever the rules say.
  latte::PolicyStack stack;
  stack.add(latte::Policy::builtin());
  stack.add(policy);
  latte::AttentionSpec spec;
  spec.num_heads = 8;
  spec.topk = 2048;
  spec.model = "glm-5";
  latte::DeviceInfo device;
  device.kind = latte::DeviceKind::cuda;
  device.arch_major = 9;
  const std::vector<std::string> ids = {"cuda.sparse_mla", "hopper.sparse_mla", "cpu.reference", "acme.x"};
  if (stack.rank(ids, spec, device).size() != ids.size()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  fuzz_model_config(text, size ? data[size - 1] : 0);
  fuzz_policy(text);
  return 0;
}
