// latte._latte: the compiled half of the `latte` Python package. The public, documented API is
// the pure-Python layer in latte/ (argument normalization, output allocation, streams); this
// module is the thin layer over the C++ API it calls (docs/python.md).
#include <nanobind/nanobind.h>

#include "bindings.hpp"

NB_MODULE(_latte, m) {
  m.doc() = "latte's C++ API (internal: use the `latte` package)";
  latte::python::bind_errors(m);
  latte::python::bind_tensor_arg(m);
  latte::python::bind_ops(m);
  latte::python::bind_selection(m);
  latte::python::bind_system(m);
  latte::python::bind_workload(m);
}
