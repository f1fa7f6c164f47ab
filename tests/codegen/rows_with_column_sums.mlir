// RUN: tilefuse-opt %s --fuse | FileCheck %s --check-prefix=FUSE
// RUN: tilefuse-opt %s --fuse=target=cuda:sm_90 | FileCheck %s --check-prefix=CUDA
// RUN: tilefuse-opt %s --emit=tile --target=cpu | FileCheck %s
//
// Column sums of a row kernel's domain (layer_norm's dgamma, dbeta and the
// loss beside dx) join the row kernel that reads the same rows on the CPU:
// its programs each walk a slice of the rows, four at a time, folding the
// sums into accumulator rows in scratch (f64 for f32 sums), then store one
// row of partial sums per slice; a combine kernel folds the slices. On a
// GPU (no scratch) the column kernel stays apart.

// FUSE-LABEL: func.func @rows_and_columns(
// FUSE:         graph.fusion "kernel0"(%arg0, %arg1) {{.*}}reduced = array<i64: 1>} {{.*}} -> (tensor<64x96xf32>, tensor<96xf32>, tensor<96xf32>, tensor<f32>)
// FUSE-NOT:     graph.fusion
// CUDA-LABEL: func.func @rows_and_columns(
// CUDA:         graph.fusion "kernel0"{{.*}}reduced = array<i64: 1>}
// CUDA:         graph.fusion "kernel1"{{.*}}reduced = array<i64: 0>}
// CHECK-LABEL: func.func @rows_and_columns_kernel0_partial_{{[0-9a-f]+}}(
// CHECK-SAME:    tile.grid = 32 : i64
// CHECK-COUNT-3: tile.scratch {elements = 96 : i64} : !tile.ptr<f64>
// Four rows a group, each clamped to the slice's last row:
// CHECK-COUNT-4: arith.minsi %{{[0-9]+}}, %{{[0-9]+}} : i64
// CHECK-LABEL: func.func @rows_and_columns_kernel0_combine_{{[0-9a-f]+}}(
// CHECK:         tile.reduce add %{{.*}} : vector<{{[0-9]+}}xf64> -> f64
func.func @rows_and_columns(%x: tensor<64x96xf32>, %dy: tensor<64x96xf32>) -> (tensor<64x96xf32>, tensor<96xf32>, tensor<96xf32>, tensor<f32>) {
  %s = graph.reduce_sum %x {dims = array<i64: 1>, keepdim = true} : (tensor<64x96xf32>) -> tensor<64x1xf32>
  %sb = graph.broadcast_in_dim %s {dims = array<i64: 0, 1>} : (tensor<64x1xf32>) -> tensor<64x96xf32>
  %xc = graph.sub %x, %sb : tensor<64x96xf32>
  %dx = graph.mul %xc, %dy : tensor<64x96xf32>
  %dg = graph.reduce_sum %dx {dims = array<i64: 0>} : (tensor<64x96xf32>) -> tensor<96xf32>
  %db = graph.reduce_sum %dy {dims = array<i64: 0>} : (tensor<64x96xf32>) -> tensor<96xf32>
  %t = graph.reduce_sum %xc {dims = array<i64: 0, 1>} : (tensor<64x96xf32>) -> tensor<f32>
  return %dx, %dg, %db, %t : tensor<64x96xf32>, tensor<96xf32>, tensor<96xf32>, tensor<f32>
}

// Rows of 2 get one lane per row (lanes across rows): no column sums join that kernel.
// FUSE-LABEL: func.func @short_rows(
// FUSE:         graph.fusion "kernel0"{{.*}}reduced = array<i64: 1>}
// FUSE:         graph.fusion "kernel1"{{.*}}reduced = array<i64: 0>}
func.func @short_rows(%x: tensor<512x2xf32>) -> (tensor<512x2xf32>, tensor<2xf32>) {
  %s = graph.reduce_sum %x {dims = array<i64: 1>, keepdim = true} : (tensor<512x2xf32>) -> tensor<512x1xf32>
  %sb = graph.broadcast_in_dim %s {dims = array<i64: 0, 1>} : (tensor<512x1xf32>) -> tensor<512x2xf32>
  %xc = graph.sub %x, %sb : tensor<512x2xf32>
  %dg = graph.reduce_sum %xc {dims = array<i64: 0>} : (tensor<512x2xf32>) -> tensor<2xf32>
  return %xc, %dg : tensor<512x2xf32>, tensor<2xf32>
}
