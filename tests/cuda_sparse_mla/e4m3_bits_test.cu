// The exact e4m3 widenings of the fp8_ds_mla kernels, every code in every byte position: the
// bf16 bit moves (src/kernels/common/e4m3_bf16_bits.cuh, the sm_80 / sm_86 path and the row-tile kernel's
// PV) give the e4m3 value x 2^-120, on the host (CI) and on the device; on sm_89+ the f16
// conversion instruction (kernels/common/mma_sync.cuh) gives the value exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/common/e4m3_bf16_bits.cuh"
#include "kernels/common/mma_sync.cuh"
#include "gpu_test_util.hpp"

namespace latte::testing {
namespace {

// The value of an e4m3 code (bias 7, no infinities; 0x7f / 0xff are NaN).
double e4m3_value(uint32_t code) {
  const int sign = (code >> 7) & 1, e = (code >> 3) & 15, m = code & 7;
  const double mag = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return sign ? -mag : mag;
}
bool e4m3_nan(uint32_t code) { return (code & 0x7f) == 0x7f; }

double bf16_value(uint32_t bits16) {
  const uint32_t u = bits16 << 16;
  float f = 0.f;
  std::memcpy(&f, &u, 4);
  return f;
}
double f16_value(uint32_t bits16) {
  const int sign = (bits16 >> 15) & 1, e = (bits16 >> 10) & 31, m = bits16 & 1023;
  const double mag = e == 0 ? std::ldexp(m / 1024.0, -14) : std::ldexp(1.0 + m / 1024.0, e - 15);
  return sign ? -mag : mag;
}

// The four words that put every code once in each byte position, with the other bytes busy.
uint32_t word_of(int code, int pos) {
  const uint32_t filler = 0xA5u ^ static_cast<uint32_t>(code * 37);
  uint32_t w = 0;
  for (int b = 0; b < 4; ++b) w |= (b == pos ? static_cast<uint32_t>(code) : (filler + 53u * b) & 0xFFu) << (8 * b);
  return w;
}

// out[2 i + 0..1]: even/odd bf16x2 of word i; cvt[2 i + 0..1]: f16x2 of bytes 0-1 / 2-3, and
// cvt[2 n] = 1 when the loaded code has the conversion instruction (built for sm_89+: a build
// for lower architectures JIT-run on a newer GPU has not).
__global__ void widen_kernel(const uint32_t* words, int n, uint32_t* out, uint32_t* cvt) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const uint32_t w = words[i];
  out[2 * i + 0] = cuda::e4m3x4_even_to_bf16x2(w);
  out[2 * i + 1] = cuda::e4m3x4_odd_to_bf16x2(w);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  cvt[2 * i + 0] = cuda::e4m3x2_to_f16x2(w);     // bytes 0, 1
  cvt[2 * i + 1] = cuda::e4m3x2_hi_to_f16x2(w);  // bytes 2, 3
  if (i == 0) cvt[2 * n] = 1u;
#else
  (void)cvt;
#endif
}

// Checks the two widenings of word w (as computed by host or device) for the byte at `pos`.
void check_word(uint32_t w, int pos, const uint32_t got[2], const char* where) {
  const uint32_t code = (w >> (8 * pos)) & 0xFFu;
  if (e4m3_nan(code)) return;  // bit moves give a finite value there (documented)
  const double v = e4m3_value(code);
  const int half = pos >> 1;  // even(w) = {d0, d2}, odd(w) = {d1, d3}
  const uint32_t b16 = (got[pos & 1] >> (16 * half)) & 0xFFFFu;
  EXPECT_EQ(bf16_value(b16), std::ldexp(v, -120)) << where << " bf16, code 0x" << std::hex << code << " byte " << pos;
  if (v == 0.0) EXPECT_EQ(b16 >> 15, code >> 7) << where << " signed zero, code 0x" << std::hex << code;
}

std::vector<uint32_t> all_words(std::vector<int>* pos) {
  std::vector<uint32_t> words;
  for (int code = 0; code < 256; ++code)
    for (int p = 0; p < 4; ++p) {
      words.push_back(word_of(code, p));
      pos->push_back(p);
    }
  return words;
}

TEST(E4m3Bits, HostWideningIsExactForEveryCode) {
  std::vector<int> pos;
  const std::vector<uint32_t> words = all_words(&pos);
  for (std::size_t i = 0; i < words.size(); ++i) {
    const uint32_t w = words[i];
    const uint32_t got[2] = {cuda::e4m3x4_even_to_bf16x2(w), cuda::e4m3x4_odd_to_bf16x2(w)};
    check_word(w, pos[i], got, "host");
  }
}

TEST(E4m3Bits, DeviceWideningAndConversionAreExact) {
  LATTE_SKIP_WITHOUT_GPU();
  std::vector<int> pos;
  const std::vector<uint32_t> words = all_words(&pos);
  const int n = static_cast<int>(words.size());
  DeviceBuffer d_words(n * 4), d_out(n * 8), d_cvt(n * 8 + 4);
  LATTE_CUDA_CHECK(cudaMemcpy(d_words.get(), words.data(), n * 4, cudaMemcpyHostToDevice));
  LATTE_CUDA_CHECK(cudaMemset(d_out.get(), 0xFF, n * 8));  // poisoned
  LATTE_CUDA_CHECK(cudaMemset(d_cvt.get(), 0xFF, n * 8 + 4));
  widen_kernel<<<(n + 127) / 128, 128>>>(static_cast<const uint32_t*>(d_words.get()), n, static_cast<uint32_t*>(d_out.get()),
                                         static_cast<uint32_t*>(d_cvt.get()));
  LATTE_CUDA_CHECK(cudaGetLastError());
  std::vector<uint32_t> out(2 * n), cvt(2 * n + 1);
  LATTE_CUDA_CHECK(cudaMemcpy(out.data(), d_out.get(), n * 8, cudaMemcpyDeviceToHost));
  LATTE_CUDA_CHECK(cudaMemcpy(cvt.data(), d_cvt.get(), n * 8 + 4, cudaMemcpyDeviceToHost));
  const bool has_cvt = cvt[2 * n] == 1u;
  for (int i = 0; i < n; ++i) {
    check_word(words[i], pos[i], &out[2 * i], "device");
    const uint32_t code = (words[i] >> (8 * pos[i])) & 0xFFu;
    if (!has_cvt || e4m3_nan(code)) continue;
    // the instruction's f16 of this byte: the e4m3 value exactly
    const uint32_t by_cvt = (cvt[2 * i + (pos[i] >> 1)] >> (16 * (pos[i] & 1))) & 0xFFFFu;
    EXPECT_EQ(f16_value(by_cvt), e4m3_value(code)) << "cvt, code 0x" << std::hex << code;
  }
}

}  // namespace
}  // namespace latte::testing
