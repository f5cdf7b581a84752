// cuda.kv_store against cpu.reference (which packs with latte/formats.hpp): the cache bytes
// written must be identical, skipped slots untouched; logical_to_slots identical.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "cuda_indexer/mirror_tensor.hpp"
#include "gpu_test_util.hpp"
#include "latte/api.hpp"
#include "latte/backend.hpp"
#include "latte/context.hpp"
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

// ---- indexer_pool_store: cuda.kv_store against cpu.reference (docs/operations.md) ----------

// Bytes of a tensor's device copy (the host copy stays cpu.reference's).
std::vector<uint8_t> device_bytes(const MirrorTensor& m) {
  std::vector<uint8_t> out(m.bytes());
  if (!out.empty()) LATTE_CUDA_CHECK(cudaMemcpy(out.data(), m.device(), out.size(), cudaMemcpyDeviceToHost));
  return out;
}

// A view of a mirror's host or device copy with its own shape and strides (padded rows).
TensorView strided(const MirrorTensor& m, bool device, DType dtype, std::initializer_list<int64_t> shape,
                   std::initializer_list<int64_t> strides) {
  TensorView v = device ? m.dev_view() : m.host_view();
  v.dtype = dtype;
  v.rank = static_cast<int>(shape.size());
  v.shape = {};
  v.strides = {};
  std::copy(shape.begin(), shape.end(), v.shape.begin());
  std::copy(strides.begin(), strides.end(), v.strides.begin());
  return v;
}

struct PoolFlags {
  Fp8ScaleKind kind = Fp8ScaleKind::amax;
  bool hadamard = false;
  DType gate = DType::bf16;
  DType ape = DType::f32;
};

std::string to_text(const PoolFlags& f) {
  return std::string(f.kind == Fp8ScaleKind::pow2 ? "pow2" : "amax") + (f.hadamard ? " hadamard" : "") +
         " gate " + (f.gate == DType::f32 ? "f32" : "bf16") + " ape " + (f.ape == DType::f32 ? "f32" : "bf16");
}

std::vector<PoolFlags> all_pool_flags() {
  std::vector<PoolFlags> out;
  for (Fp8ScaleKind kind : {Fp8ScaleKind::amax, Fp8ScaleKind::pow2})
    for (bool had : {false, true})
      for (DType gate : {DType::bf16, DType::f32})
        for (DType ape : {DType::f32, DType::bf16}) out.push_back({kind, had, gate, ape});
  return out;
}

// One token of a call: its request row and position (both may be out of range: skipped).
struct PoolToken {
  int32_t row = 0, pos = 0;
};

// Writes v into a bf16 or f32 host copy (bf16: rounded to nearest even).
void put(const MirrorTensor& m, DType dtype, int64_t index, float v) {
  if (dtype == DType::bf16) {
    m.host<uint16_t>()[index] = float_to_bf16(v);
  } else {
    m.host<float>()[index] = v;
  }
}

// The tensors that live across calls: ape, block table, pool pages and state. Rows are padded
// (page stride, state and table strides) and the padding poisoned: it must stay as it was. The
// host copies evolve through cpu.reference, the device copies through cuda.kv_store.
struct PoolWorld {
  int kpool, rows;
  int64_t nb, B, maxb;
  PoolFlags flags;
  int64_t page, bt_stride, st_kg, st_slot, st_row;  // bytes per page; i32 per table row; f32 state strides
  MirrorTensor ape, table, cache, state;
  std::vector<uint8_t> initial_cache;
  std::set<std::pair<int64_t, int64_t>> written;  // (block, pool row) of every completed pool

  PoolWorld(int kp, int bs, int64_t n, int64_t b, int64_t mb, const PoolFlags& f, std::mt19937& rng)
      : kpool(kp), rows(bs / kp), nb(n), B(b), maxb(mb), flags(f),
        page((int64_t{bs / kp} * kIndexBytesPerToken + 15) / 16 * 16 + 16), bt_stride(mb + 3), st_kg(160),
        st_slot(2 * st_kg), st_row((kp - 1) * st_slot + 32) {
    ape = MirrorTensor(f.ape, {kp, kIndexDim});
    table = MirrorTensor(DType::i32, {b * bt_stride});
    cache = MirrorTensor(DType::u8, {n * page});
    state = MirrorTensor(DType::f32, {b * st_row});
    std::uniform_real_distribution<float> a(-1.5f, 1.5f), sv(-3.0f, 3.0f);
    for (int64_t i = 0; i < kp * kIndexDim; ++i) put(ape, f.ape, i, a(rng));
    for (int64_t i = 0; i < b * bt_stride; ++i) table.host<int32_t>()[i] = -77;  // padding and unused columns
    for (std::size_t i = 0; i < cache.bytes(); ++i) cache.host<uint8_t>()[i] = static_cast<uint8_t>(rng());
    // The state before any call: arbitrary f32 (read for pools whose earlier positions no call held).
    for (int64_t i = 0; i < b * st_row; ++i) state.host<float>()[i] = sv(rng);
    initial_cache.assign(cache.host<uint8_t>(), cache.host<uint8_t>() + cache.bytes());
  }
  [[nodiscard]] int64_t bs() const { return int64_t{kpool} * rows; }
  [[nodiscard]] int64_t max_len() const { return maxb * bs(); }
  int32_t& block(int64_t r, int64_t j) const { return table.host<int32_t>()[r * bt_stride + j]; }
  void upload() {
    for (MirrorTensor* m : {&ape, &table, &cache, &state}) m->upload();
  }
  // The block of a token, or -1 when it is skipped.
  [[nodiscard]] int64_t live_block(int64_t row, int64_t pos) const {
    if (row < 0 || row >= B || pos < 0 || pos >= max_len()) return -1;
    const int64_t blk = block(row, pos / bs());
    return blk >= 0 && blk < nb ? blk : -1;
  }
  [[nodiscard]] TensorView ape_view(bool dev) const { return dev ? ape.dev_view() : ape.host_view(); }
  [[nodiscard]] TensorView table_view(bool dev) const {
    return strided(table, dev, DType::i32, {B, maxb}, {bt_stride, 1});
  }
  [[nodiscard]] TensorView cache_view(bool dev) const {
    return strided(cache, dev, DType::u8, {nb, rows, kIndexBytesPerToken}, {page, kIndexBytesPerToken, 1});
  }
  [[nodiscard]] TensorView state_view(bool dev) const {
    return strided(state, dev, DType::f32, {B, kpool - 1, 2, kIndexDim}, {st_row, st_slot, st_kg, 1});
  }

  // Page bytes and state of the device equal cpu.reference's (its host copies). On a difference
  // the first one is named and the device is reset to the reference (no cascade).
  bool expect_same(const std::string& what) {
    const std::vector<uint8_t> got = device_bytes(cache);
    const uint8_t* want = cache.host<uint8_t>();
    for (std::size_t i = 0; i < got.size(); ++i) {
      if (got[i] == want[i]) continue;
      const int64_t blk = static_cast<int64_t>(i) / page, in = static_cast<int64_t>(i) % page;
      const std::string where = in < rows * 128 ? "code " + std::to_string(in % 128) + " of row " + std::to_string(in / 128)
                                                : "scale byte " + std::to_string(in - rows * 128);
      ADD_FAILURE() << what << ": page byte " << i << " (block " << blk << ", " << where << ") is "
                    << int{got[i]} << ", cpu.reference " << int{want[i]};
      upload();
      return false;
    }
    const std::vector<uint8_t> st = device_bytes(state);
    if (std::memcmp(st.data(), state.host<uint8_t>(), st.size()) != 0) {
      for (std::size_t i = 0; i < st.size() / 4; ++i) {
        float g = 0.0f;
        std::memcpy(&g, st.data() + 4 * i, 4);
        const float w = state.host<float>()[i];
        if (std::memcmp(&g, &w, 4) == 0) continue;
        const auto e = static_cast<int64_t>(i);
        ADD_FAILURE() << what << ": pool_state float " << i << " (row " << e / st_row << ", slot "
                      << (e % st_row) / st_slot << ", " << ((e % st_slot) / st_kg ? "gate" : "k") << ", dim "
                      << e % st_kg << ") is " << g << ", cpu.reference " << w;
        break;
      }
      upload();
      return false;
    }
    return true;
  }

  // Bytes of the pages outside every completed pool's row (other rows, scales, page padding) are
  // as they were before the first call.
  bool expect_untouched(const std::string& what) const {
    const std::vector<uint8_t> got = device_bytes(cache);
    std::vector<uint8_t> mask(got.size(), 0);
    for (const auto& [blk, row] : written) {
      std::fill_n(mask.begin() + blk * page + row * 128, 128, 1);
      std::fill_n(mask.begin() + blk * page + rows * 128 + row * 4, 4, 1);
    }
    for (std::size_t i = 0; i < got.size(); ++i) {
      if (mask[i] || got[i] == initial_cache[i]) continue;
      ADD_FAILURE() << what << ": page byte " << i << " (block " << static_cast<int64_t>(i) / page
                    << ") outside the completed pools' rows changed";
      return false;
    }
    return true;
  }
};

// The workspace the kernel asks for, and the kernel, for a call's spec (as latte::run makes it).
struct PoolKernel {
  std::unique_ptr<Kernel> kernel;
  DeviceBuffer ws;
  explicit PoolKernel(const OpArgs& device_args) {
    kernel = Registry::global().get("cuda.kv_store")->make(spec_from_args(device_args), describe_device("cuda:0"));
    ws = DeviceBuffer(kernel->workspace_bytes());
  }
  void run(const OpArgs& args, cudaStream_t stream = nullptr) {
    RunContext ctx;
    ctx.stream = stream;
    ctx.workspace = ws.get();
    ctx.workspace_bytes = ws.bytes();
    kernel->run(args, ctx);
  }
};

// One call's per-token tensors (k and gate rows padded to 136 values).
struct PoolCall {
  int64_t T;
  DType gate_dtype;
  MirrorTensor k, gate, pos, req;
  PoolCall(const std::vector<PoolToken>& toks, DType gd, std::mt19937& rng, float gate_range = 4.0f)
      : T(static_cast<int64_t>(toks.size())), gate_dtype(gd), k(DType::bf16, {T * 136 + 1}),
        gate(gd, {T * 136 + 1}), pos(DType::i32, {T}), req(DType::i32, {T}) {
    std::normal_distribution<float> kv(0.0f, 1.0f);
    std::uniform_real_distribution<float> gv(-gate_range, gate_range);
    for (int64_t t = 0; t < T; ++t) {
      // Rows of different magnitudes (the per-row scale), a few rows all zero.
      const float mag = t % 11 == 3 ? 0.0f : (t % 7 == 2 ? 1e-3f : (t % 7 == 5 ? 200.0f : 1.0f));
      for (int d = 0; d < kIndexDim; ++d) {
        k.host<uint16_t>()[t * 136 + d] = float_to_bf16(mag * kv(rng));
        put(gate, gd, t * 136 + d, gv(rng));
      }
      pos.host<int32_t>()[t] = toks[static_cast<std::size_t>(t)].pos;
      req.host<int32_t>()[t] = toks[static_cast<std::size_t>(t)].row;
    }
    for (MirrorTensor* m : {&k, &gate, &pos, &req}) m->upload();
  }
  IndexerPoolStoreArgs args(const PoolWorld& w, bool dev, bool with_request) const {
    IndexerPoolStoreArgs a;
    a.k = strided(k, dev, DType::bf16, {T, kIndexDim}, {136, 1});
    a.gate = strided(gate, dev, gate_dtype, {T, kIndexDim}, {136, 1});
    a.ape = w.ape_view(dev);
    a.positions = dev ? pos.dev_view() : pos.host_view();
    if (with_request) a.token_request = dev ? req.dev_view() : req.host_view();
    a.block_table = w.table_view(dev);
    a.k_cache = w.cache_view(dev);
    a.pool_state = w.state_view(dev);
    a.scale_kind = w.flags.kind;
    a.hadamard = w.flags.hadamard;
    a.kpool = w.kpool;
    return a;
  }
};

// Runs one call on both backends (the same inputs), records the rows it completes, compares.
bool pool_call(PoolWorld& w, const std::vector<PoolToken>& toks, std::mt19937& rng, const std::string& what,
               bool with_request = true) {
  const PoolCall call(toks, w.flags.gate, rng);
  const IndexerPoolStoreArgs h = call.args(w, false, with_request), d = call.args(w, true, with_request);
  for (int64_t t = 0; t < call.T; ++t) {
    const int64_t row = with_request ? toks[static_cast<std::size_t>(t)].row : t;
    const int64_t pos = toks[static_cast<std::size_t>(t)].pos;
    const int64_t blk = w.live_block(row, pos);
    if (blk >= 0 && pos % w.kpool == w.kpool - 1) w.written.insert({blk, (pos % w.bs()) / w.kpool});
  }
  Registry::global().get("cpu.reference")->make(spec_from_args(h), DeviceInfo{})->run(h, RunContext{});
  PoolKernel kernel(d);
  kernel.run(d);
  LATTE_CUDA_CHECK(cudaDeviceSynchronize());
  return w.expect_same(what);
}

// Tokens that every rule skips: negative positions, rows out of range, positions past the
// table (and, through the world's block table, missing and out-of-range blocks).
std::vector<PoolToken> skipped_tokens(const PoolWorld& w) {
  const auto past = static_cast<int32_t>(w.max_len());
  return {{0, -1}, {1, -9}, {static_cast<int32_t>(w.B), 3}, {-1, 2}, {0, past}, {1, past + 77}};
}

// Merges per-request runs of tokens in a random interleaving that keeps each request's order,
// then sprinkles `extra` tokens at random places.
std::vector<PoolToken> interleave(std::vector<std::vector<PoolToken>> runs, const std::vector<PoolToken>& extra,
                                  std::mt19937& rng) {
  std::vector<PoolToken> out;
  std::vector<std::size_t> at(runs.size(), 0);
  while (true) {
    std::vector<std::size_t> open;
    for (std::size_t r = 0; r < runs.size(); ++r)
      if (at[r] < runs[r].size()) open.push_back(r);
    if (open.empty()) break;
    const std::size_t r = open[std::uniform_int_distribution<std::size_t>(0, open.size() - 1)(rng)];
    out.push_back(runs[r][at[r]++]);
  }
  for (const PoolToken& e : extra)
    out.insert(out.begin() + static_cast<std::ptrdiff_t>(std::uniform_int_distribution<std::size_t>(0, out.size())(rng)), e);
  return out;
}

struct PoolGeometry {
  int kpool, bs;  // tokens per pool, tokens per block
};
std::string PoolGeometryName(const ::testing::TestParamInfo<PoolGeometry>& info) {
  return "kpool" + std::to_string(info.param.kpool) + "_bs" + std::to_string(info.param.bs);
}

class CudaPoolStore : public ::testing::TestWithParam<PoolGeometry> {
 protected:
  void SetUp() override { LATTE_SKIP_WITHOUT_GPU(); }
};

// A serving sequence per flag set (scale kind, Hadamard, gate and ape dtypes): a prefill of a few
// hundred tokens over 4 requests in two calls whose boundaries are not multiples of kpool (one
// request starting mid-pool, so its first pool reads the state; one request with a missing and
// an out-of-range block), skipped tokens in every call, then decode steps of one token per
// request per call. After every call the pages and the state equal cpu.reference's byte for
// byte; at the end the bytes outside the completed pools' rows are as they were.
TEST_P(CudaPoolStore, ServingSequenceMatchesReference) {
  const PoolGeometry g = GetParam();
  for (const PoolFlags& f : all_pool_flags()) {
    std::mt19937 rng(static_cast<uint32_t>(1000 + 17 * g.kpool + g.bs + (f.hadamard ? 5 : 0)));
    const std::string what = "kpool " + std::to_string(g.kpool) + " bs " + std::to_string(g.bs) + " " + to_text(f);
    const int steps = std::max(6, g.kpool + 3);
    const std::vector<int64_t> start = {0, 0, 5, 0}, prefill = {150, 97, 61, 3 * g.bs + 5};
    int64_t longest = 0;
    for (std::size_t r = 0; r < start.size(); ++r) longest = std::max(longest, start[r] + prefill[r] + steps);
    const int64_t B = 4, maxb = (longest + g.bs - 1) / g.bs + 1, nb = B * maxb + 5;
    PoolWorld w(g.kpool, g.bs, nb, B, maxb, f, rng);
    std::vector<int32_t> blocks(static_cast<std::size_t>(nb));
    std::iota(blocks.begin(), blocks.end(), 0);
    std::shuffle(blocks.begin(), blocks.end(), rng);
    for (int64_t r = 0; r < B; ++r)
      for (int64_t j = 0; j < maxb; ++j) w.block(r, j) = blocks[static_cast<std::size_t>(r * maxb + j)];
    w.block(3, 1) = -1;                                // missing block: its tokens are skipped
    w.block(3, 2) = static_cast<int32_t>(nb + 3);      // past the cache: skipped too
    w.upload();

    std::vector<int64_t> next = start;
    const auto run_of = [&](int64_t r, int64_t n) {
      std::vector<PoolToken> out;
      for (int64_t i = 0; i < n; ++i) out.push_back({static_cast<int32_t>(r), static_cast<int32_t>(next[r]++)});
      return out;
    };
    bool ok = true;
    // The prefill in two calls, cut inside a pool.
    for (int part = 0; part < 2 && ok; ++part) {
      std::vector<std::vector<PoolToken>> runs;
      for (int64_t r = 0; r < B; ++r) {
        int64_t first = prefill[static_cast<std::size_t>(r)] * 2 / 5;
        if (first % g.kpool == 0) ++first;
        runs.push_back(run_of(r, part == 0 ? first : start[static_cast<std::size_t>(r)] + prefill[static_cast<std::size_t>(r)] - next[r]));
      }
      ok = pool_call(w, interleave(runs, skipped_tokens(w), rng), rng, what + ", prefill call " + std::to_string(part));
    }
    for (int s = 0; s < steps && ok; ++s) {
      std::vector<std::vector<PoolToken>> runs;
      for (int64_t r = 0; r < B; ++r) runs.push_back(run_of(r, 1));
      std::vector<PoolToken> extra;
      if (s % 3 == 1) extra = {skipped_tokens(w)[static_cast<std::size_t>(s % 6)]};
      ok = pool_call(w, interleave(runs, extra, rng), rng, what + ", decode step " + std::to_string(s));
    }
    if (ok) ok = w.expect_untouched(what);
    if (!ok) return;  // the first failing flag set is enough
    EXPECT_GT(w.written.size(), 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Geometries, CudaPoolStore,
                         ::testing::Values(PoolGeometry{4, 4}, PoolGeometry{4, 16}, PoolGeometry{4, 64},
                                           PoolGeometry{2, 4}, PoolGeometry{2, 16}, PoolGeometry{2, 64},
                                           PoolGeometry{3, 12}, PoolGeometry{3, 48}, PoolGeometry{16, 16},
                                           PoolGeometry{16, 64}),
                         PoolGeometryName);

class CudaPoolStoreCalls : public ::testing::Test {
 protected:
  void SetUp() override { LATTE_SKIP_WITHOUT_GPU(); }
};

// Calls that hold one (request, position) twice or more, in any token order: the state and the
// gathered slots take the last token there, and so does the key of a pool completed twice
// (cuda.kv_store lands the completing position's last token, as cpu.reference). Every page byte
// and the state equal cpu.reference's.
TEST_F(CudaPoolStoreCalls, RepeatedPositionsAndAnyOrderMatchReference) {
  for (int kpool : {4, 2, 3, 16}) {
    for (const PoolFlags& f : {PoolFlags{Fp8ScaleKind::amax, false, DType::bf16, DType::f32},
                               PoolFlags{Fp8ScaleKind::pow2, true, DType::f32, DType::bf16}}) {
      std::mt19937 rng(static_cast<uint32_t>(500 + kpool));
      const std::string what = "kpool " + std::to_string(kpool) + " " + to_text(f);
      const int bs = kpool * 4;
      const int64_t B = 3, maxb = 12, nb = B * maxb;
      PoolWorld w(kpool, bs, nb, B, maxb, f, rng);
      for (int64_t r = 0; r < B; ++r)
        for (int64_t j = 0; j < maxb; ++j) w.block(r, j) = static_cast<int32_t>(r * maxb + (j * 5) % maxb);
      w.upload();
      bool ok = true;
      for (int call = 0; call < 6 && ok; ++call) {
        std::vector<PoolToken> toks;
        // Positions around a few pools of each request, many repeated, in random order.
        std::uniform_int_distribution<int> pos(0, 3 * kpool + 1), row(0, static_cast<int>(B) - 1);
        const int base = call * kpool * 2;
        for (int i = 0; i < 40 + 10 * call; ++i) toks.push_back({row(rng), base + pos(rng)});
        // Every request: the last slot of a pool twice, one earlier slot three times.
        for (int32_t r = 0; r < B; ++r) {
          toks.push_back({r, base + kpool - 1});
          toks.push_back({r, base + kpool - 1});
          for (int i = 0; i < 3; ++i) toks.push_back({r, base + kpool + 0});
        }
        std::shuffle(toks.begin(), toks.end(), rng);
        for (const PoolToken& e : skipped_tokens(w)) toks.push_back(e);
        std::shuffle(toks.begin(), toks.end(), rng);
        ok = pool_call(w, toks, rng, what + ", call " + std::to_string(call));
      }
      if (ok) ok = w.expect_untouched(what);
      if (!ok) return;
    }
  }
}

// Without token_request token t is request t (B >= T); with T = 0 nothing is written. Also a
// block table whose rows are all missing blocks.
TEST_F(CudaPoolStoreCalls, DefaultRequestsAndEmptyCalls) {
  for (int kpool : {4, 3}) {
    std::mt19937 rng(static_cast<uint32_t>(600 + kpool));
    const PoolFlags f{Fp8ScaleKind::amax, kpool == 4, DType::bf16, DType::f32};
    const int bs = kpool * 2;
    const int64_t T = 70, B = T + 3, maxb = 4, nb = B * maxb;
    PoolWorld w(kpool, bs, nb, B, maxb, f, rng);
    // Distinct blocks (two requests never share a page row), one entry in 6 missing or past the cache.
    std::vector<int32_t> blocks(static_cast<std::size_t>(B * maxb));
    std::iota(blocks.begin(), blocks.end(), 0);
    std::shuffle(blocks.begin(), blocks.end(), rng);
    for (int64_t r = 0; r < B; ++r)
      for (int64_t j = 0; j < maxb; ++j) {
        const int32_t b = blocks[static_cast<std::size_t>(r * maxb + j)];
        w.block(r, j) = b % 6 == 1 ? -1 : (b % 6 == 4 ? static_cast<int32_t>(nb + b) : b);
      }
    w.upload();
    std::vector<PoolToken> toks;
    std::uniform_int_distribution<int> pos(-2, static_cast<int>(maxb * bs) + 3);
    for (int64_t t = 0; t < T; ++t) toks.push_back({0, t % 3 == 0 ? static_cast<int32_t>(t % (maxb * bs) / kpool * kpool + kpool - 1) : pos(rng)});
    const std::string what = "kpool " + std::to_string(kpool) + " without token_request";
    ASSERT_TRUE(pool_call(w, toks, rng, what, false));
    ASSERT_TRUE(pool_call(w, {}, rng, what + ", T = 0", false));
    ASSERT_TRUE(pool_call(w, {}, rng, what + ", T = 0 with token_request", true));
    EXPECT_TRUE(w.expect_untouched(what));
    EXPECT_GT(w.written.size(), 0u);
  }
}

// The eager call and its CUDA graph (captured once, replayed over a stale workspace of 0x5A, 0xFF
// and 0x00 bytes with the pages and the state reset) write the same bytes, equal to cpu.reference's.
TEST_F(CudaPoolStoreCalls, GraphReplayEqualsEager) {
  std::mt19937 rng(71);
  const PoolFlags f{Fp8ScaleKind::pow2, true, DType::bf16, DType::f32};
  const int kpool = 4, bs = 64;
  const int64_t B = 6, maxb = 8, nb = B * maxb;
  PoolWorld w(kpool, bs, nb, B, maxb, f, rng);
  for (int64_t r = 0; r < B; ++r)
    for (int64_t j = 0; j < maxb; ++j) w.block(r, j) = static_cast<int32_t>((r * maxb + j * 7) % nb);
  w.upload();
  std::vector<std::vector<PoolToken>> runs;
  for (int32_t r = 0; r < B; ++r) {
    runs.emplace_back();
    for (int32_t p = 3 * r; p < 3 * r + 60 + 13 * r; ++p) runs.back().push_back({r, p});
  }
  const std::vector<PoolToken> toks = interleave(runs, skipped_tokens(w), rng);
  const PoolCall call(toks, f.gate, rng);
  const IndexerPoolStoreArgs h = call.args(w, false, true), d = call.args(w, true, true);
  const std::vector<uint8_t> cache0(w.cache.host<uint8_t>(), w.cache.host<uint8_t>() + w.cache.bytes());
  const std::vector<uint8_t> state0(w.state.host<uint8_t>(), w.state.host<uint8_t>() + w.state.bytes());
  Registry::global().get("cpu.reference")->make(spec_from_args(h), DeviceInfo{})->run(h, RunContext{});
  cudaStream_t stream = nullptr;
  LATTE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  PoolKernel kernel(d);
  LATTE_CUDA_CHECK(cudaMemset(kernel.ws.get(), 0x5A, kernel.ws.bytes()));
  kernel.run(d, stream);  // eager
  LATTE_CUDA_CHECK(cudaStreamSynchronize(stream));
  ASSERT_TRUE(w.expect_same("eager"));
  const std::vector<uint8_t> eager_cache = device_bytes(w.cache), eager_state = device_bytes(w.state);

  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  LATTE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  kernel.run(d, stream);
  LATTE_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  LATTE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int rep = 0; rep < 3; ++rep) {
    LATTE_CUDA_CHECK(cudaMemcpy(w.cache.device(), cache0.data(), cache0.size(), cudaMemcpyHostToDevice));
    LATTE_CUDA_CHECK(cudaMemcpy(w.state.device(), state0.data(), state0.size(), cudaMemcpyHostToDevice));
    LATTE_CUDA_CHECK(cudaMemset(kernel.ws.get(), rep == 0 ? 0x5A : (rep == 1 ? 0xFF : 0x00), kernel.ws.bytes()));
    LATTE_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    LATTE_CUDA_CHECK(cudaStreamSynchronize(stream));
    EXPECT_TRUE(device_bytes(w.cache) == eager_cache) << "replay " << rep << ": pages differ from the eager call";
    EXPECT_TRUE(device_bytes(w.state) == eager_state) << "replay " << rep << ": state differs from the eager call";
  }
  LATTE_CUDA_CHECK(cudaGraphExecDestroy(exec));
  LATTE_CUDA_CHECK(cudaGraphDestroy(graph));
  LATTE_CUDA_CHECK(cudaStreamDestroy(stream));
}

// The float64 exp of the GPU and the host's std::exp may differ in the last bit; a pool value
// then rounds differently only next to a rounding boundary. Over a large random run (2^18 tokens,
// 2^16 pools of 4, gates over [-12, 12]: 8.4M pooled values without the rotation, and a smaller
// run with it) every code and scale byte is counted: the test wants 0 and prints the count.
TEST_F(CudaPoolStoreCalls, LargeRandomRunCountsDifferingCodes) {
  for (bool had : {false, true}) {
    std::mt19937 rng(had ? 92 : 91);
    const PoolFlags f{Fp8ScaleKind::amax, had, DType::f32, DType::f32};
    const int kpool = 4, bs = 64;
    const int64_t B = 64, per_request = had ? 1024 : 4096, maxb = per_request / bs, nb = B * maxb;
    PoolWorld w(kpool, bs, nb, B, maxb, f, rng);
    for (int64_t r = 0; r < B; ++r)
      for (int64_t j = 0; j < maxb; ++j) w.block(r, j) = static_cast<int32_t>(j * B + r);
    w.upload();
    std::vector<PoolToken> toks;
    for (int32_t r = 0; r < B; ++r)
      for (int32_t p = 0; p < per_request; ++p) toks.push_back({r, p});
    std::shuffle(toks.begin(), toks.end(), rng);
    const PoolCall call(toks, f.gate, rng, 12.0f);
    const IndexerPoolStoreArgs h = call.args(w, false, true), d = call.args(w, true, true);
    Registry::global().get("cpu.reference")->make(spec_from_args(h), DeviceInfo{})->run(h, RunContext{});
    PoolKernel kernel(d);
    kernel.run(d);
    LATTE_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<uint8_t> got = device_bytes(w.cache);
    int64_t codes = 0, scales = 0, rows_differing = 0;
    const int64_t rows = bs / kpool;
    for (int64_t blk = 0; blk < nb; ++blk) {
      for (int64_t row = 0; row < rows; ++row) {
        const int64_t c0 = blk * w.page + row * 128, s0 = blk * w.page + rows * 128 + row * 4;
        int64_t c = 0;
        for (int64_t i = 0; i < 128; ++i) c += got[c0 + i] != w.cache.host<uint8_t>()[c0 + i];
        const bool s = std::memcmp(got.data() + s0, w.cache.host<uint8_t>() + s0, 4) != 0;
        codes += c;
        scales += s;
        rows_differing += (c > 0 || s);
      }
    }
    std::printf("[ pool store ] %s: %lld pools, %lld differing codes, %lld differing scales, %lld differing rows\n",
                had ? "hadamard" : "no rotation", static_cast<long long>(nb * rows), static_cast<long long>(codes),
                static_cast<long long>(scales), static_cast<long long>(rows_differing));
    RecordProperty(had ? "differing_codes_hadamard" : "differing_codes", std::to_string(codes));
    EXPECT_EQ(codes, 0);
    EXPECT_EQ(scales, 0);
    EXPECT_TRUE(w.expect_same(had ? "large run, hadamard" : "large run"));
  }
}

// A call of more tokens than the kernel's workspace holds is refused before any launch, naming
// the bytes; the workspace grows with max_tokens.
TEST_F(CudaPoolStoreCalls, SmallWorkspaceIsRefused) {
  std::mt19937 rng(5);
  const PoolFlags f{};
  PoolWorld w(4, 16, 8, 2, 4, f, rng);
  for (int64_t j = 0; j < 4; ++j) w.block(0, j) = w.block(1, j) = static_cast<int32_t>(j);
  w.upload();
  std::vector<PoolToken> toks;
  for (int32_t p = 0; p < 20; ++p) toks.push_back({0, p});
  const PoolCall call(toks, f.gate, rng);
  const IndexerPoolStoreArgs d = call.args(w, true, true);
  AttentionSpec spec = spec_from_args(d);
  spec.max_tokens = 4;
  const auto small = Registry::global().get("cuda.kv_store")->make(spec, describe_device("cuda:0"));
  spec.max_tokens = 4096;
  EXPECT_GT(Registry::global().get("cuda.kv_store")->make(spec, describe_device("cuda:0"))->workspace_bytes(),
            small->workspace_bytes());
  DeviceBuffer ws(small->workspace_bytes());
  RunContext ctx;
  ctx.workspace = ws.get();
  ctx.workspace_bytes = ws.bytes();
  try {
    small->run(d, ctx);
    FAIL() << "a call of 20 tokens ran on a workspace for 4";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("a call of 20 tokens needs"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(w.expect_untouched("refused call"));
}

// latte::run selects cuda.kv_store for CUDA tensors (its own workspace) and writes what
// cpu.reference writes.
TEST_F(CudaPoolStoreCalls, LatteRunSelectsCudaKvStore) {
  std::mt19937 rng(8);
  const PoolFlags f{Fp8ScaleKind::amax, true, DType::bf16, DType::bf16};
  PoolWorld w(4, 64, 6, 2, 3, f, rng);
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t j = 0; j < 3; ++j) w.block(r, j) = static_cast<int32_t>(r * 3 + j);
  w.upload();
  std::vector<PoolToken> toks;
  for (int32_t p = 0; p < 150; ++p) toks.push_back({p % 2, p / 2});
  const PoolCall call(toks, f.gate, rng);
  const IndexerPoolStoreArgs h = call.args(w, false, true), d = call.args(w, true, true);
  EXPECT_EQ(latte::indexer_pool_store(h), "cpu.reference");
  EXPECT_EQ(latte::indexer_pool_store(d), "cuda.kv_store");
  LATTE_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_TRUE(w.expect_same("latte::run"));
}

// Host-only: cuda.kv_store takes GLM-5.3-Flash's indexer_pool_store on every architecture it
// runs on, and says how it computes it.
TEST(CudaKvStoreCaps, TakesThePooledIndexerStore) {
  const auto be = Registry::global().find("cuda.kv_store");
  if (!be) GTEST_SKIP() << "skipped: cuda.kv_store not built";
  AttentionOptions o;
  o.max_tokens = 8192;
  const AttentionSpec spec = attention_spec(load_model("glm-5.3-flash"), Op::indexer_pool_store, o);
  ASSERT_EQ(spec.kpool, 4);
  for (const char* arch : {"sm_80", "sm_90", "sm_120"}) {
    EXPECT_TRUE(check(*be, spec, describe_device(arch)).empty()) << arch;
  }
  const auto kernel = be->make(spec, describe_device("sm_90"));
  EXPECT_EQ(kernel->workspace_bytes(), std::size_t{32} * 16384);  // two tables of bit_ceil(2 x 8192) entries
  // The default policy ranks it by the cache-writes rule, as the other cache writes.
  const Selection s = Context::global().explain(spec, describe_device("sm_90"));
  EXPECT_EQ(s.chosen, "cuda.kv_store") << s.explain();
  EXPECT_NE(s.explain().find("cuda-cache-writes"), std::string::npos) << s.explain();
  EXPECT_NE(kernel->describe().find("one warp per completing token"), std::string::npos) << kernel->describe();
}

}  // namespace
}  // namespace latte::testing
