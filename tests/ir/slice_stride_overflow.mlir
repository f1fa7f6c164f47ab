// The slice size is computed without overflow for strides near INT64_MAX.
// RUN: tilefuse-opt %s | FileCheck %s

// CHECK-LABEL: func.func @huge_stride
// CHECK: graph.slice {{.*}} -> tensor<4x1xf32>
func.func @huge_stride(%x: tensor<4x8xf32>) -> tensor<4x1xf32> {
  %0 = graph.slice %x {start = array<i64: 0, 0>, limit = array<i64: 4, 8>, stride = array<i64: 1, 9223372036854775807>} : (tensor<4x8xf32>) -> tensor<4x1xf32>
  return %0 : tensor<4x1xf32>
}
