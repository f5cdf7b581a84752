// cuda.kv_store against cpu.reference (which packs with latte/formats.hpp): the cache bytes
// written must be identical, skipped slots untouched; logical_to_slots identical.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "cuda_indexer/mirror_tensor.hpp"
#include "gpu_test_util.hpp"
#include "latte/api.hpp"
#include "latte/backend.hpp"
#include "latte/device.hpp"
#include "latte/error.hpp"
#include "latte/formats.hpp"
#include "latte/ops.hpp"
#include "latte/registry.hpp"
#include "latte/spec.hpp"

namespace latte::testing {
namespace {

std::unique_ptr<Kernel> make(const char* id, Op op, const DeviceInfo& dev,
                             CacheFormat format = CacheFormat::bf16) {
  AttentionSpec spec;
  spec.op = op;
  spec.head_dim = op == Op::indexer_k_store ? kIndexDim : kQkDim;
  spec.kv_cache = format;
  return Registry::global().get(id)->make(spec, dev);
}

// Each backend's kernel made for the call's own spec (its cache format among it), as latte::run does.
void run_both(const OpArgs& host, const OpArgs& device, Op op, bool check = false) {
  ASSERT_EQ(op_of(host), op);
  Registry::global().get("cpu.reference")->make(spec_from_args(host), DeviceInfo{})->run(host, RunContext{});
  RunContext ctx;
  ctx.check_indices = check;
  Registry::global().get("cuda.kv_store")->make(spec_from_args(device), describe_device("cuda:0"))->run(device, ctx);
  LATTE_CUDA_CHECK(cudaDeviceSynchronize());
}

// Values over a wide range per 128-group: some groups tiny (subnormal e4m3 codes, pow2 scales
// below 2^-126 * 448 are not reached), one all-zero group, the rest normal.
float draw(std::mt19937& rng, int64_t t, int group) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  if ((t + group) % 7 == 3) return 0.0f;
  const float mag = (t + group) % 5 == 1 ? 1e-6f : ((t + group) % 5 == 2 ? 300.0f : 1.0f);
  return bf16_to_float(float_to_bf16(mag * normal(rng)));
}

std::vector<int32_t> slot_mapping(std::mt19937& rng, int64_t T, int64_t num_slots) {
  std::vector<int32_t> slots(static_cast<std::size_t>(num_slots));
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), rng);
  std::vector<int32_t> m(static_cast<std::size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    m[static_cast<std::size_t>(t)] = slots[static_cast<std::size_t>(t)];
    if (t % 9 == 4) m[static_cast<std::size_t>(t)] = -1;                                   // skip
    if (t % 13 == 6) m[static_cast<std::size_t>(t)] = static_cast<int32_t>(num_slots + t);  // past the cache: skip
  }
  return m;
}

class CudaKvStore : public ::testing::Test {
 protected:
  void SetUp() override { LATTE_SKIP_WITHOUT_GPU(); }
};

TEST_F(CudaKvStore, MlaCacheBytesMatchFormats) {
  std::mt19937 rng(31);
  for (CacheFormat fmt : {CacheFormat::bf16, CacheFormat::fp8_ds_mla}) {
    for (Fp8ScaleKind kind : {Fp8ScaleKind::amax, Fp8ScaleKind::pow2}) {
      const int64_t T = 300, nb = 9, bs = 64;
      MirrorTensor latent(DType::bf16, {T, kLatentDim}), rope(DType::bf16, {T, kRopeDim});
      MirrorTensor sm(DType::i32, {T});
      const bool fp8 = fmt == CacheFormat::fp8_ds_mla;
      MirrorTensor cache = fp8 ? MirrorTensor(DType::u8, {nb, bs, kFp8DsMlaBytes}) : MirrorTensor(DType::bf16, {nb, bs, kQkDim});
      for (int64_t t = 0; t < T; ++t) {
        for (int i = 0; i < kLatentDim; ++i) latent.host<uint16_t>()[t * kLatentDim + i] = float_to_bf16(draw(rng, t, i / 128));
        for (int i = 0; i < kRopeDim; ++i) rope.host<uint16_t>()[t * kRopeDim + i] = float_to_bf16(draw(rng, t, 5));
      }
      const std::vector<int32_t> m = slot_mapping(rng, T, nb * bs);
      std::memcpy(sm.host<int32_t>(), m.data(), m.size() * 4);
      // Same random "old" contents in both caches: skipped slots must stay as they were.
      for (std::size_t i = 0; i < cache.bytes(); ++i) cache.host<uint8_t>()[i] = static_cast<uint8_t>(rng());
      for (MirrorTensor* x : {&latent, &rope, &sm, &cache}) x->upload();
      KvStoreArgs h, d;
      h.latent = latent.host_view(); d.latent = latent.dev_view();
      h.rope = rope.host_view(); d.rope = rope.dev_view();
      h.slot_mapping = sm.host_view(); d.slot_mapping = sm.dev_view();
      h.kv_cache = cache.host_view(); d.kv_cache = cache.dev_view();
      h.scale_kind = d.scale_kind = kind;
      run_both(h, d, Op::kv_store);
      std::vector<uint8_t> want(cache.host<uint8_t>(), cache.host<uint8_t>() + cache.bytes());
      cache.download();
      int64_t first_bad = -1;
      for (std::size_t i = 0; i < want.size() && first_bad < 0; ++i)
        if (want[i] != cache.host<uint8_t>()[i]) first_bad = static_cast<int64_t>(i);
      EXPECT_EQ(first_bad, -1) << "format " << static_cast<int>(fmt) << " scale " << static_cast<int>(kind)
                               << ": first differing byte " << first_bad;
      if (!fp8) break;  // bf16 ignores the scale kind
    }
  }
}

TEST_F(CudaKvStore, IndexerKPagesMatchFormats) {
  std::mt19937 rng(32);
  for (int bs : {64, 4, 1}) {
    for (Fp8ScaleKind kind : {Fp8ScaleKind::amax, Fp8ScaleKind::pow2}) {
      const int64_t T = 200, nb = 300 / bs + 3;
      MirrorTensor k(DType::bf16, {T, kIndexDim}), sm(DType::i32, {T});
      // bs = 1 gives 132-byte pages: the validation layer needs 16-byte page strides, so pad.
      const int64_t page = (static_cast<int64_t>(bs) * kIndexBytesPerToken + 15) / 16 * 16;
      MirrorTensor cache(DType::u8, {nb * page});
      for (int64_t t = 0; t < T; ++t)
        for (int i = 0; i < kIndexDim; ++i) k.host<uint16_t>()[t * kIndexDim + i] = float_to_bf16(draw(rng, t, 0));
      const std::vector<int32_t> m = slot_mapping(rng, T, nb * bs);
      std::memcpy(sm.host<int32_t>(), m.data(), m.size() * 4);
      for (std::size_t i = 0; i < cache.bytes(); ++i) cache.host<uint8_t>()[i] = static_cast<uint8_t>(rng());
      for (MirrorTensor* x : {&k, &sm, &cache}) x->upload();
      auto cache_view = [&](bool device) {
        TensorView v = device ? cache.dev_view() : cache.host_view();
        v.rank = 3;
        v.shape = {nb, bs, kIndexBytesPerToken, 0, 0, 0};
        v.strides = {page, kIndexBytesPerToken, 1, 0, 0, 0};
        return v;
      };
      IndexerKStoreArgs h, d;
      h.k = k.host_view(); d.k = k.dev_view();
      h.slot_mapping = sm.host_view(); d.slot_mapping = sm.dev_view();
      h.k_cache = cache_view(false); d.k_cache = cache_view(true);
      h.scale_kind = d.scale_kind = kind;
      run_both(h, d, Op::indexer_k_store);
      std::vector<uint8_t> want(cache.host<uint8_t>(), cache.host<uint8_t>() + cache.bytes());
      cache.download();
      EXPECT_EQ(std::memcmp(want.data(), cache.host<uint8_t>(), want.size()), 0)
          << "block_size " << bs << " scale " << static_cast<int>(kind);
    }
  }
}

TEST_F(CudaKvStore, LogicalToSlotsMatchesReference) {
  std::mt19937 rng(33);
  const int64_t T = 50, K = 300, B = 4, mb = 20;
  const int bs = 64;
  MirrorTensor pos(DType::i32, {T, K}), bt(DType::i32, {B, mb}), tr(DType::i32, {T});
  MirrorTensor out(DType::i32, {T, K});
  std::uniform_int_distribution<int> p(-3, static_cast<int>(mb * bs + 50));
  for (int64_t i = 0; i < T * K; ++i) pos.host<int32_t>()[i] = (i % 17 == 0) ? -1 : p(rng);
  std::uniform_int_distribution<int> blk(-2, 500);
  for (int64_t i = 0; i < B * mb; ++i) bt.host<int32_t>()[i] = blk(rng);
  bt.host<int32_t>()[5] = 40000000;  // slot past int32: -1
  for (int64_t t = 0; t < T; ++t) tr.host<int32_t>()[t] = static_cast<int32_t>(t % (B + 1)) - (t % 11 == 0 ? 10 : 0);
  for (MirrorTensor* x : {&pos, &bt, &tr}) x->upload();
  out.poison_device(0x44);
  LogicalToSlotsArgs h, d;
  h.positions = pos.host_view(); d.positions = pos.dev_view();
  h.block_table = bt.host_view(); d.block_table = bt.dev_view();
  h.token_request = tr.host_view(); d.token_request = tr.dev_view();
  h.slots = out.host_view(); d.slots = out.dev_view();
  h.block_size = d.block_size = bs;
  run_both(h, d, Op::logical_to_slots);
  std::vector<int32_t> want(out.host<int32_t>(), out.host<int32_t>() + out.numel());
  out.download();
  EXPECT_EQ(std::memcmp(want.data(), out.host<int32_t>(), want.size() * 4), 0);
}

TEST_F(CudaKvStore, CheckModeReportsBadSlot) {
  const int64_t T = 4, nb = 2, bs = 64;
  MirrorTensor k(DType::bf16, {T, kIndexDim}), sm(DType::i32, {T}), cache(DType::u8, {nb, bs, kIndexBytesPerToken});
  sm.host<int32_t>()[2] = static_cast<int32_t>(nb * bs);
  for (MirrorTensor* x : {&k, &sm, &cache}) x->upload();
  IndexerKStoreArgs d;
  d.k = k.dev_view();
  d.slot_mapping = sm.dev_view();
  d.k_cache = cache.dev_view();
  RunContext ctx;
  ctx.check_indices = true;
  EXPECT_THROW(make("cuda.kv_store", Op::indexer_k_store, describe_device("cuda:0"))->run(d, ctx), Error);
}

// Host-only: Kernel::describe() says what each kernel writes and how, by op and cache format
// (no GPU needed: the text depends only on the spec).
// Host-only: cuda.kv_store takes the cache writes of a model without rope (GLM-5.3-Flash,
// head_dim 512) as well as GLM-5's, on every architecture it runs on.
TEST(CudaKvStoreCaps, TakesRowsWithAndWithoutRope) {
  const auto be = Registry::global().find("cuda.kv_store");
  if (!be) GTEST_SKIP() << "skipped: cuda.kv_store not built";
  const AttentionSpec spec = attention_spec(load_model("glm-5.3-flash"), Op::kv_store);
  ASSERT_EQ(spec.head_dim, 512);
  for (const char* arch : {"sm_80", "sm_90", "sm_120"}) {
    EXPECT_TRUE(check(*be, spec, describe_device(arch)).empty()) << arch;
    EXPECT_TRUE(check(*be, attention_spec(load_model("glm-5"), Op::kv_store), describe_device(arch)).empty()) << arch;
  }
}

// Rows without rope: bf16 512-wide, fp8 528-byte and 656-byte rows (bytes 528..655 reserved)
// identical to cpu.reference's, skipped slots and the reserved bytes as they were.
TEST_F(CudaKvStore, RowsWithoutRopeMatchFormats) {
  std::mt19937 rng(34);
  struct Layout {
    DType dtype;
    int64_t width;
  };
  for (const Layout l : {Layout{DType::bf16, kLatentDim}, Layout{DType::u8, kFp8NopeBytes}, Layout{DType::u8, kFp8DsMlaBytes}})
    for (Fp8ScaleKind kind : {Fp8ScaleKind::amax, Fp8ScaleKind::pow2}) {
      if (l.dtype == DType::bf16 && kind == Fp8ScaleKind::pow2) continue;  // bf16 ignores the scale kind
      const int64_t T = 200, nb = 7, bs = 32;
      MirrorTensor latent(DType::bf16, {T, kLatentDim}), sm(DType::i32, {T});
      MirrorTensor cache(l.dtype, {nb, bs, l.width});
      for (int64_t t = 0; t < T; ++t)
        for (int i = 0; i < kLatentDim; ++i) latent.host<uint16_t>()[t * kLatentDim + i] = float_to_bf16(draw(rng, t, i / 128));
      const std::vector<int32_t> m = slot_mapping(rng, T, nb * bs);
      std::memcpy(sm.host<int32_t>(), m.data(), m.size() * 4);
      for (std::size_t i = 0; i < cache.bytes(); ++i) cache.host<uint8_t>()[i] = static_cast<uint8_t>(rng());
      const std::vector<uint8_t> old(cache.host<uint8_t>(), cache.host<uint8_t>() + cache.bytes());
      for (MirrorTensor* x : {&latent, &sm, &cache}) x->upload();
      KvStoreArgs h, d;
      h.latent = latent.host_view(); d.latent = latent.dev_view();
      h.slot_mapping = sm.host_view(); d.slot_mapping = sm.dev_view();
      h.kv_cache = cache.host_view(); d.kv_cache = cache.dev_view();
      h.scale_kind = d.scale_kind = kind;
      h.rope_dim = d.rope_dim = kNoRopeDim;
      run_both(h, d, Op::kv_store);
      std::vector<uint8_t> want(cache.host<uint8_t>(), cache.host<uint8_t>() + cache.bytes());
      cache.download();
      const std::string what = "width " + std::to_string(l.width) + " scale " + std::to_string(static_cast<int>(kind));
      EXPECT_EQ(std::memcmp(want.data(), cache.host<uint8_t>(), want.size()), 0) << what;
      if (l.width == kFp8DsMlaBytes)
        for (int64_t row = 0; row < nb * bs; ++row)
          ASSERT_EQ(std::memcmp(cache.host<uint8_t>() + row * l.width + kFp8NopeBytes, old.data() + row * l.width + kFp8NopeBytes,
                                kFp8DsMlaBytes - kFp8NopeBytes), 0)
              << what << ": reserved bytes of row " << row << " changed";
    }
}

TEST(CudaKvStoreDescribe, NamesTheRowLayoutPerOpAndFormat) {
  if (!Registry::global().find("cuda.kv_store")) GTEST_SKIP() << "skipped: cuda.kv_store not built";
  const DeviceInfo dev = describe_device("sm_120");
  const auto text = [&](Op op, CacheFormat format) { return make("cuda.kv_store", op, dev, format)->describe(); };
  const std::string fp8 = text(Op::kv_store, CacheFormat::fp8_ds_mla);
  EXPECT_NE(fp8.find("4 groups of 128 latent values to e4m3"), std::string::npos) << fp8;
  EXPECT_NE(fp8.find("656-byte row per slot"), std::string::npos) << fp8;
  const std::string bf16 = text(Op::kv_store, CacheFormat::bf16);
  EXPECT_NE(bf16.find("the 576 bf16 values copied"), std::string::npos) << bf16;
  AttentionSpec nope;
  nope.op = Op::kv_store;
  nope.head_dim = kLatentDim;
  nope.kv_cache = CacheFormat::fp8_ds_mla;
  const std::string fp8_nope = Registry::global().get("cuda.kv_store")->make(nope, dev)->describe();
  EXPECT_NE(fp8_nope.find("no rope: the first 528 bytes"), std::string::npos) << fp8_nope;
  const std::string k = text(Op::indexer_k_store, CacheFormat::bf16);
  EXPECT_NE(k.find("128 values to e4m3 with one f32 scale"), std::string::npos) << k;
  const std::string slots = text(Op::logical_to_slots, CacheFormat::bf16);
  EXPECT_NE(slots.find("one thread per (token, position)"), std::string::npos) << slots;
}

}  // namespace
}  // namespace latte::testing
