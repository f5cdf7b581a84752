// The exact-selection building blocks run alone on many adversarial buffers, against a host
// sort: block_select_threshold (src/kernels/topk/radix_select.cuh) and the fused indexer's candidate
// compaction (kernels/topk/running_topk.cuh): the fused score kernel's compaction (128 threads /
// 10-bit digits / 256-entry lists), a 1024-thread compaction (1024 / 11 / 1024, where the
// block_min_max bug showed), and the select exactly as the top-k kernel instantiates it
// (topk_kernel.cuh's constants, both histogram counts). Each problem is one CTA; the launches
// repeat to catch timing-dependent losses.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/topk/running_topk.cuh"
#include "kernels/topk/topk_kernel.cuh"
#include "kernels/topk/topk_launch.hpp"
#include "gpu_test_util.hpp"

namespace latte::testing {
namespace {

template <int THREADS, int DIGIT, int LCAP, int PER>
__global__ void __launch_bounds__(THREADS) compact_kernel(uint32_t* keys, int32_t* pos, const int* n,
                                                          const int* keep, int cap, uint64_t* thr_out,
                                                          int* kept_out) {
  __shared__ cuda::SelectScratch sc;
  __shared__ int hist[1 << DIGIT];
  const int b = blockIdx.x;
  int kept = -1;
  const uint64_t thr = cuda::compact_candidates<THREADS, DIGIT, LCAP, PER>(
      keys + static_cast<int64_t>(b) * cap, pos + static_cast<int64_t>(b) * cap, n[b], keep[b], sc, hist, &kept);
  if (threadIdx.x == 0) {
    thr_out[b] = thr;
    kept_out[b] = kept;
  }
}

// block_select_threshold as the top-k kernel instantiates it (no compaction).
template <bool DIRECT_HIST>
__global__ void __launch_bounds__(cuda::kTopkThreads) topk_select_kernel(const uint32_t* keys, const int32_t* pos,
                                                                                const int* n, const int* keep, int cap,
                                                                                uint64_t* thr_out) {
  __shared__ cuda::SelectScratch sc;
  __shared__ int hist[1 << cuda::kTopkDigit];
  const int b = blockIdx.x;
  const uint64_t thr =
      cuda::block_select_threshold<cuda::kTopkThreads, cuda::kTopkDigit, cuda::kTopkLcap,
                                   DIRECT_HIST>(keys + static_cast<int64_t>(b) * cap, pos + static_cast<int64_t>(b) * cap,
                                                n[b], keep[b], sc, hist);
  if (threadIdx.x == 0) thr_out[b] = thr;
}

// block_min_max alone over the composites of each problem.
template <int THREADS>
__global__ void __launch_bounds__(THREADS) minmax_kernel(const uint32_t* keys, const int32_t* pos, const int* n, int cap,
                                                         uint64_t* out) {
  __shared__ cuda::SelectScratch sc;
  const int b = blockIdx.x;
  uint64_t lo = ~uint64_t{0}, hi = 0;
  for (int i = threadIdx.x; i < n[b]; i += THREADS) {
    const int64_t at = static_cast<int64_t>(b) * cap + i;
    const uint64_t c = cuda::composite_key(keys[at], static_cast<uint32_t>(pos[at]));
    lo = c < lo ? c : lo;
    hi = c > hi ? c : hi;
  }
  cuda::block_min_max<THREADS>(lo, hi, sc.minmax);
  if (threadIdx.x == 0) {
    out[2 * b] = lo;
    out[2 * b + 1] = hi;
  }
}

uint32_t host_score_key(float f) {
  if (f != f) return 1u;
  if (f == 0.0f) f = 0.0f;
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

uint64_t host_composite(uint32_t key, int32_t p) {
  return (static_cast<uint64_t>(key) << 32) | static_cast<uint32_t>(~static_cast<uint32_t>(p));
}

struct Buffers {
  int problems = 0, cap = 0;
  std::vector<uint32_t> keys;
  std::vector<int32_t> pos;
  std::vector<int> n, keep;
};

// Problem kinds: distinct normal scores; 3..40 distinct scores (ties everywhere); scores in a
// narrow band (long common key prefixes); positions ascending or shuffled.
Buffers make_buffers(std::mt19937& rng, int problems, int cap) {
  Buffers b;
  b.problems = problems;
  b.cap = cap;
  b.keys.assign(static_cast<std::size_t>(problems) * cap, 0xDEADBEEFu);
  b.pos.assign(static_cast<std::size_t>(problems) * cap, -7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int i = 0; i < problems; ++i) {
    const int n = std::uniform_int_distribution<int>(2, cap)(rng);
    // keep == n and n - 1 often: the select's shortcut when every pair is kept.
    const int keep = i % 5 == 0 ? n : i % 5 == 1 ? std::max(1, n - 1) : std::uniform_int_distribution<int>(1, n)(rng);
    b.n.push_back(n);
    b.keep.push_back(keep);
    const int kind = i % 4;
    std::vector<float> levels(static_cast<std::size_t>(std::uniform_int_distribution<int>(3, 40)(rng)));
    for (float& l : levels) l = normal(rng);
    std::vector<int32_t> p(static_cast<std::size_t>(n));
    std::iota(p.begin(), p.end(), 0);
    const int stride = std::uniform_int_distribution<int>(1, 60)(rng);
    for (int32_t& x : p) x *= stride;
    if (i % 3 != 0) std::shuffle(p.begin(), p.end(), rng);
    for (int j = 0; j < n; ++j) {
      float s = normal(rng);
      if (kind == 1) s = levels[static_cast<std::size_t>(j) % levels.size()];
      if (kind == 2) s = 1.0f + 1e-4f * normal(rng);
      if (kind == 3) s = std::fabs(s) * 1e-3f;
      const std::size_t at = static_cast<std::size_t>(i) * cap + j;
      b.keys[at] = host_score_key(s);
      b.pos[at] = p[static_cast<std::size_t>(j)];
    }
  }
  return b;
}

template <int THREADS, int DIGIT, int LCAP, int PER>
void stress(int problems, int cap, int reps, uint32_t seed) {
  std::mt19937 rng(seed);
  const Buffers b = make_buffers(rng, problems, cap);
  const std::size_t entries = static_cast<std::size_t>(problems) * cap;
  DeviceBuffer keys(entries * 4), pos(entries * 4), n(problems * 4), keep(problems * 4), thr(problems * 8),
      kept(problems * 4);
  n.upload(b.n.data(), problems * 4);
  keep.upload(b.keep.data(), problems * 4);
  int bad = 0;
  {
    keys.upload(b.keys.data(), entries * 4);
    pos.upload(b.pos.data(), entries * 4);
    DeviceBuffer mm(problems * 16);
    minmax_kernel<THREADS><<<problems, THREADS>>>(keys.as<uint32_t>(), pos.as<int32_t>(), n.as<int>(), cap,
                                                  mm.as<uint64_t>());
    LATTE_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<uint64_t> got(static_cast<std::size_t>(2 * problems));
    mm.download(got.data(), problems * 16);
    for (int i = 0; i < problems; ++i) {
      const std::size_t o = static_cast<std::size_t>(i) * cap;
      uint64_t lo = ~uint64_t{0}, hi = 0;
      for (int j = 0; j < b.n[static_cast<std::size_t>(i)]; ++j) {
        const uint64_t c = host_composite(b.keys[o + j], b.pos[o + j]);
        lo = std::min(lo, c);
        hi = std::max(hi, c);
      }
      if ((got[2 * i] != lo || got[2 * i + 1] != hi) && bad++ < 8)
        ADD_FAILURE() << "block_min_max problem " << i << ": (" << got[2 * i] << ", " << got[2 * i + 1] << "), want ("
                      << lo << ", " << hi << ")";
    }
  }
  for (int rep = 0; rep < reps; ++rep) {
    keys.upload(b.keys.data(), entries * 4);
    pos.upload(b.pos.data(), entries * 4);
    compact_kernel<THREADS, DIGIT, LCAP, PER><<<problems, THREADS>>>(keys.as<uint32_t>(), pos.as<int32_t>(),
                                                                       n.as<int>(), keep.as<int>(), cap,
                                                                       thr.as<uint64_t>(), kept.as<int>());
    LATTE_CUDA_CHECK(cudaGetLastError());
    LATTE_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<uint32_t> gk(entries);
    std::vector<int32_t> gp(entries);
    std::vector<uint64_t> gthr(static_cast<std::size_t>(problems));
    std::vector<int> gkept(static_cast<std::size_t>(problems));
    keys.download(gk.data(), entries * 4);
    pos.download(gp.data(), entries * 4);
    thr.download(gthr.data(), problems * 8);
    kept.download(gkept.data(), problems * 4);
    for (int i = 0; i < problems && bad < 8; ++i) {
      const std::size_t o = static_cast<std::size_t>(i) * cap;
      const int ni = b.n[static_cast<std::size_t>(i)], ki = b.keep[static_cast<std::size_t>(i)];
      std::vector<uint64_t> comp;
      for (int j = 0; j < ni; ++j) comp.push_back(host_composite(b.keys[o + j], b.pos[o + j]));
      std::vector<uint64_t> sorted = comp;
      std::sort(sorted.begin(), sorted.end(), std::greater<>());
      const uint64_t got_thr = gthr[static_cast<std::size_t>(i)];
      const std::string what = "rep " + std::to_string(rep) + " problem " + std::to_string(i) + " (n " +
                               std::to_string(ni) + ", keep " + std::to_string(ki) + ", kind " +
                               std::to_string(i % 4) + ")";
      // Any T with exactly `keep` composites >= T is right (it need not be one of them).
      const auto at_or_above = std::count_if(comp.begin(), comp.end(), [&](uint64_t c) { return c >= got_thr; });
      if (at_or_above != ki) {
        const auto idx = [&](uint64_t v) { return std::find(comp.begin(), comp.end(), v) - comp.begin(); };
        ADD_FAILURE() << what << ": " << at_or_above << " composites >= the threshold " << got_thr << " (min "
                      << sorted.back() << " at " << idx(sorted.back()) << ", max " << sorted.front()
                      << "; the threshold is at " << idx(got_thr) << ")";
        ++bad;
        continue;
      }
      const uint64_t want_thr = sorted[static_cast<std::size_t>(ki - 1)];
      if (gkept[static_cast<std::size_t>(i)] != ki) {
        ADD_FAILURE() << what << ": kept " << gkept[static_cast<std::size_t>(i)];
        ++bad;
        continue;
      }
      // The survivors, in their buffer order, then the untouched tail.
      int at = 0;
      for (int j = 0; j < ni; ++j) {
        if (comp[static_cast<std::size_t>(j)] < want_thr) continue;
        if (gk[o + at] != b.keys[o + j] || gp[o + at] != b.pos[o + j]) {
          ADD_FAILURE() << what << ": survivor " << at << " is (" << gk[o + at] << ", " << gp[o + at] << "), want ("
                        << b.keys[o + j] << ", " << b.pos[o + j] << ")";
          ++bad;
          break;
        }
        ++at;
      }
      for (int j = ni; j < cap; ++j)
        if (gk[o + j] != 0xDEADBEEFu) {
          ADD_FAILURE() << what << ": wrote past n at " << j;
          ++bad;
          break;
        }
    }
  }
  EXPECT_EQ(bad, 0);
}

class SelectStress : public ::testing::Test {
 protected:
  void SetUp() override { LATTE_SKIP_WITHOUT_GPU(); }
};

// The fused score kernel's compaction: 128 threads, 10-bit digits, 256-entry bin lists.
TEST_F(SelectStress, FusedCompactionShape) { stress<128, 10, 256, 8>(1024, 3072, 6, 1); }
// A 1024-thread compaction with 1024-entry bin lists (the shape that exposed block_min_max).
TEST_F(SelectStress, Compaction1024Threads) { stress<1024, 11, 1024, 4>(512, 8192, 6, 2); }

// The select of the top-k kernel, with its own constants and both histogram counts: exactly
// `keep` composites at or above the threshold, on every problem and repetition.
TEST_F(SelectStress, TopkKernelSelect) {
  std::mt19937 rng(4);
  const int problems = 512, cap = 8192;
  const Buffers b = make_buffers(rng, problems, cap);
  const std::size_t entries = static_cast<std::size_t>(problems) * cap;
  DeviceBuffer keys(entries * 4), pos(entries * 4), n(problems * 4), keep(problems * 4), thr(problems * 8);
  keys.upload(b.keys.data(), entries * 4);
  pos.upload(b.pos.data(), entries * 4);
  n.upload(b.n.data(), problems * 4);
  keep.upload(b.keep.data(), problems * 4);
  int bad = 0;
  for (const bool direct : {true, false}) {
    for (int rep = 0; rep < 3 && bad < 8; ++rep) {
      if (direct) {
        topk_select_kernel<true><<<problems, cuda::kTopkThreads>>>(keys.as<uint32_t>(), pos.as<int32_t>(),
                                                                            n.as<int>(), keep.as<int>(), cap,
                                                                            thr.as<uint64_t>());
      } else {
        topk_select_kernel<false><<<problems, cuda::kTopkThreads>>>(keys.as<uint32_t>(), pos.as<int32_t>(),
                                                                             n.as<int>(), keep.as<int>(), cap,
                                                                             thr.as<uint64_t>());
      }
      LATTE_CUDA_CHECK(cudaGetLastError());
      LATTE_CUDA_CHECK(cudaDeviceSynchronize());
      std::vector<uint64_t> got(static_cast<std::size_t>(problems));
      thr.download(got.data(), problems * 8);
      for (int i = 0; i < problems && bad < 8; ++i) {
        const std::size_t o = static_cast<std::size_t>(i) * cap;
        int at_or_above = 0;
        for (int j = 0; j < b.n[static_cast<std::size_t>(i)]; ++j)
          at_or_above += host_composite(b.keys[o + j], b.pos[o + j]) >= got[static_cast<std::size_t>(i)] ? 1 : 0;
        if (at_or_above != b.keep[static_cast<std::size_t>(i)]) {
          ADD_FAILURE() << (direct ? "direct" : "match.any") << " histograms, rep " << rep << " problem " << i
                        << " (n " << b.n[static_cast<std::size_t>(i)] << ", keep " << b.keep[static_cast<std::size_t>(i)]
                        << "): " << at_or_above << " composites >= the threshold";
          ++bad;
        }
      }
    }
  }
  EXPECT_EQ(bad, 0);
}

// The fused path's final selection (top-k kernel over candidate lists): rows of chunk lists
// with empty entries, fewer valid candidates than topk, exactly topk, and many more.
TEST_F(SelectStress, CandidateListsTopk) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int rows = 96, topk = 1024, chunks = 3;
  const int64_t n = static_cast<int64_t>(chunks) * topk, max_len = 40000;
  std::vector<uint32_t> keys(static_cast<std::size_t>(rows * n), 0u);
  std::vector<int32_t> pos(static_cast<std::size_t>(rows * n), -1), vis(rows);
  std::vector<std::vector<int32_t>> want(rows);
  for (int r = 0; r < rows; ++r) {
    // Valid candidates: a random count, spread over the chunk lists, distinct positions.
    const int valid = r % 4 == 0 ? std::uniform_int_distribution<int>(1, topk)(rng)
                    : r % 4 == 1 ? topk
                                 : std::uniform_int_distribution<int>(topk + 1, static_cast<int>(n))(rng);
    vis[r] = static_cast<int32_t>(max_len);
    std::vector<int32_t> p(static_cast<std::size_t>(max_len));
    std::iota(p.begin(), p.end(), 0);
    std::shuffle(p.begin(), p.end(), rng);
    std::vector<int64_t> where(static_cast<std::size_t>(n));
    std::iota(where.begin(), where.end(), 0);
    std::shuffle(where.begin(), where.end(), rng);
    std::vector<std::pair<uint64_t, int32_t>> comp;
    for (int j = 0; j < valid; ++j) {
      const float sc = r % 3 == 0 ? std::fabs(normal(rng)) * 1e-3f : normal(rng);
      const std::size_t at = static_cast<std::size_t>(r * n + where[static_cast<std::size_t>(j)]);
      keys[at] = host_score_key(sc);
      pos[at] = p[static_cast<std::size_t>(j)];
      comp.emplace_back(host_composite(keys[at], pos[at]), pos[at]);
    }
    std::sort(comp.begin(), comp.end(), std::greater<>());
    for (int j = 0; j < std::min(topk, valid); ++j) want[r].push_back(comp[static_cast<std::size_t>(j)].second);
    std::sort(want[r].begin(), want[r].end());
    want[r].resize(topk, -1);
  }
  DeviceBuffer dk(keys.size() * 4), dp(pos.size() * 4), dv(rows * 4), dout(static_cast<std::size_t>(rows) * topk * 4);
  dk.upload(keys.data(), keys.size() * 4);
  dp.upload(pos.data(), pos.size() * 4);
  dv.upload(vis.data(), rows * 4);
  int bad = 0;
  for (int rep = 0; rep < 10 && bad < 8; ++rep) {
    LATTE_CUDA_CHECK(cudaMemset(dout.get(), 0x5A, dout.bytes()));
    cuda::launch_candidates_topk(dk.as<uint32_t>(), dp.as<int32_t>(), rows, n, dv.as<int32_t>(), max_len, topk,
                                         dout.as<int32_t>(), nullptr);
    LATTE_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<int32_t> got(static_cast<std::size_t>(rows) * topk);
    dout.download(got.data(), got.size() * 4);
    for (int r = 0; r < rows && bad < 8; ++r) {
      const std::vector<int32_t> g(got.begin() + static_cast<int64_t>(r) * topk, got.begin() + static_cast<int64_t>(r + 1) * topk);
      if (g != want[r]) {
        std::size_t i = 0;
        while (g[i] == want[r][i]) ++i;
        ADD_FAILURE() << "rep " << rep << " row " << r << " (kind " << r % 4 << "): col " << i << " is " << g[i]
                      << ", want " << want[r][i];
        ++bad;
      }
    }
  }
  EXPECT_EQ(bad, 0);
}

}  // namespace
}  // namespace latte::testing
