// Raw-pointer interface of the cuda.sparse_mla kernels: one parameter block for sparse MLA and
// dense paged MLA decode, the launch plan (row tiles, splits, slabs) and the launchers.
// The Backend (backend.cpp) validates latte::TensorView arguments and fills these; tests and
// the benchmark may call the launchers directly.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "latte/dtype.hpp"

namespace latte::cuda_sparse_mla {

// One call. A "group" is a query token (sparse) or a request (decode); its "rows" are the
// (query i, head h) pairs that share the group's KV token list: row = i * heads + h.
struct MlaParams {
  // q: [groups, s_q, heads, 576] bf16 in elements: group, query, head strides; last dim contiguous.
  // Without rope ([groups, heads, 512]) the 512 latent dims only.
  const __nv_bfloat16* q = nullptr;
  int64_t q_sg = 0, q_si = 0, q_sh = 0;
  // The query's 64 rope dims: q + 512 with q's strides, or a tensor of its own (sparse_mla's
  // q_rope, [groups, heads, 64]: group and head strides, the query stride unused). Unused (null)
  // without rope.
  const __nv_bfloat16* q_rope = nullptr;
  int64_t qr_sg = 0, qr_si = 0, qr_sh = 0;
  // false: MLA without rope (sparse_mla's rope_dim 0, sparse only): the score is q.c over the 512
  // latent dims, and a cache row holds no rope (bf16: 1024 bytes; fp8_ds_mla: 512 e4m3 + 4 f32
  // scales, the first 528 bytes of a 528- or 656-byte row, the only ones read). The kernels
  // take it as a template parameter (no rope loads or rope mma.sync).
  bool rope = true;
  // cache: [num_blocks, block_size, 576 bf16 | 656 u8] (without rope: 512 bf16 | 528 or 656 u8);
  // byte strides of block and token.
  const uint8_t* kv = nullptr;
  int64_t kv_sblock = 0, kv_stok = 0;
  int64_t num_blocks = 0;
  int block_size = 1;
  CacheFormat format = CacheFormat::bf16;
  // sparse: indices [groups, topk] i32 physical slots (-1 / out of range = none).
  const int32_t* indices = nullptr;
  int64_t idx_s = 0;
  int topk = 0;
  // sparse, optional: topk_lens [groups] i32 (element stride tl_s); group g reads indices[g, 0 :
  // clamp(topk_lens[g], 0, topk)] only (sparse_list_len). The plan still covers topk columns
  // (it never reads device memory); splits past a group's length exit at once and the combine
  // takes only the group's own splits.
  const int32_t* topk_lens = nullptr;
  int64_t tl_s = 1;
  // decode: block_table [groups, max_blocks] i32, seq_lens [groups] i32.
  bool decode = false;
  const int32_t* block_table = nullptr;
  int64_t bt_s = 0;
  int max_blocks = 0;
  const int32_t* seq_lens = nullptr;
  int64_t sl_s = 1;
  int s_q = 1;
  int heads = 1;
  // out: [groups, s_q, heads, 512] bf16; lse: optional [groups, s_q, heads] f32 (natural log).
  __nv_bfloat16* out = nullptr;
  int64_t o_sg = 0, o_si = 0, o_sh = 0;
  float* lse = nullptr;
  int64_t l_sg = 0, l_si = 0, l_sh = 0;
  float scale = 0.f;
  int groups = 0;  // T (sparse) or B (decode)
};

// How one call is cut into launches. Depends on the problem only through the per-group work
// (topk, or each request's own length), heads and the format, never on the number of groups,
// except for the row tile, which does not change any row's arithmetic.
struct MlaPlan {
  int rows = 0;         // s_q * heads
  int row_tile = 32;    // 16 or 32 rows per CTA
  int row_tiles = 0;
  int chunk = 0;        // KV tokens per split (a multiple of the tile size)
  int nsplit = 1;       // splits per group (decode: the most any request can need)
  int64_t slab = 0;     // groups per launch (bounded by the workspace)
  std::size_t part_bytes_per_group = 0;
  int warps = 0;        // warps per CTA (0: the format's default, 8 fp8 / 4 bf16); never
                        // changes a result bit
  int ctas_per_sm = 2;  // 3: the 16-row tile's 3-CTA configuration (2 stages); never changes
                        // a result bit
  int dim_split = 1;    // 2: two CTAs per (group, row tile, split), each writing 256 output
                        // dims (16-row tiles at 2 CTAs per SM); never changes a result bit
  bool few_heads = false;  // the few-heads kernel (fp8 sparse, at most 16 heads on the mma's N
                           // dimension, row_tiles 1); chosen by format and heads only
  bool row_groups = false;  // the row-group kernel (bf16, 64-row tiles, warp pairs own 16-row
                            // groups); chosen by format, rows and the kernel's size only
  int chunks_per_cta = 1;   // row groups: consecutive splits one CTA runs, each partial written
                            // and combined as if by its own CTA; follows the call's size, never
                            // changes a result bit

  // CTAs per (group, row tile) of one dim part: the splits, chunks_per_cta to a CTA.
  [[nodiscard]] int split_ctas() const { return (nsplit + chunks_per_cta - 1) / chunks_per_cta; }
};

// The tuning variables LATTE_CUDA_SPARSE_MLA_* (docs/kernels/knobs.md: values, defaults, why),
// read when a Kernel is made; 0 = not set: the default rule.
struct Tuning {
  int chunk = 0;
  int row_tile = 0;
  int warps = 0;
  int ctas = 0;
  int dim_split = 0;
  int row_tile_only = 0;
  int row_groups = 0;
};
Tuning tuning_from_env();

// Splitting rule and workspace. `max_groups`: the most groups a call of the kernel may have
// (spec.max_tokens, or its requests for decode; 0 = not known); kernels made for single-token
// calls or for at most kSmallCallGroups groups get smaller chunks (more splits: latency),
// kernels made for more than kMediumCallGroups groups (> 16 rows) and sparse ones for at least
// kPrefillCallGroups groups (prefill chunks) larger ones (fewer partials to write and combine).
// `topk_or_len` is what a decode request may span (only for the workspace estimate); sparse
// uses topk.
inline constexpr int64_t kSmallCallGroups = 8;
inline constexpr int64_t kMediumCallGroups = 64;
inline constexpr int64_t kPrefillCallGroups = 1024;
inline constexpr int64_t kUnknownCallGroups = 65536;  // workspace of a kernel made for any size
// What the plan needs of the device. smem_per_sm: shared memory per SM, estimated as the
// per-block opt-in limit plus the 1 KB the hardware reserves per block (exact on sm_80 ...
// sm_100; an underestimate on sm_120, where it changes no choice).
struct PlanDevice {
  int sm_count = 1;
  int64_t smem_per_sm = 0;
};
int chunk_tokens(bool decode, CacheFormat format, int rows, int64_t max_groups, const Tuning& tuning,
                 const PlanDevice& device);
// The few-heads kernel (heads on the mma's N dimension) serves sparse calls over the fp8 cache
// with at most kFewHeadsMax rows on devices whose shared memory holds two of its CTAs per SM
// (sm_90 / sm_100: the configuration measured on the H200; sm_80 / sm_86 / sm_89 / sm_120 hold
// one of the 8-head variant and none of the 16-head one, and keep the row-tile kernel until it
// is measured there), unless LATTE_CUDA_SPARSE_MLA_ROW_TILE_ONLY=1; 9-16 rows only in kernels
// for more than 16 groups (or of unknown size, max_groups 0).
inline constexpr int kFewHeadsMax = 16;
bool few_heads_kernel(bool decode, CacheFormat format, int rows, int64_t max_groups, const Tuning& tuning,
                      const PlanDevice& device);
// The row-group kernel (mla_bf16_rowgroups_mma_sync.cu) serves sparse and dense-decode calls over
// the bf16 cache whose rows (s_q x heads) are a multiple of kRowGroupsRows (64, 128 heads: whole
// CTAs, no padded row computed), in kernels made for more than kSmallCallGroups groups or of
// unknown size (max_groups 0); one CTA per SM of 8 warps, 90 KB of shared memory on every arch.
// Not with LATTE_CUDA_SPARSE_MLA_ROW_TILE_ONLY=1; LATTE_CUDA_SPARSE_MLA_ROW_GROUPS=1 takes it for
// any rows (the last CTA's padded rows computed) and kernel size.
inline constexpr int kRowGroupsRows = 64;
bool row_groups_kernel(CacheFormat format, int rows, int64_t max_groups, const Tuning& tuning);
MlaPlan make_plan(const MlaParams& p, const PlanDevice& device, std::size_t workspace_bytes,
                  const Tuning& tuning, int64_t max_groups);
std::size_t workspace_bytes_for(bool decode, CacheFormat format, int rows, int topk_or_len,
                                int64_t max_groups, const Tuning& tuning, const PlanDevice& device);
// One line for Kernel::describe(): the kernel variant, the splits and the grid of a call of
// `max_groups` groups (0: not known) planned by make_plan.
std::string describe_plan(const MlaParams& p, const MlaPlan& plan, const PlanDevice& device, int64_t max_groups);

// The launchers' limits, declared as cuda.sparse_mla's capabilities: heads per rank, (query,
// head) rows of a decode request, topk, tokens per call, and the longest decode context the
// default workspace is sized for (DeepSeek's max_position_embeddings).
inline constexpr int kMaxHeads = 128;
inline constexpr int kMaxRows = 512;
inline constexpr int kMaxTopk = 32768;
inline constexpr int kMaxTokens = 65536;
inline constexpr int kWorkspaceContext = 163840;

// Launches the main kernel (and the combine kernel when split) on `stream`. `workspace` must
// hold at least plan.slab * plan.part_bytes_per_group bytes when plan.nsplit > 1.
// Throws latte::Error(cuda_error) on a launch failure. No host synchronization.
// `device` is the current CUDA device (the kernels' shared-memory attribute is set once per
// device).
void launch_mla(const MlaParams& p, const MlaPlan& plan, void* workspace, cudaStream_t stream,
                int device);

// The kernels' shared memory per block for each configuration (for tests and docs).
std::size_t smem_bytes(CacheFormat format, int row_tile, int ctas_per_sm = 2);

}  // namespace latte::cuda_sparse_mla
