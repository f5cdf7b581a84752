// MLA without rope (rope_dim 0, GLM-5.3-Flash) and per-row valid lengths (topk_lens) on
// cpu.reference: against a float64 computation written here from docs/operations.md (the cache
// bytes built by hand, e4m3 decoded here from its bit fields), for the three row layouts; the
// equality with a rope call whose rope parts are zero; and kv_store's rows without rope.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "latte/api.hpp"
#include "ops_test_util.hpp"

namespace latte::testing {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

enum class Layout { bf16_512, fp8_528, fp8_656 };

std::string name_of(Layout l) {
  switch (l) {
    case Layout::bf16_512: return "bf16_512";
    case Layout::fp8_528: return "fp8_528";
    case Layout::fp8_656: return "fp8_656";
  }
  return "?";
}

// The value of an e4m3 (E4M3FN) code from its sign, exponent and mantissa fields.
double e4m3_value(uint8_t code) {
  const int exponent = (code >> 3) & 0xF;
  const int mantissa = code & 0x7;
  const double magnitude =
      exponent == 0 ? std::ldexp(mantissa, -9) : std::ldexp(1.0 + mantissa / 8.0, exponent - 7);
  return (code & 0x80) ? -magnitude : magnitude;
}

// The value of bf16 bits: the high half of a float32.
double bf16_value(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float f = 0.0f;
  std::memcpy(&f, &wide, 4);
  return f;
}

// A paged cache of rows without rope, filled byte by byte, and what each slot holds in float64.
struct NopeCache {
  Layout layout;
  int64_t block_size;
  HostTensor tensor;
  std::vector<std::array<double, 512>> values;

  static HostTensor make(Layout l, int64_t nb, int64_t bs) {
    switch (l) {
      case Layout::bf16_512: return HostTensor(DType::bf16, {nb, bs, 512});
      case Layout::fp8_528: return HostTensor(DType::u8, {nb, bs, 528});
      case Layout::fp8_656: return HostTensor(DType::u8, {nb, bs, 656});
    }
    return {};
  }

  NopeCache(Layout l, int64_t nb, int64_t bs, std::mt19937& rng)
      : layout(l), block_size(bs), tensor(make(l, nb, bs)), values(static_cast<std::size_t>(nb * bs)) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    // Group scales of any float value (vLLM-style amax / 448 scales are not powers of two).
    std::uniform_real_distribution<float> scales(0.0007f, 0.013f);
    std::uniform_int_distribution<int> magnitudes(0, 0x7E);  // 0x7F would be NaN
    const int64_t row_bytes = l == Layout::fp8_656 ? 656 : 528;
    for (int64_t s = 0; s < nb * bs; ++s) {
      auto& v = values[static_cast<std::size_t>(s)];
      if (l == Layout::bf16_512) {
        for (int i = 0; i < 512; ++i) {
          const uint16_t bits = float_to_bf16(normal(rng));
          tensor.at<uint16_t>(s * 512 + i) = bits;
          v[i] = bf16_value(bits);
        }
        continue;
      }
      uint8_t* row = tensor.data<uint8_t>() + s * row_bytes;
      for (int g = 0; g < 4; ++g) {
        const float scale = scales(rng);
        std::memcpy(row + 512 + 4 * g, &scale, 4);
        for (int i = g * 128; i < (g + 1) * 128; ++i) {
          const auto code = static_cast<uint8_t>(magnitudes(rng) | (rng() & 1 ? 0x80 : 0));
          row[i] = code;
          v[i] = e4m3_value(code) * static_cast<double>(scale);
        }
      }
      // The reserved tail: NaN codes and NaN f32 bits. Were any of it read, results would be NaN.
      if (l == Layout::fp8_656) std::memset(row + 528, 0xFF, 128);
    }
  }
  [[nodiscard]] int64_t num_slots() const { return static_cast<int64_t>(values.size()); }
};

// The definition (docs/operations.md, sparse_mla): score = scale * q . c over the valid entries
// of the row's first `len` columns; lse = ln sum exp(score); out = softmax-weighted c.
struct Want {
  std::vector<double> out;  // [H, 512]
  std::vector<double> lse;  // [H]
};

Want by_definition(const HostTensor& q, int64_t t, int64_t heads, const NopeCache& cache,
                   const std::vector<int32_t>& row, int64_t len, double scale) {
  Want w{std::vector<double>(static_cast<std::size_t>(heads * 512), 0.0),
         std::vector<double>(static_cast<std::size_t>(heads), -kInf)};
  std::vector<int64_t> slots;
  for (int64_t k = 0; k < len; ++k) {
    if (row[k] >= 0 && row[k] < cache.num_slots()) slots.push_back(row[k]);
  }
  if (slots.empty()) return w;
  for (int64_t h = 0; h < heads; ++h) {
    std::vector<double> scores;
    double top = -kInf;
    for (int64_t s : slots) {
      const auto& c = cache.values[static_cast<std::size_t>(s)];
      double dot = 0.0;
      for (int d = 0; d < 512; ++d) dot += bf16_value(q.at<uint16_t>((t * heads + h) * 512 + d)) * c[d];
      scores.push_back(scale * dot);
      top = std::max(top, scores.back());
    }
    double sum = 0.0;
    for (double s : scores) sum += std::exp(s - top);
    const double lse = top + std::log(sum);
    w.lse[static_cast<std::size_t>(h)] = lse;
    for (std::size_t i = 0; i < slots.size(); ++i) {
      const auto& c = cache.values[static_cast<std::size_t>(slots[i])];
      const double p = std::exp(scores[i] - lse);
      for (int d = 0; d < 512; ++d) w.out[static_cast<std::size_t>(h * 512 + d)] += p * c[d];
    }
  }
  return w;
}

// out within the bf16 rounding of the float64 value (half an ulp, with slack), lse within float32.
void expect_matches(const HostTensor& out, const HostTensor& lse, int64_t t, int64_t heads, const Want& w,
                    const std::string& what) {
  for (int64_t h = 0; h < heads; ++h) {
    const double want_lse = w.lse[static_cast<std::size_t>(h)];
    const double got_lse = lse.at<float>(t * heads + h);
    if (std::isinf(want_lse)) {
      EXPECT_EQ(got_lse, -kInf) << what << " token " << t << " head " << h;
    } else {
      EXPECT_NEAR(got_lse, want_lse, 1e-6 * std::fabs(want_lse) + 1e-6) << what << " token " << t << " head " << h;
    }
    for (int d = 0; d < 512; ++d) {
      const double want = w.out[static_cast<std::size_t>(h * 512 + d)];
      const double got = bf16_at(out, (t * heads + h) * 512 + d);
      ASSERT_NEAR(got, want, std::ldexp(std::fabs(want), -8) + 1e-7)
          << what << " token " << t << " head " << h << " dim " << d;
    }
  }
}

struct NopeCase {
  Layout layout;
  int64_t heads;
};
std::string case_name(const NopeCase& c) { return name_of(c.layout) + "_H" + std::to_string(c.heads); }

class NopeDefinition : public ::testing::TestWithParam<NopeCase> {};

// Rows with padding (-1), a repeated slot, an out-of-range entry (treated as -1 without check
// mode) and a row of nothing (out 0, lse -inf), for heads 1..64 and non-power-of-two fp8 scales.
TEST_P(NopeDefinition, MatchesTheFloat64Definition) {
  const NopeCase c = GetParam();
  std::mt19937 rng(static_cast<unsigned>(7 + c.heads + 100 * static_cast<int>(c.layout)));
  const NopeCache cache(c.layout, 5, 16, rng);  // 80 slots
  const int64_t T = 4, topk = 9;
  HostTensor q(DType::bf16, {T, c.heads, 512});
  fill_bf16(q, rng, -0.5f, 0.5f);
  const std::vector<std::vector<int32_t>> rows = {{3, 17, 79, -1, 42, 42, 0, -1, -1},
                                                  {-1, -1, -1, -1, -1, -1, -1, -1, -1},
                                                  {64, 1000, 5, 6, 7, 8, 9, 10, 11},
                                                  {50, -1, 51, -1, 52, -1, 53, -1, 54}};
  HostTensor idx(DType::i32, {T, topk});
  for (int64_t t = 0; t < T; ++t)
    for (int64_t k = 0; k < topk; ++k) idx.at<int32_t>(t * topk + k) = rows[t][k];
  HostTensor out(DType::bf16, {T, c.heads, 512});
  HostTensor lse(DType::f32, {T, c.heads});
  for (const double scale : {0.0625, 0.1352337}) {
    SparseMlaArgs a{q, cache.tensor, idx, out, lse, static_cast<float>(scale)};
    a.rope_dim = kNoRopeDim;
    EXPECT_EQ(latte::run(a), "cpu.reference");  // the selector's choice for a NoPE spec on the CPU
    for (int64_t t = 0; t < T; ++t) {
      expect_matches(out, lse, t, c.heads, by_definition(q, t, c.heads, cache, rows[t], topk, scale),
                     case_name(c));
    }
    for (int64_t i = 0; i < c.heads * 512; ++i) EXPECT_EQ(out.at<uint16_t>(c.heads * 512 + i), 0u);  // +0.0
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, NopeDefinition,
                         ::testing::Values(NopeCase{Layout::bf16_512, 1}, NopeCase{Layout::bf16_512, 64},
                                           NopeCase{Layout::fp8_528, 3}, NopeCase{Layout::fp8_528, 64},
                                           NopeCase{Layout::fp8_656, 1}, NopeCase{Layout::fp8_656, 16},
                                           NopeCase{Layout::fp8_656, 64}),
                         [](const auto& info) { return case_name(info.param); });

// GLM-5.3-Flash's decode rows: vLLM's 2176-wide index buffers, of which at most 2051 columns hold
// tokens (512 pools x 4 + 3 tail). Entries past topk_lens[t] are ignored whatever they hold:
// valid slots, -1, out-of-range values, in check mode too.
TEST(NopeTopkLens, Width2176WithRowLengthsUpTo2051) {
  for (const Layout layout : {Layout::bf16_512, Layout::fp8_528, Layout::fp8_656}) {
    std::mt19937 rng(11 + static_cast<unsigned>(layout));
    const NopeCache cache(layout, 40, 64, rng);  // 2560 slots
    const int64_t T = 4, H = 4, topk = 2176;
    const std::vector<int32_t> lens = {2051, 0, 1, 2048};
    HostTensor q(DType::bf16, {T, H, 512});
    fill_bf16(q, rng, -0.25f, 0.25f);
    std::uniform_int_distribution<int32_t> slot(0, 2559);
    std::vector<std::vector<int32_t>> rows(T, std::vector<int32_t>(topk));
    HostTensor idx(DType::i32, {T, topk});
    HostTensor row_lens(DType::i32, {T});
    for (int64_t t = 0; t < T; ++t) {
      row_lens.at<int32_t>(t) = lens[t];
      for (int64_t k = 0; k < topk; ++k) {
        int32_t v = slot(rng);
        if (k >= lens[t]) v = k % 3 == 0 ? v : k % 3 == 1 ? -1 : (1 << 30);  // ignored: anything goes
        else if (k % 97 == 0) v = -1;                                        // padding inside the row
        rows[t][k] = v;
        idx.at<int32_t>(t * topk + k) = v;
      }
    }
    HostTensor out(DType::bf16, {T, H, 512});
    HostTensor lse(DType::f32, {T, H});
    SparseMlaArgs a{q, cache.tensor, idx, out, lse, 0.0625f};
    a.rope_dim = kNoRopeDim;
    a.topk_lens = row_lens;
    run_reference(a, /*check_indices=*/true);  // the garbage past each length is not checked either
    for (int64_t t = 0; t < T; ++t) {
      expect_matches(out, lse, t, H, by_definition(q, t, H, cache, rows[t], lens[t], 0.0625), name_of(layout));
    }
    EXPECT_EQ(lse.at<float>(1 * H), -kInf);  // topk_lens 0: the empty row
  }
}

// Without check mode a length outside 0..topk is clamped: above topk reads every column, below 0
// none (in check mode it is an error: validate_test.cpp).
TEST(NopeTopkLens, LengthsOutsideTheRowAreClampedWithoutCheckMode) {
  std::mt19937 rng(5);
  const NopeCache cache(Layout::fp8_528, 2, 8, rng);
  HostTensor q(DType::bf16, {2, 2, 512});
  fill_bf16(q, rng);
  const std::vector<int32_t> row = {1, 2, 3, 15};
  HostTensor idx(DType::i32, {2, 4});
  for (int k = 0; k < 8; ++k) idx.at<int32_t>(k) = row[k % 4];
  HostTensor lens(DType::i32, {2});
  lens.at<int32_t>(0) = 5000;
  lens.at<int32_t>(1) = -3;
  HostTensor out(DType::bf16, {2, 2, 512});
  HostTensor lse(DType::f32, {2, 2});
  SparseMlaArgs a{q, cache.tensor, idx, out, lse, 0.0625f};
  a.rope_dim = kNoRopeDim;
  a.topk_lens = lens;
  run_reference(a);
  expect_matches(out, lse, 0, 2, by_definition(q, 0, 2, cache, row, 4, 0.0625), "length 5000");
  expect_matches(out, lse, 1, 2, by_definition(q, 1, 2, cache, row, 0, 0.0625), "length -3");
  EXPECT_THROW(run_reference(a, /*check_indices=*/true), Error);
}

// A NoPE call equals, bit for bit, a rope call whose query rope part and cache rope part are
// zero: the same 512 dims scored, the rope ones adding nothing (joined and split queries alike,
// with and without topk_lens).
TEST(NopeEquality, EqualsTheRopeCallWithZeroRope) {
  for (const Layout layout : {Layout::bf16_512, Layout::fp8_528, Layout::fp8_656}) {
    SCOPED_TRACE(name_of(layout));
    std::mt19937 rng(21 + static_cast<unsigned>(layout));
    const int64_t nb = 6, bs = 8, T = 3, H = 5, topk = 12;
    const NopeCache cache(layout, nb, bs, rng);
    // The same tokens with a zero rope: 576 bf16 values, or the 528 fp8 bytes then 64 zero bf16.
    const bool bf16 = layout == Layout::bf16_512;
    HostTensor roped(bf16 ? DType::bf16 : DType::u8, {nb, bs, bf16 ? int64_t{576} : int64_t{656}});
    const int64_t nope_row = layout == Layout::fp8_656 ? 656 : 528;
    for (int64_t s = 0; s < nb * bs; ++s) {
      if (bf16) {
        std::memcpy(roped.data<uint16_t>() + s * 576, cache.tensor.data<uint16_t>() + s * 512, 1024);
      } else {
        std::memcpy(roped.data<uint8_t>() + s * 656, cache.tensor.data<uint8_t>() + s * nope_row, 528);
      }
    }
    HostTensor q(DType::bf16, {T, H, 512});
    fill_bf16(q, rng);
    HostTensor q576(DType::bf16, {T, H, 576});
    for (int64_t r = 0; r < T * H; ++r) std::memcpy(q576.data<uint16_t>() + r * 576, q.data<uint16_t>() + r * 512, 1024);
    HostTensor q_rope(DType::bf16, {T, H, 64});  // zeros
    HostTensor idx(DType::i32, {T, topk});
    std::uniform_int_distribution<int32_t> slot(-1, static_cast<int32_t>(nb * bs - 1));
    for (int64_t i = 0; i < T * topk; ++i) idx.at<int32_t>(i) = slot(rng);
    HostTensor lens(DType::i32, {T});
    lens.at<int32_t>(0) = 12, lens.at<int32_t>(1) = 7, lens.at<int32_t>(2) = 0;

    for (const bool with_lens : {false, true}) {
      HostTensor out_nope(DType::bf16, {T, H, 512}), lse_nope(DType::f32, {T, H});
      SparseMlaArgs nope{q, cache.tensor, idx, out_nope, lse_nope, 0.0625f};
      nope.rope_dim = kNoRopeDim;
      if (with_lens) nope.topk_lens = lens;
      run_reference(nope);
      for (const bool split : {false, true}) {
        HostTensor out_rope(DType::bf16, {T, H, 512}), lse_rope(DType::f32, {T, H});
        SparseMlaArgs rope{split ? q : q576, roped, idx, out_rope, lse_rope, 0.0625f};
        if (split) rope.q_rope = q_rope;
        if (with_lens) rope.topk_lens = lens;
        run_reference(rope);
        EXPECT_EQ(std::memcmp(out_nope.data<uint8_t>(), out_rope.data<uint8_t>(), T * H * 512 * 2), 0)
            << "lens " << with_lens << " split " << split;
        EXPECT_EQ(std::memcmp(lse_nope.data<uint8_t>(), lse_rope.data<uint8_t>(), T * H * 4), 0)
            << "lens " << with_lens << " split " << split;
      }
    }
  }
}

// kv_store without rope: bf16 rows get the latent's bits; fp8 rows the 528 bytes of
// pack_fp8_nope_token, which decode back within the e4m3 rounding; a 656-byte row's last 128
// bytes and every slot not named stay as they were.
TEST(NopeKvStore, WritesRowsWithoutRopeAndLeavesTheReservedTail) {
  std::mt19937 rng(3);
  const int64_t T = 5, nb = 3, bs = 4;
  HostTensor latent(DType::bf16, {T, 512});
  fill_bf16(latent, rng, -3.0f, 3.0f);
  HostTensor slot_mapping(DType::i32, {T});
  const int32_t slots[T] = {0, 7, -1, 11, 4};
  for (int64_t t = 0; t < T; ++t) slot_mapping.at<int32_t>(t) = slots[t];
  for (const Fp8ScaleKind kind : {Fp8ScaleKind::amax, Fp8ScaleKind::pow2}) {
    for (const Layout layout : {Layout::bf16_512, Layout::fp8_528, Layout::fp8_656}) {
      SCOPED_TRACE(name_of(layout) + " " + std::string(to_string(kind)));
      HostTensor cache = NopeCache::make(layout, nb, bs);
      const int64_t row_bytes = layout == Layout::bf16_512 ? 1024 : layout == Layout::fp8_528 ? 528 : 656;
      for (int64_t i = 0; i < nb * bs * row_bytes; ++i) cache.at<uint8_t>(i) = static_cast<uint8_t>(0xA5 ^ i);
      latte::run(KvStoreArgs{latent, {}, slot_mapping, cache, kind, kNoRopeDim});
      for (int64_t s = 0; s < nb * bs; ++s) {
        const uint8_t* row = cache.data<uint8_t>() + s * row_bytes;
        int64_t t = -1;
        for (int64_t u = 0; u < T; ++u) t = slots[u] == s ? u : t;
        const int64_t written = t < 0 ? 0 : layout == Layout::bf16_512 ? 1024 : 528;
        for (int64_t b = written; b < row_bytes; ++b) {
          ASSERT_EQ(row[b], static_cast<uint8_t>(0xA5 ^ (s * row_bytes + b))) << "slot " << s << " byte " << b;
        }
        if (t < 0) continue;
        const uint16_t* bits = latent.data<uint16_t>() + t * 512;
        if (layout == Layout::bf16_512) {
          EXPECT_EQ(std::memcmp(row, bits, 1024), 0) << "slot " << s;
          continue;
        }
        std::array<float, 512> values{};
        for (int i = 0; i < 512; ++i) values[i] = bf16_to_float(bits[i]);
        std::array<uint8_t, 528> packed{};
        pack_fp8_nope_token(values.data(), kind, packed.data());
        EXPECT_EQ(std::memcmp(row, packed.data(), 528), 0) << "slot " << s;
        // Decoded with this file's own e4m3 reading: within half an e4m3 step of each value.
        for (int g = 0; g < 4; ++g) {
          float scale = 0.0f;
          std::memcpy(&scale, row + 512 + 4 * g, 4);
          for (int i = g * 128; i < (g + 1) * 128; ++i) {
            const double back = e4m3_value(row[i]) * scale;
            EXPECT_NEAR(back, values[i], std::ldexp(std::fabs(values[i]), -4) + 8 * std::ldexp(scale, -9))
                << "slot " << s << " dim " << i;
          }
        }
      }
    }
  }
}

// The fp8 row without rope is the first 528 bytes of the fp8_ds_mla row of the same latent.
TEST(NopeKvStore, TheFp8RowIsTheRopeRowWithoutItsRope) {
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::array<float, 576> v{};
  for (float& x : v) x = normal(rng);
  std::array<uint8_t, 656> with_rope{};
  std::array<uint8_t, 656> without{};
  without.fill(0x5A);
  pack_fp8_ds_mla_token(v.data(), v.data() + 512, Fp8ScaleKind::amax, with_rope.data());
  pack_fp8_nope_token(v.data(), Fp8ScaleKind::amax, without.data());
  EXPECT_EQ(std::memcmp(with_rope.data(), without.data(), kFp8NopeBytes), 0);
  for (int b = kFp8NopeBytes; b < 656; ++b) EXPECT_EQ(without[b], 0x5A);
  std::array<float, 512> a{}, b{};
  unpack_fp8_nope_token(without.data(), a.data());
  std::array<float, 576> c{};
  unpack_fp8_ds_mla_token(with_rope.data(), c.data());
  for (int i = 0; i < 512; ++i) b[i] = c[i];
  EXPECT_EQ(a, b);
  EXPECT_EQ(cache_bytes_per_token(CacheFormat::fp8_ds_mla, kNoRopeDim), 528u);
  EXPECT_EQ(cache_bytes_per_token(CacheFormat::bf16, kNoRopeDim), 1024u);
  EXPECT_EQ(cache_bytes_per_token(CacheFormat::fp8_ds_mla), 656u);
}

}  // namespace
}  // namespace latte::testing
