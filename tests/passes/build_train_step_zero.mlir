// RUN: tilefuse-opt %s "--build-train-step=num-params=2 optimizer=sgd parallel=zero3 group-size=2 bucket-bytes=16" | FileCheck %s --check-prefix=ZERO3
// RUN: tilefuse-opt %s "--build-train-step=num-params=2 optimizer=adamw parallel=zero2 group-size=4" | FileCheck %s --check-prefix=ZERO2

// ZeRO: the step takes this rank's shards of the parameters (and of their
// optimizer state); each shard is all-gathered right before its parameters'
// first use; the gradients come back reduce-scattered (the all-gather's
// VJP) and averaged; zero3 gathers again in the backward pass.
func.func @loss(%w: tensor<3x2xf32>, %b: tensor<2xf32>, %x: tensor<4x3xf32>, %y: tensor<4x2xf32>) -> tensor<f32> {
  %0 = graph.matmul %x, %w : (tensor<4x3xf32>, tensor<3x2xf32>) -> tensor<4x2xf32>
  %1 = graph.broadcast_in_dim %b {dims = array<i64: 1>} : (tensor<2xf32>) -> tensor<4x2xf32>
  %2 = graph.add %0, %1 : tensor<4x2xf32>
  %3 = graph.sub %2, %y : tensor<4x2xf32>
  %4 = graph.mul %3, %3 : tensor<4x2xf32>
  %5 = graph.reduce_sum %4 {dims = array<i64: 0, 1>} : (tensor<4x2xf32>) -> tensor<f32>
  return %5 : tensor<f32>
}

// Shards of 16 bytes at most: w (6 elements, 3 per rank) and b (2, 1 per rank).
// ZERO3-LABEL: func.func @loss_train_step(
// ZERO3-SAME:      %[[W:[^:]+]]: tensor<3xf32>, %[[B:[^:]+]]: tensor<1xf32>, %{{[^:]+}}: tensor<4x3xf32>
// ZERO3-SAME:      attributes {tilefuse.shards = [array<i64: 0>, array<i64: 1>]}
// ZERO3:         %[[GW:.+]] = graph.all_gather_start %[[W]] {group = "dp", group_size = 2 : i64} : tensor<3xf32> -> tensor<6xf32>
// ZERO3:         graph.collective_wait %[[GW]]
// ZERO3:         graph.matmul
// ZERO3:         %[[GB:.+]] = graph.all_gather_start %[[B]] {{.*}} : tensor<1xf32> -> tensor<2xf32>
// ZERO3:         graph.reduce_scatter_start %{{.+}} {group = "dp", group_size = 2 : i64} : tensor<2xf32> -> tensor<1xf32>
// ZERO3:         %[[AGAIN:.+]] = graph.recompute_barrier %[[W]] after
// ZERO3:         graph.all_gather_start %[[AGAIN]]
// ZERO3:         graph.reduce_scatter_start %{{.+}} : tensor<6xf32> -> tensor<3xf32>
// ZERO3:         graph.full 5.000000e-01

// Under the default cap both parameters share one shard (8 elements, 2 per
// rank of 4); AdamW's state is per shard; no second gather.
// ZERO2-LABEL: func.func @loss_train_step(
// ZERO2-SAME:      %{{[^:]+}}: tensor<2xf32>, %{{[^:]+}}: tensor<2xf32>, %{{[^:]+}}: tensor<2xf32>, %{{[^:]+}}: tensor<4x3xf32>
// ZERO2-SAME:      tilefuse.shards = [array<i64: 0, 1>]
// ZERO2-COUNT-1: graph.all_gather_start
// ZERO2-NOT:     graph.recompute_barrier
// ZERO2:         graph.reduce_scatter_start %{{.+}} : tensor<8xf32> -> tensor<2xf32>
