// logical_to_slots: slot = block_table[row, p / block_size] * block_size + p % block_size.
// -1 stays -1; a position past the block table, a negative block id or a slot that does not
// fit in int32 gives -1 (check mode, src/ops/check_mode.cpp, reports it instead).
#include <algorithm>
#include <limits>
#include <vector>

#include "kernels/cpu_reference/reference_ops.hpp"
#include "kernels/cpu_reference/host_tensor_access.hpp"

namespace latte::cpu_reference {
namespace {

constexpr int64_t kMaxSlot = std::numeric_limits<int32_t>::max();

int64_t row_of(const LogicalToSlotsArgs& a, int64_t t) {
  return a.token_request.defined() ? read_i32(a.token_request, {t}) : t;
}

}  // namespace

void compute(const LogicalToSlotsProblem& p) {
  const LogicalToSlotsArgs& a = *p.args;
  const LogicalToSlotsShape& s = p;
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
