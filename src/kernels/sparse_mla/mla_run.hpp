// cuda.sparse_mla's host side between latte's validated problems and the launchers
// (mla_run.cpp); mla_params.hpp stays plain C++17 for the .cu files.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/sparse_mla/mla_params.hpp"
#include "latte/problem.hpp"
#include "latte/spec.hpp"

namespace latte::cuda_sparse_mla {

// A validated problem's raw parameters.
MlaParams mla_params(const SparseMlaProblem& problem);
MlaParams mla_params(const MlaDecodeProblem& problem);
// The parameters of a call of a kernel's size (a decode request spanning kWorkspaceContext),
// for describe().
MlaParams nominal_params(const AttentionSpec& spec, int64_t max_groups);
// Plans and launches a call: refuses what the kernels do not take (heads, rows, groups), and a
// split call without a workspace (`kernel_workspace`: what the kernel asked for, for the message).
void run_mla(const MlaParams& p, const PlanDevice& device, const Tuning& tuning, int64_t max_groups,
             void* workspace, std::size_t workspace_bytes, std::size_t kernel_workspace, void* stream);

}  // namespace latte::cuda_sparse_mla
