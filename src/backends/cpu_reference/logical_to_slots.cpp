// logical_to_slots: slot = block_table[row, p / block_size] * block_size + p % block_size.
// -1 stays -1; a position past the block table, a negative block id or a slot that does not
// fit in int32 gives -1 (check mode reports it instead).
#include <algorithm>
#include <limits>
#include <vector>

#include "reference_ops.hpp"
#include "tensor_access.hpp"

namespace latte::cpu_reference {
namespace {

constexpr int64_t kMaxSlot = std::numeric_limits<int32_t>::max();

int64_t row_of(const LogicalToSlotsArgs& a, int64_t t) {
  return a.token_request.defined() ? read_i32(a.token_request, {t}) : t;
}

void check_mode(const LogicalToSlotsArgs& a, const LogicalToSlotsShape& s) {
  const int64_t bs = a.block_size;
  if (a.token_request.defined()) {
    check_values_in_range(a.token_request.ptr<const int32_t>(), s.tokens,
                          a.token_request.stride(0), 0, s.batch - 1,
                          "logical_to_slots: token_request", "rows of block_table");
  }
  const int64_t capacity = s.max_blocks * bs;
  std::vector<int64_t> used(static_cast<std::size_t>(s.batch), 0);
  check_slot_indices(a.positions.ptr<const int32_t>(), s.tokens, s.width, a.positions.stride(0),
                     capacity, "logical_to_slots: positions");
  // The blocks up to each row's highest position must be valid.
  for (int64_t t = 0; t < s.tokens; ++t) {
    const int32_t* row = at<const int32_t>(a.positions, {t});
    const int64_t highest = s.width > 0 ? *std::max_element(row, row + s.width) : -1;
    auto& u = used[static_cast<std::size_t>(row_of(a, t))];
    u = std::max(u, highest < 0 ? 0 : highest / bs + 1);
  }
  // No cache here to bound block ids, so the bound is the int32 slot range.
  check_block_table_prefix(a.block_table.ptr<const int32_t>(), s.batch, a.block_table.stride(0),
                           used.data(), (kMaxSlot + 1) / bs, "logical_to_slots: block_table");
}

}  // namespace

void logical_to_slots(const LogicalToSlotsArgs& a, const LogicalToSlotsShape& s, bool check) {
  if (check) check_mode(a, s);
  const int64_t bs = a.block_size;
  const int64_t capacity = s.max_blocks * bs;
  for (int64_t t = 0; t < s.tokens; ++t) {
    const int64_t row = row_of(a, t);
    for (int64_t k = 0; k < s.width; ++k) {
      const int64_t p = read_i32(a.positions, {t, k});
      int64_t slot = -1;
      if (row >= 0 && row < s.batch && p >= 0 && p < capacity) {
        const int64_t block = read_i32(a.block_table, {row, p / bs});
        const int64_t candidate = block * bs + p % bs;
        if (block >= 0 && candidate <= kMaxSlot) slot = candidate;
      }
      *at<int32_t>(a.slots, {t, k}) = static_cast<int32_t>(slot);
    }
  }
}

}  // namespace latte::cpu_reference
