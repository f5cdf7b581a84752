// ModelSpec (from a Hugging Face config.json) and AttentionSpec (one operation of it, as the
// selector and the backends see it).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "latte/dtype.hpp"
#include "latte/ops.hpp"

namespace latte {

struct IndexerSpec {
  int num_heads = 0;   // index_n_heads
  int head_dim = 0;    // index_head_dim
  int topk = 0;        // index_topk: the token positions the top-k keeps
  // The pooled ("C4") indexer of GLM-5.3-Flash: keys of index_kpool consecutive tokens are
  // pooled into one and scored per pool; 0 = the per-token indexer of GLM-5 and DeepSeek-V3.2.
  int kpool = 0;                          // index_kpool
  bool kpool_compress = false;            // index_kpool_compress: a pool's key is a gated mix
  bool kpool_always_select_tail = false;  // index_kpool_always_select_tail: + the newest tokens

  [[nodiscard]] bool pooled() const { return kpool > 1; }
  // A pooled indexer latte computes: index_kpool_compress pools (the gated mix of
  // indexer_pool_store) of at most kMaxKpool tokens. Other pooled indexers are the engine's.
  [[nodiscard]] bool pooled_in_latte() const { return pooled() && kpool_compress && kpool <= kMaxKpool; }
  // The most positions one query attends to, the columns sparse_mla needs: topk, plus the
  // kpool - 1 tokens of the incomplete pool when the tail is always selected (GLM-5.3: 2051).
  [[nodiscard]] int attended_tokens() const {
    return topk + (pooled() && kpool_always_select_tail ? kpool - 1 : 0);
  }
};

struct ModelSpec {
  std::string name;              // preset name or the config's path
  std::string model_type;
  int num_heads = 0;             // num_attention_heads (whole model)
  int q_lora_rank = 0;
  int kv_lora_rank = 0;
  int qk_nope_head_dim = 0;
  int qk_rope_head_dim = 0;
  int v_head_dim = 0;
  int64_t max_position_embeddings = 0;
  std::optional<IndexerSpec> indexer;  // present: DSA model; absent: dense MLA
  double softmax_scale = 0.0;    // docs/design.md, section 2.1, yarn mscale included
  std::string rope_type;         // "default", "yarn"
  double rope_factor = 1.0;
  // MLA without rope (mla_use_nope, qk_rope_head_dim 0; GLM-5.3-Flash): q and K are the latent
  // alone (d_qk = kv_lora_rank), the rope_dim 0 of sparse_mla and kv_store.
  bool nope = false;

  // Layers (docs/design.md, section 7). Hybrid models interleave MLA layers with others that
  // latte does not compute; the config's layer_types says which is which.
  int num_layers = 0;               // num_hidden_layers (0: the config does not say)
  std::vector<int> mla_layers;      // the layers whose attention is MLA/DSA (latte's), ascending
  int mtp_layers = 0;               // num_nextn_predict_layers: MTP layers, MLA/DSA attention too

  // Deployment choices.
  int tp = 1;
  int heads_per_rank = 0;        // num_heads / tp
  CacheFormat kv_cache = CacheFormat::bf16;
  int block_size = 64;

  [[nodiscard]] bool is_dsa() const { return indexer.has_value(); }
  [[nodiscard]] int rope_dim() const { return nope ? kNoRopeDim : kRopeDim; }
  // What of the model latte computes, in words, for `latte select` and `latte run`: empty for a
  // model latte serves whole; otherwise which layers it serves and what it lacks (the linear-
  // attention layers of a hybrid model are not latte's).
  [[nodiscard]] std::string coverage() const;
  // The ops one layer of the model runs through latte, in call order (`latte select --op all`):
  // the cache writes, the indexer when latte computes it, then the attention.
  [[nodiscard]] std::vector<Op> layer_ops() const;
};

struct Deployment {
  int tp = 1;
  CacheFormat kv_cache = CacheFormat::bf16;
  int block_size = 64;
};

// Parse config.json text. `source` names it in error messages (a path or a preset name).
// Throws latte::Error(config_error) naming the source, the key, the value and the fix.
[[nodiscard]] ModelSpec parse_model_config(std::string_view json_text, std::string_view source,
                                           const Deployment& deployment = {});
// A preset name (glm-5, glm-5.3-flash, deepseek-v3.2, deepseek-v3, kimi-k2) or a path to a config.json.
[[nodiscard]] ModelSpec load_model(std::string_view name_or_path,
                                   const Deployment& deployment = {});
[[nodiscard]] std::vector<std::string> model_preset_names();

// One operation of a model as the selector and backends see it.
struct AttentionSpec {
  Op op = Op::sparse_mla;
  std::string model;         // for explanations only
  int num_heads = 0;         // attention heads per rank; index heads for indexer ops
  int head_dim = kQkDim;     // 576 for MLA ops (512 without rope), 128 for indexer ops
  int head_dim_v = kLatentDim;
  DType q_dtype = DType::bf16;                  // e4m3 or bf16 for indexer queries
  CacheFormat kv_cache = CacheFormat::bf16;
  int block_size = 64;
  int topk = 0;              // sparse_mla / indexer_topk; 0 otherwise
  int s_q = 1;               // mla_decode query tokens per request
  // Most tokens per call the kernel is made for (0 = unknown). Kernels size their workspace by
  // it and may tune to it: cuda.sparse_mla picks its KV split size from it (1, <= 8, <= 64,
  // < 1024 or more tokens; unknown as <= 64), so its results are bitwise batch invariant among
  // the calls of one kernel, and a kernel made for prefill chunks serves small calls with few
  // CTAs (make one per call size class: docs/kernels/sparse_mla.md, "Splits, determinism, batch
  // invariance").
  int64_t max_tokens = 0;
  float scale = 0.0f;
  // The tensor-parallel size num_heads was divided by (1 = not split or not known). Used by
  // explanations ("8 (64 heads / tp 8)") and to suggest other TP sizes; backends ignore it.
  int tp = 1;
  // sparse_mla: the query comes as q [T, H, 512] + q_rope [T, H, 64] (SparseMlaArgs::q_rope).
  // Plugins (ABI v1) take one [T, H, 576] tensor and refuse it.
  bool split_q = false;
  // sparse_mla: each row's valid length comes as topk_lens [T] (SparseMlaArgs::topk_lens).
  // Backends that read every column of indices refuse it (reason topk_lens).
  bool topk_lens = false;
  // The pooled indexer (indexer_topk, indexer_logits, indexer_pool_store): tokens per pool, 0 =
  // the per-token indexer. block_size stays tokens per block (the pool pages hold block_size /
  // kpool rows) and indexer_topk's topk counts token columns (GLM-5.3-Flash: 2051). Backends that
  // score single tokens refuse kpool > 0 (reason kpool).
  int kpool = 0;

  friend bool operator==(const AttentionSpec&, const AttentionSpec&) = default;
  [[nodiscard]] std::string summary() const;  // "sparse_mla H=8 d=576 bf16 cache=fp8_ds_mla ..."
};

struct AttentionOptions {
  int64_t max_tokens = 0;
  int s_q = 1;
  DType index_q_dtype = DType::e4m3;
};

// Derive the spec of `op` from a model. Throws invalid_argument when the op does not apply
// (indexer ops on a dense model, mla_decode on a model without rope, indexer_k_store on a
// pooled indexer and indexer_pool_store on a per-token one), and unsupported for a pooled
// indexer without index_kpool_compress (its pool keys are not defined in latte).
[[nodiscard]] AttentionSpec attention_spec(const ModelSpec& model, Op op,
                                           const AttentionOptions& options = {});

}  // namespace latte
