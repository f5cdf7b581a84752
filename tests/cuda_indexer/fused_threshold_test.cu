// The fused indexer's admission rule pieces on the device, against host definitions:
// key_floor (src/kernels/topk/radix_select.cuh: a threshold on order-preserving keys as one float
// comparison, used by the admission pass) and sampled_threshold (fused_threshold.cuh: tau, the
// m-th largest sampled key with its low 16 bits cleared).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "kernels/topk/fused_threshold.cuh"
#include "kernels/topk/radix_select.cuh"
#include "gpu_test_util.hpp"

namespace latte::testing {
namespace {

// mismatch[0]: count; [1], [2]: the first failing (float bits, key).
__global__ void key_floor_kernel(const float* f, int nf, const uint32_t* keys, int nk, unsigned* mismatch) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= nf) return;
  const float x = f[i];
  if (x != x) return;  // NaN: never admitted by a float comparison (tau 1 admits it separately)
  for (int j = 0; j < nk; ++j) {
    const bool by_key = cuda::score_key(x) >= keys[j];
    const bool by_float = x >= cuda::key_floor(keys[j]);
    if (by_key != by_float && atomicAdd(mismatch, 1u) == 0u) {
      mismatch[1] = __float_as_uint(x);
      mismatch[2] = keys[j];
    }
  }
}

// One problem per CTA of 128 threads: n keys at keys + b * 2048, rank m[b].
__global__ void __launch_bounds__(128) sampled_threshold_kernel(const uint32_t* keys, int n, const int* m, uint32_t* out) {
  __shared__ int red[8];
  const int b = blockIdx.x;
  const uint32_t tau = cuda::sampled_threshold<128>(keys + static_cast<int64_t>(b) * cuda::kFusedSamples, n,
                                                            m[b], red);
  if (threadIdx.x == 0) out[b] = tau;
}

uint32_t host_score_key(float f) {
  if (f != f) return 1u;
  if (f == 0.0f) f = 0.0f;
  uint32_t u = 0;
  std::memcpy(&u, &f, 4);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

class FusedThreshold : public ::testing::Test {
 protected:
  void SetUp() override { LATTE_SKIP_WITHOUT_GPU(); }
};

TEST_F(FusedThreshold, KeyFloorIsTheKeyOrder) {
  std::mt19937 rng(17);
  std::vector<float> f = {0.0f, -0.0f, 1.0f, -1.0f, std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::lowest(), std::numeric_limits<float>::min(),
                          -std::numeric_limits<float>::min(), std::numeric_limits<float>::denorm_min(),
                          -std::numeric_limits<float>::denorm_min(), std::nanf("")};
  std::uniform_int_distribution<uint32_t> bits;
  std::normal_distribution<float> normal(0.0f, 3.0f);
  while (f.size() < 4096) {
    uint32_t u = bits(rng);
    float x = 0;
    std::memcpy(&x, &u, 4);
    f.push_back(f.size() % 2 ? x : normal(rng));
  }
  // Keys: boundaries of the float ranges, every float's own key and its neighbours, random.
  std::vector<uint32_t> keys = {2u, 3u, 0x007FFFFEu, 0x007FFFFFu, 0x00800000u, 0x7FFFFFFFu, 0x80000000u, 0x80000001u,
                                0xFF7FFFFFu, 0xFF800000u, 0xFF800001u, 0xFFFFFFFFu};
  for (std::size_t i = 0; i < 200; ++i) {
    const uint32_t k = host_score_key(f[i]);
    for (const uint32_t d : {k - 1u, k, k + 1u})
      if (d >= 2u) keys.push_back(d);
  }
  while (keys.size() < 512) keys.push_back(std::max(2u, bits(rng)));
  DeviceBuffer df(f.size() * 4), dk(keys.size() * 4), dm(3 * 4);
  df.upload(f.data(), f.size() * 4);
  dk.upload(keys.data(), keys.size() * 4);
  const unsigned zero[3] = {0, 0, 0};
  dm.upload(zero, sizeof(zero));
  key_floor_kernel<<<static_cast<unsigned>((f.size() + 255) / 256), 256>>>(df.as<float>(), static_cast<int>(f.size()),
                                                                           dk.as<uint32_t>(), static_cast<int>(keys.size()),
                                                                           dm.as<unsigned>());
  LATTE_CUDA_CHECK(cudaDeviceSynchronize());
  unsigned mm[3];
  dm.download(mm, sizeof(mm));
  EXPECT_EQ(mm[0], 0u) << "first mismatch: float bits 0x" << std::hex << mm[1] << ", key 0x" << mm[2];
}

TEST_F(FusedThreshold, SampledThresholdIsTheRankedKeysPrefix) {
  constexpr int kProblems = 96;
  std::mt19937 rng(29);
  for (const int n : {512, 1024, 2048}) {
    std::vector<uint32_t> keys(static_cast<std::size_t>(kProblems) * cuda::kFusedSamples, 0xDEADBEEFu);
    std::vector<int> m(kProblems);
    for (int b = 0; b < kProblems; ++b) {
      uint32_t* k = keys.data() + static_cast<std::size_t>(b) * cuda::kFusedSamples;
      std::normal_distribution<float> normal(0.0f, b % 5 == 0 ? 1e-3f : 2.0f);
      for (int i = 0; i < n; ++i) {
        switch (b % 4) {
          case 0: k[i] = host_score_key(normal(rng)); break;                      // scores
          case 1: k[i] = 0x9F000000u | (rng() & 0x0003FFFFu); break;              // few top-16 prefixes
          case 2: k[i] = i % 7 == 0 ? 0u : host_score_key(normal(rng) - 5.0f); break;  // invisible (0) among them
          default: k[i] = 0xC0400000u; break;                                     // all equal
        }
      }
      m[b] = b < 3 ? (b == 0 ? 1 : b == 1 ? n : n / 2) : 1 + static_cast<int>(rng() % n);
    }
    DeviceBuffer dk(keys.size() * 4), dmk(m.size() * 4), dout(kProblems * 4);
    dk.upload(keys.data(), keys.size() * 4);
    dmk.upload(m.data(), m.size() * 4);
    sampled_threshold_kernel<<<kProblems, 128>>>(dk.as<uint32_t>(), n, dmk.as<int>(), dout.as<uint32_t>());
    LATTE_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<uint32_t> got(kProblems);
    dout.download(got.data(), got.size() * 4);
    for (int b = 0; b < kProblems; ++b) {
      std::vector<uint32_t> k(keys.begin() + static_cast<std::ptrdiff_t>(b) * cuda::kFusedSamples,
                              keys.begin() + static_cast<std::ptrdiff_t>(b) * cuda::kFusedSamples + n);
      std::sort(k.begin(), k.end(), std::greater<>());
      const uint32_t want = std::max(1u, (k[static_cast<std::size_t>(m[b] - 1)] >> 16) << 16);
      EXPECT_EQ(got[static_cast<std::size_t>(b)], want) << "n " << n << " problem " << b << " m " << m[b];
    }
  }
}

}  // namespace
}  // namespace latte::testing
