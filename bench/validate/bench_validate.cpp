// Host cost of latte::validate per call, which every backend's run() pays before it launches
// anything (GLM-5 TP1 decode shapes). A benchmark, not a test: no data is read, the tensors
// only describe memory.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "latte/validate.hpp"

namespace {

// 256-byte aligned fake memory that the views describe (validation reads no data).
void* arena() {
  static std::vector<uint8_t> bytes(std::size_t{1} << 24);
  return reinterpret_cast<void*>((reinterpret_cast<std::uintptr_t>(bytes.data()) + 255) & ~std::uintptr_t{255});
}

void BM_ValidateSparseMla(benchmark::State& state) {
  using latte::DType;
  using latte::TensorView;
  const latte::Device d{};
  latte::SparseMlaArgs a;
  a.q = TensorView::contiguous(arena(), DType::bf16, {1, 64, 576}, d);
  a.kv_cache = TensorView::contiguous(arena(), DType::u8, {512, 64, 656}, d);
  a.indices = TensorView::contiguous(arena(), DType::i32, {1, 2048}, d);
  a.out = TensorView::contiguous(arena(), DType::bf16, {1, 64, 512}, d);
  a.lse = TensorView::contiguous(arena(), DType::f32, {1, 64}, d);
  a.scale = 0.0625f;
  for (auto _ : state) benchmark::DoNotOptimize(latte::validate(a));
}
BENCHMARK(BM_ValidateSparseMla);

void BM_ValidateIndexerTopk(benchmark::State& state) {
  using latte::DType;
  using latte::TensorView;
  const latte::Device d{};
  latte::IndexerTopkArgs a;
  a.in.q = TensorView::contiguous(arena(), DType::e4m3, {32, 32, 128}, d);
  a.in.q_scale = TensorView::contiguous(arena(), DType::f32, {32, 32}, d);
  a.in.weights = TensorView::contiguous(arena(), DType::f32, {32, 32}, d);
  a.in.k_cache = TensorView::contiguous(arena(), DType::u8, {512, 64, 132}, d);
  a.in.block_table = TensorView::contiguous(arena(), DType::i32, {32, 512}, d);
  a.in.visible_lens = TensorView::contiguous(arena(), DType::i32, {32}, d);
  a.indices = TensorView::contiguous(arena(), DType::i32, {32, 2048}, d);
  for (auto _ : state) benchmark::DoNotOptimize(latte::validate(a));
}
BENCHMARK(BM_ValidateIndexerTopk);

}  // namespace

BENCHMARK_MAIN();
