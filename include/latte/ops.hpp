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
  // The pooled ("C4") indexer's keys (GLM-5.3-Flash): k + gate of kpool tokens -> one pool key,
  // e4m3 + scale rows in pages through the token block table. Last, so that the plugin ABI's
  // op numbers stay those of ABI v1 (plugins cannot express this op and refuse it).
  indexer_pool_store,
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
// Tokens per pool of the pooled indexer (IndexerInputs::kpool, IndexerPoolStoreArgs::kpool):
// GLM-5.3-Flash uses 4; its config class defaults to 16, the largest latte takes.
inline constexpr int kMinKpool = 2;
inline constexpr int kMaxKpool = 16;

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
  // [num_blocks, block_size, 132] u8; pages: docs/design.md, section 6.3. Pooled (kpool > 0):
  // [num_blocks, block_size / kpool, 132], one row per pool (written by indexer_pool_store).
  TensorView k_cache;
  TensorView block_table;    // [B, max_blocks] i32 (the token block table, also when pooled)
  TensorView token_request;  // optional [T] i32: row of block_table for each token (default t)
  TensorView visible_lens;   // [T] i32: token t sees logical positions 0 .. visible_lens[t]-1
  // 0: the per-token indexer (GLM-5, DeepSeek-V3.2). 2..16: the pooled indexer of GLM-5.3-Flash
  // (4): k_cache holds pool keys and a block of the block table holds kpool * k_cache.shape[1]
  // tokens. Scores are per pool; only complete pools (kpool * (p + 1) <= visible_lens[t]) count.
  int kpool = 0;
};

struct IndexerTopkArgs {
  IndexerInputs in;
  // [T, topk] i32 out, -1 padded. Pooled: token positions (or slots) of the chosen pools, at least
  // kpool * pool_topk columns (+ kpool - 1 with select_tail; vLLM's buffers have 2176).
  TensorView indices;
  IndexKind kind = IndexKind::physical;
  // Pooled only (in.kpool > 0; 0 / false / absent otherwise):
  int pool_topk = 0;         // pools kept per query (GLM-5.3-Flash: 512 = index_topk / kpool)
  bool select_tail = false;  // + the tokens of the incomplete pool (index_kpool_always_select_tail)
  TensorView out_lens;       // optional [T] i32 out: valid entries of each row of indices
};

struct IndexerLogitsArgs {
  IndexerInputs in;
  // [T, L] f32 out; -inf where position >= visible_lens[t]. Pooled: column p is pool p's score,
  // -inf for pools that are incomplete, not visible or in a missing block.
  TensorView logits;
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

// The pooled indexer's key store (docs/operations.md, "indexer_pool_store"). Token t, at
// position pos = positions[t] of request r = token_request[t] (default t), has slot
// j = pos % kpool of pool p = pos / kpool. A token of slot kpool - 1 completes its pool: for each
// dimension d, K[d] = sum_s softmax_s(gate[s][d] + ape[s][d]) * k[s][d] over the pool's kpool
// tokens, taken from this call where it holds them, else from pool_state. The key (rounded to bf16,
// optionally rotated by the normalized Hadamard-128 matrix) is quantized like an indexer_k_store
// row into row (kpool * p mod bs) / kpool of block block_table[r, kpool * p / bs], bs = kpool *
// k_cache.shape[1]. pool_state keeps each request's incomplete pool between calls.
struct IndexerPoolStoreArgs {
  TensorView k;              // [T, 128] bf16: indexer keys as the model gives them
  TensorView gate;           // [T, 128] bf16 or f32: the pooling gate of each token
  TensorView ape;            // [kpool, 128] f32 or bf16: the learned per-slot bias
  TensorView positions;      // [T] i32: logical position of each token in its request; < 0 = skip
  TensorView token_request;  // optional [T] i32: row of block_table and pool_state (default t)
  TensorView block_table;    // [B, max_blocks] i32: the token block table
  TensorView k_cache;        // [num_blocks, block_size / kpool, 132] u8 pool pages, written in place
  TensorView pool_state;     // [B, kpool - 1, 2, 128] f32, in/out: (k, gate) of slots 0..kpool-2
  Fp8ScaleKind scale_kind = Fp8ScaleKind::amax;
  bool hadamard = false;     // rotate each pool key by the normalized Hadamard-128 before quantizing
  int kpool = 0;             // tokens per pool, 2..16 (GLM-5.3-Flash: 4); required
};

struct LogicalToSlotsArgs {
  TensorView positions;      // [T, K] i32 logical positions, -1 = none
  TensorView block_table;    // [B, max_blocks] i32
  TensorView token_request;  // optional [T] i32 (default: row t)
  TensorView slots;          // [T, K] i32 out; -1 stays -1
  int block_size = 0;
};

using OpArgs = std::variant<SparseMlaArgs, MlaDecodeArgs, IndexerTopkArgs, IndexerLogitsArgs,
                            KvStoreArgs, IndexerKStoreArgs, LogicalToSlotsArgs, IndexerPoolStoreArgs>;

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
