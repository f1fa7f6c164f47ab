//===- CudaDriver.cpp -----------------------------------------------------===//
#include "runtime/CudaDriver.h"

#include <dlfcn.h>

using namespace tilefuse;

int tilefuse::cudaDeviceCount(std::string *why) {
  auto say = [&](const std::string &s) {
    if (why)
      *why = s;
    return 0;
  };
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib)
    return say("no NVIDIA driver (libcuda.so.1 cannot be loaded)");
  using Init = int (*)(unsigned);
  using Count = int (*)(int *);
  auto init = reinterpret_cast<Init>(dlsym(lib, "cuInit"));
  auto count = reinterpret_cast<Count>(dlsym(lib, "cuDeviceGetCount"));
  if (!init || !count)
    return say("libcuda.so.1 lacks cuInit/cuDeviceGetCount");
  if (int rc = init(0))
    return say("the NVIDIA driver failed to initialise (CUDA error " + std::to_string(rc) + ")");
  int n = 0;
  if (int rc = count(&n))
    return say("the NVIDIA driver cannot count devices (CUDA error " + std::to_string(rc) + ")");
  if (n == 0)
    return say("the NVIDIA driver sees no GPU");
  return n;
}
