//===- MemoryPlan.h - one arena by liveness --------------------------*- C++ -*-===//
//
// The memory planner: the order of a Program's steps (scheduleSteps), each
// buffer's live range over that order (liveRanges), and offsets in one
// arena where buffers alive at the same time never share a byte
// (planMemory: greedy by size, as TensorFlow Lite's offset planner).
// checkMemoryPlan proves a plan, whoever made it, before an executor uses
// it. MLIR-free: the compiler plans, executors and loaders check.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_RUNTIME_MEMORYPLAN_H
#define TILEFUSE_RUNTIME_MEMORYPLAN_H

#include "runtime/Program.h"

#include <cstdint>
#include <string>
#include <vector>

namespace tilefuse {

/// The alignment the compiler plans at: a cache line and more (the CPU's
/// aligned vector loads and streaming stores need 64 bytes), and what
/// cuBLASLt's fast paths want on the GPU (256).
constexpr uint64_t kPlanAlignment = 256;

/// When a buffer holds a value, in step indices (inclusive). A buffer is
/// live from the first step that touches it to the last; results stay live
/// after the last step (index steps.size(): the caller reads them), and
/// `pinned` ones (constants, a training step's carried results, whose
/// bytes hold the next call's parameters) for the whole call and between
/// calls.
struct LiveRange {
  int first = 0;
  int last = 0;
  bool pinned = false;
  bool overlaps(const LiveRange &o) const { return first <= o.last && o.first <= last; }
};

/// The live range of every buffer of `program` in its step order.
/// Arguments get theirs too (first use to last), though they are not in
/// the arena.
std::vector<LiveRange> liveRanges(const Program &program);

/// Bytes a buffer occupies in an arena of `alignment`: its size rounded up,
/// at least one alignment unit.
uint64_t arenaBytes(const BufferInfo &buffer, uint64_t alignment);

/// The arena layout of `program`'s non-argument buffers by live range.
/// Throws CompileError when the arena would not fit in 64 bits.
MemoryPlan planMemory(const Program &program, uint64_t alignment = kPlanAlignment);

/// Checks `plan` against `program`'s live ranges: one offset per buffer,
/// arguments outside the arena, offsets multiples of the plan's alignment
/// and of `required` (the executor's), every buffer inside the arena, and
/// no two buffers live at the same step sharing a byte. Throws
/// CompileError naming the first pair or buffer at fault.
void checkMemoryPlan(const Program &program, const MemoryPlan &plan, uint64_t required = 1);

/// The most bytes (each buffer rounded as in arenaBytes) that are live at
/// any one step: no arena of this program in this step order is smaller.
uint64_t liveBytesLowerBound(const Program &program, uint64_t alignment = kPlanAlignment);

/// The arena without planning: every non-argument buffer a range of its own.
uint64_t unplannedBytes(const Program &program, uint64_t alignment = kPlanAlignment);

/// Reorders `program`'s steps to lower the planned peak: a list scheduler
/// that keeps every step after the steps whose buffers it reads or
/// overwrites and, among the steps ready to run, runs the one that frees
/// the most bytes (allocates the fewest) first; a collective's start runs
/// as soon as it is ready, its wait only when nothing else is (so the
/// steps between overlap the communication). Keeps the original order when
/// that plans smaller (at equal peaks, a program with collectives takes
/// the overlapping order). Clears any plan the program had.
void scheduleSteps(Program &program);

/// Every non-argument buffer a range of its own, in buffer order: the
/// layout without planning (what unplannedBytes counts), for comparisons.
MemoryPlan separateBuffers(const Program &program, uint64_t alignment = kPlanAlignment);

/// scheduleSteps, then planMemory into program.plan: what the compiler
/// does to every Program it builds. With TILEFUSE_MEMORY_PLAN=none in the
/// environment, the steps keep their order and every buffer gets its own
/// range (separateBuffers): the unplanned baseline benchmarks compare with.
void planProgramMemory(Program &program);

/// Poisoning: when TILEFUSE_POISON_ARENA is set (and not "0"), executors
/// fill the bytes of every arena buffer that is not live with 0xFF (a NaN
/// in every float dtype, -1 in integers) before the first step and after
/// the last step that uses it, so a wrong live range shows as a wrong
/// answer instead of a lucky one.
bool poisonArenaRequested();
/// The unpinned arena buffers whose live range ends at each step (the
/// buffers to poison after it); the last entry lists every unpinned arena
/// buffer (to poison before the first step).
std::vector<std::vector<int>> poisonSchedule(const Program &program);

/// What part of a training step each step belongs to, for people reading
/// a plan: "forward" (what the first result, the loss, depends on),
/// "optimizer" (steps that write a parameter's or state's next value) and
/// "backward" (the rest). Every step of a program without carried results
/// is "forward".
std::vector<std::string> stepPhases(const Program &program);

/// A program's plan as people read it (formatMemoryPlan, memory_plan() in
/// Python): the totals, then every arena buffer by offset.
struct PlanReport {
  struct Buffer {
    int index = 0; ///< into Program::buffers
    uint64_t offset = 0, arenaBytes = 0;
    LiveRange live;
    /// The step that writes it first: its phase, source op and first
    /// source line; phase "constant" and op "" for constants and buffers
    /// nothing writes.
    std::string phase, op, line;
    /// Steps that write it: more than one where kernels wrote their
    /// results over it in place (ProgramBuilder), or a carried update.
    int writers = 0;
  };
  MemoryPlan plan; ///< the program's, or planMemory's where it has none
  uint64_t lowerBound = 0, unplanned = 0, argumentBytes = 0;
  std::vector<std::string> stepPhases;
  std::vector<Buffer> buffers;
};
PlanReport reportMemoryPlan(const Program &program);

/// The plan as a table for people: peak, lower bound, their ratio, the
/// unplanned size, then per arena buffer its size, offset, live range,
/// phase and the step (and source line) that writes it.
std::string formatMemoryPlan(const Program &program);

} // namespace tilefuse

#endif // TILEFUSE_RUNTIME_MEMORYPLAN_H
