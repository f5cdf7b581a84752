#include "errors.hpp"

#include <nanobind/stl/string.h>

#include <new>
#include <string_view>

namespace nb = nanobind;

namespace latte::python {
namespace {

// The validation layer words a dtype mismatch as "<op>: <arg> has dtype <dtype>: got ..."
// (src/ops/arg_check.cpp); that is the one invalid_argument Python reports as a TypeError.
bool is_dtype_problem(const Error& error) {
  return error.code() == ErrorCode::invalid_argument &&
         std::string_view(error.what()).find(" has dtype ") != std::string_view::npos;
}

void raise_python(const Error& error, nb::handle selection) {
  try {
    const nb::object errors = nb::module_::import_("latte.errors");
    const nb::object cls = errors.attr(python_error_class(error));
    const nb::object instance = cls(nb::str(error.what()));
    instance.attr("code") = nb::str(to_string(error.code()).data(), to_string(error.code()).size());
    if (selection.is_valid()) instance.attr("selection") = selection;
    PyErr_SetObject(cls.ptr(), instance.ptr());
  } catch (const nb::python_error& e) {
    // latte.errors itself failed to load: still surface the C++ message.
    PyErr_SetString(PyExc_RuntimeError, error.what());
  }
}

void translate(const std::exception_ptr& thrown, void*) {
  try {
    std::rethrow_exception(thrown);
  } catch (const NoValidBackend& e) {
    nb::object selection = nb::cast(e.selection());
    raise_python(e, selection);
  } catch (const Error& e) {
    raise_python(e, nb::handle());
  } catch (const std::bad_alloc&) {
    // An allocation inside latte that no latte check sized: still a latte error (and, through
    // OutOfMemoryError, a MemoryError).
    raise_python(Error(ErrorCode::out_of_memory,
                       "out of memory: an allocation inside latte failed (std::bad_alloc); free "
                       "memory or make the request smaller"),
                 nb::handle());
  }
}

}  // namespace

const char* python_error_class(const Error& error) {
  if (const auto* binding = dynamic_cast<const BindingError*>(&error)) return binding->python_class();
  if (is_dtype_problem(error)) return "DTypeError";
  switch (error.code()) {
    case ErrorCode::invalid_argument: return "InvalidArgumentError";
    case ErrorCode::not_found: return "NotFoundError";
    case ErrorCode::unsupported: return "UnsupportedError";
    case ErrorCode::no_valid_backend: return "NoValidBackendError";
    case ErrorCode::config_error: return "ConfigError";
    case ErrorCode::policy_error: return "PolicyError";
    case ErrorCode::plugin_error: return "PluginError";
    case ErrorCode::cuda_error: return "CudaError";
    case ErrorCode::out_of_memory: return "OutOfMemoryError";
    case ErrorCode::internal: return "InternalError";
  }
  return "LatteError";
}

void bind_errors(nb::module_& m) {
  nb::register_exception_translator(&translate);
  m.def(
      "_raise_error",
      [](const std::string& code, const std::string& message) {
        if (code == "std::bad_alloc") throw std::bad_alloc();
        for (int c = 0; c <= static_cast<int>(ErrorCode::internal); ++c) {
          const auto ec = static_cast<ErrorCode>(c);
          if (to_string(ec) == code) throw Error(ec, message);
        }
        throw Error(ErrorCode::not_found, "no latte ErrorCode is named '" + code + "'");
      },
      nb::arg("code"), nb::arg("message"),
      "Throws latte::Error(code, message) in C++ (or, for code 'std::bad_alloc', that), to check "
      "the translation to Python.");
}

}  // namespace latte::python
