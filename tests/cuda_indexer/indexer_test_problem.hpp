// The indexer test problems shared by the CUDA indexer backends' tests (cuda.indexer,
// hopper.indexer): random paged e4m3 K, queries, weights and visible lengths with a host and a
// device copy, the cpu.reference logits, the logits and top-k comparisons.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "kernels/indexer/indexer_params.hpp"
#include "cuda_indexer/mirror_tensor.hpp"
#include "latte/backend.hpp"
#include "latte/device.hpp"
#include "latte/formats.hpp"
#include "latte/ops.hpp"
#include "latte/registry.hpp"
#include "latte/spec.hpp"

namespace latte::testing {

using IndexerParams = cuda::IndexerParams;

struct Options {
  int heads = 32;
  DType q_dtype = DType::e4m3;
  int block_size = 64;
  bool invalid_block = false;  // one used block_table entry of row 0 is out of range
  int dup_pool = 0;            // > 0: K tokens drawn from this many distinct vectors (ties)
  bool token_request = true;
};

// One indexer problem: tokens given as (block_table row, visible length).
struct Problem {
  int T = 0, H = 0, B = 0, bs = 0, max_blocks = 0, num_blocks = 0;
  DType qd = DType::e4m3;
  MirrorTensor q, qs, w, kc, bt, tr, vl;
  bool has_tr = true;

  IndexerInputs inputs(bool device) const {
    IndexerInputs in;
    auto v = [device](const MirrorTensor& m) { return device ? m.dev_view() : m.host_view(); };
    in.q = v(q);
    if (qd == DType::e4m3) in.q_scale = v(qs);
    in.weights = v(w);
    in.k_cache = v(kc);
    in.block_table = v(bt);
    if (has_tr) in.token_request = v(tr);
    in.visible_lens = v(vl);
    return in;
  }
  int64_t max_len() const { return static_cast<int64_t>(max_blocks) * bs; }
  int row_of(int t) const { return has_tr ? tr.host<int32_t>()[t] : t; }
  int32_t slot_of(int t, int64_t p) const {
    const int32_t b = bt.host<int32_t>()[static_cast<int64_t>(row_of(t)) * max_blocks + p / bs];
    return (b >= 0 && b < num_blocks) ? static_cast<int32_t>(b * bs + p % bs) : -1;
  }
  IndexerParams raw() const {
    IndexerParams p;
    p.q = q.device();
    p.q_fp8 = qd == DType::e4m3;
    p.q_st = static_cast<int64_t>(H) * kIndexDim;
    p.q_sh = kIndexDim;
    p.q_scale = qd == DType::e4m3 ? static_cast<const float*>(qs.device()) : nullptr;
    p.qs_st = H;
    p.qs_sh = 1;
    p.weights = static_cast<const float*>(w.device());
    p.w_st = H;
    p.w_sh = 1;
    p.k_cache = static_cast<const uint8_t*>(kc.device());
    p.page_stride = static_cast<int64_t>(bs) * kIndexBytesPerToken;
    p.num_blocks = num_blocks;
    p.block_size = bs;
    p.block_table = static_cast<const int32_t*>(bt.device());
    p.bt_sr = max_blocks;
    p.bt_sc = 1;
    p.batch = B;
    p.max_blocks = max_blocks;
    p.token_request = has_tr ? static_cast<const int32_t*>(tr.device()) : nullptr;
    p.tr_s = 1;
    p.visible_lens = static_cast<const int32_t*>(vl.device());
    p.vl_s = 1;
    p.tokens = T;
    p.heads = H;
    return p;
  }
};

inline Problem make_problem(std::mt19937& rng, const std::vector<std::pair<int, int>>& tokens, int B,
                     const Options& o) {
  Problem p;
  p.T = static_cast<int>(tokens.size());
  p.H = o.heads;
  p.B = B;
  p.bs = o.block_size;
  p.qd = o.q_dtype;
  p.has_tr = o.token_request;
  std::vector<int> need(static_cast<std::size_t>(B), 1);
  for (const auto& [row, vis] : tokens)
    need[static_cast<std::size_t>(row)] = std::max(need[static_cast<std::size_t>(row)], (vis + p.bs - 1) / p.bs);
  p.max_blocks = *std::max_element(need.begin(), need.end()) + 1;
  p.num_blocks = std::accumulate(need.begin(), need.end(), 0) + 3;
  std::vector<int> perm(static_cast<std::size_t>(p.num_blocks));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);

  p.q = MirrorTensor(p.qd, {p.T, p.H, kIndexDim});
  p.qs = MirrorTensor(DType::f32, {p.T, p.H});
  p.w = MirrorTensor(DType::f32, {p.T, p.H});
  p.kc = MirrorTensor(DType::u8, {p.num_blocks, p.bs, kIndexBytesPerToken});
  p.bt = MirrorTensor(DType::i32, {B, p.max_blocks});
  p.tr = MirrorTensor(DType::i32, {p.T});
  p.vl = MirrorTensor(DType::i32, {p.T});

  std::normal_distribution<float> normal(0.0f, 1.0f);
  // Block table: used entries from the permutation, padding columns hold garbage.
  int next = 0;
  for (int r = 0; r < B; ++r)
    for (int c = 0; c < p.max_blocks; ++c)
      p.bt.host<int32_t>()[r * p.max_blocks + c] =
          c < need[static_cast<std::size_t>(r)] ? perm[static_cast<std::size_t>(next++)] : -77 - c;
  if (o.invalid_block && need[0] >= 2) p.bt.host<int32_t>()[1] = p.num_blocks + 5;
  // K pages.
  std::vector<std::vector<float>> pool;
  for (int i = 0; i < o.dup_pool; ++i) {
    std::vector<float> k(kIndexDim);
    for (float& x : k) x = normal(rng);
    pool.push_back(k);
  }
  std::uniform_int_distribution<int> pick(0, std::max(0, o.dup_pool - 1));
  for (int b = 0; b < p.num_blocks; ++b) {
    uint8_t* page = p.kc.host<uint8_t>() + static_cast<int64_t>(b) * p.bs * kIndexBytesPerToken;
    for (int off = 0; off < p.bs; ++off) {
      std::vector<float> k(kIndexDim);
      if (o.dup_pool > 0) {
        k = pool[static_cast<std::size_t>(pick(rng))];
      } else {
        const float mag = std::exp(0.5f * normal(rng));
        for (float& x : k) x = mag * normal(rng);
      }
      pack_indexer_k_token(k.data(), Fp8ScaleKind::amax, page, p.bs, off);
    }
  }
  // Queries, scales, weights.
  for (int t = 0; t < p.T; ++t) {
    for (int h = 0; h < p.H; ++h) {
      float row[kIndexDim];
      float amax = 0.0f;
      for (float& x : row) {
        x = normal(rng);
        amax = std::max(amax, std::fabs(x));
      }
      const int64_t base = (static_cast<int64_t>(t) * p.H + h) * kIndexDim;
      if (p.qd == DType::e4m3) {
        const float scale = fp8_group_scale(amax, Fp8ScaleKind::amax);
        p.qs.host<float>()[t * p.H + h] = scale;
        for (int d = 0; d < kIndexDim; ++d) p.q.host<uint8_t>()[base + d] = float_to_e4m3(row[d] / scale);
      } else {
        for (int d = 0; d < kIndexDim; ++d) p.q.host<uint16_t>()[base + d] = float_to_bf16(row[d]);
      }
      p.w.host<float>()[t * p.H + h] = normal(rng) / std::sqrt(static_cast<float>(p.H * kIndexDim));
    }
    p.tr.host<int32_t>()[t] = tokens[static_cast<std::size_t>(t)].first;
    p.vl.host<int32_t>()[t] = tokens[static_cast<std::size_t>(t)].second;
  }
  for (MirrorTensor* m : {&p.q, &p.qs, &p.w, &p.kc, &p.bt, &p.tr, &p.vl}) m->upload();
  return p;
}

// Decode: B requests with the given context lengths, nq new tokens each (causal).
inline std::vector<std::pair<int, int>> decode_tokens(const std::vector<int>& lens, int nq) {
  std::vector<std::pair<int, int>> t;
  for (int r = 0; r < static_cast<int>(lens.size()); ++r)
    for (int i = 0; i < nq; ++i) t.emplace_back(r, lens[static_cast<std::size_t>(r)] - nq + 1 + i);
  return t;
}

inline std::unique_ptr<Kernel> make_kernel(const char* id, Op op, const Problem& p, int topk, const DeviceInfo& dev) {
  AttentionSpec spec;
  spec.op = op;
  spec.num_heads = p.H;
  spec.head_dim = kIndexDim;
  spec.q_dtype = p.qd;
  spec.block_size = p.bs;
  spec.topk = topk;
  spec.max_tokens = p.T;
  return Registry::global().get(id)->make(spec, dev);
}

// Reference logits [T, max_len] (float, -inf where not visible).
inline std::vector<float> reference_logits(const Problem& p) {
  MirrorTensor lg(DType::f32, {p.T, p.max_len()});
  IndexerLogitsArgs a;
  a.in = p.inputs(false);
  a.logits = lg.host_view();
  make_kernel("cpu.reference", Op::indexer_logits, p, 0, DeviceInfo{})->run(a, RunContext{});
  return std::vector<float>(lg.host<float>(), lg.host<float>() + lg.numel());
}

// GPU logits close to the reference: -inf exactly where the reference has -inf.
inline void expect_logits_close(const Problem& p, const std::vector<float>& ref, const float* got, double tol,
                         const char* what) {
  const int64_t L = p.max_len();
  int bad = 0;
  for (int t = 0; t < p.T; ++t) {
    double scale = 1e-20;
    for (int64_t s = 0; s < L; ++s)
      if (std::isfinite(ref[t * L + s])) scale = std::max(scale, std::fabs(static_cast<double>(ref[t * L + s])));
    for (int64_t s = 0; s < L; ++s) {
      const float r = ref[t * L + s], g = got[t * L + s];
      const bool ok = std::isinf(r) ? (std::isinf(g) && g < 0) : (std::fabs(static_cast<double>(g) - r) <= tol * scale);
      if (!ok && bad++ < 5) ADD_FAILURE() << what << ": logits[" << t << ", " << s << "] = " << g << ", reference " << r;
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

// GPU top-k (logical positions) against reference scores: right count, distinct, visible,
// ascending, -1 padded; the chosen scores are the topk best up to `tol` (relative to the row's
// largest magnitude) at the boundary. Returns the number of rows checked.
inline void expect_topk_valid(const Problem& p, const std::vector<float>& ref, const int32_t* got, int topk, double tol,
                       const char* what) {
  const int64_t L = p.max_len();
  for (int t = 0; t < p.T; ++t) {
    std::vector<std::pair<float, int64_t>> valid;
    double scale = 1e-20;
    for (int64_t s = 0; s < L; ++s) {
      const float r = ref[t * L + s];
      if (std::isfinite(r)) {
        valid.emplace_back(r, s);
        scale = std::max(scale, std::fabs(static_cast<double>(r)));
      }
    }
    const int count = std::min<int>(topk, static_cast<int>(valid.size()));
    const int32_t* row = got + static_cast<int64_t>(t) * topk;
    std::set<int64_t> chosen;
    for (int i = 0; i < topk; ++i) {
      if (i < count) {
        ASSERT_GE(row[i], 0) << what << " row " << t << " col " << i;
        ASSERT_LT(row[i], L) << what << " row " << t;
        ASSERT_TRUE(std::isfinite(ref[t * L + row[i]])) << what << " row " << t << " picks invisible " << row[i];
        if (i > 0) ASSERT_LT(row[i - 1], row[i]) << what << " row " << t << ": not ascending / duplicate";
        chosen.insert(row[i]);
      } else {
        ASSERT_EQ(row[i], -1) << what << " row " << t << " col " << i << " (expected -1 padding)";
      }
    }
    if (static_cast<int>(valid.size()) > topk) {
      std::vector<float> scores;
      for (auto& v : valid) scores.push_back(v.first);
      std::nth_element(scores.begin(), scores.begin() + (topk - 1), scores.end(), std::greater<>());
      const double tau = scores[static_cast<std::size_t>(topk - 1)];
      const double eps = tol * scale;
      for (const auto& [r, s] : valid) {
        if (chosen.count(s)) EXPECT_GE(r, tau - eps) << what << " row " << t << " pos " << s;
        else EXPECT_LE(r, tau + eps) << what << " row " << t << " pos " << s;
      }
    }
  }
}

// The exact top-k of `logits` ([T, max_len], -inf where not visible): each row's topk largest
// finite entries, ties to the smaller position, as ascending positions, -1 padded. What a
// backend's top-k must return, bit for bit, over its own logits.
inline std::vector<int32_t> exact_topk_of(const Problem& p, const std::vector<float>& logits, int topk) {
  const int64_t L = p.max_len();
  std::vector<int32_t> out(static_cast<std::size_t>(p.T) * topk, -1);
  for (int t = 0; t < p.T; ++t) {
    std::vector<std::pair<float, int32_t>> row;
    for (int64_t s = 0; s < L; ++s)
      if (std::isfinite(logits[t * L + s])) row.emplace_back(logits[t * L + s], static_cast<int32_t>(s));
    const auto n = std::min<std::size_t>(static_cast<std::size_t>(topk), row.size());
    std::partial_sort(row.begin(), row.begin() + static_cast<std::ptrdiff_t>(n), row.end(),
                      [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
    std::vector<int32_t> pos;
    for (std::size_t i = 0; i < n; ++i) pos.push_back(row[i].second);
    std::sort(pos.begin(), pos.end());
    std::copy(pos.begin(), pos.end(), out.begin() + static_cast<std::ptrdiff_t>(t) * topk);
  }
  return out;
}

}  // namespace latte::testing
