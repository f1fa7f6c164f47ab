//===- OptimizerConfig.h - which optimizer a train step applies --*- C++ -*-===//
//
// Plain data, free of MLIR, so the frontend's public headers can carry it.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_PASSES_OPTIMIZERCONFIG_H
#define TILEFUSE_PASSES_OPTIMIZERCONFIG_H

#include <string>

namespace tilefuse {

/// PyTorch semantics (torch.optim.SGD / Adam / AdamW). The learning rate and
/// the step count are operands of the train step, not fields here, so a
/// schedule never recompiles.
struct OptimizerConfig {
  enum class Kind { SGD, Adam, AdamW };
  Kind kind = Kind::AdamW;
  double momentum = 0.0;    ///< SGD
  bool nesterov = false;    ///< SGD
  double beta1 = 0.9;       ///< Adam, AdamW
  double beta2 = 0.999;     ///< Adam, AdamW
  double eps = 1e-8;        ///< Adam, AdamW
  double weightDecay = 0.0; ///< L2 for SGD/Adam, decoupled for AdamW
  double clipNorm = 0.0;    ///< > 0: clip gradients to this global norm

  /// Optimizer-state tensors per parameter (momentum buffer; m and v).
  unsigned statePerParam() const {
    if (kind == Kind::SGD)
      return momentum != 0.0 ? 1 : 0;
    return 2;
  }
  /// Parses "sgd", "adam", "adamw"; returns false for anything else.
  static bool parseKind(const std::string &name, Kind &kind);

  /// A config from the flat list every front end passes (the pass options,
  /// Python); `error` is set and false returned for an unknown kind.
  static bool fromOptions(const std::string &kind, double momentum,
                          bool nesterov, double beta1, double beta2, double eps,
                          double weightDecay, double clipNorm,
                          OptimizerConfig &out, std::string &error) {
    if (!parseKind(kind, out.kind)) {
      error = "unknown optimizer '" + kind + "'; expected sgd, adam or adamw";
      return false;
    }
    out.momentum = momentum;
    out.nesterov = nesterov;
    out.beta1 = beta1;
    out.beta2 = beta2;
    out.eps = eps;
    out.weightDecay = weightDecay;
    out.clipNorm = clipNorm;
    return true;
  }
};

inline bool OptimizerConfig::parseKind(const std::string &name, Kind &kind) {
  if (name == "sgd") kind = Kind::SGD;
  else if (name == "adam") kind = Kind::Adam;
  else if (name == "adamw") kind = Kind::AdamW;
  else return false;
  return true;
}

} // namespace tilefuse

#endif // TILEFUSE_PASSES_OPTIMIZERCONFIG_H
