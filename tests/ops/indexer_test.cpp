// indexer_logits and indexer_topk on cpu.reference: hand-computed scores and ties, a float64
// definition written here, -1 padding, index kinds, token_request and missing blocks.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "ops_test_util.hpp"

namespace latte::testing {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// An indexer problem: T tokens, H index heads, K pages of BS tokens, one block_table row per
// request. Queries are e4m3 with per-head scales unless bf16 is asked for.
struct IndexerCase {
  int64_t T, H, BS, NB, B, MAXB;
  DType q_dtype;
  HostTensor q, q_scale, weights, k_cache, table, token_request, visible;
  bool use_token_request = false;

  IndexerCase(int64_t t, int64_t h, int64_t bs, int64_t nb, int64_t b, int64_t maxb, DType qd)
      : T(t), H(h), BS(bs), NB(nb), B(b), MAXB(maxb), q_dtype(qd),
        q(qd, {t, h, 128}),
        q_scale(DType::f32, {t, h}),
        weights(DType::f32, {t, h}),
        k_cache(DType::u8, {nb, bs, 132}),
        table(DType::i32, {b, maxb}),
        token_request(DType::i32, {t}),
        visible(DType::i32, {t}) {}

  void set_k(int64_t slot, const std::array<float, 128>& k) const {
    pack_indexer_k_token(k.data(), Fp8ScaleKind::amax, k_cache.data<uint8_t>() + (slot / BS) * BS * 132,
                         static_cast<int>(BS), static_cast<int>(slot % BS));
  }
  void set_q(int64_t t, int64_t j, const std::array<float, 128>& v, float scale) const {
    for (int d = 0; d < 128; ++d) {
      const int64_t i = (t * H + j) * 128 + d;
      if (q_dtype == DType::bf16) q.at<uint16_t>(i) = float_to_bf16(v[d]);
      else q.at<uint8_t>(i) = float_to_e4m3(v[d] / scale);
    }
    q_scale.at<float>(t * H + j) = scale;
  }
  IndexerInputs inputs() const {
    return {q, q_dtype == DType::e4m3 ? q_scale.view() : TensorView{}, weights, k_cache, table,
            use_token_request ? token_request.view() : TensorView{}, visible};
  }
  int64_t row(int64_t t) const { return use_token_request ? token_request.at<int32_t>(t) : t; }
  int64_t slot(int64_t t, int64_t p) const {
    return table.at<int32_t>(row(t) * MAXB + p / BS) * BS + p % BS;
  }

  // docs/design.md, section 4.1 written out: I[t,p] = sum_j w[t,j] * ReLU(q[t,j] . k[p]).
  double score(int64_t t, int64_t p) const {
    const int64_t s = slot(t, p);
    std::array<float, 128> k{};
    unpack_indexer_k_token(k_cache.data<uint8_t>() + (s / BS) * BS * 132, static_cast<int>(BS),
                           static_cast<int>(s % BS), k.data());
    double total = 0.0;
    for (int64_t j = 0; j < H; ++j) {
      double dot = 0.0;
      for (int d = 0; d < 128; ++d) {
        const int64_t i = (t * H + j) * 128 + d;
        const double qv = q_dtype == DType::bf16
                              ? bf16_at(q, i)
                              : double(e4m3_to_float(q.at<uint8_t>(i))) * q_scale.at<float>(t * H + j);
        dot += qv * k[d];
      }
      total += weights.at<float>(t * H + j) * std::max(0.0, dot);
    }
    return total;
  }
};

std::vector<int32_t> topk_row(const OpArgs& args, int64_t t, int64_t topk) {
  const auto& a = std::get<IndexerTopkArgs>(args);
  const int32_t* p = a.indices.ptr<int32_t>() + t * topk;
  return {p, p + topk};
}

// One head, one token, k[0] carrying the value: scores are w * ReLU(q0 * k0).
TEST(IndexerTopk, HandComputedScoresTiesAndPadding) {
  IndexerCase c(1, 1, 4, 2, 1, 2, DType::bf16);
  const std::array<float, 5> k0 = {1.0f, -2.0f, 3.0f, 3.0f, 0.5f};  // positions 0..4
  c.table.at<int32_t>(0) = 1;  // positions 0..3 in block 1 (slots 4..7)
  c.table.at<int32_t>(1) = 0;  // position 4 in block 0 (slot 0)
  for (int64_t p = 0; p < 5; ++p) {
    std::array<float, 128> k{};
    k[0] = k0[p];
    c.set_k(c.slot(0, p), k);
  }
  std::array<float, 128> q{};
  q[0] = 1.0f;
  c.set_q(0, 0, q, 1.0f);
  c.weights.at<float>(0) = 2.0f;
  c.visible.at<int32_t>(0) = 5;

  HostTensor logits(DType::f32, {1, 8});
  run_reference(IndexerLogitsArgs{c.inputs(), logits}, true);
  const std::array<float, 5> want = {2.0f, 0.0f, 6.0f, 6.0f, 1.0f};
  for (int p = 0; p < 5; ++p) EXPECT_NEAR(logits.at<float>(p), want[p], 1e-5) << p;
  for (int p = 5; p < 8; ++p) EXPECT_EQ(logits.at<float>(p), kNegInf) << p;  // not visible

  // Top 3 by score, the tie 6 = 6 to the smaller position; the reference lists them in order.
  HostTensor idx(DType::i32, {1, 3});
  const OpArgs logical = IndexerTopkArgs{c.inputs(), idx, IndexKind::logical};
  run_reference(logical, true);
  EXPECT_EQ(topk_row(logical, 0, 3), (std::vector<int32_t>{2, 3, 0}));
  // A three-way tie across the topk boundary: positions 2, 3 and 4 all score 6.
  HostTensor idx2(DType::i32, {1, 2});
  std::array<float, 128> k{};
  k[0] = 3.0f;
  c.set_k(c.slot(0, 4), k);  // position 4 now also scores 6
  const OpArgs two = IndexerTopkArgs{c.inputs(), idx2, IndexKind::logical};
  run_reference(two, true);
  EXPECT_EQ(topk_row(two, 0, 2), (std::vector<int32_t>{2, 3}));  // 4 loses the tie
  // More room than visible tokens: all 5, then -1; physical slots through the block table.
  HostTensor idx8(DType::i32, {1, 8});
  const OpArgs physical = IndexerTopkArgs{c.inputs(), idx8, IndexKind::physical};
  run_reference(physical, true);
  EXPECT_EQ(topk_row(physical, 0, 8), (std::vector<int32_t>{6, 7, 0, 4, 5, -1, -1, -1}));
}

TEST(IndexerTopk, NegativeWeightsAndReluOrder) {
  // ReLU applies per head before the weight: a head with a negative dot adds nothing even with
  // a negative weight; a negative weight on a positive dot lowers the score.
  IndexerCase c(1, 2, 4, 1, 1, 1, DType::bf16);
  c.table.at<int32_t>(0) = 0;
  c.visible.at<int32_t>(0) = 2;
  std::array<float, 128> k{};
  k[0] = 1.0f;
  c.set_k(0, k);  // position 0: dot head0 = 1, head1 = -1
  k[0] = -1.0f;
  c.set_k(1, k);  // position 1: dot head0 = -1, head1 = 1
  std::array<float, 128> q{};
  q[0] = 1.0f;
  c.set_q(0, 0, q, 1.0f);
  q[0] = -1.0f;
  c.set_q(0, 1, q, 1.0f);
  c.weights.at<float>(0) = -0.5f;
  c.weights.at<float>(1) = 2.0f;
  HostTensor logits(DType::f32, {1, 2});
  run_reference(IndexerLogitsArgs{c.inputs(), logits});
  EXPECT_FLOAT_EQ(logits.at<float>(0), -0.5f);  // -0.5 * ReLU(1) + 2 * ReLU(-1)
  EXPECT_FLOAT_EQ(logits.at<float>(1), 2.0f);   // -0.5 * ReLU(-1) + 2 * ReLU(1)
}

class IndexerDefinition : public ::testing::TestWithParam<DType> {};

TEST_P(IndexerDefinition, LogitsAndTopkMatchTheFloat64Definition) {
  std::mt19937 rng(8);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(0.1f, 1.0f);
  // Prefill-like: 6 tokens of 2 requests, causal lengths, token_request mapping.
  IndexerCase c(6, 4, 8, 10, 2, 5, GetParam());
  c.use_token_request = true;
  std::vector<int32_t> blocks(10);
  std::iota(blocks.begin(), blocks.end(), 0);
  std::shuffle(blocks.begin(), blocks.end(), rng);
  for (int64_t i = 0; i < 10; ++i) c.table.at<int32_t>(i) = blocks[static_cast<std::size_t>(i)];
  const std::array<int32_t, 6> req = {0, 0, 0, 1, 1, 1};
  const std::array<int32_t, 6> lens = {38, 39, 40, 1, 0, 17};
  for (int64_t t = 0; t < 6; ++t) {
    c.token_request.at<int32_t>(t) = req[t];
    c.visible.at<int32_t>(t) = lens[t];
    for (int64_t j = 0; j < 4; ++j) {
      std::array<float, 128> q{};
      for (float& x : q) x = normal(rng);
      c.set_q(t, j, q, 0.02f);
      c.weights.at<float>(t * 4 + j) = uniform(rng);
    }
  }
  for (int64_t s = 0; s < 80; ++s) {
    std::array<float, 128> k{};
    for (float& x : k) x = normal(rng);
    c.set_k(s, k);
  }
  constexpr int64_t L = 42, TOPK = 16;
  HostTensor logits(DType::f32, {6, L});
  run_reference(IndexerLogitsArgs{c.inputs(), logits}, true);
  HostTensor idx(DType::i32, {6, TOPK});
  const OpArgs args = IndexerTopkArgs{c.inputs(), idx, IndexKind::logical};
  run_reference(args, true);
  HostTensor phys(DType::i32, {6, TOPK});
  const OpArgs pargs = IndexerTopkArgs{c.inputs(), phys, IndexKind::physical};
  run_reference(pargs, true);

  for (int64_t t = 0; t < 6; ++t) {
    std::vector<std::pair<double, int32_t>> ranked;  // (-score, position): sorts best first
    for (int64_t p = 0; p < L; ++p) {
      const float got = logits.at<float>(t * L + p);
      if (p >= lens[t]) {
        EXPECT_EQ(got, kNegInf) << t << " " << p;
        continue;
      }
      const double want = c.score(t, p);
      EXPECT_NEAR(got, want, 1e-5 * std::max(1.0, std::fabs(want))) << t << " " << p;
      ranked.emplace_back(-want, static_cast<int32_t>(p));
    }
    std::sort(ranked.begin(), ranked.end());
    const auto logical = topk_row(args, t, TOPK);
    const auto physical = topk_row(pargs, t, TOPK);
    const std::size_t n = std::min<std::size_t>(TOPK, ranked.size());
    // Random scores are distinct, so the chosen set is unambiguous.
    std::set<int32_t> want_set, got_set;
    for (std::size_t i = 0; i < n; ++i) want_set.insert(ranked[i].second);
    for (std::size_t i = 0; i < n; ++i) got_set.insert(logical[i]);
    EXPECT_EQ(got_set, want_set) << "token " << t;
    for (std::size_t i = n; i < TOPK; ++i) {
      EXPECT_EQ(logical[i], -1) << t;
      EXPECT_EQ(physical[i], -1) << t;
    }
    for (std::size_t i = 0; i < n; ++i) {
      EXPECT_EQ(physical[i], c.slot(t, logical[i])) << "token " << t << " entry " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(QueryDtypes, IndexerDefinition, ::testing::Values(DType::e4m3, DType::bf16),
                         [](const auto& info) { return std::string(to_string(info.param)); });

TEST(IndexerTopk, MissingBlocksBadRowsAndLongLengthsNeverReadOutOfBounds) {
  IndexerCase c(3, 1, 4, 2, 2, 2, DType::bf16);
  c.use_token_request = true;
  c.table.at<int32_t>(0) = 0;
  c.table.at<int32_t>(1) = -1;  // request 0: positions 4..7 missing
  c.table.at<int32_t>(2) = 7;   // request 1: block 7 does not exist
  c.table.at<int32_t>(3) = 1;
  for (int64_t s = 0; s < 8; ++s) {
    std::array<float, 128> k{};
    k[0] = static_cast<float>(s + 1);
    c.set_k(s, k);
  }
  std::array<float, 128> q{};
  q[0] = 1.0f;
  for (int64_t t = 0; t < 3; ++t) {
    c.set_q(t, 0, q, 1.0f);
    c.weights.at<float>(t) = 1.0f;
  }
  c.token_request.at<int32_t>(0) = 0;
  c.token_request.at<int32_t>(1) = 1;
  c.token_request.at<int32_t>(2) = 5;  // no such request
  c.visible.at<int32_t>(0) = 100;      // longer than the block table: clamped to 8
  c.visible.at<int32_t>(1) = 8;
  c.visible.at<int32_t>(2) = 8;
  HostTensor idx(DType::i32, {3, 6});
  const OpArgs args = IndexerTopkArgs{c.inputs(), idx, IndexKind::logical};
  run_reference(args);  // no check mode
  EXPECT_EQ(topk_row(args, 0, 6), (std::vector<int32_t>{3, 2, 1, 0, -1, -1}));
  EXPECT_EQ(topk_row(args, 1, 6), (std::vector<int32_t>{7, 6, 5, 4, -1, -1}));
  EXPECT_EQ(topk_row(args, 2, 6), (std::vector<int32_t>(6, -1)));
  // Check mode names the first bad value instead.
  EXPECT_THROW(run_reference(args, true), Error);
}

TEST(IndexerLogits, ZeroVisibleIsAllMinusInfinity) {
  IndexerCase c(1, 1, 4, 1, 1, 1, DType::e4m3);
  c.table.at<int32_t>(0) = 0;
  c.visible.at<int32_t>(0) = 0;
  c.q_scale.at<float>(0) = 1.0f;
  HostTensor logits(DType::f32, {1, 4});
  run_reference(IndexerLogitsArgs{c.inputs(), logits}, true);
  for (int p = 0; p < 4; ++p) EXPECT_EQ(logits.at<float>(p), kNegInf);
  HostTensor idx(DType::i32, {1, 2});
  const OpArgs args = IndexerTopkArgs{c.inputs(), idx, IndexKind::physical};
  run_reference(args, true);
  EXPECT_EQ(topk_row(args, 0, 2), (std::vector<int32_t>{-1, -1}));
}

}  // namespace
}  // namespace latte::testing
