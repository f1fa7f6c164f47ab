//===- SortOrder.h - the order graph.sort sorts by ----------------*- C++ -*-===//
//
// PyTorch's: NaN above every number (last ascending, first descending),
// -0.0 equal to 0.0 (the comparisons make it so); equal elements keep their
// order (the callers sort stably). The interpreter and the CPU's sort step
// share it.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_RUNTIME_SORTORDER_H
#define TILEFUSE_RUNTIME_SORTORDER_H

#include <cmath>
#include <utility>

namespace tilefuse {

/// Whether `a` comes before `b` in a sort (ascending unless `descending`).
inline bool sortsBefore(double a, double b, bool descending) {
  if (descending)
    std::swap(a, b);
  return a < b || (std::isnan(b) && !std::isnan(a));
}

} // namespace tilefuse

#endif // TILEFUSE_RUNTIME_SORTORDER_H
