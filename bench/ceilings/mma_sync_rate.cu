// Ceilings of the portable (mma.sync) matrix path on the GPU it runs on: the issue rate of
// mma.sync f16 m16n8k16, bf16 m16n8k16, e4m3 m16n8k32 (sm_89+) and of the e4m3x2 -> f16x2
// conversion, each with enough independent chains per warp to hide latency. On sm_90 ptxas
// lowers mma.sync e4m3 to operand conversions, two f16 HMMAs with a zero accumulator and
// FADDs (the SASS shows no QMMA): the figure is that sequence's rate, with B changing every
// iteration so the conversions stay in the loop. The indexer's and
// sparse MLA's "% of roofline" use the copy bandwidth; this says what their math loops can
// reach at best. Usage: mma_sync_rate [warps_per_cta] [chains]
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "kernels/common/mma_sync.cuh"

using namespace latte;

constexpr int kIters = 4096;
constexpr int kChains = 8;

enum Kind { kF16 = 0, kBf16 = 1, kE4m3 = 2, kCvt = 3 };

template <int KIND>
__global__ void rate_kernel(float* sink, uint32_t seed) {
  uint32_t a[4] = {seed ^ threadIdx.x, seed + 3u, seed * 7u, seed + threadIdx.x};
  uint32_t b0 = seed * 13u + threadIdx.x, b1 = seed ^ 0x3c3c3c3cu;
  float acc[kChains][4];
#pragma unroll
  for (int c = 0; c < kChains; ++c)  // distinct chains: identical ones would be merged by ptxas
    for (int e = 0; e < 4; ++e) acc[c][e] = static_cast<float>(c * 4 + e + (seed & 1));
  uint32_t cv[kChains];
#pragma unroll
  for (int c = 0; c < kChains; ++c) cv[c] = seed + threadIdx.x + 77u * c;
#pragma unroll 1
  for (int it = 0; it < kIters; ++it) {
#pragma unroll
    for (int c = 0; c < kChains; ++c) {
      if (KIND == kF16) cuda::mma_f16_m16n8k16(acc[c], a, b0, b1);
      else if (KIND == kBf16) cuda::mma_bf16_m16n8k16(acc[c], a, b0, b1);
      else if (KIND == kE4m3) cuda::mma_e4m3_m16n8k32(acc[c], a, b0 ^ (0x01010101u * c), b1);
      else cv[c] = cuda::e4m3x2_to_f16x2(cv[c] & 0x7777u) ^ cv[c];
    }
    if (KIND == kE4m3) b0 += 0x01010101u;  // keeps a lowering that converts the operands in the loop
  }
  float s = 0.0f;
#pragma unroll
  for (int c = 0; c < kChains; ++c) s += acc[c][0] + acc[c][1] + acc[c][2] + acc[c][3];
#pragma unroll
  for (int c = 0; c < kChains; ++c)
    if (KIND == kCvt) s += static_cast<float>(cv[c]);
  if (s == 1.2345f) sink[threadIdx.x] = s;
}

template <int KIND>
double run(int sms, int warps, double flop_per_inst, const char* name) {
  float* sink = nullptr;
  cudaMalloc(&sink, 4096);
  const dim3 grid(sms * 4), block(32 * warps);
  rate_kernel<KIND><<<grid, block>>>(sink, 1);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  cudaEventRecord(e0);
  for (int r = 0; r < 5; ++r) rate_kernel<KIND><<<grid, block>>>(sink, 2 + r);
  cudaEventRecord(e1);
  cudaEventSynchronize(e1);
  float ms = 0;
  cudaEventElapsedTime(&ms, e0, e1);
  const double insts = 5.0 * grid.x * warps * kIters * kChains;  // warp instructions
  const double per_sm_clk = insts / sms / (ms * 1e-3) / 1.98e9;
  if (flop_per_inst > 0)
    std::printf("%-28s %8.1f TFLOP/s  %.3f warp-inst/clk/SM (at 1.98 GHz)\n", name,
                insts * flop_per_inst / (ms * 1e-3) / 1e12, per_sm_clk);
  else
    std::printf("%-28s %8.1f G warp-inst/s %.3f warp-inst/clk/SM (at 1.98 GHz)\n", name,
                insts / (ms * 1e-3) / 1e9, per_sm_clk);
  cudaFree(sink);
  return ms;
}

int main(int argc, char** argv) {
  const int warps = argc > 1 ? std::atoi(argv[1]) : 8;
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("%s, %d SMs, %d warps per CTA, 4 CTAs per SM, %d chains per warp\n", prop.name,
              prop.multiProcessorCount, warps, kChains);
  const int sms = prop.multiProcessorCount;
  run<kF16>(sms, warps, 2.0 * 16 * 8 * 16, "mma.sync f16 m16n8k16");
  run<kBf16>(sms, warps, 2.0 * 16 * 8 * 16, "mma.sync bf16 m16n8k16");
  if (prop.major * 10 + prop.minor >= 89) {
    run<kE4m3>(sms, warps, 2.0 * 16 * 8 * 32, "mma.sync e4m3 m16n8k32");
    run<kCvt>(sms, warps, 0, "cvt.rn.f16x2.e4m3x2");
  }
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    std::printf("error: %s\n", cudaGetErrorString(e));
    return 1;
  }
  return 0;
}
