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
  int topk = 0;        // index_topk
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

  // Deployment choices.
  int tp = 1;
  int heads_per_rank = 0;        // num_heads / tp
  CacheFormat kv_cache = CacheFormat::bf16;
  int block_size = 64;

  [[nodiscard]] bool is_dsa() const { return indexer.has_value(); }
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
// A preset name (glm-5, deepseek-v3.2, deepseek-v3, kimi-k2) or a path to a config.json.
[[nodiscard]] ModelSpec load_model(std::string_view name_or_path,
                                   const Deployment& deployment = {});
[[nodiscard]] std::vector<std::string> model_preset_names();

// One operation of a model as the selector and backends see it.
struct AttentionSpec {
  Op op = Op::sparse_mla;
  std::string model;         // for explanations only
  int num_heads = 0;         // attention heads per rank; index heads for indexer ops
  int head_dim = kQkDim;     // 576 for MLA ops, 128 for indexer ops
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

  friend bool operator==(const AttentionSpec&, const AttentionSpec&) = default;
  [[nodiscard]] std::string summary() const;  // "sparse_mla H=8 d=576 bf16 cache=fp8_ds_mla ..."
};

struct AttentionOptions {
  int64_t max_tokens = 0;
  int s_q = 1;
  DType index_q_dtype = DType::e4m3;
};

// Derive the spec of `op` from a model. Throws invalid_argument when the op does not apply
// (indexer ops on a dense model).
[[nodiscard]] AttentionSpec attention_spec(const ModelSpec& model, Op op,
                                           const AttentionOptions& options = {});

}  // namespace latte
