#include "ops/arg_check.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>

#include "latte/error.hpp"

namespace latte::detail {
namespace {

std::string dtype_list(std::initializer_list<DType> dtypes) {
  std::string out;
  for (DType d : dtypes) out += fmt::format("{}{}", out.empty() ? "" : " or ", to_string(d));
  return out;
}

}  // namespace

std::string LayoutText::str() const {
  switch (count_) {
    case 1: return fmt::format(fmt::runtime(pattern_), args_[0]);
    case 2: return fmt::format(fmt::runtime(pattern_), args_[0], args_[1]);
    case 3: return fmt::format(fmt::runtime(pattern_), args_[0], args_[1], args_[2]);
    default: return std::string(pattern_);
  }
}

ArgCheck::ArgCheck(std::string_view op, std::string_view name, const TensorView& tensor, LayoutText layout)
    : op_(op), name_(name), tensor_(tensor), layout_(layout) {}

void ArgCheck::fail(std::string_view problem, std::string_view fix) const {
  throw Error(ErrorCode::invalid_argument,
              fmt::format("{}: {} {}: got {}; expected {}. {}", op_, name_, problem,
                          tensor_.describe(), layout_.str(), fix));
}

void fail_argument(std::string_view op, std::string_view message) {
  throw Error(ErrorCode::invalid_argument, fmt::format("{}: {}", op, message));
}

bool no_elements(const TensorView& t) {
  for (int d = 0; d < t.rank; ++d) {
    if (t.size(d) == 0) return true;
  }
  return false;
}

bool byte_extent(const TensorView& t, int64_t* bytes) {
  *bytes = 0;
  int64_t last = 0;  // offset of the farthest element, in elements
  bool overflow = false;
  for (int d = 0; d < t.rank; ++d) {
    if (t.size(d) == 0) return true;
    int64_t term = 0;
    overflow = overflow || __builtin_mul_overflow(t.size(d) - 1, t.stride(d), &term) ||
               __builtin_add_overflow(last, term, &last);
  }
  return !overflow && !__builtin_add_overflow(last, 1, &last) &&
         !__builtin_mul_overflow(last, static_cast<int64_t>(dtype_size(t.dtype)), bytes);
}

namespace {

// Bytes [begin, end) of a tensor; begin == end for one that holds none, and for a malformed
// one (its own checks report it).
struct ByteRange {
  std::uintptr_t begin, end;  // no initializers: the per-call arrays are filled, not zeroed
  [[nodiscard]] static ByteRange of(const TensorView& t) {
    if (!t.defined() || t.rank < 1 || t.rank > kMaxRank) return {0, 0};
    for (int d = 0; d < t.rank; ++d) {
      if (t.size(d) < 0 || t.stride(d) < 0) return {0, 0};
    }
    int64_t bytes = 0;
    if (!byte_extent(t, &bytes)) return {0, 0};
    const auto begin = reinterpret_cast<std::uintptr_t>(t.data);
    return {begin, begin + static_cast<std::uintptr_t>(bytes)};
  }
  [[nodiscard]] bool overlaps(const ByteRange& o) const {
    return begin < end && o.begin < o.end && begin < o.end && o.begin < end;
  }
};

}  // namespace

void check_outputs_apart(std::string_view op, std::initializer_list<NamedView> outputs,
                         std::initializer_list<NamedView> inputs) {
  // Runs on every call: each range is computed once, and strings are made only for an error.
  constexpr std::size_t kMaxTensors = 10;  // the most a call has (sparse_mla over positions)
  if (outputs.size() + inputs.size() > kMaxTensors) {
    throw Error(ErrorCode::internal, fmt::format("{}: more tensors than check_outputs_apart "
                                                 "compares", op));
  }
  const NamedView* views[kMaxTensors];
  ByteRange ranges[kMaxTensors];
  std::size_t n = 0;
  for (const NamedView& v : outputs) views[n++] = &v;
  for (const NamedView& v : inputs) views[n++] = &v;
  for (std::size_t i = 0; i < n; ++i) ranges[i] = ByteRange::of(views[i]->tensor);
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    for (std::size_t j = i + 1; j < n; ++j) {
      if (!ranges[i].overlaps(ranges[j])) continue;
      const NamedView& out = *views[i];
      const NamedView& other = *views[j];
      if (other.tensor.device != out.tensor.device) continue;  // common_device reports that
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("{}: {} shares memory with {}: {} covers bytes [{:#x}, {:#x}) and "
                              "{} covers [{:#x}, {:#x}); got {} = {} and {} = {}. A backend may "
                              "write {} before it has read what it overlaps, which gives a wrong "
                              "result. Pass as {} a tensor that does not share memory with {}.",
                              op, out.name, other.name, out.name, ranges[i].begin, ranges[i].end,
                              other.name, ranges[j].begin, ranges[j].end, out.name,
                              out.tensor.describe(), other.name, other.tensor.describe(),
                              out.name, out.name, other.name));
    }
  }
}

ArgCheck& ArgCheck::required() {
  if (!present()) fail("is absent", fmt::format("Pass {} (it is required).", name_));
  return *this;
}

ArgCheck& ArgCheck::rank(int expected) {
  if (tensor_.rank != expected) {
    fail(fmt::format("has rank {}", tensor_.rank),
         fmt::format("Pass {} with {} dimensions, laid out as {}.", name_, expected, layout_.str()));
  }
  return *this;
}

ArgCheck& ArgCheck::dtype(DType expected) { return dtype_in({expected}); }

ArgCheck& ArgCheck::dtype_in(std::initializer_list<DType> accepted) {
  if (std::find(accepted.begin(), accepted.end(), tensor_.dtype) == accepted.end()) {
    fail(fmt::format("has dtype {}", to_string(tensor_.dtype)),
         fmt::format("Convert {} to {}.", name_, dtype_list(accepted)));
  }
  return *this;
}

ArgCheck& ArgCheck::memory() {
  bool empty = false;
  for (int d = 0; d < tensor_.rank; ++d) {
    if (tensor_.size(d) < 0) {
      fail(fmt::format("has a negative size in dimension {}", d), "Sizes must be >= 0.");
    }
    empty = empty || tensor_.size(d) == 0;
  }
  if (empty) return *this;  // any strides, any pointer (a T = 0 call)
  // Offsets of the farthest element and byte counts must fit in int64 (a garbage shape would
  // otherwise wrap around and pass the checks below).
  int64_t count = static_cast<int64_t>(dtype_size(tensor_.dtype)), extent = 0;
  bool overflow = false;
  for (int d = 0; d < tensor_.rank; ++d) {
    if (tensor_.stride(d) < 0) {
      fail(fmt::format("has a negative stride in dimension {}", d),
           "Pass a view with non-negative strides (flip the data instead of the view).");
    }
    overflow = overflow || __builtin_mul_overflow(count, tensor_.size(d), &count);
  }
  if (overflow || !byte_extent(tensor_, &extent)) {
    fail("is too large: its sizes and strides overflow 64-bit offsets", "Check them.");
  }
  if (tensor_.data == nullptr) {
    fail("has a null data pointer", fmt::format("Point {} at its memory.", name_));
  }
  const auto element = static_cast<std::uintptr_t>(dtype_size(tensor_.dtype));
  if (reinterpret_cast<std::uintptr_t>(tensor_.data) % element != 0) {
    fail(fmt::format("data pointer {} is not aligned to its {}-byte elements", tensor_.data,
                     element),
         "Pass memory aligned to the element size.");
  }
  const int last = tensor_.rank - 1;
  if (last >= 0 && tensor_.size(last) > 1 && tensor_.stride(last) != 1) {
    fail(fmt::format("has stride {} in its last dimension", tensor_.stride(last)),
         "The last dimension must be contiguous (stride 1): pass a contiguous copy.");
  }
  return *this;
}

ArgCheck& ArgCheck::vector_rows() {
  if (no_elements(tensor_)) return *this;
  const auto element = static_cast<int64_t>(dtype_size(tensor_.dtype));
  if (reinterpret_cast<std::uintptr_t>(tensor_.data) % 16 != 0) {
    fail(fmt::format("data pointer {} is not 16-byte aligned", tensor_.data),
         "Kernels load these rows with 16-byte vectors: allocate 16-byte aligned memory (torch, "
         "numpy and cudaMalloc do) and do not start the view mid-row.");
  }
  for (int d = 0; d + 1 < tensor_.rank; ++d) {
    if (tensor_.size(d) > 1 && (tensor_.stride(d) * element) % 16 != 0) {
      fail(fmt::format("stride {} of dimension {} is {} bytes, not a multiple of 16",
                       tensor_.stride(d), d, tensor_.stride(d) * element),
           "Kernels load these rows with 16-byte vectors: pad rows to a multiple of 16 bytes "
           "or pass a contiguous tensor.");
    }
  }
  return *this;
}

ArgCheck& ArgCheck::non_overlapping() {
  if (no_elements(tensor_)) return *this;
  // span = elements covered by dimensions d+1.. (1 + sum of (size-1)*stride).
  int64_t span = 1;
  for (int d = tensor_.rank - 1; d >= 0; --d) {
    const int64_t n = tensor_.size(d);
    if (n > 1 && d < tensor_.rank - 1 && tensor_.stride(d) < span) {
      fail(fmt::format("overlaps itself: stride {} of dimension {} is smaller than the {} "
                       "elements inside it",
                       tensor_.stride(d), d, span),
           "Pass a row-major tensor (rows may be padded, never overlapping).");
    }
    if (n > 0) span += (n - 1) * tensor_.stride(d);
  }
  return *this;
}

ArgCheck& ArgCheck::size(int dim, int64_t expected, std::string_view source) {
  if (tensor_.size(dim) != expected) {
    fail(fmt::format("has {} in dimension {}, not {} ({})", tensor_.size(dim), dim, expected,
                     source),
         fmt::format("Make the sizes of {} agree with the other arguments.", name_));
  }
  return *this;
}

ArgCheck& ArgCheck::size_in(int dim, int64_t lo, int64_t hi, std::string_view meaning,
                            std::string_view fix) {
  const int64_t n = tensor_.size(dim);
  if (n < lo || n > hi) {
    fail(fmt::format("has {} = {} in dimension {}, outside {}..{}", meaning, n, dim, lo, hi), fix);
  }
  return *this;
}

}  // namespace latte::detail
