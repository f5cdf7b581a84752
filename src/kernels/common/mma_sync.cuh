// Warp-level matrix instructions the portable kernels use (mma.sync, sm_80+), and the exact
// e4m3 -> bf16 widening used where fp8 matrix instructions do not exist (sm_80 / sm_86).
//
// Fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k32" / "m16n8k16"), with
// g = lane / 4 and c = lane % 4:
//   e4m3 m16n8k32: A a0 = (row g, k 4c..4c+3), a1 = (row g+8, same k), a2 = (row g, k 16+4c..),
//                  a3 = (row g+8, k 16+4c..); B b0 = (k 4c..4c+3, col g), b1 = (k 16+4c.., col g)
//   bf16 m16n8k16: A a0 = (row g, k 2c, 2c+1), a1 = (row g+8, ...), a2 = (row g, k 8+2c, ..),
//                  a3 = (row g+8, k 8+2c, ..); B b0 = (k 2c, 2c+1, col g), b1 = (k 8+2c.., col g)
//   C (both):      c0, c1 = (row g, cols 2c, 2c+1); c2, c3 = (row g+8, cols 2c, 2c+1)
// A dot product is invariant under a permutation of k applied to both operands, so callers may
// map the logical k of a fragment to any physical element as long as A and B agree.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace latte::cuda {

// D += A * B with e4m3 inputs and f32 accumulation. Needs sm_89+; traps on older targets
// (host code dispatches on the device's architecture and never launches it there).
__device__ __forceinline__ void mma_e4m3_m16n8k32(float (&d)[4], const uint32_t (&a)[4],
                                                  uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  (void)d;
  (void)a;
  (void)b0;
  (void)b1;
  __trap();
#endif
}

// D += A * B with bf16 inputs and f32 accumulation (sm_80+).
__device__ __forceinline__ void mma_bf16_m16n8k16(float (&d)[4], const uint32_t (&a)[4],
                                                  uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  (void)d;
  (void)a;
  (void)b0;
  (void)b1;
  __trap();
#endif
}

// D += A * B with f16 inputs and f32 accumulation (sm_80+).
__device__ __forceinline__ void mma_f16_m16n8k16(float (&d)[4], const uint32_t (&a)[4],
                                                 uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  (void)d;
  (void)a;
  (void)b0;
  (void)b1;
  __trap();
#endif
}

// Two e4m3 codes (bits 0..7 and 8..15 of `two`) -> an f16x2 word (first code in the low half)
// with the hardware conversion (sm_89+; every e4m3 value is an f16 value, so it is exact).
// Traps on older targets, which never launch the callers.
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t two) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint32_t r;
  const uint16_t in = static_cast<uint16_t>(two);
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(r) : "h"(in));
  return r;
#else
  (void)two;
  __trap();
  return 0;
#endif
}

// The two e4m3 codes in bits 16..31 of `four` -> an f16x2 word. Taking the high half inside
// the asm lets ptxas read it as an operand half (.H1) instead of shifting first.
__device__ __forceinline__ uint32_t e4m3x2_hi_to_f16x2(uint32_t four) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint32_t r;
  asm("{\n .reg .b16 lo, hi;\n mov.b32 {lo, hi}, %1;\n cvt.rn.f16x2.e4m3x2 %0, hi;\n}\n" : "=r"(r) : "r"(four));
  return r;
#else
  (void)four;
  __trap();
  return 0;
#endif
}

// Two e4m3 codes (bits 0..7 and 8..15 of `two`) -> a bf16x2 word (first code in the low half),
// exactly: every e4m3 value, subnormals included, is a bf16 value. The code's exponent and
// mantissa bits are placed in a float32 (which is then the value times 2^-120, possibly a
// float32 subnormal) and rescaled by 2^120. The NaN codes (0x7F / 0xFF) come out as +-480
// instead of NaN; kernels never write those codes for finite inputs.
__device__ __forceinline__ uint32_t e4m3x2_to_bf16x2(uint32_t two) {
  const uint32_t lo = ((two & 0x80u) << 24) | ((two & 0x7Fu) << 20);
  const uint32_t hi = ((two & 0x8000u) << 16) | ((two & 0x7F00u) << 12);
  const float flo = __uint_as_float(lo) * 0x1p120f;
  const float fhi = __uint_as_float(hi) * 0x1p120f;
  const __nv_bfloat162 r = __floats2bfloat162_rn(flo, fhi);
  return *reinterpret_cast<const uint32_t*>(&r);
}

}  // namespace latte::cuda
