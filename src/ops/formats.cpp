// Number formats and byte layouts of docs/design.md, sections 5 and 6, host side. Written from the
// definitions (sign, exponent, mantissa) rather than bit tricks where that is clearer: these
// functions are the reference the CUDA conversions are tested against.
#include "latte/formats.hpp"

#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>

#include "latte/ops.hpp"

namespace latte {
namespace {

constexpr int kE4m3Bias = 7;
constexpr int kE4m3MantBits = 3;

// Round a non-negative double that is an exact multiple of 2^-k for some k to the nearest
// integer, ties to even. std::nearbyint does this under the default rounding mode; we do not
// rely on the caller's floating-point environment.
double round_half_even(double x) {
  const double lower = std::floor(x);
  const double diff = x - lower;  // exact: x and lower are close doubles
  if (diff > 0.5) return lower + 1.0;
  if (diff < 0.5) return lower;
  return std::fmod(lower, 2.0) == 0.0 ? lower : lower + 1.0;
}

}  // namespace

uint8_t float_to_e4m3(float value) {
  const uint8_t sign = std::signbit(value) ? 0x80 : 0x00;
  if (std::isnan(value)) return static_cast<uint8_t>(sign | 0x7F);
  const double a = std::fabs(static_cast<double>(value));
  if (a >= kE4m3Max) return static_cast<uint8_t>(sign | 0x7E);  // saturate, infinities too

  // Subnormal range (below 2^-6): steps of 2^-9, code = mantissa with exponent field 0.
  // A result of 8 steps is exactly the smallest normal, code 0x08, so the code arithmetic
  // carries over naturally.
  constexpr double kMinNormal = 0.015625;  // 2^-6
  if (a < kMinNormal) {
    const double steps = round_half_even(a * 512.0);  // a / 2^-9, exact
    return static_cast<uint8_t>(sign | static_cast<uint8_t>(steps));
  }

  // Normal: a = 1.m * 2^e with e in [-6, 8].
  int e2 = 0;
  const double frac = std::frexp(a, &e2);  // a = frac * 2^e2, frac in [0.5, 1)
  int exponent = e2 - 1;
  double mant = round_half_even((frac * 2.0 - 1.0) * (1 << kE4m3MantBits));  // 0..8
  if (mant == 8.0) {  // rounded up into the next binade
    mant = 0.0;
    ++exponent;
  }
  // a < 448 = 1.75 * 2^8 keeps (exponent 8, mant <= 6): code <= 0x7E, never the NaN code.
  const int field = exponent + kE4m3Bias;  // 1..15
  return static_cast<uint8_t>(sign | (field << kE4m3MantBits) | static_cast<int>(mant));
}

float e4m3_to_float(uint8_t code) {
  const bool negative = (code & 0x80) != 0;
  const int field = (code >> kE4m3MantBits) & 0x0F;
  const int mant = code & 0x07;
  float magnitude;
  if (field == 0x0F && mant == 0x07) {
    magnitude = std::numeric_limits<float>::quiet_NaN();
  } else if (field == 0) {
    magnitude = std::ldexp(static_cast<float>(mant), -9);  // subnormal: mant * 2^-9
  } else {
    magnitude = std::ldexp(1.0f + static_cast<float>(mant) / 8.0f, field - kE4m3Bias);
  }
  return negative ? -magnitude : magnitude;
}

uint16_t float_to_bf16(float value) {
  uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  if (std::isnan(value)) {
    // Keep the sign and the top payload bits; force a quiet NaN so truncation cannot make it
    // an infinity.
    return static_cast<uint16_t>((bits >> 16) | 0x0040);
  }
  // Round to nearest even on the 16 dropped bits: add 0x7FFF plus the lowest kept bit. A carry
  // out of the mantissa correctly bumps the exponent (up to infinity for huge values).
  const uint32_t lowest_kept = (bits >> 16) & 1u;
  bits += 0x7FFFu + lowest_kept;
  return static_cast<uint16_t>(bits >> 16);
}

float bf16_to_float(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float value = 0.0f;
  std::memcpy(&value, &wide, sizeof value);
  return value;
}

float fp8_group_scale(float amax, Fp8ScaleKind kind) {
  if (amax == 0.0f) return 1.0f;
  const float scale = amax / kE4m3Max;
  if (kind == Fp8ScaleKind::amax || !std::isfinite(scale) || scale == 0.0f) return scale;
  // The smallest power of two >= scale: scale itself when it is one already.
  int e2 = 0;
  const float frac = std::frexp(scale, &e2);  // scale = frac * 2^e2, frac in [0.5, 1)
  return frac == 0.5f ? scale : std::ldexp(1.0f, e2);
}

namespace {

float group_amax(const float* values, int count) {
  float amax = 0.0f;
  for (int i = 0; i < count; ++i) {
    const float a = std::fabs(values[i]);
    // NaN must win so that a poisoned group is visible after decoding (see docs/operations.md).
    if (std::isnan(a) || a > amax) amax = a;
    if (std::isnan(amax)) break;
  }
  return amax;
}

// Quantize `count` values with one scale: codes[i] = e4m3(values[i] / scale).
float quantize_group(const float* values, int count, Fp8ScaleKind kind, uint8_t* codes) {
  const float scale = fp8_group_scale(group_amax(values, count), kind);
  for (int i = 0; i < count; ++i) codes[i] = float_to_e4m3(values[i] / scale);
  return scale;
}

constexpr int kFp8DsGroups = kLatentDim / kFp8GroupSize;  // 4

}  // namespace

void pack_fp8_nope_token(const float* latent, Fp8ScaleKind kind, uint8_t* out528) {
  for (int g = 0; g < kFp8DsGroups; ++g) {
    const float scale = quantize_group(latent + g * kFp8GroupSize, kFp8GroupSize, kind,
                                       out528 + g * kFp8GroupSize);
    std::memcpy(out528 + kFp8DsMlaScaleOffset + g * 4, &scale, 4);
  }
}

void unpack_fp8_nope_token(const uint8_t* in528, float* out512) {
  for (int g = 0; g < kFp8DsGroups; ++g) {
    float scale = 0.0f;
    std::memcpy(&scale, in528 + kFp8DsMlaScaleOffset + g * 4, 4);
    for (int i = 0; i < kFp8GroupSize; ++i) {
      const int k = g * kFp8GroupSize + i;
      out512[k] = e4m3_to_float(in528[k]) * scale;
    }
  }
}

// An fp8_ds_mla token is the token without rope followed by the 64 rope values as bf16.
void pack_fp8_ds_mla_token(const float* latent, const float* rope, Fp8ScaleKind kind,
                           uint8_t* out656) {
  pack_fp8_nope_token(latent, kind, out656);
  for (int i = 0; i < kRopeDim; ++i) {
    const uint16_t bits = float_to_bf16(rope[i]);
    std::memcpy(out656 + kFp8DsMlaRopeOffset + 2 * i, &bits, 2);
  }
}

void unpack_fp8_ds_mla_token(const uint8_t* in656, float* out576) {
  unpack_fp8_nope_token(in656, out576);
  for (int i = 0; i < kRopeDim; ++i) {
    uint16_t bits = 0;
    std::memcpy(&bits, in656 + kFp8DsMlaRopeOffset + 2 * i, 2);
    out576[kLatentDim + i] = bf16_to_float(bits);
  }
}

void pack_indexer_k_token(const float* k128, Fp8ScaleKind kind, uint8_t* page, int block_size,
                          int offset) {
  uint8_t* codes = page + static_cast<std::ptrdiff_t>(offset) * kIndexDim;
  const float scale = quantize_group(k128, kIndexDim, kind, codes);
  std::memcpy(page + static_cast<std::ptrdiff_t>(block_size) * kIndexDim + offset * 4, &scale, 4);
}

void unpack_indexer_k_token(const uint8_t* page, int block_size, int offset, float* out128) {
  const uint8_t* codes = page + static_cast<std::ptrdiff_t>(offset) * kIndexDim;
  float scale = 0.0f;
  std::memcpy(&scale, page + static_cast<std::ptrdiff_t>(block_size) * kIndexDim + offset * 4, 4);
  for (int i = 0; i < kIndexDim; ++i) out128[i] = e4m3_to_float(codes[i]) * scale;
}

}  // namespace latte
