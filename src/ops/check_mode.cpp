#include "ops/check_mode.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "latte/validate.hpp"

#ifdef LATTE_WITH_CUDA
#include "kernels/common/cuda_check.cuh"
#endif

namespace latte::detail {
namespace {

// An int32 vector [n] or matrix [rows, cols] (columns contiguous: validation requires it) readable
// on the host: host tensors in place, CUDA tensors as a dense copy.
class HostInts {
 public:
  HostInts(const TensorView& t, void* stream) {
    if (!t.defined()) return;
    rows_ = t.rank >= 1 ? t.size(0) : 0;
    const int64_t cols = t.rank >= 2 ? t.size(1) : 1;
    if (t.device.kind == DeviceKind::cpu) {
      data_ = t.ptr<const int32_t>();
      stride_ = t.stride(0);
      return;
    }
    copy_.resize(static_cast<std::size_t>(rows_ * cols));
    data_ = copy_.data();
    stride_ = t.rank >= 2 ? cols : 1;
#ifdef LATTE_WITH_CUDA
    if (rows_ > 0 && cols > 0) {
      const auto s = static_cast<cudaStream_t>(stream);
      const std::size_t row_bytes = static_cast<std::size_t>(cols) * sizeof(int32_t);
      if (t.stride(0) >= cols) {
        LATTE_CUDA_TRY(cudaMemcpy2DAsync(copy_.data(), row_bytes, t.data,
                                         static_cast<std::size_t>(t.stride(0)) * sizeof(int32_t),
                                         row_bytes, static_cast<std::size_t>(rows_),
                                         cudaMemcpyDeviceToHost, s));
      } else {  // rows that overlap (a broadcast input, stride 0): one copy per row
        for (int64_t r = 0; r < rows_; ++r)
          LATTE_CUDA_TRY(cudaMemcpyAsync(copy_.data() + r * cols, t.ptr<const int32_t>() + r * t.stride(0),
                                         row_bytes, cudaMemcpyDeviceToHost, s));
      }
      LATTE_CUDA_TRY(cudaStreamSynchronize(s));
    }
#else
    (void)stream;
#endif
  }
  [[nodiscard]] bool present() const { return data_ != nullptr; }
  [[nodiscard]] const int32_t* data() const { return data_; }
  [[nodiscard]] int64_t stride() const { return stride_; }  // between rows (or elements of a vector)
  [[nodiscard]] int32_t at(int64_t r, int64_t c = 0) const { return data_[r * stride_ + c]; }

 private:
  std::vector<int32_t> copy_;
  const int32_t* data_ = nullptr;
  int64_t rows_ = 0;
  int64_t stride_ = 1;
};

// Blocks of each block_table row that `len(t)` positions of token t (of row `row(t)`) cover.
template <class RowOf, class LenOf>
std::vector<int64_t> used_blocks(int64_t rows, int64_t tokens, int64_t block_size, RowOf row,
                                 LenOf len) {
  std::vector<int64_t> used(static_cast<std::size_t>(rows), 0);
  for (int64_t t = 0; t < tokens; ++t) {
    auto& u = used[static_cast<std::size_t>(row(t))];
    u = std::max<int64_t>(u, (len(t) + block_size - 1) / block_size);
  }
  return used;
}

void check(const SparseMlaProblem& p, void* stream) {
  const HostInts lens(p.args->topk_lens, stream);
  if (lens.present()) {
    check_values_in_range(lens.data(), p.tokens, lens.stride(), 0, p.topk, "sparse_mla: topk_lens",
                          "the columns of indices each row uses");
  }
  const HostInts idx(p.args->indices, stream);
  check_slot_indices(idx.data(), p.tokens, p.topk, idx.stride(), p.num_slots(), "sparse_mla: indices",
                     lens.data(), lens.stride());
}

void check(const MlaDecodeProblem& p, void* stream) {
  const MlaDecodeArgs& a = *p.args;
  const HostInts lens(a.seq_lens, stream);
  check_values_in_range(lens.data(), p.batch, lens.stride(), p.s_q, p.max_blocks * p.block_size,
                        "mla_decode: seq_lens",
                        "each request holds at least its s_q new tokens and at most "
                        "max_blocks * block_size positions of block_table");
  const HostInts table(a.block_table, stream);
  const auto used = used_blocks(p.batch, p.batch, p.block_size, [](int64_t b) { return b; },
                                [&](int64_t b) { return lens.at(b); });
  check_block_table_prefix(table.data(), p.batch, table.stride(), used.data(), p.num_blocks,
                           "mla_decode: block_table");
}

void check_indexer(const IndexerInputs& in, const IndexerShape& s, const std::string& op, void* stream) {
  const HostInts rows(in.token_request, stream);
  if (rows.present()) {
    check_values_in_range(rows.data(), s.tokens, rows.stride(), 0, s.batch - 1,
                          (op + ": token_request").c_str(), "rows of block_table");
  }
  const HostInts lens(in.visible_lens, stream);
  check_values_in_range(lens.data(), s.tokens, lens.stride(), 0, s.max_len(),
                        (op + ": visible_lens").c_str(),
                        "max_blocks * block_size positions of block_table");
  const HostInts table(in.block_table, stream);
  const auto used = used_blocks(
      s.batch, s.tokens, s.block_size, [&](int64_t t) { return rows.present() ? rows.at(t) : t; },
      [&](int64_t t) { return lens.at(t); });
  check_block_table_prefix(table.data(), s.batch, table.stride(), used.data(), s.num_blocks,
                           (op + ": block_table").c_str());
}

void check(const IndexerTopkProblem& p, void* stream) { check_indexer(p.args->in, p, "indexer_topk", stream); }
void check(const IndexerLogitsProblem& p, void* stream) { check_indexer(p.args->in, p, "indexer_logits", stream); }

void check_slot_mapping(const TensorView& slot_mapping, const KvStoreShape& s, const char* what,
                        void* stream) {
  const HostInts slots(slot_mapping, stream);
  check_values_in_range(slots.data(), s.tokens, slots.stride(), -1, s.num_blocks * s.block_size - 1,
                        what, "-1 (skip) or a slot of the cache");
}

void check(const KvStoreProblem& p, void* stream) {
  check_slot_mapping(p.args->slot_mapping, p, "kv_store: slot_mapping", stream);
}
void check(const IndexerKStoreProblem& p, void* stream) {
  check_slot_mapping(p.args->slot_mapping, p, "indexer_k_store: slot_mapping", stream);
}

void check(const LogicalToSlotsProblem& p, void* stream) {
  const LogicalToSlotsArgs& a = *p.args;
  const int64_t bs = a.block_size;
  const HostInts rows(a.token_request, stream);
  if (rows.present()) {
    check_values_in_range(rows.data(), p.tokens, rows.stride(), 0, p.batch - 1,
                          "logical_to_slots: token_request", "rows of block_table");
  }
  const HostInts pos(a.positions, stream);
  check_slot_indices(pos.data(), p.tokens, p.width, pos.stride(), p.max_blocks * bs,
                     "logical_to_slots: positions");
  // The blocks up to each row's highest position must be valid.
  const auto used = used_blocks(
      p.batch, p.tokens, bs, [&](int64_t t) { return rows.present() ? rows.at(t) : t; },
      [&](int64_t t) {
        const int32_t* r = pos.data() + t * pos.stride();
        const int64_t highest = p.width > 0 ? *std::max_element(r, r + p.width) : -1;
        return highest + 1;
      });
  // No cache here to bound block ids, so the bound is the int32 slot range.
  const int64_t max_slot = std::numeric_limits<int32_t>::max();
  const HostInts table(a.block_table, stream);
  check_block_table_prefix(table.data(), p.batch, table.stride(), used.data(), (max_slot + 1) / bs,
                           "logical_to_slots: block_table");
}

// Positions -1 (skip) or within the block table, token_request rows of it, and the blocks each
// request's highest position uses valid block ids. (Positions below -1 are refused like any
// out-of-range index: without check mode every negative position skips its token.)
void check(const IndexerPoolStoreProblem& p, void* stream) {
  const IndexerPoolStoreArgs& a = *p.args;
  const HostInts rows(a.token_request, stream);
  if (rows.present()) {
    check_values_in_range(rows.data(), p.tokens, rows.stride(), 0, p.batch - 1,
                          "indexer_pool_store: token_request", "rows of block_table and pool_state");
  }
  const HostInts pos(a.positions, stream);
  check_values_in_range(pos.data(), p.tokens, pos.stride(), -1, p.max_len() - 1, "indexer_pool_store: positions",
                        "-1 (skip) or a position of the block table (max_blocks * block_size)");
  const HostInts table(a.block_table, stream);
  const auto used = used_blocks(
      p.batch, p.tokens, p.block_size(), [&](int64_t t) { return rows.present() ? rows.at(t) : t; },
      [&](int64_t t) { return int64_t{pos.at(t)} + 1; });
  check_block_table_prefix(table.data(), p.batch, table.stride(), used.data(), p.num_blocks,
                           "indexer_pool_store: block_table");
}

}  // namespace

void check_index_values(const Problem& problem, void* stream) {
  std::visit([&](const auto& p) { check(p, stream); }, problem);
}

}  // namespace latte::detail
