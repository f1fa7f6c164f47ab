//===- MemoryPlan.cpp -----------------------------------------------------===//
#include "runtime/MemoryPlan.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <sstream>

using namespace tilefuse;

namespace {

using Role = BufferInfo::Role;

uint64_t checkedAdd(uint64_t a, uint64_t b) {
  uint64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum))
    throw CompileError("the program's buffers need more bytes than a 64-bit size can count");
  return sum;
}

std::string mib(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f MiB", double(bytes) / (1 << 20));
  return text;
}

/// Buffers whose bytes must stay theirs for the whole call and between
/// calls: constants (written once, when the executor is made) and carried
/// results (after a call they hold the next call's parameters).
std::vector<bool> pinnedBuffers(const Program &program) {
  std::vector<bool> pinned(program.buffers.size(), false);
  for (size_t b = 0; b < program.buffers.size(); ++b)
    pinned[b] = program.buffers[b].role == Role::Constant;
  for (auto [result, argument] : program.aliases)
    if (result >= 0 && result < int(program.results.size()))
      pinned.at(program.results[result]) = true;
  return pinned;
}

} // namespace

uint64_t tilefuse::arenaBytes(const BufferInfo &buffer, uint64_t alignment) {
  uint64_t bytes = std::max<uint64_t>(1, buffer.byteSize());
  return checkedAdd(bytes, alignment - 1) & ~(alignment - 1);
}

std::vector<LiveRange> tilefuse::liveRanges(const Program &program) {
  const int end = int(program.steps.size());
  std::vector<LiveRange> ranges(program.buffers.size(), LiveRange{end, -1, false});
  for (int i = 0; i < end; ++i)
    for (int b : program.steps[i].buffers) {
      ranges.at(b).first = std::min(ranges[b].first, i);
      ranges[b].last = std::max(ranges[b].last, i);
    }
  for (int r : program.results) {
    ranges.at(r).first = std::min(ranges[r].first, end);
    ranges[r].last = end; // read by the caller after the last step
  }
  std::vector<bool> pinned = pinnedBuffers(program);
  for (size_t b = 0; b < ranges.size(); ++b) {
    if (pinned[b])
      ranges[b] = LiveRange{-1, end, true};
    else if (ranges[b].last < 0) // touched by nothing: give it a moment
      ranges[b] = LiveRange{0, 0, false};
  }
  return ranges;
}

MemoryPlan tilefuse::planMemory(const Program &program, uint64_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)))
    throw CompileError("memory plan: alignment " + std::to_string(alignment) +
                       " is not a power of two");
  MemoryPlan plan;
  plan.alignment = alignment;
  plan.offsets.assign(program.buffers.size(), MemoryPlan::kNotInArena);
  std::vector<LiveRange> ranges = liveRanges(program);
  std::vector<uint64_t> sizes(program.buffers.size(), 0);
  std::vector<int> order;
  for (size_t b = 0; b < program.buffers.size(); ++b)
    if (program.buffers[b].role != Role::Argument) {
      sizes[b] = arenaBytes(program.buffers[b], alignment);
      order.push_back(int(b));
    }
  // Greedy by size: the largest buffers choose first, each taking the
  // smallest gap between the buffers already placed that live at the same
  // time, or the end of them.
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    if (sizes[a] != sizes[b])
      return sizes[a] > sizes[b];
    return ranges[a].first < ranges[b].first;
  });
  std::vector<int> placed;
  std::vector<std::pair<uint64_t, uint64_t>> busy; // [offset, end) of live neighbours
  for (int b : order) {
    busy.clear();
    for (int other : placed)
      if (ranges[b].overlaps(ranges[other]))
        busy.emplace_back(plan.offsets[other], plan.offsets[other] + sizes[other]);
    std::sort(busy.begin(), busy.end());
    uint64_t best = MemoryPlan::kNotInArena, bestGap = UINT64_MAX, cursor = 0;
    for (auto [start, stop] : busy) {
      if (start > cursor && start - cursor >= sizes[b] && start - cursor < bestGap) {
        best = cursor;
        bestGap = start - cursor;
      }
      cursor = std::max(cursor, stop);
    }
    plan.offsets[b] = best != MemoryPlan::kNotInArena ? best : cursor;
    plan.bytes = std::max(plan.bytes, checkedAdd(plan.offsets[b], sizes[b]));
    placed.push_back(b);
  }
  return plan;
}

void tilefuse::checkMemoryPlan(const Program &program, const MemoryPlan &plan,
                               uint64_t required) {
  auto fail = [](const std::string &why) { throw CompileError("invalid memory plan: " + why); };
  const std::vector<BufferInfo> &buffers = program.buffers;
  if (plan.alignment == 0 || (plan.alignment & (plan.alignment - 1)) ||
      plan.alignment % required != 0)
    fail("alignment " + std::to_string(plan.alignment) + " is not a power of two that is a " +
         "multiple of the " + std::to_string(required) + " bytes this executor needs");
  if (plan.offsets.size() != buffers.size())
    fail(std::to_string(plan.offsets.size()) + " offsets for " +
         std::to_string(buffers.size()) + " buffers");
  std::vector<LiveRange> ranges = liveRanges(program);
  std::vector<int> inArena;
  for (size_t b = 0; b < buffers.size(); ++b) {
    uint64_t offset = plan.offsets[b];
    bool argument = buffers[b].role == Role::Argument;
    if (argument != (offset == MemoryPlan::kNotInArena))
      fail("buffer " + buffers[b].name + (argument ? " is an argument but has an offset"
                                                   : " has no offset in the arena"));
    if (argument)
      continue;
    uint64_t end = 0;
    if (offset % plan.alignment != 0 ||
        __builtin_add_overflow(offset, arenaBytes(buffers[b], plan.alignment), &end) ||
        end > plan.bytes)
      fail("buffer " + buffers[b].name + " at offset " + std::to_string(offset) +
           " is misaligned or past the arena's " + std::to_string(plan.bytes) + " bytes");
    inArena.push_back(int(b));
  }
  // Sweep in offset order: each buffer against the ones that start before
  // its end.
  std::sort(inArena.begin(), inArena.end(),
            [&](int a, int b) { return plan.offsets[a] < plan.offsets[b]; });
  for (size_t i = 0; i < inArena.size(); ++i) {
    int a = inArena[i];
    uint64_t aEnd = plan.offsets[a] + arenaBytes(buffers[a], plan.alignment);
    for (size_t j = i + 1; j < inArena.size() && plan.offsets[inArena[j]] < aEnd; ++j) {
      int b = inArena[j];
      if (ranges[a].overlaps(ranges[b]))
        fail("buffers " + buffers[a].name + " (live at steps " + std::to_string(ranges[a].first) +
             ".." + std::to_string(ranges[a].last) + ") and " + buffers[b].name +
             " (steps " + std::to_string(ranges[b].first) + ".." +
             std::to_string(ranges[b].last) + ") share bytes while both are live");
    }
  }
}

uint64_t tilefuse::liveBytesLowerBound(const Program &program, uint64_t alignment) {
  std::vector<LiveRange> ranges = liveRanges(program);
  // Bytes live at each moment -1 .. steps.size(), by a difference array.
  const int moments = int(program.steps.size()) + 2;
  std::vector<int64_t> delta(size_t(moments) + 1, 0);
  for (size_t b = 0; b < program.buffers.size(); ++b) {
    if (program.buffers[b].role == Role::Argument)
      continue;
    int64_t size = int64_t(arenaBytes(program.buffers[b], alignment));
    delta[size_t(ranges[b].first + 1)] += size;
    delta[size_t(ranges[b].last + 2)] -= size;
  }
  int64_t live = 0, most = 0;
  for (int t = 0; t < moments; ++t)
    most = std::max(most, live += delta[size_t(t)]);
  return uint64_t(most);
}

uint64_t tilefuse::unplannedBytes(const Program &program, uint64_t alignment) {
  return separateBuffers(program, alignment).bytes;
}

void tilefuse::scheduleSteps(Program &program) {
  const size_t n = program.steps.size();
  program.plan = MemoryPlan();
  if (n < 3)
    return;
  // Dependences through buffers, in the original order: a read after the
  // write it reads, a write after every earlier read and write of its
  // buffer.
  std::vector<std::vector<int>> successors(n);
  std::vector<int> waitingOn(n, 0);
  std::vector<int> lastWriter(program.buffers.size(), -1);
  std::vector<std::vector<int>> readersSince(program.buffers.size());
  auto edge = [&](int from, int to) {
    if (from >= 0 && from != to) {
      successors[size_t(from)].push_back(to);
      ++waitingOn[size_t(to)];
    }
  };
  for (int i = 0; i < int(n); ++i) {
    const Step &s = program.steps[size_t(i)];
    for (int b : stepReads(s))
      edge(lastWriter[size_t(b)], i);
    for (int b : stepWrites(s)) {
      edge(lastWriter[size_t(b)], i);
      for (int reader : readersSince[size_t(b)])
        edge(reader, i);
      readersSince[size_t(b)].clear();
      lastWriter[size_t(b)] = i;
    }
    for (int b : stepReads(s))
      readersSince[size_t(b)].push_back(i);
  }

  // Bytes each step makes live (buffers it touches first) and frees
  // (buffers it touches last), counting only planned, unpinned buffers.
  std::vector<LiveRange> ranges = liveRanges(program);
  std::vector<int> usesLeft(program.buffers.size(), 0);
  std::vector<bool> planned(program.buffers.size(), false);
  for (size_t b = 0; b < program.buffers.size(); ++b)
    planned[b] = program.buffers[b].role != Role::Argument && !ranges[b].pinned &&
                 ranges[b].last < int(n); // results live to the end anyway
  for (const Step &s : program.steps)
    for (int b : s.buffers)
      ++usesLeft[size_t(b)];
  std::vector<bool> started(program.buffers.size(), false);
  auto balance = [&](const Step &s) {
    int64_t bytes = 0;
    std::vector<int> seen;
    for (int b : s.buffers) {
      if (std::find(seen.begin(), seen.end(), b) != seen.end())
        continue;
      seen.push_back(b);
      int64_t size = int64_t(arenaBytes(program.buffers[size_t(b)], kPlanAlignment));
      if (!started[size_t(b)] && program.buffers[size_t(b)].role != Role::Argument &&
          !ranges[size_t(b)].pinned)
        bytes += size;
      int uses = int(std::count(s.buffers.begin(), s.buffers.end(), b));
      if (planned[size_t(b)] && usesLeft[size_t(b)] == uses)
        bytes -= size;
    }
    return bytes;
  };

  std::vector<int> ready, order;
  for (int i = 0; i < int(n); ++i)
    if (waitingOn[size_t(i)] == 0)
      ready.push_back(i);
  // Collectives overlap the steps between their start and their wait:
  // a ready start runs before anything else, a wait only when nothing
  // else is ready.
  // An all-gather's start allocates its result (a ZeRO step's gathered
  // parameters): it runs when memory allows, like any other step.
  auto urgency = [&](int step) {
    const Step &s = program.steps[size_t(step)];
    if (s.kind == Step::Kind::CollectiveStart)
      return s.collective.kind == CollectiveKind::AllGather ? 1 : 0;
    return s.kind == Step::Kind::CollectiveWait ? 2 : 1;
  };
  while (!ready.empty()) {
    size_t pick = 0;
    int64_t best = INT64_MAX;
    int bestUrgency = 3;
    for (size_t r = 0; r < ready.size(); ++r) {
      int u = urgency(ready[r]);
      if (u > bestUrgency)
        continue;
      int64_t bytes = balance(program.steps[size_t(ready[r])]);
      // Ties go to the original order (the lowest index).
      if (u < bestUrgency || bytes < best || (bytes == best && ready[r] < ready[pick])) {
        best = bytes;
        pick = r;
        bestUrgency = u;
      }
    }
    int step = ready[pick];
    ready.erase(ready.begin() + long(pick));
    order.push_back(step);
    for (int b : program.steps[size_t(step)].buffers) {
      started[size_t(b)] = true;
      --usesLeft[size_t(b)];
    }
    for (int next : successors[size_t(step)])
      if (--waitingOn[size_t(next)] == 0)
        ready.push_back(next);
  }
  if (order.size() != n)
    throw CompileError("memory plan: the program's steps depend on each other in a cycle");

  Program scheduled = program;
  for (size_t i = 0; i < n; ++i)
    scheduled.steps[i] = program.steps[size_t(order[i])];
  // At equal peaks, a program with collectives takes the order that
  // overlaps them.
  bool collectives = std::any_of(program.steps.begin(), program.steps.end(), [](const Step &s) {
    return s.kind == Step::Kind::CollectiveStart;
  });
  uint64_t scheduledBytes = planMemory(scheduled).bytes, originalBytes = planMemory(program).bytes;
  if (scheduledBytes < originalBytes || (collectives && scheduledBytes == originalBytes))
    program.steps = std::move(scheduled.steps);
}

MemoryPlan tilefuse::separateBuffers(const Program &program, uint64_t alignment) {
  MemoryPlan plan;
  plan.alignment = alignment;
  plan.offsets.assign(program.buffers.size(), MemoryPlan::kNotInArena);
  for (size_t b = 0; b < program.buffers.size(); ++b)
    if (program.buffers[b].role != Role::Argument) {
      plan.offsets[b] = plan.bytes;
      plan.bytes = checkedAdd(plan.bytes, arenaBytes(program.buffers[b], alignment));
    }
  return plan;
}

void tilefuse::planProgramMemory(Program &program) {
  const char *mode = std::getenv("TILEFUSE_MEMORY_PLAN");
  if (mode && std::strcmp(mode, "none") == 0) {
    program.plan = separateBuffers(program);
  } else {
    if (mode && *mode)
      throw CompileError("TILEFUSE_MEMORY_PLAN=" + std::string(mode) +
                         " is not a memory plan mode; unset it, or set it to none");
    scheduleSteps(program);
    program.plan = planMemory(program);
  }
  checkMemoryPlan(program, program.plan);
}

bool tilefuse::poisonArenaRequested() {
  const char *v = std::getenv("TILEFUSE_POISON_ARENA");
  return v && *v && std::strcmp(v, "0") != 0;
}

std::vector<std::vector<int>> tilefuse::poisonSchedule(const Program &program) {
  const int n = int(program.steps.size());
  std::vector<std::vector<int>> out(size_t(n) + 1);
  std::vector<LiveRange> ranges = liveRanges(program);
  for (size_t b = 0; b < program.buffers.size(); ++b) {
    if (program.buffers[b].role == Role::Argument || ranges[b].pinned)
      continue;
    out[size_t(n)].push_back(int(b));
    if (ranges[b].last < n)
      out[size_t(ranges[b].last)].push_back(int(b));
  }
  return out;
}

std::vector<std::string> tilefuse::stepPhases(const Program &program) {
  const size_t n = program.steps.size();
  std::vector<std::string> phases(n, "forward");
  if (program.aliases.empty() || program.results.empty())
    return phases;
  std::vector<bool> carried(program.buffers.size(), false);
  for (auto [result, argument] : program.aliases)
    carried.at(program.results.at(result)) = true;
  // The loss's ancestors, walking the steps backward from result 0.
  std::vector<bool> needed(program.buffers.size(), false), forward(n, false);
  needed.at(program.results[0]) = true;
  for (size_t i = n; i-- > 0;) {
    const Step &s = program.steps[i];
    std::vector<int> writes = stepWrites(s);
    if (std::none_of(writes.begin(), writes.end(), [&](int b) { return needed[size_t(b)]; }))
      continue;
    forward[i] = true;
    for (int b : stepReads(s))
      needed[size_t(b)] = true;
  }
  for (size_t i = 0; i < n; ++i) {
    std::vector<int> writes = stepWrites(program.steps[i]);
    if (forward[i])
      continue;
    bool optimizer =
        std::any_of(writes.begin(), writes.end(), [&](int b) { return carried[size_t(b)]; });
    phases[i] = optimizer ? "optimizer" : "backward";
  }
  return phases;
}

PlanReport tilefuse::reportMemoryPlan(const Program &program) {
  PlanReport report;
  report.plan = program.plan.empty() ? planMemory(program) : program.plan;
  const MemoryPlan &plan = report.plan;
  std::vector<LiveRange> ranges = liveRanges(program);
  report.stepPhases = stepPhases(program);
  report.lowerBound = liveBytesLowerBound(program, plan.alignment);
  report.unplanned = unplannedBytes(program, plan.alignment);
  // The step that writes each buffer first.
  std::vector<int> writer(program.buffers.size(), -1), writers(program.buffers.size(), 0);
  for (size_t i = program.steps.size(); i-- > 0;)
    for (int b : stepWrites(program.steps[i])) {
      writer[size_t(b)] = int(i);
      ++writers[size_t(b)];
    }
  for (size_t b = 0; b < program.buffers.size(); ++b) {
    const BufferInfo &info = program.buffers[b];
    if (info.role == Role::Argument) {
      report.argumentBytes += info.byteSize();
      continue;
    }
    PlanReport::Buffer row;
    row.index = int(b);
    row.offset = plan.offsets[b];
    row.arenaBytes = arenaBytes(info, plan.alignment);
    row.live = ranges[b];
    row.writers = writers[b];
    row.phase = "constant";
    if (int w = writer[b]; w >= 0 && info.role != Role::Constant) {
      const Step &s = program.steps[size_t(w)];
      row.phase = report.stepPhases[size_t(w)];
      row.op = s.source;
      row.line = s.sourceLines.empty() ? "" : s.sourceLines.front();
    }
    report.buffers.push_back(std::move(row));
  }
  std::stable_sort(report.buffers.begin(), report.buffers.end(),
                   [](const PlanReport::Buffer &a, const PlanReport::Buffer &b) {
                     return a.offset < b.offset;
                   });
  return report;
}

std::string tilefuse::formatMemoryPlan(const Program &program) {
  PlanReport report = reportMemoryPlan(program);
  uint64_t peak = report.plan.bytes, bound = report.lowerBound;
  std::ostringstream os;
  char ratio[32];
  std::snprintf(ratio, sizeof ratio, "%.3f", bound ? double(peak) / double(bound) : 1.0);
  os << "memory plan: " << program.steps.size() << " steps\n"
     << "  peak (arena)  " << peak << " bytes (" << mib(peak) << ")\n"
     << "  lower bound   " << bound << " bytes (" << mib(bound) << "), peak / bound " << ratio
     << "\n"
     << "  unplanned     " << report.unplanned << " bytes (" << mib(report.unplanned)
     << "), every buffer its own range\n"
     << "  arguments     " << report.argumentBytes << " bytes (" << mib(report.argumentBytes)
     << "), outside the arena\n"
     << "  buffer | dtype[shape] | bytes | offset | live | phase | written by\n";
  for (const PlanReport::Buffer &row : report.buffers) {
    const BufferInfo &info = program.buffers[size_t(row.index)];
    const LiveRange &r = row.live;
    os << "  " << info.name << " | " << dtypeName(info.dtype) << shapeToString(info.shape)
       << " | " << info.byteSize() << " | " << row.offset << " | ";
    if (r.pinned)
      os << "pinned";
    else
      os << r.first << ".." << (r.last == int(program.steps.size()) ? "end" : std::to_string(r.last));
    if (row.op.empty()) {
      os << " | - | " << (info.role == Role::Constant ? "constant" : "nothing") << "\n";
      continue;
    }
    os << " | " << row.phase << " | " << row.op;
    if (!row.line.empty())
      os << " (" << row.line << ")";
    if (row.writers > 1)
      os << " (+" << row.writers - 1 << " in place)";
    os << "\n";
  }
  return os.str();
}
