//===- CompileTest.cpp - Graph::compile on the CPU backend ----------------===//
#include "frontend/Executable.h"
#include "frontend/Graph.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace tilefuse;

TEST(Compile, LayerNormAndSoftmaxMatchTheInterpreter) {
  auto g = Graph::parse(R"(
    func.func @f(%x: tensor<37x130xf32>, %g: tensor<130xf32>, %b: tensor<130xf32>) -> (tensor<37x130xf32>, tensor<37x130xf32>) {
      %0 = graph.layer_norm %x, %g, %b : (tensor<37x130xf32>, tensor<130xf32>, tensor<130xf32>) -> tensor<37x130xf32>
      %1 = graph.softmax %0 {dim = 1 : i64} : (tensor<37x130xf32>) -> tensor<37x130xf32>
      return %0, %1 : tensor<37x130xf32>, tensor<37x130xf32>
    })");
  std::vector<HostTensor> args;
  for (const TensorSignature &sig : g->inputs()) {
    HostTensor t(sig.dtype, sig.shape);
    for (int64_t i = 0; i < t.size(); ++i)
      t.setDouble(i, std::sin(0.37 * double(i)) * 3);
    args.push_back(std::move(t));
  }
  auto want = g->interpret(args);
  auto exe = g->compile("cpu");
  auto got = exe->run(args);
  ASSERT_EQ(got.size(), want.size());
  for (size_t r = 0; r < got.size(); ++r)
    for (int64_t i = 0; i < got[r].size(); ++i)
      ASSERT_NEAR(got[r].getDouble(i), want[r].getDouble(i),
                  1e-5 * std::max(1.0, std::fabs(want[r].getDouble(i))))
          << "result " << r << " element " << i;
  EXPECT_FALSE(exe->cacheHit());
  EXPECT_TRUE(g->compile("cpu")->cacheHit());
}

TEST(Compile, UnknownDeviceIsAnError) {
  auto g = Graph::parse(R"(
    func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
      return %x : tensor<4xf32>
    })");
  EXPECT_THROW(g->compile("cuda"), CompileError);
}
