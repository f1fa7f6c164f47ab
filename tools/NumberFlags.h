//===- NumberFlags.h - numbers on the tools' command lines ------*- C++ -*-===//
//
// `--repeat=abc` must be refused, not read as 0 (atoi) and run silently: each
// tool parses a flag's number with these and exits with the reason.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_TOOLS_NUMBERFLAGS_H
#define TILEFUSE_TOOLS_NUMBERFLAGS_H

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>

namespace tilefuse {

/// The whole of `text` as an integer in [min, max], or nothing.
inline std::optional<long> parseIntegerFlag(const std::string &text, long min, long max) {
  if (text.empty())
    return std::nullopt;
  char *end = nullptr;
  errno = 0;
  long v = std::strtol(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || v < min || v > max)
    return std::nullopt;
  return v;
}

/// The whole of `text` as a finite number >= min, or nothing.
inline std::optional<double> parseNumberFlag(const std::string &text, double min) {
  if (text.empty())
    return std::nullopt;
  char *end = nullptr;
  errno = 0;
  double v = std::strtod(text.c_str(), &end);
  if (errno != 0 || *end != '\0' || !std::isfinite(v) || v < min)
    return std::nullopt;
  return v;
}

} // namespace tilefuse

#endif // TILEFUSE_TOOLS_NUMBERFLAGS_H
