// Checks beside the one validation (latte/problem.hpp's make_problem): topk given as a number,
// the two-step logical sparse_mla, the one-device rule, and check mode's index ranges. Each
// throws latte::Error(invalid_argument) naming the argument, the value, what it wanted and the fix.
#pragma once

#include <cstdint>
#include <string_view>

#include "latte/ops.hpp"
#include "latte/problem.hpp"

namespace latte {

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

// Every tensor of the call on one device; throws naming the odd one out.
Device common_device(const OpArgs& args);

// Index range checks for check mode, on host-readable int32 data. Each throws naming the
// first bad entry: row, column, value and the allowed range. `what` names the op and the
// argument ("sparse_mla: indices").
// Slots: -1 (none) or 0 .. num_slots-1. With `row_lens` (sparse_mla's topk_lens, already
// checked to be 0..cols), only the first row_lens[r] entries of row r are checked: the rest are
// ignored by the op, whatever they hold.
void check_slot_indices(const int32_t* indices, int64_t rows, int64_t cols, int64_t row_stride,
                        int64_t num_slots, const char* what, const int32_t* row_lens = nullptr,
                        int64_t row_lens_stride = 1);
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
