//===- attention_products.cpp - fused attention's block products ----------===//
//
// The CPU attention kernels' products with A transposed (dV += P^T dO,
// dK += dS^T Q), through oneDNN's matmul and through blockProduct, and the
// whole f32 backward (T = 4096, 2 heads, head size 64, 2 threads) either
// way; and GPT-2 small's bf16 attention, forward and backward
// (BM_attention_bf16_gpt2). Run with interleaving so both ways see the same machine:
//
//   build/bin/tilefuse-attention-bench --benchmark_repetitions=6 \
//       --benchmark_enable_random_interleaving=true \
//       --benchmark_report_aggregates_only=true
//
// Argument 0: oneDNN (or the BLAS where oneDNN is missing); 1: blockProduct.
//
//===----------------------------------------------------------------------===//
#include "runtime/CpuAttention.h"
#include "runtime/CpuBlockProduct.h"
#include "runtime/CpuDnnl.h"
#include "runtime/CpuLibrary.h"

#include <benchmark/benchmark.h>

#include <random>
#include <vector>

using namespace tilefuse;

namespace {

std::vector<float> normal(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist;
  std::vector<float> x(n);
  for (float &e : x)
    e = dist(rng);
  return x;
}

/// C[512 x 64] += A^T B for A [256 x 512] (leading dimension 512, a block of
/// probabilities) and B [256 x 64] (the block's output-gradient rows).
void BM_transposed_block_product(benchmark::State &state) {
  constexpr int64_t m = 512, n = 64, k = 256;
  std::vector<float> a = normal(k * m, 1), b = normal(k * n, 2), c(m * n, 0.0f);
  bool blocks = state.range(0) == 1;
  if (blocks && !cpu::haveBlockProduct()) {
    state.SkipWithError("blockProduct needs AVX-512F");
    return;
  }
  for (auto _ : state) {
    if (blocks)
      cpu::blockProduct(m, n, k, a.data(), 1, m, b.data(), n, c.data(), n, true);
    else if (!cpu::dnnlSgemmSlab(true, false, m, n, k, a.data(), m, b.data(), n, c.data(), n,
                                 true))
      cpu::sgemmOnThisThread(true, false, m, n, k, 1.0f, a.data(), m, b.data(), n, 1.0f,
                             c.data(), n);
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * m * n * k * double(state.iterations()), benchmark::Counter::kIsRate);
}

/// graph.attention_grad's CPU kernel, f32, non-causal.
void BM_attention_backward(benchmark::State &state) {
  cpu::AttentionShape s;
  s.heads = s.kvHeads = 2;
  s.queries = s.keys = 4096;
  s.headDim = s.valueDim = 64;
  s.scale = 0.125;
  size_t elements = size_t(s.heads * s.queries * s.headDim);
  std::vector<float> q = normal(elements, 1), k = normal(elements, 2), v = normal(elements, 3),
                     dOut = normal(elements, 4);
  std::vector<float> out(elements), lse(size_t(s.heads * s.queries)), dq(elements),
      dk(elements), dv(elements);
  cpu::attentionForward(s, q.data(), k.data(), v.data(), nullptr, out.data(), lse.data());
  bool before = cpu::haveBlockProduct();
  cpu::setBlockProductsEnabled(state.range(0) == 1);
  for (auto _ : state)
    cpu::attentionBackward(s, q.data(), k.data(), v.data(), nullptr, out.data(), lse.data(),
                           dOut.data(), dq.data(), dk.data(), dv.data());
  cpu::setBlockProductsEnabled(before);
  double flops = 2.0 * 5 * double(s.heads) * double(s.queries * s.keys * s.headDim);
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * double(state.iterations()), benchmark::Counter::kIsRate);
}

/// bf16 q, k, v of `s` (random normal values rounded to bf16).
std::vector<uint16_t> bf16Normal(size_t n, uint32_t seed) {
  std::vector<float> x = normal(n, seed);
  std::vector<uint16_t> h(n);
  for (size_t i = 0; i < n; ++i)
    h[i] = floatToBF16(x[i]);
  return h;
}

/// GPT-2 small's attention in bf16 (batch 2, 12 heads, 512 tokens, head
/// size 64, causal): the forward (arg 0) or the backward (arg 1).
void BM_attention_bf16_gpt2(benchmark::State &state) {
  cpu::AttentionShape s;
  s.batch = 2;
  s.heads = s.kvHeads = 12;
  s.queries = s.keys = 512;
  s.headDim = s.valueDim = 64;
  s.scale = 0.125;
  s.causal = true;
  size_t elements = size_t(s.batch * s.heads * s.queries * s.headDim);
  std::vector<uint16_t> q = bf16Normal(elements, 1), k = bf16Normal(elements, 2),
                        v = bf16Normal(elements, 3), dOut = bf16Normal(elements, 4);
  std::vector<uint16_t> out(elements), dq(elements), dk(elements), dv(elements);
  std::vector<float> lse(size_t(s.batch * s.heads * s.queries));
  cpu::attentionForward(s, DType::BF16, q.data(), k.data(), v.data(), nullptr, out.data(),
                        lse.data());
  bool backward = state.range(0) == 1;
  for (auto _ : state) {
    if (backward)
      cpu::attentionBackward(s, DType::BF16, q.data(), k.data(), v.data(), nullptr, out.data(),
                             lse.data(), dOut.data(), dq.data(), dk.data(), dv.data());
    else
      cpu::attentionForward(s, DType::BF16, q.data(), k.data(), v.data(), nullptr, out.data(),
                            lse.data());
  }
  // The causal products' useful work: half of the scores; two products
  // forward, five backward.
  double flops = 2.0 * (backward ? 5 : 2) * double(s.batch * s.heads) *
                 double(s.queries * s.keys / 2 * s.headDim);
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * double(state.iterations()), benchmark::Counter::kIsRate);
}

} // namespace

BENCHMARK(BM_attention_bf16_gpt2)->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_transposed_block_product)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_attention_backward)->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
