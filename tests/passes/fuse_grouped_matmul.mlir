// RUN: tilefuse-opt %s "--autodiff=function=moe wrt=0,1" --fuse | FileCheck %s
// RUN: tilefuse-opt %s "--autodiff=function=moe wrt=0,1" --fuse=target=cuda:sm_90 | FileCheck %s --check-prefix=CUDA
// A grouped product and its gradients: the rows' cotangent is the grouped
// product with the groups' matrices read transposed (in place: no kernel
// writes a transposed copy), the matrices' the grouped weight gradient. The CPU runs them as grouped GEMM steps (library calls
// between kernels); CUDA has no such step and gets one dense GEMM each,
// every row placed in its group's block (G times the work).

// CHECK-LABEL: func.func @moe(
// CHECK:         graph.grouped_matmul %arg0, %arg1, %arg2
// CHECK:         graph.fusion
// CHECK-DAG:     graph.grouped_matmul {{.*}}, %arg1, %arg2 {transpose_rhs = true} : (tensor<16x12xf32>, tensor<4x8x12xf32>, tensor<4xi32>) -> tensor<16x8xf32>
// CHECK-DAG:     graph.grouped_matmul_weight_grad %arg0, {{.*}}, %arg2 : (tensor<16x8xf32>, tensor<16x12xf32>, tensor<4xi32>) -> tensor<4x8x12xf32>
// CHECK-NOT:     graph.matmul
// CHECK-NOT:     graph.transpose

// CUDA-LABEL: func.func @moe(
// CUDA-NOT:     graph.grouped_matmul
// CUDA:         graph.iota
// CUDA:         graph.matmul {{.*}} : (tensor<16x32xf32>, tensor<32x12xf32>) -> tensor<16x12xf32>
// CUDA-DAG:     graph.matmul {{.*}} {transpose_lhs = true} : (tensor<16x32xf32>, tensor<16x12xf32>) -> tensor<32x12xf32>
// CUDA-DAG:     graph.matmul {{.*}} : (tensor<16x48xf32>, tensor<48x8xf32>) -> tensor<16x8xf32>
// CUDA-NOT:     graph.grouped_matmul
func.func @moe(%x: tensor<16x8xf32>, %w: tensor<4x8x12xf32>, %o: tensor<4xi32>) -> tensor<f32> {
  %y = graph.grouped_matmul %x, %w, %o : (tensor<16x8xf32>, tensor<4x8x12xf32>, tensor<4xi32>) -> tensor<16x12xf32>
  %t = graph.tanh %y : tensor<16x12xf32>
  %s = graph.reduce_sum %t {dims = array<i64: 0, 1>, keepdim = false} : (tensor<16x12xf32>) -> tensor<f32>
  return %s : tensor<f32>
}
