//===- Module.cpp - the tilefuse._core extension --------------------------===//
//
// Thin: every rule lives in the C++ frontend. This file converts arguments
// and maps CompileError to tilefuse.CompileError.
//
//===----------------------------------------------------------------------===//
#include "frontend/Tracer.h"
#include "python/bindings/Conversions.h"

#include <pybind11/stl.h>

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
