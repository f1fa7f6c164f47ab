//===- RuntimeModule.cpp - the tilefuse._runtime extension ----------------===//
//
// Loads and runs ahead-of-time artifacts with the runtime alone: this module
// builds where LLVM/MLIR is absent (TILEFUSE_RUNTIME_ONLY), so a GPU machine
// with only the CUDA toolkit, a compiler and Python runs compiled models.
//
//===----------------------------------------------------------------------===//
#include "python/bindings/ExecutorBindings.h"

namespace py = pybind11;
using namespace tilefuse;

PYBIND11_MODULE(_runtime, m) {
  m.doc() = "tilefuse runtime: load and run compiled artifacts";
  py::register_local_exception<CompileError>(m, "CompileError", PyExc_ValueError);
  python::registerExecutorBindings(m);
}
