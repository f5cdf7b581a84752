#include "tensor_arg.hpp"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <vector>

#include "errors.hpp"
#include "latte/dtype.hpp"

namespace nb = nanobind;
namespace dl = nanobind::dlpack;

namespace latte::python {
namespace {

// DLPack device types (dlpack.h): host memory, device memory, pinned and managed memory.
constexpr int kDLCPU = 1;
constexpr int kDLCUDA = 2;
constexpr int kDLCUDAHost = 3;
constexpr int kDLCUDAManaged = 13;

std::string dlpack_dtype_name(dl::dtype t) {
  std::string base;
  switch (static_cast<dl::dtype_code>(t.code)) {
    case dl::dtype_code::Int: base = "int"; break;
    case dl::dtype_code::UInt: base = "uint"; break;
    case dl::dtype_code::Float: base = "float"; break;
    case dl::dtype_code::Bfloat: base = "bfloat"; break;
    case dl::dtype_code::Complex: base = "complex"; break;
    case dl::dtype_code::Bool: return "bool";
    case dl::dtype_code::Float8_E4M3FN: return "float8_e4m3fn";
    case dl::dtype_code::Float8_E5M2: return "float8_e5m2";
    default: return "DLPack type code " + std::to_string(t.code) + " (" + std::to_string(t.bits) + " bits)";
  }
  std::string name = base + std::to_string(t.bits);
  if (t.lanes != 1) name += "x" + std::to_string(t.lanes);
  return name;
}

std::optional<DType> latte_dtype(dl::dtype t) {
  if (t.lanes != 1) return std::nullopt;
  switch (static_cast<dl::dtype_code>(t.code)) {
    case dl::dtype_code::Float:
      if (t.bits == 32) return DType::f32;
      if (t.bits == 16) return DType::f16;
      return std::nullopt;
    case dl::dtype_code::Bfloat: return t.bits == 16 ? std::optional(DType::bf16) : std::nullopt;
    case dl::dtype_code::Int: return t.bits == 32 ? std::optional(DType::i32) : std::nullopt;
    case dl::dtype_code::UInt: return t.bits == 8 ? std::optional(DType::u8) : std::nullopt;
    case dl::dtype_code::Float8_E4M3FN: return t.bits == 8 ? std::optional(DType::e4m3) : std::nullopt;
    default: return std::nullopt;
  }
}

[[noreturn]] void dtype_error(const std::string& name, const std::string& got) {
  throw BindingError(ErrorCode::invalid_argument,
                     name + " has dtype " + got +
                         ", which latte does not take: latte's tensors are float32, float16, "
                         "bfloat16, float8_e4m3fn, int32 or uint8. Convert it to the dtype "
                         "docs/operations.md gives for this argument (index tensors: "
                         "x.to(torch.int32) or x.astype(numpy.int32)).",
                     "DTypeError");
}

DType resolve_dtype(const std::string& name, dl::dtype t, const std::optional<std::string>& reinterpret) {
  if (!reinterpret) {
    const auto dtype = latte_dtype(t);
    if (!dtype) dtype_error(name, dlpack_dtype_name(t));
    return *dtype;
  }
  const auto target = parse_dtype(*reinterpret);
  if (!target) {
    throw BindingError(ErrorCode::invalid_argument,
                       name + ": reinterpret dtype '" + *reinterpret +
                           "' is not a latte dtype (f32, f16, bf16, e4m3, i32, u8)",
                       "InvalidArgumentError");
  }
  const bool same_size_uint = static_cast<dl::dtype_code>(t.code) == dl::dtype_code::UInt &&
                              t.lanes == 1 && t.bits == dtype_size(*target) * 8;
  if (!same_size_uint) {
    throw BindingError(ErrorCode::invalid_argument,
                       name + " is a " + dlpack_dtype_name(t) + " view, which cannot be read as " +
                           *reinterpret + " (that needs a uint" +
                           std::to_string(dtype_size(*target) * 8) + " view of the same memory)",
                       "DTypeError");
  }
  return *target;
}

Device resolve_device(const std::string& name, int type, int id) {
  switch (type) {
    case kDLCPU:
    case kDLCUDAHost: return Device{DeviceKind::cpu, 0};  // pinned host memory is host memory
    case kDLCUDA:
    case kDLCUDAManaged: return Device{DeviceKind::cuda, id};
    default:
      throw BindingError(ErrorCode::invalid_argument,
                         name + " lives on DLPack device type " + std::to_string(type) +
                             ", which latte cannot read: pass a CPU or CUDA tensor",
                         "InvalidArgumentError");
  }
}

template <typename Array>
TensorView make_view(const Array& a, const std::string& name, const std::optional<std::string>& reinterpret) {
  if (a.ndim() > static_cast<size_t>(kMaxRank)) {
    throw BindingError(ErrorCode::invalid_argument,
                       name + " has " + std::to_string(a.ndim()) + " dimensions; latte tensors have at most " +
                           std::to_string(kMaxRank),
                       "InvalidArgumentError");
  }
  TensorView v;
  v.data = const_cast<void*>(static_cast<const void*>(a.data()));
  v.dtype = resolve_dtype(name, a.dtype(), reinterpret);
  v.rank = static_cast<int>(a.ndim());
  // DLPack allows null strides for a compact row-major tensor.
  int64_t running = 1;
  for (int d = v.rank - 1; d >= 0; --d) {
    const auto i = static_cast<size_t>(d);
    v.shape[i] = static_cast<int64_t>(a.shape(i));
    v.strides[i] = a.stride_ptr() ? a.stride(i) : running;
    running *= v.shape[i];
  }
  v.device = resolve_device(name, a.device_type(), a.device_id());
  return v;
}

std::string python_type_name(nb::handle object) {
  const nb::handle type = nb::handle(reinterpret_cast<PyObject*>(Py_TYPE(object.ptr())));
  return nb::cast<std::string>(nb::str("{}.{}").format(type.attr("__module__"), type.attr("__qualname__")));
}

// Why an object could not be read as a tensor, in words.
std::string not_a_tensor(nb::handle object) {
  const bool exporter = nb::hasattr(object, "__dlpack__") || PyObject_CheckBuffer(object.ptr());
  if (exporter) {
    return "a " + python_type_name(object) +
           " whose DLPack / buffer export failed (its producer cannot export this dtype or "
           "layout; ml_dtypes arrays and torch float8 tensors go through latte's op functions)";
  }
  return "a " + python_type_name(object) + ", which has no DLPack or buffer interface";
}

}  // namespace

TensorArg::TensorArg(nb::handle object, std::string name, bool writable,
                     std::optional<std::string> reinterpret, const std::string& op)
    : name_(std::move(name)) {
  const std::string what = op.empty() ? name_ : op + ": " + name_;  // for messages
  // No implicit conversion: a tensor that does not fit is an error, never a silent copy.
  if (writable) {
    if (!nb::try_cast(object, writable_, false)) {
      const bool readable = nb::try_cast(object, readable_, false);
      throw BindingError(ErrorCode::invalid_argument,
                         what + " must be a writable tensor (latte writes its result there); got " +
                             (readable ? "a read-only " + python_type_name(object) : not_a_tensor(object)),
                         readable ? "InvalidArgumentError" : "ArgumentTypeError");
    }
    view_ = make_view(writable_, what, reinterpret);
  } else {
    if (!nb::try_cast(object, readable_, false)) {
      throw BindingError(ErrorCode::invalid_argument,
                         what + " must be a tensor (torch.Tensor, numpy.ndarray or any DLPack "
                                 "producer); got " + not_a_tensor(object),
                         "ArgumentTypeError");
    }
    view_ = make_view(readable_, what, reinterpret);
  }
}

void bind_tensor_arg(nb::module_& m) {
  nb::class_<TensorArg>(m, "TensorArg",
                        "One op argument: a DLPack tensor wrapped without a copy (internal; the "
                        "op functions of latte build these).")
      .def(nb::init<nb::handle, std::string, bool, std::optional<std::string>, const std::string&>(),
           nb::arg("tensor"), nb::arg("name"), nb::arg("writable") = false,
           nb::arg("reinterpret") = nb::none(), nb::arg("op") = "")
      .def_prop_ro("name", &TensorArg::name)
      .def_prop_ro("data_ptr", [](const TensorArg& t) { return reinterpret_cast<uintptr_t>(t.view().data); })
      .def_prop_ro("shape", [](const TensorArg& t) {
        const TensorView& v = t.view();
        return std::vector<int64_t>(v.shape.begin(), v.shape.begin() + v.rank);
      })
      .def_prop_ro("dtype", [](const TensorArg& t) { return std::string(to_string(t.view().dtype)); })
      .def_prop_ro("device", [](const TensorArg& t) {
        const Device d = t.view().device;
        return d.kind == DeviceKind::cpu ? std::string("cpu") : "cuda:" + std::to_string(d.index);
      })
      .def("describe", [](const TensorArg& t) { return t.view().describe(); },
           "The view as latte sees it: 'bf16[4, 64, 576] strides [36864, 576, 1] on cpu'.")
      .def("__repr__", [](const TensorArg& t) { return "<latte TensorArg " + t.name() + ": " + t.view().describe() + ">"; });
}

}  // namespace latte::python
