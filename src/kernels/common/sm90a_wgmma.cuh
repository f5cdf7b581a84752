// Hopper (sm_90a) warpgroup matrix primitives: wgmma with operands in shared memory, their
// matrix descriptors, and the fences around them. Only for sm_90a translation units (backends
// under src/backends/hopper_*); the portable kernels use mma.sync (mma_sync.cuh, ldmatrix.cuh).
//
// Operand layout used here: K-major tiles whose rows are exactly 128 bytes (128 e4m3 values),
// stored with the 128-byte swizzle: 16-byte chunk j of row r lives at r * 128 + ((j ^ (r % 8)) * 16)
// from a 1024-byte aligned tile base. wgmma reads such a tile through a descriptor with stride
// 1024 bytes between groups of 8 rows; a k step of 32 bytes advances the start address by 32
// (the swizzle applies to absolute address bits, so the step needs no other change).
//
// Accumulator layout of m64nNk32 with f32 results (PTX ISA, "wgmma register fragments"): thread
// t of the warpgroup, w = t / 32, l = t % 32, holds d[4 j + 2 h + e] = D(16 w + l / 4 + 8 h,
// 8 j + 2 (l % 4) + e) for j < N / 8, h, e in {0, 1}: the mma.sync C layout repeated over N / 8.
#pragma once

#include <cstdint>

namespace latte::cuda::sm90a {

// Byte offset of 16-byte chunk `chunk` of row `row` in a 128-byte-swizzled tile.
__host__ __device__ constexpr uint32_t sw128_offset(int row, int chunk) {
  return static_cast<uint32_t>(row * 128 + ((chunk ^ (row & 7)) << 4));
}

// Descriptor of a K-major, 128-byte-swizzled tile at shared address `smem_addr` (1024-aligned,
// or that plus a k offset below 128). Bits: start address >> 4 [0, 14), leading byte offset >> 4
// [16, 30) (unused by swizzled K-major layouts: 1), stride byte offset >> 4 [32, 46) = 1024 / 16,
// layout [62, 64) = 1 (128-byte swizzle).
__device__ __forceinline__ uint64_t sw128_kmajor_desc(uint32_t smem_addr) {
  return static_cast<uint64_t>((smem_addr & 0x3FFFFu) >> 4) | (uint64_t{1} << 16) | (uint64_t{1024 >> 4} << 32) |
         (uint64_t{1} << 62);
}

// The descriptor `desc` moved by `bytes` (a multiple of 16): the start address field holds
// address / 16 in 14 bits, and every shared address fits it, so the move is one add.
__device__ __forceinline__ uint64_t desc_advance(uint64_t desc, uint32_t bytes) { return desc + (bytes >> 4); }

// Orders this thread's earlier generic-proxy writes of shared memory (st.shared, cp.async)
// before later async-proxy reads (wgmma operands). Call after the writes land, before the barrier.
__device__ __forceinline__ void fence_proxy_async_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// Warpgroup register reallocation (setmaxnreg): a producer warpgroup gives registers back, the
// consumers take them. Every warp of the warpgroup executes it; the counts are multiples of 8 in
// [24, 256], and the consumers' increase must not exceed what the producers released (the
// increase blocks until the registers are free: asking for more never returns).
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

// Before the first wgmma of a batch: orders earlier register accesses of the accumulators.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Waits until at most N committed wgmma groups of this warpgroup are pending.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Keeps the compiler from moving accesses of an accumulator across wgmma_commit / wgmma_wait:
// the asynchronous instruction writes the register behind its back.
template <int R>
__device__ __forceinline__ void fence_accumulators(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// D (64 x N, f32) = A (64 x 32, e4m3, K-major) * B (N x 32, e4m3, K-major)^T, plus D when
// `accumulate` is non-zero. A and B by descriptor (sw128_kmajor_desc). N in {8, 16, 32, 64}.
template <int N>
struct WgmmaE4m3;

template <>
struct WgmmaE4m3<8> {
  __device__ __forceinline__ static void mma(float (&d)[4], uint64_t a_desc, uint64_t b_desc, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {"
        "%0, %1, %2, %3"
        "}, %4, %5, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "l"(a_desc), "l"(b_desc), "r"(accumulate));
  }
};

template <>
struct WgmmaE4m3<16> {
  __device__ __forceinline__ static void mma(float (&d)[8], uint64_t a_desc, uint64_t b_desc, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 {"
        "%0, %1, %2, %3, %4, %5, %6, %7"
        "}, %8, %9, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
        : "l"(a_desc), "l"(b_desc), "r"(accumulate));
  }
};

template <>
struct WgmmaE4m3<32> {
  __device__ __forceinline__ static void mma(float (&d)[16], uint64_t a_desc, uint64_t b_desc, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
        "}, %16, %17, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "l"(a_desc), "l"(b_desc), "r"(accumulate));
  }
};

template <>
struct WgmmaE4m3<64> {
  __device__ __forceinline__ static void mma(float (&d)[32], uint64_t a_desc, uint64_t b_desc, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
        "}, %32, %33, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(a_desc), "l"(b_desc), "r"(accumulate));
  }
};

}  // namespace latte::cuda::sm90a
