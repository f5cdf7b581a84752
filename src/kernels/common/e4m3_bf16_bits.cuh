// Exact e4m3 -> bf16 widening by bit moves alone (no conversion instruction, so it runs on
// sm_80 / sm_86 too), with a fixed power-of-two bias:
//
//   bf16 bits = sign << 15 | (e4m3 & 0x7f) << 4   represents   e4m3_value * 2^-120
//
// for every finite e4m3 code: a normal e4m3 (exponent field e, bias 7) lands on a bf16 normal
// with the same exponent field (bias 127), an e4m3 subnormal on a bf16 subnormal. Callers fold
// 2^120 into the other operand (or the result). Tensor cores may flush the bf16 subnormals
// (e4m3 subnormals, below 2^-6 times the group scale): an error under 2^-15 of the group's
// largest value.
//
// Four e4m3 codes d0..d3 in one 32-bit word (d0 in the low byte) give two bf16x2 registers:
//   even(w) = {d0, d2}   odd(w) = {d1, d3}      (low half first)
#pragma once

#include <cstdint>

namespace latte::cuda {

inline constexpr float kE4m3Bf16BitsBias = 0x1p-120f;  // value of the widened bits / e4m3 value

__host__ __device__ __forceinline__ uint32_t e4m3x4_even_to_bf16x2(uint32_t w) {
  return ((w << 4) & 0x07F007F0u) | ((w << 8) & 0x80008000u);
}

__host__ __device__ __forceinline__ uint32_t e4m3x4_odd_to_bf16x2(uint32_t w) {
  return ((w >> 4) & 0x07F007F0u) | (w & 0x80008000u);
}

}  // namespace latte::cuda
