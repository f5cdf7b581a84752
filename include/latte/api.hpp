// The functional API: one call per op on caller-owned tensors. It derives the AttentionSpec
// from the tensors, selects a backend through Context::global() (or the forced one), keeps
// the kernel for reuse and provides its workspace (stream-ordered on CUDA).
#pragma once

#include <optional>
#include <string>

#include "latte/context.hpp"
#include "latte/ops.hpp"
#include "latte/spec.hpp"

namespace latte {

struct CallOptions {
  std::string backend;          // force this id (error listing reasons if it refuses)
  void* stream = nullptr;       // cudaStream_t; null = the legacy default stream
  bool check_indices = false;   // see RunContext::check_indices
  Context* context = nullptr;   // null = Context::global()
  // The cache format the caller expects (sparse_mla, mla_decode, kv_store): a cache tensor of
  // another format is refused, naming both. Unset: the format the cache tensor has.
  std::optional<CacheFormat> kv_format;
};

// The spec a call's tensors describe (num_heads, formats, block size, topk, tokens).
[[nodiscard]] AttentionSpec spec_from_args(const OpArgs& args);

// Runs `args` through the selected backend; returns the id that ran.
std::string run(const OpArgs& args, const CallOptions& options = {});

inline std::string sparse_mla(const SparseMlaArgs& a, const CallOptions& o = {}) { return run(a, o); }
inline std::string mla_decode(const MlaDecodeArgs& a, const CallOptions& o = {}) { return run(a, o); }
inline std::string indexer_topk(const IndexerTopkArgs& a, const CallOptions& o = {}) { return run(a, o); }
inline std::string indexer_logits(const IndexerLogitsArgs& a, const CallOptions& o = {}) { return run(a, o); }
inline std::string kv_store(const KvStoreArgs& a, const CallOptions& o = {}) { return run(a, o); }
inline std::string indexer_k_store(const IndexerKStoreArgs& a, const CallOptions& o = {}) { return run(a, o); }
inline std::string logical_to_slots(const LogicalToSlotsArgs& a, const CallOptions& o = {}) { return run(a, o); }
inline std::string indexer_pool_store(const IndexerPoolStoreArgs& a, const CallOptions& o = {}) { return run(a, o); }

}  // namespace latte
