// Internal: the checks validate.cpp applies to one tensor argument, each throwing
// latte::Error(invalid_argument) as "<op>: <arg> <problem>: got <tensor>; expected <layout>.
// <fix>". Kept apart from validate.cpp so that the per-op rules there read as a list.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include "latte/dtype.hpp"
#include "latte/ops.hpp"
#include "latte/tensor.hpp"

namespace latte::detail {

// The expected form of an argument in words, e.g. "[T, H, 512] = [{}, {}, 512] bf16" with up
// to three sizes for the {} fields. Formatted only when a check fails: validation runs on
// every call, and a successful one should cost no string work.
class LayoutText {
 public:
  LayoutText(const char* pattern) : pattern_(pattern) {}  // NOLINT: implicit from a literal
  LayoutText(std::string_view pattern, int64_t a) : pattern_(pattern), args_{a, 0, 0}, count_(1) {}
  LayoutText(std::string_view pattern, int64_t a, int64_t b) : pattern_(pattern), args_{a, b, 0}, count_(2) {}
  LayoutText(std::string_view pattern, int64_t a, int64_t b, int64_t c)
      : pattern_(pattern), args_{a, b, c}, count_(3) {}
  [[nodiscard]] std::string str() const;

 private:
  std::string_view pattern_;
  int64_t args_[3] = {0, 0, 0};
  int count_ = 0;
};

// Holds views: `op`, `name` and `tensor` must outlive the check (literals and the caller's
// arguments do).
class ArgCheck {
 public:
  ArgCheck(std::string_view op, std::string_view name, const TensorView& tensor, LayoutText layout);

  [[nodiscard]] bool present() const { return tensor_.defined(); }
  const TensorView& tensor() const { return tensor_; }

  ArgCheck& required();  // absent -> error; optional arguments skip this and test present()
  ArgCheck& rank(int expected);
  ArgCheck& dtype(DType expected);
  ArgCheck& dtype_in(std::initializer_list<DType> accepted);
  // Non-negative sizes and strides, non-null data when non-empty, data aligned to the element
  // size, last dimension contiguous (stride 1). The stride, pointer and alignment rules (here,
  // in vector_rows and in non_overlapping) skip a tensor with no elements: it is never read or
  // written, and producers give such tensors any strides (numpy 2 gives zeros).
  ArgCheck& memory();
  // 16-byte aligned data and every non-last stride a multiple of 16 bytes (vector loads).
  ArgCheck& vector_rows();
  // Row-major with optional padding: each stride covers everything inside it, so no two
  // elements share an address (required of everything a kernel writes, and of caches).
  ArgCheck& non_overlapping();
  // Dimension `dim` must equal `expected`; `source` says where the value comes from
  // ("T, the tokens of q").
  ArgCheck& size(int dim, int64_t expected, std::string_view source);
  ArgCheck& size_in(int dim, int64_t lo, int64_t hi, std::string_view meaning,
                    std::string_view fix);

  [[noreturn]] void fail(std::string_view problem, std::string_view fix) const;

 private:
  std::string_view op_;
  std::string_view name_;
  const TensorView& tensor_;
  LayoutText layout_;
};

[[noreturn]] void fail_argument(std::string_view op, std::string_view message);

// True when some size is 0 (with sizes already checked >= 0).
[[nodiscard]] bool no_elements(const TensorView& t);

// Bytes from t.data to the end of t's farthest element, (1 + sum (size-1) * stride) elements;
// 0 for a tensor with no elements. False when that overflows int64. Sizes and strides must be
// non-negative (memory() checks them first).
[[nodiscard]] bool byte_extent(const TensorView& t, int64_t* bytes);

// One tensor of a call, as messages name it.
struct NamedView {
  std::string_view name;
  const TensorView& tensor;
};

// Refuses an output whose bytes [data, data + byte_extent) overlap those of an input or of
// another output: a backend may write an output before it has read what it overlaps, which
// gives a silently wrong result. Absent tensors and tensors with no elements hold no bytes;
// malformed ones (negative sizes or strides, extents past int64) are left to their own checks.
void check_outputs_apart(std::string_view op, std::initializer_list<NamedView> outputs,
                         std::initializer_list<NamedView> inputs);

// Every tensor of a call on one device (that device); throws naming the odd one out. Defined
// for each op's Args struct.
template <class Args>
Device common_device_of(std::string_view op, const Args& args);

}  // namespace latte::detail
