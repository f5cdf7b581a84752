// How C++ failures reach Python: every latte::Error becomes an instance of a class from
// latte/errors.py, chosen by its ErrorCode, carrying the C++ message unchanged (docs/python.md,
// "Errors").
#pragma once

#include <nanobind/nanobind.h>

#include <string>

#include "latte/error.hpp"
#include "latte/selector.hpp"

namespace latte::python {

// An error the binding raises itself when the Python class is not the one its code maps to
// (a dtype problem is invalid_argument in C++ but a TypeError in Python).
class BindingError : public Error {
 public:
  BindingError(ErrorCode code, const std::string& message, const char* python_class)
      : Error(code, message), python_class_(python_class) {}
  [[nodiscard]] const char* python_class() const { return python_class_; }

 private:
  const char* python_class_;
};

// Context::select's no_valid_backend error together with the explained Selection, which the
// Python exception carries as `.selection` (for printing the table or reading its JSON).
class NoValidBackend : public Error {
 public:
  NoValidBackend(const Error& error, Selection selection)
      : Error(error.code(), error.what()), selection_(std::move(selection)) {}
  [[nodiscard]] const Selection& selection() const { return selection_; }

 private:
  Selection selection_;
};

// The name of the latte.errors class for `error` ("InvalidArgumentError", "DTypeError", ...).
[[nodiscard]] const char* python_error_class(const Error& error);

void bind_errors(nanobind::module_& m);

}  // namespace latte::python
