// The DSA lightning indexer in float64 (docs/design.md, section 4):
//   I[t, p] = sum_j w[t, j] * ReLU(qI[t, j] . kI[p])   for visible positions p < visible_lens[t]
// indexer_logits writes I (or -inf); indexer_topk picks the topk largest, ties to the smaller
// position, and pads with -1. Pooled (kpool > 0): the candidates are the complete visible pools,
// scored with their pool key; the chosen pools expand to their tokens, then the tail is appended
// (docs/operations.md, "The pooled indexer").
#include <algorithm>
#include <utility>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu_reference/reference_ops.hpp"
#include "kernels/cpu_reference/host_tensor_access.hpp"

namespace latte::cpu_reference {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// A visible position of one token and its score.
struct Scored {
  int64_t position = 0;
  int64_t slot = 0;
  double score = 0.0;
};

// The queries of token t dequantized: q[j][d] (e4m3 * q_scale, or bf16), and the weights.
void read_queries(const IndexerInputs& in, const IndexerShape& s, int64_t t,
                  std::vector<std::array<double, kIndexDim>>& q, std::vector<double>& w) {
  q.resize(static_cast<std::size_t>(s.heads));
  w.resize(static_cast<std::size_t>(s.heads));
  for (int64_t j = 0; j < s.heads; ++j) {
    auto& qj = q[static_cast<std::size_t>(j)];
    if (s.q_dtype == DType::e4m3) {
      const uint8_t* codes = at<const uint8_t>(in.q, {t, j});
      const double scale = *at<const float>(in.q_scale, {t, j});
      for (int d = 0; d < kIndexDim; ++d) qj[d] = static_cast<double>(e4m3_to_float(codes[d])) * scale;
    } else {
      read_bf16_row(at<const uint16_t>(in.q, {t, j}), kIndexDim, qj.data());
    }
    w[static_cast<std::size_t>(j)] = *at<const float>(in.weights, {t, j});
  }
}

// The score of one key row against token t's queries.
double score_of(const std::vector<std::array<double, kIndexDim>>& q, const std::vector<double>& w,
                const std::array<double, kIndexDim>& k) {
  double score = 0.0;
  for (std::size_t j = 0; j < q.size(); ++j) {
    double dot = 0.0;
    for (int d = 0; d < kIndexDim; ++d) dot += q[j][d] * k[d];
    score += w[j] * std::max(dot, 0.0);
  }
  return score;
}

// The request row of token t and its visible length, or row -1 when the token sees nothing.
std::pair<int64_t, int64_t> row_and_visible(const IndexerInputs& in, const IndexerShape& s, int64_t t) {
  const int64_t row = in.token_request.defined() ? read_i32(in.token_request, {t}) : t;
  if (row < 0 || row >= s.batch) return {-1, 0};
  return {row, std::clamp<int64_t>(read_i32(in.visible_lens, {t}), 0, s.max_len())};
}

// The block holding logical position p of a request row, or -1 when it is missing.
int64_t block_of(const IndexerInputs& in, const IndexerShape& s, int64_t row, int64_t p) {
  const int64_t block = read_i32(in.block_table, {row, p / s.block_size});
  return block >= 0 && block < s.num_blocks ? block : -1;
}

// Every candidate of token t that lies in a cache block, with its score, in order: visible
// positions (per-token indexer), or complete visible pools (pooled: `position` is the pool index
// and `slot` its first token's slot). Out-of-range request rows, lengths and block ids follow the
// "-1" rule: they make candidates invisible, never an out-of-bounds read.
std::vector<Scored> score_token(const IndexerInputs& in, const IndexerShape& s, int64_t t) {
  std::vector<Scored> scored;
  const auto [row, visible] = row_and_visible(in, s, t);
  if (row < 0) return scored;
  std::vector<std::array<double, kIndexDim>> q;
  std::vector<double> w;
  read_queries(in, s, t, q, w);
  std::array<double, kIndexDim> k{};
  const int64_t per = s.pooled() ? s.kpool : 1;  // tokens per candidate
  for (int64_t c = 0; c < visible / per; ++c) {
    const int64_t first = c * per;
    const int64_t block = block_of(in, s, row, first);
    if (block < 0) continue;
    const int64_t slot = block * s.block_size + first % s.block_size;
    // A pool's key is row (first mod bs) / kpool of its block's page of pool_rows rows.
    read_indexer_token(in.k_cache, s.pool_rows, block * s.pool_rows + (first % s.block_size) / per, k);
    scored.push_back({c, slot, score_of(q, w, k)});
  }
  return scored;
}

// Ranking order: higher score first, ties to the smaller position; NaN ranks last.
bool ranks_before(const Scored& a, const Scored& b) {
  const bool a_nan = std::isnan(a.score);
  const bool b_nan = std::isnan(b.score);
  if (a_nan != b_nan) return b_nan;
  if (!a_nan && a.score != b.score) return a.score > b.score;
  return a.position < b.position;
}

// Pooled top-k of token t: the chosen pools' tokens (pools by rank, each pool's tokens in
// position order), then the tail tokens kpool * floor(visible / kpool) .. visible - 1 when
// select_tail (those in a cache block). Returns the entries written; the rest of the row is -1.
int64_t pooled_row(const IndexerTopkArgs& a, const IndexerShape& s, int64_t t, std::vector<Scored>& pools,
                   int32_t* out) {
  const auto chosen = static_cast<std::size_t>(std::min<int64_t>(s.pool_topk, static_cast<int64_t>(pools.size())));
  std::partial_sort(pools.begin(), pools.begin() + static_cast<std::ptrdiff_t>(chosen), pools.end(), ranks_before);
  const bool logical = a.kind == IndexKind::logical;
  int64_t n = 0;
  for (std::size_t i = 0; i < chosen; ++i) {
    for (int64_t o = 0; o < s.kpool; ++o) {
      out[n++] = static_cast<int32_t>(logical ? pools[i].position * s.kpool + o : pools[i].slot + o);
    }
  }
  const auto [row, visible] = row_and_visible(a.in, s, t);
  if (s.select_tail && row >= 0) {
    for (int64_t p = visible / s.kpool * s.kpool; p < visible; ++p) {
      const int64_t block = block_of(a.in, s, row, p);
      if (block >= 0) out[n++] = static_cast<int32_t>(logical ? p : block * s.block_size + p % s.block_size);
    }
  }
  return n;
}

}  // namespace

void compute(const IndexerLogitsProblem& p) {
  const IndexerLogitsArgs& a = *p.args;
  const IndexerShape& s = p;
  for (int64_t t = 0; t < s.tokens; ++t) {
    float* row = at<float>(a.logits, {t});
    std::fill(row, row + s.logits_len, static_cast<float>(kNegInf));
    for (const Scored& e : score_token(a.in, s, t)) {
      if (e.position < s.logits_len) row[e.position] = static_cast<float>(e.score);
    }
  }
}

void compute(const IndexerTopkProblem& p) {
  const IndexerTopkArgs& a = *p.args;
  const IndexerShape& s = p;
  for (int64_t t = 0; t < s.tokens; ++t) {
    std::vector<Scored> scored = score_token(a.in, s, t);
    // Column stride is 1 whenever topk > 1 (validated), so the row is contiguous.
    int32_t* out = at<int32_t>(a.indices, {t});
    int64_t n = 0;
    if (s.pooled()) {
      n = pooled_row(a, s, t, scored, out);
    } else {
      const auto chosen = static_cast<std::size_t>(std::min<int64_t>(s.topk, static_cast<int64_t>(scored.size())));
      std::partial_sort(scored.begin(), scored.begin() + static_cast<std::ptrdiff_t>(chosen), scored.end(),
                        ranks_before);
      for (std::size_t i = 0; i < chosen; ++i) {
        out[n++] = static_cast<int32_t>(a.kind == IndexKind::logical ? scored[i].position : scored[i].slot);
      }
    }
    std::fill(out + n, out + s.topk, -1);
    if (a.out_lens.defined()) *at<int32_t>(a.out_lens, {t}) = static_cast<int32_t>(n);
  }
}

}  // namespace latte::cpu_reference
