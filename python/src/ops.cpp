// The ops: TensorArgs in, latte::run on the selected backend (or the forced one), the id of the
// backend that ran out. Output allocation, stream lookup and keyword defaults live in
// latte/ops.py; this file only builds the C++ argument structs (include/latte/ops.hpp).
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <optional>
#include <string>

#include "errors.hpp"
#include "latte/api.hpp"
#include "latte/validate.hpp"
#include "tensor_arg.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace latte::python {
namespace {

using OptArg = const TensorArg*;  // None -> nullptr: an absent optional tensor

// Runs without the GIL: the CPU reference can take a while, and a CUDA launch never needs it.
std::string call(const OpArgs& args, const std::optional<std::string>& backend, uintptr_t stream,
                 bool check_indices) {
  CallOptions options;
  options.backend = backend.value_or("");
  options.stream = reinterpret_cast<void*>(stream);
  options.check_indices = check_indices;
  nb::gil_scoped_release release;
  return run(args, options);
}

// kv_format is optional in Python (the cache's dtype and last dim already name its format);
// when given it must agree, so that a cache of the wrong kind is caught at the call.
void check_kv_format(const char* op, const std::optional<std::string>& kv_format, CacheFormat actual) {
  if (!kv_format) return;
  const auto wanted = parse_cache_format(*kv_format);
  if (!wanted) {
    throw Error(ErrorCode::invalid_argument,
                std::string(op) + ": kv_format '" + *kv_format + "' is not a cache format: use bf16 or fp8_ds_mla");
  }
  if (*wanted != actual) {
    throw Error(ErrorCode::invalid_argument,
                std::string(op) + ": kv_format is '" + *kv_format + "' but kv_cache holds a " +
                    std::string(to_string(actual)) +
                    " cache (bf16 cache: [num_blocks, block_size, 576] bf16; fp8_ds_mla: "
                    "[num_blocks, block_size, 656] uint8). Pass the matching cache or kv_format.");
  }
}

Fp8ScaleKind parse_scale_kind(const char* op, const std::string& name) {
  if (name == "amax") return Fp8ScaleKind::amax;
  if (name == "pow2") return Fp8ScaleKind::pow2;
  throw Error(ErrorCode::invalid_argument,
              std::string(op) + ": scale_kind '" + name + "' is not a scale kind: use amax or pow2");
}

IndexKind parse_index_kind(const std::string& name) {
  if (name == "physical") return IndexKind::physical;
  if (name == "logical") return IndexKind::logical;
  throw Error(ErrorCode::invalid_argument,
              "indexer_topk: kind '" + name + "' is not an index kind: use physical (cache slots) or "
              "logical (positions in the request)");
}

IndexerInputs indexer_inputs(const TensorArg& q, OptArg q_scale, const TensorArg& weights,
                             const TensorArg& k_cache, const TensorArg& block_table,
                             OptArg token_request, const TensorArg& visible_lens) {
  IndexerInputs in;
  in.q = q.view();
  in.q_scale = view_or_absent(q_scale);
  in.weights = weights.view();
  in.k_cache = k_cache.view();
  in.block_table = block_table.view();
  in.token_request = view_or_absent(token_request);
  in.visible_lens = visible_lens.view();
  return in;
}

}  // namespace

void bind_ops(nb::module_& m) {
  m.def(
      "sparse_mla",
      [](const TensorArg& q, const TensorArg& kv_cache, const TensorArg& indices, const TensorArg& out,
         OptArg lse, float scale, const std::optional<std::string>& kv_format,
         const std::optional<std::string>& backend, uintptr_t stream, bool check_indices) {
        SparseMlaArgs a;
        a.q = q.view();
        a.kv_cache = kv_cache.view();
        a.indices = indices.view();
        a.out = out.view();
        a.lse = view_or_absent(lse);
        a.scale = scale;
        if (kv_format) check_kv_format("sparse_mla", kv_format, validate(a).format);
        return call(a, backend, stream, check_indices);
      },
      "q"_a, "kv_cache"_a, "indices"_a, "out"_a, "lse"_a.none(), "scale"_a, nb::kw_only(),
      "kv_format"_a.none() = nb::none(), "backend"_a.none() = nb::none(), "stream"_a = 0,
      "check_indices"_a = false);

  m.def(
      "mla_decode",
      [](const TensorArg& q, const TensorArg& kv_cache, const TensorArg& block_table,
         const TensorArg& seq_lens, const TensorArg& out, OptArg lse, float scale,
         const std::optional<std::string>& kv_format, const std::optional<std::string>& backend,
         uintptr_t stream, bool check_indices) {
        MlaDecodeArgs a;
        a.q = q.view();
        a.kv_cache = kv_cache.view();
        a.block_table = block_table.view();
        a.seq_lens = seq_lens.view();
        a.out = out.view();
        a.lse = view_or_absent(lse);
        a.scale = scale;
        if (kv_format) check_kv_format("mla_decode", kv_format, validate(a).format);
        return call(a, backend, stream, check_indices);
      },
      "q"_a, "kv_cache"_a, "block_table"_a, "seq_lens"_a, "out"_a, "lse"_a.none(), "scale"_a,
      nb::kw_only(), "kv_format"_a.none() = nb::none(), "backend"_a.none() = nb::none(),
      "stream"_a = 0, "check_indices"_a = false);

  m.def(
      "indexer_topk",
      [](const TensorArg& q, OptArg q_scale, const TensorArg& weights, const TensorArg& k_cache,
         const TensorArg& block_table, OptArg token_request, const TensorArg& visible_lens,
         const TensorArg& indices, const std::string& kind, const std::optional<std::string>& backend,
         uintptr_t stream, bool check_indices) {
        IndexerTopkArgs a;
        a.in = indexer_inputs(q, q_scale, weights, k_cache, block_table, token_request, visible_lens);
        a.indices = indices.view();
        a.kind = parse_index_kind(kind);
        return call(a, backend, stream, check_indices);
      },
      "q"_a, "q_scale"_a.none(), "weights"_a, "k_cache"_a, "block_table"_a, "token_request"_a.none(),
      "visible_lens"_a, "indices"_a, nb::kw_only(), "kind"_a = "physical",
      "backend"_a.none() = nb::none(), "stream"_a = 0, "check_indices"_a = false);

  m.def(
      "indexer_logits",
      [](const TensorArg& q, OptArg q_scale, const TensorArg& weights, const TensorArg& k_cache,
         const TensorArg& block_table, OptArg token_request, const TensorArg& visible_lens,
         const TensorArg& logits, const std::optional<std::string>& backend, uintptr_t stream,
         bool check_indices) {
        IndexerLogitsArgs a;
        a.in = indexer_inputs(q, q_scale, weights, k_cache, block_table, token_request, visible_lens);
        a.logits = logits.view();
        return call(a, backend, stream, check_indices);
      },
      "q"_a, "q_scale"_a.none(), "weights"_a, "k_cache"_a, "block_table"_a, "token_request"_a.none(),
      "visible_lens"_a, "logits"_a, nb::kw_only(), "backend"_a.none() = nb::none(), "stream"_a = 0,
      "check_indices"_a = false);

  m.def(
      "kv_store",
      [](const TensorArg& latent, const TensorArg& rope, const TensorArg& slot_mapping,
         const TensorArg& kv_cache, const std::string& scale_kind,
         const std::optional<std::string>& kv_format, const std::optional<std::string>& backend,
         uintptr_t stream, bool check_indices) {
        KvStoreArgs a;
        a.latent = latent.view();
        a.rope = rope.view();
        a.slot_mapping = slot_mapping.view();
        a.kv_cache = kv_cache.view();
        a.scale_kind = parse_scale_kind("kv_store", scale_kind);
        if (kv_format) check_kv_format("kv_store", kv_format, validate(a).format);
        return call(a, backend, stream, check_indices);
      },
      "latent"_a, "rope"_a, "slot_mapping"_a, "kv_cache"_a, nb::kw_only(), "scale_kind"_a = "amax",
      "kv_format"_a.none() = nb::none(), "backend"_a.none() = nb::none(), "stream"_a = 0,
      "check_indices"_a = false);

  m.def(
      "indexer_k_store",
      [](const TensorArg& k, const TensorArg& slot_mapping, const TensorArg& k_cache,
         const std::string& scale_kind, const std::optional<std::string>& backend, uintptr_t stream,
         bool check_indices) {
        IndexerKStoreArgs a;
        a.k = k.view();
        a.slot_mapping = slot_mapping.view();
        a.k_cache = k_cache.view();
        a.scale_kind = parse_scale_kind("indexer_k_store", scale_kind);
        return call(a, backend, stream, check_indices);
      },
      "k"_a, "slot_mapping"_a, "k_cache"_a, nb::kw_only(), "scale_kind"_a = "amax",
      "backend"_a.none() = nb::none(), "stream"_a = 0, "check_indices"_a = false);

  m.def(
      "logical_to_slots",
      [](const TensorArg& positions, const TensorArg& block_table, OptArg token_request,
         const TensorArg& slots, int block_size, const std::optional<std::string>& backend,
         uintptr_t stream, bool check_indices) {
        LogicalToSlotsArgs a;
        a.positions = positions.view();
        a.block_table = block_table.view();
        a.token_request = view_or_absent(token_request);
        a.slots = slots.view();
        a.block_size = block_size;
        return call(a, backend, stream, check_indices);
      },
      "positions"_a, "block_table"_a, "token_request"_a.none(), "slots"_a, "block_size"_a,
      nb::kw_only(), "backend"_a.none() = nb::none(), "stream"_a = 0, "check_indices"_a = false);
}

}  // namespace latte::python
