//===- Module.cpp - the tilefuse._core extension --------------------------===//
//
// Thin: every rule lives in the C++ frontend. This file converts arguments
// and maps CompileError to tilefuse.CompileError.
//
//===----------------------------------------------------------------------===//
#include "frontend/Executable.h"
#ifdef TILEFUSE_HAVE_NVRTC
#include "codegen/cuda/CudaLibrary.h"
#endif
#include "runtime/Artifact.h"
#include "frontend/Tracer.h"
#include "python/bindings/Conversions.h"
#include "python/bindings/ExecutorBindings.h"

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

/// NVRTC's resource report of one kernel.
py::dict resourceRow(const CudaKernelReport &k) {
  py::dict row;
  row["registers"] = k.registers;
  row["spill_stores"] = k.spillStores;
  row["spill_loads"] = k.spillLoads;
  row["stack_bytes"] = k.stackBytes;
  row["shared_bytes"] = k.sharedBytes;
  return row;
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

/// The optimizer (and loss scaling) of a train step from the dict that
/// tilefuse.optim builds; an unknown key or a value out of range is a
/// CompileError naming it.
OptimizerConfig optimizerConfigFrom(const py::dict &options) {
  OptimizerConfig c;
  for (auto [key, value] : options) {
    std::string k = py::cast<std::string>(key);
    if (k == "kind") {
      std::string kind = py::cast<std::string>(value);
      if (!OptimizerConfig::parseKind(kind, c.kind))
        throw CompileError("unknown optimizer '" + kind +
                           "'; expected sgd, adam, adamw or rmsprop");
    } else if (k == "momentum") c.momentum = py::cast<double>(value);
    else if (k == "nesterov") c.nesterov = py::cast<bool>(value);
    else if (k == "beta1") c.beta1 = py::cast<double>(value);
    else if (k == "beta2") c.beta2 = py::cast<double>(value);
    else if (k == "eps") c.eps = py::cast<double>(value);
    else if (k == "alpha") c.alpha = py::cast<double>(value);
    else if (k == "centered") c.centered = py::cast<bool>(value);
    else if (k == "weight_decay") c.weightDecay = py::cast<double>(value);
    else if (k == "clip_norm") c.clipNorm = py::cast<double>(value);
    else if (k == "loss_scale") c.lossScale.dynamic = py::cast<bool>(value);
    else if (k == "growth_factor") c.lossScale.growthFactor = py::cast<double>(value);
    else if (k == "backoff_factor") c.lossScale.backoffFactor = py::cast<double>(value);
    else if (k == "growth_interval") c.lossScale.growthInterval = py::cast<int64_t>(value);
    else if (k == "param_group") c.paramGroup = py::cast<std::vector<unsigned>>(value);
    else if (k == "num_groups") c.groupCount = py::cast<unsigned>(value);
    else if (k == "parallel") c.parallel.mode = py::cast<std::string>(value);
    else if (k == "group") c.parallel.group = py::cast<std::string>(value);
    else if (k == "group_size") c.parallel.groupSize = py::cast<int64_t>(value);
    else if (k == "bucket_bytes") c.parallel.bucketBytes = py::cast<int64_t>(value);
    else if (k == "param_weight_decay")
      c.paramWeightDecay = py::cast<std::vector<double>>(value);
    else throw CompileError("unknown optimizer option '" + k + "'");
  }
  std::string invalid = c.validate();
  if (!invalid.empty())
    throw CompileError("optimizer: " + invalid);
  return c;
}

} // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "tilefuse compiler core";
  // One Python exception class for both modules: the compiler's is the
  // runtime's (tilefuse.CompileError) refined.
  py::object runtimeError = py::module_::import("tilefuse._runtime").attr("CompileError");
  py::register_local_exception<CompileError>(m, "CompileError", runtimeError.ptr());

  py::class_<Graph, std::shared_ptr<Graph>>(m, "Graph")
      .def("mlir", &Graph::mlir)
      .def("summary", &Graph::summary)
      .def_property_readonly("entry", &Graph::entryName)
      .def_property_readonly("inputs", [](const Graph &g) { return signatureTuple(g.inputs()); })
      .def_property_readonly("outputs", [](const Graph &g) { return signatureTuple(g.outputs()); })
      .def_property_readonly("shard_layout", &Graph::shardLayout)
      .def("interpret", &interpretGraph)
      .def("value_and_grad", &Graph::valueAndGrad, py::arg("wrt"))
      .def("compile", &Graph::compile, py::arg("device") = "cpu")
      .def("cuda_source", &Graph::cudaSource, py::arg("target") = "cuda:sm_90")
      .def("cuda_attention_source", &Graph::cudaAttentionSource,
           py::arg("target") = "cuda:sm_90")
      .def("autocast", &Graph::autocast, py::arg("precision"),
           py::arg("keep_fp32") = std::vector<std::string>{})
      .def("memory_plan", [](const Graph &g, const std::string &target) {
        return programMemoryPlan(g.plannedProgram(target));
      }, py::arg("target") = "cpu")
      .def("compile_artifact", [](const Graph &g, const std::string &target,
                                  const std::string &metadata) {
        return py::bytes(g.compileArtifact(target, metadata));
      }, py::arg("target") = "cpu", py::arg("metadata") = "")
      .def("cuda_ptx", &Graph::cudaPtx, py::arg("target") = "cuda:sm_90")
      .def("cuda_attention_ptx", &Graph::cudaAttentionPtx, py::arg("target") = "cuda:sm_90")
      .def("compile_cuda", [](const Graph &g, const std::string &target) {
        py::list rows;
        for (const CudaKernelReport &k : g.compileCuda(target)) {
          py::dict row = resourceRow(k);
          row["name"] = k.name;
          row["cached"] = k.cached;
          rows.append(row);
        }
        return rows;
      }, py::arg("target") = "cuda:sm_90")
      .def("fuse", &Graph::fuse, py::arg("target") = "cpu")
      .def("primitive", &Graph::primitive, py::arg("target") = "cpu")
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
      .def("numerics_report", [](const Graph &g, const py::sequence &args,
                                 const std::string &device) {
        std::vector<HostTensor> inputs;
        for (py::handle a : args)
          inputs.push_back(toHostTensor(py::array::ensure(a)));
        py::list rows;
        std::vector<NumericsRow> report = g.numericsReport(inputs, device);
        for (const NumericsRow &v : report) {
          py::dict row;
          row["kernel"] = v.kernel;
          row["output"] = v.output;
          row["ops"] = py::cast(v.ops);
          row["location"] = v.location;
          row["dtype"] = v.dtype;
          row["lowest"] = v.lowest;
          row["reduction_length"] = v.reductionLength;
          row["error"] = v.error;
          row["bound"] = v.bound;
          row["over"] = v.over;
          rows.append(row);
        }
        return py::make_tuple(rows, formatNumericsReport(report));
      }, py::arg("args"), py::arg("device") = "cpu")
      .def("train_step", [](const Graph &g, unsigned numParams, const py::dict &options,
                            unsigned numState) {
        return g.trainStep(numParams, optimizerConfigFrom(options), numState);
      }, py::arg("num_params"), py::arg("config"), py::arg("num_state") = 0);

  registerExecutorBindings(m);
  py::class_<Executable, std::shared_ptr<Executable>>(m, "Executable")
      .def("run", [](std::shared_ptr<Executable> e, const py::sequence &args,
                     const py::object &which, const std::string &out, const py::object &into) {
             return runExecutor(e->exec(), args, which, out, e, into);
           },
           py::arg("args"), py::arg("results") = py::none(), py::arg("out") = "numpy",
           py::arg("into") = py::none())
      .def("kernels", [](const Executable &e) { return programKernels(e.program()); })
      .def("memory_plan", [](const Executable &e) { return programMemoryPlan(e.program()); })
      .def("make_persistent", [](Executable &e, size_t i, const py::array &a) {
        makePersistent(e.exec(), i, a);
      })
      .def("carry", [](Executable &e, size_t r, size_t a) { e.exec().carry(r, a); },
           py::arg("result"), py::arg("argument"))
      .def("persistent", [](Executable &e, size_t i) { return persistentValue(e.exec(), i); })
      .def("set_communicator", [](Executable &e, const std::string &group, const py::object &comm) {
        setPythonCommunicator(e.exec(), group, comm);
      }, py::arg("group"), py::arg("communicator"))
      .def("set_nccl_communicator", [](Executable &e, const std::string &group, const py::bytes &id,
                                       int64_t rank, int64_t size) {
        e.exec().setNcclCommunicator(group, std::string(id), rank, size);
      }, py::arg("group"), py::arg("unique_id"), py::arg("rank"), py::arg("size"))
      .def("result_in_caller_memory", [](Executable &e, size_t i) {
        auto *cpu = dynamic_cast<CpuExecutor *>(&e.exec());
        return cpu != nullptr && cpu->redirectable(i);
      }, "Whether result i is computed straight into the returned array")
      // (result, argument) pairs: results that are an argument's next value.
      .def_property_readonly("aliases", [](const Executable &e) { return e.program().aliases; })
      .def("set_profiling", [](Executable &e, bool on) { e.exec().setProfiling(on); })
      .def("step_seconds", [](Executable &e) {
        return std::make_pair(e.exec().stepSeconds(), e.exec().profiledCalls());
      })
      .def_property_readonly("device", [](Executable &e) { return e.exec().device(); })
      .def_property_readonly("cuda_resources", [](const Executable &e) {
        py::dict out;
        for (const CudaKernelReport &k : e.artifacts().cudaReports) {
          py::dict row = resourceRow(k);
          row["compile_log"] = k.log;
          out[py::str(k.name)] = row;
        }
        return out;
      }, "NVRTC's resource report and log per CUDA kernel (empty on the CPU)")
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
  m.def("parse", &Graph::parse, py::arg("text"), py::arg("entry") = "",
        py::arg("source_name") = "<graph text>");
#ifdef TILEFUSE_HAVE_NVRTC
  m.def("cuda_library_source", &cudaLibrarySource,
        "CUDA C of the runtime's gather/scatter-add/convert kernels");
#endif
  m.def("clear_cache", &Graph::clearCompileCache,
        "Empties the cache of compiled graphs; returns how many it held");

  py::class_<Tracer>(m, "Tracer")
      .def(py::init<const std::string &>(), py::arg("name") = "main")
      .def("set_location", &Tracer::setLocation)
      .def("clear_location", &Tracer::clearLocation)
      .def("begin_checkpoint", &Tracer::beginCheckpoint)
      .def("set_autocast", &Tracer::setAutocast)
      .def("end_checkpoint", &Tracer::endCheckpoint)
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
      .def("grouped_matmul", &Tracer::groupedMatmul)
      .def("sort", &Tracer::sort)
      .def("grouped_matmul_weight_grad", &Tracer::groupedMatmulWeightGrad)
      .def("conv", &Tracer::conv, py::arg("kind"), py::arg("a"), py::arg("b"),
           py::arg("strides"), py::arg("padding_low"), py::arg("padding_high"),
           py::arg("dilation"), py::arg("groups"), py::arg("size") = Shape{})
      .def("scatter_add", &Tracer::scatterAdd)
      .def("attention", &Tracer::attention, py::arg("q"), py::arg("k"), py::arg("v"),
           py::arg("mask"), py::arg("scale"), py::arg("causal"), py::arg("seed") = -1,
           py::arg("dropout_p") = 0.0, py::arg("stream") = 0)
      .def("attention_grad", &Tracer::attentionGrad, py::arg("q"), py::arg("k"), py::arg("v"),
           py::arg("out"), py::arg("lse"), py::arg("grad"), py::arg("mask"), py::arg("scale"),
           py::arg("causal"), py::arg("seed") = -1, py::arg("dropout_p") = 0.0,
           py::arg("stream") = 0)
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
