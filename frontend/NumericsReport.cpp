//===- NumericsReport.cpp - every kernel of a graph against f32 -----------===//
//
// The numerics contract of mixed precision (Graph::numericsReport): the
// real kernels, each fed the f32 shadow's values for its inputs, against
// the shadow's own outputs. See frontend/NumericsProbe.cpp for the two
// programs and Graph.h for the bound.
//
//===----------------------------------------------------------------------===//
#include "frontend/Executable.h"
#include "frontend/Graph.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>

using namespace tilefuse;

namespace {

double unitRoundoff(const std::string &lowest) {
  if (lowest == "bf16")
    return std::ldexp(1.0, -8);
  if (lowest == "f16")
    return std::ldexp(1.0, -11);
  return std::ldexp(1.0, -24);
}

HostTensor converted(const HostTensor &t, DType to) {
  if (t.dtype == to)
    return t;
  HostTensor out(to, t.shape);
  for (int64_t i = 0, n = t.size(); i < n; ++i)
    out.setDouble(i, t.getDouble(i));
  return out;
}

/// max|out - ref| / max|ref|; infinite where the two disagree on which
/// elements are finite, or where ref is all zero and out is not.
double relativeError(const HostTensor &out, const HostTensor &ref) {
  double diff = 0, scale = 0;
  for (int64_t i = 0, n = ref.size(); i < n; ++i) {
    double o = out.getDouble(i), r = ref.getDouble(i);
    if (std::isfinite(o) != std::isfinite(r))
      return std::numeric_limits<double>::infinity();
    if (!std::isfinite(r)) {
      if (!(o == r || (std::isnan(o) && std::isnan(r))))
        return std::numeric_limits<double>::infinity();
      continue;
    }
    diff = std::max(diff, std::fabs(o - r));
    scale = std::max(scale, std::fabs(r));
  }
  if (scale == 0)
    return diff == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  return diff / scale;
}

} // namespace

double tilefuse::numericsBound(const std::string &lowest, int64_t reductionLength) {
  return unitRoundoff(lowest) * (4.0 + std::sqrt(double(std::max<int64_t>(1, reductionLength))));
}

std::vector<NumericsRow> Graph::numericsReport(const std::vector<HostTensor> &args,
                                               const std::string &device) const {
  NumericsProbeLayout shadowLayout, layout;
  std::shared_ptr<Executable> shadow = compileNumericsProbe(device, true, shadowLayout);
  std::shared_ptr<Executable> isolated = compileNumericsProbe(device, false, layout);
  if (shadowLayout.values.size() != layout.values.size())
    throw CompileError("numerics report: the f32 shadow has " +
                       std::to_string(shadowLayout.values.size()) +
                       " kernel outputs, the program " + std::to_string(layout.values.size()));
  std::vector<HostTensor> wide;
  for (const HostTensor &a : args)
    wide.push_back(a.dtype == DType::F16 || a.dtype == DType::BF16 ? converted(a, DType::F32) : a);
  std::vector<HostTensor> ref = shadow->run(wide);
  ref.erase(ref.begin(), ref.begin() + std::ptrdiff_t(shadowLayout.numResults));

  std::vector<HostTensor> inputs = args;
  for (int j : layout.cutArguments)
    inputs.push_back(converted(ref.at(j), parseDType(layout.values[j].dtype)));
  std::vector<HostTensor> got = isolated->run(inputs);
  got.erase(got.begin(), got.begin() + std::ptrdiff_t(layout.numResults));

  std::vector<NumericsRow> rows;
  for (size_t j = 0; j < layout.values.size(); ++j) {
    NumericsRow row;
    static_cast<ProbedValue &>(row) = layout.values[j];
    row.error = relativeError(got.at(j), ref.at(j));
    row.bound = numericsBound(row.lowest, row.reductionLength);
    row.over = !(row.error <= row.bound);
    rows.push_back(std::move(row));
  }
  return rows;
}

std::string tilefuse::formatNumericsReport(const std::vector<NumericsRow> &rows) {
  std::string text;
  char line[512];
  std::snprintf(line, sizeof line, "%-16s %-5s %-4s %7s %9s %9s  %s\n", "kernel.output", "dtype",
                "low", "K", "error", "bound", "ops");
  text += line;
  std::set<std::string> over;
  for (const NumericsRow &r : rows) {
    std::string ops;
    for (const std::string &op : r.ops)
      ops += (ops.empty() ? "" : ",") + op;
    if (ops.size() > 48)
      ops = ops.substr(0, 45) + "...";
    std::string name = r.kernel + "." + std::to_string(r.output);
    std::snprintf(line, sizeof line, "%-16s %-5s %-4s %7lld %9.2e %9.2e  %s%s%s\n", name.c_str(),
                  r.dtype.c_str(), r.lowest.empty() ? "-" : r.lowest.c_str(),
                  static_cast<long long>(r.reductionLength), r.error, r.bound, ops.c_str(),
                  r.over ? "  OVER " : "", r.over ? r.location.c_str() : "");
    text += line;
    if (r.over)
      over.insert(r.kernel);
  }
  text += std::to_string(rows.size()) + " kernel outputs, " + std::to_string(over.size()) +
          " kernels over their bound";
  for (auto it = over.begin(); it != over.end(); ++it)
    text += (it == over.begin() ? ": " : ", ") + *it;
  return text + "\n";
}
