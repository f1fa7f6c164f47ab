// RUN: tilefuse-opt %s --decompose-composites --canonicalize --cse "--build-train-step=num-params=1 optimizer=adamw weight-decay=0.01" --fuse | FileCheck %s
// RUN: not tilefuse-opt %s --fuse=target=tpu 2>&1 | FileCheck %s --check-prefix=BAD-TARGET
// RUN: not tilefuse-opt %s --fuse 2>&1 | FileCheck %s --check-prefix=COMPOSITE

// The whole AdamW update of a parameter (moments, bias corrections, weight
// decay, the step) is one kernel. Here it does not read the loss, so it is
// the same pass over the parameter as the loss's reduction: one kernel
// writes the loss and the new parameter, m and v.
// CHECK-LABEL: func.func @loss_train_step(
// CHECK:         graph.fusion "{{.*}}kind = "reduction"{{.*}} -> (tensor<f32>, tensor<1000xf32>, tensor<1000xf32>, tensor<1000xf32>)
// CHECK-NOT:     graph.fusion "
// CHECK:         return
func.func @loss(%w: tensor<1000xf32>, %x: tensor<1000xf32>) -> tensor<f32> {
  %0 = graph.mul %w, %x : tensor<1000xf32>
  %1 = graph.silu %0 : tensor<1000xf32>
  %2 = graph.reduce_sum %1 {dims = array<i64: 0>} : (tensor<1000xf32>) -> tensor<f32>
  return %2 : tensor<f32>
}

// BAD-TARGET: error: unknown target 'tpu'; expected cpu or cuda[:sm_XX]
// COMPOSITE: error: 'graph.silu' op is a composite; run decompose-composites before fusion
