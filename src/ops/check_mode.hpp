// Check mode (RunContext::check_indices): every index value of a problem against its range, for
// every backend alike, before the kernel runs. Reads CUDA tensors through a host copy on the
// call's stream (a synchronization: check mode only).
#pragma once

#include "latte/problem.hpp"

namespace latte::detail {

void check_index_values(const Problem& problem, void* stream);

}  // namespace latte::detail
