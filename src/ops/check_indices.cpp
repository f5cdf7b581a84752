// Check mode (RunContext::check_indices): range checks of index values on host-readable int32
// data, and the one-device rule. Each error names the first bad entry and the allowed range.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <initializer_list>
#include <string>
#include <utility>

#include "ops/arg_check.hpp"
#include "latte/error.hpp"
#include "latte/validate.hpp"

namespace latte {
namespace {

[[noreturn]] void bad_entry(const char* what, int64_t row, int64_t col, int32_t value,
                            const std::string& allowed) {
  throw Error(ErrorCode::invalid_argument,
              fmt::format("{}[{}, {}] = {} is out of range; allowed {}. Fix the index or turn "
                          "check mode off to treat it as -1 (docs/operations.md).",
                          what, row, col, value, allowed));
}

std::string device_label(Device d) {
  return d.kind == DeviceKind::cpu ? std::string("cpu") : fmt::format("cuda:{}", d.index);
}

// The named tensors of a call, in the field order of its Args struct.
// A fixed-capacity list (every call is validated: no heap allocation on that path).
struct NamedTensors {
  struct List {
    std::array<std::pair<const char*, const TensorView*>, 10> items{};
    std::size_t size = 0;
    List(std::initializer_list<std::pair<const char*, const TensorView*>> named) {
      for (const auto& n : named) items[size++] = n;
    }
    void add(const char* name, const TensorView* t) { items[size++] = {name, t}; }
    [[nodiscard]] auto begin() const { return items.begin(); }
    [[nodiscard]] auto end() const { return items.begin() + static_cast<std::ptrdiff_t>(size); }
  };
  static List indexer(const IndexerInputs& in) {
    return {{"q", &in.q}, {"q_scale", &in.q_scale}, {"weights", &in.weights},
            {"k_cache", &in.k_cache}, {"block_table", &in.block_table},
            {"token_request", &in.token_request}, {"visible_lens", &in.visible_lens}};
  }
  List operator()(const SparseMlaArgs& a) const {
    return {{"q", &a.q}, {"q_rope", &a.q_rope}, {"kv_cache", &a.kv_cache}, {"indices", &a.indices},
            {"out", &a.out}, {"lse", &a.lse}, {"topk_lens", &a.topk_lens}};
  }
  List operator()(const MlaDecodeArgs& a) const {
    return {{"q", &a.q}, {"kv_cache", &a.kv_cache}, {"block_table", &a.block_table},
            {"seq_lens", &a.seq_lens}, {"out", &a.out}, {"lse", &a.lse}};
  }
  List operator()(const IndexerTopkArgs& a) const {
    List l = indexer(a.in);
    l.add("indices", &a.indices);
    l.add("out_lens", &a.out_lens);
    return l;
  }
  List operator()(const IndexerLogitsArgs& a) const {
    List l = indexer(a.in);
    l.add("logits", &a.logits);
    return l;
  }
  List operator()(const KvStoreArgs& a) const {
    return {{"latent", &a.latent}, {"rope", &a.rope}, {"slot_mapping", &a.slot_mapping},
            {"kv_cache", &a.kv_cache}};
  }
  List operator()(const IndexerKStoreArgs& a) const {
    return {{"k", &a.k}, {"slot_mapping", &a.slot_mapping}, {"k_cache", &a.k_cache}};
  }
  List operator()(const LogicalToSlotsArgs& a) const {
    return {{"positions", &a.positions}, {"block_table", &a.block_table},
            {"token_request", &a.token_request}, {"slots", &a.slots}};
  }
  List operator()(const IndexerPoolStoreArgs& a) const {
    return {{"k", &a.k},
            {"gate", &a.gate},
            {"ape", &a.ape},
            {"positions", &a.positions},
            {"token_request", &a.token_request},
            {"block_table", &a.block_table},
            {"k_cache", &a.k_cache},
            {"pool_state", &a.pool_state}};
  }
};

// The one device of a list of named tensors; throws naming the odd one out.
Device one_device(std::string_view op, const NamedTensors::List& tensors) {
  const char* first_name = nullptr;
  Device first{};
  for (const auto& [name, tensor] : tensors) {
    if (!tensor->defined()) continue;
    if (first_name == nullptr) {
      first_name = name;
      first = tensor->device;
    } else if (!(tensor->device == first)) {
      detail::fail_argument(
          op, fmt::format("tensors are on different devices: {} is on {} but {} is on {}. Move "
                          "every tensor of the call to one device.",
                          first_name, device_label(first), name, device_label(tensor->device)));
    }
  }
  if (first_name == nullptr) detail::fail_argument(op, "no tensor is given. Pass the op's tensors.");
  return first;
}

}  // namespace

Device common_device(const OpArgs& args) {
  return std::visit([&](const auto& a) { return one_device(to_string(op_of(args)), NamedTensors{}(a)); },
                    args);
}

template <class Args>
Device detail::common_device_of(std::string_view op, const Args& args) {
  return one_device(op, NamedTensors{}(args));
}
template Device detail::common_device_of(std::string_view, const SparseMlaArgs&);
template Device detail::common_device_of(std::string_view, const MlaDecodeArgs&);
template Device detail::common_device_of(std::string_view, const IndexerTopkArgs&);
template Device detail::common_device_of(std::string_view, const IndexerLogitsArgs&);
template Device detail::common_device_of(std::string_view, const KvStoreArgs&);
template Device detail::common_device_of(std::string_view, const IndexerKStoreArgs&);
template Device detail::common_device_of(std::string_view, const LogicalToSlotsArgs&);
template Device detail::common_device_of(std::string_view, const IndexerPoolStoreArgs&);

void check_slot_indices(const int32_t* indices, int64_t rows, int64_t cols, int64_t row_stride,
                        int64_t num_slots, const char* what, const int32_t* row_lens,
                        int64_t row_lens_stride) {
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t used = row_lens ? std::clamp<int64_t>(row_lens[r * row_lens_stride], 0, cols) : cols;
    for (int64_t c = 0; c < used; ++c) {
      const int32_t v = indices[r * row_stride + c];
      if (v < -1 || v >= num_slots) {
        bad_entry(what, r, c, v, fmt::format("-1 (none) or 0..{}", num_slots - 1));
      }
    }
  }
}

void check_block_table(const int32_t* table, int64_t rows, int64_t cols, int64_t row_stride,
                       int64_t num_blocks, const char* what) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const int32_t v = table[r * row_stride + c];
      if (v < 0 || v >= num_blocks) {
        bad_entry(what, r, c, v, fmt::format("block ids 0..{} ({} blocks)", num_blocks - 1,
                                             num_blocks));
      }
    }
  }
}

void check_block_table_prefix(const int32_t* table, int64_t rows, int64_t row_stride,
                              const int64_t* used_blocks, int64_t num_blocks, const char* what) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < used_blocks[r]; ++c) {
      const int32_t v = table[r * row_stride + c];
      if (v < 0 || v >= num_blocks) {
        bad_entry(what, r, c, v,
                  fmt::format("block ids 0..{} ({} blocks) in the first {} entries of row {}, "
                              "the blocks the call reads or writes",
                              num_blocks - 1, num_blocks, used_blocks[r], r));
      }
    }
  }
}

void check_values_in_range(const int32_t* values, int64_t count, int64_t stride, int64_t lo,
                           int64_t hi, const char* what, const char* meaning) {
  for (int64_t i = 0; i < count; ++i) {
    const int32_t v = values[i * stride];
    if (v < lo || v > hi) {
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("{}[{}] = {} is out of range; allowed {}..{} ({}). Fix the value or "
                              "turn check mode off (docs/operations.md says how out-of-range "
                              "values are then treated).",
                              what, i, v, lo, hi, meaning));
    }
  }
}

}  // namespace latte
