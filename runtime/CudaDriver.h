//===- CudaDriver.h - is there an NVIDIA GPU here? ------------------*- C++ -*-===//
//
// The driver library is loaded at run time (never linked), so a build with
// the CUDA toolkit still runs on a machine without a driver.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_RUNTIME_CUDADRIVER_H
#define TILEFUSE_RUNTIME_CUDADRIVER_H

#include <string>

namespace tilefuse {

/// Number of CUDA devices the driver reports; 0 with `why` set when there is
/// no driver library, it fails to initialise, or it sees no device.
int cudaDeviceCount(std::string *why = nullptr);

} // namespace tilefuse

#endif // TILEFUSE_RUNTIME_CUDADRIVER_H
