//===- Npy.h - tensors as numpy .npy files -------------------------*- C++ -*-===//
//
// tilefuse-run reads its inputs from and writes its results to .npy files,
// the format numpy's save/load speak, so a model can be run on real data
// with the runtime alone.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_RUNTIME_NPY_H
#define TILEFUSE_RUNTIME_NPY_H

#include "runtime/HostTensor.h"

#include <string>

namespace tilefuse {

/// Reads a little-endian, C-ordered .npy file of f16/f32/f64/i32/i64/bool;
/// throws CompileError naming the file and what is wrong with it.
HostTensor readNpy(const std::string &path);
/// Writes `t` as a .npy file (bf16 as float32, which numpy lacks).
void writeNpy(const std::string &path, const HostTensor &t);

} // namespace tilefuse

#endif // TILEFUSE_RUNTIME_NPY_H
