//===- OptimizerConfig.h - which optimizer a train step applies --*- C++ -*-===//
//
// Plain data, free of MLIR, so the frontend's public headers can carry it.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_PASSES_OPTIMIZERCONFIG_H
#define TILEFUSE_PASSES_OPTIMIZERCONFIG_H

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>
#include <algorithm>

namespace tilefuse {

/// Dynamic loss scaling with torch.amp.GradScaler's semantics, inside the
/// step: the backward pass is seeded with the scale, gradients are
/// unscaled, and a step whose gradients are not all finite changes nothing
/// but the scale (times `backoffFactor`); after `growthInterval` finite
/// steps in a row the scale grows by `growthFactor`. The scale itself is
/// state, not a field here: its initial value is the caller's.
struct LossScaleConfig {
  bool dynamic = false;
  double growthFactor = 2.0;
  double backoffFactor = 0.5;
  int64_t growthInterval = 2000;
};

/// How the ranks of a data-parallel group share a training step
/// (compile_train_step's parallel=). "ddp": every rank holds the whole
/// model and computes gradients of its part of the batch; the gradients are
/// averaged over the group's ranks (all-reduced in buckets of up to
/// `bucketBytes`, each started as soon as its gradients exist) before the
/// update, so every rank applies the same update. "zero1"/"zero2": each
/// rank keeps one shard of the parameters and of their optimizer state
/// (passes/ShardParameters.h), all-gathers the parameters at the start of
/// the step, gets its shard of the averaged gradients by reduce-scatter and
/// updates its shards; the two are one program (a full gradient lives only
/// until its shard is reduced, as zero2 asks, in both). "zero3": the same,
/// with the parameters gathered again in the backward pass instead of kept
/// from the forward pass. "" : one process.
struct ParallelConfig {
  /// "", "ddp", "zero1", "zero2" or "zero3".
  std::string mode;
  /// ZeRO: every rank keeps one shard of the parameters and their state.
  bool sharded() const { return mode.rfind("zero", 0) == 0; }
  std::string group = "dp";
  int64_t groupSize = 1;
  int64_t bucketBytes = int64_t(25) << 20; ///< PyTorch DDP's default bucket_cap_mb
};

/// PyTorch semantics (torch.optim.SGD / Adam / AdamW / RMSprop). The learning rate and
/// the step count are operands of the train step, not fields here, so a
/// schedule never recompiles.
struct OptimizerConfig {
  enum class Kind { SGD, Adam, AdamW, RMSprop };
  Kind kind = Kind::AdamW;
  double momentum = 0.0;    ///< SGD, RMSprop
  bool nesterov = false;    ///< SGD
  double beta1 = 0.9;       ///< Adam, AdamW
  double beta2 = 0.999;     ///< Adam, AdamW
  double eps = 1e-8;        ///< Adam, AdamW, RMSprop
  double alpha = 0.99;      ///< RMSprop: decay of the squared-gradient average
  bool centered = false;    ///< RMSprop: subtract the squared mean gradient
  double weightDecay = 0.0; ///< L2 for SGD/Adam/RMSprop, decoupled for AdamW
  double clipNorm = 0.0;    ///< > 0: clip gradients to this global norm
  LossScaleConfig lossScale;
  ParallelConfig parallel;
  /// Parameter groups (torch.optim param_groups): parameter i belongs to
  /// group `paramGroup[i]` and decays by `paramWeightDecay[i]`; each group
  /// has its own learning-rate operand. Empty: one group, `weightDecay`.
  std::vector<unsigned> paramGroup;
  std::vector<double> paramWeightDecay;

  unsigned groupCount = 0; ///< groups, some possibly empty (0: as many as used)

  unsigned numGroups() const {
    unsigned n = std::max(1u, groupCount);
    for (unsigned g : paramGroup)
      n = std::max(n, g + 1);
    return n;
  }
  double weightDecayOf(unsigned param) const {
    return param < paramWeightDecay.size() ? paramWeightDecay[param] : weightDecay;
  }
  unsigned groupOf(unsigned param) const {
    return param < paramGroup.size() ? paramGroup[param] : 0;
  }

  /// Step-wide state tensors after the per-parameter ones: with dynamic
  /// loss scaling the scale, the finite-step run length and the count of
  /// applied updates (Adam's bias correction counts those, not calls).
  unsigned globalState() const { return lossScale.dynamic ? 3 : 0; }

  /// Empty if every field is in range, else what is wrong.
  std::string validate() const {
    if (!(momentum >= 0) || !(weightDecay >= 0) || !(clipNorm >= 0) || !(eps >= 0))
      return "momentum, weight_decay, clip_norm and eps must be >= 0";
    if (!(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1))
      return "betas must be in [0, 1)";
    if (!(alpha >= 0))
      return "alpha must be >= 0";
    for (double wd : paramWeightDecay)
      if (!(wd >= 0))
        return "every parameter group's weight_decay must be >= 0";
    if (!parallel.mode.empty() && parallel.mode != "ddp" && parallel.mode != "zero1" &&
        parallel.mode != "zero2" && parallel.mode != "zero3")
      return "parallel must be \"ddp\", \"zero1\", \"zero2\" or \"zero3\" (or none), got \"" +
             parallel.mode + "\"";
    if (parallel.groupSize < 1 || parallel.group.empty() || parallel.bucketBytes < 1)
      return "a data-parallel step needs a group name, group_size >= 1 and bucket_bytes >= 1";
    if (nesterov && (kind != Kind::SGD || momentum == 0))
      return "nesterov needs SGD with momentum > 0";
    if (lossScale.dynamic &&
        (!(lossScale.growthFactor > 1) || !std::isfinite(lossScale.growthFactor) ||
         !(lossScale.backoffFactor > 0 && lossScale.backoffFactor < 1) ||
         lossScale.growthInterval < 1))
      return "loss scaling needs growth_factor > 1, 0 < backoff_factor < 1 and "
             "growth_interval >= 1";
    return "";
  }

  /// Optimizer-state tensors per parameter (momentum buffer; m and v;
  /// RMSprop's square average, then its momentum buffer and gradient
  /// average when used).
  unsigned statePerParam() const {
    if (kind == Kind::SGD)
      return momentum != 0.0 ? 1 : 0;
    if (kind == Kind::RMSprop)
      return 1 + (momentum != 0.0 ? 1 : 0) + (centered ? 1 : 0);
    return 2;
  }
  /// Parses "sgd", "adam", "adamw", "rmsprop"; false for anything else.
  static bool parseKind(const std::string &name, Kind &kind);

  /// A config from the flat list every front end passes (the pass options,
  /// Python); `error` is set and false returned for an unknown kind.
  static bool fromOptions(const std::string &kind, double momentum,
                          bool nesterov, double beta1, double beta2, double eps,
                          double weightDecay, double clipNorm,
                          OptimizerConfig &out, std::string &error) {
    if (!parseKind(kind, out.kind)) {
      error = "unknown optimizer '" + kind + "'; expected sgd, adam, adamw or rmsprop";
      return false;
    }
    out.momentum = momentum;
    out.nesterov = nesterov;
    out.beta1 = beta1;
    out.beta2 = beta2;
    out.eps = eps;
    out.weightDecay = weightDecay;
    out.clipNorm = clipNorm;
    error = out.validate();
    return error.empty();
  }
};

inline bool OptimizerConfig::parseKind(const std::string &name, Kind &kind) {
  if (name == "sgd") kind = Kind::SGD;
  else if (name == "adam") kind = Kind::Adam;
  else if (name == "adamw") kind = Kind::AdamW;
  else if (name == "rmsprop") kind = Kind::RMSprop;
  else return false;
  return true;
}

} // namespace tilefuse

#endif // TILEFUSE_PASSES_OPTIMIZERCONFIG_H
