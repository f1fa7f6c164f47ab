// RUN: tilefuse-opt %s --fuse | FileCheck %s
// A row reduction's results read along another dimension than the one it
// reduced (a rank per element, then compared at every (position, element)
// pair: a sort's order) need every row's result in each program: the reader
// is a kernel of its own. Fused, each lane would recompute a whole row
// (n^3 work for n^2 elements).

// CHECK-LABEL: func.func @rank_then_order(
// CHECK:         %[[RANK:.*]] = graph.fusion "kernel0"(%arg0)
// CHECK:           graph.reduce_sum
// CHECK-NOT:       graph.reduce_sum
// CHECK:         graph.fusion "kernel1"(%[[RANK]])
// CHECK:           graph.reduce_sum
func.func @rank_then_order(%x: tensor<8xf32>) -> tensor<8xi64> {
  %iota_r = graph.iota {dim = 0 : i64} : tensor<8x8xi64>
  %iota_c = graph.iota {dim = 1 : i64} : tensor<8x8xi64>
  %a = graph.reshape %x : (tensor<8xf32>) -> tensor<8x1xf32>
  %b = graph.reshape %x : (tensor<8xf32>) -> tensor<1x8xf32>
  %bb = graph.broadcast_in_dim %b {dims = array<i64: 0, 1>} : (tensor<1x8xf32>) -> tensor<8x8xf32>
  %ab = graph.broadcast_in_dim %a {dims = array<i64: 0, 1>} : (tensor<8x1xf32>) -> tensor<8x8xf32>
  %before = graph.lt %bb, %ab : tensor<8x8xf32>
  %ones = graph.cast %before : (tensor<8x8xi1>) -> tensor<8x8xi64>
  %rank = graph.reduce_sum %ones {dims = array<i64: 1>} : (tensor<8x8xi64>) -> tensor<8xi64>
  %rank_c = graph.reshape %rank : (tensor<8xi64>) -> tensor<1x8xi64>
  %rank_b = graph.broadcast_in_dim %rank_c {dims = array<i64: 0, 1>} : (tensor<1x8xi64>) -> tensor<8x8xi64>
  %hit = graph.eq %rank_b, %iota_r : tensor<8x8xi64>
  %zero = graph.full 0.0 : tensor<8x8xi64>
  %picked = graph.select %hit, %iota_c, %zero : (tensor<8x8xi1>, tensor<8x8xi64>, tensor<8x8xi64>) -> tensor<8x8xi64>
  %order = graph.reduce_sum %picked {dims = array<i64: 1>} : (tensor<8x8xi64>) -> tensor<8xi64>
  return %order : tensor<8xi64>
}

// A row's own result broadcast back across its row (softmax's max) still
// joins the row kernel.
// CHECK-LABEL: func.func @row_result_across_its_row(
// CHECK:         graph.fusion "kernel0"
// CHECK-NOT:     graph.fusion "kernel1"
func.func @row_result_across_its_row(%x: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %m = graph.reduce_max %x {dims = array<i64: 1>} : (tensor<8x16xf32>) -> tensor<8xf32>
  %mr = graph.reshape %m : (tensor<8xf32>) -> tensor<8x1xf32>
  %mb = graph.broadcast_in_dim %mr {dims = array<i64: 0, 1>} : (tensor<8x1xf32>) -> tensor<8x16xf32>
  %y = graph.sub %x, %mb : tensor<8x16xf32>
  return %y : tensor<8x16xf32>
}

// The same cross-row read hidden behind a reshape after the broadcast (the
// rank stays 3, a unit dimension moves): a kernel of its own too.
// CHECK-LABEL: func.func @moved_by_a_reshape(
// CHECK:         graph.fusion "kernel0"
// CHECK:         graph.fusion "kernel1"
func.func @moved_by_a_reshape(%x: tensor<8x8x1xf32>) -> tensor<8x8x1xf32> {
  %r = graph.reduce_sum %x {dims = array<i64: 1>} : (tensor<8x8x1xf32>) -> tensor<8x1xf32>
  %c = graph.reshape %r : (tensor<8x1xf32>) -> tensor<1x1x8xf32>
  %b = graph.broadcast_in_dim %c {dims = array<i64: 0, 1, 2>} : (tensor<1x1x8xf32>) -> tensor<1x8x8xf32>
  %m = graph.reshape %b : (tensor<1x8x8xf32>) -> tensor<8x8x1xf32>
  %y = graph.sub %x, %m : tensor<8x8x1xf32>
  return %y : tensor<8x8x1xf32>
}

// A new leading dimension of 1 expands nothing: the row's maximum read
// back across its row still joins the row kernel.
// CHECK-LABEL: func.func @leading_unit_dimension(
// CHECK:         graph.fusion "kernel0"
// CHECK-NOT:     graph.fusion "kernel1"
func.func @leading_unit_dimension(%x: tensor<1x8x16xf32>) -> tensor<1x8x16xf32> {
  %m = graph.reduce_max %x {dims = array<i64: 2>} : (tensor<1x8x16xf32>) -> tensor<1x8xf32>
  %r = graph.reshape %m : (tensor<1x8xf32>) -> tensor<8x1xf32>
  %b = graph.broadcast_in_dim %r {dims = array<i64: 1, 2>} : (tensor<8x1xf32>) -> tensor<1x8x16xf32>
  %y = graph.sub %x, %b : tensor<1x8x16xf32>
  return %y : tensor<1x8x16xf32>
}
