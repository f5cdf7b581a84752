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
// A kernel's (query, head) rows per group: heads (sparse_mla, a group is a token) or s_q x heads
// (mla_decode, a group is a request).
int rows_per_group(const AttentionSpec& spec);
// The groups of a kernel's largest call: spec.max_tokens tokens, or requests (max_tokens / s_q);
// 0 when the spec does not say (a kernel for any call size).
int64_t max_groups_of(const AttentionSpec& spec);
// The parameters of a call of a kernel's size (a decode request spanning kWorkspaceContext),
// for describe().
MlaParams nominal_params(const AttentionSpec& spec, int64_t max_groups);
// Plans and launches a call: refuses what the kernels do not take (heads, rows, groups), and a
// split call without a workspace (`kernel_workspace`: what the kernel asked for, for the message).
void run_mla(const MlaParams& p, const PlanDevice& device, const Tuning& tuning, int64_t max_groups,
             void* workspace, std::size_t workspace_bytes, std::size_t kernel_workspace, void* stream);

}  // namespace latte::cuda_sparse_mla
