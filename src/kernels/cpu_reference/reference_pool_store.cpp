// indexer_pool_store in float64 (docs/operations.md, "indexer_pool_store"): the pooled indexer's
// keys. Written from the order-free rule of the docs rather than as a token loop with a running
// state, so that it says what a parallel kernel must compute:
//   - a token is live when its position is >= 0, its request row and block exist;
//   - a live token of slot kpool - 1 completes its pool from the call's last live token at each
//     earlier position of the pool, or from pool_state as it was before the call;
//   - pool_state[r, j] ends holding the call's last live token of request r at a slot-j position
//     (unchanged when the call has none).
#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <utility>
#include <vector>

#include "kernels/cpu_reference/host_tensor_access.hpp"
#include "kernels/cpu_reference/reference_ops.hpp"

namespace latte::cpu_reference {
namespace {

using Row = std::array<double, kIndexDim>;

// A 128-value row of a bf16 or f32 tensor, as doubles (exact).
void read_row(const TensorView& t, std::initializer_list<int64_t> index, Row& out) {
  if (t.dtype == DType::bf16) {
    read_bf16_row(at<const uint16_t>(t, index), kIndexDim, out.data());
    return;
  }
  const float* row = at<const float>(t, index);
  for (int d = 0; d < kIndexDim; ++d) out[static_cast<std::size_t>(d)] = row[d];
}

double to_bf16_value(double x) { return bf16_to_float(float_to_bf16(static_cast<float>(x))); }

// y = H x / sqrt(128), H the Sylvester Hadamard matrix (H[i][j] = (-1)^popcount(i & j)).
Row hadamard(const Row& x) {
  Row y{};
  const double norm = 1.0 / std::sqrt(static_cast<double>(kIndexDim));
  for (int i = 0; i < kIndexDim; ++i) {
    double sum = 0.0;
    for (int j = 0; j < kIndexDim; ++j) {
      const bool odd = (__builtin_popcount(static_cast<unsigned>(i & j)) & 1) != 0;
      sum += odd ? -x[static_cast<std::size_t>(j)] : x[static_cast<std::size_t>(j)];
    }
    y[static_cast<std::size_t>(i)] = sum * norm;
  }
  return y;
}

// The (k, gate) of one slot of a pool.
struct SlotInput {
  Row k{}, gate{};
};

}  // namespace

void compute(const IndexerPoolStoreProblem& p) {
  const IndexerPoolStoreArgs& a = *p.args;
  const int64_t kpool = p.kpool;
  const int64_t bs = p.block_size();

  // Live tokens: (request row, position, block), or row -1 for a skipped token.
  struct Live {
    int64_t row = -1, pos = 0, block = 0;
  };
  std::vector<Live> live(static_cast<std::size_t>(p.tokens));
  std::map<std::pair<int64_t, int64_t>, int64_t> last_at;  // (row, position) -> the call's last token there
  for (int64_t t = 0; t < p.tokens; ++t) {
    const int64_t row = a.token_request.defined() ? read_i32(a.token_request, {t}) : t;
    const int64_t pos = read_i32(a.positions, {t});
    if (row < 0 || row >= p.batch || pos < 0 || pos >= p.max_len()) continue;
    const int64_t block = read_i32(a.block_table, {row, pos / bs});
    if (block < 0 || block >= p.num_blocks) continue;
    live[static_cast<std::size_t>(t)] = {row, pos, block};
    last_at[{row, pos}] = t;
  }

  std::array<Row, kMaxKpool> ape{};
  for (int64_t s = 0; s < kpool; ++s) read_row(a.ape, {s}, ape[static_cast<std::size_t>(s)]);
  const auto token_input = [&](int64_t t) {
    SlotInput in;
    read_row(a.k, {t}, in.k);
    read_row(a.gate, {t}, in.gate);
    return in;
  };
  const auto state_input = [&](int64_t row, int64_t j) {
    SlotInput in;
    read_row(a.pool_state, {row, j, 0}, in.k);
    read_row(a.pool_state, {row, j, 1}, in.gate);
    return in;
  };

  // 1. Completed pools, from the call's tokens and the state before the call. A position the call
  //    holds twice: its last token counts, and of two tokens completing one pool the later lands.
  std::array<SlotInput, kMaxKpool> slots{};
  for (int64_t t = 0; t < p.tokens; ++t) {
    const Live& l = live[static_cast<std::size_t>(t)];
    if (l.row < 0 || l.pos % kpool != kpool - 1) continue;
    const int64_t first = l.pos - (kpool - 1);
    for (int64_t s = 0; s < kpool - 1; ++s) {
      const auto found = last_at.find({l.row, first + s});
      slots[static_cast<std::size_t>(s)] =
          found != last_at.end() ? token_input(found->second) : state_input(l.row, s);
    }
    slots[static_cast<std::size_t>(kpool - 1)] = token_input(t);

    std::array<float, kIndexDim> key{};
    Row pooled{};
    for (int d = 0; d < kIndexDim; ++d) {
      const auto ud = static_cast<std::size_t>(d);
      double top = -INFINITY;
      for (int64_t s = 0; s < kpool; ++s) {
        top = std::max(top, slots[static_cast<std::size_t>(s)].gate[ud] + ape[static_cast<std::size_t>(s)][ud]);
      }
      double num = 0.0, den = 0.0;
      for (int64_t s = 0; s < kpool; ++s) {
        const auto us = static_cast<std::size_t>(s);
        const double e = std::exp(slots[us].gate[ud] + ape[us][ud] - top);
        num += e * slots[us].k[ud];
        den += e;
      }
      pooled[ud] = to_bf16_value(num / den);
    }
    if (a.hadamard) {
      pooled = hadamard(pooled);
      for (double& v : pooled) v = to_bf16_value(v);
    }
    for (int d = 0; d < kIndexDim; ++d) key[static_cast<std::size_t>(d)] = static_cast<float>(pooled[static_cast<std::size_t>(d)]);
    pack_indexer_k_token(key.data(), a.scale_kind, page_bytes(a.k_cache, l.block), static_cast<int>(p.pool_rows),
                         static_cast<int>((l.pos % bs) / kpool));
  }

  // 2. The state: each (request, slot j < kpool - 1) takes the call's last live token there.
  std::map<std::pair<int64_t, int64_t>, int64_t> last_in_slot;
  for (int64_t t = 0; t < p.tokens; ++t) {
    const Live& l = live[static_cast<std::size_t>(t)];
    if (l.row >= 0 && l.pos % kpool != kpool - 1) last_in_slot[{l.row, l.pos % kpool}] = t;
  }
  for (const auto& [where, t] : last_in_slot) {
    const SlotInput in = token_input(t);
    float* k = at<float>(a.pool_state, {where.first, where.second, 0});
    float* gate = at<float>(a.pool_state, {where.first, where.second, 1});
    for (int d = 0; d < kIndexDim; ++d) {
      k[d] = static_cast<float>(in.k[static_cast<std::size_t>(d)]);
      gate[d] = static_cast<float>(in.gate[static_cast<std::size_t>(d)]);
    }
  }
}

}  // namespace latte::cpu_reference
