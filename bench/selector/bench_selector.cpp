// Selection cost with 50 registered backends: cached (the engine's per-call path, target
// < 10 us) and uncached (first call for a spec, target < 1 ms). A benchmark, not a test.
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "latte/context.hpp"

namespace {

class BenchBackend final : public latte::Backend {
 public:
  explicit BenchBackend(latte::BackendInfo info) : info_(std::move(info)) {}
  const latte::BackendInfo& info() const override { return info_; }
  std::unique_ptr<latte::Kernel> make(const latte::AttentionSpec&, const latte::DeviceInfo&) const override {
    return nullptr;  // selection only: never made
  }

 private:
  latte::BackendInfo info_;
};

// 50 backends of varied reach: CUDA arch ranges, head-count lists, cache formats, CPU ones, so
// that a selection accepts some and rejects others with one to three reasons.
latte::Registry& registry_with_50() {
  static latte::Registry registry;
  if (registry.size() == 0) {
    const int archs[] = {80, 86, 89, 90, 100, 120};
    for (int i = 0; i < 50; ++i) {
      latte::BackendInfo info;
      info.id = fmt::format("vendor{}.sparse_mla_{}", i % 7, i);
      latte::Capabilities& c = info.caps;
      c.ops = {latte::Op::sparse_mla, latte::Op::mla_decode};
      c.devices = {i % 10 == 0 ? latte::DeviceKind::cpu : latte::DeviceKind::cuda};
      c.arch = i % 3 == 0 ? latte::IntRule::at_least(archs[i % 6]) : latte::IntRule::list({archs[i % 6]});
      c.q_dtypes = {latte::DType::bf16};
      c.kv_caches = i % 2 ? std::vector<latte::CacheFormat>{latte::CacheFormat::bf16}
                          : std::vector<latte::CacheFormat>{latte::CacheFormat::bf16, latte::CacheFormat::fp8_ds_mla};
      c.heads = i % 4 == 0 ? latte::IntRule::list({64, 128}) : latte::IntRule::range(1, 128);
      c.head_dim = latte::IntRule::list({576});
      c.topk = latte::IntRule::multiple(64);
      registry.add(std::make_shared<BenchBackend>(std::move(info)));
    }
  }
  return registry;
}

latte::Context& context_with_policies() {
  static latte::Context* context = [] {
    auto* ctx = new latte::Context(registry_with_50());  // lives for the whole run
    std::string rules;
    for (int i = 0; i < 10; ++i) {
      rules += fmt::format(R"({}{{"name": "r{}", "when": {{"arch": ">={}", "heads": "<=64"}}, "order": ["vendor{}.*", "vendor*.sparse_mla_1?"]}})",
                           i ? "," : "", i, 80 + i, i % 7);
    }
    ctx->add_policy(latte::Policy::parse(R"({"latte_policy": 1, "rules": [)" + rules + "]}", "bench.json",
                                         latte::PolicyLayer::user));
    return ctx;
  }();
  return *context;
}

latte::AttentionSpec glm5_tp8() {
  latte::Deployment d;
  d.tp = 8;
  d.kv_cache = latte::CacheFormat::fp8_ds_mla;
  return latte::attention_spec(latte::load_model("glm-5", d), latte::Op::sparse_mla);
}

latte::SelectOptions options() {
  latte::SelectOptions o;
  o.use_environment = false;
  return o;
}

void BM_SelectCached(benchmark::State& state) {
  latte::Context& ctx = context_with_policies();
  const latte::AttentionSpec spec = glm5_tp8();
  const latte::DeviceInfo device = latte::describe_device("sm_90");
  const latte::SelectOptions o = options();
  (void)ctx.select(spec, device, o);  // fill the cache
  for (auto _ : state) benchmark::DoNotOptimize(ctx.select(spec, device, o).chosen);
}
BENCHMARK(BM_SelectCached);

void BM_SelectCachedWithEnvironment(benchmark::State& state) {
  latte::Context& ctx = context_with_policies();
  const latte::AttentionSpec spec = glm5_tp8();
  const latte::DeviceInfo device = latte::describe_device("sm_120");
  (void)ctx.select(spec, device);
  for (auto _ : state) benchmark::DoNotOptimize(ctx.select(spec, device).chosen);
}
BENCHMARK(BM_SelectCachedWithEnvironment);

void BM_SelectUncached(benchmark::State& state) {
  latte::Context& ctx = context_with_policies();
  const latte::AttentionSpec spec = glm5_tp8();
  const latte::DeviceInfo device = latte::describe_device("sm_90");
  const latte::SelectOptions o = options();
  for (auto _ : state) {
    ctx.clear_cache();
    benchmark::DoNotOptimize(ctx.select(spec, device, o).chosen);
  }
}
BENCHMARK(BM_SelectUncached)->Unit(benchmark::kMicrosecond);

// Nothing valid: the decision plus the suggestions (every single change re-checked).
void BM_ExplainNothingValidUncached(benchmark::State& state) {
  latte::Context& ctx = context_with_policies();
  latte::AttentionSpec spec = glm5_tp8();
  spec.head_dim = 512;  // no backend takes it
  const latte::DeviceInfo device = latte::describe_device("sm_90");
  const latte::SelectOptions o = options();
  for (auto _ : state) {
    ctx.clear_cache();
    benchmark::DoNotOptimize(ctx.explain(spec, device, o).suggestions.size());
  }
}
BENCHMARK(BM_ExplainNothingValidUncached)->Unit(benchmark::kMicrosecond);

}  // namespace


namespace {
void BM_CopySelection(benchmark::State& state) {
  latte::Context& ctx = context_with_policies();
  const latte::Selection s = ctx.select(glm5_tp8(), latte::describe_device("sm_90"), options());
  size_t reasons = 0;
  for (const auto& r : s.rejected) reasons += r.reasons.size();
  state.counters["valid"] = s.valid.size();
  state.counters["reasons"] = reasons;
  for (auto _ : state) {
    latte::Selection copy = s;
    benchmark::DoNotOptimize(copy.chosen);
  }
}
BENCHMARK(BM_CopySelection);
}
BENCHMARK_MAIN();
