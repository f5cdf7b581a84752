// Host cost of latte::validate per call, which every backend's run() pays before it launches
// anything (GLM-5 TP1 decode shapes). A benchmark, not a test: no data is read, the tensors
// only describe memory.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "latte/validate.hpp"

namespace {

// 256-byte aligned memory that the views describe, one region per tensor (validation reads no
// data, but refuses an output that shares bytes with another tensor).
latte::TensorView carve(latte::DType dtype, std::initializer_list<int64_t> shape) {
  static std::vector<uint8_t> bytes(std::size_t{48} << 20);
  static std::size_t used = 0;
  latte::TensorView t = latte::TensorView::contiguous(nullptr, dtype, shape, latte::Device{});
  const auto base = (reinterpret_cast<std::uintptr_t>(bytes.data()) + used + 255) & ~std::uintptr_t{255};
  used = base - reinterpret_cast<std::uintptr_t>(bytes.data()) + static_cast<std::size_t>(t.nbytes());
  t.data = reinterpret_cast<void*>(base);
  return t;
}

void BM_ValidateSparseMla(benchmark::State& state) {
  using latte::DType;
  using latte::TensorView;
  latte::SparseMlaArgs a;
  a.q = carve(DType::bf16, {1, 64, 576});
  a.kv_cache = carve(DType::u8, {512, 64, 656});
  a.indices = carve(DType::i32, {1, 2048});
  a.out = carve(DType::bf16, {1, 64, 512});
  a.lse = carve(DType::f32, {1, 64});
  a.scale = 0.0625f;
  for (auto _ : state) benchmark::DoNotOptimize(latte::validate(a));
}
BENCHMARK(BM_ValidateSparseMla);

void BM_ValidateIndexerTopk(benchmark::State& state) {
  using latte::DType;
  using latte::TensorView;
  latte::IndexerTopkArgs a;
  a.in.q = carve(DType::e4m3, {32, 32, 128});
  a.in.q_scale = carve(DType::f32, {32, 32});
  a.in.weights = carve(DType::f32, {32, 32});
  a.in.k_cache = carve(DType::u8, {512, 64, 132});
  a.in.block_table = carve(DType::i32, {32, 512});
  a.in.visible_lens = carve(DType::i32, {32});
  a.indices = carve(DType::i32, {32, 2048});
  for (auto _ : state) benchmark::DoNotOptimize(latte::validate(a));
}
BENCHMARK(BM_ValidateIndexerTopk);

}  // namespace

BENCHMARK_MAIN();
