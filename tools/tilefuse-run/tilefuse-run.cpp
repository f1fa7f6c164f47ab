//===- tilefuse-run.cpp - run an artifact (runtime only, no MLIR) ---------===//
//
//   tilefuse-run model.tfa [--repeat=N] [--no-graphs] [--tf32]
//
// Runs the artifact on synthetic inputs (floats uniform in [-1, 1) from a
// fixed generator, integers 0, booleans false) and prints each result's
// dtype, shape and sum, and the mean time of a run. CPU artifacts run on
// this CPU, CUDA artifacts on the first GPU (replaying a CUDA graph per run
// unless --no-graphs).
//
//===----------------------------------------------------------------------===//
#include "runtime/Artifact.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>

using namespace tilefuse;

int main(int argc, char **argv) {
  std::string path;
  int repeat = 1;
  bool graphs = true, tf32 = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::cerr << "usage: tilefuse-run model.tfa [--repeat=N] [--no-graphs] [--tf32]\n";
      return 0;
    }
    if (a == "--no-graphs")
      graphs = false;
    else if (a == "--tf32")
      tf32 = true;
    else if (a.rfind("--repeat=", 0) == 0)
      repeat = std::max(1, std::atoi(a.c_str() + 9));
    else if (path.empty() && a[0] != '-')
      path = a;
    else {
      std::cerr << "tilefuse-run: unknown argument '" << a << "'\n";
      return 2;
    }
  }
  if (path.empty()) {
    std::cerr << "tilefuse-run: no artifact given; usage: tilefuse-run model.tfa [--repeat=N]\n";
    return 2;
  }
  try {
    Artifact artifact = readArtifactFile(path);
    std::unique_ptr<Executor> exe = loadArtifact(artifact, LoadOptions{graphs, tf32});
    const Program &p = exe->program();
    std::vector<HostTensor> args;
    uint64_t state = 0x9E3779B97F4A7C15ull;
    for (int b : p.arguments) {
      HostTensor t(p.buffers[b].dtype, p.buffers[b].shape);
      for (int64_t i = 0; i < t.size(); ++i) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        if (isFloatDType(t.dtype))
          t.setDouble(i, double(state >> 11) / double(1ull << 53) * 2 - 1);
      }
      args.push_back(std::move(t));
    }
    std::vector<HostTensor> out;
    auto start = std::chrono::steady_clock::now();
    for (int r = 0; r < repeat; ++r)
      out = exe->run(args);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                    .count() / repeat;
    std::cout << artifact.target << " on " << exe->device() << ": " << p.steps.size() << " steps, " << p.kernels.size()
              << " kernels; " << ms << " ms per run\n";
    for (size_t i = 0; i < out.size(); ++i) {
      double sum = 0;
      for (int64_t k = 0; k < out[i].size(); ++k)
        sum += isFloatDType(out[i].dtype) ? out[i].getDouble(k) : double(out[i].getInt(k));
      std::cout << "result " << i << ": " << dtypeName(out[i].dtype)
                << shapeToString(out[i].shape) << " sum " << sum << "\n";
    }
  } catch (const CompileError &e) {
    std::cerr << "tilefuse-run: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
