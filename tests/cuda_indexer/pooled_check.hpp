// The pooled indexer (GLM-5.3-Flash) through a CUDA indexer backend, checked against float64:
// a pooled call is the per-token problem over pool rows (a Problem whose block size is the pool
// rows per block and whose visible lengths are floor(v / kpool)) plus the expansion, so the kept
// pools are checked like a per-token top-k against the reference pool scores, and the
// expansion, tail, -1 padding and out_lens exactly.
#pragma once

#include <algorithm>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "cuda_indexer/indexer_test_problem.hpp"
#include "gpu_test_util.hpp"

namespace latte::testing {

struct PooledCase {
  int kpool = 4, pool_rows = 16, heads = 32, pool_topk = 512, width = 2176;
  bool select_tail = true;
  std::vector<std::pair<int, int>> tokens;  // (block_table row, visible tokens)
};

// Runs backend `id` on the case (logical and physical, indexer_topk and indexer_logits).
inline void check_pooled_backend(const char* id, const PooledCase& c, std::mt19937& rng, double tol) {
  const int kp = c.kpool, bs = kp * c.pool_rows;
  std::vector<std::pair<int, int>> sizing;  // blocks for every visible token, tail included
  int B = 1;
  for (const auto& [row, v] : c.tokens) {
    sizing.emplace_back(row, (v + kp - 1) / kp);
    B = std::max(B, row + 1);
  }
  Options o;
  o.heads = c.heads;
  o.block_size = c.pool_rows;
  Problem p = make_problem(rng, sizing, B, o);
  // The reference pool scores: the pool problem's visible lengths are the complete pools.
  for (int t = 0; t < p.T; ++t) p.vl.host<int32_t>()[t] = c.tokens[static_cast<std::size_t>(t)].second / kp;
  p.vl.upload();
  const std::vector<float> ref = reference_logits(p);
  for (int t = 0; t < p.T; ++t) p.vl.host<int32_t>()[t] = c.tokens[static_cast<std::size_t>(t)].second;
  p.vl.upload();
  const DeviceInfo dev = describe_device("cuda:0");
  AttentionSpec spec;
  spec.op = Op::indexer_topk;
  spec.num_heads = p.H;
  spec.head_dim = kIndexDim;
  spec.q_dtype = p.qd;
  spec.block_size = bs;
  spec.kpool = kp;
  spec.topk = c.width;
  spec.max_tokens = p.T;
  IndexerInputs in = p.inputs(true);
  in.kpool = kp;
  auto token_slot = [&](int t, int64_t pos) {
    const int32_t b = p.bt.host<int32_t>()[static_cast<int64_t>(p.row_of(t)) * p.max_blocks + pos / bs];
    return (b >= 0 && b < p.num_blocks) ? static_cast<int32_t>(static_cast<int64_t>(b) * bs + pos % bs) : -1;
  };
  for (const IndexKind kind : {IndexKind::logical, IndexKind::physical}) {
    SCOPED_TRACE(std::string(id) + (kind == IndexKind::logical ? " logical" : " physical"));
    MirrorTensor idx(DType::i32, {p.T, c.width}), lens(DType::i32, {p.T});
    idx.poison_device(0x5A);
    lens.poison_device(0x5A);
    IndexerTopkArgs a;
    a.in = in;
    a.indices = idx.dev_view();
    a.kind = kind;
    a.pool_topk = c.pool_topk;
    a.select_tail = c.select_tail;
    a.out_lens = lens.dev_view();
    auto k = Registry::global().get(id)->make(spec, dev);
    DeviceBuffer ws(std::max<std::size_t>(k->workspace_bytes(), 16));
    RunContext ctx;
    ctx.workspace = ws.get();
    ctx.workspace_bytes = k->workspace_bytes();
    k->run(a, ctx);
    LATTE_CUDA_CHECK(cudaDeviceSynchronize());
    idx.download();
    lens.download();
    std::vector<int32_t> pools(static_cast<std::size_t>(p.T) * c.pool_topk, -1);
    for (int t = 0; t < p.T; ++t) {
      const int32_t* row = idx.host<int32_t>() + static_cast<int64_t>(t) * c.width;
      const int v = c.tokens[static_cast<std::size_t>(t)].second;
      std::vector<int32_t> tail;
      if (c.select_tail)
        for (int64_t pos = v / kp * kp; pos < v; ++pos)
          if (token_slot(t, pos) >= 0) tail.push_back(kind == IndexKind::logical ? static_cast<int32_t>(pos) : token_slot(t, pos));
      const int n = lens.host<int32_t>()[t];
      const int expanded = n - static_cast<int>(tail.size());
      ASSERT_TRUE(expanded >= 0 && expanded % kp == 0 && expanded <= kp * c.pool_topk) << "out_lens row " << t << ": " << n;
      const int kept = expanded / kp;
      for (int i = 0; i < kept; ++i) {
        // Logical positions come back as pool * kpool + j; physical ones through the block table.
        int32_t pool = -1;
        for (int j = 0; j < kp; ++j) {
          const int32_t x = row[i * kp + j];
          if (kind == IndexKind::logical) {
            if (j == 0) pool = x / kp;
            ASSERT_EQ(x, pool * kp + j) << "row " << t << " pool entry " << i;
          } else {
            if (j == 0) {
              for (int64_t q = 0; q < v / kp && pool < 0; ++q)
                if (token_slot(t, q * kp) == x) pool = static_cast<int32_t>(q);
              ASSERT_GE(pool, 0) << "row " << t << ": slot " << x << " starts no visible pool";
            }
            ASSERT_EQ(x, token_slot(t, static_cast<int64_t>(pool) * kp + j)) << "row " << t << " pool entry " << i;
          }
        }
        pools[static_cast<std::size_t>(t) * c.pool_topk + i] = pool;
      }
      for (std::size_t i = 0; i < tail.size(); ++i) ASSERT_EQ(row[kept * kp + static_cast<int>(i)], tail[i]) << "tail row " << t;
      for (int i = n; i < c.width; ++i) ASSERT_EQ(row[i], -1) << "padding row " << t << " col " << i;
    }
    expect_topk_valid(p, ref, pools.data(), c.pool_topk, tol, "kept pools");
  }
  // indexer_logits over pools: columns past the visible pools -inf.
  spec.op = Op::indexer_logits;
  spec.topk = 0;
  MirrorTensor lg(DType::f32, {p.T, p.max_len()});
  lg.poison_device(0x7F);
  IndexerLogitsArgs l;
  l.in = in;
  l.logits = lg.dev_view();
  auto k = Registry::global().get(id)->make(spec, dev);
  DeviceBuffer ws(std::max<std::size_t>(k->workspace_bytes(), 16));
  RunContext ctx;
  ctx.workspace = ws.get();
  ctx.workspace_bytes = k->workspace_bytes();
  k->run(l, ctx);
  LATTE_CUDA_CHECK(cudaDeviceSynchronize());
  lg.download();
  expect_logits_close(p, ref, lg.host<float>(), tol, "pooled logits");
}

// GLM-5.3-Flash's decode and odd geometry: contexts not multiples of kpool, fewer than kpool
// tokens (tail only), up to 2051 tokens (everything), past it, several requests.
inline std::vector<PooledCase> pooled_cases() {
  std::vector<PooledCase> cs;
  PooledCase glm;
  glm.tokens = {{0, 0}, {1, 1}, {2, 3}, {3, 4}, {4, 2047}, {5, 2051}, {6, 2052}, {7, 9001}, {8, 32771}};
  cs.push_back(glm);
  PooledCase odd;
  odd.kpool = 2;
  odd.pool_rows = 8;
  odd.heads = 7;
  odd.pool_topk = 100;
  odd.width = 203;
  odd.tokens = {{0, 777}, {1, 5}, {0, 776}};
  cs.push_back(odd);
  PooledCase no_tail;
  no_tail.kpool = 16;
  no_tail.pool_rows = 4;
  no_tail.heads = 64;
  no_tail.pool_topk = 64;
  no_tail.width = 1024;
  no_tail.select_tail = false;
  no_tail.tokens = {{0, 4000}, {1, 15}};
  cs.push_back(no_tail);
  PooledCase prefill;  // one request, causal tokens (MTP-like chunk)
  prefill.heads = 32;
  for (int i = 0; i < 40; ++i) prefill.tokens.emplace_back(0, 3000 + i);
  cs.push_back(prefill);
  return cs;
}

}  // namespace latte::testing
