//===- CudaLibrary.h - the CUDA runtime's own kernels --------------*- C++ -*-===//
//
// Library steps of a Program (embedding gather, scatter-add) need kernels
// that no tile program provides. Their CUDA C is compiled with a graph's
// kernels into the kCudaLibraryBlob cubin (runtime/CudaExecutor.h), so the
// runtime never compiles anything.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_CODEGEN_CUDA_CUDALIBRARY_H
#define TILEFUSE_CODEGEN_CUDA_CUDALIBRARY_H

#include <string>

namespace tilefuse {

/// CUDA C defining every kernel of kCudaLibraryKernels.
const std::string &cudaLibrarySource();

} // namespace tilefuse

#endif // TILEFUSE_CODEGEN_CUDA_CUDALIBRARY_H
