// sparse_mla and mla_decode in float64 (docs/design.md, sections 2 and 3):
//   score_s = scale * q . c_s,  lse = ln sum_s exp(score_s),  out = sum_s exp(score_s - lse) c_s[0:512]
// over the token set of each query; an empty set gives out = 0 and lse = -inf.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu_reference/reference_ops.hpp"
#include "kernels/cpu_reference/host_tensor_access.hpp"

namespace latte::cpu_reference {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// One query head against `count` decoded cache tokens: q_latent's 512 dims, then q_rope's 64
// (q_rope = q_latent + 512 for a [.., 576] query; null without rope: the score is the dot of
// the 512 latent dims alone).
void attend(const uint16_t* q_latent, const uint16_t* q_rope, const std::vector<CacheToken>& keys,
            std::size_t count, double scale, uint16_t* out_row, float* lse) {
  std::array<double, kQkDim> q{};
  read_bf16_row(q_latent, kLatentDim, q.data());
  if (q_rope) read_bf16_row(q_rope, kRopeDim, q.data() + kLatentDim);
  const int qk_dim = q_rope ? kQkDim : kLatentDim;
  std::array<double, kLatentDim> out{};
  if (count == 0) {
    write_bf16_row(out.data(), kLatentDim, out_row);
    if (lse) *lse = static_cast<float>(kNegInf);
    return;
  }
  std::vector<double> scores(count);
  double max_score = kNegInf;
  for (std::size_t k = 0; k < count; ++k) {
    double dot = 0.0;
    for (int d = 0; d < qk_dim; ++d) dot += q[d] * keys[k][d];
    scores[k] = scale * dot;
    max_score = std::max(max_score, scores[k]);
  }
  // Subtracting the max keeps exp() finite; it does not change the result.
  double sum = 0.0;
  for (double s : scores) sum += std::exp(s - max_score);
  const double log_sum = max_score + std::log(sum);
  for (std::size_t k = 0; k < count; ++k) {
    const double p = std::exp(scores[k] - log_sum);
    for (int d = 0; d < kLatentDim; ++d) out[d] += p * keys[k][d];
  }
  write_bf16_row(out.data(), kLatentDim, out_row);
  if (lse) *lse = static_cast<float>(log_sum);
}

// Block id of logical position `pos` of block_table row `row`, or -1 when the entry is not a
// block of the cache (the out-of-range rule: treated as "no token").
int64_t block_of(const TensorView& block_table, int64_t row, int64_t pos, int64_t block_size,
                 int64_t num_blocks) {
  const int64_t block = read_i32(block_table, {row, pos / block_size});
  return block >= 0 && block < num_blocks ? block : -1;
}

}  // namespace

void compute(const SparseMlaProblem& p) {
  const SparseMlaArgs& a = *p.args;
  const SparseMlaShape& s = p;
  const bool rope = s.rope_dim == kRopeDim;
  std::vector<CacheToken> keys;
  for (int64_t t = 0; t < s.tokens; ++t) {
    // Row t uses its first topk_lens[t] columns (clamped to 0..topk); the rest are ignored.
    const int64_t used = a.topk_lens.defined() ? std::clamp<int64_t>(read_i32(a.topk_lens, {t}), 0, s.topk) : s.topk;
    // Every valid entry counts, in column order; a repeated slot counts as often as it appears.
    keys.clear();
    for (int64_t k = 0; k < used; ++k) {
      const int32_t slot = read_i32(a.indices, {t, k});
      if (slot < 0 || slot >= s.num_slots()) continue;  // -1 and out-of-range: no token
      read_mla_token(a.kv_cache, s.format, s.rope_dim, s.block_size, slot, keys.emplace_back());
    }
    for (int64_t h = 0; h < s.heads; ++h) {
      const uint16_t* const q = at<const uint16_t>(a.q, {t, h});
      const uint16_t* const q_rope = !rope                  ? nullptr
                                     : a.q_rope.defined() ? at<const uint16_t>(a.q_rope, {t, h})
                                                          : q + kLatentDim;
      attend(q, q_rope, keys, keys.size(), a.scale, at<uint16_t>(a.out, {t, h}),
             a.lse.defined() ? at<float>(a.lse, {t, h}) : nullptr);
    }
  }
}

void compute(const MlaDecodeProblem& p) {
  const MlaDecodeArgs& a = *p.args;
  const MlaDecodeShape& s = p;
  const int64_t capacity = s.max_blocks * s.block_size;  // positions block_table can hold
  std::vector<CacheToken> keys;
  for (int64_t b = 0; b < s.batch; ++b) {
    const int64_t seq_len = read_i32(a.seq_lens, {b});
    // Query i sees positions 0 .. seq_len - s_q + i; positions past the block table or in a
    // block that is not in the cache hold no token.
    const int64_t last_len = std::clamp<int64_t>(seq_len, 0, capacity);
    keys.clear();
    std::vector<int64_t> positions;
    for (int64_t p = 0; p < last_len; ++p) {
      const int64_t block = block_of(a.block_table, b, p, s.block_size, s.num_blocks);
      if (block < 0) continue;
      positions.push_back(p);
      read_mla_token(a.kv_cache, s.format, kRopeDim, s.block_size, block * s.block_size + p % s.block_size,
                     keys.emplace_back());
    }
    for (int64_t i = 0; i < s.s_q; ++i) {
      const int64_t visible = seq_len - s.s_q + i + 1;  // positions < visible
      const auto count = static_cast<std::size_t>(
          std::lower_bound(positions.begin(), positions.end(), visible) - positions.begin());
      for (int64_t h = 0; h < s.heads; ++h) {
        const uint16_t* const q = at<const uint16_t>(a.q, {b, i, h});
        attend(q, q + kLatentDim, keys, count, a.scale,
               at<uint16_t>(a.out, {b, i, h}),
               a.lse.defined() ? at<float>(a.lse, {b, i, h}) : nullptr);
      }
    }
  }
}

}  // namespace latte::cpu_reference
