// The pooled ("C4") indexer of GLM-5.3-Flash on cpu.reference, against this file's own float64
// reading of docs/operations.md: indexer_pool_store's pool key and page rows (byte for byte,
// both scale kinds, Hadamard on and off), its state across calls, and indexer_topk /
// indexer_logits over pools (the causal pool rule, the tail, ties, missing blocks, index kinds,
// out_lens, padding).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "latte/capabilities.hpp"
#include "latte/validate.hpp"
#include "ops_test_util.hpp"

namespace latte::testing {
namespace {

using Row = std::array<double, 128>;

double bf16_round(double x) { return bf16_to_float(float_to_bf16(static_cast<float>(x))); }

// The normalized Hadamard-128 (Sylvester order) by the fast Walsh-Hadamard butterflies.
Row rotate(Row x) {
  for (int h = 1; h < 128; h *= 2) {
    for (int i = 0; i < 128; i += 2 * h) {
      for (int j = i; j < i + h; ++j) {
        const double a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
    }
  }
  for (double& v : x) v /= std::sqrt(128.0);
  return x;
}

// One request's tokens for the pool store: k (bf16), gate (bf16 or f32), ape (f32 or bf16).
struct PoolTokens {
  int kpool;
  int64_t T;
  HostTensor k, gate, ape;
  std::vector<Row> k_val, gate_val, ape_val;  // the values as the op reads them

  PoolTokens(int kp, int64_t t, DType gate_dtype, DType ape_dtype, uint32_t seed)
      : kpool(kp), T(t), k(DType::bf16, {t, 128}), gate(gate_dtype, {t, 128}), ape(ape_dtype, {kp, 128}),
        k_val(static_cast<std::size_t>(t)), gate_val(static_cast<std::size_t>(t)),
        ape_val(static_cast<std::size_t>(kp)) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> key(-2.0f, 2.0f), g(-3.0f, 3.0f);
    for (int64_t i = 0; i < t; ++i) {
      for (int d = 0; d < 128; ++d) {
        k.at<uint16_t>(i * 128 + d) = float_to_bf16(key(rng));
        k_val[i][d] = bf16_at(k, i * 128 + d);
        gate_val[i][d] = set(gate, i * 128 + d, g(rng));
      }
    }
    for (int s = 0; s < kp; ++s) {
      for (int d = 0; d < 128; ++d) ape_val[s][d] = set(ape, s * 128 + d, g(rng) / 2);
    }
  }
  static double set(const HostTensor& t, int64_t i, float v) {
    if (t.view().dtype == DType::bf16) {
      t.at<uint16_t>(i) = float_to_bf16(v);
      return bf16_at(t, i);
    }
    t.at<float>(i) = v;
    return v;
  }

  Row pool_key(int64_t first, bool hadamard) const { return key_of(k_val, gate_val, ape_val, first, hadamard); }

  // docs/operations.md, indexer_pool_store: the key of the pool whose tokens are first..first +
  // kpool - 1 of (k, gate), rounded to bf16, rotated (and rounded again) when asked.
  static Row key_of(const std::vector<Row>& k, const std::vector<Row>& gate, const std::vector<Row>& ape,
                    int64_t first, bool hadamard) {
    const auto kpool = static_cast<int64_t>(ape.size());
    Row key{};
    for (int d = 0; d < 128; ++d) {
      double top = -INFINITY;
      for (int64_t s = 0; s < kpool; ++s) top = std::max(top, gate[first + s][d] + ape[s][d]);
      double num = 0, den = 0;
      for (int64_t s = 0; s < kpool; ++s) {
        const double w = std::exp(gate[first + s][d] + ape[s][d] - top);
        num += w * k[first + s][d];
        den += w;
      }
      key[d] = bf16_round(num / den);
    }
    if (!hadamard) return key;
    Row r = rotate(key);
    for (double& v : r) v = bf16_round(v);
    return r;
  }
};

// A pool cache of nb blocks of `rows` pool rows, a block table and the state, one row per request.
struct PoolCache {
  int kpool, rows;
  int64_t nb, B, maxb;
  HostTensor cache, table, state;
  PoolCache(int kp, int r, int64_t n, int64_t b, int64_t mb)
      : kpool(kp), rows(r), nb(n), B(b), maxb(mb), cache(DType::u8, {n, r, 132}), table(DType::i32, {b, mb}),
        state(DType::f32, {b, kp - 1, 2, 128}) {
    for (int64_t i = 0; i < b * mb; ++i) table.at<int32_t>(i) = -1;
  }
  int64_t bs() const { return int64_t{kpool} * rows; }
  std::vector<uint8_t> bytes() const {
    const auto* p = cache.data<uint8_t>();
    return {p, p + cache.numel()};
  }
  // The expected page bytes of a pool key written for pool p of request r.
  void expect_row(std::vector<uint8_t>& pages, int64_t r, int64_t pool, const Row& key, Fp8ScaleKind kind) const {
    const int64_t pos = pool * kpool;
    const int64_t block = table.at<int32_t>(r * maxb + pos / bs());
    std::array<float, 128> f{};
    for (int d = 0; d < 128; ++d) f[d] = static_cast<float>(key[d]);
    pack_indexer_k_token(f.data(), kind, pages.data() + block * rows * 132, rows, static_cast<int>((pos % bs()) / kpool));
  }
};

// Every token of request 0 (one block_table row for a call of many tokens).
// (Grown when a call needs more: views of an earlier, smaller one must not outlive the next call.)
const HostTensor& request0(int64_t n) {
  static std::unique_ptr<HostTensor> zeros;
  if (!zeros || zeros->numel() < n) zeros = std::make_unique<HostTensor>(DType::i32, std::initializer_list<int64_t>{n});
  return *zeros;
}

IndexerPoolStoreArgs store_args(const PoolTokens& x, const HostTensor& positions, TensorView token_request,
                                const PoolCache& c, Fp8ScaleKind kind, bool hadamard) {
  if (!token_request.defined()) {
    token_request = request0(positions.numel());
    token_request.shape[0] = positions.numel();
  }
  IndexerPoolStoreArgs a;
  a.k = x.k;
  a.gate = x.gate;
  a.ape = x.ape;
  a.positions = positions;
  a.token_request = token_request;
  a.block_table = c.table;
  a.k_cache = c.cache;
  a.pool_state = c.state;
  a.scale_kind = kind;
  a.hadamard = hadamard;
  a.kpool = x.kpool;
  return a;
}

// Rows [first, first + n) of the tokens (a chunk of one request's call) as views.
IndexerPoolStoreArgs chunk(IndexerPoolStoreArgs a, int64_t first, int64_t n) {
  const auto rows = [&](TensorView t) {
    t.data = static_cast<unsigned char*>(t.data) + first * t.stride(0) * static_cast<int64_t>(dtype_size(t.dtype));
    t.shape[0] = n;
    return t;
  };
  a.k = rows(a.k);
  a.gate = rows(a.gate);
  a.positions = rows(a.positions);
  if (a.token_request.defined()) a.token_request = rows(a.token_request);
  return a;
}

HostTensor iota_positions(int64_t n, int64_t start = 0) {
  HostTensor p(DType::i32, {n});
  for (int64_t i = 0; i < n; ++i) p.at<int32_t>(i) = static_cast<int32_t>(start + i);
  return p;
}

struct StoreCase {
  int kpool;
  DType gate_dtype, ape_dtype;
  Fp8ScaleKind kind;
  bool hadamard;
};

class PoolStore : public ::testing::TestWithParam<StoreCase> {};

// One call of 42 tokens (10 complete pools of 4 and 2 tokens of the 11th) of one request whose
// blocks are out of order: every complete pool's row is the file's own key, byte for byte; no
// other byte changes; the state holds the incomplete pool's two tokens.
TEST_P(PoolStore, PoolKeysAndPageRowsAreByteExact) {
  const StoreCase sc = GetParam();
  const int64_t T = 10 * sc.kpool + 2;
  PoolTokens x(sc.kpool, T, sc.gate_dtype, sc.ape_dtype, 7);
  PoolCache c(sc.kpool, 4, 4, 1, 3);  // 4 pool rows = 4 * kpool tokens per block
  const int32_t blocks[3] = {2, 0, 3};
  for (int i = 0; i < 3; ++i) c.table.at<int32_t>(i) = blocks[i];
  const HostTensor pos = iota_positions(T);
  run_reference(store_args(x, pos, {}, c, sc.kind, sc.hadamard), true);

  std::vector<uint8_t> want(static_cast<std::size_t>(c.cache.numel()), 0);
  for (int64_t p = 0; p < T / sc.kpool; ++p) c.expect_row(want, 0, p, x.pool_key(p * sc.kpool, sc.hadamard), sc.kind);
  EXPECT_EQ(c.bytes(), want);
  for (int64_t j = 0; j < sc.kpool - 1; ++j) {
    // Slot j holds the call's last token at a slot-j position: of the incomplete pool for j < 2,
    // else of the last complete pool (stored in order, then consumed).
    const int64_t t = (j < 2 ? 10 : 9) * sc.kpool + j;
    for (int d = 0; d < 128; ++d) {
      EXPECT_EQ(c.state.at<float>((j * 2 + 0) * 128 + d), x.k_val[t][d]) << j;
      EXPECT_EQ(c.state.at<float>((j * 2 + 1) * 128 + d), x.gate_val[t][d]) << j;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, PoolStore,
    ::testing::Values(StoreCase{4, DType::bf16, DType::f32, Fp8ScaleKind::pow2, false},
                      StoreCase{4, DType::bf16, DType::f32, Fp8ScaleKind::pow2, true},
                      StoreCase{4, DType::f32, DType::f32, Fp8ScaleKind::amax, false},
                      StoreCase{4, DType::f32, DType::bf16, Fp8ScaleKind::amax, true},
                      StoreCase{2, DType::bf16, DType::bf16, Fp8ScaleKind::pow2, true},
                      StoreCase{16, DType::f32, DType::f32, Fp8ScaleKind::amax, false}),
    [](const auto& info) {
      const StoreCase& s = info.param;
      return "kpool" + std::to_string(s.kpool) + "_gate_" + std::string(to_string(s.gate_dtype)) + "_ape_" +
             std::string(to_string(s.ape_dtype)) + "_" + std::string(to_string(s.kind)) +
             (s.hadamard ? "_hadamard" : "");
    });

// A prefill of 10 tokens then a decode of one token at a time, and calls whose chunk boundaries
// are not multiples of kpool, write the same bytes and state as one call of every token.
TEST(PoolStore, StateCarriesIncompletePoolsAcrossCalls) {
  const int64_t T = 37;
  PoolTokens x(4, T, DType::bf16, DType::f32, 11);
  const HostTensor pos = iota_positions(T);
  PoolCache whole(4, 4, 6, 1, 5);
  for (int i = 0; i < 5; ++i) whole.table.at<int32_t>(i) = 5 - i;
  run_reference(store_args(x, pos, {}, whole, Fp8ScaleKind::pow2, true));

  const std::vector<std::vector<int64_t>> splits = {
      {10, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},  // prefill + decode
      {3, 5, 7, 1, 2, 9, 6, 4},
      {1, 2, 3, 4, 5, 6, 7, 9},
  };
  for (const auto& sizes : splits) {
    PoolCache parts(4, 4, 6, 1, 5);
    for (int i = 0; i < 5; ++i) parts.table.at<int32_t>(i) = 5 - i;
    const IndexerPoolStoreArgs all = store_args(x, pos, {}, parts, Fp8ScaleKind::pow2, true);
    int64_t first = 0;
    for (int64_t n : sizes) {
      run_reference(chunk(all, first, n), true);
      first += n;
    }
    ASSERT_EQ(first, T);
    EXPECT_EQ(parts.bytes(), whole.bytes()) << sizes.size() << " calls";
    for (int64_t i = 0; i < whole.state.numel(); ++i) {
      ASSERT_EQ(parts.state.at<float>(i), whole.state.at<float>(i)) << i;
    }
  }
}

// Several requests in one call (token_request), tokens interleaved; a pool completed in a call
// from the state a previous call left; skipped tokens: position -1, a missing block, a position
// past the block table, a request row out of range. Nothing of a skipped token is read or written.
TEST(PoolStore, RequestsSkipsAndPoolsFinishedFromTheState) {
  PoolTokens x(4, 12, DType::f32, DType::f32, 5);
  PoolCache c(4, 4, 4, 3, 2);  // bs 16; request 0: blocks 1, 3; request 1: block 0 then missing; request 2: block 2
  const int32_t table[6] = {1, 3, 0, -1, 2, 7};
  for (int i = 0; i < 6; ++i) c.table.at<int32_t>(i) = table[i];
  // Earlier call: request 0 positions 4, 5 (its second pool's first half) go to the state.
  const HostTensor pos0 = [] {
    HostTensor p(DType::i32, {2});
    p.at<int32_t>(0) = 4;
    p.at<int32_t>(1) = 5;
    return p;
  }();
  HostTensor req0(DType::i32, {2});
  run_reference(chunk(store_args(x, pos0, req0, c, Fp8ScaleKind::amax, false), 0, 2), true);  // tokens 0, 1 of x
  // This call: token t has request req[t] and position pos[t].
  const int32_t req[12] = {0, 1, 0, 1, 1, 1, 2, 0, 1, 5, 2, 1};
  const int32_t pos[12] = {6, 0, 7, 1, 2, 3, 32, -1, 17, 3, 3, 19};
  HostTensor rq(DType::i32, {12}), ps(DType::i32, {12});
  for (int i = 0; i < 12; ++i) {
    rq.at<int32_t>(i) = req[i];
    ps.at<int32_t>(i) = pos[i];
  }
  const std::vector<float> state_before(c.state.data<float>(), c.state.data<float>() + c.state.numel());
  run_reference(store_args(x, ps, rq, c, Fp8ScaleKind::amax, false));

  std::vector<uint8_t> want(static_cast<std::size_t>(c.cache.numel()), 0);
  const auto key = [&](std::initializer_list<Row> k, std::initializer_list<Row> gate) {
    return PoolTokens::key_of(k, gate, x.ape_val, 0, false);
  };
  // Request 0, pool 1 (positions 4..7): tokens 0, 1 of the earlier call (in the state), then 0, 2.
  c.expect_row(want, 0, 1, key({x.k_val[0], x.k_val[1], x.k_val[0], x.k_val[2]},
                               {x.gate_val[0], x.gate_val[1], x.gate_val[0], x.gate_val[2]}),
               Fp8ScaleKind::amax);
  // Request 1, pool 0 (positions 0..3): tokens 1, 3, 4, 5 of this call.
  c.expect_row(want, 1, 0, key({x.k_val[1], x.k_val[3], x.k_val[4], x.k_val[5]},
                               {x.gate_val[1], x.gate_val[3], x.gate_val[4], x.gate_val[5]}),
               Fp8ScaleKind::amax);
  // Request 1 positions 17 and 19 lie in its missing second block, request 2's position 32 past its
  // two blocks, token 7 has position -1, token 9 request 5 (of 3): skipped. Request 2 position 3
  // completes its pool 0 from its (zero) state.
  const Row zero{};
  c.expect_row(want, 2, 0, key({zero, zero, zero, x.k_val[10]}, {zero, zero, zero, x.gate_val[10]}),
               Fp8ScaleKind::amax);
  EXPECT_EQ(c.bytes(), want);

  // State: request 0 slots 0, 1 keep the earlier call's tokens (this call has no slot 0 or 1 of
  // request 0), slot 2 takes token 0 (position 6); request 1 slots 0..2 take tokens 1, 3, 4
  // (the completed pool's tokens stay, as if stored in order); request 2 is untouched.
  const auto state = [&](int64_t r, int64_t j, int64_t which, int d) {
    return c.state.at<float>(((r * 3 + j) * 2 + which) * 128 + d);
  };
  for (int d = 0; d < 128; ++d) {
    EXPECT_EQ(state(0, 0, 0, d), state_before[(0 * 2 + 0) * 128 + d]);
    EXPECT_EQ(state(0, 0, 0, d), x.k_val[0][d]);
    EXPECT_EQ(state(0, 1, 1, d), x.gate_val[1][d]);
    EXPECT_EQ(state(0, 2, 0, d), x.k_val[0][d]);
    EXPECT_EQ(state(1, 0, 0, d), x.k_val[1][d]);
    EXPECT_EQ(state(1, 1, 1, d), x.gate_val[3][d]);
    EXPECT_EQ(state(1, 2, 0, d), x.k_val[4][d]);
    for (int j = 0; j < 3; ++j) EXPECT_EQ(state(2, j, 0, d), 0.0f);
  }
}

// ---- indexer_topk / indexer_logits over pools --------------------------------------------

// A pooled indexer problem: T queries (bf16, one row each of a request), pool keys written
// directly into the pages, token block table of `bs` tokens per block.
struct PooledCase {
  int kpool;
  int64_t T, H, rows, nb, maxb;
  HostTensor q, weights, cache, table, visible, indices, out_lens;
  std::vector<Row> keys;  // decoded pool keys by (block, row)

  PooledCase(int kp, int64_t t, int64_t h, int64_t r, int64_t n, int64_t mb, int64_t width)
      : kpool(kp), T(t), H(h), rows(r), nb(n), maxb(mb), q(DType::bf16, {t, h, 128}), weights(DType::f32, {t, h}),
        cache(DType::u8, {n, r, 132}), table(DType::i32, {t, mb}), visible(DType::i32, {t}),
        indices(DType::i32, {t, width}), out_lens(DType::i32, {t}), keys(static_cast<std::size_t>(n * r)) {
    for (int64_t i = 0; i < t * h; ++i) weights.at<float>(i) = 1.0f / static_cast<float>(i % h + 1);
    for (int64_t i = 0; i < t * mb; ++i) table.at<int32_t>(i) = static_cast<int32_t>((i * 7 + 3) % n);
  }
  int64_t bs() const { return int64_t{kpool} * rows; }
  int64_t block_of(int64_t t, int64_t p) const { return table.at<int32_t>(t * maxb + p / bs()); }
  void set_key(int64_t block, int64_t row, const std::array<float, 128>& k) {
    pack_indexer_k_token(k.data(), Fp8ScaleKind::pow2, cache.data<uint8_t>() + block * rows * 132,
                         static_cast<int>(rows), static_cast<int>(row));
    std::array<float, 128> back{};
    unpack_indexer_k_token(cache.data<uint8_t>() + block * rows * 132, static_cast<int>(rows), static_cast<int>(row),
                           back.data());
    for (int d = 0; d < 128; ++d) keys[block * rows + row][d] = back[d];
  }
  void random_keys(std::mt19937& rng) {
    std::normal_distribution<float> n01(0.0f, 1.0f);
    std::array<float, 128> k{};
    for (int64_t b = 0; b < nb; ++b) {
      for (int64_t r = 0; r < rows; ++r) {
        for (float& v : k) v = n01(rng);
        set_key(b, r, k);
      }
    }
  }
  void random_queries(std::mt19937& rng) { fill_bf16(q, rng, -1.0f, 1.0f); }
  IndexerTopkArgs topk_args(int64_t pool_topk, bool tail, IndexKind kind) const {
    IndexerTopkArgs a;
    a.in = {q, {}, weights, cache, table, {}, visible};
    a.in.kpool = kpool;
    a.indices = indices;
    a.kind = kind;
    a.pool_topk = static_cast<int>(pool_topk);
    a.select_tail = tail;
    a.out_lens = out_lens;
    return a;
  }
  // The score of query t against pool p (I of docs/operations.md with the pool key), or NaN
  // when the pool is no candidate (incomplete, invisible, or in a missing block).
  double score(int64_t t, int64_t p) const {
    const int64_t v = visible.at<int32_t>(t);
    const int64_t block = p * kpool < maxb * bs() ? block_of(t, p * kpool) : -1;
    if ((p + 1) * kpool > v || block < 0 || block >= nb) return std::numeric_limits<double>::quiet_NaN();
    const Row& k = keys[block * rows + (p * kpool % bs()) / kpool];
    double s = 0;
    for (int64_t j = 0; j < H; ++j) {
      double dot = 0;
      for (int d = 0; d < 128; ++d) dot += bf16_at(q, (t * H + j) * 128 + d) * k[d];
      s += weights.at<float>(t * H + j) * std::max(dot, 0.0);
    }
    return s;
  }
  // The expected row: pools by descending score (ties: smaller pool), each pool's tokens, then
  // the tail; logical positions or slots; tokens in missing blocks left out.
  std::vector<int32_t> expected(int64_t t, int64_t pool_topk, bool tail, IndexKind kind) const {
    const int64_t v = std::clamp<int64_t>(visible.at<int32_t>(t), 0, maxb * bs());
    std::vector<std::pair<double, int64_t>> pools;
    for (int64_t p = 0; p < v / kpool; ++p) {
      const double s = score(t, p);
      if (!std::isnan(s)) pools.push_back({-s, p});
    }
    std::sort(pools.begin(), pools.end());
    std::vector<int64_t> positions;
    for (std::size_t i = 0; i < pools.size() && static_cast<int64_t>(i) < pool_topk; ++i) {
      for (int o = 0; o < kpool; ++o) positions.push_back(pools[i].second * kpool + o);
    }
    if (tail) {
      for (int64_t p = v / kpool * kpool; p < v; ++p) {
        const int64_t b = block_of(t, p);
        if (b >= 0 && b < nb) positions.push_back(p);
      }
    }
    std::vector<int32_t> out;
    for (int64_t p : positions) {
      out.push_back(static_cast<int32_t>(kind == IndexKind::logical ? p : block_of(t, p) * bs() + p % bs()));
    }
    return out;
  }
  std::vector<int32_t> row(int64_t t) const {
    const int64_t w = indices.view().size(1);
    return {indices.data<int32_t>() + t * w, indices.data<int32_t>() + (t + 1) * w};
  }
};

// Random keys and queries, every visible length from 0 to past the block table: each row is the
// expected list (order included), -1 padded, with its length in out_lens.
TEST(PooledTopk, RowsAreTheChosenPoolsThenTheTail) {
  for (IndexKind kind : {IndexKind::logical, IndexKind::physical}) {
    for (bool tail : {true, false}) {
      PooledCase c(4, 40, 3, 4, 6, 2, 2 * 4 + 3 + 5);  // bs 16, 32 positions per request; 5 spare columns
      std::mt19937 rng(3);
      c.random_keys(rng);
      c.random_queries(rng);
      for (int64_t t = 0; t < c.T; ++t) c.visible.at<int32_t>(t) = static_cast<int32_t>(t);  // 0 .. 39 (> 32)
      c.table.at<int32_t>(5 * c.maxb + 0) = -1;  // query 5's first block is missing
      c.table.at<int32_t>(30 * c.maxb + 1) = 99;  // query 30's second block is out of range
      run_reference(c.topk_args(2, tail, kind));
      for (int64_t t = 0; t < c.T; ++t) {
        std::vector<int32_t> want = c.expected(t, 2, tail, kind);
        EXPECT_EQ(c.out_lens.at<int32_t>(t), static_cast<int32_t>(want.size())) << t;
        want.resize(static_cast<std::size_t>(c.indices.view().size(1)), -1);
        EXPECT_EQ(c.row(t), want) << "query " << t << (tail ? " tail" : "");
      }
    }
  }
}

// GLM-5.3-Flash's geometry (512 pools of 4, the tail, vLLM's 2176 columns): a query that sees at
// most 2048 + 3 tokens gets all of them; past that, 512 pools and the tail. Queries that see
// fewer than 4 tokens get only the tail.
TEST(PooledTopk, Glm53GeometryGivesEveryTokenUpTo2051) {
  PooledCase c(4, 10, 2, 16, 40, 40, 2176);  // bs 64, 2560 positions
  std::mt19937 rng(9);
  c.random_keys(rng);
  c.random_queries(rng);
  for (int64_t i = 0; i < c.T * c.maxb; ++i) c.table.at<int32_t>(i) = static_cast<int32_t>(i % c.maxb);
  const int32_t lens[10] = {0, 1, 2, 3, 4, 2047, 2048, 2051, 2052, 2500};
  for (int t = 0; t < 10; ++t) c.visible.at<int32_t>(t) = lens[t];
  run_reference(c.topk_args(512, true, IndexKind::logical), true);
  for (int t = 0; t < 10; ++t) {
    const std::vector<int32_t> got = c.row(t);
    const int32_t n = c.out_lens.at<int32_t>(t);
    EXPECT_EQ(n, std::min(lens[t], lens[t] <= 2051 ? lens[t] : 2048 + lens[t] % 4)) << lens[t];
    EXPECT_TRUE(std::all_of(got.begin() + n, got.end(), [](int32_t v) { return v == -1; }));
    const std::set<int32_t> chosen(got.begin(), got.begin() + n);
    EXPECT_EQ(chosen.size(), static_cast<std::size_t>(n));  // no position twice
    if (lens[t] > 0 && lens[t] <= 2051) {
      EXPECT_EQ(*chosen.rbegin() + 1, lens[t]);  // every position 0 .. lens[t] - 1
    }
    std::vector<int32_t> want = c.expected(t, 512, true, IndexKind::logical);
    want.resize(2176, -1);
    EXPECT_EQ(got, want) << lens[t];
  }
}

// Pools with equal scores: the smaller pool wins; NaN scores rank last.
TEST(PooledTopk, TiesGoToTheSmallerPoolAndNanRanksLast) {
  PooledCase c(4, 1, 1, 4, 2, 2, 12);  // bs 16, 32 positions, 8 pools
  std::array<float, 128> k{};
  k.fill(0.5f);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t r = 0; r < 4; ++r) c.set_key(b, r, k);
  k.fill(1.0f);
  c.set_key(1, 3, k);  // block 1 row 3: the best
  // Pool in block 0 row 1: NaN (a NaN scale poisons the row).
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(c.cache.data<uint8_t>() + 4 * 128 + 1 * 4, &nan, 4);
  c.table.at<int32_t>(0) = 0;
  c.table.at<int32_t>(1) = 1;
  for (int d = 0; d < 128; ++d) c.q.at<uint16_t>(d) = float_to_bf16(1.0f);
  c.visible.at<int32_t>(0) = 32;
  run_reference(c.topk_args(3, false, IndexKind::logical));
  // Pool 7 (block 1 row 3) first, then the equal pools 0 and 2 (pool 1 is NaN).
  EXPECT_EQ(c.row(0), (std::vector<int32_t>{28, 29, 30, 31, 0, 1, 2, 3, 8, 9, 10, 11}));
  c.visible.at<int32_t>(0) = 8;  // pools 0 and 1 only: the NaN pool comes last
  run_reference(c.topk_args(2, false, IndexKind::logical));
  EXPECT_EQ(c.row(0), (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, -1, -1, -1, -1}));
}

// indexer_logits over pools: column p is pool p's score; -inf for incomplete, invisible and
// missing pools and past the pools.
TEST(PooledLogits, ColumnsArePoolScores) {
  PooledCase c(4, 6, 2, 4, 5, 3, 11);  // bs 16
  std::mt19937 rng(4);
  c.random_keys(rng);
  c.random_queries(rng);
  const int32_t lens[6] = {0, 3, 4, 9, 17, 24};
  for (int t = 0; t < 6; ++t) c.visible.at<int32_t>(t) = lens[t];
  c.table.at<int32_t>(4 * 3 + 1) = -1;  // query 4: its second block (pools 4..7) is missing
  HostTensor logits(DType::f32, {6, 7});
  IndexerLogitsArgs a{c.topk_args(1, false, IndexKind::logical).in, logits};
  run_reference(a);
  for (int64_t t = 0; t < 6; ++t) {
    for (int64_t p = 0; p < 7; ++p) {
      const double want = c.score(t, p);
      const float got = logits.at<float>(t * 7 + p);
      if (std::isnan(want)) {
        EXPECT_EQ(got, -std::numeric_limits<float>::infinity()) << t << ", " << p;
      } else {
        EXPECT_FLOAT_EQ(got, static_cast<float>(want)) << t << ", " << p;
      }
    }
  }
}

// End to end: keys stored by indexer_pool_store with the Hadamard rotation, queries rotated by
// this file, select the same pools as the unrotated float64 scores where those are distinct.
// Pool keys are c_p * v (every token of pool p has key c_p * v, exact in bf16 and e4m3), so the
// quantized keys keep the order of the c_p (the rotated ones up to rounding far below their gaps).
TEST(PooledTopk, HadamardKeysWithRotatedQueriesSelectTheExactPools) {
  const int kpool = 4;
  const int64_t pools = 24, T = pools * kpool;
  PoolTokens x(kpool, T, DType::bf16, DType::f32, 21);
  std::vector<int> rank(pools);
  std::iota(rank.begin(), rank.end(), 0);
  std::shuffle(rank.begin(), rank.end(), std::mt19937(2));
  Row v{};
  for (int d = 0; d < 128; ++d) v[d] = (d % 3 == 0 ? -1.0 : 1.0) * (d % 2 ? 0.5 : 1.0);
  for (int64_t t = 0; t < T; ++t) {
    // Distinct values of 4 significant bits (exact in e4m3 and bf16): 1, 1.125, .., 1.875, 2, 2.25, ..
    const int r = rank[static_cast<std::size_t>(t / kpool)];
    const double cp = (8 + r % 8) * std::ldexp(1.0, r / 8) / 8;
    for (int d = 0; d < 128; ++d) {
      x.k.at<uint16_t>(t * 128 + d) = float_to_bf16(static_cast<float>(cp * v[d]));
      ASSERT_EQ(bf16_at(x.k, t * 128 + d), cp * v[d]);
    }
  }
  for (bool hadamard : {false, true}) {
    PoolCache store(kpool, 8, 3, 1, 3);  // bs 32
    for (int i = 0; i < 3; ++i) store.table.at<int32_t>(i) = 2 - i;
    const HostTensor pos = iota_positions(T);
    run_reference(store_args(x, pos, {}, store, Fp8ScaleKind::pow2, hadamard));

    PooledCase c(kpool, 1, 1, 8, 3, 3, 8 * kpool + 3);
    std::memcpy(c.cache.data<uint8_t>(), store.cache.data<uint8_t>(), static_cast<std::size_t>(store.cache.numel()));
    std::memcpy(c.table.data<int32_t>(), store.table.data<int32_t>(), 3 * sizeof(int32_t));
    const Row qv = hadamard ? rotate(v) : v;
    for (int d = 0; d < 128; ++d) c.q.at<uint16_t>(d) = float_to_bf16(static_cast<float>(qv[d]));
    c.visible.at<int32_t>(0) = static_cast<int32_t>(T);
    run_reference(c.topk_args(8, false, IndexKind::logical));
    // Exact unrotated scores: c_p * |v|^2, so the best 8 pools are those of the 8 largest ranks.
    std::set<int32_t> want;
    for (int64_t p = 0; p < pools; ++p) {
      if (rank[static_cast<std::size_t>(p)] >= pools - 8) {
        for (int o = 0; o < kpool; ++o) want.insert(static_cast<int32_t>(p * kpool + o));
      }
    }
    const std::vector<int32_t> got = c.row(0);
    EXPECT_EQ(std::set<int32_t>(got.begin(), got.begin() + 8 * kpool), want) << (hadamard ? "hadamard" : "plain");
    EXPECT_EQ(c.out_lens.at<int32_t>(0), 8 * kpool);
  }
}

// The kernel of a pooled spec takes pooled calls of its kpool only; backends that score single
// tokens (plugins) give the reason kpool with its fix.
TEST(PooledTopk, KernelsAndRefusalsFollowKpool) {
  PooledCase c(4, 2, 1, 4, 2, 2, 11);
  const IndexerTopkArgs pooled = c.topk_args(2, true, IndexKind::logical);
  AttentionSpec spec = spec_from_args(pooled);
  EXPECT_EQ(spec.kpool, 4);
  EXPECT_EQ(spec.block_size, 16);  // tokens per block: 4 pool rows of 4
  const auto backend = Registry::global().get("cpu.reference");
  spec.kpool = 2;
  const std::unique_ptr<Kernel> wrong = backend->make(spec, DeviceInfo{});
  try {
    wrong->run(pooled, RunContext{});
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("this kernel was made for kpool 2 but the call has kpool 4"));
  }
  const auto reason = pooled_indexer_refusal("a plugin", spec_from_args(pooled));
  ASSERT_TRUE(reason.has_value());
  EXPECT_EQ(reason->code, "kpool");
  EXPECT_THAT(reason->text, ::testing::HasSubstr("a plugin scores single tokens; the pooled indexer"));
  EXPECT_THAT(reason->text, ::testing::HasSubstr("runs on cpu.reference, cuda.indexer and hopper.indexer"));
  AttentionSpec token = spec_from_args(pooled);
  token.kpool = 0;
  EXPECT_FALSE(pooled_indexer_refusal("a plugin", token).has_value());
  token.kpool = 4;
  token.op = Op::sparse_mla;  // kpool means nothing to the attention
  EXPECT_FALSE(pooled_indexer_refusal("a plugin", token).has_value());
}

// The Hadamard option's effect on selection (the figures of docs/operations.md): the fp8 pool
// cache's top-512 pools against the unquantized float64 oracle (pool keys and scores in float64,
// no bf16 or e4m3 rounding), with and without the rotation (q rotated alike), for random keys
// (iid normal) and for keys with outlier channels (4 of 128 channels 20x larger). CI runs one
// 8K context; LATTE_POOL_RECALL_CONTEXT=32768 LATTE_POOL_RECALL_QUERIES=16 gives the larger runs.
TEST(PooledHadamard, Top512RecallAgainstTheFloat64Oracle) {
  const char* env_context = std::getenv("LATTE_POOL_RECALL_CONTEXT");
  const char* env_queries = std::getenv("LATTE_POOL_RECALL_QUERIES");
  const int64_t L = env_context ? std::atoll(env_context) : 8192;
  const int64_t queries = env_queries ? std::atoll(env_queries) : 2;
  const int kpool = 4, heads = 32, pool_topk = 512;
  const int64_t rows = 16, bs = kpool * rows, blocks = (L + bs - 1) / bs;
  for (bool outliers : {false, true}) {
    std::mt19937 rng(outliers ? 77 : 78);
    std::normal_distribution<float> n01(0.0f, 1.0f);
    Row channel{};
    for (int d = 0; d < 128; ++d) channel[d] = outliers && d % 32 == 5 ? 20.0 : 1.0;
    PoolTokens x(kpool, L, DType::bf16, DType::f32, outliers ? 5 : 6);
    for (int64_t t = 0; t < L; ++t) {
      for (int d = 0; d < 128; ++d) {
        x.k.at<uint16_t>(t * 128 + d) = float_to_bf16(static_cast<float>(n01(rng) * channel[d]));
        x.k_val[t][d] = bf16_at(x.k, t * 128 + d);
      }
    }
    // Exact pool keys: the softmax mix in float64, not rounded.
    std::vector<Row> exact(static_cast<std::size_t>(L / kpool));
    for (int64_t p = 0; p < L / kpool; ++p) {
      for (int d = 0; d < 128; ++d) {
        double top = -INFINITY, num = 0, den = 0;
        for (int s = 0; s < kpool; ++s) top = std::max(top, x.gate_val[p * kpool + s][d] + x.ape_val[s][d]);
        for (int s = 0; s < kpool; ++s) {
          const double w = std::exp(x.gate_val[p * kpool + s][d] + x.ape_val[s][d] - top);
          num += w * x.k_val[p * kpool + s][d];
          den += w;
        }
        exact[p][d] = num / den;
      }
    }
    double recall[2] = {0, 0};
    for (int rotated = 0; rotated < 2; ++rotated) {
      PoolCache store(kpool, static_cast<int>(rows), blocks, 1, blocks);
      for (int64_t b = 0; b < blocks; ++b) store.table.at<int32_t>(b) = static_cast<int32_t>(b);
      const HostTensor pos = iota_positions(L);
      run_reference(store_args(x, pos, {}, store, Fp8ScaleKind::pow2, rotated != 0));
      PooledCase c(kpool, queries, heads, rows, blocks, blocks, pool_topk * kpool);
      std::memcpy(c.cache.data<uint8_t>(), store.cache.data<uint8_t>(), static_cast<std::size_t>(store.cache.numel()));
      std::vector<std::vector<Row>> qs(static_cast<std::size_t>(queries), std::vector<Row>(heads));
      std::mt19937 qrng(9);
      for (int64_t t = 0; t < queries; ++t) {
        for (int64_t b = 0; b < blocks; ++b) c.table.at<int32_t>(t * blocks + b) = static_cast<int32_t>(b);
        c.visible.at<int32_t>(t) = static_cast<int32_t>(L);
        for (int j = 0; j < heads; ++j) {
          for (int d = 0; d < 128; ++d) qs[t][j][d] = bf16_round(n01(qrng) * channel[d]);
          const Row qv = rotated ? rotate(qs[t][j]) : qs[t][j];
          for (int d = 0; d < 128; ++d) c.q.at<uint16_t>((t * heads + j) * 128 + d) = float_to_bf16(static_cast<float>(qv[d]));
          c.weights.at<float>(t * heads + j) = 1.0f;
        }
      }
      run_reference(c.topk_args(pool_topk, false, IndexKind::logical));
      for (int64_t t = 0; t < queries; ++t) {
        std::vector<std::pair<double, int64_t>> scored;
        for (int64_t p = 0; p < L / kpool; ++p) {
          double sc = 0;
          for (int j = 0; j < heads; ++j) {
            double dot = 0;
            for (int d = 0; d < 128; ++d) dot += qs[t][j][d] * exact[p][d];
            sc += std::max(dot, 0.0);
          }
          scored.push_back({-sc, p});
        }
        std::partial_sort(scored.begin(), scored.begin() + pool_topk, scored.end());
        std::set<int64_t> want;
        for (int i = 0; i < pool_topk; ++i) want.insert(scored[i].second);
        const std::vector<int32_t> got = c.row(t);
        int64_t hit = 0;
        for (int i = 0; i < pool_topk; ++i) hit += want.count(got[static_cast<std::size_t>(i * kpool)] / kpool);
        recall[rotated] += static_cast<double>(hit) / pool_topk / static_cast<double>(queries);
      }
    }
    std::printf("pool top-%d recall vs float64, context %lld, %lld queries x %d heads, %s keys: plain %.4f, "
                "hadamard %.4f\n",
                pool_topk, static_cast<long long>(L), static_cast<long long>(queries), heads,
                outliers ? "outlier-channel" : "iid normal", recall[0], recall[1]);
    // Measured (docs/operations.md): 0.96..0.995; with outlier channels the rotation gains.
    EXPECT_GT(recall[0], 0.9);
    EXPECT_GT(recall[1], 0.9);
    if (outliers) EXPECT_GT(recall[1], recall[0]);
  }
}

}  // namespace
}  // namespace latte::testing
