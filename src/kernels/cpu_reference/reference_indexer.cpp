// The DSA lightning indexer in float64 (docs/design.md, section 4):
//   I[t, p] = sum_j w[t, j] * ReLU(qI[t, j] . kI[p])   for visible positions p < visible_lens[t]
// indexer_logits writes I (or -inf); indexer_topk picks the topk largest, ties to the smaller
// position, and pads with -1.
#include <algorithm>
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

// Every visible position of token t that lies in a cache block, with its score, in position
// order. Out-of-range request rows, lengths and block ids follow the "-1" rule: they make
// positions invisible, never an out-of-bounds read.
std::vector<Scored> score_token(const IndexerInputs& in, const IndexerShape& s, int64_t t) {
  std::vector<Scored> scored;
  const int64_t row = in.token_request.defined() ? read_i32(in.token_request, {t}) : t;
  if (row < 0 || row >= s.batch) return scored;
  const int64_t visible = std::clamp<int64_t>(read_i32(in.visible_lens, {t}), 0, s.max_len());
  std::vector<std::array<double, kIndexDim>> q;
  std::vector<double> w;
  read_queries(in, s, t, q, w);
  std::array<double, kIndexDim> k{};
  for (int64_t p = 0; p < visible; ++p) {
    const int64_t block = read_i32(in.block_table, {row, p / s.block_size});
    if (block < 0 || block >= s.num_blocks) continue;
    const int64_t slot = block * s.block_size + p % s.block_size;
    read_indexer_token(in.k_cache, s.block_size, slot, k);
    double score = 0.0;
    for (int64_t j = 0; j < s.heads; ++j) {
      const auto& qj = q[static_cast<std::size_t>(j)];
      double dot = 0.0;
      for (int d = 0; d < kIndexDim; ++d) dot += qj[d] * k[d];
      score += w[static_cast<std::size_t>(j)] * std::max(dot, 0.0);
    }
    scored.push_back({p, slot, score});
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
    const auto chosen = static_cast<std::size_t>(std::min<int64_t>(s.topk, static_cast<int64_t>(scored.size())));
    std::partial_sort(scored.begin(), scored.begin() + static_cast<std::ptrdiff_t>(chosen),
                      scored.end(), ranks_before);
    int32_t* out = at<int32_t>(a.indices, {t});
    // Column stride is 1 whenever topk > 1 (validated), so the row is contiguous.
    for (int64_t k = 0; k < s.topk; ++k) {
      const auto i = static_cast<std::size_t>(k);
      out[k] = i < chosen ? static_cast<int32_t>(a.kind == IndexKind::logical ? scored[i].position
                                                                              : scored[i].slot)
                          : -1;
    }
  }
}

}  // namespace latte::cpu_reference
