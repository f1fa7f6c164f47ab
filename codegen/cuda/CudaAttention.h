//===- CudaAttention.h - fused attention kernels for CUDA ----------*- C++ -*-===//
//
// graph.attention and graph.attention_grad on CUDA: FlashAttention-2's
// algorithm as CUDA C, the same semantics as runtime/CpuAttention.h. The
// source is compiled by NVRTC with a program that has attention steps into
// the kCudaAttentionBlob cubin (runtime/CudaAttentionKernels.h); the executor
// launches its kernels, so the runtime never compiles anything.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_CODEGEN_CUDA_CUDAATTENTION_H
#define TILEFUSE_CODEGEN_CUDA_CUDAATTENTION_H

#include "runtime/CudaAttentionKernels.h"

#include <string>
#include <vector>

namespace tilefuse {

/// CUDA C defining the three kernels of each of `variants` (a program's
/// cudaAttentionVariants: only what it launches is compiled).
std::string cudaAttentionSource(const std::vector<CudaAttentionVariant> &variants);

} // namespace tilefuse

#endif // TILEFUSE_CODEGEN_CUDA_CUDAATTENTION_H
