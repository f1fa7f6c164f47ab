//===- ExecutorBindings.h - running programs from Python ----------*- C++ -*-===//
//
// Shared by the compiler module (_core) and the runtime-only module
// (_runtime): arguments from numpy or DLPack, results to numpy or DLPack,
// persistent arguments, reports. Runtime headers only: _runtime builds
// without MLIR.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_PYTHON_EXECUTORBINDINGS_H
#define TILEFUSE_PYTHON_EXECUTORBINDINGS_H

#include "runtime/Executor.h"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <memory>

namespace tilefuse::python {

/// Runs `e` on `args` (numpy arrays, DLPack tensors of the executor's
/// device, None for persistent arguments). Returns the results listed in
/// `which` (None: all) as numpy arrays (out="numpy"), as DLPack-capable
/// device arrays owning a copy (out="dlpack"), or as device arrays viewing
/// the executor's buffers until its next call (out="view": no copy; `self`
/// keeps the executor alive). On the CPU, numpy arrays in every case:
/// results are computed straight into arrays that numpy then owns (from a
/// pool of 64-byte-aligned buffers they return to, so a steady stream of
/// calls touches no fresh pages), or into `into`'s arrays (one per wanted
/// result, or None) where the caller brings them; other results are copied.
/// out="bits": as "numpy", with bf16 results as uint16 arrays of their bits
/// (numpy has no bf16). A bf16 argument may always be given that way.
pybind11::list runExecutor(Executor &e, const pybind11::sequence &args,
                           const pybind11::object &which, const std::string &out,
                           std::shared_ptr<void> self = nullptr,
                           const pybind11::object &into = pybind11::none());
/// One dict per step: name, kind, ops, bytes, launch shape.
pybind11::list programKernels(const Program &p);
/// The program's memory plan for people: peak, lower bound, unplanned
/// size, and per arena buffer its size, offset, live range, phase and
/// writer (see runtime/MemoryPlan.h); "text" is formatMemoryPlan's table.
pybind11::dict programMemoryPlan(const Program &p);
void makePersistent(Executor &e, size_t i, const pybind11::array &a);
pybind11::array persistentValue(Executor &e, size_t i);

/// Binds process group `group` of `e`'s program to `comm`, a Python object
/// with rank(), size(), start(kind, reduce, root, input, output) -> handle
/// and wait(handle) (tilefuse.distributed's, over torch.distributed).
/// start() gets numpy arrays viewing the executor's buffers (bf16 as
/// uint16), valid until the matching wait() returns.
void setPythonCommunicator(Executor &e, const std::string &group, const pybind11::object &comm);

/// Registers DeviceArray, Program (an executor), load_artifact and
/// cuda_devices in `m`; module-local, so both modules may do it.
void registerExecutorBindings(pybind11::module_ &m);

} // namespace tilefuse::python

#endif // TILEFUSE_PYTHON_EXECUTORBINDINGS_H
