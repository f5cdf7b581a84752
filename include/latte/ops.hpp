// The operations every latte backend computes, and their arguments. Semantics, dtypes and
// errors: docs/operations.md. The math: docs/design.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <variant>
#include <vector>

#include "latte/dtype.hpp"
#include "latte/tensor.hpp"

namespace latte {

enum class Op : uint8_t {
  sparse_mla,        // MLA attention over a per-token list of physical cache slots
  mla_decode,        // dense MLA over each request's paged cache, s_q 1..4, causal
  indexer_topk,      // DSA lightning indexer scores + exact top-k
  indexer_logits,    // the indexer scores themselves, [T, L]
  kv_store,          // latent + rope -> MLA cache (bf16 or fp8_ds_mla) through slot_mapping
  indexer_k_store,   // indexer K -> e4m3 + scale pages through slot_mapping
  logical_to_slots,  // per-request logical positions -> physical slots through block_table
};

[[nodiscard]] std::string_view to_string(Op op);
[[nodiscard]] std::optional<Op> parse_op(std::string_view name);
[[nodiscard]] const std::vector<Op>& all_ops();

// MLA dimensions shared by every supported model (docs/design.md, section 1).
inline constexpr int kLatentDim = 512;   // kv_lora_rank
inline constexpr int kRopeDim = 64;      // qk_rope_head_dim
inline constexpr int kQkDim = 576;       // latent + rope
// MLA without rope ("NoPE", GLM-5.3-Flash: qk_rope_head_dim 0): q and K are the latent alone,
// d_qk = kLatentDim. The rope_dim of SparseMlaArgs / KvStoreArgs is kRopeDim or kNoRopeDim.
inline constexpr int kNoRopeDim = 0;
inline constexpr int kIndexDim = 128;    // index_head_dim
inline constexpr int kIndexBytesPerToken = 132;  // 128 e4m3 + one f32 scale
inline constexpr int kFp8GroupSize = 128;
// API limits every backend shares (a backend may declare narrower ones).
inline constexpr int kMaxTopk = 65536;     // columns of sparse_mla / indexer_topk indices
inline constexpr int kMaxDecodeSq = 4;     // mla_decode query tokens per request

// score = scale * q.c over the token set of each query; out = softmax-weighted latent.
struct SparseMlaArgs {
  // [T, H, 576] bf16; [T, H, 512] (the latent part) when q_rope is given or rope_dim is 0
  TensorView q;
  // rope_dim 64: [num_blocks, block_size, 576] bf16 | [num_blocks, block_size, 656] u8.
  // rope_dim 0: [.., 512] bf16 | [.., 528] u8 | [.., 656] u8 (bytes 528..655 reserved, not read).
  TensorView kv_cache;
  TensorView indices;   // [T, topk] i32 physical slots, -1 = none
  TensorView out;       // [T, H, 512] bf16
  TensorView lse;       // optional [T, H] f32, natural log; -inf for an empty row
  float scale = 0.0f;
  // Optional [T, H, 64] bf16: the query's rope part as a tensor of its own (engines keep the
  // latent and rope parts of q apart: vLLM hands (ql_nope, q_pe)), read in place of q[..., 512:].
  TensorView q_rope;
  // kRopeDim (64): MLA with rope. kNoRopeDim (0): MLA without rope, d_qk 512 (GLM-5.3-Flash).
  // Stated, never inferred from the shapes, so that a rope call missing q_rope is an error
  // rather than silently computed without its rope dims.
  int rope_dim = kRopeDim;
  // Optional [T] i32: row t attends to indices[t, 0 : topk_lens[t]] only; entries past it are
  // ignored whatever they hold (padding that costs nothing). Values outside 0..topk are clamped
  // (an error in check mode).
  TensorView topk_lens;
};

struct MlaDecodeArgs {
  TensorView q;            // [B, s_q, H, 576] bf16, s_q in 1..4
  TensorView kv_cache;     // as SparseMlaArgs
  TensorView block_table;  // [B, max_blocks] i32
  TensorView seq_lens;     // [B] i32, tokens in the cache including the s_q new ones
  TensorView out;          // [B, s_q, H, 512] bf16
  TensorView lse;          // optional [B, s_q, H] f32
  float scale = 0.0f;
  // Query i of request b sees cache positions 0 .. seq_lens[b] - s_q + i (causal).
};

// How indexer_topk reports the chosen tokens.
enum class IndexKind : uint8_t { logical, physical };

struct IndexerInputs {
  TensorView q;              // [T, H_i, 128] e4m3 or bf16
  TensorView q_scale;        // [T, H_i] f32, required with e4m3 q, absent with bf16
  TensorView weights;        // [T, H_i] f32
  TensorView k_cache;        // [num_blocks, block_size, 132] u8; pages: docs/design.md, section 6.3
  TensorView block_table;    // [B, max_blocks] i32
  TensorView token_request;  // optional [T] i32: row of block_table for each token (default t)
  TensorView visible_lens;   // [T] i32: token t sees logical positions 0 .. visible_lens[t]-1
};

struct IndexerTopkArgs {
  IndexerInputs in;
  TensorView indices;        // [T, topk] i32 out, -1 padded
  IndexKind kind = IndexKind::physical;
};

struct IndexerLogitsArgs {
  IndexerInputs in;
  TensorView logits;         // [T, L] f32 out; -inf where position >= visible_lens[t]
};

struct KvStoreArgs {
  TensorView latent;         // [T, 512] bf16
  TensorView rope;           // [T, 64] bf16; absent with rope_dim 0
  TensorView slot_mapping;   // [T] i32, -1 = skip
  // rope_dim 64: bf16 [nb, bs, 576] or u8 [nb, bs, 656]. rope_dim 0: bf16 [nb, bs, 512], u8
  // [nb, bs, 528], or u8 [nb, bs, 656] whose bytes 528..655 are left as they are.
  TensorView kv_cache;
  Fp8ScaleKind scale_kind = Fp8ScaleKind::amax;  // fp8_ds_mla only
  int rope_dim = kRopeDim;   // as SparseMlaArgs::rope_dim: 0 writes rows without rope
};

struct IndexerKStoreArgs {
  TensorView k;              // [T, 128] bf16
  TensorView slot_mapping;   // [T] i32, -1 = skip
  TensorView k_cache;        // [num_blocks, block_size, 132] u8
  Fp8ScaleKind scale_kind = Fp8ScaleKind::amax;
};

struct LogicalToSlotsArgs {
  TensorView positions;      // [T, K] i32 logical positions, -1 = none
  TensorView block_table;    // [B, max_blocks] i32
  TensorView token_request;  // optional [T] i32 (default: row t)
  TensorView slots;          // [T, K] i32 out; -1 stays -1
  int block_size = 0;
};

using OpArgs = std::variant<SparseMlaArgs, MlaDecodeArgs, IndexerTopkArgs, IndexerLogitsArgs,
                            KvStoreArgs, IndexerKStoreArgs, LogicalToSlotsArgs>;

[[nodiscard]] Op op_of(const OpArgs& args);

// Where and how a kernel runs.
struct RunContext {
  void* stream = nullptr;           // cudaStream_t for CUDA backends; ignored on the CPU
  void* workspace = nullptr;        // at least Kernel::workspace_bytes() bytes on the device
  std::size_t workspace_bytes = 0;
  // Opt-in: validate every index against its range and report the first bad one
  // (row, column, value, allowed range). Costs a pass over the indices (and, on CUDA, a
  // host synchronization); off by default. Without it an out-of-range index is treated as
  // -1 and never read out of bounds.
  bool check_indices = false;
};

}  // namespace latte
