// One tensor argument of an op: any DLPack producer (torch, numpy, ...) wrapped as a
// latte::TensorView over the producer's own memory. Nothing is copied; the object keeps the
// producer's buffer alive for as long as the view is in use.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <optional>
#include <string>

#include "latte/tensor.hpp"

namespace latte::python {

class TensorArg {
 public:
  // `op` and `name` name the argument in messages ("sparse_mla", "q"). `writable`: the op writes
  // it (a read-only array is refused). `reinterpret`: a latte dtype name ("bf16", "e4m3") to
  // read an unsigned integer array of the same element size as: the Python layer passes numpy
  // ml_dtypes arrays and torch float8 tensors as uint views, which every DLPack consumer reads.
  TensorArg(nanobind::handle object, std::string name, bool writable,
            std::optional<std::string> reinterpret, const std::string& op);

  [[nodiscard]] const TensorView& view() const { return view_; }
  [[nodiscard]] const std::string& name() const { return name_; }

 private:
  nanobind::ndarray<nanobind::ro> readable_;  // one of the two holds the producer's buffer
  nanobind::ndarray<> writable_;
  std::string name_;
  TensorView view_;
};

// The view of an optional argument: an empty TensorView for None.
[[nodiscard]] inline TensorView view_or_absent(const TensorArg* arg) {
  return arg ? arg->view() : TensorView{};
}

void bind_tensor_arg(nanobind::module_& m);

}  // namespace latte::python
