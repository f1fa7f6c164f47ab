//===- CollectivesTest.cpp - collective steps in programs and executors ---===//
//
// Programs with collective steps: what validate() refuses, what survives
// serialisation, and two CPU executors in two threads of one process
// exchanging gradients through an in-process communicator (the test's
// stand-in for torch.distributed).
//
//===----------------------------------------------------------------------===//
#include "tests/unit/CollectivePrograms.h"
#include "runtime/Communicator.h"
#include "runtime/CpuExecutor.h"
#include "runtime/MemoryPlan.h"
#include "runtime/ProgramIO.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <map>
#include <cstring>
#include <mutex>
#include <thread>

using namespace tilefuse;
using namespace tilefuse::testing;

namespace {

void refused(const Program &q, const std::string &reason) {
  try {
    q.validate();
    ADD_FAILURE() << "accepted; expected: " << reason;
  } catch (const CompileError &e) {
    EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
  }
}

/// Ranks of one process exchanging through shared memory: the k-th
/// collective of every rank meets the k-th of the others. start() posts
/// this rank's buffers; wait() blocks until every rank posted, computes
/// this rank's output, and waits again until every rank has read the
/// inputs (so none is overwritten early).
class ThreadGroup {
public:
  explicit ThreadGroup(int64_t size) : size(size) {}

  class Member : public Communicator {
  public:
    Member(ThreadGroup &g, int64_t rank) : g(g), rank_(rank) {}
    int64_t rank() const override { return rank_; }
    int64_t size() const override { return g.size; }
    int64_t start(const CollectiveCall &call) override {
      std::unique_lock<std::mutex> lock(g.m);
      int64_t k = issued++;
      Round &r = g.rounds[k];
      r.calls.resize(size_t(g.size));
      r.calls[size_t(rank_)] = call;
      ++r.posted;
      g.cv.notify_all();
      return k;
    }
    void wait(int64_t k) override {
      std::unique_lock<std::mutex> lock(g.m);
      Round &r = g.rounds[k];
      g.cv.wait(lock, [&] { return r.posted == g.size; });
      const CollectiveCall &mine = r.calls[size_t(rank_)];
      std::vector<float> out(size_t(mine.outputElements), 0.0f);
      for (int64_t from = 0; from < g.size; ++from) {
        const auto *in = static_cast<const float *>(r.calls[size_t(from)].input);
        int64_t n = r.calls[size_t(from)].inputElements;
        for (int64_t i = 0; i < n; ++i) {
          if (mine.kind == CollectiveKind::AllReduce)
            out[size_t(i)] += in[i];
          else // all-gather: rank `from`'s rows
            out[size_t(from * n + i)] = in[i];
        }
      }
      ++r.read;
      g.cv.notify_all();
      g.cv.wait(lock, [&] { return r.read == g.size; });
      std::memcpy(mine.output, out.data(), out.size() * sizeof(float));
    }

  private:
    ThreadGroup &g;
    int64_t rank_;
    int64_t issued = 0;
  };

private:
  struct Round {
    std::vector<CollectiveCall> calls;
    int64_t posted = 0, read = 0;
  };
  int64_t size;
  std::mutex m;
  std::condition_variable cv;
  std::map<int64_t, Round> rounds;
};

} // namespace

TEST(Collectives, ValidateRefusesUnpairedOrMisshapenCollectives) {
  Program p = exchangeProgram(2);
  EXPECT_NO_THROW(p.validate());
  EXPECT_EQ(stepWrites(p.steps[1]), (std::vector<int>{1}));
  EXPECT_EQ(stepReads(p.steps[4]), (std::vector<int>{1})); // the wait keeps the input live
  Program q = p;
  q.steps.pop_back();
  refused(q, "collective ticket 1 has 1 starts and 0 waits");
  q = p;
  std::swap(q.steps[3], q.steps[4]);
  refused(q, "each start needs exactly one wait after it");
  q = p;
  q.steps[2].buffers = {2};
  refused(q, "share ticket 0 but not their buffers");
  q = p;
  q.steps[1].collective.group = 1;
  refused(q, "over group 1 of 1");
  q = p;
  q.buffers[2].shape = {6};
  refused(q, "all_gathers f32[4] into f32[6] over 2 ranks");
  q = p;
  q.steps[1].collective.kind = CollectiveKind::Broadcast;
  q.steps[1].collective.root = 2;
  refused(q, "root 2 of 2 ranks");
  q = p;
  q.groups[0].size = 0;
  refused(q, "process group 'dp' of size 0");
}

TEST(Collectives, GroupsAndCollectivesSurviveSerialisation) {
  Program p = exchangeProgram(4);
  p.steps[1].collective.reduce = ReduceOp::Max;
  Program back = deserializeProgram(serializeProgram(p));
  ASSERT_EQ(back.groups.size(), 1u);
  EXPECT_EQ(back.groups[0].name, "dp");
  EXPECT_EQ(back.groups[0].size, 4);
  EXPECT_EQ(back.steps[1].kind, Step::Kind::CollectiveStart);
  EXPECT_EQ(back.steps[1].collective.reduce, ReduceOp::Max);
  EXPECT_EQ(back.steps[3].collective.kind, CollectiveKind::AllGather);
  EXPECT_EQ(back.steps[4].collective.ticket, 1);
}

TEST(Collectives, AGroupOfOneRunsWithoutACommunicator) {
  CpuExecutor exe(exchangeProgram(1), {}, nullptr);
  std::vector<HostTensor> out = exe.run({f32({1, 2, 3, 4})});
  EXPECT_EQ(values(out[0]), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(values(out[1]), (std::vector<float>{1, 2, 3, 4}));
}

TEST(Collectives, AnUnboundGroupIsRefusedByName) {
  CpuExecutor exe(exchangeProgram(2), {}, nullptr);
  try {
    exe.run({f32({1, 2, 3, 4})});
    ADD_FAILURE() << "ran a collective with no communicator";
  } catch (const CompileError &e) {
    EXPECT_NE(std::string(e.what()).find("process group 'dp' (2 ranks) has no communicator"),
              std::string::npos)
        << e.what();
  }
  auto lone = std::make_shared<SelfCommunicator>();
  EXPECT_THROW(exe.setCommunicator("dp", lone), CompileError); // 1 rank, compiled for 2
  EXPECT_THROW(exe.setCommunicator("tp", lone), CompileError); // no such group
}

TEST(Collectives, TwoExecutorsExchangeThroughACommunicator) {
  ThreadGroup group(2);
  std::vector<std::vector<HostTensor>> out(2);
  std::vector<std::thread> ranks;
  for (int64_t r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      Program p = exchangeProgram(2);
      planProgramMemory(p);
      CpuExecutor exe(p, {}, nullptr);
      exe.setCommunicator("dp", std::make_shared<ThreadGroup::Member>(group, r));
      float base = float(10 * r);
      out[size_t(r)] = exe.run({f32(
          {base + 1, base + 2, base + 3, base + 4})});
    });
  for (std::thread &t : ranks)
    t.join();
  for (int r = 0; r < 2; ++r) {
    // all-reduce: (1..4) + (11..14); all-gather of the reduced values.
    EXPECT_EQ(values(out[size_t(r)][0]), (std::vector<float>{12, 14, 16, 18}));
    EXPECT_EQ(values(out[size_t(r)][1]),
              (std::vector<float>{12, 14, 16, 18, 12, 14, 16, 18}));
  }
}

TEST(Collectives, TheSchedulerStartsEarlyAndWaitsLate) {
  // An all-reduce of s, and an unrelated copy x -> y: the copy runs
  // between the start and the wait.
  Program p;
  p.groups = {{"dp", 2}};
  p.buffers = {buffer("x", {4}, BufferInfo::Role::Argument), buffer("s", {4}), buffer("y", {4})};
  p.arguments = {0};
  p.results = {1, 2};
  Step copyS, copyY;
  copyS.kind = copyY.kind = Step::Kind::Copy;
  copyS.source = copyY.source = "copy";
  copyS.buffers = {0, 1};
  copyY.buffers = {0, 2};
  p.steps = {copyS, collective(Step::Kind::CollectiveStart, CollectiveKind::AllReduce, {1}, 0),
             collective(Step::Kind::CollectiveWait, CollectiveKind::AllReduce, {1}, 0), copyY};
  scheduleSteps(p);
  ASSERT_NO_THROW(p.validate());
  EXPECT_EQ(p.steps[1].kind, Step::Kind::CollectiveStart);
  EXPECT_EQ(p.steps[2].kind, Step::Kind::Copy);
  EXPECT_EQ(p.steps[3].kind, Step::Kind::CollectiveWait);
}
