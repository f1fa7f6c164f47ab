// RUN: tilefuse-opt %s "--build-train-step=num-params=2 optimizer=adamw weight-decay=0.01" | FileCheck %s --check-prefix=ADAMW
// RUN: tilefuse-opt %s "--build-train-step=num-params=2 optimizer=sgd momentum=0.9 clip-norm=1.0" | FileCheck %s --check-prefix=SGD
// RUN: tilefuse-opt %s "--build-train-step=num-params=2 optimizer=sgd" | FileCheck %s --check-prefix=PLAIN
// RUN: tilefuse-opt %s "--build-train-step=num-params=2 optimizer=adam dynamic-loss-scale=true growth-interval=3" | FileCheck %s --check-prefix=SCALED
// RUN: tilefuse-opt %s "--build-train-step=num-params=2 optimizer=adam dynamic-loss-scale=true growth-interval=3" | FileCheck %s --check-prefix=APPLIED
// RUN: tilefuse-opt %s "--build-train-step=num-params=2 optimizer=rmsprop momentum=0.9" | FileCheck %s --check-prefix=RMSPROP
// RUN: not tilefuse-opt %s "--build-train-step=num-params=2 optimizer=lion" 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not tilefuse-opt %s "--build-train-step=num-params=2 optimizer=adam beta1=1.5" 2>&1 | FileCheck %s --check-prefix=BETA

// A linear least-squares loss; w and b are the parameters, x and y the batch.
func.func @loss(%w: tensor<3x2xf32>, %b: tensor<2xf32>, %x: tensor<4x3xf32>, %y: tensor<4x2xf32>) -> tensor<f32> {
  %0 = graph.matmul %x, %w : (tensor<4x3xf32>, tensor<3x2xf32>) -> tensor<4x2xf32>
  %1 = graph.broadcast_in_dim %b {dims = array<i64: 1>} : (tensor<2xf32>) -> tensor<4x2xf32>
  %2 = graph.add %0, %1 : tensor<4x2xf32>
  %3 = graph.sub %2, %y : tensor<4x2xf32>
  %4 = graph.mul %3, %3 : tensor<4x2xf32>
  %5 = graph.reduce_sum %4 {dims = array<i64: 0, 1>} : (tensor<4x2xf32>) -> tensor<f32>
  return %5 : tensor<f32>
}

// AdamW: two state slots per parameter (m for w, b, then v for w, b), then
// the batch, the step and the learning rate. Every updated result names the
// argument it replaces.
// ADAMW-LABEL: func.func @loss_train_step(
// ADAMW-SAME:    %arg0: tensor<3x2xf32>, %arg1: tensor<2xf32>, %arg2: tensor<3x2xf32>, %arg3: tensor<2xf32>, %arg4: tensor<3x2xf32>, %arg5: tensor<2xf32>, %arg6: tensor<4x3xf32>, %arg7: tensor<4x2xf32>, %arg8: tensor<i64>, %arg9: tensor<f64>)
// ADAMW-SAME:    -> (tensor<f32>, tensor<3x2xf32> {tilefuse.aliases = 0 : i64}, tensor<2xf32> {tilefuse.aliases = 1 : i64}, tensor<3x2xf32> {tilefuse.aliases = 2 : i64}, tensor<2xf32> {tilefuse.aliases = 3 : i64}, tensor<3x2xf32> {tilefuse.aliases = 4 : i64}, tensor<2xf32> {tilefuse.aliases = 5 : i64})
// Bias correction 1 - beta^step from the step operand.
// ADAMW:         %[[T:.+]] = graph.cast %arg8 : (tensor<i64>) -> tensor<f64>
// ADAMW:         graph.pow %{{.+}}, %[[T]] : tensor<f64>
// ADAMW:         graph.sqrt
// ADAMW:         return

// SGD with momentum: one buffer per parameter; clipping sums every gradient
// squared into one global norm.
// SGD-LABEL: func.func @loss_train_step(
// SGD-SAME:    %arg0: tensor<3x2xf32>, %arg1: tensor<2xf32>, %arg2: tensor<3x2xf32>, %arg3: tensor<2xf32>, %arg4: tensor<4x3xf32>, %arg5: tensor<4x2xf32>, %arg6: tensor<i64>, %arg7: tensor<f64>)
// SGD:         graph.sqrt %{{.+}} : tensor<f64>
// SGD:         graph.minimum
// SGD-NOT:     graph.pow
// SGD:         return

// Plain SGD keeps no state.
// PLAIN-LABEL: func.func @loss_train_step(
// PLAIN-SAME:    %arg0: tensor<3x2xf32>, %arg1: tensor<2xf32>, %arg2: tensor<4x3xf32>, %arg3: tensor<4x2xf32>, %arg4: tensor<i64>, %arg5: tensor<f64>)
// PLAIN-SAME:    -> (tensor<f32>, tensor<3x2xf32> {tilefuse.aliases = 0 : i64}, tensor<2xf32> {tilefuse.aliases = 1 : i64})

// RMSprop with momentum: the square average and the momentum buffer per
// parameter; no bias correction (no power of the step).
// RMSPROP-LABEL: func.func @loss_train_step(
// RMSPROP-SAME:    %arg0: tensor<3x2xf32>, %arg1: tensor<2xf32>, %arg2: tensor<3x2xf32>, %arg3: tensor<2xf32>, %arg4: tensor<3x2xf32>, %arg5: tensor<2xf32>, %arg6: tensor<4x3xf32>, %arg7: tensor<4x2xf32>, %arg8: tensor<i64>, %arg9: tensor<f64>)
// RMSPROP-NOT:     graph.pow
// RMSPROP:         graph.sqrt %{{.+}} : tensor<3x2xf32>
// RMSPROP-NOT:     graph.pow
// RMSPROP:         return

// BAD: error: unknown optimizer 'lion'; expected sgd, adam, adamw or rmsprop

// Dynamic loss scaling: the scale (f32), the growth tracker and the applied
// count (i64) follow the optimizer state and are carried like it. The
// backward pass starts from the scale; the gradients are multiplied by its
// f32 reciprocal; g * 0 summed is NaN exactly when a gradient is not
// finite; a skipped step selects every old parameter and state tensor;
// Adam's bias correction counts applied updates, not the step operand.
// SCALED-LABEL: func.func @loss_train_step(
// SCALED-SAME:    %arg4: tensor<3x2xf32>, %arg5: tensor<2xf32>, %arg6: tensor<f32>, %arg7: tensor<i64>, %arg8: tensor<i64>, %arg9: tensor<4x3xf32>, %arg10: tensor<4x2xf32>, %arg11: tensor<i64>, %arg12: tensor<f64>)
// SCALED-SAME:    tensor<f32> {tilefuse.aliases = 6 : i64}, tensor<i64> {tilefuse.aliases = 7 : i64}, tensor<i64> {tilefuse.aliases = 8 : i64})
// SCALED:         graph.reshape %arg6 : (tensor<f32>) -> tensor<1x1xf32>
// SCALED:         %[[INV:.+]] = graph.cast %{{.+}} : (tensor<f64>) -> tensor<f32>
// SCALED:         %[[ZERO:.+]] = graph.full 0.000000e+00 : tensor<3x2xf32>
// SCALED:         graph.mul %{{.+}}, %[[ZERO]] : tensor<3x2xf32>
// SCALED:         %[[FINITE:.+]] = graph.eq %[[POISON:.+]], %[[POISON]] : tensor<f32>
// SCALED:         %[[ONE:.+]] = graph.full 1.000000e+00 : tensor<i64>
// SCALED:         %[[T:.+]] = graph.add %arg8, %[[ONE]] : tensor<i64>
// SCALED:         graph.cast %[[T]] : (tensor<i64>) -> tensor<f64>
// SCALED:         graph.select %{{.+}}, %{{.+}}, %arg0 : (tensor<3x2xi1>, tensor<3x2xf32>, tensor<3x2xf32>)
// SCALED:         %[[INTERVAL:.+]] = graph.full 3.000000e+00 : tensor<i64>
// SCALED:         graph.eq %{{.+}}, %[[INTERVAL]] : tensor<i64>
// SCALED:         %[[BACKOFF:.+]] = graph.full 5.000000e-01 : tensor<f64>
// SCALED:         graph.select %[[FINITE]], %{{.+}}, %{{.+}} : (tensor<i1>, tensor<f32>, tensor<f32>)
// SCALED:         return

// The same step: Adam's bias correction counts applied updates, so the step
// operand (%arg11) is an argument that nothing in the body reads (bias
// correction from it would not see skipped steps).
// APPLIED-LABEL: func.func @loss_train_step(
// APPLIED-SAME:    %arg11: tensor<i64>, %arg12: tensor<f64>)
// APPLIED-NOT:     %arg11
// APPLIED:         return

// BETA: betas must be in [0, 1)
