//===- Graph.h - a traced or parsed graph-dialect program --------*- C++ -*-===//
//
// The handle users hold: an MLIR module with one entry function. The header
// is free of MLIR so the Python bindings compile quickly; the module lives
// behind a pointer to implementation.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_FRONTEND_GRAPH_H
#define TILEFUSE_FRONTEND_GRAPH_H

#include "runtime/HostTensor.h"

#include <memory>
#include <string>
#include <vector>

namespace tilefuse {

/// dtype + shape of one function argument or result.
struct TensorSignature {
  DType dtype;
  Shape shape;
  std::string str() const { return std::string(dtypeName(dtype)) + shapeToString(shape); }
};

class Graph {
public:
  struct Impl;
  explicit Graph(std::unique_ptr<Impl> impl);
  ~Graph();

  /// Parses and verifies graph-dialect text. The entry function is the one
  /// named `entry`, or the only function. Throws CompileError with the
  /// parser's diagnostics (line and column).
  static std::shared_ptr<Graph> parse(const std::string &text,
                                      const std::string &entry = "");

  /// Textual IR of the whole module.
  std::string mlir() const;
  /// One line per op kind with its count, plus the signature.
  std::string summary() const;
  const std::string &entryName() const;
  std::vector<TensorSignature> inputs() const;
  std::vector<TensorSignature> outputs() const;

  /// Runs the reference interpreter (composites are decomposed first).
  std::vector<HostTensor> interpret(const std::vector<HostTensor> &args) const;

  Impl &impl() { return *impl_; }
  const Impl &impl() const { return *impl_; }

private:
  std::unique_ptr<Impl> impl_;
};

} // namespace tilefuse

#endif // TILEFUSE_FRONTEND_GRAPH_H
