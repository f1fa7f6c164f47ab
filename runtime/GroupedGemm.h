//===- GroupedGemm.h - the row groups of a grouped product ---------*- C++ -*-===//
//
// graph.grouped_matmul multiplies rows sorted by group by their group's
// matrix; the groups' sizes are data (offsets computed in the same step).
// Row r belongs to group g = the number of offsets <= r, when g < G: with
// nondecreasing offsets (cumulative counts) group g holds rows
// [offsets[g-1], offsets[g]). Whatever the offsets, each group's rows are
// contiguous: [s[g-1], s[g]) over the offsets sorted and clamped to
// [0, rows]. (PyTorch's and transformers' grouped GEMMs require
// nondecreasing offsets and differ from each other on others.) The interpreter, the CPU executor and the CUDA target's
// expansion into dense ops all follow this one rule.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_RUNTIME_GROUPEDGEMM_H
#define TILEFUSE_RUNTIME_GROUPEDGEMM_H

#include "runtime/HostTensor.h"

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace tilefuse {

/// [begin, end) rows of each of `groups` groups; `offsets` holds i32 or
/// i64 values (`type`).
inline std::vector<std::pair<int64_t, int64_t>>
groupRowRanges(const void *offsets, DType type, int64_t groups, int64_t rows) {
  std::vector<int64_t> ends(size_t(std::max<int64_t>(0, groups)));
  for (int64_t g = 0; g < groups; ++g) {
    int64_t v = type == DType::I32 ? int64_t(static_cast<const int32_t *>(offsets)[g])
                                   : static_cast<const int64_t *>(offsets)[g];
    ends[size_t(g)] = std::clamp<int64_t>(v, 0, rows);
  }
  std::sort(ends.begin(), ends.end());
  std::vector<std::pair<int64_t, int64_t>> ranges;
  int64_t begin = 0;
  for (int64_t end : ends) {
    ranges.emplace_back(begin, end);
    begin = end;
  }
  return ranges;
}

} // namespace tilefuse

#endif // TILEFUSE_RUNTIME_GROUPEDGEMM_H
