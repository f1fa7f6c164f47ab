// RUN: tilefuse-opt %s "--build-train-step=num-params=2 optimizer=sgd parallel=ddp group-size=4 bucket-bytes=16" | FileCheck %s
// RUN: tilefuse-opt %s "--build-train-step=num-params=2 optimizer=sgd parallel=ddp group-size=4" | FileCheck %s --check-prefix=ONE
// RUN: tilefuse-opt %s "--build-train-step=num-params=2 optimizer=sgd parallel=ddp group-size=4" --emit=fused --target=cpu | FileCheck %s --check-prefix=FUSED
// RUN: not tilefuse-opt %s "--build-train-step=num-params=2 optimizer=sgd parallel=zero9" 2>&1 | FileCheck %s --check-prefix=BAD

// DDP: each gradient bucket is all-reduced over group "dp" as soon as its
// last gradient exists; the waits, and the division by the group size,
// come where the optimizer reads the gradients.
func.func @loss(%w: tensor<3x2xf32>, %b: tensor<2xf32>, %x: tensor<4x3xf32>, %y: tensor<4x2xf32>) -> tensor<f32> {
  %0 = graph.matmul %x, %w : (tensor<4x3xf32>, tensor<3x2xf32>) -> tensor<4x2xf32>
  %1 = graph.broadcast_in_dim %b {dims = array<i64: 1>} : (tensor<2xf32>) -> tensor<4x2xf32>
  %2 = graph.add %0, %1 : tensor<4x2xf32>
  %3 = graph.sub %2, %y : tensor<4x2xf32>
  %4 = graph.mul %3, %3 : tensor<4x2xf32>
  %5 = graph.reduce_sum %4 {dims = array<i64: 0, 1>} : (tensor<4x2xf32>) -> tensor<f32>
  return %5 : tensor<f32>
}

// Buckets of 16 bytes: db (8 bytes, produced first) alone, then dw (24
// bytes, over the cap) alone.
// CHECK-LABEL: func.func @loss_train_step
// CHECK:         %[[DB:.+]] = graph.reduce_sum
// CHECK:         %[[P0:.+]] = graph.all_reduce_start %{{.+}} {group = "dp", group_size = 4 : i64} : tensor<2xf32> -> tensor<2xf32>
// CHECK:         %[[DW:.+]] = graph.matmul %arg2, %{{.+}} {transpose_lhs = true}
// CHECK:         %[[FLAT:.+]] = graph.reshape %[[DW]] : (tensor<3x2xf32>) -> tensor<6xf32>
// CHECK:         %[[P1:.+]] = graph.all_reduce_start %[[FLAT]] {group = "dp", group_size = 4 : i64} : tensor<6xf32> -> tensor<6xf32>
// CHECK:         graph.collective_wait %[[P0]]
// CHECK:         graph.full 2.500000e-01
// CHECK:         graph.collective_wait %[[P1]]

// One bucket under the default cap: both gradients flattened and joined.
// ONE-LABEL: func.func @loss_train_step
// ONE:         graph.concat %{{.+}}, %{{.+}} {dim = 0 : i64} : (tensor<2xf32>, tensor<6xf32>) -> tensor<8xf32>
// ONE:         graph.all_reduce_start
// ONE-NOT:     graph.all_reduce_start
// ONE:         graph.collective_wait
// ONE-NOT:     graph.collective_wait

// Fusion keeps the start and the wait out of kernels.
// FUSED-LABEL: func.func @loss_train_step
// FUSED:         graph.all_reduce_start
// FUSED:         graph.collective_wait

// BAD: parallel must be "ddp"
