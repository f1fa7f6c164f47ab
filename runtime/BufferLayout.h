//===- BufferLayout.h - where a Program's buffers live --------------*- C++ -*-===//
//
// Both executors allocate one arena and place every buffer in it by this
// layout, so the memory planner has one place to change: today each
// buffer gets a range of its own, in buffer order; a plan by liveness will
// give buffers whose live ranges never meet the same bytes.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_RUNTIME_BUFFERLAYOUT_H
#define TILEFUSE_RUNTIME_BUFFERLAYOUT_H

#include "runtime/Program.h"

#include <cstdint>
#include <vector>

namespace tilefuse {

struct BufferLayout {
  static constexpr uint64_t kNotInArena = UINT64_MAX;
  /// Byte offset of each buffer in the arena, or kNotInArena.
  std::vector<uint64_t> offsets;
  /// The arena's size (a multiple of the alignment; 0 when empty).
  uint64_t bytes = 0;
};

/// The arena layout of `program`'s buffers: every offset a multiple of
/// `alignment` (a power of two), every buffer at least one byte.
/// Arguments get a range only `withArguments` (the CUDA executor copies
/// host arguments there; the CPU executor reads them in place). Throws
/// CompileError when the arena would not fit in 64 bits.
BufferLayout layoutBuffers(const Program &program, uint64_t alignment, bool withArguments);

} // namespace tilefuse

#endif // TILEFUSE_RUNTIME_BUFFERLAYOUT_H
