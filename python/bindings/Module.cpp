//===- Module.cpp - the tilefuse._core extension --------------------------===//
//
// Thin: every rule lives in the C++ frontend. This file converts arguments
// and maps CompileError to tilefuse.CompileError.
//
//===----------------------------------------------------------------------===//
#include "frontend/Executable.h"
#include "runtime/Artifact.h"
#include "runtime/CudaDriver.h"
#include "frontend/Tracer.h"
#include "python/bindings/Conversions.h"

#include <pybind11/stl.h>

#include <cstring>

namespace py = pybind11;
using namespace tilefuse;
using namespace tilefuse::python;

namespace {

DType dtypeArg(const std::string &name) {
  try {
    return parseDType(name);
  } catch (const std::invalid_argument &e) {
    throw CompileError(e.what());
  }
}

py::tuple signatureTuple(const std::vector<TensorSignature> &sigs) {
  py::list out;
  for (auto &s : sigs)
    out.append(py::make_tuple(dtypeName(s.dtype), py::tuple(py::cast(s.shape))));
  return py::tuple(out);
}

py::list interpretGraph(const Graph &g, const py::sequence &args) {
  auto sigs = g.inputs();
  if (py::len(args) != sigs.size())
    throw CompileError("graph @" + g.entryName() + " takes " +
                       std::to_string(sigs.size()) + " arguments, got " +
                       std::to_string(py::len(args)));
  std::vector<HostTensor> inputs;
  for (size_t i = 0; i < sigs.size(); ++i) {
    py::array a = py::array::ensure(args[i]);
    if (!a)
      throw CompileError("argument " + std::to_string(i) +
                         " is not convertible to a numpy array");
    inputs.push_back(
        toHostTensor(a, sigs[i], "argument " + std::to_string(i)));
  }
  std::vector<HostTensor> results;
  {
    py::gil_scoped_release release;
    results = g.interpret(inputs);
  }
  py::list out;
  for (auto &r : results)
    out.append(toNumpy(r));
  return out;
}

/// Runs a compiled program on numpy arrays. Arrays of exactly the declared
/// dtype, C-contiguous, are read in place; others (bf16 arguments given as
/// float32, strided views) are converted into a temporary first. Results
/// are copied out into new arrays.
template <typename Runner>
py::list runExecutable(Runner &e, const py::sequence &args, const py::object &which) {
  const Program &p = e.program();
  if (py::len(args) != p.arguments.size())
    throw CompileError("the compiled function takes " + std::to_string(p.arguments.size()) +
                       " arguments, got " + std::to_string(py::len(args)));
  std::vector<py::array> keep;
  std::vector<HostTensor> converted;
  converted.reserve(p.arguments.size());
  std::vector<const void *> ptrs;
  for (size_t i = 0; i < p.arguments.size(); ++i) {
    const BufferInfo &want = p.buffers[p.arguments[i]];
    if (args[i].is_none()) { // a persistent argument (make_persistent)
      ptrs.push_back(nullptr);
      continue;
    }
    py::array a = py::array::ensure(args[i]);
    if (!a)
      throw CompileError("argument " + std::to_string(i) +
                         " is not convertible to a numpy array");
    Shape shape(a.shape(), a.shape() + a.ndim());
    bool inPlace = want.dtype != DType::BF16 && shape == want.shape &&
                   (a.flags() & py::array::c_style) && dtypeOfArray(a) == want.dtype;
    if (inPlace) {
      keep.push_back(a);
      ptrs.push_back(a.data());
    } else {
      converted.push_back(toHostTensor(a, {want.dtype, want.shape},
                                       "argument " + std::to_string(i)));
      ptrs.push_back(converted.back().bytes.data());
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
  // Result arrays exist before the run; the copy into them happens under
  // the executor's lock (another thread's run cannot slip in between).
  std::vector<py::array> arrays;
  std::vector<HostTensor> halves(wanted.size());
  for (size_t k = 0; k < wanted.size(); ++k) {
    const BufferInfo &info = p.buffers[p.results[wanted[k]]];
    if (info.dtype == DType::BF16)
      halves[k] = HostTensor(info.dtype, info.shape);
    arrays.emplace_back(numpyDType(info.dtype),
                        std::vector<py::ssize_t>(info.shape.begin(), info.shape.end()));
  }
  std::vector<void *> targets;
  for (size_t k = 0; k < wanted.size(); ++k)
    targets.push_back(p.buffers[p.results[wanted[k]]].dtype == DType::BF16
                          ? static_cast<void *>(halves[k].bytes.data())
                          : arrays[k].mutable_data());
  {
    py::gil_scoped_release release;
    e.runThen(ptrs, [&] {
      for (size_t k = 0; k < wanted.size(); ++k)
        std::memcpy(targets[k], e.result(wanted[k]),
                    p.buffers[p.results[wanted[k]]].byteSize());
    });
  }
  py::list out;
  for (size_t k = 0; k < wanted.size(); ++k)
    out.append(p.buffers[p.results[wanted[k]]].dtype == DType::BF16 ? toNumpy(halves[k])
                                                                    : arrays[k]);
  return out;
}

py::list programKernels(const Executable &e) {
  py::list rows;
  const Program &p = e.program();
  for (const Step &s : p.steps) {
    py::dict row;
    switch (s.kind) {
    case Step::Kind::Kernel: {
      const ProgramKernel &k = p.kernels[s.kernel];
      row["name"] = k.name;
      row["kind"] = k.kind;
      row["grid"] = k.grid;
      row["block"] = k.block;
      row["ops"] = k.fusedOps;
      break;
    }
    case Step::Kind::Gemm:
      row["name"] = "gemm";
      row["kind"] = "library";
      row["shape"] = py::make_tuple(s.batch, s.m, s.n, s.k);
      row["ops"] = std::vector<std::string>{s.source};
      break;
    case Step::Kind::Gather:
    case Step::Kind::ScatterAdd:
    case Step::Kind::Copy:
      row["name"] = s.source;
      row["kind"] = s.kind == Step::Kind::Copy ? "copy" : "library";
      row["ops"] = std::vector<std::string>{s.source};
      break;
    }
    int64_t bytes = 0;
    for (int b : s.buffers)
      bytes += int64_t(p.buffers[b].byteSize());
    row["bytes"] = bytes;
    rows.append(row);
  }
  return rows;
}

} // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "tilefuse compiler core";
  py::register_exception<CompileError>(m, "CompileError", PyExc_ValueError);

  py::class_<Graph, std::shared_ptr<Graph>>(m, "Graph")
      .def("mlir", &Graph::mlir)
      .def("summary", &Graph::summary)
      .def_property_readonly("entry", &Graph::entryName)
      .def_property_readonly("inputs", [](const Graph &g) { return signatureTuple(g.inputs()); })
      .def_property_readonly("outputs", [](const Graph &g) { return signatureTuple(g.outputs()); })
      .def("interpret", &interpretGraph)
      .def("value_and_grad", &Graph::valueAndGrad, py::arg("wrt"))
      .def("compile", &Graph::compile, py::arg("device") = "cpu")
      .def("cuda_source", &Graph::cudaSource, py::arg("target") = "cuda:sm_90")
      .def("compile_artifact", [](const Graph &g, const std::string &target) {
        return py::bytes(g.compileArtifact(target));
      }, py::arg("target") = "cpu")
      .def("compile_cuda", [](const Graph &g, const std::string &target) {
        py::list rows;
        for (const Graph::CudaKernelReport &k : g.compileCuda(target)) {
          py::dict row;
          row["name"] = k.name;
          row["registers"] = k.registers;
          row["spill_stores"] = k.spillStores;
          row["spill_loads"] = k.spillLoads;
          row["stack_bytes"] = k.stackBytes;
          row["cached"] = k.cached;
          rows.append(row);
        }
        return rows;
      }, py::arg("target") = "cuda:sm_90")
      .def("fuse", &Graph::fuse, py::arg("target") = "cpu")
      .def("report", [](const Graph &g) {
        py::list rows;
        for (const KernelInfo &k : g.report()) {
          py::dict row;
          row["name"] = k.name;
          row["kind"] = k.kind;
          row["domain"] = py::tuple(py::cast(k.domain));
          row["reduced"] = py::tuple(py::cast(k.reduced));
          row["ops"] = py::cast(k.ops);
          row["inputs"] = k.numInputs;
          row["outputs"] = k.numOutputs;
          rows.append(row);
        }
        return rows;
      })
      .def("train_step", [](const Graph &g, unsigned numParams,
                            const std::string &kind, double momentum,
                            bool nesterov, double beta1, double beta2,
                            double eps, double weightDecay, double clipNorm) {
        OptimizerConfig c;
        std::string error;
        if (!OptimizerConfig::fromOptions(kind, momentum, nesterov, beta1, beta2,
                                          eps, weightDecay, clipNorm, c, error))
          throw CompileError(error);
        return g.trainStep(numParams, c);
      }, py::arg("num_params"), py::arg("kind"), py::arg("momentum"),
         py::arg("nesterov"), py::arg("beta1"), py::arg("beta2"),
         py::arg("eps"), py::arg("weight_decay"), py::arg("clip_norm"));

  py::class_<Executable, std::shared_ptr<Executable>>(m, "Executable")
      .def("run", &runExecutable<Executable>, py::arg("args"), py::arg("results") = py::none())
      .def("kernels", &programKernels)
      .def("make_persistent", [](Executable &e, size_t i, const py::array &a) {
        const Program &p = e.program();
        if (i >= p.arguments.size())
          throw CompileError("no argument " + std::to_string(i));
        const BufferInfo &want = p.buffers[p.arguments[i]];
        HostTensor t = toHostTensor(a, {want.dtype, want.shape}, "argument " + std::to_string(i));
        e.makePersistent(i, t.bytes.data());
      })
      .def("carry", &Executable::carry, py::arg("result"), py::arg("argument"))
      .def("persistent", [](const Executable &e, size_t i) {
        const Program &p = e.program();
        if (i >= p.arguments.size() || !e.persistent(i))
          throw CompileError("argument " + std::to_string(i) + " is not persistent");
        const BufferInfo &info = p.buffers[p.arguments[i]];
        HostTensor t(info.dtype, info.shape);
        std::memcpy(t.bytes.data(), e.persistent(i), info.byteSize());
        return toNumpy(t);
      })
      .def("set_profiling", &Executable::setProfiling)
      .def("step_seconds", [](const Executable &e) {
        return std::make_pair(e.stepSeconds(), e.profiledCalls());
      })
      .def_property_readonly("fused_ir", [](const Executable &e) { return e.artifacts().fusedIR; })
      .def_property_readonly("tile_ir", [](const Executable &e) { return e.artifacts().tileIR; })
      .def_property_readonly("cache_hit", &Executable::cacheHit)
      .def_property_readonly("compile_stages", [](const Executable &e) {
        return e.artifacts().stageSeconds;
      })
      .def_property_readonly("compile_seconds", &Executable::compileSeconds)
      .def_property_readonly("cold_compile_seconds", [](const Executable &e) {
        return e.artifacts().compileSeconds;
      });
  py::class_<CpuExecutor, std::shared_ptr<CpuExecutor>>(m, "LoadedProgram")
      .def("run", &runExecutable<CpuExecutor>, py::arg("args"), py::arg("results") = py::none())
      .def_property_readonly("num_arguments", [](const CpuExecutor &e) {
        return e.program().arguments.size();
      });
  m.def("load_artifact", [](const std::string &path) {
    Artifact a = readArtifactFile(path);
    std::shared_ptr<CpuExecutor> exe = loadCpuArtifact(a);
    return py::make_tuple(exe, a.target, a.graph);
  }, "(program, target, graph text) of a .tfa file, ready to run on the CPU");
  m.def("cuda_devices", []() {
    std::string why;
    int n = cudaDeviceCount(&why);
    return py::make_tuple(n, why);
  }, "(number of CUDA devices, why none) from the driver, loaded at run time");
  m.def("parse", &Graph::parse, py::arg("text"), py::arg("entry") = "");

  py::class_<Tracer>(m, "Tracer")
      .def(py::init<const std::string &>(), py::arg("name") = "main")
      .def("set_location", &Tracer::setLocation)
      .def("clear_location", &Tracer::clearLocation)
      .def("argument", [](Tracer &t, const std::string &dt, const Shape &s) {
        return t.argument(dtypeArg(dt), s);
      })
      .def("dtype", [](Tracer &t, ValueId v) { return std::string(dtypeName(t.dtype(v))); })
      .def("shape", &Tracer::shape)
      .def("constant", [](Tracer &t, const py::array &a) {
        return t.constant(toHostTensor(a));
      })
      .def("full", [](Tracer &t, double v, const std::string &dt, const Shape &s) {
        return t.full(v, dtypeArg(dt), s);
      })
      .def("binary", &Tracer::binary)
      .def("unary", &Tracer::unary)
      .def("gelu", &Tracer::gelu)
      .def("where", &Tracer::where)
      .def("cast", [](Tracer &t, ValueId v, const std::string &dt) {
        return t.cast(v, dtypeArg(dt));
      })
      .def("broadcast_to", &Tracer::broadcastTo)
      .def("reshape", &Tracer::reshape)
      .def("transpose", &Tracer::transpose)
      .def("slice", &Tracer::slice)
      .def("concat", &Tracer::concat)
      .def("reduce", &Tracer::reduce)
      .def("argmax", &Tracer::argmax)
      .def("matmul", &Tracer::matmul)
      .def("matmul_transposed", &Tracer::matmulTransposed)
      .def("gather", &Tracer::gather)
      .def("scatter_add", &Tracer::scatterAdd)
      .def("random_uniform", [](Tracer &t, ValueId seed, const std::string &dt,
                                const Shape &s, int64_t stream) {
        return t.randomUniform(seed, dtypeArg(dt), s, stream);
      })
      .def("softmax", &Tracer::softmax)
      .def("log_softmax", &Tracer::logSoftmax)
      .def("layer_norm", &Tracer::layerNorm)
      .def("linear", &Tracer::linear)
      .def("dropout", &Tracer::dropout)
      .def("cross_entropy", &Tracer::crossEntropy)
      .def("nll", &Tracer::nll)
      .def("mse", &Tracer::mse)
      .def("bce", &Tracer::bce)
      .def("finish", &Tracer::finish);
}
