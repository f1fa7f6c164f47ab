//===- Conversions.h - numpy <-> HostTensor ----------------------*- C++ -*-===//
#ifndef TILEFUSE_PYTHON_CONVERSIONS_H
#define TILEFUSE_PYTHON_CONVERSIONS_H

#include "runtime/HostTensor.h"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

namespace tilefuse::python {

/// numpy dtype of a tilefuse dtype (bf16 is returned as float32).
pybind11::dtype numpyDType(DType t);
/// tilefuse dtype of a numpy array; throws CompileError for unsupported ones.
DType dtypeOfArray(const pybind11::array &a);
/// Copies `a` into a tensor of `want` (what the graph declares). Only the
/// exact dtype is accepted, except float32 data for a bf16 argument.
HostTensor toHostTensor(const pybind11::array &a, const TensorSignature &want,
                        const std::string &what);
/// Copies `a` with its own dtype.
HostTensor toHostTensor(const pybind11::array &a);
pybind11::array toNumpy(const HostTensor &t);

} // namespace tilefuse::python

#endif // TILEFUSE_PYTHON_CONVERSIONS_H
