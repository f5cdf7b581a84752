// hopper.mla's kernels (sm_90a): the launch plan and the launcher. The parameter block is
// cuda.sparse_mla's MlaParams (the same validated problem fills it); host side.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/sparse_mla/mla_params.hpp"

namespace latte::hopper_mla {

using cuda_sparse_mla::MlaParams;

// Heads per CTA: the wgmma m dimension. hopper.mla serves head counts that are multiples of it.
inline constexpr int kHeadsPerCta = 64;
// KV rows per pipeline stage (the split chunk is a multiple of it).
inline constexpr int kTileRows = 32;

// How a call is cut: each (token, 64-head group) runs `nsplit` CTAs of `chunk` list entries;
// with nsplit > 1 their normalized partials meet in the workspace and a combine kernel writes
// out / lse. Fixed per kernel (by the kernel's max_tokens, never by a call's size): a row's
// arithmetic never depends on how many tokens share its call.
struct Sm90aPlan {
  int chunk = 0;
  int nsplit = 1;
};

// The plan of a kernel made for calls of at most `max_groups` tokens (0: not known: no split)
// of `heads` heads and `topk` columns on `sm_count` SMs.
[[nodiscard]] Sm90aPlan plan_sm90a(int64_t max_groups, int heads, int topk, int sm_count);
// Workspace of `groups` tokens under `plan` (0 when unsplit).
[[nodiscard]] std::size_t workspace_bytes_sm90a(const Sm90aPlan& plan, int64_t groups, int heads);
// The kernel's shared memory per CTA for a cache format (fp8_ds_mla or bf16).
[[nodiscard]] std::size_t smem_bytes_sm90a(CacheFormat format);
// One line for Kernel::describe().
[[nodiscard]] std::string describe_sm90a(const Sm90aPlan& plan, CacheFormat format, int64_t max_groups, int heads,
                                         int sm_count);

// Sparse MLA over the fp8_ds_mla or bf16 cache (p.format) with rope, heads a multiple of
// kHeadsPerCta. `workspace` holds workspace_bytes_sm90a(plan, p.groups, p.heads) bytes. Throws
// latte::Error on a launch failure or a cache layout the kernel does not read (rows not 16-byte
// aligned). No host synchronization.
void launch_sparse_sm90a(const MlaParams& p, const Sm90aPlan& plan, void* workspace, cudaStream_t stream);

}  // namespace latte::hopper_mla
