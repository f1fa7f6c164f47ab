//===- ExecutorBindings.cpp -----------------------------------------------===//
#include "python/bindings/ExecutorBindings.h"

#include "python/bindings/Conversions.h"
#include "runtime/Artifact.h"
#include "runtime/Communicator.h"
#include "runtime/CpuDnnl.h"
#include "runtime/CpuLibrary.h"
#include "runtime/CpuExecutor.h"
#include "runtime/CudaDriver.h"
#include "runtime/MemoryPlan.h"
#include "runtime/ThreadPool.h"
#ifdef TILEFUSE_HAVE_CUDA_EXECUTOR
#include "runtime/CudaExecutor.h"
#include "runtime/Nccl.h"
#endif

#include <pybind11/stl.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

namespace py = pybind11;
using namespace tilefuse;
using namespace tilefuse::python;

namespace {

// --- DLPack (the stable v0 ABI every framework speaks) --------------------
struct DLDevice {
  int32_t device_type; ///< 1 CPU, 2 CUDA
  int32_t device_id;
};
struct DLDataType {
  uint8_t code; ///< 0 int, 1 uint, 2 float, 4 bfloat, 6 bool
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void *data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t *shape;
  int64_t *strides;
  uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(DLManagedTensor *self);
};
constexpr int32_t kDLCPU = 1, kDLCUDA = 2;

DLDataType dlType(DType t) {
  switch (t) {
  case DType::F32: return {2, 32, 1};
  case DType::F64: return {2, 64, 1};
  case DType::F16: return {2, 16, 1};
  case DType::BF16: return {4, 16, 1};
  case DType::I32: return {0, 32, 1};
  case DType::I64: return {0, 64, 1};
  case DType::I1: return {6, 8, 1};
  }
  return {0, 0, 0};
}

/// A result in device memory that DLPack consumers (torch.from_dlpack,
/// cupy.from_dlpack) take without a copy.
struct DeviceArray {
  std::shared_ptr<void> data;
  DType dtype;
  Shape shape;
  int deviceId = 0;
};

struct ExportedTensor {
  DLManagedTensor managed;
  std::shared_ptr<void> owner;
  Shape shape;
};

py::capsule exportDLPack(const DeviceArray &a) {
  auto *t = new ExportedTensor;
  t->owner = a.data;
  t->shape = a.shape;
  DLTensor &d = t->managed.dl_tensor;
  d.data = a.data.get();
  d.device = {kDLCUDA, a.deviceId};
  d.ndim = int32_t(a.shape.size());
  d.dtype = dlType(a.dtype);
  d.shape = t->shape.data();
  d.strides = nullptr; // row-major
  d.byte_offset = 0;
  t->managed.manager_ctx = t;
  t->managed.deleter = [](DLManagedTensor *self) {
    delete static_cast<ExportedTensor *>(self->manager_ctx);
  };
  return py::capsule(&t->managed, "dltensor", [](PyObject *capsule) {
    // Still named "dltensor": nobody consumed it, so it is ours to free.
    if (PyCapsule_IsValid(capsule, "dltensor")) {
      auto *m = static_cast<DLManagedTensor *>(PyCapsule_GetPointer(capsule, "dltensor"));
      m->deleter(m);
    }
  });
}

/// A DLPack tensor borrowed for one call; returned to its producer after.
struct ImportedTensor {
  DLManagedTensor *managed = nullptr;
  py::object capsule;
  ~ImportedTensor() {
    if (managed && managed->deleter)
      managed->deleter(managed);
  }
};

/// The CUDA device ordinal `e` runs on (0 for other executors).
int deviceIndexOf(Executor &e) {
#ifdef TILEFUSE_HAVE_CUDA_EXECUTOR
  if (auto *cuda = dynamic_cast<CudaExecutor *>(&e))
    return cuda->deviceIndex();
#endif
  (void)e;
  return 0;
}

/// Device address of `obj` (a CUDA DLPack tensor) after checking it
/// against the argument's dtype and shape.
const void *importCuda(Executor &e, const py::object &obj, const BufferInfo &want,
                       size_t i, std::vector<std::unique_ptr<ImportedTensor>> &keep) {
  py::object capsule;
#ifdef TILEFUSE_HAVE_CUDA_EXECUTOR
  if (auto *cuda = dynamic_cast<CudaExecutor *>(&e)) {
    // Our stream: the producer orders its pending work before it.
    capsule = obj.attr("__dlpack__")(py::arg("stream") =
                                         reinterpret_cast<uintptr_t>(cuda->stream()));
  }
#endif
  if (!capsule)
    capsule = obj.attr("__dlpack__")();
  auto *m = static_cast<DLManagedTensor *>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
  if (!m)
    throw CompileError("argument " + std::to_string(i) + ": __dlpack__ returned no tensor");
  PyCapsule_SetName(capsule.ptr(), "used_dltensor");
  auto held = std::make_unique<ImportedTensor>();
  held->managed = m;
  held->capsule = capsule;
  const DLTensor &d = m->dl_tensor;
  if (d.device.device_type != kDLCUDA || d.device.device_id != deviceIndexOf(e))
    throw CompileError("argument " + std::to_string(i) + ": __dlpack__ gave a tensor on device (" +
                       std::to_string(d.device.device_type) + ", " +
                       std::to_string(d.device.device_id) + "); this function runs on cuda:" +
                       std::to_string(deviceIndexOf(e)));
  Shape shape(d.shape, d.shape + d.ndim);
  DLDataType want_t = dlType(want.dtype);
  if (d.dtype.code != want_t.code || d.dtype.bits != want_t.bits || d.dtype.lanes != 1 ||
      shape != want.shape)
    throw CompileError("argument " + std::to_string(i) + " is a GPU tensor of another dtype or "
                       "shape; the program was compiled for " + dtypeName(want.dtype) +
                       shapeToString(want.shape));
  if (d.strides) {
    int64_t expect = 1;
    for (int k = d.ndim - 1; k >= 0; --k) {
      if (d.shape[k] != 1 && d.strides[k] != expect)
        throw CompileError("argument " + std::to_string(i) +
                           " is a strided GPU tensor; pass a contiguous one (.contiguous())");
      expect *= d.shape[k];
    }
  }
  const void *p = static_cast<const char *>(d.data) + d.byte_offset;
  keep.push_back(std::move(held));
  return p;
}

} // namespace

namespace {

/// Result buffers handed to numpy: 64-byte aligned (the kernels' streaming
/// stores need it), returned here when numpy frees the array and given to
/// the next result of the same size, so repeated calls reuse pages the
/// process already touched. Keeps at most kKeptPerSize idle buffers a size.
class ResultPool {
public:
  static ResultPool &global() {
    static auto *pool = new ResultPool(); // outlives every array (never freed)
    return *pool;
  }
  void *take(size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      auto it = idle.find(bytes);
      if (it != idle.end()) {
        void *p = it->second;
        idle.erase(it);
        idleBytes -= bytes;
        return p;
      }
    }
    void *p = std::aligned_alloc(64, (std::max<size_t>(bytes, 64) + 63) / 64 * 64);
    if (!p)
      throw CompileError("cannot allocate " + std::to_string(bytes) + " bytes for a result");
    return p;
  }
  void give(void *p, size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex);
    if (idle.count(bytes) < kKeptPerSize && idleBytes + bytes <= kKeptBytes) {
      idle.emplace(bytes, p);
      idleBytes += bytes;
    } else {
      std::free(p);
    }
  }

private:
  static constexpr size_t kKeptPerSize = 2;
  /// At most this much memory kept idle: a huge or one-off result goes
  /// back to the system.
  static constexpr size_t kKeptBytes = size_t(1) << 30;
  std::mutex mutex;
  std::multimap<size_t, void *> idle;
  size_t idleBytes = 0;
};

/// A numpy array owning `data` (from the pool, returned to it when freed).
py::array pooledArray(const py::dtype &dtype, const Shape &shape, void *data, size_t bytes) {
  auto *owner = new std::pair<void *, size_t>(data, bytes);
  py::capsule free(owner, [](void *p) {
    auto *o = static_cast<std::pair<void *, size_t> *>(p);
    ResultPool::global().give(o->first, o->second);
    delete o;
  });
  return py::array(dtype, std::vector<py::ssize_t>(shape.begin(), shape.end()), data, free);
}

} // namespace

py::list tilefuse::python::runExecutor(Executor &e, const py::sequence &args,
                                       const py::object &which, const std::string &out,
                                       std::shared_ptr<void> self, const py::object &into) {
  const Program &p = e.program();
  if (out != "numpy" && out != "dlpack" && out != "view" && out != "bits")
    throw CompileError("out must be 'numpy', 'dlpack', 'view' or 'bits', not '" + out + "'");
  // "bits": numpy results, bf16 ones as uint16 arrays of their bits (numpy
  // has no bf16): no widening to float32 and back.
  bool bits = out == "bits";
  if (py::len(args) != p.arguments.size())
    throw CompileError("the compiled function takes " + std::to_string(p.arguments.size()) +
                       " arguments, got " + std::to_string(py::len(args)));
  bool onGpu = e.device() != "cpu";
  std::vector<py::array> keep;
  std::vector<std::unique_ptr<ImportedTensor>> imported;
  std::vector<HostTensor> converted;
  converted.reserve(p.arguments.size());
  std::vector<ArgRef> ptrs;
  for (size_t i = 0; i < p.arguments.size(); ++i) {
    const BufferInfo &want = p.buffers[p.arguments[i]];
    py::object arg = args[i];
    if (arg.is_none()) { // a persistent argument (make_persistent)
      ptrs.push_back({nullptr, false});
      continue;
    }
    if (!py::isinstance<py::array>(arg) && py::hasattr(arg, "__dlpack_device__")) {
      auto dev = arg.attr("__dlpack_device__")().cast<std::pair<int, int>>();
      if (dev.first == kDLCUDA) {
        if (!onGpu)
          throw CompileError("argument " + std::to_string(i) +
                             " is in GPU memory; this function runs on the CPU (compile it "
                             "with device='cuda', or pass host arrays)");
        if (dev.second != deviceIndexOf(e))
          throw CompileError("argument " + std::to_string(i) + " is on cuda:" +
                             std::to_string(dev.second) + "; this function runs on cuda:" +
                             std::to_string(deviceIndexOf(e)) + " (move it there, e.g. "
                             ".to('cuda:" + std::to_string(deviceIndexOf(e)) + "'))");
        ptrs.push_back({importCuda(e, arg, want, i, imported), true});
        continue;
      }
    }
    py::array a = py::array::ensure(arg);
    if (!a)
      throw CompileError("argument " + std::to_string(i) +
                         " is not convertible to a numpy array");
    Shape shape(a.shape(), a.shape() + a.ndim());
    if (want.dtype == DType::BF16 && a.dtype().kind() == 'u' && a.itemsize() == 2) {
      // A bf16 argument as the uint16 array of its bits: read in place.
      if (shape != want.shape)
        throw CompileError("argument " + std::to_string(i) + " must be " +
                           TensorSignature{want.dtype, want.shape}.str() + ", got bf16 bits of " +
                           shapeToString(shape) + "; pass an array of that shape");
      a = py::array::ensure(a, py::array::c_style);
      keep.push_back(a);
      ptrs.push_back({a.data(), false});
      continue;
    }
    bool inPlace = want.dtype != DType::BF16 && shape == want.shape &&
                   (a.flags() & py::array::c_style) && dtypeOfArray(a) == want.dtype;
    if (inPlace) {
      keep.push_back(a);
      ptrs.push_back({a.data(), false});
    } else {
      converted.push_back(toHostTensor(a, {want.dtype, want.shape},
                                       "argument " + std::to_string(i)));
      ptrs.push_back({converted.back().bytes.data(), false});
    }
  }
  std::vector<size_t> wanted;
  if (which.is_none()) {
    for (size_t i = 0; i < p.results.size(); ++i)
      wanted.push_back(i);
  } else {
    for (auto item : which.cast<py::sequence>()) {
      size_t i = item.cast<size_t>();
      if (i >= p.results.size())
        throw CompileError("no result " + std::to_string(i));
      wanted.push_back(i);
    }
  }
  py::list results;
  if ((out == "dlpack" || out == "view") && onGpu) {
#ifdef TILEFUSE_HAVE_CUDA_EXECUTOR
    auto &cuda = dynamic_cast<CudaExecutor &>(e);
    std::vector<std::shared_ptr<void>> copies;
    // A view borrows the executor's buffer (kept alive by `self`) until the
    // next call overwrites it; a dlpack result owns a copy.
    {
      py::gil_scoped_release release;
      e.runThen(ptrs, [&] {
        for (size_t k : wanted)
          copies.push_back(out == "view" ? std::shared_ptr<void>(self, cuda.deviceResult(k))
                                         : cuda.copyResult(k));
      });
    }
    for (size_t k = 0; k < wanted.size(); ++k) {
      const BufferInfo &info = p.buffers[p.results[wanted[k]]];
      results.append(DeviceArray{copies[k], info.dtype, info.shape, deviceIndexOf(e)});
    }
    return results;
#endif
  }
  // Result arrays exist before the run. Where the CPU executor can, it
  // computes a result straight into its array (`direct`); the others are
  // copied under the executor's lock (another thread's run cannot slip in
  // between).
  std::vector<py::object> given(wanted.size(), py::none());
  if (!into.is_none()) {
    auto list = into.cast<py::sequence>();
    if (py::len(list) != wanted.size())
      throw CompileError("out: " + std::to_string(py::len(list)) + " arrays for " +
                         std::to_string(wanted.size()) + " results");
    for (size_t k = 0; k < wanted.size(); ++k)
      given[k] = list[k];
  }
  auto *cpu = dynamic_cast<CpuExecutor *>(&e);
  // Memory the run reads (the arguments, read in place): an out= array
  // overlapping it is written after the run, never during it.
  std::vector<std::pair<const char *, const char *>> reads;
  for (const py::array &a : keep)
    reads.emplace_back(static_cast<const char *>(a.data()),
                       static_cast<const char *>(a.data()) + a.nbytes());
  auto overlaps = [](const char *b, const char *e,
                     const std::vector<std::pair<const char *, const char *>> &ranges) {
    return std::any_of(ranges.begin(), ranges.end(),
                       [&](const auto &r) { return b < r.second && r.first < e; });
  };
  std::vector<std::pair<const char *, const char *>> outs;
  std::vector<py::array> arrays;
  std::vector<HostTensor> halves(wanted.size());
  std::vector<void *> direct(p.results.size(), nullptr);
  std::vector<void *> targets;
  for (size_t k = 0; k < wanted.size(); ++k) {
    const BufferInfo &info = p.buffers[p.results[wanted[k]]];
    bool asBits = bits && info.dtype == DType::BF16;
    py::dtype arrayType = asBits ? py::dtype("uint16") : numpyDType(info.dtype);
    bool redirect = cpu && cpu->redirectable(wanted[k]) &&
                    (info.dtype != DType::BF16 || asBits) && !direct[wanted[k]];
    if (!given[k].is_none()) {
      py::array a = py::array::ensure(given[k]);
      Shape shape = a ? Shape(a.shape(), a.shape() + a.ndim()) : Shape();
      if (!a || !(a.flags() & py::array::c_style) || !a.writeable() ||
          info.dtype == DType::BF16 || dtypeOfArray(a) != info.dtype || shape != info.shape)
        throw CompileError("out: result " + std::to_string(wanted[k]) + " is " +
                           TensorSignature{info.dtype, info.shape}.str() +
                           "; pass a writeable C-contiguous numpy array of that dtype and "
                           "shape" + (info.dtype == DType::BF16 ? " (bf16 results cannot be "
                                                                  "written into an array)"
                                                                : ""));
      const char *begin = static_cast<const char *>(a.data()), *end = begin + a.nbytes();
      if (overlaps(begin, end, outs))
        throw CompileError("out: the arrays for results " + std::to_string(wanted[k]) +
                           " and another overlap; pass separate arrays");
      outs.emplace_back(begin, end);
      arrays.push_back(a);
      redirect = redirect && reinterpret_cast<uintptr_t>(a.mutable_data()) % 64 == 0 &&
                 !overlaps(begin, end, reads);
      if (redirect)
        direct[wanted[k]] = a.mutable_data();
      targets.push_back(redirect ? nullptr : a.mutable_data());
      continue;
    }
    if (info.dtype == DType::BF16 && !asBits) {
      halves[k] = HostTensor(info.dtype, info.shape);
      arrays.emplace_back(numpyDType(info.dtype),
                          std::vector<py::ssize_t>(info.shape.begin(), info.shape.end()));
      targets.push_back(halves[k].bytes.data());
      continue;
    }
    if (redirect) {
      void *data = ResultPool::global().take(info.byteSize());
      arrays.push_back(pooledArray(arrayType, info.shape, data, info.byteSize()));
      direct[wanted[k]] = data;
      targets.push_back(nullptr);
      continue;
    }
    arrays.emplace_back(arrayType,
                        std::vector<py::ssize_t>(info.shape.begin(), info.shape.end()));
    targets.push_back(arrays.back().mutable_data());
  }
  auto copyTheRest = [&] {
    // A result asked for twice was computed into its first array.
    for (size_t k = 0; k < wanted.size(); ++k)
      if (targets[k])
        copyBytes(targets[k], direct[wanted[k]] ? direct[wanted[k]] : e.result(wanted[k]),
                  p.buffers[p.results[wanted[k]]].byteSize());
  };
  {
    py::gil_scoped_release release;
    if (cpu)
      cpu->runInto(ptrs, direct, copyTheRest);
    else
      e.runThen(ptrs, copyTheRest);
  }
  for (size_t k = 0; k < wanted.size(); ++k)
    results.append(p.buffers[p.results[wanted[k]]].dtype == DType::BF16 && given[k].is_none() &&
                           !bits
                       ? toNumpy(halves[k])
                       : arrays[k]);
  return results;
}

void tilefuse::python::makePersistent(Executor &e, size_t i, const py::array &a) {
  const Program &p = e.program();
  if (i >= p.arguments.size())
    throw CompileError("no argument " + std::to_string(i));
  const BufferInfo &want = p.buffers[p.arguments[i]];
  HostTensor t = toHostTensor(a, {want.dtype, want.shape}, "argument " + std::to_string(i));
  e.makePersistent(i, t.bytes.data());
}

py::array tilefuse::python::persistentValue(Executor &e, size_t i) {
  const Program &p = e.program();
  const void *data = i < p.arguments.size() ? e.persistent(i) : nullptr;
  if (!data)
    throw CompileError("argument " + std::to_string(i) + " is not persistent");
  const BufferInfo &info = p.buffers[p.arguments[i]];
  HostTensor t(info.dtype, info.shape);
  copyBytes(t.bytes.data(), data, info.byteSize());
  return toNumpy(t);
}

py::list tilefuse::python::programKernels(const Program &p) {
  py::list rows;

  for (const Step &s : p.steps) {
    py::dict row;
    switch (s.kind) {
    case Step::Kind::Kernel: {
      const ProgramKernel &k = p.kernels[s.kernel];
      row["name"] = k.name;
      row["kind"] = k.kind;
      row["grid"] = k.grid;
      row["block"] = k.block;
      if (k.threads)
        row["threads"] = k.threads;
      row["ops"] = k.fusedOps;
      break;
    }
    case Step::Kind::Gemm:
      row["name"] = "gemm";
      row["kind"] = "library";
      row["shape"] = py::make_tuple(s.batch, s.m, s.n, s.k);
      row["ops"] = std::vector<std::string>{s.source};
      break;
    case Step::Kind::Sort:
      row["name"] = "sort";
      row["kind"] = "library";
      row["shape"] = py::make_tuple(s.m, s.n); // rows, row length
      row["ops"] = std::vector<std::string>{s.source};
      break;
    case Step::Kind::GroupedGemm:
      row["name"] = s.transposeA ? "grouped_gemm_weight_grad" : "grouped_gemm";
      row["kind"] = "library";
      // (groups, rows, n, k), as a GEMM's (batch, m, n, k)
      row["shape"] = py::make_tuple(s.batch, s.m, s.n, s.k);
      row["ops"] = std::vector<std::string>{s.source};
      break;
    case Step::Kind::Attention:
    case Step::Kind::AttentionGrad: {
      const AttentionParams &a = s.attention;
      row["name"] = s.kind == Step::Kind::Attention ? "attention" : "attention_grad";
      row["kind"] = "library";
      // (batch, heads, queries, keys, head size); the kernels never hold
      // the queries x keys scores.
      row["shape"] = py::make_tuple(s.batch, a.heads, a.queries, a.keys, a.headDim);
      row["ops"] = std::vector<std::string>{s.source};
      break;
    }
    case Step::Kind::Conv:
    case Step::Kind::ConvGradInput:
    case Step::Kind::ConvGradWeight: {
      const ConvParams &c = s.conv;
      row["name"] = s.source.substr(s.source.find('.') + 1); // conv, conv_grad_input, ...
      row["kind"] = "library";
      // (batch, channels, output channels, input spatial sizes...)
      py::list shape;
      for (int64_t v : {c.batch, c.channels, c.outChannels})
        shape.append(v);
      for (int i = 0; i < c.spatial; ++i)
        shape.append(c.input[size_t(i)]);
      row["shape"] = py::tuple(shape);
      row["ops"] = std::vector<std::string>{s.source};
      break;
    }
    case Step::Kind::CollectiveStart:
    case Step::Kind::CollectiveWait: {
      // The start sends, the wait blocks until the bytes arrived: report
      // both, so the time a step spends waiting shows.
      const ProcessGroup &g = p.groups[size_t(s.collective.group)];
      row["name"] = std::string(collectiveName(s.collective.kind)) +
                    (s.kind == Step::Kind::CollectiveStart ? "_start" : "_wait");
      row["kind"] = "collective";
      row["group"] = py::make_tuple(g.name, g.size);
      row["shape"] = py::make_tuple(numElements(p.buffers[size_t(s.buffers.back())].shape));
      row["ops"] = std::vector<std::string>{s.source};
      break;
    }
    case Step::Kind::Gather:
    case Step::Kind::ScatterAdd:
    case Step::Kind::Copy:
      row["name"] = s.source;
      row["kind"] = s.kind == Step::Kind::Copy ? "copy" : "library";
      row["ops"] = std::vector<std::string>{s.source};
      break;
    }
    row["source"] = s.sourceLines;
    int64_t bytes = 0;
    for (int b : s.buffers)
      bytes += int64_t(p.buffers[b].byteSize());
    row["bytes"] = bytes;
    rows.append(row);
  }
  return rows;
}

py::dict tilefuse::python::programMemoryPlan(const Program &p) {
  PlanReport report = reportMemoryPlan(p);
  py::list buffers;
  for (const PlanReport::Buffer &b : report.buffers) {
    const BufferInfo &info = p.buffers[size_t(b.index)];
    py::dict row;
    row["name"] = info.name;
    row["dtype"] = dtypeName(info.dtype);
    row["shape"] = py::tuple(py::cast(info.shape));
    row["bytes"] = info.byteSize();
    row["arena_bytes"] = b.arenaBytes;
    row["offset"] = b.offset;
    row["first"] = b.live.first;
    row["last"] = b.live.last;
    row["pinned"] = b.live.pinned;
    row["phase"] = b.phase;
    row["op"] = b.op;
    row["line"] = b.line;
    row["writers"] = b.writers;
    buffers.append(row);
  }
  py::dict out;
  out["peak"] = report.plan.bytes;
  out["lower_bound"] = report.lowerBound;
  out["unplanned"] = report.unplanned;
  out["argument_bytes"] = report.argumentBytes;
  out["alignment"] = report.plan.alignment;
  out["steps"] = p.steps.size();
  out["step_phases"] = report.stepPhases;
  out["buffers"] = buffers;
  out["text"] = formatMemoryPlan(p);
  return out;
}

namespace {
py::tuple signatures(const Program &p, const std::vector<int> &buffers) {
  py::list out;
  for (int b : buffers) {
    const BufferInfo &info = p.buffers[b];
    out.append(py::make_tuple(info.name, dtypeName(info.dtype), py::tuple(py::cast(info.shape))));
  }
  return py::tuple(out);
}
} // namespace

namespace {

/// A Communicator whose collectives a Python object runs (see
/// setPythonCommunicator). Called from the executor's run, which released
/// the GIL: every call takes it back.
class PyCommunicator : public Communicator {
public:
  explicit PyCommunicator(py::object obj) : obj(std::move(obj)) {
    py::gil_scoped_acquire gil;
    rank_ = this->obj.attr("rank")().cast<int64_t>();
    size_ = this->obj.attr("size")().cast<int64_t>();
  }
  ~PyCommunicator() override {
    py::gil_scoped_acquire gil;
    obj = py::object();
  }
  int64_t rank() const override { return rank_; }
  int64_t size() const override { return size_; }
  int64_t start(const CollectiveCall &call) override {
    py::gil_scoped_acquire gil;
    static const char *reduces[] = {"sum", "max", "min"};
    py::object input = view(call.input, call.inputElements, call.dtype);
    py::object output =
        call.output == call.input ? input : view(call.output, call.outputElements, call.dtype);
    return obj.attr("start")(collectiveName(call.kind), reduces[int(call.reduce)], call.root,
                             input, output, dtypeName(call.dtype))
        .cast<int64_t>();
  }
  void wait(int64_t handle) override {
    py::gil_scoped_acquire gil;
    obj.attr("wait")(handle);
  }

private:
  /// A numpy array over `elements` of `dtype` at `data`, owning nothing.
  static py::object view(const void *data, int64_t elements, DType dtype) {
    py::dtype type = dtype == DType::BF16 ? py::dtype("uint16") : numpyDType(dtype);
    py::capsule none(data, [](void *) {});
    return py::array(type, {py::ssize_t(elements)}, {}, const_cast<void *>(data), none);
  }
  py::object obj;
  int64_t rank_ = 0, size_ = 1;
};

} // namespace

void tilefuse::python::setPythonCommunicator(Executor &e, const std::string &group,
                                             const py::object &comm) {
  e.setCommunicator(group, std::make_shared<PyCommunicator>(comm));
}

void tilefuse::python::registerExecutorBindings(py::module_ &m) {
  py::class_<DeviceArray>(m, "DeviceArray", py::module_local(),
                          "A result in GPU memory; torch.from_dlpack / cupy.from_dlpack take "
                          "it without a copy")
      .def("__dlpack__", [](const DeviceArray &a, py::object stream, py::kwargs) {
        // Our stream finished before this array was returned: any consumer
        // stream may read it.
        (void)stream;
        return exportDLPack(a);
      }, py::arg("stream") = py::none())
      .def("__dlpack_device__", [](const DeviceArray &a) {
        return py::make_tuple(kDLCUDA, a.deviceId);
      })
      .def_property_readonly("shape", [](const DeviceArray &a) { return py::tuple(py::cast(a.shape)); })
      .def_property_readonly("dtype", [](const DeviceArray &a) { return std::string(dtypeName(a.dtype)); });

  py::class_<Executor, std::shared_ptr<Executor>>(m, "Program", py::module_local(),
                                                  "A compiled program and its buffers on a device")
      .def("set_communicator", &setPythonCommunicator, py::arg("group"), py::arg("communicator"))
      .def("set_nccl_communicator", [](Executor &e, const std::string &group, const py::bytes &id,
                                       int64_t rank, int64_t size) {
        e.setNcclCommunicator(group, std::string(id), rank, size);
      }, py::arg("group"), py::arg("unique_id"), py::arg("rank"), py::arg("size"))
      .def("run", [](std::shared_ptr<Executor> e, const py::sequence &args, const py::object &which,
                     const std::string &out, const py::object &into) {
             return runExecutor(*e, args, which, out, e, into);
           },
           py::arg("args"), py::arg("results") = py::none(), py::arg("out") = "numpy",
           py::arg("into") = py::none())
      .def("kernels", [](const Executor &e) { return programKernels(e.program()); })
      .def("memory_plan", [](const Executor &e) { return programMemoryPlan(e.program()); })
      .def("make_persistent", &makePersistent)
      .def("carry", &Executor::carry, py::arg("result"), py::arg("argument"))
      .def("persistent", &persistentValue)
      .def("set_profiling", &Executor::setProfiling)
      .def("step_seconds", [](const Executor &e) {
        return std::make_pair(e.stepSeconds(), e.profiledCalls());
      })
      .def_property_readonly("device", &Executor::device)
      .def_property_readonly("num_arguments", [](const Executor &e) {
        return e.program().arguments.size();
      })
      .def_property_readonly("arguments", [](const Executor &e) {
        return signatures(e.program(), e.program().arguments);
      })
      .def_property_readonly("results", [](const Executor &e) {
        return signatures(e.program(), e.program().results);
      })
      .def_property_readonly("aliases", [](const Executor &e) { return e.program().aliases; })
      .def_property_readonly("groups", [](const Executor &e) {
        std::vector<std::pair<std::string, int64_t>> groups;
        for (const ProcessGroup &g : e.program().groups)
          groups.emplace_back(g.name, g.size);
        return groups;
      })
      .def_property_readonly("graph_stats", [](Executor &e) -> py::tuple {
#ifdef TILEFUSE_HAVE_CUDA_EXECUTOR
        if (auto *c = dynamic_cast<CudaExecutor *>(&e))
          return py::make_tuple(c->graphsCaptured(), c->graphReplays());
#endif
        (void)e;
        return py::make_tuple(0, 0);
      }, "(CUDA graphs captured, calls that replayed one)");

  m.def("nccl_unique_id", []() {
#ifdef TILEFUSE_HAVE_CUDA_EXECUTOR
    return py::bytes(nccl::uniqueId());
#else
    throw CompileError("this runtime was built without the CUDA executor (no NCCL)");
    return py::bytes();
#endif
  }, "A new NCCL unique id (bytes): rank 0 makes it, every rank joins with it.");
  m.def("load_artifact", [](const std::string &path, bool cudaGraphs, bool tf32) {
    Artifact a = readArtifactFile(path);
    std::shared_ptr<Executor> exe = loadArtifact(a, LoadOptions{cudaGraphs, tf32});
    return py::make_tuple(exe, a.target, a.graph, a.metadata);
  }, py::arg("path"), py::arg("cuda_graphs") = true, py::arg("allow_tf32") = false,
     "(program, target, graph text, metadata) of a .tfa file, ready to run on its device");
  m.def("cuda_devices", []() {
    std::string why;
    int n = cudaDeviceCount(&why);
#ifdef TILEFUSE_HAVE_CUDA_EXECUTOR
    if (n > 0 && !cudaUnavailableReason().empty()) {
      why = cudaUnavailableReason();
      n = 0;
    }
#else
    if (n > 0) {
      why = "this build of tilefuse has no CUDA executor";
      n = 0;
    }
#endif
    return py::make_tuple(n, why);
  }, "(number of usable CUDA devices, why none): the driver and cuBLAS are loaded at run time");
  m.def("onednn_status", &cpu::dnnlStatus,
        "'loaded', or why oneDNN (the CPU's convolutions and bf16 GEMMs) is not used");
  m.def("onednn_f32_gemms", &cpu::dnnlF32SlabsRun,
        "f32 GEMMs (or row slabs of one) oneDNN ran in this process; -1 without oneDNN");
  m.def("blas_name", &cpu::blasName,
        "the BLAS the CPU's f32 GEMMs may go to, with OpenBLAS's kernel family");
  m.def("blas_narrower_than_cpu", &cpu::blasNarrowerThanCpu,
        "whether the BLAS's kernels use narrower vectors than this CPU's (f32 GEMMs then go "
        "to oneDNN)");
  m.def("onednn_conv_scratch_bytes", &cpu::dnnlConvScratchBytes,
        "bytes of the one buffer for convolutions' operands in oneDNN's blocked layouts");
  m.def("onednn_conv_reorders_reused", &cpu::dnnlConvReordersReused,
        "output-gradient reorders skipped: the second of a gradient's two backward "
        "convolutions reading the blocked copy the first made");
  m.def("cpu_thread_team", [](const std::string &wanted) {
    using Team = ThreadPool::Team;
    ThreadPool &pool = ThreadPool::global();
    if (wanted == "own" || wanted == "openmp")
      pool.setTeam(wanted == "own" ? Team::Own : Team::OpenMP);
    else if (!wanted.empty())
      throw CompileError("cpu_thread_team: 'own' or 'openmp', not '" + wanted + "'");
    return std::string(pool.team() == Team::OpenMP ? "openmp" : "own");
  }, py::arg("wanted") = "",
     "The threads that run CPU grids beside the caller: 'own' (tilefuse's pool) or 'openmp' "
     "(the process's OpenMP threads, shared with PyTorch); with an argument, chooses first "
     "(TILEFUSE_THREAD_POOL=own|openmp, where set, keeps its choice). Returns the team in force.");
  m.attr("cpu_openmp") = ThreadPool::hasOpenMP();
}
