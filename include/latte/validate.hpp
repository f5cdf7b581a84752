// One validation layer for every backend: shapes, dtypes, strides, formats and ranges.
// Each function throws latte::Error(invalid_argument) naming the argument, the value it got,
// what it wanted and what to do; on success it returns the problem's sizes.
#pragma once

#include <cstdint>
#include <string_view>

#include "latte/ops.hpp"

namespace latte {

struct SparseMlaShape {
  int64_t tokens = 0, heads = 0, topk = 0, num_blocks = 0, block_size = 0;
  CacheFormat format = CacheFormat::bf16;
  [[nodiscard]] int64_t num_slots() const { return num_blocks * block_size; }
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
  [[nodiscard]] int64_t max_len() const { return max_blocks * block_size; }
};

struct KvStoreShape {
  int64_t tokens = 0, num_blocks = 0, block_size = 0;
  CacheFormat format = CacheFormat::bf16;
};

struct LogicalToSlotsShape {
  int64_t tokens = 0, width = 0, batch = 0, max_blocks = 0;
};

[[nodiscard]] SparseMlaShape validate(const SparseMlaArgs& args);
[[nodiscard]] MlaDecodeShape validate(const MlaDecodeArgs& args);
[[nodiscard]] IndexerShape validate(const IndexerTopkArgs& args);   // also topk rules
[[nodiscard]] IndexerShape validate(const IndexerLogitsArgs& args);
[[nodiscard]] KvStoreShape validate(const KvStoreArgs& args);
[[nodiscard]] KvStoreShape validate(const IndexerKStoreArgs& args);
[[nodiscard]] LogicalToSlotsShape validate(const LogicalToSlotsArgs& args);

// topk given as a number that sizes an output (1..kMaxTopk, as the columns of indices),
// checked before the output is allocated. `as_written`: the caller's text of a value that does
// not fit int64 (shown instead of `topk`), else empty.
void check_topk(std::string_view op, int64_t topk, std::string_view as_written = {});

// sparse_mla over logical positions, one call made of two: `slots` (logical_to_slots: positions,
// block_table, token_request -> slots) then `attention` (reading slots as its indices). Refuses
// an output of either step (slots, out, lse) that shares memory with any tensor of the pair;
// each step's own validate() still runs when it is called. Names the arguments as the caller
// gave them (the positions are `indices`).
void check_logical_sparse_mla(const LogicalToSlotsArgs& slots, const SparseMlaArgs& attention);

// Any of the above, by the op the variant holds.
void validate_any(const OpArgs& args);

// Every tensor of the call on one device; throws naming the odd one out.
Device common_device(const OpArgs& args);

// Index range checks for check mode, on host-readable int32 data. Each throws naming the
// first bad entry: row, column, value and the allowed range. `what` names the op and the
// argument ("sparse_mla: indices").
// Slots: -1 (none) or 0 .. num_slots-1.
void check_slot_indices(const int32_t* indices, int64_t rows, int64_t cols, int64_t row_stride,
                        int64_t num_slots, const char* what);
// Block ids: 0 .. num_blocks-1, every entry of the rows x cols table.
void check_block_table(const int32_t* table, int64_t rows, int64_t cols, int64_t row_stride,
                       int64_t num_blocks, const char* what);
// Block ids of the blocks a call uses: only the first used_blocks[r] entries of row r are
// checked (entries past a request's length are padding and may hold anything).
void check_block_table_prefix(const int32_t* table, int64_t rows, int64_t row_stride,
                              const int64_t* used_blocks, int64_t num_blocks, const char* what);
// A vector of int32 values (lengths, request rows, slot_mapping): each in lo..hi. `meaning`
// says where the range comes from ("block_table holds 4 blocks of 64 positions").
void check_values_in_range(const int32_t* values, int64_t count, int64_t stride, int64_t lo,
                           int64_t hi, const char* what, const char* meaning);

}  // namespace latte
