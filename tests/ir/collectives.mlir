// RUN: tilefuse-opt %s | tilefuse-opt | FileCheck %s
// The collective ops print and parse back; result shapes follow the group size.

// CHECK-LABEL: func.func @all
func.func @all(%g: tensor<8x3xf32>, %w: tensor<5xf32>) -> (tensor<8x3xf32>, tensor<2x3xf32>, tensor<32x3xf32>, tensor<5xf32>) {
  // CHECK: graph.all_reduce_start %{{.*}} {group = "dp", group_size = 4 : i64} : tensor<8x3xf32> -> tensor<8x3xf32>
  %p0 = graph.all_reduce_start %g {group = "dp", group_size = 4 : i64} : tensor<8x3xf32> -> tensor<8x3xf32>
  // CHECK: graph.reduce_scatter_start %{{.*}} {group = "dp", group_size = 4 : i64, reduce = "max"} : tensor<8x3xf32> -> tensor<2x3xf32>
  %p1 = graph.reduce_scatter_start %g {group = "dp", group_size = 4 : i64, reduce = "max"} : tensor<8x3xf32> -> tensor<2x3xf32>
  // CHECK: graph.all_gather_start %{{.*}} : tensor<8x3xf32> -> tensor<32x3xf32>
  %p2 = graph.all_gather_start %g {group = "dp", group_size = 4 : i64} : tensor<8x3xf32> -> tensor<32x3xf32>
  // CHECK: graph.broadcast_start %{{.*}} {group = "tp", group_size = 2 : i64, root = 1 : i64} : tensor<5xf32> -> tensor<5xf32>
  %p3 = graph.broadcast_start %w {group = "tp", group_size = 2 : i64, root = 1 : i64} : tensor<5xf32> -> tensor<5xf32>
  // CHECK-COUNT-4: graph.collective_wait
  %r0 = graph.collective_wait %p0 : tensor<8x3xf32>
  %r1 = graph.collective_wait %p1 : tensor<2x3xf32>
  %r2 = graph.collective_wait %p2 : tensor<32x3xf32>
  %r3 = graph.collective_wait %p3 : tensor<5xf32>
  return %r0, %r1, %r2, %r3 : tensor<8x3xf32>, tensor<2x3xf32>, tensor<32x3xf32>, tensor<5xf32>
}
