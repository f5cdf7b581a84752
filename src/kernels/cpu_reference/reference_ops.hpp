// The cpu.reference computations, one per op, on validated problems over host tensors. Index
// values out of range are treated as -1 (check mode, run before, reports them instead). The
// semantics are those of docs/operations.md.
#pragma once

#include "latte/problem.hpp"

namespace latte::cpu_reference {

void compute(const SparseMlaProblem& problem);
void compute(const MlaDecodeProblem& problem);
void compute(const IndexerTopkProblem& problem);
void compute(const IndexerLogitsProblem& problem);
void compute(const KvStoreProblem& problem);
void compute(const IndexerKStoreProblem& problem);
void compute(const LogicalToSlotsProblem& problem);
void compute(const IndexerPoolStoreProblem& problem);

}  // namespace latte::cpu_reference
