// The unfused indexer top-k run in token slices (a workspace that holds the keys of only a few
// tokens) must give bit-identical indices to one pass over all tokens, with and without
// token_request (without it, token t reads block_table row t, so each slice starts at its own
// row).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/indexer/smxx/indexer_launch.hpp"
#include "gpu_test_util.hpp"
#include "latte/device.hpp"
#include "latte/formats.hpp"
#include "latte/ops.hpp"

namespace latte::testing {
namespace {

constexpr int kHeads = 32, kDim = 128, kBlock = 64, kTopk = 256;

struct SliceProblem {
  int tokens = 0, batch = 0, max_blocks = 0, num_blocks = 0;
  DeviceBuffer q, qs, w, kc, bt, tr, vl;
  cuda_indexer::IndexerParams raw(bool with_tr) const {
    cuda_indexer::IndexerParams p;
    p.q = q.get();
    p.q_fp8 = true;
    p.q_st = kHeads * kDim;
    p.q_sh = kDim;
    p.q_scale = qs.as<float>();
    p.qs_st = kHeads;
    p.qs_sh = 1;
    p.weights = w.as<float>();
    p.w_st = kHeads;
    p.w_sh = 1;
    p.k_cache = kc.as<uint8_t>();
    p.page_stride = static_cast<int64_t>(kBlock) * kIndexBytesPerToken;
    p.num_blocks = num_blocks;
    p.block_size = kBlock;
    p.block_table = bt.as<int32_t>();
    p.bt_sr = max_blocks;
    p.bt_sc = 1;
    p.batch = batch;
    p.max_blocks = max_blocks;
    p.token_request = with_tr ? tr.as<int32_t>() : nullptr;
    p.tr_s = 1;
    p.visible_lens = vl.as<int32_t>();
    p.vl_s = 1;
    p.tokens = tokens;
    p.heads = kHeads;
    return p;
  }
};

// `tokens` tokens over `batch` block_table rows (token t -> row t % batch, or row t without
// token_request: then batch == tokens), visible lengths between 100 and 3000.
void fill(SliceProblem& sp, std::mt19937& rng, int tokens, int batch) {
  sp.tokens = tokens;
  sp.batch = batch;
  sp.max_blocks = 3000 / kBlock + 2;
  sp.num_blocks = batch * sp.max_blocks + 5;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint8_t> q(static_cast<std::size_t>(tokens) * kHeads * kDim);
  std::vector<float> qs(static_cast<std::size_t>(tokens) * kHeads), w(qs.size());
  for (std::size_t i = 0; i < q.size(); ++i) q[i] = float_to_e4m3(3.0f * normal(rng));
  for (std::size_t i = 0; i < qs.size(); ++i) {
    qs[i] = 0.01f * (1.0f + std::fabs(normal(rng)));
    w[i] = normal(rng) / 64.0f;
  }
  std::vector<uint8_t> kc(static_cast<std::size_t>(sp.num_blocks) * kBlock * kIndexBytesPerToken);
  for (int b = 0; b < sp.num_blocks; ++b)
    for (int off = 0; off < kBlock; ++off) {
      float k[kDim];
      for (float& x : k) x = normal(rng);
      pack_indexer_k_token(k, Fp8ScaleKind::amax, kc.data() + static_cast<std::size_t>(b) * kBlock * kIndexBytesPerToken,
                           kBlock, off);
    }
  std::vector<int32_t> perm(static_cast<std::size_t>(sp.num_blocks));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<int32_t> bt(static_cast<std::size_t>(batch) * sp.max_blocks);
  for (std::size_t i = 0; i < bt.size(); ++i) bt[i] = perm[i];
  std::vector<int32_t> tr(static_cast<std::size_t>(tokens)), vl(static_cast<std::size_t>(tokens));
  std::uniform_int_distribution<int> len(100, 3000);
  for (int t = 0; t < tokens; ++t) {
    tr[static_cast<std::size_t>(t)] = t % batch;
    vl[static_cast<std::size_t>(t)] = len(rng);
  }
  auto up = [](DeviceBuffer& d, const auto& v) {
    d = DeviceBuffer(std::max<std::size_t>(16, v.size() * sizeof(v[0])));
    d.upload(v.data(), v.size() * sizeof(v[0]));
  };
  up(sp.q, q);
  up(sp.qs, qs);
  up(sp.w, w);
  up(sp.kc, kc);
  up(sp.bt, bt);
  up(sp.tr, tr);
  up(sp.vl, vl);
}

cuda_indexer::DeviceTraits gpu_traits() {
  const DeviceInfo d = describe_device("cuda:0");
  return cuda_indexer::DeviceTraits{d.arch(), d.sm_count, false};
}

std::vector<int32_t> run(const cuda_indexer::IndexerParams& p, const cuda_indexer::DeviceTraits& dev,
                         std::size_t ws_bytes, bool physical) {
  DeviceBuffer ws(std::max<std::size_t>(ws_bytes, 16)), out(static_cast<std::size_t>(p.tokens) * kTopk * 4);
  LATTE_CUDA_CHECK(cudaMemset(out.get(), 0x6B, out.bytes()));
  cuda_indexer::TopkOutput o;
  o.indices = out.as<int32_t>();
  o.st = kTopk;
  o.topk = kTopk;
  o.physical = physical;
  cuda_indexer::launch_indexer_topk(p, o, cuda_indexer::TopkPath::automatic, ws.get(), ws_bytes, dev, nullptr);
  LATTE_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<int32_t> h(static_cast<std::size_t>(p.tokens) * kTopk);
  out.download(h.data(), h.size() * 4);
  return h;
}

class TokenSlices : public ::testing::Test {
 protected:
  void SetUp() override { LATTE_SKIP_WITHOUT_GPU(); }
};

TEST_F(TokenSlices, SlicedEqualsOnePass) {
  std::mt19937 rng(31);
  const cuda_indexer::DeviceTraits dev = gpu_traits();
  for (const bool with_tr : {true, false}) {
    SliceProblem sp;
    fill(sp, rng, 13, with_tr ? 4 : 13);
    const cuda_indexer::IndexerParams p = sp.raw(with_tr);
    const std::size_t all = cuda_indexer::topk_workspace_bytes(p, kTopk, cuda_indexer::TopkPath::unfused, dev);
    const std::size_t per_token = all / 13;  // keys of one token (rounded up in `all`)
    for (const bool physical : {false, true}) {
      const std::vector<int32_t> whole = run(p, dev, all, physical);
      for (int slice : {1, 5, 12}) {
        EXPECT_EQ(run(p, dev, per_token * slice + 8, physical), whole)
            << "slices of " << slice << " tokens, token_request " << with_tr << ", physical " << physical;
      }
      // Sanity: a row holds min(topk, visible) ascending positions.
      if (!physical) {
        std::vector<int32_t> vl(13);
        sp.vl.download(vl.data(), 13 * 4);
        for (int t = 0; t < 13; ++t) {
          const int valid = std::min(kTopk, vl[static_cast<std::size_t>(t)]);
          for (int i = 0; i < kTopk; ++i) {
            const int32_t v = whole[static_cast<std::size_t>(t) * kTopk + i];
            if (i < valid) {
              ASSERT_GE(v, 0);
              ASSERT_LT(v, vl[static_cast<std::size_t>(t)]);
              if (i > 0) ASSERT_GT(v, whole[static_cast<std::size_t>(t) * kTopk + i - 1]);
            } else {
              ASSERT_EQ(v, -1);
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace latte::testing
