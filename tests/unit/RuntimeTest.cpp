//===- RuntimeTest.cpp - Program, thread pool and CPU executor ------------===//
//
// The runtime alone, with a hand-built Program and a hand-written kernel:
// no compiler involved, as on a machine that only runs artifacts.
//
//===----------------------------------------------------------------------===//
#include "runtime/Artifact.h"
#include "runtime/CpuExecutor.h"
#include "runtime/CpuDnnl.h"
#include "runtime/CpuLibrary.h"
#include "runtime/ProgramIO.h"
#include "runtime/ThreadPool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>

#include <atomic>
#include <cmath>
#include <random>
#include <tuple>

using namespace tilefuse;

namespace {

BufferInfo buffer(std::string name, DType t, Shape s,
                  BufferInfo::Role role = BufferInfo::Role::Intermediate) {
  BufferInfo b;
  b.name = std::move(name);
  b.dtype = t;
  b.shape = std::move(s);
  b.role = role;
  return b;
}

/// out[i] = 2 * in[i], one program per element.
void doubleKernel(void **buffers, int64_t first, int64_t end) {
  auto *in = static_cast<const float *>(buffers[0]);
  auto *out = static_cast<float *>(buffers[1]);
  for (int64_t i = first; i < end; ++i)
    out[i] = 2 * in[i];
}

/// y = 2x over n floats: one argument, one result, one kernel.
/// Appends kernel `name` of `grid` programs and the step launching it over
/// `buffers`; returns that step.
Step &addKernelStep(Program &p, std::string name, int64_t grid, std::vector<int> buffers) {
  ProgramKernel k;
  k.name = std::move(name);
  k.grid = grid;
  p.kernels.push_back(k);
  Step s;
  s.kind = Step::Kind::Kernel;
  s.kernel = int(p.kernels.size()) - 1;
  s.buffers = std::move(buffers);
  p.steps.push_back(s);
  return p.steps.back();
}

Program doublingProgram(int64_t n) {
  Program p;
  p.buffers = {buffer("x", DType::F32, {n}, BufferInfo::Role::Argument),
               buffer("y", DType::F32, {n})};
  addKernelStep(p, "double", n, {0, 1});
  p.arguments = {0};
  p.results = {1};
  return p;
}

HostTensor f32(Shape shape, std::vector<float> values) {
  HostTensor t(DType::F32, std::move(shape));
  for (size_t i = 0; i < values.size(); ++i)
    t.setDouble(int64_t(i), values[i]);
  return t;
}

} // namespace

TEST(ThreadPool, EveryIndexRunsExactlyOnce) {
  ThreadPool pool(3);
  for (int64_t n : {0, 1, 2, 7, 1000}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    pool.parallelFor(n, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        ++hits[size_t(i)];
    });
    for (int64_t i = 0; i < n; ++i)
      EXPECT_EQ(hits[size_t(i)].load(), 1) << "n=" << n << " index " << i;
  }
}

// A grid is split into a few ranges per thread (claimed as threads get
// free), each of at least `minPerRange` items.
TEST(ThreadPool, RangesPerThreadAndTheirLeastSize) {
  ThreadPool pool(3);
  auto rangesOf = [&](int64_t n, int64_t minPerRange) {
    std::mutex m;
    std::vector<std::pair<int64_t, int64_t>> ranges;
    pool.parallelFor(n, minPerRange, [&](int64_t b, int64_t e) {
      std::lock_guard<std::mutex> lock(m);
      ranges.emplace_back(b, e);
    });
    return ranges;
  };
  EXPECT_EQ(rangesOf(1000, 1).size(), 12u) << "3 threads, 4 ranges each";
  auto sized = rangesOf(100, 10);
  EXPECT_EQ(sized.size(), 10u);
  for (auto [b, e] : sized)
    EXPECT_GE(e - b, 10) << "range [" << b << ", " << e << ")";
  EXPECT_EQ(rangesOf(15, 10).size(), 1u) << "one range's worth runs on the caller";
  ThreadPool single(1);
  int calls = 0;
  single.parallelFor(1000, 1, [&](int64_t b, int64_t e) {
    ++calls;
    EXPECT_EQ(b, 0);
    EXPECT_EQ(e, 1000);
  });
  EXPECT_EQ(calls, 1);
}

// On the OpenMP team, grids split into the same ranges, each run once, on
// OpenMP's threads: none of the pool's own workers takes a range (the
// caller takes part on both teams). Switching teams between grids and
// grids from several callers at once are safe.
TEST(ThreadPool, OpenMPTeamRunsEveryRangeOnce) {
  if (!ThreadPool::hasOpenMP())
    GTEST_SKIP() << "this build has no OpenMP: grids run on the pool's own threads only";
  if (std::getenv("TILEFUSE_THREAD_POOL"))
    GTEST_SKIP() << "TILEFUSE_THREAD_POOL fixes the team";
  using Team = ThreadPool::Team;
  ThreadPool pool(3);
  pool.setTeam(Team::OpenMP);
  if (pool.team() != Team::OpenMP || pool.threadsPerGrid() < 2)
    GTEST_SKIP() << "no OpenMP team of two threads here (OMP_NUM_THREADS=1, one CPU, or "
                    "several OpenMP runtimes loaded)";
  std::atomic<int> active{0}, mostActive{0};
  // Ranges long enough that every thread of a team claims one.
  auto grid = [&](int round) {
    std::vector<std::atomic<int>> hits(1000);
    std::mutex m;
    std::set<std::thread::id> threads;
    int ranges = 0;
    int inside = 0; // ranges of this grid running now
    pool.parallelFor(1000, 1, [&](int64_t b, int64_t e) {
      {
        std::lock_guard<std::mutex> lock(m);
        if (inside++ == 0) { // the grid's first range running: one grid more
          int now = active.fetch_add(1) + 1;
          for (int seen = mostActive.load(); now > seen && !mostActive.compare_exchange_weak(seen, now);)
            ;
        }
      }
      for (int64_t i = b; i < e; ++i)
        hits[size_t(i)].fetch_add(1);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      std::lock_guard<std::mutex> lock(m);
      threads.insert(std::this_thread::get_id());
      ++ranges;
      if (--inside == 0)
        active.fetch_sub(1);
    });
    for (size_t i = 0; i < hits.size(); ++i)
      EXPECT_EQ(hits[i].load(), 1) << "index " << i << ", round " << round;
    EXPECT_EQ(ranges, 4 * int(pool.threadsPerGrid())) << "4 ranges a thread; round " << round;
    EXPECT_GT(threads.size(), 1u) << "round " << round;
    threads.erase(std::this_thread::get_id());
    return threads;
  };
  // Every fourth round on the own team (its workers, still there), the
  // others on OpenMP's: the two sets of threads (the caller aside) never meet.
  std::set<std::thread::id> own, openMP;
  for (int round = 0; round < 12; ++round) {
    Team team = round % 4 == 0 ? Team::Own : Team::OpenMP;
    ASSERT_EQ(pool.setTeam(team), team);
    if (team == Team::Own)
      EXPECT_EQ(pool.threadsPerGrid(), 3u);
    (team == Team::Own ? own : openMP).merge(grid(round));
  }
  EXPECT_FALSE(own.empty());
  EXPECT_FALSE(openMP.empty());
  for (std::thread::id t : openMP)
    EXPECT_EQ(own.count(t), 0u) << "a thread ran ranges on both teams";
  // Several callers at once: each grid still runs every range once, one
  // grid at a time.
  ASSERT_EQ(pool.setTeam(Team::OpenMP), Team::OpenMP);
  std::vector<std::thread> callers;
  for (int c = 0; c < 3; ++c)
    callers.emplace_back([&, c] { grid(100 + c); });
  for (std::thread &t : callers)
    t.join();
  EXPECT_EQ(mostActive.load(), 1) << "grids of one pool overlapped";
  EXPECT_EQ(pool.setTeam(Team::Own), Team::Own);
}

// Back-to-back grids (workers spinning), grids after the workers went to
// sleep, and several callers on one pool: every index runs exactly once.
TEST(ThreadPool, GridsBackToBackAfterSleepAndFromSeveralCallers) {
  ThreadPool pool(3);
  auto runGrid = [&](int64_t n) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    pool.parallelFor(n, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        ++hits[size_t(i)];
    });
    for (int64_t i = 0; i < n; ++i)
      if (hits[size_t(i)].load() != 1)
        return false;
    return true;
  };
  for (int64_t n = 0; n < 300; ++n)
    ASSERT_TRUE(runGrid(n % 37)) << "back to back, grid " << n;
  // More workers than cores, and the number of ranges changing from one
  // grid to the next: a worker late from one grid must not claim in the
  // next with the next one's count.
  {
    ThreadPool wide(8);
    for (int64_t i = 0; i < 2000; ++i) {
      int64_t n = 1 + (i * 5) % 11;
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      wide.parallelFor(n, 1, [&](int64_t b, int64_t e) {
        for (int64_t j = b; j < e; ++j)
          ++hits[size_t(j)];
      });
      for (int64_t j = 0; j < n; ++j)
        ASSERT_EQ(hits[size_t(j)].load(), 1) << "grid " << i << " of " << n << ", index " << j;
    }
  }
  for (int round = 0; round < 3; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ASSERT_TRUE(runGrid(64)) << "after sleeping, round " << round;
  }
  std::vector<std::thread> callers;
  std::atomic<int> failures{0};
  for (int c = 0; c < 4; ++c)
    callers.emplace_back([&, c] {
      for (int i = 0; i < 100; ++i)
        if (!runGrid(1 + (c * 7 + i) % 50))
          ++failures;
    });
  for (std::thread &t : callers)
    t.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(CpuExecutor, KernelGemmGatherScatterCopy) {
  Program p;
  p.buffers = {buffer("x", DType::F32, {2, 3}, BufferInfo::Role::Argument),   // 0
               buffer("w", DType::F32, {3, 2}, BufferInfo::Role::Argument),   // 1
               buffer("ids", DType::I64, {3}, BufferInfo::Role::Argument),    // 2
               buffer("x2", DType::F32, {2, 3}),                              // 3
               buffer("y", DType::F32, {2, 2}),                               // 4
               buffer("rows", DType::F32, {3, 3}),                            // 5
               buffer("acc", DType::F32, {2, 3}),                             // 6
               buffer("copy", DType::F32, {3}, BufferInfo::Role::Intermediate), // 7
               buffer("ones", DType::F32, {3}, BufferInfo::Role::Constant)};  // 8
  p.buffers[8].data = f32({3}, {1, 1, 1}).bytes;
  addKernelStep(p, "double", 6, {0, 3});
  Step g;
  g.kind = Step::Kind::Gemm;
  g.m = 2, g.n = 2, g.k = 3;
  g.buffers = {3, 1, 4};
  p.steps.push_back(g);
  Step ga;
  ga.kind = Step::Kind::Gather;
  ga.buffers = {3, 2, 5};
  p.steps.push_back(ga);
  Step sa;
  sa.kind = Step::Kind::ScatterAdd;
  sa.buffers = {0, 2, 5, 6};
  p.steps.push_back(sa);
  Step c;
  c.kind = Step::Kind::Copy;
  c.buffers = {8, 7};
  p.steps.push_back(c);
  p.arguments = {0, 1, 2};
  p.results = {4, 5, 6, 7};

  CpuExecutor exe(p, {&doubleKernel}, nullptr);
  HostTensor ids(DType::I64, {3});
  ids.setInt(0, 1), ids.setInt(1, 0), ids.setInt(2, 1);
  auto out = exe.run({f32({2, 3}, {1, 2, 3, 4, 5, 6}), f32({3, 2}, {1, 0, 0, 1, 1, 1}), ids});
  ASSERT_EQ(out.size(), 4u);
  // y = (2x) @ w
  EXPECT_EQ(out[0].getDouble(0), 2 * (1 + 3));
  EXPECT_EQ(out[0].getDouble(1), 2 * (2 + 3));
  EXPECT_EQ(out[0].getDouble(2), 2 * (4 + 6));
  EXPECT_EQ(out[0].getDouble(3), 2 * (5 + 6));
  // rows = (2x)[ids]
  EXPECT_EQ(out[1].getDouble(0), 8);
  EXPECT_EQ(out[1].getDouble(3), 2);
  EXPECT_EQ(out[1].getDouble(6), 8);
  // acc = x, rows[q] added to row ids[q]: row 1 gets rows 0 and 2, row 0 gets row 1
  EXPECT_EQ(out[2].getDouble(0), 1 + 2);
  EXPECT_EQ(out[2].getDouble(3), 4 + 8 + 8);
  EXPECT_EQ(out[3].getDouble(2), 1);
}

// A scatter-add onto constant zeros (autodiff's gradient of a gather)
// clears its output instead of reading the constant: the result is the
// scattered rows alone, call after call (the output's memory holds the
// previous call's values), in f32 and bf16; a nonzero constant base is
// still added.
TEST(CpuExecutor, ScatterAddOntoZerosClearsItsOutput) {
  for (DType dt : {DType::F32, DType::BF16}) {
    for (float baseValue : {0.0f, 0.5f}) {
      Program p;
      p.buffers = {buffer("ids", DType::I64, {3}, BufferInfo::Role::Argument),     // 0
                   buffer("rows", dt, {3, 4}, BufferInfo::Role::Argument),         // 1
                   buffer("zeros", dt, {5, 4}, BufferInfo::Role::Constant),        // 2
                   buffer("table", dt, {5, 4})};                                   // 3
      HostTensor one(dt, {});
      one.setDouble(0, baseValue);
      p.buffers[2].data = one.bytes;
      p.buffers[2].splat = true;
      Step sa;
      sa.kind = Step::Kind::ScatterAdd;
      sa.buffers = {2, 0, 1, 3};
      p.steps.push_back(sa);
      p.arguments = {0, 1};
      p.results = {3};
      CpuExecutor exe(p, {}, nullptr);
      for (int call = 0; call < 2; ++call) {
        HostTensor ids(DType::I64, {3}), rows(dt, {3, 4});
        ids.setInt(0, 4), ids.setInt(1, call), ids.setInt(2, 4);
        for (int64_t i = 0; i < 12; ++i)
          rows.setDouble(i, double(i + 1 + 10 * call));
        auto out = exe.run({ids, rows});
        ASSERT_EQ(out.size(), 1u);
        for (int64_t r = 0; r < 5; ++r)
          for (int64_t c = 0; c < 4; ++c) {
            double want = baseValue;
            for (int64_t q = 0; q < 3; ++q)
              if (ids.getInt(q) == r)
                want += rows.getDouble(q * 4 + c);
            EXPECT_EQ(out[0].getDouble(r * 4 + c), want)
                << dtypeName(dt) << " base " << baseValue << " call " << call << " at " << r
                << ", " << c;
          }
      }
    }
  }
}

TEST(CpuExecutor, RefusesArgumentsOfTheWrongShape) {
  CpuExecutor exe(doublingProgram(4), {&doubleKernel}, nullptr);
  try {
    exe.run({f32({5}, {1, 2, 3, 4, 5})});
    FAIL() << "a [5] argument for a [4] buffer was accepted";
  } catch (const CompileError &e) {
    EXPECT_NE(std::string(e.what()).find("argument 0 is f32[5]; the program was compiled for f32[4]"),
              std::string::npos)
        << e.what();
  }
}

/// `q.validate()` refuses `q` with a message containing `reason`.
static void refused(const Program &q, const std::string &reason) {
  try {
    q.validate();
    ADD_FAILURE() << "accepted; expected: " << reason;
  } catch (const CompileError &e) {
    EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
  }
}

TEST(Program, ValidateNamesTheCorruption) {
  Program p;
  p.buffers = {buffer("x", DType::F32, {2, 2}, BufferInfo::Role::Argument)};
  p.arguments = {0};
  p.results = {3};
  EXPECT_THROW(p.validate(), CompileError);
  p.results = {0};
  p.buffers.push_back(buffer("k", DType::F32, {2, 2}, BufferInfo::Role::Constant));
  p.buffers[1].data.resize(3);
  try {
    p.validate();
    FAIL() << "a 3-byte constant for 16 bytes was accepted";
  } catch (const CompileError &e) {
    EXPECT_NE(std::string(e.what()).find("constant k holds 3 bytes, expected 16"),
              std::string::npos)
        << e.what();
  }
  p.buffers[1].data.resize(16);
  p.buffers.push_back(buffer("c", DType::F32, {2, 2}));
  Step g;
  g.kind = Step::Kind::Gemm;
  g.m = 2, g.n = 2, g.k = 2;
  g.buffers = {0, 1, 2};
  p.steps.push_back(g);
  EXPECT_NO_THROW(p.validate());
  // A step writes an argument only as a carried result computed in place.
  p.steps[0].buffers = {0, 1, 0};
  try {
    p.validate();
    FAIL() << "a GEMM writing its argument was accepted";
  } catch (const CompileError &e) {
    EXPECT_NE(std::string(e.what()).find("writes argument buffer x, which is not a carried "
                                         "result computed in place"),
              std::string::npos)
        << e.what();
  }
  p.aliases = {{0, 0}}; // result 0 is buffer 0: x's next value, in place
  EXPECT_NO_THROW(p.validate());
  p.steps[0].k = 3;
  EXPECT_THROW(p.validate(), CompileError);
}

TEST(Program, ValidateRefusesTamperedGridsGathersScattersAndCopies) {
  Program p;
  p.buffers = {buffer("x", DType::F32, {4, 3}, BufferInfo::Role::Argument),   // 0
               buffer("ids", DType::I64, {2}, BufferInfo::Role::Argument),    // 1
               buffer("rows", DType::F32, {2, 3}),                            // 2
               buffer("acc", DType::F32, {4, 3}),                             // 3
               buffer("copy", DType::F32, {2, 3})};                           // 4
  p.arguments = {0, 1};
  p.results = {2, 3, 4};
  addKernelStep(p, "k", 12, {0, 3});
  Step gather;
  gather.kind = Step::Kind::Gather;
  gather.buffers = {0, 1, 2};
  Step scatter;
  scatter.kind = Step::Kind::ScatterAdd;
  scatter.buffers = {0, 1, 2, 3};
  Step copy;
  copy.kind = Step::Kind::Copy;
  copy.buffers = {2, 4};
  p.steps.insert(p.steps.end(), {gather, scatter, copy});
  EXPECT_NO_THROW(p.validate());
  Program q = p;
  q.kernels[0].grid = 1 << 30;
  refused(q, "launches kernel k with grid 1073741824 x block 1 over buffers of at most 12");
  q = p;
  q.kernels[0].grid = -1;
  refused(q, "with grid -1");
  q = p;
  q.kernels[0].grid = 0; // an empty domain runs no program
  EXPECT_NO_THROW(q.validate());
  q = p;
  q.steps[1].buffers = {0, 1, 3};
  refused(q, "gathers f32[4, 3] rows by i64[2] into f32[4, 3]");
  q = p;
  q.steps[1].buffers = {0, 0, 2};
  refused(q, "rows by f32[4, 3]");
  q = p;
  q.steps[2].buffers = {0, 1, 3, 3};
  refused(q, "scatters f32[4, 3] by i64[2] into f32[4, 3]");
  q = p;
  q.steps[3].buffers = {2, 3};
  refused(q, "copies 24 bytes into 48");
  q = p;
  q.steps.push_back(q.steps[0]);
  refused(q, "launches kernel k, which an earlier step launches");
  q = p;
  q.kernels.push_back(q.kernels[0]);
  refused(q, "kernel k is launched by no step");
  q = p;
  q.kernels[0].block = 256, q.kernels[0].grid = 1;
  q.kernels[0].threads = 64; // 4 lanes a thread
  EXPECT_NO_THROW(q.validate());
  q.kernels[0].threads = 256;
  refused(q, "kernel k runs 256 threads per block of 256 lanes, expected 64");
}

TEST(Program, ValidateRefusesAttentionStepsThatContradictTheirSizes) {
  // q [2, 4, 5, 8] with 2 key/value heads of 7 keys, value size 6, an i1
  // mask broadcast over the batch, dropout with its seed: then the
  // gradient step.
  Program p;
  p.buffers = {buffer("q", DType::F32, {2, 4, 5, 8}, BufferInfo::Role::Argument),  // 0
               buffer("k", DType::F32, {2, 2, 7, 8}, BufferInfo::Role::Argument),  // 1
               buffer("v", DType::F32, {2, 2, 7, 6}, BufferInfo::Role::Argument),  // 2
               buffer("mask", DType::I1, {1, 4, 5, 7}, BufferInfo::Role::Argument), // 3
               buffer("seed", DType::I64, {}, BufferInfo::Role::Argument),         // 4
               buffer("out", DType::F32, {2, 4, 5, 6}),                            // 5
               buffer("lse", DType::F32, {2, 4, 5}),                               // 6
               buffer("dq", DType::F32, {2, 4, 5, 8}),                             // 7
               buffer("dk", DType::F32, {2, 2, 7, 8}),                             // 8
               buffer("dv", DType::F32, {2, 2, 7, 6})};                            // 9
  p.arguments = {0, 1, 2, 3, 4};
  p.results = {5, 7, 8, 9};
  Step forward;
  forward.kind = Step::Kind::Attention;
  forward.source = "graph.attention";
  forward.batch = 2;
  AttentionParams &a = forward.attention;
  a.heads = 4, a.kvHeads = 2, a.queries = 5, a.keys = 7, a.headDim = 8, a.valueDim = 6;
  a.mask = 1, a.maskHeadStride = 5 * 7, a.dropoutP = 0.25, a.stream = 3;
  forward.buffers = {0, 1, 2, 3, 4, 5, 6};
  forward.outputs = 2;
  Step backward = forward;
  backward.kind = Step::Kind::AttentionGrad;
  backward.source = "graph.attention_grad";
  backward.buffers = {0, 1, 2, 5, 6, 5, 3, 4, 7, 8, 9};
  backward.outputs = 3;
  p.steps = {forward, backward};
  EXPECT_NO_THROW(p.validate());
  EXPECT_EQ(stepWrites(p.steps[0]), (std::vector<int>{5, 6}));
  EXPECT_EQ(stepWrites(p.steps[1]), (std::vector<int>{7, 8, 9}));
  // The parameters survive serialisation.
  Program back = deserializeProgram(serializeProgram(p));
  const AttentionParams &b = back.steps[1].attention;
  EXPECT_EQ(back.steps[1].kind, Step::Kind::AttentionGrad);
  EXPECT_EQ(std::make_tuple(b.heads, b.kvHeads, b.queries, b.keys, b.headDim, b.valueDim,
                            b.mask, b.maskBatchStride, b.maskHeadStride, b.stream),
            std::make_tuple(int64_t(4), int64_t(2), int64_t(5), int64_t(7), int64_t(8),
                            int64_t(6), int32_t(1), int64_t(0), int64_t(35), int64_t(3)));
  EXPECT_EQ(b.dropoutP, 0.25);
  Program q = p;
  q.steps[0].attention.kvHeads = 3;
  refused(q, "step 0 (graph.attention) has impossible attention sizes");
  q = p;
  q.steps[0].attention.valueDim = 8;
  refused(q, "buffer 2 is f32[2, 2, 7, 6], expected 224 f32 elements");
  q = p;
  q.steps[0].attention.maskBatchStride = 4 * 5 * 7; // reads past the mask
  refused(q, "mask is i1[1, 4, 5, 7], too small for its strides");
  q = p;
  q.steps[1].buffers[7] = 3; // the mask where the seed belongs
  refused(q, "seed is i1[1, 4, 5, 7], expected one i64");
  q = p;
  q.steps[0].attention.dropoutP = 0; // then the seed is one buffer too many
  refused(q, "has 7 buffers and 2 outputs, expected 6 and 2");
  // bf16 attention: q, k, v, out and the gradients bf16, the log-sum-exp f32.
  Program h = p;
  for (int b : {0, 1, 2, 5, 7, 8, 9})
    h.buffers[size_t(b)].dtype = DType::BF16;
  EXPECT_NO_THROW(h.validate());
  q = h;
  q.buffers[6].dtype = DType::BF16;
  refused(q, "buffer 6 is bf16[2, 4, 5], expected 40 f32 elements");
  q = h;
  q.buffers[2].dtype = DType::F32; // v of another type than q
  refused(q, "buffer 2 is f32[2, 2, 7, 6], expected 168 bf16 elements");
  // f16 alike (which executor has kernels for it, it checks itself).
  q = p;
  for (int b : {0, 1, 2, 5, 7, 8, 9})
    q.buffers[size_t(b)].dtype = DType::F16;
  EXPECT_NO_THROW(q.validate());
  try { // the CPU's kernels take f32 and bf16: refused at load, not mid-run
    CpuExecutor cpu(q, {}, nullptr);
    ADD_FAILURE() << "loaded";
  } catch (const CompileError &e) {
    EXPECT_NE(std::string(e.what()).find("graph.attention: no CPU kernels for f16"),
              std::string::npos)
        << e.what();
  }
  q.buffers[0].dtype = q.buffers[1].dtype = q.buffers[2].dtype = DType::F64;
  refused(q, "buffer 0 is f64[2, 4, 5, 8]");
}

TEST(Program, ValidateRefusesConvolutionStepsThatContradictTheirSizes) {
  // x [2, 4, 9, 10] by a depthwise-pair weight [8, 2, 3, 3] (2 groups),
  // stride 2, padding 1 / 0 -> y [2, 8, 4, 4]; then both gradients.
  Program p;
  p.buffers = {buffer("x", DType::F32, {2, 4, 9, 10}, BufferInfo::Role::Argument), // 0
               buffer("w", DType::F32, {8, 2, 3, 3}, BufferInfo::Role::Argument),  // 1
               buffer("y", DType::F32, {2, 8, 4, 4}),                              // 2
               buffer("dx", DType::F32, {2, 4, 9, 10}),                            // 3
               buffer("dw", DType::F32, {8, 2, 3, 3})};                            // 4
  p.arguments = {0, 1};
  p.results = {2, 3, 4};
  Step forward;
  forward.kind = Step::Kind::Conv;
  forward.source = "graph.conv";
  ConvParams &c = forward.conv;
  c.spatial = 2, c.batch = 2, c.channels = 4, c.outChannels = 8, c.groups = 2;
  c.input = {9, 10, 0}, c.kernel = {3, 3, 0}, c.output = {4, 4, 0}, c.stride = {2, 2, 1};
  c.padLow = {1, 0, 0}, c.padHigh = {0, 0, 0};
  forward.buffers = {0, 1, 2};
  Step gradInput = forward, gradWeight = forward;
  gradInput.kind = Step::Kind::ConvGradInput, gradInput.source = "graph.conv_grad_input";
  gradInput.buffers = {2, 1, 3};
  gradWeight.kind = Step::Kind::ConvGradWeight, gradWeight.source = "graph.conv_grad_weight";
  gradWeight.buffers = {0, 2, 4};
  p.steps = {forward, gradInput, gradWeight};
  EXPECT_NO_THROW(p.validate());
  EXPECT_EQ(stepWrites(p.steps[1]), (std::vector<int>{3}));
  // The sizes survive serialisation.
  Program back = deserializeProgram(serializeProgram(p));
  const ConvParams &b = back.steps[2].conv;
  EXPECT_EQ(back.steps[2].kind, Step::Kind::ConvGradWeight);
  EXPECT_EQ(std::make_tuple(b.spatial, b.batch, b.channels, b.outChannels, b.groups, b.input,
                            b.kernel, b.output, b.stride, b.padLow, b.padHigh, b.dilation),
            std::make_tuple(c.spatial, c.batch, c.channels, c.outChannels, c.groups, c.input,
                            c.kernel, c.output, c.stride, c.padLow, c.padHigh, c.dilation));
  Program q = p;
  q.steps[0].conv.output = {5, 4, 0}; // not what the window gives
  refused(q, "step 0 (graph.conv) has impossible convolution sizes (spatial dimension 0)");
  q = p;
  q.steps[0].conv.groups = 3;
  refused(q, "has impossible convolution sizes (channels, groups or rank)");
  q = p;
  q.steps[1].buffers = {3, 1, 2}; // dInput where the output's cotangent belongs
  refused(q, "buffer 0 is f32[2, 4, 9, 10], expected 256 elements of one of f32, bf16, f16");
  q = p;
  q.steps[2].buffers = {0, 2};
  refused(q, "2 buffers, expected 3");
  // A forward convolution's epilogue (graph.conv_bias_act): the bias
  // (one f32 per output channel) first, one activation last; it survives
  // serialisation.
  q = p;
  q.buffers.push_back(buffer("bias", DType::F32, {8}, BufferInfo::Role::Argument)); // 5
  q.arguments.push_back(5);
  q.steps[0].epilogue = {"bias", "silu"};
  q.steps[0].buffers.push_back(5);
  EXPECT_NO_THROW(q.validate());
  EXPECT_EQ(stepReads(q.steps[0]), (std::vector<int>{0, 1, 5}));
  EXPECT_EQ(deserializeProgram(serializeProgram(q)).steps[0].epilogue,
            (std::vector<std::string>{"bias", "silu"}));
  Program r = q;
  r.steps[0].epilogue = {"silu", "bias"};
  refused(r, "step 0 (graph.conv) has convolution epilogue 'silu' at position 0");
  r = q;
  r.steps[0].epilogue = {"bias", "gelu"};
  refused(r, "has convolution epilogue 'gelu' at position 1");
  r = q;
  r.steps[0].epilogue = {"relu"}; // the bias buffer where a workspace may be
  refused(r, "has a workspace of f32[8], expected an intermediate i1 vector (bytes)");
  // A workspace (i1 bytes, after the bias): written by the step, so the
  // plan keeps it for that step only; one buffer more is refused.
  r = q;
  r.buffers.push_back(buffer("workspace", DType::I1, {4096})); // 6
  r.steps[0].buffers.push_back(6);
  EXPECT_NO_THROW(r.validate());
  EXPECT_EQ(convWorkspaceSlot(r.steps[0]), 4);
  EXPECT_EQ(stepWrites(r.steps[0]), (std::vector<int>{2, 6}));
  EXPECT_EQ(stepReads(r.steps[0]), (std::vector<int>{0, 1, 5}));
  EXPECT_EQ(convWorkspaceSlot(q.steps[0]), -1);
  r.steps[0].buffers.push_back(6);
  refused(r, "6 buffers, expected 4 (or a workspace after them)");
  r = q;
  r.buffers[5].shape = {4};
  refused(r, "has a bias of f32[4], expected 8 f32 values");
  r = q;
  r.steps[2].epilogue = {"relu"}; // backward convolutions apply none
  refused(r, "step 2 (graph.conv_grad_weight) has convolution epilogue 'relu' at position 0");
}

/// A square 2-d convolution of two 9x11 images for the CPU library tests.
struct ConvShape {
  int64_t channels, out, groups, kernel, stride, pad;
  ConvParams params() const {
    ConvParams p;
    p.spatial = 2, p.batch = 2, p.channels = channels, p.outChannels = out;
    p.groups = groups;
    p.input = {9, 11, 0}, p.kernel = {kernel, kernel, 0};
    p.stride = {stride, stride, 1}, p.padLow = p.padHigh = {pad, pad, 0};
    for (size_t i = 0; i < 2; ++i)
      p.output[i] = (p.input[i] + 2 * pad - kernel) / stride + 1;
    return p;
  }
};

TEST(CpuLibrary, ConvolutionEpiloguesMatchTheDefinition) {
  // oneDNN's bias and post-ops (or the loops after the convolution where
  // oneDNN is missing) against the reference loops in double: plain,
  // grouped and strided, 1x1 (oneDNN's plain-layout path).
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> dist(-1, 1);
  using Shape = ConvShape;
  for (Shape sh : {Shape{3, 16, 1, 3, 1, 1}, Shape{8, 8, 8, 3, 2, 1}, Shape{5, 12, 1, 1, 1, 0}})
    for (std::vector<std::string> epilogue :
         {std::vector<std::string>{"bias"}, {"relu"}, {"silu"}, {"bias", "relu"},
          {"bias", "silu"}}) {
      Step s;
      s.kind = Step::Kind::Conv;
      s.source = "graph.conv_bias_act";
      s.epilogue = epilogue;
      s.conv = sh.params();
      const ConvParams &p = s.conv;
      std::vector<float> x(size_t(p.inputElements())), w(size_t(p.weightElements())),
          bias(size_t(p.outChannels)), y(size_t(p.outputElements()));
      for (auto *v : {&x, &w, &bias})
        for (float &e : *v)
          e = dist(gen);
      x[5] = std::nanf(""); // stays NaN through every epilogue, relu's included
      cpu::conv(s, DType::F32, x.data(), w.data(), y.data(), nullptr, bias.data());
      std::vector<double> xd(x.begin(), x.end()), wd(w.begin(), w.end()),
          bd(bias.begin(), bias.end()), want(y.size());
      convReference<double>(ConvDirection::Forward, p, xd.data(), wd.data(), want.data());
      bool withBias = epilogue.front() == "bias";
      convEpilogue<double>(p, withBias ? bd.data() : nullptr,
                           *convActivationNamed(epilogue.back() == "bias" ? "none"
                                                                          : epilogue.back()),
                           want.data());
      for (size_t i = 0; i < y.size(); ++i)
        if (std::isnan(want[i]))
          ASSERT_TRUE(std::isnan(y[i])) << "element " << i << " lost its NaN, epilogue "
                                        << epilogue.back();
        else
          ASSERT_NEAR(y[i], want[i], 1e-5 * (1 + std::abs(want[i])))
            << "element " << i << " of " << sh.channels << "->" << sh.out << " groups "
            << sh.groups << " kernel " << sh.kernel << " epilogue " << epilogue.front() << ","
            << epilogue.back();
    }
}

TEST(CpuLibrary, ChannelsLastConvolutionsMatchChannelsFirst) {
  // Every direction with channels-last activations against the same
  // convolution channels-first (the reference loops in double, both
  // layouts), through the CPU library (oneDNN's nhwc kernels, or the loops
  // where oneDNN is missing): plain, depthwise and strided, 1x1, with and
  // without an epilogue.
  std::mt19937 gen(12);
  std::uniform_real_distribution<float> dist(-1, 1);
  using Shape = ConvShape;
  // [N, C, S] <-> [N, S, C] for `channels` channels over `volume` positions.
  auto toLast = [](const std::vector<double> &v, int64_t batch, int64_t channels,
                   int64_t volume) {
    std::vector<double> out(v.size());
    for (int64_t n = 0; n < batch; ++n)
      for (int64_t c = 0; c < channels; ++c)
        for (int64_t s = 0; s < volume; ++s)
          out[size_t((n * volume + s) * channels + c)] = v[size_t((n * channels + c) * volume + s)];
    return out;
  };
  for (Shape sh : {Shape{3, 16, 1, 3, 2, 1}, Shape{24, 24, 24, 3, 1, 1}, Shape{5, 12, 1, 1, 1, 0},
                   Shape{40, 16, 1, 3, 1, 1}})
    for (ConvDirection direction :
         {ConvDirection::Forward, ConvDirection::GradInput, ConvDirection::GradWeight})
      for (bool withEpilogue : {false, true}) {
        if (withEpilogue && direction != ConvDirection::Forward)
          continue;
        ConvParams p = sh.params();
        int64_t in = p.inputElements(), w = p.weightElements(), o = p.outputElements();
        int64_t na = direction == ConvDirection::GradInput ? o : in;
        int64_t nb = direction == ConvDirection::GradWeight ? o : w;
        int64_t nout = direction == ConvDirection::Forward     ? o
                       : direction == ConvDirection::GradInput ? in
                                                               : w;
        std::vector<double> a(static_cast<size_t>(na)), b(static_cast<size_t>(nb)),
            bias(static_cast<size_t>(p.outChannels));
        for (auto *v : {&a, &b, &bias})
          for (double &e : *v)
            e = dist(gen);
        std::vector<double> want(static_cast<size_t>(nout));
        convReference<double>(direction, p, a.data(), b.data(), want.data());
        if (withEpilogue)
          convEpilogue<double>(p, bias.data(), ConvActivation::Silu, want.data());
        // The same in channels-last: activations moved, the weight as is.
        ConvParams q = p;
        q.channelsLast = true;
        int64_t inVolume = p.volume(p.input), outVolume = p.volume(p.output);
        std::vector<double> aLast =
            direction == ConvDirection::GradInput ? toLast(a, p.batch, p.outChannels, outVolume)
                                                  : toLast(a, p.batch, p.channels, inVolume);
        std::vector<double> bLast = direction == ConvDirection::GradWeight
                                        ? toLast(b, p.batch, p.outChannels, outVolume)
                                        : b;
        std::vector<double> wantLast =
            direction == ConvDirection::Forward     ? toLast(want, p.batch, p.outChannels, outVolume)
            : direction == ConvDirection::GradInput ? toLast(want, p.batch, p.channels, inVolume)
                                                    : want;
        std::vector<double> ref(static_cast<size_t>(nout));
        convReference<double>(direction, q, aLast.data(), bLast.data(), ref.data());
        if (withEpilogue)
          convEpilogue<double>(q, bias.data(), ConvActivation::Silu, ref.data());
        for (size_t i = 0; i < ref.size(); ++i)
          ASSERT_NEAR(ref[i], wantLast[i], 1e-12) << "reference, element " << i;
        Step s;
        s.kind = direction == ConvDirection::Forward     ? Step::Kind::Conv
                 : direction == ConvDirection::GradInput ? Step::Kind::ConvGradInput
                                                         : Step::Kind::ConvGradWeight;
        s.source = "graph.conv";
        s.conv = q;
        if (withEpilogue)
          s.epilogue = {"bias", "silu"};
        std::vector<float> af(aLast.begin(), aLast.end()), bf(bLast.begin(), bLast.end()),
            biasf(bias.begin(), bias.end()), got(static_cast<size_t>(nout));
        cpu::conv(s, DType::F32, af.data(), bf.data(), got.data(), nullptr,
                  withEpilogue ? biasf.data() : nullptr);
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_NEAR(got[i], wantLast[i], 1e-5 * (1 + std::abs(wantLast[i])))
              << "direction " << int(direction) << ", element " << i << " of " << sh.channels
              << "->" << sh.out << " groups " << sh.groups << " kernel " << sh.kernel
              << " stride " << sh.stride << (withEpilogue ? " with bias+silu" : "");
      }
}

TEST(Program, ValidateRefusesGemmsWhoseShapesContradictTheirTransposes) {
  Program p;
  p.buffers = {buffer("a", DType::F32, {3, 2, 5}, BufferInfo::Role::Argument),  // 0
               buffer("b", DType::F32, {3, 5, 4}, BufferInfo::Role::Argument),  // 1
               buffer("c", DType::F32, {3, 2, 4})};                             // 2
  p.arguments = {0, 1};
  p.results = {2};
  Step g;
  g.kind = Step::Kind::Gemm;
  g.batch = 3, g.m = 2, g.n = 4, g.k = 5;
  g.buffers = {0, 1, 2};
  p.steps = {g};
  EXPECT_NO_THROW(p.validate());
  for (bool onA : {true, false}) {
    Program q = p;
    (onA ? q.steps[0].transposeA : q.steps[0].transposeB) = true;
    try {
      q.validate();
      ADD_FAILURE() << "a flipped transpose flag was accepted";
    } catch (const CompileError &e) {
      EXPECT_NE(std::string(e.what()).find(onA ? "multiplies [3, 2, 5]^T by [3, 5, 4]"
                                                : "multiplies [3, 2, 5] by [3, 5, 4]^T"),
                std::string::npos)
          << e.what();
    }
  }
  // A reshape that merged the batch into the rows ([3, 2, 5] as [6, 5])
  // shares its operand's buffer: the same bytes, accepted.
  Program merged = p;
  merged.buffers[0].shape = {6, 5};
  EXPECT_NO_THROW(merged.validate());
  // a stored transposed: [3, 5, 2]
  p.buffers[0].shape = {3, 5, 2};
  p.steps[0].transposeA = true;
  EXPECT_NO_THROW(p.validate());
}

/// A grouped GEMM program: rows a [6, 2] by groups of w [3, 2, 2] (forward,
/// c [6, 2]) or the weights' gradient (a [6, 2], b [6, 2] -> c [3, 2, 2]).
Program groupedGemmProgram(bool weightGrad, DType offsets) {
  Program p;
  p.buffers = {buffer("a", DType::F32, {6, 2}, BufferInfo::Role::Argument),       // 0
               buffer("b", DType::F32, weightGrad ? Shape{6, 2} : Shape{3, 2, 2},
                      BufferInfo::Role::Argument),                                 // 1
               buffer("offsets", offsets, {3}, BufferInfo::Role::Argument),       // 2
               buffer("c", DType::F32, weightGrad ? Shape{3, 2, 2} : Shape{6, 2})}; // 3
  p.arguments = {0, 1, 2};
  p.results = {3};
  Step g;
  g.kind = Step::Kind::GroupedGemm;
  g.batch = 3, g.m = 6, g.k = 2, g.n = 2, g.transposeA = weightGrad;
  g.buffers = {0, 1, 2, 3};
  g.source = weightGrad ? "graph.grouped_matmul_weight_grad" : "graph.grouped_matmul";
  p.steps = {g};
  return p;
}

TEST(CpuLibrary, GroupedGemmsFollowTheGroupsOfTheirOffsets) {
  // Rows 0-1 in group 0, group 1 empty, rows 2-4 in group 2, row 5 in none.
  HostTensor a = f32({6, 2}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  HostTensor w = f32({3, 2, 2}, {1, 0, 0, 1, /**/ 5, 5, 5, 5, /**/ 0, 1, 1, 0});
  for (DType type : {DType::I32, DType::I64})
    for (std::vector<int64_t> ends : {std::vector<int64_t>{2, 2, 5},
                                      // unsorted and out of range: the same groups
                                      std::vector<int64_t>{5, 2, 2}, {-4, 2, 5}}) {
      HostTensor offsets(type, {3});
      for (int g = 0; g < 3; ++g)
        offsets.setInt(g, ends[size_t(g)]);
      bool clampedFirst = ends[0] < 0; // group 0 ends at 0: rows 0-1 go to group 1
      CpuExecutor forward(groupedGemmProgram(false, type), {}, nullptr);
      HostTensor c = forward.run({a, w, offsets})[0];
      std::vector<float> want = clampedFirst
                                    ? std::vector<float>{15, 15, 35, 35, 6, 5, 8, 7, 10, 9, 0, 0}
                                    : std::vector<float>{1, 2, 3, 4, 6, 5, 8, 7, 10, 9, 0, 0};
      for (int i = 0; i < 12; ++i)
        EXPECT_EQ(c.getDouble(i), want[size_t(i)]) << "element " << i;

      HostTensor dy = f32({6, 2}, {1, 0, 0, 1, 1, 1, 2, 0, 0, 2, 3, 3});
      CpuExecutor backward(groupedGemmProgram(true, type), {}, nullptr);
      HostTensor dw = backward.run({a, dy, offsets})[0];
      // group 2 = rows 2-4: a^T dy = [[5+14+0, 5+0+18], [6+16+0, 6+0+20]]
      std::vector<float> wantDw =
          clampedFirst ? std::vector<float>{0, 0, 0, 0, 1, 3, 2, 4, 19, 23, 22, 26}
                       : std::vector<float>{1, 3, 2, 4, 0, 0, 0, 0, 19, 23, 22, 26};
      for (int i = 0; i < 12; ++i)
        EXPECT_EQ(dw.getDouble(i), wantDw[size_t(i)]) << "weight gradient element " << i;
    }
}

TEST(Program, ValidateRefusesGroupedGemmsThatContradictTheirSizes) {
  EXPECT_NO_THROW(groupedGemmProgram(false, DType::I32).validate());
  EXPECT_NO_THROW(groupedGemmProgram(true, DType::I64).validate());
  auto refuses = [](Program p, const std::string &what) {
    try {
      p.validate();
      ADD_FAILURE() << what << " was accepted";
    } catch (const CompileError &e) {
      EXPECT_NE(std::string(e.what()).find(" groups by "), std::string::npos) << e.what();
    }
  };
  Program groups = groupedGemmProgram(false, DType::I32);
  groups.steps[0].batch = 2;
  refuses(groups, "two groups over three offsets");
  refuses(groupedGemmProgram(false, DType::F32), "float offsets");
  Program wide = groupedGemmProgram(false, DType::I32);
  wide.steps[0].n = 3;
  refuses(wide, "an n the buffers do not have");
}

TEST(CpuExecutor, SortStepsSortRowsStablyAndRefuseCorruptSizes) {
  Program p;
  p.buffers = {buffer("x", DType::F32, {2, 4}, BufferInfo::Role::Argument), // 0
               buffer("values", DType::F32, {2, 4}),                       // 1
               buffer("indices", DType::I64, {2, 4})};                     // 2
  p.arguments = {0};
  p.results = {1, 2};
  Step s;
  s.kind = Step::Kind::Sort;
  s.m = 2, s.n = 4, s.outputs = 2, s.descending = true;
  s.buffers = {0, 1, 2};
  s.source = "graph.sort";
  p.steps = {s};
  CpuExecutor exe(p, {}, nullptr);
  auto out = exe.run({f32({2, 4}, {1, 3, 3, NAN, -1, 0, -0.0f, 2})});
  std::vector<double> values = {NAN, 3, 3, 1, 2, 0, -0.0, -1};
  std::vector<int64_t> indices = {3, 1, 2, 0, 3, 1, 2, 0};
  for (int i = 0; i < 8; ++i) {
    if (std::isnan(values[size_t(i)]))
      EXPECT_TRUE(std::isnan(out[0].getDouble(i)));
    else
      EXPECT_EQ(out[0].getDouble(i), values[size_t(i)]) << i;
    EXPECT_EQ(out[1].getInt(i), indices[size_t(i)]) << i;
  }
  Program wrong = p;
  wrong.steps[0].n = 5;
  try {
    wrong.validate();
    ADD_FAILURE() << "a sort of rows longer than its buffers was accepted";
  } catch (const CompileError &e) {
    EXPECT_NE(std::string(e.what()).find("sorts 2 rows of 5"), std::string::npos) << e.what();
  }
}

TEST(Program, KernelSymbolsBindKernelsToTheirSteps) {
  Program p;
  p.buffers = {buffer("x", DType::F32, {4, 3}, BufferInfo::Role::Argument),
               buffer("y", DType::F32, {4, 3}), buffer("z", DType::F16, {4, 3})};
  p.arguments = {0};
  p.results = {1};
  Step s = addKernelStep(p, "f_kernel0", 3, {0, 1});
  p.kernels[0].block = 4;
  std::string symbol = kernelSymbol(p, s);
  EXPECT_EQ(symbol.rfind("f_kernel0_", 0), 0u) << symbol;
  EXPECT_EQ(symbol.size(), std::string("f_kernel0_").size() + 8) << symbol;
  EXPECT_EQ(kernelSymbols(p), std::vector<std::string>{symbol});
  // Anything the compiled code depends on changes the symbol.
  auto changed = [&](auto mutate) {
    Program q = p;
    mutate(q);
    return kernelSymbol(q, q.steps[0]) != symbol;
  };
  EXPECT_TRUE(changed([](Program &q) { q.kernels[0].grid = 2; }));
  EXPECT_TRUE(changed([](Program &q) { q.kernels[0].block = 8; }));
  EXPECT_TRUE(changed([](Program &q) { q.kernels[0].elementsPerProgram = 2; }));
  EXPECT_TRUE(changed([](Program &q) { q.kernels[0].kind = "reduction"; }));
  EXPECT_TRUE(changed([](Program &q) { q.steps[0].buffers = {0, 2}; }));  // f16 output
  EXPECT_TRUE(changed([](Program &q) { q.steps[0].buffers = {0, 1, 1}; }));
  EXPECT_TRUE(changed([](Program &q) { q.buffers[1].shape = {3, 4}; }));
  EXPECT_TRUE(changed([](Program &q) { q.kernels[0].name = "f_kernel1"; }));
  EXPECT_FALSE(changed([](Program &q) { q.steps[0].source = "renamed"; }));
}

TEST(CpuLibrary, GatherRefusesOutOfRangeRows) {
  BufferInfo table = buffer("t", DType::F32, {2, 2}), ids = buffer("i", DType::I32, {1});
  float data[4] = {1, 2, 3, 4}, out[2] = {0, 0};
  int32_t bad = 2;
  EXPECT_THROW(cpu::gather(table, ids, data, &bad, out), CompileError);
  int32_t good = 1;
  cpu::gather(table, ids, data, &good, out);
  EXPECT_EQ(out[0], 3);
  EXPECT_EQ(out[1], 4);
}

TEST(CpuExecutor, PersistentArgumentsCarryResultsAcrossRuns) {
  // One "training step": y = 2x; x <- y after every run.
  Program p = doublingProgram(3);
  p.aliases = {{0, 0}};
  CpuExecutor exe(p, {&doubleKernel}, nullptr);
  HostTensor x = f32({3}, {1, 2, 3});
  exe.makePersistent(0, x.bytes.data());
  exe.carry(0, 0);
  for (int i = 0; i < 3; ++i)
    exe.run(std::vector<ArgRef>{ArgRef{}});
  auto *now = static_cast<const float *>(exe.persistent(0));
  EXPECT_EQ(now[0], 8);
  EXPECT_EQ(now[2], 24);
  EXPECT_EQ(static_cast<const float *>(exe.result(0))[1], 16);
  EXPECT_THROW(exe.carry(0, 1), CompileError);
}

TEST(Artifact, RefusesCodeForAnotherCpu) {
  Artifact a;
  a.target = "cpu";
  a.cpuFeatures = {"sve2"}; // an ISA this x86 machine does not have
  a.program.buffers = {buffer("x", DType::F32, {1}, BufferInfo::Role::Argument)};
  a.program.arguments = {0};
  a.program.results = {0};
  a.blobs = {{"kernels.so", "not a library"}};
  Artifact back = readArtifact(writeArtifact(a));
  try {
    loadCpuArtifact(back);
    FAIL() << "an artifact for another CPU was loaded";
  } catch (const CompileError &e) {
    EXPECT_NE(std::string(e.what()).find("CPU features this machine lacks (sve2)"),
              std::string::npos)
        << e.what();
  }
  back.cpuFeatures.clear();
  EXPECT_THROW(loadCpuArtifact(back), CompileError); // "not a library"
  back.target = "cuda:sm_90";
  EXPECT_THROW(loadCpuArtifact(back), CompileError);
}

TEST(Program, SplatConstantsHoldOneElementAndFillTheirBuffer) {
  // k = full(2.5) of 1000 elements, returned through a copy.
  Program p;
  p.buffers = {buffer("k", DType::F32, {1000}, BufferInfo::Role::Constant),
               buffer("out", DType::F32, {1000})};
  float v = 2.5f;
  p.buffers[0].data.assign(reinterpret_cast<uint8_t *>(&v), reinterpret_cast<uint8_t *>(&v) + 4);
  p.buffers[0].splat = true;
  Step c;
  c.kind = Step::Kind::Copy, c.buffers = {0, 1}, c.source = "return";
  p.steps.push_back(c);
  p.results = {1};
  Program back = deserializeProgram(serializeProgram(p));
  EXPECT_TRUE(back.buffers[0].splat);
  EXPECT_EQ(back.buffers[0].data.size(), 4u);
  CpuExecutor exe(back, {}, nullptr);
  HostTensor out = exe.run(std::vector<HostTensor>{})[0];
  for (int64_t i = 0; i < 1000; ++i)
    ASSERT_EQ(out.getDouble(i), 2.5) << i;
  back.buffers[0].data.resize(8); // neither one element nor all of them
  EXPECT_THROW(back.validate(), CompileError);
}

TEST(ProgramIO, ChecksumsAreStandardFnv1a64) {
  // The published FNV-1a 64-bit test vectors: other tools can check a file.
  EXPECT_EQ(fnv1a64("", 0), 0xcbf29ce484222325ull);
  EXPECT_EQ(fnv1a64("a", 1), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(fnv1a64("foobar", 6), 0x85944171f73967e8ull);
}

TEST(CpuLibrary, Bf16GemmsThroughOneDnnMatchTheWideningPath) {
  if (cpu::dnnlStatus() != "loaded")
    GTEST_SKIP() << "oneDNN bf16 GEMMs: " << cpu::dnnlStatus();
  // Batched, transposed and odd sizes: oneDNN (f32 accumulation, one
  // rounding) against the f32 GEMM of the widened operands, rounded once.
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> dist(-1, 1);
  for (auto [batch, m, n, k, ta, tb] :
       std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t, bool, bool>>{
           {1, 33, 17, 65, false, false}, {3, 8, 40, 16, true, false},
           {2, 5, 7, 129, false, true}, {1, 64, 64, 64, true, true}}) {
    Step s;
    s.kind = Step::Kind::Gemm;
    s.batch = batch, s.m = m, s.n = n, s.k = k, s.transposeA = ta, s.transposeB = tb;
    std::vector<uint16_t> a(size_t(batch * m * k)), b(size_t(batch * k * n)),
        c(size_t(batch * m * n));
    for (uint16_t &v : a)
      v = floatToBF16(dist(gen));
    for (uint16_t &v : b)
      v = floatToBF16(dist(gen));
    ASSERT_TRUE(cpu::dnnlGemm(s, DType::BF16, a.data(), b.data(), c.data()));
    for (int64_t i = 0; i < batch; ++i)
      for (int64_t r = 0; r < m; ++r)
        for (int64_t col = 0; col < n; ++col) {
          double want = 0;
          for (int64_t l = 0; l < k; ++l) {
            int64_t ai = ta ? (i * k + l) * m + r : (i * m + r) * k + l;
            int64_t bi = tb ? (i * n + col) * k + l : (i * k + l) * n + col;
            want += double(bf16ToFloat(a[size_t(ai)])) * bf16ToFloat(b[size_t(bi)]);
          }
          double got = bf16ToFloat(c[size_t((i * m + r) * n + col)]);
          ASSERT_NEAR(got, want, std::ldexp(std::abs(want), -7) + 1e-5)
              << "batch " << i << " row " << r << " col " << col << " of " << batch << "x" << m
              << "x" << n << "x" << k << (ta ? " A^T" : "") << (tb ? " B^T" : "");
        }
  }
}

TEST(CpuLibrary, F32GemmLibraryFollowsTheMeasuredShapes) {
  // A BLAS with AVX-512 kernels on an AVX-512 CPU:
  // A untransposed: oneDNN's dnnl_sgemm at every size (B transposed or not).
  EXPECT_TRUE(cpu::f32GemmRule(false, false, true, 1024, 3072, 768));
  EXPECT_TRUE(cpu::f32GemmRule(false, false, true, 8, 8, 8));
  EXPECT_TRUE(cpu::f32GemmRule(false, false, false, 1024, 3072, 768));
  EXPECT_TRUE(cpu::f32GemmRule(false, false, false, 1024, 768, 50257));
  EXPECT_TRUE(cpu::f32GemmRule(false, false, false, 512, 512, 128));
  // A transposed: oneDNN while small (gpt2_mini's weight gradients), the
  // BLAS from ~0.5 GFLOP (GPT-2 small's).
  EXPECT_TRUE(cpu::f32GemmRule(false, true, false, 128, 384, 512));
  EXPECT_FALSE(cpu::f32GemmRule(false, true, false, 768, 2304, 1024));
  // A BLAS running narrower kernels than the CPU's: oneDNN for every shape.
  EXPECT_TRUE(cpu::f32GemmRule(true, true, false, 768, 2304, 1024));
  EXPECT_TRUE(cpu::f32GemmRule(true, true, false, 50257, 768, 1024));
  EXPECT_TRUE(cpu::f32GemmRule(true, false, true, 1024, 3072, 768));
}

TEST(CpuLibrary, F32GemmsThroughOneDnnSlabsMatchDoublePrecision) {
  if (cpu::dnnlStatus() != "loaded")
    GTEST_SKIP() << "oneDNN GEMMs: " << cpu::dnnlStatus();
  // cpu::gemm splits a 2-D f32 GEMM into row slabs over the pool, each run
  // by oneDNN on its thread (dnnl_sgemm with a team of one); odd sizes,
  // every transpose, one slab and several; an accumulating slab (C += A B:
  // a matmul primitive with a sum post-op) beside them; run twice (the
  // second time from the primitives made by the first). Error bound: f32
  // accumulation of k products, relative to the sum of their magnitudes.
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> dist(-1, 1);
  int64_t slabsBefore = cpu::dnnlF32SlabsRun();
  if (slabsBefore < 0)
    GTEST_SKIP() << "oneDNN's f32 path is off (TILEFUSE_DNNL_F32=0, or no OpenMP entry points)";
  for (int round = 0; round < 2; ++round)
    for (auto [m, n, k, ta, tb] : std::vector<std::tuple<int64_t, int64_t, int64_t, bool, bool>>{
             {1, 1, 1, false, false}, {33, 17, 65, false, false}, {130, 40, 16, true, false},
             {257, 7, 129, false, true}, {512, 64, 96, true, true}}) {
      Step s;
      s.kind = Step::Kind::Gemm;
      s.batch = 1, s.m = m, s.n = n, s.k = k, s.transposeA = ta, s.transposeB = tb;
      std::vector<float> a(size_t(m * k)), b(size_t(k * n)), c(size_t(m * n), 7.0f);
      for (float &v : a)
        v = dist(gen);
      for (float &v : b)
        v = dist(gen);
      cpu::gemm(s, DType::F32, a.data(), b.data(), c.data());
      // The same GEMM as one slab through oneDNN whatever the shape
      // (cpu::gemm may have given it to the BLAS); oneDNN may refuse a
      // shape it has only a reference kernel for.
      std::vector<float> slab(size_t(m * n), 7.0f);
      bool viaDnnl = cpu::dnnlSgemmSlab(ta, tb, m, n, k, a.data(), ta ? m : k, b.data(),
                                        tb ? k : n, slab.data(), n);
      std::vector<float> sum(size_t(m * n), 7.0f);
      bool summedViaDnnl = cpu::dnnlSgemmSlab(ta, tb, m, n, k, a.data(), ta ? m : k, b.data(),
                                              tb ? k : n, sum.data(), n, /*accumulate=*/true);
      for (int64_t r = 0; r < m; ++r)
        for (int64_t col = 0; col < n; ++col) {
          double want = 0, magnitude = 0;
          for (int64_t l = 0; l < k; ++l) {
            double p = double(a[size_t(ta ? l * m + r : r * k + l)]) *
                       double(b[size_t(tb ? col * k + l : l * n + col)]);
            want += p;
            magnitude += std::abs(p);
          }
          for (const std::vector<float> *got : {&c, &slab, &sum}) {
            if ((got == &slab && !viaDnnl) || (got == &sum && !summedViaDnnl))
              continue;
            double offset = got == &sum ? 7.0 : 0.0;
            ASSERT_NEAR((*got)[size_t(r * n + col)], want + offset,
                        1e-6 * double(k) * magnitude + 1e-6 * offset + 1e-7)
                << (got == &c ? "cpu::gemm" : got == &slab ? "one oneDNN slab" : "C += A B")
                << ": row " << r << " col " << col << " of " << m << "x" << n << "x" << k
                << (ta ? " A^T" : "") << (tb ? " B^T" : "") << ", round " << round;
          }
        }
    }
  EXPECT_GT(cpu::dnnlF32SlabsRun(), slabsBefore) << "no GEMM slab ran through oneDNN";
}
