// The typed problem of each op: the caller's arguments with the sizes, cache format and device
// that the one validation (make_problem) found in them. Kernels compute problems, never raw
// arguments, so no backend validates a call again or infers a format of its own.
#pragma once

#include <cstdint>
#include <variant>

#include "latte/ops.hpp"

namespace latte {

struct SparseMlaShape {
  int64_t tokens = 0, heads = 0, topk = 0, num_blocks = 0, block_size = 0;
  CacheFormat format = CacheFormat::bf16;
  // kRopeDim or kNoRopeDim (the call's rope_dim): q and cache rows hold 512 + rope_dim values.
  // A row without rope is read from its first 528 bytes (fp8) whatever the row stride.
  int rope_dim = kRopeDim;
  [[nodiscard]] int64_t num_slots() const { return num_blocks * block_size; }
  [[nodiscard]] int qk_dim() const { return kLatentDim + rope_dim; }
};

struct MlaDecodeShape {
  int64_t batch = 0, s_q = 0, heads = 0, max_blocks = 0, num_blocks = 0, block_size = 0;
  CacheFormat format = CacheFormat::bf16;
};

struct IndexerShape {
  int64_t tokens = 0, heads = 0, batch = 0, max_blocks = 0, num_blocks = 0, block_size = 0;
  DType q_dtype = DType::e4m3;
  int64_t topk = 0;        // indexer_topk: columns of indices
  int64_t logits_len = 0;  // indexer_logits: columns of logits
  // Pooled (kpool > 0): block_size counts tokens (kpool * pool_rows); k_cache holds pool_rows
  // pool rows per block. Per-token: kpool 0 and pool_rows == block_size.
  int64_t kpool = 0, pool_rows = 0;
  int64_t pool_topk = 0;     // indexer_topk, pooled: pools kept per query
  bool select_tail = false;  // indexer_topk, pooled: + the incomplete pool's tokens
  [[nodiscard]] int64_t max_len() const { return max_blocks * block_size; }
  [[nodiscard]] bool pooled() const { return kpool > 0; }
};

struct PoolStoreShape {
  int64_t tokens = 0, batch = 0, max_blocks = 0, num_blocks = 0;
  int64_t kpool = 0, pool_rows = 0;  // k_cache: pool_rows rows of kpool tokens per block
  [[nodiscard]] int64_t block_size() const { return kpool * pool_rows; }  // tokens per block
  [[nodiscard]] int64_t max_len() const { return max_blocks * block_size(); }
};

struct KvStoreShape {
  int64_t tokens = 0, num_blocks = 0, block_size = 0;
  CacheFormat format = CacheFormat::bf16;
  int rope_dim = kRopeDim;  // kv_store: the rows written hold 512 + rope_dim values
};

struct LogicalToSlotsShape {
  int64_t tokens = 0, width = 0, batch = 0, max_blocks = 0;
};

// A validated call: its shape, the arguments it was found in (not owned: they must outlive the
// problem, as a call's arguments do) and the one device every tensor is on.
template <class Args, class Shape>
struct ProblemOf : Shape {
  const Args* args = nullptr;
  Device device{};
};

using SparseMlaProblem = ProblemOf<SparseMlaArgs, SparseMlaShape>;
using MlaDecodeProblem = ProblemOf<MlaDecodeArgs, MlaDecodeShape>;
using IndexerTopkProblem = ProblemOf<IndexerTopkArgs, IndexerShape>;
using IndexerLogitsProblem = ProblemOf<IndexerLogitsArgs, IndexerShape>;
using KvStoreProblem = ProblemOf<KvStoreArgs, KvStoreShape>;
using IndexerKStoreProblem = ProblemOf<IndexerKStoreArgs, KvStoreShape>;
using LogicalToSlotsProblem = ProblemOf<LogicalToSlotsArgs, LogicalToSlotsShape>;
using IndexerPoolStoreProblem = ProblemOf<IndexerPoolStoreArgs, PoolStoreShape>;

// Alternatives in the order of OpArgs.
using Problem = std::variant<SparseMlaProblem, MlaDecodeProblem, IndexerTopkProblem,
                             IndexerLogitsProblem, KvStoreProblem, IndexerKStoreProblem,
                             LogicalToSlotsProblem, IndexerPoolStoreProblem>;

// The one validation of a call: shapes, dtypes, strides, cache format, value ranges of the
// scalars, outputs apart from inputs, every tensor on one device. Throws
// latte::Error(invalid_argument) naming the argument, the value it got, what it wanted and what
// to do. `args` must outlive the problem.
[[nodiscard]] Problem make_problem(const OpArgs& args);
// A temporary OpArgs (one made from a SparseMlaArgs, say) would leave the problem pointing at
// freed arguments: pass an OpArgs that lives on, or call validate() on the op's arguments.
Problem make_problem(const OpArgs&& args) = delete;
// The same for one op's arguments.
[[nodiscard]] SparseMlaProblem validate(const SparseMlaArgs& args);
[[nodiscard]] MlaDecodeProblem validate(const MlaDecodeArgs& args);
[[nodiscard]] IndexerTopkProblem validate(const IndexerTopkArgs& args);  // also topk rules
[[nodiscard]] IndexerLogitsProblem validate(const IndexerLogitsArgs& args);
[[nodiscard]] KvStoreProblem validate(const KvStoreArgs& args);
[[nodiscard]] IndexerKStoreProblem validate(const IndexerKStoreArgs& args);
[[nodiscard]] LogicalToSlotsProblem validate(const LogicalToSlotsArgs& args);
[[nodiscard]] IndexerPoolStoreProblem validate(const IndexerPoolStoreArgs& args);

[[nodiscard]] Op op_of(const Problem& problem);
[[nodiscard]] Device device_of(const Problem& problem);
// The cache format of the ops that have one (sparse_mla, mla_decode, kv_store), else nullopt.
[[nodiscard]] const CacheFormat* cache_format_of(const Problem& problem);

namespace detail {
// How many validations this process has run (every make_problem / validate): tests check that
// a call validates exactly once.
[[nodiscard]] uint64_t validation_count();
}  // namespace detail

}  // namespace latte
