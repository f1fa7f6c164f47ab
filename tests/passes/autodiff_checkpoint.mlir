// RUN: tilefuse-opt %s "--autodiff=function=block wrt=1" | FileCheck %s
// RUN: tilefuse-opt %s "--autodiff=function=block wrt=1" --emit=fused | FileCheck %s --check-prefix=FUSED

// The ops located in "tilefuse.checkpoint.0" (what tilefuse.checkpoint
// traces) are rerun in the backward pass: their inputs go through
// recompute barriers that wait for the region's cotangent, and the VJPs
// read the rerun values, so the forward exp lives only until the sum.
// CHECK-LABEL: func.func @block_value_and_grad(
// CHECK-SAME:      %[[X:[^:]+]]: tensor<8xf32>, %[[W:[^:]+]]: tensor<8xf32>)
// CHECK:         %[[M:.+]] = graph.mul %[[X]], %[[W]]
// CHECK:         %[[E:.+]] = graph.exp %[[M]]
// CHECK:         %[[L:.+]] = graph.reduce_sum %[[E]]
// CHECK:         %[[G:.+]] = graph.broadcast_in_dim
// CHECK-DAG:     %[[BX:.+]] = graph.recompute_barrier %[[X]] after %[[G]] : tensor<8xf32>, tensor<8xf32>
// CHECK-DAG:     %[[BW:.+]] = graph.recompute_barrier %[[W]] after %[[G]] : tensor<8xf32>, tensor<8xf32>
// CHECK:         %[[M2:.+]] = graph.mul %[[BX]], %[[BW]]
// CHECK:         %[[E2:.+]] = graph.exp %[[M2]]
// CHECK:         %[[GE:.+]] = graph.mul %[[G]], %[[E2]]
// CHECK:         %[[GW:.+]] = graph.mul %[[GE]], %[[BX]]
// CHECK:         return %[[L]], %[[GW]]
// The rerun stays in the backward pass through fusion and CSE: the forward
// kernel keeps only the sum, the backward kernel reruns exp from the
// barriers' values.
// FUSED-LABEL:   func.func @block_value_and_grad(
// FUSED:         graph.fusion "kernel0"(%arg0, %arg1)
// FUSED:         graph.reduce_sum
// FUSED:         %[[BX:.+]] = graph.recompute_barrier %arg0 after
// FUSED:         %[[BW:.+]] = graph.recompute_barrier %arg1 after
// FUSED:         graph.fusion "kernel2"(%[[BX]], %[[BW]])
// FUSED:         graph.exp
func.func @block(%x: tensor<8xf32>, %w: tensor<8xf32>) -> tensor<f32> {
  %0 = graph.mul %x, %w : tensor<8xf32> loc(#ck)
  %1 = graph.exp %0 : tensor<8xf32> loc(#ck)
  %2 = graph.reduce_sum %1 {dims = array<i64: 0>} : (tensor<8xf32>) -> tensor<f32>
  return %2 : tensor<f32>
}
#ck = loc("tilefuse.checkpoint.0"("model.py":3:0))
