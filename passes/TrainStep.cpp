//===- TrainStep.cpp - forward + backward + optimizer as one function -----===//
//
// The gradient function of the loss is built by autodiff, then the
// optimizer's elementwise update is appended per parameter. Hyperparameters
// that users schedule (learning rate, step count) are operands; the rest are
// constants. Updated parameters and state are tagged with the argument they
// replace (kAliasAttrName) so they can be updated in place.
//
//===----------------------------------------------------------------------===//
#include "passes/TrainStep.h"

#include "ir/graph/GraphEmitter.h"
#include "passes/Autodiff.h"
#include "passes/DataParallel.h"
#include "passes/ShardParameters.h"
#include "passes/Passes.h"

#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace tilefuse;
using namespace tilefuse::graph;

namespace {

/// A 0-d value summed over the ranks of `p`'s group (an all-reduce of one
/// element): what every rank must agree on when each holds one shard.
Value sumOverRanks(GraphEmitter &e, Value scalar, const ParallelConfig &p) {
  Value sum = e.wait(e.allReduceStart(e.reshape(scalar, {1}), p.group, p.groupSize));
  return e.reshape(sum, {});
}

/// Emits the optimizer update of every parameter.
class OptimizerEmitter {
public:
  OptimizerEmitter(GraphEmitter &e, const OptimizerConfig &config, Value step)
      : e(e), c(config), step(step) {}

  /// Global-norm clipping: every gradient times min(1, c / (norm + 1e-6)).
  /// Sharded gradients: the squares summed over every rank's shards.
  void clip(MutableArrayRef<Value> grads) {
    Value total;
    for (Value g : grads) {
      Value sq = e.cast(e.sumAll(e.mul(g, g)), f64());
      total = total ? e.add(total, sq) : sq;
    }
    if (c.parallel.sharded())
      total = sumOverRanks(e, total, c.parallel);
    Value norm = e.sqrt(total);
    Value scale = e.minimum(e.fullLike(norm, 1.0),
                            e.div(e.fullLike(norm, c.clipNorm),
                                  e.addScalar(norm, 1e-6)));
    for (Value &g : grads)
      g = e.mul(g, scalarFor(scale, g));
  }

  /// New parameter; `state` holds this parameter's slots, updated in place;
  /// `lr` and `weightDecay` are its group's.
  Value update(Value p, Value g, MutableArrayRef<Value> state, Value lr,
               double weightDecay) {
    Value lrP = scalarFor(lr, p);
    switch (c.kind) {
    case OptimizerConfig::Kind::SGD: {
      if (weightDecay != 0)
        g = e.add(g, e.mulScalar(p, weightDecay));
      if (c.momentum != 0) {
        state[0] = e.add(e.mulScalar(state[0], c.momentum), g);
        g = c.nesterov ? e.add(g, e.mulScalar(state[0], c.momentum)) : state[0];
      }
      return e.sub(p, e.mul(lrP, g));
    }
    case OptimizerConfig::Kind::Adam:
    case OptimizerConfig::Kind::AdamW: {
      bool decoupled = c.kind == OptimizerConfig::Kind::AdamW;
      if (weightDecay != 0 && !decoupled)
        g = e.add(g, e.mulScalar(p, weightDecay));
      if (weightDecay != 0 && decoupled) // p *= 1 - lr * wd
        p = e.sub(p, e.mul(e.mulScalar(lrP, weightDecay), p));
      state[0] = e.add(e.mulScalar(state[0], c.beta1),
                       e.mulScalar(g, 1.0 - c.beta1));
      state[1] = e.add(e.mulScalar(state[1], c.beta2),
                       e.mulScalar(e.mul(g, g), 1.0 - c.beta2));
      Value mHat = e.div(state[0], scalarFor(biasCorrection(c.beta1), p));
      Value vHat = e.div(state[1], scalarFor(biasCorrection(c.beta2), p));
      Value denom = e.addScalar(e.sqrt(vHat), c.eps);
      return e.sub(p, e.mul(lrP, e.div(mHat, denom)));
    }
    case OptimizerConfig::Kind::RMSprop: {
      // Slots: square average, [momentum buffer], [gradient average].
      if (weightDecay != 0)
        g = e.add(g, e.mulScalar(p, weightDecay));
      state[0] = e.add(e.mulScalar(state[0], c.alpha),
                       e.mulScalar(e.mul(g, g), 1.0 - c.alpha));
      Value avg = state[0];
      if (c.centered) {
        // As PyTorch's grad_avg.lerp_(g, 1 - alpha), rounding included.
        Value &gAvg = state.back();
        gAvg = e.add(gAvg, e.mulScalar(e.sub(g, gAvg), 1.0 - c.alpha));
        avg = e.sub(avg, e.mul(gAvg, gAvg));
      }
      Value update = e.div(g, e.addScalar(e.sqrt(avg), c.eps));
      if (c.momentum != 0)
        update = state[1] = e.add(e.mulScalar(state[1], c.momentum), update);
      return e.sub(p, e.mul(lrP, update));
    }
    }
    return p;
  }

private:
  Type f64() { return e.builder().getF64Type(); }

  /// 1 - beta^step, as a 0-d f64.
  Value biasCorrection(double beta) {
    Value t = e.cast(step, f64());
    Value powed = e.pow(e.fullLike(t, beta), t);
    return e.sub(e.fullLike(t, 1.0), powed);
  }

  /// A 0-d f64 scalar cast to `like`'s dtype and broadcast to its shape.
  Value scalarFor(Value scalar, Value like) {
    auto type = GraphEmitter::typeOf(like);
    return e.splat(e.cast(scalar, type.getElementType()), type.getShape());
  }

  GraphEmitter &e;
  const OptimizerConfig &c;
  Value step;
};

} // namespace

namespace {

/// The step-wide state of dynamic loss scaling and what one step makes of
/// it (torch.amp.GradScaler: _amp_foreach_non_finite_check_and_unscale_,
/// _amp_update_scale_).
struct LossScaler {
  Value scale;   ///< 0-d f32
  Value tracker; ///< 0-d i64: finite steps in a row since the last change
  Value applied; ///< 0-d i64: updates applied so far

  /// Divides every gradient by the scale (times its f32 reciprocal, as
  /// PyTorch does: exact for powers of two) and returns a 0-d i1 that is
  /// true when all of them are finite. g * 0 is 0 for a finite g and NaN
  /// otherwise, so the sum of those is exactly 0 or NaN: no overflow of a
  /// sum of finite values can flag a step.
  Value unscale(GraphEmitter &e, MutableArrayRef<Value> grads, const ParallelConfig &p) {
    Type f32 = e.builder().getF32Type(), f64 = e.builder().getF64Type();
    Value inv = e.cast(e.div(e.fullLike(e.cast(scale, f64), 1.0), e.cast(scale, f64)), f32);
    Value poison;
    for (Value &g : grads) {
      auto type = GraphEmitter::typeOf(g);
      g = e.mul(g, e.splat(e.cast(inv, type.getElementType()), type.getShape()));
      Value s = e.cast(e.sumAll(e.mul(g, e.fullLike(g, 0.0))), f32);
      poison = poison ? e.add(poison, s) : s;
    }
    // Shards: a step is skipped on every rank or on none.
    if (p.sharded())
      poison = sumOverRanks(e, poison, p);
    return e.eq(poison, poison);
  }

  /// The scale times `factor`, rounded once to f32 (PyTorch multiplies the
  /// f32 scale by the double factor): 1.1 must not be rounded first.
  Value times(GraphEmitter &e, double factor) {
    Type f32 = e.builder().getF32Type(), f64 = e.builder().getF64Type();
    return e.cast(e.mulScalar(e.cast(scale, f64), factor), f32);
  }

  /// The state after a step that was applied (`finite`) or skipped.
  SmallVector<Value> next(GraphEmitter &e, const LossScaleConfig &c, Value finite) {
    Value run = e.add(tracker, e.fullLike(tracker, 1.0));
    Value grow = e.eq(run, e.fullLike(run, double(c.growthInterval)));
    Value grown = times(e, c.growthFactor);
    Value grownFinite = e.le(grown, e.fullLike(grown, 3.4028234663852886e38));
    Value kept = e.select(grow, e.select(grownFinite, grown, scale), scale);
    Value zero = e.fullLike(tracker, 0.0);
    return {e.select(finite, kept, times(e, c.backoffFactor)),
            e.select(finite, e.select(grow, zero, run), zero),
            e.add(applied, e.select(finite, e.fullLike(applied, 1.0), zero))};
  }
};

} // namespace

FailureOr<func::FuncOp> tilefuse::buildTrainStep(func::FuncOp loss,
                                                 unsigned numParams,
                                                 const OptimizerConfig &requested,
                                                 StringRef name, unsigned numState) {
  OptimizerConfig config = requested;
  auto lossType = loss.getFunctionType();
  if (numParams == 0 || numParams + numState > lossType.getNumInputs())
    return loss.emitError("train step: @")
           << loss.getSymName() << " has " << lossType.getNumInputs()
           << " arguments; cannot treat the first " << numParams
           << " as parameters and the next " << numState << " as model state";
  // (Without model state, results after the loss are not kept.)
  if (numState > 0 && lossType.getNumResults() != 1 + numState)
    return loss.emitError("train step: @")
           << loss.getSymName() << " returns " << lossType.getNumResults()
           << " values; expected the loss and " << numState << " new model state values";
  for (unsigned j = 0; j < numState; ++j)
    if (lossType.getInput(numParams + j) != lossType.getResult(1 + j))
      return loss.emitError("train step: model state ")
             << j << " comes in as " << lossType.getInput(numParams + j) << " but its new value is "
             << lossType.getResult(1 + j) << "; they must match";
  std::string invalid = config.validate();
  if (!invalid.empty())
    return loss.emitError("train step: ") << invalid;
  if ((!config.paramGroup.empty() && config.paramGroup.size() != numParams) ||
      (!config.paramWeightDecay.empty() && config.paramWeightDecay.size() != numParams))
    return loss.emitError("train step: parameter groups name ")
           << config.paramGroup.size() << " parameters (weight decays: "
           << config.paramWeightDecay.size() << "); the loss has " << numParams;
  bool scaled = config.lossScale.dynamic;
  // ZeRO: the step's parameters are this rank's shards; the loss gathers
  // them (shardParameters), each shard is one parameter of its group.
  func::FuncOp sharded;
  if (config.parallel.sharded()) {
    std::vector<std::vector<unsigned>> layout = shardLayout(loss, numParams, config);
    sharded = shardParameters(loss, numParams, layout, config.parallel,
                              (loss.getSymName() + "_sharded").str());
    OptimizerConfig perShard = config;
    perShard.paramGroup.clear();
    perShard.paramWeightDecay.clear();
    perShard.groupCount = config.numGroups();
    for (const std::vector<unsigned> &shard : layout) {
      perShard.paramGroup.push_back(config.groupOf(shard.front()));
      perShard.paramWeightDecay.push_back(config.weightDecayOf(shard.front()));
    }
    config = perShard;
    loss = sharded;
    numParams = unsigned(layout.size());
  }
  SmallVector<unsigned> wrt;
  for (unsigned i = 0; i < numParams; ++i)
    wrt.push_back(i);
  FailureOr<func::FuncOp> grad =
      buildValueAndGrad(loss, wrt, name, /*seedArgument=*/scaled);
  if (sharded && failed(grad))
    sharded.erase();
  if (failed(grad))
    return failure();
  func::FuncOp step = *grad;
  if (sharded) {
    if (config.parallel.mode == "zero3")
      regatherForBackward(step, numParams);
    else
      dropForwardMarkers(step);
    startReductionsEarly(step);
    sharded.erase();
  }
  Block &body = step.getBody().front();
  MLIRContext *ctx = step.getContext();
  OpBuilder b(ctx);
  Location loc = step.getLoc();
  // Model state as DistributedDataParallel's broadcast_buffers: every rank
  // runs its forward pass on rank 0's values (each then updates them with
  // its own batch).
  if (!config.parallel.mode.empty())
    for (unsigned j = 0; j < numState; ++j) {
      BlockArgument arg = body.getArgument(numParams + j);
      b.setInsertionPointToStart(&body);
      GraphEmitter e(b, loc);
      Value pending = e.broadcastStart(arg, config.parallel.group, config.parallel.groupSize, 0);
      arg.replaceAllUsesExcept(e.wait(pending), pending.getDefiningOp());
    }

  // Arguments: params, state (inserted after the params), step-wide state,
  // batch, step, lr.
  unsigned slots = config.statePerParam();
  SmallVector<Value> state;
  // insertArgument on the function keeps argument attributes in step.
  for (unsigned s = 0; s < slots; ++s)
    for (unsigned i = 0; i < numParams; ++i) {
      unsigned index = numParams + s * numParams + i;
      step.insertArgument(index, body.getArgument(i).getType(), {}, loc);
      state.push_back(body.getArgument(index));
    }
  LossScaler scaler;
  if (scaled) {
    unsigned at = numParams * (1 + slots);
    auto scalar = [&](Type t) { return RankedTensorType::get({}, t); };
    step.insertArgument(at, scalar(b.getF32Type()), {}, loc);
    step.insertArgument(at + 1, scalar(b.getI64Type()), {}, loc);
    step.insertArgument(at + 2, scalar(b.getI64Type()), {}, loc);
    scaler = {body.getArgument(at), body.getArgument(at + 1), body.getArgument(at + 2)};
    // The backward pass's seed, the last argument, becomes the scale.
    unsigned seedIndex = step.getNumArguments() - 1;
    BlockArgument seed = body.getArgument(seedIndex);
    b.setInsertionPointToStart(&body);
    seed.replaceAllUsesWith(GraphEmitter(b, loc).cast(
        scaler.scale, GraphEmitter::typeOf(seed).getElementType()));
    step.eraseArgument(seedIndex);
  }
  unsigned end = step.getNumArguments(), groups = config.numGroups();
  step.insertArgument(end, RankedTensorType::get({}, b.getI64Type()), {}, loc);
  SmallVector<Value> lrs; // one learning rate per parameter group
  for (unsigned g = 0; g < groups; ++g) {
    step.insertArgument(end + 1 + g, RankedTensorType::get({}, b.getF64Type()), {}, loc);
    lrs.push_back(body.getArgument(end + 1 + g));
  }
  Value stepArg = body.getArgument(end);

  auto ret = llvm::cast<func::ReturnOp>(body.getTerminator());
  b.setInsertionPoint(ret);
  GraphEmitter e(b, loc);
  unsigned numPrimal = lossType.getNumResults();
  SmallVector<Value> grads(ret.getOperands().drop_front(numPrimal));
  // Data parallel: every rank updates with the gradients averaged over the
  // group (before unscaling and clipping, so all ranks agree on both).
  if (config.parallel.mode == "ddp")
    averageGradients(b, body, grads, config.parallel);
  // Shards' gradients come out of the all-gathers' VJPs (reduce-scatters):
  // sums over the ranks, averaged here.
  if (config.parallel.sharded())
    for (Value &g : grads)
      g = e.mulScalar(g, 1.0 / double(config.parallel.groupSize));
  Value finite;
  if (scaled) {
    finite = scaler.unscale(e, grads, config.parallel);
    // Adam's bias correction counts applied updates (a skipped step is
    // not one), as torch.optim does when GradScaler skips optimizer.step().
    stepArg = e.add(scaler.applied, e.fullLike(scaler.applied, 1.0));
  }
  OptimizerEmitter opt(e, config, stepArg);
  if (config.clipNorm > 0)
    opt.clip(grads);
  // A skipped step keeps every parameter and state tensor as it was.
  auto keepUnlessFinite = [&](Value updated, Value old) {
    if (!finite)
      return updated;
    auto type = GraphEmitter::typeOf(old);
    return e.select(e.splat(finite, type.getShape()), updated, old);
  };
  SmallVector<Value> newParams;
  for (unsigned i = 0; i < numParams; ++i) {
    SmallVector<Value> slotsOfParam;
    for (unsigned s = 0; s < slots; ++s)
      slotsOfParam.push_back(state[s * numParams + i]);
    newParams.push_back(keepUnlessFinite(
        opt.update(body.getArgument(i), grads[i], slotsOfParam, lrs[config.groupOf(i)],
                   config.weightDecayOf(i)),
        body.getArgument(i)));
    for (unsigned s = 0; s < slots; ++s)
      state[s * numParams + i] =
          keepUnlessFinite(slotsOfParam[s], state[s * numParams + i]);
  }

  SmallVector<Value> results = {ret.getOperand(0)};
  llvm::append_range(results, newParams);
  llvm::append_range(results, state);
  if (scaled)
    llvm::append_range(results, scaler.next(e, config.lossScale, finite));
  // The model state's new values, computed by the forward pass: a skipped
  // step (non-finite gradients) still updates them, as PyTorch's forward
  // does whether or not GradScaler then skips optimizer.step().
  llvm::append_range(results, ret.getOperands().slice(1, numState));
  b.create<func::ReturnOp>(ret.getLoc(), results);
  ret.erase();
  step.setFunctionType(
      b.getFunctionType(body.getArgumentTypes(), ValueRange(results).getTypes()));
  // Result 1 + k replaces argument k (params, state, step-wide state and
  // model state are contiguous: the loss's model state arguments followed
  // its parameters, and the state and step-wide state went in between);
  // the attribute, not this order, is what consumers read.
  SmallVector<DictionaryAttr> resultAttrs = {DictionaryAttr::get(ctx)};
  for (unsigned k = 0; k + 1 < results.size(); ++k)
    resultAttrs.push_back(DictionaryAttr::get(
        ctx, {b.getNamedAttr(kAliasAttrName, b.getI64IntegerAttr(k))}));
  step.setAllResultAttrs(resultAttrs);
  return step;
}

namespace tilefuse {
#define GEN_PASS_DEF_BUILDTRAINSTEPPASS
#include "passes/Passes.h.inc"
} // namespace tilefuse

#include "passes/PassUtils.h"

namespace {
struct BuildTrainStepPass
    : tilefuse::impl::BuildTrainStepPassBase<BuildTrainStepPass> {
  using BuildTrainStepPassBase::BuildTrainStepPassBase;
  void runOnOperation() override {
    OptimizerConfig config;
    std::string error;
    if (!OptimizerConfig::fromOptions(optimizer, momentum, nesterov, beta1,
                                      beta2, eps, weightDecay, clipNorm,
                                      config, error)) {
      getOperation().emitError(error);
      return signalPassFailure();
    }
    config.lossScale.dynamic = dynamicLossScale;
    config.lossScale.growthInterval = growthInterval;
    config.parallel.mode = parallel;
    config.parallel.groupSize = groupSize;
    config.parallel.bucketBytes = bucketBytes;
    if (std::string invalid = config.validate(); !invalid.empty()) {
      getOperation().emitError(invalid);
      return signalPassFailure();
    }
    func::FuncOp loss = findFunction(getOperation(), function);
    if (!loss ||
        failed(buildTrainStep(loss, numParams, config,
                              (loss.getSymName() + "_train_step").str())))
      signalPassFailure();
  }
};
} // namespace
