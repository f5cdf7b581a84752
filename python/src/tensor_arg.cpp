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

// A strong reference that is released at scope exit (the C API returns new references).
struct Ref {
  PyObject* p;
  explicit Ref(PyObject* object) : p(object) {}
  ~Ref() { Py_XDECREF(p); }
  Ref(const Ref&) = delete;
  Ref& operator=(const Ref&) = delete;
};

// What the descriptor path needs from torch, looked up once torch has been imported by the
// caller (latte never imports it). The references are kept for the process's life.
struct TorchInfo {
  PyTypeObject* tensor = nullptr;     // torch.Tensor
  PyTypeObject* parameter = nullptr;  // torch.nn.Parameter
  PyObject* strided = nullptr;        // torch.strided
  std::vector<std::pair<PyObject*, DType>> dtypes;
  PyObject* raw_stream = nullptr;     // torch._C._cuda_getCurrentRawStream, when torch has CUDA
  bool hip = false;                   // a ROCm torch: its "cuda" tensors are not CUDA memory
};

PyObject* attr_or_null(PyObject* object, const char* name) {
  PyObject* value = object ? PyObject_GetAttrString(object, name) : nullptr;
  if (!value) PyErr_Clear();
  return value;  // a new reference, kept by TorchInfo
}

// Null until the caller has imported torch (then filled once; under the GIL).
const TorchInfo* torch_info() {
  static TorchInfo info;
  static bool ready = false;
  if (ready) return &info;
  PyObject* torch = PyImport_GetModule(nb::str("torch").ptr());  // not an import: sys.modules
  if (!torch) {
    PyErr_Clear();
    return nullptr;
  }
  Ref torch_ref(torch);
  PyObject* tensor = attr_or_null(torch, "Tensor");
  if (!tensor || !PyType_Check(tensor)) {  // torch still importing: try again on a later call
    Py_XDECREF(tensor);
    return nullptr;
  }
  info.tensor = reinterpret_cast<PyTypeObject*>(tensor);
  Ref nn(attr_or_null(torch, "nn"));
  PyObject* parameter = attr_or_null(nn.p, "Parameter");
  if (parameter && PyType_Check(parameter)) {
    info.parameter = reinterpret_cast<PyTypeObject*>(parameter);
  } else {
    Py_XDECREF(parameter);
  }
  info.strided = attr_or_null(torch, "strided");
  const std::pair<const char*, DType> names[] = {
      {"float32", DType::f32}, {"float16", DType::f16}, {"bfloat16", DType::bf16},
      {"float8_e4m3fn", DType::e4m3}, {"int32", DType::i32}, {"uint8", DType::u8}};
  for (const auto& [name, dtype] : names) {
    if (PyObject* d = attr_or_null(torch, name)) info.dtypes.emplace_back(d, dtype);
  }
  Ref c(attr_or_null(torch, "_C"));
  info.raw_stream = attr_or_null(c.p, "_cuda_getCurrentRawStream");
  Ref version(attr_or_null(torch, "version"));
  Ref hip(attr_or_null(version.p, "hip"));
  const int is_hip = hip.p ? PyObject_IsTrue(hip.p) : 0;
  if (is_hip < 0) PyErr_Clear();
  info.hip = is_hip == 1;
  ready = true;
  return &info;
}

PyObject* interned(const char* text) {
  return PyUnicode_InternFromString(text);  // kept for the process's life
}

bool read_int64(PyObject* item, int64_t* out) {
  const long long v = PyLong_AsLongLong(item);
  if (v == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    return false;
  }
  *out = v;
  return true;
}

// The view of a plain torch tensor from its descriptor, or false when anything is not the plain
// case (the caller then takes the DLPack path, which handles or refuses it as before). The
// shape, strides and pointer are torch's own for this tensor, so the view covers exactly the
// tensor's memory; requires_grad does not matter (latte never records autograd), as with the
// detach() the DLPack path does.
bool read_torch(PyObject* object, TensorView* view) {
  const TorchInfo* torch = torch_info();
  if (!torch) return false;
  PyTypeObject* type = Py_TYPE(object);
  if (type != torch->tensor && (torch->parameter == nullptr || type != torch->parameter)) return false;
  static PyObject* const s_layout = interned("layout");
  static PyObject* const s_dtype = interned("dtype");
  static PyObject* const s_is_cuda = interned("is_cuda");
  static PyObject* const s_is_cpu = interned("is_cpu");
  static PyObject* const s_get_device = interned("get_device");
  static PyObject* const s_shape = interned("shape");
  static PyObject* const s_stride = interned("stride");
  static PyObject* const s_data_ptr = interned("data_ptr");

  auto fail = [] {
    PyErr_Clear();
    return false;
  };
  {
    Ref layout(PyObject_GetAttr(object, s_layout));
    if (!layout.p) return fail();
    if (layout.p != torch->strided) return false;  // sparse, mkldnn, jagged: no plain strides
  }
  {
    Ref dtype(PyObject_GetAttr(object, s_dtype));
    if (!dtype.p) return fail();
    bool known = false;
    for (const auto& [object_dtype, latte_dtype] : torch->dtypes) {
      if (dtype.p == object_dtype) {
        view->dtype = latte_dtype;
        known = true;
        break;
      }
    }
    if (!known) return false;  // the DLPack path names the dtype in its error
  }
  {
    Ref is_cuda(PyObject_GetAttr(object, s_is_cuda));
    if (!is_cuda.p) return fail();
    if (is_cuda.p == Py_True) {
      if (torch->hip) return false;  // DLPack names it a ROCm tensor, which latte refuses
      Ref index(PyObject_CallMethodNoArgs(object, s_get_device));
      if (!index.p) return fail();
      int64_t i = 0;
      if (!read_int64(index.p, &i) || i < 0) return false;
      view->device = Device{DeviceKind::cuda, static_cast<int>(i)};
    } else {
      Ref is_cpu(PyObject_GetAttr(object, s_is_cpu));
      if (!is_cpu.p) return fail();
      if (is_cpu.p != Py_True) return false;  // meta, mps, xpu...: the DLPack path refuses them
      view->device = Device{DeviceKind::cpu, 0};
    }
  }
  Ref shape(PyObject_GetAttr(object, s_shape));
  if (!shape.p) return fail();
  if (!PyTuple_Check(shape.p)) return false;  // torch.Size is a tuple
  const Py_ssize_t rank = PyTuple_GET_SIZE(shape.p);
  if (rank > kMaxRank) return false;  // the DLPack path gives the error
  Ref strides(PyObject_CallMethodNoArgs(object, s_stride));
  if (!strides.p) return fail();
  if (!PyTuple_Check(strides.p) || PyTuple_GET_SIZE(strides.p) != rank) return false;
  view->rank = static_cast<int>(rank);
  for (Py_ssize_t d = 0; d < rank; ++d) {
    const auto i = static_cast<size_t>(d);
    if (!read_int64(PyTuple_GET_ITEM(shape.p, d), &view->shape[i]) ||
        !read_int64(PyTuple_GET_ITEM(strides.p, d), &view->strides[i])) {
      return false;
    }
  }
  Ref data(PyObject_CallMethodNoArgs(object, s_data_ptr));
  if (!data.p) return fail();
  const unsigned long long address = PyLong_AsUnsignedLongLong(data.p);
  if (address == static_cast<unsigned long long>(-1) && PyErr_Occurred()) return fail();
  view->data = reinterpret_cast<void*>(static_cast<uintptr_t>(address));
  return true;
}

// latte._tensors' functions, for what the descriptor path does not take.
nb::object tensors_module_attr(const char* name) {
  return nb::module_::import_("latte._tensors").attr(name);
}

}  // namespace

void CallTensor::resolve(nb::handle object, const char* name, const char* op, bool writable) {
  object_ = object;
  view_ = TensorView{};
  if (read_torch(object.ptr(), &view_)) {
    from_torch_ = true;
    return;
  }
  view_ = TensorView{};
  if (TensorArg* arg = nullptr; nb::try_cast<TensorArg*>(object, arg, false) && arg != nullptr) {
    view_ = arg->view();
    return;
  }
  static nb::object* const convert = new nb::object(tensors_module_attr("arg"));  // never freed
  keep_ = (*convert)(object, name, op, nb::arg("writable") = writable);
  view_ = nb::cast<const TensorArg&>(keep_).view();
}

void CallTensor::resolve_optional(nb::handle object, const char* name, const char* op, bool writable) {
  if (object.is_none()) {
    object_ = object;
    view_ = TensorView{};
    return;
  }
  resolve(object, name, op, writable);
}

uintptr_t call_stream(nb::handle stream, const CallTensor& first) {
  PyObject* s = stream.ptr();
  if (PyLong_Check(s) && !PyBool_Check(s)) {
    const unsigned long long handle = PyLong_AsUnsignedLongLong(s);
    if (!(handle == static_cast<unsigned long long>(-1) && PyErr_Occurred())) {
      return static_cast<uintptr_t>(handle);
    }
    PyErr_Clear();  // a negative or huge int: stream_handle says what is wrong or takes it
  } else if (s == Py_None) {
    if (first.view().device.kind == DeviceKind::cpu) return 0;  // no stream on the CPU
    const TorchInfo* torch = torch_info();
    if (first.from_torch() && torch && torch->raw_stream) {
      // torch.cuda.current_stream(device).cuda_stream without making a Stream object.
      Ref index(PyLong_FromLong(first.view().device.index));
      Ref handle(index.p ? PyObject_CallOneArg(torch->raw_stream, index.p) : nullptr);
      if (handle.p && PyLong_Check(handle.p)) {
        const unsigned long long value = PyLong_AsUnsignedLongLong(handle.p);
        if (!(value == static_cast<unsigned long long>(-1) && PyErr_Occurred())) {
          return static_cast<uintptr_t>(value);
        }
      }
      PyErr_Clear();  // fall through to the Python path, which raises what torch raises
    }
  }
  static nb::object* const handle_of = new nb::object(tensors_module_attr("stream_handle"));
  return nb::cast<uintptr_t>((*handle_of)(stream, first.object()));
}

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
      .def_prop_ro("from_descriptor", &TensorArg::from_descriptor,
                   "True when read from a torch tensor's descriptor, False for DLPack.")
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

  m.def(
      "tensor_view",
      [](nb::handle tensor, const std::string& name, const std::string& op, bool writable) {
        CallTensor t;
        t.resolve(tensor, name.c_str(), op.c_str(), writable);
        if (!t.from_torch()) return nb::cast<TensorArg>(t.keep().is_valid() ? nb::handle(t.keep()) : tensor);
        return TensorArg(t.view(), name, nb::borrow(tensor));
      },
      nb::arg("tensor"), nb::arg("name"), nb::arg("op") = "", nb::arg("writable") = false,
      "The view an op call makes of `tensor` (the torch descriptor path or DLPack), as a TensorArg.");
}

}  // namespace latte::python
