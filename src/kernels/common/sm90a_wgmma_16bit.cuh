// Hopper (sm_90a) warpgroup matrix products on 16-bit operands (f16 or bf16, both operands the
// same), B in shared memory (the descriptors of sm90a_wgmma.cuh), f32 accumulators in the layout
// of sm90a_wgmma.cuh. Generated shapes only: the ones hopper.mla uses. Only for sm_90a
// translation units.
//   WgmmaSs<E, 32>:    D (64 x 32) (+)= A (64 x 16, shared, K-major) * B (32 x 16, shared, K-major)^T
//   WgmmaSs<E, N, kTransA> (N = 8, 16): D (64 x N) (+)= A (64 x 16, shared; K-major, or MN-major
//                      with kTransA: the transpose bit) * B (N x 16, shared, K-major)^T
//   WgmmaRsTn<E, 128>: D (64 x 128) += A (64 x 16, registers) * B (16 x 128, shared, MN-major: the
//                      transpose bit). A's fragment: thread t (w = t / 32, l = t % 32) holds
//                      a[0] = A(16 w + l / 4, 2 (l % 4) + {0, 1}), a[1] = the same columns 8 rows down,
//                      a[2] / a[3] = a[0] / a[1] 8 columns right (two values each, the lower column
//                      in the low half): the accumulator layout of a 64 x 16 slice of an m64nN result.
#pragma once

#include <cstdint>

namespace latte::cuda::sm90a {

enum class Half16 { f16, bf16 };

// Descriptor of an MN-major, 128-byte-swizzled operand: rows of 128 bytes (64 16-bit values of the
// N dimension) 128 bytes apart along K, groups of 8 such rows `k_group_bytes` apart (stride byte
// offset), blocks of 64 N values `n_block_bytes` apart (leading byte offset).
__device__ __forceinline__ uint64_t sw128_mnmajor_desc(uint32_t smem_addr, uint32_t n_block_bytes,
                                                       uint32_t k_group_bytes) {
  return static_cast<uint64_t>((smem_addr & 0x3FFFFu) >> 4) | (static_cast<uint64_t>(n_block_bytes >> 4) << 16) |
         (static_cast<uint64_t>(k_group_bytes >> 4) << 32) | (uint64_t{1} << 62);
}

#define LATTE_WGMMA_ACC16 \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
#define LATTE_WGMMA_ACC64 \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
  "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define LATTE_WGMMA_SS_M64N32K16(TY)                                                            \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"                                                \
  "wgmma.mma_async.sync.aligned.m64n32k16.f32." TY "." TY " {"                                   \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15" \
  "}, %16, %17, p, 1, 1, 0, 0;\n}\n"
#define LATTE_WGMMA_RS_M64N128K16(TY)                                                           \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                                \
  "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " {"                                  \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63" \
  "}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"

template <Half16 E, int N, bool kTransA = false>
struct WgmmaSs;
template <Half16 E, int N>
struct WgmmaRsTn;

template <Half16 E>
struct WgmmaSs<E, 32, false> {
  __device__ __forceinline__ static void mma(float (&d)[16], uint64_t a_desc, uint64_t b_desc, int accumulate) {
    if constexpr (E == Half16::f16) {
      asm volatile(LATTE_WGMMA_SS_M64N32K16("f16") : LATTE_WGMMA_ACC16 : "l"(a_desc), "l"(b_desc), "r"(accumulate));
    } else {
      asm volatile(LATTE_WGMMA_SS_M64N32K16("bf16") : LATTE_WGMMA_ACC16 : "l"(a_desc), "l"(b_desc), "r"(accumulate));
    }
  }
};

#define LATTE_WGMMA_SS_M64N16K16(TY, TA)                                                        \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"                                                \
  "wgmma.mma_async.sync.aligned.m64n16k16.f32." TY "." TY " {"                                   \
  "%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1, " TA ", 0;\n}\n"
#define LATTE_WGMMA_SS_M64N8K16(TY, TA)                                                         \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"                                                 \
  "wgmma.mma_async.sync.aligned.m64n8k16.f32." TY "." TY " {"                                    \
  "%0, %1, %2, %3}, %4, %5, p, 1, 1, " TA ", 0;\n}\n"

#define LATTE_WGMMA_SS_SMALL_N(SHAPE, ACC)                                                     \
  if constexpr (E == Half16::f16 && !kTransA) {                                                 \
    asm volatile(SHAPE("f16", "0") : ACC : "l"(a_desc), "l"(b_desc), "r"(accumulate));         \
  } else if constexpr (E == Half16::f16) {                                                      \
    asm volatile(SHAPE("f16", "1") : ACC : "l"(a_desc), "l"(b_desc), "r"(accumulate));         \
  } else if constexpr (!kTransA) {                                                              \
    asm volatile(SHAPE("bf16", "0") : ACC : "l"(a_desc), "l"(b_desc), "r"(accumulate));        \
  } else {                                                                                      \
    asm volatile(SHAPE("bf16", "1") : ACC : "l"(a_desc), "l"(b_desc), "r"(accumulate));        \
  }
#define LATTE_WGMMA_ACC8 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
#define LATTE_WGMMA_ACC4 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])

template <Half16 E, bool kTransA>
struct WgmmaSs<E, 16, kTransA> {
  __device__ __forceinline__ static void mma(float (&d)[8], uint64_t a_desc, uint64_t b_desc, int accumulate) {
    LATTE_WGMMA_SS_SMALL_N(LATTE_WGMMA_SS_M64N16K16, LATTE_WGMMA_ACC8)
  }
};

template <Half16 E, bool kTransA>
struct WgmmaSs<E, 8, kTransA> {
  __device__ __forceinline__ static void mma(float (&d)[4], uint64_t a_desc, uint64_t b_desc, int accumulate) {
    LATTE_WGMMA_SS_SMALL_N(LATTE_WGMMA_SS_M64N8K16, LATTE_WGMMA_ACC4)
  }
};

template <Half16 E>
struct WgmmaRsTn<E, 128> {
  __device__ __forceinline__ static void mma(float (&d)[64], const uint32_t (&a)[4], uint64_t b_desc) {
    if constexpr (E == Half16::f16) {
      asm volatile(LATTE_WGMMA_RS_M64N128K16("f16")
                   : LATTE_WGMMA_ACC64
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(1));
    } else {
      asm volatile(LATTE_WGMMA_RS_M64N128K16("bf16")
                   : LATTE_WGMMA_ACC64
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(1));
    }
  }
};

#undef LATTE_WGMMA_ACC16
#undef LATTE_WGMMA_ACC64
#undef LATTE_WGMMA_SS_M64N32K16
#undef LATTE_WGMMA_RS_M64N128K16
#undef LATTE_WGMMA_SS_M64N16K16
#undef LATTE_WGMMA_SS_M64N8K16
#undef LATTE_WGMMA_SS_SMALL_N
#undef LATTE_WGMMA_ACC8
#undef LATTE_WGMMA_ACC4

}  // namespace latte::cuda::sm90a
