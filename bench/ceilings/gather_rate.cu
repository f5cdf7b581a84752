// Ceiling of the sparse-MLA gather on the GPU it runs on: T query tokens each gather `topk`
// random 656-byte fp8_ds_mla rows from their own 32768-row region of a cache larger than L2,
// with cp.async 16-byte copies into a shared-memory ring, and no math. It says how much of the
// copy bandwidth (a device-to-device cudaMemcpy in the same run) a gather-bound kernel such as
// the few-heads one (mla_sparse_fp8_fewheads_mma_sync.cu: 64-row tiles, 2 stages, 4 warps, two
// CTAs per SM) can reach at best, and which ring shape and L2 prefetch hint (.L2::64B/128B/256B)
// get there.
// Usage: gather_rate [T] [topk]   (defaults 128 2048: GLM-5 TP8 decode T=128)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "kernels/common/cp_async.cuh"

using namespace latte;

constexpr int kRowBytes = 656;
constexpr int kContext = 32768;

#define CK(x)                                                                        \
  do {                                                                               \
    cudaError_t e_ = (x);                                                            \
    if (e_ != cudaSuccess) {                                                         \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

// One CTA gathers `chunk` rows of token blockIdx.x / nsplit in tiles of BN rows through an
// NSTAGE ring (NSTAGE - 1 tiles in flight). A warp copies four rows per instruction: lane
// (row r = lane / 8, sub = lane % 8) takes 16-byte pieces sub + 8i (and piece 40 when sub = 0),
// the few-heads kernel's pattern. Each landed tile is read once (one 16-byte word per thread).
template <int BN, int NSTAGE, int WARPS, int PREFETCH = 0>
__global__ void __launch_bounds__(WARPS * 32) gather_kernel(const uint8_t* cache, const int32_t* idx, int topk,
                                                            int nsplit, uint32_t* sink) {
  extern __shared__ __align__(16) uint8_t smem[];
  const int token = blockIdx.x / nsplit, split = blockIdx.x % nsplit;
  const int chunk = topk / nsplit;
  const int32_t* rows = idx + static_cast<int64_t>(token) * topk + split * chunk;
  const int tiles = chunk / BN;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, r4 = lane >> 3, sub = lane & 7;
  auto issue = [&](int tile) {
    const int stage = tile % NSTAGE;
    for (int r = warp * 4 + r4; r < BN; r += WARPS * 4) {
      const uint8_t* src = cache + static_cast<int64_t>(rows[tile * BN + r]) * kRowBytes + 16 * sub;
      const uint32_t dst = cuda::smem_addr(smem) + (stage * BN + r) * kRowBytes + 16 * sub;
#pragma unroll
      for (int i = 0; i < 5; ++i) cuda::cp_async_16_s_l2<PREFETCH>(dst + 128 * i, src + 128 * i, true);
      if (sub == 0) cuda::cp_async_16_s_l2<PREFETCH>(dst + 640, src + 640, true);
    }
  };
#pragma unroll
  for (int t = 0; t < NSTAGE - 1; ++t) {
    if (t < tiles) issue(t);
    cuda::cp_async_commit();
  }
  uint32_t acc = 0;
  for (int t = 0; t < tiles; ++t) {
    cuda::cp_async_wait<NSTAGE - 2>();
    __syncthreads();
    if (t + NSTAGE - 1 < tiles) issue(t + NSTAGE - 1);
    cuda::cp_async_commit();
    const uint4 v = reinterpret_cast<const uint4*>(smem + (t % NSTAGE) * BN * kRowBytes)[threadIdx.x % (BN * kRowBytes / 16)];
    acc ^= v.x ^ v.w;
  }
  if (acc == 0x12345678u) sink[blockIdx.x] = acc;  // keeps the reads
}

// hopper.mla's producer copy loop alone (mla_sparse_sm90a_cpasync_wgmma_ws.cu, fp8): 32-row
// stages into a raw ring of RAW stages, AHEAD stages ahead; warp w owns rows w, w + 4, ... of every
// stage (no barrier between warps); lanes 0-7 load their row's slot one stage ahead and the row
// address is shuffled to the warp; lane l copies 16-byte chunks l and 32 + l; each warp waits for
// its own copy group and reads its rows once. No widening, no consumers: what the loop itself
// leaves of the gather rate, against gather_kernel's cooperative ring in the same run.
template <int RAW, int AHEAD>
__global__ void __launch_bounds__(128) producer_loop_kernel(const uint8_t* cache, const int32_t* idx, int topk,
                                                            int nsplit, uint32_t* sink) {
  extern __shared__ __align__(16) uint8_t smem[];
  constexpr int kRows = 32, kPerWarp = kRows / 4;
  const int token = blockIdx.x / nsplit, split = blockIdx.x % nsplit;
  const int chunk = topk / nsplit;
  const int32_t* rows = idx + static_cast<int64_t>(token) * topk + split * chunk;
  const int tiles = chunk / kRows;
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int my_row = w + 4 * lane;  // lanes 0-7
  const auto slot_of = [&](int t) { return lane < kPerWarp && t < tiles ? rows[t * kRows + my_row] : -1; };
  const auto start = [&](int slot, int t) {
    const uint32_t raw = cuda::smem_addr(smem) + (t % RAW) * kRows * kRowBytes;
    const auto addr = reinterpret_cast<unsigned long long>(slot >= 0 ? cache + static_cast<int64_t>(slot) * kRowBytes
                                                                      : cache);
#pragma unroll
    for (int i = 0; i < kPerWarp; ++i) {
      const auto* src = reinterpret_cast<const uint8_t*>(__shfl_sync(0xffffffffu, addr, i));
      const uint32_t dst = raw + (w + 4 * i) * kRowBytes;
      cuda::cp_async_16_s(dst + 16 * lane, src + 16 * lane, true);
      if (lane < kRowBytes / 16 - 32) cuda::cp_async_16_s(dst + 16 * (32 + lane), src + 16 * (32 + lane), true);
    }
  };
#pragma unroll
  for (int k = 0; k < AHEAD; ++k) {
    if (k < tiles) start(slot_of(k), k);
    cuda::cp_async_commit();
  }
  int next = slot_of(AHEAD);
  uint32_t acc = 0;
  for (int t = 0; t < tiles; ++t) {
    if (t + AHEAD < tiles) {
      start(next, t + AHEAD);
      next = slot_of(t + AHEAD + 1);
    }
    cuda::cp_async_commit();
    cuda::cp_async_wait<AHEAD>();
    __syncwarp();
    const uint8_t* raw = smem + (t % RAW) * kRows * kRowBytes;
#pragma unroll
    for (int i = 0; i < kPerWarp; ++i) acc ^= reinterpret_cast<const uint32_t*>(raw + (w + 4 * i) * kRowBytes)[lane];
    __syncwarp();
  }
  if (acc == 0x12345678u) sink[blockIdx.x] = acc;  // keeps the reads
}

struct Cfg {
  const char* name;
  void (*kernel)(const uint8_t*, const int32_t*, int, int, uint32_t*);
  int bn, stages, warps;
  int smem_bytes = 0;  // > 0: this much dynamic shared memory (one CTA per SM, as hopper.mla's 224 KB)
};

int main(int argc, char** argv) {
  const int T = argc > 1 ? std::atoi(argv[1]) : 128;
  const int topk = argc > 2 ? std::atoi(argv[2]) : 2048;
  if (T < 1 || T > 1024 || topk < 16 || topk > kContext || topk % 16 != 0) {
    std::fprintf(stderr,
                 "gather_rate T=%s topk=%s: expected 1 <= T <= 1024 and topk a multiple of 16 in [16, %d] "
                 "(e.g. gather_rate 128 2048)\n",
                 argc > 1 ? argv[1] : "128", argc > 2 ? argv[2] : "2048", kContext);
    return 2;
  }
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  // Three disjoint index sets over a cache of 3 x T x 32768 rows, cycled, so no set is in L2.
  constexpr int kSets = 3;
  const int64_t rows_total = static_cast<int64_t>(kSets) * T * kContext;
  // At least the 2 GiB the copy measurement below reads and writes.
  const size_t copy_bytes = size_t{1} << 30;
  const size_t cache_bytes = std::max(static_cast<size_t>(rows_total) * kRowBytes, 2 * copy_bytes);
  uint8_t* cache = nullptr;
  CK(cudaMalloc(&cache, cache_bytes));
  CK(cudaMemset(cache, 0x3c, cache_bytes));
  std::vector<int32_t*> idx(kSets);
  std::mt19937 rng(7);
  for (int s = 0; s < kSets; ++s) {
    std::vector<int32_t> h(static_cast<size_t>(T) * topk);
    std::vector<int32_t> perm(kContext);
    for (int t = 0; t < T; ++t) {
      for (int i = 0; i < kContext; ++i) perm[i] = i;
      for (int i = 0; i < topk; ++i) {  // distinct positions of the token's own region
        std::uniform_int_distribution<int> d(i, kContext - 1);
        std::swap(perm[i], perm[d(rng)]);
        h[static_cast<size_t>(t) * topk + i] = static_cast<int32_t>((static_cast<int64_t>(s) * T + t) * kContext + perm[i]);
      }
    }
    CK(cudaMalloc(&idx[s], h.size() * 4));
    CK(cudaMemcpy(idx[s], h.data(), h.size() * 4, cudaMemcpyHostToDevice));
  }
  uint32_t* sink = nullptr;
  CK(cudaMalloc(&sink, 1 << 20));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));

  // Copy bandwidth in the same run: 1 GiB device to device, read + write counted.
  CK(cudaMemcpy(cache + copy_bytes, cache, copy_bytes, cudaMemcpyDeviceToDevice));
  CK(cudaEventRecord(e0));
  for (int i = 0; i < 10; ++i) CK(cudaMemcpyAsync(cache + copy_bytes, cache, copy_bytes, cudaMemcpyDeviceToDevice));
  CK(cudaEventRecord(e1));
  CK(cudaEventSynchronize(e1));
  float ms = 0.f;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  const double copy_gbs = 2.0 * copy_bytes * 10 / (ms * 1e-3) / 1e9;
  std::printf("%s, %d SMs; copy %.0f GB/s; gather T=%d topk=%d rows of %d B (%.1f MB per call)\n", prop.name,
              prop.multiProcessorCount, copy_gbs, T, topk, kRowBytes, T * double(topk) * kRowBytes / 1e6);

  const Cfg cfgs[] = {
      {"64x2 4w (few-heads ring)", gather_kernel<64, 2, 4>, 64, 2, 4},
      {"64x3 4w", gather_kernel<64, 3, 4>, 64, 3, 4},
      {"32x2 4w", gather_kernel<32, 2, 4>, 32, 2, 4},
      {"32x3 4w", gather_kernel<32, 3, 4>, 32, 3, 4},
      {"32x4 4w", gather_kernel<32, 4, 4>, 32, 4, 4},
      {"16x4 4w", gather_kernel<16, 4, 4>, 16, 4, 4},
      {"16x6 4w", gather_kernel<16, 6, 4>, 16, 6, 4},
      {"64x3 8w", gather_kernel<64, 3, 8>, 64, 3, 8},
      // the copies with the L2 prefetch-size hint (.L2::64B / 128B / 256B)
      {"64x2 4w, L2::64B", gather_kernel<64, 2, 4, 64>, 64, 2, 4},
      {"64x2 4w, L2::128B", gather_kernel<64, 2, 4, 128>, 64, 2, 4},
      {"64x2 4w, L2::256B", gather_kernel<64, 2, 4, 256>, 64, 2, 4},
      {"16x4 4w, L2::256B", gather_kernel<16, 4, 4, 256>, 16, 4, 4},
      // one CTA per SM (hopper.mla's occupancy): the cooperative ring, then hopper.mla's producer
      // loop (3 raw stages, 2 ahead as landed; deeper rings as the shared memory would allow)
      {"64x2 4w, 1 CTA/SM", gather_kernel<64, 2, 4>, 64, 2, 4, 224 * 1024},
      {"32x3 4w, 1 CTA/SM", gather_kernel<32, 3, 4>, 32, 3, 4, 224 * 1024},
      {"hopper loop 32x3, 2 ahead", producer_loop_kernel<3, 2>, 32, 3, 4, 224 * 1024},
      {"hopper loop 32x5, 4 ahead", producer_loop_kernel<5, 4>, 32, 5, 4, 224 * 1024},
      {"hopper loop 32x8, 7 ahead", producer_loop_kernel<8, 7>, 32, 8, 4, 224 * 1024},
  };
  std::printf("%-26s %6s %6s %8s %9s %9s %7s\n", "ring", "split", "CTA/SM", "smem KB", "us", "GB/s", "% copy");
  for (const Cfg& c : cfgs) {
    const int smem = c.smem_bytes > 0 ? c.smem_bytes : c.bn * c.stages * kRowBytes;
    CK(cudaFuncSetAttribute(c.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    int per_sm = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, c.kernel, c.warps * 32, smem));
    for (int nsplit : {1, 2, 4, 8}) {
      if (topk % (nsplit * c.bn) != 0) continue;
      const int grid = T * nsplit;
      for (int s = 0; s < kSets; ++s) c.kernel<<<grid, c.warps * 32, smem>>>(cache, idx[s], topk, nsplit, sink);
      CK(cudaGetLastError());
      constexpr int kIters = 30;
      CK(cudaEventRecord(e0));
      for (int i = 0; i < kIters; ++i) c.kernel<<<grid, c.warps * 32, smem>>>(cache, idx[i % kSets], topk, nsplit, sink);
      CK(cudaEventRecord(e1));
      CK(cudaEventSynchronize(e1));
      CK(cudaEventElapsedTime(&ms, e0, e1));
      const double us = ms * 1e3 / kIters;
      const double gbs = T * double(topk) * kRowBytes / (us * 1e-6) / 1e9;
      std::printf("%-26s %6d %6d %8.1f %9.1f %9.0f %6.0f%%\n", c.name, nsplit, per_sm, smem / 1024.0, us, gbs,
                  100.0 * gbs / copy_gbs);
    }
  }
  return 0;
}
