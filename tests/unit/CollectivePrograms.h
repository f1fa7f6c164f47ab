//===- CollectivePrograms.h - hand-built programs with collectives -*- C++ -*-===//
//
// Shared by the CPU (CollectivesTest.cpp) and CUDA (CudaExecutorFakeTest.cpp)
// executors' tests of collective steps.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_TESTS_UNIT_COLLECTIVEPROGRAMS_H
#define TILEFUSE_TESTS_UNIT_COLLECTIVEPROGRAMS_H

#include "runtime/Program.h"

#include <cstring>
#include <string>
#include <vector>

namespace tilefuse::testing {

inline BufferInfo buffer(std::string name, Shape s, BufferInfo::Role role = BufferInfo::Role::Intermediate) {
  BufferInfo b;
  b.name = std::move(name);
  b.dtype = DType::F32;
  b.shape = std::move(s);
  b.role = role;
  return b;
}

inline Step collective(Step::Kind kind, CollectiveKind what, std::vector<int> buffers, int ticket) {
  Step s;
  s.kind = kind;
  s.source = collectiveName(what);
  s.collective.kind = what;
  s.collective.ticket = ticket;
  s.buffers = std::move(buffers);
  return s;
}

/// x [4] -> (copy) s [4], all-reduced in place over group "dp" of `ranks`,
/// then all-gathered into g [4 * ranks]; results s and g.
inline Program exchangeProgram(int64_t ranks) {
  Program p;
  p.groups = {{"dp", ranks}};
  p.buffers = {buffer("x", {4}, BufferInfo::Role::Argument), buffer("s", {4}),
               buffer("g", {4 * ranks})};
  p.arguments = {0};
  p.results = {1, 2};
  Step copy;
  copy.kind = Step::Kind::Copy;
  copy.source = "copy";
  copy.buffers = {0, 1};
  p.steps = {copy,
             collective(Step::Kind::CollectiveStart, CollectiveKind::AllReduce, {1}, 0),
             collective(Step::Kind::CollectiveWait, CollectiveKind::AllReduce, {1}, 0),
             collective(Step::Kind::CollectiveStart, CollectiveKind::AllGather, {1, 2}, 1),
             collective(Step::Kind::CollectiveWait, CollectiveKind::AllGather, {1, 2}, 1)};
  return p;
}

inline HostTensor f32(std::vector<float> values) {
  HostTensor t(DType::F32, {int64_t(values.size())});
  std::memcpy(t.data<float>(), values.data(), values.size() * sizeof(float));
  return t;
}

inline std::vector<float> values(const HostTensor &t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + numElements(t.shape));
}

} // namespace tilefuse::testing

#endif // TILEFUSE_TESTS_UNIT_COLLECTIVEPROGRAMS_H
