// sparse_mla and mla_decode on cpu.reference: hand-computed cases, a float64 definition
// written here, empty rows, the causal rule and the sparse == dense equality oracle.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "latte/api.hpp"
#include "ops_test_util.hpp"

namespace latte::testing {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// A paged MLA cache of random tokens in either format.
struct Cache {
  HostTensor tensor;
  CacheFormat format;
  int64_t block_size;

  Cache(CacheFormat f, int64_t num_blocks, int64_t bs, std::mt19937& rng, float amplitude = 1.0f)
      : tensor(f == CacheFormat::bf16 ? DType::bf16 : DType::u8,
               {num_blocks, bs, f == CacheFormat::bf16 ? int64_t{576} : int64_t{656}}),
        format(f),
        block_size(bs) {
    std::normal_distribution<float> normal(0.0f, amplitude);
    for (int64_t s = 0; s < num_blocks * bs; ++s) {
      std::array<float, 576> v{};
      for (float& x : v) x = bf16_to_float(float_to_bf16(normal(rng)));
      set(s, v);
    }
  }
  void set(int64_t slot, const std::array<float, 576>& v) const {
    if (format == CacheFormat::bf16) {
      for (int i = 0; i < 576; ++i) tensor.at<uint16_t>(slot * 576 + i) = float_to_bf16(v[i]);
    } else {
      pack_fp8_ds_mla_token(v.data(), v.data() + 512, Fp8ScaleKind::amax,
                            tensor.data<uint8_t>() + slot * 656);
    }
  }
  // The token as the definition sees it (public decoders, float32 dequantization).
  std::array<double, 576> token(int64_t slot) const {
    std::array<double, 576> out{};
    if (format == CacheFormat::bf16) {
      for (int i = 0; i < 576; ++i) out[i] = bf16_at(tensor, slot * 576 + i);
    } else {
      std::array<float, 576> f{};
      unpack_fp8_ds_mla_token(tensor.data<uint8_t>() + slot * 656, f.data());
      std::copy(f.begin(), f.end(), out.begin());
    }
    return out;
  }
};

// The definition of docs/design.md, section 2, without the max-subtraction trick (inputs are
// small).
struct Expected {
  std::array<double, 512> out{};
  double lse = -kInf;
};

Expected attention_by_definition(const HostTensor& q, int64_t q_row, const Cache& cache,
                                 const std::vector<int64_t>& slots, double scale) {
  Expected e;
  if (slots.empty()) return e;
  std::vector<double> weights;
  double total = 0.0;
  for (int64_t s : slots) {
    const auto c = cache.token(s);
    double dot = 0.0;
    for (int d = 0; d < 576; ++d) dot += bf16_at(q, q_row * 576 + d) * c[d];
    weights.push_back(std::exp(scale * dot));
    total += weights.back();
  }
  e.lse = std::log(total);
  for (std::size_t i = 0; i < slots.size(); ++i) {
    const auto c = cache.token(slots[i]);
    for (int d = 0; d < 512; ++d) e.out[d] += weights[i] / total * c[d];
  }
  return e;
}

// out is bf16: within half a bf16 ulp of the float64 value, plus float32 slack.
void expect_close(const HostTensor& out, int64_t row, const Expected& e, const char* what) {
  for (int d = 0; d < 512; ++d) {
    const double got = bf16_at(out, row * 512 + d);
    ASSERT_NEAR(got, e.out[d], std::ldexp(std::fabs(e.out[d]), -8) + 1e-6)
        << what << " row " << row << " dim " << d;
  }
}

TEST(SparseMla, HandComputedTwoTokenSoftmax) {
  std::mt19937 rng(1);
  Cache cache(CacheFormat::bf16, 1, 4, rng);
  std::array<float, 576> c0{}, c1{}, c2{};
  c0[1] = 2.0f;                    // score 0
  c1[0] = 1.0f, c1[1] = -2.0f;     // score 1
  c2[512] = 4.0f;                  // rope only: with q rope[0] = 0.5, score 0.5 * (0.5 * 4) = 1
  cache.set(0, c0);
  cache.set(1, c1);
  cache.set(2, c2);
  HostTensor q(DType::bf16, {2, 1, 576});
  q.at<uint16_t>(0) = float_to_bf16(2.0f);            // token 0: q[0] = 2
  q.at<uint16_t>(576 + 512) = float_to_bf16(0.5f);    // token 1: q rope[0] = 0.5
  HostTensor idx(DType::i32, {2, 2});
  idx.at<int32_t>(0) = 0, idx.at<int32_t>(1) = 1;     // token 0: slots {0, 1}
  idx.at<int32_t>(2) = 2, idx.at<int32_t>(3) = 0;     // token 1: slots {2, 0}
  HostTensor out(DType::bf16, {2, 1, 512});
  HostTensor lse(DType::f32, {2, 1});
  run_reference(SparseMlaArgs{q, cache.tensor, idx, out, lse, 0.5f});
  // Token 0: scores 0.5*2*{0, 1} = {0, 1}: p = {1/(1+e), e/(1+e)} = {0.268941, 0.731059}.
  EXPECT_NEAR(lse.at<float>(0), 1.3132616875182228, 1e-6);  // ln(1 + e)
  EXPECT_NEAR(bf16_at(out, 0), 0.7310585786300049, 0.004);  // p1 * 1
  EXPECT_NEAR(bf16_at(out, 1), 2 * (0.2689414213699951 - 0.7310585786300049), 0.004);
  EXPECT_EQ(bf16_at(out, 2), 0.0);
  // Token 1: scores 0.5*0.5*{4, 0} = {1, 0}: the rope part counts in the score but not in out.
  EXPECT_NEAR(lse.at<float>(1), 1.3132616875182228, 1e-6);
  EXPECT_NEAR(bf16_at(out, 512 + 1), 2 * 0.2689414213699951, 0.004);  // c0[1] * p0
  EXPECT_EQ(bf16_at(out, 512 + 0), 0.0);
}

class SparseMlaDefinition : public ::testing::TestWithParam<CacheFormat> {};

TEST_P(SparseMlaDefinition, MatchesTheFloat64Definition) {
  std::mt19937 rng(2);
  constexpr int64_t T = 5, H = 3, TOPK = 12, NB = 6, BS = 8;
  Cache cache(GetParam(), NB, BS, rng);
  HostTensor q(DType::bf16, {T, H, 576});
  fill_bf16(q, rng, -0.3f, 0.3f);
  HostTensor idx(DType::i32, {T, TOPK});
  std::uniform_int_distribution<int> slot(-1, NB * BS - 1);
  for (int64_t i = 0; i < T * TOPK; ++i) idx.at<int32_t>(i) = slot(rng);
  idx.at<int32_t>(3) = idx.at<int32_t>(4);  // a repeated slot counts twice
  idx.at<int32_t>(5) = 1000;                // out of range, no check mode: treated as -1
  HostTensor out(DType::bf16, {T, H, 512});
  HostTensor lse(DType::f32, {T, H});
  const float scale = 0.1352f;
  run_reference(SparseMlaArgs{q, cache.tensor, idx, out, lse, scale});
  for (int64_t t = 0; t < T; ++t) {
    std::vector<int64_t> slots;
    for (int64_t k = 0; k < TOPK; ++k) {
      const int32_t s = idx.at<int32_t>(t * TOPK + k);
      if (s >= 0 && s < NB * BS) slots.push_back(s);
    }
    for (int64_t h = 0; h < H; ++h) {
      const Expected e = attention_by_definition(q, t * H + h, cache, slots, scale);
      EXPECT_NEAR(lse.at<float>(t * H + h), e.lse, 1e-5 * std::max(1.0, std::fabs(e.lse)));
      expect_close(out, t * H + h, e, "sparse_mla");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, SparseMlaDefinition,
                         ::testing::Values(CacheFormat::bf16, CacheFormat::fp8_ds_mla),
                         [](const auto& info) { return std::string(to_string(info.param)); });

TEST(SparseMla, RowsOfAllMinusOneGiveZeroAndMinusInfinityNeverNaN) {
  std::mt19937 rng(3);
  Cache cache(CacheFormat::fp8_ds_mla, 2, 4, rng);
  HostTensor q(DType::bf16, {3, 2, 576});
  fill_bf16(q, rng);
  HostTensor idx(DType::i32, {3, 4});
  for (int64_t i = 0; i < 12; ++i) idx.at<int32_t>(i) = -1;
  idx.at<int32_t>(4) = 3;                                   // token 1 has one slot
  for (int k = 0; k < 4; ++k) idx.at<int32_t>(8 + k) = 50;  // token 2: all out of range
  HostTensor out(DType::bf16, {3, 2, 512});
  for (int64_t i = 0; i < out.numel(); ++i) out.at<uint16_t>(i) = 0x7FC0;  // NaN poison
  HostTensor lse(DType::f32, {3, 2});
  run_reference(SparseMlaArgs{q, cache.tensor, idx, out, lse, 0.0625f});
  for (int64_t row : {0, 1, 4, 5}) {  // tokens 0 and 2, both heads
    EXPECT_EQ(lse.at<float>(row), -std::numeric_limits<float>::infinity()) << row;
    for (int d = 0; d < 512; ++d) ASSERT_EQ(out.at<uint16_t>(row * 512 + d), 0) << row << " " << d;
  }
  // One slot: softmax weight 1, out = that token's latent, lse = its score.
  const auto c = cache.token(3);
  for (int d = 0; d < 512; ++d) {
    ASSERT_NEAR(bf16_at(out, 2 * 512 + d), c[d], std::ldexp(std::fabs(c[d]), -8) + 1e-6);
  }
  for (int64_t i = 0; i < lse.numel(); ++i) EXPECT_FALSE(std::isnan(lse.at<float>(i)));
}

// Dense MLA decode over block tables, and sparse_mla over the same positions.
struct DecodeCase {
  static constexpr int64_t BS = 16, NB = 16, MAXB = 4, H = 2;  // up to 4 requests
  std::vector<int32_t> lens;
  int64_t s_q;
  std::mt19937 rng;
  Cache cache;
  HostTensor q, table, seq_lens, out, lse;

  DecodeCase(CacheFormat format, std::vector<int32_t> l, int64_t sq, uint32_t seed)
      : lens(std::move(l)),
        s_q(sq),
        rng(seed),
        cache(format, NB, BS, rng),
        q(DType::bf16, {B(), sq, H, 576}),
        table(DType::i32, {B(), MAXB}),
        seq_lens(DType::i32, {B()}),
        out(DType::bf16, {B(), sq, H, 512}),
        lse(DType::f32, {B(), sq, H}) {
    fill_bf16(q, rng, -0.2f, 0.2f);
    std::vector<int32_t> blocks(NB);
    std::iota(blocks.begin(), blocks.end(), 0);
    std::shuffle(blocks.begin(), blocks.end(), rng);  // pages in no particular order
    for (int64_t i = 0; i < B() * MAXB; ++i) table.at<int32_t>(i) = blocks[static_cast<std::size_t>(i)];
    for (int64_t b = 0; b < B(); ++b) seq_lens.at<int32_t>(b) = lens[static_cast<std::size_t>(b)];
  }
  int64_t B() const { return static_cast<int64_t>(lens.size()); }
  int64_t slot(int64_t b, int64_t p) const { return table.at<int32_t>(b * MAXB + p / BS) * BS + p % BS; }
  void run() { run_reference(MlaDecodeArgs{q, cache.tensor, table, seq_lens, out, lse, 0.0625f}); }
};

TEST(MlaDecode, CausalMultiTokenDecodeMatchesTheDefinition) {
  for (CacheFormat format : {CacheFormat::bf16, CacheFormat::fp8_ds_mla}) {
    DecodeCase dc(format, {4, 23, 64, 2}, 3, 4);  // the last request is shorter than s_q
    dc.run();
    for (int64_t b = 0; b < dc.B(); ++b) {
      for (int64_t i = 0; i < dc.s_q; ++i) {
        // Query i of request b sees positions 0 .. seq_len - s_q + i.
        std::vector<int64_t> slots;
        for (int64_t p = 0; p <= dc.lens[b] - dc.s_q + i; ++p) slots.push_back(dc.slot(b, p));
        for (int64_t h = 0; h < DecodeCase::H; ++h) {
          const int64_t row = (b * dc.s_q + i) * DecodeCase::H + h;
          const Expected e = attention_by_definition(dc.q, row, dc.cache, slots, 0.0625);
          if (slots.empty()) {
            EXPECT_EQ(dc.lse.at<float>(row), -std::numeric_limits<float>::infinity());
          } else {
            EXPECT_NEAR(dc.lse.at<float>(row), e.lse, 1e-5 * std::max(1.0, std::fabs(e.lse)));
          }
          expect_close(dc.out, row, e, "mla_decode");
        }
      }
    }
  }
}

TEST(MlaDecode, FirstOfThreeQueriesSeesExactlyOnePositionWhenSeqLenIsThree) {
  DecodeCase dc(CacheFormat::bf16, {3}, 3, 5);
  dc.run();
  // Query 0 sees position 0 only: out = c[slot(0, 0)] exactly (softmax weight 1), lse = score.
  const auto c = dc.cache.token(dc.slot(0, 0));
  double dot = 0.0;
  for (int d = 0; d < 576; ++d) dot += bf16_at(dc.q, d) * c[d];
  EXPECT_NEAR(dc.lse.at<float>(0), 0.0625 * dot, 1e-6);
  for (int d = 0; d < 512; ++d) ASSERT_EQ(bf16_at(dc.out, d), bf16_to_float(float_to_bf16(float(c[d]))));
}

class EqualityOracle : public ::testing::TestWithParam<CacheFormat> {};

// docs/design.md, section 2.2: with topk >= L and S_t = every visible token, sparse == dense up to
// the order of summation. Slots come from logical_to_slots, as an engine would compute them.
TEST_P(EqualityOracle, SparseOverAllVisibleTokensEqualsDense) {
  DecodeCase dc(GetParam(), {1, 37, 64}, 1, 6);
  dc.run();
  constexpr int64_t TOPK = 70;  // >= every length; the rest is -1 padding
  for (bool shuffled : {false, true}) {
    HostTensor positions(DType::i32, {dc.B(), TOPK});
    for (int64_t b = 0; b < dc.B(); ++b) {
      std::vector<int32_t> row(TOPK, -1);
      std::iota(row.begin(), row.begin() + dc.lens[b], 0);
      if (shuffled) std::shuffle(row.begin(), row.end(), dc.rng);
      std::copy(row.begin(), row.end(), positions.data<int32_t>() + b * TOPK);
    }
    HostTensor slots(DType::i32, {dc.B(), TOPK});
    run_reference(LogicalToSlotsArgs{positions, dc.table, {}, slots, DecodeCase::BS}, true);
    HostTensor q(DType::bf16, {dc.B(), DecodeCase::H, 576});
    std::copy(dc.q.data<uint16_t>(), dc.q.data<uint16_t>() + q.numel(), q.data<uint16_t>());
    HostTensor out(DType::bf16, {dc.B(), DecodeCase::H, 512});
    HostTensor lse(DType::f32, {dc.B(), DecodeCase::H});
    run_reference(SparseMlaArgs{q, dc.cache.tensor, slots, out, lse, 0.0625f}, true);
    for (int64_t i = 0; i < lse.numel(); ++i) {
      if (shuffled) {
        EXPECT_NEAR(lse.at<float>(i), dc.lse.at<float>(i), 1e-6) << i;
      } else {
        EXPECT_EQ(lse.at<float>(i), dc.lse.at<float>(i)) << i;  // same order: bit-identical
      }
    }
    for (int64_t i = 0; i < out.numel(); ++i) {
      const double a = bf16_at(out, i), b = bf16_at(dc.out, i);
      if (shuffled) {
        ASSERT_NEAR(a, b, std::ldexp(std::fabs(b), -7) + 1e-7) << i;  // one bf16 ulp
      } else {
        ASSERT_EQ(out.at<uint16_t>(i), dc.out.at<uint16_t>(i)) << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, EqualityOracle,
                         ::testing::Values(CacheFormat::bf16, CacheFormat::fp8_ds_mla),
                         [](const auto& info) { return std::string(to_string(info.param)); });

TEST(MlaDecode, MissingBlocksAndOverlongSequencesAreSkippedWithoutCheckMode) {
  DecodeCase dc(CacheFormat::bf16, {40, 200}, 1, 7);  // 200 > 4 blocks * 16 positions
  dc.table.at<int32_t>(1) = -1;                       // request 0: positions 16..31 missing
  dc.run();
  std::vector<int64_t> slots0;
  for (int64_t p = 0; p < 40; ++p) {
    if (p / 16 != 1) slots0.push_back(dc.slot(0, p));
  }
  std::vector<int64_t> slots1;
  for (int64_t p = 0; p < 64; ++p) slots1.push_back(dc.slot(1, p));
  for (int64_t h = 0; h < DecodeCase::H; ++h) {
    expect_close(dc.out, h, attention_by_definition(dc.q, h, dc.cache, slots0, 0.0625), "req 0");
    expect_close(dc.out, 2 + h,
                 attention_by_definition(dc.q, 2 + h, dc.cache, slots1, 0.0625), "req 1");
  }
}

// The query's rope part as a tensor of its own (SparseMlaArgs::q_rope, q then [T, H, 512]) gives
// the joined query's result exactly; the spec says so (split_q) and plugins refuse it.
TEST(SparseMla, SplitQueryEqualsTheJoinedQuery) {
  std::mt19937 rng(9);
  constexpr int64_t T = 3, H = 2, TOPK = 5, NB = 3, BS = 4;
  Cache cache(CacheFormat::fp8_ds_mla, NB, BS, rng);
  HostTensor q(DType::bf16, {T, H, 576});
  fill_bf16(q, rng, -0.5f, 0.5f);
  HostTensor latent(DType::bf16, {T, H, 512});
  HostTensor rope(DType::bf16, {T, H, 64});
  for (int64_t r = 0; r < T * H; ++r) {
    for (int d = 0; d < 512; ++d) latent.at<uint16_t>(r * 512 + d) = q.at<uint16_t>(r * 576 + d);
    for (int d = 0; d < 64; ++d) rope.at<uint16_t>(r * 64 + d) = q.at<uint16_t>(r * 576 + 512 + d);
  }
  HostTensor idx(DType::i32, {T, TOPK});
  std::uniform_int_distribution<int> slot(-1, NB * BS - 1);
  for (int64_t i = 0; i < T * TOPK; ++i) idx.at<int32_t>(i) = slot(rng);
  HostTensor out1(DType::bf16, {T, H, 512}), out2(DType::bf16, {T, H, 512});
  HostTensor lse1(DType::f32, {T, H}), lse2(DType::f32, {T, H});
  run_reference(SparseMlaArgs{q, cache.tensor, idx, out1, lse1, 0.0625f});
  SparseMlaArgs split{latent, cache.tensor, idx, out2, lse2, 0.0625f};
  split.q_rope = rope;
  run_reference(split);
  for (int64_t i = 0; i < T * H * 512; ++i) ASSERT_EQ(out1.at<uint16_t>(i), out2.at<uint16_t>(i));
  for (int64_t i = 0; i < T * H; ++i) ASSERT_EQ(lse1.at<float>(i), lse2.at<float>(i));
  EXPECT_FALSE(spec_from_args(SparseMlaArgs{q, cache.tensor, idx, out1, lse1, 0.0625f}).split_q);
  EXPECT_TRUE(spec_from_args(split).split_q);
}

}  // namespace
}  // namespace latte::testing
