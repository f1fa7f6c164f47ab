//===- kernel_bench.cpp - fused CPU kernels against a memcpy baseline -----===//
//
// Each benchmark compiles one graph with the same pipeline users get
// (Graph::compile), runs it on arrays well past the last-level cache and
// reports the bandwidth of the bytes its program must move (arguments plus
// results). A two-thread memcpy of 512 MiB in the same binary, on the same
// thread pool, is the baseline; the table printed last gives each kernel's
// bandwidth as a fraction of it.
//
//   build/bin/tilefuse-kernel-bench [--benchmark_filter=softmax]
//
//===----------------------------------------------------------------------===//
#include "frontend/Executable.h"
#include "frontend/Graph.h"
#include "runtime/ThreadPool.h"

#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>

using namespace tilefuse;

namespace {

constexpr int64_t kMiB = 1 << 20;

/// Inputs filled with values every kernel accepts (positive, moderate).
std::vector<HostTensor> randomArguments(const Graph &g) {
  std::vector<HostTensor> args;
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> uniform(0.1f, 1.0f);
  for (const TensorSignature &sig : g.inputs()) {
    HostTensor t(sig.dtype, sig.shape);
    for (int64_t i = 0; i < t.size(); ++i) {
      if (isFloatDType(sig.dtype))
        t.setDouble(i, uniform(rng));
      else
        t.setInt(i, int64_t(rng() % 7)); // class ids below every vocab here
    }
    args.push_back(std::move(t));
  }
  return args;
}

/// Runs `g` compiled for the CPU; bytes = arguments + results per call.
void runGraph(benchmark::State &state, const std::shared_ptr<Graph> &g) {
  std::shared_ptr<Executable> exe = g->compile("cpu");
  std::vector<HostTensor> args = randomArguments(*g);
  std::vector<ArgRef> ptrs;
  int64_t bytes = 0;
  for (const HostTensor &t : args) {
    ptrs.push_back({t.bytes.data(), false});
    bytes += int64_t(t.bytes.size());
  }
  for (const TensorSignature &sig : g->outputs())
    bytes += numElements(sig.shape) * int64_t(dtypeSize(sig.dtype));
  exe->exec().run(ptrs); // first touch of every buffer, outside the timing
  for (auto _ : state)
    exe->exec().run(ptrs);
  state.SetBytesProcessed(state.iterations() * bytes);
  state.counters["MiB"] = double(bytes) / kMiB;
}

std::shared_ptr<Graph> parse(const std::string &text) { return Graph::parse(text); }

std::string f32(const std::vector<int64_t> &shape) {
  std::string s = "tensor<";
  for (int64_t d : shape)
    s += std::to_string(d) + "x";
  return s + "f32>";
}

// --- the kernels -----------------------------------------------------------

/// 8 elementwise ops over two 512 MiB inputs.
void BM_pointwise_chain(benchmark::State &state) {
  std::string t = f32({8192, 16384});
  runGraph(state, parse(
      "func.func @chain(%x: " + t + ", %y: " + t + ") -> " + t + " {\n"
      "  %h = graph.full 0.5 : " + t + "\n"
      "  %o = graph.full 1.0 : " + t + "\n"
      "  %1 = graph.mul %x, %y : " + t + "\n"
      "  %2 = graph.add %1, %x : " + t + "\n"
      "  %3 = graph.mul %2, %h : " + t + "\n"
      "  %4 = graph.sub %3, %y : " + t + "\n"
      "  %5 = graph.abs %4 : " + t + "\n"
      "  %6 = graph.add %5, %o : " + t + "\n"
      "  %7 = graph.sqrt %6 : " + t + "\n"
      "  %8 = graph.mul %7, %y : " + t + "\n"
      "  return %8 : " + t + "\n}\n"));
}

/// Rows of 1024 (a block loop per row), 512 MiB in and out.
void BM_softmax(benchmark::State &state) {
  std::string t = f32({131072, 1024});
  runGraph(state, parse(
      "func.func @softmax(%x: " + t + ") -> " + t + " {\n"
      "  %0 = graph.softmax %x {dim = 1 : i64} : (" + t + ") -> " + t + "\n"
      "  return %0 : " + t + "\n}\n"));
}

/// Forward and backward: loss = sum(layer_norm(x) * w), gradients for x,
/// gamma and beta.
void BM_layer_norm_fwd_bwd(benchmark::State &state) {
  std::string t = f32({65536, 1024}), v = f32({1024});
  auto g = parse(
      "func.func @ln(%x: " + t + ", %g: " + v + ", %b: " + v + ", %w: " + t +
      ") -> tensor<f32> {\n"
      "  %0 = graph.layer_norm %x, %g, %b : (" + t + ", " + v + ", " + v + ") -> " + t + "\n"
      "  %1 = graph.mul %0, %w : " + t + "\n"
      "  %2 = graph.reduce_sum %1 {dims = array<i64: 0, 1>} : (" + t + ") -> tensor<f32>\n"
      "  return %2 : tensor<f32>\n}\n");
  runGraph(state, g->valueAndGrad({0, 1, 2}));
}

/// Forward and backward of the mean cross-entropy over a 32768-way vocab.
void BM_cross_entropy_fwd_bwd(benchmark::State &state) {
  std::string t = f32({4096, 32768});
  auto g = parse(
      "func.func @ce(%x: " + t + ", %y: tensor<4096xi64>) -> tensor<f32> {\n"
      "  %0 = graph.cross_entropy %x, %y : (" + t + ", tensor<4096xi64>) -> tensor<f32>\n"
      "  return %0 : tensor<f32>\n}\n");
  runGraph(state, g->valueAndGrad({0}));
}

/// One AdamW update of 32M parameters: reads p, g, m, v; writes p, m, v.
void BM_adamw_update(benchmark::State &state) {
  std::string t = f32({33554432});
  runGraph(state, parse(
      "func.func @adamw(%p: " + t + ", %g: " + t + ", %m: " + t + ", %v: " + t +
      ", %bc1: tensor<f32>, %bc2: tensor<f32>, %lr: tensor<f32>) -> (" + t + ", " + t +
      ", " + t + ") {\n"
      "  %b1 = graph.full 0.9 : " + t + "\n"
      "  %c1 = graph.full 0.1 : " + t + "\n"
      "  %b2 = graph.full 0.999 : " + t + "\n"
      "  %c2 = graph.full 0.001 : " + t + "\n"
      "  %eps = graph.full 1.0e-8 : " + t + "\n"
      "  %wd = graph.full 0.01 : " + t + "\n"
      "  %m1 = graph.mul %m, %b1 : " + t + "\n"
      "  %m2 = graph.mul %g, %c1 : " + t + "\n"
      "  %mn = graph.add %m1, %m2 : " + t + "\n"
      "  %gg = graph.mul %g, %g : " + t + "\n"
      "  %v1 = graph.mul %v, %b2 : " + t + "\n"
      "  %v2 = graph.mul %gg, %c2 : " + t + "\n"
      "  %vn = graph.add %v1, %v2 : " + t + "\n"
      "  %bc1b = graph.broadcast_in_dim %bc1 {dims = array<i64>} : (tensor<f32>) -> " + t + "\n"
      "  %bc2b = graph.broadcast_in_dim %bc2 {dims = array<i64>} : (tensor<f32>) -> " + t + "\n"
      "  %lrb = graph.broadcast_in_dim %lr {dims = array<i64>} : (tensor<f32>) -> " + t + "\n"
      "  %mh = graph.div %mn, %bc1b : " + t + "\n"
      "  %vh = graph.div %vn, %bc2b : " + t + "\n"
      "  %sq = graph.sqrt %vh : " + t + "\n"
      "  %den = graph.add %sq, %eps : " + t + "\n"
      "  %upd = graph.div %mh, %den : " + t + "\n"
      "  %dec = graph.mul %p, %wd : " + t + "\n"
      "  %tot = graph.add %upd, %dec : " + t + "\n"
      "  %stp = graph.mul %tot, %lrb : " + t + "\n"
      "  %pn = graph.sub %p, %stp : " + t + "\n"
      "  return %pn, %mn, %vn : " + t + ", " + t + ", " + t + "\n}\n"));
}

/// The baseline: 512 MiB copied by the same thread pool the kernels use;
/// bytes = read + written, as for the kernels.
void BM_memcpy(benchmark::State &state) {
  size_t n = 512 * kMiB;
  std::vector<char> src(n, 1), dst(n, 0);
  ThreadPool &pool = ThreadPool::global();
  auto copy = [&] {
    pool.parallelFor(int64_t(pool.size()), 1, [&](int64_t b, int64_t e) {
      size_t lo = n * size_t(b) / pool.size(), hi = n * size_t(e) / pool.size();
      std::memcpy(dst.data() + lo, src.data() + lo, hi - lo);
    });
  };
  copy();
  for (auto _ : state)
    copy();
  state.SetBytesProcessed(state.iterations() * int64_t(2 * n));
  state.counters["MiB"] = double(2 * n) / kMiB;
}

BENCHMARK(BM_memcpy)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_pointwise_chain)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_softmax)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_layer_norm_fwd_bwd)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_cross_entropy_fwd_bwd)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_adamw_update)->UseRealTime()->Unit(benchmark::kMillisecond);

/// Console output as usual, plus the bandwidth of every run kept for the
/// ratio table (medians when --benchmark_repetitions is given).
class RatioReporter : public benchmark::ConsoleReporter {
public:
  void ReportRuns(const std::vector<Run> &runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run &r : runs) {
      if (r.run_type == Run::RT_Aggregate && r.aggregate_name != "median")
        continue;
      auto it = r.counters.find("bytes_per_second");
      if (it != r.counters.end())
        gbps[r.run_name.function_name] = double(it->second) / 1e9;
    }
  }
  std::map<std::string, double> gbps;
};

} // namespace

int main(int argc, char **argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv))
    return 1;
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  auto base = reporter.gbps.find("BM_memcpy");
  std::printf("\n%-28s %10s %12s   (%u threads)\n", "kernel", "GB/s", "vs memcpy",
              ThreadPool::global().size());
  for (auto &[name, g] : reporter.gbps) {
    if (base != reporter.gbps.end() && base->second > 0)
      std::printf("%-28s %10.2f %11.0f%%\n", name.c_str(), g, 100.0 * g / base->second);
    else
      std::printf("%-28s %10.2f %12s\n", name.c_str(), g, "-");
  }
  return 0;
}
