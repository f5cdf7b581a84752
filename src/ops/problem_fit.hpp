// Internal: what the call pipeline derives from a validated problem.
#pragma once

#include "latte/device.hpp"
#include "latte/problem.hpp"
#include "latte/spec.hpp"

namespace latte::detail {

// The spec selection sees for a problem (kernels are made per token capacity, a power of two).
[[nodiscard]] AttentionSpec spec_of(const Problem& problem);

// Throws invalid_argument, naming both values, when `problem` does not fit a kernel made for
// (`spec`, `device`): op, device kind, cache format, query dtype, heads, head_dim (rows with or
// without rope), topk at most the spec's (0 in the spec: any heads, any topk), topk_lens only
// for a kernel made for them.
void check_fits(const Problem& problem, const AttentionSpec& spec, Device device);

}  // namespace latte::detail
