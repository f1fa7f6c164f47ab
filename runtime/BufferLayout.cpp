//===- BufferLayout.cpp ---------------------------------------------------===//
#include "runtime/BufferLayout.h"

#include <algorithm>

using namespace tilefuse;

BufferLayout tilefuse::layoutBuffers(const Program &program, uint64_t alignment,
                                     bool withArguments) {
  BufferLayout layout;
  layout.offsets.assign(program.buffers.size(), BufferLayout::kNotInArena);
  // `v` rounded up to the alignment; false when that overflows.
  auto alignUp = [&](uint64_t v, uint64_t &out) {
    if (__builtin_add_overflow(v, alignment - 1, &out))
      return false;
    out &= ~(alignment - 1);
    return true;
  };
  uint64_t end = 0;
  for (size_t b = 0; b < program.buffers.size(); ++b) {
    const BufferInfo &info = program.buffers[b];
    if (info.role == BufferInfo::Role::Argument && !withArguments)
      continue;
    uint64_t next = 0;
    if (!alignUp(end, layout.offsets[b]) ||
        __builtin_add_overflow(layout.offsets[b], std::max<uint64_t>(1, info.byteSize()), &next))
      throw CompileError("the program's buffers need more bytes than a 64-bit size can count");
    end = next;
  }
  if (!alignUp(end, layout.bytes))
    throw CompileError("the program's buffers need more bytes than a 64-bit size can count");
  return layout;
}
