// RUN: tilefuse-opt %s "--build-train-step=num-params=2 optimizer=adamw weight-decay=0.01" | FileCheck %s --check-prefix=ADAMW
// RUN: tilefuse-opt %s "--build-train-step=num-params=2 optimizer=sgd momentum=0.9 clip-norm=1.0" | FileCheck %s --check-prefix=SGD
// RUN: tilefuse-opt %s "--build-train-step=num-params=2 optimizer=sgd" | FileCheck %s --check-prefix=PLAIN
// RUN: not tilefuse-opt %s "--build-train-step=num-params=2 optimizer=lion" 2>&1 | FileCheck %s --check-prefix=BAD

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

// BAD: error: unknown optimizer 'lion'; expected sgd, adam or adamw
