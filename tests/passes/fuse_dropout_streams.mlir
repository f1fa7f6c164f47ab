// RUN: tilefuse-opt %s --decompose-composites --fuse | FileCheck %s
// RUN: tilefuse-opt %s --decompose-composites --emit=tile --target=cpu | FileCheck %s --check-prefix=TILE
//
// A dropout site's Philox stream becomes a kernel input (a 0-d i64 fill):
// the dropout kernels of repeated layers then differ only in the buffers
// they read, so they are one program (the same name hash), compiled once.

// CHECK-LABEL: func.func @layers(
// CHECK:         %[[S1:.*]] = graph.full 1.000000e+00 : tensor<i64>
// CHECK:         graph.fusion "kernel0"({{.*}}, %[[S1]])
// CHECK:           graph.random_uniform %{{.*}}, %{{.*}} : (tensor<i64>, tensor<i64>) -> tensor<64x128xf32>
// CHECK:         graph.matmul
// CHECK:         %[[S2:.*]] = graph.full 2.000000e+00 : tensor<i64>
// CHECK:         graph.fusion "kernel1"({{.*}}, %[[S2]])
// CHECK:           graph.random_uniform %{{.*}}, %{{.*}} : (tensor<i64>, tensor<i64>) -> tensor<64x128xf32>
// TILE:          func.func @layers_kernel0_[[HASH:[0-9a-f]+]](
// TILE:            tile.load_scalar
// TILE:          func.func @layers_kernel1_[[HASH]](
func.func @layers(%x: tensor<64x128xf32>, %w: tensor<128x128xf32>, %seed: tensor<i64>) -> tensor<64x128xf32> {
  %0 = graph.dropout %x, %seed {p = 0.1 : f64, stream = 1 : i64} : (tensor<64x128xf32>, tensor<i64>) -> tensor<64x128xf32>
  %1 = graph.matmul %0, %w : (tensor<64x128xf32>, tensor<128x128xf32>) -> tensor<64x128xf32>
  %2 = graph.dropout %1, %seed {p = 0.1 : f64, stream = 2 : i64} : (tensor<64x128xf32>, tensor<i64>) -> tensor<64x128xf32>
  return %2 : tensor<64x128xf32>
}
