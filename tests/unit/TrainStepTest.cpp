//===- TrainStepTest.cpp - value_and_grad and train steps through Graph ---===//
#include "frontend/Graph.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace tilefuse;

namespace {
/// loss(w, c) = sum((w - c)^2): gradient 2 (w - c).
const char *kQuadratic = R"(
  func.func @quad(%w: tensor<3xf64>, %c: tensor<3xf64>) -> tensor<f64> {
    %0 = graph.sub %w, %c : tensor<3xf64>
    %1 = graph.mul %0, %0 : tensor<3xf64>
    %2 = graph.reduce_sum %1 {dims = array<i64: 0>} : (tensor<3xf64>) -> tensor<f64>
    return %2 : tensor<f64>
  })";

HostTensor vec(std::vector<double> v) {
  HostTensor t(DType::F64, {int64_t(v.size())});
  for (size_t i = 0; i < v.size(); ++i)
    t.setDouble(i, v[i]);
  return t;
}

HostTensor scalarI64(int64_t v) {
  HostTensor t(DType::I64, {});
  t.setInt(0, v);
  return t;
}

HostTensor scalarF64(double v) {
  HostTensor t(DType::F64, {});
  t.setDouble(0, v);
  return t;
}
} // namespace

TEST(ValueAndGrad, QuadraticGradient) {
  auto g = Graph::parse(kQuadratic)->valueAndGrad({0, 1});
  auto out = g->interpret({vec({1, 2, 3}), vec({0, 0, 5})});
  ASSERT_EQ(out.size(), 3u);
  EXPECT_DOUBLE_EQ(out[0].getDouble(0), 1 + 4 + 4);
  std::vector<double> dw = {2, 4, -4};
  for (int i = 0; i < 3; ++i) {
    EXPECT_DOUBLE_EQ(out[1].getDouble(i), dw[i]);
    EXPECT_DOUBLE_EQ(out[2].getDouble(i), -dw[i]);
  }
}

TEST(ValueAndGrad, IntegerArgumentIsAnError) {
  auto g = Graph::parse(R"(
    func.func @f(%a: tensor<2xf32>, %i: tensor<2xi64>) -> tensor<f32> {
      %0 = graph.reduce_sum %a {dims = array<i64: 0>} : (tensor<2xf32>) -> tensor<f32>
      return %0 : tensor<f32>
    })");
  EXPECT_THROW(g->valueAndGrad({1}), CompileError);
  EXPECT_THROW(g->valueAndGrad({2}), CompileError);
}

TEST(TrainStep, SgdMomentumMatchesTheFormula) {
  OptimizerConfig c;
  c.kind = OptimizerConfig::Kind::SGD;
  c.momentum = 0.5;
  auto step = Graph::parse(kQuadratic)->trainStep(1, c);
  // (w, buf, c, step, lr) -> (loss, w', buf')
  auto out = step->interpret(
      {vec({1, 2, 3}), vec({1, 1, 1}), vec({0, 0, 5}), scalarI64(1),
       scalarF64(0.1)});
  ASSERT_EQ(out.size(), 3u);
  std::vector<double> w = {1, 2, 3}, grad = {2, 4, -4};
  for (int i = 0; i < 3; ++i) {
    double buf = 0.5 * 1 + grad[i];
    EXPECT_DOUBLE_EQ(out[2].getDouble(i), buf);
    EXPECT_NEAR(out[1].getDouble(i), w[i] - 0.1 * buf, 1e-15);
  }
}

TEST(TrainStep, AdamFirstStepMovesByTheLearningRate) {
  OptimizerConfig c;
  c.kind = OptimizerConfig::Kind::Adam;
  auto step = Graph::parse(kQuadratic)->trainStep(1, c);
  // At step 1 the bias-corrected update is lr * g / (|g| + eps) ~ lr sign(g).
  auto out = step->interpret({vec({1, 2, 3}), vec({0, 0, 0}), vec({0, 0, 0}),
                              vec({0, 0, 5}), scalarI64(1), scalarF64(0.01)});
  std::vector<double> w = {1, 2, 3}, sign = {1, 1, -1};
  for (int i = 0; i < 3; ++i)
    EXPECT_NEAR(out[1].getDouble(i), w[i] - 0.01 * sign[i], 1e-9);
}
