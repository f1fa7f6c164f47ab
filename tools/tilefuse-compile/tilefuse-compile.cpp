//===- tilefuse-compile.cpp - graph-dialect .mlir -> .tfa artifact --------===//
//
//   tilefuse-compile model.mlir --target=cpu|cuda:sm_90 -o model.tfa
//       [--entry=NAME] [--precision=fp32|bf16|fp16] [--train --num-params=N --optimizer=sgd|adam|adamw|rmsprop
//        --weight-decay=W --momentum=M --clip-norm=C --loss-scale=dynamic|none
//        --growth-interval=N] [--numerics-report]
//
// The same pipeline as tilefuse.compile (Graph::compileArtifact). With
// --train, the entry function is a loss whose first N arguments are
// parameters, and the artifact holds the whole training step. An f16 step
// scales its loss dynamically unless --loss-scale=none: the scale, the
// growth tracker and the applied-step count are then kept arguments after
// the optimizer state. --numerics-report prints every kernel's error against
// f32 (Graph::numericsReport) on seeded inputs: floats N(0, 0.5^2), integers
// 0, and for a training step zero optimizer state, the initial loss scale,
// step 1 and lr 1e-3.
//
//===----------------------------------------------------------------------===//
#include "frontend/Graph.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <optional>
#include <random>
#include <sstream>

#include <unistd.h>

#include "../NumberFlags.h"

using namespace tilefuse;

namespace {
/// Seeded inputs for --numerics-report (see the banner).
std::vector<HostTensor> reportInputs(const Graph &g, unsigned numParams,
                                     const OptimizerConfig &config) {
  std::vector<TensorSignature> sigs = g.inputs();
  std::vector<HostTensor> args;
  std::mt19937_64 rng(0);
  std::normal_distribution<double> normal(0.0, 0.5);
  size_t state = numParams * (1 + config.statePerParam());
  for (size_t i = 0; i < sigs.size(); ++i) {
    HostTensor t(sigs[i].dtype, sigs[i].shape);
    bool zero = !isFloatDType(t.dtype) || (i >= numParams && i < state);
    for (int64_t k = 0; k < t.size(); ++k)
      t.setDouble(k, zero ? 0.0 : normal(rng));
    args.push_back(std::move(t));
  }
  if (numParams > 0) {
    if (config.lossScale.dynamic) {
      args.at(state).setDouble(0, 65536.0); // the scale; tracker, applied: 0
      args.at(state + 1).setDouble(0, 0.0);
      args.at(state + 2).setDouble(0, 0.0);
    }
    args.at(sigs.size() - 2).setDouble(0, 1.0);  // step
    args.at(sigs.size() - 1).setDouble(0, 1e-3); // lr
  }
  return args;
}

int usage(const std::string &why) {
  std::cerr << "tilefuse-compile: " << why << "\n"
            << "usage: tilefuse-compile model.mlir --target=cpu|cuda:sm_XX -o out.tfa "
               "[--entry=NAME] [--precision=fp32|bf16|fp16] [--train --num-params=N "
               "--optimizer=sgd|adam|adamw|rmsprop --weight-decay=W --momentum=M --clip-norm=C "
               "--loss-scale=dynamic|none --growth-interval=N] [--numerics-report]\n";
  return 2;
}
} // namespace

int main(int argc, char **argv) {
  std::string input, output, target = "cpu", entry, optimizer = "adamw", precision = "fp32";
  bool train = false, numericsReport = false;
  long numParams = -1, growthInterval = 2000;
  bool growthIntervalGiven = false;
  std::string lossScale; // default: dynamic for fp16, none otherwise
  double weightDecay = 0, momentum = 0, clipNorm = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto number = [&](const char *flag, const char *text, double &out) {
      std::optional<double> v = parseNumberFlag(text, 0.0);
      if (!v) {
        usage(std::string(flag) + " needs a finite number >= 0, got '" + text + "'");
        return false;
      }
      out = *v;
      return true;
    };
    auto value = [&](const char *flag) -> const char * {
      size_t n = std::strlen(flag);
      return a.compare(0, n, flag) == 0 ? a.c_str() + n : nullptr;
    };
    if (a == "--help" || a == "-h")
      return usage("compiles a graph-dialect module into an ahead-of-time artifact"), 0;
    if (a == "-o" && i + 1 < argc) output = argv[++i];
    else if (const char *v = value("--target=")) target = v;
    else if (const char *v = value("--entry=")) entry = v;
    else if (const char *v = value("--precision=")) precision = v;
    else if (a == "--train") train = true;
    else if (a == "--numerics-report") numericsReport = true;
    else if (const char *v = value("--num-params=")) {
      std::optional<long> n = parseIntegerFlag(v, 0, 1L << 30);
      if (!n)
        return usage(std::string("--num-params needs a whole number >= 0, got '") + v + "'");
      numParams = *n;
    } else if (const char *v = value("--growth-interval=")) {
      std::optional<long> n = parseIntegerFlag(v, 1, 1L << 40);
      if (!n)
        return usage(std::string("--growth-interval needs a whole number >= 1, got '") + v +
                     "'");
      growthInterval = *n;
      growthIntervalGiven = true;
    } else if (const char *v = value("--loss-scale=")) {
      lossScale = v;
      if (lossScale != "dynamic" && lossScale != "none")
        return usage("--loss-scale must be dynamic or none, got '" + lossScale + "'");
    } else if (const char *v = value("--optimizer=")) optimizer = v;
    else if (const char *v = value("--weight-decay=")) {
      if (!number("--weight-decay", v, weightDecay)) return 2;
    } else if (const char *v = value("--momentum=")) {
      if (!number("--momentum", v, momentum)) return 2;
    } else if (const char *v = value("--clip-norm=")) {
      if (!number("--clip-norm", v, clipNorm)) return 2;
    }
    else if (!a.empty() && a[0] != '-' && input.empty()) input = a;
    else return usage("unknown argument '" + a + "'");
  }
  if (input.empty() || output.empty())
    return usage("an input .mlir file and -o OUTPUT are required");
  if (!train && (!lossScale.empty() || growthIntervalGiven))
    return usage("--loss-scale and --growth-interval apply to training steps: add --train");
  std::ifstream in(input);
  if (!in)
    return usage("cannot read " + input);
  std::stringstream text;
  text << in.rdbuf();
  try {
    std::shared_ptr<Graph> g = Graph::parse(text.str(), entry, input);
    // The policy sees the model's composites, before differentiation.
    if (precision != "fp32")
      g = g->autocast(precision);
    if (train) {
      if (numParams < 0)
        return usage("--train needs --num-params=N");
      OptimizerConfig config;
      std::string error;
      if (!OptimizerConfig::fromOptions(optimizer, momentum, false, 0.9, 0.999, 1e-8,
                                        weightDecay, clipNorm, config, error))
        return usage(error);
      bool f16 = precision == "fp16" || precision == "f16" || precision == "float16";
      config.lossScale.dynamic = lossScale.empty() ? f16 : lossScale == "dynamic";
      config.lossScale.growthInterval = growthInterval;
      g = g->trainStep(unsigned(numParams), config);
      if (numericsReport)
        std::cout << formatNumericsReport(g->numericsReport(
            reportInputs(*g, unsigned(numParams), config)));
    } else if (numericsReport) {
      std::cout << formatNumericsReport(g->numericsReport(reportInputs(*g, 0, {})));
    }
    std::string bytes = g->compileArtifact(target);
    // A temporary file beside, then a rename: a failed or full-disk write
    // never leaves a truncated artifact where a good one was.
    std::string tmp = output + ".tmp." + std::to_string(::getpid());
    {
      std::ofstream out(tmp, std::ios::binary);
      out.write(bytes.data(), std::streamsize(bytes.size()));
      out.close();
      if (!out) {
        std::remove(tmp.c_str());
        std::cerr << "tilefuse-compile: cannot write " << output << " (" << std::strerror(errno)
                  << "); nothing was written\n";
        return 1;
      }
    }
    if (std::rename(tmp.c_str(), output.c_str()) != 0) {
      std::cerr << "tilefuse-compile: cannot write " << output << " (" << std::strerror(errno)
                << ")\n";
      std::remove(tmp.c_str());
      return 1;
    }
    std::cerr << "tilefuse-compile: wrote " << output << " (" << bytes.size() << " bytes, "
              << target << ")\n";
  } catch (const CompileError &e) {
    std::cerr << "tilefuse-compile: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
