//===- CudnnAbi.h - the part of cuDNN 9's C ABI the runtime calls --*- C++ -*-===//
//
// Declared here rather than taken from cudnn.h: a machine that runs
// tilefuse's CUDA programs may have cuDNN's library (PyTorch's wheels bring
// it) but not its headers, and the library is only loaded at run time. The
// values are cuDNN's (cudnn_graph.h, cudnn_ops.h, cudnn_cnn.h); the
// functions are its convolution API, present through cuDNN 9. The driver
// double (tests/unit/fakecuda) implements the same declarations.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_RUNTIME_CUDNNABI_H
#define TILEFUSE_RUNTIME_CUDNNABI_H

#include <cstddef>

namespace tilefuse::cudnn_abi {

using Status = int; ///< cudnnStatus_t; 0 is success
using Handle = void *;
using TensorDesc = void *;
using FilterDesc = void *;
using ConvDesc = void *;

enum DataType : int { kFloat = 0, kDouble = 1, kHalf = 2, kBfloat16 = 9 };
enum MathType : int { kDefaultMath = 0, kTensorOpMath = 1, kFmaMath = 3 };
enum : int { kTensorNchw = 0 };         ///< cudnnTensorFormat_t
enum : int { kCrossCorrelation = 1 };   ///< cudnnConvolutionMode_t
enum : int { kDeterministic = 1 };      ///< cudnnDeterminism_t
enum : int { kStatusNotSupported = 9 }; ///< CUDNN_STATUS_NOT_SUPPORTED

/// cudnnConvolution{Fwd,BwdData,BwdFilter}AlgoPerf_t: the three share
/// this layout.
struct AlgoPerf {
  int algo;
  Status status;
  float time;
  size_t memory;
  int determinism;
  int mathType;
  int reserved[3];
};

// Function types, by cuDNN's names.
using CreateFn = Status (*)(Handle *);
using DestroyFn = Status (*)(Handle);
using SetStreamFn = Status (*)(Handle, void *stream);
using GetErrorStringFn = const char *(*)(Status);
using GetVersionFn = size_t (*)();
using CreateDescFn = Status (*)(void **);
using DestroyDescFn = Status (*)(void *);
using SetTensorNdFn = Status (*)(TensorDesc, int type, int dims, const int *sizes,
                                 const int *strides);
using SetFilterNdFn = Status (*)(FilterDesc, int type, int format, int dims, const int *sizes);
using SetConvNdFn = Status (*)(ConvDesc, int spatial, const int *pad, const int *stride,
                               const int *dilation, int mode, int computeType);
using SetConvIntFn = Status (*)(ConvDesc, int);
/// cudnnGetConvolution{Forward,BackwardData,BackwardFilter}Algorithm_v7,
/// with the descriptors in the order each takes them (forward: x, w, conv,
/// y; backward data: w, dy, conv, dx; backward filter: x, dy, conv, dw).
using GetAlgorithmFn = Status (*)(Handle, void *, void *, ConvDesc, void *, int requested,
                                  int *returned, AlgoPerf *);
/// cudnnGetConvolution{...}WorkspaceSize, descriptors as above.
using WorkspaceSizeFn = Status (*)(Handle, void *, void *, ConvDesc, void *, int algo,
                                   size_t *bytes);
/// cudnnConvolution{Forward,BackwardData,BackwardFilter}: (handle, alpha,
/// desc a, a, desc b, b, conv, algo, workspace, bytes, beta, desc out, out).
using ConvolveFn = Status (*)(Handle, const void *alpha, void *, const void *, void *,
                              const void *, ConvDesc, int algo, void *workspace, size_t bytes,
                              const void *beta, void *, void *);

} // namespace tilefuse::cudnn_abi

#endif // TILEFUSE_RUNTIME_CUDNNABI_H
