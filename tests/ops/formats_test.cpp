// e4m3 and bf16 conversions against definition-level implementations written here (value
// formulas from sign/exponent/mantissa and nearest-even search over the code tables), and the
// fp8_ds_mla / indexer K byte layouts with their derived error bounds.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "latte/formats.hpp"
#include "latte/ops.hpp"

namespace latte {
namespace {

// ---- e4m3 by definition -------------------------------------------------------------------

// OCP E4M3FN: bias 7, 3 mantissa bits, no infinities, S.1111.111 is NaN.
double e4m3_value_by_definition(uint8_t code) {
  const int sign = code >> 7;
  const int exponent = (code >> 3) & 0xF;
  const int mantissa = code & 0x7;
  if (exponent == 0xF && mantissa == 0x7) return std::numeric_limits<double>::quiet_NaN();
  const double magnitude = exponent == 0
                               ? mantissa * std::pow(2.0, -9)                       // subnormal
                               : (8 + mantissa) * std::pow(2.0, exponent - 7 - 3);  // 1.m * 2^(e-7)
  return sign ? -magnitude : magnitude;
}

// Nearest finite e4m3 value by exhaustive search over the 127 non-negative finite codes;
// a tie goes to the even code (mantissa LSB 0); beyond 448 saturates; NaN -> 0x7F with sign.
uint8_t e4m3_by_search(float x) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  if (std::isnan(x)) return sign | 0x7F;
  const double a = std::fabs(static_cast<double>(x));
  if (a >= 448.0) return sign | 0x7E;
  int best = 0;
  double best_dist = std::numeric_limits<double>::infinity();
  for (int code = 0; code <= 0x7E; ++code) {
    const double dist = std::fabs(e4m3_value_by_definition(static_cast<uint8_t>(code)) - a);
    if (dist < best_dist || (dist == best_dist && (code & 1) == 0)) {
      best = code;
      best_dist = dist;
    }
  }
  return static_cast<uint8_t>(sign | best);
}

TEST(E4m3, DecodesAll256CodesByDefinition) {
  for (int code = 0; code < 256; ++code) {
    const double want = e4m3_value_by_definition(static_cast<uint8_t>(code));
    const float got = e4m3_to_float(static_cast<uint8_t>(code));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << "code " << code;
    } else {
      EXPECT_EQ(static_cast<double>(got), want) << "code " << code;
    }
  }
  // Landmarks of the format.
  EXPECT_EQ(e4m3_to_float(0x7E), 448.0f);
  EXPECT_EQ(e4m3_to_float(0xFE), -448.0f);
  EXPECT_EQ(e4m3_to_float(0x08), 0.015625f);        // smallest normal, 2^-6
  EXPECT_EQ(e4m3_to_float(0x01), 0.001953125f);     // smallest subnormal, 2^-9
  EXPECT_EQ(e4m3_to_float(0x38), 1.0f);
  EXPECT_TRUE(std::signbit(e4m3_to_float(0x80)));   // -0
  EXPECT_TRUE(std::isnan(e4m3_to_float(0x7F)));
  EXPECT_TRUE(std::isnan(e4m3_to_float(0xFF)));
}

TEST(E4m3, EveryFiniteCodeRoundTrips) {
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7F) == 0x7F) continue;
    EXPECT_EQ(float_to_e4m3(e4m3_to_float(static_cast<uint8_t>(code))), code) << "code " << code;
  }
}

TEST(E4m3, MidpointsAndNeighboursMatchNearestEvenSearch) {
  int ties_checked = 0;
  for (int code = 0; code < 0x7E; ++code) {
    const double lo = e4m3_value_by_definition(static_cast<uint8_t>(code));
    const double hi = e4m3_value_by_definition(static_cast<uint8_t>(code + 1));
    const auto mid = static_cast<float>((lo + hi) / 2);  // exact: few significant bits
    ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2);
    for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1000.0f)}) {
      EXPECT_EQ(float_to_e4m3(x), e4m3_by_search(x)) << "x = " << x;
      EXPECT_EQ(float_to_e4m3(-x), e4m3_by_search(-x)) << "x = " << -x;
    }
    // The tie itself goes to the even code of the two.
    EXPECT_EQ(float_to_e4m3(mid), (code & 1) == 0 ? code : code + 1) << "tie at " << mid;
    ++ties_checked;
  }
  EXPECT_EQ(ties_checked, 0x7E);
}

TEST(E4m3, SpecialValuesSaturateOrKeepNaN) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(float_to_e4m3(inf), 0x7E);
  EXPECT_EQ(float_to_e4m3(-inf), 0xFE);
  EXPECT_EQ(float_to_e4m3(464.0f), 0x7E);   // the would-be tie with 480 saturates
  EXPECT_EQ(float_to_e4m3(1e30f), 0x7E);
  EXPECT_EQ(float_to_e4m3(-449.0f), 0xFE);
  EXPECT_EQ(float_to_e4m3(nan), 0x7F);
  EXPECT_EQ(float_to_e4m3(-nan), 0xFF);
  EXPECT_EQ(float_to_e4m3(0.0f), 0x00);
  EXPECT_EQ(float_to_e4m3(-0.0f), 0x80);
  EXPECT_EQ(float_to_e4m3(std::ldexp(1.0f, -10)), 0x00);  // half the smallest subnormal: tie to 0
  EXPECT_EQ(float_to_e4m3(std::nextafter(std::ldexp(1.0f, -10), 1.0f)), 0x01);
  EXPECT_EQ(float_to_e4m3(std::numeric_limits<float>::denorm_min()), 0x00);
}

TEST(E4m3, LargeRandomSampleMatchesNearestEvenSearch) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> bits;
  std::uniform_real_distribution<float> linear(-480.0f, 480.0f);
  std::uniform_real_distribution<float> log2mag(-12.0f, 9.0f);
  std::bernoulli_distribution negative(0.5);
  constexpr int kPerKind = 200000;
  int mismatches = 0;
  for (int i = 0; i < 3 * kPerKind; ++i) {
    float x = 0.0f;
    if (i < kPerKind) {
      x = std::bit_cast<float>(bits(rng));  // every exponent, NaN and inf included
    } else if (i < 2 * kPerKind) {
      x = linear(rng);
    } else {
      x = std::exp2(log2mag(rng)) * (negative(rng) ? -1.0f : 1.0f);
    }
    if (float_to_e4m3(x) != e4m3_by_search(x) && ++mismatches <= 10) {
      ADD_FAILURE() << "x = " << x << ": got " << int(float_to_e4m3(x)) << ", nearest-even "
                    << int(e4m3_by_search(x));
    }
  }
  EXPECT_EQ(mismatches, 0);
}

// ---- bf16 by definition -------------------------------------------------------------------

double bf16_value_by_definition(uint16_t code) {
  const int sign = code >> 15;
  const int exponent = (code >> 7) & 0xFF;
  const int mantissa = code & 0x7F;
  double magnitude;
  if (exponent == 0xFF) {
    magnitude = mantissa == 0 ? std::numeric_limits<double>::infinity()
                              : std::numeric_limits<double>::quiet_NaN();
  } else if (exponent == 0) {
    magnitude = mantissa * std::pow(2.0, -126 - 7);
  } else {
    magnitude = (128 + mantissa) * std::pow(2.0, exponent - 127 - 7);
  }
  return sign ? -magnitude : magnitude;
}

// Nearest bf16 by binary search over the ordered non-negative codes 0x0000..0x7F80; for
// rounding, infinity stands at 2^128 (IEEE overflow rule); ties to the even code.
uint16_t bf16_by_search(float x) {
  if (std::isnan(x)) return 0x7FC0;  // any NaN: compared by isnan below
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(x));
  auto value = [](int code) {
    return code == 0x7F80 ? std::ldexp(1.0, 128) : bf16_value_by_definition(static_cast<uint16_t>(code));
  };
  int lo = 0, hi = 0x7F80;  // value(lo) <= a < value(hi) unless a is at the ends
  if (a >= value(hi)) return sign | 0x7F80;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    (value(mid) <= a ? lo : hi) = mid;
  }
  const double dlo = a - value(lo), dhi = value(hi) - a;
  const int code = dlo < dhi ? lo : dhi < dlo ? hi : ((lo & 1) == 0 ? lo : hi);
  return static_cast<uint16_t>(sign | code);
}

TEST(Bf16, DecodesAll65536CodesByDefinition) {
  for (int code = 0; code < 65536; ++code) {
    const double want = bf16_value_by_definition(static_cast<uint16_t>(code));
    const float got = bf16_to_float(static_cast<uint16_t>(code));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << "code " << code;
    } else {
      ASSERT_EQ(static_cast<double>(got), want) << "code " << code;
    }
  }
}

TEST(Bf16, EncodesASweepOfAllExponentsAndRandomFloatsAsNearestEven) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<uint32_t> bits;
  std::vector<float> samples;
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 4099) samples.push_back(std::bit_cast<float>(uint32_t(b)));
  for (int i = 0; i < 200000; ++i) samples.push_back(std::bit_cast<float>(bits(rng)));
  // Exact ties and their neighbours: a bf16 value plus half its ulp.
  for (uint32_t hi16 = 0; hi16 < 0x7F80; hi16 += 37) {
    const float tie = std::bit_cast<float>((hi16 << 16) | 0x8000u);
    samples.insert(samples.end(), {tie, -tie, std::nextafter(tie, 0.0f), std::nextafter(tie, std::numeric_limits<float>::infinity())});
  }
  samples.insert(samples.end(), {std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                                 std::numeric_limits<float>::infinity(), 0.0f, -0.0f});
  int mismatches = 0;
  for (float x : samples) {
    const uint16_t got = float_to_bf16(x);
    const uint16_t want = bf16_by_search(x);
    const bool ok = std::isnan(x) ? std::isnan(bf16_to_float(got)) : got == want;
    if (!ok && ++mismatches <= 10) {
      ADD_FAILURE() << "x = " << x << " bits " << std::bit_cast<uint32_t>(x) << ": got " << got
                    << ", nearest-even " << want;
    }
  }
  EXPECT_EQ(mismatches, 0) << "of " << samples.size() << " samples";
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7F80);  // rounds up to inf
  EXPECT_EQ(float_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x3F808000u)), 0x3F80);  // tie, even stays
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x3F818000u)), 0x3F82);  // tie, odd rounds up
}

// ---- scales -------------------------------------------------------------------------------

TEST(Fp8GroupScale, AmaxAndPowerOfTwoVariants) {
  EXPECT_EQ(fp8_group_scale(0.0f, Fp8ScaleKind::amax), 1.0f);
  EXPECT_EQ(fp8_group_scale(0.0f, Fp8ScaleKind::pow2), 1.0f);
  EXPECT_EQ(fp8_group_scale(448.0f, Fp8ScaleKind::amax), 1.0f);
  EXPECT_EQ(fp8_group_scale(448.0f, Fp8ScaleKind::pow2), 1.0f);
  EXPECT_EQ(fp8_group_scale(449.0f, Fp8ScaleKind::pow2), 2.0f);
  EXPECT_EQ(fp8_group_scale(1.0f, Fp8ScaleKind::amax), 1.0f / 448.0f);
  EXPECT_EQ(fp8_group_scale(1.0f, Fp8ScaleKind::pow2), 0.00390625f);  // 2^-8 >= 1/448 > 2^-9
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> log2mag(-30.0f, 30.0f);
  for (int i = 0; i < 10000; ++i) {
    const float amax = std::exp2(log2mag(rng));
    const float s = fp8_group_scale(amax, Fp8ScaleKind::pow2);
    int e = 0;
    ASSERT_EQ(std::frexp(s, &e), 0.5f) << "not a power of two: " << s;
    const float exact = amax / 448.0f;
    ASSERT_GE(s, exact);
    ASSERT_LT(s, 2.0f * exact);
  }
}

// ---- fp8_ds_mla token -------------------------------------------------------------------

TEST(Fp8DsMla, ByteLayoutOfAHandMadeToken) {
  std::array<float, 512> latent{};
  std::array<float, 64> rope{};
  std::fill(latent.begin(), latent.begin() + 128, 448.0f);    // group 0: scale 1, codes 0x7E
  // group 1 stays zero: scale 1, codes 0
  latent[256] = -1.0f;                                         // group 2: amax 1, scale 1/448
  std::fill(latent.begin() + 257, latent.begin() + 384, 0.5f);  // 0.5 * 448 = 224: code 0x76
  std::fill(latent.begin() + 384, latent.end(), 2.0f);          // group 3: every value = amax
  for (int i = 0; i < 64; ++i) rope[i] = static_cast<float>(i) - 32.0f;
  std::array<uint8_t, 656> token{};
  pack_fp8_ds_mla_token(latent.data(), rope.data(), Fp8ScaleKind::amax, token.data());
  EXPECT_EQ(token[0], 0x7E);
  EXPECT_EQ(token[127], 0x7E);
  EXPECT_EQ(token[128], 0x00);
  EXPECT_EQ(token[256], 0xFE);
  EXPECT_EQ(token[257], 0x76);
  EXPECT_EQ(token[400], 0x7E);
  float scales[4];
  std::memcpy(scales, token.data() + 512, 16);
  EXPECT_EQ(scales[0], 1.0f);
  EXPECT_EQ(scales[1], 1.0f);
  EXPECT_EQ(scales[2], 1.0f / 448.0f);
  EXPECT_EQ(scales[3], 2.0f / 448.0f);
  for (int i = 0; i < 64; ++i) {
    uint16_t bits = 0;
    std::memcpy(&bits, token.data() + 528 + 2 * i, 2);
    EXPECT_EQ(bits, float_to_bf16(rope[i])) << "rope " << i;
  }
  std::array<float, 576> back{};
  unpack_fp8_ds_mla_token(token.data(), back.data());
  EXPECT_EQ(back[0], 448.0f);
  EXPECT_EQ(back[200], 0.0f);
  EXPECT_NEAR(back[256], -1.0f, 1e-6f);
  EXPECT_NEAR(back[300], 0.5f, 1e-6f);
  EXPECT_EQ(back[512], -32.0f);
}

// The error bound of one value x of a group with scale s, derived from the format:
//  - in e4m3's normal range a value v rounds with |rn(v) - v| <= half an ulp = 2^(e-4) for v in
//    [2^e, 2^(e+1)), and the worst relative case is v = 2^e (1 + 1/16): |err| <= |v| / 17;
//  - in the subnormal range (|v| < 2^-6) the step is 2^-9: |err| <= 2^-10;
//  - x / s and e4m3 * s are float32 operations: at most 2^-24 relative each (the 2^-22 term).
double element_bound(double x, double s) {
  return std::max(std::fabs(x) / 17.0, std::ldexp(s, -10)) + std::ldexp(std::fabs(x) + s, -22);
}
// Per group: with s = amax/448 every |v| <= 448, and the largest half ulp below 448 is 16
// (binade [256, 512)), so |err| <= 16 s = amax / 28. With the power-of-two scale s can be up to
// 2x larger, so the ulp bound grows; the relative bound |x|/17 <= amax/17 is then the tight one.
// The float32 division and dequantizing product add at most about 2^-24 * 448 s = 2^-24 amax
// each (the 2^-21 amax term).
double group_bound(double amax, Fp8ScaleKind kind) {
  return (kind == Fp8ScaleKind::amax ? amax / 28.0 : amax / 17.0) + std::ldexp(amax, -21);
}

class Fp8DsMlaRoundTrip : public ::testing::TestWithParam<Fp8ScaleKind> {};

TEST_P(Fp8DsMlaRoundTrip, ErrorWithinTheDerivedBoundsAndTheBoundsAreTight) {
  const Fp8ScaleKind kind = GetParam();
  std::mt19937 rng(kind == Fp8ScaleKind::amax ? 5 : 6);
  std::uniform_real_distribution<float> log2mag(-8.0f, 8.0f);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  double worst_element_ratio = 0.0, worst_group_ratio = 0.0, worst_relative = 0.0;
  std::array<float, 512> latent{};
  std::array<float, 64> rope{};
  std::array<uint8_t, 656> token{};
  std::array<float, 576> back{};
  for (int trial = 0; trial < 2000; ++trial) {
    const float magnitude = std::exp2(log2mag(rng));  // groups of very different sizes
    for (float& v : latent) v = bf16_to_float(float_to_bf16(normal(rng) * magnitude));
    for (float& v : rope) v = bf16_to_float(float_to_bf16(normal(rng)));
    pack_fp8_ds_mla_token(latent.data(), rope.data(), kind, token.data());
    unpack_fp8_ds_mla_token(token.data(), back.data());
    for (int g = 0; g < 4; ++g) {
      double amax = 0.0;
      for (int i = 0; i < 128; ++i) amax = std::max(amax, std::fabs(double(latent[g * 128 + i])));
      float s = 0.0f;
      std::memcpy(&s, token.data() + 512 + 4 * g, 4);
      ASSERT_EQ(s, fp8_group_scale(static_cast<float>(amax), kind));
      for (int i = 0; i < 128; ++i) {
        const double x = latent[g * 128 + i];
        const double err = std::fabs(double(back[g * 128 + i]) - x);
        ASSERT_LE(err, element_bound(x, s)) << "trial " << trial << " element " << g * 128 + i;
        ASSERT_LE(err, group_bound(amax, kind)) << "trial " << trial << " group " << g;
        worst_element_ratio = std::max(worst_element_ratio, err / element_bound(x, s));
        worst_group_ratio = std::max(worst_group_ratio, err / group_bound(amax, kind));
        if (std::fabs(x) / s >= 0.015625) worst_relative = std::max(worst_relative, err / std::fabs(x));
      }
    }
    for (int i = 0; i < 64; ++i) ASSERT_EQ(back[512 + i], rope[i]);  // bf16 rope is exact
  }
  // The bounds are not slack: random data comes close to them.
  EXPECT_GT(worst_element_ratio, 0.95);
  EXPECT_GT(worst_relative, 0.95 / 17.0);
  if (kind == Fp8ScaleKind::amax) EXPECT_GT(worst_group_ratio, 0.95);
}

INSTANTIATE_TEST_SUITE_P(ScaleKinds, Fp8DsMlaRoundTrip,
                         ::testing::Values(Fp8ScaleKind::amax, Fp8ScaleKind::pow2),
                         [](const auto& info) { return std::string(to_string(info.param)); });

TEST(Fp8DsMla, PowerOfTwoGroupBoundIsAttained) {
  // amax = 1.0625 gives s = 2^-8 and v = amax / s = 272 = 256 + 16: exactly a tie between 256
  // and 288, which goes to the even code (256). The error is 16 s = amax / 17.
  std::array<float, 512> latent{};
  std::array<float, 64> rope{};
  latent[0] = 1.0625f;
  std::array<uint8_t, 656> token{};
  std::array<float, 576> back{};
  pack_fp8_ds_mla_token(latent.data(), rope.data(), Fp8ScaleKind::pow2, token.data());
  unpack_fp8_ds_mla_token(token.data(), back.data());
  EXPECT_EQ(back[0], 1.0f);
  EXPECT_DOUBLE_EQ(1.0625 - back[0], 1.0625 / 17.0);
}

TEST(Fp8DsMla, NonFiniteGroupDecodesAsNaNAndLeavesOtherGroupsAlone) {
  std::array<float, 512> latent{};
  std::array<float, 64> rope{};
  std::fill(latent.begin(), latent.end(), 1.0f);
  latent[130] = std::numeric_limits<float>::quiet_NaN();  // group 1
  latent[300] = std::numeric_limits<float>::infinity();   // group 2
  std::array<uint8_t, 656> token{};
  std::array<float, 576> back{};
  pack_fp8_ds_mla_token(latent.data(), rope.data(), Fp8ScaleKind::amax, token.data());
  unpack_fp8_ds_mla_token(token.data(), back.data());
  EXPECT_FLOAT_EQ(back[5], 1.0f);
  EXPECT_FLOAT_EQ(back[400], 1.0f);
  for (int i = 128; i < 384; ++i) EXPECT_TRUE(std::isnan(back[i])) << i;
}

// ---- indexer K page -----------------------------------------------------------------------

TEST(IndexerKPage, CodesThenScalesInsideThePage) {
  constexpr int kBlock = 4;
  std::vector<uint8_t> page(kBlock * 132, 0xAB);
  std::array<float, 128> k{};
  for (int i = 0; i < 128; ++i) k[i] = static_cast<float>(i % 7) - 3.0f;  // amax 3
  pack_indexer_k_token(k.data(), Fp8ScaleKind::amax, page.data(), kBlock, 2);
  // Codes of token 2 at [256, 384), its scale at 4*128 + 2*4 = 520; nothing else touched.
  for (int i = 0; i < kBlock * 132; ++i) {
    const bool mine = (i >= 256 && i < 384) || (i >= 520 && i < 524);
    if (!mine) EXPECT_EQ(page[i], 0xAB) << "byte " << i;
  }
  float scale = 0.0f;
  std::memcpy(&scale, page.data() + 520, 4);
  EXPECT_EQ(scale, 3.0f / 448.0f);
  EXPECT_EQ(page[256 + 6], 0x7E);  // k[6] = 3 = amax -> 448
  std::array<float, 128> back{};
  unpack_indexer_k_token(page.data(), kBlock, 2, back.data());
  for (int i = 0; i < 128; ++i) {
    EXPECT_LE(std::fabs(back[i] - k[i]), element_bound(k[i], scale)) << i;
  }
}

}  // namespace
}  // namespace latte
