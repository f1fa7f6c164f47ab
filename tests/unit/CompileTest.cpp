//===- CompileTest.cpp - Graph::compile on the CPU backend ----------------===//
#include "frontend/Executable.h"
#include "frontend/Graph.h"
#include "runtime/ProgramIO.h"

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

TEST(ProgramIO, RoundTripRunsTheSame) {
  auto g = Graph::parse(R"(
    func.func @f(%x: tensor<8x40xf32>, %w: tensor<40x5xf32>, %t: tensor<3x5xf32>, %i: tensor<4xi64>) -> (tensor<8x5xf32>, tensor<4x5xf32>) {
      %0 = graph.matmul %x, %w : (tensor<8x40xf32>, tensor<40x5xf32>) -> tensor<8x5xf32>
      %1 = graph.softmax %0 {dim = 1 : i64} : (tensor<8x5xf32>) -> tensor<8x5xf32>
      %2 = graph.gather %t, %i : (tensor<3x5xf32>, tensor<4xi64>) -> tensor<4x5xf32>
      %c = graph.constant dense<[1.0, 2.0, 3.0, 4.0, 5.0]> : tensor<5xf32>
      %3 = graph.broadcast_in_dim %c {dims = array<i64: 1>} : (tensor<5xf32>) -> tensor<4x5xf32>
      %4 = graph.mul %2, %3 : tensor<4x5xf32>
      return %1, %4 : tensor<8x5xf32>, tensor<4x5xf32>
    })");
  auto exe = g->compile("cpu");
  std::string bytes = serializeProgram(exe->program());
  Program back = deserializeProgram(bytes);
  EXPECT_EQ(serializeProgram(back), bytes);
  std::vector<HostTensor> args;
  for (const TensorSignature &sig : g->inputs()) {
    HostTensor t(sig.dtype, sig.shape);
    for (int64_t i = 0; i < t.size(); ++i) {
      if (isFloatDType(sig.dtype))
        t.setDouble(i, std::cos(0.1 * double(i)));
      else
        t.setInt(i, i % 3);
    }
    args.push_back(std::move(t));
  }
  CpuExecutor again(back, exe->artifacts().kernels, exe->artifacts().code);
  auto a = exe->run(args), b = again.run(args);
  ASSERT_EQ(a.size(), b.size());
  for (size_t r = 0; r < a.size(); ++r)
    EXPECT_EQ(a[r].bytes, b[r].bytes) << "result " << r;
}

TEST(ProgramIO, BadBytesAreRefusedWithTheReason) {
  auto g = Graph::parse(R"(
    func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
      %0 = graph.exp %x : tensor<4xf32>
      return %0 : tensor<4xf32>
    })");
  std::string good = serializeProgram(g->compile("cpu")->program());
  auto refuses = [](const std::string &bytes, const std::string &reason) {
    try {
      deserializeProgram(bytes);
      ADD_FAILURE() << "accepted; expected: " << reason;
    } catch (const CompileError &e) {
      EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
    }
  };
  refuses("", "bad magic");
  refuses("ELF\x7f....", "bad magic");
  refuses(good.substr(0, good.size() - 3), "truncated program");
  refuses(good.substr(0, 14), "truncated program");
  std::string flipped = good;
  flipped[flipped.size() - 5] ^= 0x20;
  refuses(flipped, "checksum does not match");
  std::string newer = good;
  newer[8] = char(kProgramFormatVersion + 1);
  refuses(newer, "format version " + std::to_string(kProgramFormatVersion + 1) +
                     " is not supported");
}
