//===- Cudnn.cpp ----------------------------------------------------------===//
#include "runtime/Cudnn.h"
#include "runtime/CudnnAbi.h"
#include "runtime/DynamicLibrary.h"

#include <vector>

using namespace tilefuse;
namespace abi = tilefuse::cudnn_abi;

namespace {

struct Api {
  abi::CreateFn create = nullptr;
  abi::DestroyFn destroy = nullptr;
  abi::SetStreamFn setStream = nullptr;
  abi::GetErrorStringFn errorString = nullptr;
  abi::CreateDescFn createTensor = nullptr, createFilter = nullptr, createConv = nullptr;
  abi::DestroyDescFn destroyTensor = nullptr, destroyFilter = nullptr, destroyConv = nullptr;
  abi::SetTensorNdFn setTensor = nullptr;
  abi::SetFilterNdFn setFilter = nullptr;
  abi::SetConvNdFn setConv = nullptr;
  abi::SetConvIntFn setGroups = nullptr, setMath = nullptr;
  abi::GetAlgorithmFn forwardAlgorithms = nullptr, dataAlgorithms = nullptr,
                      filterAlgorithms = nullptr;
  abi::WorkspaceSizeFn forwardWorkspace = nullptr, dataWorkspace = nullptr,
                       filterWorkspace = nullptr;
  abi::ConvolveFn forward = nullptr, backwardData = nullptr, backwardFilter = nullptr;
  std::string unavailable;

  static Api &get() {
    static Api api;
    return api;
  }

private:
  Api() {
    // From the loader's path (or already loaded: PyTorch's CUDA builds load
    // it), else from a CUDA toolkit's lib64.
    void *lib = openLibrary({"libcudnn.so.9", "libcudnn.so"}, cudaLibraryFolders({"CUDNN_HOME"}));
    if (!lib) {
      unavailable = "cuDNN is not installed (libcudnn.so.9 cannot be loaded; PyTorch's CUDA "
                    "wheels bring it (nvidia/cudnn/lib): import torch first, or add that "
                    "folder to LD_LIBRARY_PATH)";
      return;
    }
    SymbolTable symbols(lib);
    symbols.load(create, "cudnnCreate");
    symbols.load(destroy, "cudnnDestroy");
    symbols.load(setStream, "cudnnSetStream");
    symbols.load(errorString, "cudnnGetErrorString");
    symbols.load(createTensor, "cudnnCreateTensorDescriptor");
    symbols.load(createFilter, "cudnnCreateFilterDescriptor");
    symbols.load(createConv, "cudnnCreateConvolutionDescriptor");
    symbols.load(destroyTensor, "cudnnDestroyTensorDescriptor");
    symbols.load(destroyFilter, "cudnnDestroyFilterDescriptor");
    symbols.load(destroyConv, "cudnnDestroyConvolutionDescriptor");
    symbols.load(setTensor, "cudnnSetTensorNdDescriptor");
    symbols.load(setFilter, "cudnnSetFilterNdDescriptor");
    symbols.load(setConv, "cudnnSetConvolutionNdDescriptor");
    symbols.load(setGroups, "cudnnSetConvolutionGroupCount");
    symbols.load(setMath, "cudnnSetConvolutionMathType");
    symbols.load(forwardAlgorithms, "cudnnGetConvolutionForwardAlgorithm_v7");
    symbols.load(dataAlgorithms, "cudnnGetConvolutionBackwardDataAlgorithm_v7");
    symbols.load(filterAlgorithms, "cudnnGetConvolutionBackwardFilterAlgorithm_v7");
    symbols.load(forwardWorkspace, "cudnnGetConvolutionForwardWorkspaceSize");
    symbols.load(dataWorkspace, "cudnnGetConvolutionBackwardDataWorkspaceSize");
    symbols.load(filterWorkspace, "cudnnGetConvolutionBackwardFilterWorkspaceSize");
    symbols.load(forward, "cudnnConvolutionForward");
    symbols.load(backwardData, "cudnnConvolutionBackwardData");
    symbols.load(backwardFilter, "cudnnConvolutionBackwardFilter");
    if (!symbols.missing().empty())
      unavailable = "this cuDNN lacks its convolution API (" + symbols.missing() + ")";
  }
};

Api &api() {
  Api &a = Api::get();
  if (!a.unavailable.empty())
    throw CompileError("convolutions on the GPU: " + a.unavailable);
  return a;
}

void check(abi::Status rc, const std::string &what) {
  if (rc == 0)
    return;
  const char *text = Api::get().errorString ? Api::get().errorString(rc) : nullptr;
  throw CompileError("cuDNN: " + what + " failed: " + (text ? text : "error") + " (" +
                     std::to_string(rc) + ")");
}

int cudnnType(DType t, const std::string &what) {
  switch (t) {
  case DType::F32: return abi::kFloat;
  case DType::F64: return abi::kDouble;
  case DType::F16: return abi::kHalf;
  case DType::BF16: return abi::kBfloat16;
  default:
    throw CompileError(what + ": cuDNN has no " + dtypeName(t) + " convolution");
  }
}

/// [batch, channels, spatial...] as cuDNN's at-least-4-d sizes (a 1-d
/// convolution is a 2-d one over a height of 1) and row-major strides.
void shapeOf(int64_t batch, int64_t channels, const std::array<int64_t, 3> &spatial, int dims,
             std::vector<int> &sizes, std::vector<int> &strides) {
  sizes = {int(batch), int(channels)};
  if (dims == 1)
    sizes.push_back(1);
  for (int i = 0; i < dims; ++i)
    sizes.push_back(int(spatial[size_t(i)]));
  strides.assign(sizes.size(), 1);
  for (size_t i = sizes.size() - 1; i > 0; --i)
    strides[i - 1] = strides[i] * sizes[i];
}

/// A per-dimension attribute, with the leading 1-d dimension's value.
std::vector<int> spatialOf(const std::array<int64_t, 3> &v, int dims, int lead) {
  std::vector<int> out;
  if (dims == 1)
    out.push_back(lead);
  for (int i = 0; i < dims; ++i)
    out.push_back(int(v[size_t(i)]));
  return out;
}

} // namespace

std::string cudnn::unavailableReason() { return Api::get().unavailable; }

cudnn::Handle::Handle(void *stream) {
  Api &a = api();
  check(a.create(&handle), "creating a handle");
  check(a.setStream(handle, stream), "setting the stream");
}

cudnn::Handle::~Handle() {
  if (handle)
    Api::get().destroy(handle);
}

cudnn::Conv::Conv(const Handle &h, const Step &s, DType dtype, size_t workspaceLimit)
    : handle(h), source(s.source) {
  Api &a = api();
  const ConvParams &p = s.conv;
  direction = convDirection(s);
  if (!s.epilogue.empty())
    throw CompileError(source + ": applies an epilogue (bias, activation) in the convolution, "
                       "which only the CPU's oneDNN does; compile the function for the CUDA "
                       "target (which runs the epilogue as a kernel)");
  for (int i = 0; i < p.spatial; ++i)
    if (p.padLow[size_t(i)] != p.padHigh[size_t(i)])
      throw CompileError(source + ": pads dimension " + std::to_string(i) + " by " +
                         std::to_string(p.padLow[size_t(i)]) + " before and " +
                         std::to_string(p.padHigh[size_t(i)]) +
                         " after, which cuDNN cannot; compile the function for the CUDA target "
                         "again (which refuses it with the way out)");
  int type = cudnnType(dtype, source);
  doubleScalars = dtype == DType::F64;
  check(a.createTensor(&input), "creating a tensor descriptor");
  check(a.createTensor(&output), "creating a tensor descriptor");
  check(a.createFilter(&filter), "creating a filter descriptor");
  check(a.createConv(&conv), "creating a convolution descriptor");
  std::vector<int> sizes, strides;
  shapeOf(p.batch, p.channels, p.input, p.spatial, sizes, strides);
  check(a.setTensor(input, type, int(sizes.size()), sizes.data(), strides.data()),
        source + ": describing the input");
  shapeOf(p.batch, p.outChannels, p.output, p.spatial, sizes, strides);
  check(a.setTensor(output, type, int(sizes.size()), sizes.data(), strides.data()),
        source + ": describing the output");
  shapeOf(p.outChannels, p.channels / p.groups, p.kernel, p.spatial, sizes, strides);
  check(a.setFilter(filter, type, abi::kTensorNchw, int(sizes.size()), sizes.data()),
        source + ": describing the weight");
  std::vector<int> pad = spatialOf(p.padLow, p.spatial, 0);
  std::vector<int> stride = spatialOf(p.stride, p.spatial, 1);
  std::vector<int> dilation = spatialOf(p.dilation, p.spatial, 1);
  // Half types accumulate in f32 (as cuBLAS and oneDNN do); f32 stays f32
  // (no TF32: its results would miss f32's tolerance).
  check(a.setConv(conv, int(pad.size()), pad.data(), stride.data(), dilation.data(),
                  abi::kCrossCorrelation, doubleScalars ? abi::kDouble : abi::kFloat),
        source + ": describing the convolution");
  check(a.setGroups(conv, int(p.groups)), source + ": setting the groups");
  int math = dtype == DType::F16 || dtype == DType::BF16 ? abi::kTensorOpMath
             : dtype == DType::F32                      ? abi::kFmaMath
                                                        : abi::kDefaultMath;
  check(a.setMath(conv, math), source + ": setting the math type");

  // The descriptors in the order each direction's functions take them.
  void *d0 = input, *d1 = filter, *d2 = output;
  abi::GetAlgorithmFn algorithms = a.forwardAlgorithms;
  abi::WorkspaceSizeFn sizeOf = a.forwardWorkspace;
  if (direction == ConvDirection::GradInput)
    d0 = filter, d1 = output, d2 = input, algorithms = a.dataAlgorithms,
    sizeOf = a.dataWorkspace;
  else if (direction == ConvDirection::GradWeight)
    d0 = input, d1 = output, d2 = filter, algorithms = a.filterAlgorithms,
    sizeOf = a.filterWorkspace;
  abi::AlgoPerf perf[8] = {};
  int returned = 0;
  check(algorithms(h.get(), d0, d1, conv, d2, 8, &returned, perf),
        source + ": choosing an algorithm");
  const abi::AlgoPerf *chosen = nullptr;
  for (bool deterministicOnly : {true, false}) {
    for (int i = 0; i < returned && !chosen; ++i)
      if (perf[i].status == 0 && perf[i].memory <= workspaceLimit &&
          (!deterministicOnly || perf[i].determinism == abi::kDeterministic))
        chosen = &perf[i];
    if (chosen)
      break;
  }
  if (!chosen)
    throw CompileError(source + ": cuDNN offers no algorithm for this convolution (" +
                       dtypeName(dtype) + ", groups " + std::to_string(p.groups) +
                       ") within the " + std::to_string(workspaceLimit) +
                       " bytes of workspace the program planned for it; run it on the CPU");
  algo = chosen->algo;
  check(sizeOf(h.get(), d0, d1, conv, d2, algo, &workspace),
        source + ": sizing the workspace");
}

cudnn::Conv::~Conv() {
  Api &a = Api::get();
  if (conv)
    a.destroyConv(conv);
  if (filter)
    a.destroyFilter(filter);
  if (output)
    a.destroyTensor(output);
  if (input)
    a.destroyTensor(input);
}

void cudnn::Conv::enqueue(uint64_t aPtr, uint64_t bPtr, uint64_t out,
                          uint64_t workspacePtr) const {
  Api &a = api();
  const float oneF = 1.0f, zeroF = 0.0f;
  const double oneD = 1.0, zeroD = 0.0;
  const void *one = doubleScalars ? static_cast<const void *>(&oneD) : &oneF;
  const void *zero = doubleScalars ? static_cast<const void *>(&zeroD) : &zeroF;
  auto ptr = [](uint64_t v) { return reinterpret_cast<void *>(v); };
  void *ws = workspace ? ptr(workspacePtr) : nullptr;
  switch (direction) {
  case ConvDirection::Forward: // (x, w) -> y
    check(a.forward(handle.get(), one, input, ptr(aPtr), filter, ptr(bPtr), conv, algo, ws,
                    workspace, zero, output, ptr(out)),
          source);
    break;
  case ConvDirection::GradInput: // (dy, w) -> dx
    check(a.backwardData(handle.get(), one, filter, ptr(bPtr), output, ptr(aPtr), conv, algo,
                         ws, workspace, zero, input, ptr(out)),
          source);
    break;
  case ConvDirection::GradWeight: // (x, dy) -> dw
    check(a.backwardFilter(handle.get(), one, input, ptr(aPtr), output, ptr(bPtr), conv, algo,
                           ws, workspace, zero, filter, ptr(out)),
          source);
    break;
  }
}
