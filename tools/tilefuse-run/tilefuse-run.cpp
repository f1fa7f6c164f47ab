//===- tilefuse-run.cpp - run an artifact (runtime only, no MLIR) ---------===//
//
//   tilefuse-run model.tfa [--inputs=a.npy,b.npy,...] [--save=DIR] [--repeat=N]
//                [--no-graphs] [--tf32]
//
// Runs the artifact on the given .npy inputs (one per argument, in order),
// or on synthetic ones (floats uniform in [-1, 1) from a fixed generator,
// integers 0, booleans false; for a training step, a start a fresh
// optimizer could have: parameters uniform in [-1, 1), optimizer state 0,
// loss scale 65536, step 1, learning rate 1e-3), prints each result's
// dtype, shape and sum and the mean time of a run, and with --save writes
// result<i>.npy files.
// CPU artifacts run on this CPU, CUDA artifacts on the first GPU (replaying
// a CUDA graph per run unless --no-graphs).
//
//===----------------------------------------------------------------------===//
#include "runtime/Artifact.h"
#include "runtime/Npy.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>

#include "../NumberFlags.h"

using namespace tilefuse;

namespace {
constexpr const char *kUsage =
    "usage: tilefuse-run model.tfa [--inputs=a.npy,b.npy,...] [--save=DIR] [--repeat=N] "
    "[--no-graphs] [--tf32]\n";

/// The arguments of a training step (a program with kept arguments) that
/// must not be random: a start a fresh optimizer could have. Random
/// optimizer state is not one (a negative second moment makes Adam's
/// sqrt NaN), nor step 0 (Adam's bias correction divides by 1 - beta^0).
/// The kept arguments are the parameters, then each optimizer state slot
/// for every parameter in the same order, then a loss scaler's three 0-d
/// values; the parameters are found as the shortest prefix whose
/// shapes and dtypes the rest repeats (too short a prefix only zeroes
/// parameters, which is still a valid start).
std::vector<std::optional<double>> trainStepStart(const Program &p) {
  std::vector<std::optional<double>> fixed(p.arguments.size());
  if (p.aliases.empty())
    return fixed;
  std::vector<size_t> kept;
  for (size_t a = 0; a < p.arguments.size(); ++a)
    for (const auto &[result, argument] : p.aliases)
      if (size_t(argument) == a) {
        kept.push_back(a);
        break;
      }
  auto info = [&](size_t a) -> const BufferInfo & { return p.buffers[p.arguments[a]]; };
  size_t slots = kept.size();
  if (slots >= 3 && info(kept[slots - 3]).shape.empty() && info(kept[slots - 2]).shape.empty() &&
      info(kept[slots - 1]).shape.empty() && isFloatDType(info(kept[slots - 3]).dtype) &&
      !isFloatDType(info(kept[slots - 2]).dtype)) {
    fixed[kept[slots - 3]] = 65536.0; // scale; growth tracker, applied steps 0
    fixed[kept[slots - 2]] = fixed[kept[slots - 1]] = 0.0;
    slots -= 3;
  }
  size_t params = slots;
  for (size_t n = 1; n < slots; ++n) {
    if (slots % n)
      continue;
    bool repeats = true;
    for (size_t i = n; i < slots && repeats; ++i)
      repeats = info(kept[i]).shape == info(kept[i % n]).shape &&
                info(kept[i]).dtype == info(kept[i % n]).dtype;
    if (repeats) {
      params = n;
      break;
    }
  }
  for (size_t i = params; i < slots; ++i)
    fixed[kept[i]] = 0.0;
  // After the batch: [seed,] step (0-d integers), then a learning rate per
  // parameter group (0-d f64).
  for (size_t a = p.arguments.size(); a-- > 0;) {
    const BufferInfo &b = info(a);
    if (fixed[a] || !b.shape.empty() || std::find(kept.begin(), kept.end(), a) != kept.end())
      break;
    if (b.dtype == DType::F64)
      fixed[a] = 1e-3;
    else if (!isFloatDType(b.dtype))
      fixed[a] = 1.0;
    else
      break;
  }
  return fixed;
}

/// Arguments of `p` drawn from a fixed generator (trainStepStart's values
/// where it has one).
std::vector<HostTensor> syntheticArguments(const Program &p) {
  std::vector<HostTensor> args;
  std::vector<std::optional<double>> fixed = trainStepStart(p);
  uint64_t state = 0x9E3779B97F4A7C15ull;
  for (size_t a = 0; a < p.arguments.size(); ++a) {
    const BufferInfo &info = p.buffers[p.arguments[a]];
    HostTensor t(info.dtype, info.shape);
    for (int64_t i = 0; i < t.size(); ++i) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      if (fixed[a])
        t.setDouble(i, *fixed[a]);
      else if (isFloatDType(t.dtype))
        t.setDouble(i, double(state >> 11) / double(1ull << 53) * 2 - 1);
    }
    args.push_back(std::move(t));
  }
  return args;
}
} // namespace

int main(int argc, char **argv) {
  std::string path, inputs, saveDir;
  int repeat = 1;
  bool graphs = true, tf32 = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::cerr << kUsage;
      return 0;
    }
    if (a.rfind("--inputs=", 0) == 0)
      inputs = a.substr(9);
    else if (a.rfind("--save=", 0) == 0)
      saveDir = a.substr(7);
    else if (a == "--no-graphs")
      graphs = false;
    else if (a == "--tf32")
      tf32 = true;
    else if (a.rfind("--repeat=", 0) == 0) {
      std::optional<long> n = parseIntegerFlag(a.substr(9), 1, 1000000000);
      if (!n) {
        std::cerr << "tilefuse-run: --repeat needs a positive whole number of runs, got '"
                  << a.substr(9) << "'\n";
        return 2;
      }
      repeat = int(*n);
    }
    else if (path.empty() && a[0] != '-')
      path = a;
    else {
      std::cerr << "tilefuse-run: unknown argument '" << a << "'\n";
      return 2;
    }
  }
  if (path.empty()) {
    std::cerr << "tilefuse-run: no artifact given; " << kUsage;
    return 2;
  }
  if (!saveDir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(saveDir, ec);
    if (ec || !std::filesystem::is_directory(saveDir)) {
      std::cerr << "tilefuse-run: cannot create the --save folder '" << saveDir
                << "': " << (ec ? ec.message() : "a file of that name exists") << "\n";
      return 1;
    }
  }
  try {
    Artifact artifact = readArtifactFile(path);
    std::unique_ptr<Executor> exe = loadArtifact(artifact, LoadOptions{graphs, tf32});
    const Program &p = exe->program();
    std::vector<HostTensor> args;
    if (inputs.empty()) {
      args = syntheticArguments(p);
    } else {
      size_t from = 0;
      while (from <= inputs.size()) {
        size_t comma = inputs.find(',', from);
        args.push_back(readNpy(inputs.substr(from, comma - from)));
        if (comma == std::string::npos)
          break;
        from = comma + 1;
      }
      if (args.size() != p.arguments.size())
        throw CompileError("the artifact takes " + std::to_string(p.arguments.size()) +
                           " arguments, --inputs gives " + std::to_string(args.size()));
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
      if (!saveDir.empty())
        writeNpy(saveDir + "/result" + std::to_string(i) + ".npy", out[i]);
    }
  } catch (const CompileError &e) {
    std::cerr << "tilefuse-run: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
