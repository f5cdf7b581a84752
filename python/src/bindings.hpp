// One function per source file, each adding its part of latte._latte.
#pragma once

#include <nanobind/nanobind.h>

namespace latte::python {

void bind_errors(nanobind::module_& m);      // errors.cpp: latte::Error -> latte.errors classes
void bind_tensor_arg(nanobind::module_& m);  // tensor_arg.cpp: DLPack -> TensorView
void bind_ops(nanobind::module_& m);         // ops.cpp: the seven ops
void bind_selection(nanobind::module_& m);   // selection.cpp: select, Selection
void bind_system(nanobind::module_& m);      // system.cpp: devices, backends, plugins, policy
void bind_workload(nanobind::module_& m);    // workload.cpp: run_dsa_step

}  // namespace latte::python
