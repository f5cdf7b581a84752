// hopper.mla's kernels (sm_90a): the launch plan and the launcher. The parameter block is
// cuda.sparse_mla's MlaParams (the same validated problems fill it); host side.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/sparse_mla/mla_params.hpp"

namespace latte::hopper_mla {

using cuda_sparse_mla::MlaParams;

// (query, head) rows per CTA: the wgmma m dimension. A group's s_q x heads rows take
// row_groups_sm90a(rows) CTAs; the last one's rows past the group's are zero queries, computed and
// never written.
inline constexpr int kHeadsPerCta = 64;
// KV rows per pipeline stage (the split chunk is a multiple of it).
inline constexpr int kTileRows = 32;
// Dense decode: the context the split count is modelled at (a request's length is not known when
// the kernel is made), the smallest split (it bounds the workspace a long request needs), and
// the chunk of a kernel that never splits.
inline constexpr int kDecodeModelContext = 4096;
inline constexpr int kDecodeMinChunk = 512;
inline constexpr int kWholeList = 1 << 30;

// How a call is cut: each (group, 64-row group) runs `nsplit` CTAs of `chunk` list entries; with
// nsplit > 1 their normalized partials meet in the workspace and a combine kernel writes out /
// lse. Fixed per kernel (by the kernel's max_tokens, never by a call's size): a row's arithmetic
// never depends on how many groups share its call. Decode: the chunk is fixed and a call takes
// as many splits as its block table spans (call_nsplit_sm90a); `nsplit` is the count at
// kDecodeModelContext positions (for describe()); splits past a request's length exit at once.
struct Sm90aPlan {
  int chunk = 0;
  int nsplit = 1;
  bool decode = false;
  // The few-heads kernel's heads per CTA (8 or 16: wgmma's n); 0: the 64-row kernel.
  int head_tile = 0;
};

// The few-heads kernel (heads on wgmma's N dimension, stages of kFewHeadsStageRows entries) runs
// sparse MLA over the fp8_ds_mla cache: every kernel of at most kFewHeadsMax heads, and kernels of
// more heads whose calls are small, in tiles of kFewHeadsMax heads (each tile's CTA copies and
// widens the token's rows itself): at most kFewHeadsTiledCtas tiles x tokens. Beyond that the
// 64-row kernel (which stages the rows once per 64 heads) runs them.
inline constexpr int kFewHeadsMax = 16;
inline constexpr int kFewHeadsStageRows = 64;
inline constexpr int64_t kFewHeadsTiledCtas = 16;
// The few-heads kernel's heads per CTA for a kernel of `heads` heads and at most `max_groups`
// tokens (0: not known), or 0 when the 64-row kernel runs it.
[[nodiscard]] int fewheads_tile_sm90a(CacheFormat format, bool decode, int heads, int64_t max_groups);
// CTAs per group and split under `plan`: 64-row groups, or the few-heads kernel's head tiles.
[[nodiscard]] int ctas_per_group_sm90a(const Sm90aPlan& plan, int rows);

// CTAs per group of `rows` (query, head) rows.
[[nodiscard]] int row_groups_sm90a(int rows);
// Sparse: the plan of a kernel made for calls of at most `max_groups` tokens (0: not known: no
// split) of `heads` rows and `topk` columns over a `format` cache on `sm_count` SMs: which kernel
// (head_tile) and the split (the chunk a multiple of that kernel's stage).
[[nodiscard]] Sm90aPlan plan_sm90a(CacheFormat format, int64_t max_groups, int heads, int topk, int sm_count);
// Dense decode: the plan of a kernel made for calls of at most `max_groups` requests of `rows`
// (= s_q x heads) rows each: never split when the requests' CTAs fill the SMs (or their count is
// not known), else splits of at least kDecodeMinChunk positions.
[[nodiscard]] Sm90aPlan plan_decode_sm90a(int64_t max_groups, int rows, int sm_count);
// The splits a call takes under `plan`.
[[nodiscard]] int call_nsplit_sm90a(const Sm90aPlan& plan, const MlaParams& p);
// Workspace of a kernel made for `groups` groups of `rows` rows under `plan` (0 when it never
// splits). Decode: sized for a request spanning kWorkspaceContext positions, capped at 256 MiB
// but at least one such request's partials; a call whose groups' partials do not fit runs in
// several launches.
[[nodiscard]] std::size_t workspace_bytes_sm90a(const Sm90aPlan& plan, int64_t groups, int rows);
// The kernel's shared memory per CTA for a cache format (fp8_ds_mla or bf16).
[[nodiscard]] std::size_t smem_bytes_sm90a(CacheFormat format);
// Whether the kernels load the query (and a separate q_rope) 16 bytes at a time: 16-byte aligned
// pointers and strides a multiple of 8 elements on every dim of more than one entry (a dim of
// extent 1 is never stepped: its stride is free). Else element-wise loads: correct, slower.
[[nodiscard]] bool q_vector_loads_sm90a(const MlaParams& p);
// One line for Kernel::describe().
[[nodiscard]] std::string describe_sm90a(const Sm90aPlan& plan, CacheFormat format, int64_t max_groups, int rows,
                                         int sm_count);

// Sparse MLA (p.decode false) or dense MLA decode over the fp8_ds_mla or bf16 cache (p.format),
// with rope, any heads. `workspace` (`workspace_bytes` bytes) holds the split partials of one
// group at least. Throws latte::Error on a launch failure, a workspace too small for one group
// or a cache layout the kernel does not read (rows not 16-byte aligned). No host synchronization.
void launch_sm90a(const MlaParams& p, const Sm90aPlan& plan, void* workspace, std::size_t workspace_bytes,
                  cudaStream_t stream);

}  // namespace latte::hopper_mla
