// The ops: the caller's tensors in (CallTensor: torch descriptors, TensorArgs, DLPack), latte::run
// on the selected backend (or the forced one), the id of the backend that ran out. Output
// allocation and keyword defaults live in latte/ops.py; this file builds the C++ argument structs
// (include/latte/ops.hpp) and picks the stream.
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

using Obj = nb::handle;  // a tensor argument: torch.Tensor, TensorArg, or any DLPack producer

// The GIL is kept while a CUDA call is queued: the launch takes microseconds, and giving the
// GIL away lets another Python thread hold it for up to its switch interval (5 ms) before this
// call may return. CPU calls (the reference computes in float64) and check_indices (a host
// sync) release it.
// kv_format is optional in Python (the cache's dtype and last dim already name its format);
// when given, latte::run refuses a cache of another format.
std::optional<CacheFormat> parse_kv_format(const char* op, const std::optional<std::string>& kv_format) {
  if (!kv_format) return std::nullopt;
  const auto format = parse_cache_format(*kv_format);
  if (!format) {
    throw Error(ErrorCode::invalid_argument,
                std::string(op) + ": kv_format '" + *kv_format + "' is not a cache format: use bf16 or fp8_ds_mla");
  }
  return format;
}

std::string call(const OpArgs& args, const CallTensor& first, const std::optional<std::string>& backend,
                 nb::handle stream, bool check_indices, std::optional<CacheFormat> kv_format = std::nullopt) {
  CallOptions options;
  if (backend) options.backend = *backend;
  options.stream = reinterpret_cast<void*>(call_stream(stream, first));
  options.check_indices = check_indices;
  options.kv_format = kv_format;
  if (first.view().device.kind == DeviceKind::cuda && !check_indices) return run(args, options);
  nb::gil_scoped_release release;
  return run(args, options);
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

// The first rows of an engine's persistent buffer [>= T, ...] for a call of `like`'s T rows (a
// buffer with fewer rows, or an absent one, is left for validation to report).
TensorView first_rows(TensorView buffer, const TensorView& like) {
  if (buffer.data && buffer.rank >= 1 && like.rank >= 1 && buffer.shape[0] > like.shape[0]) {
    buffer.shape[0] = like.shape[0];
  }
  return buffer;
}

// The seven indexer inputs, resolved in the order the Python layer always converted them.
struct IndexerTensors {
  CallTensor q, q_scale, weights, k_cache, block_table, token_request, visible_lens;

  IndexerTensors(const char* op, Obj q_, Obj q_scale_, Obj weights_, Obj k_cache_, Obj block_table_,
                 Obj token_request_, Obj visible_lens_) {
    q.resolve(q_, "q", op, false);
    q_scale.resolve_optional(q_scale_, "q_scale", op, false);
    weights.resolve(weights_, "weights", op, false);
    k_cache.resolve(k_cache_, "k_cache", op, false);
    block_table.resolve(block_table_, "block_table", op, false);
    token_request.resolve_optional(token_request_, "token_request", op, false);
    visible_lens.resolve(visible_lens_, "visible_lens", op, false);
  }
  [[nodiscard]] IndexerInputs inputs(int kpool = 0) const {
    IndexerInputs in;
    in.kpool = kpool;
    in.q = q.view();
    in.q_scale = q_scale.view();
    in.weights = weights.view();
    in.k_cache = k_cache.view();
    in.block_table = block_table.view();
    in.token_request = token_request.view();
    in.visible_lens = visible_lens.view();
    return in;
  }
};

}  // namespace

// Every tensor parameter takes a torch.Tensor, a TensorArg or any DLPack producer (CallTensor);
// latte/ops.py passes the caller's objects straight through. Parameters are positional so that
// the Python layer's call parses no keywords.
void bind_ops(nb::module_& m) {
  m.def(
      "sparse_mla",
      [](Obj q, Obj kv_cache, Obj indices, Obj out, Obj lse, float scale,
         const std::optional<std::string>& kv_format, const std::optional<std::string>& backend,
         Obj stream, bool check_indices, Obj block_table, Obj token_request, Obj slots, Obj q_rope,
         int rope_dim, Obj topk_lens) {
        constexpr const char* op = "sparse_mla";
        CallTensor t[7];
        t[0].resolve(q, "q", op, false);
        t[1].resolve(kv_cache, "kv_cache", op, false);
        t[2].resolve(indices, "indices", op, false);
        t[3].resolve(out, "out", op, true);
        t[4].resolve_optional(lse, "lse", op, true);
        t[5].resolve_optional(q_rope, "q_rope", op, false);
        t[6].resolve_optional(topk_lens, "topk_lens", op, false);
        SparseMlaArgs a;
        a.q = t[0].view();
        a.kv_cache = t[1].view();
        a.indices = t[2].view();
        a.out = t[3].view();
        a.lse = t[4].view();
        a.q_rope = t[5].view();
        a.topk_lens = t[6].view();
        a.rope_dim = rope_dim;
        a.scale = scale;
        if (!block_table.is_none()) {
          // Logical positions: turned into slots first, through the block table (one call of
          // logical_to_slots on the selector's backend; a forced backend applies to attention).
          CallTensor bt, tr, sl;
          bt.resolve(block_table, "block_table", op, false);
          tr.resolve_optional(token_request, "token_request", op, false);
          sl.resolve(slots, "slots", op, true);
          LogicalToSlotsArgs l;
          l.positions = first_rows(a.indices, a.q);
          l.block_table = bt.view();
          l.token_request = first_rows(tr.view(), a.q);
          l.slots = first_rows(sl.view(), a.q);
          l.block_size = static_cast<int>(a.kv_cache.rank == 3 ? a.kv_cache.shape[1] : 0);
          check_logical_sparse_mla(l, a);  // before slots are written
          call(l, t[0], std::nullopt, stream, check_indices);
          a.indices = l.slots;
        }
        return call(a, t[0], backend, stream, check_indices, parse_kv_format(op, kv_format));
      },
      "q"_a.none(), "kv_cache"_a.none(), "indices"_a.none(), "out"_a.none(), "lse"_a.none(),
      "scale"_a, "kv_format"_a.none() = nb::none(), "backend"_a.none() = nb::none(),
      "stream"_a.none() = nb::none(), "check_indices"_a = false,
      "block_table"_a.none() = nb::none(), "token_request"_a.none() = nb::none(),
      "slots"_a.none() = nb::none(), "q_rope"_a.none() = nb::none(), "rope_dim"_a = kRopeDim,
      "topk_lens"_a.none() = nb::none());

  m.def(
      "mla_decode",
      [](Obj q, Obj kv_cache, Obj block_table, Obj seq_lens, Obj out, Obj lse, float scale,
         const std::optional<std::string>& kv_format, const std::optional<std::string>& backend,
         Obj stream, bool check_indices) {
        constexpr const char* op = "mla_decode";
        CallTensor t[6];
        t[0].resolve(q, "q", op, false);
        t[1].resolve(kv_cache, "kv_cache", op, false);
        t[2].resolve(block_table, "block_table", op, false);
        t[3].resolve(seq_lens, "seq_lens", op, false);
        t[4].resolve(out, "out", op, true);
        t[5].resolve_optional(lse, "lse", op, true);
        MlaDecodeArgs a;
        a.q = t[0].view();
        a.kv_cache = t[1].view();
        a.block_table = t[2].view();
        a.seq_lens = t[3].view();
        a.out = t[4].view();
        a.lse = t[5].view();
        a.scale = scale;
        return call(a, t[0], backend, stream, check_indices, parse_kv_format(op, kv_format));
      },
      "q"_a.none(), "kv_cache"_a.none(), "block_table"_a.none(), "seq_lens"_a.none(),
      "out"_a.none(), "lse"_a.none(), "scale"_a, "kv_format"_a.none() = nb::none(),
      "backend"_a.none() = nb::none(), "stream"_a.none() = nb::none(), "check_indices"_a = false);

  m.def(
      "indexer_topk",
      [](Obj q, Obj q_scale, Obj weights, Obj k_cache, Obj block_table, Obj token_request,
         Obj visible_lens, Obj indices, std::optional<int64_t> topk, const std::string& kind,
         const std::optional<std::string>& backend, Obj stream, bool check_indices, int kpool, int pool_topk,
         bool select_tail, Obj out_lens) {
        constexpr const char* op = "indexer_topk";
        IndexerTensors in(op, q, q_scale, weights, k_cache, block_table, token_request, visible_lens);
        CallTensor out, lens;
        out.resolve(indices, "indices", op, true);
        lens.resolve_optional(out_lens, "out_lens", op, true);
        // topk and indices= both given: they must agree (a [T, topk] result).
        if (topk && (out.view().rank != 2 || out.view().size(1) != *topk)) {
          throw Error(ErrorCode::invalid_argument,
                      std::string(op) + ": topk is " + std::to_string(*topk) + " but indices= is " +
                          out.view().describe() + ": pass one of them, or make indices [T, topk]");
        }
        IndexerTopkArgs a;
        a.in = in.inputs(kpool);
        a.indices = out.view();
        a.kind = parse_index_kind(kind);
        a.pool_topk = pool_topk;
        a.select_tail = select_tail;
        a.out_lens = lens.view();
        return call(a, in.q, backend, stream, check_indices);
      },
      "q"_a.none(), "q_scale"_a.none(), "weights"_a.none(), "k_cache"_a.none(),
      "block_table"_a.none(), "token_request"_a.none(), "visible_lens"_a.none(), "indices"_a.none(),
      "topk"_a.none() = nb::none(), "kind"_a = "physical", "backend"_a.none() = nb::none(),
      "stream"_a.none() = nb::none(), "check_indices"_a = false, "kpool"_a = 0, "pool_topk"_a = 0,
      "select_tail"_a = false, "out_lens"_a.none() = nb::none());

  // topk before latte/ops.py allocates indices for it: an int (what operator.index takes), then
  // the core's topk rule, so a bad value never reaches the allocator.
  m.def(
      "check_topk",
      [](const char* op, nb::handle topk) {
        PyObject* index = PyNumber_Index(topk.ptr());
        if (!index) {
          PyErr_Clear();
          throw BindingError(ErrorCode::invalid_argument,
                             std::string(op) + ": topk must be an int (the columns of indices); got a " +
                                 nb::cast<std::string>(nb::str(topk.type().attr("__name__"))),
                             "ArgumentTypeError");
        }
        const nb::int_ value = nb::steal<nb::int_>(index);
        int overflow = 0;
        const long long v = PyLong_AsLongLongAndOverflow(value.ptr(), &overflow);
        check_topk(op, v, overflow ? nb::cast<std::string>(nb::str(value)) : std::string());
        return static_cast<int64_t>(v);
      },
      "op"_a, "topk"_a);

  m.def(
      "indexer_logits",
      [](Obj q, Obj q_scale, Obj weights, Obj k_cache, Obj block_table, Obj token_request,
         Obj visible_lens, Obj logits, const std::optional<std::string>& backend, Obj stream,
         bool check_indices, int kpool) {
        constexpr const char* op = "indexer_logits";
        IndexerTensors in(op, q, q_scale, weights, k_cache, block_table, token_request, visible_lens);
        CallTensor out;
        out.resolve(logits, "logits", op, true);
        IndexerLogitsArgs a;
        a.in = in.inputs(kpool);
        a.logits = out.view();
        return call(a, in.q, backend, stream, check_indices);
      },
      "q"_a.none(), "q_scale"_a.none(), "weights"_a.none(), "k_cache"_a.none(),
      "block_table"_a.none(), "token_request"_a.none(), "visible_lens"_a.none(), "logits"_a.none(),
      "backend"_a.none() = nb::none(), "stream"_a.none() = nb::none(), "check_indices"_a = false,
      "kpool"_a = 0);

  m.def(
      "kv_store",
      [](Obj latent, Obj rope, Obj slot_mapping, Obj kv_cache, const std::string& scale_kind,
         const std::optional<std::string>& kv_format, const std::optional<std::string>& backend,
         Obj stream, bool check_indices, int rope_dim) {
        constexpr const char* op = "kv_store";
        CallTensor t[4];
        t[0].resolve(latent, "latent", op, false);
        t[1].resolve_optional(rope, "rope", op, false);
        t[2].resolve(slot_mapping, "slot_mapping", op, false);
        t[3].resolve(kv_cache, "kv_cache", op, true);
        KvStoreArgs a;
        a.latent = t[0].view();
        a.rope = t[1].view();
        a.slot_mapping = t[2].view();
        a.kv_cache = t[3].view();
        a.scale_kind = parse_scale_kind(op, scale_kind);
        a.rope_dim = rope_dim;
        return call(a, t[0], backend, stream, check_indices, parse_kv_format(op, kv_format));
      },
      "latent"_a.none(), "rope"_a.none(), "slot_mapping"_a.none(), "kv_cache"_a.none(),
      "scale_kind"_a = "amax", "kv_format"_a.none() = nb::none(), "backend"_a.none() = nb::none(),
      "stream"_a.none() = nb::none(), "check_indices"_a = false, "rope_dim"_a = kRopeDim);

  m.def(
      "indexer_k_store",
      [](Obj k, Obj slot_mapping, Obj k_cache, const std::string& scale_kind,
         const std::optional<std::string>& backend, Obj stream, bool check_indices) {
        constexpr const char* op = "indexer_k_store";
        CallTensor t[3];
        t[0].resolve(k, "k", op, false);
        t[1].resolve(slot_mapping, "slot_mapping", op, false);
        t[2].resolve(k_cache, "k_cache", op, true);
        IndexerKStoreArgs a;
        a.k = t[0].view();
        a.slot_mapping = t[1].view();
        a.k_cache = t[2].view();
        a.scale_kind = parse_scale_kind(op, scale_kind);
        return call(a, t[0], backend, stream, check_indices);
      },
      "k"_a.none(), "slot_mapping"_a.none(), "k_cache"_a.none(), "scale_kind"_a = "amax",
      "backend"_a.none() = nb::none(), "stream"_a.none() = nb::none(), "check_indices"_a = false);

  m.def(
      "indexer_pool_store",
      [](Obj k, Obj gate, Obj ape, Obj positions, Obj token_request, Obj block_table, Obj k_cache,
         Obj pool_state, int kpool, const std::string& scale_kind, bool hadamard,
         const std::optional<std::string>& backend, Obj stream, bool check_indices) {
        constexpr const char* op = "indexer_pool_store";
        CallTensor t[8];
        t[0].resolve(k, "k", op, false);
        t[1].resolve(gate, "gate", op, false);
        t[2].resolve(ape, "ape", op, false);
        t[3].resolve(positions, "positions", op, false);
        t[4].resolve_optional(token_request, "token_request", op, false);
        t[5].resolve(block_table, "block_table", op, false);
        t[6].resolve(k_cache, "k_cache", op, true);
        t[7].resolve(pool_state, "pool_state", op, true);
        IndexerPoolStoreArgs a;
        a.k = t[0].view();
        a.gate = t[1].view();
        a.ape = t[2].view();
        a.positions = t[3].view();
        a.token_request = t[4].view();
        a.block_table = t[5].view();
        a.k_cache = t[6].view();
        a.pool_state = t[7].view();
        a.kpool = kpool;
        a.scale_kind = parse_scale_kind(op, scale_kind);
        a.hadamard = hadamard;
        return call(a, t[0], backend, stream, check_indices);
      },
      "k"_a.none(), "gate"_a.none(), "ape"_a.none(), "positions"_a.none(), "token_request"_a.none(),
      "block_table"_a.none(), "k_cache"_a.none(), "pool_state"_a.none(), "kpool"_a, "scale_kind"_a = "amax",
      "hadamard"_a = false, "backend"_a.none() = nb::none(), "stream"_a.none() = nb::none(),
      "check_indices"_a = false);

  m.def(
      "logical_to_slots",
      [](Obj positions, Obj block_table, Obj token_request, Obj slots, int block_size,
         const std::optional<std::string>& backend, Obj stream, bool check_indices) {
        constexpr const char* op = "logical_to_slots";
        CallTensor t[4];
        t[0].resolve(positions, "positions", op, false);
        t[1].resolve(block_table, "block_table", op, false);
        t[2].resolve_optional(token_request, "token_request", op, false);
        t[3].resolve(slots, "slots", op, true);
        LogicalToSlotsArgs a;
        a.positions = t[0].view();
        a.block_table = t[1].view();
        a.token_request = t[2].view();
        a.slots = t[3].view();
        a.block_size = block_size;
        return call(a, t[0], backend, stream, check_indices);
      },
      "positions"_a.none(), "block_table"_a.none(), "token_request"_a.none(), "slots"_a.none(),
      "block_size"_a, "backend"_a.none() = nb::none(), "stream"_a.none() = nb::none(),
      "check_indices"_a = false);
}

}  // namespace latte::python
