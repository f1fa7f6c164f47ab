// RUN: tilefuse-opt %s --fuse=target=cuda:sm_90 | FileCheck %s
// cuBLASLt applies a column bias for f32/f16/bf16 GEMMs when the bias is a
// buffer; everything else stays in a kernel after the GEMM.

// CHECK-LABEL: func.func @bias(
// CHECK:         graph.fusion "{{.*}}kind = "matmul"
// CHECK-NOT:     graph.fusion "
func.func @bias(%x: tensor<4x3xf32>, %w: tensor<3x5xf32>, %b: tensor<5xf32>) -> tensor<4x5xf32> {
  %0 = graph.matmul %x, %w : (tensor<4x3xf32>, tensor<3x5xf32>) -> tensor<4x5xf32>
  %1 = graph.broadcast_in_dim %b {dims = array<i64: 1>} : (tensor<5xf32>) -> tensor<4x5xf32>
  %2 = graph.add %0, %1 : tensor<4x5xf32>
  return %2 : tensor<4x5xf32>
}

// ReLU stays out: cuBLASLt's ReLU epilogue turns NaN into 0.
// CHECK-LABEL: func.func @relu(
// CHECK:         graph.fusion "{{.*}}kind = "matmul"
// CHECK:         graph.fusion "{{.*}}kind = "pointwise"
// CHECK:           graph.maximum
func.func @relu(%x: tensor<4x3xf32>, %w: tensor<3x5xf32>, %b: tensor<5xf32>) -> tensor<4x5xf32> {
  %0 = graph.matmul %x, %w : (tensor<4x3xf32>, tensor<3x5xf32>) -> tensor<4x5xf32>
  %1 = graph.broadcast_in_dim %b {dims = array<i64: 1>} : (tensor<5xf32>) -> tensor<4x5xf32>
  %2 = graph.add %0, %1 : tensor<4x5xf32>
  %z = graph.full 0.0 : tensor<4x5xf32>
  %3 = graph.maximum %2, %z : tensor<4x5xf32>
  return %3 : tensor<4x5xf32>
}

// No epilogue fusion into f64 GEMMs.
// CHECK-LABEL: func.func @f64(
// CHECK-NOT:     kind = "matmul"
// CHECK:         return
func.func @f64(%x: tensor<4x3xf64>, %w: tensor<3x5xf64>, %b: tensor<5xf64>) -> tensor<4x5xf64> {
  %0 = graph.matmul %x, %w : (tensor<4x3xf64>, tensor<3x5xf64>) -> tensor<4x5xf64>
  %1 = graph.broadcast_in_dim %b {dims = array<i64: 1>} : (tensor<5xf64>) -> tensor<4x5xf64>
  %2 = graph.add %0, %1 : tensor<4x5xf64>
  return %2 : tensor<4x5xf64>
}

// A bias computed from arguments (a cast, a sum of two biases) is not a
// buffer the GEMM library can read.
// CHECK-LABEL: func.func @computed_bias(
// CHECK-NOT:     kind = "matmul"
// CHECK:         return
func.func @computed_bias(%x: tensor<4x3xf32>, %w: tensor<3x5xf32>, %b: tensor<5xf32>, %c: tensor<5xf32>) -> tensor<4x5xf32> {
  %0 = graph.matmul %x, %w : (tensor<4x3xf32>, tensor<3x5xf32>) -> tensor<4x5xf32>
  %s = graph.add %b, %c : tensor<5xf32>
  %1 = graph.broadcast_in_dim %s {dims = array<i64: 1>} : (tensor<5xf32>) -> tensor<4x5xf32>
  %2 = graph.add %0, %1 : tensor<4x5xf32>
  return %2 : tensor<4x5xf32>
}
