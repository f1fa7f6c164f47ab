//===- InterpreterTest.cpp - the reference interpreter on parsed IR -------===//
#include "frontend/Graph.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace tilefuse;

namespace {
HostTensor f32(Shape shape, std::vector<float> values) {
  HostTensor t(DType::F32, std::move(shape));
  for (size_t i = 0; i < values.size(); ++i)
    t.setDouble(i, values[i]);
  return t;
}
} // namespace

TEST(Interpreter, SoftmaxRowsSumToOne) {
  auto g = Graph::parse(R"(
    func.func @f(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
      %0 = graph.softmax %x {dim = 1 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
      return %0 : tensor<2x3xf32>
    })");
  auto out = g->interpret({f32({2, 3}, {1, 2, 3, 1000, 1000, 1000})});
  ASSERT_EQ(out.size(), 1u);
  double e1 = std::exp(-2.0), e2 = std::exp(-1.0);
  EXPECT_NEAR(out[0].getDouble(0), e1 / (e1 + e2 + 1), 1e-7);
  // Large logits: the decomposition subtracts the row max, so no overflow.
  EXPECT_NEAR(out[0].getDouble(3), 1.0 / 3, 1e-7);
}

TEST(Interpreter, MatmulTransposedAndBroadcast) {
  auto g = Graph::parse(R"(
    func.func @f(%a: tensor<2x3xf32>, %b: tensor<4x3xf32>, %c: tensor<4xf32>) -> tensor<2x4xf32> {
      %0 = graph.matmul %a, %b {transpose_rhs = true} : (tensor<2x3xf32>, tensor<4x3xf32>) -> tensor<2x4xf32>
      %1 = graph.broadcast_in_dim %c {dims = array<i64: 1>} : (tensor<4xf32>) -> tensor<2x4xf32>
      %2 = graph.add %0, %1 : tensor<2x4xf32>
      return %2 : tensor<2x4xf32>
    })");
  auto a = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  auto b = f32({4, 3}, {1, 0, 0, 0, 1, 0, 0, 0, 1, 1, 1, 1});
  auto c = f32({4}, {10, 20, 30, 40});
  auto out = g->interpret({a, b, c})[0];
  std::vector<double> want = {11, 22, 33, 46, 14, 25, 36, 55};
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(out.getDouble(i), want[i]) << "element " << i;
}

TEST(Interpreter, CrossEntropyIgnoresMaskedTargets) {
  auto g = Graph::parse(R"(
    func.func @f(%x: tensor<2x2xf32>, %t: tensor<2xi64>) -> tensor<f32> {
      %0 = graph.cross_entropy %x, %t {ignore_index = -1 : i64} : (tensor<2x2xf32>, tensor<2xi64>) -> tensor<f32>
      return %0 : tensor<f32>
    })");
  HostTensor t(DType::I64, {2});
  t.setInt(0, 1);
  t.setInt(1, -1);
  auto out = g->interpret({f32({2, 2}, {0, 0, 5, -5}), t})[0];
  EXPECT_NEAR(out.getDouble(0), std::log(2.0), 1e-7);
}

TEST(Interpreter, RejectsWrongArguments) {
  auto g = Graph::parse(R"(
    func.func @f(%x: tensor<2xf32>) -> tensor<2xf32> {
      %0 = graph.exp %x : tensor<2xf32>
      return %0 : tensor<2xf32>
    })");
  EXPECT_THROW(g->interpret({}), CompileError);
  EXPECT_THROW(g->interpret({f32({3}, {1, 2, 3})}), CompileError);
  try {
    g->interpret({HostTensor(DType::F64, {2})});
    FAIL() << "expected a CompileError";
  } catch (const CompileError &e) {
    EXPECT_NE(std::string(e.what()).find("f32[2]"), std::string::npos) << e.what();
  }
}

TEST(Interpreter, GatherOutOfRangeIsAnError) {
  auto g = Graph::parse(R"(
    func.func @f(%t: tensor<3x2xf32>, %i: tensor<1xi64>) -> tensor<1x2xf32> {
      %0 = graph.gather %t, %i : (tensor<3x2xf32>, tensor<1xi64>) -> tensor<1x2xf32>
      return %0 : tensor<1x2xf32>
    })");
  HostTensor idx(DType::I64, {1});
  idx.setInt(0, 3);
  EXPECT_THROW(g->interpret({HostTensor(DType::F32, {3, 2}), idx}), CompileError);
}

TEST(Interpreter, MalformedTextIsACompileErrorWithLocation) {
  try {
    Graph::parse("func.func @f(%x: tensor<2xf32>) -> tensor<2xf32> {\n"
                 "  %0 = graph.nonexistent %x : tensor<2xf32>\n"
                 "  return %0 : tensor<2xf32>\n}");
    FAIL() << "expected a CompileError";
  } catch (const CompileError &e) {
    EXPECT_NE(std::string(e.what()).find(":2:"), std::string::npos) << e.what();
  }
}
