//===- TracerTest.cpp - the C++ tracing API -------------------------------===//
#include "frontend/Tracer.h"

#include <gtest/gtest.h>

using namespace tilefuse;

TEST(Tracer, BroadcastsWithNumpyRulesAndPromotes) {
  Tracer t("f");
  ValueId a = t.argument(DType::F32, {4, 1});
  ValueId b = t.argument(DType::F64, {3});
  ValueId c = t.binary("add", a, b);
  EXPECT_EQ(t.shape(c), (Shape{4, 3}));
  EXPECT_EQ(t.dtype(c), DType::F64);
  auto g = t.finish({c});
  std::string ir = g->mlir();
  EXPECT_NE(ir.find("graph.broadcast_in_dim"), std::string::npos) << ir;
  EXPECT_NE(ir.find("graph.cast"), std::string::npos) << ir;
}

TEST(Tracer, ShapeErrorsNameTheOpAndShapes) {
  Tracer t;
  t.setLocation("model.py", 12);
  ValueId a = t.argument(DType::F32, {4, 8});
  ValueId b = t.argument(DType::F32, {4, 8});
  try {
    t.matmulTransposed(a, b, false, false);
    FAIL() << "expected a CompileError";
  } catch (const CompileError &e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("graph.matmul"), std::string::npos) << msg;
    EXPECT_NE(msg.find("tensor<4x8xf32>"), std::string::npos) << msg;
    EXPECT_NE(msg.find("model.py:12"), std::string::npos) << msg;
  }
  EXPECT_THROW(t.binary("add", a, t.argument(DType::F32, {5})), CompileError);
}

TEST(Tracer, FinishedTraceCannotBeExtended) {
  Tracer t;
  ValueId a = t.argument(DType::F32, {2});
  t.finish({a});
  EXPECT_THROW(t.unary("exp", a), CompileError);
}
