//===- MemoryPlanTest.cpp - the memory planner and its checker ------------===//
#include "runtime/CpuExecutor.h"
#include "runtime/MemoryPlan.h"
#include "runtime/ProgramIO.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

using namespace tilefuse;

namespace {

BufferInfo f32Buffer(std::string name, int64_t n,
                     BufferInfo::Role role = BufferInfo::Role::Intermediate) {
  BufferInfo b;
  b.name = std::move(name);
  b.shape = {n};
  b.role = role;
  return b;
}

/// A kernel step (its kernel appended) reading all but the last `outputs`
/// buffers and writing those.
void kernelStep(Program &p, std::vector<int> buffers, int outputs = 1) {
  ProgramKernel k;
  k.name = "k" + std::to_string(p.kernels.size());
  k.grid = 1;
  p.kernels.push_back(k);
  Step s;
  s.kind = Step::Kind::Kernel;
  s.kernel = int(p.kernels.size()) - 1;
  s.buffers = std::move(buffers);
  s.outputs = outputs;
  s.source = k.name;
  p.steps.push_back(s);
}

/// x -> t0 -> t1 -> ... -> t{n-1} (the result), each t of `elements`
/// floats: at most two of them are ever live.
Program chain(int n, int64_t elements) {
  Program p;
  p.buffers.push_back(f32Buffer("x", elements, BufferInfo::Role::Argument));
  p.arguments = {0};
  for (int i = 0; i < n; ++i) {
    p.buffers.push_back(f32Buffer("t" + std::to_string(i), elements));
    kernelStep(p, {i, i + 1});
  }
  p.results = {n};
  return p;
}

bool sharesBytes(const MemoryPlan &plan, const Program &p, int a, int b) {
  uint64_t aEnd = plan.offsets[a] + arenaBytes(p.buffers[a], plan.alignment);
  uint64_t bEnd = plan.offsets[b] + arenaBytes(p.buffers[b], plan.alignment);
  return plan.offsets[a] < bEnd && plan.offsets[b] < aEnd;
}

void expectRefused(const Program &p, const MemoryPlan &plan, const std::string &words) {
  try {
    checkMemoryPlan(p, plan);
    FAIL() << "the checker accepted a plan that should say: " << words;
  } catch (const CompileError &e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

} // namespace

TEST(MemoryPlan, ChainReusesTwoBuffersAndReachesTheLowerBound) {
  Program p = chain(6, 1000); // 4000 bytes each, 4096 in the arena
  std::vector<LiveRange> ranges = liveRanges(p);
  EXPECT_EQ(ranges[1].first, 0);
  EXPECT_EQ(ranges[1].last, 1);
  EXPECT_EQ(ranges[6].last, 6); // the result: read after the last step
  MemoryPlan plan = planMemory(p);
  checkMemoryPlan(p, plan);
  EXPECT_EQ(plan.offsets[0], MemoryPlan::kNotInArena);
  EXPECT_EQ(plan.bytes, 2 * 4096u);
  EXPECT_EQ(liveBytesLowerBound(p), 2 * 4096u);
  EXPECT_EQ(unplannedBytes(p), 6 * 4096u);
  EXPECT_TRUE(sharesBytes(plan, p, 1, 3)); // t0 is dead when t2 is made
}

TEST(MemoryPlan, ConstantsAndCarriedResultsAreNeverShared) {
  // k (constant) and the carried result c must keep their bytes across
  // calls; t1/t2 are plain intermediates.
  Program p;
  p.buffers = {f32Buffer("x", 64, BufferInfo::Role::Argument), f32Buffer("k", 64),
               f32Buffer("t1", 64), f32Buffer("c", 64), f32Buffer("t2", 64)};
  p.buffers[1].role = BufferInfo::Role::Constant;
  p.buffers[1].data.assign(4, 0);
  p.buffers[1].splat = true;
  p.arguments = {0};
  kernelStep(p, {0, 1, 2});
  kernelStep(p, {2, 3});
  kernelStep(p, {0, 4});
  p.results = {3, 4};
  p.aliases = {{0, 0}};
  std::vector<LiveRange> ranges = liveRanges(p);
  EXPECT_TRUE(ranges[1].pinned);
  EXPECT_TRUE(ranges[3].pinned);
  EXPECT_FALSE(ranges[2].pinned);
  MemoryPlan plan = planMemory(p);
  checkMemoryPlan(p, plan);
  for (int other : {2, 4}) {
    EXPECT_FALSE(sharesBytes(plan, p, 1, other)) << other;
    EXPECT_FALSE(sharesBytes(plan, p, 3, other)) << other;
  }
  EXPECT_TRUE(sharesBytes(plan, p, 2, 4)); // t1 dies before t2 is made
}

TEST(MemoryPlan, CheckerRefusesOverlapsMisalignmentAndMissingOffsets) {
  Program p = chain(3, 100);
  MemoryPlan good = planMemory(p);
  checkMemoryPlan(p, good);

  MemoryPlan overlap = good;
  overlap.offsets[2] = overlap.offsets[1]; // t0 and t1 are both live at step 1
  expectRefused(p, overlap, "buffers t0 (live at steps 0..1) and t1");

  MemoryPlan misaligned = good;
  misaligned.offsets[1] += 8;
  expectRefused(p, misaligned, "misaligned");

  MemoryPlan past = good;
  past.bytes -= 256;
  expectRefused(p, past, "past the arena");

  MemoryPlan argument = good;
  argument.offsets[0] = 0;
  expectRefused(p, argument, "buffer x is an argument but has an offset");

  MemoryPlan missing = good;
  missing.offsets.pop_back();
  expectRefused(p, missing, "offsets for 4 buffers");

  EXPECT_THROW(checkMemoryPlan(p, good, 512), CompileError); // the executor needs more
}

TEST(MemoryPlan, ArtifactsKeepThePlanAndRefuseATamperedOne) {
  Program p = chain(4, 300);
  planProgramMemory(p);
  Program back = deserializeProgram(serializeProgram(p));
  EXPECT_EQ(back.plan.offsets, p.plan.offsets);
  EXPECT_EQ(back.plan.bytes, p.plan.bytes);
  EXPECT_EQ(back.steps[2].outputs, 1);
  Program tampered = p;
  tampered.plan.offsets[2] = tampered.plan.offsets[1];
  try {
    deserializeProgram(serializeProgram(tampered));
    FAIL() << "a program whose plan overlaps live buffers was loaded";
  } catch (const CompileError &e) {
    EXPECT_NE(std::string(e.what()).find("invalid memory plan"), std::string::npos) << e.what();
  }
}

TEST(MemoryPlan, SchedulerConsumesBeforeItProducesAgain) {
  // Written in the worst order: make a, make b, make c, then use each.
  // Each use can run as soon as its input exists, so a scheduler that
  // frees early keeps one big buffer live instead of three.
  Program p;
  p.buffers = {f32Buffer("x", 1, BufferInfo::Role::Argument)};
  p.arguments = {0};
  for (const char *name : {"a", "b", "c"})
    p.buffers.push_back(f32Buffer(name, 100000));
  for (const char *name : {"ua", "ub", "uc"})
    p.buffers.push_back(f32Buffer(name, 1));
  for (int i = 0; i < 3; ++i)
    kernelStep(p, {0, 1 + i});
  for (int i = 0; i < 3; ++i)
    kernelStep(p, {1 + i, 4 + i});
  p.results = {4, 5, 6};
  uint64_t before = planMemory(p).bytes;
  Program scheduled = p;
  scheduleSteps(scheduled);
  uint64_t after = planMemory(scheduled).bytes;
  EXPECT_LT(after, before);
  EXPECT_EQ(after, 400128u + 3 * 256u); // one big buffer, three tiny results
  // Dependences hold: every use runs after the step that makes its input.
  for (size_t i = 0; i < scheduled.steps.size(); ++i)
    for (int b : stepReads(scheduled.steps[i]))
      if (b != 0) {
        bool made = false;
        for (size_t j = 0; j < i; ++j)
          for (int w : stepWrites(scheduled.steps[j]))
            made |= w == b;
        EXPECT_TRUE(made) << "step " << i << " reads " << scheduled.buffers[b].name
                          << " before it is written";
      }
}

TEST(MemoryPlan, SchedulerKeepsWritesAfterEarlierReads) {
  // Step 1 reads t; step 2 overwrites t: step 2 may not run before step 1.
  Program p;
  p.buffers = {f32Buffer("x", 8, BufferInfo::Role::Argument), f32Buffer("t", 8),
               f32Buffer("u", 8), f32Buffer("big", 100000)};
  p.arguments = {0};
  kernelStep(p, {0, 1});
  kernelStep(p, {1, 3, 2}, 2);
  kernelStep(p, {0, 1});
  p.results = {1, 2};
  Program scheduled = p;
  scheduleSteps(scheduled);
  for (size_t i = 0; i < 3; ++i)
    EXPECT_EQ(scheduled.steps[i].kernel, int(i));
}

namespace {
/// out[i] += in[i]: a kernel that wrongly assumes its output starts at 0.
void accumulateKernel(void **buffers, int64_t, int64_t) {
  auto *in = static_cast<const float *>(buffers[0]);
  auto *out = static_cast<float *>(buffers[1]);
  for (int i = 0; i < 16; ++i)
    out[i] += in[i];
}
void copyKernel(void **buffers, int64_t, int64_t) {
  auto *in = static_cast<const float *>(buffers[0]);
  auto *out = static_cast<float *>(buffers[1]);
  for (int i = 0; i < 16; ++i)
    out[i] = in[i];
}
} // namespace

TEST(MemoryPlan, PoisonedArenaTurnsReadsOfDeadBytesIntoNaN) {
  // x -> t (copy) -> y (accumulate into y, never initialised).
  Program p;
  p.buffers = {f32Buffer("x", 16, BufferInfo::Role::Argument), f32Buffer("t", 16),
               f32Buffer("y", 16)};
  p.arguments = {0};
  kernelStep(p, {0, 1});
  kernelStep(p, {1, 2});
  p.results = {2};
  std::vector<float> x(16, 1.0f);
  auto run = [&](bool poison) {
    if (poison)
      setenv("TILEFUSE_POISON_ARENA", "1", 1);
    else
      unsetenv("TILEFUSE_POISON_ARENA");
    CpuExecutor exe(p, {&copyKernel, &accumulateKernel}, nullptr);
    unsetenv("TILEFUSE_POISON_ARENA");
    exe.run(std::vector<ArgRef>{ArgRef{x.data()}});
    return static_cast<const float *>(exe.result(0))[0];
  };
  EXPECT_TRUE(std::isnan(run(true)));
  // A correct program gives the same answer poisoned or not.
  Program q = p;
  CpuExecutor plain(q, {&copyKernel, &copyKernel}, nullptr);
  setenv("TILEFUSE_POISON_ARENA", "1", 1);
  CpuExecutor poisoned(q, {&copyKernel, &copyKernel}, nullptr);
  unsetenv("TILEFUSE_POISON_ARENA");
  for (CpuExecutor *exe : {&plain, &poisoned}) {
    exe->run(std::vector<ArgRef>{ArgRef{x.data()}});
    EXPECT_EQ(static_cast<const float *>(exe->result(0))[5], 1.0f);
  }
}

TEST(MemoryPlan, ExecutorsCarryOnlyDeclaredResults) {
  Program p = chain(1, 4);
  CpuExecutor exe(p, {&copyKernel}, nullptr);
  std::vector<float> x(4, 1.0f);
  exe.makePersistent(0, x.data());
  EXPECT_THROW(exe.carry(0, 0), CompileError); // no alias: its bytes are shared
}

TEST(MemoryPlan, FormatNamesPeakBoundAndWriters) {
  Program p = chain(3, 100);
  p.steps[0].sourceLines = {"model.py:7"};
  planProgramMemory(p);
  std::string text = formatMemoryPlan(p);
  EXPECT_NE(text.find("peak / bound 1.000"), std::string::npos) << text;
  EXPECT_NE(text.find("t0 | f32[100] | 400 |"), std::string::npos) << text;
  EXPECT_NE(text.find("| 0..1 | forward | k0 (model.py:7)"), std::string::npos) << text;
  EXPECT_NE(text.find("| 2..end | forward | k2"), std::string::npos) << text;
}

namespace {
/// x[i] = 2 x[i] over 16 floats: one buffer read and written.
void doubleInPlaceKernel(void **buffers, int64_t, int64_t) {
  auto *in = static_cast<const float *>(buffers[0]);
  auto *out = static_cast<float *>(buffers[1]);
  for (int i = 0; i < 16; ++i)
    out[i] = 2 * in[i];
}

/// x <- 2x computed in place: result 0 is argument 0's own buffer.
Program inPlaceProgram() {
  Program p;
  p.buffers = {f32Buffer("x", 16, BufferInfo::Role::Argument)};
  p.arguments = {0};
  kernelStep(p, {0, 0});
  p.results = {0};
  p.aliases = {{0, 0}};
  return p;
}
} // namespace

TEST(MemoryPlan, InPlaceCarriesNeedNoArenaAndNeverWriteTheCallersArray) {
  Program p = inPlaceProgram();
  EXPECT_TRUE(p.writesArgument(0));
  MemoryPlan plan = planMemory(p);
  EXPECT_EQ(plan.bytes, 0u); // nothing lives in the arena
  std::vector<float> x(16, 3.0f);
  {
    // A persistent argument doubles where it is kept, call after call.
    CpuExecutor exe(p, {&doubleInPlaceKernel}, nullptr);
    exe.makePersistent(0, x.data());
    exe.carry(0, 0);
    for (int call = 0; call < 3; ++call)
      exe.run(std::vector<ArgRef>{ArgRef{}});
    EXPECT_EQ(static_cast<const float *>(exe.persistent(0))[7], 24.0f);
    EXPECT_EQ(static_cast<const float *>(exe.result(0))[7], 24.0f);
  }
  {
    // The caller's array is read, never written: the kernel works on a copy.
    CpuExecutor exe(p, {&doubleInPlaceKernel}, nullptr);
    exe.run(std::vector<ArgRef>{ArgRef{x.data()}});
    EXPECT_EQ(static_cast<const float *>(exe.result(0))[0], 6.0f);
    EXPECT_EQ(x[0], 3.0f);
  }
}
