// One tensor argument of an op: any DLPack producer (torch, numpy, ...) wrapped as a
// latte::TensorView over the producer's own memory. Nothing is copied; the object keeps the
// producer's buffer alive for as long as the view is in use.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
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
  // A view read elsewhere (a torch tensor's descriptor); `owner` keeps its memory alive.
  TensorArg(const TensorView& view, std::string name, nanobind::object owner)
      : owner_(std::move(owner)), name_(std::move(name)), view_(view), descriptor_(true) {}

  [[nodiscard]] const TensorView& view() const { return view_; }
  [[nodiscard]] const std::string& name() const { return name_; }
  [[nodiscard]] bool from_descriptor() const { return descriptor_; }

 private:
  nanobind::object owner_;                    // the tensor, for a descriptor-made view
  nanobind::ndarray<nanobind::ro> readable_;  // or one of these two holds the DLPack buffer
  nanobind::ndarray<> writable_;
  std::string name_;
  TensorView view_;
  bool descriptor_ = false;
};

// The view of an optional argument: an empty TensorView for None.
[[nodiscard]] inline TensorView view_or_absent(const TensorArg* arg) {
  return arg ? arg->view() : TensorView{};
}

// One tensor argument of an op call, resolved to a view for the call's duration:
// - a torch.Tensor (or nn.Parameter, exactly those types) on the CPU or a CUDA device, with a
//   dtype latte takes and a strided layout: read from its descriptor (data_ptr, shape, stride,
//   dtype, device) with a few attribute reads, no DLPack capsule and no Python objects made;
// - a TensorArg: its view;
// - anything else (numpy, other DLPack producers, torch subclasses, dtypes or devices latte
//   refuses): latte._tensors.arg, the DLPack path, which also raises the errors.
// Validation of shapes, dtypes and strides stays with latte::validate in every case.
class CallTensor {
 public:
  CallTensor() = default;
  // `name` and `op` name the argument in the DLPack path's messages.
  void resolve(nanobind::handle object, const char* name, const char* op, bool writable);
  // None -> absent (an empty view).
  void resolve_optional(nanobind::handle object, const char* name, const char* op, bool writable);

  [[nodiscard]] const TensorView& view() const { return view_; }
  [[nodiscard]] bool from_torch() const { return from_torch_; }
  [[nodiscard]] nanobind::handle object() const { return object_; }
  // The TensorArg the DLPack path made (invalid on the other paths).
  [[nodiscard]] const nanobind::object& keep() const { return keep_; }

 private:
  TensorView view_;
  nanobind::handle object_;  // what the caller passed (alive: the call holds it)
  nanobind::object keep_;    // the TensorArg the DLPack path made
  bool from_torch_ = false;
};

// The stream of a call whose first tensor is `first`: `stream` as an int handle, or (None) torch's
// current raw stream on the device of a torch CUDA tensor, 0 on the CPU; any other stream object
// or producer goes through latte._tensors.stream_handle.
[[nodiscard]] uintptr_t call_stream(nanobind::handle stream, const CallTensor& first);

void bind_tensor_arg(nanobind::module_& m);

}  // namespace latte::python
